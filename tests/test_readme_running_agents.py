"""The README's "Running agents" examples run as printed, and print what it says they do."""

from __future__ import annotations

import pathlib
import re

import pytest

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def blocks() -> list[str]:
    text = README.read_text(encoding="utf-8")
    start = text.index("\n## Running agents")
    end = text.index("\n## ", start + 1)
    return re.findall(r"```python\n(.*?)```", text[start:end], re.S)


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
    exec(compile(code, f"README.md running-agents block {index}", "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    for line in expected_output(code):
        assert line in printed


def test_the_section_has_both_examples() -> None:
    assert len(blocks()) == 2
