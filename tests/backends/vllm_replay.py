"""A test server that answers vLLM's admin endpoints with responses recorded from vLLM's OpenAI server.

Bodies and statuses are byte-for-byte what vLLM sends (vllm/entrypoints/openai/
api_server.py and serving_models.py): plain-text success messages from `Response(content=...)`,
`ErrorResponse` JSON for errors, empty 200s from the sleep endpoints, `{"is_sleeping": ...}` JSON.
It keeps the state those answers depend on (loaded adapters, sleeping) and logs every call.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson
from aiohttp import web

from tests.loopback_server import LoopbackServer


def vllm_error(message: str, err_type: str, code: int) -> web.Response:
    # ErrorResponse(error=ErrorInfo(message, type, param=None, code)).model_dump() via JSONResponse
    body = orjson.dumps({"error": {"message": message, "type": err_type, "param": None, "code": code}})
    return web.Response(status=code, body=body, content_type="application/json")


def plain(text: str) -> web.Response:
    # starlette Response(status_code=200, content=text): the bare text. (vLLM sends no content-type;
    # aiohttp adds application/octet-stream. The client reads the status and body only.)
    return web.Response(status=200, body=text.encode())


@dataclass
class ReplayLog:
    calls: list[tuple[str, str, dict | None]] = field(default_factory=list)


class VllmReplay(LoopbackServer):
    def __init__(self, served_model: str = "HuggingFaceTB/SmolLM2-135M-Instruct", sleep_mode: bool = True,
                 legacy_errors: bool = False) -> None:
        super().__init__()
        self.served_model = served_model
        self.sleep_mode = sleep_mode  # False: a server started without VLLM_SERVER_DEV_MODE (routes absent: 404)
        self.legacy_errors = legacy_errors  # vLLM < 0.9: {"object": "error", "message", "type", "param", "code"}
        self.loras: dict[str, str] = {}
        self.sleeping = False
        self.sleep_level = 0
        self.log = ReplayLog()
        self.fail_load_with: tuple[int, str] | None = None
        self.authorizations: list[str | None] = []

    async def start(self) -> None:
        app = web.Application(middlewares=[self._note_auth])
        app.router.add_post("/v1/load_lora_adapter", self._load)
        app.router.add_post("/v1/unload_lora_adapter", self._unload)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        if self.sleep_mode:
            app.router.add_post("/sleep", self._sleep)
            app.router.add_post("/wake_up", self._wake_up)
            app.router.add_get("/is_sleeping", self._is_sleeping)
        await self.serve(app)

    @web.middleware
    async def _note_auth(self, request: web.Request, handler):  # type: ignore[no-untyped-def]
        self.authorizations.append(request.headers.get("authorization"))
        return await handler(request)

    def _error(self, message: str, err_type: str, code: int) -> web.Response:
        if self.legacy_errors:
            body = orjson.dumps({"object": "error", "message": message, "type": err_type, "param": None,
                                 "code": code})
            return web.Response(status=code, body=body, content_type="application/json")
        return vllm_error(message, err_type, code)

    async def _load(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.log.calls.append(("POST", "/v1/load_lora_adapter", body))
        if self.fail_load_with is not None:
            return self._error(self.fail_load_with[1], "BadRequestError", self.fail_load_with[0])
        name, path = body.get("lora_name"), body.get("lora_path")
        if not name or not path:
            return self._error("Both 'lora_name' and 'lora_path' must be provided.", "InvalidUserInput", 400)
        if name in self.loras and not body.get("load_inplace"):
            return self._error(f"The lora adapter '{name}' has already been loaded.", "InvalidUserInput", 400)
        self.loras[name] = path
        return plain(f"Success: LoRA adapter '{name}' added successfully.")

    async def _unload(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.log.calls.append(("POST", "/v1/unload_lora_adapter", body))
        name = body.get("lora_name")
        if not name:
            return self._error("'lora_name' needs to be provided to unload a LoRA adapter.", "InvalidUserInput", 400)
        if name not in self.loras:
            return self._error(f"The lora adapter '{name}' cannot be found.", "NotFoundError", 404)
        del self.loras[name]
        return plain(f"Success: LoRA adapter '{name}' removed successfully.")

    async def _sleep(self, request: web.Request) -> web.Response:
        self.log.calls.append(("POST", f"/sleep?{request.query_string}", None))
        self.sleeping, self.sleep_level = True, int(request.query.get("level", "1"))
        return web.Response(status=200)

    async def _wake_up(self, request: web.Request) -> web.Response:
        self.log.calls.append(("POST", f"/wake_up?{request.query_string}".rstrip("?"), None))
        self.sleeping, self.sleep_level = False, 0
        return web.Response(status=200)

    async def _is_sleeping(self, request: web.Request) -> web.Response:
        self.log.calls.append(("GET", "/is_sleeping", None))
        return web.Response(body=orjson.dumps({"is_sleeping": self.sleeping}), content_type="application/json")

    async def _models(self, request: web.Request) -> web.Response:
        data = [{"id": self.served_model, "object": "model", "owned_by": "vllm", "root": self.served_model,
                 "parent": None}]
        data += [{"id": n, "object": "model", "owned_by": "vllm", "root": p, "parent": self.served_model}
                 for n, p in self.loras.items()]
        return web.Response(body=orjson.dumps({"object": "list", "data": data}), content_type="application/json")

    async def _chat(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.log.calls.append(("POST", "/v1/chat/completions", body))
        model = body.get("model")
        if self.sleeping:
            return self._error("The model is sleeping.", "ServiceUnavailableError", 503)
        if model != self.served_model and model not in self.loras:
            return self._error(f"The model `{model}` does not exist.", "NotFoundError", 404)
        answer = {"id": "chatcmpl-replay", "object": "chat.completion", "created": 1, "model": model,
                  "choices": [{"index": 0, "message": {"role": "assistant", "content": f"served by {model}"},
                               "finish_reason": "stop"}],
                  "usage": {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}}
        return web.Response(body=orjson.dumps(answer), content_type="application/json")
