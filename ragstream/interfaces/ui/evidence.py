"""Evidence you can see: every sentence of the answer and of A4's condensed context linked to
the chunk(s) it cites, and a chunk's text with the sentences that were used highlighted.

Pure functions from a ``SuperPrompt`` (kotaemon's evidence panel is the model: the cited
passages of a source are marked in its own text, each mark tagged with the sentences that use
it, overlapping passages split so the HTML stays well-formed, and the text escaped first):

* ``answer_links``: the answer's sentences (``answer.answer_sentences``), each with the
  numbers it cites and, through ``final_selection_ids``, their chunks (``answer.map_citations``);
  keys ``A1``, ``A2``, …
* ``condensed_links``: A4's statements in the order ``S_CTX_MD`` lists them (facts, then
  constraints), each with its chunk(s) and its span in the first one; keys ``C1``, ``C2``, …
* ``chunk_evidence``: for one chunk, the passages used (a statement's span; an answer
  sentence found verbatim in the chunk, whitespace and case aside), which sentences use each,
  which sentences cite the chunk without being one of its sentences (an LLM's paraphrase), and
  the chunk's text as HTML with ``<mark>`` around the used passages. Chunk text is user data:
  it is HTML-escaped before any mark is added, so a ``<script>`` in a document stays text.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field

from ragstream.answering.answer import answer_sentences, citation_numbers, map_citations
from ragstream.common import markdown
from ragstream.state.super_prompt import SuperPrompt

ANSWER, CONDENSED = "answer", "condensed"
#: the key prefix of each origin's sentences: A1 is the answer's first, C1 the condensed first
PREFIX = {ANSWER: "A", CONDENSED: "C"}

# a citation as it is written after a sentence: [3], [1, 2], [1-3]; removed for display and
# matching (the numbers themselves are read by ``answer.citation_numbers``)
_MARKS = re.compile(r"\s*\[\s*\d+(?:\s*[-–—,;]\s*\d+)*\s*\]")
_SPACE_BEFORE_STOP = re.compile(r"\s+([.!?;:,])")
# a line that starts a Markdown block of its own (a list item, heading, table row, quote or fence)
_BLOCK_START = re.compile(r"\s*(?:[-*+]\s|\d+[.)]\s|#|\||>|```|~~~)")

#: how a mark looks: a pale yellow highlight; the opened sentence's passage is outlined too
MARK_STYLE = "background:#fff1a8;color:inherit;padding:1px 2px;border-radius:3px"
CURRENT_STYLE = "outline:2px solid #e65100;outline-offset:1px"
TAG_STYLE = ("font-size:0.7em;font-weight:600;color:#8a5a00;margin-right:2px;"
             "font-family:ui-monospace,monospace;white-space:nowrap")
BOX_STYLE = ("white-space:pre-wrap;overflow-wrap:anywhere;word-break:normal;max-width:100%;"
             "box-sizing:border-box;line-height:1.6;font-size:0.92rem;"
             "border:1px solid rgba(49,51,63,0.2);border-radius:0.5rem;padding:0.75rem 1rem;"
             "background:rgba(250,250,250,0.6)")
#: a code block inside it: monospace on a grey ground, its lines as written
CODE_STYLE = ("font-family:'Source Code Pro',ui-monospace,monospace;font-size:0.85rem;"
              "white-space:pre;overflow-x:auto;background:rgba(49,51,63,0.06);"
              "border-radius:0.25rem;padding:0.4rem 0.6rem;margin:0.25rem 0")
#: inline code in the prose: monospace on a grey ground, without its backticks
INLINE_CODE_STYLE = ("font-family:'Source Code Pro',ui-monospace,monospace;font-size:0.85em;"
                     "background:rgba(49,51,63,0.06);border-radius:0.2rem;padding:0 0.15em")


@dataclass(frozen=True)
class Link:
    """One sentence of the answer (``A<i>``) or of the condensed context (``C<i>``) and the
    chunks it cites: ``numbers`` as written ([n]), ``chunk_ids`` the valid ones' chunks in
    number order, ``invalid`` the numbers that name no source. ``span``: for a condensed
    statement, the characters of its first chunk's text it was taken from."""

    key: str
    origin: str
    text: str
    numbers: tuple[int, ...] = ()
    chunk_ids: tuple[str, ...] = ()
    invalid: tuple[int, ...] = ()
    span: tuple[int, int] | None = None
    kind: str = ""

    def number_of(self, chunk_id: str) -> int | None:
        """The citation number this sentence gives ``chunk_id`` (None when it does not cite it)."""
        for n, c in zip(self.valid_numbers, self.chunk_ids):
            if c == chunk_id:
                return n
        return None

    @property
    def valid_numbers(self) -> tuple[int, ...]:
        """The numbers that name a source, in the order of ``chunk_ids``."""
        return tuple(n for n in self.numbers if n not in self.invalid)


