"""The HTTP/1.1 edge: one serving task per connection answers its requests in order, waits between
them, and never counts an idle keep-alive connection as busy (shutdown must not wait for it)."""

from __future__ import annotations

import asyncio
import gc

import orjson

from sits.api.http_server import HttpServerProtocol
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


def _protocols() -> int:
    """Connection protocols the cyclic collector tracks: every live one, and any kept only by a cycle. (A
    weak reference would not do: the compiled class does not clear its weak references when freed.)"""
    return sum(1 for o in gc.get_objects() if type(o) is HttpServerProtocol)


async def _freed_without_the_collector(gateway, send: bytes) -> None:
    """One request on a fresh connection, closed by the client; the connection's protocol must be freed
    by reference counting alone (the cyclic collector is off meanwhile)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", gateway.bound_port)
    for _ in range(200):  # at most 2 s for the gateway to accept it
        if gateway._tracker.connections:
            break
        await asyncio.sleep(0.01)
    assert _protocols() == 1
    writer.write(send)
    head, _ = await read_response(reader)
    assert b"200 OK" in head
    writer.close()
    for _ in range(200):  # at most 2 s for the close to reach the gateway and its task to end
        if not gateway._tracker.connections and _protocols() == 0:
            break
        await asyncio.sleep(0.01)
    assert not gateway._tracker.connections
    assert _protocols() == 0


async def test_a_closed_connection_is_freed_without_the_cyclic_collector(upstream, start_gateway):
    # A burst of connections must not leave its protocols (and their parsers, buffers and tasks) for the
    # collector to find later: with the gateway's raised collection threshold that can be long after.
    gateway = await start_gateway(one_model_config(upstream.url))
    gc.collect()
    gc.disable()
    try:
        await _freed_without_the_collector(gateway, post(CHAT, chat_body("kept alive, then closed")))
        await _freed_without_the_collector(gateway, post(CHAT, chat_body("closed"), b"connection: close\r\n"))
    finally:
        gc.enable()
