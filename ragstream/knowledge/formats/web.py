"""HTML (a saved web page) and EPUB → Markdown: ``convert_html`` and ``convert_epub``.

HTML is parsed with ``lxml.html`` (libxml2's HTML parser: it never loads a DTD and never expands
entities a page declares); the XML parts of an EPUB (``container.xml``, the OPF package file,
the NCX table of contents, ``encryption.xml``) with ``defusedxml``, which refuses any entity
declaration; its XHTML chapters with ``lxml.etree`` (no DTD, no network, no entity resolution)
and ``lxml.html`` where they are not well-formed XML.

Decoding (HTML)
    A byte-order mark (UTF-8, UTF-16) wins; then the ``<meta charset>`` (or ``http-equiv``
    ``Content-Type``) or XML declaration in the first 16 KB, with the WHATWG reading of its
    label (``iso-8859-1``/``ascii`` → Windows-1252, a declared UTF-16 without a mark → UTF-8);
    then UTF-8. Bytes that do not decode as declared are replaced (U+FFFD), and a page that is
    not UTF-8 and declares nothing (or wrongly declares UTF-8) is read as Windows-1252; each
    such guess is a warning. An internal DTD subset (``<!DOCTYPE x [<!ENTITY …>]>``) is cut out
    before parsing, with a warning, so its entities are never defined, let alone expanded.

Main content (HTML only)
    Never read anywhere: ``script``, ``style``, ``noscript``, ``template``, ``svg``, forms and
    their controls, embedded objects and media, images (their alt text too: counted in a
    warning), and hidden elements (``hidden``, ``aria-hidden="true"``, an inline
    ``display:none`` or ``visibility:hidden``).

    Where the content is: the page's own word first, its first visible ``<main>`` (or
    ``role="main"``), else its only outermost ``<article>``. A page that marks neither (Apache's
    manual, DocBook and AsciiDoc output, pandoc's pages, most pages older than HTML5) is given to
    jusText (``justext``, Pomikálek's boilerplate classifier, as trafilatura uses it): it cuts the
    page into paragraphs and classifies each one, without context, by its length, link density
    and share of stop words (English). The paragraphs it reads as prose (``good``/``neargood``)
    weigh their characters, every ``h1``/``h2`` weighs ``HEADING_WEIGHT``, and the content is the
    deepest element holding ``MAIN_TEXT_SHARE`` (90%) of that weight, widened to an element that
    can hold content (a ``div``, ``section``, cell… not a paragraph or list item) and to every
    ``h1``. A page with no prose and fewer than two ``h1``/``h2`` gives no evidence and is read
    whole, as is one of more than ``MAIN_TEXT_MAX_ELEMENTS`` elements or nested deeper than
    ``MAX_WALK_DEPTH``. jusText only *locates* the content: it would drop much of a manual if it
    chose the blocks (tried on Debian's Apache, Python, Node.js, Debian Reference and git
    manuals: API signatures, option lists, tables of links and short sentences with a link read
    as boilerplate to it, to trafilatura and to readability alike), so the page's blocks are
    still all converted below, by the rules here. The ``<main>`` chosen is read whole when it
    holds no text (one its scripts would have filled).

    In the content, page furniture is left out: ``nav``, ``dialog``, the page-level
    ``header``/``footer`` (those outside ``article``, ``aside``, ``main``, ``nav`` and
    ``section``, as ARIA maps them to banner/contentinfo), ``aside`` outside an ``article`` (a
    sidebar; inside one it is the article's own note), the roles navigation, banner,
    contentinfo, search, complementary (outside an article), dialog and alertdialog; elements
    whose ``class`` names a cookie or consent banner, a breadcrumb trail, a skip link, a
    sidebar, a page footer (``footer``, ``site-footer``), a language switcher (``toplang``,
    ``lang-switcher``, ``languages``…) or a comments section (``comments-area``,
    ``disqus_thread``…), unless they hold an ``h1``, or whose ``id`` names one, unless they
    hold a heading (a documentation section titled "Footer" or "Cookie management" has its
    title's ``id``); and a language list: the nearest paragraph, list or division around a link
    to a translation (``hreflang``) with at most ``_LANGUAGE_LIST_WORDS`` words besides its
    links ("Available Languages: en | fr"). A heading's own ``id`` and those of the anchors in
    it are never read as names of furniture (Apache's "ProxyPassReverseCookieDomain
    Directive").

Markdown
    ``h1``…``h6`` → ``#``…``######`` with the heading's text only (links, code marks and
    images dropped); paragraphs; lists, nested, as ``- `` and ``1. `` (an ``<ol start>`` is
    kept); ``pre`` → a fenced block with its text exact, the language from a ``language-x``
    or ``lang-x`` class (or a Sphinx ``highlight-x`` wrapper); inline ``code`` → backticks;
    blockquotes → ``> ``; links → their text, except permalinks and back-links (``<a
    href="#…">`` reading only ¶, §, #, ↩ …), which go; an API reference's entry — a ``dt``
    with its own ``id`` (Sphinx: ``<dt class="sig sig-object py" id="pathlib.Path.mkdir">``),
    a name one can link to — → a heading one level below the section it stands in (below its
    class for a method) named without its parameters (``### Path.mkdir``), the whole
    signature its first line as code, so each function is a section of its own; emphasis →
    plain text; ``br`` → a line
    break; ``hr`` → nothing. Tables → GitHub pipe tables: the first row (the ``thead``'s, else the
    table's first) is the header; ``|`` is escaped; a ``colspan`` cell repeats its text in a
    header row and leaves the spanned cells empty below it; ``rowspan`` leaves the cells below
    empty; a table nested in a cell is flattened to its text. A layout table (``role=
    "presentation"``, one cell, or cells holding headings or ``pre``) is read as the blocks in
    its cells. A table that would exceed ``MAX_TABLE_CELLS`` cells once its spans are expanded
    becomes one line of text per row. Text that would otherwise read as Markdown structure at
    the start of a line (``#``, ``>``, ``-``, ``1.``, fences, ``<tag``, ``[x]:``, ``$$``, a
    setext underline) is backslash-escaped; nothing else is. Soft hyphens and zero-width spaces
    are removed, no-break spaces become spaces.

Title
    HTML: the ``<title>``, else the first ``h1`` of the content, else ``None``. EPUB: the OPF's
    first ``dc:title``, else the first ``h1`` (the ``dc:creator`` entries, joined by ", ", are
    ``EpubConverted.author``). A title that only repeats the file's name (``faq`` for
    ``faq.html``: what pandoc writes for a document without a title) or says "untitled" counts
    as none.

Empty pages
    A page (or an EPUB) with no text once the rules above are applied is a
    ``DamagedFileError`` ("it holds no text"): there is nothing to ingest, and the message says
    the likely cause (a page drawn by scripts) and what to do.

EPUB
    ``mimetype`` must say ``application/epub+zip`` (a zip without it needs
    ``META-INF/container.xml``); the zip is opened with ``zipsafe.open_zip`` within ``Limits``.
    The first OPF named by ``container.xml`` gives the metadata, the manifest and the spine;
    every spine item that is XHTML (or HTML) is converted in spine order (non-linear items too),
    without the page rules above (a chapter's ``header``, ``footer`` and ``aside`` are its
    content) but without scripts, styles, hidden elements and ``epub:type="pagebreak"`` markers.
    The EPUB 3 navigation document is not converted. A chapter that does not open with a
    heading gets one (``#``) from its entry in the table of contents (the navigation
    document's ``toc`` nav, else the NCX), else from its ``<title>`` when that differs from the
    book's title; without either it continues the previous chapter's section (the continuation
    files of a chapter split in two). Chapters without text (a cover image) are skipped.

Errors (``ragstream.common.errors``)
    ``UnsupportedFormatError``: an HTML file whose bytes are binary (a PNG, a zip, a PDF, NUL
    bytes…) or hold no tag at all; an EPUB that is not a zip, or a zip that is not an EPUB (the
    message names a Word, Excel, PowerPoint or OpenDocument file). ``DamagedFileError``: an
    empty file, a truncated or corrupt zip, a missing or malformed ``container.xml`` or OPF,
    a chapter that is not text, no text, or any other error of a library.
    ``EncryptedFileError``: ``encryption.xml`` encrypts a spine document (DRM; font obfuscation
    alone is not encryption). ``UnsafeFileError``: a zip bomb (``open_zip``), entity declarations
    in an EPUB's XML files, an HTML file larger than ``limits.max_unpacked_bytes``, nesting too
    deep for Python's stack.

Bounds
    Parsing is linear (libxml2 and expat, no entity expansion). libxml2 reads elements nested up
    to 2,048 deep in HTML (``huge_tree``; text after a deeper point is missing, with a warning)
    and 256 in XML (a deeper XHTML chapter is read as HTML); subtrees deeper than
    ``MAX_WALK_DEPTH`` are read as plain text without recursion, so the converter's stack stays
    bounded. Every text walk below a heading, cell or code block is iterative. jusText reads a
    page (without ``<main>``) only up to ``MAIN_TEXT_MAX_ELEMENTS`` elements and
    ``MAX_WALK_DEPTH`` levels: its classification is linear in the page, but it keeps every
    paragraph with its path as Python objects, and lxml's SAX producer recurses.

It stays whole: an EPUB is XHTML in a zip, so both converters walk the same HTML tree to
Markdown (headings, lists, tables, code, page furniture left out); the zip's bounds are
``zipsafe``'s.
"""

