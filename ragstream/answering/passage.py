"""The passage that answers: the offline answer leads with one section's own words.

A person asking their documentation wants the part of it that answers, as it is written: the
sentences that state what was asked, in their order, and the configuration or code block that
does it, whole. ``lead_passage`` takes that part out of one chunk of the final selection:

1. **Which chunk.** The chunk the person pinned first; else, when the question asks about a
   specific name (``path.join``), the chunk of the sentence about it
   (``answer.lead_ranks``); else the first document chunk of the final selection (the
   ReRanker's best that A3 kept). A remembered conversation turn is never the passage: a
   document is. Its *anchor* is the sentence that states what was asked best (its cosine to
   the prompt, from the sentence vectors computed at ingestion) among those that can lead
   (not a parameter list, a heading or a pointer); of those within
   ``answer.passage_anchor_margin`` of the best, the first in the chunk's order (a near tie
   goes to the statement, not to what elaborates it further on); for a yes/no question, the
   best itself (the sentence that says yes or no).
2. **Which part of it.** The chunk's Markdown is read as blocks (``ragstream.common.markdown``); a
   paragraph that ends in ':' and the block it introduces (a command, a configuration block,
   a list, a table) are one *unit*, so the two are never parted. The unit holding the opening
   statement is the *anchor*. The passage runs from the start of the section when the prose
   before the anchor is short (``answer.passage_lead_words``), else from the anchor (a code
   block above the anchor is taken in only when the question asks how or the anchor speaks
   of it: "In this example …"), and takes the units after it while their prose fits
   ``answer.passage_words`` (three times as much when the question asks for every item or
   for detail) and their code ``answer.passage_code_lines`` (a table counts in rows, like
   code, and is kept whole). A paragraph longer than the room left is cut after a whole
   sentence, never after one that ends in ':' whose block would be missing. Nothing is
   stitched: the text is the chunk's own, from one character to another, with its code blocks
   whole.
3. **What it lacks.** The question's terms (stemmed, stop words out, weighted by IDF) that
   neither the passage nor its headings hold are looked for in the other statements A4
   selected from the ReRanker's best sources (the first ``answer.distinct_sources_first`` of
   the selection); at most ``answer.passage_additions`` of them, each adding at least one
   missing term, follow the passage ("Also: …") with their own citations.

``render`` writes the passage under its section's title and citation (a level-4 heading:
``#### Reverse Proxy Guide › Simple reverse proxying [1]``), each paragraph and list item
ending with its ``[n]`` (a citation that closes a paragraph covers its sentences:
``answer.answer_sentences``), a sub-heading inside the section in bold, then the additions.
A5's rules still shape it: a list form (bullets, numbered steps, a checklist) makes each
sentence an item, the command it introduces under it; a limit in sentences or words keeps
that many whole sentences of the passage.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ragstream.common import markdown
from ragstream.common.config import AnswerSettings
from ragstream.common.text import evidence_units, split_sentences
from ragstream.state import edits
from ragstream.state.records import Statement
from ragstream.state.super_prompt import Chunk, SuperPrompt

#: sentences shorter than this are fragments, not statements (as at ingestion)
MIN_WORDS = 3
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_CODE_KINDS = frozenset({"fence", "code", "math"})
#: blocks shown whole and measured in lines, not words: code, and a table (of commands,
#: options, fields) whose rows are read one by one, not as prose
_LINE_KINDS = _CODE_KINDS | {"table"}
_INTRODUCED = frozenset({"fence", "code", "math", "list", "table", "blockquote", "html"})
_ENDS_COLON = re.compile(r":\s*$")
_HEADING_LINE = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
#: a paragraph that only labels what follows: "Solution:", "See also:" (at most three words)
_LABEL = re.compile(r"^\s*[^\W\d_][\w'’/-]*(?:\s+[\w'’/-]+){0,2}\s*:\s*$")
#: the same without its colon or with it: a paragraph that only names what follows
_BARE_LABEL = re.compile(r"^\s*[^\W\d_][\w'’/-]*(?:\s+[\w'’/-]+){0,2}\s*:?\s*$")
#: an API reference's signature line, what the description under it describes (a Sphinx
#: ``dt``: "class csv.DictReader(f, fieldnames=None, …)", "logging.config.dictConfig(config)",
#: "exception json.JSONDecodeError(msg, doc, pos)", "csv.QUOTE_ALL"; in backticks as a whole, as
#: the HTML converter writes it under the entry's heading)
_SIGNATURE = re.compile(
    r"^\s*(?:(?:abstract|async|await|class|classmethod|staticmethod|exception|method|function|"
    r"attribute|data|property|coroutine|final)\s+)*(?=[\w.]*[.(])[A-Za-z_][\w.]*"
    r"(?:\s*\([^\n]*\))?(?:\s*->\s*[^\n]+)?(?:\s*=\s*[^\n]+)?\s*$")
#: a document's copyright or licence notice (the footer a printed page carries as its text)
_NOTICE = re.compile(r"^\s*(?:copyright\b|©|\(c\)\s*\d{4}|all rights reserved\b|"
                     r"licensed under\b)", re.IGNORECASE)


@dataclass(frozen=True)
class Unit:
    """A run of blocks of a chunk that belong together: a paragraph, or one ending in ':' and
    the block it introduces; its character span in the chunk, its prose words and code lines."""

    start: int
    end: int
    kind: str  # the first block's kind
    words: int
    code_lines: int
    introduces: bool  # a paragraph ending in ':' followed by its block
    cuts: tuple[int, ...] = ()  # where it may end early: a paragraph's sentence or a list's item
    shows_code: bool = False  # it holds a code block (a table counts in lines, but is not code)


@dataclass
class Passage:
    """The part of one chunk that answers: its span, text, the sentences in it (as
    statements: what the answer is weighed on) and the sentences added from elsewhere."""

    chunk: Chunk
    start: int
    end: int
    statements: list[Statement]
    additions: list[Statement] = field(default_factory=list)
    why: str = ""

    @property
    def text(self) -> str:
        """The chunk's own text, from the passage's first character to its last."""
        return self.chunk.text[self.start:self.end].strip("\n")


def _line_offsets(text: str) -> list[int]:
    """The character offset of each line's start (and of the end, last)."""
    offsets = [0]
    for m in re.finditer(r"\r\n|\r|\n", text):
        offsets.append(m.end())
    offsets.append(len(text))
    return offsets


