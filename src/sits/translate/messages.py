"""The Anthropic Messages API (client side) <-> chat completions.

- `chat_request(body)`: a Messages create body as a chat/completions body.
- `message_object(completion)`: a chat completion as a Messages `message`.
- `stop_of(finish, matched, stop_sequences)`: a chat finish_reason (and the stop string the server
  says it matched) as a Messages stop_reason and stop_sequence (`translate/messages_stream.py` writes
  the stream).

Thinking passes through: `thinking` blocks of earlier assistant turns ride on the chat message as
`reasoning_content` (the text) and `thinking_blocks` (the blocks as sent, signatures included); a
chat answer's `reasoning_content` becomes a `thinking` block.
"""

from __future__ import annotations

from typing import Any

import orjson

from sits.errors import InvalidRequest
from sits.translate.chat_delta import matched_stop
from sits.translate.usage import anthropic_usage

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "function_call": "tool_use",
                "content_filter": "refusal"}


def _bad(message: str, param: str) -> InvalidRequest:
    return InvalidRequest(message, param=param)


def _text_of(blocks: Any, param: str) -> str:
    """A string, or a list of text blocks, as one string (system prompts, tool results)."""
    if isinstance(blocks, str):
        return blocks
    if not isinstance(blocks, list):
        raise _bad(f"'{param}' must be a string or a list of text blocks", param)
    out = []
    for i, block in enumerate(blocks):
        if not isinstance(block, dict) or block.get("type") != "text" or not isinstance(block.get("text"), str):
            raise _bad(f"'{param}[{i}]' must be a text block", f"{param}[{i}]")
        out.append(block["text"])
    return "\n".join(out)


def validate(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise _bad("the request body must be a JSON object", "body")
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise _bad("model: Field required (a non-empty string)", "model")
    tokens = body.get("max_tokens")
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
        raise _bad("max_tokens: Field required (a positive integer)", "max_tokens")
    if not isinstance(body.get("messages"), list):
        raise _bad("messages: Field required (a list of messages)", "messages")
    for name, top in (("temperature", 2), ("top_p", 1)):
        value = body.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)
                                  or not 0 <= value <= top):
            raise _bad(f"{name}: must be a number from 0 to {top}", name)
    top_k = body.get("top_k")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int)):
        raise _bad("top_k: must be an integer", "top_k")
    stops = body.get("stop_sequences")
    if stops is not None and (not isinstance(stops, list) or not all(isinstance(s, str) for s in stops)):
        raise _bad("stop_sequences: must be a list of strings", "stop_sequences")
    if body.get("stream") is not None and not isinstance(body["stream"], bool):
        raise _bad("stream: must be a boolean", "stream")
    metadata = body.get("metadata")
    if metadata is not None and (not isinstance(metadata, dict) or
                                 not isinstance(metadata.get("user_id", ""), str | None)):
        raise _bad("metadata: must be an object with an optional string user_id", "metadata.user_id")
    return body


def _image_part(source: Any, param: str) -> dict[str, Any]:
    kind = source.get("type") if isinstance(source, dict) else None
    if kind == "base64" and isinstance(source.get("data"), str) and isinstance(source.get("media_type"), str):
        return {"type": "image_url", "image_url": {"url": f"data:{source['media_type']};base64,{source['data']}"}}
    if kind == "url" and isinstance(source.get("url"), str):
        return {"type": "image_url", "image_url": {"url": source["url"]}}
    raise _bad(f"'{param}.source' must be a base64 (media_type, data) or url image source", f"{param}.source")


