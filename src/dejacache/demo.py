"""``dejacache demo``: run a tool-using agent twice and show what the second run saved.

Run 1 goes live (the scripted model and tools really sleep) and stores every call in the
default store; run 2 asks the same questions under ``mode="replay"``, so any call that is
not served from the store would fail loudly instead of quietly going live.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable, Iterator
from typing import Any

from ._demo.agent import AgentRun, Model, Step, run_agent
from ._demo.printer import Printer, make_printer
from ._demo.travel import QUESTIONS, SCHEMAS, SYSTEM, TravelWorld
from .config import get_settings
from .decorators import cache
from .errors import ReplayMiss, StoreError
from .scope import scope
from .stats import stats as stats_snapshot
from .stats import token_total
from .stores._protocols import Store

__all__ = ["DEMO_NAMESPACE", "AgentFactory", "DemoResult", "cached_agent", "play", "run_demo"]

#: The demo's own namespace: clearing it never touches the user's entries.
DEMO_NAMESPACE = "dejacache-demo"
MODEL_NAME = "demo.chat.completions"
#: What the model call is stored as when it goes through the openai SDK (HTTP interception).
SDK_MODEL_NAME = "openai.chat.completions"
_LATENCY_ENV = "DEJACACHE_DEMO_LATENCY"


@dataclasses.dataclass(frozen=True, slots=True)
class RunSummary:
    run: AgentRun
    model_calls: int
    tool_calls: int


@dataclasses.dataclass(frozen=True, slots=True)
class DemoResult:
    first: RunSummary
    second: RunSummary
    entries: int
    bytes: int
    model_seconds: float
    tokens: int
    hits: int
    location: str

    @property
    def speedup(self) -> float:
        return self.first.run.wall / max(self.second.run.wall, 1e-9)


def _latency_scale() -> float:
    raw = os.environ.get(_LATENCY_ENV, "").strip()
    try:
        return float(raw) if raw else 1.0
    except ValueError:
        return 1.0


AgentFactory = Callable[[TravelWorld], tuple[Model, dict[str, Callable[..., Any]]]]


def cached_agent(world: TravelWorld) -> tuple[Model, dict[str, Callable[..., Any]]]:
    """The default model and tools: ``world``'s functions, each behind ``@dejacache.cache``.

    This is the swappable part (``play(agent=...)``): a real SDK client can come in instead of
    ``world.chat`` (e.g. ``openai`` talking to a loopback server whose handler calls
    ``world.chat``, cached by dejacache's HTTP interception rather than the decorator). The
    loop, the call counting and the report stay the same.
    """
    model = cache(name=MODEL_NAME)(world.chat)
    return model, cached_tools(world)


def cached_tools(world: TravelWorld) -> dict[str, Callable[..., Any]]:
    return {name: cache(name=f"demo.tool.{name}")(fn) for name, fn in world.tools().items()}


@contextlib.contextmanager
def _default_agent(agent: AgentFactory | None) -> Iterator[tuple[AgentFactory, str]]:
    """The agent to run and how to describe its model.

    By default the model is the real ``openai`` SDK talking to a loopback server (recorded and
    replayed by dejacache's HTTP interception); without the openai package, the same scripted
    model is called directly behind ``@dejacache.cache``.
    """
    if agent is not None:
        yield agent, getattr(agent, "description", "a local model")
        return
    from ._demo.sdk import loopback_sdk_agent, openai_available

    if not openai_available():
        yield cached_agent, "a local model"
        return
    with loopback_sdk_agent(cached_tools) as factory:
        yield factory, "the openai SDK talking to a local model server on 127.0.0.1"


def _one_run(label: str, world: TravelWorld, mode: str, store: Store, out: Printer,
             agent: AgentFactory) -> RunSummary:
    model, tools = agent(world)
    before = (world.model_calls, world.tool_calls)
    seen = [world.live_calls]

    def on_step(step: Step) -> None:
        live = world.live_calls != seen[0]
        seen[0] = world.live_calls
        how = "[yellow]live[/yellow]  " if live else "[green]stored[/green]"
        ms = (f"{step.seconds * 1000:7.1f} ms" if step.seconds >= 0.001
              else f"{step.seconds * 1e6:7.0f} µs")
        if step.kind == "tool":
            out.line(f"  {how} {ms}  tool  {step.name}({step.detail})")
        elif step.name == "answer":
            out.line(f"  {how} {ms}  model answers: [italic]{step.detail}[/italic]")
        else:
            out.line(f"  {how} {ms}  model {step.detail}")

    out.rule(label)
    with scope(cache_key=DEMO_NAMESPACE, mode=mode, store=store):
        run = run_agent(model, tools, SCHEMAS, QUESTIONS, system=SYSTEM, on_step=on_step)
    return RunSummary(run, world.model_calls - before[0], world.tool_calls - before[1])


def play(
    *,
    scale: float | None = None,
    store: Store | None = None,
    out: Printer | None = None,
    agent: AgentFactory | None = None,
) -> DemoResult:
    """Clear the demo's namespace, run the agent live, run it again from the store."""
    out = out if out is not None else make_printer()
    store = store if store is not None else get_settings().store  # an empty store is falsy
    world = TravelWorld(scale=_latency_scale() if scale is None else scale)
    store.clear(namespace=DEMO_NAMESPACE)  # run 1 is always live, so the demo repeats

    with _default_agent(agent) as (factory, model_desc):
        out.line(f"[bold]dejacache demo[/bold]: a travel agent with {model_desc} "
                 f"(~120-250 ms per call) and two tools (~30-80 ms), store {store.url}")
        first = _one_run("run 1: live, recording", world, "auto", store, out, factory)
        saved = _saved(store, expected=first.model_calls + first.tool_calls)
        hits_before = stats_snapshot().total.hits
        second = _one_run("run 2: replay from the store", world, "replay", store, out, factory)
        hits = stats_snapshot().total.hits - hits_before
    path = getattr(store, "path", None)
    return DemoResult(first, second, *saved, hits, str(path) if path is not None else store.url)


def _saved(store: Store, expected: int) -> tuple[int, int, float, int]:
    """Entries, bytes, recorded model seconds and tokens that run 1 left in the store.

    Checked before run 2 so a store that silently dropped the writes (read-only directory,
    full disk, a file from an incompatible dejacache) is reported as such, not as a replay bug.
    """
    entries = size = tokens = 0
    model_seconds = 0.0
    try:
        for _, rec in store.iterate(namespace=DEMO_NAMESPACE):
            entries += 1
            size += rec.size
            if rec.name in (MODEL_NAME, SDK_MODEL_NAME):
                model_seconds += rec.duration
            if rec.usage:
                tokens += token_total(rec.usage)
    except StoreError:
        raise
    except Exception as exc:  # any backend failure: say where, keep the cause
        raise StoreError(f"cannot read back the demo's entries ({exc})", backend=store.url) from exc
    if entries < expected:
        raise StoreError(f"run 1 made {expected} calls but the store kept {entries}; it may be "
                         "read-only, full, or written by another dejacache version. Point "
                         "DEJACACHE_DIR at another directory and run the demo again",
                         backend=store.url)
    return entries, size, model_seconds, tokens


def _report(res: DemoResult, out: Printer) -> None:
    out.rule("what was saved")
    rows = [(name, s.model_calls, s.tool_calls, f"{s.run.wall:.3f} s")
            for name, s in (("run 1 (live)", res.first), ("run 2 (from store)", res.second))]
    out.table(["run", "model calls", "tool calls", "wall time"], rows)
    out.line("")
    same = res.first.run.answers == res.second.run.answers
    out.line(f"speed-up: [bold]{res.speedup:,.0f}x[/bold]   same answers: "
             f"{'yes' if same else '[red]NO[/red]'}   calls served from the store: {res.hits}")
    out.line(f"stored: {res.entries} entries, {res.bytes:,} bytes; recorded model time "
             f"{res.model_seconds:.2f} s; tokens not re-spent: {res.tokens:,}")
    out.line(f"where: {res.location}  (namespace {DEMO_NAMESPACE!r}; "
             "`dejacache stats` shows it, `dejacache clear --cache-key "
             f"{DEMO_NAMESPACE}` removes it)")


def run_demo(live: bool = False, *, scale: float | None = None, plain: bool | None = None,
             store: Store | None = None) -> int:
    """The ``dejacache demo`` command. Returns the process exit code."""
    out = make_printer(plain)
    agent_cm: contextlib.AbstractContextManager[AgentFactory | None] = contextlib.nullcontext()
    if live:
        from ._demo.sdk import openai_available, real_api_agent

        if not os.environ.get("OPENAI_API_KEY") or not openai_available():
            out.line("dejacache demo --live records against the real OpenAI API and needs "
                     "OPENAI_API_KEY and the openai package; without them, run "
                     "`dejacache demo` (local model server, no key).")
            return 2
        agent_cm = real_api_agent(cached_tools)
    try:
        with agent_cm as agent:
            res = play(scale=scale, store=store, out=out, agent=agent)
    except ReplayMiss as exc:  # run 2 would have gone live: the store did not serve it
        out.line(f"[red]replay failed[/red]: {exc}")
        return 1
    except StoreError as exc:
        out.line(f"[red]the store did not keep run 1[/red]: {exc}")
        return 1
    _report(res, out)
    same = res.first.run.answers == res.second.run.answers
    return 0 if same and res.second.model_calls == 0 and res.second.tool_calls == 0 else 1
