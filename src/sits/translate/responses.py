"""The OpenAI Responses API <-> chat completions.

- `chat_request(body, history)`: a Responses create body (and the stored conversation it continues)
  as a chat/completions body, plus the input items in their Responses shape (for storage and
  `input_items`).
- `from_chat_completion(...)`: a chat completion as a Responses `response` object, written as JSON.
- `response_json`, `text_message`, `text_part`, `call_item`, `assistant_message`, `status_of`: the parts a response object
  and a stream's events are written from (`translate/responses_stream.py` writes the stream).

A response object is written as bytes from templates, as the stream writes its snapshots: the fields
that restate the request are serialised once per request shape (`fields_json`), the answer's text as
the one JSON string it is. Where it is stored, those bytes go into the stored record as they are.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from sits.errors import InvalidRequest
from sits.translate.usage import responses_usage

_CHAT_PASSTHROUGH = ("temperature", "top_p", "user", "parallel_tool_calls", "seed")
# What an SDK sends for `create(model=..., input=...)`, with or without `stream` and `store` (`plain`): a
# body of these fields alone has no other field to check, translate or restate, so each step skips their reads.
_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


def _bad(message: str, param: str) -> InvalidRequest:
    return InvalidRequest(message, param=param)


def plain(body: dict[str, Any]) -> bool:
    """Whether `body` holds no field beyond model, input, stream and store."""
    size = len(body)
    # four lookups of keys that are there anyway: cheaper, compiled, than walking the body against a set
    return size <= 4 and ("model" in body) + ("input" in body) + ("stream" in body) + ("store" in body) == size


def validate(body: Any) -> dict[str, Any]:
    """The create body's own checks (the field named in every error)."""
    if not isinstance(body, dict):
        raise _bad("the request body must be a JSON object", "body")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("'model' is required and must be a non-empty string", "model")
    if "input" not in body:
        raise _bad("'input' is required: a string or a list of input items", "input")
    if plain(body):
        stream, store = body.get("stream"), body.get("store")
        if (stream is None or type(stream) is bool) and (store is None or type(store) is bool):
            return body
    for name, top in (("temperature", 2), ("top_p", 1)):
        value = body.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)
                                  or not 0 <= value <= top):
            raise _bad(f"'{name}' must be a number from 0 to {top}", name)
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise _bad("'seed' must be an integer", "seed")
    user = body.get("user")
    if user is not None and not isinstance(user, str):
        raise _bad("'user' must be a string", "user")
    tokens = body.get("max_output_tokens")
    if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1):
        raise _bad("'max_output_tokens' must be a positive integer", "max_output_tokens")
    for name in ("stream", "store", "parallel_tool_calls"):
        value = body.get(name)
        if value is not None and not isinstance(value, bool):
            raise _bad(f"'{name}' must be a boolean", name)
    previous = body.get("previous_response_id")
    if previous is not None and (not isinstance(previous, str) or not previous):
        raise _bad("'previous_response_id' must be a response id string", "previous_response_id")
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise _bad("'instructions' must be a string", "instructions")
    return body


def input_items(body: dict[str, Any]) -> list[dict[str, Any]]:
    """`input` as a list of items (a string is one user message)."""
    value = body["input"]
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": value}]}]
    if not isinstance(value, list):
        raise _bad("'input' must be a string or a list of input items", "input")
    items = []
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise _bad(f"'input[{i}]' must be an object", f"input[{i}]")
        kind = item.get("type", "message")
        if kind == "message":
            content = item.get("content")
            if isinstance(content, str):
                part = "output_text" if item.get("role") == "assistant" else "input_text"
                item = {**item, "type": "message", "content": [{"type": part, "text": content}]}
            else:
                item = {**item, "type": "message"}
        items.append(item)
    return items


def chat_messages(items: list[dict[str, Any]], param: str = "input") -> list[dict[str, Any]]:
    """Responses input items as chat messages; consecutive function calls become one assistant turn."""
    messages: list[dict[str, Any]] = []
    for i, item in enumerate(items):
        where = f"{param}[{i}]"
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise _bad(f"'{where}.role' must be user, assistant, system or developer", f"{where}.role")
            messages.append({"role": "system" if role == "developer" else role,
                             "content": _chat_content(item.get("content"), f"{where}.content", role == "assistant")})
        elif kind == "function_call":
            call_id, name, arguments = item.get("call_id"), item.get("name"), item.get("arguments", "")
            if not isinstance(call_id, str) or not isinstance(name, str) or not isinstance(arguments, str):
                raise _bad(f"'{where}' needs string call_id, name and arguments", where)
            call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and last.get("tool_calls") is not None:
                last["tool_calls"].append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            call_id, output = item.get("call_id"), item.get("output")
            if not isinstance(call_id, str):
                raise _bad(f"'{where}.call_id' must be a string", f"{where}.call_id")
            if not isinstance(output, str):
                output = orjson.dumps(output).decode() if output is not None else ""
            messages.append({"role": "tool", "tool_call_id": call_id, "content": output})
        elif kind == "reasoning":
            continue  # the model's own reasoning summary: not part of the chat prompt
        else:
            raise _bad(f"'{where}.type' {kind!r} is not supported (message, function_call, function_call_output)",
                       f"{where}.type")
    return messages


