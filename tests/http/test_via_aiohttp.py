"""aiohttp.ClientSession through dejacache (src/dejacache/http/via_aiohttp.py).

The cases (``aiohttp_cases.py``) run a plain session against loopback servers: once
recording in a process of their own, then replaying in a fresh process with the servers
stopped and a listener on their ports counting any connection (there must be none).
"""

from __future__ import annotations

import asyncio
import pathlib
import subprocess
import sys
from typing import Any

import pytest

aiohttp = pytest.importorskip("aiohttp")

from aiohttp_cases import SECRETS  # noqa: E402
from cases_support import MODELS, case_env, record_then_replay_cases  # noqa: E402
from fake_tool_api import ToolAPI  # noqa: E402
from http_support import FORMS, KeyRefuser, KeySpeller, SeqStore, leaked  # noqa: E402

import dejacache  # noqa: E402
from dejacache.http.intercept import patched_libraries  # noqa: E402
from encoded_upstream import PLAIN, EncodedUpstream, deflated, gzipped, pieces  # noqa: E402

HERE = pathlib.Path(__file__).parent


#: The cases whose outcome a replay must repeat exactly (others differ by design).
SAME = [
    "weather", "redirect", "download_lines", "download_7", "chat_stream", "gzip", "echo",
    "status", "raised_status", "refused", "timeout",
]


# Every case runs twice: with requests restated in httpx2's model, and with httpx and httpx2
# not importable (a plain ``pip install dejacache aiohttp``): dejacache's own model.
@pytest.fixture(scope="module", params=MODELS)
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
         ) -> dict[str, Any]:
    cassette = tmp_path_factory.mktemp("aiohttp") / "cases.json"
    return record_then_replay_cases("aiohttp_cases.py", cassette, model=request.param)


def test_a_replay_in_a_fresh_process_opens_no_connection(runs: dict[str, Any]) -> None:
    assert runs["seen"][0] > 0 and runs["seen"][1] > 0
    assert runs["connections"] == [0, 0]


@pytest.mark.parametrize("case", SAME)
def test_session_answers_replay_the_same(runs: dict[str, Any], case: str) -> None:
    assert runs["replayed"][case] == runs["recorded"][case]


def test_errors_are_aiohttps_own(runs: dict[str, Any]) -> None:
    rep = runs["replayed"]
    assert rep["refused"][0] == "ClientConnectorError"
    assert rep["refused"][1].startswith("Cannot connect to host 127.0.0.1:")
    assert rep["timeout"] == ["SocketTimeoutError", True]
    assert rep["raised_status"] == ["ClientResponseError", 503]
    assert [s for s, _ in rep["status"]] == [404, 500]


def test_an_event_stream_replays_event_by_event(runs: dict[str, Any]) -> None:
    rec, rep = runs["recorded"]["events"], runs["replayed"]["events"]
    assert len(rep) == 4 and all(c.endswith("\n\n") for c in rep)
    assert "".join(rep) == "".join(rec)


def test_credentials_reach_no_file(runs: dict[str, Any]) -> None:
    cassette: pathlib.Path = runs["cassette"]
    for path in [p for p in cassette.parent.rglob("*") if p.is_file()]:
        data = path.read_bytes()
        for secret in (*SECRETS.values(), "SESSION-COOKIE"):
            assert secret.encode() not in data, (secret, path)


# ---------------------------------------------------------------- in process


def _is_patched() -> bool:
    return bool(getattr(aiohttp.ClientSession._request, "__dejacache_patch__", False))


def test_patched_only_while_a_block_is_open() -> None:
    orig = aiohttp.ClientSession._request
    assert not _is_patched()
    with dejacache.scope(mode="auto", store=dejacache.MemoryStore()):
        assert _is_patched()
        assert "aiohttp.client" in patched_libraries()
    assert aiohttp.ClientSession._request is orig


async def _weather(url: str) -> Any:
    async with aiohttp.ClientSession() as s, s.get(url + "/weather?city=Rome") as r:
        return await r.json()


def test_record_and_replay_in_process_on_the_event_loop() -> None:
    """Under blockbuster (conftest): nothing dejacache does here blocks the loop."""
    api = ToolAPI().start()
    store = SeqStore()
    try:
        with dejacache.scope(mode="record", store=store):
            live = asyncio.run(_weather(api.url))
    finally:
        api.stop()
    store.rewind()
    with dejacache.scope(mode="replay", store=store):
        again = asyncio.run(_weather(api.url))
    assert again == live and len(api.requests) == 1


async def _chat(url: str) -> tuple[int, str | None, bytes]:
    async with aiohttp.ClientSession() as s, s.post(
            url + "/v1/chat/completions", json={"model": "m", "stream": True}) as r:
        return r.status, r.headers.get("content-encoding"), await r.read()


