"""What every converter returns (``Converted``) and keeps to (``Limits``), and the names the
ingestion shares with them: the converter version in a converted file's hash, the page marker
and the file endings read through a converter. Apart from ``formats/__init__.py`` (which picks
the converter) so that no converter imports the module that imports it."""

from __future__ import annotations

from dataclasses import dataclass, field

#: part of a converted file's stored hash: a change to what the converters write re-ingests
#: every converted file once
CONVERTER = "formats-8\0"

#: a paged document's page marker, on a line of its own before each page's text (PDF)
PAGE_MARKER = "<!-- page: {n} -->"


@dataclass(frozen=True)
class Limits:
    """What a converter reads at most before it refuses a file as unsafe."""

    #: pages of a PDF (a file claiming more is refused before its pages are read)
    max_pages: int = 2_000
    #: bytes all members of a zip-based file (DOCX, PPTX, EPUB) unpack to together
    max_unpacked_bytes: int = 256 * 1024 * 1024
    #: how many times larger than its compressed size one zip member may unpack
    max_ratio: float = 200.0
    #: members of a zip-based file
    max_members: int = 10_000


@dataclass
class Converted:
    """One converted document."""

    #: the document as Markdown: headings ``#``…``######``, pipe tables, fenced code
    markdown: str
    #: its title where the file names one (PDF/DOCX/EPUB metadata, HTML ``<title>``)
    title: str | None = None
    #: the format read: ``pdf``, ``docx``, ``pptx``, ``html``, ``epub``
    kind: str = ""
    #: for a paged format: ``(character offset in markdown, page number)`` at each page start
    pages: list[tuple[int, int]] = field(default_factory=list)
    #: what was left out or guessed, for the ingest report (e.g. "3 images left out")
    warnings: list[str] = field(default_factory=list)


#: the file name endings ingestion reads through a converter, and the format each names
CONVERTED_SUFFIXES: dict[str, str] = {
    ".pdf": "pdf", ".docx": "docx", ".pptx": "pptx", ".html": "html", ".htm": "html",
    ".xhtml": "html", ".epub": "epub",
}
