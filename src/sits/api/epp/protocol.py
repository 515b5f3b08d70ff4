"""The endpoint-picker protocol's wire pieces over Envoy's ext_proc messages (docs/envoy.md).

Read: request headers (`raw_value`, else `value`), the subset hint in the request's filter metadata
(`envoy.lb.subset_hint` / `x-gateway-destination-endpoint-subset`, a list or a comma-separated
string of `ip:port` or bare `ip`), the body modes Envoy announces in `protocol_config`, and the
endpoint that served the request (`envoy.lb` / `x-gateway-destination-endpoint-served`).
Written: the `x-gateway-destination-endpoint` header and the same value under `envoy.lb` in
dynamic metadata, the body sent back (streamed chunks in full-duplex mode, a replacement in buffered
mode) and ImmediateResponses with OpenAI-shaped JSON bodies.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import orjson
from envoy.config.core.v3 import base_pb2
from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.type.v3 import http_status_pb2
from google.protobuf import struct_pb2

from sits.errors import SitsError
from sits.state.routing_table import Endpoint

DESTINATION = "x-gateway-destination-endpoint"
DESTINATION_NAMESPACE = "envoy.lb"
SERVED = "x-gateway-destination-endpoint-served"
SUBSET_NAMESPACE = "envoy.lb.subset_hint"
SUBSET = "x-gateway-destination-endpoint-subset"
BODY_CHUNK_BYTES = 62_000  # a streamed body response stays under the 64 KiB some proxies allow per chunk
FULL_DUPLEX = processing_mode_pb2.ProcessingMode.FULL_DUPLEX_STREAMED
_BUFFERED = frozenset({processing_mode_pb2.ProcessingMode.BUFFERED, processing_mode_pb2.ProcessingMode.BUFFERED_PARTIAL})
_OVERWRITE = base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD


def header_map(headers: pb.HttpHeaders) -> dict[str, str]:
    """Lower-case names to values (the last of a repeated name wins, as the HTTP door's parser does)."""
    out: dict[str, str] = {}
    for h in headers.headers.headers:
        out[h.key.lower()] = h.raw_value.decode("latin-1") if h.raw_value else h.value
    return out


def buffered_request_body(message: pb.ProcessingRequest) -> bool:
    """Whether Envoy buffers the request body (it then waits for the headers' answer before sending the
    body). Full-duplex streaming, the protocol's mode, is assumed when Envoy does not say."""
    return message.HasField("protocol_config") and message.protocol_config.request_body_mode in _BUFFERED


def duplex_response_body(message: pb.ProcessingRequest) -> bool:
    """Whether the response body is streamed to us in full-duplex mode (then we must send it back)."""
    return message.HasField("protocol_config") and message.protocol_config.response_body_mode == FULL_DUPLEX


def subset_hint(message: pb.ProcessingRequest) -> frozenset[str] | None:
    """The endpoints the proxy allows (`ip:port` or `ip`), or None when it sets no hint."""
    namespace = message.metadata_context.filter_metadata.get(SUBSET_NAMESPACE)
    if namespace is None or SUBSET not in namespace.fields:
        return None
    value = namespace.fields[SUBSET]
    texts = [v.string_value for v in value.list_value.values] if value.HasField("list_value") \
        else [value.string_value]
    return frozenset(part.strip() for text in texts for part in text.split(",") if part.strip())


def served_endpoint(message: pb.ProcessingRequest) -> str | None:
    """The `ip:port` that served the request, when the proxy reports it (on the response path)."""
    namespace = message.metadata_context.filter_metadata.get(DESTINATION_NAMESPACE)
    if namespace is None or SERVED not in namespace.fields:
        return None
    return namespace.fields[SERVED].string_value or None


def address(endpoint: Endpoint) -> str:
    host = endpoint.host
    return f"[{host}]:{endpoint.port}" if ":" in host and not host.startswith("[") else f"{host}:{endpoint.port}"


def subset_filter(subset: frozenset[str]) -> tuple[frozenset[tuple[str, int]], frozenset[str]]:
    """(host, port) pairs and bare hosts (any port) of a subset hint."""
    pairs, hosts = set(), set()
    for entry in subset:
        host, sep, port = entry.rpartition(":")
        if sep and port.isdigit() and (":" not in host or host.startswith("[")):
            pairs.add((host.strip("[]"), int(port)))
        else:
            hosts.add(entry.strip("[]"))
    return frozenset(pairs), frozenset(hosts)


def _header(name: str, value: str) -> base_pb2.HeaderValueOption:
    return base_pb2.HeaderValueOption(header=base_pb2.HeaderValue(key=name, raw_value=value.encode("latin-1")),
                                      append_action=_OVERWRITE)


def destination_mutation(destinations: str, extra: Iterable[tuple[str, str]] = ()) -> pb.HeaderMutation:
    return pb.HeaderMutation(set_headers=[_header(DESTINATION, destinations), *(_header(k, v) for k, v in extra)])


def destination_metadata(destinations: str) -> struct_pb2.Struct:
    metadata = struct_pb2.Struct()
    metadata.fields[DESTINATION_NAMESPACE].struct_value.fields[DESTINATION].string_value = destinations
    return metadata


def headers_answer(common: pb.CommonResponse, metadata: struct_pb2.Struct | None = None) -> pb.ProcessingResponse:
    return pb.ProcessingResponse(request_headers=pb.HeadersResponse(response=common), dynamic_metadata=metadata)


def body_answer(common: pb.CommonResponse, metadata: struct_pb2.Struct | None = None) -> pb.ProcessingResponse:
    return pb.ProcessingResponse(request_body=pb.BodyResponse(response=common), dynamic_metadata=metadata)


def streamed_body(body: bytes, end_of_stream: bool, response: bool = False) -> list[pb.ProcessingResponse]:
    """`body` sent back in full-duplex mode, in chunks; the last one carries `end_of_stream`."""
    chunks = [body[i:i + BODY_CHUNK_BYTES] for i in range(0, len(body), BODY_CHUNK_BYTES)] or [b""]
    out = []
    for i, chunk in enumerate(chunks):
        common = pb.CommonResponse(body_mutation=pb.BodyMutation(streamed_response=pb.StreamedBodyResponse(
            body=chunk, end_of_stream=end_of_stream and i == len(chunks) - 1)))
        out.append(pb.ProcessingResponse(response_body=pb.BodyResponse(response=common)) if response
                   else body_answer(common))
    return out


def immediate(error: SitsError, extra: Mapping[str, str] | None = None) -> pb.ProcessingResponse:
    """The request answered here, never sent upstream: the error as the HTTP door renders it."""
    body = orjson.dumps({"error": {"message": error.message, "type": error.error_type, "param": error.param,
                                   "code": error.code}})
    headers = [("content-type", "application/json"), *error.headers, *(extra or {}).items()]
    return pb.ProcessingResponse(immediate_response=pb.ImmediateResponse(
        status=http_status_pb2.HttpStatus(code=error.http_status),  # type: ignore[arg-type]
        headers=pb.HeaderMutation(set_headers=[_header(k, v) for k, v in headers]),
        body=body, details=f"sits_epp_{error.code}"))


CONTINUE = pb.CommonResponse()
TRAILERS_CONTINUE = pb.ProcessingResponse(request_trailers=pb.TrailersResponse())
RESPONSE_TRAILERS_CONTINUE = pb.ProcessingResponse(response_trailers=pb.TrailersResponse())
RESPONSE_HEADERS_CONTINUE = pb.ProcessingResponse(response_headers=pb.HeadersResponse(response=CONTINUE))
RESPONSE_BODY_CONTINUE = pb.ProcessingResponse(response_body=pb.BodyResponse(response=CONTINUE))