def _prose_words(text: str) -> int:
    return len(_WORD.findall(text))


def units(text: str) -> list[Unit]:
    """The chunk's top-level blocks as units (see the module docstring)."""
    doc = markdown.parse(text, front_matter=False)
    offsets = _line_offsets(text)

    def span(block: markdown.Block) -> tuple[int, int]:
        a = offsets[min(block.start, len(offsets) - 1)]
        b = offsets[min(block.end, len(offsets) - 1)]
        return a, b

    out: list[Unit] = []
    blocks = list(doc.blocks)
    i = 0
    while i < len(blocks):
        block = blocks[i]
        a, b = span(block)
        body = text[a:b]
        code = block.end - block.start if block.kind in _LINE_KINDS else 0
        shows_code = block.kind in _CODE_KINDS
        words = 0 if block.kind in _LINE_KINDS else _prose_words(body)
        introduces = False
        cuts: tuple[int, ...] = ()
        if block.kind == "list":
            cuts = tuple(span(item)[1] for item in block.children)
        elif block.kind == "paragraph":
            cuts = tuple(a + e for _, e in split_sentences(body)
                         if not _ENDS_COLON.search(body[:e]))
        if (block.kind == "paragraph" and _ENDS_COLON.search(body) and i + 1 < len(blocks)
                and blocks[i + 1].kind in _INTRODUCED):
            nxt = blocks[i + 1]
            _, b = span(nxt)
            if nxt.kind in _LINE_KINDS:
                code += nxt.end - nxt.start
                shows_code = nxt.kind in _CODE_KINDS
            else:
                words += _prose_words(text[span(nxt)[0]:b])
            # a list it introduces may end after an item; a block is whole or left out
            cuts = tuple(span(item)[1] for item in nxt.children) if nxt.kind == "list" else \
                tuple(c for c in cuts if c <= span(nxt)[0] and not _ENDS_COLON.search(text[a:c]))
            introduces = True
            i += 1
        out.append(Unit(a, b, block.kind, words, code, introduces, cuts, shows_code))
        i += 1
    return out


