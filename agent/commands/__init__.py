"""Subcommands of `sqale-agent`: each module exposes `register(subparsers) -> None`, which adds
its parser and sets `run(args) -> int` with `set_defaults(run=...)`; `cli` puts them together."""
