"""Where dejacache keeps files by default: ``DEJACACHE_DIR`` or ``<project root>/.dejacache``.

A leaf module (standard library only) so that both ``config`` and the stores can use it
without a store reaching up into ``config`` (which closed an import cycle).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing; mypy reads True
if TYPE_CHECKING:
    import pathlib

__all__ = ["DIR_NAME", "NOTES", "default_cache_dir", "make_dir", "note_files", "path_arg",
           "project_root"]

#: The name of dejacache's own directory in a project (machine-local: a store, the usage
#: record; never reviewed, never committed).
DIR_NAME = ".dejacache"
# What marks a project's root directory, nearest first.
_ROOT_MARKERS = ("pyproject.toml", ".git", "setup.cfg")
#: The last test run's notes in that directory (``_learn/notes.py``): ``learn-misses.json``,
#: ``learn-misses.<xdist worker>.json``.
NOTES = "learn-misses"
_IGNORE_ALL = "# made by dejacache: nothing in this directory belongs in version control\n*\n"


def path_arg(value: object, what: str) -> str | os.PathLike[str]:
    """``value`` where a file path is given (``what``: the argument, e.g. ``"cassette path"``),
    or a ConfigurationError naming it and the value: pathlib's own TypeError named neither."""
    if isinstance(value, str) or (isinstance(value, os.PathLike)
                                  and isinstance(os.fspath(value), str)):
        return value
    from .errors import ConfigurationError

    raise ConfigurationError(f"{what} must be a str or os.PathLike, not "
                             f"{type(value).__name__} {value!r}")


def project_root(start: pathlib.Path | None = None) -> pathlib.Path:
    """The nearest directory holding ``pyproject.toml``, ``.git`` or ``setup.cfg``."""
    import pathlib  # with urllib.parse and ipaddress ~4 ms: not at import

    # Walked as strings (os.path), not Paths: every pytest session looks for the root (the
    # learn notes it clears), and Path joins and parents cost it ~4k opcodes of ~4.2k.
    # (getcwd() is already the physical path: resolving it again cost ~60 us a call, and
    # a first block asks for the root six times)
    here = os.getcwd() if start is None else os.path.realpath(start)
    d = here
    while True:
        if any(os.path.exists(os.path.join(d, marker)) for marker in _ROOT_MARKERS):
            return pathlib.Path(d)
        parent = os.path.dirname(d)
        if parent == d:
            return pathlib.Path(here)
        d = parent


def default_cache_dir() -> pathlib.Path | None:
    """``DEJACACHE_DIR`` if set (empty string: no persistence), else ``<root>/.dejacache``."""
    import pathlib

    raw = os.environ.get("DEJACACHE_DIR")
    if raw is not None:
        return pathlib.Path(raw).expanduser() if raw.strip() else None
    return project_root() / DIR_NAME


def make_dir(d: pathlib.Path) -> None:
    """Create ``d`` (and its parents). A ``.dejacache`` directory made here gets a
    ``.gitignore`` ignoring everything in it, as pytest does for ``.pytest_cache``: the first
    run must not leave a store and a usage record for ``git add -A`` to pick up."""
    if d.is_dir():
        return
    d.mkdir(parents=True, exist_ok=True)
    if d.name == DIR_NAME:
        try:
            with open(d / ".gitignore", "x", encoding="utf-8") as f:
                f.write(_IGNORE_ALL)
        except OSError:  # (there already, or not ours to write: nothing lost)
            pass


def note_files(directory: pathlib.Path) -> list[pathlib.Path]:
    """The notes files in ``directory`` (none when it is not a directory). Here, not in
    ``_learn/notes.py``, so that a pytest session can tell it has none to clear without
    loading that package (~1.1M instructions of every run in a project with a
    ``.dejacache`` directory)."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    return [directory / n for n in sorted(names) if n.startswith(NOTES) and n.endswith(".json")]
