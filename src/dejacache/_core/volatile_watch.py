"""Which declared volatile paths the calls keyed under a block matched, and the warning
for those tried and never matched.

A path that never matches is reported, not silently kept: while a block that declares paths
is open, a :class:`PathWatch` notes which paths the calls keyed inside it *tried* (the path's
first name is one of the call's top-level names: a function's parameter, a request part) and
which removed something (``volatile_apply.strip_paths``). At exit the block warns about its
own paths that were tried and never matched (:func:`never_matched`).

Apart from :mod:`.volatile` because only a block, a process or a learning run that declares
a path watches one: a replay hit with nothing declared never loads it (6 KB of bytecode).
"""

from __future__ import annotations

import contextvars
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..errors import DejacacheWarning

if TYPE_CHECKING:
    from .volatile import Path

__all__ = ["MAX_NOTED", "ROOT", "WATCH", "PathWatch", "never_matched", "report", "unwatch",
           "watch"]

#: Distinct paths one watch keeps. Calls add none of their own (only declared paths are
#: noted), but a program declaring new paths without end would grow the process watch; past
#: this a watch reports nothing rather than guess.
MAX_NOTED = 4096


class PathWatch:
    """The paths the calls keyed under it tried and never matched (``tried``) or matched.

    A note goes to the enclosing watches too, so a block's path that matched inside a nested
    block counts; a watch already holding a note stops there (its enclosing ones hold it)."""

    __slots__ = ("full", "matched", "owner", "parent", "token", "tried")

    def __init__(self, parent: PathWatch | None, owner: object = None) -> None:
        self.parent = parent
        self.owner = owner
        self.token: contextvars.Token[PathWatch] | None = None
        self.tried: set[Path] = set()
        self.matched: set[Path] = set()
        self.full = False

    def note(self, path: Path, hit: bool) -> None:
        w: PathWatch | None = self
        while w is not None:
            seen = w.matched if hit else w.tried
            if path in seen:
                return
            if len(seen) < MAX_NOTED:
                seen.add(path)
            else:
                w.full = True
            w = w.parent


#: The whole process: reports ``configure``/``DEJACACHE_VOLATILE`` paths at exit.
ROOT = PathWatch(None)
#: The innermost watch of this context, which ``volatile_apply.strip_paths`` notes paths on.
WATCH: contextvars.ContextVar[PathWatch] = contextvars.ContextVar(
    "dejacache_volatile_watch", default=ROOT)


def watch(owner: object) -> None:
    """Watch the paths of calls keyed from here on in this context, for ``owner`` (a block)."""
    w = PathWatch(WATCH.get(), owner)
    w.token = WATCH.set(w)


def unwatch(owner: object) -> PathWatch | None:
    """End the watch ``owner`` started in this context (None: not found here, as when a
    block is left from another context; then nothing is reported)."""
    w = WATCH.get()
    if w.owner is not owner or owner is None:
        return None
    assert w.token is not None
    try:
        WATCH.reset(w.token)
    except ValueError:  # the token belongs to another context (generator hand-over)
        WATCH.set(w.parent or ROOT)
    return w


def never_matched(w: PathWatch | None, declared: Mapping[str, tuple[Path, ...]]
                  ) -> list[tuple[str, str]]:
    """``(text, first name)`` of each declared path that calls under ``w`` tried and none
    matched."""
    if w is None or w.full:
        return []
    out = []
    for text, forms in declared.items():
        tried = [f for f in forms if f in w.tried]
        if tried and not any(f in w.matched for f in forms):
            out.append((text, str(tried[0][0])))
    return out


def report(w: PathWatch | None, declared: Mapping[str, tuple[Path, ...]], where: str) -> None:
    """Warn, once per path, about each declared path calls under ``w`` tried and never
    matched."""
    for text, root in never_matched(w, declared):
        warnings.warn(
            f"volatile path {text!r} from {where} never matched: calls keyed under it had "
            f"{root!r} but none had the rest of the path, so what it names still counts in "
            "their keys (check its spelling and nesting)", DejacacheWarning, stacklevel=4)


