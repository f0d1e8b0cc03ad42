// dsh serve driven by the official TypeScript MCP SDK over stdio.
// argv: DSH WORKSPACE LOG POLICY MCP_CONFIG. Prints `OK` and exits 0 when every check holds.
const assert = require("node:assert/strict");
const fs = require("node:fs");
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StdioClientTransport } = require("@modelcontextprotocol/sdk/client/stdio.js");
const { ElicitRequestSchema } = require("@modelcontextprotocol/sdk/types.js");

const [dsh, workspace, log, policy, mcpConfig] = process.argv.slice(2);
const text = (r) => r.content.filter((c) => c.type === "text").map((c) => c.text).join("\n");

async function main() {
  const transport = new StdioClientTransport({
    command: dsh,
    args: ["serve", "--workspace", workspace, "--log", log, "--policy", policy, "--mcp", mcpConfig],
    stderr: "inherit",
  });
  const client = new Client({ name: "dsh-test", version: "1.0.0" }, { capabilities: { elicitation: {} } });
  const asked = [];
  client.setRequestHandler(ElicitRequestSchema, async (request) => {
    asked.push(request.params.message);
    return request.params.message.includes("ask-yes") ? { action: "accept", content: {} } : { action: "decline" };
  });
  await client.connect(transport);

  const { tools } = await client.listTools();
  const names = tools.map((t) => t.name);
  assert.deepEqual(names, [...names].sort());
  for (const n of ["read_file", "edit_file", "write_file", "mcp__test__echo", "mcp__test__peek"]) {
    assert.ok(names.includes(n), n);
  }
  const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
  assert.equal(byName.read_file.annotations.readOnlyHint, true);
  assert.equal(byName.write_file.annotations.destructiveHint, true);

  const call = (name, args, options) => client.callTool({ name, arguments: args }, undefined, options);

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

  const abort = new AbortController();
  setTimeout(() => abort.abort("changed my mind"), 1000);
  await assert.rejects(call("mcp__test__slow", { ms: 60000 }, { signal: abort.signal }));
  const after = await call("mcp__test__echo", { text: "still here" });
  assert.ok(text(after).includes("still here"), text(after));

  await client.close();
  console.log("OK");
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
