"""Where dejacache keeps files by default: ``DEJACACHE_DIR`` or ``<project root>/.dejacache``.

A leaf module (standard library only) so that both ``config`` and the stores can use it
without a store reaching up into ``config`` (which closed an import cycle).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing; mypy reads True
if TYPE_CHECKING:
    import pathlib

__all__ = ["default_cache_dir", "project_root"]


def project_root(start: pathlib.Path | None = None) -> pathlib.Path:
    """The nearest directory holding ``pyproject.toml``, ``.git`` or ``setup.cfg``."""
    import pathlib  # with urllib.parse and ipaddress ~4 ms: not at import

    here = (start or pathlib.Path.cwd()).resolve()
    for d in (here, *here.parents):
        if (d / "pyproject.toml").exists() or (d / ".git").exists() or (d / "setup.cfg").exists():
            return d
    return here


def default_cache_dir() -> pathlib.Path | None:
    """``DEJACACHE_DIR`` if set (empty string: no persistence), else ``<root>/.dejacache``."""
    import pathlib

    raw = os.environ.get("DEJACACHE_DIR")
    if raw is not None:
        return pathlib.Path(raw).expanduser() if raw.strip() else None
    return project_root() / ".dejacache"
