"""The HTTP/2 listeners: HTTPS with ALPN (h2 and http/1.1 on one port), config validation, and
`sits serve --http2-port` as a user runs it."""

from __future__ import annotations

import asyncio
import os
import signal
import ssl
import subprocess
from pathlib import Path

import httpx2 as httpx  # the HTTP client this openai SDK release is built on (h2 for HTTP/2)
import openai
import pytest
import trustme

from sits.app import Gateway
from sits.configuration.gateway import parse_config, with_server
from sits.errors import ConfigError
from sits.settings import Settings
from tests.conftest import PER_STREAM, left_for_the_collector, one_model_config
from tests.test_cli import SITS, free_port, wait_ready

HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def tls_files(ca: trustme.CA, tmp_path: Path) -> dict[str, str]:
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.cert_chain_pems[0].write_to_path(str(cert_file))
    for pem in cert.cert_chain_pems[1:]:
        pem.write_to_path(str(cert_file), append=True)
    cert.private_key_pem.write_to_path(str(key_file))
    return {"port": 0, "cert_file": str(cert_file), "key_file": str(key_file)}


async def wait_listening(port: int, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            return
        except OSError:
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.1)


def client_context(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    return context


async def test_https_port_offers_h2_and_http11_by_alpn(upstream, start_gateway, ca, tls_files):
    gateway = await start_gateway(one_model_config(upstream.url, tls=tls_files))
    assert gateway.http2 is not None and gateway.http2.h2c_bound_port is None
    url = f"https://127.0.0.1:{gateway.http2.tls_bound_port}"
    context = client_context(ca)
    async with httpx.AsyncClient(http2=True, verify=context) as h2, httpx.AsyncClient(verify=context) as h11:
        raw = await openai.AsyncOpenAI(base_url=url + "/v1", api_key="k", max_retries=0, http_client=h2) \
            .chat.completions.with_raw_response.create(model="m1", messages=HI)
        stream = await openai.AsyncOpenAI(base_url=url + "/v1", api_key="k", max_retries=0, http_client=h11) \
            .chat.completions.with_raw_response.create(model="m1", messages=HI, stream=True)
        text = "".join([c.choices[0].delta.content or "" async for c in stream.parse() if c.choices])
    assert raw.http_response.http_version == "HTTP/2"
    assert raw.parse().choices[0].message.content == "hello from upstream-a"
    assert raw.headers["x-sits-model"] == "m1" and raw.headers["x-request-id"]
    assert stream.http_response.http_version == "HTTP/1.1"  # the client offered only http/1.1
    assert text == "tok0 tok1 tok2 tok3 tok4 "


async def test_h2c_and_https_listen_together(upstream, start_gateway, ca, tls_files):
    gateway = await start_gateway(one_model_config(upstream.url, http2_port=0, tls=tls_files))
    assert gateway.http2 is not None
    async with httpx.AsyncClient(http2=True, http1=False) as h2c, \
            httpx.AsyncClient(http2=True, verify=client_context(ca)) as h2:
        plain = await h2c.get(f"http://127.0.0.1:{gateway.http2.h2c_bound_port}/v1/models")
        secure = await h2.get(f"https://127.0.0.1:{gateway.http2.tls_bound_port}/v1/models")
    assert plain.http_version == secure.http_version == "HTTP/2"
    assert [m["id"] for m in plain.json()["data"]] == [m["id"] for m in secure.json()["data"]] == ["m1", "auto"]


def test_a_certificate_that_does_not_load_fails_at_startup_naming_the_key(upstream, tmp_path):
    missing = {"port": 0, "cert_file": str(tmp_path / "none.pem"), "key_file": str(tmp_path / "none.key")}
    with pytest.raises(ConfigError) as info:
        Gateway(Settings(host="127.0.0.1", port=0, data_dir=tmp_path), parse_config(
            one_model_config(upstream.url, tls=missing)))
    assert "server.tls: cannot load cert_file" in info.value.message and "none.pem" in info.value.message


@pytest.mark.parametrize(("server", "expected"), [
    ({"http2_port": 70000}, "server.http2_port: Input should be less than or equal to 65535"),
    ({"http2_port": "8081"}, "server.http2_port: Input should be a valid integer"),
    ({"port": 8080, "http2_port": 8080}, "http2_port and port are both 8080"),
    ({"grpc_port": 9000, "tls": {"port": 9000, "cert_file": "c", "key_file": "k"}}, "tls.port and grpc_port"),
    ({"tls": {"port": 8443, "cert_file": "c"}}, "server.tls.key_file: Field required"),
    ({"tls": {"port": 8443, "cert_file": "", "key_file": "k"}}, "server.tls.cert_file: String should have at least 1"),
    ({"tls": {"port": 8443, "cert_file": "c", "key_file": "k", "alpn": ["h3"]}}, "server.tls.alpn: unknown key"),
])
def test_config_is_validated_naming_the_key(server, expected):
    with pytest.raises(ConfigError) as info:
        parse_config({"server": server, "models": [{"name": "m", "endpoints": [{"url": "http://127.0.0.1:1/v1"}]}]})
    assert expected in info.value.message


def test_http2_port_flag_is_validated_like_the_config_key():
    config = parse_config({"server": {"port": 8080}, "models": [{"name": "m", "endpoints": [{"url": "http://a/v1"}]}]})
    assert with_server(config, http2_port=8081).server.http2_port == 8081
    with pytest.raises(ConfigError) as info:
        with_server(config, http2_port=8080)
    assert "http2_port and port are both 8080" in info.value.message


async def test_sits_serve_http2_port_with_workers_answers_h2c(upstream):
    port, h2_port = free_port(), free_port()
    proc = subprocess.Popen(
        [*SITS, "serve", "--backend", f"m1={upstream.url}", "--port", str(port), "--http2-port", str(h2_port),
         "--workers", "2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "SITS_LOG_LEVEL": "warning"},
    )
    try:
        await wait_ready(port)
        await wait_listening(h2_port)  # the HTTP/2 listener opens just after the HTTP/1.1 one
        for _ in range(3):  # fresh connections: the kernel spreads them over both workers' sockets
            async with httpx.AsyncClient(http2=True, http1=False) as client:
                response = await client.post(f"http://127.0.0.1:{h2_port}/v1/chat/completions",
                                             json={"model": "m1", "messages": HI})
            assert response.http_version == "HTTP/2" and response.status_code == 200
            assert response.headers["x-sits-model"] == "m1"
    finally:
        proc.send_signal(signal.SIGTERM)
        returncode = await asyncio.to_thread(proc.wait, 30)
    assert returncode == 0, proc.stderr.read().decode() if proc.stderr else ""


async def test_a_port_in_use_fails_startup_naming_the_key(upstream, tmp_path, tls_files):
    blocker = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    taken = blocker.sockets[0].getsockname()[1]
    try:
        gateway = Gateway(Settings(host="127.0.0.1", port=0, data_dir=tmp_path / "data"), parse_config(
            one_model_config(upstream.url, http2_port=0, tls={**tls_files, "port": taken})))
        with pytest.raises(ConfigError) as info:
            await gateway.start()
        assert info.value.message.startswith(f"server.tls.port: cannot listen on 127.0.0.1:{taken}")
        assert gateway.http2 is not None and gateway.http2.h2c_bound_port is not None
        with pytest.raises(OSError):  # the h2c listener that did open was closed again
            await asyncio.open_connection("127.0.0.1", gateway.http2.h2c_bound_port)
        await gateway.stop()
    finally:
        blocker.close()


async def test_streams_over_h2c_leave_nothing_for_the_cyclic_garbage_collector(upstream, start_gateway):
    """The HTTP/2 door reads the relays as async iterators (api/pulled_relays.py): its streams too are
    freed by reference counting when they end (see tests/api/test_streaming.py for why it matters)."""
    gateway = await start_gateway(one_model_config(upstream.url, http2_port=0))
    assert gateway.http2 is not None
    url = f"http://127.0.0.1:{gateway.http2.h2c_bound_port}"
    bodies = [("/v1/chat/completions", {"model": "m1", "messages": [{"role": "user", "content": "hi"}], "stream": True}),
              ("/v1/responses", {"model": "m1", "input": "hi", "stream": True, "store": False}),
              ("/v1/messages", {"model": "m1", "max_tokens": 16, "stream": True,
                                "messages": [{"role": "user", "content": "hi"}]})]
    async with httpx.AsyncClient(http2=True, http1=False) as client:
        async def streams(count: int) -> None:
            for i in range(count):
                path, body = bodies[i % len(bodies)]
                response = await client.post(url + path, json=body, headers={"anthropic-version": "2023-06-01"})
                assert response.status_code == 200 and response.http_version == "HTTP/2"

        await streams(3)  # warm-up
        left = await left_for_the_collector(lambda: streams(30))
    assert not left & PER_STREAM, f"streams left reference cycles through {sorted(left & PER_STREAM)}"
