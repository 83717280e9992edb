"""The call policy as a table: mode, stored, sequenced, join, error -> the effects, in order.

A scripted driver answers each effect from the row's facts; no store, file or thread."""

from __future__ import annotations

from typing import Any

import pytest

from dejacache._core.flow import (
    FOLLOWED,
    LEAD,
    MISS,
    RECHECK,
    REKEY,
    RETRY,
    Facts,
    Fail,
    Join,
    Lookup,
    Ran,
    Refuse,
    Run,
    Store,
    call_flow,
)


class Refused(Exception):
    pass


class Boom(Exception):
    pass


def drive(facts: Facts, *, stored: dict[str, Any] | None = None, joins: tuple[Any, ...] = (),
          error: bool = False, keep: bool = True, recheck_hit: bool = False,
          ) -> tuple[list[str], Any]:
    """Run the flow with scripted answers: ``(effects as short strings, outcome)``."""
    stored = dict(stored or {})
    turns = list(joins)
    seen: list[str] = []
    flow = call_flow(facts, "fast", b"{fast}")
    answer: Any = None
    exc: BaseException | None = None
    while True:
        try:
            eff = flow.send(answer) if exc is None else flow.throw(exc)
        except StopIteration as stop:
            return seen, stop.value
        except (Refused, Boom) as e:
            return seen, type(e).__name__
        exc = None
        answer = None
        if isinstance(eff, Lookup):
            seen.append(f"lookup {eff.key}")
            answer = stored.get(eff.key, MISS)
        elif eff is REKEY:
            seen.append("rekey")
            answer = ("full", b"{full}")
        elif isinstance(eff, Refuse):
            seen.append(f"refuse {eff.key} {eff.canonical.decode()}")
            exc = Refused()
        elif isinstance(eff, Join):
            turn = turns.pop(0)
            seen.append(f"join {eff.key} -> {turn[0]}")
            answer = turn
            if turn[0] == RECHECK and recheck_hit:
                stored[eff.key] = "landed"
        elif isinstance(eff, Run):
            seen.append(f"run {eff.key}")
            if error:
                exc = Boom()
            else:
                answer = Ran("fresh", 0.5, keep)
        elif isinstance(eff, Store):
            seen.append(f"store {eff.key} {eff.value} {eff.canonical.decode()}")
        elif isinstance(eff, Fail):
            seen.append(f"fail {eff.key} {type(eff.error).__name__} keep={eff.keep}")
        else:  # pragma: no cover
            raise AssertionError(eff)


AUTO = Facts("auto", sequenced=False, rekey=False, flights=True, keep_errors=True)
LEAD_ = (LEAD, None)

# (id, facts, stored, joins, error, keep, effects, outcome)
TABLE: list[tuple[str, Facts, dict[str, Any], tuple[Any, ...], bool, bool, list[str], Any]] = [
    ("auto hit", AUTO, {"fast": "old"}, (), False, True, ["lookup fast"], "old"),
    ("auto miss leads", AUTO, {}, (LEAD_,), False, True,
     ["lookup fast", "join fast -> lead", "run fast", "store fast fresh {fast}"], "fresh"),
    ("auto miss follows", AUTO, {}, ((FOLLOWED, "shared"),), False, True,
     ["lookup fast", "join fast -> followed"], "shared"),
    ("auto miss retries then leads", AUTO, {}, ((RETRY, None), LEAD_), False, True,
     ["lookup fast", "join fast -> retry", "lookup fast", "join fast -> lead", "run fast",
      "store fast fresh {fast}"], "fresh"),
    ("auto recheck hits", AUTO, {}, ((RECHECK, None),), False, True,
     ["lookup fast", "join fast -> recheck", "lookup fast"], "landed"),
    ("auto error kept", AUTO, {}, (LEAD_,), True, True,
     ["lookup fast", "join fast -> lead", "run fast", "fail fast Boom keep=True"], "Boom"),
    ("auto unkept run", AUTO, {}, (LEAD_,), False, False,
     ["lookup fast", "join fast -> lead", "run fast"], "fresh"),
    ("replay hit", AUTO._replace(mode="replay"), {"fast": "old"}, (), False, True,
     ["lookup fast"], "old"),
    ("replay miss refused", AUTO._replace(mode="replay"), {}, (), False, True,
     ["lookup fast", "refuse fast {fast}"], "Refused"),
    ("record never looks", AUTO._replace(mode="record"), {"fast": "old"}, (LEAD_,), False, True,
     ["join fast -> lead", "run fast", "store fast fresh {fast}"], "fresh"),
    ("sequenced runs without a flight", AUTO._replace(sequenced=True), {}, (), False, True,
     ["lookup fast", "run fast", "store fast fresh {fast}"], "fresh"),
    ("sequenced error", AUTO._replace(sequenced=True), {}, (), True, True,
     ["lookup fast", "run fast", "fail fast Boom keep=True"], "Boom"),
    ("stream error not kept", AUTO._replace(flights=False, keep_errors=False), {}, (), True,
     True, ["lookup fast", "run fast", "fail fast Boom keep=False"], "Boom"),
    ("sequenced record", AUTO._replace(mode="record", sequenced=True), {}, (), False, True,
     ["run fast", "store fast fresh {fast}"], "fresh"),
    # a fast key: looked up first, then the full key on a miss
    ("fast key hit", AUTO._replace(rekey=True), {"fast": "old"}, (), False, True,
     ["lookup fast"], "old"),
    ("full key hit", AUTO._replace(rekey=True), {"full": "old"}, (), False, True,
     ["lookup fast", "rekey", "lookup full"], "old"),
    ("fast key miss runs on the full key", AUTO._replace(rekey=True), {}, (LEAD_,), False,
     True, ["lookup fast", "rekey", "lookup full", "join full -> lead", "run full",
            "store full fresh {full}"], "fresh"),
    ("fast key replay miss names the full key", AUTO._replace(rekey=True, mode="replay"), {},
     (), False, True, ["lookup fast", "rekey", "lookup full", "refuse full {full}"], "Refused"),
    ("fast key in record mode: rekeyed, nothing read",
     AUTO._replace(rekey=True, mode="record"), {"fast": "old"}, (LEAD_,), False, True,
     ["rekey", "join full -> lead", "run full", "store full fresh {full}"], "fresh"),
]


@pytest.mark.parametrize(("facts", "stored", "joins", "error", "keep", "effects", "outcome"),
                         [row[1:] for row in TABLE], ids=[row[0] for row in TABLE])
def test_flow_table(facts: Facts, stored: dict[str, Any], joins: tuple[Any, ...], error: bool,
                    keep: bool, effects: list[str], outcome: Any) -> None:
    seen, got = drive(facts, stored=stored, joins=joins, error=error, keep=keep,
                      recheck_hit=bool(joins) and joins[0][0] == RECHECK)
    assert seen == effects
    assert got == outcome


def test_a_fast_key_equal_to_the_full_key_is_not_looked_up_twice() -> None:
    flow = call_flow(AUTO._replace(rekey=True), "k", b"{}")
    assert flow.send(None) == Lookup("k")
    assert flow.send(MISS) is REKEY
    assert flow.send(("k", b"{}")) == Join("k")  # the same key has just missed


def test_a_failed_run_reraises_the_same_exception() -> None:
    flow = call_flow(AUTO._replace(sequenced=True), "k", b"{}")
    flow.send(None)
    assert flow.send(MISS) == Run("k", b"{}")
    err = Boom()
    assert flow.throw(err) == Fail("k", b"{}", err, True)
    with pytest.raises(Boom) as got:
        flow.send(None)
    assert got.value is err
