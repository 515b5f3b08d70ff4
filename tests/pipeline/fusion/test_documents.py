"""The document-parsing step on real PDFs generated with fpdf2: tables come out cell for cell;
encrypted, corrupt, mislabelled and oversized files are refused with a reason."""

from __future__ import annotations

import pytest

from sits.errors import PayloadTooLarge, UnprocessableRequest
from sits.pipeline.fusion.documents import PDF, Attachment, DocumentParser
from tests.pipeline.fusion.financial_reports import make_report


def parse(data: bytes, media_type: str = PDF, max_pages: int = 20):
    return DocumentParser(max_pages).parse_now(Attachment("f.pdf", media_type, data, "messages[0].content[1]"))


@pytest.mark.parametrize("seed", [1, 5, 9])
def test_tables_are_extracted_cell_for_cell(seed):
    report = make_report(seed)
    document = parse(report.pdf)
    assert [list(r) for r in document.tables[0].rows] == report.table_rows()
    assert [list(r) for r in document.tables[1].rows] == report.segment_rows()
    assert f"{report.row('Revenue').current:,}" in document.pages[0]
    rendered = document.render(10_000)
    assert "| Operating profit |" in rendered and "## Page 1" in rendered



def test_dense_tables_with_wrapped_labels_and_empty_cells():
    report = make_report(7, dense=True)
    quarters = parse(report.pdf).tables[2]
    assert quarters.rows == report.quarters  # "Selling, general and administrative expenses" wraps in the PDF


def test_owner_password_only_pdfs_open_and_user_password_pdfs_do_not():
    locked = make_report(2, user_password="s3cret").pdf
    with pytest.raises(UnprocessableRequest, match="encrypted") as info:
        parse(locked)
    assert info.value.param == "messages[0].content[1]" and info.value.code == "encrypted_file"


@pytest.mark.parametrize(("data", "media_type", "code"), [
    (b"%PDF-1.7\n" + b"\x00junk" * 100, PDF, "corrupt_file"),
    (make_report(1).pdf[:400], PDF, "corrupt_file"),  # truncated
    (b"not a pdf", PDF, "corrupt_file"),
    (b"\xff\xfe\x00bad", "text/plain", "corrupt_file"),
    (b"GIF89a", "image/gif", "unsupported_file_type"),
])
def test_unreadable_files_are_422_with_a_code(data, media_type, code):
    with pytest.raises(UnprocessableRequest) as info:
        parse(data, media_type)
    assert info.value.code == code and info.value.http_status == 422
    assert "f.pdf" in info.value.message or media_type in info.value.message


def test_page_limit_is_413():
    with pytest.raises(PayloadTooLarge, match="has 3 pages; the limit is 2"):
        parse(make_report(1, extra_pages=2).pdf, max_pages=2)


def test_csv_and_markdown():
    table = parse(b"Metric,FY2024\nRevenue,\"1,540,000\"\n", "text/csv").tables[0]
    assert table.rows == (("Metric", "FY2024"), ("Revenue", "1,540,000"))
    assert parse(b"# Notes\nRevenue rose.", "text/markdown").pages == ("# Notes\nRevenue rose.",)


async def test_a_file_is_parsed_once():
    parser = DocumentParser(10)
    attachment = Attachment("r.pdf", PDF, make_report(4).pdf, "p")
    first = await parser.parse(attachment)
    again = await parser.parse(Attachment("copy.pdf", PDF, attachment.data, "q"))
    assert first.parse_ms > 0 and again.parse_ms == 0.0
    assert again.filename == "copy.pdf" and again.tables == first.tables