def display_text(sentence: str) -> str:
    """A sentence without its citation marks (``text [3].`` → ``text.``), for showing and
    matching; the numbers are kept apart (``Link.numbers``)."""
    return _SPACE_BEFORE_STOP.sub(r"\1", _MARKS.sub("", sentence)).strip()


def answer_links(sp: SuperPrompt, max_range: int) -> list[Link]:
    """The answer's sentences (all of them, however short), each with the numbers it cites,
    their chunks and the numbers that name no source. Empty without an answer and for a
    no-results answer (it cites nothing: it names what the knowledge base covers).
    ``max_range``: ``answer.max_citation_range``, how far ``[a-b]`` expands."""
    ans = sp.answer
    if ans is None or ans.mode == "no-results":
        return []
    out = []
    for i, sentence in enumerate(answer_sentences(ans.text, 1), start=1):
        numbers = citation_numbers(sentence, max_range)
        cites, invalid = map_citations(numbers, sp)
        by_n = {c.n: c.chunk_id for c in cites if c.valid}
        out.append(Link(key=f"{PREFIX[ANSWER]}{i}", origin=ANSWER, text=display_text(sentence),
                        numbers=tuple(numbers),
                        chunk_ids=tuple(by_n[n] for n in numbers if n in by_n),
                        invalid=tuple(n for n in numbers if n in invalid)))
    return out


def condensed_links(sp: SuperPrompt) -> list[Link]:
    """A4's statements as ``S_CTX_MD`` lists them (facts, then constraints), each with the
    numbers of its chunks in the Sources block, the chunks and its span in the first chunk."""
    record = sp.extras.a4
    if record is None:
        return []
    number = {c: n for n, c in enumerate(sp.final_selection_ids, start=1)}
    sourced = [s for s in record.condensed if not s.by_you]  # the person's notes cite nothing
    ordered = ([s for s in sourced if s.kind == "fact"]
               + [s for s in sourced if s.kind == "constraint"])
    out = []
    for i, s in enumerate(ordered, start=1):
        cited = [c for c in s.chunk_ids if c in number]
        out.append(Link(key=f"{PREFIX[CONDENSED]}{i}", origin=CONDENSED, text=s.text,
                        numbers=tuple(number[c] for c in cited), chunk_ids=tuple(cited),
                        span=s.span, kind=s.kind))
    return out


def sentence_links(sp: SuperPrompt, max_range: int) -> list[Link]:
    """The answer's sentences, then the condensed context's."""
    return answer_links(sp, max_range) + condensed_links(sp)


def find_sentence(sentence: str, text: str) -> tuple[int, int] | None:
    """Where ``sentence`` (citation marks removed) stands in ``text``, whitespace and case
    aside; also without its final stop (a model may drop it). None when it is not there:
    a paraphrase is never passed off as the source's own words."""
    words = display_text(sentence).split()
    while words:
        pattern = r"\s+".join(re.escape(w) for w in words)
        m = re.search(pattern, text, re.IGNORECASE)
        if m:
            return m.start(), m.end()
        last = words[-1].rstrip(".!?")
        if last == words[-1] or not last:
            return None
        words = words[:-1] + [last]
    return None


@dataclass(frozen=True)
class Mark:
    """A passage of a chunk's text that sentences were taken from: ``[start, end)`` and the
    keys of the sentences that use it (``A2``, ``C5``)."""

    start: int
    end: int
    keys: tuple[str, ...]


