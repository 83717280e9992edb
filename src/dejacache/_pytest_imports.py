"""dejacache's own modules, imported in a pytest process without assertion rewriting.

pytest rewrites the ``assert`` statements of every module of a distribution that declares a
``pytest11`` entry point, so every dejacache module a test loads went through its rewriting
hook: a second search of the path, a stat of the source, and its cached rewritten code read
with ``marshal.load`` from a file object (~5x ``marshal.loads`` per module). A one-test suite
replaying one cassette loads ~50 of them; without the hook the run took ~8% less CPU
(``--assert=plain`` against the default, the plain suite's own saving taken off). The library
needs no rewritten asserts (its ``assert`` statements are invariants for the type checker),
so importing this module (the plugin does, before its other imports) puts this finder first
on ``sys.meta_path``: it finds dejacache's submodules
exactly as the path finder does, before the rewriting hook sees them.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec, PathFinder
from types import ModuleType

__all__ = ["install"]

_PREFIX = "dejacache."


class PlainImports:
    """Finds ``dejacache.*`` submodules on their package's path; nothing else."""

    @staticmethod
    def find_spec(name: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if path is None or not name.startswith(_PREFIX):  # (the top level is loaded by now)
            return None
        return PathFinder.find_spec(name, path, target)


def install() -> None:
    """Puts the finder first on ``sys.meta_path`` (once per process)."""
    if not any(isinstance(f, PlainImports) for f in sys.meta_path):
        sys.meta_path.insert(0, PlainImports())


install()
