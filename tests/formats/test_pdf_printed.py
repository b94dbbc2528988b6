"""Tests for ragstream.knowledge.formats.pdf on printed documents (issue 32): headings at their outline
destinations, template placeholders left out, a reference's definition entries as sections.

Real files where they can be had: pages printed here by headless Chromium (a page written
here; Node.js's ``path.html`` from ``nodejs-doc``) and the TeX-made libtasn1 manual
(``libtasn1-doc``); the rules' edges on PDFs made here with pypdf (exact content streams)."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

pypdf = pytest.importorskip("pypdf", reason="the PDF converter needs pypdf (requirements.txt)")

from pypdf import PdfWriter  # noqa: E402
from pypdf.generic import (  # noqa: E402
    ContentStream,
    DictionaryObject,
    Fit,
    NameObject,
    TextStringObject,
)

from benchmarks.pdf_print.make_pdfs import print_chromium  # noqa: E402
from ragstream.common.config import ChunkingSettings  # noqa: E402
from ragstream.knowledge.formats import Limits  # noqa: E402
from ragstream.knowledge.formats.pdf import convert_pdf  # noqa: E402
from ragstream.knowledge.ingest.chunker import parse_document  # noqa: E402
from tests.formats.test_pdf import lines as column  # noqa: E402 (one under the other)
from tests.formats.test_pdf import text_page as draw  # noqa: E402 (the runs in the order given)

CHROMIUM = Path("/usr/bin/chromium")
NODE_PATH = Path("/usr/share/doc/nodejs/api/path.html")
TASN1 = Path("/usr/share/doc/libtasn1-doc/libtasn1.pdf")
NODE_MISSING = "nodejs-doc is not installed (scripts/setup.sh installs it for the tests)"
TASN1_MISSING = "libtasn1-doc is not installed (scripts/setup.sh installs it for the tests)"


# ------------------------------------------------------------------------------ helpers


def convert(data: bytes, name: str = "printed.pdf"):
    return convert_pdf(name, data, Limits())


def chunks_of(markdown: str) -> list:
    """The chunks ingestion makes of the converted Markdown."""
    return list(parse_document(markdown, "printed.pdf", ChunkingSettings(), "2026-01-01").chunks)


def section_of(chunks: list, text: str) -> tuple[str, ...]:
    """The heading path of the chunk that holds ``text`` (spacing ignored)."""
    wanted = " ".join(text.split())
    holding = [c for c in chunks if wanted in " ".join(c.text.split())]
    assert holding, f"no chunk holds {text!r}"
    return holding[0].heading_path


def headings_of(markdown: str) -> list[tuple[int, str]]:
    outside = re.sub(r"```.*?```", "", markdown, flags=re.S)
    return [(len(m.group(1)), m.group(2)) for m in re.finditer(r"^(#{1,6}) (.+)$", outside, re.M)]


def body_lines(markdown: str) -> list[str]:
    """The Markdown's lines that are not headings, page markers or fences."""
    return [line.strip() for line in markdown.splitlines()
            if line.strip() and not line.startswith(("#", "<!-- page", "```"))]


def print_pdf(source: Path, target: Path) -> bytes:
    """``source`` printed by headless Chromium as "Save as PDF" does, with the document outline."""
    print_chromium(source, target)
    return target.read_bytes()


def _fonts() -> DictionaryObject:
    fonts = DictionaryObject()
    for key, base in {"F1": "Helvetica", "F2": "Helvetica-Bold", "F3": "Courier"}.items():
        fonts[NameObject(f"/{key}")] = DictionaryObject({
            NameObject("/Type"): NameObject("/Font"), NameObject("/Subtype"): NameObject("/Type1"),
            NameObject("/BaseFont"): NameObject(f"/{base}"),
            NameObject("/Encoding"): NameObject("/WinAnsiEncoding")})
    return DictionaryObject({NameObject("/Font"): fonts})


