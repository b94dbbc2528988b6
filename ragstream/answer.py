"""The final answer of auto mode: the step after Prompt_Builder (seeds 002, 003, 004).

``answer(sp, cfg, services, on_token)`` needs the whole pipeline to have run and gives an
``Answer`` in one of three modes:

* ``no-results`` — nothing in the knowledge base is close enough: no chunk passed the A3 gate,
  or the best dense similarity of the retrieval stage is below ``answer.min_dense_score``.
  The LLM is not called; the answer says so plainly and names what the knowledge base does
  cover (document titles, sorted). Confidence is Low.
* ``llm`` — an endpoint is configured: System_MD and the citation rule (``CITATION_RULE``)
  are the system message, the rest of ``prompt_ready`` (Prompt_MD, S_CTX_MD, Attachments_MD,
  recent conversation) the user message — within the answer's prompt budget
  (``answer.max_prompt_tokens`` and ``llm.context_window``): whole source texts that do not
  fit are left out (S_CTX_MD cites the same numbers), then the conversation. The answer
  streams; ``on_token`` gets each piece. If the endpoint fails, the extractive answer is given
  instead and the error is kept in ``Answer.error``.
  Once it has streamed, the answer's citations are checked (``answer.check_citations``,
  ``citation_checks``): some sentence (of at least ``answer.min_sentence_words`` words) cites
  a valid source; every ``[n]`` names a source of the Sources block; one of its first
  ``answer.lead_sentences`` (3) sentences cites one of the first ``answer.top_sources`` (1)
  sources — the ReRanker's strongest evidence leads, as in the extractive answer; and each
  sentence that cites shares at least
  ``answer.min_shared_terms`` content terms (the keyword index's stemmed, stop-word-free
  ``terms``; a sentence with fewer needs all it has) with one of the sources it cites. An
  answer that fails is *set aside*: after ``SET_ASIDE_NOTICE`` the extractive answer streams
  and becomes the answer (``text``, ``citations``, confidence — mode ``extractive``,
  ``mode_reason`` "the model's answer was set aside: …"); the model's text is kept in
  ``Answer.set_aside`` and the failed checks, each naming its setting, in
  ``Answer.set_aside_reason``; its model, usage and first-token time stay recorded. An answer
  that passes keeps mode ``llm``, and ``Answer.checks`` says what it passed. ``unsupported``
  and ``extractive_text`` describe the answer given, so they stay empty here: the given
  answer is the cited extractive one. With ``check_citations`` off, the answer is kept
  whatever it cites; one none of whose sentences cites a valid source is *unsupported*
  (``Answer.unsupported`` says why) and, with ``answer.offer_extractive``, the extractive
  answer is kept beside it (``Answer.extractive_text``).
  The answer's *form* (``answer.form``): ``text`` is free Markdown as above; ``sentences``
  asks for JSON constrained by a schema — ``{"sentences": [{"text", "sources": [n, …]}]}``,
  at most ``answer.max_sentences`` sentences, each naming at least one of the source numbers
  (an ``enum``) — rendered as Markdown with the ``[n]`` after each sentence and streamed
  sentence by sentence as the JSON arrives, and checked as free text is. ``auto`` picks
  sentences for a llama.cpp or Ollama endpoint (small local models drop ``[n]`` in free
  text) unless A5 asks for a format that is no list of sentences (table, code, JSON, YAML,
  email).
* ``extractive`` — no endpoint (or a failed call, or a model's answer set aside): a short
  answer from A4's statements (``extractive_statements``): the best one first, then the
  best of the next sources, then the rest by score; those that only mention the question's
  words (a worked example, a quoted prompt, a list of file names: ``mention_only``) left
  out; at most ``answer.max_sentences`` (the prompt's own length, or ``max_sentences_long``
  for "list every …"/"in detail"), each with its ``[n]``, and the command a sentence ending
  in ':' introduces. A paragraph, or a list when A5 asks for one.
  ``prompt_ready`` keeps the whole condensed context. Deterministic; ``on_token`` gets it
  sentence by sentence.

Citations ``[n]`` (also ``[1, 2]``, ``[1][2]``, ``[1-3]``) are parsed from the text and mapped to
``final_selection_ids[n-1]`` — the numbering of the Sources block. A number naming no source
is an invalid citation: listed (``valid=False``, ``invalid_citations``), never shown as a
source, and it lowers the confidence.

Confidence (High / Medium / Low, with its reason) comes from the best dense and rerank scores
and the share of the answer's sentences that cite a valid source; thresholds are in
``answer`` of ``config/settings.json``.

``answer_and_log`` is what the engine and the GUI call: answer, store it on a copy of the
``SuperPrompt`` and record the interaction in the QA log.
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Callable, Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from pydantic import BaseModel, ValidationError

from ragstream import controller, edits, markdown, staleness
from ragstream.agents.replies import Items, Text, bound, outline
from ragstream.config import AnswerSettings, AppConfig
from ragstream.errors import SchemaVersionError, StageOrderError, StaleResultError
from ragstream.records import QALogRecord, Statement
from ragstream.render import build_query, citation_marks
from ragstream.super_prompt import (
    Answer,
    AnswerUsage,
    Chunk,
    Citation,
    ConversationTurn,
    SuperPrompt,
    View,
)
from ragstream.text import fold, split_sentences

NAME = "Answer"
TokenCallback = Callable[[str], None]

NO_RESULTS_LEAD = "I couldn't find this in the knowledge base."
EMPTY_KB = ("The knowledge base is empty: ingest documents first "
            "(python -m ragstream ingest data/kb).")
NO_STATEMENTS = ("The selected sources did not yield a statement that answers this; "
                 "see the Sources block of the super-prompt.")
FALLBACK_NOTICE = ("_The answer stream broke off; below is an extractive answer from the "
                   "sources instead._")
SET_ASIDE_NOTICE = ("_The model's answer failed the citation checks and is set aside; below is "
                    "an extractive answer from the sources instead._")
#: a sentence that fails the content check is quoted up to this many characters …
QUOTE_CHARS = 80
#: … and this many of them are named
QUOTED_SENTENCES = 2
_LEVELS = ("Low", "Medium", "High")
CITATION_RULE = (
    "## Citations (mandatory)\n"
    "Answer only from the numbered sources in the user's message (the condensed context and "
    "the Sources block). End every sentence that uses a source with its number in square "
    "brackets, e.g. [1] or [2, 3]. Never cite a number that is not listed. If the sources do "
    "not answer the question, say so in one sentence.")
#: closes the user message: small models follow the last thing they read
ANSWER_CUE = ("## Your answer\n"
              "Answer the task in a few full sentences. Use only the facts above, and copy "
              "each fact's [number] to the end of the sentence that uses it.")
UNSUPPORTED = ("no sentence of it cites a valid source: nothing in it can be checked against "
               "the knowledge base")
SOURCES_LEFT_OUT = ("## Sources\n\n_The whole source texts are left out to fit the model's "
                    "context window; the condensed context above cites them by number._\n")

SENTENCES_RULE = (
    "## Citations (mandatory)\n"
    "Answer only from the numbered sources in the user's message (the condensed context and "
    "the Sources block). Reply with one JSON object and nothing else: the answer as a list of "
    "sentences, each with the numbers of the sources it states, e.g. "
    '{{"sentences": [{{"text": "Chunks are split at headings.", "sources": [2]}}]}}. '
    "Copy or shorten the facts; never state what no source says.\n"
    "Shape: {shape}")
SENTENCES_CUE = ("## Your answer\n"
                 "Answer the task in at most {n} sentences, most important first. Use only the "
                 "facts above; give each sentence the [number]s of the facts it uses.")
#: A5's kinds that are no list of sentences: ``auto`` writes them as free text
TEXT_KINDS = frozenset({"table", "code", "json", "yaml", "email"})
#: A5's kinds that the sentence form renders as a list
LIST_MARKS = {"bullet_list": "- ", "checklist": "- [ ] ", "numbered_list": "{i}. "}


class AnswerSentence(BaseModel):
    """One sentence of a ``sentences``-form answer and the source numbers it states."""

    text: Text(400)  # type: ignore[valid-type]
    sources: Items(int, 4)  # type: ignore[valid-type]


class SentencesReply(BaseModel):
    """The ``sentences``-form answer (bounded per call by ``sentences_schema``)."""

    sentences: Items(AnswerSentence, 50)  # type: ignore[valid-type]


# [3]  [1, 2]  [1-3]  [1–3]  [Citation 2]  — not arr[0] (after a word character), not [1](url)
_CITE = re.compile(
    r"(?<!\w)\[\s*(?:(?:citation|source|doc(?:ument)?)\s*)?"
    r"(\d+(?:\s*(?:[-–—]|,|;)\s*\d+)*)\s*\](?!\()",
    re.IGNORECASE)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_BOLD_LINE = re.compile(r"^\s*(\*\*|__)[^*_]+\1\s*:?\s*$")
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_LEADING_CITES = re.compile(r"^(?:\s*" + _CITE.pattern + r")+", re.IGNORECASE)


# --------------------------------------------------------------------------- citations


def strip_code(text: str) -> str:
    """The text without code blocks (fenced or indented) and inline code: no citations live there."""
    if "\n" not in text:  # one line holds no code block: skip the parser (called per sentence)
        return _INLINE_CODE.sub(" ", text)
    outside = "\n".join(text[a:b] for a, b in markdown.spans_outside(text, {"fence", "code"}))
    return _INLINE_CODE.sub(" ", outside)


def citation_numbers(text: str, max_range: int) -> list[int]:
    """Every citation number in ``text``, in order of first appearance.

    ``[a-b]`` expands to a..b when it spans at most ``max_range`` numbers, else to a and b."""
    out: list[int] = []
    for m in _CITE.finditer(strip_code(text)):
        for part in re.split(r"\s*[,;]\s*", m.group(1).strip()):
            bounds = [int(x) for x in re.split(r"\s*[-–—]\s*", part) if x]
            nums: Sequence[int]
            if len(bounds) == 2:
                lo, hi = min(bounds), max(bounds)
                nums = range(lo, hi + 1) if hi - lo < max_range else (lo, hi)
            else:
                nums = bounds
            for n in nums:
                if n not in out:
                    out.append(n)
    return out


def map_citations(numbers: list[int], sp: SuperPrompt) -> tuple[list[Citation], list[int]]:
    """``[n]`` → ``final_selection_ids[n-1]`` → its chunk. Returns (citations by n, invalid)."""
    chunks = sp.chunk_map()
    ids = sp.final_selection_ids
    cites: list[Citation] = []
    for n in sorted(set(numbers)):
        chunk: Chunk | None = chunks.get(ids[n - 1]) if 1 <= n <= len(ids) else None
        if chunk is None:
            cites.append(Citation(n=n, valid=False))
        else:
            cites.append(Citation(
                n=n, chunk_id=chunk.id, source=chunk.source,
                section=chunk.heading_label or chunk.section, title=chunk.title,
                label=chunk.citation_label))
    return cites, [c.n for c in cites if not c.valid]


# --------------------------------------------------------------------------- sentences


def answer_sentences(text: str, min_words: int) -> list[str]:
    """The sentences of an answer that count for the cited share.

    The answer's Markdown is read by ``ragstream.markdown``: paragraphs (in lists and quotes
    too) and table body rows count; code, headings, table header rows and labels (a bold-only
    line, or a line ending in ':' that cites nothing — "Start it with: [1]" before its command
    counts) do not; nor do sentences of fewer than ``min_words`` words. A citation
    that opens a sentence ("… fast. [2] Next …") belongs to the sentence before it.
    """
    texts: list[str] = []
    lines = text.splitlines()
    for block in markdown.parse(text, front_matter=False).walk():
        if block.kind == "paragraph":
            texts.append(" ".join(block.text.split()))
        elif block.kind == "table":  # the body rows, their cells as one text each
            texts.extend(" ".join(c.strip() for c in row.strip().strip("|").split("|"))
                         for row in lines[block.start + 2:block.end] if row.strip())

    out: list[str] = []
    for piece in texts:
        for a, b in split_sentences(piece):
            sent = piece[a:b].strip()
            lead = _LEADING_CITES.match(sent)
            if lead and out:
                out[-1] += " " + lead.group(0).strip()
                sent = sent[lead.end():].strip()
            if not sent:
                continue
            out.append(sent)
    return [s for s in out
            if not _BOLD_LINE.match(s)
            and not (_CITE.sub("", s).rstrip().endswith(":") and not _CITE.search(s))
            and len(_WORD.findall(_CITE.sub(" ", strip_code(s)))) >= min_words]


def cited_share(text: str, valid: set[int], acfg: AnswerSettings) -> tuple[int, int]:
    """(sentences citing at least one valid source, sentences counted)."""
    sents = answer_sentences(text, acfg.min_sentence_words)
    cited = sum(1 for s in sents
                if any(n in valid for n in citation_numbers(s, acfg.max_citation_range)))
    return cited, len(sents)


# --------------------------------------------------------------------------- citation checks


def term_reader(services, cfg: AppConfig) -> Callable[[str], set[str]]:
    """The keyword index's ``terms`` (stemmed, stop words out), as retrieval reads text."""
    kw = getattr(services, "keyword_index", None)
    if kw is None:
        from ragstream.backends.keyword_index import KeywordIndex

        kw = KeywordIndex(cfg.settings.retrieval.stemmer, cfg.settings.retrieval.stopwords)
    return kw.terms


