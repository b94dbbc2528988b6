"""Tests for ragstream.knowledge.formats.pdf: real PDFs, made here with pypdf (exact content streams) or
printed by headless Chromium (a realistic document with an outline), converted to Markdown."""

from __future__ import annotations

import io
import re
import subprocess
import time
import zipfile
from pathlib import Path

import pytest

pypdf = pytest.importorskip("pypdf", reason="the PDF converter needs pypdf (requirements.txt)")

from pypdf import PdfWriter  # noqa: E402
from pypdf.generic import (  # noqa: E402
    ArrayObject,
    ContentStream,
    DecodedStreamObject,
    DictionaryObject,
    NameObject,
    NumberObject,
)

from ragstream.common.config import ChunkingSettings  # noqa: E402
from ragstream.common.errors import (  # noqa: E402
    DamagedFileError,
    EncryptedFileError,
    NoTextLayerError,
    UnsafeFileError,
    UnsupportedFormatError,
)
from ragstream.knowledge.formats import PAGE_MARKER, Limits  # noqa: E402
from ragstream.knowledge.formats.pdf import convert_pdf  # noqa: E402
from ragstream.knowledge.ingest.chunker import parse_document  # noqa: E402

LIMITS = Limits()
CHROMIUM = Path("/usr/bin/chromium")
FONTS = {"F1": "Helvetica", "F2": "Helvetica-Bold", "F3": "Courier"}

# ------------------------------------------------------------------------------ making PDFs


def _resources() -> DictionaryObject:
    fonts = DictionaryObject()
    for key, base in FONTS.items():
        fonts[NameObject(f"/{key}")] = DictionaryObject({
            NameObject("/Type"): NameObject("/Font"),
            NameObject("/Subtype"): NameObject("/Type1"),
            NameObject("/BaseFont"): NameObject(f"/{base}"),
            NameObject("/Encoding"): NameObject("/WinAnsiEncoding"),
        })
    return DictionaryObject({NameObject("/Font"): fonts})


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def text_page(runs: list[tuple[str, float, float, float, str]]) -> bytes:
    """A content stream drawing ``(font, size, x, y, text)`` runs, in the order given."""
    ops = (f"BT /{f} {s} Tf {x} {y} Td ({_escape(t)}) Tj ET" for f, s, x, y, t in runs)
    return "\n".join(ops).encode("cp1252")


def lines(texts: list[str], *, top: float = 720, leading: float = 14, size: float = 11, font: str = "F1",
          x: float = 72) -> list[tuple[str, float, float, float, str]]:
    """Body lines one under the other; an empty string leaves a blank line (a paragraph gap)."""
    runs, y = [], top
    for text in texts:
        if text:
            runs.append((font, size, x, y, text))
        y -= leading
    return runs


