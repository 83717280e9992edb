"""The cassette block's exit: what an interrupted block (Ctrl-C, ``SystemExit``) writes, what
an ``async with`` block cancelled while its file opens or saves leaves behind, and which tape
each exit takes when one block object is entered by calls that run at once."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import os
import pathlib
import re
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

import dejacache
from dejacache.cassettes import block
from dejacache.cassettes.writer import Writer

LIVE: list[str] = []


@dejacache.cache(name="tool", kind="tool")
def tool(q: str) -> str:
    LIVE.append(q)
    return f"answer {q}"


@dejacache.cache(name="llm", kind="llm")
def llm(request: dict[str, str]) -> str:
    LIVE.append(str(request))
    return f"model says {request}"


@pytest.fixture(autouse=True)
def _fresh_live() -> Iterator[None]:
    yield
    LIVE.clear()


@pytest.mark.parametrize("interruption", [KeyboardInterrupt, SystemExit])
@pytest.mark.parametrize("mode", ["auto", "record"])
def test_an_interrupted_block_writes_nothing_even_with_record_on_error(
    tmp_path: pathlib.Path, told: list[tuple[pathlib.Path, str]],
    caplog: pytest.LogCaptureFixture, interruption: type[BaseException], mode: str,
) -> None:
    # record_on_error keeps what a failing run did, to replay its failure. An interrupted
    # run did not fail: it stopped, and its prefix replays as a miss where it was cut.
    path = tmp_path / "c.json"
    with dejacache.cassette(path):
        tool("kept")
    before = path.read_bytes()
    with pytest.raises(interruption), dejacache.cassette(path, mode, record_on_error=True):
        tool("kept")
        tool("one")
        tool("two")
        raise interruption()
    assert path.read_bytes() == before
    n = 3 if mode == "record" else 2  # (re-recording records every call)
    note = f"recording discarded ({interruption.__name__}): {n} calls not written to {path}"
    assert told == [(path, note)]
    assert [r.getMessage() for r in caplog.records if r.name == "dejacache.cassettes"] == [
        f"dejacache: {note}; an interrupted block writes nothing"]


def test_an_interrupted_new_cassette_is_not_created(
    tmp_path: pathlib.Path, told: list[tuple[pathlib.Path, str]],
) -> None:
    path = tmp_path / "new.json"
    with pytest.raises(KeyboardInterrupt), dejacache.cassette(path, record_on_error=True):
        tool("one")
        raise KeyboardInterrupt
    assert not path.exists()
    assert told == [(path, f"recording discarded (KeyboardInterrupt): 1 call not written "
                           f"to {path}")]


def test_a_block_ended_by_an_error_names_what_it_did_not_write(
    tmp_path: pathlib.Path, told: list[tuple[pathlib.Path, str]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Told to the summary, not logged: the error itself is the caller's news."""
    path = tmp_path / "c.json"
    with pytest.raises(ValueError), dejacache.cassette(path):
        tool("one")
        raise ValueError
    assert not path.exists()
    assert told == [(path, f"recording discarded (ValueError): 1 call not written to {path}")]
    assert not [r for r in caplog.records if r.name == "dejacache.cassettes"]


def test_an_interrupted_block_that_recorded_nothing_says_nothing(
    tmp_path: pathlib.Path, told: list[tuple[pathlib.Path, str]],
) -> None:
    path = tmp_path / "c.json"
    with dejacache.cassette(path):
        tool("kept")
    with pytest.raises(KeyboardInterrupt), dejacache.cassette(path):
        tool("kept")  # replayed: nothing of the run is lost
        raise KeyboardInterrupt
    assert told == []


def test_a_failing_block_still_writes_with_record_on_error(
    tmp_path: pathlib.Path, told: list[tuple[pathlib.Path, str]],
) -> None:
    path = tmp_path / "c.json"
    with pytest.raises(RuntimeError), dejacache.cassette(path, record_on_error=True):
        tool("kept")
        raise RuntimeError("the agent failed")
    assert b'"kept"' in path.read_bytes()
    assert told == []