def _quote(sentence: str) -> str:
    flat = " ".join(sentence.split())
    return f'"{flat[:QUOTE_CHARS].rstrip()}…"' if len(flat) > QUOTE_CHARS else f'"{flat}"'


def weak_sentences(text: str, sp: SuperPrompt, acfg: AnswerSettings,
                   terms: Callable[[str], set[str]]) -> list[str]:
    """The sentences of ``text`` that cite a source but share fewer than
    ``answer.min_shared_terms`` content terms (``terms``; at most as many as the sentence has)
    with each source they cite (its title, headings and text)."""
    chunks, ids = sp.chunk_map(), sp.final_selection_ids
    known: dict[int, set[str]] = {}
    weak: list[str] = []
    for sentence in answer_sentences(text, 1):
        nums = [n for n in citation_numbers(sentence, acfg.max_citation_range)
                if 1 <= n <= len(ids) and ids[n - 1] in chunks]
        if not nums:  # cites nothing, or only numbers naming no source (the range check's)
            continue
        own = terms(_CITE.sub(" ", sentence))
        need = min(acfg.min_shared_terms, len(own))
        if need == 0:
            continue
        for n in nums:
            if n not in known:
                chunk = chunks[ids[n - 1]]
                known[n] = terms(f"{chunk.title}\n{chunk.heading_label}\n{chunk.text}")
        if not any(len(own & known[n]) >= need for n in nums):
            weak.append(sentence)
    return weak


