"""Adapter registrations on disk (`<data dir>/adapters.json`), so a restart keeps them.

Only what the operator registered is kept (each with its base declaration filled in); where an
adapter is loaded is asked of the engines again after a restart, since they may have restarted too.

Several processes may share the file (`sits serve --workers N`): every change is one
read-modify-write under an exclusive lock on `adapters.json.lock`, so no worker overwrites another's
registrations, and the file carries a version that each change raises, so the others can see that
something changed (`AdapterRegistry.sync`).
"""

from __future__ import annotations

import fcntl
import logging
from pathlib import Path
from typing import NamedTuple

import orjson
from pydantic import ValidationError

from sits.control.adapters.schemas import AdapterRegistration
from sits.runtime.atomic_file import replace_file

log = logging.getLogger("sits.adapters")


class SavedAdapters(NamedTuple):
    version: int  # 0: nothing saved yet (or a file from before versions, a bare list)
    registrations: list[AdapterRegistration]
    readable: bool = True  # False: the file exists but could not be read (registrations then empty)


_UNREADABLE = object()


class AdapterStore:
    def __init__(self, path: Path) -> None:
        self._path = Path(path)
        self._lock_path = self._path.with_name(self._path.name + ".lock")

    def load_versioned(self) -> SavedAdapters:
        """The saved registrations; an unreadable file or entry is logged and skipped, never fatal."""
        raw = self._read()
        if raw is _UNREADABLE:
            return SavedAdapters(0, [], readable=False)
        items = raw.get("adapters") if isinstance(raw, dict) else raw
        out = []
        for item in items if isinstance(items, list) else []:
            try:
                out.append(AdapterRegistration.model_validate(item, strict=False))
            except ValidationError as exc:
                log.warning("adapter registration in %s skipped: %s", self._path, exc.errors(include_url=False)[0])
        return SavedAdapters(_version_of(raw), out)

    def version(self) -> int:
        """The saved version alone: whether another process changed the registrations."""
        return _version_of(self._read())

    def update(self, upsert: AdapterRegistration | None = None, remove: str | None = None) -> tuple[int, int]:
        """Apply one change (none: only raise the version, e.g. after an activation, so the other
        processes ask the engines again); returns (version before, version after)."""
        self._path.parent.mkdir(parents=True, exist_ok=True)
        with open(self._lock_path, "ab") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            saved = self.load_versioned()
            by_name = {r.name: r for r in saved.registrations}
            if upsert is not None:
                by_name[upsert.name] = upsert
            if remove is not None:
                by_name.pop(remove, None)
            version = saved.version + 1
            self._write(version, [by_name[n] for n in sorted(by_name)])
            return saved.version, version

    def _read(self) -> object:
        try:
            return orjson.loads(self._path.read_bytes())
        except FileNotFoundError:
            return None
        except (OSError, orjson.JSONDecodeError) as exc:
            log.warning("adapter registrations in %s not read: %s", self._path, exc)
            return _UNREADABLE

    def _write(self, version: int, registrations: list[AdapterRegistration]) -> None:
        data = orjson.dumps({"version": version, "adapters": [r.model_dump(exclude_none=True) for r in registrations]},
                            option=orjson.OPT_INDENT_2)
        replace_file(self._path, data)  # readers see the old file or the new one; writers hold the lock


def _version_of(raw: object) -> int:
    version = raw.get("version") if isinstance(raw, dict) else None
    return version if isinstance(version, int) and version >= 0 else 0
