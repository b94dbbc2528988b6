"""One decoded document → metadata and ``Chunk`` objects: the pure part of ingestion.

``parse_document(text, rel_path, settings, fallback_date)`` reads no file, writes no store and
computes no embedding, so the same input always gives the same chunks, byte for byte. The
ingestor reads the bytes, decodes them (UTF-8) and passes the text in.

Rules
=====

Text
    CRLF and lone CR become LF before anything else, so line ``n`` of the text is line ``n`` of
    the file. A leading byte-order mark is ignored. ``ParsedDocument.content_hash`` is the
    sha256 of the text exactly as passed in.

Markdown
    Every Markdown reading (front matter, headings, blocks) is ``ragstream.common.markdown``'s: one
    CommonMark parser (markdown-it-py) with GFM tables, front matter and display math.

Front matter
    Found by the front matter plugin: a first line ``---`` opens a block closed by a line of
    ``---`` (or ``...``). Its lines are read as simple ``key: value`` lines, not as YAML (a
    strict YAML reader drops the whole block for one odd line and gives no line numbers for
    warnings). Keys are case-insensitive (``-`` reads as ``_``); values lose surrounding
    quotes; unknown keys are ignored, indented or ``- item`` lines (multi-line YAML values) are
    skipped, and any other line is a warning, not an error. Used keys: ``title``, ``doc_type``,
    ``source`` (the source's name, e.g. ``Core Rules v3.1``; ``Chunk.source_name``) and the
    date, taken from the first present of ``last_update_date``, ``date``, ``updated``;
    it must start with ``yyyy-mm-dd`` (a time after it is dropped), otherwise a warning and the
    fallback date. An unclosed block, or one without a single ``key: value`` line (a horizontal
    rule), is body text.

Sections (Markdown)
    Headings with text start sections: ATX ``#`` .. ``######`` and setext (a paragraph
    underlined with ``===`` for level 1 or ``---`` for level 2), as CommonMark reads them, so
    ``#`` lines inside code blocks never do, and a heading inside a list item or block quote
    is prose. A section's heading path runs from the top-level heading down to its own
    (skipped levels are simply absent). Text before the first heading forms a section with
    heading path ``()`` whose ``section`` is the document title. A heading with no body text
    (directly followed by a sub-heading) gives no chunk. The title is the front matter
    ``title``, else the first H1, else the file stem.

Plain text
    A ``.txt`` file is prose only: no headings, code blocks or tables are recognised; it is one
    section (heading path ``()``) of paragraphs and sentences.

Units
    A section body is cut into units that are never split: a fenced code block (an unclosed
    one runs to the end of its container, with a warning), an indented code block, a GFM
    table, a display-math block (``$$`` .. ``$$`` or an amsmath ``\\begin{align}`` ..
    ``\\end{align}``), at any depth of lists and block quotes, and otherwise the sentences of
    each paragraph, list item paragraph or HTML block (``ragstream.common.text.split_sentences``).
    A thematic break (``***``) is no unit.

Chunks
    Units are packed greedily, in order, while the chunk's text counts at most
    ``settings.max_tokens`` tiktoken tokens. A sentence ending in ':' introduces what follows
    it (a command, a configuration block, a list) and is never the last of a chunk when that
    follows in the next one: its paragraph (else the sentence alone) moves on to the next
    chunk when it fits there with what it introduces. A code block, table or math block
    longer than that becomes a chunk of its own (a warning says so); an over-long sentence is
    cut at word boundaries (between characters for a single giant word), also with a warning.
    When the
    last chunk of a section is smaller than ``settings.min_tokens`` it merges into the previous
    chunk of the same section if the result fits ``max_tokens``; since greedy packing rarely
    leaves such room, trailing units of the previous chunk otherwise move into the tail until
    the tail reaches ``min_tokens``, as long as the previous chunk keeps ``min_tokens`` and the
    tail stays within ``max_tokens``. Chunks never cross headings.

    ``Chunk.text`` is the section body from the chunk's first unit to its last, verbatim (no
    heading: the heading path is metadata), without surrounding whitespace except the indent
    of an indented code block that opens the chunk. ``start_line``/``end_line`` are the 1-based
    file lines (front matter counted) of its first and last non-blank character. ``id`` is
    ``"{doc_id}#{chunk_index}"``, ``chunk_index`` counting from 0 over the whole document.
    ``has_code``: the chunk holds a fenced or indented code block. ``has_equations``: a math
    block, or ``$..$``, ``$$..$$``, ``\\(..\\)``, ``\\[..\\]``, ``\\begin{equation}`` and kin in its
    prose or tables (code and inline code are not searched).
"""

