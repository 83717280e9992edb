"""Global settings as every call reads them: what ``configure()`` set (``_configure.py``),
environment variables, the default store.

Precedence for each setting, highest first: the innermost ``scope(...)`` block, then
``configure(...)``, then environment variables (``DEJACACHE_MODE``, ``DEJACACHE_CACHE_KEY``,
``DEJACACHE_DIR``, ``DEJACACHE_VOLATILE``), then built-in defaults (mode ``auto``, namespace
``default``, SQLite at ``<project root>/.dejacache/cache.db``, opened, and so created, only
when a call first uses it).
"""

from __future__ import annotations

import _thread
import atexit
import dataclasses
import operator
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator

from . import _project
from ._core import volatile as _vol
from ._core.modes import MODES, as_mode, resolve_mode
from ._core.volatile import check as _check_volatile
from ._lazy import served
from ._paths import as_path, cache_dir_text, default_cache_dir
from ._slots import slot_setters, value_methods
from .codec import JsonCodec
from .errors import ConfigurationError
from .keys import env_volatile
from .stores._base import BaseStore, Features, Record, features_of

TYPE_CHECKING = False  # typing is not loaded by a replay hit (~12M instructions); mypy reads True
if TYPE_CHECKING:
    import pathlib
    from typing import Any, Final

    from ._codec_protocol import Codec
    from ._core.durations import Duration
    from .stores._protocols import Store
    from .stores._store_stats import StoreStats

__all__ = [
    "MODES",
    "UNSET",
    "Duration",
    "Effective",
    "default_cache_dir",
    "flag",
    "get_settings",
    "resolve_mode",
    "resolve_store",
    "store_from_url",
    "ttl_seconds",
]

# ``Duration`` is read from its module when first asked for: only a duration given (a ttl, a
# max_age) loads ``_core.durations`` (see ttl_seconds).
__getattr__ = served(__name__, {"Duration": "dejacache._core.durations"})

VolatileItems = tuple[str | re.Pattern[str], ...]


def global_volatile(project: _project.Project | None = None) -> VolatileItems:
    """The volatile items every key leaves out when ``configure(volatile=)`` does not say:
    ``DEJACACHE_VOLATILE`` when set, else the project file's ``volatile``."""
    env = env_volatile()
    if env:
        return env
    found: VolatileItems = (project or _project.current()).get("volatile") or ()
    return found


def global_volatile_source() -> str:
    """Where :func:`global_volatile` takes its items from, for messages."""
    s = _SETTINGS
    if s.volatile is not None:
        return "configure(volatile=...)"
    if env_volatile():
        return "DEJACACHE_VOLATILE"
    return _project.current().sources.get("volatile", "[tool.dejacache] volatile")


def volatile_items(items: Iterable[str | re.Pattern[str]]) -> VolatileItems:
    """``volatile=`` as given, checked now: a malformed path or pattern is an error where it
    is written, not a key that silently keeps the field."""
    if isinstance(items, (str, re.Pattern)):
        items = (items,)
    out = tuple(items)
    try:
        _check_volatile(out)
    except ConfigurationError as exc:
        raise ConfigurationError(f"volatile=: {exc}") from None
    return out


def flag(value: object, what: str) -> bool:
    """A True/False argument, checked where it is given: ``"no"`` or ``"false"`` would be
    true (a ``prune="no"`` block deleted the entries it did not use)."""
    if type(value) is not bool:
        raise ConfigurationError(f"{what} must be True or False, not {value!r}")
    return value


def ttl_seconds(value: Duration | None, what: str) -> float | None:
    """A ttl as the stores take it (seconds; None: no expiry), from any duration a user may
    write (``3600``, ``timedelta(hours=1)``, ``"1h"``), checked where it is given."""
    if value is None:
        return None
    # Imported here: a block or an ``@cache`` without a ttl never reads a duration, and the
    # durations module was ~0.4M instructions of a one-test cassette run that reads none.
    from ._core.durations import seconds

    return seconds(value, what, hint="None: no expiry")


class Unset:
    __slots__ = ()

    def __repr__(self) -> str:
        return "UNSET"

    def __bool__(self) -> bool:
        return False


UNSET: Final = Unset()