def _sentences_in(chunk: Chunk, start: int, end: int) -> list[tuple[int, int, str]]:
    """The chunk's prose sentences (``text.evidence_units``) that start inside ``[start,
    end)``; one that runs past ``end`` (a sentence read across list items) is cut there."""
    out = []
    for a, b, clean in evidence_units(chunk.text, MIN_WORDS):
        if start <= a < end:
            if b > end:
                b = end
                clean = " ".join(chunk.text[a:b].split())
            out.append((a, b, clean))
    return out


#: a sentence that opens with one of these leans on what comes before it in its section
_LEANS_BACK = re.compile(r"^\W*(?:this|these|that|those|it|its|they|their|such|here|then|also|"
                         r"however|thus|therefore|so|but|and|or|in (?:the|this) (?:above|case|way)|"
                         r"as (?:above|useful|such|shown)|the above|for (?:example|instance))\b",
                         re.IGNORECASE)


#: a sentence that speaks of the block above it: "In this example the file provider …"
_POINTS_BACK = re.compile(r"\b(?:(?:this|that|these|the above|the preceding|the previous)\s+"
                          r"(?:example|configuration|command|code|snippet|directive|rule|"
                          r"block|setting|line)s?|above)\b", re.IGNORECASE)


def _points_back(text: str, unit: Unit) -> bool:
    """Whether ``unit``'s first sentence speaks of the block just before it (``_POINTS_BACK``):
    the block is what it explains, so the passage takes it in."""
    first = split_sentences(text[unit.start:unit.end])[:1]
    return bool(first) and bool(_POINTS_BACK.search(text[unit.start:unit.start + first[0][1]]))


def _sentence_start(text: str, unit: Unit, at: int) -> int:
    """The start of the sentence of ``unit`` that holds character ``at`` (the unit's start when
    ``at`` lies before its first sentence)."""
    begin = unit.start
    for s, e in split_sentences(text[unit.start:unit.end]):
        if unit.start + s <= at < unit.start + e:
            piece = text[unit.start + s:unit.start + e]
            return unit.start + s + len(piece) - len(piece.lstrip())
    return begin


def _prose_end(text: str, unit: Unit) -> int:
    """Where ``unit``'s prose ends: at its code block's (or table's) first line, else at its
    end."""
    body = text[unit.start:unit.end]
    fence = re.search(r"^\s*(?:```|~~~|    \S|\|)", body, re.MULTILINE)
    return unit.start + (fence.start() if fence else len(body))


#: an example is what a question that asks how wants: a sentence opening with one leads it
_FOR_EXAMPLE = re.compile(r"^\W*for (?:example|instance)\b", re.IGNORECASE)


def _standalone_intro(text: str, unit: Unit, start: int) -> int:
    """From ``start`` (a sentence of ``unit``'s introduction), the first sentence up to the
    block that stands on its own: one that does not lean on what comes before it, or that
    opens an example ("For example, if … moved to /bar/, …as follows:"); ``start`` itself
    when every one of them leans back (the caller then takes the paragraph from its start)."""
    prose_end = _prose_end(text, unit)
    for a, b in split_sentences(text[unit.start:prose_end]):
        at = unit.start + a
        piece = text[at:unit.start + b]
        at += len(piece) - len(piece.lstrip())
        if at < start or not piece.strip():
            continue
        head = text[at:at + 40]
        if not _LEANS_BACK.match(head) or _FOR_EXAMPLE.match(head):
            return at
    return start


