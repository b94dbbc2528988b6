"""Word (DOCX) and PowerPoint (PPTX) files → Markdown for the chunker.

    convert_docx("guide.docx", data, Limits())   # -> Converted(kind="docx"), or a typed IngestError
    convert_pptx("talk.pptx", data, Limits())    # -> Converted(kind="pptx")

Safety first, in this order: the bytes must be a zip (an OLE compound file is an encrypted Office
file → ``EncryptedFileError``, or a legacy 97-2003 file → ``UnsupportedFormatError``; anything else
is named: "it is a PDF file"); the zip's directory is checked by ``zipsafe.open_zip`` (zip bombs);
the zip must hold the format's main part (``word/document.xml``, ``ppt/presentation.xml``); every
XML part is scanned, streaming, for ``<!DOCTYPE``/``<!ENTITY`` (OOXML never declares a DTD, so such
a part is an entity-expansion attack → ``UnsafeFileError``) before python-docx / python-pptx parse
anything (their lxml parsers also run with ``resolve_entities=False`` and without ``huge_tree``).
Any other failure inside the libraries is a ``DamagedFileError`` with the reason.

DOCX
    The body in document order (paragraphs, tables, content controls, text boxes after the
    paragraph that anchors them). Headings: paragraph styles "Heading 1".."Heading 9" (7-9 → 6),
    "Title" (→ 1), styles based on them (a localized or custom style), and an outline level on
    the paragraph or its style. Lists: numbering on the paragraph or its style ("List Bullet",
    "List Number 2" …), bullet or number by the numbering definition, nested by level, numbers
    counted per list. Tables: GitHub pipe tables, the first non-empty row as header; a merged cell's
    text is repeated in every grid cell it covers; a one-cell table (a frame around text) is read
    as body. Code: a paragraph style named like "Code"/"Source Code"/"HTML Preformatted", or a
    monospace font on all of a paragraph's text; consecutive code paragraphs share one fence.
    Headers, footers, comments, a generated table of contents, images, charts, SmartArt and
    embedded objects are left out (counted in ``warnings``); tracked changes read as accepted.

PPTX
    ``# deck title`` (core properties, else the first slide's title), then one ``## title``
    section per slide (the title placeholder; a slide without one continues the section of the
    titled slide before it, under the same title, as a deck's continuation slides do, unless
    that title is the deck's own; else "Slide N"), slide shapes in the order of the
    slide (groups read recursively), bullet paragraphs as nested ``- `` / ``1. `` items (bullets
    resolved through the shape, layout and master list styles), tables as pipe tables, speaker
    notes as a paragraph starting "Notes:" at the end of the slide's section (so the notes stay
    in the slide's chunk). ``Converted.pages`` holds each slide section's offset and number.

It stays whole: DOCX and PPTX are both Office Open XML, and their converters share the
package's safe reading (zip bounds, relationships, numbering and styles, tables, hyperlinks)
that is most of this file.
"""

from __future__ import annotations

import io
import re
import struct
import zipfile
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, NoReturn

from ragstream.common.errors import (
    DamagedFileError,
    EncryptedFileError,
    IngestError,
    RagstreamError,
    UnsafeFileError,
    UnsupportedFormatError,
)
from ragstream.knowledge.formats.converted import Converted, Limits
from ragstream.knowledge.formats.markdown_out import (
    code_span,
    escape_line,
    pipe_table,
    signature_of,
    useful_title,
)
from ragstream.knowledge.formats.zipsafe import open_zip

__all__ = ["convert_docx", "convert_pptx", "OLE_SIGNATURE", "MAX_DEPTH"]

#: the first bytes of an OLE compound file: an encrypted OOXML file or a legacy .doc/.ppt/.xls
OLE_SIGNATURE = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
#: nesting read at most (tables in tables, content controls, text boxes, grouped shapes)
MAX_DEPTH = 16
_MAX_INLINE_DEPTH = 64
_MAX_SPAN = 64  # columns one merged cell covers at most
_MAX_COLUMNS = 512  # columns of one table row read at most

_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
_P = "{http://schemas.openxmlformats.org/presentationml/2006/main}"
_R = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}"
_M = "{http://schemas.openxmlformats.org/officeDocument/2006/math}"
_V = "{urn:schemas-microsoft-com:vml}"
_MC = "{http://schemas.openxmlformats.org/markup-compatibility/2006}"
_WVAL = _W + "val"

_WORD_MAIN_TYPES = (
    "application/vnd.ms-word.document.macroEnabled.main+xml",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.template.main+xml",
    "application/vnd.ms-word.template.macroEnabledTemplate.main+xml",
)


# ------------------------------------------------------------------------------ entry points


def convert_docx(name: str, data: bytes, limits: Limits) -> Converted:
    """A Word file (``.docx``, also ``.docm``/``.dotx``) as Markdown; see the module docstring."""
    with _library_errors(name), _open_package(name, data, limits, "docx"):
        return _DocxReader(name, _load_docx(name, data)).convert()


def convert_pptx(name: str, data: bytes, limits: Limits) -> Converted:
    """A PowerPoint file (``.pptx``, also ``.pptm``/``.ppsx``/``.potx``) as Markdown; see the
    module docstring."""
    with _library_errors(name), _open_package(name, data, limits, "pptx"):
        return _PptxReader(name, _load_pptx(name, data)).convert()


# ------------------------------------------------------------------------------ sniffing and safety

_MAIN_PART = {"docx": "word/document.xml", "pptx": "ppt/presentation.xml"}
_WHAT = {"docx": "a Word document (.docx)", "pptx": "a PowerPoint presentation (.pptx)"}


def _open_package(name: str, data: bytes, limits: Limits, kind: str) -> zipfile.ZipFile:
    """The file as a checked zip holding the format's main part, its XML parts scanned."""
    if not data:
        raise DamagedFileError(name, "it is empty (0 bytes)")
    if data.startswith(OLE_SIGNATURE):
        _refuse_ole(name, data, kind)
    if not data.startswith(b"PK"):
        raise UnsupportedFormatError(name, f"it is {_describe_bytes(data)}, not {_WHAT[kind]}")
    archive = open_zip(name, data, limits)
    names = set(archive.namelist())
    if _MAIN_PART[kind] not in names:
        raise UnsupportedFormatError(name, f"it is {_describe_zip(archive, names)}, not {_WHAT[kind]}")
    _scan_xml_parts(name, archive)
    return archive


