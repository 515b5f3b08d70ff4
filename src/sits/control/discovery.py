"""Discovery: read an OpenAI-compatible server's /v1/models."""

from __future__ import annotations

import orjson

from sits.backends.address_policy import AddressPolicy, check_url
from sits.backends.http_client import ConnectionPool, Origin, Timeouts
from sits.control.table_builder import split_endpoint_url
from sits.errors import UpstreamProtocolError, UpstreamStatusError


async def discover_models(base_url: str, pool: ConnectionPool, policy: AddressPolicy) -> list[str]:
    await check_url(base_url, policy, param="base_url")
    scheme, host, port, base_path = split_endpoint_url(base_url)
    host_header = host if ":" not in host else f"[{host}]"
    request = f"GET {base_path}/models HTTP/1.1\r\nhost: {host_header}:{port}\r\naccept: application/json\r\n\r\n"
    response = await pool.request(Origin(scheme, host, port), request.encode("latin-1"), Timeouts(5, 10, 10))
    body = await response.read()
    if response.status != 200:
        raise UpstreamStatusError(f"{base_url}/models answered HTTP {response.status}",
                                  upstream_status=response.status, body=body)
    try:
        data = orjson.loads(body)["data"]
        return [str(m["id"]) for m in data]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        raise UpstreamProtocolError(f"{base_url}/models did not answer an OpenAI model list") from None
