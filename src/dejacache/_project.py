"""The project configuration: ``[tool.dejacache]`` in ``pyproject.toml``, one table of keys.

Every setting a project writes down once lives in :data:`KEYS`: its name in the table, how a
value is checked, and the environment variable and pytest ini key that spell it too. The
pytest plugin, the command line, ``configure()`` (through the global settings) and the proxy
read it through :func:`current`; a face that needs one more setting adds a row here.

Where a value comes from, highest first (docs/configuration.md):

1. an **argument**: ``cassette(mode=...)``, ``scope(volatile=...)``;
2. the test's **marker**: ``@pytest.mark.dejacache(mode=...)``;
3. the **command line**: ``--dejacache-mode``, ``--dejacache-live``;
4. ``configure(...)``;
5. the **environment**: ``DEJACACHE_MODE``, ``DEJACACHE_VOLATILE``, ``DEJACACHE_MAX_AGE``...;
6. the **project file**: a pytest ini key (``dejacache_mode``), then ``[tool.dejacache]``;
7. the built-in default.

A value replaces the ones below it (``DEJACACHE_VOLATILE`` replaces the project's list);
the rules a block or a marker declares are added to the global ones.

Every key is checked where it is read: an unknown key is an error naming the closest known
one, and a malformed value names the key and the file. The file is found from the current
directory upward (the project root: ``pyproject.toml``, ``.git`` or ``setup.cfg``), or
named by ``DEJACACHE_PROJECT`` (empty: read none). It is read once per change of the file,
and parsed only when it mentions dejacache at all.
"""

from __future__ import annotations

import _thread
import os
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType

from ._core.modes import as_mode, in_ci, project_mode, resolve_mode
from ._paths import as_path, chdirs, on_a_loop, path_text, root_dir, user_path_text
from .errors import ConfigurationError

TYPE_CHECKING = False  # typing is not loaded by a replay hit (~12M instructions); mypy reads True
if TYPE_CHECKING:
    import pathlib
    from typing import Any, Final
    from typing import NamedTuple as Row  # checked as one: see _slots.Row
else:
    from ._slots import Row

__all__ = ["KEYS", "TABLE", "Key", "Project", "check_table", "current", "default_mode",
           "describe", "find", "ini_values", "load", "use"]

#: The table's name, as written in pyproject.toml.
TABLE: Final = "tool.dejacache"
_ENV_FILE: Final = "DEJACACHE_PROJECT"


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, (list, tuple)) \
            or not all(isinstance(v, str) for v in value):
        raise ConfigurationError(f"{where} must be a list of strings, not {value!r}")
    return tuple(v.strip() for v in value if v.strip())


# The checkers import what they check with: a pytest run reads this module whatever it
# uses, and one without volatile rules or ageing never loads those (the plugin's cost).


def _volatile(value: Any, where: str) -> tuple[str, ...]:
    from ._core import volatile as _vol

    items = _strings(value, where)
    try:
        _vol.check(items)  # a malformed or contradictory item is refused where it is written
    except ConfigurationError as exc:
        raise ConfigurationError(f"{where}: {exc}") from None
    return items


