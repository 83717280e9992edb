"""What the runtime decorators accept and what they call it: shared by ``@tool_cache``,
``@invalidates`` and ``@tool``."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from ..errors import ConfigurationError

F = TypeVar("F", bound=Callable[..., Any])


def _unwrapped(fn: Callable[..., Any]) -> Any:
    target: Any = fn
    while isinstance(target, functools.partial):
        target = target.func
    return target


def tool_names(fn: Callable[..., Any], name: str | None) -> tuple[str, str]:
    """(key name, display name): keys use the qualified name so two modules' ``get_cart``
    never share entries; metrics and loop messages use the short one the model knows."""
    target = _unwrapped(fn)
    qual = getattr(target, "__qualname__", type(target).__qualname__)
    module = getattr(target, "__module__", "") or ""
    short = getattr(target, "__name__", type(target).__name__)
    return (name or f"{module}.{qual}"), (name or short)


def resource_name(resource: object, where: str) -> None:
    """Refuse a resource that names nothing: ``tool_cache(resource="")`` read as "not given"
    put the tool under its own name, so an ``@invalidates("")`` (or the resource the user
    meant) never reached its entries."""
    if not isinstance(resource, str) or not resource.strip():
        raise ConfigurationError(f"{where} must be a non-empty string naming what the tool "
                                 f"reads or writes, not {resource!r}")


def probe(fn: Callable[..., Any]) -> Any:
    """What to ask whether ``fn`` is a coroutine or generator function."""
    target = _unwrapped(fn)
    if inspect.isfunction(target) or inspect.ismethod(target):
        return target
    return type(target).__call__


# Where the agent frameworks define their tool classes (top-level package), and what those
# classes are called: enough to recognise one without importing any framework.
_FRAMEWORKS = frozenset({
    "agents", "agno", "autogen_core", "crewai", "crewai_tools", "dspy", "google", "haystack",
    "langchain", "langchain_community", "langchain_core", "langgraph", "llama_index",
    "pydantic_ai", "semantic_kernel", "smolagents", "strands",
})


def _framework_tool(obj: Any) -> type | None:
    """The framework tool class ``obj`` is an instance of, or None."""
    for cls in type(obj).__mro__:
        top = (getattr(cls, "__module__", "") or "").partition(".")[0]
        if top in _FRAMEWORKS and ("Tool" in cls.__name__ or cls.__name__ == "Function"):
            return cls
    return None


def function_only(fn: Any, decorator: str) -> None:
    """Refuse what is not a function: above all a framework's tool object, which is what
    dejacache gets when the two decorators are stacked the wrong way round. The
    wrapper built around it would hide the tool from its framework, or run a callable object
    nobody meant to cache, and neither would say so."""
    cls = _framework_tool(fn)
    if cls is None and callable(fn):
        return
    kind = type(fn)
    label = next((v for v in (getattr(fn, "name", None), getattr(fn, "__name__", None),
                              getattr(getattr(fn, "metadata", None), "name", None))
                  if isinstance(v, str)), None)
    what = f"{kind.__module__}.{kind.__qualname__}" + (f" {label!r}" if label else "")
    if cls is None:
        raise ConfigurationError(f"dejacache.{decorator} decorates functions, not a {what} "
                                 "object")
    base = "" if cls is kind else f" (a {cls.__module__}.{cls.__name__})"
    raise ConfigurationError(
        f"dejacache.{decorator} was given a {what} object{base}: "
        "a framework's tool, not a function. Stack the other way round: dejacache's "
        "decorator on the function, the framework's outermost (written above it, applied "
        f"last), e.g. `@function_tool` / `@tool` over `@dejacache.{decorator}(...)`, or "
        f"`Tool(dejacache.{decorator}(...)(fn))` (docs/recipes/frameworks.md)."
    )
