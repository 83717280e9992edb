"""Carry the submitter's context into ``ThreadPoolExecutor`` tasks while a block is open.

``loop.run_in_executor`` and ``executor.submit`` run the task in a worker thread with an empty
context, so a call made there cannot tell which cassette or scope it belongs to. With one block
open the scope falls back to routing it there; with several (two ``scenario.run`` calls in
``asyncio.gather``, each in its own cassette and its own executor) it must refuse. Carrying
the context the task was submitted from, as ``asyncio.to_thread`` does, attributes every task
exactly. The patch is on the public ``submit`` method, installed only while at least one
test-facing block is open (a counter fed by ``scope.BLOCK_HOOKS``), and each task carries the
context of its own submitter, so a shared executor never mixes two blocks' calls.

A block does not import ``concurrent.futures.thread`` itself: when nobody has, an import hook
patches the class the moment it is loaded inside a block (importing it and ``queue`` was 1-2 ms
of a cold cassette open). An executor cannot exist before its module is loaded, so
no task escapes the carry.
"""

from __future__ import annotations

import contextvars
import sys
import threading

from ._importhook import spec_with_callback

TYPE_CHECKING = False  # typing is not loaded at interpreter start; mypy reads this as True
if TYPE_CHECKING:
    from typing import Any

__all__ = ["on_block", "patched"]

_MODULE = "concurrent.futures.thread"  # where ThreadPoolExecutor is defined
_LOCK = threading.Lock()
_DEPTH = 0
_ORIGINAL: Any = None  # ThreadPoolExecutor.submit before the patch (set when first seen)


def _submit(self: Any, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
    return _ORIGINAL(self, contextvars.copy_context().run, fn, *args, **kwargs)


def _executor_class() -> type | None:
    """``ThreadPoolExecutor`` if its module is loaded (never loads it)."""
    mod = sys.modules.get(_MODULE)
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
    if delta > 0 and _MODULE in sys.modules:
        # Another thread may still be importing it: wait until it is whole (outside _LOCK,
        # which that import's hook takes when it finishes).
        from importlib import import_module

        import_module(_MODULE)
    with _LOCK:
        _DEPTH = max(0, _DEPTH + delta)
        cls = _executor_class()
        if cls is not None:
            _sync(cls)
        elif _DEPTH > 0 and not any(isinstance(f, _PatchOnImport) for f in sys.meta_path):
            sys.meta_path.insert(0, _PatchOnImport())


def patched() -> bool:
    """Whether executor tasks carry their submitter's context now (when the executor's
    module is not loaded yet: whether it will be patched as it loads)."""
    cls = _executor_class()
    if cls is not None:
        return getattr(cls, "submit", None) is _submit
    return _DEPTH > 0 and any(isinstance(f, _PatchOnImport) for f in sys.meta_path)


def _loaded(module: Any) -> None:
    """Patch the class the executor's module just defined (if a block is still open)."""
    cls = getattr(module, "ThreadPoolExecutor", None)
    if isinstance(cls, type):
        with _LOCK:
            _sync(cls)


class _PatchOnImport:
    """Finds nothing itself: wraps the loader of the executor's module when it is imported
    inside a block, and steps aside otherwise."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != _MODULE or not _DEPTH:
            return None
        return spec_with_callback(self, fullname, path, target, _loaded)
