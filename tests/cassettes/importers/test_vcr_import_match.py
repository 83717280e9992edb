"""``dejacache import --match vcr``: a vcrpy suite whose recorded bodies are older than its code.

vcrpy never compares bodies, so a suite's cassettes hold requests its code no longer sends.
Each test records with the real vcrpy around the real SDKs against the loopback provider
("the old code"), then changes the request the way such suites drift ("the new code": a field
dropped, a string system prompt turned into text blocks, a character rewritten), imports,
stops the provider and replays. With ``--match vcr`` every call hits in order and one warning
per cassette names the stale fields; without it the same calls miss with a field diff.

vcrpy intercepts plain httpx, so this runs in ``.venv-import`` (``make test-import``).
"""

from __future__ import annotations

import pathlib
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

vcr = pytest.importorskip("vcr", reason="vcrpy runs in .venv-import (make test-import)")
openai = pytest.importorskip("openai")
if int(openai.__version__.partition(".")[0]) >= 3:
    pytest.skip("vcrpy patches httpx, which openai 3.x no longer sends through (httpx2): "
                "runs in .venv-import (make test-import)", allow_module_level=True)
anthropic = pytest.importorskip("anthropic")

import orjson  # noqa: E402

import dejacache  # noqa: E402
from dejacache.cli import main  # noqa: E402
from loopback_provider import fake_provider_module  # noqa: E402

FakeProvider = fake_provider_module().FakeProvider

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning")]

TOOLS: list[Any] = [{"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object", "properties": {}}}}]
STALE = ["body.messages[0].content changed", "body.n removed", "body.tool_choice removed",
         "body.system changed"]


@pytest.fixture
def fake() -> Iterator[Any]:
    server = FakeProvider(chunk_delay=0.001).start()
    yield server
    server.stop()


def _clients(base: str, *, replay: bool) -> tuple[Any, Any]:
    def kw() -> dict[str, Any]:
        return {"http_client": dejacache.http_client(library="httpx")} if replay else {}

    oc = openai.OpenAI(base_url=base + "/v1", api_key="sk-FAKE0123456789", max_retries=0,
                       **kw())
    ac = anthropic.Anthropic(base_url=base, api_key="sk-ant-FAKE0123456789", max_retries=0,
                             **kw())
    return oc, ac


def _calls(oc: Any, ac: Any, *, old: bool) -> list[str]:
    """Two chat completions to one URL, an Anthropic message and an Anthropic stream; the old
    code sends ``n`` and ``tool_choice``, an em dash, and a string system prompt."""
    dash = "\u2014" if old else "-"
    extra: dict[str, Any] = {"n": 1, "tool_choice": "none"} if old else {}
    system: Any = "Be terse." if old else [{"type": "text", "text": "Be terse."}]
    out = []
    for q in (f"hi {dash} there", "and again"):
        r = oc.chat.completions.create(model="gpt-4o-mini", tools=TOOLS, **extra,
                                       messages=[{"role": "user", "content": q}])
        out.append(r.id)  # (with tools offered the provider answers a tool call)
        extra.pop("tool_choice", None)  # (only the first call sent it: a per-call drift)
    m = ac.messages.create(model="claude-x", max_tokens=64, system=system,
                           messages=[{"role": "user", "content": "hi"}])
    out.append(m.id)
    events = ac.messages.create(model="claude-x", max_tokens=64, system=system, stream=True,
                                messages=[{"role": "user", "content": "hi"}])
    out.append("".join(e.delta.text for e in events if e.type == "content_block_delta"))
    return out


def _run(base: str, *, old: bool, replay: bool) -> list[str]:
    oc, ac = _clients(base, replay=replay)
    with oc, ac:
        return _calls(oc, ac, old=old)


@pytest.fixture
def recorded(fake: Any, tmp_path: pathlib.Path) -> tuple[pathlib.Path, list[str]]:
    """A vcrpy cassette of the old code's calls, and the answers it got."""
    src = tmp_path / "suite.yaml"
    with vcr.use_cassette(str(src), record_mode="all"):
        live = _run(fake.url, old=True, replay=False)
    assert len(set(live)) == 4  # the provider answers each call differently
    return src, live


