"""SitsError -> gRPC status: the HTTP API's error, carried in gRPC's own terms.

The error is rendered exactly as the HTTP door renders it (render_error), so the status message is
the same text a JSON client reads in `error.message` (an upstream's relayed 4xx included), and the
rest of the OpenAI error object travels as trailing metadata.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc
import orjson

from sits.api.error_responses import render_error
from sits.errors import SitsError

_BY_HTTP_STATUS = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    401: grpc.StatusCode.UNAUTHENTICATED,
    403: grpc.StatusCode.PERMISSION_DENIED,
    404: grpc.StatusCode.NOT_FOUND,
    405: grpc.StatusCode.UNIMPLEMENTED,
    409: grpc.StatusCode.ABORTED,
    412: grpc.StatusCode.FAILED_PRECONDITION,
    413: grpc.StatusCode.RESOURCE_EXHAUSTED,
    422: grpc.StatusCode.INVALID_ARGUMENT,
    429: grpc.StatusCode.RESOURCE_EXHAUSTED,
    431: grpc.StatusCode.RESOURCE_EXHAUSTED,
    501: grpc.StatusCode.UNIMPLEMENTED,
    502: grpc.StatusCode.UNAVAILABLE,
    503: grpc.StatusCode.UNAVAILABLE,
    504: grpc.StatusCode.DEADLINE_EXCEEDED,
}
# 502s that are not "try again": the model server answered, but with something that is not the protocol.
_BY_CODE = {"upstream_protocol_error": grpc.StatusCode.INTERNAL}


@dataclass(frozen=True, slots=True)
class GrpcStatus:
    code: grpc.StatusCode
    message: str
    trailing_metadata: tuple[tuple[str, str], ...]


def grpc_status(error: SitsError) -> GrpcStatus:
    response = render_error(error)
    try:
        body = orjson.loads(response.body)["error"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        body = {"message": error.message, "type": error.error_type, "code": error.code, "param": error.param}
    message = str(body.get("message") or error.message)
    error_code = str(body.get("code") or "")
    code = _BY_CODE.get(error_code) or _BY_HTTP_STATUS.get(response.status) or (
        grpc.StatusCode.INVALID_ARGUMENT if 400 <= response.status < 500 else grpc.StatusCode.INTERNAL)
    metadata = [("sits-http-status", str(response.status))]
    for key in ("type", "code", "param"):  # a relayed upstream error object may lack some of them
        if body.get(key) is not None and body.get(key) != "":
            metadata.append((f"sits-error-{key}", str(body[key])))
    metadata += [(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in response.headers]
    return GrpcStatus(code, message, tuple((k, metadata_value(v)) for k, v in metadata))


def metadata_value(value: str) -> str:
    """gRPC ASCII metadata allows printable ASCII only."""
    if value.isascii() and value.isprintable():
        return value
    return "".join(c if c.isascii() and c.isprintable() else "?" for c in value)
