"""The agent server of the runtime load harness (``load_runtime.py``): Starlette under uvicorn,
as a team runs one.

``POST /turn`` ``{"tenant", "session", "plan"}`` runs one agent turn: an ``AgentPool`` lease
of the session's agent, inside ``agent_session(tenant, session_id, loop_guard)``; the agent
talks to the loopback model with the real openai SDK and runs the tools the model asks for.
Four ``tool_cache`` tools on a shared Redis (a cart, a tenant's carts, a global catalogue, a
profile) and one ``invalidates`` write tool (an item added to a cart).

The "database" the tools read is a SQLite file shared by the workers (``LOAD_DB``): its
``carts`` table is the truth, and ``published`` holds, per cart, the highest version whose
write (invalidation included) has returned, written by the writer after the write returned.
Every read of a cart is checked against the version published before the read started: an
older answer is a stale read, an answer for another tenant or cart a wrong one. Each worker
writes its counts, ``runtime_stats()``, the pool's stats and its resident memory to
``LOAD_STATS_DIR/<pid>.json`` every second (and at shutdown).

Environment: ``LOAD_REDIS_URL``, ``LOAD_DB``, ``LOAD_MODEL_URL``, ``LOAD_STATS_DIR``;
``LOAD_HOLD_MS`` holds the event loop that long every 200 ms (a saturated worker);
``LOAD_TRACEMALLOC=1`` adds the 10 fastest-growing allocation sites to the stats;
``LOAD_DIAG=1`` adds where memory sits (``load_memory.py``: threads, descriptors, the C
allocator's arenas, the sizes of the library's own tables); ``LOAD_MALLOC_TRIM=1`` also
hands the allocator's free memory back (``malloc_trim(0)``) after each report and reports the
resident memory after it;
``DEJACACHE_RUNTIME_CACHE=off`` runs it without the cache.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pathlib
import sqlite3
import sys
import time
import tracemalloc
from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import orjson
from load_memory import memory_report
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

import dejacache
from dejacache.runtime import current_session
from dejacache.stores.redis import RedisStore

ENV = os.environ
STATS_DIR = pathlib.Path(ENV.get("LOAD_STATS_DIR", "."))
HOLD = float(ENV.get("LOAD_HOLD_MS", "0")) / 1000
TRACE = ENV.get("LOAD_TRACEMALLOC") == "1"
DIAG = ENV.get("LOAD_DIAG") == "1"
TRIM = ENV.get("LOAD_MALLOC_TRIM") == "1"
PAGE = os.sysconf("SC_PAGE_SIZE")
CARTS = 20

STORE = RedisStore(ENV.get("LOAD_REDIS_URL", "redis://127.0.0.1:6379/0"), key_prefix="load")
COUNTS = {"turns": 0, "turn_errors": 0, "tool_calls": 0, "backend": 0, "reads_checked": 0,
          "stale": 0, "wrong": 0, "writes": 0}
ERRORS: list[str] = []


def _db() -> sqlite3.Connection:
    db = sqlite3.connect(ENV.get("LOAD_DB", "load.db"), timeout=30, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    return db


DB = _db()


def _tenant() -> str:
    sess = current_session()
    assert sess is not None and sess.tenant is not None
    return sess.tenant


def _version(table: str, tenant: str, cart: int) -> int:
    row = DB.execute(f"SELECT v FROM {table} WHERE tenant=? AND cart=?",
                     (tenant, cart)).fetchone()
    return int(row[0])


# -- the tools


@dejacache.tool_cache(resource="cart", key="cart:{cart}", store=STORE, ttl=600)
async def get_cart(cart: int) -> dict[str, Any]:
    COUNTS["backend"] += 1
    tenant = _tenant()
    return {"tenant": tenant, "cart": cart, "v": _version("carts", tenant, cart)}


@dejacache.tool_cache(resource="cart", store=STORE, ttl=600)
async def list_carts() -> dict[str, Any]:
    COUNTS["backend"] += 1
    tenant = _tenant()
    rows = DB.execute("SELECT cart, v FROM carts WHERE tenant=? ORDER BY cart",
                      (tenant,)).fetchall()
    return {"tenant": tenant, "carts": {str(c): v for c, v in rows}}


@dejacache.tool_cache(resource="catalog", key="cat:{category}", scope="global", store=STORE,
                      ttl=600)
async def get_catalog(category: str) -> dict[str, Any]:
    COUNTS["backend"] += 1
    return {"category": category, "items": [f"{category}-{i}" for i in range(20)]}


@dejacache.tool_cache(resource="profile", key="user:{user}", store=STORE, ttl=600)
async def get_profile(user: str) -> dict[str, Any]:
    COUNTS["backend"] += 1
    return {"tenant": _tenant(), "user": user, "tier": "gold" if len(user) % 2 else "blue"}


@dejacache.invalidates("cart", key="cart:{cart}", store=STORE)
async def add_item(cart: int, sku: str) -> dict[str, Any]:
    tenant = _tenant()
    DB.execute("BEGIN IMMEDIATE")
    DB.execute("UPDATE carts SET v = v + 1 WHERE tenant=? AND cart=?", (tenant, cart))
    v = _version("carts", tenant, cart)
    DB.execute("COMMIT")
    return {"tenant": tenant, "cart": cart, "v": v, "sku": sku}


TOOLS = {f.__name__: f for f in (get_cart, list_carts, get_catalog, get_profile, add_item)}
SCHEMAS = [{"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
           for name in TOOLS]


# -- the checker


def _floors(name: str, args: dict[str, Any]) -> dict[int, int]:
    """Versions published before a read starts: what its answer must reach."""
    tenant = _tenant()
    if name == "get_cart":
        return {args["cart"]: _version("published", tenant, args["cart"])}
    if name == "list_carts":
        rows = DB.execute("SELECT cart, v FROM published WHERE tenant=?", (tenant,))
        return {c: v for c, v in rows}
    return {}


def _check(name: str, floors: dict[int, int], got: Any) -> None:
    if name not in ("get_cart", "list_carts") or not isinstance(got, dict):
        return
    COUNTS["reads_checked"] += 1
    seen = ({got.get("cart"): got.get("v")} if name == "get_cart"
            else {int(c): v for c, v in (got.get("carts") or {}).items()})
    if got.get("tenant") != _tenant() or set(floors) - set(seen):
        COUNTS["wrong"] += 1
    elif any(seen[c] < v for c, v in floors.items()):
        COUNTS["stale"] += 1
        if len(ERRORS) < 10:
            ERRORS.append(f"stale {name}: {seen} under {floors} at {time.time():.3f}")


async def run_tool(name: str, args: dict[str, Any]) -> Any:
    COUNTS["tool_calls"] += 1
    floors = _floors(name, args)
    got = await TOOLS[name](**args)
    if name == "add_item":
        DB.execute("UPDATE published SET v = max(v, ?) WHERE tenant=? AND cart=?",
                   (got["v"], got["tenant"], got["cart"]))
        COUNTS["writes"] += 1
    _check(name, floors, got)
    return got


# -- the agent


class Agent:
    """One session's agent: its client and prompt (kept by the pool between turns)."""

    def __init__(self, model: str, system_prompt: str) -> None:
        self.model, self.system_prompt = model, system_prompt
        self.client = openai.AsyncOpenAI(base_url=ENV.get("LOAD_MODEL_URL"), api_key="k",
                                         http_client=SHARED_HTTP[0], max_retries=0)

    async def turn(self, plan: list[Any]) -> str:
        messages: list[Any] = [{"role": "system", "content": self.system_prompt},
                               {"role": "user", "content": orjson.dumps(plan).decode()}]
        for _ in range(4):
            reply = await self.client.chat.completions.create(
                model=self.model, messages=messages, tools=SCHEMAS)  # type: ignore[arg-type]
            message = reply.choices[0].message
            if not message.tool_calls:
                return message.content or ""
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls:
                got = await run_tool(call.function.name, orjson.loads(call.function.arguments))
                messages.append({"role": "tool", "tool_call_id": call.id,
                                 "content": orjson.dumps(got).decode()})
        return ""


