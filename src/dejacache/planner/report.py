"""The plan and the gate's verdicts as text for people and JSON for tools."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._core.cache_gate import Verdict
from .._core.cache_plan import Fix, Plan, SessionPlan

__all__ = ["plan_json", "plan_lines", "verdict_lines", "verdicts_json"]


def _rate(cached: float, prompt: float) -> str:
    return f"{cached / prompt:.0%}" if prompt else "-"


def _fix_json(f: Fix) -> dict[str, Any]:
    return {"kind": f.kind, "description": f.description, "path": f.path,
            "saving": round(f.saving, 6), "tokens": f.tokens,
            "hit_rate": round(f.hit_rate, 4), "runtime": f.runtime,
            "alternative": f.alternative}


def _session_json(s: SessionPlan) -> dict[str, Any]:
    rec = s.recorded_hit_rate
    return {
        "session": s.session, "recording": s.account, "turns": s.turns,
        "prompt_tokens": s.prompt_tokens,
        "recorded_cached": s.recorded_cached, "predicted_cached": s.predicted_cached,
        "recorded_hit_rate": None if rec is None else round(rec, 4),
        "predicted_hit_rate": round(s.predicted_hit_rate, 4),
        "recorded_cost": None if s.recorded_cost is None else round(s.recorded_cost, 6),
        "predicted_cost": round(s.predicted_cost, 6),
        "fixes": [_fix_json(f) for f in s.fixes],
        "combined": {"cached": s.combined_cached,
                     "hit_rate": round(s.combined_cached / s.prompt_tokens, 4)
                     if s.prompt_tokens else 0.0,
                     "cost": round(s.combined_cost, 6),
                     "saving": round(s.predicted_cost - s.combined_cost, 6)},
        "breaks": [{"turn": b.turn, "reason": b.reason, "segment": b.segment, "path": b.path,
                    "offset": b.offset, "before": b.before, "after": b.after,
                    "tokens": b.tokens} for b in s.breaks],
        "hazards": [{"kind": h.kind, "path": h.path, "offset": h.offset, "text": h.text}
                    for h in s.hazards],
    }


def _totals(plan: Plan) -> dict[str, Any]:
    prompt = plan.total("prompt_tokens")
    recorded = [s for s in plan.sessions if s.recorded_cached is not None]
    by_kind: dict[str, float] = {}
    for s in plan.sessions:
        for f in s.fixes:
            if not f.alternative:
                by_kind[f.kind] = by_kind.get(f.kind, 0.0) + f.saving
    predicted = plan.total("predicted_cost")
    combined = plan.total("combined_cost")
    return {
        "sessions": len(plan.sessions), "prompt_tokens": int(prompt),
        "recorded_cached": sum(s.recorded_cached or 0 for s in recorded) if recorded else None,
        "predicted_cached": int(plan.total("predicted_cached")),
        "recorded_hit_rate": (round(sum(s.recorded_cached or 0 for s in recorded)
                                    / sum(s.prompt_tokens for s in recorded), 4)
                              if recorded and sum(s.prompt_tokens for s in recorded) else None),
        "predicted_hit_rate": round(plan.total("predicted_cached") / prompt, 4) if prompt
        else 0.0,
        "recorded_cost": round(sum(s.recorded_cost or 0.0 for s in recorded), 6)
        if recorded else None,
        "predicted_cost": round(predicted, 6),
        "combined_cost": round(combined, 6),
        "combined_hit_rate": round(plan.total("combined_cached") / prompt, 4) if prompt else 0.0,
        "saving": round(predicted - combined, 6),
        "saving_by_fix": {k: round(v, 6) for k, v in sorted(by_kind.items())},
    }


def plan_json(plan: Plan) -> dict[str, Any]:
    return {"sessions": [_session_json(s) for s in plan.sessions], "total": _totals(plan)}


def _calibration(s: SessionPlan) -> str:
    if not s.recorded_cached:
        return ""
    return f"  (calibration: {s.predicted_cached / s.recorded_cached:.1%} of reported)"


def plan_lines(plan: Plan, head: str) -> list[str]:
    lines = [head, ""]
    for s in plan.sessions:
        lines.append(f"{s.session}: {s.turns} turns, {s.prompt_tokens:,} prompt tokens")
        if s.recorded_cached is not None:
            lines.append(f"  recorded   hit rate {_rate(s.recorded_cached, s.prompt_tokens):>4} "
                         f"({s.recorded_cached:,} cached)  ${s.recorded_cost or 0:.4f}")
        else:
            lines.append("  recorded   (the provider reported no cached tokens)")
        lines.append(f"  predicted  hit rate {_rate(s.predicted_cached, s.prompt_tokens):>4} "
                     f"({s.predicted_cached:,} cached)  ${s.predicted_cost:.4f}"
                     f"{_calibration(s)}")
        for f in s.fixes:
            how = " [runtime: apply=]" if f.runtime else ""
            head = "  instead   " if f.alternative else "  fix "
            lines.append(f"{head}{f.kind:<11} saves ${f.saving:.4f} (+{f.tokens:,} cached, "
                         f"hit rate {f.hit_rate:.0%}){how}: {f.description}")
        if s.fixes:
            lines.append(f"  every fix  hit rate {_rate(s.combined_cached, s.prompt_tokens):>4} "
                         f"({s.combined_cached:,} cached)  ${s.combined_cost:.4f}  saves "
                         f"${s.predicted_cost - s.combined_cost:.4f}")
        elif s.breaks:
            b = s.breaks[0]
            lines.append(f"  no fix found for the break at turn {b.turn} ({b.reason})")
    t = _totals(plan)
    rec, rec_cost = t["recorded_hit_rate"], t["recorded_cost"]
    recorded = "-" if rec is None else f"{rec:.0%}" + (
        "" if rec_cost is None else f" ${rec_cost:.4f}")
    n = t["sessions"]
    lines += ["", f"total: {n} session{'s' * (n != 1)}, {t['prompt_tokens']:,} prompt tokens; "
              f"recorded {recorded}; predicted {t['predicted_hit_rate']:.0%} "
              f"${t['predicted_cost']:.4f}; every fix {t['combined_hit_rate']:.0%} "
              f"${t['combined_cost']:.4f} (saves ${t['saving']:.4f})"]
    for kind, saving in t["saving_by_fix"].items():
        lines.append(f"  {kind:<11} saves ${saving:.4f}")
    return lines


def verdict_lines(verdicts: Sequence[Verdict]) -> list[str]:
    lines = []
    for v in verdicts:
        if v.skipped:
            continue
        base = "" if v.baseline is None else f", baseline {v.baseline:.0%}"
        if v.ok:
            lines.append(f"ok    {v.session}: predicted hit rate {v.predicted:.0%}{base}")
        else:
            lines.append(f"FAIL  {v.session}: {v.why}")
            lines.append(f"        {v.cause}")
    bad = sum(not v.ok for v in verdicts)
    judged = sum(not v.skipped for v in verdicts)
    skipped = len(verdicts) - judged
    lines.append(f"{bad} of {judged} session{'s' * (judged != 1)} below the bar"
                 + (f" ({skipped} of one turn not judged)" if skipped else ""))
    return lines


def verdicts_json(verdicts: Sequence[Verdict]) -> dict[str, Any]:
    return {"failed": sum(not v.ok for v in verdicts), "sessions": [
        {"session": v.session, "ok": v.ok, "skipped": v.skipped,
         "predicted_hit_rate": round(v.predicted, 4),
         "baseline_hit_rate": None if v.baseline is None else round(v.baseline, 4),
         "why": v.why, "cause": v.cause} for v in verdicts]}
