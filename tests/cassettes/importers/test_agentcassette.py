"""``dejacache import`` of recordings written by the real agentcassette.

An agent's tools are wrapped with ``agentcassette.intercept`` and recorded with
``agentcassette.record``; the file is imported with the ``@dejacache.cache`` functions that
make the same calls now, and replayed under ``dejacache.cassette(out, mode="replay")`` with the
real functions never running. Steps that cannot be keyed faithfully are skipped and named.
"""

from __future__ import annotations

import asyncio
import dataclasses
import pathlib
from typing import Any

import pytest

agentcassette = pytest.importorskip("agentcassette")

import dejacache  # noqa: E402
from dejacache.cassettes.importers import import_file  # noqa: E402
from dejacache.cli import main  # noqa: E402

CALLS: list[str] = []


def search(query: str, limit: int = 5) -> list[dict[str, Any]]:
    CALLS.append(f"search {query}")
    return [{"title": f"{query} #{i}", "rank": i, "score": 0.5 + i} for i in range(limit)]


async def fetch(url: str, *, timeout: float = 1.0) -> str:
    await asyncio.sleep(0)
    CALLS.append(f"fetch {url}")
    return f"<html>{url} {len(CALLS)}</html>"


def call_model(messages: list[dict[str, str]], api_key: str) -> dict[str, Any]:
    CALLS.append("model")
    return {"role": "assistant", "content": f"answer {len(messages)}"}


@dataclasses.dataclass
class Forecast:
    city: str
    sky: str


def forecast(city: str) -> Forecast:
    CALLS.append(f"forecast {city}")
    return Forecast(city, "sunny")


class Calculator:
    def add(self, a: int, b: int) -> int:
        CALLS.append("add")
        return a + b


# The functions as the agent uses them now: under dejacache.
cached_search = dejacache.cache(search)
cached_fetch = dejacache.cache(fetch)
cached_model = dejacache.cache(call_model)
cached_forecast = dejacache.cache(forecast)


def _run(tools: dict[str, Any]) -> list[Any]:
    """A small agent: the same steps whoever wraps its tools."""
    out = [tools["search"]("weather paris", limit=2),
           tools["search"](query="weather rome"),  # keyword spelling, default limit
           asyncio.run(tools["fetch"]("https://example.invalid/a", timeout=1.0))]
    if "model" in tools:
        out.append(tools["model"]([{"role": "user", "content": "hi"}], api_key="sk-FAKE12345"))
    if "forecast" in tools:
        out.append(tools["forecast"]("Oslo"))
    if "calc" in tools:
        out.append(tools["calc"].add(1, 2))
    return out


def _record(path: pathlib.Path, *, redact: list[str] | None = None) -> list[Any]:
    calc = Calculator()
    calc.add = agentcassette.intercept(calc.add, name="add", kind="tool")  # type: ignore[method-assign]
    tools = {"search": agentcassette.intercept(search, kind="tool"),
             "fetch": agentcassette.intercept(fetch, kind="tool"),
             "model": agentcassette.intercept(call_model, kind="llm"),
             "forecast": agentcassette.intercept(forecast, kind="tool"),
             "calc": calc}
    with agentcassette.record(str(path), redact=redact):
        return _run(tools)


def test_mapped_steps_replay_and_the_rest_are_skipped_with_reasons(
    tmp_path: pathlib.Path,
) -> None:
    src, out = tmp_path / "agent.json", tmp_path / "imported.json"
    live = _record(src, redact=["api_key"])
    assert agentcassette.Cassette.load(src).num_steps == 6

    report = import_file(src, out, functions={
        "search": cached_search, "fetch": cached_fetch, "call_model": cached_model,
        "forecast": cached_forecast,
    })
    assert report.format == "agentcassette"
    assert [c.name for c in report.converted] == [cached_search.cache_name] * 2 + [
        cached_fetch.cache_name]
    why = {s.name: s.reason for s in report.skipped}
    assert "redacted by agentcassette" in why["call_model"]  # its key needs the live api_key
    assert "Forecast" in why["forecast"]  # replay would return a dict, not a Forecast
    assert "no function for it" in why["add"]
    assert report.written and not report.secrets_in_output

    CALLS.clear()
    with dejacache.cassette(out, mode="replay") as tape:
        again = _run({"search": cached_search, "fetch": cached_fetch})
    assert again == live[:3]
    assert CALLS == []  # the real functions never ran
    assert tape.counters.replayed == 3 and not tape.unused
    assert [c.name for c in tape.calls] == [cached_search.cache_name] * 2 + [
        cached_fetch.cache_name]


def test_credential_arguments_are_keyed_as_live_and_never_written(
    tmp_path: pathlib.Path,
) -> None:
    src, out = tmp_path / "agent.json", tmp_path / "imported.json"
    key = "sk-proj-FAKEagentKEY0123456789abcdef"
    messages = [{"role": "user", "content": "hi"}]
    with agentcassette.record(str(src)):  # not redacted: agentcassette wrote the key
        live = agentcassette.intercept(call_model)(messages, api_key=key)
    assert key in src.read_text()
    report = import_file(src, out, functions={"call_model": cached_model})
    assert report.redacted == {"argument api_key": 1}
    assert report.secrets_in_output == []
    assert key not in out.read_text()
    CALLS.clear()
    with dejacache.cassette(out, mode="replay"):
        assert cached_model(messages, key) == live  # positional now, keyword then
        with pytest.raises(dejacache.ReplayMiss):
            cached_model(messages, "sk-proj-ANOTHERkey0123456789abcdef")
    assert CALLS == []