from __future__ import annotations

import codecs
import functools
import posixpath
import re
import zipfile
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from html.entities import html5
from typing import Any
from urllib.parse import unquote
from xml.etree.ElementTree import Element as XmlElement
from xml.etree.ElementTree import ParseError as XmlParseError

import lxml.etree as etree
import lxml.html
from defusedxml import DefusedXmlException
from defusedxml.ElementTree import fromstring as _defused_fromstring

from ragstream.common.errors import (
    DamagedFileError,
    EncryptedFileError,
    IngestError,
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
from ragstream.knowledge.formats.zipsafe import open_zip, read_member

__all__ = ["EpubConverted", "convert_epub", "convert_html", "HEADING_WEIGHT", "MAIN_TEXT_MAX_ELEMENTS",
           "MAIN_TEXT_SHARE", "MAX_TABLE_CELLS", "MAX_WALK_DEPTH"]

#: a table with more cells than this once its spans are expanded becomes lines of text
MAX_TABLE_CELLS = 100_000
#: elements nested deeper than this below the content root are read as plain text
MAX_WALK_DEPTH = 160
#: bytes searched for a ``<meta charset>`` or XML declaration
_SNIFF_BYTES = 16_384

_XHTML_TYPES = {"application/xhtml+xml", "text/html", "application/html", "text/x-oeb1-document"}
_OPS_TYPE = "{http://www.idpf.org/2007/ops}type"
_FONT_OBFUSCATION = {"http://www.idpf.org/2008/embedding", "http://ns.adobe.com/pdf/enc#RC"}

# ----------------------------------------------------------------------------- element classes

_HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
#: never read, in a page or a chapter (``img`` is counted before it is dropped)
_ALWAYS_DROP = frozenset({
    "script", "style", "noscript", "template", "svg", "head", "title", "meta", "link", "base",
    "iframe", "frame", "frameset", "object", "embed", "applet", "param", "canvas", "video",
    "audio", "source", "track", "map", "area", "img", "picture", "image", "form", "input",
    "button", "select", "option", "optgroup", "textarea", "datalist", "output", "rp", "rt",
    "annotation", "annotation-xml", "wbr",
})
_IMAGES = frozenset({"img", "picture", "image"})
#: blocks whose text is a paragraph of its own; their children are walked in place
_BLOCK_CONTAINERS = frozenset({
    "address", "article", "aside", "body", "caption", "center", "dd", "details", "div", "dl",
    "dt", "fieldset", "figcaption", "figure", "footer", "header", "hgroup", "html", "legend",
    "li", "main", "nav", "noframes", "p", "search", "section", "summary", "tbody", "td",
    "tfoot", "th", "thead", "tr", "dialog", "menuitem",
})
_LISTS = frozenset({"ul", "ol", "menu", "dir"})
#: elements below which a ``header``/``footer`` belongs to that section, not to the page
_SECTIONING = frozenset({"article", "aside", "main", "nav", "section"})
_PAGE_ROLES = frozenset({"navigation", "banner", "contentinfo", "search", "dialog", "alertdialog"})
_HIDDEN_STYLE = re.compile(r"(?:^|;)\s*(?:display\s*:\s*none|visibility\s*:\s*hidden)\b", re.I)
_BOILERPLATE_TOKEN = re.compile(
    r"cookie|breadcrumb|^(?:consent|gdpr|cmp-|skip-?(?:links?|to)(?:$|[-_])|sidebar(?:$|[-_]))",
    re.I)
#: ``id``/``class`` names of a page footer, a language switcher or a comments section
_FURNITURE_TOKEN = re.compile(
    r"^(?:(?:site|page|global)[-_]?)?footer$"
    r"|^(?:top|bottom)lang$|^lang(?:uage)?s?(?:$|[-_]?(?:switch|select|chooser|picker|list|menu|links?"
    r"|bar|nav))|^(?:switch|select)[-_]?lang"
    r"|^comments?[-_]?(?:area|section|list|thread|wrapper|container)$|^disqus_thread$",
    re.I)
#: at most this many words outside its links make a block of translation links a language list
_LANGUAGE_LIST_WORDS = 3
_LANGUAGE_BLOCKS = frozenset({"p", "ul", "ol", "menu", "div", "nav", "dl", "section", "header",
                              "footer", "aside"})
_WORDS = re.compile(r"\w+")
#: the text of a permalink or back-link (``<a href="#x">¶</a>``), left out with its link
_PERMALINK = frozenset({"", "\u00b6", "#", "\u00a7", "\U0001f517", "\u21a9", "\u21a9\ufe0e",
                        "\u21a9\ufe0f", "\u2191", "\u204b"})
_CODE_LANG = re.compile(r"(?:^|\s)(?:language|lang)-([\w+#.-]+)")
_HIGHLIGHT_LANG = re.compile(r"(?:^|\s)highlight-([\w+#.-]+)")

_IN_SECTION, _IN_ARTICLE, _IN_PRE, _IN_HEADING = 1, 2, 4, 8
#: an API entry's name, its signature's parameters left out ("class csv.DictReader")
_ENTRY_NAME = re.compile(r"^[^(=]*?(?=\s*[(=]|$)")
#: elements that stand for one line of code inside a ``pre`` (some highlighters write no ``\n``)
_LINE_ELEMENTS = frozenset({"div", "p", "li", "tr"})
#: elements that do not break a line of text (``inline_text`` puts a space around all others)
_INLINE_IN_TEXT = frozenset({
    "a", "abbr", "b", "bdi", "bdo", "cite", "code", "data", "del", "dfn", "em", "font", "i", "ins",
    "kbd", "mark", "q", "ruby", "s", "samp", "small", "span", "strike", "strong", "sub", "sup",
    "time", "tt", "u", "var", "label", "math", "mi", "mn", "mo", "mrow", "msup", "msub", "mfrac",
    "br", "nobr",
})

# ----------------------------------------------------------------------------- text helpers

_SPACES = re.compile(r"[ \t\n\r\f\v\u00a0\u2028\u2029]+")
_INVISIBLE = {0x00AD: None, 0x200B: None, 0xFEFF: None, 0x2060: None}
_BACKTICKS = re.compile(r"`+")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def _collapse(text: str) -> str:
    """``text`` with soft hyphens and zero-width characters removed and whitespace runs as one
    space."""
    return _SPACES.sub(" ", text.translate(_INVISIBLE))


def _paragraph(raw: str) -> str:
    """Gathered inline text (``\\n`` where a ``<br>`` stood) as one Markdown paragraph."""
    lines = (_SPACES.sub(" ", part).strip() for part in raw.split("\n"))
    return "\n".join(escape_line(line) for line in lines if line)


def _tag(el: Any) -> str | None:
    """The element's lower-case local name; ``None`` for a comment, PI or entity."""
    tag = el.tag
    if not isinstance(tag, str):
        return None
    if tag[:1] == "{":
        tag = tag.rpartition("}")[2]
    return tag.lower()


def _is_hidden(el: Any) -> bool:
    """Whether the element is hidden by an attribute or an inline style."""
    if el.get("hidden") is not None or (el.get("aria-hidden") or "").strip().lower() == "true":
        return True
    style = el.get("style")
    return bool(style) and _HIDDEN_STYLE.search(style) is not None


# ----------------------------------------------------------------------------- decoding

_META_CHARSET = re.compile(rb"<meta\b[^>]*?charset\s*=\s*[\"']?\s*([A-Za-z0-9_.:+-]+)", re.I)
_XML_ENCODING = re.compile(rb"^\s*<\?xml\b[^>]*?encoding\s*=\s*[\"']([A-Za-z0-9_.:+-]+)", re.I)
#: labels read the WHATWG way: what the label says → what browsers decode
_WHATWG = {
    "ascii": "cp1252", "latin_1": "cp1252", "iso8859-1": "cp1252", "cp1252": "cp1252",
    "iso8859-9": "cp1254", "tis-620": "cp874", "gb2312": "gbk", "euc_kr": "cp949",
    "shift_jis": "cp932", "utf-16": "utf-8", "utf-16-le": "utf-8", "utf-16-be": "utf-8",
    "utf-32": "utf-8", "utf-32-le": "utf-8", "utf-32-be": "utf-8",
}


def _what_binary(data: bytes) -> str | None:
    """What ``data`` is when it is not text: ``"a PNG image"``, ``"binary data"``; else ``None``."""
    if what := signature_of(data):
        return what
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "a WebP image"
    head = data[:8192]
    if b"\x00" in head:
        return "binary data (it holds NUL bytes)"
    controls = sum(1 for b in head if b < 0x20 and b not in (9, 10, 12, 13, 27))
    if head and controls > len(head) // 20:
        return "binary data"
    return None


def _utf16_without_bom(data: bytes) -> str | None:
    """``utf-16-le``/``-be`` when ``data`` looks like ASCII markup in UTF-16 without a mark."""
    head = data[:512]
    if len(head) < 16:
        return None
    even, odd = head[0::2], head[1::2]
    if odd.count(0) > len(odd) * 0.9 and even.count(0) < len(even) * 0.1 and b"<" in even:
        return "utf-16-le"
    if even.count(0) > len(even) * 0.9 and odd.count(0) < len(odd) * 0.1 and b"<" in odd:
        return "utf-16-be"
    return None


def _codec(label: bytes) -> str | None:
    """The Python codec for a charset label, read the WHATWG way; ``None`` if unknown."""
    try:
        name = codecs.lookup(label.decode("ascii").strip()).name
    except (LookupError, UnicodeDecodeError, ValueError):
        return None
    return _WHATWG.get(name, name)


class _BinaryData(Exception):
    """Bytes that are not text: ``str(err)`` says what they look like."""


def _decode(data: bytes, warnings: list[str], *, xml: bool = False) -> str:
    """The text of an HTML or XHTML document (see the module's "Decoding"); ``_BinaryData``
    when the bytes are not text."""
    for bom, enc in ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"),
                     (codecs.BOM_UTF16_BE, "utf-16-be")):
        if data.startswith(bom):
            return _decode_as(data[len(bom):], enc, warnings, f"its byte-order mark ({enc})")
    utf16 = _utf16_without_bom(data)
    if utf16:
        return _decode_as(data, utf16, warnings, utf16)
    what = _what_binary(data)
    if what:
        raise _BinaryData(what)
    head = data[:_SNIFF_BYTES]
    labels = [m.group(1) for m in (_XML_ENCODING.match(head), _META_CHARSET.search(head)) if m]
    if not xml:
        labels.reverse()  # a web page's <meta charset> is what browsers follow
    declared: str | None = None
    for label in labels:
        declared = _codec(label)
        if declared:
            break
        warnings.append(f"unknown charset {label.decode('ascii', 'replace')!r} ignored")
    if declared and declared != "utf-8":
        return _decode_as(data, declared, warnings, f"its declared charset ({declared})")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        why = "it declares UTF-8 but is not" if declared else "it declares no charset and is not UTF-8"
        warnings.append(f"read as Windows-1252: {why} (byte {err.start})")
        return data.decode("cp1252", errors="replace")