from __future__ import annotations

import hashlib
import re
from bisect import bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import date
from pathlib import PurePosixPath

from ragstream.backends.tokens import count_tokens
from ragstream.common import markdown
from ragstream.common.config import ChunkingSettings
from ragstream.common.errors import IngestError
from ragstream.common.markdown import Block
from ragstream.common.text import split_sentences, words
from ragstream.state.super_prompt import Chunk

__all__ = ["ParsedDocument", "parse_document", "PLAIN_TEXT_SUFFIXES", "DATE_KEYS", "NO_BODY_WARNING"]

#: files with these suffixes are plain prose (no Markdown structure)
PLAIN_TEXT_SUFFIXES = (".txt",)
#: front matter keys that give ``last_update_date``, first present wins
DATE_KEYS = ("last_update_date", "date", "updated")
DEFAULT_DOC_TYPE = "doc"
#: the warning of a document that gives no chunks (empty, front matter only, or only headings)
NO_BODY_WARNING = "no body text: the document gives no chunks"

_KEY_VALUE = re.compile(r"^([A-Za-z_][\w-]*)[ \t]*:(?:[ \t]+(.*)|[ \t]*)$")
_CONTINUATION = re.compile(r"^(?:[ \t]+\S|-(?:[ \t]|$))")
_ISO_DATE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})(?:[T ].*)?$")

_NON_SPACE = re.compile(r"\S+")
_INLINE_CODE = re.compile(r"`[^`\n]+`")
_EQUATION = re.compile(
    r"\$\$.+?\$\$"  # $$ display $$
    r"|(?<![\\$\w])\$(?=[^\s$])[^$\n]*?[^\s\\$]\$(?!\d)"  # $inline$ (not "$5 and $10")
    r"|\\\(.+?\\\)|\\\[.+?\\\]"  # \( inline \)  \[ display \]
    r"|\\begin\{(?:equation|align|gather|multline|eqnarray|displaymath|math)\*?\}",
    re.DOTALL,
)

_CODE, _TABLE, _MATH, _PROSE = "code", "table", "math", "prose"
_ATOMIC_LABELS = {_CODE: "code block", _TABLE: "table", _MATH: "math block"}
#: Markdown blocks that are one unit each, and the unit's kind
_ATOMIC_BLOCKS = {"fence": _CODE, "code": _CODE, "table": _TABLE, "math": _MATH}
#: Markdown blocks that hold no text of their own: containers (their blocks do) and rules
_NO_TEXT = {"blockquote", "list", "item", "hr"}


@dataclass(frozen=True)
class ParsedDocument:
    """One document, ready for storage: its metadata, its chunks and what looked wrong."""

    doc_id: str  # the source path relative to the ingested folder, posix form
    source: str  # same as doc_id
    title: str
    doc_type: str
    last_update_date: str  # ISO yyyy-mm-dd (or the caller's fallback date)
    content_hash: str  # sha256 hex of the text as passed in
    source_name: str  # the front matter's ``source``, "" when it has none
    declared: frozenset[str]  # the front matter keys the document sets (normalised)
    chunks: tuple[Chunk, ...]
    warnings: tuple[str, ...]  # non-fatal issues, in document order


@dataclass(frozen=True)
class _Unit:
    """A piece of a section body that is never split: character span and kind."""

    start: int
    end: int
    kind: str


@dataclass(frozen=True)
class _Section:
    heading_path: tuple[str, ...]
    first: int  # 0-based index of the first body line
    end: int  # 0-based index one past the last body line
    blocks: tuple[Block, ...]  # the body's top-level blocks


