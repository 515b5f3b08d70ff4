"""Atomic file replacement for state the worker processes share."""

from __future__ import annotations

from pathlib import Path

import pytest

from sits.runtime.atomic_file import replace_file


def test_replaces_the_contents_and_leaves_no_temporary_file(tmp_path: Path):
    path = tmp_path / "state.json"
    replace_file(path, b"one")
    replace_file(path, b"two")
    assert path.read_bytes() == b"two"
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_a_failed_replace_raises_and_leaves_no_temporary_file(tmp_path: Path):
    path = tmp_path / "state.json"
    path.mkdir()  # a non-empty directory where the file should go: the rename fails, even for root
    (path / "keep").write_bytes(b"kept")
    with pytest.raises(OSError):
        replace_file(path, b"new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]
    assert (path / "keep").read_bytes() == b"kept"
