"""Where ``dejacache learn`` sends a run's recordings: a scratch copy of the project's layout.

While ``DEJACACHE_LEARN_DIR`` names a directory (``dejacache learn`` sets it for the test
runs it starts), every cassette block records, whatever mode it or its test asks for, and
writes under that directory at the place the cassette has under the project root
(``<dir>/tests/cassettes/test_agent/test_x.json``; a cassette outside the project goes under
``<dir>/_outside/`` by its absolute path). The project's own cassettes are neither read nor
written, and :func:`original` maps a scratch file back to the cassette it stands for.
"""

from __future__ import annotations

import os

from .._paths import project_root

TYPE_CHECKING = False  # typing is not loaded by a replay hit (~12M instructions); mypy reads True
if TYPE_CHECKING:
    import pathlib
    from typing import Final

__all__ = ["ENV", "OUTSIDE", "active", "directory", "original", "redirect"]

ENV: Final = "DEJACACHE_LEARN_DIR"
OUTSIDE: Final = "_outside"


def directory() -> pathlib.Path | None:
    import pathlib  # (a learning run only: a replay hit loads no pathlib, ~16.7M instructions)

    raw = os.environ.get(ENV, "").strip()
    return pathlib.Path(raw) if raw else None


def active() -> bool:
    return bool(os.environ.get(ENV, "").strip())


def redirect(path: pathlib.Path) -> pathlib.Path:
    """``path`` itself, or where a learning run records it instead."""
    scratch = directory()
    if scratch is None:
        return path
    import pathlib

    full = pathlib.Path(os.path.abspath(path))
    root = project_root()
    try:
        rel = full.relative_to(root)
    except ValueError:
        rel = pathlib.Path(OUTSIDE, *full.parts[1:])
    return scratch / rel


def original(scratch_file: pathlib.Path, scratch: pathlib.Path,
             root: pathlib.Path) -> pathlib.Path:
    """The cassette a file of a learning run's ``scratch`` directory stands for."""
    import pathlib

    rel = scratch_file.relative_to(scratch)
    if rel.parts and rel.parts[0] == OUTSIDE:
        return pathlib.Path(pathlib.Path(root.anchor), *rel.parts[1:])
    return root / rel
