"""The HTTP/1.1 edge: one serving task per connection answers its requests in order, waits between
them, and never counts an idle keep-alive connection as busy (shutdown must not wait for it)."""

from __future__ import annotations

import asyncio

import orjson

from tests.api.test_bad_input import post
from tests.conftest import one_model_config

CHAT = "/v1/chat/completions"


def chat_body(text: str) -> bytes:
    return orjson.dumps({"model": "m1", "messages": [{"role": "user", "content": text}]})


async def read_response(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    return head, await asyncio.wait_for(reader.readexactly(length), 10)


async def test_pipelined_requests_are_answered_in_order(upstream, start_gateway):
    gateway = await start_gateway(one_model_config(upstream.url))
    reader, writer = await asyncio.open_connection("127.0.0.1", gateway.bound_port)
    ids = [b"first", b"second", b"third"]
    writer.write(b"".join(post(CHAT, chat_body(i.decode()), b"x-request-id: %b\r\n" % i) for i in ids))
    answered = [await read_response(reader) for _ in ids]
    writer.close()
    assert [head.split(b"x-request-id: ")[1].split(b"\r\n")[0] for head, _ in answered] == ids
    assert all(b"200 OK" in head for head, _ in answered)
    assert len(upstream.log.requests) == 3


async def test_a_connection_idle_between_requests_is_served_again(upstream, start_gateway):
    gateway = await start_gateway(one_model_config(upstream.url))
    reader, writer = await asyncio.open_connection("127.0.0.1", gateway.bound_port)
    writer.write(post(CHAT, chat_body("one")))
    head, _ = await read_response(reader)
    assert b"200 OK" in head
    await asyncio.sleep(0.2)  # the connection's task now waits for the next request
    writer.write(post(CHAT, chat_body("two")))
    head, _ = await read_response(reader)
    writer.close()
    assert b"200 OK" in head
    assert len(upstream.log.requests) == 2


async def test_shutdown_closes_idle_keep_alive_connections_without_waiting_for_them(upstream, start_gateway):
    # A 60 s drain: stop() returning within 10 s means the idle connection was never counted as busy.
    gateway = await start_gateway(one_model_config(upstream.url, drain_timeout_s=60))
    reader, writer = await asyncio.open_connection("127.0.0.1", gateway.bound_port)
    writer.write(post(CHAT, chat_body("hello")))
    head, _ = await read_response(reader)
    assert b"200 OK" in head
    await asyncio.wait_for(gateway.stop(), 10)
    assert await asyncio.wait_for(reader.read(), 5) == b""  # the gateway closed it
    writer.close()
