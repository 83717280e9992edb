"""The bounds on one imported file: the expanded document and the inflated bodies."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

import dejacache
from dejacache.cassettes.importers import import_file
from dejacache.cassettes.importers._limits import (
    EXPANSION_FLOOR,
    EXPANSION_RATIO,
    INFLATE_CAP,
    INFLATE_FLOOR,
    INFLATE_RATIO,
    MAX_DEPTH,
    InflateBudget,
    OverBudget,
    check_expansion,
)

PATH = pathlib.Path("recording.yaml")


def _children(value: Any) -> list[Any] | None:
    return value if isinstance(value, list) else None


def _weight(value: Any) -> int:
    return 1 + len(value) if isinstance(value, str) else 1


def _check(root: Any, size: int = 0) -> None:
    check_expansion(root, _children, _weight, size, PATH)


def test_a_shared_node_counts_each_time_it_is_reached() -> None:
    leaf = "x" * 99  # 100 units
    level: Any = [leaf] * 10  # 1,001
    for _ in range(4):
        level = [level] * 10  # 10,011,111 after four levels
    with pytest.raises(dejacache.CassetteError, match="aliases expand") as info:
        _check(level)
    assert info.value.path == str(PATH)
    _check([level[0]])  # a tenth of it (1,001,112) fits under the floor
    assert EXPANSION_FLOOR > 1_001_112


def test_the_limit_grows_with_the_file() -> None:
    big: Any = ["x" * 999] * (EXPANSION_FLOOR // 1000 + 1)
    with pytest.raises(dejacache.CassetteError):
        _check(big)
    _check(big, size=EXPANSION_FLOOR // EXPANSION_RATIO + 1000)


def test_a_node_that_contains_itself_is_refused() -> None:
    loop: list[Any] = []
    loop.append([loop])
    with pytest.raises(dejacache.CassetteError, match="refers to itself"):
        _check([1, loop])
    shared: list[Any] = [1]
    _check([shared, shared, [shared]])  # shared, not recursive


def test_nesting_is_measured_without_recursion() -> None:
    deep: Any = "x"
    for _ in range(MAX_DEPTH - 1):
        deep = [deep]
    _check(deep)
    for _ in range(10_000):  # far past Python's recursion limit
        deep = [deep]
    with pytest.raises(dejacache.CassetteError, match=f"nested deeper than {MAX_DEPTH}"):
        _check(deep)


@pytest.mark.parametrize("doc", [
    {"version": 1, "steps": [{"name": "f", "arguments": {"args": [[[]]]}, "result": 1}]},
    {"interactions": [{"request": {"headers": {"a": [[]]}}}]},
])
def test_a_deep_json_recording_is_refused_not_a_recursion_error(
    doc: dict[str, Any], tmp_path: pathlib.Path
) -> None:
    deep = json.dumps(doc).replace("[[]]", "[" * 1000 + "]" * 1000)
    src = tmp_path / "deep.json"
    src.write_text(deep)
    with pytest.raises(dejacache.CassetteError, match="nested deeper than"):
        import_file(src, tmp_path / "out.json")


def test_the_inflate_budget_is_a_multiple_of_the_file_between_a_floor_and_a_cap() -> None:
    assert InflateBudget(0).limit == INFLATE_FLOOR
    assert InflateBudget(INFLATE_FLOOR).limit == INFLATE_CAP
    mid = INFLATE_FLOOR // INFLATE_RATIO * 2
    assert InflateBudget(mid).limit == INFLATE_RATIO * mid
    budget = InflateBudget(0)
    budget.take(INFLATE_FLOOR)
    with pytest.raises(OverBudget, match="inflate past"):
        budget.take(1)


def test_the_cli_page_states_the_bounds_the_code_enforces() -> None:
    page = (pathlib.Path(__file__).parents[3] / "docs" / "cli.md").read_text()
    text = " ".join(page.split())
    for phrase in (f"past {EXPANSION_RATIO} times its size",
                   f"at least {EXPANSION_FLOOR >> 20} Mi nodes",
                   f"deeper than {MAX_DEPTH} levels",
                   f"inflate past {INFLATE_RATIO} times its size",
                   f"at least {INFLATE_FLOOR >> 20} MiB, at most {INFLATE_CAP >> 20} MiB"):
        assert phrase in text
