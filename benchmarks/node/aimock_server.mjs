// bench_proxy.py's peer: aimock (the real @copilotkit/aimock) serving one fixture per prompt,
// matched on the last user message, as its users set it up.
//
//   node aimock_server.mjs FIXTURES.json   (FIXTURES: [[prompt, answer text], ...])
//
// Prints its base URL when it listens; stops on SIGTERM.
import { readFileSync } from "node:fs";
import { LLMock } from "@copilotkit/aimock";

const mock = new LLMock({ port: 0, host: "127.0.0.1", logLevel: "silent" });
for (const [prompt, text] of JSON.parse(readFileSync(process.argv[2], "utf8"))) {
  mock.onMessage(prompt, { content: text });
}
await mock.start();
process.stdout.write(mock.url + "\n");
process.on("SIGTERM", async () => { await mock.stop(); process.exit(0); });
