"""Damaged cassettes are refused, never served.

A flipped byte used to be served as the recorded value (22 of 120 damaged files); a file that
was not JSON was reported only when the block exited, after the test had used it.
"""

from __future__ import annotations

import pathlib
import random
from typing import Any

import orjson
import pytest

import dejacache
from dejacache.cassettes import format as fmt
from dejacache.cassettes.reader import FileIndex
from dejacache.cassettes.render import dumps
from dejacache.cli import main
from dejacache.errors import CassetteError, ReplayMiss

LONG = "lorem ipsum dolor sit amet " * 200  # > MIN_SHARED_RESPONSE: a shared response value
PROMPT = "the same long system prompt " * 20  # > MIN_SHARED: a shared request value


@dejacache.cache(name="llm", kind="llm")
def llm(prompt: str, n: int) -> dict[str, Any]:
    return {"text": f"answer {n} to {prompt[:12]}", "n": n,
            "usage": {"input_tokens": 10 + n, "output_tokens": n}}


@dejacache.cache(name="long")
def long(n: int) -> str:
    return LONG + str(n)


@dejacache.cache(name="nums")
def nums(n: int) -> list[float]:
    return [n * 0.5 + i for i in range(40)]


@dejacache.cache(name="fails")
def fails(n: int) -> str:
    raise ValueError(f"refused {n}")


CALLS: list[tuple[Any, tuple[Any, ...]]] = [
    (llm, (PROMPT, 1)), (llm, (PROMPT, 2)), (long, (3,)), (nums, (4,)), (fails, (5,)),
    (llm, ("short", 6)), (llm, (PROMPT, 1)),  # the same call twice: its second occurrence
]


def _outcome(f: Any, args: tuple[Any, ...]) -> Any:
    try:
        return f(*args)
    except ValueError as exc:  # a recorded exception is part of the answer
        return ("raised", str(exc))


def _live_calls() -> list[tuple[Any, tuple[Any, ...]]]:
    """``CALLS``, the model's answers numbered in the order they are made (live)."""
    answers = iter(range(1000))

    @dejacache.cache(name="llm", kind="llm")
    def varying(prompt: str, n: int) -> dict[str, Any]:
        return {**llm.__wrapped__(prompt, n), "call": next(answers)}  # type: ignore[attr-defined]

    return [(varying if f is llm else f, a) for f, a in CALLS]


def record(path: pathlib.Path) -> list[Any]:
    calls = _live_calls()
    with dejacache.cassette(path, mode="record", record_errors=(ValueError,)):
        return [_outcome(f, a) for f, a in calls]


def record_in_segments(path: pathlib.Path) -> list[Any]:
    """:func:`record`'s calls saved by three blocks: written whole, then two appends."""
    calls = _live_calls()
    got: list[Any] = []
    for upto, mode in ((3, "record"), (5, "auto"), (7, "auto")):
        with dejacache.cassette(path, mode=mode, record_errors=(ValueError,)):
            got = [_outcome(f, a) for f, a in calls[:upto]]
    return got


def replay(path: pathlib.Path) -> tuple[str, list[Any]]:
    """``(where it stopped, what the calls returned)``: "done", or where a CassetteError
    came from ("entry", "use", "exit")."""

    @dejacache.cache(name="llm", kind="llm")
    def varying(prompt: str, n: int) -> dict[str, Any]:
        raise AssertionError("replay went live")

    calls = [(varying if f is llm else f, a) for f, a in CALLS]
    block = dejacache.cassette(path, mode="replay")
    try:
        block.__enter__()
    except CassetteError:
        return "entry", []
    got: list[Any] = []
    where = "done"
    try:
        for f, a in calls:
            got.append(_outcome(f, a))
    except CassetteError:
        where = "use"
    finally:
        try:
            block.__exit__(None, None, None)
        except CassetteError:
            where = "exit" if where == "done" else where
    return where, got


