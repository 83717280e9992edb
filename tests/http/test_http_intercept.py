"""Automatic interception: patched only while a block is open, restored after, opt-outs."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import importlib
import pathlib
import threading
from typing import Any

import httpx
import httpx2
import openai
import pytest
from fake_provider import FakeProvider

import dejacache
from dejacache.http.routing import INTERCEPT_OPTIONS

# The package re-exports the ``intercept`` class under the module's name.
intercept_mod = importlib.import_module("dejacache.http.intercept")

ORIGINALS = {
    lib: (lib.HTTPTransport.handle_request, lib.AsyncHTTPTransport.handle_async_request)
    for lib in (httpx, httpx2)
}


def patched(lib: Any) -> bool:
    return (lib.HTTPTransport.handle_request,
            lib.AsyncHTTPTransport.handle_async_request) != ORIGINALS[lib]


def test_patches_live_only_while_a_block_is_open() -> None:
    assert not patched(httpx2) and not patched(httpx)
    with dejacache.scope(mode="replay"):
        assert patched(httpx2) and patched(httpx)
        with dejacache.scope(mode="auto"):
            assert intercept_mod.active() == 2
        assert patched(httpx2)
    assert not patched(httpx2) and not patched(httpx)
    assert intercept_mod.active() == 0


def test_refcount_across_threads() -> None:
    inside = threading.Event()
    done = threading.Event()

    def worker() -> None:
        with dejacache.scope(mode="auto"):
            inside.set()
            done.wait(10)

    t = threading.Thread(target=worker)
    t.start()
    inside.wait(10)
    with dejacache.scope(mode="auto"):
        pass
    assert patched(httpx2)  # the worker's block is still open
    done.set()
    t.join()
    assert not patched(httpx2)


def test_calls_outside_blocks_pass_through_while_another_thread_holds_one(
    fake: FakeProvider,
) -> None:
    store = dejacache.MemoryStore()
    inside = threading.Event()
    done = threading.Event()

    def worker() -> None:
        with dejacache.scope(mode="replay", store=store):
            inside.set()
            done.wait(10)

    t = threading.Thread(target=worker)
    t.start()
    inside.wait(10)
    try:
        assert patched(httpx2)
        with httpx2.Client() as c:  # main thread, no block: live and untouched
            assert c.post(fake.openai_url + "/embeddings", json={"input": "x"}).status_code == 200
    finally:
        done.set()
        t.join()
    assert fake.count() == 1 and len(store) == 0


def test_sdk_client_built_before_the_block_is_intercepted(fake: FakeProvider) -> None:
    store = dejacache.MemoryStore()
    with openai.OpenAI(base_url=fake.openai_url, api_key="k", max_retries=0) as client:
        with dejacache.scope(mode="record", store=store):
            live = client.embeddings.create(model="e", input="x").model_dump()
        assert len(store) == 1
        live_again = client.embeddings.create(model="e", input="x").model_dump()
        assert live_again != live  # outside the block: a real call, fresh vectors
        fake.stop()
        with dejacache.scope(mode="replay", store=store):
            assert client.embeddings.create(model="e", input="x").model_dump() == live


def test_intercept_alone_uses_configured_settings(fake: FakeProvider) -> None:
    dejacache.configure(store=dejacache.MemoryStore(), mode="auto")
    with dejacache.intercept(), httpx2.Client() as c:
        a = c.post(fake.openai_url + "/embeddings", json={"input": "x"}).json()
        b = c.post(fake.openai_url + "/embeddings", json={"input": "x"}).json()
    assert a == b and fake.count() == 1
    assert not patched(httpx2)


def test_ignore_hosts_lets_calls_through(fake: FakeProvider) -> None:
    with dejacache.scope(mode="replay", store=dejacache.MemoryStore()), \
            dejacache.intercept(ignore_hosts=["127.0.0.1"]), httpx2.Client() as c:
        assert c.post(fake.openai_url + "/embeddings", json={"input": "x"}).status_code == 200
    assert fake.count() == 1


def test_ignore_hosts_from_the_environment(
    fake: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DEJACACHE_IGNORE_HOSTS", "example.invalid, 127.0.0.1")
    with dejacache.scope(mode="replay", store=dejacache.MemoryStore()), httpx.Client() as c:
        assert c.post(fake.openai_url + "/embeddings", json={"input": "x"}).status_code == 200


def test_intercept_without_any_http_library_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(intercept_mod, "available", lambda: [])
    monkeypatch.setattr(intercept_mod, "_installed", lambda *names: False)
    with pytest.raises(dejacache.ConfigurationError, match="found no HTTP client"), \
            dejacache.intercept():
        pass
    assert intercept_mod.active() == 0
    with dejacache.scope(mode="auto"):  # plain blocks stay silent: they may not need HTTP
        pass


def test_intercept_with_only_urllib3_or_aiohttp_is_no_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(intercept_mod, "available", lambda: [])
    with dejacache.intercept():  # requests / aiohttp are intercepted without httpx
        assert intercept_mod.active() >= 1


def test_intercept_as_decorator(fake: FakeProvider) -> None:
    dejacache.configure(store=dejacache.MemoryStore())

    @dejacache.intercept()
    def call() -> Any:
        with httpx2.Client() as c:
            return c.post(fake.openai_url + "/embeddings", json={"input": "x"}).json()

    assert call() == call()
    assert fake.count() == 1


def test_cassette_records_and_replays_sdk_calls(
    fake: FakeProvider, tmp_path: pathlib.Path
) -> None:
    path = tmp_path / "agent.json"
    fake.script.append({"status": 500})

    def agent(client: openai.OpenAI) -> Any:
        r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "a"}])
        s = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "a"}],
                                           stream=True)
        again = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "a"}])
        return [r.model_dump(), [c.model_dump() for c in s], again.model_dump()]

    with openai.OpenAI(base_url=fake.openai_url, api_key="sk-SECRET", max_retries=1) as client:
        with dejacache.cassette(path, mode="record"):
            live = agent(client)
        fake.stop()
        with dejacache.cassette(path, mode="replay"):
            again = agent(client)
    assert live == again
    assert live[0] != live[2]  # the same request asked twice got two recorded answers
    text = path.read_text()
    assert "SECRET" not in text and "openai.chat.completions" in text


def test_cassette_with_async_streams_and_gather(
    fake: FakeProvider, tmp_path: pathlib.Path
) -> None:
    import asyncio

    import anthropic

    path = tmp_path / "async.json"
    prompts = ["one", "two", "three"]

    async def agent() -> Any:
        async with anthropic.AsyncAnthropic(base_url=fake.url, api_key="sk-ant-SECRET",
                                            max_retries=0) as client:
            async def ask(p: str) -> Any:
                async with client.messages.stream(
                        model="m", max_tokens=9,
                        messages=[{"role": "user", "content": p}]) as s:
                    return (await s.get_final_message()).model_dump()

            return await asyncio.gather(*(ask(p) for p in prompts))

    with dejacache.cassette(path, mode="record"):
        live = asyncio.run(agent())
    fake.stop()
    with dejacache.cassette(path, mode="replay") as tape:
        again = asyncio.run(agent())
    assert live == again
    assert tape.counters.replayed == 3
    assert "SECRET" not in path.read_text()


def test_library_imported_inside_a_block_is_patched_on_import(fake: FakeProvider) -> None:
    import subprocess
    import sys

    code = f"""
