"""Public names loaded on first use (PEP 562), for ``dejacache`` and its subpackages.

``import dejacache`` used to import every face (HTTP interception, cassettes,
the runtime, asyncio through the stores) and took 61-65 ms where the goal is 50. A package
now lists where each public name lives; the module holding it is imported the first time the
name is read, and the value is then cached in the package namespace, so later reads are plain
attribute lookups. Type checkers read the ``if TYPE_CHECKING:`` imports beside each table.

:func:`pattern` does the same for a module's regular expressions: compiled when first used.
"""

from __future__ import annotations

import sys
import types

TYPE_CHECKING = False  # typing itself is not loaded at interpreter start; mypy reads this as True
if TYPE_CHECKING:
    import re
    from collections.abc import Callable, Mapping
    from typing import Any, AnyStr

__all__ = ["ON_FIRST_BLOCK", "attach", "pattern", "served"]

#: Run once, in order, before the first test-facing block opens (``scope.enter``): what such a
#: block switches on, registered by the package (``dejacache/__init__.py``) because those
#: faces (HTTP interception) import ``scope`` themselves and ``scope`` cannot import them.
ON_FIRST_BLOCK: list[Callable[[], None]] = []


class _Package(types.ModuleType):
    """A package whose public names may be its own submodules' names.

    The import system binds every submodule it loads on its parent (``dejacache.scope`` the
    module), and a module ``__getattr__`` is only asked for names that are missing. With eager
    imports the package rebound the public name afterwards; with lazy ones a submodule loaded
    later by anybody would hide ``dejacache.scope`` the class for good. So that binding is
    skipped for names the package exports (the submodule stays in ``sys.modules``)."""

    _dejacache_exports: Mapping[str, str] = {}

    def __setattr__(self, name: str, value: Any) -> None:
        if (name in self._dejacache_exports and isinstance(value, types.ModuleType)
                and value.__name__ == f"{self.__name__}.{name}"):
            return
        super().__setattr__(name, value)


def attach(
    package: str, exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: ``exports`` maps a public name to the
    module (relative to ``package``) that defines it. Any other non-dunder name is tried as a
    submodule, as the eager imports used to make ``dejacache.config`` or
    ``dejacache.runtime`` reachable after a bare ``import dejacache``."""
    module = sys.modules[package]
    namespace = module.__dict__
    module.__class__ = _Package
    module._dejacache_exports = exports  # type: ignore[attr-defined]

    def __getattr__(name: str) -> Any:
        # importlib is not loaded at interpreter start; the first lazy name pays for it.
        from importlib import import_module

        where = exports.get(name)
        if where is None:
            if name.startswith("__"):
                raise AttributeError(f"module {package!r} has no attribute {name!r}")
            full = f"{package}.{name}"
            try:
                return import_module(full)
            except ModuleNotFoundError as exc:
                if exc.name != full:
                    raise  # the submodule exists and lacks a dependency: say which
                raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        value = getattr(import_module(where, package), name)
        namespace[name] = value  # bypasses _Package.__setattr__: the public name wins
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *exports, *namespace.get("__all__", ())})

    return __getattr__, __dir__


def served(module: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for names ``module`` keeps in other modules (``exports``: name
    -> absolute module name): imported when first read, then kept in ``module``'s namespace.
    For public records only a rare call builds, whose definition would cost every importer
    (a frozen slotted dataclass: ~0.5-0.8 ms)."""
    namespace = sys.modules[module].__dict__

    def __getattr__(name: str) -> Any:
        where = exports.get(name)
        if where is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        from importlib import import_module

        value = namespace[name] = getattr(import_module(where), name)
        return value

    return __getattr__


class _Pattern:
    """Stands in for ``re.compile(*args)`` until a method or attribute of it is first read;
    each name read is then kept on the instance, so later reads are plain attribute lookups."""

    def __init__(self, *args: object) -> None:
        self._args = args

    def __getattr__(self, name: str) -> Any:
        import re

        value = getattr(re.compile(*self._args), name)  # type: ignore[call-overload]
        self.__dict__[name] = value
        return value

    def __repr__(self) -> str:
        return f"pattern{self._args!r}"


def pattern(regex: AnyStr, flags: int = 0) -> re.Pattern[AnyStr]:
    """``re.compile(regex, flags)`` made when the pattern is first used. A module-level
    compile costs 0.05-0.5 ms at import each (parsing and compiling the expression), which a
    process that never reaches the code using it should not pay. Only the pattern's methods
    and attributes are served: it is not an ``re.Pattern`` to ``isinstance`` or to ``re.sub``."""
    return _Pattern(regex, flags)  # type: ignore[return-value]
