"""What rebuilding an agent every message costs in provider prompt cache, and what AgentPool
keeps: the numbers quoted in the README's "Running agents" section.

Every request goes to a loopback provider that caches prompts as OpenAI and Anthropic document
(1,024-token minimum; OpenAI in 128-token steps, Anthropic at ``cache_control`` breakpoints)
and reports it in its usage (``tests/runtime/cache_provider.py``); a ``PrefixMonitor`` watches
the same requests and prices each break (gpt-4.1: $2/M input, cached 0.25x; claude-sonnet-4:
$3/M, reads 0.1x, writes 1.25x). Two parts, each run where its packages are installed:

- ``hermes``: hermes-agent 0.19's ``AIAgent`` (``.venv-hermes``), one 5-message chat whose
  every message carries an ephemeral system prompt starting with the current time and the
  message id, through three gateways (``tests/integrations/hermes/prefix_gateway.py``): a
  fresh agent per message, a pool keyed on the whole ephemeral prompt (hermes-agent #55595),
  and a pool keyed on its stable part.
- ``sdk``: a small agent on the openai 3.x and anthropic SDKs (``.venv``) that rebuilds its
  system prompt with the clock every turn, against the same agent with the prompt built once
  (``tests/runtime/prefix_agents.py``).

    .venv-hermes/bin/python benchmarks/agent_pool_prefix.py hermes [--turns N]
    .venv/bin/python benchmarks/agent_pool_prefix.py sdk
"""

from __future__ import annotations

import argparse
import atexit
import importlib.metadata
import logging
import os
import pathlib
import shutil
import sys
import tempfile
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "integrations" / "hermes")]


def _isolate() -> None:
    """No developer state read or written: a throwaway hermes home and dejacache dir, no
    provider keys, no lazy pip installs (hermes' TTS extra)."""
    os.environ["HERMES_DISABLE_LAZY_INSTALLS"] = "1"
    for var, prefix in (("HERMES_HOME", "hermes-home-"), ("DEJACACHE_DIR", "dejacache-")):
        os.environ[var] = tempfile.mkdtemp(prefix=prefix)
        atexit.register(shutil.rmtree, os.environ[var], True)
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENROUTER_API_KEY",
                "ANTHROPIC_API_KEY", "NOUS_API_KEY", "HERMES_MODEL", "DEJACACHE_MODE"):
        os.environ.pop(var, None)
    logging.disable(logging.INFO)  # hermes logs every client it opens


def _one_line(text: str) -> str:
    return text.replace("\n", "⏎")


def _row(label: str, monitor: Any, built: int | None = None) -> str:
    (report,) = monitor.report().values()
    cached = report.reported_cached or 0
    hit = f"{cached / report.prompt_tokens:.0%}" if report.prompt_tokens else "-"
    agents = "" if built is None else f" {built} |"
    return (f"| {label} |{agents} {report.turns} | {report.breaks} | "
            f"{report.prompt_tokens:,} | {cached:,} ({hit}) | {report.expected_cached:,} | "
            f"${report.cost:.4f} |")


HEADER = ("| {what} | turns | breaks | prompt tokens | cached, reported by the provider | "
          "cached, expected by the monitor | cost of the breaks |\n"
          "|---|---:|---:|---:|---:|---:|---:|")
HEADER_BUILT = HEADER.replace("| turns", "| agents built | turns").replace("|---|", "|---|---:|")


def hermes(turns: int) -> None:
    from prefix_gateway import conversation, run_gateway

    from runtime.cache_provider import CachingProvider

    labels = {
        "fresh": "new `AIAgent` per message",
        "volatile": "`AgentPool`, whole ephemeral prompt in the signature (#55595)",
        "pooled": "`AgentPool`, stable part of the prompt in the signature",
    }
    provider = CachingProvider().start()
    try:
        runs = [run_gateway(g, provider, conversation(turns)) for g in labels]
    finally:
        provider.stop()
    version = importlib.metadata.version("hermes-agent")
    print(f"### hermes-agent {version} gateway, one chat of {turns} messages (gpt-4.1)\n")
    print(HEADER_BUILT.format(what="gateway"))
    for run in runs:
        print(_row(labels[run.gateway], run.monitor, run.built))
    rebuilt = runs[0]
    print("\nFirst break of the rebuilt agent, as `str(PrefixBreak)`:\n")
    print(f"    {_one_line(str(rebuilt.monitor.breaks[0]))}")
    print("\nFlagged on turn 1 (`monitor.hazards`), before any break:\n")
    for h in rebuilt.monitor.hazards:
        print(f"    {h.kind}: {h.path} at offset {h.offset:,}: {h.text!r}")
    for run in runs[1:]:
        print(f"\n`pool.stats()` ({run.gateway}): {run.stats}")


def sdk() -> None:
    import dejacache
    from dejacache import PrefixMonitor
    from runtime.cache_provider import CachingProvider
    from runtime.prefix_agents import TURNS, run_anthropic, run_openai

    print(f"### A small agent on the SDKs, {TURNS} turns\n")
    print(HEADER.format(what="agent"))
    dejacache.configure(mode="off")  # observe only: every request reaches the provider
    for name, run, model in (("openai chat", run_openai, "gpt-4.1"),
                             ("anthropic messages", run_anthropic, "claude-sonnet-4-6")):
        for rebuild in (True, False):
            provider = CachingProvider().start()
            monitor = PrefixMonitor()
            try:
                with monitor:
                    run(provider, rebuild=rebuild)
            finally:
                provider.stop()
            how = "system prompt rebuilt with the clock each turn" if rebuild else "built once"
            print(_row(f"{name} ({model}), {how}", monitor))
            if rebuild and name.startswith("anthropic"):
                first = _one_line(str(monitor.breaks[0]))
    print(f"\nFirst Anthropic break:\n\n    {first}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("part", choices=["hermes", "sdk"])
    parser.add_argument("--turns", type=int, default=5)
    args = parser.parse_args()
    _isolate()
    if args.part == "hermes":
        hermes(args.turns)
    else:
        sdk()


if __name__ == "__main__":
    main()