def test_an_interrupted_partial_block_writes_no_live_file(
    tmp_path: pathlib.Path, told: list[tuple[pathlib.Path, str]],
) -> None:
    path = tmp_path / "agent.json"
    with dejacache.cassette(path):
        tool("search")
    live_path = tmp_path / "agent.live.json"
    with pytest.raises(KeyboardInterrupt), dejacache.cassette(path, live=["tool"]):
        tool("search")  # goes live: recorded for the live file
        raise KeyboardInterrupt
    assert not live_path.exists()
    assert told == [(live_path, f"recording discarded (KeyboardInterrupt): 1 call not "
                                f"written to {live_path}")]


def test_an_interrupted_block_raises_its_interruption_not_a_volatile_warning(
    tmp_path: pathlib.Path, told: list[tuple[pathlib.Path, str]],
) -> None:
    # Under -W error (this suite's setting) the warning about a volatile path that never
    # matched was raised from the exit in place of the KeyboardInterrupt: pytest then
    # reported a failing test and carried on instead of stopping the session.
    path = tmp_path / "c.json"
    with pytest.raises(KeyboardInterrupt), dejacache.cassette(
            path, volatile=["request.nonexistent_root.x"]):
        llm({"q": "refund?"})
        raise KeyboardInterrupt
    assert not path.exists()
    # (a block that completes still names the path)
    with pytest.raises(dejacache.DejacacheWarning, match=re.escape("nonexistent_root")), \
            dejacache.cassette(path, volatile=["request.nonexistent_root.x"]):
        llm({"q": "refund?"})


