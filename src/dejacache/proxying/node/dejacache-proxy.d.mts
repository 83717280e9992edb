// The types of dejacache-proxy.mjs (a cassette per test on a running `dejacache proxy`).

export interface CassetteOptions {
  /** The proxy's base URL (default: DEJACACHE_PROXY). */
  proxy?: string;
  /** auto | replay | record | off (default: DEJACACHE_MODE, else the proxy's). */
  mode?: string;
  strict?: boolean;
  /** Calls that go live while the rest replay, e.g. ["model"]. */
  live?: string[] | string;
  replayUntil?: number;
  maxAge?: string;
  onExpiry?: "warn" | "rerecord";
  /** Routes for this cassette's requests: { openai: "http://127.0.0.1:8080" }. */
  upstreams?: Record<string, string>;
  /** The command a miss report says re-records the test. */
  rerecord?: string;
  /** A test that passes after a replay miss does not fail. */
  expectMisses?: boolean;
}

export interface Summary {
  id: string;
  cassette: string;
  mode: string;
  saved: boolean;
  replayed: number;
  recorded: number;
  missed: number;
  misses: string[];
  divergences: string[];
  error: string | null;
  /** Why a passing test fails after all (a miss met, the save failed, a strict cassette's
   * calls not all made), or null. */
  failure: string | null;
}

export declare class Cassette {
  readonly proxy: string;
  readonly id: string;
  readonly url: string;
  readonly path: string;
  readonly mode: string;
  summary: Summary | null;
  baseURL(upstream: string): string;
  get env(): Record<string, string>;
  route(upstream: string, url: string): Promise<void>;
  close(options?: { ok?: boolean; expectMisses?: boolean }): Promise<Summary>;
}

export declare function proxyUrl(url?: string): string;
export declare function openCassette(name: string, options?: CassetteOptions): Promise<Cassette>;
export declare function withCassette<T>(name: string, fn: (cassette: Cassette) => Promise<T> | T,
                                        options?: CassetteOptions): Promise<T>;
export declare function cassetteName(file: string, test: string): string;

type Hook = (fn: (ctx: any) => unknown) => unknown;

export interface RunningCassette {
  /** The cassette of the test whose context vitest passed (tests running at once). */
  for(ctx: any): Cassette;
  readonly cassette: Cassette;
  readonly url: string;
  readonly env: Record<string, string>;
  baseURL(upstream: string): string;
}

export declare function cassettes(
  hooks: { beforeEach: Hook; afterEach: Hook },
  options?: CassetteOptions & { name?: (task: any) => string },
): RunningCassette;