def _intro_start(text: str, unit: Unit, room: int) -> int:
    """Where the prose that introduces ``unit``'s block starts: the sentence from which at
    most ``room`` words lead to the block (at least the sentence ending in ':')."""
    prose_end = _prose_end(text, unit)
    spans = [(unit.start + a, unit.start + b) for a, b in split_sentences(text[unit.start:prose_end])
             if text[unit.start + a:unit.start + b].strip()]
    if not spans:
        return unit.start
    start = spans[-1][0]
    for a, _ in reversed(spans[:-1]):
        if _prose_words(text[a:prose_end]) > room:
            break
        start = a
    piece = text[start:prose_end]
    return start + len(piece) - len(piece.lstrip())


def choose_span(chunk: Chunk, anchor_at: int, acfg: AnswerSettings, long: bool = False,
                how: bool = False, scores: Sequence[tuple[int, float]] = ()) -> tuple[int, int]:
    """The passage's span in ``chunk``: from the best sentence (character ``anchor_at``) on,
    what comes before it too when it is short or the sentence leans on it; then the units
    after it that fit; for a question that asks how, up to the first code or configuration
    block (see the module docstring)."""
    text = chunk.text
    parts = units(text)
    if not parts:
        return 0, len(text)
    k = next((i for i, u in enumerate(parts) if u.start <= anchor_at < u.end),
             max(0, min(len(parts) - 1, sum(u.end <= anchor_at for u in parts))))
    scale = 3 if long else 1
    words_room, code_room = acfg.passage_words * scale, acfg.passage_code_lines * scale
    lead_room = acfg.passage_lead_words * scale
    if how:  # the block that does it leads: the one whose introduction states best what was
        # asked (A4's scores), else the first one from the best sentence on (else before it)
        shows = [i for i, u in enumerate(parts) if u.shows_code and u.code_lines <= code_room]

        def said(i: int) -> float:
            lo = parts[i - 1].start if i > 0 and not parts[i].introduces else parts[i].start
            return max((sc for at, sc in scores if lo <= at < parts[i].end), default=-1.0)

        best = max(shows, key=said, default=None)
        block = best if best is not None and said(best) >= 0 else \
            next((i for i in shows if i >= k), shows[-1] if shows else None)
        if block is not None:
            if not parts[block].introduces and block > 0 and parts[block - 1].kind == "paragraph":
                block -= 1  # the paragraph just above a block introduces it
            at = _intro_start(text, parts[block], lead_room)
            k, anchor_at = block, at
    start = _sentence_start(text, parts[k], anchor_at) if parts[k].kind == "paragraph" \
        else parts[k].start
    if how and parts[k].kind == "paragraph":  # the block's introduction opens on a sentence
        start = _standalone_intro(text, parts[k], start)  # that does not lean on the one before
    before = _prose_words(text[parts[k].start:start])
    if start > parts[k].start and (before <= lead_room and not how
                                   or _LEANS_BACK.match(text[start:start + 40])
                                   and not (how and _FOR_EXAMPLE.match(text[start:start + 40]))):
        start = parts[k].start
    first = k
    if start == parts[k].start:  # the units before it, while the prose before stays short
        before = 0
        while first > 0 and before + parts[first - 1].words <= (0 if how else lead_room) \
                and parts[first - 1].code_lines <= code_room \
                and (not parts[first - 1].code_lines or how and parts[first - 1].shows_code
                     or _points_back(text, parts[first])) \
                and not (how and parts[first - 1].words):
            first -= 1
            before += parts[first].words
        start = parts[first].start
    if first > 0 and start == parts[first].start and _is_signature(text, parts[first - 1]):
        first -= 1  # what the description describes: its signature line leads
        start = parts[first].start
    used_words = _prose_words(text[start:parts[k].start]) if first < k else 0
    used_code = sum(u.code_lines for u in parts[first:k])
    end, has_code = start, any(u.shows_code for u in parts[first:k])
    # the section's end is not left out for a few words: what is left of the chunk after a
    # unit fits when it is at most a fifth of the room (the section's closing sentence)
    slack = words_room // 5
    for i in range(k, len(parts)):
        u = parts[i]
        words = u.words if u.start >= start else _prose_words(text[start:u.end])
        rest = sum(p.words for p in parts[i:]) if i > k else float("inf")
        fits = (used_words + words <= words_room
                or used_words + rest <= words_room + slack
                and not sum(p.code_lines for p in parts[i:])) \
            and used_code + u.code_lines <= code_room
        # a how-to question is answered by its block: reach the first one, prose permitting
        reach = how and not has_code and used_words + words <= 2 * words_room \
            and used_code + u.code_lines <= code_room
        if fits or reach:
            used_words += words
            used_code += u.code_lines
            has_code = has_code or u.shows_code
            end = u.end
            if reach and not fits and has_code:
                break
            continue
        # it does not fit whole: a paragraph ends after a sentence, a list after an item
        room = words_room - used_words
        kept = [c for c in u.cuts if c > max(start, u.start)
                and _prose_words(text[max(start, u.start):c]) <= room]
        if kept:
            end = kept[-1]
        elif i == k and u.cuts:  # the anchor's unit keeps at least its first part
            end = next((c for c in u.cuts if c > start), u.end)
        elif i == k:
            end = u.end
        break
    end = _no_notice(text, parts, k, end)
    return start, _no_dangling_label(text, parts, start, _no_dangling_colon(text, parts, start, end))


