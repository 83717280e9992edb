"""The planner over files: recordings loaded (``load.py``) and planned or checked."""

from __future__ import annotations

import pathlib
from collections.abc import Mapping

from .._core.cache_gate import Verdict, check
from .._core.cache_plan import Plan, plan

__all__ = ["check_recordings", "plan_recordings"]


def plan_recordings(target: str | pathlib.Path, *, per_cassette: bool = False,
                    prices: Mapping[str, tuple[float, float]] | None = None) -> Plan:
    """The plan of the recordings under ``target`` (``prices``: ``{model prefix: (input,
    output)}`` per million tokens; default: the cassette price table)."""
    from ..cassettes.prices import rates_from_table
    from .load import accounts

    return plan(accounts(target, per_cassette=per_cassette), rates_from_table(prices))


def check_recordings(target: str | pathlib.Path, min_hit_rate: float, *,
                     baseline: str | pathlib.Path | None = None, max_drop: float = 0.05,
                     per_cassette: bool = False) -> list[Verdict]:
    """The gate's verdict on each session under ``target`` (see ``_core/cache_gate.py``)."""
    current = plan_recordings(target, per_cassette=per_cassette)
    base = plan_recordings(baseline, per_cassette=per_cassette) if baseline else None
    return check(current, min_hit_rate, base, max_drop)
