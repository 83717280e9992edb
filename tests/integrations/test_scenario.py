"""dejacache.integrations.scenario without langwatch-scenario installed (the main venv).

The runs themselves are tested against the real package in tests/integrations/langwatch_scenario
(``make test-scenario``). Here: the lazy import and its install hint, the pytest option's
error, and the ``@cache`` drop-in, which works outside a run with no scenario at all.
"""

from __future__ import annotations

import importlib.util

import pytest

import dejacache
from dejacache.integrations import scenario as integration

missing = pytest.mark.skipif(importlib.util.find_spec("scenario") is not None,
                             reason="scenario is installed here "
                                    "(see tests/integrations/langwatch_scenario)")


@missing
def test_install_without_scenario_names_the_extra() -> None:
    with pytest.raises(dejacache.ConfigurationError, match=r"pip install 'dejacache\[scenario\]'"):
        integration.install()
    assert not integration.installed()
    integration.uninstall()  # harmless when nothing was installed


@missing
def test_pytest_option_without_scenario_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest("--dejacache-scenario")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--dejacache-scenario" in result.stderr.str()
    assert "pip install 'dejacache[scenario]'" in result.stderr.str()


def test_cache_drop_in_outside_a_run_keeps_kwargs_in_the_key(
        memory_store: dejacache.MemoryStore) -> None:
    calls: list[tuple[str, float]] = []

    class Agent:
        @integration.cache(ignore=["client"])
        def answer(self, question: str, client: object = None, *, temperature: float = 0.0
                   ) -> str:
            calls.append((question, temperature))
            return f"{question}@{temperature}"

    agent = Agent()
    assert agent.answer("refund?", client=object(), temperature=0.2) == "refund?@0.2"
    assert agent.answer("refund?", client=object(), temperature=0.2) == "refund?@0.2"
    assert agent.answer("refund?", temperature=0.7) == "refund?@0.7"  # scenario #926
    assert calls == [("refund?", 0.2), ("refund?", 0.7)]


async def test_cache_drop_in_async_and_thread_id_not_keyed(
        memory_store: dejacache.MemoryStore) -> None:
    calls = 0

    @integration.cache
    async def step(state: dict[str, object]) -> int:
        nonlocal calls
        calls += 1
        return len(state["messages"])  # type: ignore[arg-type]

    assert await step({"thread_id": "scenariothread_1", "messages": [1, 2]}) == 2
    assert await step({"thread_id": "scenariothread_2", "messages": [1, 2]}) == 2
    assert calls == 1


def test_the_same_test_run_again_names_its_scenarios_from_the_first(tmp_path: object) -> None:
    import pathlib

    names = integration._Names()
    d = pathlib.Path(str(tmp_path))

    class Item:  # a pytest item of one session; the next session makes another
        nodeid = "tests/test_agent.py::test_trip"

    first, again = Item(), Item()
    assert names.pick(d, "trip", first).name == "trip.json"
    assert names.pick(d, "trip", first).name == "trip-2.json"
    # A second session in the same process (the same node id) starts at trip.json again:
    # counting on would send its first run to trip-2.json's recording.
    assert names.pick(d, "trip", again).name == "trip.json"
