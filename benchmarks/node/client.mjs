// bench_proxy.py's client: the same sequential keep-alive fetch for every target, one call
// timed at a time, the targets interleaved in batches (A x batch, B x batch, ...; the order
// rotated each batch) so each sees the same moments of a busy machine.
//
//   node client.mjs SPEC.json   -> prints {"target": [microseconds per call, ...], ...}
//
// SPEC: {"targets": {"name": "url", ...}, "bodies": [string, ...], "warmup": n, "batch": n}:
// each target gets bodies[0..warmup) untimed, then bodies[warmup..] timed, in order.
import { readFileSync } from "node:fs";

const spec = JSON.parse(readFileSync(process.argv[2], "utf8"));
const headers = { "content-type": "application/json", authorization: "Bearer sk-bench" };
const names = Object.keys(spec.targets);

async function call(url, body) {
  const res = await fetch(url, { method: "POST", headers, body });
  const text = await res.text();
  if (res.status !== 200) throw new Error(`${url}: HTTP ${res.status}: ${text.slice(0, 300)}`);
  return text;
}

for (const name of names) {
  for (let i = 0; i < spec.warmup; i++) await call(spec.targets[name], spec.bodies[i]);
}
const timed = spec.bodies.length - spec.warmup;
const out = Object.fromEntries(names.map((n) => [n, []]));
for (let start = 0, round = 0; start < timed; start += spec.batch, round++) {
  const order = names.slice(round % names.length).concat(names.slice(0, round % names.length));
  for (const name of order) {
    for (let i = start; i < Math.min(start + spec.batch, timed); i++) {
      const t0 = process.hrtime.bigint();
      await call(spec.targets[name], spec.bodies[spec.warmup + i]);
      out[name].push(Number(process.hrtime.bigint() - t0) / 1000);
    }
  }
}
process.stdout.write(JSON.stringify(out) + "\n");
