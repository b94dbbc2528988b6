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

Front matter
    A first line ``---`` opens a block of simple ``key: value`` lines closed by ``---`` (or
    ``...``). Keys are case-insensitive (``-`` reads as ``_``); values lose surrounding quotes;
    unknown keys are ignored, indented or ``- item`` lines (multi-line YAML values) are skipped,
    and any other line is a warning, not an error. Used keys: ``title``, ``doc_type`` and the
    date, taken from the first present of ``last_update_date``, ``date``, ``updated``; it must
    start with ``yyyy-mm-dd`` (a time after it is dropped), otherwise a warning and the fallback
    date. An unclosed block, or one without a single ``key: value`` line (a horizontal rule),
    is body text.

Sections (Markdown)
    ATX headings ``#`` .. ``######`` (up to three spaces of indent, a space after the hashes,
    non-empty text, optional closing hashes) start sections; lines inside fenced code blocks
    (three or more backticks or tildes) never do. Setext headings are not recognised. A
    section's heading path runs from the top-level heading down to its own (skipped levels
    are simply absent). Text
    before the first heading forms a section with heading path ``()`` whose ``section`` is the
    document title. A heading with no body text (directly followed by a sub-heading) gives no
    chunk. The title is the front matter ``title``, else the first H1, else the file stem.

Plain text
    A ``.txt`` file is prose only: no headings, code blocks or tables are recognised; it is one
    section (heading path ``()``) of paragraphs and sentences.

Units
    A section body is cut into units that are never split: a fenced code block, an indented
    code block (four spaces after a blank line, not continuing a list), a table (a header row
    plus a delimiter row, or two or more lines starting with ``|``), a display-math block
    (``$$`` .. ``$$`` or ``\\begin{env}`` .. ``\\end{env}``), and otherwise the sentences of each
    paragraph or list item (``ragstream.text.split_sentences``).

Chunks
    Units are packed greedily, in order, while the chunk's text counts at most
    ``settings.max_tokens`` tiktoken tokens. A code block, table or math block longer than
    that becomes a chunk of its own (a warning says so); an over-long sentence is cut at word
    boundaries (between characters for a single giant word), also with a warning. When the
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
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from pathlib import PurePosixPath

from ragstream.backends.tokens import count_tokens
from ragstream.config import ChunkingSettings
from ragstream.errors import IngestError
from ragstream.super_prompt import Chunk
from ragstream.text import split_sentences, words

__all__ = ["ParsedDocument", "parse_document", "PLAIN_TEXT_SUFFIXES", "DATE_KEYS"]

#: files with these suffixes are plain prose (no Markdown structure)
PLAIN_TEXT_SUFFIXES = (".txt",)
#: front matter keys that give ``last_update_date``, first present wins
DATE_KEYS = ("last_update_date", "date", "updated")
DEFAULT_DOC_TYPE = "doc"

_FRONT_MATTER_OPEN = "---"
_FRONT_MATTER_CLOSE = ("---", "...")
_KEY_VALUE = re.compile(r"^([A-Za-z_][\w-]*)[ \t]*:(?:[ \t]+(.*)|[ \t]*)$")
_CONTINUATION = re.compile(r"^(?:[ \t]+\S|-(?:[ \t]|$))")
_ISO_DATE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})(?:[T ].*)?$")

_ATX_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.+?)(?:[ \t]+#+)?[ \t]*$")
_FENCE_OPEN = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_FENCE_CLOSE = re.compile(r"^ {0,3}(`{3,}|~{3,})[ \t]*$")
_TABLE_DELIMITER = re.compile(r"^[ \t]*\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$")
_LIST_ITEM = re.compile(r"^[ \t]*(?:[-*+]|\d{1,9}[.)])[ \t]+\S")
_BEGIN_ENV = re.compile(r"^[ \t]*\\begin\{([A-Za-z]+\*?)\}")
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


@dataclass(frozen=True)
class ParsedDocument:
    """One document, ready for storage: its metadata, its chunks and what looked wrong."""

    doc_id: str  # the source path relative to the ingested folder, posix form
    source: str  # same as doc_id
    title: str
    doc_type: str
    last_update_date: str  # ISO yyyy-mm-dd (or the caller's fallback date)
    content_hash: str  # sha256 hex of the text as passed in
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
    content_hash = _sha256(text)
    normalised = text.replace("\r\n", "\n").replace("\r", "\n").removeprefix("\ufeff")
    lines = normalised.split("\n")
    warnings: list[str] = []

    meta, body_start = _read_front_matter(lines, warnings)
    markdown = not doc_id.lower().endswith(PLAIN_TEXT_SUFFIXES)
    fences = _scan_fences(lines, body_start, warnings) if markdown else {}
    headings = _scan_headings(lines, body_start, fences) if markdown else []

    first_h1 = next((t for _, level, t in headings if level == 1), "")
    title = meta.get("title", (0, ""))[1] or first_h1 or PurePosixPath(doc_id).stem
    doc_type = meta.get("doc_type", (0, ""))[1] or DEFAULT_DOC_TYPE
    last_update_date = _last_update_date(meta, fallback_date, warnings)

    has_body = any(line.strip() for line in lines[body_start:])
    if markdown and not headings and has_body:
        warnings.append("no headings: chunked as one section")

    chunks: list[Chunk] = []
    for section in _sections(lines, body_start, headings):
        body = _section_body(lines, section)
        units = _section_units(lines, section, body, fences, markdown)
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
                    encoding=settings.encoding,
                )
            )
    if not chunks:
        warnings.append("no body text: the document gives no chunks")

    return ParsedDocument(
        doc_id=doc_id,
        source=doc_id,
        title=title,
        doc_type=doc_type,
        last_update_date=last_update_date,
        content_hash=content_hash,
        chunks=tuple(chunks),
        warnings=tuple(warnings),
    )