SHARED_HTTP: list[Any] = [None]
POOL: dejacache.AgentPool[Agent] = dejacache.AgentPool(
    Agent, signature=("model", "system_prompt"), max_size=64, idle_ttl=120)
GUARD = dejacache.LoopGuard(max_repeats=50, max_depth=200, on_loop="warn")


async def turn(request: Request) -> Response:
    body = orjson.loads(await request.body())
    try:
        lease = POOL.lease(body["session"], model="m", system_prompt="Be brief.")
        session = dejacache.agent_session(tenant=body["tenant"], session_id=body["session"],
                                          loop_guard=GUARD)
        async with lease as agent, session:
            text = await agent.turn(body["plan"])
        COUNTS["turns"] += 1
        return Response(orjson.dumps({"ok": True, "text": text}), media_type="application/json")
    except Exception as exc:  # counted: the harness reports every failed turn
        COUNTS["turn_errors"] += 1
        if len(ERRORS) < 10:
            ERRORS.append(f"turn: {exc!r}")
        return Response(orjson.dumps({"ok": False, "error": repr(exc)}), status_code=500,
                        media_type="application/json")


async def health(request: Request) -> Response:
    return Response(b"ok")


# -- the worker's own reports


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE / 2**20


def _connections() -> int:
    """Connections the store's asyncio clients hold (open or idle): one server or Sentinel
    (a Cluster client keeps its connections per node, not in a pool: counted as 0)."""
    total = 0
    for client in list(getattr(STORE._clients, "_aclients", {}).values()):
        pool = getattr(client, "connection_pool", None)
        if pool is not None:
            total += len(getattr(pool, "_available_connections", ()))
            total += len(getattr(pool, "_in_use_connections", ()))
    return total


