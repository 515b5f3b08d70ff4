"""Uploaded files: bounded in bytes and age, and shared between worker processes through a folder."""

from __future__ import annotations

from pathlib import Path

from sits.pipeline.fusion.uploads import UploadStore


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def two_workers(tmp_path: Path, max_bytes: int = 1 << 20, ttl_s: float = 60.0) -> tuple[UploadStore, UploadStore, Clock]:
    clock = Clock()
    shared = tmp_path / "uploads"
    return (UploadStore(max_bytes, ttl_s, clock, clock, shared), UploadStore(max_bytes, ttl_s, clock, clock, shared),
            clock)


def test_a_file_uploaded_to_one_worker_is_found_by_another(tmp_path: Path):
    a, b, _ = two_workers(tmp_path)
    stored = a.put("report.pdf", "application/pdf", "user_data", b"%PDF-1.4 data")
    found = b.get(stored.id)
    assert found is not None
    assert (found.id, found.filename, found.media_type, found.purpose, found.data) == \
        (stored.id, "report.pdf", "application/pdf", "user_data", b"%PDF-1.4 data")
    assert found.file_object() == stored.file_object()


def test_an_expired_upload_is_gone_for_every_worker(tmp_path: Path):
    a, b, clock = two_workers(tmp_path, ttl_s=60.0)
    stored = a.put("a.pdf", "application/pdf", "user_data", b"x")
    clock.now += 61
    assert b.get(stored.id) is None
    assert a.get(stored.id) is None  # expiring on its uploader also removes the shared copy
    assert not list((tmp_path / "uploads").iterdir())


def test_an_evicted_upload_leaves_the_shared_folder_too(tmp_path: Path):
    a, b, _ = two_workers(tmp_path, max_bytes=10)
    first = a.put("a.pdf", "application/pdf", "user_data", b"123456")
    second = a.put("b.pdf", "application/pdf", "user_data", b"abcdef")  # over 10 bytes: the oldest goes
    assert b.get(first.id) is None
    assert b.get(second.id) is not None


def test_ids_that_are_not_upload_ids_never_touch_the_disk(tmp_path: Path):
    _, b, _ = two_workers(tmp_path)
    (tmp_path / "secret.json").write_text('{"filename": "x", "media_type": "x", "purpose": "x", "created_at": 1000}')
    (tmp_path / "secret.bin").write_bytes(b"secret")
    assert b.get("../secret") is None
    assert b.get("file-" + "0" * 24) is None


def test_one_process_keeps_uploads_in_memory_only(tmp_path: Path):
    clock = Clock()
    store = UploadStore(1 << 20, 60.0, clock, clock)
    stored = store.put("a.pdf", "application/pdf", "user_data", b"x")
    assert store.get(stored.id) is stored
    assert not any(tmp_path.iterdir())
