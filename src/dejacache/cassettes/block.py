"""``with dejacache.cassette(path) as tape:``: route every call in a block to a cassette file.

Works as a sync or async context manager and as a decorator (each decorated call replays
the file from its start). The file is written when the block exits cleanly, and left
byte-identical when the block raises, unless ``record_on_error=True``. An interrupted block
(``KeyboardInterrupt``, ``SystemExit``) writes nothing whatever ``record_on_error`` says: what
it recorded is a prefix of a run, which replays as a miss where the run was cut; the calls
discarded are logged, and the pytest plugin names them in its summary (``DISCARDED``).
"""

from __future__ import annotations

import _contextvars as contextvars  # (as scope.py says)
import contextlib
import os
import re
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType

from .. import _project
from .._core.modes import in_ci
from .._core.volatile import BlockPaths
from .._paths import as_path, exists, path_arg, path_text
from ..config import (
    UNSET,
    Effective,
    Unset,
    flag,
    resolve_mode,
    volatile_items,
)
from ..errors import CassetteError, ConfigurationError
from ..keys import key_substitutions
from ..scope import CURRENT, Block, enter, inherited, leave, own_entry, settle
from ._events import DISCARDED, INTERRUPTIONS, OPENED
from .ageing import given as given_ageing
from .ageing import resolve as resolve_ageing
from .store import Cassette

TYPE_CHECKING = False  # typing is not loaded by a replay hit (~12M instructions); mypy reads True
if TYPE_CHECKING:
    import pathlib

    from .._core.durations import Duration
    from .partial import LiveRule, Partial
    from .redact import Redactor

__all__ = ["DISCARDED", "INTERRUPTIONS", "OPENED", "cassette", "default_mode", "in_ci"]


def default_mode(exists: bool = True) -> str:
    """The mode of a block that names none (``_project.default_mode``)."""
    return _project.default_mode(exists)



def _learning() -> bool:
    """Whether ``dejacache learn`` runs this process (``scratch.active``). Asked first of
    the environment, so a block outside such a run never loads ``scratch.py`` (a module's
    import costs a fresh process ~0.4M instructions however little it holds)."""
    if "DEJACACHE_LEARN_DIR" not in os.environ:
        return False
    from . import scratch

    return scratch.active()

