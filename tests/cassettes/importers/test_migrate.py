"""``dejacache migrate [TESTS_DIR]`` (``cassettes/importers/migrate.py``): every vcrpy cassette
of a suite imported beside itself, and what the suite's code does that a cassette cannot carry.
The plugin side (the migrated suite run without pytest-recording) is ``tests/test_pytest_vcr.py``.
"""

from __future__ import annotations

import gzip
import json
import pathlib

import pytest

yaml = pytest.importorskip("yaml")
pytest.importorskip("httpx")

from dejacache.cassettes.importers.migrate import migrate, target_for  # noqa: E402
from dejacache.cli import main  # noqa: E402

URL = "https://api.openai.com/v1/chat/completions"


def _doc(q: str) -> dict[str, object]:
    answer = {"id": "c", "object": "chat.completion", "model": "m", "choices": [],
              "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
    return {"version": 1, "interactions": [{
        "request": {"method": "POST", "uri": URL, "body": json.dumps({"q": q}),
                    "headers": {"content-type": ["application/json"]}},
        "response": {"status": {"code": 200, "message": "OK"},
                     "headers": {"content-type": ["application/json"]},
                     "body": {"string": json.dumps(answer)}}}]}


def test_names_keep_the_test_id_and_drop_the_serializers_suffixes() -> None:
    d = pathlib.Path("t/cassettes/test_m")
    assert target_for(d / "test_a[x-1].yaml") == d / "test_a[x-1].json"
    assert target_for(d / "test_a[v0].yaml.gz") == d / "test_a[v0].json"
    assert target_for(d / "TestC.test_b.yml") == d / "TestC.test_b.json"
    assert target_for(d / "test_c.json.gz") == d / "test_c.json"


def test_a_suite_moves_and_other_files_are_passed_over(tmp_path: pathlib.Path,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    d = tmp_path / "tests" / "cassettes" / "test_chat"
    d.mkdir(parents=True)
    (d / "test_a[p q].yaml").write_text(yaml.safe_dump(_doc("a")))
    (d / "test_b.yaml.gz").write_bytes(gzip.compress(yaml.safe_dump(_doc("b")).encode()))
    (d / "test_c.yaml").write_text(yaml.safe_dump({"requests": [_doc("c")["interactions"][0][
        "request"]], "responses": [_doc("c")["interactions"][0]["response"]]}))
    # not vcrpy's: a gRPC recorder's "interactions", a settings file, vcrpy's JSON named as
    # its target would be, a recording none of whose calls converts
    (d / "test_x.xai.yaml").write_text(yaml.safe_dump(
        {"interactions": [{"request_sample": {"json": {}}}]}))
    (tmp_path / "tests" / "settings.yaml").write_text("name: x\n")
    (d / "test_j.json").write_text(json.dumps(_doc("j")))
    bad = _doc("z")
    bad["interactions"][0]["request"]["uri"] = "ftp://host/x"  # type: ignore[index]
    (d / "test_z.yaml").write_text(yaml.safe_dump(bad))
    assert main(["migrate", str(tmp_path / "tests")]) == 1  # (one failed: test_j)
    out = capsys.readouterr().out
    assert "3 cassette(s), 3 call(s) moved; 0 call(s) skipped; 2 file(s) failed" in out
    for name in ("test_a[p q]", "test_b", "test_c"):
        assert (d / f"{name}.json").is_file()
    assert not (d / "test_x.xai.json").exists() and "test_x" not in out
    assert "could not move" in out and "test_j.json: vcrpy's JSON serializer" in out
    assert "test_z.yaml: no call could be converted: not an HTTP request" in out
    # again: what is there is kept, unless --force
    again = migrate(tmp_path / "tests")
    assert not again.imported and len(again.existing) == 3
    assert len(migrate(tmp_path / "tests", force=True).imported) == 3


def test_what_the_code_does_is_listed_with_its_fix(tmp_path: pathlib.Path) -> None:
    tests = tmp_path / "tests"
    (tests / "cassettes" / "test_m").mkdir(parents=True)
    (tests / "cassettes" / "test_m" / "test_a.yaml").write_text(yaml.safe_dump(_doc("a")))
    (tests / "conftest.py").write_text('''
def pytest_recording_configure(config, vcr):
    vcr.register_persister(P())
    vcr.register_matcher("region_uri", region_uri)
    vcr.before_record_response = scrub

def vcr_config():
    return {"allow_playback_repeats": True}
''')
    (tests / "test_m.py").write_text('''
@pytest.mark.vcr("extra.yaml")
def test_a():
    with my_vcr.use_cassette("x.yaml"):
        pass
''')
    (tmp_path / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\nfilterwarnings = [\n    "error",\n]\n')
    notes = migrate(tests).notes
    said = "\n".join(f"{n.where}: {n.what} / {n.fix}" for n in notes)
    for expected in ("conftest.py:2: a pytest_recording_configure hook",
                     "conftest.py:3: a custom persister",
                     "conftest.py:4: custom matcher 'region_uri'",
                     "conftest.py:5: before_record_response",
                     "conftest.py:8: allow_playback_repeats",
                     "test_m.py:2: @pytest.mark.vcr with extra cassettes",
                     "test_m.py:4: vcr.use_cassette",
                     "pyproject.toml:3: warnings are errors"):
        assert expected in said, expected
    assert all(n.fix for n in notes)


def test_nothing_to_move_is_said_and_exits_1(tmp_path: pathlib.Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["migrate", str(tmp_path)]) == 1
    assert "no vcrpy cassette under" in capsys.readouterr().err
    assert main(["migrate", str(tmp_path / "missing")]) == 1
    assert "is not a directory" in capsys.readouterr().err
