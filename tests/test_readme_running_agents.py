"""The "Running agents" examples (docs/agents.md, moved there from the README) run as
printed, and print what the page says they do."""

from __future__ import annotations

import pathlib
import re
from typing import Any

import pytest

from loopback_provider import loopback

__all__ = ["loopback"]

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
        after_print = line.lstrip().startswith("print(")
    return out


@pytest.mark.parametrize("index", range(2), ids=["agent-pool", "prefix-monitor"])
def test_running_agents_example(index: int, capsys: pytest.CaptureFixture[str]) -> None:
    code = blocks()[index]
    exec(compile(code, f"docs/agents.md block {index}", "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    for line in expected_output(code):
        assert line in printed


def test_the_monitor_watching_the_sdk(loopback: Any, tmp_path: pathlib.Path,
                                      monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    """The third example, as a new user runs it: the SDK pointed at the provider, a project
    directory, no dejacache settings. It prints the break, and keeps no file."""
    monkeypatch.setenv("OPENAI_BASE_URL", loopback.openai_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-docs-example-not-a-real-key")
    monkeypatch.delenv("DEJACACHE_DIR")
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text("[project]\nname = 'agent'\n")
    monkeypatch.chdir(project)
    code = blocks()[2]
    exec(compile(code, "docs/agents.md block 2", "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    assert expected_output(code) and all(line in printed for line in expected_output(code))
    assert loopback.count() == 2  # both requests reached the provider
    assert sorted(p.name for p in project.iterdir()) == ["pyproject.toml"]


def test_the_planner_prices_each_fix_as_printed(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The fourth example: a monitor's trace planned; the page shows what it prints."""
    monkeypatch.chdir(tmp_path)
    code = blocks()[3]
    exec(compile(code, "docs/agents.md block 3", "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    assert expected_output(code) == printed
    assert (tmp_path / "agent-trace.jsonl").read_bytes().count(b"\n") == 5  # head, 4 turns


def test_the_fixes_applied_at_runtime(loopback: Any, tmp_path: pathlib.Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The fifth example: the request reaches the provider with a routing key."""
    from dejacache._core.cache_fixes import routing_key

    monkeypatch.setenv("OPENAI_BASE_URL", loopback.openai_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-docs-example-not-a-real-key")
    monkeypatch.chdir(tmp_path)
    exec(compile(blocks()[4], "docs/agents.md block 4", "exec"), {})
    (request,) = loopback.requests
    assert request["body"]["prompt_cache_key"] == routing_key("telegram:42")


def test_the_section_has_every_example() -> None:
    assert len(blocks()) == 5
