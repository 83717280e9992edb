// bench_proxy.py's floor in Node: a minimal http server answering the same bytes from
// memory for every request (after reading the body, as any server must).
//
//   node floor_server.mjs BODY_FILE   -> prints its base URL; stops on SIGTERM.
import { readFileSync } from "node:fs";
import http from "node:http";

const body = readFileSync(process.argv[2]);
const server = http.createServer((req, res) => {
  req.resume();
  req.on("end", () => {
    res.writeHead(200, { "content-type": "application/json", "content-length": body.length });
    res.end(body);
  });
});
server.keepAliveTimeout = 60_000;
server.listen(0, "127.0.0.1", () => {
  process.stdout.write(`http://127.0.0.1:${server.address().port}\n`);
});
process.on("SIGTERM", () => server.close(() => process.exit(0)));
