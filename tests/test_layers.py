"""The package's import graph: every import points down the layers, and no modules import each other in a cycle.

The layers, lowest first, are the ones docs/architecture.md draws. Imports
inside functions count too: a lazy import that points up is still a
dependency that points up.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "spork_lab"

LAYERS = [
    {"errors"},
    {"core"},
    {"lang", "scheduling"},
    {"platforms"},
    {"analysis", "dist"},
    {"sync"},
    {"codegen"},
    {"runtime"},
    {"lab", "cli", ""},  # "" is spork_lab/__init__.py, the public API
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(name: str, source: str, is_package: bool = False) -> set:
    """The spork_lab modules that module `name` imports (relative imports resolved; `from pkg import mod` gives pkg.mod)."""
    package = name if is_package else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("spork_lab")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("spork_lab"):
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                out.add(sub if _exists(sub) else target)
    return out


def _exists(module: str) -> bool:
    path = PACKAGE.parent / module.replace(".", "/")
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def layer_of(module: str) -> int:
    top = module.split(".")[1] if module.count(".") else ""
    for k, names in enumerate(LAYERS):
        if top in names:
            return k
    raise AssertionError(f"{module} belongs to no layer; add its package to LAYERS and docs/architecture.md")


def with_parent_packages(name: str, targets: set) -> set:
    """Importing `spork_lab.a.b` first runs `spork_lab/a/__init__.py`: an edge to package `spork_lab.a` too,
    unless the importer lives inside that package (a submodule importing a sibling is how packages work)."""
    out = set(targets)
    for target in targets:
        parts = target.split(".")
        for k in range(2, len(parts)):
            package = ".".join(parts[:k])
            if not (name == package or name.startswith(package + ".")):
                out.add(package)
    return out


GRAPH = {
    module_name(p): with_parent_packages(module_name(p), imports_of(module_name(p), p.read_text(), p.name == "__init__.py"))
    for p in sorted(PACKAGE.rglob("*.py"))
}


def test_every_module_has_a_layer():
    for module in GRAPH:
        layer_of(module)


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_imports_point_down_the_layers(module):
    up = sorted(m for m in GRAPH[module] if layer_of(m) > layer_of(module))
    assert not up, f"{module} (layer {layer_of(module)}) imports from higher layers: {up}"


def test_no_import_cycles():
    # A package's __init__ importing its own submodules is how packages re-export; a submodule importing
    # its own package back (to reach a sibling) closes a cycle, which is what this test looks for.
    edges = {m: {t for t in ts if t in GRAPH and t != m} for m, ts in GRAPH.items()}
    index, low, on_stack, stack, cycles = {}, {}, set(), [], []

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in edges:
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def test_importing_a_submodule_counts_as_importing_its_package():
    """`from ..analysis.result import X` runs spork_lab/analysis/__init__.py first: if that imports the importer's
    package back, the import fails at run time although no module names the other directly."""
    found = with_parent_packages("spork_lab.dist.deduction", {"spork_lab.analysis.result"})
    assert found == {"spork_lab.analysis.result", "spork_lab.analysis"}
    assert with_parent_packages("spork_lab.analysis.scopes", {"spork_lab.analysis.result"}) == {"spork_lab.analysis.result"}


def test_an_upward_import_inside_a_function_is_found():
    """The rules above can fail: a lazy import from core up to the analysis is seen and placed above core."""
    found = imports_of("spork_lab.core.fake", "def f():\n    from ..analysis import analyze\n")
    assert found == {"spork_lab.analysis"}
    assert layer_of("spork_lab.analysis") > layer_of("spork_lab.core.fake")
