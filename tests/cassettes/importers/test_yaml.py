"""vcrpy YAML read with bounds: aliases, nesting and Python tags cannot make an import hang,
eat memory or run code, and whatever a file holds comes out as a report or a
``CassetteError`` naming the file (and the interaction, where there is one).

Runs wherever PyYAML is installed (``.venv`` and ``.venv-import``); httpx is the live HTTP path
every import goes through.
"""

from __future__ import annotations

import pathlib
import time

import pytest

yaml = pytest.importorskip("yaml")
pytest.importorskip("httpx")
hypothesis = pytest.importorskip("hypothesis")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import dejacache  # noqa: E402
from dejacache.cassettes.importers import import_file  # noqa: E402

URI = "https://api.openai.com/v1/chat/completions"


def _cassette(method: str = "POST", uri: str = URI, header: str = "[application/json]",
              body: str = "'{\"model\": \"m\"}'", prelude: str = "") -> str:
    return f"""{prelude}interactions:
- request:
    method: {method}
    uri: {uri}
    body: {body}
    headers:
      content-type: {header}
  response:
    status: {{code: 200, message: OK}}
    headers: {{content-type: [application/json]}}
    body: {{string: '{{"id": "chatcmpl-1", "object": "chat.completion"}}'}}
version: 1
"""


def _laughs(levels: int = 9, fan: int = 9) -> str:
    """Nine aliases of nine aliases of ... "lol": ~800 bytes that expand to 9**9 nodes."""
    lines = ['lol0: &lol0 "lol"']
    for i in range(1, levels + 1):
        lines.append(f"lol{i}: &lol{i} [" + ", ".join([f"*lol{i - 1}"] * fan) + "]")
    return "\n".join(lines) + "\n"


@pytest.mark.timeout(10)
@pytest.mark.parametrize("field", ["header", "uri", "method"])
def test_billion_laughs_in_a_header_uri_or_method_is_refused(
    field: str, tmp_path: pathlib.Path
) -> None:
    src, out = tmp_path / "laughs.yaml", tmp_path / "out.json"
    src.write_text(_cassette(prelude=_laughs(), **{field: "*lol9"}))
    assert src.stat().st_size < 1300
    started = time.perf_counter()
    with pytest.raises(dejacache.CassetteError, match="aliases expand") as info:
        import_file(src, out)
    assert time.perf_counter() - started < 5
    assert str(src) in str(info.value)
    assert not out.exists()


@pytest.mark.timeout(10)
def test_a_merge_key_bomb_is_refused(tmp_path: pathlib.Path) -> None:
    lines = ["m0: &m0 {a: lol}"]
    for i in range(1, 10):
        lines.append(f"m{i}: &m{i} {{<<: [" + ", ".join([f"*m{i - 1}"] * 9) + "]}")
    src = tmp_path / "merge.yaml"
    src.write_text("\n".join(lines) + "\n" + _cassette(header="*m9"))
    with pytest.raises(dejacache.CassetteError, match="aliases expand"):
        import_file(src, tmp_path / "out.json")


@pytest.mark.timeout(10)
def test_a_recursive_alias_is_refused(tmp_path: pathlib.Path) -> None:
    src = tmp_path / "loop.yaml"
    src.write_text(_cassette(header="&loop [*loop]"))
    with pytest.raises(dejacache.CassetteError, match="refers to itself"):
        import_file(src, tmp_path / "out.json")


@pytest.mark.timeout(10)
def test_nesting_past_the_limit_is_refused(tmp_path: pathlib.Path) -> None:
    src = tmp_path / "deep.yaml"
    src.write_text(_cassette(header="[" * 900 + "x" + "]" * 900))
    with pytest.raises(dejacache.CassetteError, match="nested deeper than"):
        import_file(src, tmp_path / "out.json")


def test_aliases_the_yaml_dumper_writes_still_load(tmp_path: pathlib.Path) -> None:
    # PyYAML anchors an object met twice: vcrpy files can hold a few ordinary aliases.
    shared = ["application/json"]
    doc = {"interactions": [{"request": {"method": "POST", "uri": URI, "body": "{}",
                                         "headers": {"content-type": shared}},
                             "response": {"status": {"code": 200, "message": "OK"},
                                          "headers": {"content-type": shared},
                                          "body": {"string": '{"id": "x"}'}}}],
           "version": 1}
    text = yaml.dump(doc)
    assert "&id001" in text and "*id001" in text
    src = tmp_path / "aliased.yaml"
    src.write_text(text)
    report = import_file(src, tmp_path / "out.json")
    assert len(report.converted) == 1 and not report.skipped