@dataclass(frozen=True)
class _Body:
    """A section's body lines joined by LF, with the file line of every character."""

    text: str
    offsets: tuple[int, ...]  # character offset of each body line
    first: int  # 0-based file index of the first body line

    def line_of(self, pos: int) -> int:
        """1-based file line number of character ``pos``."""
        return self.first + bisect_right(self.offsets, pos)


# ------------------------------------------------------------------------------ entry point


def parse_document(
    text: str, rel_path: str, settings: ChunkingSettings, fallback_date: str
) -> ParsedDocument:
    """Split one decoded document into chunks; see the module docstring for the rules."""
    doc_id = _doc_id(rel_path)
    digest = content_hash(text)
    normalised = text.replace("\r\n", "\n").replace("\r", "\n").removeprefix("\ufeff")
    lines = normalised.split("\n")
    pages = _page_of_lines(lines)  # a converted PDF's page markers, blanked out of the text
    if pages:
        normalised = "\n".join(lines)
    warnings: list[str] = []

    is_markdown = not doc_id.lower().endswith(PLAIN_TEXT_SUFFIXES)
    meta, doc = _read_document(normalised, is_markdown, warnings)
    body_start = doc.front_matter.end if doc.front_matter else 0
    warnings.extend(
        f"line {block.start + 1}: code fence is never closed: it runs to the end"
        for block in doc.walk()
        if block.kind == "fence" and not block.closed
    )
    headings = [block for block in doc.headings if block.text]

    first_h1 = next((h.text for h in headings if h.level == 1), "")
    title = meta.get("title", (0, ""))[1] or first_h1 or PurePosixPath(doc_id).stem
    doc_type = meta.get("doc_type", (0, ""))[1] or DEFAULT_DOC_TYPE
    source_name = meta.get("source", (0, ""))[1]
    last_update_date = _last_update_date(meta, fallback_date, warnings)

    has_body = any(line.strip() for line in lines[body_start:])
    if is_markdown and not headings and has_body:
        warnings.append("no headings: chunked as one section")
    if is_markdown:
        sections = _sections(doc.blocks, body_start, len(lines))
    else:
        sections = [_Section((), body_start, len(lines), _plain_paragraphs(lines, body_start))]

    chunks: list[Chunk] = []
    for section in sections:
        body = _section_body(lines, section)
        units = _section_units(lines, section, body)
        units = _fit_units(body, units, settings, warnings)
        for group in _pack(body, units, settings):
            chunks.append(
                _make_chunk(
                    body,
                    group,
                    index=len(chunks),
                    doc_id=doc_id,
                    title=title,
                    heading_path=section.heading_path,
                    doc_type=doc_type,
                    last_update_date=last_update_date,
                    source_name=source_name,
                    encoding=settings.encoding,
                )
            )
    if not chunks:
        warnings.append(NO_BODY_WARNING)
    if pages:
        chunks = [c.model_copy(update={"page": pages[c.start_line - 1], "page_end": pages[c.end_line - 1]})
                  for c in chunks]

    return ParsedDocument(
        doc_id=doc_id,
        source=doc_id,
        title=title,
        doc_type=doc_type,
        last_update_date=last_update_date,
        content_hash=digest,
        source_name=source_name,
        declared=frozenset(meta),
        chunks=tuple(chunks),
        warnings=tuple(warnings),
    )


# ------------------------------------------------------------------------------ metadata


_PAGE_MARKER = re.compile(r"^<!-- page: (\d+) -->$")


def _page_of_lines(lines: list[str]) -> list[int]:
    """For a document with page markers (``ragstream.knowledge.formats.PAGE_MARKER``, one line before
    each page's text, as the PDF converter writes them): the page of every line (0 before the
    first marker), each marker line blanked in ``lines``; [] for a document without them."""
    if not any(line.startswith("<!-- page: ") for line in lines):
        return []
    pages: list[int] = []
    page = 0
    for i, line in enumerate(lines):
        found = _PAGE_MARKER.match(line.strip())
        if found:
            page = int(found.group(1))
            lines[i] = ""
        pages.append(page)
    return pages


