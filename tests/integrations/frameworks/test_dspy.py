"""dspy (``.venv-fw2``): ``dspy.ReAct`` with one ``dspy.Tool``, called and ``acall``-ed.

ReAct speaks dspy's ``[[ ## field ## ]]`` text protocol, not native tool calls; the provider
plays that part (fw_provider.py). dspy's own LM cache is off, so every call reaches HTTP.
With ``engine="litellm"`` sync calls go through litellm's httpx path, async ones through its
aiohttp transport; the default engine (``"auto"``) takes lm15's own sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Callable
from typing import Any, ClassVar

import pytest

pytest.importorskip("dspy", reason="dspy runs in .venv-fw2 (make test-frameworks)")

from fw_cases import Adapter, FrameworkCases, on_fresh_loop

from conftest import KEY


class DSPy(Adapter):
    ways: ClassVar[dict[str, bool]] = {"sync": False, "async": True}

    def __init__(self, engine: str) -> None:
        self.engine = engine

    def tool(self, fn: Callable[..., Any]) -> Any:
        import dspy

        return dspy.Tool(fn)

    def schema(self, tool: Any) -> Any:
        return (tool.name, tool.desc, tool.args, str(tool),
                tool.format_as_litellm_function_call())

    def run(self, way: str, tools: list[Any], base_url: str) -> str:
        import dspy

        lm = dspy.LM("openai/gpt-4o-mini", api_base=base_url, api_key=KEY, cache=False,
                     num_retries=0, engine=self.engine)
        react = dspy.ReAct("question -> answer", tools=tools, max_iters=3)
        with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
            if way == "sync":
                # litellm's sync path logs through asyncio.get_event_loop(), which makes the
                # thread a default loop that nobody closes: give it one that is closed.
                return str(on_fresh_loop(lambda: react(question="Weather in Paris?").answer))

            async def go() -> str:
                try:
                    return str((await react.acall(question="Weather in Paris?")).answer)
                finally:
                    await _close_litellm_clients()

            return asyncio.run(go())


async def _close_litellm_clients() -> None:
    """litellm caches its async clients per event loop and never closes them; each run has
    its own loop here, so its clients are closed with it (else their sockets, and the loop
    they hold, fail the run at exit under -W error)."""
    import litellm

    cache = litellm.in_memory_llm_clients_cache
    for obj in [litellm.module_level_aclient, *cache.cache_dict.values()]:
        close = getattr(obj, "aclose", None) or getattr(obj, "close", None)
        if close is not None:
            with contextlib.suppress(Exception):
                done = close()
                if inspect.isawaitable(done):
                    await done
    cache.flush_cache()


class TestDSPy(FrameworkCases):
    adapter = DSPy("litellm")


class TestDSPyDefaultEngine(FrameworkCases):
    """dspy >= 3.4's default engine (``engine="auto"``): lm15's raw-socket HTTP/1.1 client,
    intercepted by dejacache.http.lm15 (it once recorded nothing and replayed live)."""

    adapter = DSPy("auto")

    @pytest.fixture(autouse=True)
    def _through_lm15(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Counts the live requests lm15's own transports make, so a run that quietly took
        litellm instead cannot pass for an lm15 one."""
        from dspy._vendor.lm15 import transports

        sent: list[str] = []
        for name in ("StdlibTransport", "StdlibAsyncTransport"):
            cls = getattr(transports, name)
            orig = cls.stream

            def counting(self: Any, request: Any, _orig: Any = orig, _name: str = name) -> Any:
                sent.append(_name)
                return _orig(self, request)

            monkeypatch.setattr(cls, "stream", counting)
        self._sent = sent

    def test_record_then_replay(self, way: str, provider: Any, tmp_path: Any,
                                monkeypatch: pytest.MonkeyPatch) -> None:
        sent = self._sent
        super().test_record_then_replay(way, provider, tmp_path, monkeypatch)
        wanted = "StdlibAsyncTransport" if self.adapter.ways[way] else "StdlibTransport"
        assert sent and set(sent) == {wanted}, sent
        assert len(sent) == provider.count()  # every live call went through lm15
