"""A proxy session: one cassette block, open while its requests arrive over HTTP.

A session is ``dejacache.cassette(...)`` entered once, in a context of its own, and every
request routed to it runs in a copy of that context: it sees the block (mode, store, ids
aliased per block, identities) exactly as a call made inside ``with cassette(...)`` does.
The cassette's order (``cassettes/order.py``) follows each asyncio task; over HTTP there is
no task to follow, so a session behaves as one: a request begins where the last request of
the session that finished before it left off, and requests in flight together begin at the
same place, as tasks gathered by one parent do. A sequential agent is then one chain, as it
would be in Python; concurrent requests replay in any order.

Sessions are the proxy's default cassette (``--cassette``, saved when the proxy stops) and
the ones a test runner opens per test through the control endpoint (``_control.py``),
saved when it closes them with the test's outcome. A cassette is open in one session at a
time, and a session's file lies under the proxy's cassette directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import os
import pathlib
import secrets
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from ..cassettes.block import cassette
from ..cassettes.store import Cassette
from ..config import Effective
from ..errors import ConfigurationError, DejacacheError
from ..http.transport import Options
from ..scope import current
from .upstreams import Upstream

__all__ = ["Session", "SessionSpec", "Sessions", "cassette_under", "failure"]

T = TypeVar("T")


@dataclasses.dataclass(frozen=True, slots=True)
class SessionSpec:
    """What a session is opened with: the ``cassette(...)`` settings it takes, the command
    that re-records it (for miss reports) and the upstreams it routes differently."""

    cassette: pathlib.Path
    mode: str | None = None
    strict: bool = False
    live: tuple[str, ...] = ()
    replay_until: int | None = None
    max_age: str | None = None
    on_expiry: str | None = None
    redact: tuple[str, ...] = ()
    volatile: tuple[str, ...] = ()
    rerecord_hint: str | None = None
    realtime: bool = False
    upstreams: tuple[tuple[str, Upstream], ...] = ()


def cassette_under(root: pathlib.Path, name: str) -> pathlib.Path:
    """The cassette ``name`` names, which must lie under ``root`` (a relative name is taken
    from there; ``.json`` is added to a name without a suffix)."""
    if not name or "\0" in name:
        raise ConfigurationError("a session needs a cassette name")
    path = pathlib.Path(name)
    if not path.suffix:
        path = path.with_suffix(".json")
    full = (path if path.is_absolute() else root / path).resolve()
    base = root.resolve()
    if full != base and base not in full.parents:
        raise ConfigurationError(f"cassette {name!r} is outside the proxy's cassette "
                                 f"directory {base}")
    return full


class Session:
    """One open cassette block (see the module docstring); :meth:`open` enters it."""

    def __init__(self, sid: str, spec: SessionSpec) -> None:
        self.id = sid
        self.spec = spec
        self.upstreams = dict(spec.upstreams)
        self.block = cassette(
            spec.cassette, spec.mode, strict=spec.strict, live=list(spec.live) or None,
            replay_until=spec.replay_until, max_age=spec.max_age, on_expiry=spec.on_expiry,
            redact=list(spec.redact) or None, volatile=spec.volatile,
            rerecord_hint=spec.rerecord_hint)
        # Replayed whole answers come back as data: the proxy writes their bytes (``_forward``)
        self.options = Options(realtime=spec.realtime, replayed=True)
        self._ctx = contextvars.copy_context()
        self._inflight = 0
        self._idle: asyncio.Event | None = None
        self.closed = False

    async def open(self) -> Session:
        """Enter the block and read its file, in a worker thread: a large cassette must not
        hold up the other sessions' requests. A damaged file fails here, by name."""
        self.tape: Cassette = await asyncio.to_thread(self._ctx.run, self._enter)
        self.eff: Effective = self._ctx.run(current)
        return self

    def _enter(self) -> Cassette:
        tape = self.block.__enter__()
        try:
            tape.stats()  # reads and indexes the file
        except BaseException:
            self.block.__exit__(RuntimeError, None, None)
            raise
        return tape

    @property
    def mode(self) -> str:
        tape = getattr(self, "tape", None)  # None while it opens
        return tape.mode if tape is not None else (self.spec.mode or "opening")

    def begin(self) -> contextvars.Context:
        """The context one request runs in (see the module docstring); :meth:`end` takes it
        back when the request is done."""
        self._inflight += 1
        return self._ctx.copy()

    def end(self, ctx: contextvars.Context) -> None:
        self._ctx = ctx
        self._inflight -= 1
        if self._inflight == 0 and self._idle is not None:
            self._idle.set()

    async def run(self, fn: Callable[[], Awaitable[T]]) -> T:
        """``fn()`` as a task in this session's context."""
        ctx = self.begin()
        try:
            return await asyncio.get_running_loop().create_task(
                fn(), context=ctx)  # type: ignore[arg-type]
        finally:
            self.end(ctx)

    async def _settled(self, grace: float) -> None:
        """Wait up to ``grace`` seconds for the requests in flight."""
        if self._inflight:
            self._idle = asyncio.Event()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._idle.wait(), grace)

    async def close(self, ok: bool, grace: float = 10.0, *, expect_misses: bool = False
                    ) -> dict[str, Any]:
        """Exit the block (the file is written when ``ok``, as a passing test's is) and
        report what the session did; ``failure`` says why a passing test must fail after
        all (:func:`failure`)."""
        await self._settled(grace)
        self.closed = True
        before = _stamp(self.spec.cassette)
        error = None
        try:  # the file is written in a worker thread, as it was read
            await asyncio.to_thread(self._ctx.run, self.block.__exit__,
                                    None if ok else AssertionError, None, None)
        except (AssertionError, DejacacheError) as exc:  # a strict contract broken, a save
            error = str(exc)
        except Exception as exc:  # a save the file system refused: answered, never lost
            error = f"the save failed: {type(exc).__name__}: {exc}"
        tape = self.tape
        c = tape.counters
        misses = [str(m) for m in tape.misses]
        return {
            "id": self.id, "cassette": str(self.spec.cassette), "mode": tape.mode,
            "saved": _stamp(self.spec.cassette) != before,
            "replayed": c.replayed, "recorded": c.recorded, "missed": c.missed,
            "misses": misses, "divergences": [str(d) for d in tape.divergences],
            "error": error,
            "failure": failure(str(self.spec.cassette), error,
                               [] if expect_misses else misses) if ok else None,
        }