def make_pdf(pages: list[bytes], outline: list[tuple[str, int, Fit | str]] = (),
             named: dict[str, tuple[int, Fit]] | None = None) -> bytes:
    """A PDF of the given content streams; ``outline`` as ``(title, page index, fit or the
    name of a destination in named)``, all at depth 1."""
    writer = PdfWriter()
    for content in pages:
        page = writer.add_blank_page(612, 792)
        stream = ContentStream(None, writer)
        stream.set_data(content)
        page.replace_contents(stream)
        page[NameObject("/Resources")] = _fonts()
    for name, (index, fit) in (named or {}).items():
        writer.add_named_destination(name, index, fit=fit)
    for title, index, fit in outline:
        if isinstance(fit, str):
            writer.add_outline_item_dict(DictionaryObject({NameObject("/Title"): TextStringObject(title),
                                                           NameObject("/Dest"): TextStringObject(fit)}))
        else:
            writer.add_outline_item(title, page_number=index, fit=fit)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


# ------------------------------------------------------------------------------ Chromium: a page written here

SECTIONS = [  # (level, heading, code word of its body)
    (2, "Choosing a site", "Amber"), (3, "Soil and drainage", "Birch"), (3, "Light and shelter", "Cedar"),
    (2, "Planting the trees", "Dahlia"), (3, "Spacing the rows", "Elder"),
    (2, "Caring for the orchard", "Fennel"), (3, "Pruning in winter", "Ginger"),
    (3, "Watering in summer", "Hazel"), (2, "Harvest", "Iris"),
]


def _paragraph(word: str, n: int) -> str:
    return (f"{word} sentence {n}: the {word.lower()} section says this in its own words, and it goes on "
            f"for a while so that the section fills a good part of the page, the way a real manual's "
            f"section does when it explains one step of the work with care, with examples, and with the "
            f"reasons behind it.")


# headings positioned (``position: relative``, as many sites' style sheets set them, Node.js's
# among them, for their anchor marks): Chromium paints them after the page's other text
ORCHARD = ("<!doctype html><html lang='en'><head><meta charset='utf-8'><title>Orchard manual</title>"
           "<style>body { font: 12pt 'Liberation Serif', serif; width: 36em; }"
           "h1, h2, h3 { position: relative; } h2 { font: bold 17pt sans-serif; } "
           "h3 { font: bold 14pt sans-serif; }</style></head><body>"
           "<h1>Orchard manual</h1>"
           + "".join(f"<h{level}>{title}</h{level}>"
                     + "".join(f"<p>{_paragraph(word, n)}</p>" for n in (1, 2, 3))
                     for level, title, word in SECTIONS)
           + "</body></html>")


@pytest.fixture(scope="module")
def orchard(tmp_path_factory) -> str:
    """The orchard manual printed by Chromium, converted."""
    if not CHROMIUM.exists():
        pytest.skip("/usr/bin/chromium is not installed (apt-get install chromium): the printed pages "
                    "are made with it")
    folder = tmp_path_factory.mktemp("orchard")
    source = folder / "orchard.html"
    source.write_text(ORCHARD, encoding="utf-8")
    return convert(print_pdf(source, folder / "orchard.pdf")).markdown


def test_printed_page_every_sentence_is_under_its_own_heading(orchard):
    assert headings_of(orchard) == [(1, "Orchard manual")] + [(level, title) for level, title, _w in SECTIONS]
    chunks = chunks_of(orchard)
    for _level, title, word in SECTIONS:
        for n in (1, 2, 3):
            assert section_of(chunks, f"{word} sentence {n}:")[-1] == title, (word, n)


def test_printed_page_headings_stand_before_their_text_and_only_once(orchard):
    for _level, title, word in SECTIONS:
        heading = re.search(rf"^#+ {re.escape(title)}$", orchard, re.M)
        assert heading is not None and heading.start() < orchard.index(f"{word} sentence 1:")
    assert not set(body_lines(orchard)) & {title for _l, title, _w in SECTIONS}


# ------------------------------------------------------------------------------ Chromium: Node.js's path page


