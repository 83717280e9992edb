"""The tape alone: a cassette's recording read from bytes in memory (no files)."""

from __future__ import annotations

import pathlib
from typing import Any

import orjson
import pytest

from dejacache._core.strict import ROOT
from dejacache.cassettes import format as fmt
from dejacache.cassettes.findings import EntryInfo
from dejacache.cassettes.pack import Packer
from dejacache.cassettes.reader import Index
from dejacache.cassettes.recall import step_info
from dejacache.cassettes.render import render
from dejacache.cassettes.tape import Tape, Unused
from dejacache.errors import CassetteError

PATH = pathlib.Path("in-memory.json")  # named in errors; never opened by these tests


def entry(key: str, *, name: str = "fn", follows: int | None = None, response: Any = "r",
          request: Any = None, kind: str = "call") -> dict[str, Any]:
    d: dict[str, Any] = {"key": key, "name": name, "kind": kind, "namespace": "ns",
                         "request": request if request is not None else {"key": key},
                         "response": response, "duration": 0.25}
    if follows is not None:
        d["follows"] = follows
    return d


def document(*entries: dict[str, Any], values: dict[str, Any] | None = None) -> bytes:
    return render(list(entries), values or {})


def big(*entries: dict[str, Any], values: dict[str, Any] | None = None) -> bytes:
    """A document large enough to be read through the byte index, entry by entry."""
    pad = "x" * (fmt.EAGER_CHECK_UNDER // max(1, len(entries)) + 1)
    data = document(*(dict(e, response={"pad": pad, "r": e["response"]}) for e in entries),
                    values=values)
    assert len(data) >= fmt.EAGER_CHECK_UNDER
    return data


def tape_over(data: bytes | None, mode: str = "auto") -> Tape:
    tape = Tape(PATH, mode)
    tape.read(data)
    return tape


def nowhere() -> int:
    return ROOT


def take_response(tape: Tape, key: str, here: Any = nowhere) -> Any:
    found = tape.take(key, here)
    if found is None:
        return None
    e, view = found
    doc, body = view if view is not None else tape.hit_view(e)
    response = orjson.loads(body) if body is not None else doc["response"]
    return response["r"] if isinstance(response, dict) and "r" in response else response


def test_no_file_is_an_empty_recording() -> None:
    tape = tape_over(None)
    assert tape.raw is None and tape.index() is None
    assert tape.take("k", nowhere) is None
    assert tape.unused() == [] and tape.all_entries() == []


def test_entries_of_a_key_are_handed_out_first_in_first_out() -> None:
    tape = tape_over(document(entry("k", response=1), entry("j", response="j"),
                              entry("k", response=2), entry("k", response=3)))
    assert [take_response(tape, "k") for _ in range(4)] == [1, 2, 3, None]
    assert take_response(tape, "j") == "j"


@pytest.mark.parametrize("size", ["small", "large"])
def test_identical_calls_get_the_answer_recorded_at_their_tasks_place(size: str) -> None:
    """Two tasks made the same call: each gets the answer its own task recorded, whatever
    order they ask in (step 1 followed step 0 in one task, step 2 began another)."""
    entries = (entry("a", response="a"), entry("k", follows=0, response="after a"),
               entry("k", follows=ROOT, response="first of its task"))
    tape = tape_over(document(*entries) if size == "small" else big(*entries))
    assert take_response(tape, "k", lambda: ROOT) == "first of its task"
    assert take_response(tape, "k", lambda: 0) == "after a"
    assert take_response(tape, "k") is None


def test_a_large_file_is_read_entry_by_entry() -> None:
    keys = [f"k{i}" for i in range(50)]
    tape = tape_over(big(*(entry(k, response=k) for k in keys)))
    assert tape.ix is not None and tape.ix.lazy
    assert take_response(tape, "k7") == "k7"
    assert tape.full is None  # never parsed whole
    assert sum(e is not None for e in tape.old) == 1  # the other 49 were never touched


def test_a_replay_miss_checks_the_whole_file() -> None:
    """A replay miss is about to be reported: it parses the whole file, which names any
    damage rather than answering "no recording"."""
    data = big(entry("good", response="fine"), entry("bad", response="original"))
    damaged = data.replace(b'"original"', b'"0riginal"')
    tape = tape_over(damaged, "replay")
    assert take_response(tape, "good") == "fine"
    assert tape.full is None
    with pytest.raises(CassetteError, match="checksum"):
        tape.take("missing", nowhere)


def test_an_auto_miss_trusts_the_checked_cross_reference() -> None:
    """In auto mode a miss runs live: the checksummed cross-reference vouches that the key
    was not recorded, so nothing more is parsed; a damaged entry is still refused when its
    own key is asked for."""
    data = big(entry("good", response="fine"), entry("bad", response="original"))
    tape = tape_over(data.replace(b'"original"', b'"0riginal"'))
    assert tape.take("missing", nowhere) is None
    assert tape.full is None
    with pytest.raises(CassetteError, match="checksum"):
        tape.take("bad", nowhere)


def test_a_damaged_small_file_is_refused_when_read() -> None:
    with pytest.raises(CassetteError):
        tape_over(b'{"entries": [oops')


def test_re_recording_needs_none_of_a_damaged_file() -> None:
    tape = tape_over(b'{"entries": [oops', mode="record")
    assert tape.ix is not None and tape.ix.n == 0
    assert tape.unused() == []


def test_shared_values_are_resolved_on_the_way_out() -> None:
    values: dict[str, Any] = {}
    long_text = "a long system prompt " * 40
    packed = Packer(values).pack_root({"messages": [long_text]})
    assert packed != {"messages": [long_text]}  # the text went to ``values``
    for data in (document(entry("k", request=packed), values=values),
                 big(entry("k", request=packed), values=values)):
        tape = tape_over(data)
        assert tape.expand(tape.doc(tape.entry(0))["request"]) == {"messages": [long_text]}
    with pytest.raises(CassetteError, match="dangling"):
        tape_over(document(entry("k"))).resolve("0" * 24)


def test_what_this_run_used_and_what_it_did_not() -> None:
    tape = tape_over(document(entry("a", name="f"), entry("b", name="g", kind="tool"),
                              entry("a", name="f")))
    assert take_response(tape, "a") == "r"
    assert tape.unused() == [EntryInfo("g", "b", 0, "tool"), EntryInfo("f", "a", 1, "call")]
    assert list(tape.unused_steps()) == [1, 2]
    tape.close(tape.unused_steps())
    assert tape.raw is None and tape.old == []  # the bytes are gone ...
    assert [i.key for i in tape.unused()] == ["b", "a"]  # ... the answer stays


def test_use_all_leaves_nothing_to_replay() -> None:
    tape = tape_over(document(entry("a"), entry("b")))
    assert tape.use_all() == 2
    assert tape.take("a", nowhere) is None and tape.unused() == []


def test_unused_steps_are_listed_lazily() -> None:
    steps = Unused(10, {2, 5})
    assert len(steps) == 8 and list(steps) == [0, 1, 3, 4, 6, 7, 8, 9]
    assert list(steps.without([0, 5, 99])) == [1, 3, 4, 6, 7, 8, 9]
    assert steps.without([2]) is steps


def test_the_order_book_is_told_of_each_index() -> None:
    seen: list[tuple[int, bool, bool]] = []

    def on_index(ix: Index, first: bool) -> None:
        seen.append((ix.n, ix.lazy, first))

    tape = Tape(PATH, "auto", on_index=on_index)
    tape.read(big(entry("a"), entry("b")))
    assert seen == [(2, True, True)]
    tape.parse_all()  # e.g. a miss
    assert seen == [(2, True, True), (2, False, False)]
    assert tape.names_follows() == (["fn", "fn"], [None, None])


def test_info_names_a_recorded_step_for_reports() -> None:
    tape = tape_over(document(entry("a", name="openai.chat", kind="http",
                                    request={"body": {"q": 1}})))
    info = step_info(tape, 0)
    assert (info.name, info.key, info.request, info.recorded_step) == (
        "openai.chat", "a", {"body": {"q": 1}}, 0)


def _reads_for_reversed_tasks(monkeypatch: pytest.MonkeyPatch, n: int, size: str) -> int:
    """``n`` gathered tasks each made the same call twice; the replay's tasks make their
    second call in the reverse order. How many entries the tape reads to choose."""
    first = [entry("k", follows=ROOT, response=f"1st of {t}") for t in range(n)]
    second = [entry("k", follows=t, response=f"2nd of {t}") for t in range(n)]
    tape = tape_over((document if size == "small" else big)(*first, *second))
    reads = [0]
    real = Tape._fields

    def counting(self: Tape, e: Any) -> Any:
        reads[0] += 1
        return real(self, e)

    monkeypatch.setattr(Tape, "_fields", counting)
    for t in range(n):
        assert take_response(tape, "k") == f"1st of {t}"
    for t in reversed(range(n)):
        assert take_response(tape, "k", lambda t=t: t) == f"2nd of {t}"
    return reads[0]


@pytest.mark.parametrize("size", ["small", "large"])
def test_identical_calls_of_many_tasks_cost_o1_each(monkeypatch: pytest.MonkeyPatch,
                                                    size: str) -> None:
    # Looking along the key's queue for the entry recorded at the task's place read up to
    # one entry per task in flight, for every call: quadratic in a gather of n tasks.
    small = _reads_for_reversed_tasks(monkeypatch, 50, size)
    large = _reads_for_reversed_tasks(monkeypatch, 200, size)
    assert large <= 4 * small + 8
    assert large <= 4 * 200
