"""The shape of the package, read from the source with ``ast`` (nothing is imported).

Three rules:

* **No import cycle** between dejacache's modules. Every import counts wherever it stands,
  at the top of a module or inside a function: a function-level import only defers the load,
  the two modules still need each other, and each such cycle is a rule that lives in the
  wrong layer. ``importlib.import_module`` with a literal dejacache name counts the same.
  Imports under ``if TYPE_CHECKING:`` do not count: they are never run and name types only.
* **No private name crosses a module boundary**: ``from ._engine import lookup`` is fine (a
  private module, a public name), ``from .scope import _current`` is not, and neither is
  reading ``scope._current`` through an imported module. A name two modules share is part of
  the package's internal API and is named like it. Dunder names (``__version__``) are public.
* **Sizes that fit in a head**: no function (method, closure, ``async def``) over
  ``MAX_FUNCTION_LINES`` lines, no class over ``MAX_CLASS_LINES``, in any module, measured
  from the ``def``/``class`` line to the last line of the body (``end_lineno - lineno + 1``;
  decorators not counted). One over the limit is split along the seams its own comments
  name; a hot path that must stay flat says why in a line and still fits.

Packages: ``from pkg import name`` depends on the module that defines ``name``: the submodule
when ``name`` is one, the module the package's ``__init__`` re-exports it from (followed
through its imports, the ``TYPE_CHECKING`` ones that document a lazy table included), or the
``__init__`` itself for what it defines (``__version__``, ``store_from_url``). The re-export
lines of an ``__init__`` (module-level imports of names in its ``__all__``) add no edge of
their own: a package is a facade over its members, and counting them would put every
module that reaches a sibling's name through its package in a cycle with that package,
whatever the real dependencies are. Everything else an ``__init__`` imports counts like any
other module's imports.
"""

from __future__ import annotations

import ast
import functools
import pathlib
from collections.abc import Iterator
from dataclasses import dataclass

SRC = pathlib.Path(__file__).resolve().parents[1] / "src"
PACKAGE = "dejacache"

# Cycle edges allowed while a fix is pending, each naming the edge and what clears it (none
# today; a stale entry fails its own test).
PENDING_EDGES: dict[tuple[str, str], str] = {}

# Private names taken across modules while a fix is pending: (module, name) -> what clears it.
PENDING_PRIVATE: dict[tuple[str, str], str] = {}

MAX_FUNCTION_LINES = 120
MAX_CLASS_LINES = 500
# Functions and classes allowed over the limits, each with a one-line reason: (module,
# qualified name as ``__qualname__`` spells it) -> why (none today; a stale entry fails its
# own test).
OVERSIZED: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Module:
    name: str
    path: pathlib.Path
    is_package: bool
    tree: ast.Module

    @property
    def package(self) -> str:
        return self.name if self.is_package else self.name.rpartition(".")[0]


@dataclass(frozen=True)
class Import:
    """One name a module takes from another dejacache module."""

    source: str  # the importing module
    target: str  # the module named in the statement
    name: str | None  # the imported name (None: the module itself)
    line: int
    type_only: bool  # under ``if TYPE_CHECKING:``
    top_level: bool  # at module level, not inside a function or class body