def _is_signature(text: str, unit: Unit) -> bool:
    """Whether ``unit`` is an API reference's signature line (``_SIGNATURE``): one line, no
    code block."""
    line = text[unit.start:unit.end].strip()
    if len(line) > 2 and line[0] == line[-1] == "`":  # the whole line as code
        line = line.strip("`").strip()
    return unit.kind == "paragraph" and not unit.code_lines and "\n" not in line \
        and bool(_SIGNATURE.match(line))


def _no_notice(text: str, parts: Sequence[Unit], k: int, end: int) -> int:
    """``end``, or where the units before end, when the passage would close on a copyright or
    licence notice after its anchor unit ``k`` (a printed page's footer): the notice answers
    nothing asked. A notice that is itself the anchor stays."""
    inside = [i for i, u in enumerate(parts) if i > k and u.end <= end]
    while inside and parts[inside[-1]].kind == "paragraph" \
            and _NOTICE.match(text[parts[inside[-1]].start:parts[inside[-1]].end]):
        end = parts[inside.pop() - 1].end
    return end


def _no_dangling_colon(text: str, parts: Sequence[Unit], start: int, end: int) -> int:
    """``end``, or an earlier place where a sentence or item ends, so that the passage never
    ends on a sentence ending in ':' whose block is not in it (the chunk ended there: its
    block is in the next chunk); ``end`` when no such place is left after ``start``."""
    if not _ENDS_COLON.search(text[start:end].rstrip()):
        return end
    places = sorted({c for u in parts for c in (*u.cuts, u.end) if start < c < end})
    for c in reversed(places):
        if not _ENDS_COLON.search(text[start:c].rstrip()) and text[start:c].strip():
            return c
    return end


def _no_dangling_label(text: str, parts: Sequence[Unit], start: int, end: int) -> int:
    """``end``, or where the unit before ends, when the passage's last unit is a bare label of
    at most three words ("Warning", "outfile": the title of an admonition or of a term whose
    text the passage leaves out), so that it never ends on one."""
    inside = [u for u in parts if start <= u.start and u.end <= end]
    if len(inside) > 1 and inside[-1].kind == "paragraph" \
            and not text[inside[-1].end:end].strip() \
            and _BARE_LABEL.match(text[inside[-1].start:inside[-1].end]):
        return inside[-2].end
    return end


def passage_statements(chunk: Chunk, start: int, end: int,
                       known: Sequence[Statement]) -> list[Statement]:
    """The sentences of ``chunk[start:end]`` as statements, in their order: A4's own statement
    for a sentence it selected (its score kept), else a new one."""
    by_span = {s.span: s for s in known if s.chunk_ids[:1] == [chunk.id] and s.span}
    out: list[Statement] = []
    for a, b, clean in _sentences_in(chunk, start, end):
        mine = by_span.get((a, b))
        out.append(mine if mine is not None else
                   Statement(text=clean, kind="fact", chunk_ids=[chunk.id], span=(a, b)))
    return out