import sys
import dejacache
assert "httpx" not in sys.modules and "httpx2" not in sys.modules, "imported too early"
with dejacache.scope(mode="replay", store=dejacache.MemoryStore()):
    import httpx2
    try:
        httpx2.post("{fake.openai_url}/embeddings", json={{"input": "x"}})
    except dejacache.ReplayMiss:
        print("refused")
import httpx2
print("patched after", hasattr(httpx2.HTTPTransport.handle_request, "__dejacache_patch__"))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "refused" in proc.stdout
    assert "patched after False" in proc.stdout
    assert fake.count() == 0


# ---------------------------------------------------------------- the replay backstop


def _urlopen(url: str) -> int:
    import urllib.request

    req = urllib.request.Request(url + "/embeddings", data=b'{"input": "x"}',
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return int(resp.status)


def test_unknown_http_client_in_a_replay_block_is_refused(fake: FakeProvider) -> None:
    with dejacache.scope(mode="replay", store=dejacache.MemoryStore()), \
            pytest.raises(dejacache.NetworkBlocked) as err:
        _urlopen(fake.openai_url)
    e = err.value
    assert e.host == fake.openai_url.split("/")[2]  # 127.0.0.1:port
    assert e.host in str(e)
    assert e.code_path.startswith("http.client.")
    assert "urllib.request" in e.code_path and __name__ in e.code_path
    assert "did not go through dejacache's HTTP interception" in str(e)
    assert fake.count() == 0


@pytest.mark.parametrize("mode", ["record", "auto"])
def test_unknown_http_client_outside_replay_goes_live(fake: FakeProvider, mode: str) -> None:
    # Live, but not silently: nothing is recorded for it (as for dspy's lm15 engine once).
    host = fake.openai_url.split("/")[2]
    with dejacache.scope(mode=mode, store=dejacache.MemoryStore()), \
            pytest.warns(dejacache.DejacacheWarning) as caught:
        assert _urlopen(fake.openai_url) == 200
    assert fake.count() == 1
    [w] = [str(w.message) for w in caught]
    assert f"connection to {host}" in w and f"({mode} mode)" in w
    assert "did not go through dejacache's HTTP interception" in w
    assert "code path: http.client." in w and __name__ in w


def test_intercepted_and_ignored_requests_do_not_warn(fake: FakeProvider) -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with dejacache.scope(mode="auto", store=dejacache.MemoryStore()), \
                dejacache.intercept(ignore_hosts=["127.0.0.1"]):
            assert _urlopen(fake.openai_url) == 200
    assert fake.count() == 1


def test_the_backstop_is_gone_after_the_block(fake: FakeProvider) -> None:
    import socket

    connect = socket.socket.connect
    with dejacache.scope(mode="replay", store=dejacache.MemoryStore()):
        assert socket.socket.connect is not connect
    assert socket.socket.connect is connect
    assert _urlopen(fake.openai_url) == 200  # no block: untouched


def test_hosts_let_through_by_name_are_allowed(
    fake: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    with dejacache.scope(mode="replay", store=dejacache.MemoryStore()):
        with dejacache.intercept(ignore_hosts=["127.0.0.1"]):
            assert _urlopen(fake.openai_url) == 200
        monkeypatch.setenv("DEJACACHE_IGNORE_HOSTS", "localhost")  # any loopback address
        assert _urlopen(fake.openai_url) == 200
    assert fake.count() == 2


def test_caching_off_in_a_replay_block_goes_live(fake: FakeProvider) -> None:
    with dejacache.scope(None, mode="replay"):
        assert _urlopen(fake.openai_url) == 200
        with httpx2.Client() as c:  # handed on by interception, as before
            assert c.post(fake.openai_url + "/embeddings", json={"input": "x"}).status_code \
                == 200
    assert fake.count() == 2


def test_a_bare_worker_thread_of_a_replay_block_is_refused(fake: FakeProvider) -> None:
    box: list[BaseException] = []

    def worker() -> None:
        try:
            _urlopen(fake.openai_url)
        except BaseException as exc:
            box.append(exc)

    with dejacache.scope(mode="replay", store=dejacache.MemoryStore()):
        t = threading.Thread(target=worker)
        t.start()
        t.join()
    assert len(box) == 1 and isinstance(box[0], dejacache.NetworkBlocked)
    assert fake.count() == 0


def test_other_loopback_connections_stay_allowed_in_replay() -> None:
    # A database or queue the test runs on loopback is not an HTTP call to replay.
    import socket

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    try:
        with dejacache.scope(mode="replay", store=dejacache.MemoryStore()):
            socket.create_connection(srv.getsockname(), timeout=5).close()
    finally:
        srv.close()


def test_non_loopback_connections_are_refused_in_replay_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The real connect is replaced first, so nothing ever leaves the machine: the guard
    # wraps whatever connect it finds.
    import socket

    # (Undone inside the test: this module runs under blockbuster, whose checker is what
    # connect is when the test starts; undone at teardown, it would be put back for good.)
    reached: list[Any] = []
    with monkeypatch.context() as m:
        m.setattr(socket.socket, "connect", lambda s, a: reached.append(a))
        with dejacache.scope(mode="replay", store=dejacache.MemoryStore()):
            s = socket.socket()
            try:
                with pytest.raises(dejacache.NetworkBlocked, match=r"203\.0\.113\.7:443") as err:
                    s.connect(("203.0.113.7", 443))
            finally:
                s.close()
        assert err.value.code_path.startswith(__name__ + ".")
        with dejacache.scope(mode="auto", store=dejacache.MemoryStore()):
            s = socket.socket()
            s.connect(("203.0.113.7", 443))
            s.close()
    assert reached == [("203.0.113.7", 443)]


# ---------------------------------------------------------------- one object, many calls


async def test_calls_of_one_decorated_coroutine_run_at_once_each_restore_their_own_options(
) -> None:
    # Call A enters, call B enters, A leaves first: A's exit must reset A's entry, not the
    # newest (B's), or A's task is left with none instead of its outer intercept's options.
    blk = dejacache.intercept(ignore_hosts=["inner"])
    a_in, b_in, a_out = asyncio.Event(), asyncio.Event(), asyncio.Event()

    @blk
    async def call(entered: asyncio.Event, other: asyncio.Event,
                   after: asyncio.Event | None = None) -> bool:
        entered.set()
        await other.wait()
        if after is not None:
            await after.wait()  # still inside after A left
        opts = INTERCEPT_OPTIONS.get()
        return opts is not None and opts.ignore_hosts == {"inner"}

    async def run(outer: str, *gates: asyncio.Event) -> list[bool]:
        with dejacache.intercept(ignore_hosts=[outer]):
            enclosing = INTERCEPT_OPTIONS.get()
            inside = await call(*gates)
            left = INTERCEPT_OPTIONS.get() is enclosing
        return [inside, left, INTERCEPT_OPTIONS.get() is None]

    async def a() -> list[bool]:
        try:
            return await run("outer-a", a_in, b_in)
        finally:
            a_out.set()

    async def b() -> list[bool]:
        await a_in.wait()  # entered after A
        return await run("outer-b", b_in, a_in, a_out)

    seen = await asyncio.wait_for(asyncio.gather(a(), b()), 30)
    assert seen == [[True, True, True], [True, True, True]]
    assert INTERCEPT_OPTIONS.get() is None and intercept_mod.active() == 0


def test_calls_of_one_decorated_function_in_two_threads_each_restore_their_own_options(
) -> None:
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()

    @dejacache.intercept(ignore_hosts=["inner"])
    def call(entered: threading.Event, other: threading.Event,
             after: threading.Event | None = None) -> None:
        entered.set()
        assert other.wait(30)
        if after is not None:
            assert after.wait(30)

    def run(outer: str | None, *gates: threading.Event) -> list[bool]:
        with dejacache.intercept(ignore_hosts=[outer]) if outer else contextlib.nullcontext():
            enclosing = INTERCEPT_OPTIONS.get()
            call(*gates)
            left = INTERCEPT_OPTIONS.get() is enclosing
        return [left, INTERCEPT_OPTIONS.get() is None]

    def a() -> list[bool]:
        try:
            return run("outer-a", a_in, b_in)
        finally:
            a_out.set()

    def b() -> list[bool]:
        assert a_in.wait(30)
        return run(None, b_in, a_in, a_out)  # no enclosing intercept: none again after

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        calls = [pool.submit(a), pool.submit(b)]
        assert [c.result(60) for c in calls] == [[True, True], [True, True]]
    assert intercept_mod.active() == 0


def test_one_intercept_entered_again_inside_itself_pairs_each_exit_with_its_entry() -> None:
    blk = dejacache.intercept(ignore_hosts=["inner"])
    with blk:
        outer = INTERCEPT_OPTIONS.get()
        with blk:
            assert INTERCEPT_OPTIONS.get() == outer
        assert INTERCEPT_OPTIONS.get() is outer
    assert INTERCEPT_OPTIONS.get() is None