def _decode_as(data: bytes, encoding: str, warnings: list[str], source: str) -> str:
    """``data`` decoded with ``encoding``; undecodable bytes replaced, with a warning."""
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as err:
        warnings.append(f"some bytes are not valid for {source} and were replaced (first at byte "
                        f"{err.start})")
        return data.decode(encoding, errors="replace")


# ----------------------------------------------------------------------------- parsing

_XML_DECL = re.compile(r"\A\s*<\?xml\b[^>]*>")
_DOCTYPE_SUBSET = re.compile(r"<!DOCTYPE\b[^\[>]*\[", re.I)
_SUBSET_END = re.compile(r"\]\s*>")
_ENTITY_REF = re.compile(r"&([A-Za-z][A-Za-z0-9]{0,31});")
_XML_ENTITIES = frozenset({"amp", "lt", "gt", "quot", "apos"})
_SELF_CLOSING = re.compile(r"<([A-Za-z][\w:.-]*)((?:\s[^<>]*?)?)/>")
_VOID = frozenset({"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta",
                   "param", "source", "track", "wbr"})


def _prepare(text: str, warnings: list[str]) -> str:
    """Markup ready for a parser: no XML declaration (lxml refuses one in a ``str``), no control
    characters, and no internal DTD subset (its entity declarations are never seen)."""
    text = _CONTROL.sub("", _XML_DECL.sub("", text, count=1))
    m = _DOCTYPE_SUBSET.search(text, 0, 65_536)
    if m:
        end = _SUBSET_END.search(text, m.end())
        if end:
            text = text[:m.start()] + "<!DOCTYPE html>" + text[end.end():]
            warnings.append("its DOCTYPE declares entities (an internal DTD subset): they were "
                            "ignored, not expanded")
    return text


def _parse_html(text: str, warnings: list[str]) -> Any:
    """The ``<html>`` element of a page (``lxml.html``: no DTD, no network, no entities).
    ``huge_tree`` raises libxml2's element depth limit from 256 to 2,048 (the HTML parser
    expands no entities, so it lifts no other bound that matters here); where a page nests
    deeper still, libxml2 stops reading there, and a warning says so."""
    parser = lxml.html.HTMLParser(remove_comments=True, remove_pis=True, no_network=True,
                                  huge_tree=True)
    root = lxml.html.document_fromstring(text, parser=parser)
    if any(e.type_name == "ERR_RESOURCE_LIMIT" for e in parser.error_log):
        warnings.append("its elements nest deeper than the parser reads (2,048 levels): the text "
                        "after that point is missing")
    return root


def _numeric_entity(m: re.Match[str]) -> str:
    """An HTML named character reference as XML understands it (an unknown one as text)."""
    entity = m.group(1)
    if entity in _XML_ENTITIES:
        return m.group(0)
    chars = html5.get(entity + ";")
    return "".join(f"&#{ord(c)};" for c in chars) if chars else f"&amp;{entity};"


def _parse_xhtml(text: str, warnings: list[str]) -> Any:
    """The ``<html>`` element of an XHTML document: parsed as XML (entities never resolved, no
    DTD, no network) with namespaces dropped from tags, else, when it is not well-formed, as
    HTML with its self-closed non-void tags (``<title/>``) opened and closed."""
    xml_text = _ENTITY_REF.sub(_numeric_entity, text)
    parser = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False,
                             huge_tree=False, remove_comments=True, remove_pis=True)
    try:
        root = etree.fromstring(xml_text, parser=parser)
    except etree.XMLSyntaxError:
        def reopen(m: re.Match[str]) -> str:
            tag = m.group(1)
            return m.group(0) if tag.lower() in _VOID else f"<{tag}{m.group(2)}></{tag}>"
        return _parse_html(_SELF_CLOSING.sub(reopen, text), warnings)
    for el in root.iter():
        tag = el.tag
        if isinstance(tag, str) and tag[:1] == "{":
            el.tag = tag.rpartition("}")[2]
    return root