def _refuse_ole(name: str, data: bytes, kind: str) -> NoReturn:
    """An OLE compound file: encrypted OOXML, or a legacy binary Office file."""
    streams = _ole_names(data)
    if "EncryptedPackage" in streams or "EncryptionInfo" in streams:
        raise EncryptedFileError(name)
    if "WordDocument" in streams:
        what = "it is a legacy Word 97-2003 file (.doc): save it as .docx"
    elif "PowerPoint Document" in streams:
        what = "it is a legacy PowerPoint 97-2003 file (.ppt): save it as .pptx"
    elif "Workbook" in streams or "Book" in streams:
        what = f"it is a legacy Excel 97-2003 workbook (.xls), not {_WHAT[kind]}"
    elif kind == "docx":
        what = "it is an OLE compound file (a legacy Word 97-2003 file?): save it as .docx"
    else:
        what = "it is an OLE compound file (a legacy PowerPoint 97-2003 file?): save it as .pptx"
    raise UnsupportedFormatError(name, what)


_OLE_KNOWN = ("EncryptedPackage", "EncryptionInfo", "WordDocument", "PowerPoint Document", "Workbook", "Book")
_FREE = 0xFFFFFFFA  # sector numbers from here on are markers (end of chain, free, FAT, DIFAT)


def _ole_names(data: bytes) -> set[str]:
    """The names in an OLE compound file's directory (bounded walk of its sector chains); when
    the directory cannot be walked, the known stream names found anywhere in the bytes."""
    names: set[str] = set()
    try:
        shift = struct.unpack_from("<H", data, 30)[0]
        if shift in (9, 12):
            size = 1 << shift
            per = size // 4
            n_sectors = max(0, len(data) // size - 1)
            fat_sectors = [s for s in struct.unpack_from("<109I", data, 76) if s < _FREE]
            difat, hops = struct.unpack_from("<I", data, 68)[0], 0
            while difat < _FREE and hops < n_sectors and len(fat_sectors) <= n_sectors:
                entries = struct.unpack_from(f"<{per}I", data, (difat + 1) * size)
                fat_sectors += [s for s in entries[:-1] if s < _FREE]
                difat, hops = entries[-1], hops + 1

            def next_sector(sector: int) -> int:
                index, slot = divmod(sector, per)
                if index >= len(fat_sectors):
                    return 0xFFFFFFFE
                return int(struct.unpack_from("<I", data, (fat_sectors[index] + 1) * size + 4 * slot)[0])

            sector, seen = struct.unpack_from("<I", data, 48)[0], set[int]()
            while sector < _FREE and sector not in seen and len(seen) <= n_sectors:
                seen.add(sector)
                base = (sector + 1) * size
                for off in range(base, min(base + size, len(data)) - 127, 128):
                    length, kind = struct.unpack_from("<HB", data, off + 64)
                    if kind in (1, 2, 5) and 2 <= length <= 64:
                        names.add(data[off:off + length - 2].decode("utf-16-le", "replace"))
                sector = next_sector(sector)
    except struct.error:
        pass
    if not names:
        names = {n for n in _OLE_KNOWN if n.encode("utf-16-le") in data}
    return names


def _describe_bytes(data: bytes) -> str:
    """What a file that is not a zip looks like, for the refusal message."""
    head = data[:2048]
    stripped = head.lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    if b"%PDF-" in data[:1024]:
        return "a PDF file"
    if stripped.startswith(b"{\\rtf"):
        return "an RTF file"
    if (what := signature_of(data)) and not what.startswith(("a zip", "an old Office")):
        return what
    if stripped.startswith((b"<!doctype html", b"<html")):
        return "an HTML file"
    if stripped.startswith(b"<"):
        return "an XML or HTML file (a Word 2003 XML or flat OPC file?)"
    if b"\x00" not in head:
        try:
            head.decode("utf-8")
        except UnicodeDecodeError as err:
            if err.start < len(head) - 4:
                return "binary data of an unknown kind"
        return "plain text"
    return "binary data of an unknown kind"


def _describe_zip(archive: zipfile.ZipFile, names: set[str]) -> str:
    """What a zip that lacks the expected main part is, for the refusal message."""
    if "word/document.xml" in names:
        return "a Word document (.docx)"
    if "ppt/presentation.xml" in names:
        return "a PowerPoint presentation (.pptx)"
    if "xl/workbook.xml" in names:
        return "an Excel workbook (.xlsx)"
    if "mimetype" in names and archive.getinfo("mimetype").file_size <= 200:
        try:
            mimetype = archive.read("mimetype").decode("ascii", "replace").strip()
        except (zipfile.BadZipFile, OSError, ValueError, EOFError, RuntimeError, zlib.error):
            mimetype = ""
        if mimetype == "application/epub+zip":
            return "an EPUB book"
        if mimetype.startswith("application/vnd.oasis.opendocument"):
            return "an OpenDocument file (.odt/.odp/.ods)"
    if any(n.endswith(".xml") for n in names) and "[Content_Types].xml" in names:
        return "an Office Open XML package of another kind"
    return "a zip archive"


_DTD_MARKERS = tuple(marker.encode(encoding) for marker in ("<!DOCTYPE", "<!ENTITY")
                     for encoding in ("ascii", "utf-16-le", "utf-16-be"))
_SCAN_BLOCK = 1 << 20


def _scan_xml_parts(name: str, archive: zipfile.ZipFile) -> None:
    """Refuse a package whose XML parts declare a DTD (entity expansion): streaming, so a large
    part is never held whole. A part counts as XML when it starts like XML (whatever its name),
    except an ``.svg`` image, which the libraries never parse."""
    overlap = max(len(m) for m in _DTD_MARKERS) - 1
    for info in archive.infolist():
        if info.is_dir() or info.filename.lower().endswith(".svg"):
            continue
        try:
            with archive.open(info) as member:
                block = member.read(_SCAN_BLOCK)
                if not _looks_like_xml(block):
                    continue
                tail = b""
                while block:
                    window = tail + block
                    if any(marker in window for marker in _DTD_MARKERS):
                        raise UnsafeFileError(
                            name, f"its part {info.filename} declares a DOCTYPE or ENTITY (XML entity "
                                  f"expansion, a \"billion laughs\" attack; Office files never declare one)")
                    tail = window[-overlap:]
                    block = member.read(_SCAN_BLOCK)
        except (zipfile.BadZipFile, OSError, ValueError, EOFError, RuntimeError, zlib.error) as err:
            raise DamagedFileError(name, f"its part {info.filename} is damaged ({err})") from None


def _looks_like_xml(head: bytes) -> bool:
    """The first bytes of a part are XML's: ``<`` after a byte-order mark and white space."""
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return True
    return head.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"<")


