"""llama.cpp's slot API: save a slot's KV cache to a file, restore it, erase it, list the slots.

    GET  /slots                                  per slot: id, n_ctx, is_processing, n_prompt_tokens
    POST /slots/{id}?action=save     {"filename"} -> n_saved tokens, n_written bytes, timings.save_ms
    POST /slots/{id}?action=restore  {"filename"} -> n_restored tokens, n_read bytes, timings.restore_ms
    POST /slots/{id}?action=erase                 -> n_erased tokens

Save and restore need the server started with `--slot-save-path DIR`; the file name is relative to that
folder (no path separators), on the server's own filesystem. Moving a cache between two servers therefore
needs a folder both see (same host, or a shared volume mounted at each server's slot-save-path).
A save or restore on a slot that is generating waits, inside the server, until that generation ends.
The server wraps slot ids around (`id % slots`), so ids are checked here against /slots.

Which slot holds a conversation: an OpenAI-format answer does not name its slot, and /slots shows no
prompt text (unless the server runs with LLAMA_SERVER_SLOTS_DEBUG), only each slot's cached prompt
length. A restored conversation is found again by the server itself, which gives a request the slot
whose cached prompt shares the longest prefix with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from sits.backends.endpoint_call import endpoint_call
from sits.backends.http_client import ConnectionPool, Timeouts
from sits.errors import SlotActionFailed, SlotActionsUnsupported, UpstreamProtocolError, UpstreamStatusError
from sits.state.routing_table import Endpoint

MAX_BODY_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class SlotState:
    id: int
    n_ctx: int
    processing: bool
    # prompt tokens held in the slot's KV cache, as of its last request (0: empty, or only restored:
    # the server shows a slot's prompt once a request has used it)
    cached_tokens: int


@dataclass(frozen=True, slots=True)
class SlotTransfer:
    """The outcome of a save or a restore."""

    slot: int
    filename: str
    tokens: int
    bytes: int
    ms: float  # the server's own time for the file write or read


class LlamaCppSlots:
    """A client of one llama.cpp server's slot API, through SITS's upstream pools."""

    def __init__(self, pool: ConnectionPool, guarded_pool: ConnectionPool, timeout_s: float = 60.0) -> None:
        self._pool = pool
        self._guarded_pool = guarded_pool  # endpoints registered at runtime (address policy)
        # a save or restore on a busy slot waits for its generation: the first byte may take a while
        self._timeouts = Timeouts(connect=min(5.0, timeout_s), first_byte=timeout_s, total=timeout_s)

    async def slots(self, endpoint: Endpoint) -> list[SlotState]:
        data = await self._call(endpoint, "GET", "/slots")
        if not isinstance(data, list):
            raise UpstreamProtocolError(f"{endpoint.id}: /slots is not a list")
        try:
            return [SlotState(int(s["id"]), int(s.get("n_ctx", 0)), bool(s.get("is_processing")),
                              int(s.get("n_prompt_tokens", 0)) if "id_task" in s else 0) for s in data]
        except (KeyError, TypeError, ValueError):
            raise UpstreamProtocolError(f"{endpoint.id}: unexpected /slots shape") from None

    async def save(self, endpoint: Endpoint, slot: int, filename: str) -> SlotTransfer:
        await self._check_slot(endpoint, slot)
        data = await self._call(endpoint, "POST", f"/slots/{slot}?action=save", {"filename": filename})
        return _transfer(endpoint, data, "n_saved", "n_written", "save_ms")

    async def restore(self, endpoint: Endpoint, slot: int, filename: str) -> SlotTransfer:
        await self._check_slot(endpoint, slot)
        data = await self._call(endpoint, "POST", f"/slots/{slot}?action=restore", {"filename": filename})
        return _transfer(endpoint, data, "n_restored", "n_read", "restore_ms")

    async def erase(self, endpoint: Endpoint, slot: int) -> int:
        """Empty the slot's KV cache; the number of tokens it held."""
        await self._check_slot(endpoint, slot)
        data = await self._call(endpoint, "POST", f"/slots/{slot}?action=erase")
        return int(data.get("n_erased", 0)) if isinstance(data, dict) else 0

    async def _check_slot(self, endpoint: Endpoint, slot: int) -> None:
        count = len(await self.slots(endpoint))
        if not 0 <= slot < count:
            raise SlotActionFailed(f"{endpoint.id} has no slot {slot} (it has {count})", param="slot")

    async def _call(self, endpoint: Endpoint, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        pool = self._guarded_pool if endpoint.guarded else self._pool
        status, raw = await endpoint_call(pool, endpoint, method, path, self._timeouts, body)
        if len(raw) > MAX_BODY_BYTES:
            raise UpstreamProtocolError(f"{endpoint.id}: {path} answered over {MAX_BODY_BYTES} bytes")
        if status != 200:
            raise _slot_error(endpoint, path, status, raw)
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise UpstreamProtocolError(f"{endpoint.id}: {path} answered non-JSON") from None


def _transfer(endpoint: Endpoint, data: Any, tokens: str, size: str, ms: str) -> SlotTransfer:
    try:
        return SlotTransfer(int(data["id_slot"]), str(data["filename"]), int(data[tokens]), int(data[size]),
                            float(data.get("timings", {}).get(ms, 0.0)))
    except (KeyError, TypeError, ValueError, AttributeError):
        raise UpstreamProtocolError(f"{endpoint.id}: unexpected slot action answer") from None


def _slot_error(endpoint: Endpoint, path: str, status: int, raw: bytes) -> Exception:
    try:
        message = str(orjson.loads(raw)["error"]["message"])
    except (orjson.JSONDecodeError, KeyError, TypeError):
        message = raw[:200].decode("utf-8", "replace")
    if status == 501:  # llama-server without --slot-save-path
        return SlotActionsUnsupported(f"{endpoint.id} cannot save or restore slots (start llama-server with "
                                      f"--slot-save-path): {message}")
    if status == 404 and path == "/slots":
        return SlotActionsUnsupported(f"{endpoint.id} has no /slots endpoint (not a llama.cpp server?)")
    if status in (400, 404):
        return SlotActionFailed(f"{endpoint.id}: {path.split('?')[-1] or path}: {message}")
    return UpstreamStatusError(f"{endpoint.id}: {path} answered {status}: {message}", upstream_status=status,
                               body=raw[:1000])