@dataclass
class ChunkEvidence:
    """One chunk and the sentences that use it: the passages marked, the sentences citing it
    that are not one of its passages (``cited_only``), its number in the Sources block and its
    text as HTML with the passages in ``<mark>``."""

    chunk_id: str
    number: int | None
    marks: list[Mark] = field(default_factory=list)
    used_by: list[Link] = field(default_factory=list)
    cited_only: list[Link] = field(default_factory=list)
    html: str = ""

    @property
    def passages(self) -> int:
        """How many passages (sentences) of the chunk were used."""
        return len(self.marks)

    def count(self, origin: str) -> int:
        """How many sentences of ``origin`` (answer or condensed) use or cite this chunk."""
        return sum(link.origin == origin for link in self.used_by)

    def summary(self) -> str:
        """One line: how many of the chunk's sentences were used, by how many answer and
        condensed-context sentences, and how many only cite it."""
        n = self.passages
        if not self.used_by:
            return "No sentence of the answer or of the condensed context cites this chunk."
        head = f"{n} sentence{'s' if n != 1 else ''} of this chunk {'was' if n == 1 else 'were'} used"
        parts = []
        for origin, name in ((ANSWER, "answer"), (CONDENSED, "condensed context")):
            k = self.count(origin)
            if k:
                parts.append(f"{k} {name} sentence{'s' if k != 1 else ''}")
        line = f"{head}, by {' and '.join(parts)}" if parts else head
        if self.cited_only:
            keys = ", ".join(link.key for link in self.cited_only)
            line += (f"; {keys} cite{'s' if len(self.cited_only) == 1 else ''} it without "
                     f"quoting it (not highlighted)")
        return line + "."


def chunk_evidence(sp: SuperPrompt, chunk_id: str, links: list[Link],
                   current: str | None = None) -> ChunkEvidence:
    """The evidence of one chunk among ``links`` (see the module docstring); ``current``: the
    key of the sentence the reader opened the chunk from, whose passage is outlined."""
    chunk = sp.chunk_map().get(chunk_id)
    selection = sp.final_selection_ids
    number = selection.index(chunk_id) + 1 if chunk_id in selection else None
    out = ChunkEvidence(chunk_id=chunk_id, number=number)
    if chunk is None:
        return out
    text = chunk.text
    spans: dict[tuple[int, int], list[str]] = {}
    for link in links:
        if chunk_id not in link.chunk_ids:
            continue
        out.used_by.append(link)
        span = link.span if link.chunk_ids[0] == chunk_id else None
        if span is None or not 0 <= span[0] < span[1] <= len(text):
            span = find_sentence(link.text, text)
        if span is None:
            out.cited_only.append(link)
        else:
            spans.setdefault(span, []).append(link.key)
    out.marks = [Mark(a, b, tuple(keys)) for (a, b), keys in sorted(spans.items())]
    out.html = render_html(text, out.marks, current)
    return out


def soft_breaks(text: str) -> str:
    """``text`` with the line breaks inside a paragraph made spaces (same length, so spans stay
    valid): the source's hard-wrapped lines flow in a narrow panel. Breaks before a blank line,
    a list item, a heading, a table row, a quote or a fence, and inside code, stay."""
    outside = markdown.spans_outside(text, {"fence", "code", "table", "html", "math"})
    chars = list(text)
    for a, b in outside:
        for i in range(a, b):
            if text[i] != "\n":
                continue
            line_start = text.rfind("\n", 0, i) + 1
            line = text[line_start:i]
            nxt_end = text.find("\n", i + 1)
            nxt = text[i + 1:nxt_end if nxt_end >= 0 else len(text)]
            if (line.strip() and nxt.strip() and not _BLOCK_START.match(nxt)
                    and not line.lstrip().startswith(("#", "|")) and not line.endswith("  ")):
                chars[i] = " "
    return "".join(chars)


def code_blocks(text: str) -> list[tuple[int, int, int, int]]:
    """Each fenced code block of ``text`` as the evidence box draws it: ``(start, code_start,
    code_end, end)``; ``[start, code_start)`` (the blank lines before the block and its
    opening fence) and ``[code_end, end)`` (its last line break and closing fence) are left
    out, ``[code_start, code_end)`` is shown as code."""
    out = []
    for f in markdown.fence_spans(text):
        start = len(text[:f.start].rstrip("\n")) if text[:f.start].strip() else f.start
        code_end = f.code_end - 1 if f.code_end > f.code_start and text[f.code_end - 1] == "\n" \
            else f.code_end
        out.append((start, f.code_start, code_end, f.end))
    return out


