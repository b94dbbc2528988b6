"""Tests for ragstream.knowledge.formats.office: DOCX and PPTX → Markdown, and hostile Office files refused
within bounded time and memory. Every fixture is generated here (python-docx, python-pptx,
zipfile, struct)."""

from __future__ import annotations

import io
import struct
import time
import tracemalloc
import zipfile
import zlib

import pytest
from docx import Document
from docx.enum.style import WD_STYLE_TYPE
from docx.oxml import OxmlElement
from docx.oxml.ns import qn
from docx.shared import Inches
from pptx import Presentation
from pptx.util import Inches as PptxInches

from ragstream.common.config import ChunkingSettings
from ragstream.common.errors import (
    DamagedFileError,
    EncryptedFileError,
    UnsafeFileError,
    UnsupportedFormatError,
)
from ragstream.knowledge.formats import Limits
from ragstream.knowledge.formats.office import MAX_DEPTH, OLE_SIGNATURE, convert_docx, convert_pptx
from ragstream.knowledge.ingest.chunker import parse_document

LIMITS = Limits()


def chunks_of(markdown: str, path: str = "docs/x.docx.md"):
    return parse_document(markdown, path, ChunkingSettings(), "2026-01-01").chunks


def tiny_png() -> bytes:
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\x00\xff\x00\x00"))
            + chunk(b"IEND", b""))


def saved(document) -> bytes:
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def replace_member(data: bytes, member: str, content: bytes) -> bytes:
    """The zip ``data`` with ``member``'s bytes replaced."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, content if info.filename == member else src.read(info))
    return out.getvalue()


# ------------------------------------------------------------------------------ DOCX

def build_guide() -> bytes:
    doc = Document()
    doc.core_properties.title = "Field Guide (core)"
    doc.sections[0].header.paragraphs[0].text = "CONFIDENTIAL HEADER"
    doc.sections[0].footer.paragraphs[0].text = "Page footer text"
    code_style = doc.styles.add_style("Code", WD_STYLE_TYPE.PARAGRAPH)
    code_style.font.name = "Courier New"
    chapter_style = doc.styles.add_style("Kapitel", WD_STYLE_TYPE.PARAGRAPH)  # custom, based on Heading 1
    chapter_style.base_style = doc.styles["Heading 1"]

    doc.add_paragraph("Field Guide", style="Title")
    doc.add_paragraph("This guide explains the importer.")
    doc.add_heading("Installation", level=1)
    doc.add_paragraph("Install   the package\tfirst.")
    doc.add_paragraph("Download the wheel", style="List Bullet")
    doc.add_paragraph("Check the hash", style="List Bullet 2")
    doc.add_paragraph("Run the installer", style="List Bullet")
    doc.add_heading("Configuration", level=2)
    settings = doc.add_paragraph("Settings are read from ")
    settings.add_run("settings.json").font.name = "Consolas"  # monospace run inside prose → code span
    settings.add_run(" (at most 320) at start.")
    table = doc.add_table(rows=4, cols=3)
    for cell, text in zip(table.rows[0].cells, ["Name", "Default", "Meaning"]):
        cell.text = text
    for cell, text in zip(table.rows[1].cells, ["max_tokens", "320", "tokens | per chunk"]):
        cell.text = text
    merged_across = table.cell(2, 1).merge(table.cell(2, 2))
    merged_down = table.cell(2, 0).merge(table.cell(3, 0))
    merged_across.text = "cl100k or\no200k"
    merged_down.text = "encoding"
    table.cell(3, 1).text = "fast"
    table.cell(3, 2).text = "tokenizer mode"
    doc.add_paragraph("def main():", style="Code")
    doc.add_paragraph("    return 0", style="Code")
    doc.add_heading("Usage", 1)
    doc.add_paragraph("Open the workbench", style="List Number")
    doc.add_paragraph("Ingest a folder", style="List Number")
    doc.add_paragraph().add_run("print('hi')").font.name = "Consolas"  # monospace font → code
    doc.add_paragraph("# not a heading, just text")
    doc.add_picture(io.BytesIO(tiny_png()), width=Inches(0.5))
    doc.add_paragraph("Custom chapter", style="Kapitel")
    doc.add_paragraph("Under the custom style.")
    outlined = doc.add_paragraph("Outlined section")
    level = OxmlElement("w:outlineLvl")
    level.set(qn("w:val"), "1")
    outlined._p.get_or_add_pPr().append(level)
    doc.add_paragraph("Body under outline.")
    doc.add_heading("", level=2)  # an empty heading: no "##" line
    return saved(doc)


GUIDE_MARKDOWN = """\
# Field Guide

