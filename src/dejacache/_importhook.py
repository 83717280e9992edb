"""Run a callback right after a module is loaded, found through the other finders.

Two guards must not miss a module imported while a block is open: ``_blockwatch`` (the
SDKs' HTTP stacks, ``mcp``, the thread pool executor: each party is loaded and armed as one
arrives) and the placeholder keys' guard (``cassettes/placeholder_keys.py``). Each installs a
meta-path finder that finds nothing itself: it asks the finders after it for the spec and
wraps the spec's loader so that the callback runs once the module's code has executed. Both
import this module only when such a module is imported, so a block that sees none never
loads it."""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import ModuleType

TYPE_CHECKING = False  # typing is not loaded at interpreter start; mypy reads this as True
if TYPE_CHECKING:
    from typing import Any

__all__ = ["AfterLoader", "spec_with_callback"]


class AfterLoader:
    """Runs the real loader, then ``then(module)``."""

    def __init__(self, inner: Any, then: Callable[[ModuleType], None]) -> None:
        self._inner = inner
        self._then = then

    def create_module(self, spec: Any) -> Any:
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        self._then(module)

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename, ...: the real one's
        return getattr(self._inner, name)


def spec_with_callback(me: object, fullname: str, path: Any, target: Any,
                       then: Callable[[ModuleType], None]) -> Any:
    """The spec the finders after ``me`` give for ``fullname``, its loader wrapped so that
    ``then`` runs after the module is executed; None when nobody finds it."""
    # Only the finders after ``me``: two such finders (interception's, the placeholder keys'
    # guard) asking every other one asked each other without end (RecursionError).
    finders = list(sys.meta_path)
    after = finders[finders.index(me) + 1:] if me in finders else finders
    for finder in after:
        find = getattr(finder, "find_spec", None)
        if finder is me or find is None:
            continue
        spec = find(fullname, path, target)
        if spec is not None:
            if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                spec.loader = AfterLoader(spec.loader, then)
            return spec
    return None