def top_label(top: int) -> str:
    """"source [1]" or "one of the top 3 sources"."""
    return "source [1]" if top == 1 else f"one of the top {top} sources"


def citation_checks(text: str, sp: SuperPrompt, acfg: AnswerSettings,
                    terms: Callable[[str], set[str]]) -> tuple[list[str], str]:
    """Check an LLM answer's citations (see the module docstring). Returns the checks it
    fails, each naming its setting (none: it passes), and a line saying what it passed."""
    n_sources = len(sp.final_selection_ids)
    cites, invalid = map_citations(citation_numbers(text, acfg.max_citation_range), sp)
    valid = {c.n for c in cites if c.valid}
    if not cited_share(text, valid, acfg)[0]:
        return [UNSUPPORTED + (f" (its citations {invalid} name no source)" if invalid else "")
                + f" (sentences of {acfg.min_sentence_words} words or more count: "
                  f"answer.min_sentence_words)"], ""
    failed: list[str] = []
    if invalid:
        many = len(invalid) != 1
        failed.append(f"citation{'s' if many else ''} {', '.join(f'[{n}]' for n in invalid)} "
                      f"name{'' if many else 's'} no source (the Sources block has "
                      f"[1]–[{n_sources}])")
    lead = " ".join(answer_sentences(text, acfg.min_sentence_words)[:acfg.lead_sentences])
    if not any(1 <= n <= acfg.top_sources
               for n in citation_numbers(lead, acfg.max_citation_range)):
        failed.append(f"none of its first {acfg.lead_sentences} sentences "
                      f"(answer.lead_sentences) cites {top_label(acfg.top_sources)} "
                      f"(answer.top_sources)")
    weak = weak_sentences(text, sp, acfg, terms) if acfg.min_shared_terms else []
    if weak:
        quoted = ", ".join(_quote(s) for s in weak[:QUOTED_SENTENCES])
        more = len(weak) - QUOTED_SENTENCES
        many = len(weak) != 1
        failed.append(f"{len(weak)} cited sentence{'s share' if many else ' shares'} fewer "
                      f"than {acfg.min_shared_terms} content terms (answer.min_shared_terms) "
                      f"with each source {'they cite' if many else 'it cites'}: {quoted}"
                      + (f" and {more} more" if more > 0 else ""))
    content = (f"each citing sentence shares at least {acfg.min_shared_terms} content terms "
               f"with a source it cites (answer.min_shared_terms)" if acfg.min_shared_terms
               else "content not compared (answer.min_shared_terms 0)")
    passed = (f"every citation names a source; one of its first {acfg.lead_sentences} "
              f"sentences cites {top_label(acfg.top_sources)} (answer.lead_sentences, "
              f"answer.top_sources); {content}")
    return failed, "" if failed else passed


