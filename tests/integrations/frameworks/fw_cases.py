"""The cases every framework runs, through a small adapter each test module defines.

An adapter knows four things about its framework: the ways it runs an agent (``ways``:
name -> async or not), how to turn a plain function into one of its tools (``tool``), the
tool's name, description and parameter schema as the framework itself sees them
(``schema``), and how to run a one-tool agent against an OpenAI-compatible base URL and
return its final answer (``run``, sync; async ways run their own event loop).

* record then replay: a run recorded live inside ``dejacache.cassette(path)``, then replayed
  under ``CI=true`` with the provider stopped and its port held by a listener that counts
  and drops connections: 0 connections, the same final answer, the same tool calls.
* the runtime face: ``tool_cache``, ``invalidates`` and ``tool`` under the framework's own
  decorator leave the schema the framework builds unchanged (stacked the other way round,
  on the framework's tool object, they refuse with the order that works); inside
  ``agent_session`` a real run hits the cache, a write tool invalidates it, and the loop
  guard's nudge reaches the model in place of a repeated call.
"""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

import pytest
from fw_provider import DropListener

import dejacache

__all__ = ["Adapter", "FrameworkCases", "ToolLog", "on_fresh_loop"]


def on_fresh_loop(run: Callable[[], Any], *closers: Callable[[], Awaitable[Any]]) -> Any:
    """Run a framework's sync entry point that drives the thread's default event loop.

    Such entry points (openai-agents and pydantic-ai ``run_sync``, litellm's sync logging)
    keep that loop open for the next run and never close the client they were given, so each
    run gets a loop of its own, the clients are closed on it, and it is closed: a leaked
    socket or loop is a ResourceWarning, an error under ``-W error``.
    """
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        return run()
    finally:
        for close in closers:
            loop.run_until_complete(close())
        loop.run_until_complete(loop.shutdown_asyncgens())
        asyncio.set_event_loop(None)
        loop.close()


