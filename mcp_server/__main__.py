"""`sqale-mcp` and `python -m mcp_server`: parse the settings, build the server, serve."""

from __future__ import annotations

import gc
import os
import signal
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import FrameType
from typing import TYPE_CHECKING

from agent import ConfigError, PromptConfigError, print_version_if_alone

from . import PROG

if TYPE_CHECKING:
    from .app import SqaleServer

EXIT_INTERRUPTED = 130  # 128 + SIGINT
EXIT_TERMINATED = 143  # 128 + SIGTERM


def _terminate(signum: int, frame: FrameType | None) -> None:
    """SIGTERM before serving starts: unwind (closing what is open) and exit 143."""
    raise SystemExit(EXIT_TERMINATED)


@contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic garbage collection while the modules load and the server is built.

    Start-up makes the SDK's and our classes, schemas and tables, which live as long as the
    process: the collector would scan them again and again while they are made, about a tenth
    of the stdio server's time to answer `initialize` (bench/bench_startup.py). Once built they
    are frozen, never scanned again (the few cycles start-up leaves behind, under 2,000 memory
    blocks, stay), and collection resumes as it was.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was_enabled:
            gc.enable()


def _checked_server(arguments: Sequence[str]) -> SqaleServer:
    """The server for these arguments, every database checked; ConfigError when they are wrong.

    The modules are imported here, not at the top: `sqale-mcp --version` needs neither the
    settings nor the MCP SDK (seconds on a small machine). The SQLite worker the databases are
    checked on starts before the SDK is imported, so that its interpreter starts meanwhile.
    """
    from agent import WorkerLimits

    from .config.catalog import startup_engine
    from .config.command_line import parse_settings
    from .serving.log_format import configure_logging

    settings = parse_settings(arguments, os.environ)
    configure_logging(settings.log_level, settings.log_format)
    checks = startup_engine(WorkerLimits(query_timeout=settings.query_timeout))
    try:
        checks.start_worker()
        from agent import start_telemetry

        from .app import SERVICE, build_server

        start_telemetry(SERVICE)  # the SDK, when the OTEL_* variables ask for it (docs/deployment.md)
        return build_server(settings, environ=os.environ, checks=checks)
    finally:
        checks.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the server; exit 2 with one line on stderr when the configuration is wrong.

    Ctrl-C or SIGTERM while serving stdio ends the process with 130 or 143 (see `stopping`).
    """
    arguments = sys.argv[1:] if argv is None else argv
    print_version_if_alone(PROG, arguments)
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        try:
            with collector_paused():
                server = _checked_server(arguments)
        except (ConfigError, PromptConfigError) as exc:
            print(f"sqale-mcp: {exc}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:  # Ctrl-C while the databases are being checked
            return EXIT_INTERRUPTED
        try:
            server.run()
        except ConfigError as exc:  # found only when serving starts: the HTTP port is taken
            print(f"sqale-mcp: {exc}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:  # Ctrl-C stops the HTTP server (uvicorn re-raises it when done)
            return EXIT_INTERRUPTED
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
