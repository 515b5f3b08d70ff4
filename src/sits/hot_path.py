"""Which build of the hot path this process runs: the modules compiled by mypyc, or their source.

A compiled install (setup.py) leaves `_compiled.json` beside this file: each compiled module's source
hash at build time. At import of `sits` the hashes are checked against the sources present. When they
all match, the compiled modules load as usual (an extension module is found before its `.py`). When
any source changed since the build (an edited checkout), or `SITS_PURE_PYTHON=1` is set, every
compiled module loads from its source instead: all or none, because compiled modules call each other
directly and must not be mixed with an edited copy. An install without the manifest is pure Python.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

PURE_ENV = "SITS_PURE_PYTHON"
_HERE = Path(__file__).resolve().parent
MANIFEST = _HERE / "_compiled.json"


@dataclass(frozen=True)
class HotPath:
    compiled: bool
    detail: str  # how it was built, or why it runs from source
    modules: tuple[str, ...] = ()  # the modules the manifest names

    def describe(self) -> str:
        return f"compiled ({self.detail}, {len(self.modules)} modules)" if self.compiled else f"pure Python ({self.detail})"


class SourceFirst(importlib.abc.MetaPathFinder):
    """Finds the named modules' `.py` files ahead of their compiled extension modules."""

    def __init__(self, names: Collection[str]) -> None:
        self._names = frozenset(names)

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self._names:
            return None
        leaf = fullname.rpartition(".")[2] + ".py"
        for entry in path or sys.path:
            candidate = os.path.join(entry, leaf)
            if os.path.isfile(candidate):
                return importlib.util.spec_from_file_location(fullname, candidate)
        return None


def decide(manifest: Path = MANIFEST, root: Path = _HERE.parent, environ: dict[str, str] | None = None) -> HotPath:
    """Compiled or from source, and why (pure: no manifest, asked for, or a source edited since the build)."""
    env = os.environ if environ is None else environ
    try:
        built = json.loads(manifest.read_text())
        modules: dict[str, str] = built["modules"]
        compiler = str(built.get("compiler", "mypyc"))
    except FileNotFoundError:
        return HotPath(False, "not compiled at install")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return HotPath(False, f"unreadable {manifest.name}: {exc}")
    names = tuple(modules)
    if env.get(PURE_ENV, "") not in ("", "0"):
        return HotPath(False, f"{PURE_ENV} is set", names)
    for module, digest in modules.items():
        source = root / (module.replace(".", "/") + ".py")
        try:
            current = hashlib.sha256(source.read_bytes()).hexdigest()
        except OSError:
            return HotPath(False, f"{module}'s source is missing", names)
        if current != digest:
            return HotPath(False, f"{module} changed since it was compiled: reinstall to compile it again", names)
    return HotPath(True, compiler, names)


def install(state: HotPath) -> None:
    """Load every manifest module from source unless the compiled build is to be used."""
    if not state.compiled and state.modules and not any(isinstance(f, SourceFirst) for f in sys.meta_path):
        sys.meta_path.insert(0, SourceFirst(state.modules))


STATE = decide()