# Effective's fields in the order its ``__init__`` takes them (its slots: these and
# ``_features``).
_INIT_FIELDS: Final = ("namespace", "mode", "store", "codec", "volatile", "source", "tenant",
                       "session", "test_facing", "ambiguous", "key_substitute", "realtime",
                       "rerecord_hint")


class Effective:
    """The settings in force for one call (global settings overlaid by scopes).

    ``namespace`` None means caching is disabled here (``scope(cache_key=None)``).
    ``source`` names where calls go (a store URL or a cassette path) for error messages.
    ``tenant``/``session`` are set by runtime agent sessions; ``test_facing`` marks blocks that
    bare worker threads may fall back to (see ``scope.py``). ``ambiguous`` is the number of
    blocks open in other threads when this is what a thread carrying none falls back to: its
    calls are refused. ``key_substitute`` holds a cassette's ``(live, placeholder)`` pairs,
    keyed as the placeholders. ``features`` is what the engine uses of ``store`` beyond the
    ``Store`` protocol, read once.

    Frozen as a ``dataclass(frozen=True, slots=True)`` is, and written as a plain slotted
    class: defining it as one compiled its ``__setattr__``/``__delattr__`` and built the
    class twice (for its slots), ~2M instructions of a first cassette block.
    """

    __slots__ = (*_INIT_FIELDS, "_features")

    namespace: str | None
    mode: str
    store: Store
    codec: Codec
    volatile: VolatileItems
    source: str
    tenant: str | None
    session: str | None
    test_facing: bool
    ambiguous: int
    key_substitute: tuple[tuple[bytes, bytes], ...]
    realtime: bool  #: replay streams at their recorded pace
    rerecord_hint: str | None  #: how to re-record, for replay-miss messages
    _features: Features | None  #: read on first use (:attr:`features`)

    def __init__(self, namespace: str | None, mode: str, store: Store, codec: Codec,
                 volatile: VolatileItems = (), source: str = "", tenant: str | None = None,
                 session: str | None = None, test_facing: bool = False, ambiguous: int = 0,
                 key_substitute: tuple[tuple[bytes, bytes], ...] = (), realtime: bool = False,
                 rerecord_hint: str | None = None) -> None:
        # The slots' own setters: ``object.__setattr__`` per field, as a frozen dataclass's
        # ``__init__`` sets them, is slower, and ``__setattr__`` below refuses.
        _SET_NAMESPACE(self, namespace)
        _SET_MODE(self, mode)
        _SET_STORE(self, store)
        _SET_CODEC(self, codec)
        _SET_VOLATILE(self, volatile)
        _SET_SOURCE(self, source)
        _SET_TENANT(self, tenant)
        _SET_SESSION(self, session)
        _SET_TEST_FACING(self, test_facing)
        _SET_AMBIGUOUS(self, ambiguous)
        _SET_KEY_SUBSTITUTE(self, key_substitute)
        _SET_REALTIME(self, realtime)
        _SET_RERECORD_HINT(self, rerecord_hint)
        _SET_FEATURES(self, None)

    def __setattr__(self, name: str, value: Any) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")

    @property
    def features(self) -> Features:
        f = self._features
        if f is None:
            store = self.store
            try:  # features_of's own cache on the store, read without its call: a scope
                f = store.__dict__["_dejacache_features"]  # entered per call reads it
            except (AttributeError, KeyError):  # per call
                f = features_of(store)
            object.__setattr__(self, "_features", f)  # a cache: the instance stays as frozen
        return f

    @property
    def guarded(self) -> bool:
        """Calls here need more than the plain path: refused (ambiguous) or rekeyed."""
        return bool(self.ambiguous or self.key_substitute)

    def derive(self, changes: dict[str, Any]) -> Effective:
        """A copy with ``changes`` (field name -> value), as ``dataclasses.replace`` makes
        one, without its walk over the fields in Python: a scope entered around every call
        derives one per call (4.1 -> 5.1 µs with replace once the fields grew by four)."""
        args = dict(zip(_INIT_FIELDS, _init_values(self), strict=True))
        args.update(changes)
        return Effective(**args)

    # Written once in _slots rather than generated: see value_methods.
    __repr__, __eq__, __hash__ = value_methods(
        "namespace", "mode", "store", "codec", "volatile", "source", "tenant", "session",
        "test_facing", "ambiguous", "key_substitute", "realtime", "rerecord_hint")


