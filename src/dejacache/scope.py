"""Block-level overrides carried by ``contextvars``, and their carriage into threads.

``with scope(cache_key=..., mode=..., store=...)`` overrides the global settings for the
block, in sync code, asyncio tasks (each task copies its context) and generators (use the
decorator form, which re-enters the scope around every step).

Threads do not inherit context in Python 3.11. ``scope(...).run_in_thread``,
:func:`wrap_executor` and :func:`propagate` carry it explicitly. As a last line of defence, a
call from a thread that carries no scope at all, made while test-facing blocks (scopes,
cassettes) are active, is routed to the single active block; with several active it fails
closed. So a worker thread can never turn a replay into a live call. That routing is for
calls only: a block opened in such a thread starts from the thread's own settings
(:func:`inherited`), as a service thread's ``scope(cache_key=...)`` must.
"""

from __future__ import annotations

# (``contextvars`` only re-exports ``_contextvars``: importing it cost a replay hit's
# process ~0.7M instructions; every module a hit loads imports the C module itself)
import _contextvars as contextvars
import _thread
import functools
import inspect
import os
import re
import sys
import weakref
from collections.abc import AsyncIterator, Callable, Generator, Iterable
from types import TracebackType

from ._core.volatile import BlockPaths
from ._lazy import ON_FIRST_BLOCK
from .config import (
    GLOBAL,
    UNSET,
    Effective,
    Unset,
    get_settings,
    resolve_mode,
    resolve_store,
    volatile_items,
)
from .errors import ReplayMiss

TYPE_CHECKING = False  # typing is not loaded by a replay hit (~12M instructions); mypy reads True
if TYPE_CHECKING:
    import concurrent.futures  # at run time in _executor: it loads logging, ~7 ms
    from typing import Any, Generic, ParamSpec, Protocol, TypeVar

    from .stores._protocols import Store
else:
    from ._hints import Any, Generic, ParamSpec, Protocol, TypeVar

__all__ = ["current", "inherited", "propagate", "scope", "settle", "track", "untrack",
           "wrap_executor"]

P = ParamSpec("P")
T = TypeVar("T")

CURRENT: contextvars.ContextVar[Effective | None] = contextvars.ContextVar(
    "dejacache_scope", default=None
)

# The main thread, told without loading ``threading`` (~2.5M instructions of a fresh
# process's first hit): the one ``threading`` names if it is loaded, else the one importing
# this module (whom ``threading`` named when this module imported it; a bare thread that
# loaded it first would be named main by it). Kept with the process id: a forked child's
# main thread is the one that forked, which ``threading``, loaded in any process that
# started a thread with it, names there. (No ``os.register_at_fork``: registering was
# ~0.5M instructions of that first hit.)
_threading = sys.modules.get("threading")
_MAIN = (os.getpid(),
         _threading.main_thread().ident if _threading is not None else _thread.get_ident())
del _threading


def _off_main_thread() -> bool:
    pid, ident = _MAIN
    if pid != os.getpid():
        threading = sys.modules.get("threading")
        if threading is not None:
            return threading.current_thread() is not threading.main_thread()
    return _thread.get_ident() != ident


# Test-facing blocks open anywhere in the process (for context-less worker threads).
_ACTIVE_LOCK = _thread.allocate_lock()
OPEN_BLOCKS: list[Effective] = []
# id(block) -> the test-facing block it was opened inside (None: outermost). Nested blocks
# count as one, so `with scope(a): with scope(b):` routes worker threads to b rather than
# failing closed; blocks opened side by side (other threads, sibling tasks) stay ambiguous.
_PARENT: dict[int, Effective | None] = {}
_BLOCK: contextvars.ContextVar[Effective | None] = contextvars.ContextVar(
    "dejacache_block", default=None
)
_Tok = contextvars.Token[Effective | None]
_BLOCK_TOKENS: dict[int, tuple[_Tok, _Tok]] = {}  # id(scope token) -> (it, its _BLOCK token)
# Called with +1 / -1 as test-facing blocks open and close: HTTP interception
# (http/intercept.py) keeps its transport patches installed only while a block is open.
BLOCK_HOOKS: list[Callable[[int], None]] = []


def _ambiguous(n: int) -> Effective:
    from .stores.memory import MemoryStore

    base = get_settings()
    return base.derive({
        "mode": "replay", "store": MemoryStore(maxsize=1), "test_facing": True,
        "source": f"<{n} dejacache blocks active in other threads; this thread carries none>",
        "ambiguous": n,
    })


