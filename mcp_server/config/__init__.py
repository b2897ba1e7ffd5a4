"""Start-up: settings from flags, the config file and the environment; the databases served."""
