"""The writer alone: new recordings and where they go (in memory; ``write`` uses a file)."""

from __future__ import annotations

import pathlib
from typing import Any

import orjson

from dejacache._core.strict import ROOT
from dejacache.cassettes import format as fmt
from dejacache.cassettes.document import load_document
from dejacache.cassettes.order import RunOrder
from dejacache.cassettes.redact import PLACEHOLDER, Redactor
from dejacache.cassettes.render import render
from dejacache.cassettes.tape import Tape
from dejacache.cassettes.writer import Writer

PATH = pathlib.Path("in-memory.json")
LONG = "a system prompt every request repeats " * 20


def entry(key: str, follows: int | None = None, **kw: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"key": key, "name": key, "kind": "tool", "namespace": "ns",
                         "request": {"q": key}, "response": f"answer {key}", "duration": 0.25}
    if follows is not None:
        d["follows"] = follows
    d.update(kw)
    return d


def writer_over(data: bytes | None, mode: str = "auto", *, path: pathlib.Path = PATH,
                shared: bool = False) -> Writer:
    tape = Tape(path, mode)
    run = RunOrder(tape)
    tape.on_index = run.indexed
    tape.read(data)
    return Writer(tape, run, mode=mode, shared=shared)


def add(w: Writer, key: str, request: Any = None, **fields: Any) -> dict[str, Any]:
    """What the cassette does when a call is recorded: keep it, then note it in the run."""
    doc, red = w.add({"response": fields.pop("response", f"new {key}")}, key=key, name=key,
                     namespace="ns", kind="tool", request=request or {"q": key},
                     duration=fields.pop("duration", 0.5), redactor=Redactor())
    w.run.note_new(doc, key, "tool", key, red, replaying=w.mode != "record")
    return doc


def replay(w: Writer, key: str) -> None:
    found = w.tape.take(key, w.run.step)
    assert found is not None
    e, view = found
    w.run.note_hit(e, (view if view is not None else w.tape.hit_view(e))[0])


def keys(entries: list[dict[str, Any]]) -> list[str]:
    return [d["key"] for d in entries]


def test_a_recording_is_redacted_packed_and_numbered() -> None:
    w = writer_over(render([entry("k"), entry("k")], {}))
    doc = add(w, "k", {"headers": {"Authorization": "Bearer sk-secret"}, "system": LONG})
    assert doc["request"]["headers"]["Authorization"] == PLACEHOLDER
    assert doc["request"]["system"].startswith(fmt.REF)  # stored once, in ``values``
    assert LONG in w.tape.values.values()
    assert doc["occurrence"] == 2  # after the file's two recordings of "k"
    assert (doc["name"], doc["namespace"], doc["duration"]) == ("k", "ns", 0.5)
    assert w.new == [doc]


def test_re_recording_an_unchanged_call_keeps_its_entry() -> None:
    """No git diff for a call that answered the same: its old duration stays too."""
    old = render([entry("k", response="new k")], {})
    w = writer_over(old, mode="record")
    doc = add(w, "k", duration=9.0)
    assert doc["duration"] == 0.25 and doc["occurrence"] == 0
    changed = add(w, "j", response="something else")
    assert changed["duration"] == 0.5


def test_new_calls_go_where_the_run_made_them() -> None:
    w = writer_over(render([entry("a", ROOT), entry("b", 0), entry("c", 1)], {}))
    replay(w, "a")
    add(w, "x")
    replay(w, "b")
    assert keys(w.final_entries(prune=False)) == ["a", "x", "b", "c"]
    assert keys(w.final_entries(prune=True)) == ["a", "x", "b"]  # "c" was never used


def test_pruning_alone_keeps_the_files_order() -> None:
    w = writer_over(render([entry("a"), entry("b"), entry("c")], {}))
    replay(w, "c")
    replay(w, "a")
    assert keys(w.final_entries(prune=True)) == ["a", "c"]


def test_follows_are_linked_as_this_run_made_the_calls() -> None:
    w = writer_over(render([entry("a", ROOT), entry("b", 0), entry("c", 1)], {}))
    replay(w, "a")
    add(w, "x")  # made between "a" and "b" this time
    replay(w, "b")
    linked = w.link(w.final_entries(prune=False))
    assert [(d["key"], d.get("follows")) for d in linked] == [
        ("a", ROOT), ("x", 0), ("b", 1), ("c", 2)]  # "c" still follows "b", as recorded
    pruned = w.link(w.final_entries(prune=True))
    assert [(d["key"], d.get("follows")) for d in pruned] == [("a", ROOT), ("x", 0), ("b", 1)]


def test_a_step_never_made_keeps_its_unknown_order() -> None:
    w = writer_over(render([entry("a"), entry("b")], {}))
    replay(w, "a")
    linked = w.link(w.final_entries(prune=False))
    assert linked[0]["follows"] == ROOT  # made in this run: its order is known
    assert "follows" not in linked[1]  # never made: unknown


def test_write_saves_a_new_file_and_only_a_change(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "c.json"
    w = writer_over(None, path=path)
    add(w, "a")
    assert w.write(prune=False) is True
    doc = load_document(path.read_bytes(), path)
    assert keys(doc["entries"]) == ["a"] and doc["entries"][0]["follows"] == ROOT
    again = writer_over(path.read_bytes(), path=path)
    assert again.write(prune=False) is False  # the file already holds these bytes


def test_write_keeps_what_another_writer_added(tmp_path: pathlib.Path) -> None:
    """An xdist worker saved the shared file after this block read it: both keep theirs."""
    path = tmp_path / "c.json"
    path.write_bytes(render([entry("a", ROOT)], {}))
    w = writer_over(path.read_bytes(), path=path, shared=True)
    replay(w, "a")
    add(w, "mine")
    path.write_bytes(render([entry("a", ROOT), entry("theirs", 0)], {}))
    assert w.write(prune=False) is True
    written = orjson.loads(path.read_bytes())["entries"]
    assert sorted(keys(written)) == ["a", "mine", "theirs"]
