"""An inter-process lock around one cassette's read-merge-write, taken in arrival order.

On POSIX, ``fcntl.flock`` on a lock file: importing ``filelock`` cost 50-190 ms of the first
save in a process (it imports asyncio and decimal), more than the rest of a spliced save.
``filelock`` is used where ``fcntl`` does not exist (Windows). Both take ``flock`` on the same
file on POSIX, so a process of either kind excludes the other. The lock file lives in the
temp directory, not beside the cassette, so nothing extra shows in git.

Waiters queue first, and take the ``flock`` in the order they came (Linux): polling the
``flock`` with backoff was not first come first served, and 24 processes saving blocks into
one shared cassette waited up to 18 s, 5 of them past the timeout, their blocks lost. The
queue is a ticket counter in the lock file and one byte-range lock per ticket (open file
description locks, which belong to the open file as ``flock`` does and go with a process
that dies): a waiter holds its ticket's byte and waits for the byte of the ticket before
it, so each byte has one waiter and the kernel's order of waking them does not matter. A
blocking wait runs in a helper thread, the timeout is the caller's; a waiter that gives up
releases its byte (the next one goes on to the ``flock``, which excludes either way) and
leaves the thread to release at once whatever it gets. The holder writes its pid and start
into the lock file, so a wait that times out says who holds the lock and for how
long, and how many wait ahead and behind.

Ctrl-C waits while the lock is held (``_Interrupts``): every write happens under it, and
one interrupted half-way left a descriptor, a temp file or the lock itself behind (found
by raising SIGINT at each call and return of a save in turn).
"""

from __future__ import annotations

import contextlib
import errno
import os
import pathlib
import struct
import sys
import threading
import time
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import xxhash

from ..errors import CassetteError

__all__ = ["TIMEOUT_S", "cassette_lock", "queued"]

# How long a save waits in the queue: a save holds the lock for milliseconds, so even 24
# writers saving into one file at once (~2 s of queue under a 2-core load of 18) are far
# inside it; a minute means a stuck holder, which is named rather than waited on.
TIMEOUT_S = 60.0

# Open file description locks (F_OFD_SETLK*): Linux 3.15 on; ``struct flock`` packed below
# for a 64-bit off_t. Elsewhere waiters block on the ``flock`` alone (woken in no set order).
_QUEUE = sys.platform == "linux" and struct.calcsize("P") == 8
_NEXT = 8  # the next ticket (8 bytes); byte 0 is the mutex around taking one
_HOLDER = 16  # the holder's pid and wall-clock start (16 bytes), zeros when free
_HOLDER_FMT = "<Qd"
_SLOTS = 4096  # ticket t's byte is _SLOTS + t
_SEEN = 1024  # tickets looked at when counting waiters (a message's figures, not a rule)


def _lock_path(path: pathlib.Path) -> pathlib.Path:
    # Here, not at module level: tempfile (with shutil, random, bz2, lzma) was ~4 ms of the
    # first cassette block, which takes the lock only when it writes.
    import tempfile

    d = pathlib.Path(tempfile.gettempdir()) / "dejacache-locks"
    d.mkdir(parents=True, exist_ok=True)
    return d / (xxhash.xxh3_64_hexdigest(str(path.resolve()).encode()) + ".lock")


@contextlib.contextmanager
def cassette_lock(path: pathlib.Path, timeout: float | None = None, *,
                  unsaved: str = "nothing was written") -> Iterator[None]:
    """Hold the cassette's lock, waiting at most ``timeout`` seconds (default
    :data:`TIMEOUT_S`) in arrival order; then a ``CassetteError`` says how long it waited,
    who holds it, how many wait, and ``unsaved``: what was not done. Ctrl-C (SIGINT) waits
    while it is held, and is delivered when it has been released: what is done under the
    lock (a temp file renamed, an undo record removed, the lock's own descriptor closed) is
    never left half-done by it. A Ctrl-C while waiting for the lock stops the wait."""
    if timeout is None:
        timeout = TIMEOUT_S
    lp = _lock_path(path)
    try:  # a save only: not with the first block (import time)
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        import filelock

        with filelock.FileLock(str(lp), timeout=timeout):
            held = _Interrupts()
            try:
                yield
            finally:
                held.deliver()
        return
    held = _Interrupts()  # from before the open: no descriptor can be lost to an interrupt
    try:
        turn = _Turn(lp, fcntl)
        try:
            try:
                turn.take(time.monotonic() + timeout, held)
            except _TimedOut as late:
                raise CassetteError(f"waited {timeout:g} s for this cassette's lock; "
                                    f"{late.who}; {unsaved}", path=path) from None
            try:
                yield
            finally:
                turn.release()
        finally:
            turn.close()
    finally:
        held.deliver()


