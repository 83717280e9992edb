"""What the runtime decorators accept: functions, not objects, and never a framework's tool.

Stacked the wrong way round (``@dejacache.tool_cache`` above ``@function_tool``), dejacache
would be handed the framework's tool object; that is refused with the order that works. The
real frameworks' tool classes are checked in tests/integrations/frameworks (fw_cases.py).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

import pytest

import dejacache

DECORATORS: dict[str, Callable[[Any], Any]] = {
    "tool_cache": dejacache.tool_cache(resource="weather", scope="global"),
    "invalidates": dejacache.invalidates("weather"),
    "tool": dejacache.tool,
}


def _stand_in(module: str, name: str, *, callable_: bool = True) -> Any:
    """An instance of a class that says it lives in ``module`` (nothing is imported)."""
    body: dict[str, Any] = {"__module__": module, "name": "get_weather"}
    if callable_:
        body["__call__"] = lambda self, city: f"sunny in {city}"
    return type(name, (), body)()


@pytest.mark.parametrize("deco", sorted(DECORATORS))
def test_a_plain_object_is_refused_naming_it(deco: str) -> None:
    class Settings:
        pass

    with pytest.raises(dejacache.ConfigurationError) as err:
        DECORATORS[deco](Settings())
    msg = str(err.value)
    assert f"dejacache.{deco} decorates functions" in msg
    assert "Settings" in msg and __name__ in msg


@pytest.mark.parametrize("deco", sorted(DECORATORS))
@pytest.mark.parametrize(("module", "cls"), [
    ("agents.tool", "FunctionTool"),
    ("langchain_core.tools.structured", "StructuredTool"),
    ("crewai.tools.base_tool", "Tool"),
    ("smolagents.tools", "SimpleTool"),
    ("llama_index.core.tools.function_tool", "FunctionTool"),
    ("dspy.adapters.types.tool", "Tool"),
    ("agno.tools.function", "Function"),
    ("pydantic_ai.tools", "Tool"),
])
def test_a_framework_tool_is_refused_with_the_order_that_works(deco: str, module: str,
                                                               cls: str) -> None:
    before = set(sys.modules)
    obj = _stand_in(module, cls, callable_=cls != "FunctionTool")
    with pytest.raises(dejacache.ConfigurationError) as err:
        DECORATORS[deco](obj)
    msg = str(err.value)
    assert f"{module}.{cls} 'get_weather'" in msg
    assert "a framework's tool, not a function" in msg
    assert f"over `@dejacache.{deco}(...)`" in msg
    assert "docs/recipes/frameworks.md" in msg
    assert not {module.partition(".")[0]} & (set(sys.modules) - before)  # nothing imported


def test_a_subclass_of_a_framework_tool_is_refused_too() -> None:
    base = type(_stand_in("crewai.tools.base_tool", "BaseTool"))
    mine = type("WeatherTool", (base,), {"__module__": __name__})()
    with pytest.raises(dejacache.ConfigurationError, match=r"crewai\.tools\.base_tool\.BaseTool"):
        dejacache.tool_cache(mine)


@pytest.mark.parametrize("deco", sorted(DECORATORS))
def test_functions_partials_and_callable_objects_still_work(deco: str) -> None:
    def weather(city: str, unit: str) -> str:
        return f"sunny in {city} ({unit})"

    class Weather:
        def __call__(self, city: str) -> str:
            return f"sunny in {city}"

    assert DECORATORS[deco](weather)("Paris", "C") == "sunny in Paris (C)"
    assert DECORATORS[deco](functools.partial(weather, unit="F"))("Oslo") == "sunny in Oslo (F)"
    assert DECORATORS[deco](Weather())("Rome") == "sunny in Rome"
    # A tool class of some other library with "Tool" in its name is no framework's tool.
    other = _stand_in("mylib.tools", "WeatherTool")
    assert DECORATORS[deco](other)("Lima") == "sunny in Lima"


def test_an_ignored_name_that_is_no_parameter_is_refused_naming_the_one_meant() -> None:
    # A misspelt ignore= would keep the argument in the key without a word (every call a
    # miss), as @cache refuses it.
    def get_cart(user_id: int, verbose: bool = False) -> dict[str, int]:
        return {"user_id": user_id}

    with pytest.raises(dejacache.ConfigurationError,
                       match=r"tool_cache\(.*get_cart\) names 'verbos', which is not one of "
                             r"its parameters \(user_id, verbose\); did you mean 'verbose'\?"):
        dejacache.tool_cache(resource="cart", ignore=["verbos"])(get_cart)
    # a string was read as its letters (none a parameter): the argument stayed in the key
    with pytest.raises(dejacache.ConfigurationError,
                       match=r"not the string 'verbose' \(write ignore=\['verbose'\]\)"):
        dejacache.tool_cache(resource="cart", ignore="verbose")
    cached = dejacache.tool_cache(resource="cart", scope="global", ignore=["verbose"])(get_cart)
    assert cached(7) == cached(7, verbose=True) == {"user_id": 7}
    assert dejacache.runtime_stats().by_tool["get_cart"].hits >= 1


@pytest.mark.parametrize("resource", ["", "  ", 3, b"cart"])
def test_a_resource_that_names_nothing_is_refused_naming_the_argument(resource: Any) -> None:
    """``resource=""`` was read as "not given": the tool cached under its own name, which
    no ``@invalidates`` of the resource meant reached."""
    with pytest.raises(dejacache.ConfigurationError, match="tool_cache resource= must be a "
                                                           "non-empty string"):
        dejacache.tool_cache(resource=resource)
    with pytest.raises(dejacache.ConfigurationError, match=r"invalidates\(\) resource must "
                                                           "be a non-empty string"):
        dejacache.invalidates(resource)
