"""Format converters: a PDF, Word, PowerPoint, HTML or EPUB file turned into Markdown that the
chunker reads like any other document (headings → the heading path, tables as pipe tables,
code fenced).

    from ragstream.formats import convert, Limits
    converted = convert("manual.pdf", data)       # -> Converted, or a typed IngestError
    converted.markdown, converted.pages, converted.warnings

One module per family: ``pdf`` (PDF), ``office`` (DOCX, PPTX), ``web`` (HTML, EPUB). The type is
decided by the file's bytes, not its name: a ``.docx`` that is not a Word file is refused with
what it is. Every converter keeps the bounds of ``Limits`` (pages, unpacked bytes of a zip,
compression ratio, nesting), so a hostile file is refused in bounded time and memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: part of a converted file's stored hash: a change to what the converters write re-ingests
#: every converted file once
CONVERTER = "formats-1\0"

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

_OLE = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"


def detect(data: bytes) -> str | None:
    """The format ``data`` is, by its bytes: ``pdf``, ``docx``, ``pptx``, ``epub``, ``zip``
    (another zip), ``ole`` (a legacy or encrypted Office file), ``html``, or None (something
    else: text, an image…)."""
    head = data[:1024]
    if head.lstrip(b"\x00\t\n\r ").startswith(b"%PDF-") or b"%PDF-" in head[:1024]:
        return "pdf"
    if head.startswith(_OLE):
        return "ole"
    if head.startswith(b"PK\x03\x04"):
        if head[30:38] == b"mimetype" and b"application/epub+zip" in head[38:100]:
            return "epub"
        # the parts' names sit in the local headers and the central directory at the end
        if b"word/" in data[-65_536:] or b"word/document.xml" in head:
            return "docx"
        if b"ppt/" in data[-65_536:] or b"ppt/presentation.xml" in head:
            return "pptx"
        if b"META-INF/container.xml" in data[-65_536:]:
            return "epub"
        return "zip"
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    if text.startswith((b"<!doctype html", b"<html", b"<?xml")) and b"<html" in data[:4096].lower():
        return "html"
    if text.startswith((b"<head", b"<body", b"<meta", b"<title", b"<!--")) and b"<" in text:
        return "html" if b"<html" in data[:4096].lower() or b"<body" in data[:4096].lower() else None
    return None


_WHAT = {"pdf": "a PDF", "docx": "a Word (.docx) file", "pptx": "a PowerPoint (.pptx) file",
         "epub": "an EPUB book", "zip": "a zip archive", "ole": "a legacy Office 97-2003 file",
         "html": "an HTML page"}


def convert(name: str, data: bytes, limits: Limits | None = None) -> Converted:
    """``data`` (the file ``name``) as Markdown, by the format its name says — checked against
    its bytes: ``UnsupportedFormatError`` when the name's type is not one ingestion converts or
    the bytes are something else; the converters' own typed errors otherwise."""
    from ragstream.errors import UnsupportedFormatError

    limits = limits or Limits()
    suffix = "." + name.rsplit(".", 1)[-1].lower() if "." in name else ""
    claimed = CONVERTED_SUFFIXES.get(suffix)
    if claimed is None:
        raise UnsupportedFormatError(name, f"files ending {suffix or '(no extension)'} are not read")
    found = detect(data)
    ole = claimed in ("docx", "pptx") and found == "ole"  # encrypted or legacy: office.py says which
    if found != claimed and not ole and not (claimed == "html" and found is None):
        raise UnsupportedFormatError(
            name, f"its name says {claimed.upper()} but it is "
                  f"{_WHAT.get(found or '', 'neither (text or another binary format)')}")
    if claimed == "pdf":
        from ragstream.formats.pdf import convert_pdf
        return convert_pdf(name, data, limits)
    if claimed in ("docx", "pptx"):
        from ragstream.formats import office
        return (office.convert_docx if claimed == "docx" else office.convert_pptx)(name, data, limits)
    from ragstream.formats import web
    return (web.convert_epub if claimed == "epub" else web.convert_html)(name, data, limits)
