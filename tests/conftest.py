"""Shared fixtures: every test runs with fresh dejacache settings and its own cache dir."""

from __future__ import annotations

import pathlib
import time
from collections.abc import Iterator
from typing import Any

import pytest

import dejacache
from dejacache import config

pytest_plugins = ["pytester", "support_redis", "support_redis_topologies"]

try:
    from hypothesis import settings
except ImportError:  # the SDK-generation venvs run no property test
    pass
else:
    # Hypothesis's deadline times each example, and this suite shares two cores between its
    # xdist workers and the servers they start: an alias example took 399 ms under load (85 ms
    # when retried) and failed a correctness test as "flaky". Nothing here is correct or wrong
    # by its speed; the benchmarks measure that.
    settings.register_profile("dejacache", deadline=None)
    settings.load_profile("dejacache")

try:
    # Loaded before any pytester run, so no run's module snapshot drops them: a run that
    # first imported cryptography and hashed with it (an inner test's library) dropped its
    # Python modules on return, but its Rust extension (PyO3: initialised once
    # per process) kept the classes it had looked up; the ws tests' certificate, imported
    # again after, then failed "Algorithm must be a registered hash algorithm" on whichever
    # xdist worker ran such a run first (seen once in a loaded run, by order alone).
    from cryptography import x509  # noqa: F401
    from cryptography.hazmat.primitives import hashes, serialization  # noqa: F401
    from cryptography.hazmat.primitives.asymmetric import ec, rsa  # noqa: F401
except ImportError:  # not in every SDK-generation venv
    pass


def _import_every_module() -> None:
    # pytester's in-process runs drop the modules first imported inside them when they end; a
    # dejacache module imported lazily there would then exist twice, and a later test would
    # patch one copy while the library runs the other. Importing everything up front keeps one.
    import contextlib
    import importlib
    import pkgutil

    for mod in pkgutil.walk_packages(dejacache.__path__, "dejacache."):
        with contextlib.suppress(ImportError):  # an optional dependency this venv lacks
            importlib.import_module(mod.name)


    # The same for the HTTP stacks, which import httpcore and h11 when the first client is
    # built: if that happens inside an in-process inner session, later tests get a second
    # copy of their exception classes and httpx no longer maps h11's errors.
    import asyncio

    for name in ("httpx", "httpx2"):
        try:
            lib = importlib.import_module(name)
        except ImportError:
            continue
        lib.Client().close()
        asyncio.run(lib.AsyncClient().aclose())


_import_every_module()


def _blockbuster_functions() -> list[Any]:
    """blockbuster's record of every function it replaces while active, with the original
    (taken here, at import, when none is active)."""
    try:
        from blockbuster import BlockBuster
    except ImportError:  # the SDK-generation venvs run without it
        return []
    return list(BlockBuster().functions.values())


_BLOCKBUSTER_FUNCTIONS = _blockbuster_functions()


@pytest.fixture
def _no_blockbuster_left_behind() -> Iterator[None]:
    """Fail the test that leaves a blockbuster checker installed, and put the originals back.

    Set up before ``monkeypatch`` (it is ``_isolated_dejacache``'s first argument), so it is
    torn down after monkeypatch's undo. A test under tests/http's blockbuster that
    monkeypatched ``socket.socket.connect`` saved the checker as the value to restore, and
    the undo, running after blockbuster's deactivate, put it back for good: every later test
    in that worker had ``connect`` raise ``BlockingError`` on an event loop, so its Redis
    connects failed (and redis-py, which closes a socket only on OSError, leaked one each).
    """
    yield
    left = [f for f in _BLOCKBUSTER_FUNCTIONS
            if getattr(f.module, f.func_name, None) is not f.original_func]
    for f in left:
        f.activated = True  # so deactivate() restores the original it took at import
        f.deactivate()
    if left:
        pytest.fail(f"{', '.join(f.full_name for f in left)} still patched after the test "
                    "(blockbuster's checker, or a patch made over it): patch those inside "
                    "the test with monkeypatch.context(), which undoes before blockbuster "
                    "stops, and close every block the test opens")


@pytest.fixture(autouse=True)
def _isolated_dejacache(_no_blockbuster_left_behind: None, tmp_path: pathlib.Path,
                        monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No test sees another's configuration, counters or default store."""
    monkeypatch.setenv("DEJACACHE_DIR", str(tmp_path / ".dejacache"))
    # The credential-masking key: fixed, so tests (and their subprocesses) never create one in
    # the developer's ~/.config; tests of the key file unset it themselves.
    monkeypatch.setenv("DEJACACHE_SECRET_KEY", "dejacache-test-suite")
    # CI is cleared too: under CI cassettes default to replay, and tests must not depend on
    # where they run (tests of that rule set it themselves).
    for var in ("DEJACACHE_MODE", "DEJACACHE_CACHE_KEY", "DEJACACHE_VOLATILE", "CI",
                "DEJACACHE_MAX_AGE", "DEJACACHE_ON_EXPIRY", "DEJACACHE_PROJECT",
                "DEJACACHE_LEARN_DIR", "DEJACACHE_RUNTIME_CACHE"):
        monkeypatch.delenv(var, raising=False)
    config.reset()
    dejacache.reset_stats()  # the package re-exports stats() over the module name
    # Writes bump every registered reader's store: not those of earlier tests' tools, whose
    # servers and event loops are gone (their bumps would be retried in the background).
    from dejacache.runtime import _layout

    _layout.reset_readers()
    # New cassette entries are stamped with the time to the second: held still within a
    # test, so two saves it compares byte for byte do not differ by a second boundary.
    from dejacache.cassettes import ageing

    now = time.time()
    monkeypatch.setattr(ageing, "clock", lambda: now)
    yield
    config.reset()


@pytest.fixture
def memory_store() -> dejacache.MemoryStore:
    store = dejacache.MemoryStore()
    dejacache.configure(store=store)
    return store
