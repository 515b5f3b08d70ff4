"""Who may call what: the admin key for the control API, optional keys for the data plane."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable

from sits.api.http_types import HttpRequest
from sits.errors import Forbidden, Unauthorized


def bearer_token(request: HttpRequest) -> str | None:
    """The token of an `Authorization: Bearer ...` header, else of `x-api-key` (how Anthropic's
    clients send their key), if there is one."""
    value = request.headers.get("authorization", "")
    scheme, _, token = value.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return request.headers.get("x-api-key") or None


class AdminGuard:
    def __init__(self, admin_key: str | None) -> None:
        self._key = admin_key.encode() if admin_key else None

    @property
    def configured(self) -> bool:
        return self._key is not None

    def check(self, request: HttpRequest) -> None:
        if self._key is None:
            raise Forbidden("the control API is disabled: set SITS_ADMIN_KEY (or control.admin_key_env) to enable it")
        token = bearer_token(request)
        if token is None:
            raise Unauthorized("the control API needs 'Authorization: Bearer <admin key>'")
        if not hmac.compare_digest(token.encode(), self._key):  # constant time
            raise Unauthorized("invalid admin key")

    def is_admin(self, request: HttpRequest) -> bool:
        """Whether the request carries the admin key (for routes that also take other keys)."""
        token = bearer_token(request)
        return self._key is not None and token is not None and hmac.compare_digest(token.encode(), self._key)


class DataPlaneKeys:
    """Optional client keys. Keys are kept as SHA-256 digests, so a lookup reveals nothing by timing."""

    def __init__(self, keys: Iterable[str]) -> None:
        self._digests = {hashlib.sha256(k.encode()).digest() for k in keys if k}

    @property
    def enabled(self) -> bool:
        return bool(self._digests)

    def check(self, request: HttpRequest) -> None:
        token = bearer_token(request)
        if token is None:
            raise Unauthorized("this gateway needs 'Authorization: Bearer <api key>'")
        if hashlib.sha256(token.encode()).digest() not in self._digests:
            raise Unauthorized("invalid API key")