def queued(path: pathlib.Path) -> int:
    """How many processes hold or wait for ``path``'s lock by its queue (0 where there is
    none): tickets taken and not yet released or given up."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        return 0
    fd = os.open(_lock_path(path), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if not _QUEUE:
            return 0
        n = _read_u64(fd, _NEXT)
        return sum(1 for t in range(max(0, n - _SEEN), n) if not _ofd(fcntl, fd, t, probe=True))
    finally:
        os.close(fd)


class _TimedOut(Exception):
    def __init__(self, who: str) -> None:
        super().__init__(who)
        self.who = who


def _read_u64(fd: int, at: int) -> int:
    raw = os.pread(fd, 8, at)
    return int.from_bytes(raw, "little") if len(raw) == 8 else 0


def _ofd(fcntl: ModuleType, fd: int, ticket: int, *, kind: str = "lock", wait: bool = False,
         probe: bool = False) -> bool:
    """Lock (``kind`` "lock"), unlock ("unlock") or test (``probe``: whether it is free) one
    ticket's byte, ticket -1 being the mutex byte; whether it was taken."""
    at = 0 if ticket < 0 else _SLOTS + ticket
    op = fcntl.F_UNLCK if kind == "unlock" else fcntl.F_WRLCK
    arg = struct.pack("hhqqi4x", op, os.SEEK_SET, at, 1, 0)
    if probe:
        got = fcntl.fcntl(fd, fcntl.F_OFD_GETLK, arg)
        return bool(struct.unpack("hhqqi4x", got)[0] == fcntl.F_UNLCK)
    try:
        fcntl.fcntl(fd, fcntl.F_OFD_SETLKW if wait else fcntl.F_OFD_SETLK, arg)
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EACCES):
            return False
        raise
    return True


class _Turn:
    """One ``cassette_lock`` call's turn: its descriptor on the lock file, its ticket in the
    queue (None: no queue here) and, while it waits in a thread, that thread's handle."""

    __slots__ = ("fcntl", "fd", "ticket", "waiter")

    def __init__(self, lp: pathlib.Path, fcntl: ModuleType) -> None:
        self.fcntl = fcntl
        self.ticket: int | None = None
        self.waiter: _Waiter | None = None
        self.fd = os.open(lp, os.O_RDWR | os.O_CREAT, 0o644)

    def take(self, deadline: float, held: _Interrupts) -> None:
        """Hold the lock by ``deadline`` (monotonic) or raise ``_TimedOut``; an exception
        (a Ctrl-C meanwhile) leaves nothing held."""
        try:
            if _QUEUE:
                self.ticket = self._enqueue(deadline, held)
            if not self._try():
                try:
                    self.waiter = _Waiter(self)
                except RuntimeError:  # no new thread (the interpreter is exiting): poll
                    if not self._poll(deadline, held):
                        raise _TimedOut(self._who()) from None
                else:
                    if not self.waiter.wait(deadline, held):
                        raise _TimedOut(self._who())
        except BaseException:
            self._give_up()
            raise
        os.pwrite(self.fd, struct.pack(_HOLDER_FMT, os.getpid(), time.time()), _HOLDER)

    def _enqueue(self, deadline: float, held: _Interrupts) -> int | None:
        """Take the next ticket and hold its byte (None: this system has no such locks)."""
        fcntl, fd = self.fcntl, self.fd
        try:
            while not _ofd(fcntl, fd, -1):  # (held for three calls by another ticket taker)
                if time.monotonic() >= deadline:
                    raise _TimedOut("another process kept the lock's queue busy")
                _nap(held, 0.0005)
        except OSError:  # EINVAL: no open file description locks (Linux before 3.15)
            return None
        try:
            ticket = _read_u64(fd, _NEXT)
            os.pwrite(fd, (ticket + 1).to_bytes(8, "little"), _NEXT)
            _ofd(fcntl, fd, ticket)  # tickets are never given twice: taken at once
        finally:
            _ofd(fcntl, fd, -1, kind="unlock")
        return ticket

    def _try(self) -> bool:
        """Take the lock if the ticket before this one is done and nobody holds it."""
        fcntl, fd, t = self.fcntl, self.fd, self.ticket
        if t:
            if not _ofd(fcntl, fd, t - 1):
                return False
            _ofd(fcntl, fd, t - 1, kind="unlock")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def _poll(self, deadline: float, held: _Interrupts) -> bool:
        """Wait without a thread: in turn still, but each try up to 50 ms late."""
        pause = 0.001
        while not self._try():
            if time.monotonic() >= deadline:
                return False
            _nap(held, pause)
            pause = min(pause * 2, 0.05)
        return True

    def _give_up(self) -> None:
        """Stop waiting: the next ticket goes on; a lock the thread got is released, and a
        thread still waiting is left the descriptor, to release and close when it wakes."""
        if self.ticket is not None:
            _ofd(self.fcntl, self.fd, self.ticket, kind="unlock")
            self.ticket = None
        waiter, self.waiter = self.waiter, None
        if waiter is None:
            return
        if waiter.give_up():
            self.fd = -1  # the thread's now
        elif waiter.got:
            self.fcntl.flock(self.fd, self.fcntl.LOCK_UN)

    def release(self) -> None:
        os.pwrite(self.fd, bytes(struct.calcsize(_HOLDER_FMT)), _HOLDER)
        self.fcntl.flock(self.fd, self.fcntl.LOCK_UN)
        if self.ticket is not None:
            _ofd(self.fcntl, self.fd, self.ticket, kind="unlock")

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)

    def _who(self) -> str:
        """Who holds the lock and how many wait for it, as far as the lock file says."""
        size = struct.calcsize(_HOLDER_FMT)
        pid, since = struct.unpack(_HOLDER_FMT, os.pread(self.fd, size, _HOLDER)
                                           .ljust(size, b"\0"))
        queued = pid == os.getpid() or (bool(pid) and _alive(pid))  # (its turn is a ticket)
        if pid == os.getpid():
            who = "this process holds it (another thread, or a cassette lock taken inside one)"
        elif queued:
            who = f"process {pid} has held it for {time.time() - since:.1f} s"
        else:
            who = ("its holder did not record itself (filelock, or another dejacache version)"
                   if not pid else f"its last recorded holder, process {pid}, has exited")
        if self.ticket is None:
            return who
        ahead, behind = _waiting(self.fcntl, self.fd, self.ticket)
        return (f"{who}; {max(0, ahead - queued)} more waiting ahead of this one, "
                f"{behind} behind it")