@pytest.fixture(scope="module")
def node_path(tmp_path_factory) -> str:
    """Node.js's path.html (``nodejs-doc``) printed by Chromium, converted."""
    if not CHROMIUM.exists():
        pytest.skip("/usr/bin/chromium is not installed (apt-get install chromium): the printed pages "
                    "are made with it")
    if not NODE_PATH.is_file():
        pytest.skip(NODE_MISSING)
    folder = tmp_path_factory.mktemp("node")
    converted = convert(print_pdf(NODE_PATH, folder / "path.pdf"), "path.pdf")
    return converted.markdown


def test_node_page_headings_at_their_destinations(node_path):
    chunks = chunks_of(node_path)
    assert section_of(chunks, "The default operation of the node:path module varies")[-1] == \
        "Windows vs. POSIX"
    assert section_of(chunks, "The path.basename() method returns the last portion of a path")[-1] == \
        "path.basename(path[, suffix])"
    assert section_of(chunks, "The path.dirname() method returns the directory name of a path")[-1] == \
        "path.dirname(path)"
    assert section_of(chunks, "The path.join() method joins all given path segments")[-1] == \
        "path.join([...paths])"
    assert section_of(chunks, "The node:path module provides utilities")[-1] == "Path"
    windows = re.search(r"^#+ Windows vs\. POSIX$", node_path, re.M)
    assert windows is not None and windows.start() < node_path.index("The default operation of the node:path")
    # a heading's title is not left behind as a line of text
    assert "Windows vs. POSIX" not in body_lines(node_path)
    assert "path.basename(path[, suffix])" not in body_lines(node_path)


def test_node_page_template_placeholder_left_out(node_path):
    assert "__JS_FLAVORED_DYNAMIC_CSS__" not in node_path


# ------------------------------------------------------------------------------ TeX: the libtasn1 manual


@pytest.fixture(scope="module")
def tasn1() -> str:
    if not TASN1.is_file():
        pytest.skip(TASN1_MISSING)
    return convert(TASN1.read_bytes(), "libtasn1.pdf").markdown


def test_tex_manual_outline_headings_at_their_destinations(tasn1):
    chunks = chunks_of(tasn1)
    assert section_of(chunks, "The parser is case sensitive.")[-1] == "ASN.1 syntax"
    # the numbered heading line (2.1 ASN.1 syntax) is the outline's heading, not text too
    assert "2.1 ASN.1 syntax" not in body_lines(tasn1)


def test_tex_manual_functions_are_sections_of_their_own(tasn1):
    headings = [title for _level, title in headings_of(tasn1)]
    assert {"asn1_der_coding", "asn1_bit_der", "asn1_der_decoding", "asn1_parser2tree"} <= set(headings)
    chunks = chunks_of(tasn1)
    path = section_of(chunks, "Creates the DER encoding for the NAME structure")
    assert path[-2:] == ("DER functions", "asn1_der_coding")
    own = " ".join(" ".join(c.text.split()) for c in chunks if c.heading_path == path)
    assert "int asn1_der_coding (" in own and "[Function]" in own
    assert own.count("Returns:") == 1 and "ASN1_MEM_ERROR if the ider vector" in own
    # the function before it keeps its own description
    assert section_of(chunks, "Note that the BIT STRING tag is not included in the output.")[-1] == \
        "asn1_bit_der"
    assert "asn1 der coding" not in body_lines(tasn1)  # the title set over the entry became its heading


# ------------------------------------------------------------------------------ made with pypdf: edges


def test_headings_drawn_after_the_text_go_to_their_destinations():
    body = column(["Intro text about the tool stands first.", "", "Setup text explains the steps.", "",
                   "Usage text shows the commands."], top=700)
    # the body sits at 700, 672, 644; headings are drawn last, at their places above each text
    headings = [("F2", 14, 72, 715, "Overview"), ("F2", 14, 72, 687, "Setup"), ("F2", 14, 72, 659, "Usage")]
    outline = [("Overview", 0, Fit.xyz(72, 730)), ("Setup", 0, Fit.xyz(72, 702)),
               ("Usage", 0, Fit.xyz(72, 674))]
    md = convert(make_pdf([draw(body + headings)], outline)).markdown
    assert md.index("# Overview") < md.index("Intro text") < md.index("# Setup") < md.index("Setup text") \
        < md.index("# Usage") < md.index("Usage text")
    assert md.count("Setup") == 2 and md.count("Overview") == 1  # "Setup text" and the heading


