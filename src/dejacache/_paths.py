"""Where dejacache keeps files by default: ``DEJACACHE_DIR`` or ``<project root>/.dejacache``.

A leaf module (standard library only) so that both ``config`` and the stores can use it
without a store reaching up into ``config`` (which closed an import cycle).
"""

from __future__ import annotations

import errno
import os
import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing; mypy reads True
if TYPE_CHECKING:
    import pathlib

__all__ = ["DIR_NAME", "NOTES", "as_path", "asked_here", "cache_dir_text", "chdirs", "cwd",
           "default_cache_dir", "exists", "make_dir", "note_files", "on_a_loop", "path_arg",
           "path_text", "project_root", "root_dir", "user_path_text"]

#: The name of dejacache's own directory in a project (machine-local: a store, the usage
#: record; never reviewed, never committed).
DIR_NAME = ".dejacache"
# What marks a project's root directory, nearest first.
_ROOT_MARKERS = ("pyproject.toml", ".git", "setup.cfg")
#: The last test run's notes in that directory (``_learn/notes.py``): ``learn-misses.json``,
#: ``learn-misses.<xdist worker>.json``.
NOTES = "learn-misses"
_IGNORE_ALL = "# made by dejacache: nothing in this directory belongs in version control\n*\n"


# How many times the process has changed directory (os.chdir, os.fchdir: both raise the
# "os.chdir" audit event, before the change) since the hook below was added, and the working
# directory last asked for with that count.
_CHDIRS = [0]
_CWD: list[tuple[int | None, str]] = []
_ROOT: list[tuple[int | None, str]] = []  # the same for root_dir()
_WATCHING = [False]


def _audited(event: str, args: tuple[object, ...]) -> None:
    if event == "os.chdir":
        _CHDIRS[0] += 1


def chdirs() -> int | None:
    """How many times the process has changed directory since the pytest plugin started
    counting (:func:`asked_here`), or None when nothing counts: an answer that depends on
    the working directory and was found with the same count is still the answer. (The
    event comes before the change: a lookup in another thread at that instant can pair the
    old directory with the new count, as a thread opening a relative path then gets either
    directory.)"""
    return _CHDIRS[0] if _WATCHING[0] else None


def _count_chdirs() -> None:
    # An audit hook, not a wrapped os.chdir: it sees every caller (pytest's monkeypatch
    # included) without patching the standard library. Added by the pytest plugin only, in
    # the test processes where a loop checker (blockbuster) runs: it costs every audited
    # event in the process ~0.12 us (``id()`` 0.05 -> 0.17 us, sys._getframe 0.02 -> 0.15
    # us; an open is ~9 us), which no process that merely uses dejacache should pay.
    if not _WATCHING[0]:
        _WATCHING[0] = True
        sys.addaudithook(_audited)


def on_a_loop() -> bool:
    """Whether this thread is running an asyncio event loop, where a loop checker
    (blockbuster) fails a blocking call: a stat, an open, even ``os.getcwd``."""
    asyncio = sys.modules.get("asyncio")  # (no loop runs before asyncio is loaded)
    return asyncio is not None and asyncio._get_running_loop() is not None


def cwd() -> str:
    """``os.getcwd()``. On a running event loop where directory changes are counted (under
    the pytest plugin), the answer the last call off the loop got, unless the process has
    changed directory since (:func:`chdirs`): the same directory,
    without the call a loop checker counts as blocking. Off the loop it is always asked
    (a chdir made outside ``os.chdir``, by C code, is then seen at the next call)."""
    count = chdirs()
    if count is not None and _CWD and _CWD[0][0] == count and on_a_loop():
        return _CWD[0][1]
    here = os.getcwd()
    _CWD[:] = [(count, here)]
    return here


def path_arg(value: object, what: str) -> str | os.PathLike[str]:
    """``value`` where a file path is given (``what``: the argument, e.g. ``"cassette path"``),
    or a ConfigurationError naming it and the value: pathlib's own TypeError named neither."""
    if isinstance(value, str) or (isinstance(value, os.PathLike)
                                  and isinstance(os.fspath(value), str)):
        return value
    from .errors import ConfigurationError

    raise ConfigurationError(f"{what} must be a str or os.PathLike, not "
                             f"{type(value).__name__} {value!r}")


