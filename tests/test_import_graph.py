"""No import circles inside a package, counting the imports written inside functions: an import
deferred to break a circle hides it from Python but not from the reader (issue 31). Read with
`ast`, nothing is imported. (Top level: it reads every package's sources.)"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGES = Path(__file__).resolve().parents[1] / "packages"


def module_imports(src: Path) -> dict[str, set[str]]:
    """Each module of the package under `src` → the modules of the same package it imports,
    at the top or inside a function (a package's __init__ counts as the package's name)."""
    files = {}
    for f in sorted(src.rglob("*.py")):
        parts = f.relative_to(src.parent).with_suffix("").parts
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    graph: dict[str, set[str]] = {}
    for name, f in files.items():
        found = set()
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
        graph[name] = {m for m in found if m in files and m != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of two or more modules (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_circles_finds_a_circle_through_a_function_level_import(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.b import x\n")
    (pkg / "b.py").write_text("x = 1\ndef f():\n    from pkg import a\n")
    (pkg / "c.py").write_text("import pkg.a\n")
    assert circles(module_imports(pkg)) == [["pkg.a", "pkg.b"]]


@pytest.mark.parametrize(
    "package",
    [
        "enlace-config",
        "enlace-model",
        "enlace-data",
        "enlace-train",
        "enlace-agent",
    ],
)
def test_no_import_circles(package: str) -> None:
    src = PACKAGES / package / "src" / package.replace("-", "_")
    assert circles(module_imports(src)) == []