# --------------------------------------------------------------------------- confidence


@dataclass(frozen=True)
class Signals:
    """What retrieval says about how well the knowledge base covers the prompt."""

    best_dense: float | None
    best_rerank: float | None


def retrieval_signals(sp: SuperPrompt) -> Signals:
    """Best dense score among the retrieval candidates and best rerank score among the reranked ones."""
    dense = [r.scores["dense"] for r in sp.view(View.RETRIEVAL) if "dense" in r.scores]
    rerank = [r.scores.get("rerank", r.score) for r in sp.view(View.RERANKED)]
    return Signals(max(dense) if dense else None, max(rerank) if rerank else None)


def rate(signals: Signals, cited: int, total: int, invalid: list[int],
         acfg: AnswerSettings) -> tuple[str, str]:
    """High / Medium / Low and the reason, e.g. 'best retrieval similarity 0.71; best rerank
    score 0.69; 5 of 6 sentences cite a source'."""
    share = cited / total if total else 0.0
    dense = signals.best_dense if signals.best_dense is not None else 0.0

    def unmet(level: str) -> list[str]:
        lv = level.lower()
        need_dense = getattr(acfg, f"{lv}_min_dense")
        need_rerank = getattr(acfg, f"{lv}_min_rerank")
        need_share = getattr(acfg, f"{lv}_min_cited_share")
        miss = []
        if dense < need_dense:
            miss.append(f"similarity below {need_dense:g}")
        if signals.best_rerank is not None and signals.best_rerank < need_rerank:
            miss.append(f"rerank score below {need_rerank:g}")
        if share < need_share:
            miss.append(f"cited share {share:.0%} below {need_share:.0%}")
        return miss

    level = "High" if not unmet("High") else "Medium" if not unmet("Medium") else "Low"
    parts = [f"best retrieval similarity {dense:.2f}"]
    if signals.best_rerank is not None:
        parts.append(f"best rerank score {signals.best_rerank:.2f}")
    parts.append(f"{cited} of {total} sentence{'s' if total != 1 else ''} "
                 f"cite{'s' if total == 1 else ''} a source")
    if level != "High":
        up = _LEVELS[_LEVELS.index(level) + 1]
        parts.append(f"not {up}: {', '.join(unmet(up))}")
    if invalid:
        level = _LEVELS[max(0, _LEVELS.index(level) - 1)]
        nums = ", ".join(f"[{n}]" for n in invalid)
        parts.append(f"{len(invalid)} citation{'s' if len(invalid) != 1 else ''} ({nums}) "
                     f"match{'es' if len(invalid) == 1 else ''} no source, so confidence is "
                     f"lowered to {level}")
    return level, "; ".join(parts)


# --------------------------------------------------------------------------- modes


def no_results_reason(sp: SuperPrompt, signals: Signals, acfg: AnswerSettings) -> str:
    """Why the knowledge base has nothing to answer with, or '' when it has."""
    if signals.best_dense is None:
        return "the retrieval stage found no candidate"
    if not sp.final_selection_ids:
        return ("no retrieved chunk passed the A3 gate (final_selection_ids is empty); "
                f"best retrieval similarity {signals.best_dense:.2f}")
    if signals.best_dense < acfg.min_dense_score:
        return (f"best retrieval similarity {signals.best_dense:.2f} is below "
                f"answer.min_dense_score {acfg.min_dense_score:g}")
    return ""


def kb_titles(store, limit: int) -> tuple[list[str], int]:
    """Up to ``limit`` document titles, sorted, and how many documents there are in all.

    With more documents than ``limit``, the largest ones (most chunks, ties by id) are named.
    A title is that of the document's first chunk, else its file name."""
    docs = store.documents()
    picked = sorted(docs.values(), key=lambda d: (-d.chunks, d.doc_id))[:limit]
    first = store.get_chunks(f"{d.doc_id}#0" for d in picked)
    titles: dict[str, str] = {}
    for d in picked:
        chunk = first.get(f"{d.doc_id}#0")
        title = (chunk.title if chunk and chunk.title else PurePosixPath(d.doc_id).stem).strip()
        titles.setdefault(title.casefold(), title)
    return sorted(titles.values(), key=lambda t: (t.casefold(), t)), len(docs)