def content_hash(text: str) -> str:
    """SHA-256 hex digest of ``text`` encoded as UTF-8: a document's or a chunk's content hash."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _doc_id(rel_path: str) -> str:
    posix = rel_path.replace("\\", "/").strip()
    if not posix or posix.startswith("/") or re.match(r"^[A-Za-z]:", posix):
        raise IngestError(
            f"Document path {rel_path!r} must be relative to the ingested folder, "
            f"for example 'guides/setup.md'."
        )
    return PurePosixPath(posix).as_posix()


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        value = value[1:-1].strip()
    return value


def _read_document(
    text: str, is_markdown: bool, warnings: list[str]
) -> tuple[dict[str, tuple[int, str]], markdown.Document]:
    """``({front matter key: (file line, value)}, the parsed document)``.

    A front matter block without a single ``key: value`` line is a horizontal rule and the
    text under it: the document is read again, without front matter.
    """
    doc = markdown.parse(text, blocks=is_markdown)
    if doc.front_matter_unclosed:
        warnings.append("front matter opened at line 1 is never closed: read as body text")
    matter = doc.front_matter
    if matter is None:
        return {}, doc

    meta: dict[str, tuple[int, str]] = {}
    problems: list[str] = []
    for number, line in enumerate(matter.text.split("\n"), start=matter.text_start + 1):
        if not line.strip() or line.lstrip().startswith("#") or _CONTINUATION.match(line):
            continue
        match = _KEY_VALUE.match(line)
        if match is None:
            problems.append(f"front matter line {number} is not key: value")
            continue
        key = match.group(1).lower().replace("-", "_")
        meta[key] = (number, _unquote(match.group(2) or ""))

    if problems and not meta:
        warnings.append(
            f"line 1 '---' is followed by no key: value line before line {matter.end}: "
            f"read as body text, not front matter"
        )
        return {}, markdown.parse(text, front_matter=False, blocks=is_markdown)
    warnings.extend(problems)
    return meta, doc


def _iso_date(value: str) -> str | None:
    match = _ISO_DATE.match(value.strip())
    if match is None:
        return None
    try:
        return date(int(match[1]), int(match[2]), int(match[3])).isoformat()
    except ValueError:
        return None


def _last_update_date(
    meta: dict[str, tuple[int, str]], fallback_date: str, warnings: list[str]
) -> str:
    for key in DATE_KEYS:
        if key in meta:
            line, value = meta[key]
            iso = _iso_date(value)
            if iso is None:
                warnings.append(
                    f"front matter line {line}: {key} {value!r} is not a date (yyyy-mm-dd): "
                    f"using {fallback_date}"
                )
                return fallback_date
            return iso
    return fallback_date


# ------------------------------------------------------------------------------ structure


def _sections(blocks: tuple[Block, ...], body_start: int, line_count: int) -> list[_Section]:
    """The text before the first heading, then one section per top-level heading with text."""
    sections: list[_Section] = []
    stack: list[Block] = []  # the open headings, outermost first
    first, members = body_start, []
    for block in blocks:
        if block.kind != "heading" or not block.text:
            members.append(block)
            continue
        sections.append(_Section(tuple(h.text for h in stack), first, block.start, tuple(members)))
        while stack and stack[-1].level >= block.level:
            stack.pop()
        stack.append(block)
        first, members = block.end, []
    sections.append(_Section(tuple(h.text for h in stack), first, line_count, tuple(members)))
    return sections


def _plain_paragraphs(lines: list[str], start: int) -> tuple[Block, ...]:
    """Plain text's paragraphs: the runs of non-blank lines from line ``start`` on."""
    paragraphs: list[Block] = []
    i = start
    while i < len(lines):
        if not lines[i].strip():
            i += 1
            continue
        j = i + 1
        while j < len(lines) and lines[j].strip():
            j += 1
        paragraphs.append(Block("paragraph", i, j))
        i = j
    return tuple(paragraphs)


def _section_body(lines: list[str], section: _Section) -> _Body:
    offsets, pos = [], 0
    for line in lines[section.first:section.end]:
        offsets.append(pos)
        pos += len(line) + 1
    return _Body("\n".join(lines[section.first:section.end]), tuple(offsets), section.first)


def _text_blocks(section: _Section) -> Iterator[Block]:
    """The section's blocks that hold text, at any depth, in order."""
    for top in section.blocks:
        yield from (b for b in top.walk() if not b.children and b.kind not in _NO_TEXT)


