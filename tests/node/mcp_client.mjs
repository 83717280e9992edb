// The MCP TypeScript SDK's stdio client against a server command (`dejacache mcp-proxy ...`).
//
//   node mcp_client.mjs '["cmd", "arg", ...]' [CITY]
//
// Lists the tools and calls some (one with progress, two gathered, one that fails), then
// prints one JSON object of what it got. CITY (default Paris) changes one call's arguments.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const [command, ...args] = JSON.parse(process.argv[2]);
const city = process.argv[3] ?? "Paris";
const transport = new StdioClientTransport({ command, args, env: process.env, stderr: "inherit" });
const client = new Client({ name: "dejacache-node-test", version: "1.0.0" });
const text = (r) => r.content.map((c) => c.text).join("");
const out = {};
try {
  await client.connect(transport);
  out.tools = (await client.listTools()).tools.map((t) => t.name).sort();
  out.weather = text(await client.callTool({ name: "get_weather", arguments: { city } }));
  out.ticket = (await client.callTool({ name: "get_ticket", arguments: { id: 1 } }))
    .structuredContent;
  const progress = [];
  out.search = text(await client.callTool(
    { name: "search_docs", arguments: { query: "login" } }, undefined,
    { onprogress: (p) => progress.push(p.progress) }));
  out.progress = progress;
  out.gathered = (await Promise.all([
    client.callTool({ name: "echo", arguments: { text: "slow", delay_ms: 100 } }),
    client.callTool({ name: "echo", arguments: { text: "fast", delay_ms: 0 } }),
  ])).map(text);
  try {
    await client.callTool({ name: "get_ticket", arguments: { id: 99 } });
  } catch (err) {
    out.unknown = String(err.message);
  }
} catch (err) {
  out.error = String(err?.message ?? err);
} finally {
  await client.close();
}
process.stdout.write(JSON.stringify(out) + "\n");
