"""urllib3, requests (and so botocore) through dejacache (src/dejacache/http/via_urllib3.py).

The cases (``urllib3_cases.py``) run with the real packages against loopback servers: once
recording in a process of their own, then replaying in a fresh process with the servers
stopped and a listener on their ports counting any connection (there must be none).
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
from typing import Any

import pytest

pytest.importorskip("requests")
urllib3 = pytest.importorskip("urllib3")

from cases_support import (  # noqa: E402
    MODELS,
    case_env,
    free_port,
    record_then_replay_cases,
)
from fake_tool_api import ToolAPI  # noqa: E402
from http_support import FORMS, SPELLINGS, KeyRefuser, KeySpeller, leaked  # noqa: E402
from urllib3_cases import SECRETS  # noqa: E402

import dejacache  # noqa: E402
from dejacache.http.intercept import patched_libraries  # noqa: E402
from encoded_upstream import PLAIN, EncodedUpstream, gzipped, pieces  # noqa: E402

HERE = pathlib.Path(__file__).parent


#: The cases whose outcome a replay must repeat exactly (others differ by design).
SAME = [
    "weather", "redirect", "download", "download_7", "events_lines", "chat_stream", "echo",
    "status", "pool", "pool_read", "pool_gzip", "conn",
]


# Every case runs twice: with requests restated in httpx2's model, and with httpx and httpx2
# not importable (a plain ``pip install dejacache requests``): dejacache's own model.
@pytest.fixture(scope="module", params=MODELS)
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
         ) -> dict[str, Any]:
    cassette = tmp_path_factory.mktemp("urllib3") / "cases.json"
    return record_then_replay_cases("urllib3_cases.py", cassette, model=request.param)


def test_a_replay_in_a_fresh_process_opens_no_connection(runs: dict[str, Any]) -> None:
    assert runs["seen"][0] > 0 and runs["seen"][1] > 0  # the recording went live
    assert runs["connections"] == [0, 0]


@pytest.mark.parametrize("case", SAME)
def test_requests_and_urllib3_answers_replay_the_same(runs: dict[str, Any], case: str) -> None:
    """Status, the answer's headers (date and request id included), body: as recorded."""
    assert runs["replayed"][case] == runs["recorded"][case]


def test_http_errors_are_answers(runs: dict[str, Any]) -> None:
    [[s404, b404], [s500, b500]] = runs["replayed"]["status"]
    assert (s404, s500) == (404, 500)
    assert b404["error"]["code"] == 404 and b500["error"]["code"] == 500


def test_a_redirect_is_followed_as_live(runs: dict[str, Any]) -> None:
    status, body, history, url = runs["replayed"]["redirect"]
    assert (status, history, body["city"]) == (200, [302], "Oslo")
    assert url.startswith("weather?")


def test_event_streams_replay_event_by_event(runs: dict[str, Any]) -> None:
    rec, rep = runs["recorded"], runs["replayed"]
    # requests' iter_content(None) and urllib3's stream(None): one recorded event per chunk.
    assert len(rep["events_chunks"]) == 4 and len(rep["pool_stream"]) == 4
    assert all(c.startswith("data: ") and c.endswith("\n\n") for c in rep["events_chunks"])
    assert "".join(rep["events_chunks"]) == "".join(rec["events_chunks"])
    assert "".join(rep["pool_stream"]) == "".join(rec["pool_stream"])
    # stream(65536), as botocore reads: still one event per chunk, not gathered to 64 KiB.
    assert len(rep["pool_stream_64k"]) == 4
    assert all(c.startswith("data: ") and c.count("\n\n") == 1 for c in rep["pool_stream_64k"])
    # A stream the request asked for (chat "stream": true) streams live while recording too.
    assert rep["chat_stream"] == rec["chat_stream"]
    assert len(rep["chat_stream"]) > 3 and rep["chat_stream"][-1] == "data: [DONE]\n\n"


def test_bodies_are_read_in_the_sizes_asked_for(runs: dict[str, Any]) -> None:
    chunks = runs["replayed"]["download_7"]
    assert all(len(c) == 7 for c in chunks[:-1]) and 0 < len(chunks[-1]) <= 7
    first, rest = runs["replayed"]["pool_read"]
    assert len(first) == 9 and (first + rest).count("part ") == 5


def test_a_compressed_answer_replays_decoded(runs: dict[str, Any]) -> None:
    rec, rep = runs["recorded"]["gzip"], runs["replayed"]["gzip"]
    assert rep[0] == rec[0] and rep[0]["zipped"] is True
    assert rep[1] is True  # stored decoded: no Content-Encoding left to apply