# ------------------------------------------------------------------------------ metadata


def _sha256(text: str) -> str:
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


def _read_front_matter(
    lines: list[str], warnings: list[str]
) -> tuple[dict[str, tuple[int, str]], int]:
    """``({key: (file line, value)}, index of the first body line)``."""
    if not lines or lines[0].rstrip() != _FRONT_MATTER_OPEN:
        return {}, 0
    close = next(
        (i for i in range(1, len(lines)) if lines[i].rstrip() in _FRONT_MATTER_CLOSE), None
    )
    if close is None:
        warnings.append("front matter opened at line 1 is never closed: read as body text")
        return {}, 0

    meta: dict[str, tuple[int, str]] = {}
    problems: list[str] = []
    for i in range(1, close):
        line = lines[i]
        if not line.strip() or line.lstrip().startswith("#") or _CONTINUATION.match(line):
            continue
        match = _KEY_VALUE.match(line)
        if match is None:
            problems.append(f"front matter line {i + 1} is not key: value")
            continue
        key = match.group(1).lower().replace("-", "_")
        meta[key] = (i + 1, _unquote(match.group(2) or ""))

    if problems and not meta:
        warnings.append(
            f"line 1 '---' is followed by no key: value line before line {close + 1}: "
            f"read as body text, not front matter"
        )
        return {}, 0
    warnings.extend(problems)
    return meta, close + 1


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


def _scan_fences(lines: list[str], start: int, warnings: list[str]) -> dict[int, int]:
    """Fenced code blocks as ``{opening line index: closing line index}`` (inclusive)."""
    fences: dict[int, int] = {}
    i = start
    while i < len(lines):
        match = _FENCE_OPEN.match(lines[i])
        if match is None or (match.group(1)[0] == "`" and "`" in match.group(2)):
            i += 1
            continue
        marker = match.group(1)
        j = i + 1
        while j < len(lines):
            close = _FENCE_CLOSE.match(lines[j])
            if close and close.group(1)[0] == marker[0] and len(close.group(1)) >= len(marker):
                break
            j += 1
        if j == len(lines):
            warnings.append(f"line {i + 1}: code fence is never closed: it runs to the end")
            j = len(lines) - 1
        fences[i] = j
        i = j + 1
    return fences


def _scan_headings(
    lines: list[str], start: int, fences: dict[int, int]
) -> list[tuple[int, int, str]]:
    """ATX headings outside code fences as ``(line index, level, text)``."""
    headings: list[tuple[int, int, str]] = []
    i = start
    while i < len(lines):
        if i in fences:
            i = fences[i] + 1
            continue
        match = _ATX_HEADING.match(lines[i])
        if match and match.group(2).strip():
            headings.append((i, len(match.group(1)), match.group(2).strip()))
        i += 1
    return headings


def _sections(
    lines: list[str], body_start: int, headings: list[tuple[int, int, str]]
) -> list[_Section]:
    first_heading = headings[0][0] if headings else len(lines)
    sections = [_Section((), body_start, first_heading)]
    stack: list[tuple[int, str]] = []
    for n, (index, level, text) in enumerate(headings):
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, text))
        end = headings[n + 1][0] if n + 1 < len(headings) else len(lines)
        sections.append(_Section(tuple(t for _, t in stack), index + 1, end))
    return sections


def _section_body(lines: list[str], section: _Section) -> _Body:
    offsets, pos = [], 0
    for line in lines[section.first:section.end]:
        offsets.append(pos)
        pos += len(line) + 1
    return _Body("\n".join(lines[section.first:section.end]), tuple(offsets), section.first)


def _indent(line: str) -> int:
    expanded = line.expandtabs(4)
    return len(expanded) - len(expanded.lstrip(" "))


def _table_end(lines: list[str], i: int, end: int) -> int | None:
    """One past the last line of a table starting at line ``i``, or None."""
    if "|" not in lines[i] or i + 1 >= end:
        return None
    nxt = lines[i + 1]
    is_gfm = "|" in nxt and _TABLE_DELIMITER.match(nxt) is not None
    is_pipe_run = lines[i].lstrip().startswith("|") and nxt.lstrip().startswith("|")
    if not (is_gfm or is_pipe_run):
        return None
    j = i + 2
    while j < end and lines[j].strip() and "|" in lines[j]:
        j += 1
    return j


