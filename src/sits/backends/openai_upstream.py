"""Backend for OpenAI-compatible upstreams (vLLM, SGLang, llama.cpp server, Ollama /v1, hosted APIs)."""

from __future__ import annotations

from sits.backends import anthropic_upstream
from sits.backends.http_client import ConnectionPool, Origin, Timeouts
from sits.backends.upstream_response import UpstreamBody
from sits.errors import UpstreamStatusError
from sits.state.routing_table import Endpoint


class _EncodedEndpoint:
    """The parts of an endpoint's requests that never change, encoded once."""

    __slots__ = ("endpoint", "pool", "origin", "timeouts", "path_prefix", "static_headers", "host_header")

    def __init__(self, endpoint: Endpoint, pool: ConnectionPool) -> None:
        self.endpoint = endpoint
        self.pool = pool
        self.origin = Origin(endpoint.scheme, endpoint.host, endpoint.port)
        t = endpoint.timeouts
        self.timeouts = Timeouts(connect=t.connect_s, first_byte=t.first_byte_s, total=t.total_s)
        self.path_prefix = endpoint.base_path.encode()
        default_port = 443 if endpoint.scheme == "https" else 80
        host = endpoint.host if endpoint.port == default_port else f"{endpoint.host}:{endpoint.port}"
        if ":" in endpoint.host and endpoint.port != default_port:
            host = f"[{endpoint.host}]:{endpoint.port}"
        self.host_header = f"host: {host}\r\n".encode("latin-1")
        headers = [f"host: {host}", "content-type: application/json", "user-agent: sits"]
        if endpoint.api == "anthropic":
            headers.append(f"anthropic-version: {anthropic_upstream.ANTHROPIC_VERSION}")
            if endpoint.api_key:
                headers.append(f"x-api-key: {endpoint.api_key}")
        elif endpoint.api_key:
            headers.append(f"authorization: Bearer {endpoint.api_key}")
        self.static_headers = ("\r\n".join(headers) + "\r\n").encode("latin-1")


class OpenAIUpstream:
    """`send()` posts one JSON body to an endpoint and returns once headers are in.

    A status >= 400 raises `UpstreamStatusError` carrying the upstream body, so
    callers decide what to relay and what to retry.
    """

    def __init__(self, pool: ConnectionPool, guarded_pool: ConnectionPool | None = None) -> None:
        self._pool = pool
        self._guarded_pool = guarded_pool or pool
        # Keyed by endpoint id, checked by identity: keyed by the frozen Endpoint itself, every request
        # hashed all its fields (nested timeouts included). A changed endpoint is a new object.
        self._encoded: dict[str, _EncodedEndpoint] = {}

    def _encode(self, endpoint: Endpoint) -> _EncodedEndpoint:
        enc = self._encoded.get(endpoint.id)
        if enc is None or enc.endpoint is not endpoint:
            pool = self._guarded_pool if endpoint.guarded else self._pool
            enc = self._encoded[endpoint.id] = _EncodedEndpoint(endpoint, pool)
        return enc

    async def send(self, endpoint: Endpoint, api_path: bytes, body: bytes, request_id: str,
                   trace_headers: bytes = b"") -> UpstreamBody:
        """`trace_headers`: ready-encoded `traceparent` / `baggage` lines (each ending in CRLF), or empty."""
        enc = self._encoded.get(endpoint.id)
        if enc is None or enc.endpoint is not endpoint:
            enc = self._encode(endpoint)
        if endpoint.api == "anthropic":
            return await self._send_anthropic(enc, api_path, body, request_id, trace_headers)
        data = b"".join((
            b"POST ", enc.path_prefix, api_path, b" HTTP/1.1\r\n",
            enc.static_headers, trace_headers,
            b"x-request-id: ", request_id.encode("latin-1"),
            b"\r\ncontent-length: %d\r\n\r\n" % len(body),
            body,
        ))
        response = await enc.pool.request(enc.origin, data, enc.timeouts)
        if response.status >= 400:
            payload = await response.read()
            raise UpstreamStatusError(
                f"upstream {endpoint.id} answered HTTP {response.status}",
                upstream_status=response.status,
                body=payload[:65536],
            )
        return response

    async def _send_anthropic(self, enc: _EncodedEndpoint, api_path: bytes, body: bytes, request_id: str,
                              trace_headers: bytes) -> UpstreamBody:
        """The chat request as a Messages request; the answer comes back as chat completions."""
        endpoint = enc.endpoint
        messages_body, stream, include_usage = anthropic_upstream.request_body(api_path, body, endpoint.id)
        data = b"".join((
            b"POST ", enc.path_prefix, anthropic_upstream.MESSAGES_PATH, b" HTTP/1.1\r\n",
            enc.static_headers, trace_headers,
            b"x-request-id: ", request_id.encode("latin-1"),
            b"\r\ncontent-length: %d\r\n\r\n" % len(messages_body),
            messages_body,
        ))
        response = await enc.pool.request(enc.origin, data, enc.timeouts)
        if response.status >= 400:
            payload = await response.read()
            raise UpstreamStatusError(
                f"upstream {endpoint.id} answered HTTP {response.status}",
                upstream_status=response.status,
                body=anthropic_upstream.error_body(payload[:65536], response.status),
            )
        return anthropic_upstream.AnthropicResponse(response, stream, include_usage)

    async def probe(self, endpoint: Endpoint, path: str, timeout_s: float) -> int:
        """GET a health path on the endpoint's origin (never a billed completion); the HTTP status."""
        enc = self._encode(endpoint)
        data = b"GET " + path.encode("latin-1") + b" HTTP/1.1\r\n" + enc.host_header + b"user-agent: sits-health\r\n\r\n"
        timeouts = Timeouts(connect=min(timeout_s, enc.timeouts.connect), first_byte=timeout_s, total=timeout_s)
        response = await enc.pool.request(enc.origin, data, timeouts)
        await response.read()
        return response.status

    def forget(self, keep: set[Endpoint]) -> None:
        """Drop cached encodings of endpoints no longer in the routing table."""
        kept = {e.id for e in keep}
        for endpoint_id in [i for i, enc in self._encoded.items() if i not in kept or enc.endpoint not in keep]:
            del self._encoded[endpoint_id]
