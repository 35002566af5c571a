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


# ---------------------------------------------------------------- enlace-agent's floor plan
# The agent's layers, lowest first (issue 36): a module imports its own layer and those below,
# never one above, at the top or inside a function. A module belongs to the layer of the longest
# prefix that names it.
AGENT_LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "shared primitives",
        (
            "enlace_agent",
            "enlace_agent.shared",
            "enlace_agent.settings",
            "enlace_agent.keys",
            "enlace_agent.files",
            "enlace_agent.search",
        ),
    ),
    (
        "household core",
        (
            "enlace_agent.household",
            "enlace_agent.memory",
            "enlace_agent.snapshot",
            "enlace_agent.model_versions",
            "enlace_agent.service",
        ),
    ),
    ("tools", ("enlace_agent.tools",)),
    ("assistant", ("enlace_agent.assistant", "enlace_agent.health")),
    ("page and CLI", ("enlace_agent.web", "enlace_agent.cli")),
)


def layer_of(module: str, layers: tuple[tuple[str, tuple[str, ...]], ...]) -> int:
    """The index of `module`'s layer; a module no layer names is a failure to place it."""
    best = max(
        (
            (len(prefix), i)
            for i, (_, prefixes) in enumerate(layers)
            for prefix in prefixes
            if module == prefix or module.startswith(prefix + ".")
        ),
        default=None,
    )
    assert best is not None, f"{module} is in no layer: add it to AGENT_LAYERS"
    return best[1]


def climbs(
    graph: dict[str, set[str]], layers: tuple[tuple[str, tuple[str, ...]], ...]
) -> list[str]:
    """Every import from a lower layer into a higher one, as `a (layer) -> b (layer)`."""
    names = [name for name, _ in layers]
    found = []
    for module, imported in sorted(graph.items()):
        here = layer_of(module, layers)
        for target in sorted(imported):
            there = layer_of(target, layers)
            if there > here:
                found.append(f"{module} ({names[here]}) -> {target} ({names[there]})")
    return found


def test_climbs_finds_an_import_inside_a_function_that_climbs(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "low").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "low" / "__init__.py").write_text("")
    (pkg / "low" / "a.py").write_text("def f():\n    from pkg.high import b\n")
    (pkg / "high.py").write_text("from pkg.low import a\nb = 1\n")
    layers = (("low", ("pkg",)), ("high", ("pkg.high",)))
    assert climbs(module_imports(pkg), layers) == ["pkg.low.a (low) -> pkg.high (high)"]


def test_the_agent_never_imports_up_its_floor_plan() -> None:
    graph = module_imports(PACKAGES / "enlace-agent" / "src" / "enlace_agent")
    assert climbs(graph, AGENT_LAYERS) == []