def removed_keys(sp: SuperPrompt) -> set[str]:
    """The statements a person removed from A4's (``edits.statement_key``): never quoted."""
    return {e.target for e in edits.of_stage(sp.edits, "A4_Condenser")
            if e.kind == "statement_remove" and e.target}


def lead_passage(sp: SuperPrompt, opening: Statement | None, acfg: AnswerSettings,
                 others: Sequence[Statement], terms: Callable[[str], set[str]] | None,
                 weights: Callable[[list[str]], dict[str, float]] | None,
                 long: bool = False, can_add: Callable[[str], bool] = lambda _: True,
                 how: bool = False,
                 sentence_scores: Callable[[Chunk], Sequence[tuple[int, int, float]]] | None = None,
                 can_lead: Callable[[str], bool] = lambda _: True,
                 yes_no: bool = False) -> Passage | None:
    """The passage the answer leads with (see the module docstring), or None when there is
    no document chunk to quote (the answer then falls back to statements)."""
    chunks = sp.chunk_map()
    pinned = [c for c in edits.chunk_edits(sp.edits).kept
              if c in chunks and c in sp.final_selection_ids and not chunks[c].from_conversation]
    chunk: Chunk | None = None
    anchor_at: int | None = None
    if pinned:
        chunk, why = chunks[pinned[0]], "the chunk you pinned"
    elif opening is not None and opening.chunk_ids and opening.chunk_ids[0] in chunks \
            and not chunks[opening.chunk_ids[0]].from_conversation and opening.span:
        chunk, anchor_at = chunks[opening.chunk_ids[0]], opening.span[0]
        why = "the section about the name the question asks about"
    else:
        chunk = next((chunks[c] for c in sp.final_selection_ids
                      if c in chunks and not chunks[c].from_conversation), None)
        why = "the ReRanker's best source"
    if chunk is None or not chunk.text.strip():
        return None
    scored = list(sentence_scores(chunk)) if sentence_scores is not None else \
        [(s.span[0], s.span[1], s.score) for s in others
         if s.chunk_ids[:1] == [chunk.id] and s.span and s.score is not None]
    if anchor_at is None:  # the sentence of the chunk that best states what was asked
        fit = [(a, sc) for a, b, sc in scored if can_lead(chunk.text[a:b])] or \
            [(a, sc) for a, _, sc in scored]
        best = max((sc for _, sc in fit), default=0.0)  # of those near the best, the first;
        # a yes/no question wants the sentence that says yes or no: the best itself
        margin = 0.0 if yes_no else acfg.passage_anchor_margin
        anchor_at = min((a for a, sc in fit if sc >= best - margin), default=0)
    scores = [(a, sc) for a, _, sc in scored]
    start, end = choose_span(chunk, anchor_at, acfg, long, how, scores)
    statements = passage_statements(chunk, start, end, others)
    gone = removed_keys(sp)
    statements = [s for s in statements if edits.statement_key(s) not in gone]
    passage = Passage(chunk, start, end, statements, why=why)
    if terms is not None and weights is not None and acfg.passage_additions:
        passage.additions = additions(sp, passage, [s for s in others if can_add(s.text)],
                                      terms, weights, acfg)
    return passage


def additions(sp: SuperPrompt, passage: Passage, others: Sequence[Statement],
              terms: Callable[[str], set[str]], weights: Callable[[list[str]], dict[str, float]],
              acfg: AnswerSettings) -> list[Statement]:
    """Sentences of other chunks that hold question terms the passage lacks (see the module
    docstring), best score first, each adding at least one term still missing."""
    question = sp.question
    asked = sorted(terms(question))
    if not asked:
        return []
    have = terms(f"{passage.chunk.heading_label}\n{passage.text}")
    missing = {t for t in asked if t not in have}
    w = weights(asked)
    total = sum(w.get(t, 0.0) for t in asked) or 1.0
    if sum(w.get(t, 0.0) for t in missing) / total < acfg.passage_missing_share:
        return []
    near = set(sp.final_selection_ids[:acfg.distinct_sources_first])  # the ReRanker's best
    out: list[Statement] = []
    for s in others:
        if len(out) >= acfg.passage_additions or not missing:
            break
        if not s.chunk_ids or s.chunk_ids[0] == passage.chunk.id or s.by_you \
                or s.chunk_ids[0] not in near:
            continue
        adds = terms(s.text) & missing
        if adds:
            out.append(s)
            missing -= adds
    return out


