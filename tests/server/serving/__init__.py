"""Tests of mcp_server/serving: HTTP, stdio, tokens, quotas, headers, stopping, logs, metrics."""
