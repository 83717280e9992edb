"""pytest-recording's surface without pytest-recording (``_pytest_vcr.py``), through ``pytester``.

A small vcrpy suite is written as pytest-recording keeps one: ``@pytest.mark.vcr`` tests (a
parametrized one, a method), a ``vcr_config`` fixture, a ``pytest_recording_configure`` hook
with a matcher and a serializer, YAML cassettes under ``cassettes/<module>/``. It moves with
``dejacache migrate`` and no edit, and replays with nothing listening.
"""

from __future__ import annotations

import json
import pathlib

import pytest

from dejacache.cli import main

pytest.importorskip("httpx")
yaml = pytest.importorskip("yaml")

# Nothing listens here: every answer must come from a cassette.
URL = "http://127.0.0.1:9/v1/chat/completions"

CONFTEST = """
import pytest

@pytest.fixture(scope="module")
def vcr_config():
    return {"filter_headers": ["authorization"], "record_mode": "none"}

def pytest_recording_configure(config, vcr):
    import serializer
    vcr.register_serializer("yaml", serializer)
    vcr.register_matcher("method", lambda r1, r2: None)
    vcr.before_record_request = lambda r: r

@pytest.fixture(autouse=True)
def every_interaction_played(request, vcr):
    # as pydantic-ai's autouse checks read the cassette
    yield
    if vcr is None or vcr.record_mode != "none":
        return
    assert vcr.all_played, f"{vcr._path}: played {vcr.play_count}/{len(vcr)}"
    import os, yaml
    if not os.path.isfile(vcr._path):
        return
    with open(vcr._path) as f:
        doc = yaml.safe_load(f)
    assert [it["request"]["parsed_body"]["model"] for it in doc["interactions"]] == (
        ["m"] * len(vcr))
"""

# A serializer in the suite's own layout: JSON bodies kept parsed (pydantic-ai's does this).
SERIALIZER = """
import json, yaml

def serialize(cassette_dict):
    for it in cassette_dict["interactions"]:
        req = it["request"]
        if "application/json" in (req["headers"].get("content-type") or [""])[0]:
            req["parsed_body"] = json.loads(req.pop("body"))
    return yaml.safe_dump(cassette_dict)

def deserialize(text):
    return yaml.safe_load(text)
"""

TESTS = f"""
import httpx, pytest

def ask(q):
    r = httpx.post("{URL}", json={{"model": "m", "messages": [{{"role": "user", "content": q}}]}})
    return r.json()["choices"][0]["message"]["content"]

@pytest.mark.vcr
def test_ask():
    assert ask("one") == "ONE"
    assert ask("two") == "TWO"

@pytest.mark.vcr
@pytest.mark.parametrize("q", ["a b", "c/d"])
def test_param(q):
    assert ask(q) == q.upper()

class TestChat:
    @pytest.mark.vcr
    def test_method(self):
        assert ask("three") == "THREE"

def test_unmarked(vcr):
    assert vcr is not None  # named by the test itself: its dejacache cassette
"""


def _interaction(q: str) -> dict[str, object]:
    body = {"model": "m", "messages": [{"role": "user", "content": q}]}
    answer = {"id": "c1", "object": "chat.completion", "model": "m",
              "choices": [{"index": 0, "message": {"role": "assistant",
                                                   "content": q.upper()}}],
              "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}
    return {"request": {"method": "POST", "uri": URL, "body": json.dumps(body),
                        "headers": {"content-type": ["application/json"],
                                    "authorization": ["Bearer sk-FAKE-0123456789abcdef"]}},
            "response": {"status": {"code": 200, "message": "OK"},
                         "headers": {"content-type": ["application/json"]},
                         "body": {"string": json.dumps(answer)}}}


def _suite(pytester: pytest.Pytester) -> pathlib.Path:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(serializer=SERIALIZER, test_chat=TESTS)
    pytester.syspathinsert()
    d = pytester.path / "cassettes" / "test_chat"
    d.mkdir(parents=True)
    # pytest-recording's names: the test's name with its parametrize id, a class prefix,
    # characters a file name cannot hold replaced by "-"
    for name, qs in (("test_ask", ["one", "two"]), ("test_param[a b]", ["a b"]),
                     ("test_param[c-d]", ["c/d"]), ("TestChat.test_method", ["three"])):
        doc = {"interactions": [_interaction(q) for q in qs], "version": 1}
        (d / f"{name}.yaml").write_text(yaml.safe_dump(doc))
    return d


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:xdist", "-p", "no:randomly", "-p", "no:cassetter",
                              "-p", "no:asyncio", "-p", "no:recording", "-p", "no:agentcassette",
                              *args)