def test_named_destinations_and_untitled_positions():
    body = column(["First part of the page.", "", "", "Second part of the page."], top=700)
    named = {"sec.second": (0, Fit.xyz(72, 665))}
    outline = [("Second part", 0, "sec.second")]
    md = convert(make_pdf([draw(body)], outline, named)).markdown
    # no line shows the title: the heading stands at the destination, between the two parts
    assert md.index("First part") < md.index("# Second part") < md.index("Second part of the page")


def test_numbered_heading_line_shows_the_outline_title():
    body = column(["2.1 Syntax rules", "", "The syntax is case sensitive."], top=700)
    md = convert(make_pdf([draw(body)], [("Syntax rules", 0, Fit.xyz(90, 715))])).markdown
    assert "# Syntax rules\n\nThe syntax is case sensitive." in md
    assert "2.1 Syntax rules" not in md


def test_heading_moved_to_the_next_page_with_a_repeated_title():
    first = column(["The first page ends with this paragraph."], top=700)
    second = column(["The next section starts on the second page."], top=720)
    second += [("F3", 13, 72, 750, "rl.close()")]
    outline = [("rl.close()rl.close()", 0, Fit.xyz(72, 40))]
    md = convert(make_pdf([draw(first), draw(second)], outline)).markdown
    assert "<!-- page: 2 -->\n\n# rl.close()\n\nThe next section starts" in md
    assert md.count("rl.close()") == 1


def test_heading_in_the_right_column_stays_in_its_column():
    left = column([f"Left column line {n} about apples and pears." for n in range(1, 13)],
                  top=700, x=54, size=9, leading=12)
    right = column([f"Right column line {n} about plums and figs." for n in range(1, 13)],
                   top=700, x=320, size=9, leading=12)
    heading = [("F2", 12, 320, 620, "Plums")]  # in the right column, between its lines 7 and 8
    outline = [("Plums", 0, Fit.xyz(320, 632))]
    md = convert(make_pdf([draw(left + right + heading)], outline)).markdown
    # not between the left column's lines 7 and 8, which stand at the same heights
    assert md.index("Left column line 12") < md.index("Right column line 7") < md.index("# Plums") \
        < md.index("Right column line 8")


def test_placeholders_alone_left_out_dunders_in_text_and_code_kept():
    runs = column(["__SITE_DYNAMIC_CSS__", "", "{{ page.footer }}", "", "Call __init__ to set the object up,",
                   "then render {{ name }} in the template."], top=720)
    runs += column(["__MAIN_HOOK__", "{{ title }}"], top=600, font="F3", size=10, leading=12)
    md = convert(make_pdf([draw(runs)])).markdown
    assert "__SITE_DYNAMIC_CSS__" not in md and "{{ page.footer }}" not in md
    assert "Call __init__ to set the object up, then render {{ name }} in the template." in md
    assert "__MAIN_HOOK__\n{{ title }}" in md  # a code block keeps them


def test_placeholder_named_in_the_text_is_kept():
    runs = column(["__BUILD_NUMBER_TAG__", "", "The template fills __BUILD_NUMBER_TAG__ at build time."],
                  top=720)
    md = convert(make_pdf([draw(runs)])).markdown
    assert md.count("__BUILD_NUMBER_TAG__") == 2


def _texinfo_entry(name: str, top: float, text: str) -> list[tuple[str, float, float, float, str]]:
    """One Texinfo definition as TeX sets it: the category at the right margin (drawn first),
    the signature, an indented description."""
    return [("F1", 12, 474, top, "[Function]"), ("F1", 12, 90, top, f"int {name} (int flags)"),
            ("F1", 11, 118, top - 16, f"{text} Returns: zero on success for {name}.")]