@pytest.mark.parametrize(("case", "error", "reason"), [
    ("refused", "requests.exceptions.ConnectionError", "NewConnectionError"),
    ("timeout", "requests.exceptions.ReadTimeout", "ReadTimeoutError"),
    ("refused_raw", "urllib3.exceptions.NewConnectionError", None),
    ("refused_retried", "urllib3.exceptions.MaxRetryError", "NewConnectionError"),
    ("timeout_raw", "urllib3.exceptions.ReadTimeoutError", None),
])
def test_failures_replay_as_the_librarys_own_exceptions(
    runs: dict[str, Any], case: str, error: str, reason: str | None,
) -> None:
    expected = {"error": error, "reason": reason}
    assert runs["recorded"][case] == expected
    assert runs["replayed"][case] == expected


def test_credentials_reach_no_file(runs: dict[str, Any]) -> None:
    cassette: pathlib.Path = runs["cassette"]
    files = [p for p in cassette.parent.rglob("*") if p.is_file()]
    assert cassette in files
    for path in files:
        data = path.read_bytes()
        for secret in (*SECRETS.values(), "SESSION-COOKIE"):
            assert secret.encode() not in data, (secret, path)


# ---------------------------------------------------------------- when the seam is patched


def _is_patched() -> bool:
    return bool(getattr(urllib3.HTTPConnectionPool.urlopen, "__dejacache_patch__", False))


def test_patched_only_while_a_block_is_open(tmp_path: pathlib.Path) -> None:
    orig = urllib3.HTTPConnectionPool.urlopen
    assert not _is_patched()
    with dejacache.scope(mode="auto", store=dejacache.MemoryStore()):
        assert _is_patched()
        assert "urllib3.connectionpool" in patched_libraries()
        assert urllib3.HTTPSConnectionPool.urlopen is urllib3.HTTPConnectionPool.urlopen
    assert urllib3.HTTPConnectionPool.urlopen is orig


def test_outside_a_block_requests_go_live_untouched() -> None:
    import requests

    api = ToolAPI().start()
    try:
        first = requests.get(api.url + "/weather", timeout=10).json()
        second = requests.get(api.url + "/weather", timeout=10).json()
    finally:
        api.stop()
    assert first["nonce"] != second["nonce"]
    assert len(api.requests) == 2


def test_requests_imported_inside_a_block_is_intercepted(tmp_path: pathlib.Path) -> None:
    api = ToolAPI().start()
    cassette = tmp_path / "lazy.json"
    code = f"""
import sys
import dejacache
assert "urllib3" not in sys.modules and "requests" not in sys.modules, "imported too early"
for mode in ("record", "replay"):
    with dejacache.cassette({str(cassette)!r}, mode=mode):
        import requests
        import urllib3
        assert getattr(urllib3.HTTPConnectionPool.urlopen, "__dejacache_patch__", False)
        print(mode, requests.get("{api.url}/weather?city=Lima", timeout=10).json()["nonce"])
print("patched after", hasattr(urllib3.HTTPConnectionPool.urlopen, "__dejacache_patch__"))
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
    assert len(api.requests) == 1  # the replay did not reach the server


def _chat(url: str) -> Any:
    import requests

    try:
        with requests.post(url + "/v1/chat/completions", json={"model": "m", "stream": True},
                           stream=True, timeout=10) as r:
            return r.status_code, r.headers.get("content-encoding"), r.content
    except requests.RequestException as exc:
        return type(exc).__name__


@pytest.mark.parametrize(("encoding", "raw"), [
    ("gzip", PLAIN),  # not what its header says
    ("gzip", gzipped(PLAIN)[:-40]),  # cut short
    ("br, gzip", gzipped(b"data: not br\n\n")),  # br without brotli, or br that is not
], ids=["plain-said-gzip", "gzip-cut-short", "br-gzip"])
def test_a_stream_whose_coding_cannot_be_undone_replays_as_it_came(
        tmp_path: pathlib.Path, encoding: str, raw: bytes) -> None:
    # It was not recorded (the recorder's decoding failed), recorded cut short as if whole,
    # or, for br under gzip, recorded half decoded as plain text: a replay answered what the
    # server never sent. Now requests reads the bytes as they came, live and replayed.
    upstream = EncodedUpstream().serve(encoding, pieces(raw)).start()
    path = tmp_path / "c.json"
    try:
        bare = _chat(upstream.url)
        with dejacache.cassette(path, mode="record"):
            live = _chat(upstream.url)
    finally:
        upstream.stop()
    with dejacache.cassette(path, mode="replay"):
        again = _chat(upstream.url)
    assert bare == live == again


def test_a_replay_miss_is_raised_not_sent(tmp_path: pathlib.Path) -> None:
    import requests

    api = ToolAPI().start()
    try:
        with dejacache.scope(mode="replay", store=dejacache.MemoryStore()), \
                pytest.raises(dejacache.ReplayMiss):
            requests.get(api.url + "/weather?city=Nowhere", timeout=10)
    finally:
        api.stop()
    assert api.requests == []


def test_a_recording_made_through_httpx_replays_through_requests() -> None:
    """One exchange, whatever the stack: a failure recorded by httpx2 names no urllib3 class,
    and is raised the way urllib3 would raise it after spending the caller's retries."""
    httpx2 = pytest.importorskip("httpx2")
    import requests
    from http_support import SeqStore

    url = f"http://127.0.0.1:{free_port()}/x"
    store = SeqStore()
    with dejacache.scope(mode="record", store=store), pytest.raises(httpx2.ConnectError):
        httpx2.get(url)
    store.rewind()
    with dejacache.scope(mode="replay", store=store), \
            pytest.raises(requests.ConnectionError) as err:
        requests.get(url, timeout=5)
    assert isinstance(err.value.args[0], urllib3.exceptions.MaxRetryError)
    assert isinstance(err.value.args[0].reason, urllib3.exceptions.NewConnectionError)


