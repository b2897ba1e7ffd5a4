// The official TypeScript SDK v2 client (@modelcontextprotocol/client) asking one question of
// sqale-mcp with an elicitation handler, as tests/server/clients/test_mcp_asking_clients.py runs it.
//
//   node ts_choosing_client.cjs < {"era": "legacy"|"auto", "transport": "stdio"|"http", "command": [...],
//                                   "url": ..., "token": ..., "arguments": {...}, "reply": {...}}
//
// Prints one JSON line: the era negotiated, the forms the handler saw, and the tool result.
"use strict";

const { Client, StreamableHTTPClientTransport } = require("@modelcontextprotocol/client");
const { StdioClientTransport } = require("@modelcontextprotocol/client/stdio");

async function main() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  const job = JSON.parse(Buffer.concat(chunks).toString("utf8"));
  const client = new Client({ name: "ts-choosing-test", version: "1.0.0" }, {
    capabilities: { elicitation: { form: {} } },
    versionNegotiation: { mode: job.era === "auto" ? "auto" : "legacy" },
  });
  const forms = [];
  client.setRequestHandler("elicitation/create", async (request) => {
    forms.push(request.params);
    return job.reply;
  });
  const transport = job.transport === "http"
    ? new StreamableHTTPClientTransport(new URL(job.url), { requestInit: { headers: { Authorization: `Bearer ${job.token}` } } })
    : new StdioClientTransport({ command: job.command[0], args: job.command.slice(1), env: job.env, cwd: job.cwd, stderr: "ignore" });
  await client.connect(transport);
  await client.listTools();
  const result = await client.callTool({ name: "answer_sql_question", arguments: job.arguments });
  const version = typeof client.getNegotiatedProtocolVersion === "function" ? client.getNegotiatedProtocolVersion() : null;
  process.stdout.write(JSON.stringify({ version, forms, result }) + "\n");
  await client.close();
}

main().then(() => process.exit(0), (error) => {
  process.stderr.write(`${error && error.stack ? error.stack : error}\n`);
  process.exit(1);
});
