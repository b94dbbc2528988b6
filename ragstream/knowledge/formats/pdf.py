"""PDF → Markdown with ``pypdf`` (BSD, pure Python): ``convert_pdf(name, data, limits)``.

Pages
    Every page starts with ``PAGE_MARKER.format(n=page_no)`` (1-based) on a line of its own;
    ``Converted.pages`` lists ``(offset of that marker line, page_no)``. A page without text
    keeps its marker and nothing else. Text comes in the order the page draws it (the content
    stream's order, which is reading order for what word processors, LaTeX and browsers
    write, except that Chromium draws a page's headings after its text: headings are placed
    by position, see below); a page whose lines stand in two or more columns side by side
    keeps that order and is named in a warning ("reading order guessed").

Lines and paragraphs
    pypdf reports every run of text with its position, font and size; runs on one baseline
    form a line. Lines of one size follow each other into a paragraph while the gap between
    their baselines stays near the document's usual line spacing; a larger gap, a change of
    size or font family (body ↔ monospace), a bullet or a jump back up the page (a new
    column) starts a new one. A word broken at the end of a line (``exam-`` / ``ple``) is
    joined when the next line goes on in lower case. A line that starts with a bullet
    character, or whose bullet is drawn as a small shape (Chromium paints a ``<ul>``'s discs
    and squares as graphics: a filled or stroked shape a tenth to six tenths of the line's
    size on each side, roughly square, a tenth to twice that size left of the line's first
    text, at the height of its lower-case letters), becomes a list item ``- …``. The wrapped
    lines of an item with a drawn bullet go on with it until a gap or a line starting left of
    its bullet; such an item is text even in a monospace font (``callback <Function>``), and
    one drawn further right than the item before it is nested under it (two spaces a level,
    one level at most deeper than the item before; any other block ends the list). Numbered
    lists print their numbers as text and stay as they are. Other lines in a monospace font
    become a fenced code block, with their indentation restored from their positions. Tables
    are not rebuilt: their rows become paragraph text, nothing of them is lost. Lines that repeat at
    the top or bottom of most pages (running headers and footers: a title, a date, "Page 3 of
    9") and lone page numbers there are left out. A paragraph that is nothing but unfilled
    template placeholders (``__UPPER_SNAKE__`` of two words or more, ``{{ name }}``,
    ``${name}``, ``%%NAME%%``), not in a monospace font, whose placeholders occur nowhere else
    in the document, is left out with a warning (a web page's template text: Node.js's pages
    print ``__JS_FLAVORED_DYNAMIC_CSS__``); a placeholder or dunder in a sentence or a code
    block stays.

Headings
    From the outline (bookmarks) when the file has one (named destinations resolved): each
    entry becomes a heading of its depth (``#`` … ``######``) on its target page, at the
    position its destination names (the top of ``/XYZ``, ``/FitH``, ``/FitBH``, ``/FitR``).
    The line(s) showing its title nearest that top (at most three, one under the other, the
    first at most four line heights below the top, 24 points at least, or at most 0.6 of one
    above it, 2 points at least) become the heading; a title is shown by the same letters and
    digits, also once a section number in front of either is set aside (``2.1 ASN.1 syntax``
    shows ``ASN.1 syntax``). Where no line near the top shows it, the title itself is the
    heading, standing at the top. Titles are matched for every entry before any heading is
    placed, so that lines drawn out of order never decide where another heading goes. The
    heading goes before the nearest line at or below its text (2 points of tolerance; of
    lines on one baseline, the first drawn), after the nearest line above where none is
    below, and never before a heading placed earlier on the page; on a page set in columns,
    only lines in its column count while there are any (a line starting more than 40 % of the
    page's width left or right of the title's line, or of the destination's left for a title
    not shown, stands in another). Where the title is not near the top and no line of the
    page stands at or below the top, the title is looked for near the top of the next page
    (within four line heights of its highest line), and the heading goes there: a browser
    moves a heading it would leave at a page's foot to the next page, its outline entry still
    pointing to the foot. An outline title whose end is repeated (``Event: 'close''close'``:
    Chromium's title for such a heading) also matches the text written once, which is then
    the heading's text. An entry without a position (``/Fit``, ``/FitV``, a null top)
    replaces the first line(s) showing its title after the headings placed before it on its
    page, or, where the title is not found there, goes after them (at the top for the
    first). Without an outline, from font sizes:
    short lines (at most three lines of at most 150 characters, with letters) set clearly
    larger than the body text (the size most of the document's characters have) become
    headings ranked by size, the largest ``#``. Bold text of body size is never a heading.

Definition entries
    Where a document's units are definitions, a signature followed by its description (a
    function reference), each entry becomes a section of its own: a heading one level below
    the outline or font-size heading above it (``#`` under none), named by what the entry
    defines, goes before the signature, which stays as the section's first paragraph. An
    entry starts with a line of at most 300 characters that is a Texinfo definition (a
    bracketed Texinfo category, ``[Function]``, ``[Macro]``, ``[Data Type]``, ``[Method on
    Window]`` …, before or after a signature: TeX sets it at the right margin and pypdf reads
    it first; it is moved to the signature's end) or a bare call signature (``int name
    (args)``, ``name(args) -> type``; outside the parentheses no ``=``, ``;`` or braces; not
    starting with a statement's keyword such as ``return`` or ``if``) that starts a block (it
    does not go on from the line above in its font and size) and is followed by a
    description below it, not in a monospace font, indented under it by half its size or
    more. A signature goes on over up to three more lines of its size until its parentheses
    close; it defines the identifier before its first ``(``, or its last word. Entries count
    only where they are the document's units: at least two Texinfo definitions (three bare
    signatures starting at one position in one size) in the document, two of them under one
    heading; a single signature-like line stays text. A line just above the signature that
    shows the name alone (a title set over each entry) becomes the heading; an entry whose
    nearest heading above is of its name is left as it is.

Title
    ``/Title`` of the document information, unless it is empty or junk (a file name,
    "untitled", "Microsoft Word - …", no letters); else ``None``.

Errors (``ragstream.common.errors``)
    ``UnsupportedFormatError``: the bytes do not start like a PDF (``%PDF-`` within the first
    1,024 bytes); the message names what they look like (a zip archive, text, HTML, an image).
    ``EncryptedFileError``: encrypted, and the empty password does not open it. A file whose
    user password is empty (it opens in any viewer without asking; only printing or copying
    is restricted) is read, with a warning. AES encryption needs the optional
    ``cryptography`` package; without it an AES file is refused as encrypted.
    ``DamagedFileError``: no ``%%EOF`` in the last 2 KiB (truncated), an unreadable structure
    or page tree (a loop in it included), no pages, objects nested deeper than Python's
    recursion limit, every page failing, or any other error of the library (one page that
    fails is left out with a warning instead). ``UnsafeFileError``: the page tree claims
    (``/Count``) more than ``limits.max_pages`` pages (refused before any page is read), holds
    more, or shares its nodes (a tree of 40 objects can name 2**40 pages); every page over the
    bounds below. ``NoTextLayerError``: no page has any text (a scan; or text drawn as
    outlines, or set in fonts without a Unicode map), the structure being sound.

Bounds (a hostile file is refused or finishes in bounded time and memory)
    A page whose decoded content is larger than ``MAX_PAGE_CONTENT_BYTES`` is left out with a
    warning (decompression itself stops at ``MAX_STREAM_BYTES``); text extraction of a page
    stops after ``MAX_PAGE_WORK`` operators and operands (its form XObjects included; about
    1.5–2 s), and of the document after ``MAX_DOCUMENT_WORK`` (about 40 s on a 2-core machine;
    the remaining pages are left out with a warning); a page over a bound costs the document
    a whole page's budget, and pages drawn by the same content stream are read once. pypdf's
    own limits are tightened for the call (``apply_configuration``, per thread): page tree
    entries and depth, outline entries and depth, stream sizes, parsing work, form
    invocations.

It stays whole: it is one converter whose steps (text runs with their fonts and positions,
lines, columns, headings from font sizes, tables, lists, code, page furniture) each read what
the step before left, in one pass over a page; what it shares with the other converters is in
``markdown_out``.
"""

from __future__ import annotations

import bisect
import io
import logging
import math
import re
import threading
import unicodedata
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ragstream.common.errors import (
    DamagedFileError,
    EncryptedFileError,
    NoTextLayerError,
    UnsafeFileError,
    UnsupportedFormatError,
)
from ragstream.knowledge.formats.converted import PAGE_MARKER, Converted, Limits
from ragstream.knowledge.formats.markdown_out import useful_title

