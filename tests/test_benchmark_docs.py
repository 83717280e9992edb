"""Benchmark numbers in the docs are generated, never typed: every ``<!-- bench:NAME -->`` block
in README.md and docs/benchmarks.md must equal what ``benchmarks/render.py`` renders from the
committed JSON results, and every ratio divides by the floor its row names."""

from __future__ import annotations

import importlib.util
import pathlib
import re
import sys
from types import ModuleType
from typing import Any

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def render() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_render", ROOT / "benchmarks" /
                                                  "render.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_render"] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("doc", ["README.md", "docs/benchmarks.md"])
def test_every_block_equals_what_the_committed_results_render(render: ModuleType,
                                                              doc: str) -> None:
    text = (ROOT / doc).read_text(encoding="utf-8")
    assert render.BLOCK.search(text), f"{doc} has no benchmark block"
    expected = render.render_text(text, render.load())
    assert text == expected, (
        f"{doc}: a benchmark block differs from benchmarks/results/*.json; run "
        "`.venv/bin/python benchmarks/render.py` (numbers are never edited by hand)")


def test_the_docs_carry_the_blocks_that_matter(render: ModuleType) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    page = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    assert "<!-- bench:core-hits -->" in readme
    names = set(re.findall(r"<!-- bench:([a-z0-9-]+) -->", page))
    assert names == set(render.BLOCKS), "docs/benchmarks.md should show every block"
    for text in (readme, page):  # every opening marker is closed
        assert text.count("<!-- bench:") == text.count("<!-- /bench -->")


def test_an_unknown_block_is_an_error(render: ModuleType) -> None:
    with pytest.raises(KeyError, match="nope"):
        render.render_text("<!-- bench:nope -->\nx\n<!-- /bench -->", {})


def test_a_hand_edited_number_is_caught(render: ModuleType) -> None:
    R = {"core": _core(memory=6.0, floor=2.0)}
    good = render.render_text("<!-- bench:core-hits -->\n<!-- /bench -->", R)
    assert "(3.0x)" in good
    assert render.render_text(good.replace("(3.0x)", "(2.8x)"), R) == good


def test_ratios_divide_by_the_floor_the_target_names(render: ModuleType) -> None:
    """The 2 KB hit against orjson + xxh3 + dict and the SQLite hit against key + SELECT +
    loads: not against dejacache's own key (which is slower than the floor)."""
    R = {"core": _core(memory=6.0, floor=2.0, sqlite=9.0, sqlite_floor=6.0, own_key=3.0)}
    targets = render.block_targets(R)
    row = next(ln for ln in targets.splitlines() if "in-memory `@cache` hit" in ln)
    assert "3.00x" in row and "**no**" not in row
    row = next(ln for ln in targets.splitlines() if "SQLite hit at 2 KB" in ln)
    assert "1.50x" in row
    row = next(ln for ln in targets.splitlines() if "real `@scenario.cache`" in ln)
    assert "not available" in row


def test_missing_results_say_not_available(render: ModuleType) -> None:
    for name, block in render.BLOCKS.items():
        assert "not available" in block({}), name


def test_claims_that_did_not_reproduce_are_gone() -> None:
    """Figures from an earlier run that divided by the wrong floor or measured a warm process."""
    x = "[x\u00d7]"  # "x" or the multiplication sign
    stale = [rf"2\.8{x} .{{0,40}}met", rf"30{x} faster than joblib", rf"16{x} faster",
             rf"full key costs 2\.7{x}", r"load \+ first hit \| 0\.7 ms"]
    for path in [ROOT / "README.md", ROOT / "CHANGELOG.md", *(ROOT / "docs").rglob("*.md")]:
        text = path.read_text(encoding="utf-8")
        for pat in stale:
            assert not re.search(pat, text, re.S), f"{path.name}: {pat}"


