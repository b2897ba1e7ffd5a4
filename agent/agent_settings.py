"""What every front end that runs the agent shares: backend, prompts, texts, result limits, samples."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import ConfigDict, Field

from .backends._replicas import SLOTS_PER_REPLICA
from .backends.ollama_facts import OLLAMA_PARALLEL_ENV
from .backends.openai_engines import ENGINES_THAT_SAY
from .backends.registry import BackendSettings
from .episode import EpisodeSettings
from .notes import DEFAULT_MAX_NOTES_CHARS
from .options import Option
from .tools.environment import DEFAULT_ENVIRONMENT, Environment

MAX_SAMPLES = 64  # the most samples any front end runs for one question
# How the runtime slots are chosen without --runtime-slots (agent/backends/runtime_slots.py).
RUNTIME_SLOTS_DEFAULT = (
    f"what the engine serves at once where it says so: {ENGINES_THAT_SAY}; else "
    f"${OLLAMA_PARALLEL_ENV} or 1 for Ollama, {SLOTS_PER_REPLICA} per --base-url"
)


class AgentSettings(BackendSettings):
    """The settings `sqale-agent` and `sqale-mcp` share, each declared once with its help.

    The defaults of what an episode keeps are the episode's own (`EpisodeSettings`).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_rows: int = Field(
        EpisodeSettings.result_rows,
        ge=1,
        le=10_000,
        description="rows returned per answer (row_count still counts the rest)",
    )
    # What an answer's rows may weigh as JSON; the SQLite worker cuts to fit before the rows
    # reach the server, so the whole answer (text and structured content) stays well under 1 MB.
    max_result_bytes: int = Field(
        EpisodeSettings.result_bytes,
        ge=4_096,
        le=64 * 1024 * 1024,
        description="bytes an answer's rows may weigh as JSON; cells, columns and rows are cut to fit",
    )
    max_notes_chars: int = Field(
        DEFAULT_MAX_NOTES_CHARS,
        ge=1,
        le=100_000,
        description="longest notes allowed per database, in characters (longer notes are refused)",
    )
    samples: Annotated[int, Option(metavar="K")] = Field(
        1,
        ge=1,
        le=MAX_SAMPLES,
        description="episodes per question (sqale-mcp: when the caller gives no samples); K > 1 runs them "
        "concurrently and votes by execution result, stopping once a majority agrees",
    )
    seed: Annotated[
        int | None, Option(default_text="the runtime's own for one sample, a random base for several")
    ] = Field(None, ge=0, description="sampling seed, for repeatable answers: sample k uses N + k")
    runtime_slots: Annotated[int | None, Option(default_text=RUNTIME_SLOTS_DEFAULT)] = Field(
        None,
        ge=1,
        le=256,
        description="episodes talking to the model at once, each keeping its slot for all its rounds; "
        "the others wait in arrival order",
    )
    verified_hints: bool = Field(
        False,
        description="also give the model the most similar verified answers as evidence (off by "
        "default: measure it first with sqale-agent eval --verified FILE --verified-hints)",
    )
    environment: Environment = Field(
        DEFAULT_ENVIRONMENT,
        description="the texts the model reads: trained, the tool outputs and turn texts it was trained "
        "with, or rich, our richer formats",
    )
    trace_content: bool = Field(
        False,
        description="put content in OpenTelemetry spans: the question and evidence, SQL, tool "
        "results (cell values among them) and the model's replies, clipped to 4,096 "
        "characters, every hidden table and column name taken out (off: names, counts and "
        "statuses only)",
    )
    reference_agent: Annotated[Path | None, Option(metavar="DIR|sqale_agent.py")] = Field(
        None,
        description="the folder the model was downloaded to (or the sqale_agent.py in it): use the "
        "authors' SYSTEM_PROMPT, USER_TEMPLATE and the turn texts it has (read, never "
        "executed)",
    )
    assistant_prefix: Annotated[str, Option(metavar="TEXT", default_text="empty")] = Field(
        "",
        max_length=2_000,
        description="text that opens every assistant turn after <|im_start|>assistant (\\n for a newline), "
        "e.g. '<think>\\n' for Qwen3.5's thinking-on opening; empty: the model opens its turn "
        "itself",
    )
    system_prompt: Annotated[Path | None, Option(metavar="FILE")] = Field(
        None, description="replace the system prompt with this UTF-8 text file"
    )
    user_template: Annotated[Path | None, Option(metavar="FILE")] = Field(
        None, description="replace the user turn template ({question}, {evidence}) with this UTF-8 file"
    )


PROMPT_FLAGS = ("reference_agent", "system_prompt", "user_template", "assistant_prefix")