def _import(src: pathlib.Path, out: pathlib.Path, capsys: pytest.CaptureFixture[str],
            *extra: str) -> str:
    assert main(["import", str(src), "-o", str(out), *extra]) == 0
    return capsys.readouterr().out


def _stale_warnings(record: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, dejacache.DejacacheWarning)]


def test_with_match_vcr_the_changed_calls_hit_in_order_and_one_warning_names_the_fields(
    fake: Any, recorded: tuple[pathlib.Path, list[str]], tmp_path: pathlib.Path,
    capsys: pytest.CaptureFixture[str]
) -> None:
    src, live = recorded
    out = tmp_path / "suite.json"
    text = _import(src, out, capsys, "--match", "vcr")
    assert "converted: 4 call(s) (matched on method + URL in recorded order)" in text
    doc = orjson.loads(out.read_bytes())
    assert [e["match"] for e in doc["entries"]] == ["vcr"] * 4
    seen = fake.count()
    fake.stop()

    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with dejacache.cassette(out, mode="replay") as tape:
            again = _run(fake.url, old=False, replay=True)
    assert again == live  # each call got its own recorded answer, in order
    assert tape.counters.replayed == 4 and tape.counters.missed == 0 and not tape.unused
    assert fake.count() == seen
    (message,) = _stale_warnings(record)  # one per cassette
    for field in STALE:
        assert field in message
    assert str(out) in message and "answered 4 call(s)" in message
    assert "anthropic.messages x2" in message and "openai.chat.completions x2" in message


def test_without_match_vcr_the_same_calls_miss_with_a_field_diff(
    fake: Any, recorded: tuple[pathlib.Path, list[str]], tmp_path: pathlib.Path,
    capsys: pytest.CaptureFixture[str]
) -> None:
    src, _ = recorded
    out = tmp_path / "suite.json"
    _import(src, out, capsys)
    fake.stop()
    oc, ac = _clients(fake.url, replay=True)
    with dejacache.cassette(out, mode="replay"), oc, ac, \
            pytest.raises(dejacache.ReplayMiss) as info:
        _calls(oc, ac, old=False)
    report = str(info.value)  # (the nearest recording is the second call: fewer changes)
    assert "no recording of openai.chat.completions matches this call" in report
    assert "body.n: removed (was 1)" in report
    assert "-> 'hi - there'" in report


def test_the_block_setting_matches_a_plain_import_the_vcrpy_way(
    fake: Any, recorded: tuple[pathlib.Path, list[str]], tmp_path: pathlib.Path,
    capsys: pytest.CaptureFixture[str]
) -> None:
    src, live = recorded
    out = tmp_path / "suite.json"
    _import(src, out, capsys)  # whole-request keys
    fake.stop()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with dejacache.cassette(out, mode="replay", match="vcr") as tape:
            again = _run(fake.url, old=False, replay=True)
    assert again == live
    assert tape.counters.replayed == 4 and not tape.unused
    (message,) = _stale_warnings(record)
    assert all(field in message for field in STALE)


def test_a_call_past_the_recorded_count_misses_instead_of_reusing_an_answer(
    fake: Any, recorded: tuple[pathlib.Path, list[str]], tmp_path: pathlib.Path,
    capsys: pytest.CaptureFixture[str]
) -> None:
    src, live = recorded
    out = tmp_path / "suite.json"
    _import(src, out, capsys, "--match", "vcr")
    fake.stop()
    oc, ac = _clients(fake.url, replay=True)
    with warnings.catch_warnings(record=True), \
            dejacache.cassette(out, mode="replay") as tape, oc, ac:
        warnings.simplefilter("always")
        assert _calls(oc, ac, old=False) == live
        with pytest.raises(dejacache.ReplayMiss,
                           match=r"no recording of openai\.chat\.completions"):
            oc.chat.completions.create(model="gpt-4o-mini",
                                       messages=[{"role": "user", "content": "a third"}])
    assert tape.counters.replayed == 4


