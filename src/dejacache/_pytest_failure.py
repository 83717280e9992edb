"""How the pytest plugin shows a test that failed on a dejacache error (``ReplayMiss``,
``NetworkBlocked``, ``ReplayDivergence``): the message first, then the test's own frames.

pytest's default report put the message under a traceback of every frame between the test
and the raise: an SDK call was 109 lines, dejacache's own source and locals in the middle.
Here dejacache's frames are left out, each run of library frames (site-packages, the standard
library) is one line naming the packages, and the test's frames keep their source line, so
the section reads in about twenty lines. ``--full-trace`` and ``--tb=native`` keep pytest's
own report. Only loaded when such a failure happens.
"""

from __future__ import annotations

import pathlib
import sysconfig
from typing import Any

import pytest

__all__ = ["FailureRepr", "failure_repr"]

_OURS = str(pathlib.Path(__file__).resolve().parent)
# Longest first: a venv's site-packages lies inside its own lib/pythonX.Y.
_LIBRARY_DIRS = tuple(sorted({str(pathlib.Path(p).resolve()) for name in (
    "stdlib", "platstdlib", "purelib", "platlib") if (p := sysconfig.get_paths().get(name))},
    key=len, reverse=True))
_INTERNAL = ("/_pytest/", "/pluggy/", "\\_pytest\\", "\\pluggy\\")


class _Crash:
    """What pytest's short summary and junitxml read of a failure (``reprcrash``)."""

    def __init__(self, path: str, lineno: int, message: str) -> None:
        self.path, self.lineno, self.message = path, lineno, message


class FailureRepr:
    """A report's ``longrepr``: drawn by ``toterminal``, sent across xdist as its text."""

    def __init__(self, lines: list[str], crash: _Crash) -> None:
        self.lines = lines
        self.reprcrash = crash

    def toterminal(self, tw: Any) -> None:
        for line in self.lines:
            tw.line(line, red=line.startswith("E "))

    def __str__(self) -> str:
        return "\n".join(self.lines)


def _package_of(path: str) -> str:
    for root in _LIBRARY_DIRS:
        if path.startswith(root):
            rest = path[len(root):].lstrip("/\\")
            return rest.split("/", 1)[0].split("\\", 1)[0].removesuffix(".py") or "python"
    return ""


def _entries(item: pytest.Item, excinfo: pytest.ExceptionInfo[BaseException]) -> list[Any]:
    """The traceback from the test function on (pytest's runner frames cut off)."""
    entries = list(excinfo.traceback)
    code = getattr(getattr(item, "obj", None), "__code__", None)
    for i, e in enumerate(entries):
        if code is not None and e.frame.code.raw is code:
            return entries[i:]
    return [e for e in entries if not any(m in str(e.path) for m in _INTERNAL)]


def _where(item: pytest.Item, path: str) -> str:
    try:
        return str(pathlib.Path(path).relative_to(item.config.rootpath))
    except ValueError:
        return path


def failure_repr(item: pytest.Item, excinfo: pytest.ExceptionInfo[BaseException]
                 ) -> FailureRepr:
    exc = excinfo.value
    name = type(exc).__name__
    text = str(exc)
    lines = [f"{name}: {text}" if text else name, ""]
    lines.append("where the test made the call (dejacache's frames hidden; --full-trace "
                 "shows every frame):")
    pending: dict[str, int] = {}
    last: tuple[str, int] = ("", 0)

    def flush() -> None:
        if pending:
            n = sum(pending.values())
            lines.append(f"  ... {n} frame{'s' if n != 1 else ''} in {', '.join(pending)}")
            pending.clear()

    for e in _entries(item, excinfo):
        path = str(e.path)
        if path.startswith(_OURS) or e.frame.f_locals.get("__tracebackhide__"):
            continue
        package = _package_of(path)
        if package:
            pending[package] = pending.get(package, 0) + 1
            continue
        flush()
        shown = _where(item, path)
        lines.append(f"{shown}:{e.lineno + 1}: in {e.name}")
        try:
            source = str(e.statement).strip().splitlines()
        except Exception:  # no source to show (a frame of generated code)
            source = []
        if source:
            lines.append(f"    {source[0]}")
        last = (shown, e.lineno + 1)
    flush()
    lines.append(f"E   {type(exc).__module__}.{name} (the message above)")
    first = text.splitlines()[0] if text else name
    return FailureRepr(lines, _Crash(last[0] or str(item.path), last[1], f"{name}: {first}"))