# ----------------------------------------------------------------------------- the renderer


class _Out:
    """The Markdown blocks written so far and the paragraph being gathered."""

    __slots__ = ("blocks", "inline")

    def __init__(self) -> None:
        self.blocks: list[str] = []
        self.inline: list[str] = []

    def flush(self) -> None:
        """End the paragraph being gathered."""
        if self.inline:
            para = _paragraph("".join(self.inline))
            self.inline = []
            if para:
                self.blocks.append(para)

    def block(self, markdown: str) -> None:
        """End the paragraph and add a block."""
        self.flush()
        if markdown:
            self.blocks.append(markdown)


class _Renderer:
    """One document's elements → Markdown blocks (see the module's "Markdown")."""

    def __init__(self, page: bool) -> None:
        self.page = page  # apply the page rules (boilerplate), not only the chapter rules
        self.images = 0
        self.flattened_tables = 0
        #: blocks of links to the page's translations (``_language_lists``), left out
        self.language_lists: set[Any] = set()
        #: the level of the last heading written (an API entry's is one below it)
        self.level = 0

    # -- what is left out

    def skip(self, el: Any, tag: str, flags: int) -> bool:
        """Whether ``el`` (with its text, not its tail) is left out."""
        if tag in _ALWAYS_DROP:
            if tag in _IMAGES:
                self.images += 1
            return True
        if _is_hidden(el):
            return True
        if tag == "a" and (el.get("href") or "").startswith("#") and (
                _collapse("".join(el.itertext())).strip() in _PERMALINK):
            return True
        if self.page:
            if tag == "nav" or tag == "dialog":
                return True
            if tag == "aside" and not flags & _IN_ARTICLE:
                return True
            if tag in ("header", "footer") and not flags & _IN_SECTION:
                return True
            role = (el.get("role") or "").strip().lower()
            if role in _PAGE_ROLES or (role == "complementary" and not flags & _IN_ARTICLE):
                return True
            if tag not in ("body", "main", "article", "html") and tag not in _HEADINGS and not (
                    flags & _IN_HEADING):  # a heading's id (and its anchors') is its title's
                if any(_BOILERPLATE_TOKEN.search(t) or _FURNITURE_TOKEN.search(t)
                       for t in (el.get("class") or "").split()):
                    return next(el.iter("h1"), None) is None
                ident = el.get("id") or ""
                if ident and (_BOILERPLATE_TOKEN.search(ident) or _FURNITURE_TOKEN.search(ident)):
                    return next(el.iter(*_HEADINGS), None) is None
            if el in self.language_lists:
                return True
        else:
            kind = el.get("epub:type") or el.get(_OPS_TYPE) or ""
            if "pagebreak" in kind:
                return True
        return False

    # -- blocks

    def render(self, root: Any, flags: int = 0) -> list[str]:
        """The Markdown blocks of ``root``'s content."""
        out = _Out()
        self.children(root, out, flags, 0)
        out.flush()
        return out.blocks

    def children(self, el: Any, out: _Out, flags: int, depth: int) -> None:
        """Write ``el``'s text and children (and their tails) to ``out``."""
        if el.text:
            out.inline.append(_collapse(el.text))
        for child in el:
            self.node(child, out, flags, depth + 1)
            if child.tail:
                out.inline.append(_collapse(child.tail))

    def node(self, el: Any, out: _Out, flags: int, depth: int) -> None:
        """Write one element (not its tail) to ``out``."""
        tag = _tag(el)
        if tag is None or self.skip(el, tag, flags):
            return
        if depth > MAX_WALK_DEPTH:  # read as text: the walk's recursion stays bounded
            out.inline.append(" " + self.inline_text(el, flags, code=False) + " ")
            return
        if tag in _SECTIONING:
            flags |= _IN_SECTION | (_IN_ARTICLE if tag == "article" else 0)
        if tag in _HEADINGS:
            text = self.inline_text(el, flags | _IN_HEADING, code=False)
            if text:
                self.level = _HEADINGS[tag]
                out.block(_heading(self.level, text))
            else:
                out.block("")
        elif tag == "dt" and el.get("id") and not flags & _IN_HEADING:
            self.entry(el, out, flags)
        elif tag == "br":
            out.inline.append("\n")
        elif tag == "hr":
            out.flush()
        elif tag == "code":
            out.inline.append(code_span(_collapse(self.inline_text(el, flags, code=False))))
        elif tag in _LISTS:
            out.block(self.list_block(el, flags, depth))
        elif tag == "pre":
            out.block(self.pre(el))
        elif tag == "table":
            self.table(el, out, flags, depth)
        elif tag == "blockquote":
            body = "\n\n".join(self.render_nested(el, flags, depth))
            out.block("\n".join(f"> {line}" if line else ">" for line in body.split("\n"))
                      if body else "")
        elif tag == "p" and (block := self.code_paragraph(el, flags)):
            out.block(block)
        elif tag in _BLOCK_CONTAINERS:
            out.flush()
            self.children(el, out, flags, depth)
            out.flush()
        else:  # inline (a, span, em, strong, …) and unknown elements: their content in place
            self.children(el, out, flags, depth)

    def entry(self, el: Any, out: _Out, flags: int) -> None:
        """An API reference's entry (a ``dt`` with an ``id``): its signature as a heading one
        level below the section's, or below the entry it is nested in."""
        text = _collapse(self.inline_text(el, flags | _IN_HEADING, code=False)).strip()
        if not text:
            return
        within = sum(1 for dd in el.iterancestors("dd")  # a method in its class's entry
                     if any(_tag(dt) == "dt" and dt.get("id") for dt in dd.itersiblings(preceding=True)))
        name = _ENTRY_NAME.match(text)
        heading = name.group(0).strip() if name else text
        out.block(_heading(min(6, self.level + 1 + within), heading))
        if heading != text:
            out.block(code_span(text))

    def code_paragraph(self, el: Any, flags: int) -> str | None:
        """A paragraph that is one ``code`` element and nothing else, holding a command or a
        few lines (a space or a ``<br>`` in it), as a fenced block: it stands on its own on the
        page, as Apache's manual shows its commands (``<div class="example"><p><code>htpasswd
        -c …</code></p>``); each ``<br>`` a line, each line's spaces collapsed. None for any
        other paragraph."""
        if (el.text or "").strip():
            return None
        kids = [c for c in el if (tag := _tag(c)) is not None and not self.skip(c, tag, flags)]
        if len(kids) != 1 or _tag(kids[0]) != "code" or (kids[0].tail or "").strip():
            return None
        if any(_tag(c) not in _INLINE_IN_TEXT for c in kids[0].iterdescendants()):
            return None
        parts: list[str] = []

        def visit(node: Any) -> None:  # the code's text; only a <br> breaks its line
            parts.append(node.text or "")
            for child in node:
                tag = _tag(child)
                if tag == "br":
                    parts.append("\x00")
                elif tag is not None and not self.skip(child, tag, flags):
                    visit(child)
                parts.append(child.tail or "")

        visit(kids[0])
        raw = "".join(parts).translate(_INVISIBLE)
        lines = [_collapse(line).strip() for line in raw.split("\x00")]
        while lines and not lines[0]:
            lines.pop(0)
        while lines and not lines[-1]:
            lines.pop()
        if not lines or (len(lines) == 1 and " " not in lines[0]):
            return None
        text = "\n".join(lines)
        longest = max((len(m) for m in _BACKTICKS.findall(text)), default=0)
        fence = "`" * max(3, longest + 1)
        return f"{fence}\n{text}\n{fence}"

    def render_nested(self, el: Any, flags: int, depth: int) -> list[str]:
        """The blocks of ``el``'s content, written apart (a list item, a quote, a cell)."""
        sub = _Out()
        self.children(el, sub, flags, depth)
        sub.flush()
        return sub.blocks

    def list_block(self, el: Any, flags: int, depth: int) -> str:
        """A ``ul``/``ol`` as Markdown list lines, nested lists indented under their item."""
        ordered = _tag(el) == "ol"
        number = 1
        if ordered:
            try:
                number = min(max(int((el.get("start") or "1").strip()), 0), 999_999_999)
            except ValueError:
                number = 1
        items: list[list[str]] = []
        for child in el:
            tag = _tag(child)
            if tag is None:
                continue
            if tag == "li":
                if self.skip(child, tag, flags):
                    continue
                blocks = self.render_nested(child, flags, depth + 1)
            else:  # a list or other element straight inside the list
                sub = _Out()
                self.node(child, sub, flags, depth + 1)
                sub.flush()
                blocks = sub.blocks
                if tag in _LISTS and items and blocks:  # a nested list without its <li>
                    items[-1].extend(blocks)
                    continue
            if blocks:
                items.append(blocks)
        lines: list[str] = []
        for blocks in items:
            marker = f"{number}. " if ordered else "- "
            number = min(number + 1, 999_999_999)
            body = blocks[0]
            for block in blocks[1:]:  # a nested list follows its item's text directly
                body += ("\n" if block.startswith(("- ", "1. ")) else "\n\n") + block
            indent = " " * len(marker)
            first, *rest = body.split("\n")
            lines.append(marker + first)
            lines.extend(indent + line if line else "" for line in rest)
        return "\n".join(lines)

    def pre(self, el: Any) -> str:
        """A ``pre`` as a fenced code block (its text exact, ``<br>`` as a line break)."""
        text = "".join(self.walk_text(el, _IN_PRE, exact=True, code=False))
        text = text.translate(_INVISIBLE).replace("\r\n", "\n").replace("\r", "\n")
        if text.startswith("\n"):
            text = text[1:]
        text = text.rstrip()
        if not text.strip():
            return ""
        longest = max((len(m) for m in _BACKTICKS.findall(text)), default=0)
        fence = "`" * max(3, longest + 1)
        return f"{fence}{self.language(el)}\n{text}\n{fence}"

    def inline_text(self, el: Any, flags: int, code: bool) -> str:
        """The text of ``el`` on one line: blocks, cells and line breaks become spaces; inline
        code keeps its backticks when ``code``; ``|`` is left as it is."""
        return _SPACES.sub(" ", "".join(self.walk_text(el, flags, exact=False, code=code))).strip()

    def walk_text(self, root: Any, flags: int, exact: bool, code: bool) -> list[str]:
        """The text below ``root`` in order, dropped and hidden elements left out, without
        recursion (any depth). ``exact``: whitespace kept and ``<br>`` a line break (a ``pre``);
        else whitespace collapsed, blocks and ``<br>`` a space, inline code in backticks when
        ``code``."""
        parts: list[str] = []
        text = (lambda t: t) if exact else _collapse
        walk = etree.iterwalk(root, events=("start", "end"))
        for event, el in walk:
            tag = _tag(el)
            if event == "start":
                if el is root:
                    if el.text:
                        parts.append(text(el.text))
                    continue
                if tag is None or self.skip(el, tag, flags):
                    walk.skip_subtree()
                elif tag == "code" and code:
                    parts.append(code_span(_collapse(self.inline_text(el, flags, code=False))))
                    walk.skip_subtree()
                elif tag == "br":
                    parts.append("\n" if exact else " ")
                else:
                    if not exact and tag not in _INLINE_IN_TEXT:
                        parts.append(" ")
                    if el.text:
                        parts.append(text(el.text))
            else:
                if el is root:
                    break
                if tag is not None and not exact and tag not in _INLINE_IN_TEXT:
                    parts.append(" ")
                elif exact and tag in _LINE_ELEMENTS and parts and not parts[-1].endswith("\n"):
                    parts.append("\n")  # a highlighter's element per line, without a line break
                if el.tail:
                    parts.append(text(el.tail))
        return parts

    @staticmethod
    def language(pre: Any) -> str:
        """A code block's language: ``class="language-x"`` on the ``pre`` or its ``code``, or a
        ``highlight-x`` class on one of its two nearest ancestors."""
        candidates = [pre] + [c for c in pre if _tag(c) == "code"][:1]
        for el in candidates:
            m = _CODE_LANG.search(el.get("class") or "")
            if m:
                return m.group(1)
            lang = el.get("data-lang") or el.get("data-language")
            if lang and re.fullmatch(r"[\w+#.-]+", lang):
                return lang
        parent = pre.getparent()
        for _ in range(2):
            if parent is None:
                break
            m = _HIGHLIGHT_LANG.search(parent.get("class") or "")
            if m and m.group(1) not in ("default", "none"):
                return m.group(1)
            parent = parent.getparent()
        return ""

    # -- tables

    def table(self, el: Any, out: _Out, flags: int, depth: int) -> None:
        """A ``table`` as a pipe table (or, for a layout table, the blocks of its cells)."""
        rows: list[list[Any]] = []
        head: list[list[Any]] = []
        foot: list[list[Any]] = []
        captions: list[Any] = []
        for part in el:
            tag = _tag(part)
            if tag is None or self.skip(part, tag, flags):
                continue
            if tag == "caption":
                captions.append(part)
            elif tag == "tr":
                rows.append(self.cells(part, flags))
            elif tag in ("thead", "tbody", "tfoot"):
                target = head if tag == "thead" else foot if tag == "tfoot" else rows
                for tr in part:
                    if _tag(tr) == "tr" and not self.skip(tr, "tr", flags):
                        target.append(self.cells(tr, flags))
        rows = [r for r in head + rows + foot if r]
        layout = ((el.get("role") or "").strip().lower() in ("presentation", "none")
                  or (len(rows) == 1 and len(rows[0]) == 1)
                  or any(next(cell.iter("h1", "h2", "h3", "h4", "h5", "h6", "pre"), None) is not None
                         for row in rows for cell in row))
        if layout:
            out.flush()
            for cap in captions:
                self.node(cap, out, flags, depth + 1)
            for row in rows:
                for cell in row:
                    out.flush()
                    self.children(cell, out, flags, depth + 1)
                    out.flush()
            return
        for cap in captions:
            out.block(_paragraph(self.inline_text(cap, flags, code=True)))
        out.block(self.pipe_table(rows, flags))

    def cells(self, tr: Any, flags: int) -> list[Any]:
        """The visible ``td``/``th`` of a row."""
        return [c for c in tr if _tag(c) in ("td", "th") and not _is_hidden(c)]

    def pipe_table(self, rows: list[list[Any]], flags: int) -> str:
        """Rows of cells as a GitHub pipe table (the first row is the header)."""
        spans: list[list[tuple[str, int, int]]] = []
        for row in rows:
            spans.append([(self.inline_text(c, flags, code=True),
                           _span(c.get("colspan"), 1000), _span(c.get("rowspan"), 65_534, zero=True))
                          for c in row])
        grid = _grid(spans)
        if grid is None:
            self.flattened_tables += 1
            return "\n\n".join(_paragraph(" | ".join(t for t, _, _ in row if t)) for row in spans)
        return pipe_table(grid)