def test_texinfo_definitions_become_sections_under_the_outline_heading():
    runs = [("F2", 14, 90, 740, "Setup functions")]
    runs += _texinfo_entry("lib_init", 700, "Starts the library.")
    runs += _texinfo_entry("lib_done", 650, "Stops it.")
    runs += _texinfo_entry("lib_reset", 600, "Resets the state.")
    md = convert(make_pdf([draw(runs)], [("Setup functions", 0, Fit.xyz(90, 755))])).markdown
    assert headings_of(md) == [(1, "Setup functions"), (2, "lib_init"), (2, "lib_done"), (2, "lib_reset")]
    chunks = chunks_of(md)
    assert section_of(chunks, "Stops it.")[-1] == "lib_done"
    assert "int lib_done (int flags) [Function]" in md


def test_signatures_repeated_become_sections_a_lone_one_stays_text():
    entries = []
    for n, name in enumerate(("open_file", "read_file", "close_file")):
        top = 700 - 70 * n
        entries += [("F3", 10, 72, top, f"{name}(path, mode)"),
                    ("F1", 11, 96, top - 16, f"The {name} call works on one file and says what it did.")]
    md = convert(make_pdf([draw(entries)])).markdown
    assert [title for _l, title in headings_of(md)] == ["open_file", "read_file", "close_file"]
    lone = [("F3", 10, 72, 700, "open_file(path, mode)"),
            ("F1", 11, 96, 684, "The call works on one file and says what it did.")]
    assert headings_of(convert(make_pdf([draw(lone)])).markdown) == []


# ------------------------------------------------------------------ Chromium: inline code set smaller

#: a paragraph whose wrapped lines are mostly, or wholly, inline code set smaller than its text
#: (Node.js's pages set ``code`` at 0.9em): a line's size is its prose's, so the paragraph
#: does not break where such a line starts
INLINE_CODE = ("<!doctype html><html lang='en'><head><meta charset='utf-8'><title>Warnings</title>"
               "<style>body { font: 12pt 'Liberation Serif', serif; width: 30em; } "
               "code { font: 9pt 'Liberation Mono', monospace; }</style></head><body>"
               "<h1>Warnings</h1>"
               "<p>The emitted warning can be inspected with a listener and has the emitter, type and "
               "count properties, referring to the emitter instance and the event's name. Its name "
               "property is set to <code>'MaxListenersExceededWarningForListenersOfTheSameEvent'</code> "
               "by the emitter.</p>"
               "<p>The resolver accepts the options <code>aaaaaaaaaaaa bbbbbbbbbbbb cccccccccccc "
               "dddddddddddd eeeeeeeeeeee ffffffffffff gggggggggggg hhhhhhhhhhhh iiiiiiiiiiii "
               "jjjjjjjjjjjj kkkkkkkkkkkk llllllllllll mmmmmmmmmmmm nnnnnnnnnnnn</code> in any order.</p>"
               "<p>A third paragraph stands apart.</p></body></html>")


def test_printed_paragraph_goes_on_over_lines_of_smaller_inline_code(tmp_path):
    if not CHROMIUM.exists():
        pytest.skip("/usr/bin/chromium is not installed (apt-get install chromium): the printed pages "
                    "are made with it")
    source = tmp_path / "warnings.html"
    source.write_text(INLINE_CODE, encoding="utf-8")
    markdown = convert(print_pdf(source, tmp_path / "warnings.pdf")).markdown
    paragraphs = [p for p in body_lines(markdown) if p.strip()]
    first = next(p for p in paragraphs if p.startswith("The emitted warning"))
    assert "MaxListenersExceededWarningForListenersOfTheSameEvent" in first
    assert first.rstrip().endswith("emitter.")
    second = next(p for p in paragraphs if p.startswith("The resolver accepts"))
    assert "nnnnnnnnnnnn" in second and second.rstrip().endswith("in any order.")
    assert "```" not in markdown  # inline code is not a code block
    assert any(p.startswith("A third paragraph") for p in paragraphs)  # paragraphs still part


