"""Settings shared by the command line and the server, declared once; the config file they both read.

`AgentSettings` holds what every front end that runs the agent shares (the backend, prompts,
texts, result limits, samples); `config_file` finds and reads the TOML file; `layers` merges
flags, `SQALE_*` environment variables and that file, in that order of precedence.
"""