def no_results_text(store, acfg: AnswerSettings) -> str:
    """The no-results reply: the lead sentence plus a list of the knowledge base's document titles."""
    titles, total = kb_titles(store, acfg.no_results_max_titles)
    if not titles:
        return f"{NO_RESULTS_LEAD} {EMPTY_KB}"
    more = total - len(titles) if total > len(titles) else 0
    lines = [f"- {t}" for t in titles]
    if more:
        lines.append(f"- … and {more} more document{'s' if more != 1 else ''}")
    return f"{NO_RESULTS_LEAD} It covers:\n\n" + "\n".join(lines) + "\n"


#: a sentence with fewer words than this outside code spans and quotes shows rather than states
MIN_PROSE_WORDS = 5
_CODE_SPANS = re.compile(r"```.*?```|`[^`\n]*`", re.DOTALL)
_QUOTED = re.compile(r"[\"“][^\"“”\n]{1,300}[\"”]|(?<!\w)['‘][^'‘’\n]{1,300}['’](?!\w)")


def mention_only(text: str) -> bool:
    """True for a sentence that shows the question's words rather than stating a fact: a
    question (it ends with "?": a remembered turn's question, an FAQ's), one holding a code
    block (a worked example), or with fewer than ``MIN_PROSE_WORDS`` words
    outside code spans and quotes (a quoted prompt, a list of file names)."""
    if "```" in text or text.rstrip().endswith("?"):
        return True
    prose = _QUOTED.sub(" ", _CODE_SPANS.sub(" ", text))
    return len(_WORD.findall(prose)) < MIN_PROSE_WORDS


def answer_length(sp: SuperPrompt, acfg: AnswerSettings) -> tuple[int, str]:
    """How many sentences the extractive answer gives, and why: the length the prompt asks
    for (A5's limit in sentences, items or lines), ``max_sentences_long`` when the prompt
    asks for every item or for detail (``long_cues``), else ``max_sentences``."""
    spec = sp.extras.format_enforcer
    for limit in spec.length if spec else []:
        if limit.unit in ("sentences", "items", "lines") and limit.bound != "min":
            return limit.value, f"the prompt asks for {limit.bound} {limit.value} {limit.unit}"
    folded = " " + " ".join(_WORD.findall(build_query(sp.body).casefold())) + " "
    for cue in acfg.long_cues:
        if " " + " ".join(_WORD.findall(cue.casefold())) + " " in folded:
            return acfg.max_sentences_long, f"the prompt asks for more ({cue!r})"
    return acfg.max_sentences, "a short answer (answer.max_sentences)"


def extractive_statements(sp: SuperPrompt, acfg: AnswerSettings) -> list[Statement]:
    """The statements the extractive answer gives: A4's statements by score (its order when
    they have none, or when a person edited them: theirs), those that only mention the
    question's words — or repeat a sentence of the prompt itself (a remembered turn holds what
    the person said: "I renamed a file." is no answer to the same words) — left out unless
    nothing else is left; the first
    ``distinct_sources_first`` from as many different chunks (the best statement of each
    chunk the person pinned first, then the best sentence, then the best of the next
    sources), then the rest best first; at most ``answer_length`` of them."""
    record = sp.extras.a4
    statements = list(record.condensed) if record else []
    if all(s.score is not None for s in statements) and not (record and record.edited):
        statements.sort(key=lambda s: -(s.score or 0.0))
    asked = fold(sp.user_text)
    stating = [s for s in statements
               if not mention_only(s.text) and fold(s.text) not in asked] or statements

    def opening(best: Statement) -> Statement:  # the person's order stands as they left it
        return best if record and record.edited else _opening(best, stating, acfg.lead_margin)

    lead: list[Statement] = []
    for cid in edits.chunk_edits(sp.edits).kept:  # the chunks the person pinned lead
        best = next((s for s in stating if s.chunk_ids[:1] == [cid]), None)
        if best is not None and len(lead) < acfg.distinct_sources_first:
            lead.append(opening(best))
    for s in stating:
        if len(lead) >= acfg.distinct_sources_first:
            break
        if not any(s.chunk_ids[:1] == o.chunk_ids[:1] for o in lead):
            lead.append(opening(s))
    ordered = lead + [s for s in stating if not any(s is o for o in lead)]
    return ordered[:answer_length(sp, acfg)[0]]


def _opening(best: Statement, statements: list[Statement], margin: float) -> Statement:
    """The sentence of ``best``'s chunk that comes first in the chunk among those scoring
    within ``margin`` of it: a section's opening sentence names its topic ("X first splits a
    document at its headings") where a later one adds a detail that happens to score higher."""
    if best.score is None or best.span is None:
        return best
    close = [s for s in statements if s.chunk_ids[:1] == best.chunk_ids[:1] and s.span is not None
             and s.score is not None and s.score >= best.score - margin]
    return min(close, key=lambda s: s.span[0] if s.span else 0, default=best)