@contextmanager
def _library_errors(name: str) -> Iterator[None]:
    """Turn whatever python-docx/python-pptx/lxml raise on a broken file into ``DamagedFileError``."""
    try:
        yield
    except RagstreamError:
        raise
    except MemoryError:
        raise UnsafeFileError(name, "reading it ran out of memory") from None
    except Exception as err:  # any library failure: the file's, with its reason
        reason = str(err).strip() or "no detail"
        if len(reason) > 300:
            reason = reason[:300] + "…"
        raise DamagedFileError(name, f"{type(err).__name__}: {reason}") from None


def _load_docx(name: str, data: bytes) -> Any:
    """The python-docx ``Document`` of ``data`` (macro-enabled files and templates too)."""
    try:
        from docx.opc.part import PartFactory
        from docx.package import Package
        from docx.parts.document import DocumentPart
    except ImportError as err:
        raise IngestError(f"{name}: reading Word files needs python-docx ({err}); install the "
                          f"packages of requirements.txt") from None
    for content_type in _WORD_MAIN_TYPES:
        PartFactory.part_type_for.setdefault(content_type, DocumentPart)
    part = Package.open(io.BytesIO(data)).main_document_part
    if not isinstance(part, DocumentPart):
        raise UnsupportedFormatError(name, f"its main part is {part.content_type}, not a Word document")
    return part.document


def _load_pptx(name: str, data: bytes) -> Any:
    """The python-pptx ``Presentation`` of ``data`` (macro-enabled, slide shows, templates too)."""
    try:
        from pptx.package import Package
        from pptx.parts.presentation import PresentationPart
    except ImportError as err:
        raise IngestError(f"{name}: reading PowerPoint files needs python-pptx ({err}); install "
                          f"the packages of requirements.txt") from None
    part = Package.open(io.BytesIO(data)).main_document_part
    if not isinstance(part, PresentationPart):
        raise UnsupportedFormatError(name, f"its main part is {part.content_type}, not a presentation")
    return part.presentation


# ------------------------------------------------------------------------------ Markdown writing

_SPACE = re.compile(r"\s+")


def _clean(text: str) -> str:
    """Whitespace (tabs, line breaks, no-break spaces) collapsed to single spaces, soft hyphens out."""
    return _SPACE.sub(" ", text.replace("\u00ad", "")).strip()


def _with_code_spans(segments: Iterable[tuple[str, bool]]) -> str:
    """Text pieces joined, each run of ``True`` (monospace) pieces as a Markdown code span."""
    out: list[str] = []
    code: list[str] = []

    def close() -> None:
        text = "".join(code)
        code.clear()
        span = code_span(_clean(text))
        if not span:
            out.append(text)
            return
        lead = " " if text[:1].isspace() else ""
        trail = " " if text[-1:].isspace() else ""
        out.append(f"{lead}{span}{trail}")

    for text, is_code in segments:
        if is_code:
            code.append(text)
        else:
            if code:
                close()
            out.append(text)
    if code:
        close()
    return "".join(out)


def _pipe_table(rows: list[list[str]]) -> str | None:
    """Rows of cell texts as a GitHub pipe table (first non-empty row as header), or ``None``."""
    return pipe_table([row for row in ([_clean(c) for c in r] for r in rows) if any(row)]) or None


@dataclass
class _Markdown:
    """Markdown blocks in order; consecutive list items and code lines are grouped."""

    blocks: list[str] = field(default_factory=list)
    headings: int = 0
    _items: list[str] = field(default_factory=list)
    _columns: list[int] = field(default_factory=list)  # content column of the open item per level
    _counts: dict[tuple[Any, int], int] = field(default_factory=dict)
    _code: list[str] = field(default_factory=list)

    def heading(self, level: int, text: str) -> None:
        """A ``#`` line (never an empty one)."""
        text = _clean(text)
        if not text:
            return
        self.flush()
        text = re.sub(r"(\s)(#+)$", r"\1\\\2", text)
        self.blocks.append("#" * max(1, min(level, 6)) + " " + text)
        self.headings += 1

    def paragraph(self, text: str) -> None:
        """A paragraph of prose (whitespace normalised; empty ones are dropped)."""
        text = _clean(text)
        if text:
            self.flush()
            self.blocks.append(escape_line(text))

    def item(self, level: int, ordered: bool, text: str, key: Any = None) -> None:
        """A list item at ``level`` (0 = top); numbers count per ``(key, level)``."""
        text = _clean(text)
        if not text:
            return
        self._flush_code()
        level = max(0, min(level, len(self._columns)))
        del self._columns[level:]
        for counted in [k for k in self._counts if k[0] == key and k[1] > level]:
            del self._counts[counted]
        if ordered:
            number = self._counts.get((key, level), 0) + 1
            self._counts[(key, level)] = number
            marker = f"{number}. "
        else:
            marker = "- "
        indent = self._columns[level - 1] if level else 0
        self._columns.append(indent + len(marker))
        self._items.append(" " * indent + marker + escape_line(text))

    def code(self, text: str) -> None:
        """A line (or lines) of code, fenced with its neighbours."""
        self._flush_items()
        self._code.extend(line.rstrip() for line in text.split("\n"))

    @property
    def in_code(self) -> bool:
        """A code block is open (a blank line belongs to it)."""
        return bool(self._code)

    def table(self, rows: list[list[str]]) -> None:
        """A pipe table (nothing for a table without text)."""
        rendered = _pipe_table(rows)
        if rendered:
            self.flush()
            self.blocks.append(rendered)

    def flush(self) -> None:
        """Close an open list or code block."""
        self._flush_items()
        self._flush_code()

    def _flush_items(self) -> None:
        if self._items:
            self.blocks.append("\n".join(self._items))
        self._items.clear()
        self._columns.clear()
        for key in [k for k in self._counts if k[0] is None]:
            del self._counts[key]

    def _flush_code(self) -> None:
        lines = self._code
        while lines and not lines[-1].strip():
            lines.pop()
        start = 0
        while start < len(lines) and not lines[start].strip():
            start += 1
        if start < len(lines):
            body = "\n".join(lines[start:])
            ticks = max([len(run) for run in re.findall(r"`+", body)] + [2]) + 1
            fence = "`" * ticks
            self.blocks.append(f"{fence}\n{body}\n{fence}")
        self._code = []

    def markdown(self) -> str:
        """The document: blocks separated by one blank line, ending in a newline."""
        self.flush()
        text = "\n\n".join(self.blocks).strip()
        return text + "\n" if text else ""


