"""SitsError -> OpenAI-shaped JSON. The only place errors become HTTP."""

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
