"""POST /v1/files: the OpenAI multipart upload, checked at the door and kept for `file_id` parts.

A file is parsed once on upload, so an encrypted, corrupt or unsupported file is refused here
with a 422 that says which and why (not later, in the middle of a workflow). The chat side of
attachments (data-URL and file-id content parts) is `sits.pipeline.fusion.attachments`.
"""

from __future__ import annotations

from email import policy
from email.message import EmailMessage
from email.parser import BytesParser

import orjson

from sits.api.http_types import HttpRequest, HttpResponse
from sits.errors import InvalidRequest, PayloadTooLarge, UnprocessableRequest
from sits.pipeline.fusion.attachments import sniff
from sits.pipeline.fusion.documents import Attachment, DocumentParser
from sits.pipeline.fusion.spec import AttachmentLimits
from sits.pipeline.fusion.uploads import UploadStore

PURPOSES = frozenset({"user_data", "assistants", "batch", "fine-tune", "vision", "evals"})


class FileRoutes:
    def __init__(self, uploads: UploadStore, parser: DocumentParser, limits: AttachmentLimits) -> None:
        self._uploads = uploads
        self._parser = parser
        self._limits = limits

    async def upload(self, request: HttpRequest, request_id: str) -> HttpResponse:
        fields = parse_multipart(request)
        purpose = fields.get("purpose")
        if purpose is None or purpose.get_content_disposition() != "form-data" or purpose.get_filename():
            raise UnprocessableRequest("missing form field 'purpose' (e.g. user_data)", param="purpose",
                                       code="missing_required_parameter")
        purpose_text = str(purpose.get_content()).strip()
        if purpose_text not in PURPOSES:
            raise UnprocessableRequest(f"unknown purpose {purpose_text!r}; use one of {', '.join(sorted(PURPOSES))}",
                                       param="purpose", code="invalid_value")
        part = fields.get("file")
        if part is None or not part.get_filename():
            raise UnprocessableRequest("missing form field 'file' (a file part with a filename)", param="file",
                                       code="missing_required_parameter")
        data = part.get_payload(decode=True)
        if not isinstance(data, bytes) or not data:
            raise UnprocessableRequest("the uploaded file is empty", param="file", code="empty_file")
        if len(data) > self._limits.max_file_bytes:
            raise PayloadTooLarge(f"file is {len(data)} bytes; the limit is {self._limits.max_file_bytes}",
                                  param="file")
        filename = str(part.get_filename())
        media_type = sniff(_media_type(part, filename), data, "file")
        attachment = Attachment(filename, media_type, data, "file")
        await self._parser.parse(attachment)  # refuse what a workflow could not read; cached for its first use
        stored = self._uploads.put(filename, media_type, purpose_text, data)
        return HttpResponse(200, orjson.dumps(stored.file_object()))


def parse_multipart(request: HttpRequest) -> dict[str, EmailMessage]:
    """The form-data fields of a multipart body by name (the stdlib MIME parser does the work)."""
    content_type = request.headers.get("content-type", "")
    if not content_type.lower().startswith("multipart/form-data") or "boundary=" not in content_type:
        raise InvalidRequest("expected a multipart/form-data body with a boundary", param="content-type")
    head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode("latin-1")
    message = BytesParser(policy=policy.HTTP).parsebytes(head + request.body)
    if not message.is_multipart() or message.defects:
        raise InvalidRequest("malformed multipart/form-data body", param="body")
    fields: dict[str, EmailMessage] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if isinstance(name, str) and name not in fields:
            fields[name] = part  # type: ignore[assignment]
    return fields


def _media_type(part: EmailMessage, filename: str) -> str:
    declared = part.get_content_type()
    if declared not in ("application/octet-stream", "text/plain") or "." not in filename:
        return declared
    by_suffix = {"pdf": "application/pdf", "csv": "text/csv", "md": "text/markdown", "txt": "text/plain"}
    return by_suffix.get(filename.rsplit(".", 1)[1].lower(), declared)
