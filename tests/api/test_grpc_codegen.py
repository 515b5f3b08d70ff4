"""The checked-in gRPC code is what the documented protoc command makes of proto/sits/v1/chat.proto."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GENERATED = ("chat_pb2.py", "chat_pb2.pyi", "chat_pb2_grpc.py")


def test_regenerating_from_the_proto_gives_the_checked_in_files(tmp_path):
    # The command documented in proto/sits/v1/chat.proto and src/sits/api/grpc/__init__.py, into tmp_path.
    result = subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", "-Isits/api/grpc=proto/sits/v1", f"--python_out={tmp_path}",
         f"--pyi_out={tmp_path}", f"--grpc_python_out={tmp_path}", "proto/sits/v1/chat.proto"],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    for name in GENERATED:
        fresh = (tmp_path / "sits" / "api" / "grpc" / name).read_text()
        checked_in = (REPO / "src" / "sits" / "api" / "grpc" / name).read_text()
        assert fresh == checked_in, f"{name} is stale: regenerate it (see proto/sits/v1/chat.proto)"
