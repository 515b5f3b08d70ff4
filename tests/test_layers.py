"""DESIGN.md's import rules: the arrows between layers point one way only."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "sits"

ALLOWED = {
    "api": {"api", "pipeline", "understanding", "scheduling", "backends", "control", "state", "telemetry", "runtime"},
    "pipeline": {"pipeline", "scheduling", "state", "backends", "understanding", "telemetry", "runtime"},
    "understanding": {"understanding", "telemetry", "runtime"},
    "scheduling": {"scheduling"},
    "backends": {"backends", "state", "telemetry", "runtime"},
    "control": {"control", "state", "backends", "telemetry", "runtime"},
    "state": {"state", "telemetry", "runtime"},
    "telemetry": {"telemetry"},
    "runtime": {"runtime"},
}
SHARED = {"errors"}  # the one exception tree, importable everywhere


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


def test_the_product_never_imports_the_research_folder():
    """research/ (the router studies) is not installed: nothing under src/ may import it."""
    for path in SRC.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 else [])
            assert not any(n.split(".")[0] == "research" for n in names), f"{path.relative_to(SRC)} imports {names}"
