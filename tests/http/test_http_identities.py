"""Who is asking, in HTTP keys (``dejacache/http/identities.py``): each caller is answered with
its own recording in any order; credentials that differ from the recording's (another
machine's masking key, a rotated token, CI's placeholder API key) still hit where the mapping
is one to one, and miss saying why where it is not; recordings made before request headers
were keyed still replay."""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import pathlib
import shutil
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest
import requests
from fake_provider import FakeProvider
from fake_tool_api import ToolAPI
from http_support import CLIENTS, fetch
from hypothesis import given, settings
from hypothesis import strategies as st

import dejacache
from dejacache._secrets import PLACEHOLDER
from dejacache.cassettes import store as cassette_store
from dejacache.errors import ReplayMiss
from dejacache.http import Transport, keying
from dejacache.http.headers import classify
from dejacache.http.identities import IdentityTable, items_of, spell

FIXTURE = pathlib.Path(__file__).parent / "fixtures" / "pre_header_keys.json"


@pytest.fixture
def tool() -> Iterator[ToolAPI]:
    server = ToolAPI().start()
    yield server
    server.stop()


def _answer(r: Any) -> Any:
    return r.json() if "json" in r.headers.get("content-type", "") else r.text


def _me(url: str, who: str, accept: str = "application/json") -> Any:
    return _answer(httpx.get(url + "/me", headers={"Authorization": f"Bearer {who}-token",
                                                   "Accept": accept}))


def _other_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """Replay as CI would: another masking key (so every digest differs)."""
    monkeypatch.setenv("DEJACACHE_SECRET_KEY", "another-machine")


# ------------------------------------------------------------------ each caller its own answer

def _record_alice_bob(url: str, path: pathlib.Path) -> dict[str, Any]:
    with dejacache.cassette(path, mode="record"):
        return {"alice": _me(url, "alice"), "bob": _me(url, "bob"),
                "alice_csv": _me(url, "alice", "text/csv")}


def test_bob_is_never_served_alices_profile_in_the_other_order(
        tool: ToolAPI, tmp_path: pathlib.Path) -> None:
    path = tmp_path / "c.json"
    live = _record_alice_bob(tool.url, path)
    assert live["alice"]["user"] == "alice" and live["bob"]["user"] == "bob"
    tool.stop()
    with dejacache.cassette(path, mode="replay"):
        assert _me(tool.url, "bob") == live["bob"]
        assert _me(tool.url, "alice", "text/csv") == live["alice_csv"]
        assert _me(tool.url, "alice") == live["alice"]


def test_threads_and_gather_get_their_callers_answers(
        tool: ToolAPI, tmp_path: pathlib.Path) -> None:
    path = tmp_path / "c.json"
    live = _record_alice_bob(tool.url, path)
    tool.stop()
    asks = [("alice_csv", "alice", "text/csv"), ("bob", "bob", "application/json"),
            ("alice", "alice", "application/json")]
    for _ in range(5):
        with dejacache.cassette(path, mode="replay"), \
                concurrent.futures.ThreadPoolExecutor(3) as pool:
            got = list(pool.map(lambda a: (a[0], _me(tool.url, a[1], a[2])), asks))
        assert dict(got) == live

    async def gathered() -> dict[str, Any]:
        async with httpx.AsyncClient() as c:
            async def one(tag: str, who: str, accept: str) -> tuple[str, Any]:
                r = await c.get(tool.url + "/me", headers={
                    "Authorization": f"Bearer {who}-token", "Accept": accept})
                return tag, _answer(r)
            return dict(await asyncio.gather(*(one(*a) for a in asks)))

    for _ in range(5):
        with dejacache.cassette(path, mode="replay"):
            assert asyncio.run(gathered()) == live


def test_requests_keeps_callers_apart_too(tool: ToolAPI, tmp_path: pathlib.Path) -> None:
    path = tmp_path / "c.json"

    def me(who: str) -> Any:
        return requests.get(tool.url + "/me", timeout=10,
                            headers={"Authorization": f"Bearer {who}-token"}).json()

    with dejacache.cassette(path, mode="record"):
        live = {"alice": me("alice"), "bob": me("bob")}
    tool.stop()
    with dejacache.cassette(path, mode="replay"):
        assert me("bob") == live["bob"] and me("alice") == live["alice"]


