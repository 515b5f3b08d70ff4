"""DESIGN.md's import rules: the arrows between layers point one way only, every package and top-level
module has its rule, and no two modules import each other, even through others or inside a function."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "sits"

ALLOWED = {
    "api": {"api", "pipeline", "understanding", "scheduling", "backends", "control", "tenants", "state", "telemetry",
            "runtime", "translate"},
    "pipeline": {"pipeline", "scheduling", "state", "backends", "understanding", "telemetry", "runtime", "translate"},
    "understanding": {"understanding", "telemetry", "runtime"},
    "scheduling": {"scheduling"},
    "backends": {"backends", "state", "telemetry", "runtime", "translate"},
    "control": {"control", "state", "backends", "telemetry", "runtime"},
    "state": {"state", "telemetry", "runtime"},
    "telemetry": {"telemetry"},
    "runtime": {"runtime"},
    "translate": {"translate"},  # wire formats <-> chat completions: pure functions (docs/responses-and-messages.md)
    "simulate": {"simulate", "scheduling", "state"},
    "tenants": {"tenants", "state", "telemetry", "runtime"},
    # the whole config schema, composed from every layer's section schema, above all of them
    "configuration": {"configuration", "control", "pipeline", "scheduling", "understanding", "tenants", "state",
                      "telemetry"},  # keys, limits, budgets, spend (docs/tenants.md)  # the scheduler against simulated endpoints
}
# Top-level modules: the composition root and the entry points above every layer.
TOP_LEVEL = {
    "__init__": {"hot_path"}, "__main__": {"cli"}, "errors": set(), "settings": set(), "tuples": set(),
    "hot_path": set(),  # which build of the compiled modules loads (docs/hot-path.md)
    "app": {"api", "backends", "configuration", "control", "hot_path", "tenant_parts", "pipeline", "runtime", "scheduling", "settings", "state", "telemetry",
            "tenants", "understanding"},
    # the tenant parts of a gateway, composed for app.py
    "tenant_parts": {"api", "control", "runtime", "settings", "state", "telemetry", "tenants", "understanding"},
    "serve": {"app", "backends", "configuration", "control", "runtime", "settings", "telemetry"},
}
ENTRY_POINTS = "cli"  # the command line package may import anything
SHARED = {"errors", "tuples"}  # the one exception tree and the named-tuple builder, importable everywhere


def sits_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        for name in names:
            parts = name.split(".")
            if parts[0] == "sits" and len(parts) > 1:
                found.add(parts[1])
    return found


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_layer_imports_only_what_it_may(layer):
    for path in (SRC / layer).rglob("*.py"):
        bad = sits_imports(path) - ALLOWED[layer] - SHARED
        assert not bad, f"{path.relative_to(SRC)} imports {sorted(bad)}"


def test_every_package_and_module_has_a_rule():
    packages = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    modules = {p.stem for p in SRC.glob("*.py")}
    unruled = (packages - set(ALLOWED) - {ENTRY_POINTS}) | (modules - set(TOP_LEVEL))
    assert not unruled, f"add an import rule for {sorted(unruled)}"


@pytest.mark.parametrize("module", sorted(TOP_LEVEL))
def test_top_level_module_imports_only_what_it_may(module):
    path = SRC / f"{module}.py"
    if path.exists():
        bad = sits_imports(path) - TOP_LEVEL[module] - SHARED
        assert not bad, f"{module}.py imports {sorted(bad)}"


def module_imports(path: Path) -> set[str]:
    """The sits modules `path` imports, at the top or inside functions (an import moved into a function to
    dodge a cycle is still a cycle), but not under TYPE_CHECKING."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    skipped = {id(n) for top in tree.body if isinstance(top, ast.If) and "TYPE_CHECKING" in ast.dump(top.test)
               for n in ast.walk(top)}
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("sits.")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.startswith("sits."):
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}
    return found


def test_no_import_cycles():
    modules = {".".join(("sits", *p.relative_to(SRC).with_suffix("").parts)).removesuffix(".__init__"): p
               for p in SRC.rglob("*.py")}
    graph = {name: {m for m in module_imports(path) if m in modules and m != name}
             for name, path in modules.items()}
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for nxt in sorted(graph[name]):
            if state.get(nxt) == 1:
                cycle = path[path.index(nxt):] + [nxt]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt, [*path, nxt])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])


def test_the_product_never_imports_the_research_folder():
    """research/ (the router studies) is not installed: nothing under src/ may import it."""
    for path in SRC.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 else [])
            assert not any(n.split(".")[0] == "research" for n in names), f"{path.relative_to(SRC)} imports {names}"
