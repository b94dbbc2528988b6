"""Small text helpers shared by ingestion, retrieval and the condenser."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from functools import lru_cache

from ragstream.common.markdown import BlockKind, spans_outside

# A sentence ends at . ! ? (optionally followed by closing quotes/brackets) and whitespace,
# unless the dot belongs to a common abbreviation, an initial or a number like 3.5.
_ABBREVIATIONS = {
    "e.g", "i.e", "etc", "vs", "cf", "dr", "mr", "mrs", "ms", "prof", "fig", "eq", "no",
    "al", "approx", "inc", "ltd", "st", "z.b", "bzw", "usw", "ca", "sec", "ch", "vol",
}
_END = re.compile(r"[.!?][\"')\]]*(?=\s+)|\n\s*\n")
_WORD = re.compile(r"\w+", re.UNICODE)


def split_sentences(text: str) -> list[tuple[int, int]]:
    """Character spans ``(start, end)`` of the sentences in ``text``.

    Spans cover the text without gaps or overlaps (whitespace between sentences belongs to
    the following sentence's leading part and is stripped by callers), so
    ``"".join(text[s:e] for s, e in spans) == text``. Blank lines end a sentence too, so list
    items and headings don't merge into one run-on sentence.
    """
    spans: list[tuple[int, int]] = []
    start = 0
    for m in _END.finditer(text):
        end = m.end()
        if m.group(0).startswith((".",)):
            before = text[start:m.start()]
            last = before.rsplit(None, 1)[-1] if before.split() else ""
            token = last.lower().lstrip("(\"'")
            if token in _ABBREVIATIONS or (len(token) == 1 and token.isalpha()):
                continue
            if m.start() + 1 < len(text) and text[m.start() + 1:m.start() + 2].isdigit():
                continue
        if text[start:end].strip():
            spans.append((start, end))
            start = end
    if start < len(text):
        if text[start:].strip() or not spans:
            spans.append((start, len(text)))
        else:
            s, _ = spans[-1]
            spans[-1] = (s, len(text))
    return spans


def sentences(text: str) -> list[str]:
    """The non-empty sentences of ``text``, stripped."""
    return [text[s:e].strip() for s, e in split_sentences(text) if text[s:e].strip()]


def fold(text: str) -> str:
    """NFKC, accents removed, case-folded, whitespace collapsed — for matching, never display."""
    text = unicodedata.normalize("NFKC", text)
    text = "".join(
        ch for ch in unicodedata.normalize("NFKD", text) if not unicodedata.combining(ch)
    )
    text = text.replace("ß", "ss")
    return re.sub(r"\s+", " ", text).strip().casefold()


def words(text: str) -> list[str]:
    """The words of ``text``, case-folded (runs of word characters)."""
    return _WORD.findall(text.casefold())


def shingles(text: str, n: int = 3) -> set[tuple[str, ...]]:
    """The set of ``n``-word shingles of ``text`` (all its words as one when there are fewer)."""
    w = words(text)
    if len(w) < n:
        return {tuple(w)} if w else set()
    return {tuple(w[i:i + n]) for i in range(len(w) - n + 1)}


def jaccard(a: set, b: set) -> float:
    """Jaccard similarity of two sets (1.0 when both are empty)."""
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


@lru_cache(maxsize=1024)
def _keyword_regex(keywords: tuple[str, ...]) -> re.Pattern[str] | None:
    """One alternation over ``keywords``, longest first, for ``fold``-ed text.

    Group ``k<i>`` is keyword ``i``. Longest first makes matches non-overlapping and
    greedy: "code block" counts once, not also as "code".
    """
    parts = []
    order = sorted(range(len(keywords)),
                   key=lambda i: (-len(fold(keywords[i]).rstrip("*")), i))
    for i in order:
        kw = fold(keywords[i])
        core = re.escape(kw.rstrip("*").strip())
        if core:
            parts.append(rf"(?P<k{i}>{core}" + (r"\w*" if kw.endswith("*") else r"(?!\w)") + ")")
    return re.compile(r"(?<!\w)(?:" + "|".join(parts) + ")") if parts else None


def keyword_matches(keywords: Sequence[str], folded_text: str) -> list[tuple[int, int, str]]:
    """``(start, end, keyword)`` for every match of ``keywords`` in ``folded_text`` (text that
    went through ``fold``), left to right, non-overlapping. A keyword is folded like the
    text, matches whole words only, and may end in ``*`` to match any word starting with it."""
    pattern = _keyword_regex(tuple(keywords))
    if pattern is None:
        return []
    out = []
    for m in pattern.finditer(folded_text):
        group = m.lastgroup  # "k<i>": every alternative of the pattern is one named group
        if group is None:  # pragma: no cover - cannot happen, see above
            raise AssertionError(f"keyword pattern matched {m.group(0)!r} outside its groups")
        out.append((m.start(), m.end(), keywords[int(group[1:])]))
    return out


# --------------------------------------------------------------------------- evidence units

#: blocks that are never evidence: code, tables, math, headings, raw HTML and rules
_NOT_PROSE: frozenset[BlockKind] = frozenset(
    {"fence", "code", "table", "math", "heading", "html", "hr"}
)
# A sentence is cleaned from its own span, without the document around it (the index cleans
# stored spans again), so list markers are found per line here, not by the Markdown parser.
_LIST_MARK = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")


def clean_sentence(sentence: str) -> str:
    """One line of prose: list markers and Markdown emphasis removed, whitespace collapsed."""
    lines = [_LIST_MARK.sub("", ln).strip() for ln in sentence.splitlines()]
    return re.sub(r"\s+", " ", " ".join(ln for ln in lines if ln)).replace("**", "").strip()


def evidence_units(text: str, min_words: int = 3) -> list[tuple[int, int, str]]:
    """The prose sentences of a chunk that can serve as evidence: ``(start, end, clean text)``.

    The text is read as Markdown (``ragstream.common.markdown``): code blocks, tables, math blocks,
    headings, HTML blocks and rules are skipped, and so are fragments shorter than
    ``min_words`` words; ``start:end`` is the sentence's span in ``text`` and the clean text is
    what is embedded at ingestion and quoted by the condenser. The ReRanker's evidence signal
    and A4 both read these units, so they are embedded once, when the document is ingested.
    """
    out: list[tuple[int, int, str]] = []
    for start, end in spans_outside(text, _NOT_PROSE):
        for s, e in split_sentences(text[start:end]):
            raw = text[start + s:start + e]
            clean = clean_sentence(raw)
            if len(clean.split()) >= min_words:
                mark = _LIST_MARK.match(raw)  # the span starts at the sentence, after a list marker
                lead = mark.end() if mark else len(raw) - len(raw.lstrip())
                out.append((start + s + lead, start + e, clean))
    return out


def asks_how(question: str, cues: Sequence[str]) -> bool:
    """Whether ``question`` asks how to do something: it holds one of ``cues`` (phrases, any
    case, matched on word boundaries: ``reranker.how_cues``)."""
    folded = " " + " ".join(_WORD.findall(question.casefold())) + " "
    return any(" " + " ".join(_WORD.findall(c.casefold())) + " " in folded for c in cues)


#: a yes/no question: its main clause opens with an auxiliary ("Is it closed at the end?",
#: "If I use it in a with block, is it closed?")
_YES_NO = re.compile(r"^\W*(?:is|are|was|were|do|does|did|can|could|will|would|should|shall|"
                     r"may|might|must|has|have|had|isn't|aren't|doesn't|don't|can't|won't)\b",
                     re.IGNORECASE)


def asks_yes_no(question: str) -> bool:
    """Whether ``question`` asks yes or no: its last question's main clause (after a leading
    condition's comma) opens with an auxiliary verb."""
    spans = [(a, b) for a, b in split_sentences(question) if question[a:b].strip()]
    last = question[spans[-1][0]:spans[-1][1]].strip() if spans else ""
    clause = last.rsplit(",", 1)[-1] if re.match(r"^\W*(?:if|when|once|after|before)\b",
                                                 last, re.IGNORECASE) else last
    return bool(_YES_NO.match(clause))


#: "how does X work?": the closing "work" frames the question, it is not its subject
_HOW_WORK = re.compile(r"^(\W*how\s+(?:does|do|did|will|would|can|could|should)\s+.+?)\s+work(?:s|ing)?"
                       r"(\s+(?:in|with|for|on|at|under)\b.*)?\s*([?.!]*)\s*$",
                       re.IGNORECASE | re.DOTALL)


def without_frame(question: str) -> str:
    """``question`` without the words that only frame it: "How does reranking work?" is about
    reranking, not about work ("How does reranking in A3 work with pins?" keeps "in A3 …")."""
    m = _HOW_WORK.match(question)
    if m is None:
        return question
    return f"{m.group(1)}{m.group(2) or ''}{m.group(3)}"