def _heading(level: int, text: str) -> str:
    """A Markdown heading line; a ``#`` ending the text is escaped (it would close the line)."""
    if text.endswith("#"):
        text = text[:-1] + "\\#"
    return f"{'#' * level} {text}"


def _span(value: str | None, most: int, zero: bool = False) -> int:
    """A ``colspan``/``rowspan`` within ``1..most`` (the HTML limits); with ``zero``, a ``0``
    (a rowspan to the end of the table) stays ``0``."""
    try:
        n = int((value or "1").strip())
    except ValueError:
        return 1
    return 0 if n == 0 and zero else min(max(n, 1), most)


def _grid(rows: list[list[tuple[str, int, int]]]) -> list[list[str]] | None:
    """Cells ``(text, colspan, rowspan)`` laid out in columns: a header cell's text repeated
    over its columns, a body cell's in its first; cells covered by a span are empty. ``None``
    when it would take more than ``MAX_TABLE_CELLS`` cells."""
    grid: list[list[str]] = []
    below: dict[int, int] = {}  # column → rows further down still covered by a rowspan
    budget = MAX_TABLE_CELLS
    for r, row in enumerate(rows):
        line: list[str] = []
        rows_left = len(rows) - r - 1
        for text, colspan, rowspan in row:
            _covered(line, below)
            down = rows_left if rowspan == 0 else min(rowspan - 1, rows_left)
            for k in range(colspan):
                if down > 0:
                    below[len(line)] = down
                line.append(text if k == 0 or r == 0 else "")
        last = max((c for c, n in below.items() if n > 0 and c >= len(line)), default=-1)
        while len(line) <= last:
            _covered(line, below)
            if len(line) <= last:
                line.append("")
        budget -= len(line)
        if budget < 0:
            return None
        grid.append(line)
    return grid