#: a page whose content streams decode to more bytes than this is left out (with a warning)
MAX_PAGE_CONTENT_BYTES = 4 * 1024 * 1024
#: no one stream (content, font, form) is decompressed past this many bytes
MAX_STREAM_BYTES = 32 * 1024 * 1024
#: operators + operands read from one page (forms included) before its extraction stops
MAX_PAGE_WORK = 200_000
#: operators + operands read from the whole document before the remaining pages are left out
MAX_DOCUMENT_WORK = 5_000_000
#: outline entries read for headings
MAX_OUTLINE_ENTRIES = 5_000

_MONO_NAME = re.compile(
    r"mono|courier|consol|menlo|monaco|typewriter|inconsolata|cmtt|lmtt|fixed|andale|"
    r"code(?!x)|sfmono|lucidaconsole|sourcecodepro|firacode",
    re.IGNORECASE,
)
_LIGATURES = str.maketrans({"ﬀ": "ff", "ﬁ": "fi", "ﬂ": "fl", "ﬃ": "ffi", "ﬄ": "ffl", "ﬅ": "st", "ﬆ": "st"})
_BULLETS = "•◦▪▫‣∙●○■□➢➤►▸–"


def _bulleted(text: str) -> bool:
    """Whether ``text`` starts with a bullet and a space: a bullet character, or a glyph of a
    symbol font mapped into Unicode's private use area (Word's Symbol bullet U+F0B7,
    LibreOffice's OpenSymbol U+E00A …), which is never the document's text."""
    head = text.lstrip()
    return head[1:2] == " " and (head[:1] in _BULLETS or "\ue000" <= head[:1] <= "\uf8ff")
#: path construction operators whose operands are points (``re``: a rectangle)
_PATH_OPS = frozenset((b"m", b"l", b"c", b"v", b"y", b"re"))
#: operators that paint the current path (fill, stroke or both) and end it
_PAINT_OPS = frozenset((b"f", b"F", b"f*", b"B", b"B*", b"b", b"b*", b"S", b"s"))
#: painted shapes larger than this (points, either side) are never list bullets
_BULLET_MAX = 24.0
_PAGE_NUMBER = re.compile(r"^[-–—\s]*(?:page\s*|seite\s*|p\.\s*)?"
                          r"(?:\d{1,5}|(?=[ivxlcdm])m{0,3}(?:cm|cd|d?c{0,3})(?:xc|xl|l?x{0,3})(?:ix|iv|v?i{0,3}))"
                          r"(?:\s*(?:/|of|von)\s*\d{1,5})?[-–—\s]*$", re.IGNORECASE)
_WORD = re.compile(r"[^\W\d_]+(?:-[^\W\d_]+)*")
_HYPHEN_END = re.compile(r"(?<=[^\W\d_])(?:-|\s?[\u2010\u00ad])$")
_CONTROL = dict.fromkeys(c for c in range(32) if c not in (9, 10))
#: a section number in front of a heading: ``2.1``, ``A.``, ``IV``, ``Chapter 3``
_NUMBERING = re.compile(r"^\s*(?:(?:chapter|section|appendix|part)\s+)?(?:\d+|[A-Z]|[IVXLC]+)(?:[.-]\d+)*"
                        r"[.):]?\s+(?=\S)", re.IGNORECASE)
#: a Texinfo definition's category (``[Function]``, ``[Data Type]``, ``[Method on Window]``)
_TEXINFO_CATEGORY = (r"(?:(?:Library|Special|User|Instance|Class|Data|Generic|Interactive|Primitive) )?"
                     r"(?:Function|Macro|Form|Command|Variable|Option|Constant|[Tt]ype|Method|Operator|Struct"
                     r"|Structure|Union|Enum|Enumeration|Typedef|Field|Property|Slot|Class|Procedure|Hook)"
                     r"(?: (?:on|of|for) [\w.:-]+)?")
#: a Texinfo definition: its category in brackets (set at the right margin) before or after it
_CATEGORY = re.compile(rf"^\[(?P<a>{_TEXINFO_CATEGORY})\]\s*(?P<sig>\S.*)$"
                       rf"|^(?P<sig2>\S.*?)\s*\[(?P<b>{_TEXINFO_CATEGORY})\]$")
#: a bare call signature, read in three parts around its name: what stands in front of the
#: name (a type: no statement keyword), the name right before the first ``(``, and what follows
#: the last ``)`` (a return annotation at most)
_STATEMENT = re.compile(r"(?:return|await|new|yield|throw|raise|if|elif|else|while|for|switch|case|catch"
                        r"|with|typeof|delete|del|not|lambda)\b")
_SIGNATURE_FRONT = re.compile(r"[A-Za-z_][\w:<>,*&\[\] ]*[\s*&]")
_SIGNATURE_BACK = re.compile(r"\s*(?:(?:->|→|:)\s*[^\s;={}][^;={}]{0,80})?")
#: an unfilled template placeholder: ``__UPPER_SNAKE__`` (two words at least), ``{{ name }}``,
#: ``${name}``, ``%%NAME%%``
_PLACEHOLDER = re.compile(r"__[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+__|\{\{\s*[\w.-]+\s*\}\}|\$\{\s*[\w.-]+\s*\}"
                          r"|%%[A-Za-z]\w*%%")
_PLACEHOLDERS_ONLY = re.compile(rf"\s*(?:(?:{_PLACEHOLDER.pattern})\s*)+")
_CALLED = re.compile(r"([A-Za-z_$][\w.:$]*)\s*\(")
_LAST_NAME = re.compile(r"([A-Za-z_$][\w.:$]*)\W*$")


class _WorkExceeded(BaseException):
    """Raised from inside pypdf's extraction loop when a work budget is spent. A
    ``BaseException`` so that pypdf's own ``except Exception`` around form XObjects cannot
    swallow it; it never leaves this module."""

    def __init__(self, whole_document: bool):
        self.whole_document = whole_document


@dataclass
class _Line:
    """One line of a page: its text, where its baseline starts, its size and font family."""

    text: str
    x: float
    y: float
    size: float
    mono: bool
    #: 1–6 when the line is (part of) a heading
    heading: int = 0
    #: the heading's text when it differs from the line's (an outline title)
    heading_text: str = ""
    #: the line goes on with the heading of the line before (a heading set over two lines)
    continues: bool = False
    #: where a list bullet drawn as a small shape left of the line starts (``None``: no bullet)
    bullet: float | None = None


@dataclass
class _Page:
    """What was read from one page."""

    lines: list[_Line] = field(default_factory=list)
    has_images: bool = False
    problem: str = ""
    width: float = 612.0
    #: ``y`` was negated to grow up the page (the page's transformation pointed it down)
    flipped: bool = False


@dataclass
class _Entry:
    """One outline entry: its page (0-based), depth and title, and where on the page its
    destination points (``None`` when it names no position: ``/Fit``, a null coordinate)."""

    index: int
    level: int
    title: str
    top: float | None = None
    left: float | None = None


@dataclass
class _Budget:
    """Operators and operands read so far, for the document and the current page."""

    document: int = 0
    page: int = 0


def convert_pdf(name: str, data: bytes, limits: Limits) -> Converted:
    """``data`` (a PDF file called ``name``) as Markdown with page markers; see the module doc."""
    _check_signature(name, data)
    if b"%%EOF" not in data[-2048:]:
        raise DamagedFileError(name, "it is truncated (it does not end with the %%EOF marker)")
    try:
        import pypdf
    except ImportError:  # pragma: no cover - pypdf is a pinned requirement
        raise UnsupportedFormatError(name, "reading PDF needs the pypdf package, which is not "
                                           "installed") from None
    warnings: list[str] = []
    settings: dict[str, Any] = {
        "zlib_maximum_output_length": MAX_STREAM_BYTES,
        "lzw_maximum_output_length": MAX_STREAM_BYTES,
        "run_length_maximum_output_length": MAX_STREAM_BYTES,
        "brotli_maximum_output_length": MAX_STREAM_BYTES,
        "array_based_stream_maximum_output_length": MAX_STREAM_BYTES,
        "maximum_declared_stream_length": MAX_STREAM_BYTES,
        "stream_decoding_work_maximum_length": 4 * MAX_STREAM_BYTES,
        "stream_parsing_work_maximum_count": MAX_PAGE_WORK,
        "page_tree_maximum_entries": 2 * limits.max_pages + 64,
        "page_tree_maximum_depth": 64,
        "outline_maximum_entries": 4 * MAX_OUTLINE_ENTRIES,
        "outline_maximum_depth": 32,
        "xform_maximum_invocations_per_extraction": 1_000,
    }
    with _library_messages() as messages:
        try:
            with pypdf.apply_configuration(**settings):
                converted = _convert(name, data, limits, pypdf, warnings, messages)
        except (MemoryError, KeyboardInterrupt, SystemExit):
            raise
        except (UnsupportedFormatError, EncryptedFileError, DamagedFileError, UnsafeFileError,
                NoTextLayerError):
            raise
        except RecursionError:
            raise DamagedFileError(name, "its objects are nested too deeply to be read") from None
        except pypdf.errors.LimitReachedError as err:
            raise UnsafeFileError(name, f"reading it would pass a safety limit ({err})") from None
        except Exception as err:  # any other failure of the library: a file it cannot read
            raise DamagedFileError(name, f"pypdf cannot read it ({type(err).__name__}: {err})") from None
    if messages:
        first = messages[0].rstrip(".")
        converted.warnings.append(
            f"the file has {len(messages)} structural problem(s) that were worked around "
            f"(first: {first[:160]})")
    return converted


