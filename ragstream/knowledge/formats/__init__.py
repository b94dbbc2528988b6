"""Format converters: a PDF, Word, PowerPoint, HTML or EPUB file turned into Markdown that the
chunker reads like any other document (headings → the heading path, tables as pipe tables,
code fenced).

    from ragstream.knowledge.formats import convert, Limits
    converted = convert("manual.pdf", data)       # -> Converted, or a typed IngestError
    converted.markdown, converted.pages, converted.warnings

One module per family: ``pdf`` (PDF), ``office`` (DOCX, PPTX), ``web`` (HTML, EPUB); what they
share (file signatures, Markdown escaping, code spans, pipe tables, titles) in ``markdown_out``.
The name says which converter reads a file, and the converter checks the bytes: a ``.docx``
that is not a Word file is refused with what it is. Every converter keeps the bounds of
``Limits`` (pages, unpacked bytes of a zip, compression ratio, nesting), so a hostile file is
refused in bounded time and memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: part of a converted file's stored hash: a change to what the converters write re-ingests
#: every converted file once
CONVERTER = "formats-6\0"

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

def convert(name: str, data: bytes, limits: Limits | None = None) -> Converted:
    """``data`` (the file ``name``) as Markdown, by the format its name says: its converter
    checks the bytes are that format (``UnsupportedFormatError`` naming what they are instead,
    e.g. a PDF named ``.docx``) and raises its own typed errors; ``UnsupportedFormatError`` too
    when the name's type is not one ingestion converts."""
    from ragstream.common.errors import UnsupportedFormatError

    limits = limits or Limits()
    suffix = "." + name.rsplit(".", 1)[-1].lower() if "." in name else ""
    claimed = CONVERTED_SUFFIXES.get(suffix)
    if claimed is None:
        raise UnsupportedFormatError(name, f"files ending {suffix or '(no extension)'} are not read")
    if claimed == "pdf":
        from ragstream.knowledge.formats.pdf import convert_pdf
        return convert_pdf(name, data, limits)
    if claimed in ("docx", "pptx"):
        from ragstream.knowledge.formats import office
        return (office.convert_docx if claimed == "docx" else office.convert_pptx)(name, data, limits)
    from ragstream.knowledge.formats import web
    return (web.convert_epub if claimed == "epub" else web.convert_html)(name, data, limits)
