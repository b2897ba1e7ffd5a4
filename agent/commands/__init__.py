"""Subcommands of `sqale-agent`: each module has DESCRIPTION, `add_arguments(parser)` and
`run(args) -> int`; `cli` lists them by name and help, and imports only the one that runs."""