def failure(cassette: str, error: str | None, misses: list[str]) -> str | None:
    """Why a session closed by a passing test did not hold, or None: the one rule every
    test runner's close follows (``ProxySession.close``, the ``dejacache_proxy`` fixture,
    the Node helper). Its save failed or a strict session's recorded calls were not all
    made (``error``), or a request missed: the agent behind the proxy may have swallowed
    the error it was answered, and the test passed without its recording."""
    if error:
        return f"cassette {cassette} did not hold: {error}"
    if misses:
        return (f"{len(misses)} replay miss(es) in cassette {cassette} were met by the agent "
                "behind the proxy, and the test passed without its recording:\n\n"
                + "\n\n".join(misses[:3]))
    return None


def _stamp(path: pathlib.Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


class Sessions:
    """The open sessions: the default one (``--cassette``) and those opened by id."""

    def __init__(self, root: pathlib.Path) -> None:
        self.root = root
        self.default: Session | None = None
        self._by_id: dict[str, Session] = {}

    def _check_free(self, path: pathlib.Path) -> None:
        for s in self.all():
            if s.spec.cassette == path:
                raise ConfigurationError(f"cassette {path} is already open in session {s.id}")

    async def open_default(self, spec: SessionSpec) -> Session:
        self.default = await Session("default", spec).open()
        return self.default

    async def open(self, spec: SessionSpec) -> Session:
        self._check_free(spec.cassette)
        session = Session(secrets.token_hex(8), spec)
        self._by_id[session.id] = session  # taken while it opens: a second open waits no file
        try:
            return await session.open()
        except BaseException:
            del self._by_id[session.id]
            raise

    def find(self, sid: str) -> Session | None:
        return self._by_id.get(sid)

    def all(self) -> list[Session]:
        return [*([self.default] if self.default is not None else []), *self._by_id.values()]

    async def close(self, sid: str, ok: bool, *, expect_misses: bool = False
                    ) -> dict[str, Any]:
        session = self._by_id.pop(sid)
        return await session.close(ok, expect_misses=expect_misses)

    async def close_all(self, grace: float, *, save: bool = True) -> list[dict[str, Any]]:
        """At shutdown: the default cassette is saved (unless ``save`` is False: the proxy
        never served); a session its runner never closed ends with no outcome known, and is
        not (as a test that did not finish)."""
        out = []
        for sid in list(self._by_id):
            out.append(await self._by_id.pop(sid).close(False, grace))
        if self.default is not None:
            out.append(await self.default.close(save, grace))
            self.default = None
        return out