def _core(*, memory: float, floor: float, sqlite: float = 10.0, sqlite_floor: float = 8.0,
          own_key: float = 1.0) -> dict[str, Any]:
    def cell(x: float) -> dict[str, Any]:
        return {"median_us": x, "p99_us": x * 2, "n": 100}

    rows = {"key_floor": "key floor", "full_key": "full key", "hit_key": "hit key",
            "no_volatile_key": "no vol", "mem_floor": "floor dict",
            "sqlite_floor": "floor sqlite", "memory": "deja memory", "sqlite": "deja sqlite",
            "joblib_path": "joblib"}
    sizes = ("2KB", "20KB", "200KB")
    return {
        "name": "core", "quick": False, "date": "2026-01-01 00:00 UTC",
        "rows": rows,
        "workload": {"request_bytes": dict.fromkeys(sizes, 2000), "response_bytes": 1200},
        "hits": {rows["mem_floor"]: {s: cell(floor) for s in sizes},
                 rows["memory"]: {s: cell(memory) for s in sizes},
                 rows["sqlite_floor"]: {s: cell(sqlite_floor) for s in sizes},
                 rows["sqlite"]: {s: cell(sqlite) for s in sizes}},
        "keys": {s: {rows["key_floor"]: cell(floor / 2), rows["full_key"]: cell(own_key)}
                 for s in sizes},
        "skipped": {}, "breakdown": {}, "scenario": {"available": False},
        "concurrency": {}, "conc_seconds": 1.0,
    }


def test_a_helper_benchmark_that_is_not_there_is_recorded_as_not_available(
        render: ModuleType, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = importlib.util.spec_from_file_location("bench_run", ROOT / "benchmarks" / "run.py")
    assert spec is not None and spec.loader is not None
    run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run)
    monkeypatch.setitem(run.FUNCTIONS, "import", ("no_such_bench_module", "bench", {}, {}))
    text = run.run_function("import", tmp_path, quick=True)
    assert "not available" in text and "no_such_bench_module" in text
    doc = render.load(tmp_path)["import"]
    assert doc["available"] is False and doc["quick"] is True


def test_the_flat_block_judges_the_largest_block(render: ModuleType) -> None:
    def cell(face: str, mode: str, n: int, ratio: float) -> dict[str, Any]:
        return {"face": face, "mode": mode, "n": n, "workload": "2KB", "ratio": ratio,
                "first_tenth_us": 100.0, "last_tenth_us": 100.0 * ratio, "exit_ms": 5.0,
                "block_s": 1.5}

    cells = [cell("@cache", m, n, 3.0 if n == 10 else r)
             for n, r in ((10, 1.0), (1000, 1.1)) for m in ("record", "replay")]
    R = {"flat": {"name": "flat", "date": "2026-01-01 00:00 UTC", "goal_ratio": 1.2,
                  "cells": cells}}
    block = render.block_flat(R)
    assert "Goal met at 1,000 calls: yes" in block  # the 10-call block's first call is noise
    row = next(ln for ln in render.block_targets(R).splitlines() if "long cassette" in ln)
    assert "worst 1.10" in row and "| yes |" in row
    cells[-1]["ratio"] = 1.5
    assert "Goal met at 1,000 calls: **no**" in render.block_flat(R)
    # the floor (the live call let through) slowed as much: the provider, not dejacache
    cells[-1].update(last_tenth_us=150.0, floor_first_tenth_us=50.0, floor_last_tenth_us=100.0)
    assert "Goal met at 1,000 calls: yes" in render.block_flat(R)
    assert "50.0 → 50.0" in render.block_flat(R)  # dejacache's own cost, first → last