def test_a_method_recorded_with_self_is_skipped(tmp_path: pathlib.Path) -> None:
    src, out = tmp_path / "agent.json", tmp_path / "imported.json"
    tool = agentcassette.intercept(Calculator.add, name="add", kind="tool")
    with agentcassette.record(str(src)):
        tool(Calculator(), 1, 2)
    report = import_file(src, out, functions={"add": dejacache.cache(Calculator.add)})
    assert not report.converted and not report.written and not out.exists()
    assert "args[0] was stored as a __repr__ marker" in report.skipped[0].reason


def test_other_arguments_miss_rather_than_get_a_recorded_answer(tmp_path: pathlib.Path) -> None:
    src, out = tmp_path / "agent.json", tmp_path / "imported.json"
    with agentcassette.record(str(src)):
        agentcassette.intercept(search)("weather paris", limit=2)
    import_file(src, out, functions={"search": cached_search})
    with dejacache.cassette(out, mode="replay"), pytest.raises(dejacache.ReplayMiss):
        cached_search("weather paris", limit=3)


def test_cli_imports_with_module_attribute_functions(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src, out = tmp_path / "agent.json", tmp_path / "imported.json"
    with agentcassette.record(str(src)):
        live = agentcassette.intercept(search)("weather paris", limit=2)
    assert main(["import", str(src), "-o", str(out),
                 "--function", f"search={__name__}:cached_search",
                 "--cache-key", "suite-v2"]) == 0
    text = capsys.readouterr().out
    assert "converted: 1 call(s)" in text and "agentcassette" in text
    CALLS.clear()
    with dejacache.cassette(out, mode="replay", cache_key="suite-v2"):
        assert cached_search("weather paris", limit=2) == live
    assert CALLS == []
    # Without a function nothing maps: exit status 1, and the reason is printed.
    assert main(["import", str(src), "-o", str(tmp_path / "none.json")]) == 1
    assert "--function search=module:attribute" in capsys.readouterr().out


# A step named like a function decorated @dejacache.cache(name=...) needs nothing more.
@dejacache.cache(name="lookup_order")
def lookup_order(order_id: str, *, verbose: bool = False) -> dict[str, Any]:
    CALLS.append(f"order {order_id}")
    return {"id": order_id, "status": "shipped", "verbose": verbose}


def test_a_step_named_like_a_decorated_function_needs_no_function_argument(
    tmp_path: pathlib.Path,
) -> None:
    src, out = tmp_path / "agent.json", tmp_path / "imported.json"
    with agentcassette.record(str(src)):
        live = agentcassette.intercept(lookup_order.__wrapped__, name="lookup_order")(
            "A-17", verbose=True)
    report = import_file(src, out)
    assert [c.name for c in report.converted] == ["lookup_order"]
    CALLS.clear()
    with dejacache.cassette(out, mode="replay"):
        assert lookup_order("A-17", verbose=True) == live  # keyed as the decorator keys it
    assert CALLS == []


def test_several_functions_under_one_name_are_not_guessed(tmp_path: pathlib.Path) -> None:
    src, out = tmp_path / "agent.json", tmp_path / "imported.json"
    with agentcassette.record(str(src)):
        agentcassette.intercept(search, name="twice")("q", limit=1)
    first = dejacache.cache(name="twice")(search)
    second = dejacache.cache(name="twice")(search)
    report = import_file(src, out)
    assert not report.converted
    assert "2 functions are decorated @dejacache.cache(name='twice')" in report.skipped[0].reason
    assert "--function twice=module:attribute" in report.skipped[0].reason
    assert first is not second  # both alive while the import looked


def test_cli_module_imports_the_decorated_functions(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "shop_tools_for_import.py").write_text(
        "import dejacache\n"
        "@dejacache.cache(name='stock')\n"
        "def stock(sku):\n"
        "    raise AssertionError('replayed, never run')\n")
    src, out = tmp_path / "agent.json", tmp_path / "imported.json"
    with agentcassette.record(str(src)):
        agentcassette.intercept(lambda sku: {"sku": sku, "n": 3}, name="stock")("X1")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.path", list(__import__("sys").path))
    assert main(["import", str(src), "-o", str(out), "--module", "shop_tools_for_import"]) == 0
    assert "converted: 1 call(s)" in capsys.readouterr().out
    import shop_tools_for_import  # type: ignore[import-not-found]

    with dejacache.cassette(out, mode="replay"):
        assert shop_tools_for_import.stock("X1") == {"sku": "X1", "n": 3}
    assert main(["import", str(src), "-o", str(tmp_path / "n.json"), "--module", "no_such_mod"]
                ) == 1
    assert "--module 'no_such_mod': cannot import it" in capsys.readouterr().err
