// dejacache-proxy.mjs: a cassette per test on a running `dejacache proxy`, for vitest, jest
// and node:test. One file, no dependencies (Node >= 18: global fetch), and its types in
// dejacache-proxy.d.mts: `dejacache proxy --node-helper test/` copies both next to your tests.
//
// The proxy's URL comes from DEJACACHE_PROXY, which `dejacache proxy ... -- <test command>`
// sets. A test's cassette is written when the test passes and left as it was when it fails;
// a test that passes although its agent met a replay miss, or whose cassette did not hold (its
// save failed, a strict cassette's calls were not all made), fails saying so.
//
//   vitest:   const tape = cassettes({ beforeEach, afterEach });
//             test("...", async () => { new OpenAI({ baseURL: tape.baseURL("openai") + "/v1" }) })
//             test.concurrent("...", async (ctx) => { ... tape.for(ctx).baseURL("openai") ... })
//   any runner (jest, node:test, vitest):
//             test("...", () => withCassette("weather", async (tape) => { ... tape.url ... }))

const ENV = globalThis.process?.env ?? {};

/** The proxy's base URL: `url`, else DEJACACHE_PROXY. */
export function proxyUrl(url = ENV.DEJACACHE_PROXY) {
  if (!url) {
    throw new Error("dejacache: DEJACACHE_PROXY is not set: run the tests under " +
      "`dejacache proxy --cassette-dir DIR -- <test command>`, or set it to the proxy's URL");
  }
  return url.replace(/\/+$/, "");
}

async function call(url, body) {
  const res = await fetch(url, {
    method: body === undefined ? "GET" : "POST",
    headers: { "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const data = await res.json().catch(() => ({}));
  if (!res.ok) throw new Error(data?.error?.message ?? `dejacache proxy: HTTP ${res.status}`);
  return data;
}

/** One test's cassette, open on the proxy: its requests go to `url`. */
export class Cassette {
  constructor(proxy, info) {
    this.proxy = proxy;
    this.id = info.id;
    this.url = info.url;
    this.path = info.cassette;
    this.mode = info.mode;
    this.summary = null;
  }

  /** Where an SDK for `upstream` points: `baseURL("openai") + "/v1"`, `baseURL("anthropic")`. */
  baseURL(upstream) {
    return `${this.url}/${upstream}`;
  }

  /** Environment for an agent run as a subprocess: the SDKs that read these use the cassette. */
  get env() {
    return { DEJACACHE_PROXY: this.proxy, OPENAI_BASE_URL: `${this.url}/openai/v1`,
             ANTHROPIC_BASE_URL: `${this.url}/anthropic` };
  }

  /** Send this cassette's `upstream` requests to `url` (a local fake server, say). */
  async route(upstream, url) {
    await call(`${this.proxy}/_dejacache/sessions/${this.id}/upstreams`, { [upstream]: url });
  }

  /** Close it; the file is written only when `ok`. Returns what it did (counts, misses, and
   * `failure`: why a passing test fails after all, or null; `expectMisses` leaves misses out). */
  async close({ ok = true, expectMisses = false } = {}) {
    this.summary ??= await call(`${this.proxy}/_dejacache/sessions/${this.id}/close`,
                                { ok, expect_misses: expectMisses });
    return this.summary;
  }
}

const OPTIONS = { strict: "strict", live: "live", replayUntil: "replay_until",
                  upstreams: "upstreams", rerecord: "rerecord", maxAge: "max_age",
                  onExpiry: "on_expiry" };

/** Open the cassette `name` (a path under the proxy's --cassette-dir). Options: mode (default:
 * DEJACACHE_MODE, else the proxy's), strict, live, replayUntil, upstreams, rerecord, proxy. */
export async function openCassette(name, options = {}) {
  const proxy = proxyUrl(options.proxy);
  const body = { cassette: name };
  const mode = options.mode ?? ENV.DEJACACHE_MODE;
  if (mode) body.mode = mode;
  for (const [option, field] of Object.entries(OPTIONS)) {
    if (options[option] !== undefined) body[field] = options[option];
  }
  return new Cassette(proxy, await call(`${proxy}/_dejacache/sessions`, body));
}

// A passing test's cassette that did not hold (the proxy's summary says why: a miss met, its
// save failed, a strict cassette's calls not all made): the test fails after all.
async function closePassed(cassette, ok, expectMisses) {
  const summary = await cassette.close({ ok, expectMisses: Boolean(expectMisses) });
  if (ok && summary.failure) throw new Error(`dejacache: ${summary.failure}`);
  return summary;
}

/** `fn(cassette)` with the cassette `name` open; it is written when `fn` succeeds. */
export async function withCassette(name, fn, options = {}) {
  const cassette = await openCassette(name, options);
  let ok = false;
  try {
    const out = await fn(cassette);
    ok = true;
    return out;
  } finally {
    await closePassed(cassette, ok, options.expectMisses);
  }
}

/** `tests/agent.test.ts` + `group > does it` -> `tests/agent.test/group_does_it.json`. */
export function cassetteName(file, test) {
  const safe = (s) => s.replace(/[^A-Za-z0-9._-]+/g, "_").replace(/^[._]+|[._]+$/g, "");
  const stem = file.replace(/\\/g, "/").replace(/\.[cm]?[jt]sx?$/, "");
  return `${stem.split("/").map(safe).join("/")}/${safe(test) || "test"}.json`;
}

/** vitest: a cassette per test, named after its file and its name (`cassetteName`). The
 * object returned gives the running test's cassette: `url`, `baseURL(upstream)`, `env`; with
 * tests running at once (`test.concurrent`), each takes its own: `tape.for(ctx)`. */
export function cassettes({ beforeEach, afterEach }, options = {}) {
  // Test (its context's task) -> its cassette; null while it opens. One shared "current"
  // cassette handed concurrent tests each other's: their calls went to one file.
  const open = new Map();
  const testOf = (ctx) => ctx?.task ?? ctx;
  beforeEach(async (ctx) => {
    const task = ctx?.task ?? {};
    const file = task.file?.name ?? "tests";
    const test = task.fullTestName ?? task.name ?? "test";
    const name = options.name ? options.name(task) : cassetteName(file, test);
    const rerecord = options.rerecord ??
      `DEJACACHE_MODE=record npx vitest run ${file} -t ${JSON.stringify(task.name ?? test)}`;
    open.set(testOf(ctx), null);
    try {
      open.set(testOf(ctx), await openCassette(name, { ...options, rerecord }));
    } catch (err) {
      open.delete(testOf(ctx));
      throw err;
    }
  });
  afterEach(async (ctx) => {
    const cassette = open.get(testOf(ctx));
    open.delete(testOf(ctx));
    if (!cassette) return;
    await closePassed(cassette, ctx?.task?.result?.state !== "fail", options.expectMisses);
  });
  const running = () => {
    if (open.size > 1) {
      throw new Error(`dejacache: ${open.size} tests are running at once: take the test's own ` +
        "cassette with tape.for(ctx), ctx being the context vitest passes the test");
    }
    const [only] = open.values();
    if (!only) throw new Error("dejacache: no test is running (use it inside a test)");
    return only;
  };
  return {
    for(ctx) {
      const own = open.get(testOf(ctx));
      if (!own) throw new Error("dejacache: no cassette is open for this test (pass the " +
        "context vitest gives the test: test(\"...\", async (ctx) => tape.for(ctx)...))");
      return own;
    },
    get cassette() { return running(); },
    get url() { return running().url; },
    get env() { return running().env; },
    baseURL: (upstream) => running().baseURL(upstream),
  };
}
