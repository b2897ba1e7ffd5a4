"""OpenTelemetry traces and metrics of every answer, from the MCP call down to each SQLite statement.

- `names`: every span, attribute and metric name (the semantic conventions' where they have one);
- `content`: what content a span may hold (none by default; never a hidden name);
- `spans`: the question's span and how spans end in error; `steps`: the episode, round, tool
  and statement spans below it (the model call's is agent/backends/traced.py, the MCP span the
  SDK's, with mcp_server/serving/tracing.py's additions);
- `setup`: starting the SDK from the standard OTEL_* variables (the `otel` extra), once, at the edge.

Everything here uses the OpenTelemetry API only, which the MCP SDK already installs; without the
SDK every span is the API's no-op. docs/deployment.md#opentelemetry says what a trace holds.
"""
