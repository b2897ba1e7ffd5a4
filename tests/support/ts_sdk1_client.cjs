// The official TypeScript SDK 1.x client (@modelcontextprotocol/sdk, what Claude Desktop is built on) at its
// default options: a 60 s request timeout that progress does not reset. It calls answer_sql_question over
// stdio, and again with the same arguments while the answer says `working`, as an assistant does; as
// tests/server/clients/test_mcp_patience.py and bench/bench_patience.py run it.
//
//   node ts_sdk1_client.cjs < {"command": [...], "env": {...}, "cwd": "...", "questions": [{...arguments}],
//                               "most": 10, "cancel_first": false}
//
// With "cancel_first", the first question's call after its first `working` one is aborted (as a person's
// Stop does) as soon as it hears where its question stands (its first progress notification): the SDK
// sends notifications/cancelled. The next questions are asked as usual.
// Prints one JSON line: for each question, each call's seconds and status (or its error), and the last result.
"use strict";

const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StdioClientTransport } = require("@modelcontextprotocol/sdk/client/stdio.js");

async function ask(client, args, most, cancel) {
  const calls = [];
  let result = null;
  while (calls.length < most) {
    const started = Date.now();
    const aborting = cancel && calls.length === 1;
    const controller = new AbortController();
    const options = aborting ? { signal: controller.signal, onprogress: () => controller.abort("the person stopped it") } : undefined;
    try {
      result = await client.callTool({ name: "answer_sql_question", arguments: args }, undefined, options);
      const status = result.structuredContent ? result.structuredContent.status : null;
      calls.push({ seconds: (Date.now() - started) / 1000, status });
      if (status !== "working") break;
    } catch (error) {
      calls.push({ seconds: (Date.now() - started) / 1000, error: { code: error.code ?? null, message: String(error.message ?? error) } });
      break;
    }
  }
  return { calls, result };
}

async function main() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  const job = JSON.parse(Buffer.concat(chunks).toString("utf8"));
  const client = new Client({ name: "ts-sdk1-test", version: "1.0.0" });
  const transport = new StdioClientTransport({ command: job.command[0], args: job.command.slice(1), env: job.env, cwd: job.cwd, stderr: "ignore" });
  await client.connect(transport);
  await client.listTools();
  const asked = [];
  for (const [index, args] of job.questions.entries()) {
    asked.push(await ask(client, args, job.most ?? 10, Boolean(job.cancel_first) && index === 0));
  }
  process.stdout.write(JSON.stringify({ version: client.getServerVersion(), asked }) + "\n");
  await client.close();
}

main().then(() => process.exit(0), (error) => {
  process.stderr.write(`${error && error.stack ? error.stack : error}\n`);
  process.exit(1);
});