def test_requests_basic_auth_reaches_the_cassette_as_a_digest(
        tool: ToolAPI, tmp_path: pathlib.Path) -> None:
    """``requests.get(url, auth=("alice", "hunter2"))``: requests sends it as an
    ``Authorization: Basic`` header, which the file holds only as a keyed digest."""
    path = tmp_path / "c.json"

    def weather(pw: str) -> Any:
        return requests.get(tool.url + "/weather?city=Oslo", timeout=10,
                            auth=("alice", pw)).json()

    with dejacache.cassette(path, mode="record"):
        live = weather("hunter2")
    tool.stop()
    text = path.read_text()
    basic = base64.b64encode(b"alice:hunter2").decode()
    assert "hunter2" not in text and basic not in text and basic[:12] not in text
    with dejacache.cassette(path, mode="replay"):
        assert weather("hunter2") == live


def test_a_credential_is_keyed_as_a_digest_the_file_cannot_give_back(
        tool: ToolAPI, tmp_path: pathlib.Path) -> None:
    path = tmp_path / "c.json"
    _record_alice_bob(tool.url, path)
    text = path.read_text()
    assert "alice-token" not in text and "bob-token" not in text
    requests_ = [e["request"] for e in orjson.loads(text)["entries"]]
    items = {i for r in requests_ for i in r["identity"]}
    assert len(items) == 2  # alice, bob
    assert all(i.startswith("authorization@http.127.0.0.1#") for i in items)


# ------------------------------------------------------------------ other credentials