# ------------------------------------------------------------------------------ list bullets drawn as shapes

NODE_DNS = Path("/usr/share/doc/nodejs/api/dns.html")
CHROMIUM_MISSING = ("/usr/bin/chromium is not installed (apt-get install chromium): the printed pages are "
                    "made with it")

#: a long item, wrapped over three lines or more at 30em
LONG_ITEM = ("Pears picked late in the season, kept in a cool cellar on wooden racks and turned every "
             "week, so that they ripen one after the other and none of them is lost before the winter "
             "is over and the first spring market opens again")

#: Chromium paints a ``<ul>``'s discs as small filled circles, not as text
SHOPPING = ("<!doctype html><html lang='en'><head><meta charset='utf-8'><title>Cellar</title>"
            "<style>body { font: 12pt 'Liberation Serif', serif; width: 30em; }</style></head><body>"
            "<h1>Cellar</h1>"
            "<p>Before the list stands this paragraph about the cellar and what is kept in it.</p>"
            "<ul><li>Apples from the old tree by the gate</li>"
            f"<li>{LONG_ITEM}</li>"
            "<li>Plums dried on the roof</li>"
            "<li>Figs for the cake</li></ul>"
            "<p>After the list another paragraph stands on its own, saying when the cellar is "
            "cleaned.</p>"
            "<ul><li>Outer item<ul><li>Inner item one</li><li>Inner item two</li></ul></li>"
            "<li>Second outer item</li></ul>"
            "<ol><li>First numbered step</li><li>Second numbered step</li></ol>"
            "</body></html>")


@pytest.fixture(scope="module")
def shopping(tmp_path_factory) -> str:
    """The cellar page printed by Chromium, converted."""
    if not CHROMIUM.exists():
        pytest.skip(CHROMIUM_MISSING)
    folder = tmp_path_factory.mktemp("cellar")
    source = folder / "cellar.html"
    source.write_text(SHOPPING, encoding="utf-8")
    return convert(print_pdf(source, folder / "cellar.pdf")).markdown


def test_printed_list_items_with_drawn_bullets_are_list_items(shopping):
    lines = body_lines(shopping)
    items = [line for line in lines if line.startswith("- ")]
    assert items[:4] == ["- Apples from the old tree by the gate", f"- {LONG_ITEM}",
                         "- Plums dried on the roof", "- Figs for the cake"]
    # the wrapped item is one item, its text whole and nowhere else
    assert shopping.count("spring market opens again") == 1
    assert "Before the list stands this paragraph about the cellar and what is kept in it." in lines
    assert ("After the list another paragraph stands on its own, saying when the cellar is cleaned."
            in lines)


def test_printed_nested_list_items_are_indented_numbered_lists_left_alone(shopping):
    rows = [row.rstrip() for row in shopping.splitlines() if row.strip()]
    start = rows.index("- Outer item")
    assert rows[start:start + 4] == ["- Outer item", "  - Inner item one", "  - Inner item two",
                                     "- Second outer item"]
    # an ordered list prints its numbers as text: no bullets are made up for it
    assert "First numbered step" in shopping
    assert not any(row.lstrip().startswith("- ") and "numbered step" in row for row in rows)


def test_node_dns_page_getaddrinfo_flags_are_list_items(tmp_path):
    if not CHROMIUM.exists():
        pytest.skip(CHROMIUM_MISSING)
    if not NODE_DNS.is_file():
        pytest.skip(NODE_MISSING)
    markdown = convert(print_pdf(NODE_DNS, tmp_path / "dns.pdf"), "dns.pdf").markdown
    lines = body_lines(markdown)
    flags = [line for line in lines if line.startswith(("- dns.ADDRCONFIG", "- dns.V4MAPPED", "- dns.ALL"))]
    assert [line[2:].split(":")[0].strip() for line in flags] == ["dns.ADDRCONFIG", "dns.V4MAPPED", "dns.ALL"]
    # each item whole (its wrapped lines joined to it), none running into the next
    assert flags[0].rstrip().endswith("has at least one IPv4 address configured.")
    assert flags[1].rstrip().endswith("(e.g. FreeBSD 10.1).")
    assert flags[2].rstrip().endswith("IPv4 mapped IPv6 addresses.")
    # a list of parameters set in a monospace font is a list, its nested items indented
    assert "- callback <Function>" in markdown and "\n  - err <Error>" in markdown