def test_a_vcr_suite_moves_with_migrate_and_runs_without_edits(
        pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DEJACACHE_MODE", raising=False)
    d = _suite(pytester)
    assert main(["migrate", str(pytester.path)]) == 0
    out = capsys.readouterr().out
    assert "4 cassette(s), 5 call(s) moved" in out
    for name in ("test_ask", "test_param[a b]", "test_param[c-d]", "TestChat.test_method"):
        assert (d / f"{name}.json").is_file(), name
    # what the cassettes cannot carry, each with its fix
    assert "pytest_recording_configure hook" in out and "custom matcher 'method'" in out
    assert "before_record_request" in out and out.count("fix: ") >= 3
    assert "sk-FAKE" not in "".join(p.read_text() for p in d.glob("*.json"))
    res = _run(pytester, "--record-mode=none")
    res.assert_outcomes(passed=5)
    res.stdout.fnmatch_lines(["calls: 5 replayed, 0 recorded, 0 missed*"])


def test_the_suites_checks_run_on_the_stand_in_and_fail_a_partly_played_cassette(
        pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]) -> None:
    d = _suite(pytester)
    assert main(["migrate", str(pytester.path)]) == 0
    capsys.readouterr()
    res = _run(pytester, "test_chat.py", "--record-mode=none", "-k", "test_ask")
    res.assert_outcomes(passed=1)
    # one more recorded call than the test makes: the suite's own check fails it
    doc = json.loads((d / "test_ask.json").read_text())
    assert len(doc["entries"]) == 2
    # a name no module under tests/ has: pytester imports it into this process
    short = "test_partly_played_vcr"
    (pytester.path / f"{short}.py").write_text(TESTS.split("class TestChat")[0].replace(
        'assert ask("two") == "TWO"', "pass"))
    (d.parent / short).mkdir()
    (d.parent / short / "test_ask.json").write_bytes((d / "test_ask.json").read_bytes())
    res = _run(pytester, f"{short}.py", "--record-mode=none", "-k", "test_ask")
    res.assert_outcomes(passed=1, errors=1)
    res.stdout.fnmatch_lines(["*played 1/2*"])


def test_the_vcr_path_holds_the_cassette_in_the_suites_layout(
        pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]) -> None:
    _suite(pytester)
    assert main(["migrate", str(pytester.path)]) == 0
    capsys.readouterr()
    pytester.makepyfile(test_layout="""
import httpx, pytest, yaml

@pytest.mark.vcr
@pytest.mark.default_cassette("test_ask")
def test_layout(vcr):
    import test_chat
    test_chat.ask("one"), test_chat.ask("two")
    assert vcr.record_mode == "none" and vcr.play_count == 2 and vcr.all_played
    assert vcr.path.endswith("test_ask.json")
    with open(vcr._path) as f:
        doc = yaml.safe_load(f)
    bodies = [it["request"]["parsed_body"] for it in doc["interactions"]]
    assert [b["messages"][0]["content"] for b in bodies] == ["one", "two"]
    with pytest.raises(AttributeError, match="has no 'cassette_library_dir'"):
        vcr.cassette_library_dir
""")
    (pytester.path / "cassettes" / "test_layout").mkdir()
    src = pytester.path / "cassettes" / "test_chat" / "test_ask.json"
    (pytester.path / "cassettes" / "test_layout" / "test_ask.json").write_bytes(
        src.read_bytes())
    _run(pytester, "test_layout.py", "--record-mode=none").assert_outcomes(passed=1)


@pytest.mark.parametrize(("name", "exists", "mode"), [
    ("none", True, "replay"), ("none", False, "replay"),
    ("once", True, "replay"), ("once", False, "record"),
    ("new_episodes", True, "auto"), ("all", True, "record"), ("rewrite", True, "record"),
])
def test_vcr_record_modes_map_onto_dejacaches(name: str, exists: bool, mode: str) -> None:
    from dejacache._pytest_vcr import vcr_mode

    assert vcr_mode(name, exists) == mode


