"""What ``dejacache learn`` prints: the rules with the calls and fields each explains, what
was not made a rule and why, and how many calls key alike in both runs before and after."""

from __future__ import annotations

from typing import Any

from .._core.counts import counted
from .._core.diff import short
from .diffs import CREDENTIAL, ORDER, QUOTED, STRUCTURE, Difference
from .recordings import Recordings
from .rules import Evidence, Proposal

__all__ = ["as_json", "lines"]

_SHOWN = 3  # calls listed per rule


def _places(where: list[Evidence], indent: str) -> list[str]:
    out = [f"{indent}{ref}  {field}" for ref, field in where[:_SHOWN]]
    if len(where) > _SHOWN:
        out.append(f"{indent}... and {len(where) - _SHOWN} more")
    return out


def _other(d: Difference) -> str:
    if d.kind == CREDENTIAL:
        return "a credential's or a caller's place (who asks): never masked"
    if d.kind == QUOTED:
        return ("a value each run took from its earlier answers (what the model chose: "
                f"{short(d.a, 30)} -> {short(d.b, 30)}): replays as recorded, never masked")
    if d.kind == ORDER:
        return "the same items in another order: the order is part of the call, never masked"
    if d.kind == STRUCTURE:
        return f"the calls differ in structure ({short(d.a, 40)} -> {short(d.b, 40)})"
    return f"ordinary text, not volatile: {short(d.a, 50)} -> {short(d.b, 50)}"


def lines(p: Proposal, rec: Recordings, files: int) -> list[str]:
    out = [f"dejacache learn: compared {counted(p.calls, 'call')} in "
           f"{counted(files, 'cassette')} of two runs; "
           f"{p.differing_before} differed"]
    if rec.echoes:
        out.append(f"  {counted(rec.echoes, 'quote')} of earlier answers told apart "
                   "(answers replay as recorded: not volatile)")
    if rec.only_one_run:
        out.append(f"  {counted(len(rec.only_one_run), 'cassette')} written by one run only "
                   "(a test failed or was skipped once), not compared: "
                   f"{', '.join(rec.only_one_run[:3])}"
                   + (" ..." if len(rec.only_one_run) > 3 else ""))
    if p.rules:
        out.append(f"rules ({len(p.rules)}):")
        for r in p.rules:
            out.append(f"  {r.text}")
            out.append(f"      {r.what}: {counted(len(r.explains), 'place')}")
            out += _places(r.explains, "        ")
    else:
        out.append("no rules: nothing that differs between the runs is volatile text")
    if p.refused or p.other:
        out.append("not made rules:")
        for f in p.refused:
            out.append(f"  {f.what}" + (f" ({f.rule})" if f.rule else "") + f": {f.reason}")
            out += _places(f.where, "      ")
        for ref, d in p.other[:10]:
            out.append(f"  {ref}  {d.where}: {_other(d)}")
        if len(p.other) > 10:
            out.append(f"  ... and {len(p.other) - 10} more")
    out.append(f"calls keyed alike in both runs: {p.calls - p.differing_before} of {p.calls} "
               f"without new rules, {p.calls - p.differing_after} of {p.calls} with them "
               f"(volatile places masked: {p.volatile_masked} of {p.volatile_seen})")
    return out


def as_json(p: Proposal, rec: Recordings, files: int) -> dict[str, Any]:
    def ev(where: list[Evidence]) -> list[dict[str, Any]]:
        return [{"cassette": r.cassette, "step": r.index, "name": r.name, "field": f}
                for r, f in where]

    return {
        "calls": p.calls, "cassettes": files, "differing_before": p.differing_before,
        "differing_after": p.differing_after, "volatile_seen": p.volatile_seen,
        "volatile_masked": p.volatile_masked, "echoes": rec.echoes,
        "only_one_run": rec.only_one_run,
        "rules": [{"rule": r.text, "what": r.what, "explains": ev(r.explains)}
                  for r in p.rules],
        "refused": [{"what": f.what, "rule": f.rule, "reason": f.reason,
                     "where": ev(f.where)} for f in p.refused],
        "other": [{"cassette": ref.cassette, "step": ref.index, "name": ref.name,
                   "field": d.where, "kind": d.kind} for ref, d in p.other],
    }