def _plugin(available: bool, cassette_ms: float, cpu: float = 90.0) -> dict[str, Any]:
    res: dict[str, Any] = {"rounds": 45.0}
    for key in ("plain without", "plain with", "cassette with", "block without",
                "plain cost", "cassette cost", "over block", "block cost"):
        res[f"{key} wall"], res[f"{key} cpu"] = 600.0, cpu
    ins: dict[str, Any] = {"available": False, "why": "valgrind not found"}
    if available:
        rate = 3e6  # instructions per ms
        ins = {"available": True, "rate per ms": rate, "rate runs": 45, "phases": 5,
               "floor cpu ms": 600.0, "plain without": 1.8e9, "plain with": 1.83e9,
               "cassette with": 1.8e9 + cassette_ms * rate, "block without": 1.88e9}
        for cost, diff in (("plain cost", 30e6), ("cassette cost", cassette_ms * rate),
                           ("over block", 10e6), ("block cost", 80e6)):
            ins[f"{cost} M"], ins[f"{cost} ms"] = diff / 1e6, diff / rate
        for cost in ("plain cost", "cassette cost"):  # the collector adds 3M (1 ms) on average
            ins[f"{cost} collector M"], ins[f"{cost} collector ms"] = 3.0, 1.0
            ins[f"{cost} averaged M"] = ins[f"{cost} M"] + 3.0
            ins[f"{cost} averaged ms"] = ins[f"{cost} ms"] + 1.0
    res["instructions"] = ins
    return {"plugin": {"name": "plugin", "date": "2026-01-01 00:00 UTC", "available": True,
                       "result": {"this checkout": res}}}


def test_the_plugin_goals_are_met_when_the_count_and_the_timing_agree(render: ModuleType
                                                                        ) -> None:
    """The count is exact, its rate an average; the timing is direct and noisy: a goal is met
    when both are within it, missed when both are over, and unsettled (not claimed) else.
    Both carry the collector's average share, which only the count can see."""
    def rows(R: dict[str, Any]) -> list[str]:
        return [ln for ln in render.block_targets(R).splitlines() if "pytest plugin" in ln]

    plain, cassette = rows(_plugin(True, 36.0, cpu=15.0))
    assert "+33.0M instructions with the collector on" in plain
    assert "11.0 ms at 3.00M per ms" in plain and "| yes |" in plain
    assert "+600 / +15 ms, + the collector's 1.0 ms = 16.0 ms cpu" in plain
    assert "37.0 ms" in cassette and "| yes |" in cassette
    plain, cassette = rows(_plugin(True, 36.0, cpu=90.0))
    assert "| **unsettled** (not claimed) |" in plain
    assert "| **unsettled** (not claimed) |" in cassette
    assert "| **unsettled** (not claimed) |" in rows(_plugin(True, 36.0, cpu=39.5))[1]
    assert "| **no** |" in rows(_plugin(True, 39.5))[1]  # 40.5 counted, 91 timed
    assert "interval" not in cassette  # results from before the interval was kept
    R = _plugin(True, 36.0, cpu=39.5)
    R["plugin"]["result"]["this checkout"]["cassette cost cpu interval"] = [12.0, 71.0]
    assert "/ +40 ms (the cpu median's 95% interval +12 to +71 ms)" in rows(R)[1]
    plain, cassette = rows(_plugin(False, 0.0))
    assert "instructions not available" in cassette and cassette.endswith("| - |")
    block = render.block_plugin(_plugin(False, 0.0))
    assert "Instructions not counted: valgrind not found." in block
    assert "3.00M instructions per ms" in render.block_plugin(_plugin(True, 36.0))


def test_the_plugin_timing_interval_is_the_sign_tests() -> None:
    """The interval the plugin rows print for a median: order statistics whose binomial
    coverage is at least 95% (the 16th and 30th of 45, the 40th and 61st of 100), and the
    extremes when too few samples reach it."""
    spec = importlib.util.spec_from_file_location("bench_plugin_mod",
                                                  ROOT / "benchmarks" / "bench_plugin.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.median_interval([float(i) for i in range(45, 0, -1)]) == [16.0, 30.0]
    assert mod.median_interval([float(i) for i in range(1, 101)]) == [40.0, 61.0]
    assert mod.median_interval([3.0, 1.0, 2.0]) == [1.0, 3.0]