def _counted(counts: dict[str, int]) -> list[str]:
    """``{"image": 3, "chart": 1}`` → ``["3 images left out", "1 chart left out"]``."""
    return [f"{n} {what}{'s' if n != 1 else ''} left out" for what, n in counts.items() if n]


def _int(value: str | None, default: int) -> int:
    """An XML attribute as an int (``default`` when absent or malformed)."""
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default


# ------------------------------------------------------------------------------ DOCX

_HEADING_NAME = re.compile(r"heading\s*([1-9])")
_LIST_NAME = re.compile(r"list(?: bullet| number| continue)?\s*([2-9])")
_CODE_NAME = re.compile(r"(?<!bar)(?<!zip)(?<!post)code|preformatted|^macro")
_MONO_FONT = re.compile(
    r"mono|courier|consolas|menlo|monaco|lucida console|lucida sans typewriter|inconsolata|fira code"
    r"|source code|cascadia|andale|fixedsys|letter gothic|jetbrains|^hack$|^terminal$", re.I)


@dataclass(frozen=True)
class _Style:
    """What a paragraph style (with the styles it is based on) says about its paragraphs."""

    heading: int | None = None  # 1..6; 0: explicitly body text; None: not said
    code: bool = False
    mono: bool | None = None  # the style's font is monospace (None: no font set)
    num_id: str | None = None
    ilvl: int | None = None
    name_level: int | None = None  # "List Bullet 2" → 1
    ordered_name: bool = False
    toc: bool = False
    is_default: bool = False


@dataclass
class _Inline:
    """One paragraph's text as read from its runs."""

    parts: list[str] = field(default_factory=list)
    codes: list[bool] = field(default_factory=list)  # per part: in a monospace run
    links: list[tuple[int, int, str]] = field(default_factory=list)
    mono: int = 0
    other: int = 0
    boxes: list[Any] = field(default_factory=list)

    def plain(self) -> str:
        """The text as typed (line breaks and tabs kept)."""
        return "".join(self.parts)

    def prose(self) -> str:
        """The text with external hyperlinks as Markdown links and monospace runs as code spans."""
        codes = self.codes + [False] * (len(self.parts) - len(self.codes))

        def render(start: int, end: int) -> str:
            return _with_code_spans(zip(self.parts[start:end], codes[start:end]))

        if not self.links:
            return render(0, len(self.parts))
        out, pos = [], 0
        for start, end, url in self.links:
            out.append(render(pos, start))
            text = render(start, end)
            inner = _clean(text)
            if inner:
                target = f"<{url}>" if re.search(r"[\s()<>]", url) else url
                lead = " " if text[:1].isspace() else ""
                trail = " " if text[-1:].isspace() else ""
                label = inner.replace("]", "\\]")
                out.append(f"{lead}[{label}]({target}){trail}")
            pos = end
        out.append(render(pos, len(self.parts)))
        return "".join(out)


