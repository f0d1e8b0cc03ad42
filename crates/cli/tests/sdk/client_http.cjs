// dsh serve --http driven by the official TypeScript MCP SDK (streamable HTTP, the 2025-11-25
// handshake: one Mcp-Session-Id per client session).
// argv: URL TOKEN WORKSPACE. Two client sessions, as tests/sdk/client_http.py. Prints `OK` and
// exits 0 when every check holds.
const assert = require("node:assert/strict");
const fs = require("node:fs");
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StreamableHTTPClientTransport } = require("@modelcontextprotocol/sdk/client/streamableHttp.js");
const { ElicitRequestSchema } = require("@modelcontextprotocol/sdk/types.js");

const [url, token, workspace] = process.argv.slice(2);
const text = (r) => r.content.filter((c) => c.type === "text").map((c) => c.text).join("\n");

function connect(client) {
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  return client.connect(transport).then(() => transport);
}

async function first() {
  const client = new Client({ name: "dsh-test", version: "1.0.0" }, { capabilities: { elicitation: {} } });
  const asked = [];
  client.setRequestHandler(ElicitRequestSchema, async (request) => {
    asked.push(request.params.message);
    return request.params.message.includes("ask-yes") ? { action: "accept", content: {} } : { action: "decline" };
  });
  const transport = await connect(client);

  const { tools } = await client.listTools();
  const names = tools.map((t) => t.name);
  assert.deepEqual(names, [...names].sort());
  for (const n of ["read_file", "edit_file", "write_file", "mcp__test__echo", "mcp__test__peek"]) {
    assert.ok(names.includes(n), n);
  }
  const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
  assert.equal(byName.read_file.annotations.readOnlyHint, true);
  assert.equal(byName.write_file.annotations.destructiveHint, true);

  const call = (name, args) => client.callTool({ name, arguments: args });

  const read = await call("read_file", { path: "notes.txt" });
  assert.ok(!read.isError && text(read).includes("hello"), text(read));
  const unread = await call("edit_file", { path: "other.txt", old_string: "x", new_string: "y" });
  assert.ok(unread.isError, text(unread));
  const edit = await call("edit_file", { path: "notes.txt", old_string: "hello", new_string: "bye" });
  assert.ok(!edit.isError, text(edit));
  assert.ok(fs.readFileSync(`${workspace}/notes.txt`, "utf8").startsWith("bye"));

  const denied = await call("write_file", { path: "secret.txt", content: "x" });
  assert.ok(denied.isError && text(denied).startsWith("DENIED"), text(denied));
  const yes = await call("write_file", { path: "ask-yes.txt", content: "ok" });
  assert.ok(!yes.isError, text(yes));
  const no = await call("write_file", { path: "ask-no.txt", content: "no" });
  assert.ok(no.isError && text(no).startsWith("DENIED"), text(no));
  assert.equal(asked.length, 2);

  const echo = await call("mcp__test__echo", { text: "through dsh" });
  assert.ok(!echo.isError && text(echo).includes("through dsh"), text(echo));

  const started = Date.now();
  await Promise.all(Array.from({ length: 10 }, () => call("mcp__test__peek", { ms: 300 })));
  const wall = Date.now() - started;
  assert.ok(wall < 2500, `10 calls of 300 ms took ${wall} ms`);

  await transport.terminateSession();
  await client.close();
}

async function second() {
  const client = new Client({ name: "dsh-test-2", version: "1.0.0" });
  const transport = await connect(client);
  // This session never read notes.txt: the other session's read does not count.
  const edit = await client.callTool({
    name: "edit_file",
    arguments: { path: "notes.txt", old_string: "bye", new_string: "again" },
  });
  assert.ok(edit.isError, text(edit));
  await transport.terminateSession();
  await client.close();
}

async function main() {
  await first();
  await second();
  console.log("OK");
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
