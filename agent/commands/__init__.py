"""Subcommands of `sqale-agent`: each module has NAME, HELP, DESCRIPTION, `add_arguments(parser)`
and `run(args) -> int`; `cli` builds the parser from them."""