def extractive_pieces(sp: SuperPrompt, acfg: AnswerSettings | None = None) -> list[str]:
    """The extractive answer, as the pieces it is streamed in (one per sentence): the
    statements of ``extractive_statements``, the best first, each citing its sources by their
    number in the Sources block; a paragraph, or a list when A5 asks for one or the prompt
    for every item. ``prompt_ready`` keeps the whole condensed context; only the answer is short."""
    acfg = acfg or AnswerSettings()
    chosen = extractive_statements(sp, acfg)
    if not chosen:
        return [NO_STATEMENTS]
    spec = sp.extras.format_enforcer
    mark = LIST_MARKS.get(spec.kind if spec else "")
    if mark is None and answer_length(sp, acfg)[0] > acfg.max_sentences:
        mark = LIST_MARKS["bullet_list"]
    chunks = sp.chunk_map()
    pieces: list[str] = []
    for i, s in enumerate(chosen, start=1):
        text = f"{s.text} {citation_marks(s.chunk_ids, sp.final_selection_ids)}"
        block = _shown_code(s, chunks)
        if mark is not None:
            pieces.append(f"{mark.format(i=i)}{text}\n" + (_indent(block, mark) if block else ""))
        elif block:  # the sentence introduces a command: the command follows it
            pieces.append(("\n" if pieces else "") + text + "\n\n" + block
                          + ("\n" if i < len(chosen) else ""))
        else:
            pieces.append(text + (" " if i < len(chosen) else "\n"))
    return pieces


#: a code block this long or longer is not copied into the extractive answer
MAX_CODE_LINES = 12
_FENCE_AFTER = re.compile(r"\s*(?P<fence>(?P<mark>```|~~~)[^\n]*\n.*?\n(?P=mark)[ \t]*(?:\n|\Z))",
                          re.DOTALL)


def _shown_code(s: Statement, chunks: dict[str, Chunk]) -> str:
    """The code block that a statement ending in ':' introduces in its chunk ("Start the
    server with:" and the command), when it directly follows and is short; else ''."""
    chunk = chunks.get(s.chunk_ids[0]) if s.chunk_ids else None
    if chunk is None or s.span is None or not s.text.rstrip().endswith(":"):
        return ""
    m = _FENCE_AFTER.match(chunk.text, s.span[1])
    if not m or m.group("fence").count("\n") > MAX_CODE_LINES + 1:
        return ""
    return m.group("fence").rstrip("\n") + "\n"


def _indent(block: str, mark: str) -> str:
    pad = " " * len(mark.format(i=9))
    return "\n" + "".join(pad + line if line.strip() else line
                          for line in block.splitlines(keepends=True)) + "\n"


# --------------------------------------------------------------------------- the sentence form


def answer_form(sp: SuperPrompt, acfg: AnswerSettings, llm) -> tuple[str, str]:
    """The LLM answer's form, ``text`` or ``sentences``, and why (see the module docstring)."""
    if acfg.form != "auto":
        return acfg.form, f"answer.form is {acfg.form}"
    spec = sp.extras.format_enforcer
    if spec is not None and spec.kind in TEXT_KINDS:
        return "text", f"A5 asks for {spec.kind.replace('_', ' ')}"
    endpoint = llm.structured_form()
    if endpoint in ("llama_cpp", "ollama"):
        return "sentences", f"answer.form auto, {endpoint} endpoint"
    return "text", f"answer.form auto, {endpoint} endpoint"


def sentences_schema(sp: SuperPrompt, acfg: AnswerSettings) -> dict:
    """``SentencesReply``'s schema for this answer: 1..``max_sentences`` sentences, each citing
    1..4 of the source numbers 1..n of the Sources block."""
    from ragstream.backends.llm import inline_schema

    numbers = list(range(1, len(sp.final_selection_ids) + 1)) or [1]
    return bound(inline_schema(SentencesReply.model_json_schema()), {
        "sentences": {"minItems": 1, "maxItems": acfg.max_sentences},
        "sentences[].sources": {"minItems": 1, "maxItems": min(4, len(numbers))},
        "sentences[].sources[]": {"enum": numbers},
    })


class SentenceScanner:
    """Reads a streamed ``sentences`` reply and gives each sentence as soon as its JSON object
    is complete (depth 3: the reply object, its list, a sentence)."""

    def __init__(self) -> None:
        self.buf, self.pos, self.depth, self.start = "", 0, 0, -1
        self.in_string = self.escaped = False

    def feed(self, piece: str) -> list[AnswerSentence]:
        """The sentences completed by ``piece``."""
        self.buf += piece
        done: list[AnswerSentence] = []
        for i in range(self.pos, len(self.buf)):
            c = self.buf[i]
            if self.in_string:
                if self.escaped:
                    self.escaped = False
                elif c == "\\":
                    self.escaped = True
                elif c == '"':
                    self.in_string = False
            elif c == '"':
                self.in_string = True
            elif c in "{[":
                self.depth += 1
                if c == "{" and self.depth == 3:
                    self.start = i
            elif c in "}]":
                if c == "}" and self.depth == 3 and self.start >= 0:
                    try:
                        done.append(AnswerSentence.model_validate_json(self.buf[self.start:i + 1]))
                    except ValidationError:
                        pass  # not a sentence object: the final parse reports the reply
                    self.start = -1
                self.depth -= 1
        self.pos = len(self.buf)
        return done


def sentence_piece(sentence: AnswerSentence, index: int, kind: str) -> str:
    """One sentence as Markdown, its source numbers in brackets before its final stop; a
    list item (A5's bullet, numbered or check list) or a paragraph's next sentence."""
    text = " ".join(_CITE.sub(" ", sentence.text).split())  # its own [n] give way to ``sources``
    text = re.sub(r"\s+([.!?;:,])", r"\1", text).rstrip(":;, ")  # a dangling ':' ends it too
    numbers = ", ".join(str(n) for n in dict.fromkeys(sentence.sources))
    if numbers:
        stop = text[-1] if text[-1:] in ".!?" else ""
        text = f"{text[:len(text) - len(stop)].rstrip()} [{numbers}]{stop or '.'}"
    mark = LIST_MARKS.get(kind)
    if mark:
        return mark.format(i=index + 1) + text + "\n"
    return (" " if index else "") + text