def test_re_recording_upgrades_the_cassette_to_whole_request_matching(
    recorded: tuple[pathlib.Path, list[str]], tmp_path: pathlib.Path,
    capsys: pytest.CaptureFixture[str]
) -> None:
    src, _ = recorded
    out = tmp_path / "suite.json"
    _import(src, out, capsys, "--match", "vcr")
    provider = FakeProvider(chunk_delay=0.001).start()
    try:
        with dejacache.cassette(out, mode="record"):
            live = _run(provider.url, old=False, replay=True)
    finally:
        provider.stop()
    doc = orjson.loads(out.read_bytes())
    assert len(doc["entries"]) == 4 and not any("match" in e for e in doc["entries"])
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with dejacache.cassette(out, mode="replay") as tape:
            assert _run(provider.url, old=False, replay=True) == live
    assert tape.counters.replayed == 4 and not _stale_warnings(record)
    oc, ac = _clients(provider.url, replay=True)
    with dejacache.cassette(out, mode="replay"), oc, ac, pytest.raises(dejacache.ReplayMiss):
        _calls(oc, ac, old=True)  # matched on the whole request again: the old code misses


def test_auto_mode_records_a_call_past_the_count_as_a_normal_entry(
    fake: Any, recorded: tuple[pathlib.Path, list[str]], tmp_path: pathlib.Path,
    capsys: pytest.CaptureFixture[str]
) -> None:
    src, live = recorded
    out = tmp_path / "suite.json"
    _import(src, out, capsys, "--match", "vcr")
    oc, ac = _clients(fake.url, replay=True)
    before = fake.count()
    with warnings.catch_warnings(record=True), \
            dejacache.cassette(out, mode="auto") as tape, oc, ac:
        warnings.simplefilter("always")
        assert _calls(oc, ac, old=False) == live
        oc.chat.completions.create(model="gpt-4o-mini",
                                   messages=[{"role": "user", "content": "a third"}])
    assert fake.count() == before + 1 and tape.counters.recorded == 1
    entries = orjson.loads(out.read_bytes())["entries"]
    assert [e.get("match") for e in entries] == ["vcr"] * 4 + [None]


async def test_the_async_clients_are_matched_the_same_way(
    fake: Any, recorded: tuple[pathlib.Path, list[str]], tmp_path: pathlib.Path,
    capsys: pytest.CaptureFixture[str]
) -> None:
    src, live = recorded
    out = tmp_path / "suite.json"
    _import(src, out, capsys, "--match", "vcr")
    fake.stop()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        async with dejacache.cassette(out, mode="replay") as tape, openai.AsyncOpenAI(
                base_url=fake.url + "/v1", api_key="another-key", max_retries=0,
                http_client=dejacache.async_http_client(library="httpx")) as aoc:
            got = [(await aoc.chat.completions.create(
                model="gpt-4o-mini", tools=TOOLS, messages=[{"role": "user", "content": q}])).id
                for q in ("hi - there", "and again")]
    assert got == live[:2]
    assert tape.counters.replayed == 2 and len(tape.unused) == 2  # the Anthropic calls
    (message,) = _stale_warnings(record)
    assert "body.n removed" in message and "answered 2 call(s)" in message


