"""dejacache.integrations.scenario against the real langwatch-scenario, openai 2.x and litellm.

Runs in ``.venv-scenario`` (``make test-scenario``); in the main venv every test here skips.
The loopback provider answers every part of a run (user simulator and judge through litellm,
the agent under test through the openai SDK) with a fresh nonce, so equal transcripts mean
replayed ones.
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import re
import sys
from typing import Any

import pytest

scenario = pytest.importorskip("scenario")
if not hasattr(scenario, "JudgeAgent"):
    pytest.skip("langwatch-scenario runs in .venv-scenario (make test-scenario)",
                allow_module_level=True)

import openai  # noqa: E402

import dejacache  # noqa: E402
from dejacache import pytest_plugin  # noqa: E402
from dejacache.integrations import scenario as integration  # noqa: E402

# scenario, langwatch and litellm warn about their own deprecated internals on every run;
# the suite's -W error is for dejacache's warnings.
pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"),
              pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")]

CRITERIA = ["Agent answers every message", "Agent stays polite"]


class OpenAIAgent(scenario.AgentAdapter):
    """The agent under test: the openai SDK directly, fed the conversation as it stands."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url

    async def call(self, input: scenario.AgentInput) -> str:
        # a client per call: scenario.run gives each run its own event loop
        async with openai.AsyncOpenAI(base_url=self.base_url,
                                      api_key="sk-agent-test-key-987654") as client:
            r = await client.chat.completions.create(model="gpt-4o-mini",
                                                     messages=input.messages)
        return r.choices[0].message.content or ""


def agents(provider: Any) -> list[Any]:
    return [OpenAIAgent(provider.base_url), scenario.UserSimulatorAgent(),
            scenario.JudgeAgent(criteria=CRITERIA)]


def outcome(result: Any) -> dict[str, Any]:
    """What a replay must reproduce exactly (trace ids are per run by design)."""
    return {
        "messages": [{k: v for k, v in m.items() if k != "trace_id"} for m in result.messages],
        "success": result.success,
        "reasoning": result.reasoning,
        "passed": result.passed_criteria,
        "failed": result.failed_criteria,
    }