def _shape_page(shapes: str, runs: list[tuple[str, float, float, float, str]]) -> bytes:
    return shapes.encode() + b"\n" + draw(runs)


def test_small_square_left_of_a_line_is_a_bullet_rules_and_borders_are_not():
    runs = [("F1", 11, 72, 700, "The paragraph before the list."),
            ("F1", 11, 90, 680, "First item of the list"),
            ("F1", 11, 90, 666, "Second item, which goes on"),
            ("F1", 11, 90, 652, "over a second line."),
            ("F1", 11, 90, 630, "Text beside a table border"),
            ("F1", 11, 90, 610, "Text beside a large box"),
            ("F1", 11, 90, 590, "Text over an underline")]
    shapes = ("80 681.5 3 3 re f\n80 667.5 3 3 re f\n"  # bullets: 3 pt squares, 7 pt left of the text
              "86 626 0.6 14 re f\n"                    # a cell's border: thin and tall
              "70 606 14 14 re f\n"                     # a box larger than the letters
              "72 588 120 0.7 re f\n"                   # an underline: thin and long
              "72 600 m 540 600 l S")                   # a rule across the page
    md = convert(make_pdf([_shape_page(shapes, runs)])).markdown
    lines = body_lines(md)
    assert "- First item of the list" in lines
    assert "- Second item, which goes on over a second line." in lines
    assert "The paragraph before the list." in lines
    assert not [line for line in lines if line.startswith("- ") and "Text" in line]


def test_bullets_placed_by_a_flipped_transformation():
    # Chromium's matrices: y down the page in CSS pixels, text matrices flipped back
    content = (b"q 0.75 0 0 -0.75 27.75 764.25 cm\n"
               b"BT /F1 16 Tf 1 0 0 -1 8 94 Tm (Intro paragraph before the list.) Tj ET\n"
               b"36 122 4 4 re f\n"
               b"BT /F1 16 Tf 1 0 0 -1 48 128 Tm (Alpha item) Tj ET\n"
               b"36 140 4 4 re f\n"
               b"BT /F1 16 Tf 1 0 0 -1 48 146 Tm (Beta item) Tj ET\n"
               b"BT /F1 16 Tf 1 0 0 -1 8 180 Tm (Closing paragraph.) Tj ET\nQ")
    lines = body_lines(convert(make_pdf([content])).markdown)
    assert lines == ["Intro paragraph before the list.", "- Alpha item", "- Beta item", "Closing paragraph."]


def test_printed_punctuation_after_inline_code_has_no_space_before_it(tmp_path):
    """Chromium pads a ``<code>``; pypdf reads the gap after it as a space: "dns.lookup() ."."""
    if not CHROMIUM.exists():
        pytest.skip("/usr/bin/chromium is not installed (apt-get install chromium): the printed pages "
                    "are made with it")
    source = tmp_path / "calls.html"
    source.write_text("<!doctype html><html lang='en'><head><meta charset='utf-8'><title>Calls</title>"
                      "<style>code { font-family: monospace; padding: 0 4px; background: #eee; }</style>"
                      "</head><body><h1>Calls</h1><p>Call <code>dns.lookup()</code>. Then pass "
                      "<code>family</code>, <code>hints</code>; and read <code>address</code>: it is "
                      "a string (see <code>net.isIP()</code>) with its <code>family</code> number.</p>"
                      "</body></html>", encoding="utf-8")
    text = " ".join(body_lines(convert(print_pdf(source, tmp_path / "calls.pdf")).markdown))
    assert ("Call dns.lookup(). Then pass family, hints; and read address: it is a string "
            "(see net.isIP()) with its family number.") in text