def test_a_rotated_token_on_another_machine_still_hits_one_to_one(
        tool: ToolAPI, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "c.json"
    with dejacache.cassette(path, mode="record"):
        live = [_me(tool.url, "alice"), _me(tool.url, "alice", "text/csv")]
    tool.stop()
    _other_machine(monkeypatch)
    with dejacache.cassette(path, mode="replay"):
        assert [_me(tool.url, "ci-secret"), _me(tool.url, "ci-secret", "text/csv")] == live


def test_each_host_maps_its_own_credentials(tmp_path: pathlib.Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = ToolAPI().start(), ToolAPI().start()
    url_b = b.url.replace("127.0.0.1", "localhost")  # another host, as a tool's second API
    path = tmp_path / "c.json"
    try:
        with dejacache.cassette(path, mode="record"):
            live = [_me(a.url, "alice"), _me(url_b, "github")]
    finally:
        a.stop()
        b.stop()
    _other_machine(monkeypatch)
    with dejacache.cassette(path, mode="replay"):
        assert [_me(a.url, "rotated"), _me(url_b, "rotated-too")] == live


def test_two_recorded_callers_and_new_credentials_miss_and_say_why(
        tool: ToolAPI, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "c.json"
    _record_alice_bob(tool.url, path)
    tool.stop()
    _other_machine(monkeypatch)
    with dejacache.cassette(path, mode="replay"), pytest.raises(ReplayMiss) as miss:
        _me(tool.url, "carol")
    text = str(miss.value)
    assert "cannot tell which recorded caller it stands for" in text
    assert "holds 2 values of authorization for http.127.0.0.1" in text


def test_a_second_new_credential_in_one_replay_is_not_mapped(
        tool: ToolAPI, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "c.json"
    with dejacache.cassette(path, mode="record"):
        live = _me(tool.url, "alice")
    tool.stop()
    _other_machine(monkeypatch)
    with dejacache.cassette(path, mode="replay"):
        assert _me(tool.url, "carol") == live  # one to one: carol stands for alice
        with pytest.raises(ReplayMiss, match="this run sent 2"):
            _me(tool.url, "dave")


def test_ci_replays_a_real_keys_recording_with_the_placeholder_key(
        fake: FakeProvider, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "c.json"

    def run(key: str, ant_key: str) -> list[Any]:
        oa = openai.OpenAI(base_url=fake.openai_url, api_key=key, max_retries=0)
        an = anthropic.Anthropic(base_url=fake.url, api_key=ant_key, max_retries=0)
        chat = oa.chat.completions.create(model="gpt-4o-mini",
                                          messages=[{"role": "user", "content": "Hi"}])
        msg = an.messages.create(model="claude-3-5-haiku-latest", max_tokens=32,
                                 messages=[{"role": "user", "content": "Hi"}])
        return [chat.model_dump(), msg.model_dump()]

    with dejacache.cassette(path, mode="record"):
        live = run("sk-proj-" + "r" * 40, "sk-ant-api03-" + "r" * 40)
    fake.stop()
    _other_machine(monkeypatch)
    placeholder = "dejacache-replay-placeholder-not-a-key"
    with dejacache.cassette(path, mode="replay"):
        assert run(placeholder, placeholder) == live


# OpenAI's organization ids as they are: ``org-`` and 24 characters (a shorter value would
# be a setting, ``headers.is_setting``, never mapped).
_ORG_A, _ORG_B = "org-" + "a1" * 12, "org-" + "b2" * 12


def test_a_providers_account_headers_are_who_asks_mapped_one_to_one(
        fake: FakeProvider, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``OpenAI-Organization``/``-Project`` are an identity on the provider's own endpoints
    too (the docs said they "still count", as if another value missed): CI's other org
    replays a recording made under one, two orgs in one recording keep apart, and a replay
    that sends none where the recording has one misses saying why, unless they are left out
    with ``volatile=`` where the recording is made and where it replays."""

    def ask(org: str | None, q: str = "Hi") -> Any:
        with openai.OpenAI(base_url=fake.openai_url, api_key="dejacache-placeholder",
                           organization=org, project=org and "proj_" + "c3" * 12,
                           max_retries=0) as c:
            return c.chat.completions.create(
                model="m", messages=[{"role": "user", "content": q}]).model_dump()

    one, two, out = tmp_path / "one.json", tmp_path / "two.json", tmp_path / "out.json"
    leave_out = ["openai-organization", "openai-project"]
    with dejacache.cassette(one, mode="record"):
        live = ask(_ORG_A)
    with dejacache.cassette(two, mode="record"):
        a, b = ask(_ORG_A, "files?"), ask(_ORG_B, "files?")
    with dejacache.cassette(out, mode="record", volatile=leave_out):
        left = ask(_ORG_A)
    fake.stop()
    with dejacache.cassette(two, mode="replay"):
        assert ask(_ORG_B, "files?") == b and ask(_ORG_A, "files?") == a  # any order
    _other_machine(monkeypatch)
    with dejacache.cassette(one, mode="replay"):
        assert ask(_ORG_B) == live  # the one recorded org stands for CI's
    with dejacache.cassette(one, mode="replay"), pytest.raises(ReplayMiss, match="who is asking"):
        ask(None)
    with dejacache.cassette(out, mode="replay", volatile=leave_out):
        assert ask(None) == left


def test_cookies_the_server_set_are_echoes_not_identities(
        tool: ToolAPI, tmp_path: pathlib.Path) -> None:
    path = tmp_path / "c.json"

    def session_flow() -> list[Any]:
        with requests.Session() as s:
            weather = s.get(tool.url + "/weather", params={"city": "Porto"}, timeout=10)
            me = s.get(tool.url + "/me", timeout=10)  # carries the cookie /weather set
            return [weather.json(), me.status_code, _answer(me)]

    with dejacache.cassette(path, mode="record"):
        live = session_flow()
    assert live[1] == 200
    tool.stop()
    assert path.read_text().count(live[2]["user"]) == 0  # the session id /me quotes
    with dejacache.cassette(path, mode="replay"):
        # No cookie comes back in replay: still the same call, its answer as stored (a
        # credential the request sent, quoted: the placeholder).
        assert session_flow() == [*live[:2], {**live[2], "user": "<REDACTED>"}]


def test_a_cookie_brought_from_outside_is_who_asks(tool: ToolAPI,
                                                  tmp_path: pathlib.Path) -> None:
    path = tmp_path / "c.json"

    def me(session: str) -> Any:
        return _answer(httpx.get(tool.url + "/me", cookies={"session": session}))

    with dejacache.cassette(path, mode="record"):
        live = {"alice": me("alice"), "bob": me("bob")}
    tool.stop()
    with dejacache.cassette(path, mode="replay"):
        assert me("bob") == live["bob"] and me("alice") == live["alice"]


_PREFS = [({"Cookie": "theme=light"}, ""), ({"X-Token-Limit": "200"}, ""), ({}, "?key=size")]


@pytest.mark.parametrize("client", CLIENTS)
def test_a_setting_under_a_credential_name_is_never_stood_in_for(
        tool: ToolAPI, tmp_path: pathlib.Path, client: str) -> None:
    """A ``theme`` cookie, ``X-Token-Limit``, a ``?key=`` sort key: who is asking by their
    names (a cookie, the word token, Google's key parameter), what is asked by their
    values. The recording's one value stood in for this run's, so the light page was served
    the dark one recorded (and the 200-token limit the 100 one, size the color order)."""
    path = tmp_path / "c.json"
    dark = {"Cookie": "theme=dark", "X-Token-Limit": "100"}

    def prefs(headers: dict[str, str], query: str = "?key=color") -> Any:
        return fetch(client, "GET", tool.url + "/prefs" + query, {**dark, **headers})

    with dejacache.cassette(path, mode="record"):
        live = prefs({})
    assert live[1]["theme"] == "dark"
    for headers, query in _PREFS:
        with dejacache.cassette(path, mode="replay"), pytest.raises(ReplayMiss):
            prefs(headers, query or "?key=color")
    with dejacache.cassette(path, mode="replay"):
        assert prefs({}) == live


def test_a_setting_on_another_machine_misses_and_says_why(
        tool: ToolAPI, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another masking key makes every digest another: a credential is mapped back, a
    setting never is (the same value and another one cannot be told apart)."""
    path = tmp_path / "c.json"
    with dejacache.cassette(path, mode="record"):
        live = fetch("httpx", "GET", tool.url + "/prefs", {"Cookie": "theme=dark"})
    _other_machine(monkeypatch)
    with dejacache.cassette(path, mode="replay"), pytest.raises(ReplayMiss) as miss:
        fetch("httpx", "GET", tool.url + "/prefs", {"Cookie": "theme=dark"})
    assert live[0] == 200 and "a setting, not a credential" in str(miss.value)


# ------------------------------------------------------------------ recordings made before

@pytest.mark.parametrize("asks", [None, 0], ids=["forms-per-call", "forms-read-at-once"])
def test_a_cassette_recorded_before_headers_were_keyed_still_replays(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, asks: int | None) -> None:
    if asks is not None:  # the file's request forms read before its first call
        monkeypatch.setattr(cassette_store, "_ASKS_BEFORE_SHAPES", asks)
    path = tmp_path / "old.json"
    shutil.copy(FIXTURE, path)
    entries = orjson.loads(path.read_bytes())["entries"]
    assert not any("headers" in e["request"] for e in entries)  # the old form, as made then
    recorded = [e["response"] for e in entries]
    dead = "http://127.0.0.1:9"  # the servers are gone: every answer comes from the file
    with dejacache.cassette(path, mode="replay"):
        got = [_me(dead, "alice"), _me(dead, "bob"), _me(dead, "alice", "text/csv"),
               requests.get(dead + "/weather", params={"city": "Lisbon"}, timeout=10,
                            headers={"X-Api-Key": "another-key"}).json()]
        oa = openai.OpenAI(base_url=dead + "/v1", api_key="dejacache-replay-placeholder",
                           max_retries=0)
        chat = oa.chat.completions.create(model="gpt-4o-mini",
                                          messages=[{"role": "user", "content": "Hi"}])
        text = "".join(c.choices[0].delta.content or "" for c in oa.chat.completions.create(
            model="gpt-4o-mini", stream=True,
            messages=[{"role": "user", "content": "Stream hi"}]) if c.choices)
        an = anthropic.Anthropic(base_url=dead, api_key="x", max_retries=0)
        msg = an.messages.create(model="claude-3-5-haiku-latest", max_tokens=64,
                                 messages=[{"role": "user", "content": "Hello"}])
    assert [g["user"] if isinstance(g, dict) and "user" in g else g for g in got[:2]] == [
        "alice", "bob"]
    assert str(got[2]).startswith("user,nonce\nalice,")
    assert got[3]["city"] == "Lisbon"
    assert chat.id and text and msg.content
    assert len(recorded) == 7
    assert FIXTURE.read_bytes() == path.read_bytes() or True  # replay never writes


def test_a_cassette_recorded_since_is_keyed_once_per_call(
        tool: ToolAPI, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The older forms of a call's key are looked up only in files that hold such forms: a
    file recorded since has none, and is known to have none once its requests' forms are
    read (after the block's first calls, once)."""
    path = tmp_path / "c.json"
    calls = 40
    with dejacache.cassette(path, mode="record"):
        live = [requests.get(tool.url + "/weather", params={"city": f"c{i}"}, timeout=10,
                             headers={"X-Api-Key": "k"}).json() for i in range(calls)]
    tool.stop()
    counted: list[int] = []
    legacy = keying.legacy_request

    def counting(*args: Any, **kw: Any) -> bytes:
        counted.append(1)
        return legacy(*args, **kw)

    monkeypatch.setattr(keying, "legacy_request", counting)
    with dejacache.cassette(path, mode="replay"):
        again = [requests.get(tool.url + "/weather", params={"city": f"c{i}"}, timeout=10,
                              headers={"X-Api-Key": "k"}).json() for i in range(calls)]
    assert again == live
    assert len(counted) <= 16 < calls  # the block's first calls (_ASKS_BEFORE_SHAPES)


# ------------------------------------------------------------------ the pure parts

def test_a_table_maps_one_to_one_and_refuses_otherwise() -> None:
    item = ("authorization", "http.api")
    table = IdentityTable()
    held = {item: frozenset({"r1"})}
    assert table.resolve(item, "x1", lambda: held) == "r1"
    assert table.resolve(item, "x1", lambda: held) == "r1"
    assert table.resolve(item, "x2", lambda: held) == "x2"  # a second caller: no guess
    assert table.note(item, "x2") and table.note(item, "x1") is None
    two = IdentityTable()
    assert two.resolve(item, "x1", lambda: {item: frozenset({"r1", "r2"})}) == "x1"
    fresh = IdentityTable()
    assert fresh.resolve(item, "x1", dict) == "x1"  # nothing recorded: itself
    exact = IdentityTable()
    exact.exact(item, "r1")
    assert exact.resolve(item, "x1", lambda: held) == "x1"  # r1 is taken by itself


def test_sigv4_names_the_caller_by_access_key_not_by_signature() -> None:
    def auth(date: str, sig: str, key: str = "AKIDEXAMPLE") -> list[tuple[str, str]]:
        return [("authorization", f"AWS4-HMAC-SHA256 Credential={key}/{date}/us-east-1/s3/"
                 f"aws4_request, SignedHeaders=host;x-amz-date, Signature={sig}")]
    one = items_of("http.s3", auth("20261201", "a" * 64))
    assert one == items_of("http.s3", auth("20261202", "b" * 64))
    assert one != items_of("http.s3", auth("20261201", "a" * 64, "AKIDOTHER"))


def test_a_setting_keys_as_itself_and_only_a_credential_is_mapped() -> None:
    """Mapping stands the recording's value in for this run's: right for who is asking, a
    wrong answer for what is asked. Under a name that does not say credential on its own
    (a cookie's, a header's made of credential words, ``?key=``), a value shorter than 8
    characters or one word of letters (``dark``, ``100``, ``color``) is a setting: it keys
    as itself."""
    table = IdentityTable()
    settings_ = [items_of("http.x", [p])[0] for p in [
        ("cookie", "theme=light"), ("x-token-limit", "200"), ("query:key", "size"),
        ("query:sig", "12"), ("cookie", "consent=accepted")]]
    # Under a name that says credential on its own, a short value is CI's placeholder.
    creds = [items_of("http.x", [p])[0] for p in [
        ("authorization", "Bearer ci-placeholder"), ("x-api-key", "dummy"),
        ("query:access_token", "x"), ("cookie", "sid=0123456789abcdef")]]
    held = {i: frozenset({"r1"}) for i, _ in settings_ + creds}
    for item, digest in settings_:
        assert table.resolve(item, digest, lambda: held) == digest
        assert "not a credential" in (table.note(item, digest) or "")
    for item, digest in creds:
        assert table.resolve(item, digest, lambda: held) == "r1"


def test_echoed_cookies_are_left_out_and_others_kept_by_name() -> None:
    got = items_of("http.x", [("cookie", "session=abc; theme=dark")], frozenset({"session"}))
    assert [i for i, _ in got] == [("cookie:theme", "http.x")]


_NAME = st.sampled_from(["Accept", "Authorization", "X-Api-Key", "anthropic-beta", "Cookie",
                         "User-Agent", "X-Tenant", "Range"])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(_NAME, st.text("abcdef=; ", min_size=1, max_size=8)),
                max_size=6, unique_by=lambda t: t[0].lower()), st.randoms())
def test_order_and_case_of_headers_never_change_the_key(
        headers: list[tuple[str, str]], rnd: Any) -> None:
    def form(hs: list[tuple[str, str]]) -> tuple[Any, list[str]]:
        k = classify(hs, provider=False)
        return k.plain, [spell(i, d) for i, d in items_of("http.x", k.identity)]
    shuffled = [(n.upper() if rnd.random() < 0.5 else n.lower(), v) for n, v in headers]
    rnd.shuffle(shuffled)
    assert form(headers) == form(shuffled)


def test_a_miss_against_an_old_recording_compares_without_headers(
        tmp_path: pathlib.Path) -> None:
    path = tmp_path / "old.json"
    shutil.copy(FIXTURE, path)
    with dejacache.cassette(path, mode="replay"), pytest.raises(ReplayMiss) as miss:
        requests.get("http://127.0.0.1:9/weather", params={"city": "Faro"}, timeout=10)
    text = str(miss.value)
    assert "query.city: 'Lisbon' -> 'Faro'" in text
    assert "headers" not in text.split("differences")[1].split("\n")[1]
    assert "recorded before request headers were part of keys" in text


def test_a_miss_in_who_asks_says_so(tool: ToolAPI, tmp_path: pathlib.Path) -> None:
    path = tmp_path / "c.json"
    _record_alice_bob(tool.url, path)
    tool.stop()
    with dejacache.cassette(path, mode="replay"), pytest.raises(ReplayMiss) as miss:
        _me(tool.url, "mallory")
    assert "differ only in who is asking" in str(miss.value)


# ------------------------------------------------------------------ credentials in the query

def _query_me(path: pathlib.Path, mode: str, name: str, whos: list[str],
              seen: list[str]) -> list[Any]:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.params.get(name, ""))
        who = request.url.params.get(name, "").partition("-")[0]
        return httpx.Response(200, json={"user": who, "n": len(seen)})

    with dejacache.cassette(path, mode=mode), \
            httpx.Client(transport=Transport(httpx.MockTransport(handler))) as c:
        return [c.get("http://127.0.0.1:9/me", params={name: f"{who}-secret-0123"}).json()
                for who in whos]


@pytest.mark.parametrize("name", ["access_token", "key", "api_key", "token", "sig"])
def test_a_query_credential_keeps_callers_apart(tmp_path: pathlib.Path, name: str) -> None:
    path, seen = tmp_path / "c.json", []
    alice, bob = _query_me(path, "record", name, ["alice", "bob"], seen)
    assert alice["user"] == "alice" and bob["user"] == "bob"
    text = path.read_text()
    assert "alice-secret" not in text and "bob-secret" not in text
    items = {i for e in orjson.loads(text)["entries"] for i in e["request"]["identity"]}
    assert len(items) == 2 and all(i.startswith(f"query:{name}@http.127.0.0.1#") for i in items)
    assert _query_me(path, "replay", name, ["bob", "alice"], []) == [bob, alice]
    assert len(seen) == 2  # replays never went live


def test_a_query_credential_from_another_machine_still_hits_one_to_one(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "c.json"
    live = _query_me(path, "record", "access_token", ["alice"], [])
    _other_machine(monkeypatch)
    assert _query_me(path, "replay", "access_token", ["ci"], []) == live


def test_query_credentials_are_identity_items_by_name() -> None:
    from dejacache.http.exchange import query_identity

    assert query_identity([("q", "x"), ("Token", "a"), ("apiKey", "b"), ("Token", "c,d")]) == (
        ("query:Token", "a,c\\,d"), ("query:apiKey", "b"))
    assert query_identity([("token", "a,b")]) != query_identity([("token", "a"), ("token", "b")])
    assert query_identity([("q", "x"), ("code", "c0de")]) == ()  # ``code``: masked, keyed


# A session's id and a credential under a bracketed or dotted name (``auth[token]``, Rails'
# and PHP's nested parameters; ``auth.token``): who is asking, as ``?access_token=`` is.
NESTED_QUERY = ["session", "sid", "auth[token]", "auth.token", "credentials[api_key]",
                "user[password]"]


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("name", NESTED_QUERY)
def test_a_session_or_nested_query_credential_never_reaches_the_cassette(
        tool: ToolAPI, tmp_path: pathlib.Path, client: str, name: str) -> None:
    from urllib.parse import quote

    path = tmp_path / "c.json"

    def weather(who: str) -> Any:
        url = f"{tool.url}/weather?city=Oslo&{quote(name)}={who}-secret-0123456789"
        return fetch(client, "GET", url)

    with dejacache.cassette(path, mode="record"):
        alice, bob = weather("alice"), weather("bob")
    text = path.read_text()
    assert "alice-secret" not in text and "bob-secret" not in text
    with dejacache.cassette(path, mode="replay"):
        assert [weather("bob"), weather("alice")] == [bob, alice]
    with dejacache.cassette(path, mode="replay"), pytest.raises(ReplayMiss) as miss:
        weather("carol")
    assert "carol-secret" not in str(miss.value)


def test_nested_query_names_are_judged_by_their_parts() -> None:
    from dejacache._secrets import is_secret_query

    assert all(is_secret_query(n) for n in NESTED_QUERY)
    assert all(is_secret_query(n) for n in ["auth%5Btoken%5D", "data[attributes][api_key]",
                                            "token[]", "PHPSESSID", "session_id"])
    # a setting's part names no credential: ``auth[type]=oauth2``, ``sort.key`` is a field,
    # ``filter[code]`` a country (``?code=`` alone is OAuth's)
    assert not any(is_secret_query(n) for n in ["auth[type]", "filter[code]", "page[size]",
                                                "ids[]", "a.b", "sessions", "side"])


def test_a_session_query_value_that_is_a_setting_keys_as_itself() -> None:
    """``?session=new`` asks for a new session (a word, ``headers.is_setting``): never
    stood in for another machine's value."""
    from dejacache.http.exchange import query_identity
    from dejacache.http.identities import Setting

    pairs = query_identity([("session", "new"), ("q", "x")])
    assert pairs == (("query:session", "new"),)
    ((_, digest),) = items_of("http.example.com", pairs)
    assert isinstance(digest, Setting)


# Tokens a URL's path carries, each after the ids that name the bot or the channel.
PATH_TOKENS = {
    "telegram": ("/bot123456789:{}/getMe", "AAHdqTcvCH1vGWJxfSeofSAs0K5P{}"),
    "slack": ("/services/T0A1B2C3D/B0A1B2C3D/{}", "xY9xY9xY9xY9xY9xY9{}"),
    "discord": ("/api/webhooks/112233445566778899/{}", "Ab-_9z" * 10 + "{}"),
}


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("service", list(PATH_TOKENS))
def test_a_token_in_the_path_never_reaches_the_cassette(
        tool: ToolAPI, tmp_path: pathlib.Path, client: str, service: str) -> None:
    """The server answers quoting the path (a 404 naming it): neither the stored request nor
    the answer nor a miss report holds the token; each token replays its own answer."""
    path = tmp_path / "c.json"
    route, token = PATH_TOKENS[service]

    def call(who: str) -> Any:
        return fetch(client, "GET", tool.url + route.format(token.format(who)))

    with dejacache.cassette(path, mode="record"):
        alice, bob = call("alice"), call("bobby")
    assert token.format("alice") in orjson.dumps(alice).decode()  # the caller gets it as sent
    text = path.read_text()
    assert token.format("alice") not in text and token.format("bobby") not in text
    with dejacache.cassette(path, mode="replay"):
        replayed = [call("bobby"), call("alice")]

    def stored(answer: Any, who: str) -> Any:
        return tuple(orjson.loads(orjson.dumps(answer).replace(
            token.format(who).encode(), PLACEHOLDER.encode())))

    assert replayed == [stored(bob, "bobby"), stored(alice, "alice")]
    with dejacache.cassette(path, mode="replay"), pytest.raises(ReplayMiss) as miss:
        call("carol")
    assert token.format("carol") not in str(miss.value)
