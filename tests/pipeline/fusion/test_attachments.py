"""File content parts: data URLs, uploaded file ids, limits; every error names its field."""

from __future__ import annotations

import base64

import pytest

from sits.errors import PayloadTooLarge, UnprocessableRequest
from sits.pipeline.fusion.attachments import collect_attachments
from sits.pipeline.fusion.spec import AttachmentLimits
from sits.pipeline.fusion.uploads import UploadStore

LIMITS = AttachmentLimits(max_file_bytes=2048, max_files=2)


def store(clock=lambda: 0.0) -> UploadStore:
    return UploadStore(4096, 60, clock, lambda: 1_700_000_000.0)


def part(file: object) -> dict:
    return {"type": "file", "file": file}


def data_url(data: bytes, media_type: str = "application/pdf") -> str:
    return f"data:{media_type};base64," + base64.b64encode(data).decode()


def messages(*parts: dict) -> list[dict]:
    return [{"role": "system", "content": "be brief"}, {"role": "user", "content": [{"type": "text", "text": "hi"},
                                                                                    *parts]}]


def test_data_url_and_file_id_parts():
    uploads = store()
    stored = uploads.put("notes.md", "text/markdown", "user_data", b"# hi")
    found = collect_attachments(messages(part({"file_data": data_url(b"%PDF-1.4 x"), "filename": "a.pdf"}),
                                         part({"file_id": stored.id})), uploads, LIMITS)
    assert [(a.filename, a.media_type, a.param) for a in found] == [
        ("a.pdf", "application/pdf", "messages[1].content[1].file.file_data"),
        ("notes.md", "text/markdown", "messages[1].content[2].file.file_id")]
    assert found[1].data == b"# hi"


def test_octet_stream_pdf_is_sniffed():
    found = collect_attachments(messages(part({"file_data": data_url(b"%PDF-1.7", "application/octet-stream")})),
                                store(), LIMITS)
    assert found[0].media_type == "application/pdf" and found[0].filename == "attachment-1"


@pytest.mark.parametrize(("file", "error", "words", "param"), [
    ({"file_data": data_url(b"x" * 3000)}, PayloadTooLarge, "the limit is 2048", ".file.file_data"),
    ({"file_data": "data:application/pdf;base64,@@@"}, UnprocessableRequest, "not valid base64", ".file.file_data"),
    ({"file_data": "https://example.com/a.pdf"}, UnprocessableRequest, "base64 data URL", ".file.file_data"),
    ({"file_data": data_url(b"x", "image/png")}, UnprocessableRequest, "'image/png' is not supported",
     ".file.file_data"),
    ({"file_id": "file-missing"}, UnprocessableRequest, "no uploaded file with id", ".file.file_id"),
    ({"filename": "a.pdf"}, UnprocessableRequest, "needs 'file_data'", ".file.file_data"),
    ("not an object", UnprocessableRequest, "must be an object", ".file"),
])
def test_bad_parts(file, error, words, param):
    with pytest.raises(error, match=words) as info:
        collect_attachments(messages(part(file)), store(), LIMITS)
    assert info.value.param == "messages[1].content[1]" + param


def test_too_many_files():
    one = part({"file_data": data_url(b"%PDF-1")})
    with pytest.raises(PayloadTooLarge, match="carries 3 files; the limit is 2"):
        collect_attachments(messages(one, one, one), store(), LIMITS)


def test_upload_store_expires_and_evicts_oldest_first():
    now = [0.0]
    uploads = store(lambda: now[0])
    first = uploads.put("a", "text/plain", "user_data", b"a" * 3000)
    second = uploads.put("b", "text/plain", "user_data", b"b" * 3000)  # over 4096 in all: the oldest goes
    assert uploads.get(first.id) is None and uploads.get(second.id) is not None
    assert second.file_object()["bytes"] == 3000 and second.file_object()["object"] == "file"
    now[0] = 61.0
    assert uploads.get(second.id) is None