def _trimmed(
    body: _Body, start: int, end: int, kind: str, keep_indent: bool = False
) -> _Unit | None:
    text = body.text
    if not keep_indent:
        while start < end and text[start].isspace():
            start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return _Unit(start, end, kind) if end > start else None


def _section_units(lines: list[str], section: _Section, body: _Body) -> list[_Unit]:
    """Code blocks, tables and math blocks whole; prose as sentences, one block at a time."""
    units: list[_Unit] = []

    def span(a: int, b: int) -> tuple[int, int]:  # file line indices → body characters
        last = b - 1 - section.first
        return body.offsets[a - section.first], body.offsets[last] + len(lines[b - 1])

    for block in _text_blocks(section):
        start, end = span(block.start, block.end)
        kind = _ATOMIC_BLOCKS.get(block.kind)
        if kind is not None:
            unit = _trimmed(body, start, end, kind, keep_indent=block.kind == "code")
            if unit:
                units.append(unit)
            continue
        for s, e in split_sentences(body.text[start:end]):
            unit = _trimmed(body, start + s, start + e, _PROSE)
            if unit:
                units.append(unit)
    return units


# ------------------------------------------------------------------------------ packing


def _longest_fit(fits: Callable[[int], bool], lo: int, count: int) -> int:
    """Largest ``k`` in ``[lo, count)`` with ``fits(k)``, assuming ``fits`` is monotone
    (true, then false); ``lo - 1`` when ``fits(lo)`` is false. Gallops, then bisects."""
    if not fits(lo):
        return lo - 1
    good, bad, step = lo, count, 1
    while good + step < count:
        if fits(good + step):
            good += step
            step *= 2
        else:
            bad = good + step
            break
    else:
        if good == count - 1 or fits(count - 1):
            return count - 1
        bad = count - 1
    while bad - good > 1:
        mid = (good + bad) // 2
        if fits(mid):
            good = mid
        else:
            bad = mid
    return good


def _split_words(body: _Body, unit: _Unit, encoding: str, limit: int) -> list[_Unit]:
    """Cut an over-long sentence into pieces of at most ``limit`` tokens, at spaces."""
    text = body.text
    spans = [(m.start(), m.end()) for m in _NON_SPACE.finditer(text, unit.start, unit.end)]
    pieces: list[_Unit] = []
    i = 0
    while i < len(spans):
        start = spans[i][0]
        k = _longest_fit(
            lambda n: count_tokens(text[start:spans[n][1]], encoding) <= limit,  # noqa: B023 - called at once
            i, len(spans)
        )
        if k >= i:
            pieces.append(_Unit(start, spans[k][1], _PROSE))
            i = k + 1
            continue
        # a single word longer than the limit: cut it between characters
        pos, word_end = start, spans[i][1]
        while pos < word_end:
            first = pos
            n = _longest_fit(
                lambda c: count_tokens(text[first:first + c + 1], encoding) <= limit,  # noqa: B023
                0,
                word_end - first,
            )
            pos = first + max(n, 0) + 1
            pieces.append(_Unit(first, pos, _PROSE))
        i += 1
    return pieces


def _fit_units(
    body: _Body, units: list[_Unit], settings: ChunkingSettings, warnings: list[str]
) -> list[_Unit]:
    """Split over-long sentences at word boundaries; keep over-long blocks whole. Warn."""
    limit, encoding = settings.max_tokens, settings.encoding
    fitted: list[_Unit] = []
    for unit in units:
        n = count_tokens(body.text[unit.start:unit.end], encoding)
        if n <= limit:
            fitted.append(unit)
        elif unit.kind == _PROSE:
            warnings.append(
                f"line {body.line_of(unit.start)}: a sentence of {n} tokens is longer than "
                f"max_tokens={limit}: split at word boundaries (end its sentences with . ! or ? "
                f"to have it split between sentences instead)"
            )
            fitted.extend(_split_words(body, unit, encoding, limit))
        else:
            warnings.append(
                f"lines {body.line_of(unit.start)}-{body.line_of(unit.end - 1)}: a "
                f"{_ATOMIC_LABELS[unit.kind]} of {n} tokens is longer than max_tokens={limit}: "
                f"kept whole as one chunk"
            )
            fitted.append(unit)
    return fitted


