"""Chat completions <-> an upstream that speaks Anthropic's Messages API (`api: anthropic`).

- `anthropic_request(chat)`: a chat/completions body as a Messages body.
- `chat_completion(message)`: a Messages answer as a chat completion (usage with cache reads/writes).
- `AnthropicToChat`: a Messages event stream in, chat SSE chunks out, one chunk at a time.
- `chat_error(body)`: an Anthropic error body as an OpenAI-shaped one.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from sits.errors import InvalidRequest
from sits.translate.sse import DONE_EVENT, SseSplitter, data_event
from sits.translate.usage import chat_usage_from_anthropic

DEFAULT_MAX_TOKENS = 4096  # Anthropic requires max_tokens; a chat client may leave it out
FINISH = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "tool_use": "tool_calls",
          "refusal": "content_filter", "pause_turn": "stop"}


def _image_block(url: str) -> dict[str, Any]:
    if url.startswith("data:") and ";base64," in url:
        media_type, data = url[5:].split(";base64,", 1)
        return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}
    return {"type": "image", "source": {"type": "url", "url": url}}


def _blocks(content: Any, param: str) -> list[dict[str, Any]]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if not isinstance(content, list):
        raise InvalidRequest(f"'{param}' must be a string or a list of content parts", param=param)
    out = []
    for i, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            out.append({"type": "text", "text": str(part.get("text", ""))})
        elif kind == "image_url":
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            if not isinstance(url, str):
                raise InvalidRequest(f"'{param}[{i}].image_url.url' must be a string", param=f"{param}[{i}].image_url")
            out.append(_image_block(url))
        else:
            raise InvalidRequest(f"'{param}[{i}].type' {kind!r} cannot be sent to an Anthropic-API model",
                                 param=f"{param}[{i}].type")
    return out


def anthropic_request(chat: dict[str, Any]) -> dict[str, Any]:
    system: list[str] = []
    messages: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if messages and messages[-1]["role"] == role:  # Anthropic wants turns to alternate: merge
            messages[-1]["content"] += blocks
        else:
            messages.append({"role": role, "content": blocks})

    for i, message in enumerate(chat.get("messages") or ()):
        param = f"messages[{i}]"
        role = message.get("role") if isinstance(message, dict) else None
        if role in ("system", "developer"):
            system.append("".join(b["text"] for b in _blocks(message.get("content"), f"{param}.content")))
        elif role == "user":
            add("user", _blocks(message.get("content"), f"{param}.content"))
        elif role == "assistant":
            blocks: list[dict[str, Any]] = []
            if isinstance(message.get("thinking_blocks"), list):
                blocks += message["thinking_blocks"]
            blocks += _blocks(message.get("content"), f"{param}.content")
            for call in message.get("tool_calls") or ():
                function = call.get("function") or {}
                try:
                    arguments = orjson.loads(function.get("arguments") or "{}")
                except orjson.JSONDecodeError:
                    raise InvalidRequest(f"'{param}.tool_calls' has arguments that are not JSON",
                                         param=f"{param}.tool_calls") from None
                blocks.append({"type": "tool_use", "id": call.get("id"), "name": function.get("name"),
                               "input": arguments if isinstance(arguments, dict) else {"value": arguments}})
            add("assistant", blocks)
        elif role == "tool":
            content = message.get("content")
            text = content if isinstance(content, str) else "".join(
                b["text"] for b in _blocks(content, f"{param}.content"))
            add("user", [{"type": "tool_result", "tool_use_id": message.get("tool_call_id"), "content": text}])
        else:
            raise InvalidRequest(f"'{param}.role' {role!r} cannot be sent to an Anthropic-API model",
                                 param=f"{param}.role")
    body: dict[str, Any] = {"model": chat.get("model"), "messages": messages,
                            "max_tokens": chat.get("max_tokens") or chat.get("max_completion_tokens")
                            or DEFAULT_MAX_TOKENS}
    if system:
        body["system"] = "\n\n".join(system)
    for name in ("temperature", "top_p", "top_k", "thinking"):
        if chat.get(name) is not None:
            body[name] = chat[name]
    stop = chat.get("stop")
    if stop:
        body["stop_sequences"] = [stop] if isinstance(stop, str) else stop
    if isinstance(chat.get("user"), str):
        body["metadata"] = {"user_id": chat["user"]}
    if chat.get("tools"):
        body["tools"] = [{"name": t["function"]["name"], "description": t["function"].get("description", ""),
                          "input_schema": t["function"].get("parameters") or {"type": "object", "properties": {}}}
                         for t in chat["tools"] if isinstance(t, dict) and isinstance(t.get("function"), dict)]
    choice = chat.get("tool_choice")
    if choice is not None:
        if choice == "auto":
            body["tool_choice"] = {"type": "auto"}
        elif choice == "required":
            body["tool_choice"] = {"type": "any"}
        elif choice == "none":
            body["tool_choice"] = {"type": "none"}
        elif isinstance(choice, dict) and isinstance(choice.get("function"), dict):
            body["tool_choice"] = {"type": "tool", "name": choice["function"].get("name")}
        if chat.get("parallel_tool_calls") is False and "tool_choice" in body:
            body["tool_choice"]["disable_parallel_tool_use"] = True
    if chat.get("stream") is True:
        body["stream"] = True
    return body


def chat_completion(message: Any, created: int | None = None) -> dict[str, Any]:
    if not isinstance(message, dict) or not isinstance(message.get("content"), list):
        raise InvalidRequest("the Anthropic-API upstream's answer is not a message", param="model")
    text, reasoning, calls, thinking = [], [], [], []
    for block in message["content"]:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            text.append(str(block.get("text", "")))
        elif kind in ("thinking", "redacted_thinking"):
            thinking.append(block)
            reasoning.append(str(block.get("thinking", "")))
        elif kind == "tool_use":
            calls.append({"id": block.get("id"), "type": "function",
                          "function": {"name": block.get("name"), "arguments": orjson.dumps(block.get("input") or {}
                                                                                             ).decode()}})
    chat_message: dict[str, Any] = {"role": "assistant", "content": "".join(text) if text or not calls else None}
    if calls:
        chat_message["tool_calls"] = calls
    if thinking:
        chat_message["reasoning_content"] = "".join(reasoning)
        chat_message["thinking_blocks"] = thinking
    return {"id": "chatcmpl-" + str(message.get("id", "")), "object": "chat.completion",
            "created": created if created is not None else int(time.time()), "model": message.get("model"),
            "choices": [_choice({"index": 0, "message": chat_message, "logprobs": None,
                                 "finish_reason": FINISH.get(str(message.get("stop_reason")), "stop")}, message)],
            "usage": chat_usage_from_anthropic(message.get("usage"))}


def _choice(choice: dict[str, Any], said: dict[str, Any]) -> dict[str, Any]:
    """A finished choice naming the stop sequence Anthropic's answer (`said`) stopped on, as vLLM does
    (`stop_reason`), so the Messages surface can say it again."""
    if said.get("stop_reason") == "stop_sequence" and isinstance(said.get("stop_sequence"), str):
        choice["stop_reason"] = said["stop_sequence"]
    return choice


def chat_error(body: bytes, status: int) -> bytes:
    """An Anthropic error body (`{"type":"error","error":{"type","message"}}`) in OpenAI's shape."""
    try:
        parsed = orjson.loads(body)
        error = parsed["error"]
        message, kind = str(error.get("message", "")), str(error.get("type", "api_error"))
    except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
        message, kind = body[:2000].decode("utf-8", "replace"), "api_error"
    return orjson.dumps({"error": {"message": message, "type": kind, "param": None, "code": f"upstream_{status}"}})