def _chat_content(content: Any, param: str, assistant: bool) -> Any:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _bad(f"'{param}' must be a string or a list of content parts", param)
    parts: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text", "text"):
            text = part.get("text")
            if not isinstance(text, str):
                raise _bad(f"'{param}[{j}].text' must be a string", f"{param}[{j}].text")
            parts.append({"type": "text", "text": text})
        elif kind == "refusal":
            parts.append({"type": "text", "text": str(part.get("refusal", ""))})
        elif kind == "input_image":
            url = part.get("image_url")
            if not isinstance(url, str):
                raise _bad(f"'{param}[{j}].image_url' must be a URL or data URL (file_id is not supported)",
                           f"{param}[{j}].image_url")
            image: dict[str, Any] = {"url": url}
            if isinstance(part.get("detail"), str):
                image["detail"] = part["detail"]
            parts.append({"type": "image_url", "image_url": image})
        else:
            raise _bad(f"'{param}[{j}].type' {kind!r} is not supported (input_text, output_text, input_image)",
                       f"{param}[{j}].type")
    if assistant or all(p["type"] == "text" for p in parts):
        return "".join(p["text"] for p in parts if p["type"] == "text")  # the form every chat server takes
    return parts


def _chat_tools(tools: Any) -> list[dict[str, Any]]:
    if not isinstance(tools, list):
        raise _bad("'tools' must be a list", "tools")
    out = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type") != "function":
            kind = tool.get("type") if isinstance(tool, dict) else None
            raise _bad(f"'tools[{i}].type' {kind!r} is not supported: only function tools", f"tools[{i}].type")
        if not isinstance(tool.get("name"), str):
            raise _bad(f"'tools[{i}].name' must be a string", f"tools[{i}].name")
        function = {"name": tool["name"], "parameters": tool.get("parameters") or {"type": "object", "properties": {}}}
        if isinstance(tool.get("description"), str):
            function["description"] = tool["description"]
        if isinstance(tool.get("strict"), bool):
            function["strict"] = tool["strict"]
        out.append({"type": "function", "function": function})
    return out


def _chat_tool_choice(choice: Any) -> Any:
    if choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise _bad("'tool_choice' must be auto, none, required or {\"type\": \"function\", \"name\": ...}", "tool_choice")


def _response_format(text: Any) -> dict[str, Any] | None:
    if not isinstance(text, dict):
        raise _bad("'text' must be an object", "text")
    fmt = text.get("format")
    if fmt is None:
        return None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        if not isinstance(fmt.get("schema"), dict) or not isinstance(fmt.get("name"), str):
            raise _bad("'text.format' of type json_schema needs a name and a schema object", "text.format")
        schema = {"name": fmt["name"], "schema": fmt["schema"]}
        for key in ("strict", "description"):
            if key in fmt:
                schema[key] = fmt[key]
        return {"type": "json_schema", "json_schema": schema}
    raise _bad("'text.format.type' must be text, json_object or json_schema", "text.format.type")


def chat_request(body: dict[str, Any], history: list[dict[str, Any]], stream: bool,
                 ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(chat body, this request's input items: kept in the store, so none for a text input that is not
    stored). `history`: the chat messages of the conversation
    `previous_response_id` continues (its inputs and outputs), already in chat form."""
    value = body["input"]
    if type(value) is str:  # the common case: one user message, no item to convert
        items = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": value}]}] \
            if body.get("store") is not False else []
        messages = [{"role": "user", "content": value}]
    else:
        items = input_items(body)
        messages = chat_messages(items)
    instructions = body.get("instructions")
    prefix = [{"role": "system", "content": instructions}] if instructions else []
    chat: dict[str, Any] = {"model": body["model"], "messages": [*prefix, *history, *messages]}
    if not chat["messages"]:
        raise _bad("'input' holds no message for the model (and there are no instructions)", "input")
    if stream:
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    if plain(body):
        return chat, items
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = body["max_output_tokens"]
    for name in _CHAT_PASSTHROUGH:
        if body.get(name) is not None:
            chat[name] = body[name]
    if body.get("tools"):
        chat["tools"] = _chat_tools(body["tools"])
    if body.get("tool_choice") is not None:
        chat["tool_choice"] = _chat_tool_choice(body["tool_choice"])
    if body.get("text") is not None:
        response_format = _response_format(body["text"])
        if response_format is not None:
            chat["response_format"] = response_format
    return chat, items


# -- answers ------------------------------------------------------------------------------------------


def call_item(response_id: str, index: int, call_id: str, name: str, arguments: str, status: str) -> dict[str, Any]:
    return {"type": "function_call", "id": f"fc_{response_id[5:]}_{index}", "call_id": call_id, "name": name,
            "arguments": arguments, "status": status}


def response_fields(request: dict[str, Any]) -> dict[str, Any]:
    """The fields of a `response` object that restate the request (the same in every snapshot of it)."""
    fmt = request.get("text") if isinstance(request.get("text"), dict) else {"format": {"type": "text"}}
    fields = {
        "instructions": request.get("instructions"), "max_output_tokens": request.get("max_output_tokens"),
        "parallel_tool_calls": request.get("parallel_tool_calls", True),
        "previous_response_id": request.get("previous_response_id"), "store": request.get("store", True),
        "temperature": request.get("temperature"), "top_p": request.get("top_p"),
        "tool_choice": request.get("tool_choice", "auto"), "tools": request.get("tools") or [], "text": fmt,
        "metadata": request.get("metadata") or {}, "truncation": request.get("truncation", "disabled"),
    }
    if request.get("user") is not None:
        fields["user"] = request["user"]
    return fields


def fields_json(request: dict[str, Any]) -> bytes:
    """`response_fields` as the JSON members a response object's byte template takes (a stream writes
    the response in several snapshots); a plain request's are one of three constants."""
    if plain(request):
        store = request.get("store", True)
        if store is None or type(store) is bool:
            return _PLAIN_FIELDS_JSON[store]
    return orjson.dumps(response_fields(request))[1:-1]


