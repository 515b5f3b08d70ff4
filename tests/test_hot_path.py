"""The compiled hot path and its source: which one loads, and that the source one serves too."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

from sits.hot_path import PURE_ENV, HotPath, SourceFirst, decide

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"


def _manifest(tmp_path: Path, sources: dict[str, bytes]) -> tuple[Path, Path]:
    root = tmp_path / "src"
    for module, text in sources.items():
        path = root / (module.replace(".", "/") + ".py")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text)
    manifest = tmp_path / "_compiled.json"
    manifest.write_text(json.dumps({"compiler": "mypyc 9.9", "modules": {
        m: hashlib.sha256(t).hexdigest() for m, t in sources.items()}}))
    return manifest, root


def test_no_manifest_is_pure_python(tmp_path: Path) -> None:
    state = decide(tmp_path / "_compiled.json", tmp_path, {})
    assert state == HotPath(False, "not compiled at install")
    assert "pure Python" in state.describe()


def test_matching_sources_run_compiled(tmp_path: Path) -> None:
    manifest, root = _manifest(tmp_path, {"pkg.a": b"x = 1\n", "pkg.sub.b": b"y = 2\n"})
    state = decide(manifest, root, {})
    assert state.compiled and state.modules == ("pkg.a", "pkg.sub.b")
    assert state.describe() == "compiled (mypyc 9.9, 2 modules)"


def test_one_edited_source_runs_all_from_source(tmp_path: Path) -> None:
    manifest, root = _manifest(tmp_path, {"pkg.a": b"x = 1\n", "pkg.sub.b": b"y = 2\n"})
    (root / "pkg" / "sub" / "b.py").write_bytes(b"y = 3\n")
    state = decide(manifest, root, {})
    assert not state.compiled and state.modules == ("pkg.a", "pkg.sub.b")
    assert "pkg.sub.b changed since it was compiled" in state.detail


def test_pure_python_asked_for(tmp_path: Path) -> None:
    manifest, root = _manifest(tmp_path, {"pkg.a": b"x = 1\n"})
    assert decide(manifest, root, {PURE_ENV: "1"}).detail == f"{PURE_ENV} is set"
    assert decide(manifest, root, {PURE_ENV: "0"}).compiled


def test_unreadable_manifest_is_pure_python(tmp_path: Path) -> None:
    manifest = tmp_path / "_compiled.json"
    manifest.write_text("{not json")
    state = decide(manifest, tmp_path, {})
    assert not state.compiled and state.detail.startswith("unreadable _compiled.json")


def test_source_first_finds_the_py_file_beside_an_extension(tmp_path: Path) -> None:
    (tmp_path / "mod_x.py").write_text("WHERE = 'source'\n")
    (tmp_path / "mod_x.cpython-311-x86_64-linux-gnu.so").write_bytes(b"not a real extension")
    spec = SourceFirst({"mod_x"}).find_spec("mod_x", [str(tmp_path)])
    assert spec is not None and spec.origin == str(tmp_path / "mod_x.py")
    assert SourceFirst({"mod_x"}).find_spec("mod_y", [str(tmp_path)]) is None


def test_the_compiled_list_names_modules_that_exist() -> None:
    with open(ROOT / "pyproject.toml", "rb") as f:
        modules = tomllib.load(f)["tool"]["sits"]["compiled"]["modules"]
    assert modules and len(set(modules)) == len(modules)
    missing = [m for m in modules if not (SRC / (m.replace(".", "/") + ".py")).is_file()]
    assert not missing


def _loaded_from(env: dict[str, str]) -> dict[str, str]:
    code = ("import json, sys, sits, sits.pipeline.director, sits.api.http_server; "
            "from sits.hot_path import STATE; "
            "print(json.dumps({'compiled': STATE.compiled, 'director': sits.pipeline.director.__file__, "
            "'server': sits.api.http_server.__file__}))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout)


def test_pure_python_switch_loads_every_module_from_source() -> None:
    loaded = _loaded_from({**os.environ, PURE_ENV: "1"})
    assert loaded["compiled"] is False
    assert loaded["director"].endswith("director.py") and loaded["server"].endswith("http_server.py")


def test_an_install_loads_the_build_its_manifest_names() -> None:
    env = {k: v for k, v in os.environ.items() if k != PURE_ENV}
    loaded = _loaded_from(env)
    manifest = SRC / "sits" / "_compiled.json"
    if loaded["compiled"]:  # a compiled install with unedited sources: the extension modules
        assert manifest.is_file()
        assert loaded["director"].endswith(".so") and loaded["server"].endswith(".so")
    else:  # SITS_COMPILE=0, or a source edited since the build
        assert loaded["director"].endswith(".py") and loaded["server"].endswith(".py")
