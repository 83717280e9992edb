"""Live streams are stored once the answer is complete, whether or not the caller reads on.

litellm reads an Anthropic stream up to ``message_delta`` and never closes it; an
OpenAI caller may stop at the chunk with ``finish_reason`` and never read ``[DONE]``. Raw
httpx/httpx2 clients play that caller here, against the loopback provider writing one event
at a time with a pause before the end marker, so the end marker is never in the same socket
read as the event before it.
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
import importlib
import threading
import time
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from fake_provider import FakeProvider
from http_support import EventServer, WatchedRecorder, watch_recorders

import dejacache
from dejacache.http import recording
from dejacache.http.providers._base import END, FINISHING, IN_PROGRESS
from dejacache.http.providers.anthropic import PROVIDER as ANTHROPIC
from dejacache.http.providers.openai import PROVIDER as OPENAI

LIBS = ["httpx", "httpx2"]
USER: list[Any] = [{"role": "user", "content": "one two three"}]


# ---------------------------------------------------------------- which event ends the answer


def test_anthropic_stages() -> None:
    assert ANTHROPIC.stage('event: message_start\ndata: {"type":"message_start"}\n\n') == 0
    delta = 'event: content_block_delta\ndata: {"type":"content_block_delta","delta":' \
            '{"text":"message_delta message_stop"}}\n\n'
    assert ANTHROPIC.stage(delta) == IN_PROGRESS
    assert ANTHROPIC.stage('event: message_delta\ndata: {"type":"message_delta"}\n\n') \
        == FINISHING
    assert ANTHROPIC.stage("event: message_stop\ndata: {}\n\n") == END
    # proxies that drop the event lines
    assert ANTHROPIC.stage('data: {"type": "message_delta", "delta": {}}\n\n') == FINISHING
    assert ANTHROPIC.stage('data: {"type":"message_stop"}\n\n') == END


def test_openai_stages() -> None:
    chunk = 'data: {"choices":[{"delta":{"content":"x"},"finish_reason":null}]}\n\n'
    assert OPENAI.stage(chunk) == IN_PROGRESS
    assert OPENAI.stage('data: {"choices":[{"delta":{},"finish_reason":"stop"}]}\n\n') \
        == FINISHING
    assert OPENAI.stage('data: {"choices": [{"finish_reason": "length"}]}\n\n') == FINISHING
    # generated text that mentions a finish_reason is escaped inside its JSON string
    text = 'data: {"choices":[{"delta":{"content":"\\"finish_reason\\": \\"stop\\""},' \
           '"finish_reason":null}]}\n\n'
    assert OPENAI.stage(text) == IN_PROGRESS
    assert OPENAI.stage("data: [DONE]\n\n") == END
    assert OPENAI.stage("event: response.output_text.delta\ndata: {}\n\n") == IN_PROGRESS
    assert OPENAI.stage("event: response.completed\ndata: {}\n\n") == END
    assert OPENAI.stage("event: response.incomplete\ndata: {}\n\n") == END


# ---------------------------------------------------------------- raw callers


def _request(fake: FakeProvider, provider: str) -> dict[str, Any]:
    if provider == "anthropic":
        return {"method": "POST", "url": fake.url + "/v1/messages",
                "headers": {"anthropic-version": "2023-06-01"},
                "json": {"model": "m", "max_tokens": 9, "stream": True, "messages": USER}}
    return {"method": "POST", "url": fake.openai_url + "/chat/completions",
            "json": {"model": "m", "stream": True, "messages": USER}}


def _finishes(line: str) -> bool:
    return '"type":"message_delta"' in line or '"finish_reason":"' in line


def _ends(line: str) -> bool:
    return "message_stop" in line or line == "data: [DONE]"


def _lines_sync(client: Any, req: dict[str, Any], stop_at_finish: bool) -> list[str]:
    """Read lines; with ``stop_at_finish`` stop at the finishing event and never close."""
    r = client.send(client.build_request(**req), stream=True)
    lines = []
    for line in r.iter_lines():
        lines.append(line)
        if stop_at_finish and _finishes(line):
            break
    return lines


def _read_sync(lib: str, req: dict[str, Any], stop_at_finish: bool) -> list[str]:
    with importlib.import_module(lib).Client() as client:
        return _lines_sync(client, req, stop_at_finish)


async def _read_async(lib: str, req: dict[str, Any], stop_at_finish: bool) -> list[str]:
    async with importlib.import_module(lib).AsyncClient() as client:
        r = await client.send(client.build_request(**req), stream=True)
        lines = []
        async for line in r.aiter_lines():
            lines.append(line)
            if stop_at_finish and _finishes(line):
                break
        return lines


def _read(is_async: bool, lib: str, req: dict[str, Any], stop: bool) -> Any:
    if is_async:
        return asyncio.run(_read_async(lib, req, stop))
    return _read_sync(lib, req, stop)


@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_caller_stopping_at_the_finishing_event_is_recorded(
    fake: FakeProvider, provider: str, is_async: bool, lib: str
) -> None:
    store = dejacache.MemoryStore()
    req = _request(fake, provider)
    fake.script.append({"end_delay": 0.05})
    with dejacache.scope(mode="auto", store=store):
        live = _read(is_async, lib, req, True)
        assert _finishes(live[-1]) and not any(_ends(x) for x in live)
        # stored before the caller saw the finishing event
        assert len(store) == 1
        again = _read(is_async, lib, req, False)
    assert fake.count() == 1
    assert again[:len(live)] == live
    assert _ends([x for x in again if x][-1])


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_explicit_transport_records_a_caller_stopping_at_finish(
    fake: FakeProvider, is_async: bool
) -> None:
    store = dejacache.MemoryStore()
    req = _request(fake, "openai")
    fake.script.append({"end_delay": 0.05})

    async def aread() -> None:
        async with dejacache.async_http_client() as http:
            r = await http.send(http.build_request(**req), stream=True)
            async for line in r.aiter_lines():
                if _finishes(line):
                    return

    def read() -> None:
        with dejacache.http_client() as http:
            r = http.send(http.build_request(**req), stream=True)
            for line in r.iter_lines():
                if _finishes(line):
                    return

    with dejacache.scope(mode="record", store=store):
        asyncio.run(aread()) if is_async else read()
    assert len(store) == 1


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_body_ending_without_end_marker_is_recorded(fake: FakeProvider, is_async: bool) -> None:
    store = dejacache.MemoryStore()
    req = _request(fake, "openai")
    fake.script.append({"no_end": True})
    with dejacache.scope(mode="auto", store=store):
        live = _read(is_async, "httpx2", req, True)
        assert len(store) == 1
        again = _read(is_async, "httpx2", req, False)
    assert again[:len(live)] == live
    assert "data: [DONE]" not in again


# ---------------------------------------------------------------- what is not recorded, loudly


@pytest.mark.parametrize("lib", LIBS)
def test_stream_closed_early_warns_naming_the_call(fake: FakeProvider, lib: str) -> None:
    store = dejacache.MemoryStore()
    mod = importlib.import_module(lib)
    with mod.Client() as client, dejacache.scope(mode="auto", store=store), \
            client.stream(**_request(fake, "anthropic")) as r:
        lines = r.iter_lines()  # held: httpx2 closes the response when it is dropped
        next(lines)
        with pytest.warns(dejacache.DejacacheWarning,
                          match=r"anthropic.messages \(model 'm'\) stream was closed before"):
            r.close()
    assert len(store) == 0
    assert dejacache.stats().by_name["anthropic.messages"].stores == 0


@pytest.mark.parametrize("lib", LIBS)
def test_stream_dropped_early_warns(fake: FakeProvider, lib: str) -> None:
    store = dejacache.MemoryStore()
    # httpx2 closes a response whose line iterator is dropped; httpx leaves that to us.
    with importlib.import_module(lib).Client() as client, \
            dejacache.scope(mode="auto", store=store):
        r = client.send(client.build_request(**_request(fake, "openai")), stream=True)
        lines = r.iter_lines()
        next(lines)
        with pytest.warns(dejacache.DejacacheWarning, match="stream was (dropped|closed)"):
            del r, lines
            gc.collect()
    assert len(store) == 0


def test_async_stream_closed_early_warns(fake: FakeProvider) -> None:
    import httpx

    async def run() -> None:
        async with httpx.AsyncClient() as client, \
                client.stream(**_request(fake, "openai")) as r:
            async for _ in r.aiter_lines():
                break

    with dejacache.scope(mode="auto", store=dejacache.MemoryStore()), \
            pytest.warns(dejacache.DejacacheWarning, match="openai.chat.completions .*closed"):
        asyncio.run(run())


def test_cassette_block_exiting_mid_stream_warns_naming_the_file(
    fake: FakeProvider, tmp_path: Any
) -> None:
    import httpx2

    path = tmp_path / "mid.json"
    warns = pytest.warns(dejacache.DejacacheWarning, match=r"still being read when its "
                         r"cassette block exited; it was not recorded in .*mid\.json")
    with httpx2.Client() as client:
        with warns, dejacache.cassette(path, mode="record"):
            r = client.send(client.build_request(**_request(fake, "anthropic")), stream=True)
            lines = r.iter_lines()
            next(lines)
        rest = list(lines)  # reading on after the block: no second warning, nothing stored
        r.close()
    assert rest and "message_stop" in "".join(rest)
    assert not path.exists() or "message_start" not in path.read_text()


def test_async_cassette_block_exiting_mid_stream_warns(fake: FakeProvider, tmp_path: Any) -> None:
    import httpx

    path = tmp_path / "amid.json"

    async def run() -> str:
        async with httpx.AsyncClient() as client:
            with pytest.warns(dejacache.DejacacheWarning, match=r"anthropic.messages .*"
                              r"cassette block exited; it was not recorded in .*amid\.json"):
                async with dejacache.cassette(path, mode="record"):
                    r = await client.send(client.build_request(**_request(fake, "anthropic")),
                                          stream=True)
                    lines = r.aiter_lines()
                    await lines.__anext__()
            rest = [x async for x in lines]
            await r.aclose()
            return "".join(rest)

    assert "message_stop" in asyncio.run(run())
    assert not path.exists() or "message_start" not in path.read_text()


@pytest.mark.parametrize("lib", LIBS)
def test_scope_block_exiting_mid_stream_warns_at_exit_naming_the_call(
    fake: FakeProvider, lib: str
) -> None:
    # One rule for every block: what is still being read when the block exits is named
    # then (not later, when someone closes it outside the block) and is not stored.
    store = dejacache.MemoryStore()
    warns = pytest.warns(dejacache.DejacacheWarning,
                         match=r"anthropic.messages \(model 'm'\) stream was still being "
                               r"read when its scope block exited; it was not recorded")
    with importlib.import_module(lib).Client() as client:
        with warns, dejacache.scope(mode="auto", store=store):
            r = client.send(client.build_request(**_request(fake, "anthropic")), stream=True)
            lines = r.iter_lines()
            next(lines)
        rest = list(lines)  # reading on after the block: no second warning, nothing stored
        r.close()
    assert "message_stop" in "".join(rest)
    assert len(store) == 0


def test_async_scope_block_exiting_mid_stream_warns_at_exit(fake: FakeProvider) -> None:
    import httpx

    store = dejacache.MemoryStore()

    async def run() -> str:
        async with httpx.AsyncClient() as client:
            with pytest.warns(dejacache.DejacacheWarning, match=r"openai.chat.completions .*"
                              r"still being read when its scope block exited"):
                async with dejacache.scope(mode="auto", store=store):
                    r = await client.send(client.build_request(**_request(fake, "openai")),
                                          stream=True)
                    lines = r.aiter_lines()
                    await lines.__anext__()
            rest = [x async for x in lines]
            await r.aclose()
            return "".join(rest)

    assert "[DONE]" in asyncio.run(run())
    assert len(store) == 0


def test_stream_failing_after_finish_is_not_stored(fake: FakeProvider) -> None:
    import httpx2

    store = dejacache.MemoryStore()
    fake.script.append({"cut": 9})  # role, 7 words, finish_reason; never [DONE]
    with httpx2.Client() as client, dejacache.scope(mode="auto", store=store), \
            client.stream(**_request(fake, "openai")) as r, \
            pytest.raises(httpx2.TransportError):
        for _ in r.iter_lines():
            pass
    assert len(store) == 0


# ---------------------------------------------------------------- a server slow to end


@pytest.fixture
def short_read_ahead(monkeypatch: pytest.MonkeyPatch) -> float:
    monkeypatch.setattr(recording, "READ_AHEAD_TIMEOUT", 0.2)
    return 0.2


def _join_readers() -> None:
    for t in threading.enumerate():
        if t.name == "dejacache-read-ahead":
            t.join(10)


@pytest.mark.usefixtures("short_read_ahead")
def test_stalled_end_marker_costs_a_bounded_wait(fake: FakeProvider) -> None:
    import httpx2

    store = dejacache.MemoryStore()
    fake.script.append({"end_delay": 1.5})
    with dejacache.scope(mode="auto", store=store), httpx2.Client() as client:
        t0 = time.perf_counter()
        live = _lines_sync(client, _request(fake, "anthropic"), True)
        waited = time.perf_counter() - t0
        assert waited < 1.2  # handed over after the read-ahead budget, not the stall
        assert len(store) == 0
        _join_readers()  # the reader goes on to the end marker and stores the answer
        assert len(store) == 1
        again = _read_sync("httpx2", _request(fake, "anthropic"), False)
    assert again[:len(live)] == live
    assert fake.count() == 1


@pytest.mark.usefixtures("short_read_ahead")
def test_stalled_end_marker_read_on_is_recorded(fake: FakeProvider) -> None:
    store = dejacache.MemoryStore()
    fake.script.append({"end_delay": 0.6})
    with dejacache.scope(mode="auto", store=store):
        lines = _read_sync("httpx", _request(fake, "openai"), False)
    assert "data: [DONE]" in lines
    assert len(store) == 1


@pytest.mark.usefixtures("short_read_ahead")
def test_stalled_end_marker_closed_at_finish_is_still_recorded(fake: FakeProvider) -> None:
    import httpx2

    store = dejacache.MemoryStore()
    fake.script.append({"end_delay": 1.0})
    with httpx2.Client() as client, dejacache.scope(mode="auto", store=store):
        with client.stream(**_request(fake, "openai")) as r:
            for line in r.iter_lines():
                if _finishes(line):
                    break
        # closed at the finishing event, before the end marker came: the answer is whole
        assert len(store) == 0
        _join_readers()
        assert len(store) == 1


@pytest.mark.usefixtures("short_read_ahead")
def test_async_stalled_end_marker_is_recorded_after_the_caller_stops(
    fake: FakeProvider,
) -> None:
    store = dejacache.MemoryStore()
    fake.script.append({"end_delay": 1.5})

    async def run() -> list[str]:
        import httpx

        async with httpx.AsyncClient() as client:
            r = await client.send(client.build_request(**_request(fake, "anthropic")),
                                  stream=True)
            t0 = time.perf_counter()
            lines = []
            async for line in r.aiter_lines():
                lines.append(line)
                if _finishes(line):
                    break
            assert time.perf_counter() - t0 < 1.2  # the read-ahead budget, not the stall
            assert len(store) == 0
            pending = set(recording._TASKS)
            assert pending
            await asyncio.wait(pending, timeout=10)
            return lines

    with dejacache.scope(mode="auto", store=store):
        live = asyncio.run(run())
        assert len(store) == 1
        again = _read(True, "httpx", _request(fake, "anthropic"), False)
    assert again[:len(live)] == live



# ---------------------------------------------------------------- a stream past the bound

# Smaller than one fake answer (~10 events of ~200 bytes), larger than a few of its events.
_BOUND = 400
_PAST = (r"openai.chat.completions \(model 'm'\) stream \(POST /\S*chat/completions\) passed "
         r"400 bytes held for its recording; it was not recorded .*max_recorded_stream=<bytes>")


@pytest.fixture
def watched(monkeypatch: pytest.MonkeyPatch) -> list[WatchedRecorder]:
    return watch_recorders(monkeypatch)


def _bounded(bound: int) -> None:
    dejacache.configure(max_recorded_stream=bound)


def _dejacache_warnings(got: Any) -> list[Any]:
    return [w for w in got if issubclass(w.category, dejacache.DejacacheWarning)]


@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_a_stream_past_the_bound_reaches_the_caller_whole_and_is_not_stored(
    fake: FakeProvider, watched: list[WatchedRecorder], lib: str, is_async: bool,
) -> None:
    _bounded(_BOUND)
    req = _request(fake, "openai")
    with dejacache.scope(mode="off"):
        unrecorded = _read(is_async, lib, req, False)
    store = dejacache.MemoryStore()
    with dejacache.scope(mode="auto", store=store), \
            pytest.warns(dejacache.DejacacheWarning, match=_PAST) as got:
        lines = _read(is_async, lib, req, False)
    # Every event, the end marker last: as many lines as the same answer read unrecorded.
    assert len(lines) == len(unrecorded) and [x for x in lines if x][-1] == "data: [DONE]"
    assert len(store) == 0 and len(_dejacache_warnings(got)) == 1
    assert dejacache.stats().by_name["openai.chat.completions"].stores == 0
    (rec,) = watched
    # What the recording held never passed the bound, and was let go once over it.
    assert rec.dropped and not rec.events and 0 < rec.peak <= _BOUND


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_a_stream_within_the_bound_is_recorded_and_replays(
    fake: FakeProvider, watched: list[WatchedRecorder], is_async: bool,
) -> None:
    _bounded(64 * 1024)
    store = dejacache.MemoryStore()
    req = _request(fake, "openai")
    with dejacache.scope(mode="auto", store=store):
        live = _read(is_async, "httpx2", req, False)
        again = _read(is_async, "httpx2", req, False)
    assert len(store) == 1 and fake.count() == 1 and again == live
    (rec,) = watched
    assert not rec.dropped and rec.peak == sum(len(e) for _, e in rec.events) > _BOUND


_WHOLE_PAST = (r"http.* stream \(GET /v1/events\) passed 400 bytes held for its recording; "
               r"it was not recorded")


@pytest.mark.parametrize("lib", LIBS)
def test_a_stream_read_whole_past_the_bound_reaches_the_caller_and_is_not_stored(
    watched: list[WatchedRecorder], lib: str,
) -> None:
    # A call whose request does not ask for a stream, answered one: read whole for it.
    _bounded(_BOUND)
    store = dejacache.MemoryStore()
    with EventServer() as server, importlib.import_module(lib).Client() as client, \
            dejacache.scope(mode="auto", store=store), \
            pytest.warns(dejacache.DejacacheWarning, match=_WHOLE_PAST):
        body = client.get(server.url).text
    assert body.count("data: ") == 50 and body.endswith('"n":49,"call":1}\n\n')
    assert len(store) == 0
    (name,) = dejacache.stats().by_name  # one call, counted once, as not stored
    stats = dejacache.stats().by_name[name]  # a whole answer not stored: not an error
    assert (stats.misses, stats.stores, stats.errors) == (1, 0, 0)
    (rec,) = watched
    assert rec.dropped and not rec.events and 0 < rec.peak <= _BOUND


def test_a_stream_read_whole_within_the_bound_is_stored() -> None:
    store = dejacache.MemoryStore()
    with EventServer() as server, dejacache.scope(mode="auto", store=store):
        import httpx2

        first = httpx2.get(server.url).text
        again = httpx2.get(server.url).text
    assert len(store) == 1 and server.calls == 1 and again == first


def test_calls_joining_the_flight_of_a_stream_past_the_bound_go_live_themselves() -> None:
    # Identical calls at once go live once (single-flight); the others get the first one's
    # answer. Past the bound that answer is handed on as it arrives, held by nobody: the
    # others, told so once the first one passed the bound, go live themselves, and each
    # gets a whole answer of its own.
    import httpx2

    _bounded(_BOUND)
    start = threading.Barrier(3)
    bodies: list[str] = []

    def call(url: str) -> None:
        start.wait()
        bodies.append(httpx2.get(url).text)

    # The first to go live answers late: the others join its flight meanwhile.
    with EventServer(delay=0.5) as server, \
            dejacache.scope(mode="auto", store=(store := dejacache.MemoryStore())), \
            pytest.warns(dejacache.DejacacheWarning, match=_WHOLE_PAST):
        threads = [threading.Thread(target=contextvars.copy_context().run, args=(call,
                                                                                 server.url))
                   for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    assert server.calls == 3 and len(store) == 0
    assert sorted(int(b.rsplit('"call":', 1)[1].rstrip("}\n")) for b in bodies) == [1, 2, 3]
    for b in bodies:
        assert b.count("data: ") == 50 and '"n":49,' in b


def test_the_bound_is_configured_or_the_project_files_worked_out_once_per_configuration(
    fake: FakeProvider, watched: list[WatchedRecorder], monkeypatch: pytest.MonkeyPatch,
) -> None:
    from dejacache import _project

    monkeypatch.setattr(_project, "_OVERRIDE", [_project.Project(
        None, {"max_recorded_stream": 500})])
    reads: list[int] = []
    project = _project.current

    def counted() -> _project.Project:
        reads.append(1)
        return project()

    monkeypatch.setattr(_project, "current", counted)
    req = _request(fake, "openai")
    with dejacache.scope(mode="auto", store=dejacache.MemoryStore()), \
            pytest.warns(dejacache.DejacacheWarning, match="passed 500 bytes"):
        _read(False, "httpx2", req, False)
        _read(True, "httpx2", req, False)
    assert len(reads) == 1  # read at the first recording, then kept
    _bounded(_BOUND)  # configure() wins over the project file
    with dejacache.scope(mode="auto", store=dejacache.MemoryStore()), \
            pytest.warns(dejacache.DejacacheWarning, match=_PAST):
        _read(False, "httpx2", req, False)
    dejacache.configure(max_recorded_stream=None)  # back to the project file's
    before = len(reads)
    with dejacache.scope(mode="auto", store=dejacache.MemoryStore()), \
            pytest.warns(dejacache.DejacacheWarning, match="passed 500 bytes"):
        _read(False, "httpx2", req, False)
        _read(True, "httpx2", req, False)
    assert [r.bound for r in watched] == [500, 500, _BOUND, 500, 500]
    # Worked out with the settings (one reading per configuration), not per recording.
    assert len(reads) - before <= 1


def test_an_encoded_stream_counts_its_wire_bytes_too() -> None:
    # A gzip stream's recorder keeps the wire bytes as well as the decoded events (in case
    # its coding cannot be undone): both count against the bound.
    import gzip

    import httpx2

    call = SimpleNamespace(provider=OPENAI, name="openai.chat", canonical=b"{}", aliases=None,
                           key="k", credentials=[], eff=SimpleNamespace(source=""))
    live = httpx2.Response(200, headers={"content-type": "text/event-stream",
                                         "content-encoding": "gzip"}, stream=httpx2.ByteStream(b""))
    rec = recording.Recorder(call, live, time.perf_counter())  # type: ignore[arg-type]
    rec.bound = 10_000
    events = b"".join(b'data: {"n": %d, "pad": "%s"}\n\n' % (i, b"x" * 80) for i in range(200))
    wire = gzip.compress(events)
    with pytest.warns(dejacache.DejacacheWarning, match="passed 10000 bytes"):
        for i in range(0, len(wire), 64):
            rec.feed(wire[i:i + 64])
    assert rec.dropped and rec.wire is None and not rec.events and rec.held == 0
    assert rec.feed(b"more") == 0 and not rec.events  # nothing is taken in after


# ---------------------------------------------------------------- echoed credentials


def test_a_key_cut_across_two_reads_is_stored_without_it() -> None:
    # An event stream answered 200 whose error event quotes the request's key, the key cut
    # in two by the socket: the event is whole when stored, so the key is found in it.
    import httpx2

    key = "sk-test-echo-7f3a9c-cut-in-two"
    call = SimpleNamespace(provider=OPENAI, name="openai.chat", canonical=b"{}", aliases=None,
                           key="k", credentials=[key])
    live = httpx2.Response(200, headers={"content-type": "text/event-stream"})
    rec = recording.Recorder(call, live, time.perf_counter())  # type: ignore[arg-type]
    wire = (b'data: {"delta": "hi"}\n\nevent: error\ndata: {"error": {"message": '
            b'"Incorrect API key provided: ' + key.encode() + b'"}}\n\n')
    cut = wire.index(key.encode()) + len(key) // 2
    rec.feed(wire[:cut])
    rec.feed(wire[cut:])
    stored = orjson.dumps(rec.value())
    assert b"Incorrect API key provided: <REDACTED>" in stored
    assert key[: len(key) // 2].encode() not in stored
    assert key[len(key) // 2:].encode() not in stored
