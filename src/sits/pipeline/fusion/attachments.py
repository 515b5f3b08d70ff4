"""File content parts of a chat request, decoded and checked against the attachment limits.

Two OpenAI shapes are accepted:
  {"type": "file", "file": {"file_data": "data:application/pdf;base64,...", "filename": "r.pdf"}}
  {"type": "file", "file": {"file_id": "file-..."}}      (from POST /v1/files)
Every problem names where it is, e.g. `messages[0].content[1].file.file_data`.
"""

from __future__ import annotations

import binascii
import base64
from collections.abc import Sequence
from typing import Any

from sits.errors import PayloadTooLarge, UnprocessableRequest
from sits.pipeline.fusion.documents import PDF, SUPPORTED_TYPES, Attachment, unsupported_type
from sits.pipeline.fusion.spec import AttachmentLimits
from sits.pipeline.fusion.uploads import UploadStore


def file_parts(messages: Sequence[Any]) -> list[tuple[str, dict[str, Any]]]:
    """(param path, part) of every `type: file` content part, in order."""
    found = []
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            for j, part in enumerate(content):
                if isinstance(part, dict) and part.get("type") == "file":
                    found.append((f"messages[{i}].content[{j}]", part))
    return found


def collect_attachments(messages: Sequence[Any], uploads: UploadStore, limits: AttachmentLimits) -> list[Attachment]:
    parts = file_parts(messages)
    if len(parts) > limits.max_files:
        raise PayloadTooLarge(f"the request carries {len(parts)} files; the limit is {limits.max_files}",
                              param=parts[limits.max_files][0])
    return [_attachment(param, part, n, uploads, limits) for n, (param, part) in enumerate(parts, start=1)]


def _attachment(param: str, part: dict[str, Any], n: int, uploads: UploadStore,
                limits: AttachmentLimits) -> Attachment:
    file = part.get("file")
    if not isinstance(file, dict):
        raise UnprocessableRequest(f"'{param}.file' must be an object with 'file_data' or 'file_id'",
                                   param=f"{param}.file", code="invalid_type")
    filename = file.get("filename")
    if filename is not None and not isinstance(filename, str):
        raise UnprocessableRequest(f"'{param}.file.filename' must be a string", param=f"{param}.file.filename",
                                   code="invalid_type")
    if isinstance(file.get("file_id"), str) and "file_data" not in file:
        stored = uploads.get(file["file_id"])
        if stored is None:
            raise UnprocessableRequest(f"no uploaded file with id '{file['file_id']}' (unknown or expired)",
                                       param=f"{param}.file.file_id", code="file_not_found")
        return Attachment(filename or stored.filename, stored.media_type, stored.data, f"{param}.file.file_id")
    data_url = file.get("file_data")
    where = f"{param}.file.file_data"
    if not isinstance(data_url, str):
        raise UnprocessableRequest(f"'{param}.file' needs 'file_data' (a base64 data URL) or 'file_id'",
                                   param=where, code="missing_required_parameter")
    media_type, data = decode_data_url(data_url, where, limits.max_file_bytes)
    return Attachment(filename or f"attachment-{n}", media_type, data, where)


def decode_data_url(data_url: str, where: str, max_bytes: int) -> tuple[str, bytes]:
    """`data:<type>;base64,<payload>` -> (media type, bytes); size checked before decoding."""
    head, sep, payload = data_url.partition(",")
    if not head.startswith("data:") or not sep or not head.endswith(";base64"):
        raise UnprocessableRequest(f"'{where}' must be a base64 data URL like data:application/pdf;base64,...",
                                   param=where, code="invalid_value")
    media_type = head[5:-7].split(";")[0].strip().lower() or "application/octet-stream"
    if len(payload) * 3 // 4 > max_bytes + 2:
        raise PayloadTooLarge(f"file in '{where}' is about {len(payload) * 3 // 4} bytes; the limit is {max_bytes}",
                              param=where)
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise UnprocessableRequest(f"'{where}' is not valid base64", param=where, code="invalid_value") from None
    if len(data) > max_bytes:
        raise PayloadTooLarge(f"file in '{where}' is {len(data)} bytes; the limit is {max_bytes}", param=where)
    return sniff(media_type, data, where), data


def sniff(media_type: str, data: bytes, where: str) -> str:
    """A generic type is resolved by content; anything else must be a type we parse."""
    if media_type in ("application/octet-stream", "binary/octet-stream") and data.lstrip()[:5] == b"%PDF-":
        return PDF
    if media_type not in SUPPORTED_TYPES:
        raise unsupported_type(media_type, where)
    return media_type
