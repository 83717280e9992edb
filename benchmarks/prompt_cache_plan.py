"""What the prompt-cache planner predicts each fix saves, side by side with what the provider
then reports with the fix applied: the numbers quoted in docs/agents.md ("Prompt-cache
planning").

Every workload talks to the loopback provider of ``tests/runtime/cache_provider.py``, which
caches prompts as the providers document (breakpoints and lifetimes, OpenAI's routing by the
first 256 tokens and ``prompt_cache_key`` with spill-over past 15 requests a minute, gpt-5.6
breakpoints) with its own rendering and token count, and reports it in its usage. Each
workload runs once as written, watched by ``PrefixMonitor(trace=...)``; ``plan`` reads the
trace and prices every fix it finds. Then the workload runs again for each fix, with the fix
applied as a user would apply it: ``PrefixMonitor(apply=...)`` for the cache controls, the
agent changed for the others (the clock moved into the user message, the agent pooled, 1 h
markers). Fixes the plan chose are applied cumulatively in its order (each priced on top of
those before it); alternatives alone. ``reported`` is the provider's usage priced the same
way (input side: uncached, cached reads and cache writes at the model's rates).

- ``sdk`` (``.venv``): a long, multi-turn, tool-using agent (``tests/runtime/tool_agent.py``)
  serving 12 conversations at once on gpt-4.1 with the clock at the top of its system prompt;
  6 on claude-sonnet-4-6 with no cache marker and 400 s between messages; 12 on gpt-5.6 with
  its instructions as content parts; 6 on claude-sonnet-4-6 with its breakpoints where they
  buy nothing (one on a system block after the clock, one on each question); google-genai
  chats on gemini-2.5-flash (implicit caching; the explicit ``CachedContent`` fix is priced,
  not applied: the loopback has no explicit caches), seconds and minutes apart; and the small
  SDK agents of ``agent_pool_prefix.py`` (``tests/runtime/prefix_agents.py``) rebuilding their
  system prompt every turn.
- ``hermes`` (``.venv-hermes``): hermes-agent's ``AIAgent`` built fresh for every message of
  one chat, its ephemeral prompt starting with the time and the message id
  (``tests/integrations/hermes/prefix_gateway.py``).

    .venv/bin/python benchmarks/prompt_cache_plan.py sdk
    .venv-hermes/bin/python benchmarks/prompt_cache_plan.py hermes
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import sys
import tempfile
from collections.abc import Callable
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "integrations" / "hermes"),
                str(ROOT / "benchmarks")]

Runner = Callable[[tuple[str, ...], pathlib.Path], None]  # (fixes applied, trace file)


@dataclasses.dataclass
class Workload:
    name: str
    run: Runner
    applies: frozenset[str]  # the fix kinds this workload can apply
    # Runtime fixes also measured alone (the plan may choose them after a code change, but
    # they are what apply= does without one): predicted by pricing the recording with them.
    alone: tuple[str, ...] = ()
    suffix: str = ".jsonl"  # what ``run`` writes: a monitor's trace, or a cassette (".json")
    # What the provider bills beyond the requests' usage (an explicit cache's creation and
    # storage), from what ``run`` wrote.
    billed: Callable[[pathlib.Path], float] | None = None


@dataclasses.dataclass
class Totals:
    prompt: int
    recorded_cached: int
    recorded_cost: float
    predicted_cached: int
    predicted_cost: float
    turns: int


def _totals(plan: Any) -> Totals:
    return Totals(int(plan.total("prompt_tokens")), int(plan.total("recorded_cached")),
                  plan.total("recorded_cost"), int(plan.total("predicted_cached")),
                  plan.total("predicted_cost"), int(plan.total("turns")))


def _fixes(plan: Any) -> list[tuple[str, bool, float]]:
    """(kind, alternative, predicted saving over every session) in the plan's order."""
    order: dict[tuple[str, bool], float] = {}
    for s in plan.sessions:
        for f in s.fixes:
            key = (f.kind, f.alternative)
            order[key] = order.get(key, 0.0) + f.saving
    chosen = [(k, a, v) for (k, a), v in order.items() if not a]
    return chosen + [(k, a, v) for (k, a), v in order.items() if a]


