"""Build: the hot-path modules listed in pyproject.toml (`[tool.sits.compiled]`) compiled with mypyc from
the same typed source; everything else is configured in pyproject.toml.

`SITS_COMPILE=0 pip install ...` installs pure Python. A compiled install also writes
`sits/_compiled.json` (each compiled module's source hash), which `sits/hot_path.py` checks at import:
a module edited since the build makes the whole hot path run from source instead (docs/hot-path.md).
mypyc runs inside `build_ext` only, not in the metadata hooks pip calls first.
"""

from __future__ import annotations

import hashlib
import json
import os
import tomllib
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
MANIFEST = ROOT / "src" / "sits" / "_compiled.json"
COMPILE = os.environ.get("SITS_COMPILE", "1") != "0"
BUILDS = {"build", "build_ext", "bdist_wheel", "editable_wheel", "install", "develop"}  # setup.py commands


def compiled_modules() -> list[str]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["tool"]["sits"]["compiled"]["modules"]


def source_of(module: str) -> Path:
    return ROOT / "src" / (module.replace(".", "/") + ".py")


class CompiledDistribution(Distribution):
    def has_ext_modules(self) -> bool:  # a platform wheel, and `build_ext` runs, though no Extension is declared
        return COMPILE


class BuildHotPath(build_ext):
    def finalize_options(self) -> None:
        # Only for a command that builds: pip's metadata hooks (egg_info, dist_info) finalize build_ext too.
        if COMPILE and not self.distribution.ext_modules and BUILDS & set(self.distribution.commands):
            from mypy.version import __version__ as mypy_version
            from mypyc.build import mypycify

            paths = [str(source_of(m).relative_to(ROOT)) for m in compiled_modules()]
            print(f"sits: compiling {len(paths)} hot-path modules with mypyc {mypy_version} (minutes)", flush=True)
            # --no-site-packages: the same build whether or not the dependencies are installed yet (pip builds
            # before it installs them); third-party types are Any to the compiler (docs/hot-path.md)
            flags = ["--no-site-packages", "--ignore-missing-imports", "--follow-imports=silent"]
            self.distribution.ext_modules = mypycify([*flags, *paths],
                                                     opt_level="3", group_name="sits_hot_path")
        super().finalize_options()

    def run(self) -> None:
        MANIFEST.unlink(missing_ok=True)
        if self.inplace:  # an editable install: a module dropped from the list must not shadow its source
            for built in (ROOT / "src").rglob("*.so"):
                built.unlink()
        if not COMPILE:
            return
        from mypy.version import __version__ as mypy_version

        # hashed before compiling: a source edited during the build is then seen as edited
        hashes = {m: hashlib.sha256(source_of(m).read_bytes()).hexdigest() for m in compiled_modules()}
        super().run()
        MANIFEST.write_text(json.dumps({"compiler": f"mypyc {mypy_version}", "modules": hashes}, indent=1) + "\n")
        if not self.inplace:  # a wheel: the manifest goes with the compiled modules
            target = Path(self.build_lib) / "sits" / MANIFEST.name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(MANIFEST.read_bytes())


setup(distclass=CompiledDistribution, cmdclass={"build_ext": BuildHotPath})