def _covered(line: list[str], below: dict[int, int]) -> None:
    """Add the empty cells a rowspan from above covers at the end of ``line``."""
    while below.get(len(line), 0) > 0:
        below[len(line)] -= 1
        line.append("")


def _title_of(root: Any) -> str | None:
    """The document's ``<title>`` (not an SVG's), whitespace collapsed; ``None`` if empty."""
    for el in root.iter("title"):
        if any(_tag(a) == "svg" for a in el.iterancestors()):
            continue
        text = _collapse("".join(el.itertext())).strip()
        if text:
            return text
    return None


def _body(root: Any) -> Any:
    """The ``<body>`` of a parsed document (the root itself when it has none)."""
    for child in root:
        if _tag(child) == "body":
            return child
    return root


def _visible(el: Any) -> bool:
    """Whether neither ``el`` nor an ancestor is hidden or never read (``template``…)."""
    return not _is_hidden(el) and not any(_is_hidden(a) or _tag(a) in _ALWAYS_DROP
                                          for a in el.iterancestors())


def _content_root(body: Any) -> tuple[Any, int]:
    """A page's main content: its first visible ``main``, else its only outermost
    ``article``, else the body; with the renderer flags its position gives."""
    for el in body.iter():
        if not isinstance(el.tag, str):
            continue
        if (_tag(el) == "main" or (el.get("role") or "").strip().lower() == "main") and _visible(el):
            return el, _IN_SECTION
    articles = [a for a in body.iter("article")
                if not any(_tag(p) == "article" for p in a.iterancestors()) and _visible(a)]
    if len(articles) == 1:
        return articles[0], _IN_SECTION | _IN_ARTICLE
    return body, 0


# ----------------------------------------------------------------------------- the main text (jusText)

#: the container read of a page that marks no main content holds this share of its main text
MAIN_TEXT_SHARE = 0.9
#: an ``h1`` or ``h2`` counts as this many characters of main text (a section whose body is a
#: table, a list of links or code, which jusText does not count as prose, still counts)
HEADING_WEIGHT = 100
#: a page with more elements than this (or nested deeper than ``MAX_WALK_DEPTH``) is not given
#: to jusText, which keeps a Python object with its path for every paragraph: it is read whole
MAIN_TEXT_MAX_ELEMENTS = 50_000
#: elements that can hold a page's content (a paragraph, a heading or a link cannot)
_CONTAINERS = frozenset({"body", "div", "section", "article", "main", "td", "th", "center",
                         "blockquote", "aside", "details"})
#: jusText's context-free classes of prose ("short" is any line under 70 characters: a site's
#: name as often as a sentence; "bad" is boilerplate)
_PROSE = frozenset({"good", "neargood"})
#: never the page's text (the renderer never reads them): removed before jusText reads the page
_NEVER_TEXT = frozenset({"script", "style", "noscript", "template"})


def _flags_of(el: Any) -> int:
    """The renderer flags for reading from ``el``: inside a section, inside an article."""
    chain = [el, *el.iterancestors()]
    return ((_IN_SECTION if any(_tag(a) in _SECTIONING for a in chain) else 0)
            | (_IN_ARTICLE if any(_tag(a) == "article" for a in chain) else 0))


def _justext_paths(body: Any) -> dict[str, Any]:
    """Every element below ``body`` by the path jusText gives a paragraph in it
    (``/body[1]/div[4]/p[2]``: each step the element's name and its number among its siblings
    of that name, as ``justext.core.PathInfo`` counts them)."""
    paths: dict[str, Any] = {}
    stack = [(body, f"/{_tag(body)}[1]")]
    while stack:
        el, path = stack.pop()
        paths[path] = el
        counts: dict[str, int] = {}
        for child in el:
            name = child.tag
            if not isinstance(name, str):
                continue
            name = name.rpartition("}")[2]
            counts[name] = counts.get(name, 0) + 1
            stack.append((child, f"{path}/{name}[{counts[name]}]"))
    return paths


@functools.cache
def _paragraph_class() -> type:
    """jusText's ``Paragraph`` with its text worked out once: jusText joins and re-normalises a
    paragraph's text each time it is asked for it (five times a paragraph while classifying)."""
    from justext.paragraph import Paragraph

    class _Paragraph(Paragraph):
        @functools.cached_property
        def text(self) -> str:
            return str(Paragraph.text.fget(self))

    return _Paragraph


def _main_text_container(body: Any) -> Any | None:
    """For a page that marks no main content: the container of its main text (see the module's
    "Main content"), or ``None`` to read the whole body. jusText (Pomikálek's boilerplate
    classifier) splits the page into paragraphs and classifies each one context-free by its
    length, link density and stop-word density; a paragraph it does not call boilerplate counts
    its characters, an ``h1``/``h2`` counts ``HEADING_WEIGHT``. The container is the deepest
    element holding ``MAIN_TEXT_SHARE`` of that weight, widened to an element that can hold
    content and to every ``h1``. The page's never-read elements (scripts, styles, hidden
    elements) are removed from the tree first."""
    depth: dict[Any, int] = {body: 0}
    elements = 0
    for el in body.iterdescendants():
        elements += 1
        parent = el.getparent()
        depth[el] = depth.get(parent, 0) + 1
        if elements > MAIN_TEXT_MAX_ELEMENTS or depth[el] > MAX_WALK_DEPTH:
            return None
    for el in [e for e in body.iterdescendants()
               if isinstance(e.tag, str) and (_tag(e) in _NEVER_TEXT or _is_hidden(e))]:
        el.drop_tree()
    from justext import get_stoplist
    from justext.core import ParagraphMaker, classify_paragraphs

    paragraphs = ParagraphMaker.make_paragraphs(body)
    for paragraph in paragraphs:
        paragraph.__class__ = _paragraph_class()
    classify_paragraphs(paragraphs, get_stoplist("English"))
    paths = _justext_paths(body)
    weight: dict[Any, int] = {}
    for paragraph in paragraphs:
        el = paths.get(paragraph.xpath)
        if el is not None and paragraph.cf_class in _PROSE and not paragraph.heading:
            weight[el] = weight.get(el, 0) + len(paragraph.text)
    headings = [h for h in body.iter("h1", "h2") if _collapse("".join(h.itertext())).strip()]
    if not weight and len(headings) < 2:  # no evidence of where the content is: all of it
        return None
    for heading in headings:
        weight[heading] = weight.get(heading, 0) + HEADING_WEIGHT
    below: dict[Any, int] = {}
    for el in reversed([body, *body.iterdescendants()]):
        if isinstance(el.tag, str):
            below[el] = weight.get(el, 0) + sum(below.get(c, 0) for c in el)
    total = below.get(body, 0)
    if not total:
        return None
    container = body
    while True:
        inner = next((c for c in container if below.get(c, 0) >= MAIN_TEXT_SHARE * total), None)
        if inner is None:
            break
        container = inner
    while container is not body and _tag(container) not in _CONTAINERS:
        container = container.getparent()
    for heading in (h for h in headings if _tag(h) == "h1"):
        holders = {heading, *heading.iterancestors()}
        while container not in holders:
            container = container.getparent()
    return None if container is body else container