MALFORMED = {
    "bytesio state is a number": "!!python/object/new:_io.BytesIO {state: 5}",
    "iter args is a number": "!!python/object/apply:builtins.iter {args: 7}",
    "bytesio state is a mapping": "!!python/object/new:_io.BytesIO {state: {a: 1}}",
    "bytesio state is a size": "!!python/object/new:_io.BytesIO {state: [1000000000000]}",
    "bytesio state is empty": "!!python/object/new:_io.BytesIO {state: []}",
    "iter over a mapping": "!!python/object/apply:builtins.iter {args: [{a: 1}]}",
    "iter over a string": "!!python/object/apply:builtins.iter {args: [abc]}",
    "iter over numbers": "!!python/object/apply:builtins.iter {args: [[1, 2]]}",
    "iter past its end": "!!python/object/apply:builtins.iter {args: [[abc]], state: 5}",
    "an unknown key": "!!python/object/new:_io.BytesIO {state: [!!binary YQ==], kwds: {}}",
    "tuple of a mapping": "!!python/tuple {a: 1}",
    "bytesio of a scalar": "!!python/object/new:_io.BytesIO abc",
}


@pytest.mark.timeout(10)
@pytest.mark.parametrize("tag", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_python_tags_are_cassette_errors_naming_the_interaction(
    tag: str, tmp_path: pathlib.Path
) -> None:
    src, out = tmp_path / "tags.yaml", tmp_path / "out.json"
    src.write_text(_cassette(body=tag))
    with pytest.raises(dejacache.CassetteError) as info:
        import_file(src, out)
    text = str(info.value)
    assert str(src) in text and "interaction #0" in text
    assert not out.exists()


_VCRPY_BODIES = {
    "iterator": ("!!python/object/apply:builtins.iter\n      args:\n"
                 "      - - !!binary eyJtb2Rl\n        - !!binary bCI6ICJtIn0=\n      state: 0"),
    "bytesio": ("!!python/object/new:_io.BytesIO\n      state: !!python/tuple\n"
                "      - !!binary eyJtb2RlbCI6ICJtIn0=\n      - 0\n      - null"),
    "tuple": "!!python/str '{\"model\": \"m\"}'",
}


@pytest.mark.parametrize("body", _VCRPY_BODIES.values(), ids=_VCRPY_BODIES.keys())
def test_the_python_tags_vcrpy_writes_are_read(body: str, tmp_path: pathlib.Path) -> None:
    src, out = tmp_path / "tags.yaml", tmp_path / "out.json"
    src.write_text(_cassette(body=body))
    report = import_file(src, out)
    assert len(report.converted) == 1 and not report.skipped
    with dejacache.cassette(out, mode="replay"), \
            dejacache.http_client(library="httpx") as client:
        assert client.post(URI, content=b'{"model": "m"}').json()["id"] == "chatcmpl-1"


@pytest.mark.parametrize("tag", [
    "!!python/object/apply:os.system ['touch {marker}']",
    "!!python/object/new:subprocess.Popen [['touch', '{marker}']]",
    "!!python/name:os.system",
    "!!python/module:os",
    "!!python/object:builtins.dict {{}}",
])
def test_python_tags_never_construct_objects(tag: str, tmp_path: pathlib.Path) -> None:
    marker = tmp_path / "ran"
    src = tmp_path / "evil.yaml"
    src.write_text(_cassette(body=tag.format(marker=marker)))
    with pytest.raises(dejacache.CassetteError, match="not a readable YAML cassette"):
        import_file(src, tmp_path / "out.json")
    assert not marker.exists()


# ---------------------------------------------------------------- fuzzing

_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 10**12) | st.floats(allow_nan=True)
    | st.text(max_size=8) | st.binary(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                max_size=3),
    max_leaves=6,
)

_TAGS = ["!!python/object/new:_io.BytesIO", "!!python/object/apply:builtins.iter",
         "!!python/tuple", "!!python/str", "!!python/unicode", "!!binary", "!!set", "!!omap",
         "!!timestamp", "!!int", "!!float", "!!python/object/apply:os.system", "!!str",
         "!!merge", "!!null", "!!bool"]

_FIELDS = ["method", "uri", "body", "headers", "content-type", "status", "code", "string",
           "request", "response", "interactions", "version", "message"]


def _replace_field(text: str, field: str, value: str) -> str:
    key = f"{field}: "
    at = text.find(key)
    if at < 0:
        return text
    end = text.find("\n", at)
    return text[:at] + key + value + text[end:]


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    edits=st.lists(st.tuples(st.sampled_from(_FIELDS), st.sampled_from(_TAGS) | st.just(""),
                             _VALUES), min_size=1, max_size=3),
    cut=st.none() | st.integers(0, 600),
)
def test_mutated_cassettes_give_a_report_or_a_cassette_error(
    edits: list[tuple[str, str, object]], cut: int | None, tmp_path: pathlib.Path
) -> None:
    text = _cassette()
    for field, tag, value in edits:
        flow = yaml.safe_dump(value, default_flow_style=True, width=10**6).strip()
        flow = flow.removesuffix("\n...").strip()
        text = _replace_field(text, field, f"{tag} {flow}".strip())
    if cut is not None:
        text = text[:cut]
    src, out = tmp_path / "fuzz.yaml", tmp_path / "out.json"
    src.write_text(text)
    out.unlink(missing_ok=True)
    try:
        report = import_file(src, out)
    except dejacache.CassetteError as exc:
        assert str(src) in str(exc)
        return
    assert len(report.converted) + len(report.skipped) <= 1