def render_html(text: str, marks: list[Mark], current: str | None = None) -> str:
    """``text`` as one HTML block: escaped, line breaks kept (those inside a paragraph made
    spaces, see ``soft_breaks``), each marked passage in ``<mark>`` after a small tag naming
    the sentences that use it (``A1 C3``). Overlapping passages are cut where they meet, so
    each piece of text is marked once, with every sentence that covers it. A fenced code
    block is shown as code (monospace, on its own ground), without its fence lines, and so is
    a code span of the prose, without its backticks."""
    flowing = soft_breaks(text)
    fences = code_blocks(text)
    spans = markdown.code_spans(text)
    cuts = sorted({0, len(text), *(m.start for m in marks), *(m.end for m in marks),
                   *(x for f in fences for x in f), *(x for s in spans for x in s)})
    parts = [f'<div class="rs-evidence" style="{BOX_STYLE}">']
    tagged: set[tuple[int, int]] = set()
    open_code: tuple[int, int, int, int] | None = None
    for a, b in zip(cuts, cuts[1:]):
        fence = next((f for f in fences if f[0] <= a < f[3]), None)
        if open_code is not None and fence is not open_code:
            parts.append("</div>")
            open_code = None
        if fence is not None and not fence[1] <= a < fence[2]:
            continue  # a fence line: the block shows as code instead
        if fence is not None and open_code is None:
            parts.append(f'<div class="rs-code" style="{CODE_STYLE}">')
            open_code = fence
        span = next((s for s in spans if s[0] <= a < s[3]), None)
        if span is not None and not span[1] <= a < span[2]:
            continue  # a code span's backticks: its text shows as code instead
        piece = html.escape(flowing[a:b], quote=True)
        if span is not None:
            piece = f'<code style="{INLINE_CODE_STYLE}">{piece}</code>'
        covering = [m for m in marks if m.start <= a and b <= m.end]
        if not covering:
            parts.append(piece)
            continue
        keys = list(dict.fromkeys(k for m in covering for k in m.keys))
        starting = [m for m in covering if (m.start, m.end) not in tagged]
        if starting:
            tagged.update((m.start, m.end) for m in starting)
            tag = " ".join(dict.fromkeys(k for m in starting for k in m.keys))
            parts.append(f'<sup class="rs-tag" style="{TAG_STYLE}">{html.escape(tag)}</sup>')
        style = MARK_STYLE + (";" + CURRENT_STYLE if current in keys else "")
        title = html.escape("used by " + ", ".join(keys), quote=True)
        data = html.escape(" ".join(keys), quote=True)
        parts.append(f'<mark data-keys="{data}" title="{title}" style="{style}">{piece}</mark>')
    if open_code is not None:
        parts.append("</div>")
    parts.append("</div>")
    return "".join(parts)


def default_chunk(sp: SuperPrompt, links: list[Link], current: str | None) -> str | None:
    """The chunk the evidence panel opens: ``current`` if Retrieval returned it, else the
    first chunk a sentence cites (the answer's first), else the first chunk of the final
    selection; None before Retrieval."""
    ids = [c.id for c in sp.base_context_chunks]
    if current in ids:
        return current
    for link in links:
        if link.chunk_ids:
            return link.chunk_ids[0]
    if sp.final_selection_ids:
        return sp.final_selection_ids[0]
    return ids[0] if ids else None


def chunk_labels(sp: SuperPrompt) -> dict[str, str]:
    """How the chunk picker names each chunk Retrieval returned: ``[n] file.md § Heading · id``
    (n its number in the Sources block, when it has one)."""
    number = {c: n for n, c in enumerate(sp.final_selection_ids, start=1)}
    return {c.id: (f"[{number[c.id]}] " if c.id in number else "")
            + f"{c.citation_label}  ·  {c.id}" for c in sp.base_context_chunks}


#: the sentence list's height in pixels: it scrolls, so the opened chunk stays beside it
LIST_HEIGHT = 620
#: what the marks mean, under the panel's count
LEGEND = ("Highlighted: the chunk's sentences that were used, each tagged with the sentences "
          "that use it (A = answer, C = condensed context, as listed on the left); the one you "
          "opened is outlined.")