class _DocxReader:
    """One python-docx ``Document`` walked as XML, in document order."""

    def __init__(self, name: str, document: Any):
        self.name = name
        self.document = document
        self.part = document.part
        self.out = _Markdown()
        self.counts = {"image": 0, "chart": 0, "SmartArt graphic": 0, "embedded object": 0}
        self.footnotes = 0
        self.toc_left_out = False
        self.tracked = False
        self.title_paragraph: str | None = None
        self.deep = False
        styles = self._related("styles")
        self._styles_by_id: dict[str, Any] = {}
        self._default_style: Any = None
        if styles is not None:
            for style in styles.iterchildren(_W + "style"):
                sid = style.get(_W + "styleId")
                if sid:
                    self._styles_by_id.setdefault(sid, style)
                if style.get(_W + "type") == "paragraph" and style.get(_W + "default") in ("1", "true", "on"):
                    self._default_style = style
        self._style_cache: dict[str, _Style] = {}
        self._char_mono: dict[str, bool | None] = {}
        self._numbering = self._read_numbering()

    def _related(self, kind: str) -> Any:
        """The root element of the main part's related ``styles`` or ``numbering`` part, or ``None``."""
        from docx.opc.constants import RELATIONSHIP_TYPE as RT

        try:
            return self.part.part_related_by(RT.STYLES if kind == "styles" else RT.NUMBERING).element
        except KeyError:
            return None

    # -- the walk

    def convert(self) -> Converted:
        """The whole document."""
        body = self.document.element.body
        self._blocks(body, 0)
        warnings = []
        if self.out.headings == 0 and self.out.blocks:
            warnings.append("no heading styles: the document is one section")
        if self.toc_left_out:
            warnings.append("a table of contents left out")
        warnings += _counted(self.counts)
        if self.footnotes:
            warnings.append(f"{self.footnotes} footnote/endnote reference(s): the notes' text is left out")
        if self.tracked:
            warnings.append("tracked changes read as accepted (insertions kept, deletions left out)")
        if self.deep:
            warnings.append(f"content nested deeper than {MAX_DEPTH} levels left out")
        markdown = self.out.markdown()
        if not markdown:
            warnings.append("no text: the document is empty")
        title = useful_title(self.document.core_properties.title) or self.title_paragraph
        return Converted(markdown=markdown, title=title, kind="docx", warnings=warnings)

    def _blocks(self, parent: Any, depth: int) -> None:
        if depth > MAX_DEPTH:
            self.deep = True
            return
        for child in parent.iterchildren():
            tag = child.tag
            if tag == _W + "p":
                self._paragraph(child, depth)
            elif tag == _W + "tbl":
                self._table(child, depth)
            elif tag == _W + "sdt":
                gallery = child.find(f"{_W}sdtPr/{_W}docPartObj/{_W}docPartGallery")
                if gallery is not None and "table of contents" in (gallery.get(_WVAL) or "").lower():
                    self.toc_left_out = True
                    continue
                content = child.find(_W + "sdtContent")
                if content is not None:
                    self._blocks(content, depth + 1)
            elif tag in (_W + "customXml", _W + "ins", _W + "moveTo"):
                self._blocks(child, depth + 1)
            elif tag == _W + "altChunk":
                self.counts["embedded object"] += 1

    def _paragraph(self, p: Any, depth: int) -> None:
        ppr = p.find(_W + "pPr")
        style = self._style(_attr(ppr, "pStyle"))
        inline = _Inline()
        self._inline(p, inline, style, 0)
        if style.toc:
            self.toc_left_out = True
        else:
            self._emit(ppr, style, inline)
        for box in inline.boxes:
            self._blocks(box, depth + 1)

    def _emit(self, ppr: Any, style: _Style, inline: _Inline) -> None:
        out = self.out
        level = style.heading
        outline = _attr(ppr, "outlineLvl")
        if outline is not None:
            value = _int(outline, 9)
            level = min(value + 1, 6) if 0 <= value < 9 else 0
        if level:
            text = _clean(inline.plain())
            if text:
                if self.title_paragraph is None and style.heading == 1 and self._is_title_style(ppr):
                    self.title_paragraph = text
                out.heading(level, text)
            return
        num_id, ilvl = style.num_id, style.ilvl
        num_pr = ppr.find(_W + "numPr") if ppr is not None else None
        if num_pr is not None:
            own_id = _attr(num_pr, "numId")
            if own_id is not None:
                num_id = own_id
            own_lvl = _attr(num_pr, "ilvl")
            if own_lvl is not None:
                ilvl = _int(own_lvl, 0)
        if num_id is not None and num_id != "0":
            if ilvl is None:
                ilvl = style.name_level or 0
            fmt = self._numbering.get(num_id, {}).get(ilvl)
            if fmt is None:
                fmt = "decimal" if style.ordered_name else "bullet"
            if fmt != "none":
                out.item(max(0, min(ilvl, 8)), fmt != "bullet", inline.prose(), key=num_id)
                return
        if style.code or (inline.mono and not inline.other):
            out.code(inline.plain())
            return
        out.paragraph(inline.prose())

    def _is_title_style(self, ppr: Any) -> bool:
        style = self._styles_by_id.get(_attr(ppr, "pStyle") or "")
        seen = 0
        while style is not None and seen < 16:
            if _attr(style, "name", default="").strip().lower() == "title":
                return True
            style = self._styles_by_id.get(_attr(style, "basedOn") or "")
            seen += 1
        return False

    def _inline(self, el: Any, inline: _Inline, style: _Style, depth: int) -> None:
        if depth > _MAX_INLINE_DEPTH:
            self.deep = True
            return
        for child in el.iterchildren():
            tag = child.tag
            if tag == _W + "r":
                self._run(child, inline, style, depth)
            elif tag in (_W + "pPr", _W + "rPr", _W + "sdtPr", _W + "sdtEndPr"):
                continue
            elif tag in (_W + "del", _W + "moveFrom"):
                self.tracked = True
            elif tag == _W + "hyperlink":
                start = len(inline.parts)
                self._inline(child, inline, style, depth + 1)
                url = self._link(child.get(_R + "id"))
                if url and len(inline.parts) > start and not any(s < len(inline.parts) and e > start
                                                                 for s, e, _ in inline.links):
                    inline.links.append((start, len(inline.parts), url))
            elif tag in (_M + "oMath", _M + "oMathPara"):
                inline.parts.append(" " + "".join(t.text or "" for t in child.iter(_M + "t")) + " ")
                inline.codes.extend([False] * (len(inline.parts) - len(inline.codes)))
                inline.other += 1
            else:  # ins, moveTo, smartTag, sdt, sdtContent, fldSimple, customXml, bdo, dir …
                if tag in (_W + "ins", _W + "moveTo"):
                    self.tracked = True
                self._inline(child, inline, style, depth + 1)

    def _run(self, run: Any, inline: _Inline, style: _Style, depth: int) -> None:
        start = len(inline.parts)
        for child in run.iterchildren():
            tag = child.tag
            if tag == _W + "t":
                inline.parts.append(child.text or "")
            elif tag in (_W + "tab", _W + "ptab"):
                inline.parts.append("\t")
            elif tag in (_W + "br", _W + "cr"):
                inline.parts.append("\n")
            elif tag == _W + "noBreakHyphen":
                inline.parts.append("-")
            elif tag in (_W + "footnoteReference", _W + "endnoteReference"):
                self.footnotes += 1
            elif tag in (_W + "drawing", _W + "pict", _W + "object"):
                self._graphic(child, inline)
            elif tag == _MC + "AlternateContent":
                chosen = child.find(_MC + "Choice")
                if chosen is None:
                    chosen = child.find(_MC + "Fallback")
                if chosen is not None and depth < _MAX_INLINE_DEPTH:
                    self._run(chosen, inline, style, depth + 1)
        mono = False
        if "".join(inline.parts[start:]).strip():
            own = self._run_mono(run.find(_W + "rPr"))
            mono = own if own is not None else bool(style.mono) and not style.is_default
            if mono:
                inline.mono += 1
            else:
                inline.other += 1
        inline.codes.extend([mono] * (len(inline.parts) - len(inline.codes)))

    def _graphic(self, el: Any, inline: _Inline) -> None:
        inline.boxes.extend(b for b in el.iter(_W + "txbxContent") if _outermost(b, el))
        if el.tag == _W + "object":
            self.counts["embedded object"] += 1
            return
        uris = [g.get("uri") or "" for g in el.iter(_A + "graphicData")]
        if any(u.endswith("/chart") for u in uris):
            self.counts["chart"] += 1
        elif any(u.endswith("/diagram") for u in uris):
            self.counts["SmartArt graphic"] += 1
        elif any(True for _ in el.iter(_A + "blip", _V + "imagedata")):
            self.counts["image"] += 1

    def _link(self, rid: str | None) -> str | None:
        if not rid:
            return None
        rel = self.part.rels.get(rid)
        if rel is None or not rel.is_external:
            return None
        url = str(rel.target_ref).strip()
        return url if re.match(r"(https?|ftp|mailto):", url, re.I) else None

    # -- tables

    def _table(self, tbl: Any, depth: int) -> None:
        if depth > MAX_DEPTH:
            self.deep = True
            return
        rows: list[list[str]] = []
        cells_seen: list[Any] = []
        for tr in _children(tbl, _W + "tr"):
            row: list[str] = [""] * _int(_attr(tr.find(_W + "trPr"), "gridBefore"), 0)
            above = rows[-1] if rows else []
            for tc in _children(tr, _W + "tc"):
                tcpr = tc.find(_W + "tcPr")
                span = max(1, min(_int(_attr(tcpr, "gridSpan"), 1), _MAX_SPAN))
                vmerge = tcpr.find(_W + "vMerge") if tcpr is not None else None
                if vmerge is not None and (vmerge.get(_WVAL) or "continue") != "restart":
                    col = len(row)
                    text = above[col] if col < len(above) else ""
                else:
                    text = self._cell_text(tc, depth + 1)
                    cells_seen.append(tc)
                row.extend([text] * span)
                if len(row) >= _MAX_COLUMNS:
                    del row[_MAX_COLUMNS:]
                    break
            rows.append(row)
        if len(cells_seen) == 1 and len(rows) == 1:
            self._blocks(cells_seen[0], depth + 1)  # a frame around text: read as body
            return
        self.out.table(rows)

    def _cell_text(self, cell: Any, depth: int) -> str:
        texts: list[str] = []
        if depth > MAX_DEPTH:
            self.deep = True
            return ""
        for child in cell.iterchildren():
            if child.tag == _W + "p":
                inline = _Inline()
                self._inline(child, inline, _Style(), 0)
                texts.append(_clean(inline.prose()))
                texts.extend(self._cell_text(box, depth + 1) for box in inline.boxes)
            elif child.tag == _W + "tbl":
                for tr in _children(child, _W + "tr"):
                    texts.extend(self._cell_text(tc, depth + 1) for tc in _children(tr, _W + "tc"))
            elif child.tag in (_W + "sdt", _W + "sdtContent", _W + "customXml", _W + "ins", _W + "moveTo"):
                texts.append(self._cell_text(child, depth + 1))
        return " ".join(t for t in texts if t)

    # -- styles and numbering

    def _style(self, style_id: str | None) -> _Style:
        key = style_id or ""
        cached = self._style_cache.get(key)
        if cached is not None:
            return cached
        el = self._styles_by_id.get(style_id) if style_id else None
        if el is None:
            el = self._default_style
        is_default = el is not None and el is self._default_style
        heading: int | None = None
        code, toc, ordered_name = False, False, False
        mono: bool | None = None
        num_id: str | None = None
        ilvl: int | None = None
        name_level: int | None = None
        seen: set[int] = set()
        while el is not None and id(el) not in seen and len(seen) < 16:
            seen.add(id(el))
            name = _attr(el, "name", default="").strip().lower()
            ppr = el.find(_W + "pPr")
            if heading is None:
                match = _HEADING_NAME.fullmatch(name)
                if match:
                    heading = min(int(match[1]), 6)
                elif name in ("title",):
                    heading = 1
                else:
                    outline = _attr(ppr, "outlineLvl")
                    if outline is not None:
                        value = _int(outline, 9)
                        heading = min(value + 1, 6) if 0 <= value < 9 else 0
            code = code or bool(_CODE_NAME.search(name))
            toc = toc or bool(re.fullmatch(r"toc\s*[1-9]", name))
            if mono is None:
                mono = _font_mono(el.find(_W + "rPr"))
            num_pr = ppr.find(_W + "numPr") if ppr is not None else None
            if num_pr is not None:
                if num_id is None:
                    num_id = _attr(num_pr, "numId")
                if ilvl is None and _attr(num_pr, "ilvl") is not None:
                    ilvl = _int(_attr(num_pr, "ilvl"), 0)
            if name_level is None:
                match = _LIST_NAME.fullmatch(name)
                if match:
                    name_level = int(match[1]) - 1
            ordered_name = ordered_name or ("list" in name and "number" in name)
            el = self._styles_by_id.get(_attr(el, "basedOn") or "")
        style = _Style(heading=heading, code=code, mono=mono, num_id=num_id, ilvl=ilvl,
                       name_level=name_level, ordered_name=ordered_name, toc=toc, is_default=is_default)
        self._style_cache[key] = style
        return style

    def _run_mono(self, rpr: Any) -> bool | None:
        own = _font_mono(rpr)
        if own is not None:
            return own
        style_id = _attr(rpr, "rStyle")
        if not style_id:
            return None
        if style_id not in self._char_mono:
            result: bool | None = None
            el, hops = self._styles_by_id.get(style_id), 0
            while el is not None and result is None and hops < 16:
                result = _font_mono(el.find(_W + "rPr"))
                if result is None and _CODE_NAME.search(_attr(el, "name", default="").lower()):
                    result = True
                el, hops = self._styles_by_id.get(_attr(el, "basedOn") or ""), hops + 1
            self._char_mono[style_id] = result
        return self._char_mono[style_id]

    def _read_numbering(self) -> dict[str, dict[int, str]]:
        """numId → level → number format (``bullet``, ``decimal``, ``none`` …)."""
        root = self._related("numbering")
        if root is None:
            return {}
        abstract: dict[str, dict[int, str]] = {}
        for definition in root.iterchildren(_W + "abstractNum"):
            abstract[definition.get(_W + "abstractNumId") or ""] = _levels(definition)
        numbering: dict[str, dict[int, str]] = {}
        for num in root.iterchildren(_W + "num"):
            formats = dict(abstract.get(_attr(num, "abstractNumId") or "", {}))
            for override in num.iterchildren(_W + "lvlOverride"):
                lvl = override.find(_W + "lvl")
                fmt = _attr(lvl, "numFmt") if lvl is not None else None
                if fmt:
                    formats[_int(override.get(_W + "ilvl"), 0)] = fmt
            numbering[num.get(_W + "numId") or ""] = formats
        return numbering