def test_a_recording_made_with_httpx2_imported_replays_where_it_is_not_installed(
        tmp_path: pathlib.Path) -> None:
    """A developer's machine has httpx2 (an SDK imported it), CI has only requests: the same
    keys, so every case replays there, with no connection."""
    runs = record_then_replay_cases("urllib3_cases.py", tmp_path / "cases.json",
                                    model="httpx2", replay_model="plain")
    assert runs["connections"] == [0, 0]
    for case in SAME:
        assert runs["replayed"][case] == runs["recorded"][case], case


@pytest.fixture(scope="module")
def rotated_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    cassette = tmp_path_factory.mktemp("urllib3_rotated") / "cases.json"
    return record_then_replay_cases("urllib3_cases.py", cassette, other_machine=True)


def test_another_machine_with_rotated_credentials_replays_every_case(
        rotated_runs: dict[str, Any]) -> None:
    """CI's masking key and other tool credentials: each credential maps one to one onto
    the recording's, so every case replays as it did, with no connection."""
    assert rotated_runs["connections"] == [0, 0]
    for case in SAME:
        assert rotated_runs["replayed"][case] == rotated_runs["recorded"][case], case


# ---------------------------------------------------------------- echoed credentials


def _refused(client: str, url: str) -> tuple[int, str]:
    if client == "requests":
        import requests

        r = requests.post(url, json={"q": 1}, headers=KeyRefuser.HEADERS, timeout=10)
        return r.status_code, r.text
    resp = urllib3.PoolManager().request(
        "POST", url, body=b'{"q": 1}',
        headers={**KeyRefuser.HEADERS, "content-type": "application/json"})
    return resp.status, resp.data.decode()


@pytest.mark.parametrize(("path", "status"), [("things", 401), ("echo", 200), ("stream", 200)])
@pytest.mark.parametrize(("client", "kept_in"), [("requests", "cassette"),
                                                 ("urllib3", "sqlite")])
def test_an_answer_quoting_the_requests_key_is_stored_without_it(
        tmp_path: pathlib.Path, client: str, kept_in: str, path: str, status: int) -> None:
    # An error answer, a 200 quoting the key, a 200 stream whose later event does; the
    # caller still gets the answer as it came; a replay quotes the placeholder.
    def block(mode: str) -> Any:
        if kept_in == "cassette":
            return dejacache.cassette(tmp_path / "refused.json", mode)
        return dejacache.scope(mode=mode, store=dejacache.SQLiteStore(tmp_path / "c.db"))

    with KeyRefuser() as server:
        with block("record"):
            got, live = _refused(client, server.at(path))
        assert got == status and all(k in live for k in KeyRefuser.KEYS)
        assert leaked(tmp_path) == []
        with block("replay"):
            got, again = _refused(client, server.at(path))
    assert got == status and again.count("<REDACTED>") == 3


@pytest.mark.parametrize("spelling", SPELLINGS)
@pytest.mark.parametrize("form", FORMS)
def test_an_answer_quoting_the_requests_key_in_another_spelling_is_stored_without_it(
        tmp_path: pathlib.Path, form: str, spelling: str) -> None:
    import requests

    def ask(url: str) -> str:
        return requests.post(url, json={"q": 1}, headers=KeySpeller.HEADERS, timeout=10).text

    with KeySpeller() as server:
        with dejacache.cassette(tmp_path / "spelt.json", "record"):
            live = ask(server.at(f"{form}/{spelling}"))
        assert KeySpeller.held(live) == list(KeySpeller.KEYS)
        assert leaked(tmp_path, KeySpeller) == []
        with dejacache.cassette(tmp_path / "spelt.json", "replay"):
            again = ask(server.at(f"{form}/{spelling}"))
    assert again.count("<REDACTED>") == 3 and KeySpeller.held(again) == []
