"""The "Running agents" examples (docs/agents.md, moved there from the README) run as
printed, and print what the page says they do."""

from __future__ import annotations

import pathlib
import re

import pytest

PAGE = pathlib.Path(__file__).resolve().parents[1] / "docs" / "agents.md"


def blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)


def expected_output(code: str) -> list[str]:
    """The comment lines right under a ``print(...)`` line: what it prints."""
    out, after_print = [], False
    for line in code.splitlines():
        if after_print and line.startswith("# "):
            out.append(line[2:])
            continue
        after_print = line.startswith("print(")
    return out


@pytest.mark.parametrize("index", range(2), ids=["agent-pool", "prefix-monitor"])
def test_running_agents_example(index: int, capsys: pytest.CaptureFixture[str]) -> None:
    code = blocks()[index]
    exec(compile(code, f"docs/agents.md block {index}", "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    for line in expected_output(code):
        assert line in printed


def test_the_section_has_both_examples() -> None:
    assert len(blocks()) == 2