def _outermost(box: Any, top: Any) -> bool:
    """``box`` (a text box's content) is not inside another text box below ``top``."""
    for ancestor in box.iterancestors():
        if ancestor is top:
            return True
        if ancestor.tag == _W + "txbxContent":
            return False
    return True


def _levels(definition: Any) -> dict[int, str]:
    """An abstract numbering definition's number format per level."""
    return {_int(lvl.get(_W + "ilvl"), 0): _attr(lvl, "numFmt") or "decimal"
            for lvl in definition.iterchildren(_W + "lvl")}


def _attr(parent: Any, child: str, default: Any = None) -> Any:
    """The ``w:val`` of ``parent``'s child ``w:<child>`` (``default`` when ``parent`` is ``None``, or
    the child or its value is missing)."""
    if parent is None:
        return default
    el = parent.find(_W + child)
    if el is None:
        return default
    value = el.get(_WVAL)
    return default if value is None else value


def _children(parent: Any, tag: str, depth: int = 0) -> Iterator[Any]:
    """``parent``'s children ``tag``, also those wrapped in content controls or custom XML."""
    for child in parent.iterchildren():
        if child.tag == tag:
            yield child
        elif depth < MAX_DEPTH and child.tag in (_W + "sdt", _W + "sdtContent", _W + "customXml"):
            yield from _children(child, tag, depth + 1)