def stream_sentences(pieces, emit: Callable[[str], None], kind: str) -> tuple[str, str]:
    """Emit each sentence of a streamed ``sentences`` reply as Markdown as soon as it is
    complete. Returns the answer's text and a note ("" or why it is shorter than the reply)."""
    from ragstream.backends.llm import LLMError

    scanner = SentenceScanner()
    out: list[str] = []

    def add(sentence: AnswerSentence) -> None:
        if len(_WORD.findall(sentence.text)) == 0:
            return
        piece = sentence_piece(sentence, len(out), kind)
        out.append(piece)
        emit(piece)

    for piece in pieces:
        for sentence in scanner.feed(piece):
            add(sentence)
    note = ""
    try:
        whole = SentencesReply.model_validate_json(scanner.buf.strip() or "{}")
        for sentence in whole.sentences[len(out):]:
            add(sentence)
    except ValidationError as err:
        if not out:
            raise LLMError(f"the answer's JSON holds no sentence: "
                           f"{str(err).splitlines()[0]}; raw reply {scanner.buf[:200]!r}") from None
        note = f"the reply's JSON broke off after {len(out)} sentences"
    if not out:
        raise LLMError("the answer's JSON holds no sentence")
    if not out[-1].endswith("\n"):  # a paragraph ends its line
        out.append("\n")
        emit("\n")
    return "".join(out), note


# --------------------------------------------------------------------------- the LLM's prompt


def answer_messages(sp: SuperPrompt, cfg: AppConfig,
                    schema: dict | None = None) -> tuple[list[dict[str, str]], str]:
    """System: System_MD and the citation rule (with ``schema``, the sentence form's rule and
    the schema's outline). User: the rest of ``prompt_ready`` — Prompt_MD, S_CTX_MD,
    Attachments_MD and the recent conversation, as Prompt_Builder composed them — within the
    prompt budget (see the module docstring), then the closing cue (``ANSWER_CUE`` or
    ``SENTENCES_CUE``). Returns the messages and a note naming what was left out ("" when
    nothing was)."""
    from ragstream.agents.factory import TEMPLATE_TOKENS, TOKENIZER_SLACK
    from ragstream.backends.tokens import count_tokens
    from ragstream.render import render_conversation

    acfg, enc = cfg.settings.answer, cfg.settings.chunking.encoding
    rule, cue = CITATION_RULE, ANSWER_CUE
    if schema is not None:
        rule = SENTENCES_RULE.format(shape=outline(schema))
        cue = SENTENCES_CUE.format(n=acfg.max_sentences)
    system = (sp.System_MD.rstrip() + "\n\n" if sp.System_MD.strip() else "") + rule + "\n"
    window = cfg.settings.llm.context_window - acfg.max_tokens - TEMPLATE_TOKENS
    budget = int(window / TOKENIZER_SLACK)
    if acfg.max_prompt_tokens:
        budget = min(budget, acfg.max_prompt_tokens)
    conversation = render_conversation(sp.recent_conversation, cfg.limits.N4_RECENT_CONV_MAX_PAIRS)
    tries = [([sp.Attachments_MD, conversation], ""),
             ([SOURCES_LEFT_OUT, conversation], "the whole source texts"),
             ([SOURCES_LEFT_OUT], "the whole source texts and the recent conversation")]
    user, note = "", ""
    room = budget - count_tokens(system, enc) - 8
    for extra, left_out in tries:
        blocks = [sp.Prompt_MD, sp.S_CTX_MD, *extra, cue]
        user = "\n".join(b.rstrip() + "\n" for b in blocks if b.strip())
        note = f"{left_out} left out to fit the answer's prompt budget of {budget} tokens" \
            if left_out else ""
        if count_tokens(user, enc) <= room:
            break
    return [{"role": "system", "content": system}, {"role": "user", "content": user}], note


class _Emitter:
    """Passes pieces to ``on_token`` and notes when the first one went out."""

    def __init__(self, on_token: TokenCallback | None, started: float):
        self.on_token = on_token
        self.started = started
        self.first_ms: float | None = None
        self.count = 0

    def __call__(self, piece: str) -> None:
        if not piece:
            return
        if self.first_ms is None:
            self.first_ms = (time.perf_counter() - self.started) * 1000.0
        self.count += 1
        if self.on_token is not None:
            self.on_token(piece)


