"""Format detection and refusals of ``dejacache import`` (no optional packages needed)."""

from __future__ import annotations

import pathlib

import pytest

import dejacache
from dejacache.cassettes.importers import detect_format, import_file
from dejacache.cli import main


def test_an_unknown_format_is_refused_naming_the_file(tmp_path: pathlib.Path) -> None:
    src = tmp_path / "notes.json"
    src.write_text('{"hello": "world"}')
    with pytest.raises(dejacache.CassetteError, match="unknown recording format") as info:
        import_file(src, tmp_path / "out.json")
    assert str(src) in str(info.value)
    assert not (tmp_path / "out.json").exists()


def test_a_dejacache_cassette_is_not_imported_again(tmp_path: pathlib.Path) -> None:
    tape = tmp_path / "tape.json"
    with dejacache.cassette(tape, mode="record"):
        dejacache.cache(lambda x: x + 1)(1)
    with pytest.raises(dejacache.CassetteError, match="already a dejacache cassette"):
        detect_format(tape)


def test_formats_are_read_from_content(tmp_path: pathlib.Path) -> None:
    a = tmp_path / "a.cassette"
    a.write_text('{"version": 1, "steps": []}')
    v = tmp_path / "v.json"
    v.write_text('{"version": 1, "interactions": []}')
    assert detect_format(a) == "agentcassette"
    assert detect_format(v) == "vcr"


def test_yaml_cassettes(tmp_path: pathlib.Path) -> None:
    pytest.importorskip("yaml")
    y = tmp_path / "v.yaml"
    y.write_text("interactions: []\nversion: 1\n")
    assert detect_format(y) == "vcr"
    bad = tmp_path / "bad.yaml"
    bad.write_text("interactions:\n- !!python/object/apply:os.system ['true']\n")
    with pytest.raises(dejacache.CassetteError, match="not a readable YAML cassette"):
        detect_format(bad)


def test_an_existing_output_is_kept_unless_forced(tmp_path: pathlib.Path) -> None:
    src = tmp_path / "a.json"
    src.write_text('{"version": 1, "steps": []}')
    out = tmp_path / "out.json"
    out.write_text("keep me")
    with pytest.raises(dejacache.ConfigurationError, match="exists") as info:
        import_file(src, out)
    assert "pass overwrite=True to replace it" in str(info.value)  # Python's word, not a flag
    assert "--force" not in str(info.value)
    assert out.read_text() == "keep me"
    with pytest.raises(dejacache.ConfigurationError, match="is the file being imported"):
        import_file(src, src, overwrite=True)


def test_cli_reports_errors_in_one_line(tmp_path: pathlib.Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["import", str(tmp_path / "missing.yaml"), "-o", str(tmp_path / "o.json")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("dejacache import: error: cannot read the recording")
    src = tmp_path / "a.json"
    src.write_text('{"version": 1, "steps": []}')
    assert main(["import", str(src), "-o", str(tmp_path / "o.json"),
                 "--function", "nonsense"]) == 1
    assert "expected NAME=module:attribute" in capsys.readouterr().err


_VCR_JSON = """{"version": 1, "interactions": [{
  "request": {"method": "GET", "uri": "http://127.0.0.1:9/api/items?page=1", "body": null,
              "headers": {"Accept": ["*/*"], "Authorization": ["Bearer sk-abcdef0123456789"]}},
  "response": {"status": {"code": 200, "message": "OK"},
               "headers": {"Content-Type": ["application/json"]},
               "body": {"string": "{\\"items\\": [1, 2]}"}}}]}"""

# Neither httpx nor httpx2 importable, as in a project whose tools use only requests.
_WITHOUT_HTTPX = """
import json, sys
sys.modules["httpx"] = sys.modules["httpx2"] = None
import urllib3
import dejacache
from dejacache.cassettes.importers import import_file
src, out = sys.argv[1:]
import_file(src, out)
with dejacache.cassette(out, mode="replay"):  # nothing listens on port 9
    r = urllib3.PoolManager().request("GET", "http://127.0.0.1:9/api/items?page=1")
print(json.dumps([r.status, r.json()]))
"""


def test_a_vcr_recording_imports_without_httpx_keyed_as_with_it(tmp_path: pathlib.Path) -> None:
    # A suite that moves from vcrpy with requests alone must not be told to install httpx:
    # its calls are recorded in dejacache's own request model, keyed as httpx keys them.
    import json
    import subprocess
    import sys

    pytest.importorskip("urllib3", reason="the replay check sends through urllib3 (the main "
                        "venv has it; the import extra's venv does not)")
    src = tmp_path / "items.json"
    src.write_text(_VCR_JSON)
    bare, with_httpx = tmp_path / "bare.json", tmp_path / "httpx.json"
    done = subprocess.run([sys.executable, "-c", _WITHOUT_HTTPX, str(src), str(bare)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [200, {"items": [1, 2]}]
    import_file(src, with_httpx)
    keys = [json.loads(p.read_text())["xref"]["keys"] for p in (bare, with_httpx)]
    assert keys[0] == keys[1] and len(keys[0]) == 1
    assert "sk-abcdef0123456789" not in bare.read_text()