def _text_outside_links(block: Any) -> str:
    """The text of ``block`` that is not the text of a link in it."""
    parts: list[str] = []
    walk = etree.iterwalk(block, events=("start", "end"))
    for event, el in walk:
        if event == "start":
            if el is not block and _tag(el) == "a":
                walk.skip_subtree()
            elif el.text:
                parts.append(el.text)
        elif el is not block and el.tail:
            parts.append(el.tail)
    return "".join(parts)


def _language_lists(content: Any) -> set[Any]:
    """The blocks in ``content`` that list the page's translations: the nearest paragraph, list
    or division around a link that names its language (``hreflang``) whose text outside its
    links is at most ``_LANGUAGE_LIST_WORDS`` words ("Available Languages:")."""
    found: set[Any] = set()
    seen: set[Any] = set()
    for link in content.iter("a"):
        if not link.get("hreflang"):
            continue
        block = link.getparent()
        while block is not None and block is not content and _tag(block) not in _LANGUAGE_BLOCKS:
            block = block.getparent()
        if block is None or block is content or block in seen:
            continue
        seen.add(block)
        if len(_WORDS.findall(_text_outside_links(block))) <= _LANGUAGE_LIST_WORDS:
            found.add(block)
    return found


def _markdown(blocks: Iterable[str]) -> str:
    """Blocks joined by blank lines, ending with a line break (or ``""``)."""
    text = "\n\n".join(b for b in blocks if b)
    return text + "\n" if text else ""


# ----------------------------------------------------------------------------- HTML


def convert_html(name: str, data: bytes, limits: Limits) -> Converted:
    """A saved web page as Markdown: its main content, headings, lists, tables and code (see
    the module docstring); ``title`` from ``<title>``, else the first ``h1``."""
    try:
        return _convert_html(name, data, limits)
    except IngestError:
        raise
    except RecursionError:
        raise UnsafeFileError(name, "its elements are nested too deeply to read") from None
    except Exception as err:  # a library's error: a typed error, never a traceback
        raise DamagedFileError(name, f"it could not be read as HTML ({type(err).__name__}: "
                                     f"{err})") from err


def _convert_html(name: str, data: bytes, limits: Limits) -> Converted:
    """``convert_html`` without its error mapping."""
    if not data.strip():
        raise DamagedFileError(name, "it is empty")
    if len(data) > limits.max_unpacked_bytes:
        raise UnsafeFileError(name, f"it is {len(data) / 2**20:,.0f} MiB of HTML (at most "
                                    f"{limits.max_unpacked_bytes / 2**20:,.0f} MiB)")
    warnings: list[str] = []
    try:
        text = _decode(data, warnings)
    except _BinaryData as err:
        raise UnsupportedFormatError(name, f"it is {err}, not an HTML page") from None
    if not re.search(r"<[A-Za-z!]", text):
        raise UnsupportedFormatError(name, "it holds no HTML markup (is it plain text?)")
    try:
        text = _prepare(text, warnings)
        root = _parse_html(text, warnings)
    except etree.ParserError:  # lxml: "Document is empty"
        raise DamagedFileError(name, "it holds no text") from None
    renderer = _Renderer(page=True)
    body = _body(root)
    content, flags = _content_root(body)
    if content is body:
        container = _main_text_container(body)
        if container is not None:
            content, flags = container, _flags_of(container)
    renderer.language_lists = _language_lists(content)
    blocks = renderer.render(content, flags)
    if not blocks and content is not body:  # an empty <main> (filled by scripts): the page
        blocks = renderer.render(body, 0)
    if not blocks:
        raise DamagedFileError(name, "it holds no text (is its content drawn by scripts? Save the "
                                     "page from a browser once it has loaded, or print it to PDF)")
    title = useful_title(_title_of(root), name) or _first_heading(blocks)
    warnings.extend(_render_warnings(renderer))
    return Converted(markdown=_markdown(blocks), title=title, kind="html", warnings=warnings)


def _first_heading(blocks: list[str], level: str = "# ") -> str | None:
    """The text of the first heading of ``level`` among ``blocks``."""
    for block in blocks:
        if block.startswith(level):
            return block[len(level):].replace("\\#", "#").strip() or None
    return None


def _render_warnings(renderer: _Renderer) -> list[str]:
    """What the renderer left out or changed, for the ingest report."""
    notes = []
    if renderer.images:
        notes.append(f"{renderer.images} image{'s' if renderer.images != 1 else ''} left out")
    if renderer.flattened_tables:
        notes.append(f"{renderer.flattened_tables} table(s) too large for a pipe table were "
                     f"written as lines of text")
    return notes


# ----------------------------------------------------------------------------- EPUB


@dataclass
class EpubConverted(Converted):
    """A converted EPUB: ``Converted`` plus the book's authors from its OPF metadata."""

    #: the ``dc:creator`` entries joined by ", " (``None`` when there is none)
    author: str | None = None
    #: the spine documents converted, in order (zip member paths)
    chapters: list[str] = field(default_factory=list)


def convert_epub(name: str, data: bytes, limits: Limits) -> EpubConverted:
    """An EPUB as Markdown: its spine's XHTML documents in order, each starting with a heading
    (see the module docstring); ``title`` and ``author`` from the OPF metadata."""
    try:
        return _convert_epub(name, data, limits)
    except IngestError:
        raise
    except RecursionError:
        raise UnsafeFileError(name, "its elements are nested too deeply to read") from None
    except Exception as err:  # a library's error: a typed error, never a traceback
        raise DamagedFileError(name, f"it could not be read as an EPUB ({type(err).__name__}: "
                                     f"{err})") from err


@dataclass
class _Item:
    """A manifest item: its zip path, media type and properties."""

    path: str
    media_type: str
    properties: str


def _read(name: str, archive: zipfile.ZipFile, member: str) -> bytes:
    """``zipsafe.read_member``, with a member whose compressed data is corrupt (``zlib.error``)
    also a ``DamagedFileError`` that names it."""
    try:
        return read_member(name, archive, member)
    except zlib.error as err:
        raise DamagedFileError(name, f"its part {member} is damaged ({err})") from None


def _local(tag: Any) -> str:
    """An XML tag's local name (``{ns}item`` → ``item``)."""
    return tag.rpartition("}")[2] if isinstance(tag, str) else ""


def _xml(name: str, data: bytes, part: str) -> XmlElement:
    """An EPUB's XML part (container, OPF, NCX, encryption) parsed by ``defusedxml``: a DOCTYPE
    may name a DTD (it is never loaded), but no entity may be declared."""
    try:
        return _defused_fromstring(data, forbid_dtd=False, forbid_entities=True, forbid_external=True)
    except DefusedXmlException as err:
        raise UnsafeFileError(name, f"its {part} declares XML entities or external references "
                                    f"({type(err).__name__}; an entity-expansion attack such as "
                                    f"'billion laughs')") from None
    except (XmlParseError, ValueError) as err:
        raise DamagedFileError(name, f"its {part} is not well-formed XML ({err})") from None


def _resolve(base: str, href: str) -> str:
    """A zip path for ``href`` (fragment and query dropped, %-escapes decoded) relative to the
    folder ``base``."""
    href = unquote(href.split("#", 1)[0].split("?", 1)[0].strip())
    if not href:
        return ""
    path = posixpath.normpath(posixpath.join(base, href))
    return path.lstrip("/") if path != "." else ""


def _not_epub(names: set[str]) -> str:
    """What a zip archive that is not an EPUB looks like it is."""
    if "word/document.xml" in names:
        return "it is a Word document (DOCX), not an EPUB"
    if "ppt/presentation.xml" in names:
        return "it is a PowerPoint presentation (PPTX), not an EPUB"
    if "xl/workbook.xml" in names:
        return "it is an Excel workbook (XLSX), not an EPUB"
    return "it is a zip archive but not an EPUB (it has no META-INF/container.xml)"