def current() -> Effective:
    """The settings in force for a call made here and now (a call from a thread that
    carries no scope may be routed to a block open in another thread: see the module
    docstring)."""
    eff = CURRENT.get()
    if eff is not None:
        return eff
    if not OPEN_BLOCKS:
        return GLOBAL[0] or get_settings()
    if _off_main_thread():
        with _ACTIVE_LOCK:
            inner = {id(p) for p in _PARENT.values() if p is not None}
            leaves = {id(b): b for b in OPEN_BLOCKS if id(b) not in inner}
        if len(leaves) == 1:
            return next(iter(leaves.values()))
        if leaves:
            return _ambiguous(len(leaves))
    return get_settings()


def inherited() -> Effective:
    """What a block opened here starts from: this context's own settings (the block it is
    nested in, else the global settings). Never the block :func:`current` routes a bare
    thread's calls to: a service thread's own block took that block's namespace, mode,
    volatile items and store (its recording then never replayed on its own), and with two
    blocks open elsewhere it inherited their refusal, even in record mode."""
    eff = CURRENT.get()
    if eff is not None:
        return eff
    return GLOBAL[0] or get_settings()


def active_blocks() -> list[Effective]:
    """The test-facing blocks open anywhere in the process right now (a snapshot)."""
    with _ACTIVE_LOCK:
        return list(OPEN_BLOCKS)


def _load_block_hooks() -> None:
    # What test-facing blocks switch on is what the package registered in ON_FIRST_BLOCK
    # (``_blockwatch``: HTTP interception, MCP recording, executor tasks carrying their
    # submitter's context; it puts its hook in BLOCK_HOOKS and its import hook in
    # sys.meta_path when imported). ``import dejacache`` imports none of them (HTTP
    # interception, cassettes and the runtime loaded eagerly made it 61-65 ms), so the first
    # test-facing block does, before running the hooks: an SDK call or executor task in the
    # very first block is covered.
    global _HOOKS_LOADED
    for load in ON_FIRST_BLOCK:
        load()
    _HOOKS_LOADED = True


_HOOKS_LOADED = False


def enter(eff: Effective) -> contextvars.Token[Effective | None]:
    """Make ``eff`` current; the caller must pass the token to :func:`leave`."""
    if not eff.test_facing:
        return CURRENT.set(eff)
    if not _HOOKS_LOADED:
        _load_block_hooks()
    parent = _BLOCK.get()
    btoken = _BLOCK.set(eff)
    token = CURRENT.set(eff)
    with _ACTIVE_LOCK:
        OPEN_BLOCKS.append(eff)
        if parent is not eff:
            _PARENT.setdefault(id(eff), parent)
        _BLOCK_TOKENS[id(token)] = (token, btoken)
    for hook in BLOCK_HOOKS:
        hook(1)
    return token


def leave(eff: Effective, token: contextvars.Token[Effective | None]) -> None:
    try:
        CURRENT.reset(token)
    except ValueError:  # exited from another context (generator/task hand-over)
        CURRENT.set(None)
    if eff.test_facing:
        with _ACTIVE_LOCK:
            btoken = _BLOCK_TOKENS.pop(id(token), (None, None))[1]
            parent = _PARENT.get(id(eff))
            for i in range(len(OPEN_BLOCKS) - 1, -1, -1):
                if OPEN_BLOCKS[i] is eff:
                    del OPEN_BLOCKS[i]
                    break
            if not any(b is eff for b in OPEN_BLOCKS):
                _PARENT.pop(id(eff), None)
        try:
            if btoken is None:
                raise ValueError
            _BLOCK.reset(btoken)
        except ValueError:  # left from another context, as above
            _BLOCK.set(parent)
        for hook in BLOCK_HOOKS:
            hook(-1)


# ---------------------------------------------------------------- recordings open in a block


class Recording(Protocol):
    """A live answer stored only once it is complete: an HTTP stream being read
    (``http/recording.py``), a ``@cache`` generator being iterated (``decorators.py``)."""

    @property
    def eff(self) -> Effective: ...

    def abandon(self, why: str) -> None:
        """Give up storing it (if nothing else settled it first), with a warning naming
        the call."""


_RECORDINGS_LOCK = _thread.allocate_lock()
_RECORDINGS: weakref.WeakSet[Recording] = weakref.WeakSet()
R = TypeVar("R", bound=Recording)


