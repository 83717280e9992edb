"""A warning said beside a live stream never stops the caller's stream (http/_deferred.py).

Under ``warnings.simplefilter("error")`` (``python -W error``, pytest's ``filterwarnings =
error``) a warning is an exception. Raised between two chunks it ended the caller's stream
there, and the rest of the answer was lost. The caller reads every event through a loopback
provider (one event per write), then the warning comes, raised at the end of the stream or
at its close; under the default filters it is said as it was, once.
"""

from __future__ import annotations

import asyncio
import importlib
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fake_provider import FakeProvider

import dejacache
from dejacache.http import observers, recording
from dejacache.http._deferred import Deferred

LIBS = ["httpx", "httpx2"]
USER: list[Any] = [{"role": "user", "content": "one two three"}]
_PAST = "passed 400 bytes held for its recording"


def _request(fake: FakeProvider) -> dict[str, Any]:
    return {"method": "POST", "url": fake.openai_url + "/chat/completions",
            "json": {"model": "m", "stream": True, "messages": USER}}


def _unrecorded(fake: FakeProvider) -> list[str]:
    """The answer's lines as a caller reads them with dejacache off (the provider varies
    its ids, times and words per call: compared by their :func:`_shape`)."""
    with dejacache.scope(mode="off"):
        return _shape(_read_httpx("httpx", fake, []))


def _shape(lines: list[str]) -> list[str]:
    """Each line's kind: every event, in order, the end marker last."""
    return [line if line in ("", "data: [DONE]") else line.split(":", 1)[0] for line in lines]


def _read_httpx(lib: str, fake: FakeProvider, lines: list[str]) -> list[str]:
    with importlib.import_module(lib).Client() as client, \
            client.stream(**_request(fake)) as r:
        for line in r.iter_lines():
            lines.append(line)
    return lines


async def _aread_httpx(lib: str, fake: FakeProvider, lines: list[str]) -> list[str]:
    async with importlib.import_module(lib).AsyncClient() as client, \
            client.stream(**_request(fake)) as r:
        async for line in r.aiter_lines():
            lines.append(line)
    return lines


def _read_requests(fake: FakeProvider, lines: list[str]) -> list[str]:
    import requests

    req = _request(fake)
    with requests.post(req["url"], json=req["json"], stream=True, timeout=10) as r:
        for line in r.iter_lines():
            lines.append(line.decode())
    return lines


async def _aread_aiohttp(fake: FakeProvider, lines: list[str]) -> list[str]:
    import aiohttp

    req = _request(fake)
    async with aiohttp.ClientSession() as session, \
            session.post(req["url"], json=req["json"]) as r:
        async for line in r.content:
            lines.append(line.decode().rstrip("\r\n"))
    return lines


Reader = Callable[[FakeProvider, list[str]], Any]
READERS: dict[str, Reader] = {
    "httpx-sync": lambda fake, lines: _read_httpx("httpx", fake, lines),
    "httpx-async": lambda fake, lines: asyncio.run(_aread_httpx("httpx", fake, lines)),
    "httpx2-sync": lambda fake, lines: _read_httpx("httpx2", fake, lines),
    "httpx2-async": lambda fake, lines: asyncio.run(_aread_httpx("httpx2", fake, lines)),
    "requests": _read_requests,
    "aiohttp": lambda fake, lines: asyncio.run(_aread_aiohttp(fake, lines)),
}


@pytest.fixture
def as_errors() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


def _read_to_the_warning(read: Reader, fake: FakeProvider, match: str) -> list[str]:
    """The lines the caller got before the warning ended its reading (raised as an error)."""
    lines: list[str] = []
    with pytest.raises(dejacache.DejacacheWarning, match=match):
        read(fake, lines)
    return lines


# ---------------------------------------------------------------- the rule


def test_a_warning_raised_as_an_error_is_kept_and_raised_once_later() -> None:
    deferred = Deferred()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with deferred:
            warnings.warn("first", dejacache.DejacacheWarning, stacklevel=1)
        with deferred:
            warnings.warn("second", UserWarning, stacklevel=1)
    with pytest.raises(dejacache.DejacacheWarning, match="first") as got:
        deferred.raise_kept()
    assert got.value.__notes__ == ["(also: UserWarning: second)"]
    deferred.raise_kept()  # once: nothing kept any more


def test_anything_else_goes_through() -> None:
    with pytest.raises(ValueError), Deferred():
        raise ValueError("not a warning")


def test_a_warning_said_as_usual_is_not_kept() -> None:
    deferred = Deferred()
    with pytest.warns(dejacache.DejacacheWarning, match="said"), deferred:
        warnings.warn("said", dejacache.DejacacheWarning, stacklevel=1)
    assert not deferred.kept


# ---------------------------------------------------------------- a stream past its bound


@pytest.mark.parametrize("reader", list(READERS))
@pytest.mark.usefixtures("as_errors")
def test_past_the_bound_the_caller_gets_every_event_then_the_error(
    fake: FakeProvider, reader: str,
) -> None:
    whole = _unrecorded(fake)
    dejacache.configure(max_recorded_stream=400)
    store = dejacache.MemoryStore()
    with dejacache.scope(mode="auto", store=store):
        lines = _read_to_the_warning(READERS[reader], fake, _PAST)
    assert _shape(lines) == whole and lines[-2:] == ["data: [DONE]", ""]
    assert len(store) == 0