_PLAIN_FIELDS_JSON: Final[dict[bool | None, bytes]] = {
    store: orjson.dumps(response_fields({"store": store}))[1:-1] for store in (True, False, None)}


def incomplete_details(status: str, finish: str | None) -> dict[str, Any] | None:
    return {"reason": _INCOMPLETE.get(finish or "", "max_output_tokens")} if status == "incomplete" else None


def response_json(response_id: bytes, created: bytes, status: bytes, model: bytes, output: bytes, error: bytes,
                  incomplete: bytes, fields: bytes, usage: bytes) -> bytes:
    """A response object as JSON, its members in the order the API documents them: each argument JSON
    already but `status` (the bare word) and `output` (the items, comma-separated); the members that
    restate the request are `fields` (`fields_json`). A bytes literal formatted at its use: compiled, one
    allocation (docs/hot-path.md)."""
    return (b'{"id":%b,"object":"response","created_at":%b,"status":"%b","model":%b,"output":[%b],'
            b'"error":%b,"incomplete_details":%b,%b,"usage":%b}'
            % (response_id, created, status, model, output, error, incomplete, fields, usage))


def text_part(text: bytes) -> bytes:
    """A finished text part, its text a JSON string."""
    return b'{"type":"output_text","text":%b,"annotations":[],"logprobs":[]}' % (text,)


def text_message(message_id: bytes, part: bytes) -> bytes:
    """A finished assistant message item with its one part (`text_part`)."""
    return b'{"type":"message","id":"%b","status":"completed","role":"assistant","content":[%b]}' % (message_id, part)


def message_id(response_id: str) -> bytes:
    """The id of a response's message item (`resp_<hex>` -> `msg_<hex>`), as it goes into JSON unescaped."""
    return b"msg_" + response_id[5:].encode()


def status_of(finish: str | None) -> str:
    return "incomplete" if finish in _INCOMPLETE else "completed"


def from_chat_completion(completion: Any, response_id: str, created: int, request: dict[str, Any]
                         ) -> tuple[bytes, dict[str, Any]]:
    """(the `response` object as JSON, the assistant's chat message) from a chat completion JSON object."""
    if not isinstance(completion, dict) or not isinstance(completion.get("choices"), list) \
            or not completion["choices"] or not isinstance(completion["choices"][0], dict):
        raise InvalidRequest("the model's answer is not a chat completion", param="model")
    choice: dict[str, Any] = completion["choices"][0]  # typed: compiled, its reads are dict operations
    message: dict[str, Any] = choice["message"] if isinstance(choice.get("message"), dict) else {}
    text: str = message["content"] if isinstance(message.get("content"), str) else ""
    calls = []
    for i, call in enumerate(message.get("tool_calls") or ()):
        function = call.get("function") or {}
        calls.append((str(call.get("id") or f"call_{i}"), str(function.get("name", "")),
                      str(function.get("arguments", ""))))
    finish = choice.get("finish_reason")
    model: str = completion["model"] if isinstance(completion.get("model"), str) else request["model"]
    output = [text_message(message_id(response_id), text_part(orjson.dumps(text)))] if text or not calls else []
    for i, (call_id, name, arguments) in enumerate(calls):
        output.append(orjson.dumps(call_item(response_id, i, call_id, name, arguments, "completed")))
    status = status_of(finish)
    details = incomplete_details(status, finish)
    body = response_json(orjson.dumps(response_id), b"%d" % created, status.encode(), orjson.dumps(model),
                         b",".join(output), b"null", b"null" if details is None else orjson.dumps(details),
                         fields_json(request), responses_usage(completion.get("usage")))
    return body, assistant_message(text, calls)


def assistant_message(text: str, calls: list[tuple[str, str, str]]) -> dict[str, Any]:
    """The answer as the chat message a later turn (previous_response_id) sends back."""
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = [{"id": c, "type": "function", "function": {"name": n, "arguments": a}}
                                 for c, n, a in calls]
    return message