def _convert_epub(name: str, data: bytes, limits: Limits) -> EpubConverted:
    """``convert_epub`` without its error mapping."""
    if not data:
        raise DamagedFileError(name, "it is empty")
    if not data.startswith(b"PK"):
        what = _what_binary(data)
        raise UnsupportedFormatError(name, f"it is not an EPUB (an EPUB is a zip archive; this is "
                                           f"{what or 'text'})")
    archive = open_zip(name, data, limits)
    infos = {info.filename: info for info in archive.infolist()}
    names = set(infos)
    folded = {n.lower(): n for n in names}

    def member(path: str) -> str | None:
        return path if path in names else folded.get(path.lower())

    if "mimetype" in names:
        mimetype = _read(name, archive, "mimetype") if infos["mimetype"].file_size < 256 else b""
        if mimetype.strip() != b"application/epub+zip":
            shown = mimetype.strip()[:80].decode("ascii", "replace") or "an unknown type"
            raise UnsupportedFormatError(name, f"it is a zip archive of type {shown}, not an EPUB")
    if "META-INF/container.xml" not in names:
        if "mimetype" in names:
            raise DamagedFileError(name, "its META-INF/container.xml is missing")
        raise UnsupportedFormatError(name, _not_epub(names))

    container = _xml(name, _read(name, archive, "META-INF/container.xml"), "container.xml")
    opf_path = next((r.get("full-path", "") for r in container.iter() if _local(r.tag) == "rootfile"
                     and r.get("media-type", "application/oebps-package+xml")
                     == "application/oebps-package+xml"), "")
    opf_member = member(_resolve("", opf_path)) if opf_path else None
    if not opf_member:
        raise DamagedFileError(name, "its container.xml names no package file (OPF) that it holds")
    opf = _xml(name, _read(name, archive, opf_member), f"package file {opf_member}")
    base = posixpath.dirname(opf_member)
    warnings: list[str] = []

    titles = [_collapse("".join(e.itertext())).strip() for e in opf.iter() if _local(e.tag) == "title"]
    creators = [_collapse("".join(e.itertext())).strip() for e in opf.iter() if _local(e.tag) == "creator"]
    dc_title = next((t for t in titles if t), None)
    book_title = useful_title(dc_title, name)
    author = ", ".join(c for c in creators if c) or None

    manifest: dict[str, _Item] = {}
    spine_ids: list[str] = []
    ncx_id = ""
    for el in opf.iter():
        local = _local(el.tag)
        if local == "item" and el.get("id") and el.get("href"):
            manifest[el.get("id", "")] = _Item(_resolve(base, el.get("href", "")),
                                               (el.get("media-type") or "").strip().lower(),
                                               el.get("properties") or "")
        elif local == "spine":
            ncx_id = el.get("toc") or ""
        elif local == "itemref" and el.get("idref"):
            spine_ids.append(el.get("idref", ""))
    if not spine_ids:
        raise DamagedFileError(name, f"its package file {opf_member} has no spine (reading order)")

    encrypted = _encrypted_paths(name, archive, names)
    nav_items = [i for i in manifest.values() if "nav" in i.properties.split()]
    spine = [manifest[i] for i in spine_ids if i in manifest]
    if len(spine) < len(spine_ids):
        warnings.append(f"{len(spine_ids) - len(spine)} spine entries name no manifest item")
    if any(item.path in encrypted for item in spine):
        raise EncryptedFileError(name)
    if encrypted:
        warnings.append(f"{len(encrypted)} encrypted resource(s) (fonts or images) left out")

    toc = _toc(name, archive, member, nav_items, manifest.get(ncx_id) or next(
        (i for i in manifest.values() if i.media_type == "application/x-dtbncx+xml"), None))
    renderer = _Renderer(page=False)
    nav_paths = {i.path for i in nav_items}
    blocks: list[str] = []
    chapters: list[str] = []
    skipped_types = 0
    for item in spine:
        if item.path in nav_paths:
            continue
        if item.media_type not in _XHTML_TYPES:
            skipped_types += 1
            continue
        path = member(item.path)
        if path is None:
            warnings.append(f"its chapter {item.path} is missing")
            continue
        chapter_warnings: list[str] = []
        root = _chapter(name, _read(name, archive, path), path, chapter_warnings)
        warnings.extend(f"{path}: {w}" for w in chapter_warnings)
        chapter = renderer.render(_body(root))
        if not chapter:
            continue
        if not chapter[0].startswith("#"):
            heading = toc.get(item.path) or useful_title(_title_of(root), name)
            if heading and (item.path in toc or heading not in (dc_title, book_title)):
                chapter.insert(0, "# " + (heading[:-1] + "\\#" if heading.endswith("#") else heading))
        chapters.append(path)
        blocks.extend(chapter)
    if skipped_types:
        warnings.append(f"{skipped_types} spine item(s) that are not XHTML (images, SVG) left out")
    if not blocks:
        raise DamagedFileError(name, "it holds no text (its chapters are empty or images only)")
    warnings.extend(_render_warnings(renderer))
    return EpubConverted(markdown=_markdown(blocks), title=book_title or _first_heading(blocks),
                         kind="epub", warnings=warnings, author=author, chapters=chapters)


def _chapter(name: str, data: bytes, path: str, warnings: list[str]) -> Any:
    """The ``<html>`` element of an EPUB's XHTML document."""
    try:
        text = _decode(data, warnings, xml=True)
    except _BinaryData as err:
        raise DamagedFileError(name, f"its chapter {path} is not text but {err} (damaged, or "
                                     f"encrypted without saying so)") from None
    return _parse_xhtml(_prepare(text, warnings), warnings)


def _encrypted_paths(name: str, archive: zipfile.ZipFile, names: set[str]) -> set[str]:
    """The zip paths ``META-INF/encryption.xml`` encrypts (font obfuscation is not counted)."""
    if "META-INF/encryption.xml" not in names:
        return set()
    root = _xml(name, _read(name, archive, "META-INF/encryption.xml"), "encryption.xml")
    paths: set[str] = set()
    for data in root.iter():
        if _local(data.tag) != "EncryptedData":
            continue
        algorithm = next((m.get("Algorithm", "") for m in data.iter()
                          if _local(m.tag) == "EncryptionMethod"), "")
        if algorithm in _FONT_OBFUSCATION:
            continue
        for ref in data.iter():
            if _local(ref.tag) == "CipherReference" and ref.get("URI"):
                paths.add(_resolve("", ref.get("URI", "")))
    return paths


def _toc(name: str, archive: zipfile.ZipFile, member: Any, nav_items: list[_Item],
         ncx: _Item | None) -> dict[str, str]:
    """Chapter path → its title in the table of contents: the navigation document's ``toc``
    nav (EPUB 3), else the NCX (EPUB 2). An entry without a ``#fragment`` wins over one with."""
    titles: dict[str, tuple[str, bool]] = {}

    def add(path: str, title: str, fragment: bool) -> None:
        title = _collapse(title).strip()
        if path and title and (path not in titles or (titles[path][1] and not fragment)):
            titles[path] = (title, fragment)

    for nav_item in nav_items:
        path = member(nav_item.path)
        if path is None:
            continue
        root = _chapter(name, _read(name, archive, path), path, [])
        navs = [n for n in root.iter("nav")]
        tocs = [n for n in navs if "toc" in (n.get("epub:type") or n.get(_OPS_TYPE) or "").split()]
        base = posixpath.dirname(nav_item.path)
        for nav in (tocs or navs)[:1]:
            for a in nav.iter("a"):
                href = a.get("href") or ""
                add(_resolve(base, href), "".join(a.itertext()), "#" in href)
    if not titles and ncx is not None:
        path = member(ncx.path)
        if path is not None:
            root = _xml(name, _read(name, archive, path), f"table of contents {path}")
            base = posixpath.dirname(ncx.path)
            for point in root.iter():
                if _local(point.tag) != "navPoint":
                    continue
                label = next((e for e in point if _local(e.tag) == "navLabel"), None)
                content = next((e for e in point if _local(e.tag) == "content"), None)
                if label is not None and content is not None:
                    src = content.get("src") or ""
                    add(_resolve(base, src), "".join(label.itertext()), "#" in src)
    return {path: title for path, (title, _) in titles.items()}