class ToolLog:
    """The plain tool functions a test hands to the framework, and what they were called with."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.runs = 0

    def read(self, is_async: bool) -> Callable[..., Any]:
        """A fresh ``get_weather`` (smolagents wants its Args documented and a return hint)."""
        log = self

        if is_async:
            async def get_weather(city: str) -> str:
                """Look up the current weather in a city.

                Args:
                    city: The name of the city.
                """
                log.calls.append(("get_weather", {"city": city}))
                log.runs += 1
                return f"sunny in {city} #{log.runs}"

            return get_weather

        def get_weather(city: str) -> str:  # type: ignore[misc]
            """Look up the current weather in a city.

            Args:
                city: The name of the city.
            """
            log.calls.append(("get_weather", {"city": city}))
            log.runs += 1
            return f"sunny in {city} #{log.runs}"

        return get_weather

    def write(self, is_async: bool) -> Callable[..., Any]:
        log = self

        if is_async:
            async def report_weather(city: str) -> str:
                """Report that the weather in a city has changed.

                Args:
                    city: The name of the city.
                """
                log.calls.append(("report_weather", {"city": city}))
                return f"noted for {city}"

            return report_weather

        def report_weather(city: str) -> str:  # type: ignore[misc]
            """Report that the weather in a city has changed.

            Args:
                city: The name of the city.
            """
            log.calls.append(("report_weather", {"city": city}))
            return f"noted for {city}"

        return report_weather


class Adapter:
    ways: ClassVar[dict[str, bool]]  # way -> runs async
    async_tools: ClassVar[bool] = True  # the framework takes async functions as tools

    def tool(self, fn: Callable[..., Any]) -> Any:
        raise NotImplementedError

    def schema(self, tool: Any) -> Any:
        raise NotImplementedError

    def run(self, way: str, tools: list[Any], base_url: str) -> str:
        raise NotImplementedError


DECORATORS: dict[str, Callable[[Callable[..., Any]], Callable[..., Any]]] = {
    "tool_cache": dejacache.tool_cache(resource="weather", scope="tenant"),
    "invalidates": dejacache.invalidates("weather"),
    "tool": dejacache.tool,
}


class FrameworkCases:
    adapter: ClassVar[Adapter]

    def test_record_then_replay(self, way: str, provider: Any, tmp_path: pathlib.Path,
                                monkeypatch: pytest.MonkeyPatch) -> None:
        a = self.adapter
        log = ToolLog()
        tools = [a.tool(log.read(a.ways[way]))]
        path = tmp_path / "run.json"
        with dejacache.cassette(path) as tape:
            assert tape.mode == "auto"
            live = a.run(way, tools, provider.openai_url)
        recorded = provider.count()
        assert recorded >= 2, "the run made no tool round trip"
        assert "Tool said" in live and "sunny in Paris #1" in live, live
        calls = list(log.calls)
        assert calls == [("get_weather", {"city": "Paris"})]

        port = provider.port
        provider.stop()
        drop = DropListener(port)
        try:
            monkeypatch.setenv("CI", "true")
            log.calls.clear()
            log.runs = 0
            with dejacache.cassette(path) as tape:
                assert tape.mode == "replay"
                replayed = a.run(way, tools, provider.openai_url)
        finally:
            drop.close()
        assert drop.count == 0, f"{drop.count} connections reached the provider's port"
        assert provider.count() == recorded
        assert replayed == live
        assert log.calls == calls

    @pytest.mark.parametrize("deco", sorted(DECORATORS))
    @pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
    def test_schema_unchanged(self, deco: str, is_async: bool) -> None:
        a = self.adapter
        if is_async and not a.async_tools:
            pytest.skip("this framework takes sync functions only")
        log = ToolLog()
        bare = a.schema(a.tool(log.read(is_async)))
        stacked = a.schema(a.tool(DECORATORS[deco](log.read(is_async))))
        assert stacked == bare
        assert "get_weather" in str(bare) and "city" in str(bare)

    @pytest.mark.parametrize("deco", sorted(DECORATORS))
    def test_the_wrong_stacking_order_is_refused(self, deco: str) -> None:
        """dejacache's decorator above the framework's gets the framework's tool object:
        refused, naming it and the order that works, instead of a broken tool."""
        tool = self.adapter.tool(ToolLog().read(False))
        with pytest.raises(dejacache.ConfigurationError) as err:
            DECORATORS[deco](tool)
        msg = str(err.value)
        assert f"{type(tool).__module__}.{type(tool).__qualname__}" in msg
        assert "get_weather" in msg and "a framework's tool, not a function" in msg
        assert f"over `@dejacache.{deco}(...)`" in msg

    def test_runtime_face(self, way: str, provider: Any) -> None:
        """Hits, invalidation and the loop guard during real runs of this framework."""
        a = self.adapter
        is_async = a.ways[way]
        log = ToolLog()
        url = provider.openai_url
        read = a.tool(dejacache.tool_cache(resource="weather")(log.read(is_async)))
        write = a.tool(dejacache.invalidates("weather")(log.write(is_async)))
        dejacache.reset_runtime_stats()

        with dejacache.agent_session(tenant="acme"):
            first = a.run(way, [read], url)
            again = a.run(way, [read], url)
            assert log.runs == 1, "the second run did not hit the tool cache"
            assert "sunny in Paris #1" in first and "sunny in Paris #1" in again
            a.run(way, [write], url)
            after = a.run(way, [read], url)
        assert log.runs == 2, "the write tool did not invalidate the cached read"
        assert "sunny in Paris #2" in after
        totals = dejacache.runtime_stats("acme").total
        assert (totals.hits, totals.misses, totals.invalidations) == (1, 2, 1)

        traced = a.tool(dejacache.tool(log.read(is_async)))
        guard = dejacache.LoopGuard(max_repeats=1, on_loop="nudge", escalate=None)
        with dejacache.agent_session(tenant="acme", loop_guard=guard):
            a.run(way, [traced], url)
            nudged = a.run(way, [traced], url)
        assert log.runs == 3, "the loop guard let a repeated call run"
        assert "loop_detected" in nudged and "Do not repeat it" in nudged, nudged
