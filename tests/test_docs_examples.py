"""Every Python example in README.md and docs/ runs.

Each ```python block is one test, run as printed against the loopback provider of
tests/http/fake_provider.py: the SDKs find it through ``OPENAI_BASE_URL`` /
``ANTHROPIC_BASE_URL`` (and a dummy key), the way a reader's own environment would point
them at the real API. A block that defines ``test_*`` functions is a pytest example: it runs
in an inner pytest session twice, first recording (the local default) and then as CI does, with
``CI=true`` and no API key, where every call must replay. A block that imports an optional
package this venv does not have (langwatch-scenario, the agent frameworks) is skipped with the
make target that runs that package's tests.
"""

from __future__ import annotations

import os
import pathlib
import re
from typing import Any

import anthropic  # noqa: F401  (loaded before the inner sessions: they share the modules)
import openai  # noqa: F401
import pytest

from loopback_provider import loopback

__all__ = ["loopback"]

ROOT = pathlib.Path(__file__).resolve().parents[1]
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
# Packages whose examples run in their own venvs (make target in the skip reason).
ELSEWHERE = {"scenario": "make test-scenario", "agents": "make test-frameworks",
             "pydantic_ai": "make test-frameworks", "langgraph": "make test-frameworks",
             "langchain": "make test-frameworks", "langchain_openai": "make test-frameworks",
             "smolagents": "make test-frameworks", "agno": "make test-frameworks",
             "dspy": "make test-frameworks", "crewai": "make test-frameworks",
             "llama_index": "make test-frameworks", "litellm": "make test-gen2",
             "run_agent": "make test-hermes"}


def _examples() -> list[Any]:
    out = []
    for path in FILES:
        text = path.read_text(encoding="utf-8")
        for m in BLOCK.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            name = f"{path.relative_to(ROOT)}:{line}"
            out.append(pytest.param(m.group(1), id=name))
    return out


EXAMPLES = _examples()


@pytest.fixture
def reader_env(loopback: Any, tmp_path: pathlib.Path,
               monkeypatch: pytest.MonkeyPatch) -> Any:
    """A reader's shell, with the providers on loopback and a scratch project directory."""
    monkeypatch.setenv("OPENAI_BASE_URL", loopback.openai_url)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", loopback.url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-docs-example-not-a-real-key")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-docs-example-not-a-real-key")
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    return loopback


def _skip_if_elsewhere(exc: ModuleNotFoundError) -> None:
    top = (exc.name or "").partition(".")[0]
    if top in ELSEWHERE:
        pytest.skip(f"needs {top}, which runs in its own venv: {ELSEWHERE[top]}")


@pytest.mark.parametrize("code", EXAMPLES)
def test_example_runs(code: str, reader_env: Any, pytester: pytest.Pytester,
                      monkeypatch: pytest.MonkeyPatch) -> None:
    if re.search(r"^(async )?def test_", code, re.M):
        _run_pytest_example(code, reader_env, pytester, monkeypatch)
        return
    try:
        exec(compile(code, "<example>", "exec"), {"__name__": "__example__"})
    except ModuleNotFoundError as exc:
        _skip_if_elsewhere(exc)
        raise


_QUIET = ("-p", "no:xdist", "-p", "no:hypothesispytest", "-p", "no:anyio", "-p", "no:asyncio",
          "-p", "no:timeout",
          "-p", "no:randomly")


def _run_pytest_example(code: str, fake: Any, pytester: pytest.Pytester,
                        monkeypatch: pytest.MonkeyPatch) -> None:
    if re.search(r"^\s*import scenario\b", code, re.M):
        try:
            import scenario  # noqa: F401
        except ModuleNotFoundError as exc:
            _skip_if_elsewhere(exc)
    pytester.makepyfile(test_example=code)
    for var in ("CI", "DEJACACHE_MODE"):
        monkeypatch.delenv(var, raising=False)
    first = pytester.runpytest(*_QUIET)   # on a developer's machine: records
    assert first.ret == 0, first.stdout.str()
    assert first.parseoutcomes().get("passed", 0) > 0
    live = fake.count()
    monkeypatch.setenv("CI", "true")       # in CI: replays, and needs no key
    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    second = pytester.runpytest(*_QUIET)
    assert second.ret == 0, second.stdout.str()
    assert fake.count() == live, "the CI run reached the provider"
    assert os.environ.get("CI") == "true"


def test_every_page_has_been_collected() -> None:
    assert any(str(p).endswith("getting-started.md") for p in FILES)
    assert len(EXAMPLES) >= 10
