"""Upstreams for the surface tests: a chat-completions server that calls a tool when the request
offers one (and thinks aloud in `reasoning_content`), and a server that speaks Anthropic's Messages
API with prompt-cache usage. Real HTTP on loopback; the behaviour under test is the gateway's."""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from tests.loopback_server import LoopbackServer

TOOL_ARGS = '{"city": "Paris"}'


class ScriptedUpstream:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.paths: list[str] = []
        self.anthropic_status = 200  # an error status for /v1/messages when set
        # With a stop string set: the answer stopped on it, and says so (chat: vLLM's `stop_reason`;
        # Messages: stop_reason "stop_sequence" and `stop_sequence`).
        self.stopped_on: str | None = None
        self._server = LoopbackServer()

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_post("/v1/responses", self._responses)
        await self._server.serve(app)

    async def stop(self) -> None:
        await self._server.stop()

    @property
    def port(self) -> int:
        return self._server.port

    @property
    def url(self) -> str:
        return self._server.url + "/v1"

    async def _record(self, request: web.Request) -> dict[str, Any]:
        body = orjson.loads(await request.read())
        self.requests.append(body)
        self.headers.append({k.lower(): v for k, v in request.headers.items()})
        self.paths.append(request.path)
        return body

    # -- chat completions ---------------------------------------------------------------------------

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await self._record(request)
        wants_tool = bool(body.get("tools")) and body.get("tool_choice") != "none" \
            and not any(m.get("role") == "tool" for m in body["messages"])
        usage = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18,
                 "prompt_tokens_details": {"cached_tokens": 3}}
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "reasoning_content": "thinking it over"}
            if wants_tool:
                message["content"] = None
                message["tool_calls"] = [{"id": "call_1", "type": "function",
                                          "function": {"name": body["tools"][0]["function"]["name"],
                                                       "arguments": TOOL_ARGS}}]
            else:
                message["content"] = "It is sunny."
            choice = {"index": 0, "message": message, "finish_reason": "tool_calls" if wants_tool else "stop"}
            if self.stopped_on is not None:
                choice["stop_reason"] = self.stopped_on
            return web.json_response({
                "id": "chatcmpl-s", "object": "chat.completion", "created": 1, "model": body["model"],
                "choices": [choice], "usage": usage})
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)

        async def send(delta: dict[str, Any], finish: str | None = None) -> None:
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            if finish is not None and self.stopped_on is not None:
                choice["stop_reason"] = self.stopped_on
            chunk = {"id": "chatcmpl-s", "object": "chat.completion.chunk", "created": 1, "model": body["model"],
                     "choices": [choice]}
            await response.write(b"data: " + orjson.dumps(chunk) + b"\n\n")

        await send({"role": "assistant", "content": ""})
        await send({"reasoning_content": "thinking "})
        await send({"reasoning_content": "it over"})
        if wants_tool:
            name = body["tools"][0]["function"]["name"]
            await send({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                        "function": {"name": name, "arguments": ""}}]})
            for piece in ('{"city": ', '"Paris"}'):
                await send({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
            await send({}, "tool_calls")
        else:
            for piece in ("It is ", "sunny."):
                await send({"content": piece})
            await send({}, "stop")
        if (body.get("stream_options") or {}).get("include_usage"):
            chunk = {"id": "chatcmpl-s", "object": "chat.completion.chunk", "created": 1, "model": body["model"],
                     "choices": [], "usage": usage}
            await response.write(b"data: " + orjson.dumps(chunk) + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    # -- Anthropic's Messages API ------------------------------------------------------------------

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        body = await self._record(request)
        if self.anthropic_status != 200:
            return web.json_response({"type": "error", "error": {"type": "invalid_request_error",
                                                                 "message": "messages: roles must alternate"}},
                                     status=self.anthropic_status)
        wants_tool = bool(body.get("tools")) and not any(
            isinstance(m["content"], list) and any(b.get("type") == "tool_result" for b in m["content"])
            for m in body["messages"])
        usage = {"input_tokens": 20, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 30}
        if not body.get("stream"):
            content: list[dict[str, Any]] = [{"type": "thinking", "thinking": "hmm", "signature": "sig-1"}]
            if wants_tool:
                content.append({"type": "tool_use", "id": "toolu_1", "name": body["tools"][0]["name"],
                                "input": {"city": "Paris"}})
            else:
                content.append({"type": "text", "text": "Bonjour."})
            return web.json_response({"id": "msg_up", "type": "message", "role": "assistant", "model": body["model"],
                                      "content": content, "stop_reason": self._stop_reason(wants_tool),
                                      "stop_sequence": self.stopped_on, "usage": {**usage, "output_tokens": 9}})
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)

        async def send(name: str, data: dict[str, Any]) -> None:
            await response.write(b"event: " + name.encode() + b"\ndata: " + orjson.dumps({"type": name, **data})
                                 + b"\n\n")

        await send("message_start", {"message": {"id": "msg_up", "type": "message", "role": "assistant",
                                                 "model": body["model"], "content": [], "stop_reason": None,
                                                 "usage": {**usage, "output_tokens": 1}}})
        await send("ping", {})
        await send("content_block_start", {"index": 0, "content_block": {"type": "thinking", "thinking": ""}})
        await send("content_block_delta", {"index": 0, "delta": {"type": "thinking_delta", "thinking": "hmm"}})
        await send("content_block_stop", {"index": 0})
        if wants_tool:
            await send("content_block_start", {"index": 1, "content_block": {
                "type": "tool_use", "id": "toolu_1", "name": body["tools"][0]["name"], "input": {}}})
            for piece in ('{"city": ', '"Paris"}'):
                await send("content_block_delta", {"index": 1, "delta": {"type": "input_json_delta",
                                                                         "partial_json": piece}})
        else:
            await send("content_block_start", {"index": 1, "content_block": {"type": "text", "text": ""}})
            for piece in ("Bon", "jour."):
                await send("content_block_delta", {"index": 1, "delta": {"type": "text_delta", "text": piece}})
        await send("content_block_stop", {"index": 1})
        await send("message_delta", {"delta": {"stop_reason": self._stop_reason(wants_tool),
                                               "stop_sequence": self.stopped_on}, "usage": {"output_tokens": 9}})
        await send("message_stop", {})
        await response.write_eof()
        return response


    def _stop_reason(self, wants_tool: bool) -> str:
        return "tool_use" if wants_tool else "stop_sequence" if self.stopped_on is not None else "end_turn"

    # -- the Responses API (an upstream that declares `api: responses`) ------------------------------

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        """Answers with the input it was sent (as text) and a stream without `event:` lines, ending with
        `response.failed` when the input says "fail", with a line that is no SSE after its text when it
        says "garbage"."""
        body = await self._record(request)
        said = orjson.dumps(body["input"]).decode()
        response = {"id": f"resp_up{len(self.requests)}", "object": "response", "status": "completed",
                    "model": body["model"], "output": [{"type": "message", "id": "msg_up", "role": "assistant",
                                                        "status": "completed", "content": [
                                                            {"type": "output_text", "text": said, "annotations": []}]}],
                    "usage": {"input_tokens": 12, "output_tokens": 4, "total_tokens": 16,
                              "input_tokens_details": {"cached_tokens": 2}},
                    "scripted": True}
        if not body.get("stream"):
            return web.json_response(response)
        stream = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await stream.prepare(request)
        opened = {"id": response["id"], "object": "response", "status": "in_progress"}
        events = [{"type": "response.created", "response": opened},
                  {"type": "response.output_text.delta", "item_id": "msg_up", "delta": said}]
        if "fail" in said:
            events.append({"type": "response.failed", "response": {**opened, "status": "failed",
                                                                   "error": {"code": "server_error",
                                                                             "message": "scripted failure"}}})
        else:
            events.append({"type": "response.completed", "response": response})
        wire = [b"data: " + orjson.dumps(e) + b"\n\n" for e in events]
        if "garbage" in said:
            wire.insert(2, b"<html>oops</html>\n\n")  # after the text
        data = b"".join(wire)
        for i in range(0, len(data), 37):  # cut anywhere, as a network does
            await stream.write(data[i:i + 37])
        await stream.write_eof()
        return stream