def snapshot(baseline: Any = None) -> dict[str, Any]:
    stats = dejacache.runtime_stats()
    t = stats.total
    off = getattr(t, "off", 0)  # (older versions, to compare with: no switch, no "off")
    out: dict[str, Any] = {
        "pid": os.getpid(), "at": time.time(), "rss_mib": round(_rss_mib(), 1),
        **COUNTS, "errors": list(ERRORS),
        "runtime": {"hits": t.hits, "misses": t.misses, "coalesced": t.coalesced,
                    "bypassed": t.bypassed, "off": off,
                    "calls": t.hits + t.misses + t.coalesced + t.bypassed + off,
                    "invalidations": t.invalidations,
                    "stale_protected": t.stale_protected,
                    "enabled": getattr(stats, "enabled", True)},
        "breaker_trips": STORE.breaker.trips, "skipped": STORE.skipped,
        "redis_connections": _connections(),
        "pool": {"size": len(POOL), "builds": POOL.stats().builds},
    }
    if baseline is not None:
        top = tracemalloc.take_snapshot().compare_to(baseline, "lineno")[:10]
        out["growth"] = [str(s) for s in top]
    if DIAG or TRIM:
        out["memory"] = memory_report([sys.modules[__name__]], trim=TRIM)
    return out


async def _report(stop: asyncio.Event) -> None:
    path = STATS_DIR / f"{os.getpid()}.json"
    baseline = None
    started = time.monotonic()
    while not stop.is_set():
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), 1.0)
        if TRACE and baseline is None and time.monotonic() - started > 60:
            baseline = tracemalloc.take_snapshot()  # after warm-up
        path.write_bytes(orjson.dumps(snapshot(baseline)))


async def _hold(stop: asyncio.Event) -> None:
    """The rest of a saturated worker: the event loop held HOLD seconds every 200 ms."""
    while not stop.is_set():
        await asyncio.sleep(0.2)
        time.sleep(HOLD)


@contextlib.asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    if TRACE:
        tracemalloc.start(3)
    # Idle connections dropped before the model's uvicorn closes them (its keep-alive is
    # 5 s, httpx's too): a request sent on one it was closing failed the turn.
    SHARED_HTTP[0] = httpx.AsyncClient(limits=httpx.Limits(max_connections=200,
                                                            keepalive_expiry=2.0))
    stop = asyncio.Event()
    tasks = [asyncio.ensure_future(_report(stop))]
    if HOLD:
        tasks.append(asyncio.ensure_future(_hold(stop)))
    try:
        yield
    finally:
        stop.set()
        await asyncio.gather(*tasks)
        await POOL.aclose()
        await SHARED_HTTP[0].aclose()
        await STORE.aclose()


app = Starlette(routes=[Route("/turn", turn, methods=["POST"]), Route("/health", health)],
                lifespan=lifespan)
