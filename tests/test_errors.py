"""The one exception tree: shapes, bases and messages with context."""

from __future__ import annotations

import inspect
import pathlib

import pytest

import dejacache
from dejacache import errors


def test_every_error_derives_from_dejacache_error() -> None:
    for name in errors.__all__:
        cls = getattr(errors, name)
        if name == "DejacacheWarning":  # the one warning, kept with the tree
            assert issubclass(cls, UserWarning) and getattr(dejacache, name) is cls
            continue
        assert issubclass(cls, dejacache.DejacacheError), name
        assert getattr(dejacache, name) is cls  # all re-exported


@pytest.mark.parametrize(
    ("cls", "base"),
    [
        (errors.ConfigurationError, ValueError),
        (errors.UnhashableArgument, TypeError),
        (errors.IntegrityError, errors.SerializationError),
        (errors.IncompatibleStore, errors.StoreError),
        (errors.StoreUnavailable, errors.StoreError),
        (errors.ReplayMiss, AssertionError),
        (errors.NetworkBlocked, errors.ReplayMiss),
        (errors.NetworkDisabled, errors.NetworkBlocked),
        (errors.NetworkDisabled, RuntimeError),
    ],
)
def test_hierarchy(cls: type, base: type) -> None:
    assert issubclass(cls, base)


def test_docstring_draws_every_error() -> None:
    doc = inspect.getdoc(errors) or ""
    for name in errors.__all__:
        assert name in doc, name


def test_design_doc_draws_the_same_tree() -> None:
    """docs/design.md draws the tree of the module docstring, line for line, and every
    class in the tree derives from the class it is drawn under."""
    design = (pathlib.Path(__file__).resolve().parents[1] / "docs" / "design.md").read_text()
    start = design.index("```text\nDejacacheError\n") + len("```text\n")
    drawn = design[start:design.index("```", start)].strip().splitlines()
    doc = (inspect.getdoc(errors) or "").splitlines()
    first = doc.index("    DejacacheError")
    tree = [line[4:] for line in doc[first:first + len(drawn)]]
    assert drawn == tree
    parents: list[str] = []
    for line in drawn:
        if not line.strip():
            continue
        name = line.lstrip("│├└─ ").split()[0]
        depth = (len(line) - len(line.lstrip("│├└─ "))) // 4
        parents[depth:] = [name]
        if depth:
            assert issubclass(getattr(errors, name), getattr(errors, parents[depth - 1])), name


def test_messages_carry_context() -> None:
    e1 = errors.UnhashableArgument("client", object, "mod.fn")
    assert e1.argument == "client" and e1.function == "mod.fn"
    assert "'client'" in str(e1) and "builtins.object" in str(e1) and "ignore=" in str(e1)
    e2 = errors.SerializationError("bad", key="abc")
    assert e2.key == "abc" and "abc" in str(e2)
    e3 = errors.StoreError("boom", backend="sqlite:///x", key="k")
    assert str(e3) == "boom; backend: sqlite:///x; key: k"
    e4 = errors.IncompatibleStore(backend="sqlite:///x", found=3, supported=1)
    assert "3" in str(e4) and "1" in str(e4) and (e4.found, e4.supported) == (3, 1)
    e5 = errors.CassetteError("unreadable", path="/tmp/c.yaml")
    assert e5.path == "/tmp/c.yaml" and "/tmp/c.yaml" in str(e5)
    e6 = errors.ReplayMiss("msg", name="f", key="k", source="memory://", diff=["a: 1 -> 2"])
    assert (e6.name, e6.key, e6.source, e6.diff) == ("f", "k", "memory://", ["a: 1 -> 2"])
    e7 = errors.AgentLoopDetected("repeat", "same call 3 times")
    assert e7.pattern == "repeat" and "same call 3 times" in str(e7)


def test_replay_miss_fails_a_plain_assert_style_test() -> None:
    with pytest.raises(AssertionError):
        raise errors.ReplayMiss("no recording")