def make_pdf(pages: list[bytes], *, title: str | None = None, outline: list[tuple[str, int, int]] = (),
             password: str | None = None, images: set[int] = frozenset()) -> bytes:
    """A PDF of the given content streams; ``outline`` as ``(title, page index, level)``;
    pages in ``images`` also get a 2×2 grey image resource named /Im1."""
    writer = PdfWriter()
    for index, content in enumerate(pages):
        page = writer.add_blank_page(612, 792)
        stream = ContentStream(None, writer)
        stream.set_data(content)
        page.replace_contents(stream)
        resources = _resources()
        if index in images:
            image = DecodedStreamObject()
            image.set_data(b"\x10\x80\x80\xf0")
            image.update({
                NameObject("/Type"): NameObject("/XObject"), NameObject("/Subtype"): NameObject("/Image"),
                NameObject("/Width"): NumberObject(2), NameObject("/Height"): NumberObject(2),
                NameObject("/ColorSpace"): NameObject("/DeviceGray"),
                NameObject("/BitsPerComponent"): NumberObject(8),
            })
            image_ref = writer._add_object(image)
            resources[NameObject("/XObject")] = DictionaryObject({NameObject("/Im1"): image_ref})
        page[NameObject("/Resources")] = resources
    parents: dict[int, object] = {}
    for text, page_index, level in outline:
        parents[level] = writer.add_outline_item(text, page_number=page_index, parent=parents.get(level - 1))
    if title is not None:
        writer.add_metadata({"/Title": title})
    if password is not None:
        writer.encrypt(user_password=password, owner_password="owner-secret", algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def convert(data: bytes, name: str = "manual.pdf", limits: Limits = LIMITS):
    return convert_pdf(name, data, limits)


def page_texts(markdown: str) -> dict[int, str]:
    """Each page's Markdown, keyed by page number, split at the markers."""
    parts = re.split(r"<!-- page: (\d+) -->\n", markdown)
    return {int(n): text for n, text in zip(parts[1::2], parts[2::2])}


def timed(fn):
    start = time.perf_counter()
    try:
        fn()
    finally:
        elapsed = time.perf_counter() - start
    return elapsed


# ------------------------------------------------------------------------------ Chromium

HTML = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Pump Handbook</title>
<style>
body { font-family: "Liberation Serif", serif; font-size: 12pt; width: 34em; }
h1 { font-size: 24pt; } h2 { font-size: 17pt; }
pre { font-family: "DejaVu Sans Mono", monospace; font-size: 10pt; margin: 1.2em 0; }
.next { break-before: page; }
</style></head><body>
<h1>Installing the pump</h1>
<p>Alpha paragraph: the pump stands on a level floor near the water inlet. Leave half a metre of space on
every side so that the service door opens fully and the cables can be reached later without tools.</p>
<p>Beta paragraph: connect the inlet hose before the outlet hose, and tighten both clamps by hand. The pump
is an exam-<br>ple of a unit that must never run dry.</p>
<h2>Wiring the controller</h2>
<p>Gamma paragraph: the controller takes a single phase supply through a fused spur.</p>
<pre>pump --start --speed 3
    # indented comment
pump --status</pre>
<h1 class="next">Maintenance</h1>
<p>Delta paragraph: clean the filter every month and replace the seal every year.</p>
<h2>Filter cartridges</h2>
<p>Epsilon paragraph: cartridges come in three grades; the medium grade suits most installations.</p>
<table><tr><td>Grade</td><td>Mesh</td></tr><tr><td>Coarse</td><td>80</td></tr></table>
<h1 class="next">Troubleshooting</h1>
<h2>Error codes</h2>
<p>Zeta paragraph: code E1 means the motor overheated; let it cool down for an hour.</p>
</body></html>
"""

HEADINGS = [(1, "Installing the pump"), (2, "Wiring the controller"), (1, "Maintenance"),
            (2, "Filter cartridges"), (1, "Troubleshooting"), (2, "Error codes")]
HEADING_PAGES = {"Installing the pump": 1, "Wiring the controller": 1, "Maintenance": 2,
                 "Filter cartridges": 2, "Troubleshooting": 3, "Error codes": 3}


def _print(tmp: Path, html: str, name: str, *extra: str) -> bytes:
    if not CHROMIUM.exists():
        pytest.skip("/usr/bin/chromium is not installed (apt-get install chromium): the realistic "
                    "PDF fixtures are printed with it")
    source = tmp / f"{name}.html"
    source.write_text(html, encoding="utf-8")
    out = tmp / f"{name}.pdf"
    subprocess.run([str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", *extra,
                    f"--print-to-pdf={out}", source.as_uri()],
                   check=True, capture_output=True, timeout=90)
    return out.read_bytes()


@pytest.fixture(scope="module")
def outlined(tmp_path_factory) -> bytes:
    """The handbook printed with Chromium's document outline (bookmarks) and no header/footer."""
    return _print(tmp_path_factory.mktemp("pdf"), HTML, "outlined", "--no-pdf-header-footer",
                  "--generate-pdf-document-outline")


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> bytes:
    """The handbook printed without an outline and with Chromium's header (date, title) and
    footer (URL, page n/m) on every page."""
    return _print(tmp_path_factory.mktemp("pdf"), HTML, "plain")


def headings_of(markdown: str) -> list[tuple[int, str]]:
    outside = re.sub(r"```.*?```", "", markdown, flags=re.S)
    return [(len(m.group(1)), m.group(2)) for m in re.finditer(r"^(#{1,6}) (.+)$", outside, re.M)]


def test_outline_headings_on_their_pages_and_page_markers(outlined):
    converted = convert(outlined)
    md = converted.markdown
    assert converted.kind == "pdf"
    assert headings_of(md) == HEADINGS
    assert [n for _, n in converted.pages] == [1, 2, 3]
    for offset, number in converted.pages:
        marker = PAGE_MARKER.format(n=number)
        assert md[offset:offset + len(marker) + 1] == marker + "\n"
        assert offset == 0 or md[offset - 1] == "\n"
    texts = page_texts(md)
    for title, number in HEADING_PAGES.items():
        assert re.search(rf"^#+ {title}$", texts[number], re.M), (title, number)
    assert converted.title == "Pump Handbook"


def test_paragraphs_in_reading_order_joined_and_hyphen_joined(outlined):
    md = convert(outlined).markdown
    words = ("Alpha", "Beta", "Gamma", "Delta", "Epsilon", "Zeta")
    order = [md.index(f"{word} paragraph:") for word in words]
    assert order == sorted(order)
    paragraphs = md.split("\n\n")
    alpha = next(p for p in paragraphs if p.startswith("Alpha paragraph"))
    assert "\n" not in alpha and alpha.endswith("without tools.")
    assert "is an example of a unit that must never run dry." in md
    assert "exam-" not in md
    # the table's cells are kept as text, in order
    assert re.search(r"Grade\s+Mesh\s+Coarse\s+80", md)


def test_monospace_lines_fenced_with_their_indentation(outlined):
    md = convert(outlined).markdown
    fence = re.search(r"```\n(.*?)\n```", md, re.S)
    assert fence is not None
    assert fence.group(1).splitlines() == ["pump --start --speed 3", "    # indented comment",
                                           "pump --status"]


def test_without_outline_headings_come_from_font_sizes_and_running_lines_go(plain):
    converted = convert(plain)
    assert headings_of(converted.markdown) == HEADINGS
    # Chromium's header (date, title) and footer (file URL, "1/3") are left out
    assert "file://" not in converted.markdown
    assert not re.search(r"^\d+/\d+$", converted.markdown, re.M)
    assert any("running headers/footers left out" in w for w in converted.warnings)
    assert "Beta paragraph: connect the inlet hose" in converted.markdown


def test_chunker_heading_paths_follow_the_pdf_headings(outlined):
    converted = convert(outlined)
    doc = parse_document(converted.markdown, "manuals/x.pdf.md", ChunkingSettings(), "2026-01-01")
    paths = {chunk.heading_path for chunk in doc.chunks}
    assert ("Installing the pump",) in paths
    assert ("Installing the pump", "Wiring the controller") in paths
    assert ("Maintenance", "Filter cartridges") in paths
    assert ("Troubleshooting", "Error codes") in paths
    by_text = {chunk.heading_path: chunk.text for chunk in doc.chunks}
    assert "Gamma paragraph" in by_text[("Installing the pump", "Wiring the controller")]
    assert "Zeta paragraph" in by_text[("Troubleshooting", "Error codes")]
    assert doc.title == "Installing the pump"


# ------------------------------------------------------------------------------ built with pypdf


def test_lines_join_into_paragraphs_split_at_gaps():
    page = text_page(lines([
        "The first paragraph starts on this line and",
        "goes on over a second line.",
        "",
        "The second paragraph has one line.",
        "",
        "A third one ends the page.",
    ]))
    md = convert(make_pdf([page])).markdown
    assert md == (
        "<!-- page: 1 -->\n\n"
        "The first paragraph starts on this line and goes on over a second line.\n\n"
        "The second paragraph has one line.\n\n"
        "A third one ends the page.\n"
    )


def test_hyphenated_line_breaks_join_and_real_hyphens_stay():
    page = text_page(lines([
        "A well known exam-",
        "ple of a hyphenated word, and an auto-",
        "run switch. Auto-run is written with a hyphen elsewhere.",
        "The number 2019-",
        "2020 and a Capital-",
        "Start keep their hyphens.",
    ]))
    md = convert(make_pdf([page])).markdown
    assert "A well known example of a hyphenated word, and an auto-run switch." in md
    assert "2019- 2020" in md and "Capital- Start" in md


def test_font_size_headings_ranked_and_bold_body_text_is_no_heading():
    runs = [("F2", 20, 72, 740, "Quick Start Guide")]
    runs += lines(["Body text introduces the guide in a sentence of", "ordinary size, two lines."], top=710)
    runs.append(("F2", 15, 72, 665, "First steps"))
    runs += lines(["Body text explains the first steps of the guide", "here, also over two lines."], top=640)
    runs += lines(["Bold words at body size"], top=605, font="F2")
    runs += lines(["Body text after a bold line that is not a", "heading at all."], top=580)
    runs.append(("F2", 15, 72, 535, "Second steps"))
    runs += lines(["Body text of the second steps, ordinary and", "plain."], top=510)
    converted = convert(make_pdf([text_page(runs)]))
    assert headings_of(converted.markdown) == [(1, "Quick Start Guide"), (2, "First steps"),
                                               (2, "Second steps")]
    assert "\n\nBold words at body size\n\nBody text after a bold line" in converted.markdown


def test_heading_over_two_lines_is_one_heading_and_adjacent_headings_stay_apart():
    runs = [("F2", 18, 72, 740, "A long chapter title that the layout"),
            ("F2", 18, 72, 720, "breaks over two lines")]
    runs += [("F2", 14, 72, 690, "Section one"), ("F2", 14, 72, 670, "Section two")]
    runs += lines(["Body text of section two goes here and", "continues on the next line."], top=645)
    md = convert(make_pdf([text_page(runs)])).markdown
    assert headings_of(md) == [(1, "A long chapter title that the layout breaks over two lines"),
                               (2, "Section one"), (2, "Section two")]


def test_large_type_paragraph_is_not_a_heading():
    big = [f"Large print line number {i} of a long introduction set in big type." for i in range(6)]
    body = [f"Ordinary body line {i} of the document continues the text." for i in range(12)]
    runs = lines(big, top=740, leading=20, size=15) + lines(body, top=600, size=11)
    md = convert(make_pdf([text_page(runs)])).markdown
    assert headings_of(md) == []
    assert "Large print line number 0 of a long introduction set in big type. Large print line number 1" in md


def test_outline_titles_not_on_the_page_go_to_its_top():
    pages = [
        text_page(lines(["Overview", "", "The overview explains everything in one paragraph."])),
        text_page(lines(["This page starts with body text and has no visible title."])),
    ]
    outline = [("Overview", 0, 1), ("Details", 1, 1), ("More details", 1, 2)]
    md = convert(make_pdf(pages, outline=outline)).markdown
    texts = page_texts(md)
    assert texts[1].startswith("\n# Overview\n\nThe overview explains everything")
    assert texts[2].startswith("\n# Details\n\n## More details\n\nThis page starts with body text")
    assert md.count("Overview") == 1


def test_courier_lines_become_a_fenced_block():
    runs = lines(["Run the tool like this:"]) + lines(["tool --check", "tool --run fast"], top=690,
                                                       font="F3", size=10, leading=12)
    runs.append(("F3", 10, 96, 666, "--verbose"))
    md = convert(make_pdf([text_page(runs)])).markdown
    assert "Run the tool like this:\n\n```\ntool --check\ntool --run fast\n    --verbose\n```" in md


def test_title_from_metadata_unless_junk():
    page = [text_page(lines(["Some text on the page."]))]
    assert convert(make_pdf(page, title="Pump Handbook 2026")).title == "Pump Handbook 2026"
    assert convert(make_pdf(page, title="Microsoft Word - handbook.docx")).title is None
    assert convert(make_pdf(page, title="scan_0042.pdf")).title is None
    assert convert(make_pdf(page, title="   ")).title is None
    assert convert(make_pdf(page)).title is None


def test_two_columns_are_named_in_a_warning():
    left = lines([f"Left column line {i} with enough words in it." for i in range(12)], x=60)
    right = lines([f"Right column line {i} with enough words in it." for i in range(12)], x=330)
    converted = convert(make_pdf([text_page(left + right)]))
    assert "page 1 set in more than one column: reading order guessed" in " ".join(converted.warnings)
    md = converted.markdown
    assert md.index("Left column line 11") < md.index("Right column line 0")


def test_running_headers_and_page_numbers_are_left_out():
    pages = []
    for n in range(1, 4):
        runs = [("F1", 8, 72, 770, "ACME Pump Handbook - Confidential")]
        runs += lines([f"Body text of page {n} is a paragraph of its own.", "It has a second line."])
        runs.append(("F1", 8, 300, 40, f"Page {n} of 3"))
        pages.append(text_page(runs))
    converted = convert(make_pdf(pages))
    assert "Confidential" not in converted.markdown and "of 3" not in converted.markdown
    assert "Body text of page 2 is a paragraph of its own. It has a second line." in converted.markdown


# ------------------------------------------------------------------------------ errors


def test_encrypted_with_a_password_is_refused():
    data = make_pdf([text_page(lines(["Secret text."]))], password="s3cret")
    with pytest.raises(EncryptedFileError) as err:
        convert(data, "secret.pdf")
    assert "secret.pdf is encrypted" in str(err.value)


def test_encrypted_with_an_empty_password_is_read_with_a_warning():
    data = make_pdf([text_page(lines(["Readable text behind an empty password."]))], password="")
    converted = convert(data)
    assert "Readable text behind an empty password." in converted.markdown
    assert any("empty password" in w for w in converted.warnings)


def test_truncated_file_is_damaged():
    data = make_pdf([text_page(lines([f"Line {i} of the page."])) for i in range(3)])
    with pytest.raises(DamagedFileError) as err:
        convert(data[: len(data) // 2], "cut.pdf")
    assert "truncated" in err.value.reason


def test_garbage_after_the_header_is_damaged():
    with pytest.raises(DamagedFileError):
        convert(b"%PDF-1.7\n" + bytes(range(256)) * 40 + b"\n%%EOF\n")


def test_zero_pages_is_damaged():
    writer = PdfWriter()
    out = io.BytesIO()
    writer.write(out)
    with pytest.raises(DamagedFileError) as err:
        convert(out.getvalue(), "empty.pdf")
    assert err.value.reason == "it has no pages"


def test_image_only_pdf_has_no_text_layer():
    scan = b"q 500 0 0 700 50 50 cm /Im1 Do Q"
    with pytest.raises(NoTextLayerError) as err:
        convert(make_pdf([scan, scan], images={0, 1}), "scan.pdf")
    assert err.value.pages == 2


def test_image_only_page_among_text_pages_is_named():
    pages = [text_page(lines(["Text on page one."])), b"q 500 0 0 700 50 50 cm /Im1 Do Q", b"",
             text_page(lines(["Text on page four."]))]
    converted = convert(make_pdf(pages, images={1}))
    assert "page 2 has no text (images only?)" in converted.warnings
    assert "page 3 is blank" in converted.warnings
    assert page_texts(converted.markdown)[2] == "\n"
    assert [n for _, n in converted.pages] == [1, 2, 3, 4]


@pytest.mark.parametrize("data, what", [
    (b"PK\x03\x04" + b"\x00" * 60, "zip archive"),
    (b"Just some notes, saved with the wrong name.\n", "it is text"),
    (b"", "empty"),
    (b"<!DOCTYPE html><html><body>hi</body></html>", "HTML"),
])
def test_not_a_pdf_is_unsupported(data, what):
    with pytest.raises(UnsupportedFormatError) as err:
        convert(data, "notes.pdf")
    assert what in err.value.what


def test_real_zip_named_pdf_is_unsupported():
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("word/document.xml", "<w:document/>")
    with pytest.raises(UnsupportedFormatError):
        convert(out.getvalue(), "report.pdf")


def test_library_failure_becomes_damaged_but_memory_error_passes(monkeypatch):
    data = make_pdf([text_page(lines(["Some text."]))])

    def broken(*args, **kwargs):
        raise RuntimeError("boom inside the library")

    monkeypatch.setattr(pypdf, "PdfReader", broken)
    with pytest.raises(DamagedFileError) as err:
        convert(data)
    assert "boom inside the library" in err.value.reason

    def no_memory(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(pypdf, "PdfReader", no_memory)
    with pytest.raises(MemoryError):
        convert(data)


# ------------------------------------------------------------------------------ hostile files


def _with_writer(build) -> bytes:
    writer = PdfWriter()
    build(writer)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def test_page_tree_claiming_millions_of_pages_is_refused_fast():
    def build(writer):
        writer.add_blank_page(612, 792)
        writer._root_object["/Pages"][NameObject("/Count")] = NumberObject(5_000_000)

    data = _with_writer(build)
    assert b"/Count 5000000" in data
    with pytest.raises(UnsafeFileError) as err:
        assert timed(lambda: convert(data, "huge.pdf")) < 2
    assert "5,000,000 pages" in err.value.reason
    # a limit lower than the real count refuses too
    small = make_pdf([text_page(lines(["x"]))] * 3)
    with pytest.raises(UnsafeFileError):
        convert(small, limits=Limits(max_pages=2))


def test_page_tree_that_refers_to_itself_is_refused_fast():
    def build(writer):
        writer.add_blank_page(612, 792)
        pages = writer._root_object["/Pages"]
        pages[NameObject("/Kids")] = ArrayObject([writer._root_object.raw_get("/Pages")] * 2)
        pages[NameObject("/Count")] = NumberObject(1)

    data = _with_writer(build)
    start = time.perf_counter()
    with pytest.raises((UnsafeFileError, DamagedFileError)):
        convert(data, "loop.pdf")
    assert time.perf_counter() - start < 3


def test_page_tree_sharing_its_nodes_is_refused_fast():
    """40 levels of nodes whose two kids are the same node: 2**40 pages from 40 objects."""

    def build(writer):
        writer.add_blank_page(612, 792)
        pages = writer._root_object["/Pages"]
        node = pages["/Kids"][0]
        for _ in range(40):
            parent = DictionaryObject({NameObject("/Type"): NameObject("/Pages"),
                                       NameObject("/Kids"): ArrayObject([node, node]),
                                       NameObject("/Count"): NumberObject(2)})
            node = writer._add_object(parent)
        pages[NameObject("/Kids")] = ArrayObject([node])
        pages[NameObject("/Count")] = NumberObject(2)

    data = _with_writer(build)
    start = time.perf_counter()
    with pytest.raises(UnsafeFileError):
        convert(data, "bomb.pdf")
    assert time.perf_counter() - start < 3


def raw_pdf(page_extra: bytes = b"", content: bytes = b"BT /F1 12 Tf 72 700 Td (Hello deep) Tj ET") -> bytes:
    """A one-page PDF written byte by byte (with a correct cross-reference table), so that
    objects pypdf's writer would refuse to write can be put in."""
    objects = {
        1: b"<< /Type /Catalog /Pages 2 0 R >>",
        2: b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        3: b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R " + page_extra
           + b" /Resources << /Font << /F1 << /Type /Font /Subtype /Type1 /BaseFont /Helvetica >> >> >> >>",
        4: b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream",
    }
    out = bytearray(b"%PDF-1.7\n")
    offsets = {}
    for number, body in objects.items():
        offsets[number] = len(out)
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 5\n0000000000 65535 f \n"
    out += b"".join(b"%010d 00000 n \n" % offsets[n] for n in range(1, 5))
    out += b"trailer\n<< /Size 5 /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % xref
    return bytes(out)


def test_raw_pdf_helper_makes_a_readable_file():
    assert "Hello deep" in convert(raw_pdf()).markdown


@pytest.mark.parametrize("page_extra, content", [
    (b"/Deep " + b"[" * 30_000 + b"]" * 30_000, None),
    (b"/Deep " + b"<< /A " * 30_000 + b"1" + b" >>" * 30_000, None),
    (b"", b"BT /F1 12 Tf 72 700 Td " + b"[" * 30_000 + b"(x)" + b"]" * 30_000 + b" TJ ET"),
], ids=["array-in-page", "dictionary-in-page", "array-in-content"])
def test_deeply_nested_objects_are_refused_fast(page_extra, content):
    data = raw_pdf(page_extra, content) if content else raw_pdf(page_extra)
    start = time.perf_counter()
    with pytest.raises(DamagedFileError) as err:
        convert(data, "deep.pdf")
    assert time.perf_counter() - start < 5
    assert "deep.pdf cannot be read" in str(err.value)


def test_decompression_bomb_page_is_left_out_fast():
    bomb = b"0 0 m\n" * (40 * 1024 * 1024 // 6)  # 40 MiB of drawing operators, ~40 KiB compressed
    pages = [text_page(lines(["Readable page before the bomb."])), bomb]
    writer_data = make_pdf(pages)
    reader = pypdf.PdfReader(io.BytesIO(writer_data))
    writer = PdfWriter(clone_from=reader)
    for page in writer.pages:
        page.compress_content_streams()
    out = io.BytesIO()
    writer.write(out)
    data = out.getvalue()
    assert len(data) < 2 * 1024 * 1024
    start = time.perf_counter()
    converted = convert(data, "bomb.pdf")
    assert time.perf_counter() - start < 5
    assert "Readable page before the bomb." in converted.markdown
    assert any("page 2 has too much content" in w for w in converted.warnings)


def test_page_with_endless_operators_stops_at_the_work_budget():
    # 3 MiB of text operators: under the size limit, over the operator budget
    ops = b"BT /F1 11 Tf 72 700 Td (x) Tj ET\n" * (3 * 1024 * 1024 // 33)
    pages = [text_page(lines(["Readable page."])), ops]
    start = time.perf_counter()
    converted = convert(make_pdf(pages), "ops.pdf")
    assert time.perf_counter() - start < 20
    assert "Readable page." in converted.markdown
    assert any("page 2 has too much content" in w for w in converted.warnings)


def test_page_of_thousands_of_lines_on_its_edge_baselines_is_read_in_bounded_time():
    """8,000 runs on the page's top and bottom baselines (within the work budget): finding the
    running headers among them looks each one's nearest baseline up (it compared every pair)."""
    runs = [("F1", 11, 72 + (i % 40) * 12, 700 if i % 2 else 100, "x") for i in range(8000)]
    data = make_pdf([text_page([("F1", 11, 72, 400, "Readable body line.")] + runs)])
    start = time.perf_counter()
    converted = convert(data, "edges.pdf")
    assert time.perf_counter() - start < 8  # 16 s before, ~1 s after on the 2-core machine
    assert "Readable body line." in converted.markdown


def test_form_drawn_a_thousand_times_stops_at_the_work_budget():
    """One page draws a form of 19,000 text operations 1,000 times: pypdf's own limits allow
    it (each stream is small enough), the converter's page budget stops it."""

    def build(writer):
        first = writer.add_blank_page(612, 792)
        stream = ContentStream(None, writer)
        stream.set_data(text_page(lines(["Readable page before the form page."])))
        first.replace_contents(stream)
        first[NameObject("/Resources")] = _resources()
        page = writer.add_blank_page(612, 792)
        form = DecodedStreamObject()
        form.set_data(b"BT /F1 11 Tf 72 700 Td (x) Tj ET\n" * 19_000)
        form.update({NameObject("/Type"): NameObject("/XObject"), NameObject("/Subtype"): NameObject("/Form"),
                     NameObject("/BBox"): ArrayObject([NumberObject(0), NumberObject(0), NumberObject(612),
                                                       NumberObject(792)]),
                     NameObject("/Resources"): _resources()})
        resources = _resources()
        resources[NameObject("/XObject")] = DictionaryObject({NameObject("/Fm1"): writer._add_object(form)})
        page[NameObject("/Resources")] = resources
        stream = ContentStream(None, writer)
        stream.set_data(b"/Fm1 Do\n" * 1000)
        page.replace_contents(stream)

    data = _with_writer(build)
    start = time.perf_counter()
    converted = convert(data, "forms.pdf")
    assert time.perf_counter() - start < 15
    assert "Readable page before the form page." in converted.markdown
    assert any("page 2 has too much content" in w for w in converted.warnings)


def test_words_survive_round_trip_of_a_long_document():
    words = [f"word{i}" for i in range(3000)]
    pages = []
    for start in range(0, len(words), 500):
        chunk = words[start:start + 500]
        rows = [" ".join(chunk[i:i + 10]) for i in range(0, len(chunk), 10)]
        pages.append(text_page(lines(rows, top=760, leading=14, size=10)))
    md = convert(make_pdf(pages)).markdown
    assert re.findall(r"word\d+", md) == words