# A cassette block works on its file's path as a string (os.path): pathlib imports
# urllib.parse, which imports ipaddress, ~16.7M instructions (~2.8 ms) of a fresh process
# whose replay hit needs none of them. A Path is made where the public API hands one out.
if sys.platform == "win32":  # drives and shares: pathlib's own rules (and cost)
    import pathlib as _pathlib

    def path_text(value: str | os.PathLike[str]) -> str:
        """The text of ``pathlib.Path(value)``."""
        return str(_pathlib.PurePath(value))
else:
    def path_text(value: str | os.PathLike[str]) -> str:
        """The text of ``pathlib.Path(value)`` (its POSIX rules: repeated and trailing
        slashes and ``.`` parts dropped, a leading ``//`` kept), without pathlib."""
        text = os.fspath(value)
        body = text.lstrip("/")
        root = "//" if len(text) - len(body) == 2 else "/" if text != body else ""
        parts = [p for p in body.split("/") if p and p != "."]
        return root + "/".join(parts) if root or parts else "."


def as_path(text: str) -> pathlib.Path:
    """``pathlib.Path(text)``, importing pathlib with the first one made: only where the
    public API returns a Path (``Cassette.path``) or a rare path needs one."""
    import pathlib

    return pathlib.Path(text)


def exists(text: str) -> bool:
    """``pathlib.Path(text).exists()``: False when there is no such file, and the errors it
    lets through (a directory it may not search) raised the same."""
    try:
        os.stat(text)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as exc:
        # (Windows: not ready, an invalid name, a name it cannot resolve)
        if exc.errno in (errno.EBADF, errno.ELOOP) or getattr(exc, "winerror", None) in (
                21, 123, 1921):
            return False
        raise
    except ValueError:  # (an embedded NUL)
        return False
    return True


def project_root(start: pathlib.Path | None = None) -> pathlib.Path:
    """The nearest directory holding ``pyproject.toml``, ``.git`` or ``setup.cfg``."""
    return as_path(root_dir(start))


def root_dir(start: str | os.PathLike[str] | None = None) -> str:
    """:func:`project_root` as text (what a replay hit reads needs no Path)."""
    # Walked as strings (os.path), not Paths: every pytest session looks for the root (the
    # learn notes it clears), and Path joins and parents cost it ~4k opcodes of ~4.2k.
    # (getcwd() is already the physical path: resolving it again cost ~60 us a call, and
    # a first block asks for the root six times)
    if start is not None:
        return _root_of(os.path.realpath(start))
    count = chdirs()
    if count is not None and _ROOT and _ROOT[0][0] == count and on_a_loop():
        return _ROOT[0][1]  # (as cwd(): the walk stats a file per directory)
    root = _root_of(cwd())
    _ROOT[:] = [(count, root)]
    return root


def _root_of(here: str) -> str:
    d = here
    while True:
        if any(os.path.exists(os.path.join(d, marker)) for marker in _ROOT_MARKERS):
            return d
        parent = os.path.dirname(d)
        if parent == d:
            return here
        d = parent


# Loop checkers that fail a block asking for its directory on an event loop (``os.getcwd``
# and ``stat`` are blocking calls to them); loaded by a suite's conftest before its tests.
_LOOP_CHECKERS = ("blockbuster",)


def asked_here() -> None:
    """Find the working directory and the project root now, off any event loop, unless
    they were found since the process last changed directory: a block opened on a loop
    then finds both without asking there (:func:`cwd`). ~0.3 us when nothing moved. Only
    where a loop checker is loaded: counting directory changes taxes every audited event
    of the process (a one-test pytest run: ~6M instructions, ~1.4 ms), and elsewhere asking
    on the loop costs a system call and fails nothing."""
    if not any(m in sys.modules for m in _LOOP_CHECKERS):
        return
    _count_chdirs()
    count = chdirs()
    if not (_CWD and _CWD[0][0] == count):
        cwd()
    if not (_ROOT and _ROOT[0][0] == count):
        root_dir()


def default_cache_dir() -> pathlib.Path | None:
    """``DEJACACHE_DIR`` if set (empty string: no persistence), else ``<root>/.dejacache``."""
    d = cache_dir_text()
    return None if d is None else as_path(d)


def cache_dir_text() -> str | None:
    """:func:`default_cache_dir` as text (the default store names its file without a Path)."""
    raw = os.environ.get("DEJACACHE_DIR")
    if raw is not None:
        return user_path_text(raw) if raw.strip() else None
    return os.path.join(root_dir(), DIR_NAME)


def user_path_text(raw: str) -> str:
    """The text of ``pathlib.Path(raw).expanduser()`` (a path from the environment)."""
    return path_text(os.path.expanduser(path_text(raw)))


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