def _paragraph_start(body: _Body, group: list[_Unit], i: int) -> int:
    """The index in ``group`` of the first unit of the paragraph that holds ``group[i]``: no
    blank line (nor a block's edge) stands between it and ``group[i]``."""
    while i > 0 and group[i - 1].kind == _PROSE and group[i].kind == _PROSE \
            and body.text.count("\n", group[i - 1].end, group[i].start) < 2:
        i -= 1
    return i


def _kept_before(body: _Body, current: list[_Unit], unit: _Unit, limit: int,
                 encoding: str) -> int:
    """How many of ``current``'s units stay in the chunk when ``unit`` does not fit: all of
    them, unless the last one ends in ':' (it introduces what follows: a command, a
    configuration block, a list). Then its paragraph moves on with what it introduces, or at
    least that sentence does, as long as the chunk keeps a unit and the moved ones fit with
    ``unit``."""
    last = current[-1]
    if last.kind != _PROSE or not body.text[last.start:last.end].rstrip().endswith(":"):
        return len(current)

    def fits(i: int) -> bool:
        return count_tokens(body.text[current[i].start:unit.end], encoding) <= limit

    i = _paragraph_start(body, current, len(current) - 1)
    if i > 0 and fits(i):
        return i
    if len(current) > 1 and fits(len(current) - 1):
        return len(current) - 1
    return len(current)


def _pack(body: _Body, units: list[_Unit], settings: ChunkingSettings) -> list[list[_Unit]]:
    """Greedy packing within ``max_tokens``, then the small-tail rule for the section."""
    limit, encoding = settings.max_tokens, settings.encoding

    def tokens(group: list[_Unit]) -> int:
        return count_tokens(body.text[group[0].start:group[-1].end], encoding)

    groups: list[list[_Unit]] = []
    current: list[_Unit] = []
    for unit in units:
        if current and tokens([current[0], unit]) > limit:
            keep = _kept_before(body, current, unit, limit, encoding)
            groups.append(current[:keep])
            current = current[keep:]
        current.append(unit)
    if current:
        groups.append(current)

    floor = settings.min_tokens
    if len(groups) < 2 or tokens(groups[-1]) >= floor:
        return groups
    prev, tail = groups[-2], groups[-1]
    if tokens(prev + tail) <= limit:
        return groups[:-2] + [prev + tail]
    while len(prev) > 1 and tokens(tail) < floor:
        new_prev, new_tail = prev[:-1], [prev[-1]] + tail
        if tokens(new_tail) > limit or tokens(new_prev) < floor:
            break
        prev, tail = new_prev, new_tail
    return groups[:-2] + [prev, tail]


# ------------------------------------------------------------------------------ chunks


def _has_equations(body: _Body, group: list[_Unit]) -> bool:
    if any(u.kind == _MATH for u in group):
        return True
    searchable = "\n".join(
        _INLINE_CODE.sub(" ", body.text[u.start:u.end]) for u in group if u.kind != _CODE
    )
    return _EQUATION.search(searchable) is not None


def _make_chunk(
    body: _Body,
    group: list[_Unit],
    *,
    index: int,
    doc_id: str,
    title: str,
    heading_path: tuple[str, ...],
    doc_type: str,
    last_update_date: str,
    source_name: str,
    encoding: str,
) -> Chunk:
    text = body.text[group[0].start:group[-1].end]
    first_char = group[0].start + (len(text) - len(text.lstrip()))
    return Chunk(
        id=f"{doc_id}#{index}",
        doc_id=doc_id,
        text=text,
        source=doc_id,
        source_name=source_name,
        title=title,
        heading_path=heading_path,
        section=heading_path[-1] if heading_path else title,
        doc_type=doc_type,
        last_update_date=last_update_date,
        chunk_index=index,
        start_line=body.line_of(first_char),
        end_line=body.line_of(group[-1].end - 1),
        word_count=len(words(text)),
        token_count=count_tokens(text, encoding),
        has_code=any(u.kind == _CODE for u in group),
        has_equations=_has_equations(body, group),
        content_hash=content_hash(text),
    )