def answer(sp: SuperPrompt, cfg: AppConfig, services,
           on_token: TokenCallback | None = None) -> Answer:
    """Answer ``sp`` (whose eight stages have all run, on inputs that still hold); see the
    module docstring."""
    nxt = controller.next_stage(sp)
    if nxt is not None:
        raise StageOrderError(NAME, nxt)
    stale = controller.first_stale(sp, cfg, staleness.kb_fingerprint(services))
    if stale is not None:
        raise StaleResultError(NAME, stale.stage, stale.reasons)
    from ragstream.backends.llm import LLMError, StreamResult

    acfg = cfg.settings.answer
    started = time.perf_counter()
    emit = _Emitter(on_token, started)
    signals = retrieval_signals(sp)
    model, usage, error, form_used, raw = "", AnswerUsage(), "", "", ""
    set_aside, set_aside_reason, checks = "", "", ""
    first_ms: float | None = None

    empty = no_results_reason(sp, signals, acfg)
    llm = getattr(services, "llm", None)
    if empty:
        text = no_results_text(services.store, acfg)
        emit(text)
        done = Answer(text=text, mode="no-results", mode_reason=empty, confidence="Low",
                      confidence_reason=f"nothing to answer from: {empty}")
        done.first_token_ms = emit.first_ms
        done.latency_ms = round((time.perf_counter() - started) * 1000.0, 1)
        return done

    mode, mode_reason, text = "extractive", "no LLM endpoint is configured", ""
    if llm is not None:
        result = StreamResult()
        try:
            form, why = answer_form(sp, acfg, llm)
            schema = sentences_schema(sp, acfg) if form == "sentences" else None
            messages, left_out = answer_messages(sp, cfg, schema)
            pieces = llm.stream_chat(messages, result, temperature=acfg.temperature,
                                     max_tokens=acfg.max_tokens, json_schema=schema)
            note = ""
            with closing(pieces):  # a reader that stops early (on_token raised) ends the stream now
                if schema is None:
                    for piece in pieces:
                        emit(piece)
                    text = result.text
                else:
                    spec = sp.extras.format_enforcer
                    text, note = stream_sentences(pieces, emit, spec.kind if spec else "")
            if not text.strip():
                raise LLMError(f"{llm.describe()} returned an empty answer")
            mode = "llm"
            mode_reason = f"answered by {result.model}" + (
                f", sentence by sentence in JSON ({why})" if schema is not None else "")
            for extra in (left_out, note):
                if extra:
                    mode_reason += f" ({extra})"
            first_ms = result.first_token_ms
        except LLMError as err:
            error = str(err)
            mode_reason = f"the LLM failed, so the answer is extractive: {error}"
            if emit.count:
                emit("\n\n" + FALLBACK_NOTICE + "\n\n")
        if mode == "llm":
            form_used, raw = form, (result.text if schema is not None else "")
        model = result.model
        usage = AnswerUsage(prompt_tokens=result.usage.prompt_tokens,
                            completion_tokens=result.usage.completion_tokens)
    if mode == "llm" and acfg.check_citations:
        failed, checks = citation_checks(text, sp, acfg, term_reader(services, cfg))
        if failed:
            set_aside, set_aside_reason = text, "; ".join(failed)
            mode, mode_reason = "extractive", f"the model's answer was set aside: {set_aside_reason}"
            emit("\n\n" + SET_ASIDE_NOTICE + "\n\n")
    if mode == "extractive":
        pieces = extractive_pieces(sp, acfg)
        for piece in pieces:
            emit(piece)
        text = "".join(pieces).strip() + "\n"
        first_ms = emit.first_ms if first_ms is None else first_ms

    cites, invalid = map_citations(citation_numbers(text, acfg.max_citation_range), sp)
    cited, total = cited_share(text, {c.n for c in cites if c.valid}, acfg)
    level, reason = rate(signals, cited, total, invalid, acfg)
    unsupported, beside = "", ""
    if mode == "llm" and not cited:
        unsupported = UNSUPPORTED + (f" (its citations {invalid} name no source)" if invalid else "")
        if acfg.offer_extractive:
            beside = "".join(extractive_pieces(sp, acfg)).strip() + "\n"
    return Answer(text=text, mode=mode, mode_reason=mode_reason, citations=cites,
                  invalid_citations=invalid, confidence=level, confidence_reason=reason,
                  model=model, usage=usage, first_token_ms=first_ms, error=error,
                  unsupported=unsupported, extractive_text=beside, set_aside=set_aside,
                  set_aside_reason=set_aside_reason, checks=checks, form=form_used, raw=raw,
                  latency_ms=round((time.perf_counter() - started) * 1000.0, 1))


# --------------------------------------------------------------------------- after the answer


def conversation_after(sp: SuperPrompt, ans: Answer, max_pairs: int) -> list[ConversationTurn]:
    """The recent conversation including this turn, the last ``max_pairs`` pairs (N4)."""
    turns = list(sp.recent_conversation) + [ConversationTurn(user=sp.user_text,
                                                             assistant=ans.text)]
    return [t.model_copy() for t in turns[-max_pairs:]] if max_pairs > 0 else []


def answer_and_log(engine_cfg: AppConfig, services, sp: SuperPrompt,
                   on_token: TokenCallback | None = None,
                   log_path: str | Path | None = None) -> tuple[SuperPrompt, Answer]:
    """Answer ``sp``, return a copy of it holding the answer (``sp.answer``) and the answer,
    and record the interaction in the QA log (``<index_dir>/qa_log.sqlite3`` by default).

    A log that cannot be written does not cost the answer: the problem is noted in
    ``extras.qa_log.error`` instead of the row id."""
    from ragstream.qa_log import QALog

    ans = answer(sp, engine_cfg, services, on_token)
    out = sp.working_copy()  # the chunks and view rows are frozen: shared, not copied
    out.answer = ans
    path = Path(log_path) if log_path else engine_cfg.qa_log_path
    try:
        row = QALog(path, secret_env=[engine_cfg.settings.llm.api_key_env]).record(out, ans)
        out.extras.qa_log = QALogRecord(path=str(path), id=row)
    except (sqlite3.Error, OSError, SchemaVersionError) as err:
        out.extras.qa_log = QALogRecord(path=str(path),
                                        error=f"the interaction could not be logged: {err}")
    return out, ans