def _convert(name: str, data: bytes, limits: Limits, pypdf: Any, warnings: list[str],
             messages: list[str]) -> Converted:
    """The conversion proper, inside the tightened pypdf configuration; ``messages`` are the
    library's repairs so far."""
    try:
        reader = pypdf.PdfReader(io.BytesIO(data), strict=False)
    except pypdf.errors.DependencyError:
        raise EncryptedFileError(name) from None
    except (pypdf.errors.PdfReadError, pypdf.errors.PdfStreamError, ValueError, KeyError, TypeError,
            AttributeError, IndexError) as err:
        raise DamagedFileError(name, f"its structure cannot be read ({err})") from None
    _check_encryption(name, reader, pypdf, warnings)
    _check_page_count(name, reader, limits)
    try:
        count = len(reader.pages)
    except pypdf.errors.LimitReachedError as err:
        raise UnsafeFileError(name, f"its page tree is larger than {limits.max_pages:,} pages allow, "
                                    f"or shares or loops its nodes ({err})") from None
    except (pypdf.errors.PdfReadError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise DamagedFileError(name, f"its page tree cannot be read ({err})") from None
    if count == 0:
        raise DamagedFileError(name, "it has no pages")
    if count > limits.max_pages:
        raise UnsafeFileError(name, f"it has {count:,} pages (at most {limits.max_pages:,})")

    pages = _read_pages(reader, count, warnings)
    _drop_unreadable(pages, warnings)
    if not any(p.lines for p in pages):
        problems = [p.problem for p in pages if p.problem]
        if "too big" in problems or "left out" in problems:
            raise UnsafeFileError(name, f"its pages hold more content than can be read safely (at most "
                                        f"{MAX_PAGE_CONTENT_BYTES // 2**20} MiB or {MAX_PAGE_WORK:,} "
                                        f"operations a page)")
        failures = [p for p in problems if p != "unreadable"]
        if failures:
            raise DamagedFileError(name, f"none of its pages can be read ({failures[0]})")
        if messages and not any(p.has_images for p in pages):
            # no text, no images, and a damaged structure: damage, not a scan
            raise DamagedFileError(name, f"no text could be read from it ({messages[0].rstrip('.')[:160]})")
        raise NoTextLayerError(name, count)
    _drop_running_lines(pages, warnings)
    body = _body_size(pages)
    _drop_placeholders(pages, body, warnings)
    outline = _outline(reader, count)
    if outline:
        _place_outline(pages, outline)
    else:
        _size_headings(pages, body)
    _definitions(pages)
    markdown, offsets = _render(pages, body, warnings)
    _report_empty(pages, warnings)
    return Converted(markdown=markdown, title=_title(reader, name), kind="pdf", pages=offsets,
                     warnings=warnings)


# ----------------------------------------------------------------------------- checks


def _check_signature(name: str, data: bytes) -> None:
    """Refuse bytes that are not a PDF, saying what they look like."""
    if b"%PDF-" in data[:1024]:
        return
    head = data[:512]
    if not data:
        what = "the file is empty, not a PDF"
    elif head.startswith(b"PK\x03\x04") or head.startswith(b"PK\x05\x06"):
        what = "it is a zip archive (DOCX, PPTX, EPUB?), not a PDF"
    elif head.startswith((b"\x89PNG", b"\xff\xd8\xff", b"GIF8", b"II*\x00", b"MM\x00*")):
        what = "it is an image, not a PDF"
    elif head.startswith(b"%!PS"):
        what = "it is PostScript, not a PDF"
    elif head.startswith(b"\xd0\xcf\x11\xe0"):
        what = "it is an old Office (OLE) file, not a PDF"
    elif re.search(rb"^\s*(?:<!doctype html|<html)", head, re.IGNORECASE):
        what = "it is an HTML page, not a PDF"
    elif b"\x00" not in head:
        what = "it is text, not a PDF"
    else:
        what = "it does not start with %PDF-: it is not a PDF"
    raise UnsupportedFormatError(name, what)


def _check_encryption(name: str, reader: Any, pypdf: Any, warnings: list[str]) -> None:
    """Refuse a file that needs a password; read one whose user password is empty."""
    if not reader.is_encrypted:
        return
    try:
        matched = reader.decrypt("")
    except pypdf.errors.DependencyError:  # AES without the optional ``cryptography`` package
        raise EncryptedFileError(name) from None
    except (pypdf.errors.PdfReadError, ValueError, KeyError, TypeError, NotImplementedError) as err:
        raise DamagedFileError(name, f"its encryption cannot be read ({err})") from None
    if matched == pypdf.PasswordType.NOT_DECRYPTED:
        raise EncryptedFileError(name)
    warnings.append("encrypted with an empty password (printing or copying restricted): read without one")


def _check_page_count(name: str, reader: Any, limits: Limits) -> None:
    """Refuse a page tree that claims more than ``limits.max_pages`` pages, before reading it."""
    try:
        root = reader.trailer["/Root"].get_object()
        claimed = root["/Pages"].get_object().get("/Count")
    except (KeyError, TypeError, AttributeError, ValueError):
        return  # pypdf may still find the pages; its bounded walk decides
    claimed = getattr(claimed, "get_object", lambda: claimed)()
    if isinstance(claimed, int) and claimed > limits.max_pages:
        raise UnsafeFileError(name, f"it claims {claimed:,} pages (at most {limits.max_pages:,})")


@contextmanager
def _library_messages() -> Iterator[list[str]]:
    """pypdf's warnings (repairs of a damaged file) logged by this thread while inside."""
    messages: list[str] = []
    thread = threading.get_ident()

    class _Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.thread == thread and record.levelno >= logging.WARNING and len(messages) < 1000:
                messages.append(record.getMessage())

    handler = _Collect()
    logger = logging.getLogger("pypdf")
    logger.addHandler(handler)
    try:
        yield messages
    finally:
        logger.removeHandler(handler)


# ----------------------------------------------------------------------------- reading pages


def _read_pages(reader: Any, count: int, warnings: list[str]) -> list[_Page]:
    """Every page's lines, within the work budgets. Pages drawn by the same content streams
    (with the same resources) are read once; a page over a limit costs the document budget
    a whole page's work, so a file of many such pages stops early."""
    from pypdf.errors import LimitReachedError

    budget = _Budget()
    fonts: dict[int, tuple[Any, bool]] = {}
    pages: list[_Page] = []
    seen: dict[tuple[Any, ...], _Page] = {}
    too_big: list[int] = []
    stopped_at = 0
    for index in range(count):
        page = _Page()
        pages.append(page)
        if stopped_at:
            continue
        obj = reader.pages[index]
        page.width = _page_width(obj)
        page.has_images = _has_images(obj)
        key = _content_key(obj)
        if key is not None and key in seen:
            earlier = seen[key]
            page.lines = [_Line(line.text, line.x, line.y, line.size, line.mono, bullet=line.bullet)
                          for line in earlier.lines]
            page.problem = earlier.problem
            page.flipped = earlier.flipped
            if page.problem == "too big":
                too_big.append(index + 1)
            continue
        if key is not None:
            seen[key] = page
        budget.page = 0
        try:
            size = _content_size(obj)
            if size is None or size > MAX_PAGE_CONTENT_BYTES:
                raise _WorkExceeded(whole_document=False)
            page.lines = _page_lines(obj, budget, fonts, page)
        except (_WorkExceeded, LimitReachedError) as stop:
            page.lines = []
            if isinstance(stop, _WorkExceeded) and stop.whole_document:
                stopped_at = index + 1
                continue
            page.problem = "too big"
            too_big.append(index + 1)
            budget.document += MAX_PAGE_WORK - budget.page
            if budget.document > MAX_DOCUMENT_WORK:
                stopped_at = index + 2
        except (MemoryError, KeyboardInterrupt):
            raise
        except Exception as err:  # one unreadable page (nesting too deep too) does not lose the others
            page.problem = f"{type(err).__name__}: {err}"[:160]
            warnings.append(f"page {index + 1} cannot be read ({page.problem}): left out")
    if too_big:
        warnings.append(f"{_numbers('page', too_big)} too much content to read safely (more than "
                        f"{MAX_PAGE_CONTENT_BYTES // 2**20} MiB or {MAX_PAGE_WORK:,} operations): left out")
    if stopped_at and stopped_at <= count:
        warnings.append(f"pages {stopped_at}–{count} left out: the document's text is larger than "
                        f"{MAX_DOCUMENT_WORK:,} operations; split it into smaller files")
        for page in pages[stopped_at - 1:]:
            page.problem = page.problem or "left out"
    return pages


def _content_key(page: Any) -> tuple[Any, ...] | None:
    """What identifies the page's drawing: its content streams' and resources' object numbers
    (``None`` when they are not indirect objects, so not shared)."""
    contents: Any = page.raw_get("/Contents") if "/Contents" in page else None
    resources: Any = page.raw_get("/Resources") if "/Resources" in page else None
    refs: list[Any] = []
    if hasattr(contents, "idnum"):
        target = contents.get_object()
        items = list(target) if isinstance(target, list) else [contents]
    elif isinstance(contents, list):
        items = list(contents)
    else:
        return None
    for item in items[:64]:
        if not hasattr(item, "idnum"):
            return None
        refs.append((item.idnum, item.generation))
    resource_key = (resources.idnum, resources.generation) if hasattr(resources, "idnum") else id(resources)
    return (tuple(refs), resource_key)


def _page_width(page: Any) -> float:
    """The page's width in points (612 when its box cannot be read)."""
    try:
        return float(page.mediabox.width) or 612.0
    except Exception:  # a malformed box: any width will do for column detection
        return 612.0


def _content_size(page: Any) -> int | None:
    """Decoded bytes of the page's content streams; ``None`` once they pass the limit."""
    contents = page.get("/Contents")
    if contents is None:
        return 0
    contents = contents.get_object()
    streams = contents if isinstance(contents, list) else [contents]
    total = 0
    for stream in streams[:10_000]:
        stream = stream.get_object()
        if not hasattr(stream, "get_data"):
            continue
        total += len(stream.get_data())  # pypdf stops decompressing at MAX_STREAM_BYTES
        if total > MAX_PAGE_CONTENT_BYTES:
            return None
    return total


def _has_images(page: Any) -> bool:
    """Whether the page's resources hold an image (or a form that may draw one)."""
    try:
        xobjects = page.get("/Resources", {}).get_object().get("/XObject")
        if xobjects is None:
            return False
        return len(xobjects.get_object()) > 0
    except Exception:  # unreadable resources: no images known
        return False


def _multiply(a: list[float], b: list[float]) -> list[float]:
    """Product of two PDF matrices ``[a b c d e f]``."""
    return [
        a[0] * b[0] + a[1] * b[2],
        a[0] * b[1] + a[1] * b[3],
        a[2] * b[0] + a[3] * b[2],
        a[2] * b[1] + a[3] * b[3],
        a[4] * b[0] + a[5] * b[2] + b[4],
        a[4] * b[1] + a[5] * b[3] + b[5],
    ]


def _is_mono(font: Any, cache: dict[int, tuple[Any, bool]]) -> bool:
    """Whether a font resource is monospace (by its name or its FixedPitch flag); ``cache``
    holds the fonts it has seen (kept alive, so that their ids stay theirs)."""
    if font is None:
        return False
    key = id(font)
    if key in cache:
        return cache[key][1]
    mono = False
    try:
        base = str(font.get("/BaseFont", ""))
        mono = bool(_MONO_NAME.search(base.split("+")[-1]))
        if not mono:
            descriptor = font.get("/FontDescriptor")
            if descriptor is None and "/DescendantFonts" in font:
                descriptor = font["/DescendantFonts"].get_object()[0].get_object().get("/FontDescriptor")
            if descriptor is not None:
                mono = bool(int(descriptor.get_object().get("/Flags", 0)) & 1)
    except Exception:  # a malformed font dictionary: not monospace
        mono = False
    cache[key] = (font, mono)
    return mono


def _page_lines(page: Any, budget: _Budget, fonts: dict[int, tuple[Any, bool]], info: _Page) -> list[_Line]:
    """The page's lines in drawing order, from pypdf's text runs; a line whose list bullet is
    drawn as a small shape (Chromium paints ``<ul>`` discs and squares) has it marked."""
    lines: list[_Line] = []
    runs: list[tuple[str, float, float, float, bool]] = []
    path: list[float] = []  # the bounding box of the path being built (empty: none)
    shapes: list[tuple[float, float, float, float]] = []  # small painted paths: x0, y0, x1, y1
    budget.page = 0

    def flush() -> None:
        text = _joined(runs)
        text = _clean(text)
        if text.strip():
            first = next(r for r in runs if r[0].strip())
            sizes: Counter[float] = Counter()
            prose: Counter[float] = Counter()  # inline code is often set smaller than its line
            mono_chars = 0
            for run_text, _x, _y, size, mono in runs:
                n = len(run_text.strip())
                sizes[round(size * 2) / 2] += n
                if not mono:
                    prose[round(size * 2) / 2] += n
                mono_chars += n if mono else 0
            total = sum(sizes.values()) or 1
            mono_line = mono_chars >= 0.9 * total
            size = (sizes if mono_line or not prose else prose).most_common(1)[0][0]
            lines.append(_Line(text=text.rstrip(), x=first[1], y=first[2], size=size, mono=mono_line))
        runs.clear()

    def on_text(text: str, cm: Any, tm: Any, font: Any, size: Any) -> None:
        if not text:
            return
        try:
            matrix = _multiply([float(v) for v in tm], [float(v) for v in cm])
            scale = math.hypot(matrix[2], matrix[3]) or 1.0
            effective = abs(float(size)) * scale
        except (TypeError, ValueError, IndexError):
            matrix, effective = [1.0, 0.0, 0.0, 1.0, 0.0, 0.0], 0.0
        if not math.isfinite(effective):
            effective = 0.0
        parts = text.split("\n")
        for i, part in enumerate(parts):
            if i:
                flush()
            if part:
                runs.append((part, matrix[4], matrix[5], effective, _is_mono(font, fonts)))

    def on_operator(operator: bytes, operands: Any, cm: Any, tm: Any) -> None:
        work = 1
        if isinstance(operands, list):
            work += len(operands)
            if operands and isinstance(operands[0], list):
                work += len(operands[0])
        if operator in (b"INLINE IMAGE", b"BI"):
            info.has_images = True
        budget.page += work
        budget.document += work
        if budget.document > MAX_DOCUMENT_WORK:
            raise _WorkExceeded(whole_document=True)
        if budget.page > MAX_PAGE_WORK:
            raise _WorkExceeded(whole_document=False)
        if operator in _PATH_OPS:
            _extend_path(path, operator, operands, cm)
        elif operator in _PAINT_OPS:
            if path and 0 < path[2] - path[0] <= _BULLET_MAX and 0 < path[3] - path[1] <= _BULLET_MAX:
                shapes.append((path[0], path[1], path[2], path[3]))
            path.clear()
        elif operator == b"n":  # a clipping path, not painted
            path.clear()

    page.extract_text(visitor_text=on_text, visitor_operand_before=on_operator)
    flush()
    info.flipped = _orient(lines)
    _mark_bullets(lines, shapes, info.flipped, budget.page)
    return lines


#: punctuation that never takes a space before it in running text
_CLOSING = frozenset(".,;:!?)")


def _joined(runs: list[tuple[str, float, float, float, bool]]) -> str:
    """A line's text from its runs. The space pypdf puts between inline code and punctuation
    right after it (Chromium pads a ``<code>``: "dns.lookup() ." for "dns.lookup()."), is
    left out."""
    out: list[str] = []
    after_code = False
    for text, _x, _y, _size, mono in runs:
        if after_code and not mono and text[:1] == " " and text[1:2] in _CLOSING:
            text = text[1:]
        out.append(text)
        if text.strip():
            after_code = mono
    return "".join(out)


def _extend_path(box: list[float], operator: bytes, operands: Any, cm: Any) -> None:
    """Grow ``box`` (``[x0, y0, x1, y1]``, empty for a new path) by the points of one path
    operator, placed on the page by the current transformation ``cm`` (a curve's control
    points included: its box can only grow)."""
    try:
        numbers = [float(v) for v in operands]
        a, b, c, d, e, f = (float(v) for v in cm)
    except (TypeError, ValueError):
        return
    if operator == b"re":
        if len(numbers) != 4:
            return
        x, y, w, h = numbers
        points = [(x, y), (x + w, y), (x, y + h), (x + w, y + h)]
    else:
        points = list(zip(numbers[0::2], numbers[1::2]))
    for px, py in points:
        X, Y = a * px + c * py + e, b * px + d * py + f
        if not (math.isfinite(X) and math.isfinite(Y)):
            box[:] = [0.0, 0.0, math.inf, math.inf]  # a point nowhere: the path is no bullet
            return
        if box:
            box[:] = [min(box[0], X), min(box[1], Y), max(box[2], X), max(box[3], Y)]
        else:
            box[:] = [X, Y, X, Y]


def _mark_bullets(lines: list[_Line], shapes: list[tuple[float, float, float, float]], flipped: bool,
                  allowance: int) -> None:
    """Mark the lines that have a list bullet drawn as a shape: a small, roughly square shape
    (a tenth to six tenths of the line's size on each side) standing just left of the line's
    first text (a tenth to twice its size away) at the height of its lower-case letters (its
    centre from 0.15 of the size below the baseline to 0.6 above). Table borders, underlines
    and rules are thin or long, not such shapes. At most ``allowance`` shapes are looked at
    (the page's own work), so a page of many shapes costs no more than it did to read."""
    if not shapes or not lines:
        return
    if flipped:
        shapes = [(x0, -y1, x1, -y0) for x0, y0, x1, y1 in shapes]
    shapes = sorted(shapes, key=lambda s: s[1] + s[3])
    centres = [(s[1] + s[3]) / 2 for s in shapes]
    looked = 0
    for line in lines:
        size = line.size
        if size <= 0:
            continue
        low = bisect.bisect_left(centres, line.y - 0.15 * size)
        high = bisect.bisect_right(centres, line.y + 0.6 * size)
        best: tuple[float, float] | None = None
        for x0, y0, x1, y1 in shapes[low:high]:
            looked += 1
            if looked > allowance:
                return
            big, small = max(x1 - x0, y1 - y0), min(x1 - x0, y1 - y0)
            gap = line.x - x1
            if (0.1 * size <= small and big <= 0.6 * size and big <= 1.6 * small
                    and 0.1 * size <= gap <= 2.0 * size and (best is None or gap < best[0])):
                best = (gap, x0)
        if best is not None:
            line.bullet = best[1]


def _clean(text: str) -> str:
    """Control characters out, ligatures spelled out, soft hyphens inside words dropped."""
    text = text.translate(_CONTROL).translate(_LIGATURES).replace("\t", " ")
    text = re.sub(r"\u00ad(?=\S)", "", text)
    return text


def _orient(lines: list[_Line]) -> bool:
    """Make ``y`` grow up the page, whatever the page's transformation says; whether it was
    negated for that. One step up is no evidence: Chromium draws a page's headings after its
    text, so a page of one line and a heading above it steps up once."""
    down = sum(1 for a, b in zip(lines, lines[1:]) if b.y < a.y)
    up = sum(1 for a, b in zip(lines, lines[1:]) if b.y > a.y)
    flipped = up > down and up >= 2
    if flipped:
        for line in lines:
            line.y = -line.y
    return flipped


def _readable(lines: list[_Line]) -> bool:
    """Whether the text is real text, not glyph codes of fonts without a Unicode map."""
    chars = "".join(line.text for line in lines).replace(" ", "")
    if not chars:
        return False
    bad = sum(1 for c in chars if c == "\ufffd" or unicodedata.category(c) in ("Co", "Cn", "Cc", "Cs"))
    return bad * 3 < len(chars)


# ----------------------------------------------------------------------------- structure


def _drop_unreadable(pages: list[_Page], warnings: list[str]) -> None:
    """Empty the pages whose text is glyph codes (fonts without a Unicode map), with a warning."""
    unreadable = []
    for number, page in enumerate(pages, 1):
        if page.lines and not _readable(page.lines):
            page.lines = []
            page.problem = "unreadable"
            unreadable.append(number)
    if unreadable:
        warnings.append(f"{_numbers('page', unreadable, verb=False)}: text in fonts without a Unicode map "
                        f"cannot be read: left out")


def _drop_running_lines(pages: list[_Page], warnings: list[str]) -> None:
    """Leave out running headers/footers and lone page numbers at the top or bottom of pages."""
    texted = [p for p in pages if p.lines]
    body = _body_size(pages)
    counts: Counter[str] = Counter()
    for page in texted:
        counts.update({_running_key(line.text) for line in _edge_lines(page, body)})
    threshold = max(2, math.ceil(len(texted) / 2))
    running = {key for key, n in counts.items() if n >= threshold and key}
    dropped: set[str] = set()
    for page in texted:
        edges = {id(line) for line in _edge_lines(page, body)}
        keep = []
        for line in page.lines:
            if id(line) in edges and not line.mono:
                key = _running_key(line.text)
                if key in running or _PAGE_NUMBER.match(line.text.strip()):
                    if key in running:
                        dropped.add(line.text.strip())
                    continue
            keep.append(line)
        page.lines = keep
    if dropped:
        shown = "; ".join(sorted(dropped)[:3])
        warnings.append(f"running headers/footers left out ({shown[:200]})")


def _drop_placeholders(pages: list[_Page], body: float, warnings: list[str]) -> None:
    """Leave out paragraphs that are nothing but unfilled template placeholders (see the module
    doc): not set in a monospace font, standing apart from the lines around them, and each
    placeholder found nowhere else in the document's text."""
    candidates = [(page, i) for page in pages for i, line in enumerate(page.lines)
                  if not line.mono and line.text.lstrip()[:1] in ("_", "{", "$", "%")
                  and _PLACEHOLDERS_ONLY.fullmatch(line.text)]
    if not candidates:
        return
    leading = _leading(pages, body)
    alone: list[tuple[_Page, _Line]] = []
    for page, i in candidates:
        line = page.lines[i]
        before = page.lines[i - 1] if i else None
        after = page.lines[i + 1] if i + 1 < len(page.lines) else None
        if (before is None or _breaks(before, line, "para", body, leading)) and \
                (after is None or _breaks(line, after, "para", body, leading)):
            alone.append((page, line))
    everywhere: Counter[str] = Counter(token for page in pages for line in page.lines
                                       for token in _PLACEHOLDER.findall(line.text))
    inside: Counter[str] = Counter(token for _page, line in alone
                                   for token in _PLACEHOLDER.findall(line.text))
    dropped = [(page, line) for page, line in alone
               if all(everywhere[token] == inside[token] for token in _PLACEHOLDER.findall(line.text))]
    gone = {id(line) for _page, line in dropped}
    for page in {id(page): page for page, _line in dropped}.values():
        page.lines = [line for line in page.lines if id(line) not in gone]
    if dropped:
        shown = ", ".join(sorted({line.text.strip() for _page, line in dropped}))
        warnings.append(f"unfilled template placeholders left out ({shown[:200]})")


def _edge_lines(page: _Page, body: float) -> list[_Line]:
    """The lines on the two topmost and the two lowest baselines of a page that stand apart
    from the text (set smaller than the body, or with a wide gap to the nearest line)."""
    if len(page.lines) < 3:
        candidates = [line for line in page.lines if _PAGE_NUMBER.match(line.text.strip())]
    else:
        baselines = sorted({round(line.y) for line in page.lines})
        edge = set(baselines[:2]) | set(baselines[-2:])
        candidates = [line for line in page.lines if round(line.y) in edge]
    ys = sorted({line.y for line in page.lines})  # each baseline once: a page of many lines
    apart = []                                     # on few baselines costs no more to read
    for line in candidates:
        gap = _nearest_gap(ys, line.y)
        if line.size < body - 0.4 or gap is None or gap > 1.8 * max(line.size, body):
            apart.append(line)
    return apart


def _nearest_gap(ys: list[float], y: float) -> float | None:
    """The distance from ``y`` to the nearest of the sorted baselines ``ys`` more than half a
    point away (``None``: there is none)."""
    low = bisect.bisect_left(ys, y - 0.5) - 1      # the last baseline more than 0.5 below
    high = bisect.bisect_right(ys, y + 0.5)        # the first more than 0.5 above
    found = [y - ys[low]] if low >= 0 else []
    found += [ys[high] - y] if high < len(ys) else []
    return min(found) if found else None


def _running_key(text: str) -> str:
    """A line's text with digits and spacing normalised, to find it on other pages."""
    return re.sub(r"\s+", " ", re.sub(r"\d+", "#", text.strip().lower()))


def _body_size(pages: list[_Page]) -> float:
    """The size most characters of the document are set in."""
    sizes: Counter[float] = Counter()
    for page in pages:
        for line in page.lines:
            sizes[line.size] += len(line.text)
    return sizes.most_common(1)[0][0] if sizes else 0.0


def _outline(reader: Any, count: int) -> list[_Entry]:
    """The outline's entries in document order (empty when none); named destinations are
    resolved by pypdf."""
    try:
        outline = reader.outline
    except Exception:  # an unreadable outline: headings come from font sizes instead
        return []
    entries: list[_Entry] = []
    stack: list[tuple[list[Any], int]] = [(list(outline), 1)]
    while stack and len(entries) < MAX_OUTLINE_ENTRIES:
        items, level = stack.pop()
        while items and len(entries) < MAX_OUTLINE_ENTRIES:
            item = items.pop(0)
            if isinstance(item, list):
                stack.append((items, level))
                items, level = list(item), level + 1
                continue
            title = re.sub(r"\s+", " ", _clean(str(getattr(item, "title", "") or ""))).strip()
            try:
                index = reader.get_destination_page_number(item)
            except Exception:  # a destination that points nowhere
                index = None
            if title and isinstance(index, int) and 0 <= index < count:
                entries.append(_Entry(index, min(level, 6), title, _coordinate(item, "/Top"),
                                      _coordinate(item, "/Left")))
    return entries


def _coordinate(item: Any, key: str) -> float | None:
    """A destination's ``/Top`` or ``/Left`` as a number; ``None`` when absent, null or odd."""
    try:
        value = item.get(key)
        value = value.get_object() if hasattr(value, "get_object") else value
        number = float(value)
    except Exception:  # a null, a name, a malformed destination: no position
        return None
    return number if math.isfinite(number) else None


def _norm(text: str) -> str:
    """Text reduced to lower-case letters and digits, to compare a title with a line."""
    return re.sub(r"[\W_]+", "", text.lower())


def _same_title(shown: str, title: str) -> bool:
    """Whether text on the page shows the outline title: the same letters and digits, or the
    same once a section number in front of either is set aside (``2.1 ASN.1 syntax``)."""
    if _norm(shown) == _norm(title):
        return True
    bare = _norm(_NUMBERING.sub("", title))
    return bool(bare) and _norm(_NUMBERING.sub("", shown)) == bare


def _undoubled(title: str) -> str:
    """The title without a repeated end (``Event: 'close''close'``: Chromium's outline
    title of a heading it moved to the next page repeats the heading's code part); the title
    itself when its end is not repeated (four characters at least, a letter or digit among
    them)."""
    for k in range(len(title) // 2, 3, -1):
        tail = title[-k:]
        if tail == title[-2 * k:-k] and _norm(tail):
            return title[:-k]
    return title


def _title_lines(page: _Page, title: str, top: float | None, start: int) -> tuple[int, int] | None:
    """The first and last index of the line(s) (at most three, one under the other) that show
    ``title``: with a destination top, the match whose first line stands nearest it (at most
    four line heights below, 24 points at least, or 0.6 of one above, 2 points at least);
    without one, the first match from ``start`` on."""
    target = _norm(title)
    bare = _norm(_NUMBERING.sub("", title))
    longest = max(len(target), len(bare)) + 16  # a section number and spacing at most
    best: tuple[float, int, int] | None = None
    lines = page.lines
    for i in range(start if top is None else 0, len(lines)):
        first = lines[i]
        if first.heading:
            continue
        if top is not None and not (top - max(24.0, 4 * first.size) <= first.y
                                    <= top + max(2.0, 0.6 * first.size)):
            continue
        joined = ""
        for k in range(i, min(i + 3, len(lines))):
            line = lines[k]
            if line.heading or (k > i and not 0 < lines[k - 1].y - line.y <= 2.5 * max(line.size, 1.0)):
                break
            joined += _norm(line.text)
            if len(joined) > longest:
                break
            if joined == target or (bare and joined.endswith(bare)
                                    and _same_title(" ".join(x.text for x in lines[i:k + 1]), title)):
                if top is None:
                    return i, k
                distance = abs(top - first.y)
                if best is None or distance < best[0]:
                    best = (distance, i, k)
                break
    return (best[1], best[2]) if best else None


def _position(page: _Page, y: float, left: float | None) -> int:
    """Where a heading whose text stands at ``y`` goes among the page's lines: before the
    nearest line at or below it (2 points of tolerance; of lines on one baseline, the first
    drawn), in the same column as ``left`` when given (a line starting more than 40 % of the
    page's width to its left or right stands in another column); with none below, after the
    nearest line above."""
    reach = 0.4 * page.width

    def pick(lines: list[tuple[int, _Line]]) -> int:
        below = [(i, line) for i, line in lines if line.y <= y + 2.0]
        if below:
            nearest = max(line.y for _, line in below)
            return next(i for i, line in below if line.y >= nearest - 0.5)
        above = [(i, line) for i, line in lines if line.y > y + 2.0]
        if above:
            nearest = min(line.y for _, line in above)
            return max(i for i, line in above if line.y <= nearest + 0.5) + 1
        return -1

    everything = list(enumerate(page.lines))
    if left is not None:
        at = pick([(i, line) for i, line in everything if left - reach <= line.x < left + reach])
        if at >= 0:
            return at
    at = pick(everything)
    return at if at >= 0 else len(page.lines)


def _find_shown(pages: list[_Page], entry: _Entry, top: float) -> tuple[int, str, list[_Line]] | None:
    """The page, title and lines that show an entry with a destination top: near the top on
    its page, or, when nothing on its page stands below the top, among the first lines of the
    next page (where a browser moved a heading it would have left at a page's foot). The
    title may be written once where the outline repeats its end (``_undoubled``)."""
    page = pages[entry.index]
    titles = dict.fromkeys([entry.title, _undoubled(entry.title)])
    for title in titles:
        found = _title_lines(page, title, top, 0)
        if found:
            return entry.index, title, page.lines[found[0]:found[1] + 1]
    if entry.index + 1 >= len(pages) or any(line.y <= top + 2.0 for line in page.lines if not line.heading):
        return None
    following = pages[entry.index + 1]
    free = [line for line in following.lines if not line.heading]
    if not free:
        return None
    high = max(line.y for line in free)
    for title in titles:
        found = _title_lines(following, title, high, 0)
        if found:
            return entry.index + 1, title, following.lines[found[0]:found[1] + 1]
    return None


def _place_outline(pages: list[_Page], outline: list[_Entry]) -> None:
    """Put each outline entry on its page as a heading (see the module doc). The lines that
    show the titles near their destinations are taken out first, so that lines drawn out of
    order (Chromium draws a page's headings after its text) never decide where another
    heading goes."""
    placed: list[tuple[int, float | None, float | None, str, list[_Line] | None]] = []
    for entry in outline:
        top = entry.top if entry.top is None or not pages[entry.index].flipped else -entry.top
        shown = _find_shown(pages, entry, top) if top is not None else None
        if shown is None:
            placed.append((entry.index, top, entry.left, entry.title, None))
            continue
        index, title, lines = shown
        for line in lines:
            line.heading = entry.level  # taken: no other entry matches it
        placed.append((index, lines[0].y, lines[0].x, title, lines))
    for page in pages:
        page.lines = [line for line in page.lines if not line.heading]
    columns = {index: _multi_column(pages[index]) for index, *_rest in placed}
    cursor: dict[int, int] = {}
    for entry, (index, top, left, title, taken) in zip(outline, placed):
        page = pages[index]
        start = cursor.get(index, 0)
        if top is None:
            found = _title_lines(page, title, None, start)
            at = found[0] if found else start
            if found:
                taken = page.lines[found[0]:found[1] + 1]
                del page.lines[found[0]:found[1] + 1]
        if taken is None:
            anchor = page.lines[start] if start < len(page.lines) else None
            lines = [_Line(text=title, x=anchor.x if anchor else 0.0,
                           y=top if top is not None else anchor.y if anchor else 0.0,
                           size=anchor.size if anchor else 0.0, mono=False)]
        else:
            lines = taken
        if top is not None:
            at = max(start, _position(page, top, left if columns[index] else None))
        for line in lines:
            line.heading, line.continues = entry.level, line is not lines[0]
        lines[0].heading_text = title
        page.lines[at:at] = lines
        cursor[index] = at + len(lines)


def _size_headings(pages: list[_Page], body: float) -> None:
    """Mark short lines set clearly larger than the body text as headings ranked by size.

    Lines of one larger size that follow each other at a paragraph's spacing (at most 1.6 ×
    their size apart) form a block; a block of more than three lines is a paragraph in large
    type, not headings. Inside a block, lines closer than 1.3 × their size are one heading set
    over two or three lines; wider apart, they are separate headings."""
    if body <= 0:
        return
    floor = max(body * 1.15, body + 1.0)
    headings: list[list[_Line]] = []
    sizes: set[float] = set()
    for page in pages:
        i = 0
        while i < len(page.lines):
            line = page.lines[i]
            if line.size < floor or line.mono:
                i += 1
                continue
            block = [line]
            j = i + 1
            while (j < len(page.lines) and page.lines[j].size == line.size and not page.lines[j].mono
                   and 0 < block[-1].y - page.lines[j].y <= line.size * 1.6):
                block.append(page.lines[j])
                j += 1
            i = j
            if len(block) > 3:
                continue
            groups = [[block[0]]]
            for prev, nxt in zip(block, block[1:]):
                if prev.y - nxt.y <= line.size * 1.3:
                    groups[-1].append(nxt)
                else:
                    groups.append([nxt])
            for group in groups:
                text = " ".join(g.text.strip() for g in group)
                if len(text) <= 150 and sum(c.isalpha() for c in text) >= 2:
                    headings.append(group)
                    sizes.add(line.size)
    rank = {size: min(n + 1, 6) for n, size in enumerate(sorted(sizes, reverse=True))}
    for group in headings:
        for line in group:
            line.heading, line.continues = rank[line.size], line is not group[0]


@dataclass
class _Definition:
    """A definition entry found at a line: the lines its signature spans, the name it defines,
    its Texinfo category (``None`` for a bare signature) and what must repeat for it to count."""

    first: int
    last: int
    name: str
    category: str | None
    layout: tuple[Any, ...]
    #: the first line's text without the category in front of it
    first_text: str


def _definition_at(lines: list[_Line], i: int) -> _Definition | None:
    """The definition entry whose signature starts at ``lines[i]``, if one does: a Texinfo
    definition (``[Function]`` / ``[Macro]`` … before or after the signature), or a call
    signature standing alone (``int name (args)``, ``name(args) -> type``) that starts a block
    and is followed by a description indented under it, not set in a monospace font."""
    line = lines[i]
    text = line.text.strip()
    if len(text) > 300:
        return None
    tagged = _CATEGORY.match(text) if "[" in text else None
    if tagged is None:
        prev = lines[i - 1] if i else None
        if (prev is not None and not prev.heading and prev.mono == line.mono
                and abs(prev.size - line.size) <= 0.6
                and 0 < prev.y - line.y <= 1.5 * max(line.size, prev.size, 1.0)):
            return None  # it goes on with the line above: not the start of a block
    first_text = (tagged.group("sig") or tagged.group("sig2")) if tagged else text
    signature, last = first_text, i
    while signature.count("(") > signature.count(")") and last + 1 < len(lines) and last - i < 3:
        nxt = lines[last + 1]
        if (nxt.heading or abs(nxt.size - line.size) > 0.6
                or not 0 < lines[last].y - nxt.y <= 2.5 * max(line.size, 1.0)):
            break
        last += 1
        signature += " " + nxt.text.strip()
    if tagged:
        named = _CALLED.search(signature) or _LAST_NAME.search(signature)
        if named is None:
            return None
        category = tagged.group("a") or tagged.group("b")
        return _Definition(i, last, named.group(1), category, ("tagged",), first_text)
    name = _bare_signature(signature)
    after = lines[last + 1] if last + 1 < len(lines) else None
    if (name is None or after is None or after.heading or after.mono or not after.y < lines[last].y
            or after.x < line.x + 0.5 * max(line.size, 1.0)):
        return None
    layout = ("bare", round(line.x), round(line.size * 2), line.mono)
    return _Definition(i, last, name, None, layout, first_text)


def _bare_signature(text: str) -> str | None:
    """The name a bare call signature defines (``int name (args)``, ``name(args) -> type``;
    see the module doc), or ``None`` when ``text`` is not one."""
    opening, closing = text.find("("), text.rfind(")")
    if opening <= 0 or closing < opening or _STATEMENT.match(text):
        return None
    head = text[:opening].rstrip()
    start = len(head)
    while start and (head[start - 1].isalnum() or head[start - 1] in "_.:$"):
        start -= 1
    name, front = head[start:], head[:start]
    if not name or not (name[0].isalpha() or name[0] in "_$"):
        return None
    if not _SIGNATURE_BACK.fullmatch(text[closing + 1:]):
        return None
    if front and not _SIGNATURE_FRONT.fullmatch(front):
        return None
    return name


def _definitions(pages: list[_Page]) -> None:
    """Make each definition entry of a reference (see the module doc) a section of its own."""
    found: list[tuple[int, _Definition, int]] = []  # (page index, entry, section number)
    section = 0
    for p, page in enumerate(pages):
        i = 0
        while i < len(page.lines):
            line = page.lines[i]
            if line.heading:
                section += not line.continues
                i += 1
                continue
            entry = _definition_at(page.lines, i)
            if entry is None:
                i += 1
                continue
            found.append((p, entry, section))
            i = entry.last + 1
    per_section: Counter[tuple[Any, ...]] = Counter((entry.layout, section) for _p, entry, section in found)
    totals: Counter[tuple[Any, ...]] = Counter(entry.layout for _p, entry, _s in found)
    units = {layout for (layout, _s), n in per_section.items()
             if n >= 2 and totals[layout] >= (2 if layout == ("tagged",) else 3)}
    chosen = {(p, entry.first): entry for p, entry, _s in found if entry.layout in units}
    if not chosen:
        return
    level, last_heading = 0, ""
    plan: list[tuple[int, _Definition, int, bool]] = []  # (page, entry, heading level, title line above)
    for p, page in enumerate(pages):
        for i, line in enumerate(page.lines):
            if line.heading and not line.continues:
                level, last_heading = line.heading, _norm(line.heading_text or line.text)
                continue
            entry = chosen.get((p, i))
            if entry is None or _norm(entry.name) == last_heading:
                continue
            above = page.lines[i - 1] if i else None
            titled = (above is not None and not above.heading and len(above.text) <= 80
                      and _norm(above.text) == _norm(entry.name))
            plan.append((p, entry, min(6, level + 1), titled))
    for p, entry, depth, titled in reversed(plan):
        lines = pages[p].lines
        first = lines[entry.first]
        if entry.category and first.text.strip() != entry.first_text:
            first.text = entry.first_text
            lines[entry.last].text = lines[entry.last].text.rstrip() + f" [{entry.category}]"
        if titled:
            above = lines[entry.first - 1]
            above.heading, above.heading_text, above.continues = depth, entry.name, False
        else:
            lines.insert(entry.first, _Line(text=entry.name, x=first.x, y=first.y, size=first.size,
                                            mono=False, heading=depth, heading_text=entry.name))


# ----------------------------------------------------------------------------- rendering


def _leading(pages: list[_Page], body: float) -> float:
    """The usual distance between two baselines of body text."""
    gaps: Counter[float] = Counter()
    for page in pages:
        for a, b in zip(page.lines, page.lines[1:]):
            if a.size == b.size == body and not a.heading and not b.heading:
                gap = a.y - b.y
                if 0 < gap < body * 3:
                    gaps[round(gap * 2) / 2] += 1
    # lines of one paragraph stand closer than 1.8 × the size; paragraph gaps are wider and may
    # outnumber them in a short document
    close = Counter({gap: n for gap, n in gaps.items() if gap <= body * 1.8})
    common = (close or gaps).most_common(1)
    return common[0][0] if common else body * 1.2


def _render(pages: list[_Page], body: float, warnings: list[str]) -> tuple[str, list[tuple[int, int]]]:
    """The Markdown of all pages, and where each page's marker starts."""
    leading = _leading(pages, body)
    vocabulary = {word.lower() for page in pages for line in page.lines for word in _WORD.findall(line.text)}
    out: list[str] = []
    offset = 0
    offsets: list[tuple[int, int]] = []
    columns: list[int] = []
    for number, page in enumerate(pages, 1):
        offsets.append((offset, number))
        chunk = PAGE_MARKER.format(n=number) + "\n\n"
        blocks = [b for b in (_render_block(kind, lines, vocabulary, level)
                              for kind, lines, level in _item_levels(_blocks(page, body, leading))) if b]
        if blocks:
            chunk += "\n\n".join(blocks) + "\n\n"
        if _multi_column(page):
            columns.append(number)
        out.append(chunk)
        offset += len(chunk)
    if columns:
        warnings.append(f"{_numbers('page', columns, verb=False)} set in more than one column: "
                        f"reading order guessed (the order the page draws its text)")
    return "".join(out).rstrip("\n") + "\n", offsets


def _item_levels(blocks: list[tuple[str, list[_Line]]]) -> Iterator[tuple[str, list[_Line], int]]:
    """The blocks with the nesting level of each list item (0 for other blocks): an item whose
    bullet stands right of the item before it is nested one level deeper, one left of it goes
    back to the level of the item whose bullet it lines up with. An item goes at most one
    level deeper than the item right before it, and any other block ends the list (an item
    after it is of level 0), so that the Markdown nests as the page does."""
    bullets: list[float] = []  # the bullet of each open level, outermost first
    for kind, lines in blocks:
        first = lines[0]
        if kind != "para" or first.bullet is None:
            bullets.clear()
            yield kind, lines, 0
            continue
        reach = 0.5 * max(first.size, 1.0)
        while bullets and first.bullet < bullets[-1] - reach:
            bullets.pop()
        if bullets and first.bullet <= bullets[-1] + reach:
            bullets[-1] = first.bullet
        else:
            bullets.append(first.bullet)
        yield kind, lines, len(bullets) - 1


def _blocks(page: _Page, body: float, leading: float) -> list[tuple[str, list[_Line]]]:
    """The page's lines grouped into headings, code blocks and paragraphs."""
    blocks: list[tuple[str, list[_Line]]] = []

    def goes_on(kind: str, line: _Line) -> bool:
        block = blocks[-1][1]
        if _breaks(block[-1], line, kind, body, leading):
            return False
        # a list item (a bullet drawn as a shape) ends at a line starting left of its bullet
        return kind != "para" or block[0].bullet is None or line.x > block[0].bullet

    for line in page.lines:
        # a list item is text, even one set in a monospace font (``callback <Function>``)
        kind = "heading" if line.heading else "code" if line.mono and line.bullet is None else "para"
        if kind == "code" and blocks and blocks[-1][0] == "para":
            # a line of inline code that goes on with the paragraph (no gap) belongs to it
            kind = "para" if goes_on("para", line) else kind
        if blocks and blocks[-1][0] == kind and goes_on(kind, line):
            blocks[-1][1].append(line)
        else:
            blocks.append((kind, [line]))
    return blocks


def _breaks(prev: _Line, line: _Line, kind: str, body: float, leading: float) -> bool:
    """Whether ``line`` starts a new block after ``prev`` of the same kind. In a paragraph, a
    line of inline code (often set in another size than its text) is measured by the
    paragraph's size: only a gap parts it from the text around it."""
    if kind == "heading":
        return not line.continues
    gap = prev.y - line.y
    if kind == "code":
        scale = max(line.size, prev.size, 1.0) / body if body else 1.0
        return gap <= 0 or gap > leading * scale * 3 or abs(line.size - prev.size) > 0.6
    prose = [row.size for row in (prev, line) if not row.mono]
    size = max(max(prose, default=body or prev.size), 1.0)
    scale = size / body if body else 1.0
    if gap <= 0 or (len(prose) == 2 and abs(line.size - prev.size) > 0.6):
        return True
    if gap > leading * scale + 0.25 * size:
        return True
    if line.bullet is not None or _bulleted(line.text):
        return True
    return bool(line.x > prev.x + 0.8 * size and prev.text.rstrip()[-1:] in ".:!?")


def _render_block(kind: str, lines: list[_Line], vocabulary: set[str], level: int = 0) -> str:
    """One block as Markdown; ``vocabulary`` (the document's words) decides a line-end hyphen.
    A list item whose bullet is a shape is ``- …``, indented by two spaces a ``level``."""
    if kind == "heading":
        text = lines[0].heading_text or " ".join(line.text.strip() for line in lines)
        text = re.sub(r"\s+", " ", text).strip().rstrip("#").strip()
        return f"{'#' * lines[0].heading} {text}" if text else ""
    if kind == "code":
        return _render_code(lines)
    parts: list[str] = []
    for line in lines:
        text = re.sub(r"\s+", " ", line.text).strip()
        if not text:
            continue
        if _bulleted(text):
            text = "- " + text[2:].lstrip()
        if parts and _HYPHEN_END.search(parts[-1]) and text[:1].islower():
            parts[-1] = _join_hyphenated(parts[-1], text, vocabulary)
        else:
            parts.append(text)
    text = " ".join(parts)
    if lines[0].bullet is not None and text:
        text = text[2:] if text.startswith("- ") else text  # a bullet character drawn too
        return "  " * level + "- " + _escape(text)
    return _escape(text)


def _join_hyphenated(before: str, after: str, vocabulary: set[str]) -> str:
    """``exam-`` + ``ple …`` → ``example …``; the hyphen stays when the document writes the
    word with it elsewhere (``auto-run``) and never without it."""
    head = _HYPHEN_END.sub("", before)
    first = re.match(r"[^\W\d_]*", after)
    tail = first.group(0).lower() if first else ""
    stem = re.search(r"[^\W\d_]+(?:-[^\W\d_]+)*$", head)
    word = stem.group(0).lower() if stem else ""
    last = word.rsplit("-", 1)[-1]
    if before.endswith("-") and f"{word}-{tail}" in vocabulary and f"{last}{tail}" not in vocabulary:
        return head + "-" + after
    return head + after


def _escape(text: str) -> str:
    """Keep a paragraph a paragraph: no accidental heading, fence, HTML block or code."""
    if re.match(r"#{1,6}(?:\s|$)|`{3}|~{3}|<|=+\s*$|[-*_](?:\s*[-*_]){2,}\s*$|[+]\s", text):
        return "\\" + text
    return text


def _render_code(lines: list[_Line]) -> str:
    """Monospace lines as a fenced block, indentation restored from the line positions."""
    left = min(line.x for line in lines)
    rows: list[str] = []
    for i, line in enumerate(lines):
        if i:
            gap = lines[i - 1].y - line.y
            step = line.size * 1.15 or 1.0
            rows.extend([""] * max(0, min(3, round(gap / step) - 1)))
        width = 0.6 * line.size or 1.0
        indent = max(0, min(40, round((line.x - left) / width)))
        rows.append(" " * indent + line.text.rstrip())
    body = "\n".join(rows)
    fence = "```"
    while fence in body:
        fence += "`"
    return f"{fence}\n{body}\n{fence}"


def _multi_column(page: _Page) -> bool:
    """Whether the page sets body text in columns side by side: two runs of at least five
    lines each, one left of the other, over the same stretch of the page (a table's cells,
    which alternate left and right, are not columns)."""
    body = [line for line in page.lines if not line.heading and len(line.text) > 20]
    if len(body) < 10:
        return False
    starts = sorted({round(line.x) for line in body})
    for a, b in zip(starts, starts[1:]):
        if b - a <= page.width * 0.25:
            continue
        runs: list[list[_Line]] = []
        for line in body:
            if runs and (runs[-1][0].x >= b) == (line.x >= b):
                runs[-1].append(line)
            else:
                runs.append([line])
        left = max((r for r in runs if r[0].x < b), key=len, default=[])
        right = max((r for r in runs if r[0].x >= b), key=len, default=[])
        if len(left) >= 5 and len(right) >= 5:
            low = max(min(x.y for x in left), min(x.y for x in right))
            high = min(max(x.y for x in left), max(x.y for x in right))
            shorter = min(max(x.y for x in r) - min(x.y for x in r) for r in (left, right))
            if high - low >= 0.5 * shorter:
                return True
    return False


def _report_empty(pages: list[_Page], warnings: list[str]) -> None:
    """Name the pages that gave no text."""
    images = [n for n, p in enumerate(pages, 1) if not p.lines and not p.problem and p.has_images]
    blank = [n for n, p in enumerate(pages, 1) if not p.lines and not p.problem and not p.has_images]
    if images:
        warnings.append(f"{_numbers('page', images, verb=False)} {'have' if len(images) > 1 else 'has'} "
                        f"no text (images only?)")
    if blank:
        warnings.append(f"{_numbers('page', blank, verb=False)} {'are' if len(blank) > 1 else 'is'} blank")


def _numbers(word: str, numbers: list[int], verb: bool = True) -> str:
    """``"pages 4, 9 have"`` / ``"page 4 has"``, at most 12 numbers listed."""
    shown = ", ".join(str(n) for n in numbers[:12])
    if len(numbers) > 12:
        shown += f" and {len(numbers) - 12} more"
    plural = len(numbers) > 1
    text = f"{word}{'s' if plural else ''} {shown}"
    return f"{text} {'have' if plural else 'has'}" if verb else text


def _title(reader: Any, name: str) -> str | None:
    """The document information's ``/Title`` unless empty or junk."""
    try:
        metadata = reader.metadata
        raw: Any = metadata.get("/Title") if metadata else None
        raw = raw.get_object() if hasattr(raw, "get_object") else raw
        title = re.sub(r"\s+", " ", _clean(str(raw or "")))
    except Exception:  # unreadable metadata: no title
        return None
    return useful_title(title, name)
