"""The persisted document: atomic replace, and a corrupt file reads as empty rather than failing startup."""

from __future__ import annotations

from sits.state.crdt import Stamp
from sits.state.replication.document import ClusterDoc
from sits.state.replication.records import AliasRoute
from sits.state.replication.snapshot_file import SnapshotFile
from tests.state.replication.docs import alias_doc


def test_save_then_load(tmp_path):
    f = SnapshotFile(tmp_path / "cluster" / "r1.json")
    assert f.load() == ClusterDoc()
    doc = alias_doc("chat", AliasRoute("m@v2", "m@v1", 1.0, 3), Stamp(7, 1, "r1"))
    f.save(doc, "r1")
    assert f.load() == doc
    assert not list((tmp_path / "cluster").glob("*.tmp"))  # the temporary file was renamed into place


def test_corrupt_file_reads_as_empty(tmp_path):
    path = tmp_path / "r1.json"
    path.write_bytes(b'{"version": 1, "origin": "r1", "aliases": {"a": ')
    assert SnapshotFile(path).load() == ClusterDoc()