@pytest.fixture
def lazy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Check entries as they are read, as for files over ``EAGER_CHECK_UNDER``."""
    monkeypatch.setattr(fmt, "EAGER_CHECK_UNDER", 0)


@pytest.mark.parametrize("check", ["on open", "lazily", "in segments"])
def test_flipped_bytes_replay_exactly_or_raise_never_a_different_value(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, check: str) -> None:
    if check != "on open":
        monkeypatch.setattr(fmt, "EAGER_CHECK_UNDER", 0)
    src = tmp_path / "orig.json"
    expected = record(src) if check != "in segments" else record_in_segments(src)
    if check == "in segments":
        assert orjson.loads(src.read_bytes())["xref_at"][8:9]  # three segments
    assert replay(src) == ("done", expected)
    data = src.read_bytes()
    seen: dict[str, int] = {}
    for seed in range(120):
        rng = random.Random(seed)
        pos = rng.randrange(len(data))
        damaged = bytearray(data)
        damaged[pos] ^= rng.randrange(1, 256)
        path = tmp_path / f"damaged-{seed}.json"
        path.write_bytes(bytes(damaged))
        try:
            where, got = replay(path)
        except ReplayMiss as exc:  # pragma: no cover - the failure being tested for
            pytest.fail(f"byte {pos} (seed {seed}) was reported as a miss: {exc}")
        # whatever was served before a refusal was the recorded value, in full
        assert got == expected[: len(got)], f"byte {pos} (seed {seed}) served a wrong value"
        if where == "done":
            assert got == expected
        seen[where] = seen.get(where, 0) + 1
    if check == "on open":  # small files are checked whole when the block opens
        assert seen.get("entry", 0) >= 115 and not seen.get("use") and not seen.get("exit")
    else:
        assert seen.get("use", 0) >= 80, seen


def test_not_json_is_refused_when_the_block_opens_naming_line_and_entry(
        tmp_path: pathlib.Path) -> None:
    p = tmp_path / "c.json"
    record(p)
    data = p.read_bytes()
    second = data.index(b'"key"', data.index(b'"key"') + 1)
    p.write_bytes(data[:second] + b"}" + data[second + 1:])
    with pytest.raises(CassetteError) as info:
        dejacache.cassette(p, mode="replay").__enter__()
    msg = str(info.value)
    assert "not valid JSON (line " in msg and "in entry #1" in msg and str(p) in msg
    assert info.value.path == str(p)


def test_a_changed_response_names_the_entry_and_how_to_accept_it(
        tmp_path: pathlib.Path) -> None:
    p = tmp_path / "c.json"
    record(p)
    p.write_bytes(p.read_bytes().replace(b'"answer 2 to', b'"answer 9 to'))
    with pytest.raises(CassetteError) as info, dejacache.cassette(p, mode="replay"):
        pass
    msg = str(info.value)
    assert "entry #1 (llm, key " in msg and "does not match its checksum" in msg
    assert f"dejacache rehash {p}" in msg


def test_a_changed_shared_value_is_refused_when_used(
        tmp_path: pathlib.Path, lazy: None) -> None:
    p = tmp_path / "c.json"
    record(p)
    p.write_bytes(p.read_bytes().replace(b"lorem ipsum", b"LOREM ipsum", 1))
    with dejacache.cassette(p, mode="replay"):
        assert llm(PROMPT, 1)["n"] == 1  # an entry that does not use the value still replays
        with pytest.raises(CassetteError) as info:
            long(3)
    msg = str(info.value)
    assert "shared value @ref:" in msg and "does not match its hash" in msg
    assert "used by entry #2 (long, key " in msg and str(p) in msg


def test_a_damaged_key_in_replay_is_reported_as_damage_not_as_a_miss(
        tmp_path: pathlib.Path, lazy: None) -> None:
    p = tmp_path / "c.json"
    record(p)
    data = p.read_bytes()
    at = data.index(b'"key": "') + len(b'"key": "')
    p.write_bytes(data[:at] + (b"0" if data[at:at + 1] != b"0" else b"1") + data[at + 1:])
    with pytest.raises(CassetteError) as info, dejacache.cassette(p, mode="replay"):
        llm(PROMPT, 1)  # its entry's key is the damaged one
    assert not isinstance(info.value, ReplayMiss)
    assert "entry #0 (llm, key " in str(info.value)
    assert "does not match its checksum" in str(info.value)


def test_auto_mode_does_not_go_live_over_a_damaged_file(
        tmp_path: pathlib.Path, lazy: None) -> None:
    p = tmp_path / "c.json"
    record(p)
    data = p.read_bytes()
    at = data.index(b'"key": "') + len(b'"key": "')
    damaged = data[:at] + (b"0" if data[at:at + 1] != b"0" else b"1") + data[at + 1:]
    p.write_bytes(damaged)
    with pytest.raises(CassetteError), dejacache.cassette(p, mode="auto"):
        llm(PROMPT, 1)
    assert p.read_bytes() == damaged  # nothing written over it


def test_git_conflict_markers_are_named_with_how_to_resolve(tmp_path: pathlib.Path) -> None:
    p = tmp_path / "c.json"
    record(p)
    lines = p.read_bytes().splitlines(keepends=True)
    i = next(n for n, ln in enumerate(lines) if b'"text": "answer 1' in ln)
    theirs = lines[i].replace(b"answer 1", b"answer one")
    p.write_bytes(b"".join([*lines[:i], b"<<<<<<< HEAD\n", lines[i], b"=======\n", theirs,
                            b">>>>>>> other-branch\n", *lines[i + 1:]]))
    with pytest.raises(CassetteError) as info:
        dejacache.cassette(p, mode="replay").__enter__()
    msg = str(info.value)
    assert "unresolved git merge conflict markers ('<<<<<<<' at line" in msg
    assert "re-recording" in msg and "git checkout --ours" in msg
    assert f"dejacache rehash {p}" in msg
    # picking a side by hand, then rehash: the file replays the side that was kept
    kept = [ln for ln in p.read_bytes().splitlines(keepends=True)
            if not ln.startswith((b"<<<<<<<", b"=======", b">>>>>>>")) and ln != lines[i]]
    p.write_bytes(b"".join(kept))
    assert main(["rehash", str(p)]) == 0
    with dejacache.cassette(p, mode="replay"):
        assert llm(PROMPT, 1)["text"].startswith("answer one")


def test_rehash_accepts_an_intended_edit(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "c.json"
    record(p)
    assert main(["rehash", str(p)]) == 0
    assert "checksums match, nothing to do" in capsys.readouterr().out
    p.write_bytes(p.read_bytes().replace(b'"answer 2 to', b'"edited answer')
                  .replace(b"lorem ipsum", b"LOREM IPSUM"))
    with pytest.raises(CassetteError):
        dejacache.cassette(p, mode="replay").__enter__()
    assert main(["rehash", str(p)]) == 0
    out = capsys.readouterr().out
    assert "accepted edits to entry #1 (llm, key" in out and "entry #2 (long, key" in out
    with dejacache.cassette(p, mode="replay") as tape:
        assert llm(PROMPT, 2)["text"].startswith("edited answer")
        assert long(3).startswith("LOREM IPSUM")
        assert llm(PROMPT, 1)["n"] == 1
    assert tape.counters.replayed == 3
    assert b"lorem ipsum" not in p.read_bytes()  # the old value is gone, not kept beside


def test_rehash_refuses_what_it_cannot_repair(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "c.json"
    p.write_text("{not json")
    assert main(["rehash", str(p), str(tmp_path / "none.json")]) == 1
    err = capsys.readouterr().err
    assert "not valid JSON" in err and "no such file" in err
    assert p.read_text() == "{not json"


def _as_format_1(doc: dict[str, Any]) -> bytes:
    """The bytes dejacache 0.1 wrote for the same calls (no checksums)."""
    entries = [{k: v for k, v in e.items() if k != "checksum"} for e in doc["entries"]]
    return dumps({"entries": entries, "format": 1, "values": doc["values"]})


@pytest.mark.parametrize("check", ["on open", "lazily"])
def test_format_1_files_still_replay_and_rehash_upgrades_them(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, check: str) -> None:
    if check == "lazily":
        monkeypatch.setattr(fmt, "EAGER_CHECK_UNDER", 0)
    p = tmp_path / "c.json"
    expected = record(p)
    old = _as_format_1(orjson.loads(p.read_bytes()))
    p.write_bytes(old)
    assert FileIndex.open(old) is None  # no cross-reference: read by a full parse
    assert replay(p) == ("done", expected)
    assert p.read_bytes() == old  # replaying does not rewrite it
    # a damaged shared value is still caught: values were content-addressed already
    p.write_bytes(old.replace(b"lorem ipsum", b"LOREM ipsum", 1))
    assert replay(p)[0] in ("entry", "use")
    p.write_bytes(old)
    assert main(["rehash", str(p)]) == 0
    new = p.read_bytes()
    assert orjson.loads(new)["format"] == fmt.FORMAT
    assert replay(p) == ("done", expected)


def test_whitespace_the_parser_accepts_is_not_damage(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / "c.json"
    expected = record(p)
    data = p.read_bytes()
    p.write_bytes(data.replace(b'\n      "kind"', b'\n\t"kind"'))  # same JSON, other bytes
    assert replay(p) == ("done", expected)
    monkeypatch.setattr(fmt, "EAGER_CHECK_UNDER", 0)  # the byte index cannot vouch for it
    assert replay(p) == ("done", expected)


def test_record_mode_repairs_a_damaged_file(tmp_path: pathlib.Path) -> None:
    p = tmp_path / "c.json"
    record(p)
    p.write_bytes(p.read_bytes()[:-40])  # truncated
    expected = record(p)
    assert replay(p) == ("done", expected)


def test_stale_temp_files_are_removed_by_the_next_write_and_only_those(
        tmp_path: pathlib.Path) -> None:
    p = tmp_path / "c.json"
    stale = [tmp_path / ".c.json.0123456789abcdef.tmp",  # ours
             tmp_path / ".c.json.k2j_9x0a.tmp"]  # mkstemp's, from dejacache 0.1
    kept = [tmp_path / ".c.json.b.json.0123456789abcdef.tmp",  # another cassette, c.json.b.json
            tmp_path / ".c.json.notes.tmp", tmp_path / "c.json.0123456789abcdef.tmp"]
    for f in stale + kept:
        f.write_bytes(b"{")
    with dejacache.cassette(p, mode="replay"):
        pass  # no write: nothing is touched
    assert all(f.exists() for f in stale + kept)
    record(p)
    assert not any(f.exists() for f in stale)
    assert all(f.exists() for f in kept)
    assert sorted(f.name for f in tmp_path.iterdir() if f.name.startswith(".c.json.")) == sorted(
        f.name for f in kept if f.name.startswith(".c.json."))
