"""``dejacache scan PATH...``: find secret-shaped strings before they are committed.

Exit status 1 when anything is found, so it works as a pre-commit hook::

    - repo: local
      hooks:
        - id: dejacache-scan
          name: no secrets in cassettes
          entry: dejacache scan
          language: system
          files: cassettes/.*\\.json$
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
from collections.abc import Iterable, Iterator

from .. import _secrets
from .redact import PLACEHOLDER

__all__ = ["Finding", "iter_files", "scan_text"]

_SKIP_DIRS = frozenset({".git", ".hg", ".venv", "venv", "node_modules", "__pycache__",
                        ".mypy_cache", ".ruff_cache", ".dejacache"})
_MAX_BYTES = 64 * 1024 * 1024


@dataclasses.dataclass(frozen=True, slots=True)
class Finding:
    path: str
    line: int
    kind: str
    excerpt: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.kind}: {self.excerpt}"


def _mask(s: str) -> str:
    return s[:6] + "…" + f"({len(s)} chars)" if len(s) > 10 else "…"


def scan_text(text: str, path: str = "") -> Iterator[Finding]:
    """Secret-shaped strings in ``text``, line by line. Only the kinds whose needles occur in
    the whole text are looked for, and on a line only where one occurs (measured on a 1 MB
    cassette: 1.2 s a pass with every regex on every line)."""
    shapes = _secrets.shapes_in(text)
    if not shapes:
        return
    for lineno, line in enumerate(text.splitlines(), 1):
        for kind, m in _secrets.find_secrets(line, shapes):
            found = m.group(0)
            if PLACEHOLDER in found:
                continue
            yield Finding(path, lineno, kind, _mask(found))


def iter_files(paths: Iterable[str]) -> Iterator[pathlib.Path]:
    for raw in paths:
        p = pathlib.Path(raw)
        if p.is_dir():
            for root, dirs, files in os.walk(p):
                dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
                for f in sorted(files):
                    yield pathlib.Path(root) / f
        else:
            yield p


def scan_file(path: pathlib.Path) -> list[Finding]:
    try:
        if path.stat().st_size > _MAX_BYTES:
            return []
        data = path.read_bytes()
    except OSError:
        return []
    if b"\0" in data[:8192]:  # binary files cannot be cassettes
        return []
    return list(scan_text(data.decode("utf-8", errors="replace"), str(path)))