def _modules() -> dict[str, Module]:
    out = {}
    for path in sorted((SRC / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        name = ".".join(parts)
        out[name] = Module(name, path, is_package, ast.parse(path.read_text(), str(path)))
    return out


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return ((isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
            or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _absolute(module: Module, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.package.split(".")
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _literal_import_module(module: Module, node: ast.Call) -> str | None:
    """The module an ``importlib.import_module("…")`` call with literal arguments loads."""
    func = node.func
    called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    if called != "import_module" or not node.args:
        return None
    arg = node.args[0]
    if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
        return None
    name: str = arg.value
    if name.startswith("."):
        level = len(name) - len(name.lstrip("."))
        base = module.package.split(".")
        base = base[: len(base) - (level - 1)]
        rest = name.lstrip(".")
        name = ".".join([*base, rest] if rest else base)
    return name


def _imports(module: Module) -> Iterator[Import]:
    def visit(node: ast.AST, type_only: bool, top_level: bool) -> Iterator[Import]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for stmt in child.body:
                    yield from visit_one(stmt, True, top_level)
                for stmt in child.orelse:
                    yield from visit_one(stmt, type_only, top_level)
            else:
                yield from visit_one(child, type_only, top_level)

    def visit_one(node: ast.AST, type_only: bool, top_level: bool) -> Iterator[Import]:
        if isinstance(node, ast.ImportFrom):
            target = _absolute(module, node)
            for alias in node.names:
                yield Import(module.name, target, alias.name, node.lineno, type_only, top_level)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(module.name, alias.name, None, node.lineno, type_only, top_level)
        elif isinstance(node, ast.Call):
            loaded = _literal_import_module(module, node)
            if loaded is not None:
                yield Import(module.name, loaded, None, node.lineno, type_only, False)
        nested = top_level and not isinstance(
            node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef)
        yield from visit(node, type_only, nested)

    for imp in visit(module.tree, False, True):
        if imp.target == PACKAGE or imp.target.startswith(PACKAGE + "."):
            yield imp


def _exported(module: Module) -> set[str]:
    for node in module.tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id == "__all__"
                and isinstance(node.value, ast.List | ast.Tuple)):
            return {e.value for e in node.value.elts
                    if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    return set()


class Graph:
    def __init__(self) -> None:
        self.modules = _modules()
        self.imports = {name: list(_imports(m)) for name, m in self.modules.items()}
        self.exports = {name: _exported(m) for name, m in self.modules.items() if m.is_package}

    def defining_module(self, target: str, name: str | None, seen: frozenset[str] = frozenset(),
                        ) -> str | None:
        """The dejacache module ``from target import name`` depends on."""
        if name is not None and f"{target}.{name}" in self.modules:
            return f"{target}.{name}"
        if target not in self.modules:
            return None
        if name is None or not self.modules[target].is_package or target in seen:
            return target
        for imp in self.imports[target]:
            if imp.top_level and imp.name == name and imp.target in self.modules:
                return self.defining_module(imp.target, name, seen | {target}) or target
        return target

    def is_reexport(self, imp: Import) -> bool:
        module = self.modules[imp.source]
        return (module.is_package and imp.top_level and imp.name is not None
                and imp.name in self.exports[imp.source])

    def edges(self) -> dict[tuple[str, str], list[int]]:
        """(importer, imported) -> the lines that import it; runtime imports only."""
        out: dict[tuple[str, str], list[int]] = {}
        for source, imports in self.imports.items():
            for imp in imports:
                if imp.type_only or self.is_reexport(imp):
                    continue
                target = self.defining_module(imp.target, imp.name)
                if target is not None and target != source:
                    out.setdefault((source, target), []).append(imp.line)
        return out

    def private_imports(self) -> Iterator[tuple[str, str, str, int]]:
        """(importer, module, private name, line) for every private name taken across."""
        for source, imports in self.imports.items():
            for imp in imports:
                name = imp.name
                if (name is not None and _is_private(name)
                        and f"{imp.target}.{name}" not in self.modules):
                    yield source, imp.target, name, imp.line
        yield from self._private_attributes()

    def _private_attributes(self) -> Iterator[tuple[str, str, str, int]]:
        """``module._name`` read through a name bound to another dejacache module."""
        for source, module in self.modules.items():
            bound: dict[str, str] = {}
            for imp in self.imports[source]:
                if imp.name is None:
                    bound.setdefault(imp.target.partition(".")[0], PACKAGE)
                elif f"{imp.target}.{imp.name}" in self.modules:
                    bound[imp.name] = f"{imp.target}.{imp.name}"
            for alias_node in ast.walk(module.tree):
                if isinstance(alias_node, ast.ImportFrom | ast.Import):
                    for alias in alias_node.names:
                        if alias.asname and alias.name.rpartition(".")[2] in bound:
                            bound[alias.asname] = bound[alias.name.rpartition(".")[2]]
            for node in ast.walk(module.tree):
                if not (isinstance(node, ast.Attribute) and _is_private(node.attr)):
                    continue
                target = self._module_of(node.value, bound)
                if target is not None and target != source and (
                        f"{target}.{node.attr}" not in self.modules):
                    yield source, target, node.attr, node.lineno

    def _module_of(self, node: ast.expr, bound: dict[str, str]) -> str | None:
        if isinstance(node, ast.Name):
            return bound.get(node.id)
        if isinstance(node, ast.Attribute):
            parent = self._module_of(node.value, bound)
            if parent is not None and f"{parent}.{node.attr}" in self.modules:
                return f"{parent}.{node.attr}"
        return None


@dataclass(frozen=True)
class Sized:
    """One function or class and how many lines it spans."""

    module: str
    qualname: str
    kind: str  # "function" or "class"
    line: int
    lines: int

    @property
    def limit(self) -> int:
        return MAX_CLASS_LINES if self.kind == "class" else MAX_FUNCTION_LINES


def _sized(module: Module) -> Iterator[Sized]:
    """Every function and class of ``module``, nested ones included, by qualified name."""
    def visit(node: ast.AST, prefix: str) -> Iterator[Sized]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                qualname = prefix + child.name
                kind = "class" if isinstance(child, ast.ClassDef) else "function"
                end = child.end_lineno or child.lineno
                yield Sized(module.name, qualname, kind, child.lineno, end - child.lineno + 1)
                yield from visit(child, qualname + ("." if kind == "class" else ".<locals>."))
            else:
                yield from visit(child, prefix)

    yield from visit(module.tree, "")


@functools.cache
def _oversized() -> tuple[Sized, ...]:
    return tuple(s for m in _graph().modules.values() for s in _sized(m) if s.lines > s.limit)


@functools.cache
def _graph() -> Graph:
    return Graph()


@functools.cache
def _private() -> tuple[tuple[str, str, str, int], ...]:
    return tuple(_graph().private_imports())


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _cycles(edges: dict[tuple[str, str], list[int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    graph: dict[str, list[str]] = {}
    for a, b in sorted(edges):
        graph.setdefault(a, []).append(b)
        graph.setdefault(b, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(graph[child])))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def _describe(component: list[str], edges: dict[tuple[str, str], list[int]]) -> str:
    members = set(component)
    lines = [f"cycle among {', '.join(component)}:"]
    for (a, b), at in sorted(edges.items()):
        if a in members and b in members:
            lines.append(f"  {a} -> {b} (line {', '.join(map(str, sorted(set(at))))})")
    return "\n".join(lines)


def test_no_import_cycle() -> None:
    graph = _graph()
    edges = {e: at for e, at in graph.edges().items() if e not in PENDING_EDGES}
    cycles = _cycles(edges)
    assert not cycles, "\n".join(_describe(c, edges) for c in cycles)


def test_no_private_name_imported_across_modules() -> None:
    found = sorted({f"{src}:{line}: {name} from {target}"
                    for src, target, name, line in _private()
                    if (target, name) not in PENDING_PRIVATE})
    assert not found, "\n".join(found)


def test_no_function_or_class_over_the_size_limits() -> None:
    found = [f"{s.module}:{s.line}: {s.kind} {s.qualname} is {s.lines} lines (limit "
             f"{s.limit})" for s in _oversized() if (s.module, s.qualname) not in OVERSIZED]
    assert not found, "\n".join(found)


def test_pending_entries_are_still_needed() -> None:
    """An allowlist entry that no longer matches anything is removed with its fix."""
    graph = _graph()
    edges = graph.edges()
    assert [e for e in PENDING_EDGES if e not in edges] == []
    private = {(target, name) for _, target, name, _ in _private()}
    assert [p for p in PENDING_PRIVATE if p not in private] == []
    oversized = {(s.module, s.qualname) for s in _oversized()}
    assert [o for o in OVERSIZED if o not in oversized] == []
    assert all(why.strip() and "\n" not in why for why in OVERSIZED.values())


def test_the_checks_see_what_they_must() -> None:
    """The reader finds function-level imports, skips ``TYPE_CHECKING`` ones and follows a
    package's re-exports, on a module written for the purpose."""
    graph = _graph()
    assert graph.defining_module("dejacache", "cache") == "dejacache.decorators"
    assert graph.defining_module("dejacache.stores", "Record") == "dejacache.stores._base"
    assert graph.defining_module("dejacache", "__version__") == "dejacache"
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from .b import B\n"
        "def f():\n    from .c import _hidden\n    from . import d\n    return d._x\n")
    module = Module("dejacache.a", pathlib.Path("a.py"), False, tree)
    imports = list(_imports(module))
    assert [(i.target, i.name, i.type_only, i.top_level) for i in imports] == [
        ("dejacache.b", "B", True, True),
        ("dejacache.c", "_hidden", False, False),
        ("dejacache", "d", False, False),
    ]
    assert _cycles({("a", "b"): [1], ("b", "c"): [2], ("c", "a"): [3], ("c", "d"): [4]}) == [
        ["a", "b", "c"]]


def test_the_size_check_measures_what_it_must() -> None:
    """Methods, closures, ``async def`` and nested classes are measured, from the ``def``
    line (decorators not counted) to the body's last line, under their qualified names."""
    body = "\n".join(f"        x = {i}" for i in range(MAX_FUNCTION_LINES - 1))
    tree = ast.parse(
        "import functools\n"
        "class Outer:\n"
        "    class Inner:\n"
        "        pass\n"
        "    @functools.cache\n"
        "    def method(self):\n"
        f"{body}\n"
        "async def coro():\n"
        "    def inner():\n"
        "        return 1\n"
        "    return inner\n")
    module = Module("dejacache.a", pathlib.Path("a.py"), False, tree)
    sizes = {s.qualname: (s.kind, s.line, s.lines) for s in _sized(module)}
    assert sizes == {
        "Outer": ("class", 2, 5 + MAX_FUNCTION_LINES - 1),
        "Outer.Inner": ("class", 3, 2),
        "Outer.method": ("function", 6, MAX_FUNCTION_LINES),  # at the limit: allowed
        "coro": ("function", 6 + MAX_FUNCTION_LINES, 4),
        "coro.<locals>.inner": ("function", 7 + MAX_FUNCTION_LINES, 2),
    }
    assert [s.lines > s.limit for s in _sized(module)] == [False] * 5


def test_no_two_test_modules_share_a_name() -> None:
    """pytest imports a test file under its bare name (the test folders are not packages), so
    two files of one name fail to collect when they land in one worker: under
    ``--dist loadfile`` that depends on the schedule (two ``test_limits.py`` failed a CI run,
    two ``test_vcr_match.py`` had never met)."""
    tests = pathlib.Path(__file__).resolve().parent
    seen: dict[str, list[str]] = {}
    for path in tests.rglob("test_*.py"):
        seen.setdefault(path.name, []).append(str(path.relative_to(tests)))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}