def test_the_vcr_match_is_refused_for_agentcassette_recordings(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "a.json"
    src.write_text('{"version": 1, "steps": []}')
    assert main(["import", str(src), "-o", str(tmp_path / "o.json"), "--match", "vcr"]) == 1
    assert "match='vcr' is for vcrpy recordings" in capsys.readouterr().err


# ---------------------------------------------------------------- the pytest plugin

_QUIET = ("-p", "no:xdist", "-p", "no:hypothesispytest", "-p", "no:anyio", "-p", "no:asyncio",
          "-p", "no:timeout", "-W", "error::dejacache.DejacacheWarning")

# A test moved over from pytest-recording: its calls, and its assertions on the cassette.
_SUITE = """
import pytest, openai, dejacache

def calls():
    oc = openai.OpenAI(base_url="{base}/v1", api_key="sk-FAKE0123456789", max_retries=0,
                       http_client=dejacache.http_client(library="httpx"))
    with oc:
        return [oc.chat.completions.create(
            model="gpt-4o-mini", tools={tools!r},
            messages=[{{"role": "user", "content": q}}]).id for q in ("hi - there", "and again")]

{marker}
def test_replays(vcr):
    assert vcr.play_count == 0 and len(vcr) == 2 and not vcr.all_played
    assert calls() == {ids!r}
    assert vcr.play_count == 2 and vcr.all_played and vcr.write_protected
    first = vcr.requests[0]
    assert (first.method, first.uri, first.url) == ("POST",) + ("/v1/chat/completions",) * 2
    assert b"\\\\u2014" in first.body or "\\u2014".encode() in first.body  # as recorded
    assert first.headers == {{"content-type": "application/json"}}  # a JSON body, as sent
    assert [r["status"]["code"] for r in vcr.responses] == [200, 200]
    assert b"{first_id}" in vcr.responses[0]["body"]["string"]
"""


DOCUMENTED_FILTER = """
[tool.pytest.ini_options]
filterwarnings = [
    "error",
    "default:dejacache. cassette .* by method \\\\+ URL:dejacache.DejacacheWarning",
]
"""


def _suite(pytester: pytest.Pytester, src: pathlib.Path, live: list[str], base: str,
           marker: str, capsys: pytest.CaptureFixture[str], *extra: str) -> None:
    where = pytester.path / "cassettes" / "test_moved"
    where.mkdir(parents=True)
    _import(src, where / "test_replays.json", capsys, *extra)
    pytester.makepyfile(test_moved=_SUITE.format(
        base=base, tools=TOOLS, marker=marker, ids=live[:2], first_id=live[0]))


@pytest.fixture
def two_calls(fake: Any, tmp_path: pathlib.Path) -> tuple[pathlib.Path, list[str]]:
    """A vcrpy cassette of the old code's two chat completions (``n``, an em dash)."""
    src = tmp_path / "two.yaml"
    with vcr.use_cassette(str(src), record_mode="all"):
        oc, ac = _clients(fake.url, replay=False)
        with oc, ac:
            live = [oc.chat.completions.create(
                model="gpt-4o-mini", tools=TOOLS, n=1,
                messages=[{"role": "user", "content": q}]).id
                for q in ("hi \u2014 there", "and again")]
    return src, live


@pytest.mark.parametrize(("marker", "extra"), [
    ('@pytest.mark.dejacache(mode="replay")', ("--match", "vcr")),
    ('@pytest.mark.dejacache(mode="replay", match="vcr")', ()),
], ids=["import-match-vcr", "marker-match-vcr"])
def test_a_moved_suite_replays_and_introspects_its_cassette_under_the_plugin(
    pytester: pytest.Pytester, fake: Any, two_calls: tuple[pathlib.Path, list[str]],
    capsys: pytest.CaptureFixture[str], marker: str, extra: tuple[str, ...]
) -> None:
    src, live = two_calls
    _suite(pytester, src, live, fake.url, marker, capsys, *extra)
    fake.stop()
    result = pytester.runpytest(*_QUIET, "-p", "no:randomly", "-W",
                                "ignore::DeprecationWarning")
    # one warning, raised at the end of the test under -W error: the test itself passed
    result.assert_outcomes(passed=1, errors=1)
    text = result.stdout.str()
    assert "body.messages[0].content changed, body.n removed" in text
    # the filter the migration page suggests: this warning shown, the others still errors
    pytester.makepyprojecttoml(DOCUMENTED_FILTER)
    result = pytester.runpytest(*_QUIET[:-2], "-p", "no:randomly", "-W",
                                "ignore::DeprecationWarning")
    result.assert_outcomes(passed=1, warnings=1)


def test_a_marker_with_an_unknown_match_is_a_configuration_error(
    pytester: pytest.Pytester
) -> None:
    pytester.makepyfile(test_bad="""
import pytest

@pytest.mark.dejacache(match="body")
def test_it():
    pass
""")
    result = pytester.runpytest(*_QUIET, "-p", "no:randomly")
    result.assert_outcomes(errors=1)
    assert "match must be one of 'request', 'vcr', not 'body'" in result.stdout.str()
