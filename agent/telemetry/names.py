"""Every span, attribute and metric name the product emits, each stated once.

Where OpenTelemetry's semantic conventions define a name it is theirs (GenAI spans and metrics,
MCP, database client spans: see docs/deployment.md#opentelemetry for the pages), spelled here as
the conventions spell it; what they do not cover is ours, under `sqale.`. The conventions are
not imported from opentelemetry-semantic-conventions: that package comes with the SDK (an
extra), and it marks the GenAI and MCP names deprecated in favour of the GenAI repository.
"""

from __future__ import annotations

from typing import Final

INSTRUMENTATION_SCOPE: Final = "sqale_mcp"  # the tracer's and the meter's name

# Operations (gen_ai.operation.name) and the span names built from them.
WORKFLOW: Final = "invoke_workflow"  # one question: its samples and the vote
AGENT: Final = "invoke_agent"  # one sample's episode
COMPLETION: Final = "text_completion"  # one model call (raw ChatML text, the completions API)
TOOL: Final = "execute_tool"  # one call of the agent's tools
WORKFLOW_NAME: Final = "answer_sql_question"  # the question's workflow, whichever front end asks it
AGENT_NAME: Final = "sqale-agent"
ROUND: Final = "sqale.round"  # one model turn and the tool calls it made (no convention names it)
OTHER: Final = "_OTHER"  # the conventions' value for something outside a known list

# GenAI attributes.
OPERATION_NAME: Final = "gen_ai.operation.name"
PROVIDER_NAME: Final = "gen_ai.provider.name"
WORKFLOW_NAME_KEY: Final = "gen_ai.workflow.name"
AGENT_NAME_KEY: Final = "gen_ai.agent.name"
REQUEST_MODEL: Final = "gen_ai.request.model"
REQUEST_MAX_TOKENS: Final = "gen_ai.request.max_tokens"
REQUEST_SEED: Final = "gen_ai.request.seed"
FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
CACHE_READ_TOKENS: Final = "gen_ai.usage.cache_read.input_tokens"
TOKEN_TYPE: Final = "gen_ai.token.type"
TOOL_NAME: Final = "gen_ai.tool.name"
TOOL_TYPE: Final = "gen_ai.tool.type"
INPUT_MESSAGES: Final = "gen_ai.input.messages"  # opt-in content
OUTPUT_MESSAGES: Final = "gen_ai.output.messages"  # opt-in content
TOOL_ARGUMENTS: Final = "gen_ai.tool.call.arguments"  # opt-in content
TOOL_RESULT: Final = "gen_ai.tool.call.result"  # opt-in content
ERROR_TYPE: Final = "error.type"
SERVER_ADDRESS: Final = "server.address"
SERVER_PORT: Final = "server.port"

# Database client spans.
DB_SYSTEM: Final = "db.system.name"
DB_OPERATION: Final = "db.operation.name"
DB_NAMESPACE: Final = "db.namespace"
DB_RETURNED_ROWS: Final = "db.response.returned_rows"
DB_QUERY_TEXT: Final = "db.query.text"  # opt-in content

# MCP (the SDK's span carries its own; these label our server metric).
MCP_METHOD: Final = "mcp.method.name"
MCP_PROTOCOL_VERSION: Final = "mcp.protocol.version"
NETWORK_TRANSPORT: Final = "network.transport"

# The MCP methods a metric names (the conventions' list and the 2026-07-28 era's); any other is _OTHER.
MCP_METHODS: Final = frozenset(
    {
        "completion/complete",
        "elicitation/create",
        "initialize",
        "logging/setLevel",
        "notifications/cancelled",
        "notifications/initialized",
        "notifications/message",
        "notifications/progress",
        "notifications/prompts/list_changed",
        "notifications/resources/list_changed",
        "notifications/resources/updated",
        "notifications/roots/list_changed",
        "notifications/tools/list_changed",
        "ping",
        "prompts/get",
        "prompts/list",
        "resources/list",
        "resources/read",
        "resources/subscribe",
        "resources/templates/list",
        "resources/unsubscribe",
        "roots/list",
        "sampling/createMessage",
        "tools/call",
        "tools/list",
        "server/discover",
        "subscriptions/listen",
    }
)

# Ours.
FRONT_END: Final = "sqale.front_end"  # mcp, ask or eval
DATABASE: Final = "sqale.database"  # the alias (the server, ask: the file's name; eval: the db_id)
EVAL_QUESTION: Final = "sqale.eval.question"  # the dataset's key of an eval question
TOKEN: Final = "sqale.token.name"  # the client token's name, never its value
SAMPLES: Final = "sqale.samples"
STATUS: Final = "sqale.status"
STOP_REASON: Final = "sqale.stop_reason"
VERIFIED_TIER: Final = "sqale.verified.tier"
AGREEMENT: Final = "sqale.agreement"
ROWS: Final = "sqale.rows"  # rows the answer (or a tool call) produced, counted up to the cap
SAMPLE_INDEX: Final = "sqale.sample.index"
QUEUED_SECONDS: Final = "sqale.queued_seconds"  # waiting for the sample's runtime slot
ROUNDS: Final = "sqale.rounds"
TOOL_CALLS: Final = "sqale.tool_calls"
CONTEXT_TOKENS: Final = "sqale.context_tokens"  # the episode's tokens after the round
ROUND_INDEX: Final = "sqale.round.index"
ROUND_FINAL: Final = "sqale.round.final"
ENGINE: Final = "sqale.engine"  # what the engine says it is (llama-server, vLLM, ...)
EVALUATED_TOKENS: Final = "sqale.usage.evaluated_tokens"  # prompt tokens not served from cache
TOOL_OK: Final = "sqale.tool.ok"
TOOL_IMPLICIT: Final = "sqale.tool.implicit"  # SQL written without a call, run as run_query
SQLITE_STATUS: Final = "sqale.sqlite.status"
SQLITE_TOTAL_ROWS: Final = "sqale.sqlite.total_rows"
SQLITE_CUT: Final = "sqale.sqlite.cut"  # rows, columns or cells left out (caps, byte budget)
SQLITE_INTERRUPTED: Final = "sqale.sqlite.interrupted"  # the deadline, a kill or a cancel stopped it
SQLITE_SECONDS: Final = "sqale.sqlite.seconds"  # the statement's time in the worker

# Metrics (the conventions' names, units and bucket boundaries).
TOKEN_USAGE: Final = "gen_ai.client.token.usage"
TOKEN_USAGE_BUCKETS: Final = (
    1,
    4,
    16,
    64,
    256,
    1024,
    4096,
    16384,
    65536,
    262144,
    1048576,
    4194304,
    16777216,
    67108864,
)
OPERATION_DURATION: Final = "gen_ai.client.operation.duration"
OPERATION_DURATION_BUCKETS: Final = (
    0.01,
    0.02,
    0.04,
    0.08,
    0.16,
    0.32,
    0.64,
    1.28,
    2.56,
    5.12,
    10.24,
    20.48,
    40.96,
    81.92,
)
MCP_SERVER_DURATION: Final = "mcp.server.operation.duration"
MCP_SERVER_DURATION_BUCKETS: Final = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300)
SCHEMA_READ: Final = "read_schema"  # the span of the worker reading a database's schema (several statements)
