"""Payloads stored once by hash beside the cassette (``cassettes/blobs.py``).

The HTTP case is the real openai SDK sending an image input to the loopback provider; the
others are ``@cache`` tools returning a long text and bytes. Each is recorded, then replayed
with the provider gone: what comes back equals what was recorded, the file holds references
only, and ``verify``, ``scan``, ``show`` and the report see the blobs.
"""

from __future__ import annotations

import base64
import os
import pathlib
import time
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

import dejacache
from dejacache.cassettes import atomic, blobs
from dejacache.cassettes import format as fmt
from dejacache.cassettes.pack import Packer, iter_strings
from dejacache.cli import main
from dejacache.errors import CassetteError
from loopback_provider import fake_provider_module

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 12
IMAGE = "data:image/png;base64," + base64.b64encode(PNG).decode()
SECRET = "sk-proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z" * 2


@pytest.fixture
def provider() -> Iterator[Any]:
    server = fake_provider_module().FakeProvider().start()
    try:
        yield server
    finally:
        server.stop()


def _ask_about_the_image(url: str) -> str:
    import openai

    with openai.OpenAI(base_url=url, api_key="sk-test-key-0000000000000000", max_retries=0) as c:
        r = c.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": [
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": IMAGE}}]}])
    return str(r.choices[0].message.content)


@dejacache.cache(kind="tool")
def fetch_page(url: str) -> str:
    # A tool's long output: text past MIN_TEXT, holding a credential two ways.
    return (f"page {url}\n" + "lorem ipsum dolor sit amet " * 3000
            + f"\nkey: {SECRET}\n" + '{"password": "hunter2-hunter2"}\n')


@dejacache.cache(kind="tool")
def render_audio(seconds: int) -> bytes:
    return bytes((i * 7 + seconds) % 256 for i in range(4000 * seconds))