This guide explains the importer.

# Installation

Install the package first.

- Download the wheel
  - Check the hash
- Run the installer

## Configuration

Settings are read from `settings.json` (at most 320) at start.

| Name | Default | Meaning |
| --- | --- | --- |
| max_tokens | 320 | tokens \\| per chunk |
| encoding | cl100k or o200k | cl100k or o200k |
| encoding | fast | tokenizer mode |

```
def main():
    return 0
```

# Usage

1. Open the workbench
2. Ingest a folder

```
print('hi')
```

\\# not a heading, just text

# Custom chapter

Under the custom style.

## Outlined section

Body under outline.
"""


def test_docx_headings_lists_table_and_code_become_markdown():
    converted = convert_docx("guide.docx", build_guide(), LIMITS)
    assert converted.kind == "docx"
    assert converted.markdown == GUIDE_MARKDOWN
    assert converted.title == "Field Guide (core)"
    assert converted.warnings == ["1 image left out"]
    assert "CONFIDENTIAL" not in converted.markdown and "footer" not in converted.markdown


def test_docx_markdown_chunks_follow_the_document_headings():
    parsed = parse_document(convert_docx("guide.docx", build_guide(), LIMITS).markdown,
                            "docs/x.docx.md", ChunkingSettings(), "2026-01-01")
    assert parsed.title == "Field Guide"
    paths = [chunk.heading_path for chunk in parsed.chunks]
    assert paths == [("Field Guide",), ("Installation",), ("Installation", "Configuration"), ("Usage",),
                     ("Custom chapter",), ("Custom chapter", "Outlined section")]
    by_path = {chunk.heading_path: chunk for chunk in parsed.chunks}
    configuration = by_path[("Installation", "Configuration")]
    assert "| max_tokens | 320 | tokens \\| per chunk |" in configuration.text
    assert configuration.has_code and "    return 0" in configuration.text
    assert by_path[("Installation",)].text.endswith("- Run the installer")
    assert not [w for w in parsed.warnings if "never closed" in w]


def test_docx_title_falls_back_to_the_title_paragraph():
    doc = Document()
    doc.add_paragraph("Release Notes", style="Title")
    doc.add_paragraph("Everything changed.")
    converted = convert_docx("notes.docx", saved(doc), LIMITS)
    assert converted.title == "Release Notes"
    assert converted.markdown == "# Release Notes\n\nEverything changed.\n"


def test_docx_without_heading_styles_is_one_section():
    doc = Document()
    doc.add_paragraph("First paragraph of a plain letter.")
    doc.add_paragraph("")
    doc.add_paragraph("Second   paragraph,\twith tabs.")
    doc.add_paragraph("1. not a list, typed by hand")
    converted = convert_docx("letter.docx", saved(doc), LIMITS)
    assert converted.markdown == ("First paragraph of a plain letter.\n\nSecond paragraph, with tabs.\n\n"
                                  "1\\. not a list, typed by hand\n")
    assert converted.title is None
    assert "no heading styles: the document is one section" in converted.warnings
    chunks = chunks_of(converted.markdown)
    assert [c.heading_path for c in chunks] == [()]
    assert "Second paragraph, with tabs." in chunks[0].text


def test_docx_hyperlinks_text_boxes_in_order_and_one_cell_frames():
    doc = Document()
    doc.add_heading("Links", 1)
    paragraph = doc.add_paragraph("See ")
    rid = doc.part.relate_to("https://example.org/docs", "http://schemas.openxmlformats.org/officeDocument/"
                             "2006/relationships/hyperlink", is_external=True)
    link = OxmlElement("w:hyperlink")
    link.set(qn("r:id"), rid)
    run = OxmlElement("w:r")
    text = OxmlElement("w:t")
    text.text = "the docs"
    run.append(text)
    link.append(run)
    paragraph._p.append(link)
    paragraph.add_run(" for more.")
    frame = doc.add_table(rows=1, cols=1)
    frame.cell(0, 0).text = "Framed remark inside a one-cell table."
    frame.cell(0, 0).add_paragraph("Second framed line.")
    converted = convert_docx("links.docx", saved(doc), LIMITS)
    assert converted.markdown == ("# Links\n\nSee [the docs](https://example.org/docs) for more.\n\n"
                                  "Framed remark inside a one-cell table.\n\nSecond framed line.\n")


# ------------------------------------------------------------------------------ PPTX

def build_deck(core_title: str = "Q3 Review Deck") -> bytes:
    prs = Presentation()
    prs.core_properties.title = core_title

    first = prs.slides.add_slide(prs.slide_layouts[0])  # Title Slide
    first.shapes.title.text = "Quarterly Review"
    first.placeholders[1].text = "Team Atlas, 2026"
    first.notes_slide.notes_text_frame.text = "Welcome everyone."

    second = prs.slides.add_slide(prs.slide_layouts[1])  # Title and Content
    second.shapes.title.text = "Roadmap"
    body = second.placeholders[1].text_frame
    body.text = "Ship the importer"
    for text, level in [("DOCX and PPTX", 1), ("tables too", 2), ("Measure speed", 0)]:
        paragraph = body.add_paragraph()
        paragraph.text = text
        paragraph.level = level
    notes = second.notes_slide.notes_text_frame
    notes.text = "Stress the deadline."
    notes.add_paragraph().text = "Second note paragraph."

    third = prs.slides.add_slide(prs.slide_layouts[5])  # Title Only
    third.shapes.title.text = "Numbers"
    table = third.shapes.add_table(4, 2, PptxInches(1), PptxInches(2), PptxInches(6), PptxInches(2)).table
    for r, (metric, value) in enumerate([("Metric", "Value"), ("Users", "1,200"), ("Churn", "2% | falling")]):
        table.cell(r, 0).text = metric
        table.cell(r, 1).text = value
    table.cell(3, 0).merge(table.cell(3, 1))
    table.cell(3, 0).text = "Audited"
    box = third.shapes.add_textbox(PptxInches(1), PptxInches(5), PptxInches(4), PptxInches(1))
    box.text_frame.text = "Source: "
    box.text_frame.paragraphs[0].add_run().text = "finance.xlsx"
    box.text_frame.paragraphs[0].runs[1].font.name = "Courier New"
    code = third.shapes.add_textbox(PptxInches(1), PptxInches(6), PptxInches(4), PptxInches(1)).text_frame
    code.text = "total = users * 2\n\nprint(total)"
    for paragraph in code.paragraphs:
        for run in paragraph.runs:
            run.font.name = "Courier New"
    group = third.shapes.add_group_shape()
    group.shapes.add_textbox(PptxInches(5), PptxInches(5), PptxInches(2), PptxInches(1)).text_frame.text = \
        "Grouped note"
    inner = group.shapes.add_group_shape()
    inner.shapes.add_textbox(PptxInches(5), PptxInches(6), PptxInches(2), PptxInches(1)).text_frame.text = \
        "Deeply grouped"
    third.shapes.add_picture(io.BytesIO(tiny_png()), PptxInches(8), PptxInches(1))
    return saved(prs)


DECK_MARKDOWN = """\
# Q3 Review Deck