@pytest.mark.parametrize(("encoding", "raw", "plain"), [
    ("gzip, gzip", gzipped(gzipped(PLAIN)), True),
    ("deflate, gzip", gzipped(deflated(PLAIN)), True),
    ("br, gzip", gzipped(b"data: not br\n\n"), False),
], ids=["gzip-gzip", "deflate-gzip", "br-gzip"])
def test_a_coding_aiohttp_hands_on_as_it_came_is_kept_by_the_one_rule(
        tmp_path: pathlib.Path, encoding: str, raw: bytes, plain: bool) -> None:
    # aiohttp undoes one coding alone; stacked ones reach the caller as they came. Their
    # bytes were stored as plain text (the header dropped as if aiohttp had undone it) and
    # replayed mangled. Now every layer is undone for the stored copy, or the body is kept
    # as it came, with its header (http/codings.py).
    upstream = EncodedUpstream().serve(encoding, pieces(raw)).start()
    path = tmp_path / "c.json"
    try:
        with dejacache.cassette(path, mode="record"):
            live = asyncio.run(_chat(upstream.url))
    finally:
        upstream.stop()
    assert live == (200, encoding, raw)
    with dejacache.cassette(path, mode="replay"):
        again = asyncio.run(_chat(upstream.url))
    assert again == ((200, None, PLAIN) if plain else live)


def test_a_replay_miss_is_raised_not_sent() -> None:
    api = ToolAPI().start()
    try:
        with dejacache.scope(mode="replay", store=dejacache.MemoryStore()), \
                pytest.raises(dejacache.ReplayMiss):
            asyncio.run(_weather(api.url))
    finally:
        api.stop()
    assert api.requests == []


def test_outside_a_block_sessions_go_live_untouched() -> None:
    api = ToolAPI().start()
    try:
        first, second = asyncio.run(_weather(api.url)), asyncio.run(_weather(api.url))
    finally:
        api.stop()
    assert first["nonce"] != second["nonce"] and len(api.requests) == 2


def test_aiohttp_imported_inside_a_block_is_intercepted(tmp_path: pathlib.Path) -> None:
    api = ToolAPI().start()
    cassette = tmp_path / "lazy.json"
    code = f"""
import asyncio, sys
import dejacache
assert "aiohttp" not in sys.modules, "imported too early"

async def call():
    import aiohttp
    async with aiohttp.ClientSession() as s, s.get("{api.url}/weather?city=Lima") as r:
        return (await r.json())["nonce"]

for mode in ("record", "replay"):
    with dejacache.cassette({str(cassette)!r}, mode=mode):
        print(mode, asyncio.run(call()))
import aiohttp
print("patched after", hasattr(aiohttp.ClientSession._request, "__dejacache_patch__"))
"""
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env=case_env(), timeout=120)
    finally:
        api.stop()
    assert proc.returncode == 0, proc.stderr
    lines = dict(line.rsplit(" ", 1) for line in proc.stdout.splitlines())
    assert lines["record"] == lines["replay"]
    assert lines["patched after"] == "False"
    assert len(api.requests) == 1


@pytest.fixture(scope="module")
def rotated_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    cassette = tmp_path_factory.mktemp("aiohttp_rotated") / "cases.json"
    return record_then_replay_cases("aiohttp_cases.py", cassette, other_machine=True)


def test_another_machine_with_rotated_credentials_replays_every_case(
        rotated_runs: dict[str, Any]) -> None:
    """CI's masking key and other tool credentials: each credential maps one to one onto
    the recording's, so every case replays as it did, with no connection."""
    assert rotated_runs["connections"] == [0, 0]
    for case in SAME:
        assert rotated_runs["replayed"][case] == rotated_runs["recorded"][case], case


# ---------------------------------------------------------------- echoed credentials


async def _refused(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as s, \
            s.post(url, json={"q": 1}, headers=KeyRefuser.HEADERS) as r:
        return r.status, await r.text()


@pytest.mark.parametrize(("path", "status"), [("things", 401), ("echo", 200), ("stream", 200)])
def test_an_answer_quoting_the_requests_key_is_stored_without_it(
        tmp_path: pathlib.Path, path: str, status: int) -> None:
    # An error answer, a 200 quoting the key, a 200 stream whose later event does; the
    # caller still gets the answer as it came; a replay quotes the placeholder.
    cassette = tmp_path / "refused.json"
    with KeyRefuser() as server:
        with dejacache.cassette(cassette, "record"):
            got, live = asyncio.run(_refused(server.at(path)))
        assert got == status and all(k in live for k in KeyRefuser.KEYS)
        assert leaked(tmp_path) == []
        with dejacache.cassette(cassette, "replay"):
            got, again = asyncio.run(_refused(server.at(path)))
    assert got == status and again.count("<REDACTED>") == 3


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("spelling", ["base64", "base64url"])
def test_an_answer_quoting_the_requests_key_inside_base64_is_stored_without_it(
        tmp_path: pathlib.Path, form: str, spelling: str) -> None:
    async def ask(url: str) -> str:
        async with aiohttp.ClientSession() as s, \
                s.post(url, json={"q": 1}, headers=KeySpeller.HEADERS) as r:
            return await r.text()

    cassette = tmp_path / "spelt.json"
    with KeySpeller() as server:
        with dejacache.cassette(cassette, "record"):
            live = asyncio.run(ask(server.at(f"{form}/{spelling}")))
        assert KeySpeller.held(live) == list(KeySpeller.KEYS)
        assert leaked(tmp_path, KeySpeller) == []
        with dejacache.cassette(cassette, "replay"):
            again = asyncio.run(ask(server.at(f"{form}/{spelling}")))
    assert again.count("<REDACTED>") == 3 and KeySpeller.held(again) == []
