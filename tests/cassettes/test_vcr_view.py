"""``VcrView``: a cassette under vcrpy's ``Cassette`` names (``cassettes/vcr_view.py``)."""

from __future__ import annotations

import pathlib
from typing import Any

import orjson
import pytest

import dejacache
from dejacache.cassettes.vcr_view import VcrView
from loopback_provider import fake_provider_module

openai = pytest.importorskip("openai")
FakeProvider = fake_provider_module().FakeProvider


def _ask(base: str, q: str, **kw: Any) -> Any:
    with openai.OpenAI(base_url=base, api_key="sk-test-FAKE", max_retries=0,
                       http_client=dejacache.http_client()) as oc:
        got = oc.chat.completions.create(model="gpt-4o-mini",
                                         messages=[{"role": "user", "content": q}], **kw)
        # a stream is read before its client closes (its connection goes with the client)
        return list(got) if kw.get("stream") else got


def test_requests_responses_and_play_counts(tmp_path: pathlib.Path) -> None:
    p = tmp_path / "t.json"
    fake = FakeProvider().start()
    try:
        with dejacache.cassette(p, mode="record") as tape:
            view = VcrView(tape)
            assert len(view) == 0 and view.play_count == 0
            first = _ask(fake.openai_url, "one")
            _ask(fake.openai_url, "two", stream=True)
            assert len(view) == 2 and view.dirty and view.play_count == 0
            assert not view.all_played and view.record_mode == "all"
    finally:
        fake.stop()
    with dejacache.cassette(p, mode="replay") as tape:
        view = VcrView(tape)
        assert len(view) == 2 and view.rewound and view.write_protected
        assert view.play_count == 0 and not view.all_played
        assert _ask(fake.openai_url, "one").id == first.id
        assert view.play_count == 1 and view.play_counts == {0: 1} and not view.all_played
        req = view.requests[0]
        assert (req.method, req.uri, req.url, req.path) == (
            "POST", "/v1/chat/completions", "/v1/chat/completions", "/v1/chat/completions")
        assert orjson.loads(req.body or b"")["messages"][0]["content"] == "one"
        # what the key held as it is; credentials never stored
        assert req.headers == {"accept": "application/json", "content-type": "application/json"}
        assert req.query == [] and repr(req).startswith("<Request (POST)")
        resp = view.responses[0]
        assert resp["status"]["code"] == 200
        assert orjson.loads(resp["body"]["string"])["id"] == first.id
        assert b"data: " in view.responses[1]["body"]["string"]  # the stream's events
        assert [r for r, _ in view.data] and str(view).endswith("2 recorded response(s)>")
        assert view.path == str(p) and not view.dirty


def test_the_plugin_offers_vcr_and_vcr_cassette(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_it="""
import dejacache

f = dejacache.cache(name="f")(lambda x: x + 1)

def test_both(vcr, vcr_cassette, dejacache_cassette):
    assert vcr.tape is dejacache_cassette and vcr_cassette.tape is dejacache_cassette
    assert vcr.play_count == 0 and len(vcr) == 0
    assert f(1) == 2
    assert len(vcr) == 1 and vcr.requests[0].method == ""  # a function call, not HTTP
""")
    result = pytester.runpytest("-p", "no:xdist", "-p", "no:randomly", "-p", "no:cassetter",
                                "-p", "no:asyncio")
    result.assert_outcomes(passed=1)


def test_a_form_body_reads_as_the_form_sent(tmp_path: pathlib.Path) -> None:
    """Forms are keyed as their fields; the view shows them as vcrpy would, form-encoded,
    with a credential as its placeholder."""
    import httpx

    from provider_support import LoopbackHandler, LoopbackProvider

    class Echo(LoopbackHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["content-length"]))
            self.send_json(200, {"ok": True})

    class Server(LoopbackProvider):
        handler = Echo

    server = Server().start()
    p = tmp_path / "form.json"
    try:
        with dejacache.cassette(p, mode="record"):
            httpx.post(server.url + "/token", data={"grant_type": "client_credentials",
                                                    "client_secret": "cs-1", "scope": "a b"})
    finally:
        server.stop()
    with dejacache.cassette(p, mode="replay") as tape:
        body = VcrView(tape).requests[0].body
    assert body == b"grant_type=client_credentials&client_secret=%3CREDACTED%3E&scope=a+b"


def test_record_mode_in_vcrpys_words_path_and_unknown_names(tmp_path: pathlib.Path) -> None:
    p = tmp_path / "t.json"
    f = dejacache.cache(name="f")(lambda x: x + 1)
    with dejacache.cassette(p, mode="record") as tape:
        f(1)
        assert VcrView(tape).record_mode == "all"
    for mode, vcr_name in (("replay", "none"), ("auto", "new_episodes")):
        with dejacache.cassette(p, mode=mode) as tape:
            view = VcrView(tape)
            assert view.record_mode == vcr_name
            assert VcrView(tape, record_mode="once").record_mode == "once"
            assert not view.allow_playback_repeats
    with dejacache.cassette(p, mode="replay") as tape:
        view = VcrView(tape)
        f(1)
        # a name the stand-in does not keep is an error that says so, never a silent None
        with pytest.raises(AttributeError, match=r"has no 'cassette_library_dir'.*answers"):
            view.cassette_library_dir  # noqa: B018
        assert getattr(view, "match_on", "default") == "default"  # (getattr's default works)
        exported = pathlib.Path(view._path)
        assert exported.suffix == ".yaml" and exported.is_file()
        doc = orjson.loads(exported.read_bytes())
        assert doc["version"] == 1 and len(doc["interactions"]) == 1
        assert doc["interactions"][0]["request"]["method"] == ""  # a function call


def test_a_json_body_recorded_without_headers_says_it_is_json() -> None:
    from dejacache.cassettes.vcr_view import VcrRequest

    req = VcrRequest("openai.chat.completions", {"method": "post", "path": "/v1/x",
                                                 "body": {"model": "m"}})
    assert req.headers == {"content-type": "application/json"}
    text = VcrRequest("http", {"method": "post", "path": "/x", "body": {"text": "hi"}})
    assert text.headers == {} and text.body == b"hi"