def test_an_interrupted_block_is_logged_for_scripts(
    tmp_path: pathlib.Path, told: list[tuple[pathlib.Path, str]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Outside pytest nobody prints a summary: the warning goes to logging (shown on stderr
    # by Python's last-resort handler when the application configured none).
    path = tmp_path / "c.json"
    with caplog.at_level(logging.WARNING, logger="dejacache.cassettes"), \
            pytest.raises(KeyboardInterrupt), dejacache.cassette(path):
        tool("one")
        raise KeyboardInterrupt
    assert any("not written to" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("name", ["plan.yaml", "plan.YML"])
def test_a_yaml_cassette_path_is_refused_naming_the_json_one(tmp_path: pathlib.Path,
                                                             name: str) -> None:
    """A .yaml path was written as JSON without a word: every tool then took it for vcrpy's."""
    with pytest.raises(dejacache.ConfigurationError,
                       match=r"dejacache cassettes are JSON; name it plan\.json .*dejacache "
                             r"import"):
        dejacache.cassette(tmp_path / name)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["prune", "strict", "shared", "record_on_error"])
@pytest.mark.parametrize("value", ["no", "false", 0, 1, None])
def test_a_true_or_false_argument_takes_only_a_bool(tmp_path: pathlib.Path, name: str,
                                                    value: object) -> None:
    """``prune="no"`` was true: a replay block deleted the entries it did not use, and
    ``strict="false"`` turned strict order on. Each flag is checked where it is written."""
    path = tmp_path / "c.json"
    with pytest.raises(dejacache.ConfigurationError,
                       match=rf"cassette .*c\.json: {name} must be True or False"):
        dejacache.cassette(path, **{name: value})  # type: ignore[arg-type]


def test_a_replay_block_with_a_refused_prune_keeps_every_entry(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "c.json"
    with dejacache.cassette(path, mode="record"):
        tool("a")
        tool("b")
    before = path.read_bytes()
    with pytest.raises(dejacache.ConfigurationError):
        dejacache.cassette(path, mode="replay", prune="no")  # type: ignore[arg-type]
    assert path.read_bytes() == before


# ---------------------------------------------------------------- calls that could not be recorded


class _Opaque:
    """A result no codec but pickle can hold."""


_KEY = "sk-proj-" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8s9T0uvwx"


def test_a_call_that_could_not_be_recorded_fails_the_block_after_saving_the_rest(
    tmp_path: pathlib.Path,
) -> None:
    """A warning alone let a recording run pass without the call (its replay then missed,
    or in auto mode it went live every run); through the proxy nothing was shown at all."""

    @dejacache.cache(name="block-opaque-result")
    def opaque() -> _Opaque:
        return _Opaque()

    path = tmp_path / "c.json"
    got = []
    lost = (r"1 call this block ran could not be recorded \(the caller got its result; "
            r".*block-opaque-result: .*_Opaque")
    with pytest.warns(dejacache.DejacacheWarning, match="not stored"), \
            pytest.raises(dejacache.CassetteError, match=lost), \
            dejacache.cassette(path, mode="record"):
        assert tool("saved") == "answer saved"
        got.append(opaque())
    assert isinstance(got[0], _Opaque)  # the result the caller paid for reached it
    LIVE.clear()
    with dejacache.cassette(path, mode="replay"):  # the rest was saved
        assert tool("saved") == "answer saved"
    assert LIVE == []


def test_a_write_that_failed_fails_the_block_naming_the_call_and_the_count(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from dejacache.cassettes import store as cassette_store

    put = cassette_store.Cassette.put

    def failing(self: cassette_store.Cassette, key: str, record: object, **kw: object) -> object:
        if getattr(record, "name", "") == "llm":
            raise OSError(f"disk full, sent with {_KEY}")
        return put(self, key, record, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(cassette_store.Cassette, "put", failing)
    path = tmp_path / "c.json"
    with pytest.warns(dejacache.DejacacheWarning, match="results are not being stored"), \
            pytest.raises(dejacache.CassetteError) as lost, \
            dejacache.cassette(path, mode="auto"):
        for n in range(5):
            assert llm({"q": str(n)}) == f"model says {{'q': '{n}'}}"
        assert tool("kept") == "answer kept"
    text = str(lost.value)
    assert text.startswith("5 calls this block ran could not be recorded (the caller got "
                           "their results; the file holds the rest): llm: OSError(")
    assert text.count("llm: OSError") == 3 and "; and 2 more" in text and str(path) in text
    assert _KEY not in text  # (a secret-shaped string in the reason is masked)
    monkeypatch.setattr(cassette_store.Cassette, "put", put)
    LIVE.clear()
    with dejacache.cassette(path, mode="replay"):
        assert tool("kept") == "answer kept"
    assert LIVE == []


def test_the_blocks_own_error_is_not_replaced_by_the_calls_it_could_not_record(
    tmp_path: pathlib.Path,
) -> None:
    @dejacache.cache(name="block-opaque-then-error")
    def opaque() -> _Opaque:
        return _Opaque()

    with pytest.warns(dejacache.DejacacheWarning, match="not stored"), \
            pytest.raises(ValueError, match="the test's own"), \
            dejacache.cassette(tmp_path / "c.json", mode="record"):
        opaque()
        raise ValueError("the test's own")


def test_an_error_the_block_opted_to_record_but_could_not_fails_the_block(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``record_errors=``: the call's own error reaches the caller; a failure to keep it was
    swallowed, and the test that expected the error passed without its recording."""
    from dejacache.cassettes import store as cassette_store

    def failing(*args: object, **kwargs: object) -> bool:
        raise OSError("disk full")

    monkeypatch.setattr(cassette_store.Cassette, "record_error", failing)

    @dejacache.cache(name="block-refused")
    def refused(q: str) -> str:
        raise ValueError(f"no {q}")

    def expected_error() -> None:  # (the test expects it: it catches it)
        with pytest.raises(ValueError, match="no q"):
            refused("q")

    with pytest.raises(dejacache.CassetteError, match=r"1 call .* block-refused: OSError"), \
            dejacache.cassette(tmp_path / "c.json", mode="record", record_errors=[ValueError]):
        expected_error()


_ON_A_LOOP = """
import asyncio, json
from blockbuster import BlockBuster
import dejacache

@dejacache.cache(name="ask")
async def ask(q):
    return q.upper()

async def main():
    got = []
    async with dejacache.cassette("c.json") as tape:  # a fresh process's first block
        got.append(await ask("a"))
    got.append(tape.ageing.max_age)  # the project file, read off the loop
    async with dejacache.cassette("c.json", mode="replay") as tape:
        got.append(await ask("a"))
    got.append(tape.counters.replayed)
    # (A plain ``with`` on the loop is the caller's choice of I/O there: without the plugin,
    # which counts directory changes, it also asks for the working directory there.)
    return got

watch = BlockBuster(scanned_modules=["dejacache"])
for name in ("threading.Lock.acquire", "threading.Lock.acquire_lock"):  # see tests/http
    del watch.functions[name]
watch.activate()
try:
    print(json.dumps(asyncio.run(main())))
finally:
    watch.deactivate()
"""


def test_blocks_opened_on_an_event_loop_without_the_plugin_do_no_blocking_io(
        tmp_path: pathlib.Path) -> None:
    # No pytest plugin fixing the project for a session: ``async with`` looked for the
    # project file (os.getcwd, a stat per directory) on the loop, and read and wrote the
    # cassette there too; blockbuster failed every one.
    (tmp_path / "pyproject.toml").write_text('[tool.dejacache]\nmax_age = "30d"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEJACACHE_")}
    out = subprocess.run([sys.executable, "-c", _ON_A_LOOP], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == ["A", 30 * 86400, "A", 1]
    assert (tmp_path / "c.json").is_file()


# ---------------------------------------------------------------- cancelled while in a worker


class _Gate:
    """Holds a block's worker thread at one point until the test lets it go, so the
    cancellation lands while the file is being opened or written, every run."""

    def __init__(self) -> None:
        self.reached = threading.Event()
        self.go = threading.Event()
        self.left = threading.Event()  # the worker went on

    def hold(self) -> None:
        self.reached.set()
        self.go.wait(30)
        self.left.set()


def _held(path: pathlib.Path) -> int:
    """This process's descriptors open on ``path`` (a memory-mapped cassette holds one)."""
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # (the listing's own descriptor is gone)
            n += os.readlink(f"/proc/self/fd/{fd}") == str(path)
    return n


def _wrapped(blk: dejacache.cassette, form: str, body: Callable[[], object]
             ) -> Callable[[], Awaitable[None]]:
    """``body`` in ``blk`` entered by ``async with``, or by decorating a coroutine function."""
    if form == "with":
        async def run() -> None:
            async with blk:
                body()

        return run

    @blk
    async def decorated() -> None:
        body()

    return decorated


def _run_threads_joined(main: Callable[[], Awaitable[Any]]) -> Any:
    """``asyncio.run(main())``, checking it left no thread behind (it joins its workers)."""
    before = set(threading.enumerate())
    out = asyncio.run(main())  # type: ignore[arg-type]
    assert set(threading.enumerate()) <= before
    return out


_PROC = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads /proc/self/fd")


def _large(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "large.json"
    with dejacache.cassette(path, blobs=False):
        tool("x" * (1 << 20))  # a file of over 1 MiB is read through a memory map
    return path


@_PROC
@pytest.mark.parametrize("form", ["with", "decorator"])
@pytest.mark.parametrize("how", ["cancel", "wait_for"])
def test_a_block_cancelled_while_its_file_opens_leaves_it_closed(
        tmp_path: pathlib.Path, form: str, how: str) -> None:
    """The tape opened by the worker thread was left to the garbage collector (held by the
    pytest plugin's record of blocks until the next test): a large file's memory map kept
    its descriptor open."""
    path = _large(tmp_path)
    gate = _Gate()
    entered: list[bool] = []
    run = _wrapped(dejacache.cassette(path, mode="replay"), form, lambda: entered.append(True))

    async def main() -> bool:
        if how == "wait_for":  # (the worker is held: the timeout always comes first)
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(run(), timeout=0.01)
        else:
            task = asyncio.ensure_future(run())
            await asyncio.to_thread(gate.reached.wait, 30)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        prompt = not gate.left.is_set()  # the caller did not wait for the open
        gate.go.set()
        return prompt

    def opened(blk: dejacache.cassette, tape: object) -> None:  # in the worker, before the read
        gate.hold()

    block.OPENED.append(opened)
    try:
        assert _run_threads_joined(main)
    finally:
        gate.go.set()
        block.OPENED.remove(opened)
    assert gate.left.is_set() and entered == []
    assert _held(path) == 0


@_PROC
@pytest.mark.parametrize("form", ["sync", "with"])
def test_a_block_whose_file_fails_its_check_on_open_leaves_it_closed(
        tmp_path: pathlib.Path, form: str) -> None:
    path = _large(tmp_path)
    raw = path.read_bytes()
    at = raw.index(b"x" * 64)
    raw = raw[:at] + b"y" + raw[at + 1:]  # an answer damaged,
    raw = raw.replace(b'"xref_at": [\n    ', b'"xref_at": [\n    9', 1)  # and the index
    path.write_bytes(raw)
    damaged = "does not match its hash"
    if form == "sync":
        with pytest.raises(dejacache.CassetteError, match=damaged), \
                dejacache.cassette(path, mode="replay"):
            pass
    else:
        async def main() -> None:
            with pytest.raises(dejacache.CassetteError, match=damaged):
                async with dejacache.cassette(path, mode="replay"):
                    pass

        _run_threads_joined(main)
    # (the error's frames hold the bytes they read while it lives: here, no longer)
    assert _held(path) == 0


@pytest.mark.parametrize("form", ["with", "decorator"])
def test_a_block_cancelled_while_its_file_is_written_finishes_the_save(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, form: str) -> None:
    """The caller was told of the cancellation while the worker was still writing: a test
    reading the file then found the recording it had paid for missing."""
    path = tmp_path / "c.json"
    gate = _Gate()
    write = Writer.write

    def held(self: Writer, prune: bool) -> bool:
        gate.hold()
        return write(self, prune)

    monkeypatch.setattr(Writer, "write", held)
    run = _wrapped(dejacache.cassette(path), form, lambda: tool("paid for"))
    written: list[bool] = []

    async def caller() -> None:
        try:
            await run()
        except asyncio.CancelledError:  # what the file holds when the caller hears of it
            written.append(b"answer paid for" in path.read_bytes())
            raise

    async def main() -> bool:
        task = asyncio.ensure_future(caller())
        await asyncio.to_thread(gate.reached.wait, 30)
        waited = True
        for _ in range(2):  # (asyncio.run's teardown cancels again: waited out too)
            task.cancel()
            for _ in range(20):  # the loop's turns a cancellation takes to reach the caller
                await asyncio.sleep(0)
            waited = waited and not task.done()
        gate.go.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        return waited

    try:
        assert _run_threads_joined(main)
    finally:
        gate.go.set()
    assert written == [True]
    monkeypatch.undo()
    LIVE.clear()
    with dejacache.cassette(path, mode="replay"):
        assert tool("paid for") == "answer paid for"
    assert LIVE == []


def test_a_block_cancelled_before_a_worker_took_its_save_still_saves(
        tmp_path: pathlib.Path) -> None:
    """With every worker busy the save waited in the executor's queue, and the cancellation
    took it out of the queue: the file was never written, and nothing said so."""
    path = tmp_path / "c.json"
    busy = _Gate()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(concurrent.futures.ThreadPoolExecutor(max_workers=1))
        leaving = asyncio.Event()

        async def run() -> None:
            async with dejacache.cassette(path):
                tool("paid for")
                occupied.append(loop.run_in_executor(None, busy.hold))  # the one worker
                leaving.set()

        occupied: list[asyncio.Future[None]] = []
        task = asyncio.ensure_future(run())
        await leaving.wait()  # (the task ran on to its save, queued behind the worker)
        task.cancel()
        for _ in range(20):  # the loop's turns a cancellation takes to reach the queue
            await asyncio.sleep(0)
        busy.go.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        await occupied[0]

    try:
        _run_threads_joined(main)
    finally:
        busy.go.set()
    assert b"answer paid for" in path.read_bytes()


def test_a_save_that_fails_after_its_block_was_cancelled_raises_its_error(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
        told: list[tuple[pathlib.Path, str]]) -> None:
    """A cancellation does not hide a recording lost: the save's own error is raised."""
    path = tmp_path / "c.json"
    gate = _Gate()

    def failing(self: Writer, prune: bool) -> bool:
        gate.hold()
        raise dejacache.CassetteError("the disk is full", path=path)

    monkeypatch.setattr(Writer, "write", failing)
    run = _wrapped(dejacache.cassette(path), "with", lambda: tool("paid for"))

    async def main() -> None:
        task = asyncio.ensure_future(run())
        await asyncio.to_thread(gate.reached.wait, 30)
        task.cancel()
        gate.go.set()
        with pytest.raises(dejacache.CassetteError, match="the disk is full"):
            await task

    try:
        _run_threads_joined(main)
    finally:
        gate.go.set()
    assert told == [(path, f"recording discarded (the save failed): 1 call not written to "
                           f"{path}")]
    assert not path.exists()


# ---------------------------------------------------------------- one block object, many calls


def _recorded(path: pathlib.Path) -> list[str]:
    return sorted(e["request"]["q"] for e in json.loads(path.read_text())["entries"])


@pytest.mark.parametrize("mode", ["auto", "replay"])
async def test_calls_of_one_decorated_coroutine_run_at_once_each_keep_their_own_tape(
        tmp_path: pathlib.Path, mode: str) -> None:
    # The first call to leave the block leaves while the other one, which entered after it,
    # still records: its exit must save its own tape, not the one still in use.
    path = tmp_path / "c.json"
    blk = dejacache.cassette(path)
    if mode == "replay":
        await _interleaved(blk)
        LIVE.clear()
        blk = dejacache.cassette(path, "replay")
    await _interleaved(blk)
    assert _recorded(path) == ["a1", "a2", "b1", "b2"]
    assert sorted(LIVE) == ([] if mode == "replay" else ["a1", "a2", "b1", "b2"])


async def _interleaved(blk: dejacache.cassette) -> None:
    """Call A enters, call B enters, A leaves, then B records again and leaves."""
    a_in, b_in, a_out = asyncio.Event(), asyncio.Event(), asyncio.Event()

    @blk
    async def run(name: str, entered: asyncio.Event, other: asyncio.Event,
                  after: asyncio.Event | None = None) -> None:
        entered.set()
        await other.wait()
        tool(f"{name}1")
        if after is not None:
            await after.wait()
        tool(f"{name}2")

    async def a() -> None:
        try:
            await run("a", a_in, b_in)
        finally:
            a_out.set()

    async def b() -> None:
        await a_in.wait()  # entered after A
        await run("b", b_in, a_in, a_out)

    await asyncio.wait_for(asyncio.gather(a(), b()), 30)


def test_calls_of_one_decorated_function_in_two_threads_each_keep_their_own_tape(
        tmp_path: pathlib.Path) -> None:
    from dejacache.scope import CURRENT

    path = tmp_path / "c.json"
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()

    @dejacache.cassette(path)
    def run(name: str, entered: threading.Event, other: threading.Event,
            after: threading.Event | None = None) -> None:
        entered.set()
        assert other.wait(30)
        tool(f"{name}1")
        if after is not None:
            assert after.wait(30)
        tool(f"{name}2")

    def a() -> object:
        try:
            with dejacache.scope(cache_key="calls"):
                outer = CURRENT.get()
                run("a", a_in, b_in)
                return CURRENT.get() is outer
        finally:
            a_out.set()

    def b() -> object:
        assert a_in.wait(30)
        with dejacache.scope(cache_key="calls"):
            outer = CURRENT.get()
            run("b", b_in, a_in, a_out)
            return CURRENT.get() is outer  # the thread's own scope, not none

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        calls = [pool.submit(a), pool.submit(b)]
        assert [c.result(60) for c in calls] == [True, True]
    assert _recorded(path) == ["a1", "a2", "b1", "b2"]


def test_one_cassette_entered_again_inside_itself_pairs_each_exit_with_its_entry(
        tmp_path: pathlib.Path) -> None:
    from dejacache.scope import CURRENT

    path = tmp_path / "c.json"
    blk = dejacache.cassette(path)
    with blk as outer:
        tool("outer1")
        here = CURRENT.get()
        with blk as inner:
            assert inner is not outer
            tool("inner")
        assert CURRENT.get() is here and blk.last is inner
        tool("outer2")
    assert CURRENT.get() is None
    assert _recorded(path) == ["inner", "outer1", "outer2"]