def measure(w: Workload, tmp: pathlib.Path) -> list[str]:
    from dejacache.planner import plan_recordings

    def trace(fixes: tuple[str, ...]) -> pathlib.Path:
        name = f"{w.name}-{'-'.join(fixes) or 'as-is'}{w.suffix}"
        return tmp / name.replace(" ", "_").replace("/", "_")

    def traced(fixes: tuple[str, ...]) -> Any:
        path = trace(fixes)
        path.unlink(missing_ok=True)
        w.run(fixes, path)
        return plan_recordings(path)

    def totals(fixes: tuple[str, ...]) -> Totals:
        out = _totals(traced(fixes))
        out.recorded_cost += w.billed(trace(fixes)) if w.billed else 0.0
        return out

    base_plan = traced(())
    base = _totals(base_plan)
    rec, pred = base.recorded_cached / base.prompt, base.predicted_cached / base.prompt
    rows = [f"| {w.name} | {base.turns} | {base.prompt:,} | {rec:.1%} | {pred:.1%} | "
            f"${base.recorded_cost:.4f} | ${base.predicted_cost:.4f} |"]
    fixes = []
    applied: tuple[str, ...] = ()
    before = base
    for kind, alternative, predicted in _fixes(base_plan):
        if kind not in w.applies:
            label = f"{kind} (instead)" if alternative else kind
            fixes.append(f"| {w.name} | {label} | ${predicted:.4f} | (not applied here) | | |")
            continue
        run = (kind,) if alternative else (*applied, kind)
        after = totals(run)
        ref = base if alternative else before
        reported = ref.recorded_cost - after.recorded_cost
        error = f"{(predicted - reported) / reported:+.1%}" if reported else "-"
        label = f"{kind} (instead)" if alternative else " + ".join(run)
        fixes.append(f"| {w.name} | {label} | ${predicted:.4f} | ${reported:.4f} | {error} | "
                     f"{after.recorded_cached / after.prompt:.1%} |")
        if not alternative:
            applied, before = run, after
    for kind in w.alone:
        fixes.append(_alone(w, kind, base, trace(()), traced))
    return [*rows, "\x00", *fixes]


def _alone(w: Workload, kind: str, base: Totals, as_is: pathlib.Path,
           traced: Callable[[tuple[str, ...]], Any]) -> str:
    from dejacache._core.cache_plan import price
    from dejacache.cassettes.prices import rates_from_table
    from dejacache.planner.load import accounts

    predicted = base.predicted_cost - price(accounts(as_is), (kind,), rates_from_table())
    after = _totals(traced((kind,)))
    reported = base.recorded_cost - after.recorded_cost
    error = f"{(predicted - reported) / reported:+.1%}" if reported else "-"
    return (f"| {w.name} | {kind} (alone) | ${predicted:.4f} | ${reported:.4f} | {error} | "
            f"{after.recorded_cached / after.prompt:.1%} |")


CALIBRATION = ("| workload | turns | prompt tokens | hit rate, reported | hit rate, predicted | "
               "cost, reported | cost, predicted |\n|---|---:|---:|---:|---:|---:|---:|")
SAVINGS = ("| workload | fix applied | saving, predicted | saving, reported | error | "
           "hit rate reported with it |\n|---|---|---:|---:|---:|---:|")


def report(workloads: list[Workload]) -> None:
    calibration, savings = [], []
    with tempfile.TemporaryDirectory(prefix="prompt-cache-plan-") as d:
        for w in workloads:
            rows = measure(w, pathlib.Path(d))
            cut = rows.index("\x00")
            calibration += rows[:cut]
            savings += rows[cut + 1:]
    print("Calibration: the requests as recorded, the provider's cached tokens against the "
          "model's\n")
    print(CALIBRATION)
    print("\n".join(calibration))
    print("\nEach fix the plan found: its predicted saving, and the provider's with it applied\n")
    print(SAVINGS)
    print("\n".join(savings))


# ---------------------------------------------------------------- the SDK workloads


def _tool_agent(name: str, model: str, alone: tuple[str, ...] = (),
                skip: frozenset[str] = frozenset(), **kwargs: Any) -> Workload:
    import dejacache
    from runtime.cache_provider import CachingProvider
    from runtime.tool_agent import Shape, SimClock, replies, run_anthropic, run_openai

    shape: Shape = kwargs.pop("shape")
    run = run_anthropic if model.startswith("claude") else run_openai

    def runner(fixes: tuple[str, ...], trace: pathlib.Path) -> None:
        clock = SimClock()
        s = shape
        if "move" in fixes:
            s = dataclasses.replace(s, clock="user")
        if "pool" in fixes:
            s = dataclasses.replace(s, clock="built")
        if "long_ttl" in fixes:  # what the plan prices: the breakpoints fix's markers, 1 h
            s = dataclasses.replace(s, markers="top", hour=True)
        apply = [f for f in fixes if f in ("breakpoints", "prompt_cache_key")]
        provider = CachingProvider(clock=clock, replies=replies).start()
        try:
            with dejacache.PrefixMonitor(clock=clock, trace=trace, apply=apply):
                run(provider, clock, model=model, shape=s, **kwargs)  # type: ignore[operator]
        finally:
            provider.stop()

    return Workload(name, runner, frozenset({"move", "pool", "long_ttl", "breakpoints",
                                             "prompt_cache_key"}) - skip, alone)