def _blob_files(folder: pathlib.Path) -> list[pathlib.Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


def test_an_image_input_a_long_tool_output_and_bytes_are_kept_once_beside_the_cassette(
        tmp_path: pathlib.Path, provider: Any) -> None:
    path = tmp_path / "cassettes" / "agent.json"
    with dejacache.cassette(path, mode="record"):
        said = _ask_about_the_image(provider.openai_url)
        page = fetch_page("https://example.com")
        audio = render_audio(2)
    data = path.read_bytes()
    assert base64.b64encode(PNG[:60]) not in data  # the payloads are not in the file
    assert b"lorem ipsum" not in data and data.count(fmt.BLOB_REF.encode()) >= 3
    files = _blob_files(path.parent / "blobs")
    assert len(files) == 3 and all(f.name == blobs.blob_hash(f.read_bytes()) for f in files)
    assert sum(f.stat().st_size for f in files) > 3 * len(data)
    n = provider.count()
    provider.stop()
    with dejacache.cassette(path, mode="replay"):
        assert _ask_about_the_image(provider.openai_url) == said
        assert fetch_page("https://example.com") == page.replace(SECRET, "<REDACTED>")
        assert render_audio(2) == audio
    assert provider.count() == n


def test_the_same_payload_in_two_tests_is_one_blob(tmp_path: pathlib.Path) -> None:
    for name in ("first", "second"):
        with dejacache.cassette(tmp_path / f"{name}.json", mode="record"):
            render_audio(3)
            render_audio(1)
    assert len(_blob_files(tmp_path / "blobs")) == 2
    before = (tmp_path / "first.json").read_bytes()
    with dejacache.cassette(tmp_path / "first.json", mode="record"):  # unchanged: no diff
        render_audio(3)
        render_audio(1)
    assert (tmp_path / "first.json").read_bytes() == before


def test_a_missing_or_altered_blob_is_refused_never_replayed(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "c.json"
    with dejacache.cassette(path, mode="record"):
        render_audio(2)
    (blob,) = _blob_files(tmp_path / "blobs")
    good = blob.read_bytes()
    blob.write_bytes(good[:-4] + b"AAAA")
    with dejacache.cassette(path, mode="replay"), pytest.raises(CassetteError) as info:
        render_audio(2)
    assert blob.name in str(info.value) and "altered" in str(info.value)
    blob.unlink()
    with dejacache.cassette(path, mode="replay"), pytest.raises(CassetteError) as info:
        render_audio(2)
    assert "missing" in str(info.value) and str(blob) in str(info.value)


def _verify(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, str]]:
    status = main(["verify", "-v", *args])
    rows = {}
    for line in capsys.readouterr().out.splitlines():
        parts = line.split(maxsplit=3)
        if len(parts) >= 3 and parts[1] == "blobs":
            rows[pathlib.Path(parts[0]).name] = " ".join(parts[2:])
    return status, rows


def test_verify_checks_every_blob_and_fix_removes_the_unused(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "cassettes" / "c.json"
    with dejacache.cassette(path, mode="record"):
        render_audio(1)
        render_audio(2)
    status, rows = _verify(capsys, str(path))
    assert status == 0 and rows["c.json"].startswith("ok 2 blobs")
    assert rows["blobs"].startswith("ok")
    # a re-recording that no longer makes one call leaves its blob unused
    with dejacache.cassette(path, mode="record"):
        render_audio(1)
    status, rows = _verify(capsys, str(path))
    assert status == 0 and rows["c.json"].startswith("ok 1 blob ")
    assert rows["blobs"].startswith("ok")  # written a moment ago: a save may be under way
    for f in _blob_files(path.parent / "blobs"):
        os.utime(f, (time.time() - 2 * blobs.GRACE,) * 2)
    status, rows = _verify(capsys, str(path))
    assert rows["blobs"].startswith("warn 1 unused blob")
    status, rows = _verify(capsys, "--fix", str(path))
    assert rows["blobs"].startswith("fixed removed 1 unused blob")
    assert len(_blob_files(path.parent / "blobs")) == 1
    (used,) = _blob_files(path.parent / "blobs")
    used.write_bytes(used.read_bytes()[::-1])
    status, rows = _verify(capsys, str(path))
    assert status == 1 and rows["c.json"].startswith("fail 1 altered: " + used.name)
    used.unlink()
    status, rows = _verify(capsys, "--fix", str(path))
    assert status == 1 and rows["c.json"].startswith("fail 1 missing: " + used.name)


def test_a_cassette_beside_that_cannot_be_read_keeps_every_blob(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    with dejacache.cassette(tmp_path / "c.json", mode="record"):
        render_audio(1)
    (tmp_path / "c.json").unlink()
    (tmp_path / "broken.json").write_text('{"entries": [ "@ref:blob:')
    for f in _blob_files(tmp_path / "blobs"):
        os.utime(f, (time.time() - 2 * blobs.GRACE,) * 2)
    _verify(capsys, "--fix", str(tmp_path / "broken.json"))
    assert len(_blob_files(tmp_path / "blobs")) == 1  # never removed in doubt


def test_redaction_and_scan_see_inside_text_blobs(tmp_path: pathlib.Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "cassettes" / "c.json"
    with dejacache.cassette(path, mode="record"):
        fetch_page("https://example.com")
    (text,) = _blob_files(path.parent / "blobs")
    kept = text.read_text()
    assert SECRET not in kept and "<REDACTED>" in kept  # redacted before it was cut out
    assert main(["scan", "--plain", str(path)]) == 1
    out = capsys.readouterr().out
    assert "credential field 'password'" in out and f"(blob {text})" in out
    assert main(["scan", "--plain", str(tmp_path)]) == 1  # the blob is read with its cassette, once
    assert capsys.readouterr().out.count("credential field 'password'") == 1


def test_show_and_the_report_list_blobs_by_size_and_type(
        tmp_path: pathlib.Path, provider: Any, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.json"
    with dejacache.cassette(path, mode="record"):
        _ask_about_the_image(provider.openai_url)
        render_audio(3)
    assert main(["show", "--plain", str(path)]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("blobs: 2"))
    assert "image/png" in line
    image = next(b for b in dejacache.load_cassette(path).blobs if "image" in b.kind)
    assert image.size == len(IMAGE) and image.steps == (0,)
    report = tmp_path / "r.html"
    assert main(["report", str(path), "-o", str(report)]) == 0
    page = report.read_text()
    assert "<h3>Blobs</h3>" in page and image.hash in page and "image/png" in page


def test_a_crash_before_the_cassette_leaves_only_unused_blobs(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "c.json"

    def killed(*a: Any, **k: Any) -> None:
        raise OSError("killed")

    monkeypatch.setattr(atomic, "_atomic_write", killed)
    with pytest.raises(CassetteError), dejacache.cassette(path, mode="record"):
        render_audio(2)
    assert not path.exists() and len(_blob_files(tmp_path / "blobs")) == 1


def test_blobs_false_and_a_threshold(tmp_path: pathlib.Path) -> None:
    with dejacache.cassette(tmp_path / "inline.json", mode="record", blobs=False):
        render_audio(1)
    assert not (tmp_path / "blobs").exists()
    with dejacache.cassette(tmp_path / "big.json", mode="record", blobs=50_000):
        render_audio(1)  # 5,336 characters of base64: under the threshold
        render_audio(10)
    assert len(_blob_files(tmp_path / "blobs")) == 1
    with pytest.raises(dejacache.ConfigurationError):
        dejacache.cassette(tmp_path / "x.json", blobs=-1)


_B64 = st.binary(min_size=0, max_size=3000).map(lambda b: base64.b64encode(b).decode())
_TREES = st.recursive(
    st.one_of(st.text(max_size=40), _B64, st.integers(-(2**63), 2**63 - 1), st.none(),
              _B64.map(lambda s: "data:audio/wav;base64," + s)),
    lambda kids: st.one_of(st.lists(kids, max_size=4),
                           st.dictionaries(st.text(max_size=8), kids, max_size=4)),
    max_leaves=12)


def _packed(tree: Any) -> tuple[Any, dict[str, Any], dict[str, str]]:
    """``tree`` packed with payloads of 64 bytes (text: 200) sunk as blobs: the packed tree,
    its shared values and the blobs' texts by hash."""
    sink = blobs.Sink(min_payload=64, min_text=200)
    values: dict[str, Any] = {}
    packed = Packer(values, blobs=sink).pack_root(tree)
    return packed, values, {h: d.decode() for h, d in sink.pending.items()}


@given(_TREES)
def test_packing_with_blobs_round_trips(tree: Any) -> None:
    packed, values, store = _packed(tree)

    def resolve(ref: str) -> Any:
        h = blobs.blob_of(ref)
        return store[h] if h is not None else values[ref]

    assert fmt.unpack(packed, resolve) == tree
    assert all(not (type(s) is str and len(s) >= 64 and blobs.is_payload(s, 64, 200))
               for s in iter_strings(orjson.loads(orjson.dumps(packed))))


def test_blob_references_weigh_as_their_payloads_when_a_file_opens(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A small file of references stands for its payloads: past the threshold by them, it
    # opens through its cross-reference (each entry checked as it is read), and a damaged
    # entry is still refused when it is read, never replayed.
    from dejacache.scope import current

    path = tmp_path / "c.json"
    with dejacache.cassette(path, mode="record"):
        audio = [render_audio(s) for s in (1, 2, 3)]
    data = path.read_bytes()
    assert blobs.weight(data) == len(data) + 3 * blobs.MIN_PAYLOAD
    monkeypatch.setattr(fmt, "EAGER_CHECK_UNDER", len(data) + 1)
    with dejacache.cassette(path, mode="replay"):
        assert [render_audio(s) for s in (1, 2, 3)] == audio
        tape = current().store._tape  # type: ignore[attr-defined]
        assert tape.full is None and tape.ix is not None and tape.ix.lazy
    at = data.rindex(fmt.BLOB_REF.encode()) + len(fmt.BLOB_REF) + 3
    flipped = b"0" if data[at:at + 1] != b"0" else b"1"
    path.write_bytes(data[:at] + flipped + data[at + 1:])  # the last entry's reference
    with dejacache.cassette(path, mode="replay"):
        assert render_audio(1) == audio[0]
        with pytest.raises(CassetteError):
            render_audio(3)
    monkeypatch.setattr(fmt, "EAGER_CHECK_UNDER", 1 << 20)
    with pytest.raises(CassetteError), dejacache.cassette(path, mode="replay"):
        render_audio(1)  # (parsed whole on open, as before: refused at once)


@dejacache.cache(kind="tool")
def mirror(payload: str) -> str:
    return payload[::-1]


def test_the_blobs_a_replay_reads_are_asked_of_the_disk_when_it_opens(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The answer's payload is read by a replay: the kernel is asked for it on open. The
    # request's is only keyed, never read: not asked for.
    path = tmp_path / "c.json"
    sent = base64.b64encode(bytes(range(256)) * 6).decode()
    with dejacache.cassette(path, mode="record"):
        assert mirror(sent) == sent[::-1]
    data = path.read_bytes()
    asked, answered = blobs.blob_hash(sent.encode()), blobs.blob_hash(sent[::-1].encode())
    assert asked.encode() in data and answered.encode() in data
    assert blobs.answers_in(data) == [answered]
    advised: list[int] = []
    monkeypatch.setattr(os, "posix_fadvise", lambda fd, *a: advised.append(os.fstat(fd).st_ino),
                        raising=False)
    monkeypatch.setattr(os, "POSIX_FADV_WILLNEED", 3, raising=False)
    with dejacache.cassette(path, mode="replay"):
        assert advised == [blobs.Folder.beside(path).path(answered).stat().st_ino]
        assert mirror(sent) == sent[::-1]
    advised.clear()
    with dejacache.cassette(path, mode="record"):  # nothing is read back
        assert mirror(sent) == sent[::-1]
    assert advised == []


_TEXTS = {"a" * 32: "audio \"quoted\" \\ back\nslash é", "b" * 32: "QUJD" * 400}


def _splice(body: bytes) -> Any:
    out = blobs.spliced(body, _TEXTS.__getitem__)
    return None if out is None else orjson.loads(out)


@pytest.mark.parametrize(("body", "expanded"), [
    # whole string values, in lists and members, pretty or compact: expanded
    (b'{"a": ["@ref:blob:' + b"a" * 32 + b'", 1], "b": "@ref:blob:' + b"b" * 32 + b'"}',
     {"a": [_TEXTS["a" * 32], 1], "b": _TEXTS["b" * 32]}),
    (b'{\n  "x": "@ref:blob:' + b"a" * 32 + b'"\n}', {"x": _TEXTS["a" * 32]}),
    (b'{"none": 1}', {"none": 1}),
    # anything else is left to the parse and unpack: never guessed at
    (b'{"@ref:blob:' + b"a" * 32 + b'": 1}', None),  # a member name
    (b'{"@ref:blob:' + b"a" * 32 + b'"  :  1}', None),
    (b'{"t": "say \\"@ref:blob:' + b"a" * 32 + b'\\""}', None),  # inside a string
    (b'{"t": "@ref:blob:' + b"a" * 32 + b'x"}', None),  # a longer string
    (b'{"t": "@ref:blob:' + b"A" * 32 + b'"}', None),  # not a hash
    (b'{"t": "@ref:blob:' + b"a" * 32 + b'", "v": "@ref:' + b"c" * 24 + b'"}', None),
    (b'{"t": "see @ref:blob:' + b"a" * 32 + b'"}', None),  # text that names one
])
def test_an_answer_s_blobs_are_spliced_into_its_bytes_or_left_to_the_parse(
        body: bytes, expanded: Any) -> None:
    assert _splice(body) == expanded


@given(_TREES)
def test_spliced_bytes_hold_what_unpack_gives(tree: Any) -> None:
    packed, values, store = _packed(tree)
    for opts in (0, orjson.OPT_INDENT_2):
        out = blobs.spliced(orjson.dumps(packed, option=opts), store.__getitem__)
        if out is not None:
            assert orjson.loads(out) == tree
        elif not values:  # only text that names a reference is left to the parse
            assert any(type(s) is str and fmt.REF in s for s in iter_strings(tree))


def test_the_answers_blobs_are_those_between_a_response_line_and_the_next_re_member() -> None:
    # An answer runs to the next member named ``re...`` (the next entry's ``recorded_at``):
    # a reference after it is a request's, not read by a replay.
    ref = blobs._MARK_BYTES.decode()
    a, b, c = "a" * 32, "b" * 32, "c" * 32
    data = (f'\n      "request": "{ref}{a}"\n      "response": ["{ref}{b}", "{ref}{b}"]'
            f'\n      "recorded_at": "{ref}{c}"\n      "response": "{ref}{c}" "{ref}zz"'
            ).encode()
    assert blobs.answers_in(data) == [b, c]
    assert blobs.answers_in(b"no references") == []