def track(rec: R) -> R:
    """``rec`` is handed to a caller: the block it was made in settles it at exit."""
    with _RECORDINGS_LOCK:
        _RECORDINGS.add(rec)
    return rec


def untrack(rec: Recording) -> bool:
    """Stop tracking ``rec``; True for the one caller that found it still tracked (a
    completion and a block exit racing: exactly one of them wins)."""
    with _RECORDINGS_LOCK:
        if rec not in _RECORDINGS:
            return False
        _RECORDINGS.discard(rec)
        return True


def settle(owner: object, where: str) -> None:
    """A block is exiting: the recordings still open in it are abandoned, each with a
    warning naming the call, now rather than whenever someone closes them outside the
    block. ``owner`` is the block's settings, or the store only that block writes (a
    cassette, which calls in blocks nested in it write too). A recording read on after
    its block stores nothing: a cassette is written at exit, and the rule is one for
    every block."""
    if not _RECORDINGS:
        return
    with _RECORDINGS_LOCK:
        mine = [r for r in _RECORDINGS if r.eff is owner or r.eff.store is owner]
    for r in mine:
        r.abandon(f"was still being read when {where} exited")


# Set while a decorated generator's step leaves its block: re-entered around every step,
# the block (and the scopes it enters itself, as the scenario drop-in's does) pauses
# between steps rather than exits, so recordings read across steps go on.
_PAUSED: contextvars.ContextVar[bool] = contextvars.ContextVar("dejacache_paused",
                                                               default=False)


def check_ambiguous(eff: Effective, name: str) -> None:
    n = eff.ambiguous
    if n:
        raise ReplayMiss(
            f"{name} was called from a thread that carries no dejacache scope while {n} "
            "dejacache blocks are active in other threads, so it cannot be attributed and is "
            "refused rather than run live. Start the thread with dejacache.propagate(fn), "
            "scope(...).run_in_thread or dejacache.wrap_executor(executor).",
            name=name,
            source=eff.source,
        )


E = TypeVar("E")


EntryT = TypeVar("EntryT", bound=tuple[Any, ...])
X = TypeVar("X")
_ENTRIES_LOCK = _thread.allocate_lock()


def own_entry(entries: list[EntryT], here: object) -> EntryT:
    """Take out of a block object's ``entries`` the newest one this context made (its first
    item is ``here``: what its entry made current here), else the newest. One object may
    be entered by several tasks or threads at once (the decorator form): an exit that took
    the newest entry left another call's block while that call still ran in it (a cassette
    saved and closed the tape it was recording into: its next calls went live, unrecorded),
    and reset this context's settings to none instead of its outer block's."""
    return _take(entries, lambda entry: entry[0] is here)[0]


def reset_own(tokens: list[contextvars.Token[Any]]) -> None:
    """:func:`own_entry` for a block whose entries all make the same value current (one
    ``intercept``'s options, an ``agent_session`` itself), so no value tells them apart:
    its entries are the tokens they set, and this context's newest is the newest that resets
    here (a token set in another context refuses), which leaves it reset. A context that
    entered none (a generator handed over to another task) takes the newest and sets its
    variable to None, as a reset that fails does everywhere."""
    token, mine = _take(tokens, _resets_here)
    if not mine:
        token.var.set(None)


def _resets_here(token: contextvars.Token[Any]) -> bool:
    try:
        token.var.reset(token)
    except ValueError:  # set in another context
        return False
    return True


def _take(entries: list[X], mine: Callable[[X], bool]) -> tuple[X, bool]:
    """The one rule of :func:`own_entry` and :func:`reset_own`: the newest of ``entries``
    that is ``mine``, else the newest, taken out (and whether it was ``mine``)."""
    with _ENTRIES_LOCK:  # (another thread's exit may take an entry between look and pop)
        for i in range(len(entries) - 1, -1, -1):
            if mine(entries[i]):
                return entries.pop(i), True
        return entries.pop(), False


class Block(Generic[E]):
    """Async-with and decorator forms for a sync context manager, so every dejacache block
    (scope, cassette, intercept, agent_session) works in ``with``, ``async with`` and as a
    decorator of sync/async functions and generators the same way."""

    def __enter__(self) -> E:
        raise NotImplementedError

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> E:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)

    def __call__(self, fn: Callable[P, T]) -> Callable[P, T]:
        return decorate_with_block(self, fn)


