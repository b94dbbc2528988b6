"""What every converter shares: the file signatures that say what bytes are, and how a line
of prose, an inline code span, a pipe table and a document's title are written in Markdown."""

from __future__ import annotations

import posixpath
import re

#: the first bytes of formats a file may be instead of what its name says
SIGNATURES: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF87a", "a GIF image"),
    (b"GIF89a", "a GIF image"),
    (b"%PDF-", "a PDF document"),
    (b"PK\x03\x04", "a zip archive (or a .docx, .xlsx or .odt file)"),
    (b"PK\x05\x06", "a zip archive (or a .docx, .xlsx or .odt file)"),
    (b"\x1f\x8b", "a gzip archive"),
    (b"Rar!", "a RAR archive"),
    (b"7z\xbc\xaf", "a 7-Zip archive"),
    (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "an old Office (OLE) file"),
    (b"\x7fELF", "a program"),
)


def signature_of(data: bytes) -> str | None:
    """What ``data`` is by its first bytes (``"a PNG image"``…), or None."""
    return next((what for magic, what in SIGNATURES if data.startswith(magic)), None)


_LINE_START = re.compile(
    r"#{1,6}(?:\s|$)|>|[-+*](?:\s|$)|=+\s*$|-+\s*$|(?:[*_-]\s*){3,}$|`{3,}|~{3,}|\$\$|<[A-Za-z/!?]"
    r"|\[[^\]]*\]:")
_ORDERED_START = re.compile(r"(\d{1,9})([.)])(?=\s|$)")
_BACKTICKS = re.compile(r"`+")


def escape_line(line: str) -> str:
    """A line of prose that Markdown would not read as structure (a heading, list, quote,
    fence, rule, HTML tag, math or link definition): its first character escaped."""
    if _LINE_START.match(line):
        return "\\" + line
    m = _ORDERED_START.match(line)
    if m:
        return f"{m.group(1)}\\{line[m.end(1):]}"
    return line


def code_span(text: str) -> str:
    """``text`` (already one line) as inline code, fenced by more backticks than it holds in a
    row; "" for blank text."""
    text = text.strip()
    if not text:
        return ""
    fence = "`" * (max((len(m) for m in _BACKTICKS.findall(text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def pipe_table(rows: list[list[str]]) -> str:
    """Rows of cell texts (one line each) as a GitHub pipe table, the first row its header;
    ``|`` in a cell escaped, short rows padded; "" when no cell holds text."""
    width = max((len(row) for row in rows), default=0)
    if not width or not any(cell for row in rows for cell in row):
        return ""

    def line(row: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in row + [""] * (width - len(row))) + " |"

    return "\n".join([line(rows[0]), "|" + " --- |" * width] + [line(row) for row in rows[1:]])


_PLACEHOLDER_TITLE = re.compile(
    r"untitled(?: document)?|unknown|none|null|title|(?:word )?document\s*\d*|"
    r"(?:powerpoint )?presentation\s*\d*|slide\s*\d*|microsoft (?:word|powerpoint) - .*|"
    r".*\.(?:docx?|pdf|tex|dvi|ps|indd|qxd|rtf|odt|pptx?|xlsx?|html?|txt|epub)", re.IGNORECASE)


def useful_title(title: str | None, name: str = "") -> str | None:
    """A document's title as its file names it, or None when it says nothing: empty, a
    program's placeholder ("Untitled", "Presentation 1", "Microsoft Word - x.doc"), a file
    name, the file's own name or stem (``faq`` for ``faq.html``), or no word at all."""
    title = " ".join((title or "").split()).strip("\x00")
    if not title or len(title) > 300 or sum(c.isalpha() for c in title) < 2:
        return None
    base = posixpath.basename(name.replace("\\", "/")).lower()
    if _PLACEHOLDER_TITLE.fullmatch(title) or title.lower() in {base, base.rsplit(".", 1)[0]}:
        return None
    return title
