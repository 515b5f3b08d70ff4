"""SitsError -> HTTP: OpenAI-shaped JSON, or Anthropic-shaped for the Messages API. The only place
errors become HTTP."""

from __future__ import annotations

import orjson

from sits.api.http_types import HttpResponse
from sits.errors import SitsError, UpstreamStatusError


def render_error(error: SitsError) -> HttpResponse:
    if isinstance(error, UpstreamStatusError):
        relayed = _relay_upstream_client_error(error)
        if relayed is not None:
            return relayed
    body = orjson.dumps(
        {"error": {"message": error.message, "type": error.error_type, "param": error.param, "code": error.code}}
    )
    headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in error.headers]
    return HttpResponse(error.http_status, body, headers=headers)


def _relay_upstream_client_error(error: UpstreamStatusError) -> HttpResponse | None:
    """An upstream 4xx is about the request (bad parameter, context too long): pass it on as-is
    when it is already OpenAI-shaped, so the client sees the model server's own explanation."""
    status = error.upstream_status
    if not 400 <= status < 500:
        return None
    try:
        parsed = orjson.loads(error.body)
    except orjson.JSONDecodeError:
        parsed = None
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
        return HttpResponse(status, error.body)
    message = error.body.decode("utf-8", "replace")[:2000] or error.message
    body = orjson.dumps({"error": {"message": message, "type": "invalid_request_error" if status != 429 else
                                   "rate_limit_error", "param": None, "code": f"upstream_{status}"}})
    return HttpResponse(status, body)


_ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                    404: "not_found_error", 413: "request_too_large", 422: "invalid_request_error",
                    429: "rate_limit_error", 503: "overloaded_error", 529: "overloaded_error"}


def anthropic_error(error: SitsError) -> HttpResponse:
    """A SitsError in the Messages API's shape (the field in the message, as Anthropic writes it);
    its headers (Retry-After, the limit) kept."""
    status, message = error.http_status, error.message
    if isinstance(error, UpstreamStatusError) and 400 <= error.upstream_status < 500:
        status, message = error.upstream_status, _upstream_message(error.body) or message
    if error.param and error.param not in message:
        message = f"{error.param}: {message}"
    kind = _ANTHROPIC_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in error.headers]
    return HttpResponse(status, orjson.dumps({"type": "error", "error": {"type": kind, "message": message}}),
                        headers=headers)


def _upstream_message(body: bytes) -> str | None:
    try:
        error = orjson.loads(body).get("error")
    except (orjson.JSONDecodeError, AttributeError):
        return body[:2000].decode("utf-8", "replace") or None
    return str(error.get("message")) if isinstance(error, dict) and error.get("message") else None
