"""dejacache's own modules load without pytest's assertion rewriting, the suite's do not."""

from __future__ import annotations

import importlib.machinery
import sys

import pytest

from dejacache import _pytest_imports
from dejacache._pytest_imports import PlainImports

# A run in a fresh process: which loader each dejacache module came through, and whether the
# suite's own asserts are still rewritten (their failure shows the compared values).
_PROBE = """
import sys
from _pytest.assertion.rewrite import AssertionRewritingHook

import dejacache

@dejacache.cache
def add(a, b):
    return a + b

def test_loaders(dejacache_cassette):
    assert add(1, 2) == 3
    ours = {n: m for n, m in sys.modules.items() if n.startswith("dejacache.")}
    assert "dejacache.cassettes.block" in ours
    rewritten = sorted(n for n, m in ours.items()
                       if isinstance(getattr(m.__spec__, "loader", None), AssertionRewritingHook))
    # (only the finder itself loads through the hook: the package, imported under pytest,
    # installs it before its first import, so the entry point too is loaded plainly)
    assert rewritten == ["dejacache._pytest_imports"], rewritten

def test_the_suite_keeps_rewritten_asserts():
    left, right = [1, 2], [1, 3]
    assert left == right
"""


def test_dejacache_modules_skip_the_rewriting_hook_and_the_suite_keeps_it(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_probe=_PROBE)
    res = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly")
    res.assert_outcomes(passed=1, failed=1)
    # the rewritten assert names the differing item; a plain one would say nothing
    res.stdout.fnmatch_lines(["*At index 1 diff: 2 != 3*"])


def test_the_finder_finds_dejacache_submodules_as_the_path_finder_does() -> None:
    import dejacache.cassettes

    path = list(dejacache.cassettes.__path__)
    spec = PlainImports.find_spec("dejacache.cassettes.block", path)
    plain = importlib.machinery.PathFinder.find_spec("dejacache.cassettes.block", path)
    assert spec is not None and plain is not None
    assert (spec.origin, type(spec.loader)) == (plain.origin, type(plain.loader))
    # anything else, and a top-level name, is left to the other finders
    assert PlainImports.find_spec("json", None) is None
    assert PlainImports.find_spec("dejacachex.mod", path) is None
    assert PlainImports.find_spec("dejacache", None) is None


def test_the_finder_is_installed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    _pytest_imports.install()
    _pytest_imports.install()
    assert sum(isinstance(f, PlainImports) for f in sys.meta_path) == 1
    mine = next(i for i, f in enumerate(sys.meta_path) if isinstance(f, PlainImports))
    hooks = [i for i, f in enumerate(sys.meta_path) if type(f).__name__ == "AssertionRewritingHook"]
    assert all(mine < i for i in hooks)


def test_import_dejacache_outside_pytest_installs_no_finder() -> None:
    import subprocess

    code = ("import sys, dejacache; "
            "print(any(type(f).__name__ == 'PlainImports' for f in sys.meta_path), "
            "'dejacache._pytest_imports' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.split() == ["False", "False"]
