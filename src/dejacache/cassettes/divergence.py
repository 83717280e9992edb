"""How a divergence reads: the message and record of a place a run left its recording.

:class:`~.order.RunOrder` detects a divergence (the verdicts of the pure
``_core/strict.py``); this module explains it: it names the step expected, diffs the
recorded request with the one made now, writes the message, and builds the
:class:`~dejacache.ReplayDivergence` a strict block raises, and the one for recorded calls
never made. Loaded where a divergence is found: a replay that follows its recording never
needs it (10 KB of bytecode, and its records' ``findings.py`` and ``_core/diff.py``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from .._core.diff import field_diff
from .._core.strict import CHANGED, EXHAUSTED, ORDER, ROOT, Verdict
from ..errors import ReplayDivergence
from .calls import Call
from .findings import CallInfo, Divergence
from .recall import request_of, step_info
from .tape import Entry, Tape

if TYPE_CHECKING:
    from .order import RunOrder

__all__ = ["diverge", "name_pending", "unmade", "unmade_error"]


def diverge(run: RunOrder, verdict: Verdict, call: Call, pos: int,
            actual: CallInfo) -> ReplayDivergence:
    """Record a divergence (``tape.divergences``) and build the error strict mode raises."""
    exp = step_info(run.tape, verdict.expected) if verdict.expected is not None else None
    diff: list[str] = []
    if exp is not None:
        if exp.name != actual.name:
            diff.append(f"name: {exp.name!r} -> {actual.name!r}")
        if verdict.reason != ORDER:
            diff += field_diff(exp.request, actual.request)
    head = _headline(run, verdict, call, pos, actual, exp)
    lines = [f"dejacache {'strict ' if run.strict else ''}replay divergence in cassette "
             f"{run.tape.file}: {head}."]
    if exp is not None:
        lines.append(f"  expected: {exp}")
    lines.append(f"  actual:   {actual}")
    if diff:
        lines.append("  differences (recorded -> now):")
        lines += [f"    {d}" for d in diff[:30]]
        if len(diff) > 30:
            lines.append(f"    ... and {len(diff) - 30} more")
    lines.append("  (the order is compared per asyncio task / thread: concurrent tasks may "
                 "interleave freely)")
    lines.append(f"  to re-record: {run.rerecord_hint or 'DEJACACHE_MODE=record'}")
    message = "\n".join(lines)
    reason = verdict.reason
    call.divergence = reason
    run.divergences.append(Divergence(reason, call.index, verdict.expected, exp, actual,
                                      tuple(diff), message))
    return ReplayDivergence(message, name=actual.name, key=actual.key,
                            source=run.tape.file, diff=diff, step=call.index,
                            recorded_step=verdict.expected, expected=exp, actual=actual,
                            reason=reason)


def _headline(run: RunOrder, verdict: Verdict, call: Call, pos: int, actual: CallInfo,
              exp: CallInfo | None) -> str:
    what = f"call #{call.index} ({actual.kind} {actual.name})"
    at = ("none (it is the first call of its task)" if pos == ROOT
          else f"step {pos}")
    total = len(run.book)
    reason = verdict.reason
    prev = "call" if run.live is None else "replayed call"  # live steps are skipped
    if reason == ORDER:
        f = run.book.follows[actual.recorded_step or 0]
        return (f"{what} is out of order: it was recorded as step "
                f"{actual.recorded_step}, after step {f}, but its task's previous "
                f"{prev} in this run is {at}")
    if reason == CHANGED:
        return f"{what} differs from the recorded call at step {verdict.expected}"
    if reason == EXHAUSTED:
        return (f"{what} goes past the end of the recording, which is exhausted: the "
                f"cassette holds {total} calls and none follows its task's previous "
                f"call, {at}")
    if exp is None:
        return f"{what} is not in the recording ({total} calls)"
    return f"{what} is not the call recorded after {at}"


def name_pending(run: RunOrder, pending: list[tuple[Call, int, Entry]]) -> None:
    """Name the expected step of out-of-order hits ``(call, position, entry)`` (needs every
    step's ``follows``) and record them as divergences."""
    run.complete_book()
    book = run.book
    used_by = {c.recorded_step: c.index for c in run.calls
               if c.recorded_step is not None}
    for call, pos, e in pending:
        assert e.index is not None
        if book.follows[e.index] == pos:
            continue  # in order once unordered steps were taken out (``unordered``)
        # the first step that followed ``pos`` and was still unused when this call was
        # made (the book's steps after ``pos``, not a walk over every recorded step)
        expected = next((i for i in book.following(pos)
                         if used_by.get(i, call.index + 1) > call.index
                         and i not in book.replaced
                         and i not in book.skipped), None)
        verdict = Verdict(ORDER, expected, e.index)
        diverge(run, verdict, call, pos, CallInfo(
            call.name, call.kind, e.key, request_of(run.tape, e.index), e.index))
    run.divergences.sort(key=lambda d: (d.step is None, d.step or 0))


def unmade(tape: Tape, steps: Iterable[int]) -> list[Divergence]:
    """The ``"unmade"`` divergences of recorded ``steps`` never made (their requests read
    from the tape while it is open, or from the file after it closed)."""
    out: list[Divergence] = []
    for i in steps:
        exp = step_info(tape, i)
        out.append(Divergence("unmade", None, i, exp, None, (),
                              f"recorded step {i} ({exp.kind} {exp.name}) was never made"))
    return out


def unmade_error(run: RunOrder, unmade: list[Divergence]) -> ReplayDivergence:
    """The error a strict block raises at exit for the recorded calls never made."""
    lines = [f"dejacache strict replay: {len(unmade)} of the {len(run.book)} recorded "
             f"calls in cassette {run.tape.file} were never made:"]
    lines += [f"  {d.expected}" for d in unmade[:20]]
    if len(unmade) > 20:
        lines.append(f"  ... and {len(unmade) - 20} more")
    lines.append(f"  to re-record: {run.rerecord_hint or 'DEJACACHE_MODE=record'}")
    first = unmade[0]
    return ReplayDivergence("\n".join(lines), name=first.expected.name if first.expected
                            else "", source=run.tape.file, step=None,
                            recorded_step=first.recorded_step, expected=first.expected,
                            reason="unmade")