class cassette(Block[Cassette]):
    """Record calls made inside the block to ``path`` and replay them on later runs.

    ``mode``: ``auto`` (replay hits, record misses), ``replay`` (misses raise ``ReplayMiss``),
    ``record`` (re-record everything), ``off``. ``redact``: extra header/field/query names,
    dotted paths (``"request.user.ssn"`` style, containing a dot) and compiled regexes;
    ``substitute={"<ACCOUNT>": live_value}`` writes the placeholder and restores the live
    value on replay. ``prune=True`` drops entries the block never used. ``record_errors``:
    exception types recorded and replayed as the same exception. ``cache_key`` sets the
    namespace inside the block. ``volatile``: names, paths (``"body.messages[*].content"``)
    and compiled patterns left out of matching for the block's calls (the file shows a
    placeholder where a pattern matched). ``shared=True``: several tests (blocks) use the
    file; a save keeps the others' entries in every mode (``record`` replaces only the
    calls this block makes) and ``prune`` leaves it alone.
    ``strict=True``: calls must follow the recorded order, compared per asyncio task /
    thread (``asyncio.gather`` stays valid); a call that is not the recorded one at its step,
    or goes past the end of the recording, raises ``ReplayDivergence`` (nothing is sent),
    and so do recorded calls never made, when the block exits. Without it,
    ``tape.divergences`` lists the same findings and nothing fails.
    ``match="vcr"``: calls are matched on method + URL in recorded order, as vcrpy does
    (``cassettes/vcr_match.py``); a warning at exit names the request fields that changed.
    ``max_age`` (``"30d"``; default ``configure(max_age=)``, ``DEJACACHE_MAX_AGE``):
    an entry recorded longer ago replays with a ``DejacacheWarning``, or with
    ``on_expiry="rerecord"`` in ``auto`` mode runs live and is replaced (``ageing.py``).
    ``live=["model"]`` / ``["tool:search_web"]``: those calls go live, the rest replay;
    ``replay_until=N``: the first N calls replay in the recorded order, later ones go live.
    ``strict=True`` with ``live=`` checks the replayed calls' order, the live steps skipped.
    Live calls are written to ``live_path`` (default ``<name>.live.json``), never to
    ``path`` (``partial.py``).
    ``blobs``: payloads (base64 of at least 1,024 characters, ``data:`` URLs, text of at
    least 64 KiB) are stored once by hash in ``blobs/`` beside the file (``blobs.py``);
    a number sets the threshold in characters, ``False`` keeps them in the file.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        mode: str | None = None,
        *,
        redact: Iterable[str | re.Pattern[str]] | Redactor | None = None,
        substitute: Mapping[str, str] | None = None,
        prune: bool = False,
        record_on_error: bool = False,
        record_errors: Iterable[type[BaseException]] = (),
        cache_key: str | Unset = UNSET,
        volatile: Iterable[str | re.Pattern[str]] = (),
        rerecord_hint: str | None = None,
        shared: bool = False,
        strict: bool = False,
        match: str = "request",
        max_age: Duration | None = None,
        on_expiry: str | None = None,
        live: Iterable[str] | str | None = None,
        replay_until: int | None = None,
        live_path: str | os.PathLike[str] | None = None,
        blobs: bool | int = True,
    ) -> None:
        # (itself unless `dejacache learn`)
        file = path_text(path_arg(path, "cassette path"))
        if _learning():
            from . import scratch

            file = str(scratch.redirect(as_path(file)))
        #: the cassette's path as text (``path``, a Path, is made when first read)
        self.file = file
        self._path: pathlib.Path | None = None
        if os.path.splitext(file)[1].lower() in (".yaml", ".yml"):
            # (written as JSON under a .yaml name, it looked like a vcrpy file to every tool)
            raise ConfigurationError(
                f"cassette {file}: dejacache cassettes are JSON; name it "
                f"{self.path.with_suffix('.json').name} (a vcrpy / pytest-recording YAML "
                f"recording converts with: dejacache import {self.path} -o "
                f"{self.path.with_suffix('.json')})")
        if blobs is not True:  # (the default needs no check, nor blobs.py)
            from .blobs import sink_for

            sink_for(blobs)  # a wrong value fails where it is written
        self.blobs = blobs
        self.mode = resolve_mode(mode) if mode is not None else None
        #: None: the default rules (the tape makes them when it first needs them)
        self.redactor: Redactor | None = None
        if redact is not None or substitute:
            from .redact import Redactor  # (checked here: a wrong spec fails where written)

            self.redactor = Redactor.from_spec(redact, substitute)
        self.key_substitute = key_substitutions(substitute or {})
        self.prune = flag(prune, f"cassette {file}: prune")
        self.record_on_error = flag(record_on_error, f"cassette {file}: record_on_error")
        self.record_errors = tuple(record_errors)
        self.cache_key = cache_key
        self.volatile = volatile_items(volatile)
        self._paths = BlockPaths(self.volatile, f"cassette {file}")
        self.rerecord_hint = rerecord_hint
        self.shared = flag(shared, f"cassette {file}: shared")
        self.strict = flag(strict, f"cassette {file}: strict")
        if match != "request":  # (the default needs no check, nor vcr_match.py)
            from .vcr_match import check_match

            check_match(match)
        self.match = match
        self.max_age, self.on_expiry = max_age, on_expiry
        # A malformed duration fails where it is written (the project file's, at the open).
        given_ageing(max_age, on_expiry)
        self.replay_until = replay_until
        self.partial = live is not None or replay_until is not None
        self.live: tuple[LiveRule, ...] = ()
        self.live_path: pathlib.Path | None = None
        if self.partial:
            # Partial replay's machinery loads with the first block that asks for it.
            from .partial import Partial, check_partial, derived_path, parse_live

            self.live = parse_live(live)
            self.partial = bool(self.live) or replay_until is not None
            self.live_path = derived_path(self.path, live_path) if self.partial else None
        if self.partial:
            Partial(self.live, replay_until)  # checked here, made anew for each block entered
            check_partial(self.mode)
        # One entry per block open on this object: several at once in the decorator form.
        self._stack: list[tuple[Effective, Cassette, contextvars.Token[Effective | None]]] = []
        self.last: Cassette | None = None
        # Set by integrations that write the file later (dejacache.integrations.scenario under
        # pytest): called with (tape, block_ok) on exit instead of saving and closing the tape.
        self.defer_save: Callable[[Cassette, bool], None] | None = None
        # Told of the block's partial replay when it exits cleanly, instead of a warning
        # naming its ``live=`` rules that matched no call (the pytest plugin gathers those of
        # ``--dejacache-live``, which every test shares, into one note for the session).
        self.on_live: Callable[[Partial], None] | None = None
        # Why an error ending writes nothing, in the note that says so (the pytest plugin
        # ends a test's block with AssertionError whether the test failed or was skipped).
        self.discard_reason: str | None = None

    @property
    def path(self) -> pathlib.Path:
        """The cassette's path."""
        if self._path is None:
            self._path = as_path(self.file)
        return self._path

    def open(self) -> Cassette:
        """A fresh tape over the file (not yet active)."""
        learning = _learning()  # `dejacache learn`: every call live, into scratch
        mode = "record" if learning else self.mode or default_mode(exists(self.file))
        hint = self.rerecord_hint or (
            f"DEJACACHE_MODE=record <your command>  (or cassette({self.file!r}, "
            "mode='record'))")
        max_age, on_expiry = resolve_ageing(self.max_age, self.on_expiry)
        partial = None
        if self.partial and not learning:
            from .partial import Partial

            partial = Partial(self.live, self.replay_until)
        return Cassette(self.file, mode="replay" if partial else mode, redactor=self.redactor,
                        rerecord_hint=hint, record_errors=self.record_errors,
                        shared=self.shared,
                        strict=self.strict or self.replay_until is not None,
                        match=self.match, max_age=max_age, on_expiry=on_expiry,
                        partial=partial, live_path=self.live_path if partial else None,
                        blobs=self.blobs)

    def __enter__(self) -> Cassette:
        return self._entered(*self._ready())

    async def __aenter__(self) -> Cassette:
        # Made ready in a worker thread: what it reads (the project file for its settings,
        # the cassette, the default store's directory) is a blocking call on an event loop,
        # which a loop checker such as blockbuster fails the block for. A caller cancelled
        # meanwhile leaves at once, and the tape is closed when the worker has opened it.
        from ..stores._off_loop import off_loop_owned  # (a thread hop follows)

        return self._entered(*await off_loop_owned(self._ready, _unentered))

    def _ready(self) -> tuple[Cassette, Effective]:
        """A fresh tape, told to ``OPENED`` and its file read; the settings the block
        derives its own from."""
        tape = self.open()
        try:
            for seen in OPENED:
                seen(self, tape)
                if tape.live_tape is not None:  # a partial block's file is the test's too
                    seen(self, tape.live_tape)
            tape._load()
        except BaseException:  # (a damaged file: its memory map is not kept)
            _abandon(tape)
            raise
        return tape, inherited()

    def _entered(self, tape: Cassette, base: Effective) -> Cassette:
        """Make ``tape`` (its file read) the store of the calls in the caller's context."""
        ns: str | None
        if not isinstance(self.cache_key, Unset):
            ns = self.cache_key
        else:
            ns = base.namespace if base.namespace is not None else "default"
        source = self.file if tape.exists or tape.mode != "replay" else (
            f"{self.file} (file does not exist)")
        # Live values are keyed as their placeholders, as they are written to the file.
        subs = self.key_substitute or base.key_substitute
        eff = base.derive({"store": tape, "mode": tape.mode, "source": source,
                           "namespace": ns, "test_facing": True, "key_substitute": subs,
                           "volatile": (*base.volatile, *self.volatile)})
        token = enter(eff)
        self._stack.append((eff, tape, token))
        self.last = tape
        self._paths.enter()
        return tape

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        tape = self._left(exc_type)
        if tape is not None:
            self._save(tape, exc_type)
            self._closed(tape, exc_type)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        tape = self._left(exc_type)
        if tape is None:
            return
        import asyncio  # (a coroutine runs: loaded already, unless under trio)

        from ..stores._off_loop import off_loop_whole

        try:  # the file is written in a worker thread (see __aenter__), to the end
            await off_loop_whole(self._save, tape, exc_type)
        except asyncio.CancelledError:  # (raised once the save is done)
            self._closed(tape, exc_type, cut=True)
            raise
        self._closed(tape, exc_type)

    def _left(self, exc_type: type[BaseException] | None) -> Cassette | None:
        """Leave the block in the caller's context; the tape whose file is this block's to
        save (None: ``defer_save`` has it)."""
        eff, tape, token = own_entry(self._stack, CURRENT.get())
        leave(eff, token)
        # A stream still being read cannot reach the file any more: say so, by name.
        settle(tape, "its cassette block")
        if self.defer_save is not None:  # the caller decides later (pytest: the test outcome)
            self.defer_save(tape, exc_type is None)
            self._paths.exit()
            return None
        return tape

    def _fate(self, exc_type: type[BaseException] | None) -> tuple[bool, bool]:
        """``(interrupted, saved)`` of a block left with ``exc_type``: the save and what
        the block says after it (:meth:`_closed`) judge it alike."""
        interrupted = exc_type is not None and issubclass(exc_type, INTERRUPTIONS)
        return interrupted, exc_type is None or (self.record_on_error and not interrupted)

    def _save(self, tape: Cassette, exc_type: type[BaseException] | None) -> None:
        saved = self._fate(exc_type)[1]
        try:
            if saved:
                tape.save(prune=self.prune and exc_type is None)
        except CassetteError:  # (the lock's queue timed out, the file is damaged...)
            # The error says why; the summary also names the recording it cost.
            _discarded(tape, "the save failed", log=False)
            raise
        finally:
            tape.close()

    def _closed(self, tape: Cassette, exc_type: type[BaseException] | None, *,
                cut: bool = False) -> None:
        """What the block says once its file is written: discarded recordings, warnings, and
        the errors its calls left. ``cut``: its caller was cancelled during the save."""
        interrupted, saved = self._fate(exc_type)
        if exc_type is not None and not saved:
            # (logged for an interruption only: an error is the caller's own news)
            reason = exc_type.__name__
            _discarded(tape, reason if interrupted else self.discard_reason or reason,
                       log=interrupted)
        if interrupted or cut:
            # No warnings: under -W error one would replace the interruption (the test
            # session would report a failure instead of stopping) or the cancellation; nor
            # the verdict on the block's calls, which its gone caller would not hear.
            self._paths.exit(quiet=True)
            return
        # After the save: under -W error this warning is raised, and must not cost the file.
        self._paths.exit()
        if exc_type is None:  # (under -W error it must not replace the block's own error)
            if "vcr" in vars(tape):  # (made by a miss or match="vcr": else it served none)
                from .vcr_match import warn_stale

                warn_stale(tape)
            if tape.ageing is not None:
                tape.ageing.warn()
            if tape.partial is not None:
                self._live_done(tape.partial)
        lost = tape.unstored_error() if exc_type is None else None
        if lost is not None:  # (after the save: the file holds every call it could)
            raise lost
        if tape.strict and exc_type is None:
            unmade = tape.unmade_error()  # recorded calls never made: the contract is broken
            if unmade is not None:
                raise unmade

    def _live_done(self, partial: Partial) -> None:
        if self.on_live is not None:
            self.on_live(partial)
            return
        unmatched = partial.unmatched()
        if unmatched:
            import warnings

            from ..errors import DejacacheWarning
            from .partial import unmatched_note

            warnings.warn(unmatched_note(unmatched, partial.calls, f"in cassette {self.file}"),
                          DejacacheWarning, stacklevel=3)


def _abandon(tape: Cassette) -> None:
    """Close a tape no block entered (its file could not be read, or its caller was
    cancelled while it opened): nothing was recorded, so nothing is saved."""
    # (damage in the file: the open's own error says so, or the next open does)
    with contextlib.suppress(CassetteError):
        tape.close()


def _unentered(ready: tuple[Cassette, Effective]) -> None:
    _abandon(ready[0])


def _discarded(tape: Cassette, reason: str, *, log: bool = True) -> None:
    """Say what a block that ended in an error did not write (nothing when it had recorded
    nothing): logged for an interruption, and told to ``DISCARDED`` (the pytest summary)."""
    held = tape.live_tape if tape.live_tape is not None else tape  # a partial block's file
    n = held.new_entries
    if not n:
        return
    note = (f"recording discarded ({reason}): {n} call{'s' if n != 1 else ''} not written "
            f"to {held.path}")
    if log:
        import logging  # only when a block is cut short: the first block must not pay for it

        logging.getLogger("dejacache.cassettes").warning(
            "dejacache: %s; an interrupted block writes nothing", note)
    for told in DISCARDED:
        told(held, note)