@pytest.fixture
def outside_pytest(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs behave as in a script: files under cassette_dir, written when the run ends, so
    one test can play session 1 (record), 2 (replay) and a CI run."""
    monkeypatch.setattr(pytest_plugin, "_CURRENT_ITEM", None)


async def refund(provider: Any, run: Any = None, **kw: Any) -> Any:
    run = run or scenario.run
    return await run(name="Refund request", description="A customer wants a refund for a "
                     "broken kettle", agents=agents(provider), **kw)


@pytest.mark.usefixtures("outside_pytest")
async def test_record_then_replay_then_ci(provider: Any, scenario_config: Any,
                                          tmp_path: pathlib.Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    integration.install(cassette_dir=tmp_path)
    first = await refund(provider)
    recorded = provider.count()
    assert first.success, first.reasoning
    assert set(provider.kinds()) == {"user", "agent", "judge-decision", "judge-verdict"}
    assert len(first.messages) == 4  # two turns: the judge decided after the second

    second = await refund(provider)
    assert provider.count() == recorded, "run 2 made live requests"
    assert outcome(second) == outcome(first)

    monkeypatch.setenv("CI", "true")  # replay mode: a miss would raise, never go live
    third = await refund(provider)
    assert provider.count() == recorded, "the CI run made live requests"
    assert outcome(third) == outcome(first)

    text = (tmp_path / "refund-request.json").read_text()
    assert "sk-scenario-test-key" not in text and "sk-agent-test-key" not in text
    assert "broken kettle" in text
    # the judge's prompts are stored with the trace digest (timestamps, span ids, durations)
    # replaced by the placeholder they were keyed with
    json.loads(text)
    assert "Total Duration" not in text


@pytest.mark.usefixtures("outside_pytest")
async def test_arun_records_and_replays(provider: Any, scenario_config: Any,
                                        tmp_path: pathlib.Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    integration.install(cassette_dir=tmp_path)
    first = await refund(provider, run=scenario.arun)
    recorded = provider.count()
    monkeypatch.setenv("CI", "true")
    again = await refund(provider, run=scenario.arun)
    assert provider.count() == recorded
    assert outcome(again) == outcome(first)


@pytest.mark.usefixtures("outside_pytest")
async def test_two_runs_in_gather_each_replay_from_their_own_cassette(
        provider: Any, scenario_config: Any, tmp_path: pathlib.Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    integration.install(cassette_dir=tmp_path)

    async def both() -> list[Any]:
        return list(await asyncio.gather(
            scenario.run(name="Kettle refund", description="A customer wants a refund",
                         agents=agents(provider)),
            scenario.run(name="Lost parcel", description="A parcel never arrived",
                         agents=agents(provider)),
        ))

    first = await both()
    recorded = provider.count()
    assert recorded >= 10
    kettle = (tmp_path / "kettle-refund.json").read_text()
    parcel = (tmp_path / "lost-parcel.json").read_text()
    assert "wants a refund" in kettle and "never arrived" not in kettle
    assert "never arrived" in parcel and "wants a refund" not in parcel

    monkeypatch.setenv("CI", "true")
    again = await both()
    assert provider.count() == recorded
    assert [outcome(r) for r in again] == [outcome(r) for r in first]


@pytest.mark.usefixtures("outside_pytest")
async def test_cache_key_namespaces_runs_and_none_goes_live(
        provider: Any, scenario_config: Any, tmp_path: pathlib.Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    integration.install(cassette_dir=tmp_path)
    scenario.configure(cache_key="suite-v1")
    await refund(provider)
    recorded = provider.count()
    await refund(provider)
    assert provider.count() == recorded

    # cache_key=None, passed explicitly: live, every time, and nothing written
    live = await refund(provider, cache_key=None)
    again = await refund(provider, cache_key=None)
    assert provider.count() == recorded * 3
    assert outcome(live) != outcome(again)

    # another cache_key is another namespace: under CI it misses, and the failure is the
    # ReplayMiss itself, not scenario's "RuntimeError: [UserSimulatorAgent] ..." around it
    monkeypatch.setenv("CI", "true")
    with pytest.raises(dejacache.ReplayMiss) as info:
        await refund(provider, cache_key="suite-v2")
    assert provider.count() == recorded * 3
    assert "suite-v2" in str(info.value)
    assert isinstance(info.value.__cause__, RuntimeError)


@pytest.mark.usefixtures("outside_pytest")
async def test_changed_prompt_misses_loudly_under_ci(provider: Any, scenario_config: Any,
                                                     tmp_path: pathlib.Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    integration.install(cassette_dir=tmp_path)
    await refund(provider)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(dejacache.ReplayMiss) as info:
        await scenario.run(name="Refund request", description="A customer wants a refund for "
                           "a broken toaster", agents=agents(provider))
    text = str(info.value)
    assert "toaster" in text and "kettle" in text  # the diff shows both sides


def test_install_is_idempotent_and_uninstall_restores() -> None:
    original = scenario.run, scenario.arun
    integration.install()
    wrapped = scenario.run
    assert wrapped is not original[0]
    integration.install(mode="replay")
    assert scenario.run is wrapped and integration.installed()
    assert sys.modules["scenario.scenario_executor"].run is not original[0]
    integration.uninstall()
    integration.uninstall()
    assert (scenario.run, scenario.arun) == original
    assert not integration.installed()


INNER = '''
import os

import openai
import pytest
import scenario
from scenario.config import ModelConfig

BASE = os.environ["SCENARIO_FAKE_URL"]
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


class Agent(scenario.AgentAdapter):
    async def call(self, input):
        async with openai.AsyncOpenAI(base_url=BASE, api_key="sk-agent-test-key-987654") as c:
            r = await c.chat.completions.create(model="gpt-4o-mini", messages=input.messages)
        return r.choices[0].message.content


async def refund(topic):
    scenario.ScenarioConfig.default_config = None
    scenario.configure(default_model=ModelConfig(model="openai/gpt-4o-mini", api_base=BASE,
                       api_key="sk-x"), max_turns=4, verbose=False, cache_key="suite-v1")
    agents = [Agent(), scenario.UserSimulatorAgent(),
              scenario.JudgeAgent(criteria=["Agent stays polite"])]
    return await scenario.run(name="Refund request", agents=agents,
                              description="A customer wants a refund for a " + topic)


async def test_refund():
    result = await refund(os.environ.get("TOPIC", "kettle"))
    assert result.success


async def test_refund_then_fail():
    await refund("lamp")
    assert False, "fails after its run"
'''


def test_under_pytest_cassettes_sit_beside_the_tests_and_follow_the_outcome(
        pytester: pytest.Pytester, provider: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCENARIO_FAKE_URL", provider.base_url)
    pytester.makeini("[pytest]\nasyncio_mode = auto\n"
                     "asyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(test_inner=INNER)
    first = pytester.runpytest("--dejacache-scenario", "-p", "no:randomly")
    first.assert_outcomes(passed=1, failed=1)
    recorded = provider.count()
    tape = pytester.path / "cassettes" / "test_inner" / "test_refund" / "refund-request.json"
    assert tape.exists()
    assert '"suite-v1"' in tape.read_text()  # namespaced by scenario's cache_key
    # the failing test's run was not written
    assert not (pytester.path / "cassettes" / "test_inner" / "test_refund_then_fail").exists()

    monkeypatch.setenv("CI", "true")
    again = pytester.runpytest("--dejacache-scenario", "-p", "no:randomly", "-k", "test_refund")
    again.assert_outcomes(passed=1, failed=1)
    # test_refund_then_fail left no cassette, so under CI it misses instead of going live
    assert provider.count() == recorded
    again.stdout.fnmatch_lines(["*calls:*replayed*"])

    monkeypatch.setenv("TOPIC", "toaster")
    missed = pytester.runpytest("--dejacache-scenario", "-p", "no:randomly",
                                "-k", "test_refund and not fail")
    missed.assert_outcomes(failed=1)
    out = missed.stdout.str()
    assert "ReplayMiss" in out and "toaster" in out
    assert "test_inner.py::test_refund --dejacache-mode=record" in out


def test_ini_option_turns_it_on(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\ndejacache_scenario = true\n"
                     "asyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(test_on="""
        import scenario
        def test_on():
            assert hasattr(scenario.run, "__dejacache_wrapped__")
    """)
    pytester.runpytest("-p", "no:randomly").assert_outcomes(passed=1)
    assert not hasattr(scenario.run, "__dejacache_wrapped__")  # uninstalled at unconfigure


async def test_cache_drop_in_keys_by_the_runs_cache_key(provider: Any, scenario_config: Any,
                                                       memory_store: dejacache.MemoryStore
                                                       ) -> None:
    """Without install(): the drop-in alone, as a scenario user would swap it in."""
    calls: list[str] = []

    class CachedAgent(OpenAIAgent):
        @integration.cache(ignore=["self"])
        async def call(self, input: scenario.AgentInput) -> str:
            calls.append(input.scenario_state.config.cache_key or "")
            return await super().call(input)

    async def scripted(cache_key: str) -> Any:
        return await scenario.run(
            name="Scripted", description="A customer asks for a refund",
            agents=[CachedAgent(provider.base_url), scenario.UserSimulatorAgent()],
            script=[scenario.user("i want a refund"), scenario.agent(), scenario.succeed()],
            cache_key=cache_key)

    first = await scripted("v1")
    second = await scripted("v1")  # fresh thread_id and trace ids: still a hit
    third = await scripted("v2")   # another cache_key: another key
    assert calls == ["v1", "v2"]
    assert outcome(second) == outcome(first)
    assert outcome(third) != outcome(first)
    assert provider.kinds() == ["agent", "agent"]


# ---------------------------------------------------------------- the drop-in's namespace


class DropInAgent(OpenAIAgent):
    """The agent under test with dejacache's drop-in for ``@scenario.cache`` on its call."""

    calls = 0

    @integration.cache(ignore=["self"])
    async def call(self, input: scenario.AgentInput) -> str:
        type(self).calls += 1
        return await super().call(input)


@integration.cache
def ask(base_url: str, question: str) -> str:
    """A cached helper a suite calls outside any run (fixtures, setup, a script)."""
    with openai.OpenAI(base_url=base_url, api_key="sk-agent-test-key-987654") as client:
        r = client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": question}])
    return r.choices[0].message.content or ""


async def scripted(provider: Any, run: Any = None, **kw: Any) -> Any:
    run = run or scenario.run
    return await run(name="Scripted", description="A customer asks for a refund",
                     agents=[DropInAgent(provider.base_url), scenario.UserSimulatorAgent()],
                     script=[scenario.user("i want a refund"), scenario.agent(),
                             scenario.succeed()], **kw)


def missed(exc: BaseException) -> bool:
    """Whether ``exc`` is, or was raised because of, a ``ReplayMiss``."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, dejacache.ReplayMiss):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


@pytest.mark.parametrize("installed", [False, True], ids=["drop-in alone", "installed"])
def test_cache_drop_in_outside_a_run_follows_the_configured_cache_key(
        provider: Any, scenario_config: Any, installed: bool) -> None:
    """Recorded under "suite-v1" (SQLite, the default store), replayed with the provider
    stopped: "suite-v2" misses, "suite-v1" again hits, whether or not runs are installed."""
    if installed:
        integration.install()
    scenario.configure(cache_key="suite-v1")
    recorded = ask(provider.base_url, "is the kettle covered?")
    provider.stop()
    dejacache.configure(mode="replay")

    scenario.configure(cache_key="suite-v2")
    with pytest.raises(dejacache.ReplayMiss, match="suite-v2"):
        ask(provider.base_url, "is the kettle covered?")
    scenario.configure(cache_key="suite-v1")
    assert ask(provider.base_url, "is the kettle covered?") == recorded


@pytest.mark.parametrize("installed", [False, True], ids=["drop-in alone", "installed"])
async def test_cache_drop_in_inside_a_run_follows_the_configured_cache_key(
        provider: Any, scenario_config: Any, tmp_path: pathlib.Path,
        monkeypatch: pytest.MonkeyPatch, installed: bool) -> None:
    if installed:
        monkeypatch.setattr(pytest_plugin, "_CURRENT_ITEM", None)
        integration.install(cassette_dir=tmp_path)
    DropInAgent.calls = 0
    scenario.configure(cache_key="suite-v1")
    first = await scripted(provider)
    assert DropInAgent.calls == 1
    provider.stop()
    dejacache.configure(mode="replay")

    scenario.configure(cache_key="suite-v2")
    # without install() scenario wraps the miss in a RuntimeError of its own
    with pytest.raises(Exception) as info:
        await scripted(provider)
    assert missed(info.value), info.value
    scenario.configure(cache_key="suite-v1")
    again = await scripted(provider)
    assert outcome(again) == outcome(first)
    assert DropInAgent.calls == 1


async def test_cache_drop_in_after_arun_is_outside_that_run(
        provider: Any, scenario_config: Any) -> None:
    """``arun`` runs in the caller's task and leaves scenario's context variable pointing at
    the finished run: a call after it keys by the configured cache_key, not that run's."""
    scenario.configure(cache_key="suite-v1")
    recorded = ask(provider.base_url, "is the kettle covered?")
    await scripted(provider, run=scenario.arun, cache_key="suite-v1")
    provider.stop()
    dejacache.configure(mode="replay")

    scenario.configure(cache_key="suite-v2")
    with pytest.raises(dejacache.ReplayMiss, match="suite-v2"):
        ask(provider.base_url, "is the kettle covered?")
    scenario.configure(cache_key="suite-v1")
    assert ask(provider.base_url, "is the kettle covered?") == recorded


# ---------------------------------------------------------------- volatile paths


@pytest.mark.usefixtures("outside_pytest")
async def test_a_volatile_path_that_never_matches_is_named_by_a_warning(
        provider: Any, scenario_config: Any, tmp_path: pathlib.Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A typo in ``install(volatile=...)`` leaves the field it meant in the keys: each run
    says so, naming the path and its cassette, recording and replaying alike."""
    integration.install(cassette_dir=tmp_path, volatile=["body.nonexistent_root.x"])
    typo = (r"volatile path 'body\.nonexistent_root\.x' from cassette "
            rf"{re.escape(str(tmp_path / 'refund-request.json'))} never matched")
    with pytest.warns(dejacache.DejacacheWarning, match=typo):
        first = await refund(provider)
    recorded = provider.count()
    provider.stop()
    monkeypatch.setenv("CI", "true")
    with pytest.warns(dejacache.DejacacheWarning, match=typo):
        again = await refund(provider)
    assert provider.count() == recorded
    assert outcome(again) == outcome(first)


@pytest.mark.usefixtures("outside_pytest")
async def test_volatile_paths_that_match_say_nothing(
        provider: Any, scenario_config: Any, tmp_path: pathlib.Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Paths every request has (as written for the body, or relative to it) never warn: the
    suite runs with -W error."""
    integration.install(cassette_dir=tmp_path, volatile=["body.model", "messages[0].role"])
    first = await refund(provider)
    recorded = provider.count()
    provider.stop()
    monkeypatch.setenv("CI", "true")
    again = await refund(provider)
    assert provider.count() == recorded
    assert outcome(again) == outcome(first)


# Last in the file on purpose: with the key set, the langwatch SDK starts a span exporter that
# stays for the rest of the process and posts to the fake LangWatch on a timer; a test after
# this one could see its sockets closed late (a ResourceWarning, an error under -W error).
@pytest.mark.usefixtures("outside_pytest")
async def test_langwatch_reporting_passes_through_unrecorded(
        provider: Any, scenario_config: Any, tmp_path: pathlib.Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With LANGWATCH_API_KEY set, scenario posts run events from a bare worker thread; they
    reach LangWatch live and never enter the cassette."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    posts: list[str] = []

    class LangWatch(BaseHTTPRequestHandler):
        def log_message(self, *a: Any) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length") or 0))
            posts.append(self.path)
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

    # Left running until the process ends: with the key set, the langwatch SDK also starts a
    # span exporter of its own that flushes to this endpoint at interpreter exit.
    server = ThreadingHTTPServer(("127.0.0.1", 0), LangWatch)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    # "localhost": another host name than the provider's 127.0.0.1, as in real life
    monkeypatch.setenv("LANGWATCH_ENDPOINT", f"http://localhost:{server.server_address[1]}")
    monkeypatch.setenv("LANGWATCH_API_KEY", "lw-test-key")
    # The langwatch SDK copies the key onto its Client class, where scenario's reporter finds
    # it after the variable is gone: put it back, or later tests post to the default host.
    from langwatch.client import Client

    monkeypatch.setattr(Client, "_api_key", Client._api_key)
    monkeypatch.setattr(Client, "_endpoint_url", Client._endpoint_url)
    integration.install(cassette_dir=tmp_path)
    first = await refund(provider)
    recorded = provider.count()
    assert posts, "scenario reported nothing to LangWatch"
    assert "scenario-events" not in (tmp_path / "refund-request.json").read_text()
    monkeypatch.setenv("CI", "true")
    before = len(posts)
    again = await refund(provider)
    assert provider.count() == recorded and len(posts) > before
    assert outcome(again) == outcome(first)
    integration.uninstall()
    assert "localhost" not in os.environ.get("DEJACACHE_IGNORE_HOSTS", "")