(_SET_NAMESPACE, _SET_MODE, _SET_STORE, _SET_CODEC, _SET_VOLATILE, _SET_SOURCE, _SET_TENANT,
 _SET_SESSION, _SET_TEST_FACING, _SET_AMBIGUOUS, _SET_KEY_SUBSTITUTE, _SET_REALTIME,
 _SET_RERECORD_HINT, _SET_FEATURES) = slot_setters(Effective, *_INIT_FIELDS, "_features")
_init_values: Final = operator.attrgetter(*_INIT_FIELDS)


def store_from_url(url: str) -> Store:
    """``memory://``, ``sqlite:///path/cache.db`` (or ``sqlite://`` for the default path),
    ``redis://host:port/db``."""
    from .stores import store_from_url as _from_url

    return _from_url(url)


def resolve_store(store: Store | str | None) -> Store | None:
    """``store=`` as every setting takes it (``configure``, ``scope``, ``tool_cache``,
    ``invalidates``): a ``Store``, a URL for :func:`store_from_url`, or None."""
    if isinstance(store, str):
        store = store_from_url(store)
    if store is None:
        return None
    # Imported here: the protocols cost ~0.4 ms to define, and a block that names no store
    # (a cassette's, a plain scope's) never checks one.
    from .stores._protocols import checked_store

    return checked_store(store, "store", url_ok=True)


class _DefaultStore(BaseStore):
    """The implicit store, opened on its first use.

    Opening it while building the global settings would create ``.dejacache/cache.db`` even
    under ``scope(store=MemoryStore())`` or a cassette block. This stand-in knows its URL
    (``sqlite:///<dir>/cache.db``, or ``memory://`` when ``DEJACACHE_DIR`` is empty) without
    touching the disk, and opens the real store the first time something reads or writes it.
    After that the real store's methods are bound on this object, so a hit pays no extra
    call; attributes it does not define are forwarded. The settings then hand out the real
    store itself (``on_open``), whose :class:`Features` the next ``Effective`` reads; until
    then :meth:`features` answers without opening anything.
    """

    _FORWARD = ("get", "put", "delete", "iterate", "clear", "stats", "aget", "aput", "adelete")
    # Neither store it opens is sequenced: answered here, the engine's probe opens nothing
    # (inside an async call it would open the file on the event loop).
    sequenced = False

    def __init__(self, on_open: Callable[[], None] | None = None) -> None:
        d = cache_dir_text()  # finds the project root: reads the disk, creates nothing
        # (text: a replay hit makes no Path; ``path`` makes one when asked)
        self.file = None if d is None else os.path.join(d, "cache.db")
        self.url = "memory://" if self.file is None else f"sqlite:///{self.file}"
        self.opened: Store | None = None
        self.blocking = self.file is not None  # SQLite (see BaseStore.blocking)
        self._on_open = on_open
        self._lock = _thread.allocate_lock()

    @property
    def path(self) -> pathlib.Path | None:
        """The SQLite file it opens (None: a MemoryStore)."""
        return None if self.file is None else as_path(self.file)

    def features(self) -> Features:
        # Read without opening: inside an async call that would open the file on the event
        # loop. Until opened, nothing beyond the Store protocol is used; opening changes the
        # settings, whose next Effective reads the real store's.
        real = self.opened
        return features_of(real) if real is not None else Features(blocking=self.blocking)

    def open(self) -> Store:
        real = self.opened
        if real is not None:
            return real
        with self._lock:
            if self.opened is None:
                from .stores.memory import MemoryStore
                from .stores.sqlite import SQLiteStore

                real = MemoryStore() if self.file is None else SQLiteStore(self.file)
                for name in self._FORWARD:
                    self.__dict__[name] = getattr(real, name)
                self.opened = real
                if self._on_open is not None:
                    self._on_open()
            return self.opened

    def get(self, key: str) -> Record | None:
        return self.open().get(key)

    def put(self, key: str, record: Record, *, ttl: float | None = None) -> bool | None:
        return self.open().put(key, record, ttl=ttl)

    def delete(self, key: str) -> bool:
        return self.open().delete(key)

    def iterate(
        self, name: str | None = None, namespace: str | None = None
    ) -> Iterator[tuple[str, Record]]:
        return self.open().iterate(name, namespace)

    def clear(self, namespace: str | None = None) -> int:
        return self.open().clear(namespace)

    def stats(self) -> StoreStats:
        return self.open().stats()

    async def _aopen(self) -> Store:
        # Opening creates the directory and the schema: never on the event loop.
        real = self.opened
        if real is not None:
            return real
        from .stores._off_loop import off_loop

        return await off_loop(self.open)

    async def aget(self, key: str) -> Record | None:
        return await (await self._aopen()).aget(key)

    async def aput(self, key: str, record: Record, *, ttl: float | None = None
                   ) -> bool | None:
        return await (await self._aopen()).aput(key, record, ttl=ttl)

    async def adelete(self, key: str) -> bool:
        return await (await self._aopen()).adelete(key)

    def close(self) -> None:
        # Closing what was never opened must not open it.
        if self.opened is not None:
            self.opened.close()

    def __getattr__(self, name: str) -> Any:
        # Only for names this class lacks: optional store features (``incr``, ``purge_expired``
        # ...). Dunders are not forwarded (copy and pickle probe them).
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.open(), name)

    def __reduce__(self) -> tuple[object, ...]:
        # Another process resolves its own default store (its environment, its directory).
        return (_DefaultStore, ())

    def __repr__(self) -> str:
        state = "open" if self.opened is not None else "not opened yet"
        return f"DefaultStore({self.url!r}, {state})"