def chat_messages(messages: list[Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            raise _bad(f"{where}.role: must be 'user' or 'assistant'", f"{where}.role")
        role, content = message["role"], message.get("content")
        if isinstance(content, str):
            out.append({"role": role, "content": content})
            continue
        if not isinstance(content, list):
            raise _bad(f"{where}.content: must be a string or a list of content blocks", f"{where}.content")
        parts: list[dict[str, Any]] = []
        calls: list[dict[str, Any]] = []
        thinking: list[dict[str, Any]] = []
        results: list[dict[str, Any]] = []
        for j, block in enumerate(content):
            at = f"{where}.content[{j}]"
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "text":
                if not isinstance(block.get("text"), str):
                    raise _bad(f"{at}.text: must be a string", f"{at}.text")
                parts.append({"type": "text", "text": block["text"]})
            elif kind == "image":
                parts.append(_image_part(block.get("source"), at))
            elif kind == "tool_use" and role == "assistant":
                if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
                    raise _bad(f"{at}: tool_use needs string id and name", at)
                calls.append({"id": block["id"], "type": "function",
                              "function": {"name": block["name"],
                                           "arguments": orjson.dumps(block.get("input") or {}).decode()}})
            elif kind == "tool_result" and role == "user":
                if not isinstance(block.get("tool_use_id"), str):
                    raise _bad(f"{at}.tool_use_id: must be a string", f"{at}.tool_use_id")
                result = block.get("content", "")
                text = _text_of(result, f"{at}.content") if result else ""
                if block.get("is_error"):
                    text = "Error: " + text
                results.append({"role": "tool", "tool_call_id": block["tool_use_id"], "content": text})
            elif kind in ("thinking", "redacted_thinking") and role == "assistant":
                thinking.append(block)
            else:
                raise _bad(f"{at}.type: {kind!r} is not supported in a {role} message (text, image, "
                           "tool_use, tool_result, thinking)", f"{at}.type")
        out += results  # tool results answer the previous assistant turn: they come first
        if role == "assistant":
            text = "".join(p["text"] for p in parts if p["type"] == "text")
            chat: dict[str, Any] = {"role": "assistant", "content": text or None}
            if calls:
                chat["tool_calls"] = calls
            if thinking:
                chat["reasoning_content"] = "".join(str(b.get("thinking", "")) for b in thinking)
                chat["thinking_blocks"] = thinking
            out.append(chat)
        elif parts:
            simple = all(p["type"] == "text" for p in parts)
            out.append({"role": "user", "content": "".join(p["text"] for p in parts) if simple else parts})
    return out


def _chat_tools(tools: Any) -> list[dict[str, Any]]:
    if not isinstance(tools, list):
        raise _bad("tools: must be a list", "tools")
    out = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            raise _bad(f"tools.{i}.name: Field required", f"tools[{i}].name")
        if tool.get("type") not in (None, "custom"):
            raise _bad(f"tools.{i}.type: server tool {tool.get('type')!r} is not supported", f"tools[{i}].type")
        function = {"name": tool["name"], "parameters": tool.get("input_schema") or {"type": "object", "properties": {}}}
        if isinstance(tool.get("description"), str):
            function["description"] = tool["description"]
        out.append({"type": "function", "function": function})
    return out


def _chat_tool_choice(choice: Any, chat: dict[str, Any]) -> None:
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind == "auto":
        chat["tool_choice"] = "auto"
    elif kind == "any":
        chat["tool_choice"] = "required"
    elif kind == "none":
        chat["tool_choice"] = "none"
    elif kind == "tool" and isinstance(choice.get("name"), str):
        chat["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
    else:
        raise _bad("tool_choice: type must be auto, any, tool (with a name) or none", "tool_choice")
    if choice.get("disable_parallel_tool_use") is True:
        chat["parallel_tool_calls"] = False


def chat_request(body: dict[str, Any], stream: bool) -> dict[str, Any]:
    messages = chat_messages(body["messages"])
    system = body.get("system")
    if system:
        messages.insert(0, {"role": "system", "content": _text_of(system, "system")})
    if not messages:
        raise _bad("messages: at least one message with content is required", "messages")
    chat: dict[str, Any] = {"model": body["model"], "messages": messages, "max_tokens": body["max_tokens"]}
    if stream:
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    for name in ("temperature", "top_p", "top_k"):
        if body.get(name) is not None:
            chat[name] = body[name]
    if body.get("stop_sequences"):
        chat["stop"] = body["stop_sequences"]
    user = (body.get("metadata") or {}).get("user_id")
    if isinstance(user, str):
        chat["user"] = user
    if body.get("tools"):
        chat["tools"] = _chat_tools(body["tools"])
    if body.get("tool_choice") is not None:
        _chat_tool_choice(body["tool_choice"], chat)
    if isinstance(body.get("thinking"), dict):
        chat["thinking"] = body["thinking"]  # passed through: servers that think take it, the others ignore it
    return chat


def stop_reason(finish: str | None) -> str:
    return STOP_REASONS.get(finish or "stop", "end_turn")


def stop_of(finish: str | None, matched: str | None, stop_sequences: Any) -> tuple[str, str | None]:
    """(stop_reason, stop_sequence): "stop_sequence" and the string when the chat server stopped on one of
    the client's `stop_sequences` and says which (`chat_stream.matched_stop`); a server that says only
    "stop" (llama-server) gives end_turn and null (docs/responses-and-messages.md, limits)."""
    if matched is not None and (finish or "stop") == "stop" and isinstance(stop_sequences, list) \
            and matched in stop_sequences:
        return "stop_sequence", matched
    return stop_reason(finish), None


def message_object(completion: Any, message_id: str, model: str, stop_sequences: Any = None) -> dict[str, Any]:
    """A chat completion JSON object as an Anthropic `message`."""
    if not isinstance(completion, dict) or not isinstance(completion.get("choices"), list) \
            or not completion["choices"] or not isinstance(completion["choices"][0], dict):
        raise InvalidRequest("the model's answer is not a chat completion", param="model")
    choice: dict[str, Any] = completion["choices"][0]  # typed: compiled, its reads are dict operations
    message: dict[str, Any] = choice["message"] if isinstance(choice.get("message"), dict) else {}
    content: list[dict[str, Any]] = []
    reasoning = message.get("reasoning_content")
    if isinstance(message.get("thinking_blocks"), list):
        content += message["thinking_blocks"]
    elif isinstance(reasoning, str) and reasoning:
        content.append({"type": "thinking", "thinking": reasoning, "signature": ""})
    if isinstance(message.get("content"), str) and message["content"]:
        content.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        content.append({"type": "tool_use", "id": str(call.get("id") or ""), "name": str(function.get("name", "")),
                        "input": _arguments(function.get("arguments"))})
    reason, sequence = stop_of(choice.get("finish_reason"), matched_stop(choice), stop_sequences)
    return {"id": message_id, "type": "message", "role": "assistant",
            "model": completion.get("model") if isinstance(completion.get("model"), str) else model,
            "content": content, "stop_reason": reason, "stop_sequence": sequence,
            "usage": orjson.Fragment(anthropic_usage(completion.get("usage")))}  # JSON already


def _arguments(raw: Any) -> Any:
    if not isinstance(raw, str) or not raw:
        return {}
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {"_raw_arguments": raw}  # the model wrote arguments that are not JSON: kept, not dropped
    return value if isinstance(value, dict) else {"value": value}