def _mode(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ConfigurationError(f"{where} must be a string, not {value!r}")
    return project_mode(value, where=where)


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigurationError(f"{where} must be a non-empty string, not {value!r}")
    return value.strip()


def _duration(value: Any, where: str) -> float:
    from ._core.durations import seconds

    return seconds(value, where)


def _on_expiry(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ConfigurationError(f"{where} must be a string, not {value!r}")
    from ._core.ageing import check_on_expiry

    return check_on_expiry(value, where)


def _count(value: Any, where: str) -> int:
    """A whole number > 0 (``_core.counts``); the pytest ini key gives it as text."""
    from ._core.counts import whole_count

    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        value = int(value)
    return whole_count(value, f"{where} = ")


def _kinds(value: Any, where: str) -> tuple[str, ...]:
    """``live``: a list, or one comma-separated string as ``--dejacache-live`` takes it."""
    if isinstance(value, str):
        value = [v for v in value.split(",") if v.strip()]
    return _strings(value, where)


def _prices(value: Any, where: str) -> dict[str, tuple[float, float]]:
    """A table ``{model-prefix = [input, output]}`` (dollars per million tokens), or the ini
    key's lines ``model-prefix input output``."""
    rows: Iterable[tuple[Any, Any]]
    if isinstance(value, Mapping):
        rows = value.items()
    elif isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        split = [v.replace("=", " ").replace(",", " ").split() for v in value if v.strip()]
        bad = [" ".join(p) for p in split if len(p) != 3]
        if bad:
            raise ConfigurationError(f"{where}: write 'model-prefix input output' per line, "
                                     f"not {bad[0]!r}")
        rows = [(p[0], p[1:]) for p in split]
    else:
        raise ConfigurationError(f"{where} must be a table of model prefix -> [input, output] "
                                 f"dollars per million tokens, not {value!r}")
    out: dict[str, tuple[float, float]] = {}
    for model, pair in rows:
        try:
            a, b = (float(x) for x in pair)
        except (TypeError, ValueError):
            raise ConfigurationError(f"{where}: {model!r} must be [input, output] dollars per "
                                     f"million tokens, not {pair!r}") from None
        out[str(model)] = (a, b)
    return out


# Key and Project are named tuples, not frozen dataclasses: this module is loaded by every
# pytest run and every first cassette block, and a frozen slotted dataclass costs ~1 ms to
# define on the 2-core box against ~0.15 ms for a named tuple (both never change once built).


class Key(Row):
    """One setting: its name in ``[tool.dejacache]``, its check (value, where -> the value
    as dejacache uses it), what it means, and its other spellings."""

    name: str
    check: Callable[[Any, str], Any]
    help: str
    env: str | None = None
    ini: str | None = None  #: the pytest ini key
    ini_type: str = "string"  #: how pytest reads the ini key: "string" or "linelist"
    default: str = "none"  #: what applies when nothing sets it, as ``dejacache config`` says


KEYS: Final[dict[str, Key]] = {k.name: k for k in (
    Key("volatile", _volatile, "names, dotted paths and re:PATTERN items left out of every "
        "key (as DEJACACHE_VOLATILE takes them)", "DEJACACHE_VOLATILE", "dejacache_volatile",
        "linelist", "[]"),
    Key("mode", _mode, "auto, replay, record or off (or vcrpy's none, once, new_episodes, "
        "all)", "DEJACACHE_MODE", "dejacache_mode",
        default="auto (replay under CI)"),
    Key("cassette_dir", _text, "directory (relative to the project file) holding each test "
        "module's cassettes, <dir>/<module>/<test>.json", None, "dejacache_cassette_dir",
        default="<test dir>/cassettes"),
    Key("max_age", _duration, "cassette entries older than this replay with a warning "
        "(e.g. '30d')", "DEJACACHE_MAX_AGE", "dejacache_max_age", default="none (never)"),
    Key("on_expiry", _on_expiry, "what an expired entry does: warn or rerecord",
        "DEJACACHE_ON_EXPIRY", "dejacache_on_expiry", default="warn"),
    Key("live", _kinds, "kinds or names of calls that go live while the rest replay "
        "(as --dejacache-live)", None, "dejacache_live", "linelist", "none"),
    Key("allow_hosts", _strings, "hosts cassette tests may reach while the network guard "
        "is on", None, "dejacache_allow_hosts", "linelist", "[] (loopback only)"),
    Key("max_recorded_stream", _count, "bytes one live stream's recording may hold: past "
        "them it still reaches the caller, and is not recorded", None,
        "dejacache_max_recorded_stream", default="67108864 (64 MiB)"),
    Key("prices", _prices, "price overrides: model prefix -> [input, output] dollars per "
        "million tokens", None, "dejacache_prices", "linelist", "the built-in table"),
)}


def check_table(table: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The table's values as dejacache uses them; an unknown key or a malformed value is a
    ``ConfigurationError`` naming it (and the closest known key)."""
    out: dict[str, Any] = {}
    for name, value in table.items():
        key = KEYS.get(name)
        if key is None:
            from ._suggest import did_you_mean

            raise ConfigurationError(
                f"{where}: unknown key {name!r}{did_you_mean(name, KEYS)} (known keys: "
                f"{', '.join(sorted(KEYS))})")
        out[name] = key.check(value, f"{where} {name}")
    return out


_NOTHING: Final[Mapping[str, Any]] = MappingProxyType({})


class Project(Row):
    """The project file's settings: ``file`` is the file read (None: there is none),
    ``values`` the checked settings, ``sources`` where each came from."""

    file: str | None = None
    values: Mapping[str, Any] = _NOTHING
    sources: Mapping[str, str] = _NOTHING

    @property
    def path(self) -> pathlib.Path | None:
        """``file`` as a Path (made on each read: a replay hit makes none)."""
        return None if self.file is None else as_path(self.file)

    def get(self, name: str) -> Any:
        if name not in KEYS:  # a typo in dejacache itself, not a user's
            raise KeyError(name)
        return self.values.get(name)

    @property
    def directory(self) -> pathlib.Path | None:
        path = self.path
        return None if path is None else path.parent

    def overlaid(self, values: Mapping[str, Any], source: str) -> Project:
        """This project with ``values`` (checked) taking the place of its own."""
        if not values:
            return self
        return Project(self.file, {**self.values, **values},
                       {**self.sources, **dict.fromkeys(values, source)})


def find(start: str | os.PathLike[str] | None = None) -> str | None:
    """The project file: ``DEJACACHE_PROJECT`` (empty: none), else ``pyproject.toml`` at the
    project root, when it exists. As text, as ``str(pathlib.Path(...))`` spells it: a
    replay hit makes no Path (pathlib's imports cost a fresh process ~16.7M instructions)."""
    named = os.environ.get(_ENV_FILE)
    if named is not None:
        return user_path_text(named) if named.strip() else None
    path = os.path.join(root_dir(start), "pyproject.toml")
    return path if os.path.isfile(path) else None


_SQUEEZED: Final = b" \t\f\v\"'"


def _may_hold_table(data: bytes) -> bool:
    """Whether a project file may hold ``[tool.dejacache]``, spelt any way TOML can: the
    header or dotted keys (``tool.dejacache.mode = ...``; spaces and quotes around the dot),
    a ``[tool]`` header, ``tool = {...}``. Each line is read with spaces and quotes squeezed
    out, which can only find more (a file parsed for nothing), never miss one. A line scan,
    not a regular expression: compiling and running one on this repository's 7 KB
    pyproject.toml took ~0.4 ms of every process's first block."""
    if b"dejacache" not in data:  # every spelling names it
        return False
    for line in data.splitlines():
        if b"tool" in line:
            s = line.translate(None, _SQUEEZED)
            if b"tool.dejacache" in s or s.startswith((b"[tool]", b"tool=")):
                return True
    return False


def load(where: str | os.PathLike[str] | None) -> Project:
    """The settings the file ``where`` holds under ``[tool.dejacache]`` (checked)."""
    if where is None:
        return Project()
    path = path_text(where)
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise ConfigurationError(f"cannot read the project file {path}: {exc}") from None
    if not _may_hold_table(data):
        # Most projects: no table, and no TOML parser loaded (~2 ms). (Matching "dejacache"
        # alone parsed every project named after, or depending on, dejacache.)
        return Project(path)
    import tomllib

    try:
        doc = tomllib.loads(data.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"{path} is not valid TOML: {exc}") from None
    table = doc.get("tool", {}).get("dejacache", {}) if isinstance(doc.get("tool"), dict) else {}
    if not isinstance(table, dict):
        raise ConfigurationError(f"{path}: [{TABLE}] must be a table, not {table!r}")
    where = f"{path} [{TABLE}]"
    values = check_table(table, where)
    return Project(path, values, dict.fromkeys(values, where))


def ini_values(read: Callable[[str], Any], where: str = "pytest ini") -> dict[str, Any]:
    """The settings given as pytest ini keys (``read(ini_name)``: pytest's ``getini``),
    checked; an empty key is not set."""
    out: dict[str, Any] = {}
    for key in KEYS.values():
        if key.ini is None:
            continue
        raw = read(key.ini)
        if raw in ("", [], None):
            continue
        out[key.name] = key.check(raw, f"{where} {key.ini}")
    return out


_LOCK = _thread.allocate_lock()
# (DEJACACHE_PROJECT, the chdir count when read), the file's stamp, its settings
_CACHED: list[tuple[tuple[str | None, int | None], tuple[str, int, int] | None, Project]] = []
#: Set by the pytest plugin for its session: the project its rootdir names, with the ini keys.
_OVERRIDE: list[Project | None] = [None]


def current() -> Project:
    """The project settings in force: the pytest session's, else the file :func:`find`
    names (read again when it changes).

    On a running event loop under the pytest plugin (which counts directory changes:
    ``_paths.chdirs``), the file as last read off the loop in the same working directory
    (and ``DEJACACHE_PROJECT``): finding it and seeing whether it changed are a
    stat per directory, blocking calls there; the next call off the loop reads it again
    if it changed (the plugin keeps one reading for its whole session)."""
    over = _OVERRIDE[0]
    if over is not None:
        return over
    where = (os.environ.get(_ENV_FILE), chdirs())
    cached = _CACHED[:1]
    if where[1] is not None and cached and cached[0][0] == where and on_a_loop():
        return cached[0][2]
    path = find()
    stamp: tuple[str, int, int] | None = None
    if path is not None:
        try:
            st = os.stat(path)
        except OSError:
            path = None
        else:
            stamp = (path, st.st_mtime_ns, st.st_size)
    with _LOCK:
        if _CACHED and _CACHED[0][1] == stamp:
            _CACHED[:] = [(where, stamp, _CACHED[0][2])]
            return _CACHED[0][2]
    project = load(path)
    with _LOCK:
        _CACHED[:] = [(where, stamp, project)]
    return project


def use(project: Project | None) -> Project | None:
    """Make ``project`` the settings in force (None: the file again); returns the one it
    replaced, for the caller to put back."""
    old = _OVERRIDE[0]
    _OVERRIDE[0] = project
    return old


def describe(project: Project) -> list[tuple[str, Any, str]]:
    """Each key's value in force outside pytest and where it comes from (the environment,
    the project file or the default), for ``dejacache config``."""
    rows: list[tuple[str, Any, str]] = []
    for key in KEYS.values():
        raw = os.environ.get(key.env, "").strip() if key.env else ""
        if raw:
            rows.append((key.name, raw, f"environment {key.env}"))
        elif key.name in project.values:
            value = project.values[key.name]
            if isinstance(value, dict):
                value = [f"{k} {a} {b}" for k, (a, b) in value.items()]
            rows.append((key.name, value, project.sources.get(key.name, "project file")))
        else:
            rows.append((key.name, key.default, "default"))
        if key.name == "mode" and rows[-1][2] != "default":
            rows[-1] = _mode_row(*rows[-1])
    return rows


def _mode_row(name: str, written: str, source: str) -> tuple[str, Any, str]:
    """The mode as dejacache applies it, saying when it was written in vcrpy's words. An
    environment value that is no mode is shown as written: the commands reading it refuse
    it, saying why."""
    try:
        # (the project file's value was checked as the file was read; the environment's now)
        mode = resolve_mode(written) if source.startswith("environment") else written
    except ConfigurationError:
        return name, written, source
    if mode == "once":
        return name, "replay (record when a test's cassette is missing)", f"vcrpy's once, {source}"
    word = written.strip().lower()
    resolved = as_mode(mode)
    return name, resolved, source if resolved == word else f"vcrpy's {word}, {source}"


def default_mode(exists: bool = True, otherwise: str = "auto") -> str:
    """The mode of a block that names none: ``configure(mode=)`` > ``DEJACACHE_MODE`` >
    ``replay`` under ``CI`` (the environment too) > the project file's ``mode`` (the pytest
    ini key, then ``[tool.dejacache]``; vcrpy's names too, ``exists`` deciding ``once``) >
    ``otherwise`` (``auto``; a ``@pytest.mark.vcr`` test's is ``replay``). Here, beside the
    project file, so the pytest plugin reads it in every run without loading the settings
    (``configure()`` cannot have been called before ``dejacache.config`` was loaded)."""
    import sys

    config = sys.modules.get("dejacache.config")
    configured = config.settings_object().mode if config is not None else None
    if configured:
        return str(configured)
    env = os.environ.get("DEJACACHE_MODE")
    if env:
        return resolve_mode(env, where="DEJACACHE_MODE")
    if in_ci():
        return "replay"
    project: str | None = current().get("mode")
    return as_mode(project, exists) if project else otherwise
