"""Backend for OpenAI-compatible upstreams (vLLM, SGLang, llama.cpp server, Ollama /v1, hosted APIs)."""

from __future__ import annotations

from sits.backends.http_client import ConnectionPool, Origin, Timeouts, UpstreamResponse
from sits.errors import UpstreamStatusError
from sits.state.routing_table import Endpoint


class _EncodedEndpoint:
    """The parts of an endpoint's requests that never change, encoded once."""

    __slots__ = ("origin", "timeouts", "path_prefix", "static_headers")

    def __init__(self, endpoint: Endpoint) -> None:
        self.origin = Origin(endpoint.scheme, endpoint.host, endpoint.port)
        t = endpoint.timeouts
        self.timeouts = Timeouts(connect=t.connect_s, first_byte=t.first_byte_s, total=t.total_s)
        self.path_prefix = endpoint.base_path.encode()
        default_port = 443 if endpoint.scheme == "https" else 80
        host = endpoint.host if endpoint.port == default_port else f"{endpoint.host}:{endpoint.port}"
        if ":" in endpoint.host and endpoint.port != default_port:
            host = f"[{endpoint.host}]:{endpoint.port}"
        headers = [f"host: {host}", "content-type: application/json", "user-agent: sits"]
        if endpoint.api_key:
            headers.append(f"authorization: Bearer {endpoint.api_key}")
        self.static_headers = ("\r\n".join(headers) + "\r\n").encode("latin-1")


class OpenAIUpstream:
    """`send()` posts one JSON body to an endpoint and returns once headers are in.

    A status >= 400 raises `UpstreamStatusError` carrying the upstream body, so
    callers decide what to relay and what to retry.
    """

    def __init__(self, pool: ConnectionPool) -> None:
        self._pool = pool
        self._encoded: dict[Endpoint, _EncodedEndpoint] = {}

    async def send(self, endpoint: Endpoint, api_path: bytes, body: bytes, request_id: str) -> UpstreamResponse:
        enc = self._encoded.get(endpoint)
        if enc is None:
            enc = self._encoded[endpoint] = _EncodedEndpoint(endpoint)
        data = b"".join((
            b"POST ", enc.path_prefix, api_path, b" HTTP/1.1\r\n",
            enc.static_headers,
            b"x-request-id: ", request_id.encode("latin-1"),
            b"\r\ncontent-length: %d\r\n\r\n" % len(body),
            body,
        ))
        response = await self._pool.request(enc.origin, data, enc.timeouts)
        if response.status >= 400:
            payload = await response.read()
            raise UpstreamStatusError(
                f"upstream {endpoint.id} answered HTTP {response.status}",
                upstream_status=response.status,
                body=payload[:65536],
            )
        return response

    def forget(self, keep: set[Endpoint]) -> None:
        """Drop cached encodings of endpoints no longer in the routing table."""
        for endpoint in [e for e in self._encoded if e not in keep]:
            del self._encoded[endpoint]