class scope(Block["scope"]):
    """Override namespace, mode or store for a block (context manager or decorator).

    ``cache_key=None`` disables caching inside the block; ``volatile`` adds to the volatile
    names, paths and patterns in force (see ``configure``).
    """

    def __init__(
        self,
        cache_key: str | Unset | None = UNSET,
        *,
        mode: str | None = None,
        store: Store | str | None = None,
        volatile: Iterable[str | re.Pattern[str]] = (),
    ) -> None:
        self.cache_key = cache_key
        self.volatile = volatile_items(volatile)
        self._paths = BlockPaths(self.volatile, "scope(volatile=...)")
        self.mode = resolve_mode(mode) if mode is not None else None
        self.store = resolve_store(store)
        self._tokens: list[tuple[Effective, contextvars.Token[Effective | None]]] = []

    def effective(self) -> Effective:
        base = inherited()
        changes: dict[str, Any] = {"test_facing": True}
        if not isinstance(self.cache_key, Unset):
            changes["namespace"] = self.cache_key
        if self.mode is not None:
            changes["mode"] = self.mode
        if self.volatile:
            changes["volatile"] = (*base.volatile, *self.volatile)
        if self.store is not None:
            changes["store"] = self.store
            changes["source"] = getattr(self.store, "url", type(self.store).__name__)
        return base.derive(changes)

    def __enter__(self) -> scope:
        eff = self.effective()
        self._tokens.append((eff, enter(eff)))
        self._paths.enter()
        return self

    def __exit__(self, *exc_info: object) -> None:
        eff, token = own_entry(self._tokens, CURRENT.get())
        leave(eff, token)
        if not _PAUSED.get():
            settle(eff, "its scope block")
        self._paths.exit()


    def run_in_thread(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``fn`` in a new thread inside this scope and return its result."""
        with self:
            ctx = contextvars.copy_context()
        box: list[Any] = []

        def target() -> None:
            try:
                box.append((True, ctx.run(fn, *args, **kwargs)))
            except BaseException as exc:
                box.append((False, exc))

        import threading

        t = threading.Thread(target=target, name="dejacache-scope")
        t.start()
        t.join()
        ok, value = box[0]
        if not ok:
            raise value
        return value  # type: ignore[no-any-return]


def decorate_with_block(block: Any, fn: Callable[P, T]) -> Callable[P, T]:
    """Wrap ``fn`` so each call (or each generator step) runs inside ``block``."""
    if inspect.isasyncgenfunction(fn):

        @functools.wraps(fn)
        async def agen(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            async with block:
                async for item in fn(*args, **kwargs):
                    yield item

        return agen  # type: ignore[return-value]
    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def gen(*args: Any, **kwargs: Any) -> Generator[Any, Any, Any]:
            # Re-enter around every step so the caller's context is untouched between yields.
            it = iter(fn(*args, **kwargs))
            try:
                while True:
                    with block:
                        try:
                            item = next(it)
                        except StopIteration as stop:
                            return stop.value
                        paused = _PAUSED.set(True)
                    _PAUSED.reset(paused)
                    yield item
            finally:
                close = getattr(it, "close", None)
                if close is not None:  # abandoned: its cleanup runs now, inside the block
                    with block:
                        close()

        return gen  # type: ignore[return-value]
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def coro(*args: Any, **kwargs: Any) -> Any:
            async with block:
                return await fn(*args, **kwargs)

        return coro  # type: ignore[return-value]

    @functools.wraps(fn)
    def sync(*args: Any, **kwargs: Any) -> Any:
        with block:
            return fn(*args, **kwargs)

    return sync


def propagate(fn: Callable[P, T]) -> Callable[P, T]:
    """Bind ``fn`` to the current context, so a thread running it sees the current scope."""
    ctx = contextvars.copy_context()

    @functools.wraps(fn)
    def bound(*args: P.args, **kwargs: P.kwargs) -> T:
        return ctx.copy().run(fn, *args, **kwargs)

    return bound


def wrap_executor(executor: concurrent.futures.Executor) -> concurrent.futures.Executor:
    """Wrap any ``concurrent.futures`` executor so tasks run in the submitter's scope.

    (``asyncio.to_thread`` already copies the context; ``loop.run_in_executor`` does not, so
    pass it a wrapped executor.)
    """
    from ._executor import ContextExecutor

    return ContextExecutor(executor)