## Quarterly Review

Team Atlas, 2026

Notes: Welcome everyone.

## Roadmap

- Ship the importer
  - DOCX and PPTX
    - tables too
- Measure speed

Notes: Stress the deadline.

Second note paragraph.

## Numbers

| Metric | Value |
| --- | --- |
| Users | 1,200 |
| Churn | 2% \\| falling |
| Audited | Audited |

Source: `finance.xlsx`

```
total = users * 2

print(total)
```

Grouped note

Deeply grouped
"""


def test_pptx_slides_become_sections_with_bullets_tables_and_notes():
    converted = convert_pptx("review.pptx", build_deck(), LIMITS)
    assert converted.kind == "pptx"
    assert converted.markdown == DECK_MARKDOWN
    assert converted.title == "Q3 Review Deck"
    assert converted.warnings == ["1 image left out"]
    starts = {number: converted.markdown[offset:].split("\n", 1)[0] for offset, number in converted.pages}
    assert starts == {1: "## Quarterly Review", 2: "## Roadmap", 3: "## Numbers"}


def test_pptx_markdown_chunks_are_one_section_per_slide():
    chunks = chunks_of(convert_pptx("review.pptx", build_deck(), LIMITS).markdown, "docs/x.pptx.md")
    assert [c.heading_path for c in chunks] == [("Q3 Review Deck", "Quarterly Review"),
                                                ("Q3 Review Deck", "Roadmap"),
                                                ("Q3 Review Deck", "Numbers")]
    assert "Notes: Stress the deadline." in chunks[1].text and "    - tables too" in chunks[1].text
    assert "| Churn | 2% \\| falling |" in chunks[2].text


def test_pptx_deck_title_from_first_slide_and_untitled_slides_are_numbered():
    prs = Presentation()  # the template's core title is empty
    first = prs.slides.add_slide(prs.slide_layouts[5])
    first.shapes.title.text = "Opening"
    first.shapes.add_textbox(0, 0, PptxInches(3), PptxInches(1)).text_frame.text = "Hello."
    untitled = prs.slides.add_slide(prs.slide_layouts[6])  # Blank: no title placeholder
    untitled.shapes.add_textbox(0, 0, PptxInches(3), PptxInches(1)).text_frame.text = "Loose text."
    prs.slides.add_slide(prs.slide_layouts[6])  # nothing on it at all
    converted = convert_pptx("deck.pptx", saved(prs), LIMITS)
    assert converted.title == "Opening"
    assert converted.markdown == "# Opening\n\n## Opening\n\nHello.\n\n## Slide 2\n\nLoose text.\n"
    assert converted.warnings == ["1 slide(s) without text left out"]


def test_pptx_an_untitled_slide_continues_the_section_of_the_titled_slide_before_it():
    """pandoc (and people) split a long section over slides, the later ones without a title:
    their text belongs to that section, not to a "Slide N" of its own."""
    prs = Presentation()
    prs.core_properties.title = "Configuring"
    titled = prs.slides.add_slide(prs.slide_layouts[5])
    titled.shapes.title.text = "Validation"
    titled.shapes.add_textbox(0, 0, PptxInches(3), PptxInches(1)).text_frame.text = "Files."
    more = prs.slides.add_slide(prs.slide_layouts[6])
    more.shapes.add_textbox(0, 0, PptxInches(3), PptxInches(1)).text_frame.text = "Typos stop it."
    chunks = chunks_of(convert_pptx("c.pptx", saved(prs), LIMITS).markdown, "docs/c.pptx.md")
    typo = next(c for c in chunks if "Typos stop it." in c.text)
    assert typo.heading_path[-1] == "Validation"


# ------------------------------------------------------------------------------ hostile and wrong files

def measured(call):
    """Run ``call`` (expected to raise); return (exception, seconds, peak traced MiB)."""
    tracemalloc.start()
    started = time.perf_counter()
    try:
        call()
    except Exception as err:  # the caller checks the type
        caught = err
    else:
        caught = None
    elapsed = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return caught, elapsed, peak


def zip_with_zeros(member: str, size: int) -> bytes:
    """A small zip whose ``member`` unpacks to ``size`` zero bytes (streamed, ZIP_DEFLATED)."""
    buffer = io.BytesIO()
    block = bytes(1 << 20)
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        with archive.open(member, "w", force_zip64=True) as stream:  # the archive's method and level
            for _ in range(size // len(block)):
                stream.write(block)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def gigabyte_bomb() -> bytes:
    return zip_with_zeros("word/document.xml", 1 << 30)


def test_zip_bomb_disguised_as_docx_is_refused_quickly(gigabyte_bomb):
    assert len(gigabyte_bomb) < 8 * 2**20
    err, seconds, peak = measured(lambda: convert_docx("bomb.docx", gigabyte_bomb, LIMITS))
    assert isinstance(err, UnsafeFileError), err
    assert "unpacks to 1,024 MiB" in str(err)
    assert seconds < 1.0 and peak < 32, (seconds, peak)


def test_zip_bomb_by_ratio_is_refused_quickly():
    data = zip_with_zeros("ppt/presentation.xml", 32 << 20)  # 32 MiB, far above 200× its size
    err, seconds, peak = measured(lambda: convert_pptx("bomb.pptx", data, LIMITS))
    assert isinstance(err, UnsafeFileError), err
    assert "zip bomb" in str(err)
    assert seconds < 1.0 and peak < 16, (seconds, peak)


def billion_laughs(encoding: str = "utf-8") -> bytes:
    entities = "".join(['<!ENTITY lol0 "lol">'] + [
        f'<!ENTITY lol{i} "{f"&lol{i - 1};" * 10}">' for i in range(1, 10)])
    xml = (f'<?xml version="1.0" encoding="{encoding.upper()}"?>\n<!DOCTYPE w:document [{entities}]>\n'
           '<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">'
           '<w:body><w:p><w:r><w:t>&lol9;</w:t></w:r></w:p></w:body></w:document>')
    return xml.encode(encoding)


@pytest.mark.parametrize("encoding", ["utf-8", "utf-16"])
def test_billion_laughs_in_document_xml_is_refused_fast_and_small(encoding):
    plain = Document()
    plain.add_paragraph("harmless")
    data = replace_member(saved(plain), "word/document.xml", billion_laughs(encoding))
    err, seconds, peak = measured(lambda: convert_docx("laughs.docx", data, LIMITS))
    assert isinstance(err, UnsafeFileError), err
    assert "word/document.xml" in str(err) and "DOCTYPE" in str(err)
    assert seconds < 1.0 and peak < 16, (seconds, peak)


def test_doctype_in_any_pptx_xml_part_is_refused():
    data = replace_member(build_deck(), "ppt/slides/slide2.xml", billion_laughs())
    with pytest.raises(UnsafeFileError, match="ppt/slides/slide2.xml"):
        convert_pptx("laughs.pptx", data, LIMITS)


def corrupt_member(data: bytes, member: str) -> bytes:
    """``data`` with bytes in the middle of ``member``'s compressed data flipped."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        info = archive.getinfo(member)
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    middle = start + info.compress_size // 2
    return data[:middle] + bytes(b ^ 0xFF for b in data[middle:middle + 8]) + data[middle + 8:]


