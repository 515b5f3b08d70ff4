"""Every bad input gets a clear OpenAI-shaped error naming what is wrong; never a 500 or a trace."""

from __future__ import annotations

import asyncio
import urllib.error
import urllib.request

import orjson
import pytest

from tests.conftest import one_model_config


async def raw_request(port: int, data: bytes, read_timeout: float = 5.0) -> tuple[int, dict[str, str], bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), read_timeout)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
    body = await asyncio.wait_for(reader.readexactly(int(headers.get("content-length", "0"))), read_timeout)
    writer.close()
    return status, headers, body


def post(path: str, body: bytes, extra: bytes = b"") -> bytes:
    return (b"POST %b HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: %d\r\n%b\r\n%b"
            % (path.encode(), len(body), extra, body))


CHAT = "/v1/chat/completions"
CASES = [
    # (name, path, body, status, param, code)
    ("malformed json", CHAT, b'{"model": "m1", "messages": [', 400, "body", "invalid_json"),
    ("empty body", CHAT, b"", 400, "body", "invalid_request"),
    ("body not an object", CHAT, b"[1, 2]", 400, "body", "invalid_json"),
    ("missing messages", CHAT, b'{"model": "m1"}', 422, "messages", "missing_required_parameter"),
    ("empty messages", CHAT, b'{"model": "m1", "messages": []}', 422, "messages", "invalid_type"),
    ("missing model", CHAT, b'{"messages": [{"role": "user", "content": "x"}]}', 422, "model",
     "missing_required_parameter"),
    ("model wrong type", CHAT, b'{"model": 5, "messages": [{"role": "user", "content": "x"}]}', 422, "model",
     "invalid_type"),
    ("bad role", CHAT, b'{"model": "m1", "messages": [{"role": "robot", "content": "x"}]}', 422,
     "messages[0].role", "invalid_type"),
    ("content wrong type", CHAT, b'{"model": "m1", "messages": [{"role": "user", "content": 7}]}', 422,
     "messages[0].content", "invalid_type"),
    ("stream not bool", CHAT, b'{"model": "m1", "messages": [{"role": "user", "content": "x"}], "stream": "yes"}',
     422, "stream", "invalid_type"),
    ("temperature out of range", CHAT,
     b'{"model": "m1", "messages": [{"role": "user", "content": "x"}], "temperature": 9}', 422, "temperature",
     "invalid_type"),
    ("max_tokens negative", CHAT,
     b'{"model": "m1", "messages": [{"role": "user", "content": "x"}], "max_tokens": -1}', 422, "max_tokens",
     "invalid_type"),
    ("completion without prompt", "/v1/completions", b'{"model": "m1"}', 422, "prompt", "missing_required_parameter"),
    ("embedding input wrong type", "/v1/embeddings", b'{"model": "m1", "input": {"a": 1}}', 422, "input",
     "invalid_type"),
    ("unknown model", CHAT, b'{"model": "zzz", "messages": [{"role": "user", "content": "x"}]}', 404, "model",
     "model_not_found"),
]


@pytest.mark.parametrize(("name", "path", "body", "status", "param", "code"), CASES, ids=[c[0] for c in CASES])
async def test_bad_request_bodies(upstream, start_gateway, name, path, body, status, param, code):
    gateway = await start_gateway(one_model_config(upstream.url))
    got_status, headers, payload = await raw_request(gateway.bound_port, post(path, body))
    assert got_status == status
    error = orjson.loads(payload)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] == param and error["code"] == code
    assert "Traceback" not in error["message"]
    assert headers["x-request-id"]
    assert upstream.log.requests == []  # nothing reached the model server


async def test_body_over_limit_is_413(upstream, start_gateway):
    gateway = await start_gateway(one_model_config(upstream.url, max_body_bytes=64 * 1024))
    big = b'{"model": "m1", "messages": [{"role": "user", "content": "' + b"x" * 70_000 + b'"}]}'
    status, _, payload = await raw_request(gateway.bound_port, post(CHAT, big))
    assert status == 413
    assert orjson.loads(payload)["error"]["code"] == "payload_too_large"


def urllib_post(url: str, body: bytes) -> tuple[int, bytes]:
    """POST with the stdlib client, which sends the whole body before it reads any answer."""
    request = urllib.request.Request(url, data=body, headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


async def test_a_client_that_sends_the_whole_body_first_still_reads_the_413(upstream, start_gateway):
    gateway = await start_gateway(one_model_config(upstream.url, max_body_bytes=64 * 1024))
    big = b'{"model": "m1", "messages": [{"role": "user", "content": "' + b"x" * 4_000_000 + b'"}]}'
    status, payload = await asyncio.to_thread(urllib_post, f"http://127.0.0.1:{gateway.bound_port}{CHAT}", big)
    assert status == 413
    error = orjson.loads(payload)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == "payload_too_large" and error["param"] == "body"
    assert "65536 bytes" in error["message"]
    assert upstream.log.requests == []


async def test_chunked_body_over_limit_is_413(upstream, start_gateway):
    gateway = await start_gateway(one_model_config(upstream.url, max_body_bytes=4096))
    chunk = b"x" * 3000
    data = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
            + b"%x\r\n%b\r\n" % (len(chunk), chunk) * 2 + b"0\r\n\r\n")
    status, _, _ = await raw_request(gateway.bound_port, data)
    assert status == 413


async def test_large_body_under_limit_is_forwarded_intact(upstream, start_gateway):
    gateway = await start_gateway(one_model_config(upstream.url))
    text = "y" * 3_000_000
    body = orjson.dumps({"model": "m1", "messages": [{"role": "user", "content": text}]})
    status, _, _ = await raw_request(gateway.bound_port, post(CHAT, body), read_timeout=20)
    assert status == 200
    assert upstream.log.requests[-1]["messages"][0]["content"] == text


async def test_headers_too_large_is_431(upstream, start_gateway):
    gateway = await start_gateway(one_model_config(upstream.url, max_header_bytes=2048))
    extra = b"x-junk: " + b"a" * 4000 + b"\r\n"
    status, _, payload = await raw_request(gateway.bound_port, post(CHAT, b"{}", extra))
    assert status == 431
    assert orjson.loads(payload)["error"]["code"] == "headers_too_large"


async def test_garbage_request_line_is_400(upstream, start_gateway):
    gateway = await start_gateway(one_model_config(upstream.url))
    status, _, payload = await raw_request(gateway.bound_port, b"NOT HTTP AT ALL\r\n\r\n")
    assert status == 400
    assert orjson.loads(payload)["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize(("method", "path", "status"), [("GET", "/v1/nothing", 404),
                                                         ("GET", CHAT, 405), ("DELETE", "/v1/models", 405)])
async def test_unknown_routes(upstream, start_gateway, method, path, status):
    gateway = await start_gateway(one_model_config(upstream.url))
    got, _, payload = await raw_request(gateway.bound_port, f"{method} {path} HTTP/1.1\r\nhost: x\r\n\r\n".encode())
    assert got == status
    assert "error" in orjson.loads(payload)


async def test_keep_alive_serves_several_requests_on_one_connection(upstream, start_gateway):
    gateway = await start_gateway(one_model_config(upstream.url))
    reader, writer = await asyncio.open_connection("127.0.0.1", gateway.bound_port)
    body = b'{"model": "m1", "messages": [{"role": "user", "content": "x"}]}'
    for _ in range(3):
        writer.write(post(CHAT, body))
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        assert b"200 OK" in head
        await reader.readexactly(length)
    writer.close()
    assert len(upstream.log.requests) == 3