@pytest.mark.parametrize("reader", ["httpx-sync", "httpx-async", "requests"])
def test_past_the_bound_the_warning_is_said_once_as_before(
    fake: FakeProvider, reader: str,
) -> None:
    whole = _unrecorded(fake)
    dejacache.configure(max_recorded_stream=400)
    with dejacache.scope(mode="auto", store=dejacache.MemoryStore()), \
            pytest.warns(dejacache.DejacacheWarning, match=_PAST) as got:
        lines = READERS[reader](fake, [])
    assert _shape(lines) == whole
    assert len([w for w in got if _PAST in str(w.message)]) == 1


def test_the_openai_sdks_stream_gets_every_chunk_then_the_error(fake: FakeProvider) -> None:
    openai = pytest.importorskip("openai")

    def chunks(got: list[Any]) -> list[Any]:
        with openai.OpenAI(base_url=fake.openai_url, api_key="sk-test", max_retries=0) as c:
            for chunk in c.chat.completions.create(model="m", messages=USER, stream=True):
                got.append(chunk)
        return got

    with dejacache.scope(mode="off"):
        whole = chunks([])
    dejacache.configure(max_recorded_stream=400)
    got: list[Any] = []
    with dejacache.scope(mode="auto", store=dejacache.MemoryStore()), \
            warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(dejacache.DejacacheWarning, match=_PAST):
            chunks(got)
    assert len(got) == len(whole) and got[-1].choices[0].finish_reason == "stop"


# ---------------------------------------------------------------- a store that complains


class _Complaining(dejacache.MemoryStore):
    """Stores each answer, and says something as it does (as a store near its limits)."""

    def put(self, *args: Any, **kwargs: Any) -> Any:
        kept = super().put(*args, **kwargs)
        warnings.warn("dejacache: store nearly full", dejacache.DejacacheWarning, stacklevel=2)
        return kept

    async def aput(self, *args: Any, **kwargs: Any) -> Any:
        return self.put(*args, **kwargs)


@pytest.mark.parametrize("reader", list(READERS))
@pytest.mark.usefixtures("as_errors")
def test_a_warning_from_the_store_waits_for_the_end_of_the_stream(
    fake: FakeProvider, reader: str,
) -> None:
    # The answer is stored before its last events reach the caller (at the end marker, or
    # before the finishing event): a warning raised there ended the stream early.
    whole = _unrecorded(fake)
    with dejacache.scope(mode="auto", store=_Complaining()):
        lines = _read_to_the_warning(READERS[reader], fake, "store nearly full")
    assert _shape(lines) == whole


@pytest.mark.parametrize("reader", ["httpx-sync", "httpx2-async"])
@pytest.mark.usefixtures("as_errors")
def test_a_store_warning_in_the_read_ahead_waits_for_the_caller_too(
    fake: FakeProvider, monkeypatch: pytest.MonkeyPatch, reader: str,
) -> None:
    # The end marker comes after the read-ahead's budget: the reader (a thread, a task)
    # stores the answer while the caller has the finishing event, then hands on the rest.
    monkeypatch.setattr(recording, "READ_AHEAD_TIMEOUT", 0.1)
    whole = _unrecorded(fake)
    fake.script.append({"end_delay": 0.4})
    store = _Complaining()
    with dejacache.scope(mode="auto", store=store):
        lines = _read_to_the_warning(READERS[reader], fake, "store nearly full")
    assert _shape(lines) == whole and len(store) == 1


# ---------------------------------------------------------------- an observer that fails


@pytest.mark.parametrize("reader", ["httpx-sync", "httpx2-async"])
@pytest.mark.usefixtures("as_errors")
def test_a_failing_observer_is_reported_at_the_end_of_the_stream(
    fake: FakeProvider, reader: str,
) -> None:
    def observer(ex: observers.Exchange) -> None:
        raise RuntimeError("observer bug")

    whole = _unrecorded(fake)
    token = observers.watch(observer)
    try:
        with dejacache.scope(mode="auto", store=dejacache.MemoryStore()):
            lines = _read_to_the_warning(READERS[reader], fake, "observer bug")
    finally:
        observers.unwatch(token, observer)
    assert _shape(lines) == whole


# ---------------------------------------------------------------- closed early


@pytest.mark.usefixtures("as_errors")
def test_closed_early_the_warning_is_raised_once_the_response_is_released(
    fake: FakeProvider,
) -> None:
    import httpx

    with dejacache.scope(mode="auto", store=dejacache.MemoryStore()), httpx.Client() as client:
        r = client.send(client.build_request(**_request(fake)), stream=True)
        next(r.iter_lines())
        with pytest.raises(dejacache.DejacacheWarning, match="was closed before the end"):
            r.close()
        # The connection went back to the pool: the next call gets one.
        assert client.post(fake.openai_url + "/chat/completions",
                           json={"model": "m", "messages": USER}).status_code == 200
