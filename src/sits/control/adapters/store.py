"""Adapter registrations on disk (`<data dir>/adapters.json`), so a restart keeps them.

Only what the operator registered is kept (each with its base declaration filled in); where an
adapter is loaded is asked of the engines again after a restart, since they may have restarted too.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

import orjson
from pydantic import ValidationError

from sits.control.adapters.schemas import AdapterRegistration

log = logging.getLogger("sits.adapters")


class AdapterStore:
    def __init__(self, path: Path) -> None:
        self._path = Path(path)

    def load(self) -> list[AdapterRegistration]:
        """The saved registrations; an unreadable file or entry is logged and skipped, never fatal."""
        try:
            raw = orjson.loads(self._path.read_bytes())
        except FileNotFoundError:
            return []
        except (OSError, orjson.JSONDecodeError) as exc:
            log.warning("adapter registrations in %s not read: %s", self._path, exc)
            return []
        out = []
        for item in raw if isinstance(raw, list) else []:
            try:
                out.append(AdapterRegistration.model_validate(item, strict=False))
            except ValidationError as exc:
                log.warning("adapter registration in %s skipped: %s", self._path, exc.errors(include_url=False)[0])
        return out

    def save(self, registrations: list[AdapterRegistration]) -> None:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        data = orjson.dumps([r.model_dump(exclude_none=True) for r in registrations], option=orjson.OPT_INDENT_2)
        fd, tmp = tempfile.mkstemp(dir=self._path.parent, prefix=".adapters.", suffix=".json")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, self._path)  # atomic: a crash leaves the old file or the new one
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
