"""vLLM's administrative endpoints: dynamic LoRA adapters and sleep mode.

Shapes, as vLLM's OpenAI server defines them:

- `POST /v1/load_lora_adapter` {"lora_name", "lora_path"[, "load_inplace"]}: 200 with the plain text
  "Success: LoRA adapter '<name>' added successfully."; errors are JSON
  {"error": {"message", "type", "param", "code"}} (older releases: the same keys at the top level
  with "object": "error"), e.g. 400 "The lora adapter '<name>' has already been loaded.".
  Needs `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True` on the server.
- `POST /v1/unload_lora_adapter` {"lora_name"}: 200 "Success: LoRA adapter '<name>' removed
  successfully."; 404 "The lora adapter '<name>' cannot be found.".
- `POST /sleep?level=1`, `POST /wake_up[?tags=weights]`: 200 with an empty body.
- `GET /is_sleeping`: {"is_sleeping": bool}. Sleep endpoints need `VLLM_SERVER_DEV_MODE=1` and
  `--enable-sleep-mode`; a server without them answers 404.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from sits.backends.endpoint_call import endpoint_call
from sits.backends.http_client import ConnectionPool, Timeouts
from sits.errors import Conflict, InvalidRequest, NotFound, UpstreamProtocolError, UpstreamStatusError
from sits.state.routing_table import Endpoint

ADMIN_TIMEOUTS = Timeouts(connect=5.0, first_byte=120.0, total=180.0)  # loading weights or waking takes seconds


@dataclass(frozen=True, slots=True)
class EngineAnswer:
    status: int
    body: bytes

    def error_message(self) -> str:
        """vLLM's error message from either error shape, else the body as text."""
        try:
            data = orjson.loads(self.body)
        except orjson.JSONDecodeError:
            return self.body.decode("utf-8", "replace")[:500]
        if isinstance(data, dict):
            inner = data.get("error") if isinstance(data.get("error"), dict) else data
            message = inner.get("message") or inner.get("detail")
            if isinstance(message, str):
                return message
        return self.body.decode("utf-8", "replace")[:500]

    def is_engine_error(self) -> bool:
        """Whether the body is vLLM's own error shape, not a web framework's answer for a route it lacks
        (FastAPI's {"detail": "Not Found"}, or any other server's 404 page)."""
        try:
            data = orjson.loads(self.body)
        except orjson.JSONDecodeError:
            return False
        if not isinstance(data, dict):
            return False
        inner = data.get("error") if isinstance(data.get("error"), dict) else data
        return isinstance(inner.get("message"), str)


class VllmAdmin:
    """Admin calls to one vLLM server at a time; the endpoint gives the origin and the API key."""

    def __init__(self, pool: ConnectionPool, timeouts: Timeouts = ADMIN_TIMEOUTS) -> None:
        self._pool = pool
        self._timeouts = timeouts

    async def load_lora_adapter(self, endpoint: Endpoint, name: str, path: str, *, inplace: bool = False) -> str:
        body: dict[str, object] = {"lora_name": name, "lora_path": path}
        if inplace:
            body["load_inplace"] = True
        answer = await self._call(endpoint, "POST", "/v1/load_lora_adapter", body)
        if answer.status == 400 and "already been loaded" in answer.error_message():
            raise Conflict(f"{endpoint.id}: adapter {name!r} is already loaded", param="name")
        if answer.status in (404, 405) and not answer.is_engine_error():
            # vLLM answers 404 too when it cannot find the adapter's files, but in its own error shape
            raise UpstreamStatusError(
                f"{endpoint.id}: the upstream does not offer vLLM's dynamic LoRA API (POST /v1/load_lora_adapter "
                f"answered {answer.status}; vLLM serves it with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True)",
                upstream_status=answer.status, body=answer.body[:2048])
        return self._text(endpoint, answer, "load_lora_adapter")

    async def unload_lora_adapter(self, endpoint: Endpoint, name: str) -> str:
        answer = await self._call(endpoint, "POST", "/v1/unload_lora_adapter", {"lora_name": name})
        if answer.status == 404:
            raise NotFound(f"{endpoint.id}: {answer.error_message()}", param="name")
        return self._text(endpoint, answer, "unload_lora_adapter")

    async def served_models(self, endpoint: Endpoint) -> frozenset[str]:
        """The model names the engine serves now: its base model and every LoRA adapter it has loaded
        (vLLM lists adapters in `/v1/models` with `parent` set to the base)."""
        answer = await self._call(endpoint, "GET", f"{endpoint.base_path}/models", None)
        self._text(endpoint, answer, "models")
        try:
            return frozenset(str(m["id"]) for m in orjson.loads(answer.body)["data"])
        except (orjson.JSONDecodeError, KeyError, TypeError):
            raise UpstreamProtocolError(f"{endpoint.id}: /models answered {answer.body[:200]!r}") from None

    async def sleep(self, endpoint: Endpoint, level: int = 1) -> None:
        if level not in (1, 2):
            raise InvalidRequest("vLLM sleep levels are 1 (offload weights) and 2 (discard weights)", param="level")
        self._text(endpoint, await self._call(endpoint, "POST", f"/sleep?level={level}", None), "sleep")

    async def wake_up(self, endpoint: Endpoint, tags: tuple[str, ...] = ()) -> None:
        query = "&".join(f"tags={t}" for t in tags)
        path = f"/wake_up?{query}" if query else "/wake_up"
        self._text(endpoint, await self._call(endpoint, "POST", path, None), "wake_up")

    async def is_sleeping(self, endpoint: Endpoint) -> bool:
        answer = await self._call(endpoint, "GET", "/is_sleeping", None)
        self._text(endpoint, answer, "is_sleeping")
        try:
            value = orjson.loads(answer.body)["is_sleeping"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            raise UpstreamProtocolError(f"{endpoint.id}: /is_sleeping answered {answer.body[:200]!r}") from None
        if not isinstance(value, bool):
            raise UpstreamProtocolError(f"{endpoint.id}: /is_sleeping answered {answer.body[:200]!r}")
        return value

    async def _call(self, endpoint: Endpoint, method: str, path: str, body: dict[str, object] | None) -> EngineAnswer:
        return EngineAnswer(*await endpoint_call(self._pool, endpoint, method, path, self._timeouts, body))

    @staticmethod
    def _text(endpoint: Endpoint, answer: EngineAnswer, what: str) -> str:
        if answer.status != 200:
            raise UpstreamStatusError(f"{endpoint.id}: {what} failed ({answer.status}): {answer.error_message()}",
                                      upstream_status=answer.status, body=answer.body[:2048])
        return answer.body.decode("utf-8", "replace")