class _Settings:
    """Process-wide configuration; read through :func:`get_settings`."""

    def __init__(self) -> None:
        self.lock = _thread.RLock()
        self.cache_key: str | Unset | None = UNSET
        self.mode: str | None = None
        self.store: Store | None = None
        self.codec: Codec = JsonCodec()
        self.volatile: VolatileItems | None = None  # None: DEJACACHE_VOLATILE
        self.max_age: float | None = None  # None: DEJACACHE_MAX_AGE (cassettes/ageing.py)
        self.on_expiry: str | None = None  # None: DEJACACHE_ON_EXPIRY, else "warn"
        self.runtime_cache: bool | None = None  # None: DEJACACHE_RUNTIME_CACHE, else on
        self.max_recorded_stream: int | None = None  # None: the project file's, else 64 MiB
        #: That bound as the recordings read it (None: not worked out since the last
        #: configure(); :meth:`effective` does, 0 for the recorder's default).
        self.stream_bound: int | None = None
        self.max_ws_message: int | None = None  # None: ws/_message.MAX_MESSAGE (64 MiB)
        #: The runtime cache's switch as the hot path reads it (one attribute; None: not
        #: worked out since the last configure()).
        self.runtime_on: bool | None = None
        self._default: _DefaultStore | None = None
        self._effective: Effective | None = None

    @property
    def _default_store(self) -> Store | None:
        """The default store if something has opened it, else None."""
        d = self._default
        return None if d is None else d.opened

    def lazy_default_store(self) -> _DefaultStore:
        """The default store as the settings hold it: opened on first use."""
        with self.lock:
            if self._default is None:
                self._default = _DefaultStore(on_open=self.invalidate)
            return self._default

    def default_store(self) -> Store:
        """The default store, opened now."""
        return self.lazy_default_store().open()

    def effective(self) -> Effective:
        eff = self._effective
        if eff is not None:
            return eff
        _check_environment()
        with self.lock:
            if isinstance(self.cache_key, Unset):
                ns: str | None = os.environ.get("DEJACACHE_CACHE_KEY") or "default"
            else:
                ns = self.cache_key
            env_mode = os.environ.get("DEJACACHE_MODE")
            project = _project.current()
            mode = self.mode or (resolve_mode(env_mode, where="DEJACACHE_MODE") if env_mode
                                 else as_mode(project.get("mode") or "auto"))
            store = self.store
            if store is None:
                lazy = self.lazy_default_store()
                store = lazy if lazy.opened is None else lazy.opened
            volatile = self.volatile if self.volatile is not None else global_volatile(project)
            # From the same reading of the project file: a recording on an event loop reads
            # the bound here, never the file there (0: the recorder's default).
            self.stream_bound = (self.max_recorded_stream
                                 or project.get("max_recorded_stream") or 0)
            eff = Effective(
                namespace=ns,
                mode=mode,
                store=store,
                codec=self.codec,
                volatile=volatile,
                source=getattr(store, "url", type(store).__name__),
            )
            self._effective = eff
            if self is _SETTINGS:
                GLOBAL[0] = eff
            return eff

    def invalidate(self) -> None:
        self._effective = None
        self.runtime_on = None
        self.stream_bound = None
        GLOBAL[0] = None

    def resolve_runtime(self) -> bool:
        """Whether ``@tool_cache`` reads and stores entries: ``configure(runtime_cache=)``,
        else ``DEJACACHE_RUNTIME_CACHE`` (read here, once per configuration), else on."""
        on = self.runtime_cache
        if on is None:
            on = _env_switch("DEJACACHE_RUNTIME_CACHE")
        self.runtime_on = on
        return on


