"""Each ``[n]`` of the answer opened in its document: the section around the cited chunk, the
cited text marked, code shown as code, a paged document's page.

Pure functions from a ``SuperPrompt`` (and, for the chunks around the cited one, a function
that fetches chunks by id from the knowledge base: ``store_fetch``):

* ``source_buttons``: one button per source the answer cites, ``[1] reverse_proxy.html §
  Simple reverse proxying`` (the leaf of its heading path), its whole citation line as help.
* ``cited_spans``: what of a cited chunk the answer uses — the passage it leads with
  (``Answer.passage``: characters of the chunk), else the answer's sentences that cite the
  chunk where the chunk says them word for word (``evidence.find_sentence``), else nothing
  quoted: the chunk is cited as a whole.
* ``pieces``: a chunk's Markdown cut at its top-level blocks into runs that are cited (they
  hold cited text: the page draws them with a bar beside) or not; the cited prose is wrapped
  in ``<mark>`` inside its paragraph, never inside a code block or an inline code span, and
  the document's own HTML is escaped (``<`` outside code), so a ``<script>`` stays text.
* ``around``: the chunks before and after the cited one in its document (``AROUND`` each
  way), while they stay in its section (``section_path``), read from the knowledge base by
  their ids (``<doc_id>#<index>``) and only when the knowledge base still holds the cited
  chunk as it was cited.
* ``citation_view``: all of it for source ``[n]``, for the page's dialog.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from ragstream.common import markdown
from ragstream.common.errors import RagstreamError
from ragstream.interfaces.ui import evidence, views
from ragstream.interfaces.ui.answer_view import md_text
from ragstream.state.super_prompt import Chunk, Citation, SuperPrompt
from ragstream.workbench.engine import Engine

#: how many chunks of the section the dialog shows before and after the cited one
AROUND = 1
#: a heading path this deep or deeper is a subsection: the chunks around it may stand in the
#: other subsections of its section (its path less the last heading); a shallower path is the
#: section itself
SUBSECTION_DEPTH = 3

#: how the cited text is marked: a pale yellow highlight, as in the Evidence tab
MARK_OPEN = '<mark style="background:#fff1a8;color:inherit;padding:0 2px;border-radius:3px">'
MARK_CLOSE = "</mark>"

#: what of the chunk is marked: the answer's lead passage, the answer's sentences found in
#: it word for word, or nothing quoted (the chunk is cited as a whole)
Marked = Literal["passage", "sentences", "whole"]

MARKED_NOTE: dict[str, str] = {
    "passage": "Marked: the passage the answer quotes, in its place in the document.",
    "sentences": "Marked: the sentences of the answer that cite this source, as the source "
                 "says them.",
    "whole": "The answer cites this source without quoting it word for word: the whole chunk "
             "(beside the bar) is what it cites.",
}

Fetch = Callable[[Sequence[str]], dict[str, Chunk]]


@dataclass(frozen=True)
class SourceButton:
    """A button under the answer that opens source ``n``: its label (Markdown: a heading's
    ``__init__`` stays as written) and its help."""

    n: int
    chunk_id: str
    label: str
    help: str


@dataclass(frozen=True)
class Piece:
    """A run of whole Markdown blocks of a chunk, ready to draw (``st.markdown`` with HTML
    allowed): ``cited`` when it holds cited text (drawn with a bar beside), ``heading`` a
    sub-heading to show above it (a chunk of another subsection than the one above)."""

    markdown: str
    cited: bool = False
    heading: str = ""
    around: bool = False  # text of a chunk around the cited one, not of the cited chunk


@dataclass
class CitationView:
    """Source ``[n]`` opened in its document (see the module docstring)."""

    n: int
    chunk_id: str
    label: str  # the citation line: "[1] manual.pdf p. 12 § Install > Linux"
    title: str  # the dialog's title: "[1] manual.pdf p. 12 § Linux" (its button's label, Markdown)
    document: str  # the document's title (its file name when it has none)
    source: str  # its file (with its page in a paged document)
    section: str  # the section's headings, "Install › Linux"
    page: str  # "p. 12" in a paged document, else ""
    marked: Marked
    note: str
    pieces: list[Piece] = field(default_factory=list)
    around_note: str = ""  # which chunks around it are shown, or why none are


# --------------------------------------------------------------------------- the buttons


def leaf_label(citation: Citation) -> str:
    """``[1] reverse_proxy.html § Simple reverse proxying``: the source (with its page) and the
    last heading of its section."""
    label = views.citation_line(citation)
    if " § " not in label or not citation.section:
        return label
    head, _, _ = label.partition(" § ")
    leaf = citation.section.split(" > ")[-1].strip()
    return f"{head} § {leaf}" if leaf else head


def source_buttons(sp: SuperPrompt) -> list[SourceButton]:
    """One button per source the answer cites (its valid citations, by number)."""
    ans = sp.answer
    if ans is None or ans.mode == "no-results":
        return []
    return [SourceButton(c.n, c.chunk_id, md_text(leaf_label(c)),
                         f"Open {views.citation_line(c)} in its document: the section around "
                         "it, the cited text marked")
            for c in sorted(ans.sources, key=lambda c: c.n) if c.chunk_id]


def source_number(sp: SuperPrompt, chunk_id: str) -> int | None:
    """The number ``[n]`` the answer cites chunk ``chunk_id`` by, or None when it does not."""
    ans = sp.answer
    if ans is None or ans.mode == "no-results":
        return None
    return next((c.n for c in ans.sources if c.chunk_id == chunk_id), None)


# --------------------------------------------------------------------------- what is cited


def cited_spans(sp: SuperPrompt, chunk_id: str, max_range: int) -> tuple[Marked, list[tuple[int, int]]]:
    """What of chunk ``chunk_id`` the answer uses (see the module docstring), as character
    spans of its text: the lead passage (and any other sentence of the answer found in it),
    else the sentences citing it found word for word, else none (``whole``)."""
    ans = sp.answer
    chunk = sp.chunk_map().get(chunk_id)
    if ans is None or chunk is None:
        return "whole", []
    text = chunk.text
    spans: list[tuple[int, int]] = []
    for link in evidence.answer_links(sp, max_range):
        if chunk_id in link.chunk_ids:
            found = evidence.find_sentence(link.text, text)
            if found is not None:
                spans.append(found)
    ref = ans.passage
    if ref is not None and ref.chunk_id == chunk_id and 0 <= ref.start < ref.end <= len(text):
        return "passage", merge([(ref.start, ref.end), *spans])
    if spans:
        return "sentences", merge(spans)
    return "whole", []


def merge(spans: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The spans sorted, those that overlap or touch made one."""
    out: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


