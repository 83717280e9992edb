"""What a cassette block finds out about its recording, as reports show it: each place the
run left it (``tape.divergences``: a :class:`Divergence`, with the :class:`CallInfo` of
both sides) and the recorded entries it never used (``tape.unused``: :class:`EntryInfo`).

Apart from the block's own records (``calls.py``, ``tape.py``): these three frozen
dataclasses took 1.5-2 ms to define in every process that opened a cassette block, and a
replay that follows its recording builds none of them.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

import orjson

__all__ = ["CallInfo", "Divergence", "EntryInfo", "entry_infos"]


@dataclasses.dataclass(frozen=True, slots=True)
class CallInfo:
    """One call as a divergence report shows it: name, kind and (redacted) request."""

    name: str
    kind: str
    key: str = ""
    request: Any = None
    recorded_step: int | None = None

    def __str__(self) -> str:
        where = f"step {self.recorded_step}: " if self.recorded_step is not None else ""
        return f"{where}{self.kind} {self.name} {_brief(self.request)}"


@dataclasses.dataclass(frozen=True, slots=True)
class Divergence:
    """A place where a run left its recording (``tape.divergences``).

    ``reason``: ``"order"`` (a recorded call made at another place in its task),
    ``"changed"`` (no recording; the call expected here has the same name),
    ``"extra"`` (no recording; not the call expected here), ``"exhausted"`` (past the end of
    the task's recorded calls), ``"unmade"`` (a recorded call never made; at block exit).
    ``step`` is the call's index in this run (None for ``"unmade"``), ``recorded_step`` the
    recorded step it was compared with.
    """

    reason: str
    step: int | None
    recorded_step: int | None
    expected: CallInfo | None
    actual: CallInfo | None
    diff: tuple[str, ...]
    message: str

    def __str__(self) -> str:
        return self.message


@dataclasses.dataclass(frozen=True, slots=True)
class EntryInfo:
    """One recorded call, as listed by ``tape.unused``."""

    name: str
    key: str
    occurrence: int
    kind: str


def entry_infos(keys: Sequence[str], names: Sequence[str], kinds: Sequence[str],
                steps: Iterable[int]) -> list[EntryInfo]:
    """``steps`` of a recording whose index columns are ``keys``, ``names`` and ``kinds``, as
    ``EntryInfo`` (the occurrence: how many entries of its key come before it)."""
    want = set(steps)
    out = []
    occ: collections.Counter[str] = collections.Counter()
    for i, k in enumerate(keys):
        n = occ[k]
        occ[k] += 1
        if i in want:
            out.append(EntryInfo(names[i], k, n, kinds[i]))
    return out


def _brief(value: Any, limit: int = 160) -> str:
    try:
        text = orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    except TypeError:
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 13] + "…" + text[-12:]