def _font_mono(rpr: Any) -> bool | None:
    """Whether a run-properties element names a monospace font (``None``: it names none)."""
    if rpr is None:
        return None
    fonts = rpr.find(_W + "rFonts")
    if fonts is None:
        return None
    face = fonts.get(_W + "ascii") or fonts.get(_W + "hAnsi")
    return None if not face else bool(_MONO_FONT.search(face))


# ------------------------------------------------------------------------------ PPTX

_TITLE_TYPES = ("title", "ctrTitle")
_SKIPPED_PLACEHOLDERS = ("dt", "ftr", "sldNum", "hdr", "sldImg")
_BODY_MASTER_TYPES = {"title": "title", "ctrTitle": "title", "dt": "dt", "ftr": "ftr", "sldNum": "sldNum"}


def _placeholder(sp: Any) -> tuple[str, int] | None:
    """A shape's placeholder ``(type, idx)`` (``obj``/0 by default), or ``None``."""
    ph = sp.find(f"{_P}nvSpPr/{_P}nvPr/{_P}ph")
    if ph is None:
        ph = sp.find(f"{_P}nvGraphicFramePr/{_P}nvPr/{_P}ph")
    if ph is None:
        ph = sp.find(f"{_P}nvPicPr/{_P}nvPr/{_P}ph")
    if ph is None:
        return None
    return ph.get("type") or "obj", _int(ph.get("idx"), 0)


def _segments(p: Any) -> list[tuple[str, bool | None]]:
    """A DrawingML paragraph's text pieces (runs, fields, ``\n`` for a line break), each with
    whether its run is in a monospace font (``None`` for a line break)."""
    segments: list[tuple[str, bool | None]] = []
    for child in p.iterchildren():
        if child.tag in (_A + "r", _A + "fld"):
            text = "".join(t.text or "" for t in child.iterchildren(_A + "t"))
            latin = child.find(f"{_A}rPr/{_A}latin")
            face = latin.get("typeface") if latin is not None else None
            segments.append((text, bool(face and _MONO_FONT.search(face))))
        elif child.tag == _A + "br":
            segments.append(("\n", None))
    return segments


def _paragraph_text(p: Any) -> str:
    """A DrawingML paragraph's text, whitespace normalised (a line break is a space)."""
    return _clean("".join(text for text, _ in _segments(p)))


def _all_mono(segments: list[tuple[str, bool | None]]) -> bool:
    """Every piece of visible text is in a monospace font (a code line)."""
    flags = [mono for text, mono in segments if text.strip()]
    return bool(flags) and all(flags)


def _bullet(ppr: Any) -> str | None:
    """``"bullet"``/``"number"``/``"none"`` as a paragraph-properties element says, or ``None``."""
    if ppr is None:
        return None
    for child in ppr.iterchildren():
        if child.tag == _A + "buNone":
            return "none"
        if child.tag == _A + "buAutoNum":
            return "number"
        if child.tag in (_A + "buChar", _A + "buBlip"):
            return "bullet"
    return None


