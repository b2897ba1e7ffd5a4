"""Team serving: HTTP transport, bearer tokens, quotas, metrics, drain and stop signals, log lines."""