# --------------------------------------------------------------------------- marking Markdown

_PREFIX_FIRST = re.compile(r"[ \t]*(?:>[ \t]?)*[ \t]*(?:(?:[-*+]|\d{1,9}[.)])(?:[ \t]+|$))?"
                           r"(?:\[[ xX]\][ \t]+)?")
_PREFIX_NEXT = re.compile(r"[ \t]*(?:>[ \t]?)*[ \t]*")
_ATX = re.compile(r"[ \t]*(#{1,6})(?:[ \t]+|$)")
_ATX_CLOSE = re.compile(r"[ \t]+#+[ \t]*$|[ \t]*$")
_BACKTICKS = re.compile(r"`+")
#: characters of emphasis that hug a sentence: a mark takes them in rather than part them
_HUGGING = "*_"
#: characters of the document that would be read as HTML or as math by the page's Markdown
_ESCAPES = {"<": "&lt;", "$": "\\$"}
_PROSE = frozenset({"paragraph", "heading", "table", "html"})


def _line_starts(text: str) -> list[int]:
    """The offset of every line of ``text`` (as ``markdown`` counts them), and its length."""
    starts = [0] + [m.end() for m in re.finditer(r"\r\n|\r|\n", text)]
    return starts + [len(text)]


def code_spans(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """The inline code spans of ``text[start:end]`` (a backtick run closed by a run of the
    same length), as spans of ``text``."""
    out = []
    runs = [(m.start(), m.end()) for m in _BACKTICKS.finditer(text, start, end)
            if not (m.start() > 0 and text[m.start() - 1] == "\\")]
    i = 0
    while i < len(runs):
        a, b = runs[i]
        close = next((j for j in range(i + 1, len(runs))
                      if runs[j][1] - runs[j][0] == b - a), None)
        if close is None:
            i += 1
            continue
        out.append((a, runs[close][1]))
        i = close + 1
    return out


@dataclass
class _Edits:
    """Insertions before characters and replacements of characters of a text, applied when
    its pieces are written out. An insertion's rank orders those at one place: a mark's end
    (0) before a bold end (1), a bold start (2) before a mark's start (3)."""

    text: str
    inserts: dict[int, list[tuple[int, str]]] = field(default_factory=dict)
    replaced: dict[int, str] = field(default_factory=dict)

    def insert(self, at: int, rank: int, what: str) -> None:
        self.inserts.setdefault(at, []).append((rank, what))

    def write(self, start: int, end: int) -> str:
        """``text[start:end]`` with the edits (an insertion at ``end`` too when ``end`` is the
        end of the text)."""
        out = []
        for i in range(start, end + (1 if end == len(self.text) else 0)):
            for _, what in sorted(self.inserts.get(i, ())):
                out.append(what)
            if i < end:
                out.append(self.replaced.get(i, self.text[i]))
        return "".join(out)


def _content(text: str, starts: list[int], block: markdown.Block) -> tuple[int, int]:
    """The characters of a paragraph or heading block without its container markers (list
    marker, quote marks, indent) on its first line and its final line break."""
    first = starts[block.start]
    end = starts[min(block.end, len(starts) - 1)]
    while end > first and text[end - 1] in "\r\n":
        end -= 1
    m = _PREFIX_FIRST.match(text, first, end)
    return (m.end() if m else first), end


def _snap(text: str, a: int, b: int, lo: int, hi: int, codes: list[tuple[int, int]],
          starts: list[int]) -> tuple[int, int] | None:
    """The span ``[a, b)`` within ``[lo, hi)`` made a span a mark can wrap: without the
    whitespace at its ends, outside the container markers of the line it starts on, taking
    in the emphasis that hugs it and any inline code span it cuts. None when empty."""
    a, b = max(a, lo), min(b, hi)
    while a < b and text[a].isspace():
        a += 1
    while b > a and text[b - 1].isspace():
        b -= 1
    if a >= b:
        return None
    line = max(i for i, s in enumerate(starts[:-1]) if s <= a)
    if starts[line] > lo:  # a continuation line: its quote marks and indent are not text
        m = _PREFIX_NEXT.match(text, starts[line], hi)
        if m and a < m.end():
            a = m.end()
    while a > lo and text[a - 1] in _HUGGING:
        a -= 1
    while b < hi and text[b] in _HUGGING:
        b += 1
    for c, d in codes:
        if c < a < d:
            a = c
        if c < b < d:
            b = d
    return (a, b) if a < b else None


def _escape(edits: _Edits, a: int, b: int, codes: list[tuple[int, int]]) -> None:
    """Escape the characters of ``[a, b)`` the page would read as HTML or math, outside the
    inline code spans ``codes``."""
    text = edits.text
    for i in range(a, b):
        if text[i] in _ESCAPES and not any(c <= i < d for c, d in codes):
            edits.replaced[i] = _ESCAPES[text[i]]


def _prose_edits(edits: _Edits, starts: list[int], block: markdown.Block,
                 spans: Sequence[tuple[int, int]]) -> None:
    """Escape a prose block's HTML and math characters (outside its code spans) and, for a
    paragraph or heading, mark its cited text; a heading is written in bold (a chunk's own
    sub-heading, not a heading of the page)."""
    text = edits.text
    if block.kind in ("table", "html"):
        for line in range(block.start, block.end):
            a, b = starts[line], starts[min(line + 1, len(starts) - 1)]
            _escape(edits, a, b, [] if block.kind == "html" else code_spans(text, a, b))
        return
    lo, hi = _content(text, starts, block)
    if block.kind == "heading":
        atx = _ATX.match(text, starts[block.start], hi)
        if atx is not None:
            for i in range(starts[block.start], atx.end()):
                edits.replaced[i] = ""
            close = _ATX_CLOSE.search(text, atx.end(), hi)
            end = close.start() if close else hi
            for i in range(end, hi):
                edits.replaced[i] = ""
            lo, hi = atx.end(), end
            if lo < hi:
                edits.insert(lo, 2, "**")
                edits.insert(hi, 1, "**")
    codes = code_spans(text, lo, hi)
    _escape(edits, lo, hi, codes)
    for a, b in spans:
        if b <= lo or a >= hi:
            continue
        snapped = _snap(text, a, b, lo, hi, codes, starts)
        if snapped is not None:
            edits.insert(snapped[0], 3, MARK_OPEN)
            edits.insert(snapped[1], 0, MARK_CLOSE)


def pieces(text: str, spans: Sequence[tuple[int, int]] = (), cited_whole: bool = False,
           around: bool = False) -> list[Piece]:
    """``text`` (a chunk's Markdown) as runs of whole top-level blocks, each ``cited`` when it
    holds text of ``spans`` (every run, when ``cited_whole``), the cited prose in ``<mark>``
    and the document's HTML escaped (see the module docstring). Code blocks stay as they are:
    the page shows them as code, beside the bar when cited."""
    if not text.strip():
        return []
    starts = _line_starts(text)
    parsed = markdown.parse(text, front_matter=False)
    edits = _Edits(text)
    spans = merge([(a, b) for a, b in spans if b > a])
    for block in parsed.walk():
        if block.kind in _PROSE:
            _prose_edits(edits, starts, block, spans if block.kind in ("paragraph", "heading")
                         else ())
    out: list[Piece] = []
    run_start = run_end = 0
    run_cited: bool | None = None
    last = len(starts) - 1
    for block in parsed.blocks:
        a, b = starts[block.start], starts[min(block.end, last)]
        cited = cited_whole or any(x < b and y > a and text[max(x, a):min(y, b)].strip()
                                   for x, y in spans)
        if run_cited is None:
            run_start, run_cited = a, cited
        elif cited != run_cited:
            out.append(Piece(edits.write(run_start, run_end).strip("\r\n"), run_cited,
                             around=around))
            run_start, run_cited = a, cited
        run_end = b
    if run_cited is not None:
        out.append(Piece(edits.write(run_start, len(text) if run_end >= len(text) else run_end)
                         .strip("\r\n"), run_cited, around=around))
    return [p for p in out if p.markdown.strip()]


# --------------------------------------------------------------------------- around the chunk


def section_path(chunk: Chunk) -> tuple[str, ...]:
    """The headings of the section the chunk stands in: its heading path, less its last
    heading when that is a subsection's (``SUBSECTION_DEPTH``)."""
    path = tuple(chunk.heading_path)
    return path[:-1] if len(path) >= SUBSECTION_DEPTH else path


def in_section(other: Chunk, chunk: Chunk) -> bool:
    """Whether ``other`` stands in ``chunk``'s section (``section_path``): in the same
    document, under the same headings (a subsection's chunk: under its section's)."""
    if other.doc_id != chunk.doc_id:
        return False
    section = section_path(chunk)
    if section == tuple(chunk.heading_path):
        return tuple(other.heading_path) == section
    return tuple(other.heading_path[:len(section)]) == section


def chunk_id_at(chunk: Chunk, index: int) -> str:
    """The id of the chunk at ``index`` of ``chunk``'s document (``<doc_id>#<index>``)."""
    return f"{chunk.doc_id}#{index}"


def around(chunk: Chunk, fetch: Fetch, reach: int = AROUND) -> tuple[list[Chunk], list[Chunk], str]:
    """The chunks before and after ``chunk`` in its document that stand in its section (at
    most ``reach`` each way, nearest first, stopping at the first one outside it), and a note
    when none can be shown. They are read with ``fetch`` (by id), and only when the
    knowledge base still holds ``chunk`` with the text it was cited with."""
    if chunk.from_conversation:
        return [], [], "A remembered turn of the conversation: it stands alone."
    ids = [chunk_id_at(chunk, i) for i in range(max(0, chunk.chunk_index - reach),
                                                chunk.chunk_index + reach + 1)]
    try:
        held = fetch(ids)
    except RagstreamError as err:
        return [], [], f"The text around it cannot be read ({err.kind}): {err}"
    own = held.get(chunk.id)
    if own is None or own.text != chunk.text:
        return [], [], ("The knowledge base no longer holds this chunk as it was cited (its "
                        "document changed or went): the text around it is not shown.")
    def walk(step: int) -> list[Chunk]:
        found = []
        for k in range(1, reach + 1):
            other = held.get(chunk_id_at(chunk, chunk.chunk_index + step * k))
            if other is None or not in_section(other, chunk):
                break
            found.append(other)
        return found

    before, after = walk(-1)[::-1], walk(1)
    return before, after, ""


def around_note(before: list[Chunk], after: list[Chunk], note: str) -> str:
    """Which chunks around the cited one the dialog shows, or why it shows none."""
    if note:
        return note
    if not before and not after:
        return "The cited chunk is the whole of its section in the knowledge base."
    where = " and ".join(w for w, shown in (("before", before), ("after", after)) if shown)
    return f"Shown around it, unmarked: the text {where} it in the same section."


def store_fetch(engine: Engine) -> Fetch:
    """``engine``'s knowledge base read by chunk id (its chunks only, no conversation turn)."""

    def fetch(ids: Sequence[str]) -> dict[str, Chunk]:
        return {i: s.chunk for i, s in engine.services.index().fetch(list(ids)).items()}

    return fetch


def fetch_for(engine: Engine, sp: SuperPrompt) -> Fetch | None:
    """How to read the chunks around a cited one: from ``engine``'s knowledge base when it is
    the one ``sp``'s Retrieval searched, else None (another knowledge base's chunks are not
    this pass's document)."""
    record = sp.extras.retrieval
    if record is not None and record.kb != engine.kb:
        return None
    return store_fetch(engine)


# --------------------------------------------------------------------------- the view


def heading_line(path: Sequence[str]) -> str:
    """A heading path as the answer writes it: ``Section › Subsection``."""
    return " › ".join(h for h in path if h)


def citation_view(sp: SuperPrompt, n: int, fetch: Fetch | None, max_range: int) -> CitationView | None:
    """Source ``[n]`` of the answer opened in its document (None when ``n`` names no source
    of it): the section around the cited chunk (``fetch``: the knowledge base by id; None
    when it is not the knowledge base the pass searched), its cited text marked."""
    ans = sp.answer
    if ans is None:
        return None
    citation = next((c for c in ans.sources if c.n == n and c.chunk_id), None)
    chunk = sp.chunk_map().get(citation.chunk_id) if citation else None
    if citation is None or chunk is None:
        return None
    marked, spans = cited_spans(sp, chunk.id, max_range)
    body = pieces(chunk.text, spans, cited_whole=marked == "whole")
    if fetch is None:
        before: list[Chunk] = []
        after: list[Chunk] = []
        note = ("The pass searched another knowledge base than the one selected: the text "
                "around the chunk is not shown.")
    else:
        before, after, note = around(chunk, fetch)
    shown: list[Piece] = []
    above = tuple(chunk.heading_path[:len(section_path(chunk))])
    for other in before:
        shown.extend(_headed(pieces(other.text, around=True), other, above))
        above = tuple(other.heading_path)
    shown.extend(_headed(body, chunk, above))
    above = tuple(chunk.heading_path)
    for other in after:
        shown.extend(_headed(pieces(other.text, around=True), other, above))
        above = tuple(other.heading_path)
    return CitationView(
        n=n, chunk_id=chunk.id, label=views.citation_line(citation), title=md_text(leaf_label(citation)),
        document=chunk.title or chunk.source, source=citation.where or chunk.source,
        section=heading_line(section_path(chunk)) or chunk.title or chunk.source,
        page=chunk.page_label, marked=marked, note=MARKED_NOTE[marked], pieces=shown,
        around_note=around_note(before, after, note))


def _headed(drawn: list[Piece], chunk: Chunk, above: tuple[str, ...]) -> list[Piece]:
    """``drawn`` with the chunk's sub-heading on its first piece when the chunk stands under
    other headings than the text above it (``above``)."""
    path = tuple(chunk.heading_path)
    if not drawn or path == above:
        return drawn
    known = 0
    while known < min(len(path), len(above)) and path[known] == above[known]:
        known += 1
    first = drawn[0]
    title = heading_line(path[known:]) or heading_line(path[-1:])
    page = f" · {chunk.page_label}" if chunk.page_label else ""
    return [Piece(first.markdown, first.cited, title + page, first.around), *drawn[1:]]