class _PptxReader:
    """One python-pptx ``Presentation`` walked slide by slide."""

    def __init__(self, name: str, presentation: Any):
        self.name = name
        self.presentation = presentation
        self.out = _Markdown()
        self.counts = {"image": 0, "chart": 0, "SmartArt graphic": 0, "embedded object": 0, "media clip": 0}
        self.deep = False
        self.empty_slides = 0

    def convert(self) -> Converted:
        """The whole deck."""
        slides = list(self.presentation.slides)
        titles = [self._title(slide) for slide in slides]
        title = useful_title(self.presentation.core_properties.title) or next(iter(titles), "") or None
        if title:
            self.out.heading(1, title)
        starts: list[tuple[int, int]] = []
        continued = ""  # the title an untitled slide continues
        for number, (slide, slide_title) in enumerate(zip(slides, titles), start=1):
            section = _Markdown()
            self.out, outer = section, self.out
            try:
                self._slide(slide)
            finally:
                self.out = outer
            section.flush()
            if not section.blocks and not slide_title:
                self.empty_slides += 1
                continue
            outer.flush()
            starts.append((len(outer.blocks), number))
            if slide_title:
                continued = slide_title if slide_title != title else ""
            outer.heading(2, slide_title or continued or f"Slide {number}")
            outer.blocks.extend(section.blocks)
        markdown = self.out.markdown()
        pages = self._offsets(starts)
        warnings = _counted(self.counts)
        if self.empty_slides:
            warnings.append(f"{self.empty_slides} slide(s) without text left out")
        if self.deep:
            warnings.append(f"shapes grouped deeper than {MAX_DEPTH} levels left out")
        if not markdown:
            warnings.append("no text: the presentation is empty")
        return Converted(markdown=markdown, title=title, kind="pptx", pages=pages, warnings=warnings)

    def _offsets(self, starts: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """``(character offset, slide number)`` of each slide heading in the final Markdown (its
        blocks are joined by one blank line)."""
        offsets: list[tuple[int, int]] = []
        pos = 0
        by_block = dict(starts)
        for i, block in enumerate(self.out.blocks):
            if i in by_block:
                offsets.append((pos, by_block[i]))
            pos += len(block) + 2
        return offsets

    def _title(self, slide: Any) -> str:
        shape = self._title_shape(slide.element)
        if shape is None:
            return ""
        return _clean(" ".join(_paragraph_text(p) for p in shape.iter(_A + "p")))

    def _title_shape(self, sld: Any) -> Any:
        tree = sld.find(f"{_P}cSld/{_P}spTree")
        if tree is None:
            return None
        candidates = [sp for sp in tree.iterchildren(_P + "sp") if _placeholder(sp) is not None]
        for sp in candidates:
            ph = _placeholder(sp)
            if ph is not None and ph[0] in _TITLE_TYPES:
                return sp
        for sp in candidates:
            ph = _placeholder(sp)
            if ph is not None and ph[1] == 0 and ph[0] == "obj":
                return sp
        return None

    def _slide(self, slide: Any) -> None:
        sld = slide.element
        tree = sld.find(f"{_P}cSld/{_P}spTree")
        title_shape = self._title_shape(sld)
        layout = slide.slide_layout.element
        master = slide.slide_layout.slide_master.element
        if tree is not None:
            self._shapes(tree, title_shape, layout, master, 0)
        self.out.flush()
        if slide.has_notes_slide:
            notes = self._notes(slide.notes_slide.element)
            if notes:
                self.out.paragraph("Notes: " + notes[0])
                for text in notes[1:]:
                    self.out.paragraph(text)

    def _notes(self, notes: Any) -> list[str]:
        tree = notes.find(f"{_P}cSld/{_P}spTree")
        texts: list[str] = []
        if tree is None:
            return texts
        for sp in tree.iter(_P + "sp"):
            ph = _placeholder(sp)
            if ph is not None and ph[0] == "body":
                texts.extend(t for t in (_paragraph_text(p) for p in sp.iter(_A + "p")) if t)
        return texts

    def _shapes(self, tree: Any, title_shape: Any, layout: Any, master: Any, depth: int) -> None:
        if depth > MAX_DEPTH:
            self.deep = True
            return
        for shape in tree.iterchildren():
            tag = shape.tag
            if shape is title_shape:
                continue
            if tag == _P + "grpSp":
                self._shapes(shape, title_shape, layout, master, depth + 1)
            elif tag == _MC + "AlternateContent":
                chosen = shape.find(_MC + "Choice")
                if chosen is None:
                    chosen = shape.find(_MC + "Fallback")
                if chosen is not None:
                    self._shapes(chosen, title_shape, layout, master, depth + 1)
            elif tag == _P + "sp":
                self._text_shape(shape, layout, master)
            elif tag == _P + "graphicFrame":
                self._frame(shape)
            elif tag == _P + "pic":
                media = shape.find(f"{_P}nvPicPr/{_P}nvPr")
                if media is not None and any(c.tag in (_A + "videoFile", _A + "audioFile") or "media" in c.tag
                                             for c in media.iterchildren()):
                    self.counts["media clip"] += 1
                else:
                    self.counts["image"] += 1

    def _text_shape(self, sp: Any, layout: Any, master: Any) -> None:
        ph = _placeholder(sp)
        if ph is not None and ph[0] in _SKIPPED_PLACEHOLDERS:
            return
        body = sp.find(_P + "txBody")
        if body is None:
            return
        chain = [body.find(_A + "lstStyle")] + self._inherited(ph, layout, master)
        for p in body.iterchildren(_A + "p"):
            segments = _segments(p)
            if _all_mono(segments):
                self.out.code("".join(text for text, _ in segments))
                continue
            text = _clean(_with_code_spans((text, bool(mono)) for text, mono in segments))
            if not text:
                if self.out.in_code:
                    self.out.code("")
                continue
            ppr = p.find(_A + "pPr")
            level = max(0, min(_int(ppr.get("lvl") if ppr is not None else None, 0), 8))
            kind = _bullet(ppr)
            for styles in chain:
                if kind is not None:
                    break
                if styles is not None:
                    kind = _bullet(styles.find(f"{_A}lvl{level + 1}pPr"))
            if kind in ("bullet", "number") or (kind is None and level > 0):
                self.out.item(level, kind == "number", text)
            else:
                self.out.paragraph(text)
        self.out.flush()

    def _inherited(self, ph: tuple[str, int] | None, layout: Any, master: Any) -> list[Any]:
        """The list styles a shape's paragraphs inherit: its layout placeholder's, its master
        placeholder's, then the master's title, body or other text style."""
        chain: list[Any] = []
        txstyles = master.find(_P + "txStyles")
        if ph is None:
            return [txstyles.find(_P + "otherStyle") if txstyles is not None else None]
        ph_type, idx = ph
        layout_sp = self._find_placeholder(layout, ph_type, idx)
        master_type = _BODY_MASTER_TYPES.get(ph_type, "body")
        for sp in (layout_sp, self._find_placeholder(master, master_type, None)):
            if sp is not None:
                chain.append(sp.find(f"{_P}txBody/{_A}lstStyle"))
        if txstyles is not None:
            chain.append(txstyles.find(_P + ("titleStyle" if master_type == "title" else "bodyStyle")))
        return chain

    def _find_placeholder(self, part: Any, ph_type: str, idx: int | None) -> Any:
        tree = part.find(f"{_P}cSld/{_P}spTree")
        if tree is None:
            return None
        shapes = [(sp, _placeholder(sp)) for sp in tree.iterchildren(_P + "sp")]
        if idx:
            for sp, ph in shapes:
                if ph is not None and ph[1] == idx:
                    return sp
        for sp, ph in shapes:
            if ph is not None and ph[0] == ph_type:
                return sp
        return None

    def _frame(self, frame: Any) -> None:
        data = frame.find(f"{_A}graphic/{_A}graphicData")
        if data is None:
            return
        uri = data.get("uri") or ""
        table = data.find(_A + "tbl")
        if table is not None:
            self._table(table)
        elif uri.endswith("/chart"):
            self.counts["chart"] += 1
        elif uri.endswith("/diagram"):
            self.counts["SmartArt graphic"] += 1
        elif uri.endswith("/ole"):
            self.counts["embedded object"] += 1

    def _table(self, table: Any) -> None:
        rows: list[list[str]] = []
        for tr in table.iterchildren(_A + "tr"):
            row: list[str] = []
            above = rows[-1] if rows else []
            for tc in tr.iterchildren(_A + "tc"):
                col = len(row)
                if tc.get("hMerge") in ("1", "true"):
                    text = row[-1] if row else ""
                elif tc.get("vMerge") in ("1", "true"):
                    text = above[col] if col < len(above) else ""
                else:
                    text = " ".join(t for t in (_paragraph_text(p) for p in tc.iter(_A + "p")) if t)
                row.append(text)
                if len(row) >= _MAX_COLUMNS:
                    break
            rows.append(row)
        self.out.flush()
        self.out.table(rows)