@pytest.mark.parametrize("damage", ["truncated", "cut-short", "corrupt-member", "bad-xml", "missing-part"])
def test_damaged_docx_is_a_damaged_file_error(damage):
    data = build_guide()
    if damage == "truncated":
        data = data[: len(data) // 2]
    elif damage == "cut-short":
        data = data[:-30]
    elif damage == "corrupt-member":
        data = corrupt_member(data, "word/document.xml")
    elif damage == "bad-xml":
        data = replace_member(data, "word/document.xml", b"<w:document><w:body><w:p>unclosed")
    else:
        data = replace_member(data, "word/styles.xml", b"")  # listed and related, but not XML
    with pytest.raises(DamagedFileError) as caught:
        convert_docx("broken.docx", data, LIMITS)
    assert str(caught.value).startswith("broken.docx cannot be read: ")
    assert "Traceback" not in str(caught.value) and caught.value.reason


def test_truncated_pptx_is_a_damaged_file_error():
    with pytest.raises(DamagedFileError, match="not a readable zip archive"):
        convert_pptx("cut.pptx", build_deck()[:4000], LIMITS)


@pytest.mark.parametrize(("data", "what"), [
    (b"%PDF-1.7\n1 0 obj\n<< /Type /Catalog >>\nendobj\n%%EOF\n", "it is a PDF file"),
    (b"Just some notes, typed into a text editor.\n", "it is plain text"),
    (b"<html><body>Hi</body></html>", "it is an HTML file"),
])
def test_docx_that_is_something_else_is_unsupported(data, what):
    with pytest.raises(UnsupportedFormatError) as caught:
        convert_docx("report.docx", data, LIMITS)
    assert what in str(caught.value) and "not a Word document (.docx)" in str(caught.value)


def test_office_files_swapped_are_named_for_what_they_are():
    with pytest.raises(UnsupportedFormatError, match="it is a PowerPoint presentation"):
        convert_docx("deck.docx", build_deck(), LIMITS)
    with pytest.raises(UnsupportedFormatError, match="it is a Word document"):
        convert_pptx("guide.pptx", build_guide(), LIMITS)


def test_empty_file_is_damaged():
    with pytest.raises(DamagedFileError, match="empty"):
        convert_docx("empty.docx", b"", LIMITS)


def compound_file(*streams: str) -> bytes:
    """A minimal, well-formed OLE compound file (version 3, 512-byte sectors): one FAT sector, one
    directory sector holding a root entry and empty ``streams``, the way Office stores an encrypted
    OOXML file (EncryptionInfo + EncryptedPackage) or a legacy .doc (WordDocument …)."""
    end, free, fat_mark, none = 0xFFFFFFFE, 0xFFFFFFFF, 0xFFFFFFFD, 0xFFFFFFFF
    header = OLE_SIGNATURE + bytes(16) + struct.pack("<HHHHH", 0x3E, 3, 0xFFFE, 9, 6) + bytes(6)
    header += struct.pack("<IIIIIIII", 0, 1, 1, 0, 4096, end, 0, end) + struct.pack("<I", end)
    header += struct.pack("<I", 0) + struct.pack("<108I", *([free] * 108))
    assert len(header) == 512
    fat = struct.pack("<128I", fat_mark, end, *([free] * 126))

    def entry(name: str, kind: int, child: int = none, right: int = none) -> bytes:
        encoded = (name + "\0").encode("utf-16-le")
        return (encoded.ljust(64, b"\0") + struct.pack("<HBB", len(encoded), kind, 1)
                + struct.pack("<III", none, right, child) + bytes(16 + 4 + 16) + struct.pack("<IQ", end, 0))

    entries = [entry("Root Entry", 5, child=1)]
    entries += [entry(name, 2, right=i + 2 if i + 1 < len(streams) else none)
                for i, name in enumerate(streams)]
    directory = b"".join(entries).ljust(512, b"\0")
    return header + fat + directory


def test_encrypted_office_file_is_an_encrypted_file_error():
    data = compound_file("EncryptionInfo", "EncryptedPackage")
    with pytest.raises(EncryptedFileError, match="locked.docx is encrypted"):
        convert_docx("locked.docx", data, LIMITS)
    with pytest.raises(EncryptedFileError):
        convert_pptx("locked.pptx", data, LIMITS)


def test_encrypted_signature_with_a_broken_directory_is_still_recognised():
    data = OLE_SIGNATURE + bytes(504) + b"\xff" * 1024 + "EncryptedPackage".encode("utf-16-le") + bytes(512)
    with pytest.raises(EncryptedFileError):
        convert_docx("locked.docx", data, LIMITS)


def test_legacy_binary_office_files_are_unsupported_with_what_to_do():
    with pytest.raises(UnsupportedFormatError) as caught:
        convert_docx("old.docx", compound_file("WordDocument", "1Table", "\x05SummaryInformation"), LIMITS)
    assert "a legacy Word 97-2003 file (.doc): save it as .docx" in str(caught.value)
    with pytest.raises(UnsupportedFormatError, match="legacy PowerPoint 97-2003 file .*save it as .pptx"):
        convert_pptx("old.pptx", compound_file("PowerPoint Document", "Current User"), LIMITS)


# ------------------------------------------------------------------------------ speed

WORDS = ("retrieval ranking chunk vector index prompt stage gate context source answer model token "
         "query filter score").split()


def sentence(i: int, n: int = 12) -> str:
    return " ".join(WORDS[(i * 7 + k) % len(WORDS)] for k in range(n)).capitalize() + "."


def test_conversion_speed_on_a_long_docx_and_a_big_deck():
    doc = Document()
    words = 0
    for chapter in range(50):  # ~50 pages: a heading, 8 paragraphs of ~60 words, a list, a table each
        doc.add_heading(f"Chapter {chapter + 1}", 1)
        for k in range(8):
            text = " ".join(sentence(chapter * 100 + k * 5 + s) for s in range(5))
            doc.add_paragraph(text)
            words += len(text.split())
        for k in range(3):
            doc.add_paragraph(sentence(k), style="List Bullet")
            words += 12
        table = doc.add_table(rows=4, cols=3)
        for row in table.rows:
            for cell in row.cells:
                cell.text = "cell value here"
                words += 3
    data = saved(doc)
    started = time.perf_counter()
    converted = convert_docx("long.docx", data, LIMITS)
    docx_seconds = time.perf_counter() - started
    assert converted.markdown.count("\n# Chapter ") == 49
    assert converted.markdown.count("\n| --- | --- | --- |\n") == 50
    assert len(converted.markdown.split()) >= words

    prs = Presentation()
    slide_words = 0
    for number in range(40):
        slide = prs.slides.add_slide(prs.slide_layouts[1])
        slide.shapes.title.text = f"Topic {number + 1}"
        frame = slide.placeholders[1].text_frame
        frame.text = sentence(number)
        for k in range(5):
            paragraph = frame.add_paragraph()
            paragraph.text = sentence(number + k)
            paragraph.level = k % 3
        slide.notes_slide.notes_text_frame.text = sentence(number, 30)
        slide_words += 12 * 6 + 30
    deck = saved(prs)
    started = time.perf_counter()
    converted_deck = convert_pptx("big.pptx", deck, LIMITS)
    pptx_seconds = time.perf_counter() - started
    assert converted_deck.markdown.count("\n## Topic ") == 40
    print(f"\nDOCX {words:,} words in {docx_seconds:.2f} s = {words / docx_seconds:,.0f} words/s; "
          f"PPTX {slide_words:,} words in {pptx_seconds:.2f} s = {slide_words / pptx_seconds:,.0f} words/s")
    assert docx_seconds < 20 and pptx_seconds < 20


def test_nesting_is_read_to_a_bounded_depth():
    prs = Presentation()
    slide = prs.slides.add_slide(prs.slide_layouts[5])
    slide.shapes.title.text = "Deep"
    shapes = slide.shapes
    for depth in range(1, MAX_DEPTH + 6):
        group = shapes.add_group_shape()
        group.shapes.add_textbox(0, 0, PptxInches(1), PptxInches(1)).text_frame.text = f"level {depth}"
        shapes = group.shapes
    converted = convert_pptx("deep.pptx", saved(prs), LIMITS)
    assert f"level {MAX_DEPTH}\n" in converted.markdown and f"level {MAX_DEPTH + 1}" not in converted.markdown
    assert converted.warnings == [f"shapes grouped deeper than {MAX_DEPTH} levels left out"]

    namespace = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
    inner = "<w:p><w:r><w:t>deepest</w:t></w:r></w:p>"
    for level in range(40):  # tables in tables, 40 deep (libxml2 itself stops at 256 elements)
        inner = (f"<w:tbl><w:tr><w:tc>{inner}</w:tc><w:tc><w:p><w:r><w:t>L{level}</w:t></w:r></w:p></w:tc>"
                 f"</w:tr></w:tbl>")
    document = f'<?xml version="1.0"?><w:document {namespace}><w:body>{inner}</w:body></w:document>'
    plain = Document()
    plain.add_paragraph("x")
    data = replace_member(saved(plain), "word/document.xml", document.encode())
    converted = convert_docx("deep.docx", data, LIMITS)
    assert converted.markdown.startswith("| L24 L25 ") and "deepest" not in converted.markdown
    assert f"content nested deeper than {MAX_DEPTH} levels left out" in converted.warnings
