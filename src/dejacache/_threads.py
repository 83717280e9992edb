"""Carry the submitter's context into ``ThreadPoolExecutor`` tasks while a block is open.

``loop.run_in_executor`` and ``executor.submit`` run the task in a worker thread with an empty
context, so a call made there cannot tell which cassette or scope it belongs to. With one block
open the scope falls back to routing it there; with several (two ``scenario.run`` calls in
``asyncio.gather``, each in its own cassette and its own executor) it must refuse. Carrying
the context the task was submitted from, as ``asyncio.to_thread`` does, attributes every task
exactly. The patch is on the public ``submit`` method, installed only while at least one
test-facing block or lease is open (a counter fed by ``_blockwatch`` and
``runtime/_lease_threads.py``), and each task carries the context of its own submitter, so a
shared executor never mixes two blocks' calls.

A block imports neither ``concurrent.futures.thread`` nor this module: when the executor's
module is loaded inside a block or a lease, ``_blockwatch``'s import hook patches the class
the moment it is defined, loading this module first for a block (importing it and ``queue``
was 1-2 ms of a cold cassette open). An executor cannot exist before its module is loaded,
so no task escapes the carry.
"""

from __future__ import annotations

import contextvars
import sys
import threading

from ._blockwatch import EXECUTOR_MODULE, blocks_open, on_load

TYPE_CHECKING = False  # typing is not loaded at interpreter start; mypy reads this as True
if TYPE_CHECKING:
    from typing import Any

__all__ = ["on_block", "patched"]

_LOCK = threading.Lock()
_DEPTH = 0
_ORIGINAL: Any = None  # ThreadPoolExecutor.submit before the patch (set when first seen)


def _submit(self: Any, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
    return _ORIGINAL(self, contextvars.copy_context().run, fn, *args, **kwargs)


def _executor_class() -> type | None:
    """``ThreadPoolExecutor`` if its module is loaded (never loads it)."""
    mod = sys.modules.get(EXECUTOR_MODULE)
    cls = getattr(mod, "ThreadPoolExecutor", None) if mod is not None else None
    return cls if isinstance(cls, type) else None


def _sync(cls: type) -> None:
    """Install the carrying ``submit`` on ``cls`` while a block is open, remove it when
    none is (holding ``_LOCK``)."""
    global _ORIGINAL
    current = getattr(cls, "submit", None)
    if _ORIGINAL is None and current is not _submit:
        _ORIGINAL = current
    if _DEPTH > 0 and current is not _submit:
        cls.submit = _submit  # type: ignore[attr-defined]
    elif _DEPTH == 0 and current is _submit:
        cls.submit = _ORIGINAL  # type: ignore[attr-defined]


def on_block(delta: int) -> None:
    """Install the carrying ``submit`` with the first open block, remove it with the last."""
    global _DEPTH
    if delta > 0 and EXECUTOR_MODULE in sys.modules:
        # Another thread may still be importing it: wait until it is whole (outside _LOCK,
        # which that import's hook takes when it finishes).
        from importlib import import_module

        import_module(EXECUTOR_MODULE)
    with _LOCK:
        _DEPTH = max(0, _DEPTH + delta)
        cls = _executor_class()
        if cls is not None:
            _sync(cls)


def patched() -> bool:
    """Whether executor tasks carry their submitter's context now (when the executor's
    module is not loaded yet: whether it will be patched as it loads)."""
    cls = _executor_class()
    if cls is not None:
        return getattr(cls, "submit", None) is _submit
    return _DEPTH > 0 or blocks_open() > 0


def _loaded(module: Any) -> None:
    """Patch the class the executor's module just defined (if a block is still open)."""
    cls = getattr(module, "ThreadPoolExecutor", None)
    if isinstance(cls, type):
        with _LOCK:
            _sync(cls)


on_load("threads", lambda: _DEPTH > 0, _loaded)  # the executor imported in a block or a lease
