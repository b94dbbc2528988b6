"""Are a printed page's chunks under the headings of the sections they come from? (issue 32)

    .venv/bin/python -m benchmarks.pdf_print.make_pdfs          # the PDFs and their sources
    .venv/bin/python -m benchmarks.pdf_print.heading_share [--converter FILE.py] [--json]

Every PDF in ``docs/pdf/`` is converted by ``ragstream.knowledge.formats.pdf.convert_pdf`` (or by the
``convert_pdf`` of ``--converter FILE.py``, e.g. an earlier version: ``git show
HEAD:ragstream/knowledge/formats/pdf.py > /tmp/pdf_before.py``) and chunked as ingestion does
(``ingestor.converted_text``, then ``chunker.parse_document`` with the app's chunking
settings). So is each reference: the page's HTML (``html/<page>.html``, converted by
``ragstream.knowledge.formats.web``) and its Markdown source (``md/<page>.md``).

A chunk's *true section* is found in a reference: the first 48-character window of its text
(letters and digits only, lower case; windows taken every 16 characters over its first 600)
that occurs exactly once in the reference's chunks lies in some reference chunk; that
chunk's innermost heading is the true section. A chunk *is under its section* when its
own innermost heading is the same (letters and digits compared). Chunks none of whose windows
occur exactly once are *unlocated* and not counted (the count is shown).

Columns: ``pdf→html``, ``pdf→md``: the PDF's chunks against the HTML page and the Markdown
source; ``html→md``: the HTML page's chunks against the Markdown source (what the PDF should
come close to); ``html→html``, ``md→md``: each reference against itself (1.00 by construction,
less only where a window of a chunk occurs in an earlier one). Each cell is ``share (under /
located)``. ``libtasn1.pdf`` (TeX) has no source; its function reference is measured against
libtasn1's gtk-doc API reference (``html/libtasn1-libtasn1.html``: one section per function),
so only the chunks of its function descriptions are located.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ragstream.common.config import load_config
from ragstream.knowledge.ingest.chunker import parse_document
from ragstream.knowledge.ingest.ingestor import converted_text

DOCS = Path(__file__).resolve().parent / "docs"
WINDOW = 48
STEP = 16
SPAN = 600
DATE = "2026-01-01"


def norm(text: str) -> str:
    """Letters and digits only, lower case (what the PDF and its sources share)."""
    return re.sub(r"[\W_]+", "", text.lower())


@contextlib.contextmanager
def pdf_converter(path: str | None) -> Iterator[None]:
    """Ingestion's PDF conversion done by ``convert_pdf`` of the file ``path`` while inside."""
    if path is None:
        yield
        return
    import ragstream.knowledge.formats.pdf as current

    spec = importlib.util.spec_from_file_location("ragstream.formats._pdf_other", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    saved = current.convert_pdf
    current.convert_pdf = module.convert_pdf
    try:
        yield
    finally:
        current.convert_pdf = saved


def chunks(path: Path, settings: Any) -> list[Any]:
    """The file's chunks as ingestion makes them."""
    data = path.read_bytes()
    if path.suffix == ".md":
        text = data.decode("utf-8")
    else:
        text, _notes = converted_text(path.name, data)
    return list(parse_document(text, path.name, settings, DATE).chunks)


class Reference:
    """A reference document's chunks, as one stream of normalised text with the innermost
    heading of each stretch."""

    def __init__(self, reference_chunks: list[Any]):
        self.text = ""
        self.spans: list[tuple[int, str]] = []  # (start in text, innermost heading)
        for chunk in reference_chunks:
            self.spans.append((len(self.text), norm(chunk.heading_path[-1]) if chunk.heading_path else ""))
            self.text += norm(chunk.text) + "|"

    def section_of(self, chunk_text: str) -> str | None:
        """The innermost heading under which the chunk's first located window stands."""
        text = norm(chunk_text)
        for start in range(0, max(1, min(len(text), SPAN) - WINDOW + 1), STEP):
            key = text[start:start + WINDOW]
            if len(key) < min(WINDOW, len(text)) or len(key) < 16:
                break
            at = self.text.find(key)
            if at < 0 or self.text.find(key, at + 1) >= 0:
                continue
            heading = ""
            for begin, name in self.spans:
                if begin > at:
                    break
                heading = name
            return heading
        return None


def share(candidate: list[Any], reference: Reference, misses: list[str] | None = None) -> tuple[int, int]:
    """(chunks under their true section, chunks located) of ``candidate`` in ``reference``;
    ``misses`` gets a line for each chunk that is not under its section."""
    under = located = 0
    for chunk in candidate:
        true = reference.section_of(chunk.text)
        if true is None:
            continue
        located += 1
        own = norm(chunk.heading_path[-1]) if chunk.heading_path else ""
        under += own == true
        if own != true and misses is not None:
            start = " ".join(chunk.text.split())[:90]
            misses.append(f"  {chunk.doc_id}: under {own or '(none)'!r}, from {true or '(none)'!r}: {start}")
    return under, located


def cell(pair: tuple[int, int] | None) -> str:
    if pair is None:
        return "—"
    under, located = pair
    return f"{under / located:.2f} ({under}/{located})" if located else "— (0/0)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--converter", help="a pdf.py whose convert_pdf converts the PDFs instead")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--misses", action="store_true",
                        help="also list the PDF chunks not under their section (against the HTML page)")
    args = parser.parse_args(argv)
    pdfs = sorted((DOCS / "pdf").glob("*.pdf"))
    if not pdfs:
        print("no PDFs: run .venv/bin/python -m benchmarks.pdf_print.make_pdfs first", file=sys.stderr)
        return 1
    settings = load_config().settings.chunking
    columns = ("pdf→html", "pdf→md", "html→md", "html→html", "md→md")
    rows: dict[str, dict[str, tuple[int, int] | None]] = {}
    misses: list[str] = []
    with pdf_converter(args.converter):
        for pdf in pdfs:
            page = pdf.name.split(".")[0]
            html = DOCS / "html" / (f"{page}.html" if page != "libtasn1" else "libtasn1-libtasn1.html")
            md = DOCS / "md" / f"{page}.md"
            got = chunks(pdf, settings)
            html_chunks = chunks(html, settings) if html.is_file() else None
            md_chunks = chunks(md, settings) if md.is_file() else None
            html_ref = Reference(html_chunks) if html_chunks else None
            md_ref = Reference(md_chunks) if md_chunks else None
            rows[pdf.name] = {
                "pdf→html": share(got, html_ref, misses) if html_ref else None,
                "pdf→md": share(got, md_ref) if md_ref else None,
                "html→md": share(html_chunks, md_ref) if html_chunks and md_ref else None,
                "html→html": share(html_chunks, html_ref) if html_ref else None,
                "md→md": share(md_chunks, md_ref) if md_ref else None,
                "chunks": (len(got), len(got)),
            }
    groups = {"Chromium": [n for n in rows if n.count(".") == 1 and n != "libtasn1.pdf"],
              "LibreOffice": [n for n in rows if ".libreoffice." in n]}
    totals: dict[str, dict[str, tuple[int, int] | None]] = {}
    for group, names in groups.items():
        if names:
            totals[f"all {group}"] = {c: (sum(rows[n][c][0] for n in names if rows[n][c]),
                                          sum(rows[n][c][1] for n in names if rows[n][c])) for c in columns}
    if args.json:
        print(json.dumps({"converter": args.converter or "ragstream/knowledge/formats/pdf.py",
                          "documents": rows, "totals": totals}, indent=1))
        return 0
    print(f"converter: {args.converter or 'ragstream/knowledge/formats/pdf.py'}")
    width = max(len(n) for n in [*rows, *totals]) + 2
    print(f"{'document':<{width}}{'chunks':>7}  " + "".join(f"{c:<18}" for c in columns))
    for name, row in [*rows.items(), *totals.items()]:
        count = str(row["chunks"][0]) if "chunks" in row else ""
        print(f"{name:<{width}}{count:>7}  " + "".join(f"{cell(row.get(c)):<18}" for c in columns))
    if args.misses:
        print(f"\nPDF chunks not under their section (pdf→html), {len(misses)}:")
        print("\n".join(misses))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
