"""The replica's document on local disk, so a replica killed mid-switch restarts with what it
had acknowledged, and spreads it again once it reaches its peers."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from sits.state.replication.document import ClusterDoc
from sits.state.replication.wire import WireError, decode, encode

log = logging.getLogger("sits.cluster")


class SnapshotFile:
    """Blocking file I/O: call from a thread (`asyncio.to_thread`)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> ClusterDoc:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return ClusterDoc()
        except OSError as exc:
            log.warning("cannot read cluster snapshot %s: %s; starting empty", self.path, exc)
            return ClusterDoc()
        try:
            return decode(data)[1]
        except WireError as exc:
            log.warning("ignoring corrupt cluster snapshot %s: %s", self.path, exc)
            return ClusterDoc()

    def save(self, doc: ClusterDoc, origin: str) -> None:
        """Atomic and durable: a crash leaves the old file or the new one, never a torn one."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")  # never shared by two processes
        try:
            with open(tmp, "wb") as f:
                f.write(encode(doc, origin))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except OSError:
            tmp.unlink(missing_ok=True)
            raise
