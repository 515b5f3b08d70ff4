"""The one exception tree. Foreign exceptions are translated where they enter;
`api/` turns these into OpenAI-shaped JSON and is the only place that does."""

from __future__ import annotations


class SitsError(Exception):
    """Base of every error SITS raises on purpose."""

    http_status: int = 500
    code: str = "internal_error"
    error_type: str = "server_error"
    retryable: bool = False

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        http_status: int | None = None,
        headers: tuple[tuple[str, str], ...] = (),
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code
        if http_status is not None:
            self.http_status = http_status
        self.headers = headers


class ClientError(SitsError):
    """The request is wrong; retrying it unchanged cannot help."""

    http_status = 400
    code = "invalid_request"
    error_type = "invalid_request_error"


class InvalidRequest(ClientError):
    http_status = 400


class UnprocessableRequest(ClientError):
    http_status = 422
    code = "invalid_value"


class ModelNotFound(ClientError):
    http_status = 404
    code = "model_not_found"


class NotFound(ClientError):
    http_status = 404
    code = "not_found"


class MethodNotAllowed(ClientError):
    http_status = 405
    code = "method_not_allowed"


class Unauthorized(ClientError):
    http_status = 401
    code = "invalid_api_key"
    error_type = "authentication_error"


class Forbidden(ClientError):
    http_status = 403
    code = "forbidden"
    error_type = "permission_error"


class Conflict(ClientError):
    http_status = 409
    code = "conflict"


class PreconditionFailed(ClientError):
    """If-Match named a registry version that is no longer current."""

    http_status = 412
    code = "registry_version_mismatch"


class PayloadTooLarge(ClientError):
    http_status = 413
    code = "payload_too_large"


class HeadersTooLarge(ClientError):
    http_status = 431
    code = "headers_too_large"


class ContextTooLong(ClientError):
    http_status = 400
    code = "context_length_exceeded"


class ModelNotCapable(ClientError):
    """The request needs a capability (tools, vision, json output) that no model it may go to declares."""

    http_status = 400
    code = "model_not_capable"


class Overloaded(SitsError):
    """No capacity now; the client should retry later (Retry-After)."""

    http_status = 503
    code = "overloaded"
    error_type = "overloaded_error"
    retryable = True


class UpstreamError(SitsError):
    """The model server failed us."""

    http_status = 502
    code = "upstream_error"
    error_type = "upstream_error"
    retryable = True


class UpstreamConnectError(UpstreamError):
    code = "upstream_connect_error"


class UpstreamTimeout(UpstreamError):
    http_status = 504
    code = "upstream_timeout"


class UpstreamStatusError(UpstreamError):
    """The upstream answered with a status we do not relay as-is."""

    code = "upstream_bad_status"

    def __init__(self, message: str, *, upstream_status: int, body: bytes = b"") -> None:
        super().__init__(message)
        self.upstream_status = upstream_status
        self.body = body
        self.retryable = upstream_status == 429 or upstream_status >= 500


class UpstreamProtocolError(UpstreamError):
    code = "upstream_protocol_error"


class UpstreamConnectionLost(UpstreamProtocolError):
    """The connection closed under an exchange: the server went away (a restart, a crash), as a refused
    connection says too, rather than answering badly."""


class ConfigError(SitsError):
    """Configuration is invalid; raised at startup with the path of the offending key."""

    code = "config_error"


class SlotActionsUnsupported(UpstreamError):
    """The llama.cpp server cannot save or restore slots (started without `--slot-save-path`)."""

    http_status = 501
    code = "slot_actions_unsupported"
    retryable = False


class SlotActionFailed(UpstreamError):
    """A llama.cpp slot save, restore or erase was refused: a file missing from the server's
    slot-save-path, no room in its KV cache, an invalid file name or slot."""

    code = "slot_action_failed"
    retryable = False


class RateLimited(ClientError):
    """A key's or team's limit (rpm, tpm, concurrency) or hard budget is reached: retry after `Retry-After`.
    `param` names the limit."""

    http_status = 429
    code = "rate_limit_exceeded"
    error_type = "rate_limit_error"
