"""The document-parsing step: text and tables out of attached files.

PDFs: text with pypdf, tables with pdfplumber (its ruling-line table finder). The split was
chosen by measurement on generated financial reports (bench/bench_documents.py,
docs/workflows.md): pypdf extracts the same text many times faster than pdfplumber, and on dense
tables (wrapped labels, empty cells) pdfplumber gets every cell right where splitting pypdf's
layout text into columns misses many.

Parsing is CPU work in C-less Python: it runs on a worker thread, and each distinct file
(by SHA-256) is parsed once per gateway while it stays in a small LRU.
"""

from __future__ import annotations

import asyncio
import csv
import hashlib
import io
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass

from sits.errors import PayloadTooLarge, UnprocessableRequest

log = logging.getLogger("sits.fusion")

PDF = "application/pdf"
TEXT_TYPES = frozenset({"text/plain", "text/markdown", "text/csv"})
SUPPORTED_TYPES = frozenset({PDF, *TEXT_TYPES})
_CACHE_ENTRIES = 32


@dataclass(frozen=True, slots=True)
class Attachment:
    """One file a request carries, decoded; `param` is where it sits in the request."""

    filename: str
    media_type: str
    data: bytes
    param: str


@dataclass(frozen=True, slots=True)
class Table:
    page: int  # 1-based; 0 for files without pages
    rows: tuple[tuple[str, ...], ...]


@dataclass(frozen=True, slots=True)
class ParsedDocument:
    filename: str
    media_type: str
    pages: tuple[str, ...]
    tables: tuple[Table, ...]
    parse_ms: float

    def describe(self) -> str:
        pages = f"{len(self.pages)} page{'s' if len(self.pages) != 1 else ''}" if self.media_type == PDF else "text"
        return f"{self.filename}: {pages}, {len(self.tables)} table{'s' if len(self.tables) != 1 else ''}"

    def render(self, max_chars: int) -> str:
        """Structured context for a model: pages as text, tables as Markdown pipe tables."""
        parts = [f"<document name=\"{self.filename}\" type=\"{self.media_type}\">"]
        for i, text in enumerate(self.pages, start=1):
            parts.append(f"## Page {i}\n{text.strip()}" if self.media_type == PDF else text.strip())
        for n, table in enumerate(self.tables, start=1):
            where = f" (page {table.page})" if table.page else ""
            parts.append(f"## Table {n}{where}\n{markdown_table(table.rows)}")
        parts.append("</document>")
        rendered = "\n\n".join(parts)
        if len(rendered) > max_chars:
            rendered = rendered[:max_chars] + f"\n[... document cut at {max_chars} characters]"
        return rendered


def markdown_table(rows: tuple[tuple[str, ...], ...]) -> str:
    if not rows:
        return ""
    width = max(len(r) for r in rows)
    padded = [[c.replace("|", "/").replace("\n", " ") for c in r] + [""] * (width - len(r)) for r in rows]
    lines = ["| " + " | ".join(padded[0]) + " |", "|" + "---|" * width]
    lines += ["| " + " | ".join(r) + " |" for r in padded[1:]]
    return "\n".join(lines)


class DocumentParser:
    """Parses attachments to `ParsedDocument`s; a bad file is a 422 that names it and says why."""

    def __init__(self, max_pages: int) -> None:
        self._max_pages = max_pages
        self._cache: OrderedDict[str, ParsedDocument] = OrderedDict()

    async def parse(self, attachment: Attachment) -> ParsedDocument:
        key = hashlib.sha256(attachment.data).hexdigest() + attachment.media_type
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            return ParsedDocument(attachment.filename, hit.media_type, hit.pages, hit.tables, 0.0)
        document = await asyncio.to_thread(self.parse_now, attachment)
        self._cache[key] = document
        if len(self._cache) > _CACHE_ENTRIES:
            self._cache.popitem(last=False)
        return document

    def parse_now(self, attachment: Attachment) -> ParsedDocument:
        """Synchronous parse (tests, benchmarks, the upload check); raises ClientError subclasses."""
        started = time.perf_counter()
        if attachment.media_type == PDF:
            pages, tables = self._pdf(attachment)
        elif attachment.media_type in TEXT_TYPES:
            pages, tables = _text(attachment)
        else:
            raise unsupported_type(attachment.media_type, attachment.param)
        return ParsedDocument(attachment.filename, attachment.media_type, pages, tables,
                              (time.perf_counter() - started) * 1000)

    def _pdf(self, attachment: Attachment) -> tuple[tuple[str, ...], tuple[Table, ...]]:
        import pdfplumber
        from pypdf import PdfReader

        name, param, data = attachment.filename, attachment.param, attachment.data
        if not data.lstrip()[:5].startswith(b"%PDF-"):
            raise UnprocessableRequest(f"file '{name}' is not a PDF (no %PDF- header) though sent as {PDF}",
                                       param=param, code="corrupt_file")
        try:
            reader = PdfReader(io.BytesIO(data))
            if reader.is_encrypted and not reader.decrypt(""):  # owner-password-only PDFs open like any other
                raise UnprocessableRequest(
                    f"file '{name}' is encrypted (password-protected); send an unencrypted copy",
                    param=param, code="encrypted_file")
            if len(reader.pages) > self._max_pages:
                raise PayloadTooLarge(f"file '{name}' has {len(reader.pages)} pages; the limit is {self._max_pages}",
                                      param=param)
            pages = tuple(page.extract_text() or "" for page in reader.pages)
            tables = []
            with pdfplumber.open(io.BytesIO(data), password="" if reader.is_encrypted else None) as pdf:
                for number, page in enumerate(pdf.pages, start=1):
                    for raw in page.extract_tables():
                        rows = tuple(tuple(" ".join((c or "").split()) for c in row) for row in raw if any(row))
                        if rows:
                            tables.append(Table(number, rows))
        except (UnprocessableRequest, PayloadTooLarge):
            raise
        except Exception as exc:  # pypdf / pdfminer raise many types on broken files: all mean "unreadable"
            log.info("unreadable PDF %s: %r", name, exc)
            raise UnprocessableRequest(f"file '{name}' is not a readable PDF ({type(exc).__name__}: {exc})"[:400],
                                       param=param, code="corrupt_file") from None
        if not any(p.strip() for p in pages) and not tables:
            raise UnprocessableRequest(f"file '{name}' has no extractable text (a scanned PDF needs OCR first)",
                                       param=param, code="empty_file")
        return pages, tuple(tables)


def _text(attachment: Attachment) -> tuple[tuple[str, ...], tuple[Table, ...]]:
    try:
        text = attachment.data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnprocessableRequest(f"file '{attachment.filename}' is not UTF-8 text (byte {exc.start})",
                                   param=attachment.param, code="corrupt_file") from None
    if attachment.media_type != "text/csv":
        return (text,), ()
    rows = tuple(tuple(c.strip() for c in row) for row in csv.reader(io.StringIO(text)) if row)
    return ("",), (Table(0, rows),) if rows else ()


def unsupported_type(media_type: str, param: str) -> UnprocessableRequest:
    allowed = ", ".join(sorted(SUPPORTED_TYPES))
    return UnprocessableRequest(f"file type '{media_type}' is not supported; send one of {allowed}",
                                param=param, code="unsupported_file_type")
