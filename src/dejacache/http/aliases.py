"""Position-based aliases for provider ids the client feeds back (tool-call ids, response ids).

A live model returns fresh ids on every run (``call_x1`` today, ``call_q7`` after a re-record),
and the agent sends them back in the next request. Keyed raw, re-recording one turn would make
every later turn miss. So within one block, the n-th id seen in a response becomes ``<id:n>``,
and requests are keyed with known ids replaced by their placeholders.

Tables live per block (per active test-facing ``Effective``): a new block starts counting at 1,
so a recording block and the replay block after it number ids the same way. Runtime caching
outside blocks does not alias: a hit returns the stored ids, which then match the next turn as
they are, and a process-wide table would only grow.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from ..config import Effective
from ..scope import active_blocks

__all__ = ["AliasTable", "table_for"]


class AliasTable:
    __slots__ = ("_lock", "_map")

    def __init__(self) -> None:
        self._map: dict[str, str] = {}
        self._lock = threading.Lock()

    def learn(self, ids: Iterable[str]) -> None:
        with self._lock:
            m = self._map
            for i in ids:
                if i not in m:
                    m[i] = f"<id:{len(m) + 1}>"

    def __len__(self) -> int:
        return len(self._map)

    def apply(self, obj: Any) -> Any:
        """A copy of a JSON tree with known ids replaced (the caller's data is not touched)."""
        if not self._map:
            return obj
        return _replace(obj, self._map)


def _replace(obj: Any, m: dict[str, str]) -> Any:
    t = type(obj)
    if t is str:
        return m.get(obj, obj)
    if t is dict:
        return {k: _replace(v, m) for k, v in obj.items()}
    if t is list:
        return [_replace(v, m) for v in obj]
    return obj


_LOCK = threading.Lock()
# id(eff) -> (eff, table). Holding eff keeps its id from being reused while the entry lives;
# entries of blocks that are no longer active are dropped whenever a new table is made.
_TABLES: dict[int, tuple[Effective, AliasTable]] = {}


def table_for(eff: Effective) -> AliasTable | None:
    if not eff.test_facing or eff.extra.get("ambiguous"):
        return None
    entry = _TABLES.get(id(eff))
    if entry is not None and entry[0] is eff:
        return entry[1]
    with _LOCK:
        entry = _TABLES.get(id(eff))
        if entry is not None and entry[0] is eff:
            return entry[1]
        live = {id(e) for e in active_blocks()}
        for k in [k for k in _TABLES if k not in live]:
            del _TABLES[k]
        table = AliasTable()
        _TABLES[id(eff)] = (eff, table)
        return table
