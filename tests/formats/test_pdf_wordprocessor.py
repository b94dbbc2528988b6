"""A word processor's PDF (issue 32: "Chromium's, LibreOffice's, TeX's and Word's PDFs"): a DOCX
written with python-docx — Word's file format, its built-in Heading and List Bullet styles —
exported to PDF by LibreOffice Writer with bookmarks from its headings, as "Export as PDF"
does (Word itself does not run here), then converted as ingestion converts it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

docx = pytest.importorskip("docx", reason="python-docx (requirements.txt) writes the document")

from benchmarks.pdf_print.make_pdfs import print_libreoffice  # noqa: E402
from tests.formats.test_pdf_printed import (  # noqa: E402
    _paragraph,
    body_lines,
    chunks_of,
    convert,
    headings_of,
    section_of,
)

SECTIONS = [(1, "Mooring the boat", "Mooring"), (2, "At spring tide", "Spring"),
            (2, "At neap tide", "Neap"), (1, "Leaving the harbour", "Leaving")]
ITEMS = ["Check the lines twice.",
         "Fender the starboard side, where the old timbers of the pier stand out the furthest at "
         "low water, rub the hull in a swell and leave marks that take a morning to polish away.",
         "Note the time of high water."]


@pytest.fixture(scope="module")
def harbour(tmp_path_factory) -> str:
    """The harbour handbook written as a DOCX and exported to PDF by LibreOffice, converted."""
    if shutil.which("soffice") is None:
        pytest.skip("LibreOffice is not installed (scripts/setup.sh --browser installs "
                    "libreoffice-writer-nogui): the word processor's PDF is made with it")
    folder = tmp_path_factory.mktemp("harbour")
    document = docx.Document()
    document.add_heading("Harbour handbook", 0)  # the Title style: not in the outline
    for level, title, word in SECTIONS:
        document.add_heading(title, level)
        for n in (1, 2, 3):
            document.add_paragraph(_paragraph(word, n))
        if word == "Spring":
            for item in ITEMS:
                document.add_paragraph(item, style="List Bullet")
    document.save(folder / "harbour.docx")
    pdf = print_libreoffice(folder / "harbour.docx", folder)
    return convert(Path(pdf).read_bytes(), "harbour.pdf").markdown


def test_word_processor_pdf_headings_stand_over_their_own_text(harbour):
    assert headings_of(harbour) == [(level, title) for level, title, _w in SECTIONS]
    chunks = chunks_of(harbour)
    for _level, title, word in SECTIONS:
        for n in (1, 2, 3):
            assert section_of(chunks, f"{word} sentence {n}:")[-1] == title, (word, n)


def test_word_processor_pdf_bullets_are_list_items(harbour):
    """The bullets are a symbol font's glyph (a private-use character): each item is a list
    item of its own, whole, and no glyph is left in the text."""
    items = [line for line in body_lines(harbour) if line.startswith("- ")]
    assert items == [f"- {item}" for item in ITEMS]
    assert not any("\ue000" <= ch <= "\uf8ff" for ch in harbour)
    assert section_of(chunks_of(harbour), "Note the time of high water.")[-1] == "At spring tide"