# The global effective settings once computed (None: not yet, or changed since): one list
# read for a decorated call outside any scope, instead of ``current()`` ->
# ``get_settings()`` -> ``effective()`` (~0.3 µs of a 2 KB hit). Set and
# cleared under the settings lock, with ``_effective``.
GLOBAL: list[Effective | None] = [None]
_SETTINGS = _Settings()


def get_settings() -> Effective:
    """The global effective settings (no scope applied)."""
    return _SETTINGS.effective()


def reset() -> None:
    """Forget all configuration (tests). Closes nothing the user passed in."""
    global _SETTINGS
    old = _SETTINGS
    with old.lock:  # an effective() of the old settings cannot publish after this
        _SETTINGS = _Settings()
        GLOBAL[0] = None
    if old._default is not None:
        old._default.close()


def settings_object() -> _Settings:
    return _SETTINGS


_SWITCH = {"on": True, "1": True, "true": True, "yes": True, "": True,
           "off": False, "0": False, "false": False, "no": False}


def _check_environment() -> None:
    """Name a misspelt ``DEJACACHE_*`` variable (``_env``: once per process). The table of
    known names is loaded only when the environment holds such a variable: a process with
    none has nothing to name, and a module's import costs it ~0.4M instructions."""
    env = sys.modules.get("dejacache._env")
    if env is None:
        if _ENV_CHECKED[0] or not any(n.startswith("DEJACACHE_") for n in os.environ):
            _ENV_CHECKED[0] = True  # (as warn_unknown's own: checked once)
            return
        from . import _env

        env = _env
    env.warn_unknown()


_ENV_CHECKED = [False]


def _env_switch(name: str) -> bool:
    """An on/off environment variable (unset: on). A value it cannot read turns the switch
    off, with a warning: a switch set by hand during an incident is set to turn it off, and
    failing every call over a typo would be an outage of its own."""
    value = os.environ.get(name, "").strip().lower()
    found = _SWITCH.get(value)
    if found is None:
        import warnings

        from .errors import DejacacheWarning

        warnings.warn(f"dejacache: {name}={os.environ[name]!r} is not on or off; taken as "
                      "off", DejacacheWarning, stacklevel=3)
        return False
    return found


def runtime_cache_on() -> bool:
    """Whether the runtime tool cache is switched on in this process (``configure``,
    ``DEJACACHE_RUNTIME_CACHE``)."""
    s = _SETTINGS
    on = s.runtime_on
    return s.resolve_runtime() if on is None else on


@atexit.register
def _report_global_paths() -> None:
    """Global paths (``configure``, ``DEJACACHE_VOLATILE``, the project file) belong to no
    block: each is checked over the whole process, when it ends."""
    s = _SETTINGS
    try:
        items = s.volatile if s.volatile is not None else global_volatile()
        where = global_volatile_source()
    except ConfigurationError:  # a malformed setting already failed where it was read
        return
    paths = _vol.declared_paths(items)
    if paths:  # the watch's module is loaded where paths are declared only
        from ._core.volatile_watch import ROOT, report

        report(ROOT, paths, where)
