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

from ragstream.knowledge.formats.converted import (
    CONVERTED_SUFFIXES,
    CONVERTER,
    PAGE_MARKER,
    Converted,
    Limits,
)

__all__ = ["CONVERTED_SUFFIXES", "CONVERTER", "PAGE_MARKER", "Converted", "Limits", "convert"]


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