def _nap(held: _Interrupts, seconds: float) -> None:
    held.deliver()  # nothing is held while waiting: a Ctrl-C meanwhile stops it here
    try:
        time.sleep(seconds)
    finally:
        held.hold()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # (another user's: alive)
        return True
    return True


def _waiting(fcntl: ModuleType, fd: int, ticket: int) -> tuple[int, int]:
    """How many tickets before ``ticket`` and after it are held (the holder's among them)."""
    n = _read_u64(fd, _NEXT)
    held = [t for t in range(max(0, ticket - _SEEN), n)
            if t != ticket and not _ofd(fcntl, fd, t, probe=True)]
    return sum(1 for t in held if t < ticket), sum(1 for t in held if t > ticket)


class _Waiter:
    """A helper thread blocked for a ``_Turn``: the caller waits for it with a timeout, and
    may give up; then the thread releases whatever it gets, and closes the descriptor."""

    __slots__ = ("done", "error", "fcntl", "fd", "finished", "given_up", "got", "mutex",
                 "ticket")

    def __init__(self, turn: _Turn) -> None:
        # (copies: a caller that gives up forgets its descriptor and ticket)
        self.fcntl, self.fd, self.ticket = turn.fcntl, turn.fd, turn.ticket
        self.mutex = threading.Lock()
        self.done = threading.Event()
        self.finished = self.given_up = self.got = False
        self.error: OSError | None = None
        threading.Thread(target=self._run, name="dejacache-lock-wait", daemon=True).start()

    def _run(self) -> None:
        fcntl, fd, t = self.fcntl, self.fd, self.ticket
        try:
            if t:  # the ticket before this one first: its byte has no other waiter
                _ofd(fcntl, fd, t - 1, wait=True)
                _ofd(fcntl, fd, t - 1, kind="unlock")
            with self.mutex:
                go = not self.given_up
            if go:
                fcntl.flock(fd, fcntl.LOCK_EX)
                self.got = True
        except OSError as exc:
            self.error = exc
        with self.mutex:
            self.finished = True
            if not self.given_up:
                self.done.set()
                return
        if self.got:
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)

    def wait(self, deadline: float, held: _Interrupts) -> bool:
        """Whether the thread got the lock by ``deadline``; a Ctrl-C meanwhile stops it."""
        held.deliver()  # nothing is held while waiting
        try:
            self.done.wait(max(0.0, deadline - time.monotonic()))
        finally:
            held.hold()
        with self.mutex:
            if not self.finished:
                return False
        if self.error is not None:
            raise self.error
        return self.got

    def give_up(self) -> bool:
        """Whether the thread is still waiting (and now owns the descriptor)."""
        with self.mutex:
            self.given_up = True
            return not self.finished


class _Interrupts:
    """SIGINT held from construction to :meth:`deliver`: one arriving meanwhile is noted,
    then delivered to the handler that was there before (``KeyboardInterrupt``, by default).

    Python runs signal handlers in the main thread only, so no ``KeyboardInterrupt`` lands
    in any other thread, and there nothing is held. A handler not installed from Python is
    left alone. Two ``signal.signal`` calls, a few microseconds, against a save's
    milliseconds."""

    __slots__ = ("caught", "previous")

    def __init__(self) -> None:
        self.caught = False
        self.previous: Any = None
        self.hold()

    def hold(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        import signal

        previous = signal.getsignal(signal.SIGINT)
        if previous is None:
            return
        try:
            signal.signal(signal.SIGINT, self._note)
        except ValueError:  # not the main interpreter
            return
        self.previous = previous

    def _note(self, signum: int, frame: object) -> None:
        self.caught = True

    def deliver(self) -> None:
        """End the hold; a SIGINT that arrived meanwhile is delivered now."""
        previous = self.previous
        if previous is None:
            return
        import signal

        self.previous = None
        signal.signal(signal.SIGINT, previous)
        if self.caught:
            self.caught = False
            signal.raise_signal(signal.SIGINT)