def _math_end(lines: list[str], i: int, end: int) -> int | None:
    """One past the last line of a display-math block starting at line ``i``, or None."""
    stripped = lines[i].strip()
    if stripped.startswith("$$"):
        if stripped.count("$$") >= 2:
            return i + 1 if stripped.endswith("$$") else None
        for j in range(i + 1, end):
            if not lines[j].strip():
                return None
            if "$$" in lines[j]:
                return j + 1 if lines[j].strip().endswith("$$") else None
        return None
    match = _BEGIN_ENV.match(lines[i])
    if match:
        closing = "\\end{" + match.group(1) + "}"
        for j in range(i, end):
            if closing in lines[j]:
                return j + 1
    return None


def _indented_code_end(lines: list[str], i: int, end: int) -> int:
    last = i
    for j in range(i + 1, end):
        if lines[j].strip():
            if _indent(lines[j]) < 4:
                break
            last = j
    return last + 1


def _paragraph_end(lines: list[str], i: int, end: int, fences: dict[int, int]) -> int:
    j = i + 1
    while (
        j < end
        and lines[j].strip()
        and j not in fences
        and _table_end(lines, j, end) is None
        and _math_end(lines, j, end) is None
    ):
        j += 1
    return j


def _blocks(
    lines: list[str], section: _Section, fences: dict[int, int], markdown: bool
) -> list[tuple[str, int, int]]:
    """The section's blocks as ``(kind, first line index, one past last)``; kinds are
    ``prose``, ``fence``, ``indented``, ``table`` and ``math``."""
    blocks: list[tuple[str, int, int]] = []
    i, end = section.first, section.end
    after_list = False  # an indented line after a list continues the list, it is not code
    while i < end:
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        if not markdown:
            j = i + 1
            while j < end and lines[j].strip():
                j += 1
            blocks.append((_PROSE, i, j))
            i = j
            continue

        block = _structured_block(lines, i, section, fences, after_list)
        if block is None:
            j = _paragraph_end(lines, i, end, fences)
            has_item = any(_LIST_ITEM.match(row) for row in lines[i:j])
            after_list = has_item or (after_list and _indent(line) > 0)
            kind = _PROSE
        else:
            kind, j = block
            after_list = False
        blocks.append((kind, i, j))
        i = j
    return blocks


def _structured_block(
    lines: list[str], i: int, section: _Section, fences: dict[int, int], after_list: bool
) -> tuple[str, int] | None:
    """``(kind, one past last line)`` of a code block, table or math block at line ``i``."""
    end = section.end
    if i in fences:
        return "fence", min(fences[i] + 1, end)
    table_end = _table_end(lines, i, end)
    if table_end is not None:
        return _TABLE, table_end
    math_end = _math_end(lines, i, end)
    if math_end is not None:
        return _MATH, math_end
    after_blank = i == section.first or not lines[i - 1].strip()
    if _indent(lines[i]) >= 4 and after_blank and not after_list:
        return "indented", _indented_code_end(lines, i, end)
    return None


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


def _section_units(
    lines: list[str], section: _Section, body: _Body, fences: dict[int, int], markdown: bool
) -> list[_Unit]:
    """Code blocks, tables and math blocks whole; prose as sentences, one item at a time."""
    units: list[_Unit] = []

    def span(a: int, b: int) -> tuple[int, int]:  # file line indices → body characters
        last = b - 1 - section.first
        return body.offsets[a - section.first], body.offsets[last] + len(lines[b - 1])

    for kind, a, b in _blocks(lines, section, fences, markdown):
        if kind != _PROSE:
            unit_kind = _CODE if kind in ("fence", "indented") else kind
            unit = _trimmed(body, *span(a, b), unit_kind, keep_indent=kind == "indented")
            if unit:
                units.append(unit)
            continue
        # a list item starts a new piece, so items without a full stop stay apart
        starts = [a] + [k for k in range(a + 1, b) if markdown and _LIST_ITEM.match(lines[k])]
        for seg_a, seg_b in zip(starts, starts[1:] + [b]):
            seg_start, seg_end = span(seg_a, seg_b)
            for s, e in split_sentences(body.text[seg_start:seg_end]):
                unit = _trimmed(body, seg_start + s, seg_start + e, _PROSE)
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
                f"max_tokens={limit}: split at word boundaries"
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


def _pack(body: _Body, units: list[_Unit], settings: ChunkingSettings) -> list[list[_Unit]]:
    """Greedy packing within ``max_tokens``, then the small-tail rule for the section."""
    limit, encoding = settings.max_tokens, settings.encoding

    def tokens(group: list[_Unit]) -> int:
        return count_tokens(body.text[group[0].start:group[-1].end], encoding)

    groups: list[list[_Unit]] = []
    current: list[_Unit] = []
    for unit in units:
        if current and tokens([current[0], unit]) > limit:
            groups.append(current)
            current = []
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
    encoding: str,
) -> Chunk:
    text = body.text[group[0].start:group[-1].end]
    first_char = group[0].start + (len(text) - len(text.lstrip()))
    return Chunk(
        id=f"{doc_id}#{index}",
        doc_id=doc_id,
        text=text,
        source=doc_id,
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
        content_hash=_sha256(text),
    )