def test_mode_precedence_and_the_ini_keys(pytester: pytest.Pytester,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DEJACACHE_MODE", raising=False)
    monkeypatch.delenv("CI", raising=False)
    pytester.makeini("""
[pytest]
dejacache_mode = none
dejacache_cassette_dir = recordings
""")
    pytester.makepyfile(test_ini="""
import dejacache, pytest

f = dejacache.cache(name="f")(lambda x: x + 1)

@pytest.mark.vcr
def test_vcr():
    assert f(1) == 2

@pytest.mark.dejacache
def test_plain():
    assert f(2) == 3
""")
    # the ini key's vcr name: replay, so nothing recorded misses
    res = _run(pytester)
    res.assert_outcomes(failed=2)
    res.stdout.fnmatch_lines(["*replay miss*"])
    # the command line wins over it, and the cassettes go where the other key says
    _run(pytester, "--dejacache-mode=record").assert_outcomes(passed=2)
    assert (pytester.path / "recordings" / "test_ini" / "test_vcr.json").is_file()
    assert (pytester.path / "recordings" / "test_ini" / "test_plain.json").is_file()
    _run(pytester).assert_outcomes(passed=2)
    # a record_mode in vcr_config ("all") is below the command line's --record-mode=none
    pytester.makeconftest("""
import pytest

@pytest.fixture
def vcr_config():
    return {"record_mode": "all"}
""")
    res = _run(pytester, "--record-mode=none", "-v")
    res.assert_outcomes(passed=2)
    res.stdout.fnmatch_lines(["calls: 2 replayed, 0 recorded*"])


def test_a_vcr_test_that_names_no_mode_replays_as_pytest_recordings_none(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    # pytest-recording's --record-mode defaults to none: a moved suite run with a bare
    # `pytest` must miss, not go live and record with the developer's key.
    monkeypatch.delenv("DEJACACHE_MODE", raising=False)
    monkeypatch.delenv("CI", raising=False)
    pytester.makepyfile(test_bare="""
import dejacache, pytest

f = dejacache.cache(name="f")(lambda x: x + 1)

@pytest.mark.vcr
def test_vcr(vcr, record_mode):
    assert vcr.record_mode == record_mode  # the fixture says what the test does
    assert f(1) == 2

@pytest.mark.dejacache
def test_plain():
    assert f(2) == 3
""")
    res = _run(pytester)
    res.assert_outcomes(passed=1, failed=1)  # the dejacache test records (auto), as before
    res.stdout.fnmatch_lines(["*test_vcr*replay miss*"])
    assert not (pytester.path / "cassettes" / "test_bare" / "test_vcr.json").exists()
    # recording is asked for, in either vocabulary
    _run(pytester, "--record-mode=once").assert_outcomes(passed=2)
    _run(pytester).assert_outcomes(passed=2)


def test_disable_recording_runs_vcr_tests_without_their_cassettes(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    # pytest-recording's --disable-recording (in CI scripts that check the live API) stopped
    # a moved suite at startup as an unknown option; it now runs vcr tests with no cassette.
    monkeypatch.delenv("DEJACACHE_MODE", raising=False)
    monkeypatch.delenv("CI", raising=False)
    pytester.makepyfile(test_live="""
import dejacache, pytest

runs = []
f = dejacache.cache(name="f")(lambda x: runs.append(x) or x + 1)

@pytest.mark.vcr
def test_vcr():
    assert f(1) == 2 and f(1) == 2
    assert runs == [1, 1]  # live both times: no cassette answered or recorded
""")
    _run(pytester, "--disable-recording").assert_outcomes(passed=1)
    assert not (pytester.path / "cassettes").exists()
    _run(pytester).assert_outcomes(failed=1)  # without it: replay, and no cassette: a miss


def test_the_markers_and_options_say_what_they_enforce(pytester: pytest.Pytester) -> None:
    # block_network and allowed_hosts were accepted and not enforced; now they seal a test.
    res = _run(pytester, "--markers")
    res.stdout.fnmatch_lines([
        "@pytest.mark.block_network(allowed_hosts=*): refuse this test's socket "
        "connections (loopback too*",
        "@pytest.mark.allowed_hosts(hosts): regexes of the hosts a test sealed by "
        "block_network may reach*",
    ])
    res.stdout.no_fnmatch_line("*not enforced*")
    _run(pytester, "--help").stdout.fnmatch_lines(["*--block-network*", "*--allowed-hosts=*"])


def test_another_plugins_vcr_fixture_is_named_once_in_the_header(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(other_vcr="""
import pytest

@pytest.fixture
def vcr():
    return "theirs"
""", test_it="""
def test_it(vcr):
    assert vcr == "theirs"
""")
    pytester.syspathinsert()
    res = _run(pytester, "-p", "other_vcr")
    res.assert_outcomes(passed=1)
    assert res.stdout.str().count("the vcr fixture and @pytest.mark.vcr are other_vcr's") == 1
