"""`sits chat --grpc` and `sits serve --grpc-port` as a user runs them."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from sits.configuration.gateway import parse_config, with_server
from sits.errors import ConfigError
from tests.conftest import one_model_config


async def sits_chat(*args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "sits", "chat", *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    return process.returncode or 0, out.decode(), err.decode()


@pytest.mark.parametrize("compression", ["none", "gzip", "lz4"])
async def test_chat_over_grpc_streams_the_answer(upstream, start_gateway, compression):
    gateway = await start_gateway(one_model_config(upstream.url, grpc_port=0))
    code, out, err = await sits_chat("--grpc", f"127.0.0.1:{gateway.grpc.bound_port}", "--model", "m1",
                                     "--compression", compression, "hello there")
    assert code == 0, err
    assert out.strip() == "tok0 tok1 tok2 tok3 tok4"
    assert "[answered by m1;" in err
    assert upstream.log.requests[-1]["messages"] == [{"role": "user", "content": "hello there"}]


async def test_chat_over_grpc_reports_the_gateways_error(upstream, start_gateway):
    gateway = await start_gateway(one_model_config(upstream.url, grpc_port=0))
    code, _, err = await sits_chat("--grpc", f"127.0.0.1:{gateway.grpc.bound_port}", "--model", "nope", "hi")
    assert code == 1
    assert "NOT_FOUND: The model 'nope' does not exist. Available models: m1" in err


def test_grpc_port_flag_is_validated_like_the_config_key():
    config = parse_config(one_model_config("http://127.0.0.1:9/v1"))
    assert with_server(config, grpc_port=50051).server.grpc_port == 50051
    assert with_server(config, grpc_port=50051).server.drain_timeout_s == 2
    with pytest.raises(ConfigError, match="grpc_port"):
        with_server(config, grpc_port=70000)


EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "grpc_client.py"


async def test_the_example_client_runs_against_a_gateway(upstream, start_gateway, tmp_path):
    gateway = await start_gateway(one_model_config(upstream.url, grpc_port=0))
    document = tmp_path / "doc.txt"
    document.write_text("All about the sky. " * 500)
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(EXAMPLE), "--address", f"127.0.0.1:{gateway.grpc.bound_port}", "--model", "m1",
        "--compression", "lz4", "--prompt-file", str(document), "--seed", "--priority", "batch", "Summarize.",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode == 0, err.decode()
    lines = out.decode().splitlines()
    assert lines[0].startswith("unary  [m1 via m1/ep-0; request ") and lines[0].endswith("9 tokens]")
    assert lines[1:] == ["hello from upstream-a", "stream tok0 tok1 tok2 tok3 tok4 "]
    sent = upstream.log.requests[-1]
    assert sent["seed"] == 7 and sent["messages"][0]["content"].endswith("\n\nSummarize.")