def _small_agent(name: str, which: str) -> Workload:
    import dejacache
    from runtime.cache_provider import CachingProvider
    from runtime.prefix_agents import run_anthropic, run_openai

    run = run_anthropic if which == "anthropic" else run_openai

    def runner(fixes: tuple[str, ...], trace: pathlib.Path) -> None:
        provider = CachingProvider().start()
        apply = [f for f in fixes if f in ("breakpoints", "prompt_cache_key")]
        try:
            with dejacache.PrefixMonitor(trace=trace, apply=apply), \
                    dejacache.agent_session(session_id=name):
                run(provider, rebuild="pool" not in fixes)
        finally:
            provider.stop()

    return Workload(name, runner, frozenset({"pool", "breakpoints", "prompt_cache_key"}))


def _gemini(name: str, **kwargs: Any) -> Workload:
    """google-genai conversations, recorded into a cassette (a fix applied as a user would:
    no ``apply=``); ``cached_content``: one cache created for every conversation, named by
    each request."""
    from runtime.gemini_chat import cache_bill, record

    def runner(fixes: tuple[str, ...], path: pathlib.Path) -> None:
        record(path, explicit="cached_content" in fixes, **kwargs)

    return Workload(name, runner, frozenset({"cached_content"}), suffix=".json",
                    billed=cache_bill)


def sdk() -> None:
    import dejacache
    from runtime.tool_agent import Shape

    dejacache.configure(mode="off")  # observe only: every request reaches the provider
    report([
        _tool_agent("tool agent, gpt-4.1, 12 chats, clock in the system prompt", "gpt-4.1",
                    shape=Shape(clock="system"), sessions=12, turns=6),
        _tool_agent("tool agent, claude-sonnet-4-6, 6 chats, no marker, 400 s apart",
                    "claude-sonnet-4-6", shape=Shape(clock="user"), sessions=6, turns=6,
                    gap=400.0),
        _tool_agent("tool agent, gpt-5.6, 12 chats, instructions as parts", "gpt-5.6",
                    shape=Shape(clock="user", parts=True), sessions=12, turns=6),
        _tool_agent("tool agent, claude-sonnet-4-6, 6 chats, breakpoints badly placed",
                    "claude-sonnet-4-6", shape=Shape(clock="system", markers="bad"),
                    sessions=6, turns=6, alone=("breakpoints",),
                    # The plan's 1 h markers are the moved ones, which the agent never places.
                    skip=frozenset({"long_ttl"})),
        _gemini("google-genai chat, gemini-2.5-flash, 3 chats, 2 s apart", chats=3, turns=6),
        _gemini("google-genai chat, gemini-2.5-flash, 2 chats, 7 min apart", chats=2, turns=6,
                step=420.0),
        _small_agent("SDK agent, gpt-4.1, prompt rebuilt each turn", "openai"),
        _small_agent("SDK agent, claude-sonnet-4-6, prompt rebuilt each turn", "anthropic"),
    ])


# ---------------------------------------------------------------- hermes-agent


def hermes(turns: int) -> None:
    from agent_pool_prefix import _isolate
    from prefix_gateway import conversation, run_gateway

    from runtime.cache_provider import CachingProvider

    _isolate()
    gateway = {(): "fresh", ("pool",): "pooled", ("move",): "moved"}

    def runner(fixes: tuple[str, ...], trace: pathlib.Path) -> None:
        provider = CachingProvider().start()
        try:
            run_gateway(gateway[fixes], provider, conversation(turns), trace=trace)
        finally:
            provider.stop()

    report([Workload(f"hermes-agent, new AIAgent per message, {turns} messages", runner,
                     frozenset({"pool", "move"}))])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("part", choices=["sdk", "hermes"])
    parser.add_argument("--turns", type=int, default=5)
    args = parser.parse_args()
    if args.part == "hermes":
        hermes(args.turns)
    else:
        sdk()


if __name__ == "__main__":
    main()
