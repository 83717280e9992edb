"""The control endpoint: a test runner opens a cassette per test and closes it with the
test's outcome; every field is checked, and a cassette outside the proxy's directory, or
open twice, is refused."""

from __future__ import annotations

import pathlib
from collections.abc import Callable
from typing import Any

import httpx2
import pytest
from fake_provider import FakeProvider

from dejacache.errors import CassetteError
from dejacache.proxying.handle import ProxyProcess, ProxySession

Open = Callable[..., ProxySession]
CHAT = {"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}]}


def control(process: ProxyProcess, path: str, body: Any = None) -> httpx2.Response:
    url = f"{process.url}/_dejacache{path}"
    if body is None:
        return httpx2.get(url, timeout=30)
    return httpx2.post(url, json=body, timeout=30)


def test_the_status_names_what_the_proxy_serves(proxy_process: ProxyProcess,
                                                proxy_dir: pathlib.Path) -> None:
    got = control(proxy_process, "").json()
    assert got["url"] == proxy_process.url and got["cassette"] is None
    assert got["cassette_dir"] == str(proxy_dir.resolve())
    assert got["mode"] == "auto" and "openai" in got["upstreams"]


@pytest.mark.parametrize(("body", "status", "says"), [
    ({}, 400, "needs \"cassette\""),
    ({"cassette": "a", "stirct": True}, 400, "unknown field 'stirct'"),
    ({"cassette": "a", "strict": "yes"}, 400, "'strict' has the wrong type"),
    ({"cassette": "a", "replay_until": True}, 400, "'replay_until' has the wrong type"),
    ({"cassette": "a", "mode": "playback"}, 400, "unknown mode 'playback'"),
    ({"cassette": "a", "live": ["kind:"]}, 400, "unknown kind"),
    ({"cassette": "../outside"}, 400, "outside the proxy's cassette directory"),
    ({"cassette": "/etc/passwd"}, 400, "outside the proxy's cassette directory"),
    ({"cassette": "a", "upstreams": {"openai": "ftp://x"}}, 400, "not an http(s) URL"),
])
def test_a_session_with_a_bad_field_is_refused(proxy_process: ProxyProcess, body: Any,
                                               status: int, says: str) -> None:
    out = control(proxy_process, "/sessions", body)
    assert out.status_code == status
    assert says in out.json()["error"]["message"]


def test_a_cassette_is_open_in_one_session_at_a_time(session_for: Open,
                                                     proxy_process: ProxyProcess) -> None:
    s = session_for("busy")
    out = control(proxy_process, "/sessions", {"cassette": str(s.cassette)})
    assert out.status_code == 409 and s.id in out.json()["error"]["message"]


def test_a_failed_test_leaves_its_cassette_unwritten(session_for: Open,
                                                     fake: FakeProvider) -> None:
    s = session_for("outcome", fake)
    httpx2.post(s.base_url("openai") + "/v1/chat/completions", json=CHAT, timeout=30)
    summary = s.close(ok=False)
    assert (summary["recorded"], summary["saved"]) == (1, False)
    assert not s.cassette.exists()
    s = session_for("outcome", fake)
    httpx2.post(s.base_url("openai") + "/v1/chat/completions", json=CHAT, timeout=30)
    assert s.close(ok=True)["saved"] and s.cassette.exists()


def test_a_closed_session_answers_no_more(session_for: Open, proxy_process: ProxyProcess
                                          ) -> None:
    s = session_for("closed")
    s.close(ok=False)
    out = httpx2.post(s.base_url("openai") + "/v1/chat/completions", json=CHAT, timeout=30)
    assert out.status_code == 404 and "no open session" in out.json()["error"]["message"]
    again = control(proxy_process, f"/sessions/{s.id}/close", {"ok": True})
    assert again.status_code == 404


def test_close_takes_the_outcome_only(session_for: Open, proxy_process: ProxyProcess) -> None:
    s = session_for("close-args")
    out = control(proxy_process, f"/sessions/{s.id}/close", {"ok": "yes"})
    assert out.status_code == 400 and "whether the test passed" in out.text


def test_a_session_routes_an_upstream_of_its_own(session_for: Open, fake: FakeProvider) -> None:
    s = session_for("routed")
    s.route("openai", fake.url)
    out = httpx2.post(s.base_url("openai") + "/v1/chat/completions", json=CHAT, timeout=30)
    assert out.status_code == 200 and fake.count() == 1


def test_without_a_default_cassette_a_plain_request_says_what_to_do(
        proxy_process: ProxyProcess) -> None:
    out = httpx2.post(proxy_process.url + "/openai/v1/chat/completions", json=CHAT,
                      timeout=30)
    assert out.status_code == 404
    assert "start the proxy with --cassette" in out.json()["error"]["message"]


def test_a_damaged_cassette_is_refused_by_name(proxy_process: ProxyProcess,
                                               proxy_dir: pathlib.Path) -> None:
    bad = proxy_dir / "damaged.json"
    bad.write_text('{"entries": [{"key": 1}]')
    out = control(proxy_process, "/sessions", {"cassette": "damaged.json"})
    assert out.status_code == 400 and str(bad) in out.json()["error"]["message"]
    assert control(proxy_process, "").json()["sessions"] == []


def test_unknown_control_paths_point_at_the_status(proxy_process: ProxyProcess) -> None:
    out = control(proxy_process, "/sessions/x/y/z", {})
    assert out.status_code == 404 and "see GET /_dejacache" in out.text
    assert httpx2.delete(f"{proxy_process.url}/_dejacache", timeout=30).status_code == 405


def test_a_passing_close_fails_when_a_request_missed(session_for: Open,
                                                     fake: FakeProvider) -> None:
    # The agent may swallow the 404 it was answered: the close must not.
    s = session_for("missed", fake, mode="replay")
    assert httpx2.post(s.base_url("openai") + "/v1/chat/completions", json=CHAT,
                       timeout=30).status_code == 404
    with pytest.raises(CassetteError, match=r"1 replay miss\(es\) in cassette .*missed\.json"
                                            r"(.|\n)*no recording of openai\.chat\.completions"):
        s.close(ok=True)
    assert s.summary is not None and s.summary["missed"] == 1  # closed: a second close is a no-op
    assert s.close(ok=True) is s.summary
    r = session_for("missed-expected", fake, mode="replay")
    httpx2.post(r.base_url("openai") + "/v1/chat/completions", json=CHAT, timeout=30)
    assert r.close(ok=True, expect_misses=True)["missed"] == 1


def test_a_passing_close_fails_when_a_strict_session_left_calls_unmade(
        session_for: Open, fake: FakeProvider) -> None:
    s = session_for("unmade", fake)
    for question in ("one", "two"):
        httpx2.post(s.base_url("openai") + "/v1/chat/completions", timeout=30,
                    json={**CHAT, "messages": [{"role": "user", "content": question}]})
    s.close(ok=True)
    r = session_for("unmade", fake, mode="replay", strict=True)
    httpx2.post(r.base_url("openai") + "/v1/chat/completions", timeout=30,
                json={**CHAT, "messages": [{"role": "user", "content": "one"}]})
    with pytest.raises(CassetteError, match=r"cassette .*unmade\.json did not hold: "
                                            r"(.|\n)*1 of the 2 recorded calls .* never made"):
        r.close(ok=True)
    assert r.summary is not None and r.summary["replayed"] == 1


def test_a_passing_close_fails_when_the_save_failed(session_for: Open, fake: FakeProvider,
                                                    proxy_dir: pathlib.Path,
                                                    request: pytest.FixtureRequest) -> None:
    s = session_for("unsaved", fake)
    httpx2.post(s.base_url("openai") + "/v1/chat/completions", json=CHAT, timeout=30)
    # Where the file goes is now a directory holding a file: no save can replace it.
    s.cassette.mkdir(parents=True)
    (s.cassette / "in-the-way").write_text("x")
    with pytest.raises(CassetteError, match=r"cassette .*unsaved\.json did not hold: "):
        s.close(ok=True)
    assert s.summary is not None and not s.summary["saved"]
