// bench_proxy.py's floor in Node: a minimal http server answering from memory, for every
// request (after reading its body, as any server must), the status, headers and body the
// proxy answers the first call with (ANSWER_FILE: those bytes, as the proxy sent them).
// Node adds its own Connection and Keep-Alive headers; it sends no Date (sendDate off).
//
//   node floor_server.mjs ANSWER_FILE   -> prints its base URL; stops on SIGTERM.
import { readFileSync } from "node:fs";
import http from "node:http";

const answer = readFileSync(process.argv[2]);
const end = answer.indexOf("\r\n\r\n");
const [statusLine, ...lines] = answer.subarray(0, end).toString("latin1").split("\r\n");
const status = Number(statusLine.split(" ")[1]);
const headers = lines.flatMap((line) => {
  const at = line.indexOf(":");
  return [line.slice(0, at), line.slice(at + 1).trim()];
});
const body = answer.subarray(end + 4);
const server = http.createServer((req, res) => {
  req.resume();
  req.on("end", () => {
    res.sendDate = false;
    res.writeHead(status, headers);
    res.end(body);
  });
});
server.keepAliveTimeout = 60_000;
server.listen(0, "127.0.0.1", () => {
  process.stdout.write(`http://127.0.0.1:${server.address().port}\n`);
});
process.on("SIGTERM", () => server.close(() => process.exit(0)));
