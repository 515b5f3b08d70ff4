"""One request to a model server outside the OpenAI API it serves: its /metrics, /slots, vLLM's admin
routes. The upstream client's pool and connections, the endpoint's key as a bearer token, a JSON body if
any; the whole answer read."""

from __future__ import annotations

from collections.abc import Mapping

import orjson

from sits.backends.http_client import ConnectionPool, Origin, Timeouts
from sits.state.routing_table import Endpoint


async def endpoint_call(pool: ConnectionPool, endpoint: Endpoint, method: str, path: str, timeouts: Timeouts,
                        body: Mapping[str, object] | None = None,
                        accept: str = "application/json") -> tuple[int, bytes]:
    """(status, body) of `method path` on the endpoint's server."""
    host = endpoint.host if ":" not in endpoint.host else f"[{endpoint.host}]"
    payload = orjson.dumps(body) if body is not None else b""
    head = f"{method} {path} HTTP/1.1\r\nhost: {host}:{endpoint.port}\r\nuser-agent: sits\r\naccept: {accept}\r\n"
    if body is not None or method != "GET":
        head += f"content-type: application/json\r\ncontent-length: {len(payload)}\r\n"
    if endpoint.api_key:
        head += f"authorization: Bearer {endpoint.api_key}\r\n"
    response = await pool.request(Origin(endpoint.scheme, endpoint.host, endpoint.port),
                                  head.encode("latin-1") + b"\r\n" + payload, timeouts)
    return response.status, await response.read()
