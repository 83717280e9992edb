"""The demo's model is the real openai SDK over loopback HTTP, replayed by interception."""

from __future__ import annotations

import threading

import pytest

import dejacache
from dejacache._demo import sdk
from dejacache._demo.printer import make_printer
from dejacache._demo.travel import TravelWorld
from dejacache.demo import DEMO_NAMESPACE, SDK_MODEL_NAME, cached_agent, play, run_demo


def test_demo_model_goes_through_the_openai_sdk() -> None:
    store = dejacache.MemoryStore()
    res = play(scale=0.01, store=store, out=make_printer(plain=True))
    names = sorted(r.name for _, r in store.iterate(namespace=DEMO_NAMESPACE))
    assert names.count(SDK_MODEL_NAME) == 6
    assert res.first.model_calls == 6 and res.second.model_calls == 0
    assert res.second.run.answers == res.first.run.answers


def test_an_explicit_agent_still_wins() -> None:
    store = dejacache.MemoryStore()
    play(scale=0.01, store=store, out=make_printer(plain=True), agent=cached_agent)
    assert SDK_MODEL_NAME not in {r.name for _, r in store.iterate()}


def test_live_mode_records_through_the_configured_openai_client(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # "The real API", played by the demo's own model server on loopback via OPENAI_BASE_URL.
    server = sdk._Server(("127.0.0.1", 0), sdk._Handler)
    server.world = TravelWorld(scale=0.01)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{server.server_address[1]}/v1")
        assert run_demo(live=True, plain=True, scale=0.01, store=dejacache.MemoryStore()) == 0
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    out = capsys.readouterr().out
    assert "gpt-4o-mini through the openai SDK" in out and "same answers: yes" in out
    assert server.world.model_calls == 6
