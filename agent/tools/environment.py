"""Which environment's texts the model reads: the trained one (default) or our richer one.

The SQaLe authors publish three real episodes with their environment's own tool outputs,
budget lines and final-turn text (../shared/docs/agent-protocol.md, "What the
environment's text looks like"). A 2B model is sensitive to the exact shape of what it
reads, so by default we speak that language ("trained"). Our earlier, richer formats
(aligned grids, row counts, labelled calls, hints in every text) stay available as "rich"
so that the two can be compared with `sqale-agent eval` on a machine that has the model.
Only what the model reads differs: the answer returned to callers is the same.
"""

from __future__ import annotations

from enum import StrEnum


class Environment(StrEnum):
    """The profile of texts the model reads in an episode."""

    TRAINED = "trained"  # the authors' environment as observed in their published episodes
    RICH = "rich"  # our own formats: grids with footers, row counts, call headers, hints


DEFAULT_ENVIRONMENT = Environment.TRAINED
ENVIRONMENT_NAMES = tuple(e.value for e in Environment)