class AnthropicToChat:
    """A Messages SSE stream in, chat-completion SSE chunks out (with the usage chunk when asked)."""

    def __init__(self, include_usage: bool, created: int | None = None) -> None:
        self._splitter = SseSplitter("anthropic upstream")
        self._include_usage = include_usage
        self._created = created if created is not None else int(time.time())
        self._id = "chatcmpl-"
        self._model: Any = None
        self._usage: dict[str, Any] = {}
        self._blocks: dict[int, tuple[str, int]] = {}  # block index -> (kind, tool call index)
        self._tools = 0
        self._finish: str | None = None
        self.done = False
        self.started = False  # message_start came (or was missing: then `missing_start`)
        self.missing_start = False  # the upstream began with another event: no input usage to report

    def _chunk(self, delta: dict[str, Any], finish: str | None = None, said: dict[str, Any] | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return data_event({"id": self._id, "object": "chat.completion.chunk", "created": self._created,
                           "model": self._model, "choices": [_choice(choice, said) if said else choice]})

    def feed(self, chunk: bytes) -> bytes:
        out: list[bytes] = []
        for event in self._splitter.feed(chunk):
            if self.done or not event.data:
                continue
            try:
                data = orjson.loads(event.data)
            except orjson.JSONDecodeError:
                continue
            if isinstance(data, dict):
                self._event(event.name or str(data.get("type", "")), data, out)
        return b"".join(out)

    def _event(self, name: str, data: dict[str, Any], out: list[bytes]) -> None:
        if not self.started and name not in ("message_start", "ping", "error"):
            # Some servers (llama-server, now and then) open with a content block: a chat stream still
            # begins with the assistant's role; the input tokens are unknown.
            self.started = self.missing_start = True
            out.append(self._chunk({"role": "assistant", "content": ""}))
        if name == "message_start":
            self.started = True
            message = data.get("message") or {}
            self._id = "chatcmpl-" + str(message.get("id", ""))
            self._model = message.get("model")
            self._usage.update(message.get("usage") or {})
            out.append(self._chunk({"role": "assistant", "content": ""}))
        elif name == "content_block_start":
            index, block = data.get("index", 0), data.get("content_block") or {}
            kind = block.get("type")
            if kind == "tool_use":
                self._blocks[index] = ("tool", self._tools)
                out.append(self._chunk({"tool_calls": [{"index": self._tools, "id": block.get("id"), "type": "function",
                                                        "function": {"name": block.get("name"), "arguments": ""}}]}))
                self._tools += 1
            else:
                self._blocks[index] = (str(kind), -1)
                if kind == "text" and block.get("text"):
                    out.append(self._chunk({"content": block["text"]}))
        elif name == "content_block_delta":
            delta = data.get("delta") or {}
            kind = delta.get("type")
            if kind == "text_delta":
                out.append(self._chunk({"content": delta.get("text", "")}))
            elif kind == "thinking_delta":
                out.append(self._chunk({"reasoning_content": delta.get("thinking", "")}))
            elif kind == "input_json_delta":
                _, call = self._blocks.get(data.get("index", 0), ("tool", 0))
                out.append(self._chunk({"tool_calls": [{"index": call,
                                                        "function": {"arguments": delta.get("partial_json", "")}}]}))
        elif name == "message_delta":
            self._usage.update(data.get("usage") or {})
            said = data.get("delta") or {}
            self._finish = FINISH.get(str(said.get("stop_reason")), "stop")
            out.append(self._chunk({}, self._finish, said))
        elif name == "message_stop":
            if self._finish is None:
                out.append(self._chunk({}, "stop"))
            if self._include_usage:
                out.append(data_event({"id": self._id, "object": "chat.completion.chunk", "created": self._created,
                                       "model": self._model, "choices": [],
                                       "usage": chat_usage_from_anthropic(self._usage)}))
            out.append(DONE_EVENT)
            self.done = True
        elif name == "error":
            error = data.get("error") or {}
            out.append(data_event({"error": {"message": str(error.get("message", "upstream error")),
                                             "type": str(error.get("type", "api_error")), "param": None,
                                             "code": "upstream_stream_error"}}))
            self.done = True
        # ping and unknown events: nothing to relay