def trim(passage: Passage, max_words: int | None, max_sentences: int | None) -> Passage:
    """The passage within a length A5's rules ask for: its first whole sentences while their
    words and number fit (at least one), without the additions; as it is when it fits."""
    words = _prose_words(passage.text)
    count = len(passage.statements) + len(passage.additions)
    if (max_words is None or words <= max_words) and (max_sentences is None
                                                      or count <= max_sentences):
        return passage
    kept: list[Statement] = []
    used = 0
    for s in passage.statements:
        n = _prose_words(s.text)
        if kept and ((max_words is not None and used + n > max_words)
                     or (max_sentences is not None and len(kept) >= max_sentences)):
            break
        kept.append(s)
        used += n
    end = max((s.span[1] for s in kept if s.span), default=passage.end)
    return Passage(passage.chunk, passage.start, end, kept, [], passage.why)


# --------------------------------------------------------------------------- rendering


def title_of(chunk: Chunk) -> str:
    """What the passage is headed with: its section (the innermost heading and the one above
    it, ``Reverse Proxy Guide › Simple reverse proxying``), else its document's title or
    file name; a paged document's page after it."""
    path = [h.strip() for h in chunk.heading_path if h.strip()]
    title = " › ".join(path[-2:]) if path else (chunk.title or chunk.source)
    return f"{title} ({chunk.page_label})" if chunk.page else title


def _cited(text: str, mark: str) -> str:
    """``text`` (Markdown) with ``mark`` closing every paragraph (in lists and quotes too) and
    a heading inside it made bold: a citation that closes a paragraph covers its sentences."""
    lines = text.split("\n")
    ends: set[int] = set()
    labels: set[int] = set()
    headings: set[int] = set()  # the parser's own headings: a "# …" line in code is code
    for block in markdown.parse(text, front_matter=False).walk():
        if block.kind == "heading":
            headings.add(block.start)
        if block.kind == "paragraph" and block.end > block.start:
            last = block.end - 1
            while last > block.start and not lines[last].strip():
                last -= 1
            ends.add(last)
            if last == block.start and _LABEL.match(lines[last]):
                labels.add(last)
    out = []
    for i, line in enumerate(lines):
        head = _HEADING_LINE.match(line) if i in headings else None
        if head:
            out.append(f"**{head.group(2)}**")
        elif i in labels:  # "Solution:", "Note:": a paragraph that labels, not a statement
            out.append(f"**{line.strip()}**")
        elif i in ends and line.strip():
            out.append(f"{line.rstrip()} {mark}")
        else:
            out.append(line)
    return "\n".join(out)


def render(passage: Passage, number: dict[str, int]) -> list[str]:
    """The passage as the answer's pieces: its title and citation, its text (each paragraph
    cited), then the additions with their own citations (see the module docstring)."""
    n = number.get(passage.chunk.id)
    mark = f"[{n}]" if n else ""
    pieces = [f"#### {title_of(passage.chunk)} {mark}".rstrip() + "\n\n"]
    body = _cited(passage.text, mark) if mark else passage.text
    pieces.extend(p for p in re.split(r"(?<=\n\n)", body.strip("\n") + "\n") if p)
    if passage.additions:
        said = " ".join(f"{s.text} {''.join(f'[{number[c]}]' for c in s.chunk_ids if c in number)}"
                        .rstrip() for s in passage.additions)
        pieces.append(f"\nAlso: {said}\n")
    return pieces
