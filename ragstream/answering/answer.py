"""The final answer of auto mode: the step after Prompt_Builder (seeds 002, 003, 004).

``answer(sp, cfg, services, on_token)`` needs the whole pipeline to have run and gives an
``Answer`` in one of three modes:

* ``no-results`` — nothing in the knowledge base is close enough: no chunk passed the A3 gate,
  or the best dense similarity of the retrieval stage is below ``answer.min_dense_score``,
  or — decided before answering, in every mode (``ragstream.answering.answerability``) — the sentences
  the answer would be made of do not answer the question: a specific name of the question
  (``path.join``, ``asn1_der_coding``, ``<magic>``) is in none of them, or the calibrated
  P(answerable) is below ``answer.answerability.min_answerable``. The LLM is not called;
  the answer says so plainly and names what the knowledge base does
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
  sources — the ReRanker's strongest evidence leads, as in the extractive answer; no sentence
  says again what an earlier one said (``repeated_sentences``: a small model looping); and each
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
  answer from A4's statements (``extractive_statements``): the one that states what was
  asked first (``lead_ranks``: never a parameter list, signature, heading, title or pointer
  sentence — ``not_a_lead`` —; a sentence about the name the question asks about before
  others), then the best of the next sources, then the rest by score, the sentences of one
  chunk in the chunk's order; those that only mention the question's
  words (a worked example, a quoted prompt, a list of file names: ``mention_only``) left
  out; at most ``answer.max_sentences`` (the length A5's rules ask for, or
  ``max_sentences_long`` for "list every …"/"in detail"), each with its ``[n]``, and the
  command a sentence ending in ':' introduces. A paragraph, or a list when A5's rules ask
  for one (``answer_shape``: a rule the person added in A5 counts).
  ``prompt_ready`` keeps the whole condensed context. Deterministic; ``on_token`` gets it
  sentence by sentence.

Citations ``[n]`` (also ``[1, 2]``, ``[1][2]``, ``[1-3]``) are parsed from the text and mapped to
``final_selection_ids[n-1]`` — the numbering of the Sources block. A number naming no source
is an invalid citation: listed (``valid=False``, ``invalid_citations``), never shown as a
source, and it lowers the confidence.

Confidence (High / Medium / Low, with its reason) is calibrated on labelled question sets
(``benchmarks/calibrate_confidence.py``), not set by fixed similarity cuts: Low when the
knowledge base does not answer; High when the calibrated probability that the answer leads
with the answering section reaches ``answer.answerability.high_min_leads`` (and enough of its
sentences cite a source), else Medium (``rate``). The reason names the evidence weighed.

``qa_log.answer_and_log`` (the workbench's) is what the engine and the GUI call: answer, store
it on a copy of the ``SuperPrompt`` and record the interaction in the QA log.

It stays whole: its parts (the citation checks, the confidence, the extractive composition
around the passage, the LLM answer and its fallback) read one answer's sentences with one
scanner (``answer_sentences``) and one set of ``answer`` settings, and they run in one order
for one ``Answer``; the passage itself (``passage``) and the answerability model
(``answerability``) are apart because they read nothing of it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from contextlib import closing
from dataclasses import dataclass
from functools import lru_cache
from pathlib import PurePosixPath

from pydantic import BaseModel, ValidationError

from ragstream.agents.replies import Items, Text, bound, outline
from ragstream.answering.answerability import Evidence, specific_names, weigh
from ragstream.answering.passage import Passage, lead_passage, trim
from ragstream.answering.passage import render as render_passage
from ragstream.common import markdown
from ragstream.common.config import A5Config, AnswerSettings, AppConfig
from ragstream.common.errors import StageOrderError, StaleResultError
from ragstream.common.text import asks_how, asks_yes_no, fold, jaccard, split_sentences, without_frame, words
from ragstream.stages import controller, staleness
from ragstream.state import edits
from ragstream.state.records import LengthLimit, Statement
from ragstream.state.render import build_query, citation_marks, rerank_query
from ragstream.state.super_prompt import (
    Answer,
    AnswerUsage,
    Chunk,
    Citation,
    ConversationTurn,
    PassageRef,
    SuperPrompt,
    View,
)

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
#: heads the passage that answers in the model's prompt (``passage_block``)
PASSAGE_HEADER = "## The passage that answers [{n}]\n\n**{title}**\n\n"
#: what the closing cue adds when the model is given that passage
PASSAGE_CUE = ("_Lead your answer with what this passage says, in its words, citing [{n}]; "
               "copy its code or configuration whole; add what other sources say only where "
               "it lacks something._")
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
#: the citations that close a sentence (perhaps before its stop): "… to a backend: [1]"
_CLOSING_CITES = re.compile(r"(?:\s*" + _CITE.pattern + r")+\s*[.!?:;]?\s*$", re.IGNORECASE)


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
                label=chunk.citation_label, page=chunk.page_label))
    return cites, [c.n for c in cites if not c.valid]


# --------------------------------------------------------------------------- sentences


def answer_sentences(text: str, min_words: int) -> list[str]:
    """The sentences of an answer that count for the cited share.

    The answer's Markdown is read by ``ragstream.common.markdown``: paragraphs (in lists and quotes
    too) and table body rows count; code, headings, table header rows and labels (a bold-only
    line, or a line ending in ':' that cites nothing — "Start it with: [1]" before its command
    counts) do not; nor do sentences of fewer than ``min_words`` words. A citation
    that opens a sentence ("… fast. [2] Next …") belongs to the sentence before it; one that
    closes a paragraph also covers the sentences of that paragraph that cite nothing (a
    quoted passage cites its source once per paragraph: "It maps requests. The simplest
    example proxies all of them: [1]").
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
        first = len(out)
        for a, b in split_sentences(piece):
            sent = piece[a:b].strip()
            lead = _LEADING_CITES.match(sent)
            if lead and out:
                out[-1] += " " + lead.group(0).strip()
                sent = sent[lead.end():].strip()
            if not sent:
                continue
            out.append(sent)
        closing = _CLOSING_CITES.search(out[-1]) if len(out) > first + 1 else None
        if closing:  # a citation that closes a paragraph covers its sentences
            marks = " ".join(m.group(0) for m in _CITE.finditer(closing.group(0)))
            for i in range(first, len(out) - 1):
                if not _CITE.search(strip_code(out[i])):
                    out[i] = f"{out[i]} {marks}"
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


def question_terms(cfg: AppConfig) -> Callable[[str], set[str]]:
    """The terms the answerability check weighs (``covered``, ``unseen``): the keyword index's
    tokeniser and stemmer without the stop words of ``retrieval.relevance.stopwords`` — the
    terms ``retrieve()`` scores relevance with (``relevance.relevance_terms``). BM25's shorter
    list keeps "what", "can", "do", "during": counted as the question's terms, they make a
    question that says them look half covered by any text."""
    from ragstream.backends.keyword_index import KeywordIndex

    return KeywordIndex(cfg.settings.retrieval.stemmer,
                        cfg.settings.retrieval.relevance.stopwords).terms


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


def said_back(text: str, question: str) -> bool:
    """Whether the answer's first sentence says the question back: nearly all its words are
    the question's (word Jaccard ≥ ``SAID_BACK``)."""
    sents = answer_sentences(text, 1)
    if not sents:
        return False
    first = set(words(_CITE.sub(" ", sents[0])))
    asked = set(words(question))
    return bool(first) and jaccard(first, asked) >= SAID_BACK


def dangling_colons(text: str) -> list[str]:
    """The answer's paragraphs that end in ':' (their citations aside) with no block after
    them: what they introduce is missing."""
    lines = text.splitlines()
    doc = markdown.parse(text, front_matter=False)
    blocks = list(doc.walk())
    out = []
    for i, b in enumerate(blocks):
        if b.kind != "paragraph":
            continue
        body = " ".join(lines[b.start:b.end]).strip()
        if not _CITE.sub("", body).rstrip().endswith(":"):
            continue
        nxt = next((x for x in blocks[i + 1:] if x.start >= b.end), None)
        if nxt is None or nxt.kind == "paragraph":
            out.append(body)
    return out


#: a first sentence sharing this share of its words with the question says it back
SAID_BACK = 0.8
#: two sentences of an answer sharing this share of their words say the same thing
REPEATED = 0.8


def repeated_sentences(text: str, min_words: int) -> tuple[str, str] | None:
    """The first sentence of the answer that says again what an earlier one said (word
    Jaccard ≥ ``REPEATED``, citations aside), with that earlier one; None when none does. A
    small model that loops writes its answer twice over."""
    seen: list[tuple[str, set[str]]] = []
    for sentence in answer_sentences(text, min_words):
        mine = set(words(_CITE.sub(" ", sentence)))
        for earlier, theirs in seen:
            if mine and jaccard(mine, theirs) >= REPEATED:
                return sentence, earlier
        seen.append((sentence, mine))
    return None


def citation_checks(text: str, sp: SuperPrompt, acfg: AnswerSettings,
                    terms: Callable[[str], set[str]],
                    passage: Passage | None = None) -> tuple[list[str], str]:
    """Check an LLM answer's citations (see the module docstring). Returns the checks it
    fails, each naming its setting (none: it passes), and a line saying what it passed. With
    the ``passage`` the model was given first, one of its first sentences must cite it; the
    answer must not open by saying the question back nor leave a sentence ending in ':'
    without what it introduces (the rules the extractive answer keeps), nor say a thing twice."""
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
    cited = citation_numbers(lead, acfg.max_citation_range)
    own = sp.final_selection_ids.index(passage.chunk.id) + 1 \
        if passage is not None and passage.chunk.id in sp.final_selection_ids else None
    if own is not None and own > acfg.top_sources and own not in cited \
            and not any(1 <= n <= acfg.top_sources for n in cited):
        failed.append(f"none of its first {acfg.lead_sentences} sentences "
                      f"(answer.lead_sentences) cites the passage that answers [{own}] or "
                      f"{top_label(acfg.top_sources)} (answer.top_sources)")
    elif (own is None or own <= acfg.top_sources) \
            and not any(1 <= n <= acfg.top_sources for n in cited):
        failed.append(f"none of its first {acfg.lead_sentences} sentences "
                      f"(answer.lead_sentences) cites {top_label(acfg.top_sources)} "
                      f"(answer.top_sources)")
    if said_back(text, sp.question):
        failed.append("its first sentence says the question back")
    hanging = dangling_colons(text)
    if hanging:
        failed.append(f"it ends a sentence on a colon with nothing after it: {_quote(hanging[0])}")
    twice = repeated_sentences(text, acfg.min_sentence_words)
    if twice:
        failed.append(f"it says the same thing twice: {_quote(twice[0])} repeats "
                      f"{_quote(twice[1])}")
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


def rate(evidence: Evidence, cited: int, total: int, invalid: list[int],
         acfg: AnswerSettings) -> tuple[str, str]:
    """High / Medium / Low and the reason, read off the evidence weighed before answering
    (``ragstream.answering.answerability``) and the answer's citations: Low when the knowledge base
    does not answer (or under ``medium_min_cited_share`` of the sentences cite a source),
    High when P(leads with the answer) reaches ``answerability.high_min_leads`` and at least
    ``high_min_cited_share`` of the sentences cite, else Medium; an invalid citation lowers
    it one level."""
    share = cited / total if total else 0.0
    thresholds = acfg.answerability
    if not evidence.answerable:
        level, why = "Low", [f"not answerable: {evidence.why_not}"]
    elif share < acfg.medium_min_cited_share:
        level, why = "Low", [f"cited share {share:.0%} below {acfg.medium_min_cited_share:.0%} "
                             f"(answer.medium_min_cited_share)"]
    elif evidence.near:
        level, why = "Medium", [f"not High: {_near_words(evidence.near)}"]
    elif evidence.p_leads < thresholds.high_min_leads:
        level, why = "Medium", [f"not High: P(leads with the answer) {evidence.p_leads:.2f} below "
                                f"{thresholds.high_min_leads:g} (answer.answerability.high_min_leads)"]
    elif share < acfg.high_min_cited_share:
        level, why = "Medium", [f"not High: cited share {share:.0%} below "
                                f"{acfg.high_min_cited_share:.0%} (answer.high_min_cited_share)"]
    else:
        level, why = "High", []
    parts = [evidence.describe()] if evidence.describe() else []
    parts.append(f"{cited} of {total} sentence{'s' if total != 1 else ''} "
                 f"cite{'s' if total == 1 else ''} a source")
    parts.extend(why)
    if invalid:
        level = _LEVELS[max(0, _LEVELS.index(level) - 1)]
        nums = ", ".join(f"[{n}]" for n in invalid)
        parts.append(f"{len(invalid)} citation{'s' if len(invalid) != 1 else ''} ({nums}) "
                     f"match{'es' if len(invalid) == 1 else ''} no source, so confidence is "
                     f"lowered to {level}")
    return level, "; ".join(parts)


def _near_words(near: dict[str, str]) -> str:
    """"the sources say Unix where the question says Linux" (and so on for each name)."""
    return "; ".join(f"the sources say {close} where the question says {name}"
                     for name, close in near.items())


def _listed(items: Sequence[str]) -> str:
    """"a", "a and b", "a, b and c"."""
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def lacking_words(question: str, comp: Composition,
                  terms: Callable[[str], set[str]], limit: int = 3) -> list[str]:
    """The question's words (as asked, at most ``limit``) that the passage the answer leads
    with (its text and headings) does not hold, by the keyword index's reading of words."""
    if comp.passage is None:
        return []
    chunk = comp.passage.chunk
    have = terms(f"{chunk.title}\n{chunk.heading_label}\n{comp.passage.text}")
    out: list[str] = []
    for word in re.findall(r"[\w.+#/-]+", question):
        word = word.strip(".,;:/-")
        stems = terms(word)
        if stems and not stems & have and word.casefold() not in (w.casefold() for w in out):
            out.append(word)
    return out[:limit]


def confidence_words(level: str, evidence: Evidence, cited: int, total: int,
                     invalid: list[int], acfg: AnswerSettings, lacking: Sequence[str]) -> str:
    """Why the confidence is what it is, in a reader's words (the figures are in
    ``confidence_detail``): what the answer leads with, what it leaves out, what competes."""
    share = cited / total if total else 0.0
    if level == "Low" and share < acfg.medium_min_cited_share:
        why = "most of the answer's sentences cite no source"
    elif level == "Medium" and evidence.near and not invalid:
        why = _near_words(evidence.near) + ": check that it applies"
    elif level == "High" or (level == "Medium" and invalid and
                             evidence.p_leads >= acfg.answerability.high_min_leads):
        why = "the passage that answers the question leads, and the answer cites it throughout"
    elif lacking:
        quoted = _listed([f"“{w}”" for w in lacking])
        why = f"the best passage answers only part of the question (it does not mention {quoted})"
    elif evidence.features.get("rerank_margin", 1.0) < CLOSE_MARGIN:
        why = "several passages answer about equally well: the other sources may say more"
    else:
        why = "the best passage matches the question only loosely"
    if invalid:
        many = len(invalid) != 1
        why += (f"; {len(invalid)} citation{'s' if many else ''} name{'' if many else 's'} no "
                f"source, so it is one level lower")
    return f"{level}: {why}"


def not_found_words(sp: SuperPrompt, evidence: Evidence | None) -> str:
    """Why the knowledge base has nothing to answer with, in a reader's words."""
    if evidence is not None and evidence.missing:
        return f"Low: no passage found mentions {_listed(evidence.missing)}"
    if not sp.final_selection_ids:
        return "Low: nothing in the documents comes close to the question"
    chunks = sp.chunk_map()
    near = next((chunks[c] for c in sp.final_selection_ids if c in chunks), None)
    about = f" (the closest passage is about “{near.heading_label or near.title}”)" \
        if near is not None and (near.heading_label or near.title) else ""
    return f"Low: no passage of the documents answers this{about}"


#: a ReRanker lead this small over the second source: several passages compete
CLOSE_MARGIN = 0.02


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


#: "1 Introduction", "2.3 Usage": a section's heading, not a document's title
_NUMBERED_HEADING = re.compile(r"^\d+(?:\.\d+)*\.?\s+\S")


def kb_titles(store, limit: int) -> tuple[list[str], int]:
    """Up to ``limit`` document titles, sorted, and how many documents there are in all.

    With more documents than ``limit``, the largest ones (most chunks, ties by id) are named.
    A title is the document's own (that of its first chunk) when it says something, else its
    file name: a placeholder ("Untitled", "Presentation 1", a file name) or a PDF's numbered
    first heading ("1 Introduction") names no document. A web page's title loses the site's
    name after " | " ("Events | Node.js v18.20.4 Documentation" → "Events"), which every page
    of the site shares."""
    from ragstream.knowledge.formats.markdown_out import useful_title

    docs = store.documents()
    picked = sorted(docs.values(), key=lambda d: (-d.chunks, d.doc_id))[:limit]
    first = store.get_chunks(f"{d.doc_id}#0" for d in picked)
    titles: dict[str, str] = {}
    for d in picked:
        chunk = first.get(f"{d.doc_id}#0")
        own = useful_title(chunk.title if chunk else "", d.doc_id)
        if own and _NUMBERED_HEADING.match(own):
            own = None
        if own and " | " in own:
            own = own.split(" | ", 1)[0].strip() or own
        title = (own or PurePosixPath(d.doc_id).stem).strip()
        titles.setdefault(title.casefold(), title)
    named = site_suffix_removed(list(titles.values()))
    return sorted(named, key=lambda t: (t.casefold(), t)), len(docs)


#: what separates a page's own title from its site's name: "Log Files - Apache HTTP Server"
_SITE_SEPARATORS = (" - ", " — ", " – ", " · ", " :: ")


def site_suffix_removed(titles: list[str]) -> list[str]:
    """Titles without the site's name that most of them end with ("Log Files - Apache HTTP
    Server Version 2.4" → "Log Files"): at least three titles and half of them share it."""
    if len(titles) < 3:
        return titles
    ends: dict[str, int] = {}
    for t in titles:
        for sep in _SITE_SEPARATORS:
            if sep in t:
                ends[sep + t.rsplit(sep, 1)[1]] = ends.get(sep + t.rsplit(sep, 1)[1], 0) + 1
    common = max(ends.items(), key=lambda kv: (kv[1], kv[0]), default=("", 0))
    if common[1] * 2 < len(titles):
        return titles
    return [t[:-len(common[0])].strip() or t if t.endswith(common[0]) else t for t in titles]


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


def answer_length(sp: SuperPrompt, acfg: AnswerSettings,
                  a5: A5Config | None = None) -> tuple[int, str]:
    """How many sentences the extractive answer gives, and why: the length A5's rules ask
    for (``answer_shape``: a limit in sentences, items or lines — an "at least" limit only
    lengthens it), ``max_sentences_long`` when the prompt asks for every item or for detail
    (``long_cues``), else ``max_sentences``."""
    shape = answer_shape(sp, a5)
    folded = " " + " ".join(_WORD.findall(build_query(sp.body).casefold())) + " "
    n, why = acfg.max_sentences, "a short answer (answer.max_sentences)"
    for cue in acfg.long_cues:
        if " " + " ".join(_WORD.findall(cue.casefold())) + " " in folded:
            n, why = acfg.max_sentences_long, f"the prompt asks for more ({cue!r})"
            break
    for limit in shape.limits:
        if limit.unit in COUNTED_UNITS:
            asks = f"{shape.by} {limit.bound} {limit.value} {limit.unit}"
            if limit.bound != "min":
                return limit.value, asks
            if limit.value > n:
                n, why = limit.value, asks
    return n, why


# --------------------------------------------------------------------------- A5's shape

#: A5's length units that count the extractive answer's sentences (one per item or line)
COUNTED_UNITS = ("sentences", "items", "lines")


@dataclass(frozen=True)
class AnswerShape:
    """What A5's rules ask of the answer's form: the kind (``bullet_list``, ``numbered_list``
    …), the length limits and who asked ("A5's rules" or "your rule")."""

    kind: str
    limits: tuple[LengthLimit, ...]
    by: str


@lru_cache(maxsize=1)
def _shipped_a5() -> A5Config:
    """The shipped A5 tables: read a person's rule when no configuration is passed in."""
    from ragstream.common.config import load_config

    return load_config().agents.A5_Format_Enforcer


def answer_shape(sp: SuperPrompt, a5: A5Config | None = None) -> AnswerShape:
    """The form A5 asks for, as the model's prompt states it: the spec's kind and length
    limits, then each rule the person added or rewrote in A5 ("Answer in at most five bullet
    points"), read with A5's own grammar (``a5``: its tables; the shipped ones by default) —
    the person's rule is the later word, so its kind and limits win (a limit per unit)."""
    spec = sp.extras.format_enforcer
    kind = spec.kind if spec else ""
    limits = {(lim.unit, lim.bound): lim for lim in (spec.length if spec else [])}
    by = "A5's rules ask for"
    written = [e.after for e in edits.of_stage(sp.edits, "A5_Format_Enforcer")
               if e.kind in ("rule_add", "rule_text") and e.after]
    if spec is not None and written:
        from ragstream.stages.a5.lengths import blank, find_lengths, length_grammar
        from ragstream.stages.a5.reading import Source, detect_kind

        agent = a5 or _shipped_a5()
        grammar = length_grammar(agent)
        for text in written:
            folded = fold(text)
            found, spans = find_lengths(agent, grammar, folded)
            said, source, _ = detect_kind(agent, [Source("format", text, folded,
                                                         blank(folded, spans))])
            if source != "default" or found:
                by = "your rule asks for"
            if source != "default":
                kind = said
            for lim in found:
                limits = {k: v for k, v in limits.items() if k[0] != lim.unit}
                limits[(lim.unit, lim.bound)] = lim
    return AnswerShape(kind, tuple(limits.values()), by)


# --------------------------------------------------------------------------- the lead

#: ``name <type>`` / ``{string|symbol}`` tokens of an API reference's parameter list
_TYPE_TOKEN = re.compile(r"<[A-Za-z][\w.|\[\] ]*>|\{[A-Za-z][\w.|\[\] ]*\}")
#: "der len: the length …", "str: BIT string.": a parameter's name (lower case), then what it is
_PARAM_LINE = re.compile(r"^\s*[a-z_][\w.*\[\]]*(?: [a-z_][\w.*\[\]]*){0,2}\s*:\s")
#: a C or JavaScript signature: ``[Function]int f (…)``, ``f(a, b)`` alone
_SIGNATURE = re.compile(r"\[Function\]|^\s*`?[\w.$]+\s*\([^()]*\)`?\s*$")
#: how a sentence ends: a stop (perhaps inside a closing quote or bracket)
_SENTENCE_END = re.compile(r"[.!][\"'”’)\]]*\s*$")
#: a line of a chunk that names what follows: a Markdown heading, a signature, or a short
#: line without a stop (a PDF's heading: "asn1 der coding") — not a list item, a table row, a
#: line of punctuation (``_NOT_TITLE``) or a line of a code block (``_FENCE_LINE``)
_NOT_TITLE = re.compile(r"^\s*(?:[-*+•]|\d+[.)]|\|)(?:\s|$)|^\W*$")
_FENCE_LINE = re.compile(r"^\s*(?:```|~~~)")
_TITLE_LINE = re.compile(r"^\s*(?:#{1,6}\s+\S.*|.*\[Function\].*|[\w.$`]+\s*\([^()]*\)`?\s*"
                         r"|[\w.`$<>/-]+(?: [\w.`$<>/-]+){0,5})\s*$")


#: why a sentence ending in ':' whose command is not shown cannot open the answer (it may
#: open a next source's part: what it introduces is a click away in that source)
INTRODUCES = "it introduces what is not in the answer"


def not_a_lead(text: str, acfg: AnswerSettings, shows_code: bool = False) -> str:
    """Why a statement cannot open the extractive answer ("" when it can): it is a parameter
    or return line (``<type>`` tokens, an ``answer.field_labels`` label, ``name: …``), a
    signature, a heading, title or URL line (no closing stop), or a sentence that points
    elsewhere (``answer.pointer_phrases``). A sentence ending in ':' may lead only when the
    command it introduces follows it in the answer (``shows_code``)."""
    flat = " ".join(text.split())
    folded = flat.casefold()
    if _TYPE_TOKEN.search(flat):
        return "a parameter list"
    label = folded.split(":", 1)[0].strip(" `*") if ":" in folded[:40] else ""
    if label and label in (f.casefold() for f in acfg.field_labels):
        return f"a {label!r} line"
    if _SIGNATURE.search(flat):
        return "a signature"
    if _PARAM_LINE.match(flat):
        return "a parameter line"
    if flat.endswith(":") and shows_code:  # what it points at follows it in the answer
        return ""
    if any(p.casefold() in folded for p in acfg.pointer_phrases):
        return "it points elsewhere"
    if flat.endswith(":"):
        return INTRODUCES
    if not _SENTENCE_END.search(flat):
        return "a heading, title or URL line"
    return ""


def _name_parts(text: str) -> str:
    """``text``'s words as one folded, space-separated string: ``path.join()``,
    ``path join`` and ``Path.Join`` all read " path join " (PDFs print ``asn1_der_coding``'s
    heading as "asn1 der coding")."""
    return " " + " ".join(re.findall(r"[^\W_]+", fold(text))) + " "


def _name_forms(question: str) -> list[str]:
    """The question's specific names (``answerability.specific_names``) as ``_name_parts``;
    a dotted name also by its last part when that is a name of its own
    (``emitter.removeListener`` → ``removeListener``)."""
    forms: list[str] = []
    for name in specific_names(question):
        forms.append(_name_parts(name))
        last = re.split(r"[.#]", name)[-1]
        if last != name and (re.search(r"[a-z][A-Z]|_", last)):
            forms.append(_name_parts(last))
    return [f for f in dict.fromkeys(forms) if f.strip()]


def _specific(forms: list[str], texts: list[str], max_share: float) -> list[str]:
    """The names that single out a few of the selected chunks: one found in more than
    ``max_share`` of them (the product's own name in every chunk of its manual) names what
    the whole knowledge base is about, not what this question asks."""
    parts = [_name_parts(t) for t in texts]
    return [f for f in forms if sum(f in p for p in parts) <= max_share * len(parts)]


def _names(text: str, forms: list[str], within: int = 0) -> bool:
    """Whether ``text`` names one of ``forms`` (``_name_forms``); with ``within``, among its
    first ``within`` words — the sentence is about it ("The `path.join()` method joins …",
    "magic elements contain …")."""
    parts = _name_parts(text)
    if within:
        head = parts.split()
        return any(f in " " + " ".join(head[:within + len(f.split()) - 1]) + " " for f in forms)
    return any(f in parts for f in forms)


def _title_above(s: Statement, chunk: Chunk | None) -> tuple[int, str] | None:
    """The line that titles what ``s`` is about, and where it starts: the nearest line above
    ``s`` in its chunk that titles what follows (a Markdown heading, a signature, a short line
    without a stop — a PDF's heading), or, with none above it, the chunk's own heading (at
    -1). None when neither is known."""
    if chunk is None or s.span is None:
        return None
    start, in_code = s.span[0], False
    for line in reversed(chunk.text[:start].splitlines(keepends=True)):
        start -= len(line)
        if _FENCE_LINE.match(line):
            in_code = not in_code
        elif not in_code and line.strip() and not _NOT_TITLE.match(line) \
                and _TITLE_LINE.match(line) and not _PARAM_LINE.match(line.strip()):
            return start, line
    return (-1, chunk.heading_path[-1]) if chunk.heading_path else None


def lead_ranks(sp: SuperPrompt, statements: list[Statement],
               acfg: AnswerSettings) -> dict[int, int]:
    """How fit each statement (by ``id``) is to open the answer, 0 best. With a specific name
    the question is about (``path.join``, ``asn1_der_coding``, ``<magic>`` among its first
    ``answer.question_subject_words`` words, and in at most ``answer.name_max_share`` of the
    selected chunks: ``_specific``): 0 a stating sentence
    (not ``not_a_lead``) about it — it names it among its first ``answer.subject_words``
    words ("The `path.join()` method joins …"), or it is the first under a heading or
    signature that names it ("Removes the specified listener …" under
    ``emitter.removeListener(eventName, listener)``); 1 another stating sentence under it or
    one that names it; 2 a sentence that only states. Without one, every stating sentence is
    1. 3: a sentence that cannot lead (2 for one ending in ':' whose command is not shown:
    it may open a next source's part, not the answer)."""
    chunks = sp.chunk_map()
    question = sp.question or build_query(sp.body)
    forms = _specific(_name_forms(question),
                      [chunks[c].text for c in sp.final_selection_ids if c in chunks],
                      acfg.name_max_share)
    # only a question about the name ("What does path.join do?") is answered by what it
    # does; one that mentions it in passing ("… longer than MiniLM can read?") is not
    forms = [f for f in forms if _names(question, [f], acfg.question_subject_words)]
    ranks: dict[int, int] = {}
    first_under: dict[tuple[str, int], Statement] = {}
    for s in statements:
        why = not_a_lead(s.text, acfg, bool(_shown_code(s, chunks)))
        if why:
            ranks[id(s)] = 2 if why == INTRODUCES else 3
            continue
        if not forms:
            ranks[id(s)] = 1
            continue
        title = _title_above(s, chunks.get(s.chunk_ids[0]) if s.chunk_ids else None)
        if title is not None and _names(title[1], forms):
            key = (s.chunk_ids[0], title[0])
            if key not in first_under or (s.span or (0, 0))[0] < (first_under[key].span or (0, 0))[0]:
                first_under[key] = s
            ranks[id(s)] = 1
        else:
            ranks[id(s)] = 1 if _names(s.text, forms) else 2
        if _names(s.text, forms, acfg.subject_words):
            ranks[id(s)] = 0
    for s in first_under.values():
        ranks[id(s)] = 0
    return ranks


def extractive_statements(sp: SuperPrompt, acfg: AnswerSettings,
                          a5: A5Config | None = None) -> list[Statement]:
    """The statements the extractive answer gives: A4's statements by score (its order when
    they have none, or when a person edited them: theirs), those that only mention the
    question's words — or repeat a sentence of the prompt itself (a remembered turn holds what
    the person said: "I renamed a file." is no answer to the same words) — left out unless
    nothing else is left. The first ``distinct_sources_first`` come from as many different
    chunks (the best statement of each chunk the person pinned first, then the fittest to
    lead — ``lead_ranks``: a stating sentence about what the question names before one that
    only states, before a parameter list, heading or pointer — best score first, each its
    chunk's ``_opening``), then the rest best first, those that cannot lead last; at most
    ``answer_length`` of them, the sentences of one chunk in the chunk's order
    (``_chunk_order``)."""
    record = sp.extras.a4
    # a statement the person rewrote is their note, not a source's words: never cited here
    statements = [s for s in record.condensed if not s.by_you] if record else []
    if all(s.score is not None for s in statements) and not (record and record.edited):
        statements.sort(key=lambda s: -(s.score or 0.0))
    asked = fold(sp.user_text) + " " + fold(sp.question)
    stating = [s for s in statements
               if not mention_only(s.text) and fold(s.text) not in asked] or statements
    n = answer_length(sp, acfg, a5)[0]
    if record and record.edited:  # the person's order stands as they left it
        lead = _first_of_each(sp, stating, acfg)
        return (lead + [s for s in stating if not any(s is o for o in lead)])[:n]
    ranks = lead_ranks(sp, stating, acfg)
    fittest = sorted(stating, key=lambda s: ranks[id(s)])  # stable: by score within a rank

    chunks = sp.chunk_map()

    def opening(best: Statement) -> Statement:  # a command is how to do it: it stays first
        if _shown_code(best, chunks):
            return best
        return _opening(best, [s for s in stating if ranks[id(s)] <= ranks[id(best)]],
                        acfg.lead_margin)

    # the opening sentence is the fittest; the next sources' the best that can lead (a hedge
    # against the fittest chunk not being the one that answers)
    can_lead = sorted(stating, key=lambda s: ranks[id(s)] == 3)
    lead = _first_of_each(sp, fittest, acfg, opening, can_lead)
    rest = sorted((s for s in stating if not any(s is o for o in lead)),
                  key=lambda s: ranks[id(s)] == 3)
    return _chunk_order(lead + rest, lead, n)


def _first_of_each(sp: SuperPrompt, fittest: list[Statement], acfg: AnswerSettings,
                   opening: Callable[[Statement], Statement] = lambda s: s,
                   then: list[Statement] | None = None) -> list[Statement]:
    """The first ``distinct_sources_first`` statements, from as many chunks: the pinned
    chunks' first, then the first of ``fittest`` (the opening sentence) and of ``then``
    (default ``fittest``: the next sources) of each next chunk (``opening`` of it)."""
    lead: list[Statement] = []
    for cid in edits.chunk_edits(sp.edits).kept:  # the chunks the person pinned lead
        best = next((s for s in fittest if s.chunk_ids[:1] == [cid]), None)
        if best is not None and len(lead) < acfg.distinct_sources_first:
            lead.append(opening(best))
    while len(lead) < acfg.distinct_sources_first:
        order = then if lead and then is not None else fittest
        s = next((s for s in order
                  if not any(s.chunk_ids[:1] == o.chunk_ids[:1] for o in lead)), None)
        if s is None:
            break
        lead.append(opening(s))
    return lead


def _chunk_order(ordered: list[Statement], lead: list[Statement], n: int) -> list[Statement]:
    """The first ``n`` of ``ordered`` with the sentences of one chunk in the chunk's order:
    a chunk's later sentences take the places its sentences hold, in the order they come in
    the chunk; a sentence that comes before its chunk's opening (``lead``) in the chunk is
    left out (a parameter list above the description), so each lead sentence opens its
    chunk's part of the answer."""
    opens = {o.chunk_ids[0]: o.span[0] for o in lead if o.chunk_ids and o.span is not None}
    kept = [s for s in ordered
            if not (s.chunk_ids and s.span is not None and s.chunk_ids[0] in opens
                    and s.span[0] < opens[s.chunk_ids[0]])][:n]
    by_chunk: dict[str, list[Statement]] = {}
    for s in kept:
        if s.chunk_ids and s.span is not None:
            by_chunk.setdefault(s.chunk_ids[0], []).append(s)
    queues = {c: sorted(ss, key=lambda s: s.span[0] if s.span else 0) for c, ss in by_chunk.items()}
    return [queues[s.chunk_ids[0]].pop(0) if s.chunk_ids and s.span is not None else s
            for s in kept]


def _opening(best: Statement, statements: list[Statement], margin: float) -> Statement:
    """The sentence of ``best``'s chunk that comes first in the chunk among those scoring
    within ``margin`` of it (and as fit to lead: the caller passes those): a section's
    opening sentence names its topic ("X first splits a document at its headings") where a
    later one adds a detail that happens to score higher."""
    if best.score is None or best.span is None:
        return best
    close = [s for s in statements if s.chunk_ids[:1] == best.chunk_ids[:1] and s.span is not None
             and s.score is not None and s.score >= best.score - margin]
    return min(close, key=lambda s: s.span[0] if s.span else 0, default=best)


def extractive_pieces(sp: SuperPrompt, acfg: AnswerSettings | None = None,
                      a5: A5Config | None = None,
                      chosen: list[Statement] | None = None) -> list[str]:
    """The extractive answer, as the pieces it is streamed in (one per sentence): the
    statements of ``extractive_statements``, the best first, each citing its sources by their
    number in the Sources block; a paragraph, or a list when A5's rules ask for one
    (``answer_shape``: bullets, a numbered list of steps, a checklist — a rule the person
    added counts) or the prompt for every item; within a limit in words, as many whole
    sentences as fit (at least one). ``prompt_ready`` keeps the whole condensed context; only
    the answer is short. ``chosen``: the statements, when the caller has them already (the
    answer step weighs the same ones before answering)."""
    acfg = acfg or AnswerSettings()
    if chosen is None:
        chosen = extractive_statements(sp, acfg, a5)
    if not chosen:
        return [NO_STATEMENTS]
    shape = answer_shape(sp, a5)
    mark = LIST_MARKS.get(shape.kind)
    if mark is None and answer_length(sp, acfg, a5)[0] > acfg.max_sentences:
        mark = LIST_MARKS["bullet_list"]
    words = min((lim.value for lim in shape.limits if lim.unit == "words" and lim.bound != "min"),
                default=None)
    if words is not None:
        counts = [len(_WORD.findall(s.text)) for s in chosen]
        chosen = chosen[:max(1, next((i for i in range(len(chosen))
                                      if sum(counts[:i + 1]) > words), len(chosen)))]
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


@dataclass
class Composition:
    """What the extractive answer is made of: the statements it is weighed on and given as
    (A4's, when there is no passage), and the passage it leads with (``ragstream.answering.passage``)."""

    statements: list[Statement]
    passage: Passage | None = None


def compose(sp: SuperPrompt, cfg: AppConfig, services=None,
            a5: A5Config | None = None) -> Composition:
    """The extractive answer's material: A4's statements in answer order
    (``extractive_statements``) and, unless a person curated A4's statements (their order
    stands) or ``answer.passage`` is off, the passage that answers (``lead_passage``),
    opened where the best of those statements stands. The passage's sentences (and its
    additions) are then what the answer is weighed on."""
    acfg = cfg.settings.answer
    chosen = extractive_statements(sp, acfg, a5)
    record = sp.extras.a4
    if not acfg.passage or (record is not None and record.edited) or (
            answer_shape(sp, a5).kind in LIST_MARKS):
        return Composition(chosen)
    corpus = services.index() if services is not None and hasattr(services, "index") else None
    others = [s for s in (record.condensed if record else []) if not s.by_you]
    ranked = sorted(others, key=lambda s: -(s.score or 0.0))
    long = answer_length(sp, acfg, a5)[0] > acfg.max_sentences
    passage = lead_passage(sp, named_opening(sp, chosen, acfg), acfg, ranked,
                           question_terms(cfg) if corpus is not None else None,
                           corpus.idf_weights if corpus is not None else None, long,
                           can_add=lambda t: not not_a_lead(t, acfg) and not mention_only(t),
                           how=asks_how(sp.question, cfg.settings.reranker.how_cues),
                           yes_no=asks_yes_no(sp.question),
                           sentence_scores=(lambda c: sentence_cosines(sp, c, services, cfg))
                           if corpus is not None else None,
                           can_lead=lambda t: not not_a_lead(t, acfg, t.rstrip().endswith(":"))
                           and not mention_only(t))
    if passage is None or not passage.statements:
        return Composition(chosen)
    return Composition(passage.statements + passage.additions, passage)


def named_opening(sp: SuperPrompt, chosen: list[Statement],
                  acfg: AnswerSettings) -> Statement | None:
    """The statement about the specific name the question asks about (``lead_ranks`` 0:
    "The `path.join()` method joins …"), from one of the ReRanker's best sources (the first
    ``answer.distinct_sources_first`` of the selection), when the question asks about one;
    else None."""
    if not chosen:
        return None
    ranks = lead_ranks(sp, chosen, acfg)
    near = set(sp.final_selection_ids[:acfg.distinct_sources_first])  # the ReRanker's best
    return next((s for s in chosen if ranks.get(id(s)) == 0 and s.chunk_ids[:1]
                 and s.chunk_ids[0] in near), None)


def sentence_cosines(sp: SuperPrompt, chunk: Chunk, services,
                     cfg: AppConfig | None = None) -> list[tuple[int, int, float]]:
    """Each evidence sentence of ``chunk`` (where it starts) and its cosine to the prompt as
    the ReRanker reads it (the sentence vectors computed at ingestion, the query's own); with
    ``cfg``, plus ``answer.passage_term_weight`` times the share of the question's terms the
    sentence holds (``with_terms``)."""
    from ragstream.backends.reranker import evidence_for

    (ev,) = evidence_for([chunk], services.index(), services.embedder)
    if not len(ev.sentence_vectors):
        return []
    query = rerank_query(sp.body, sp.extras.body_sources)
    q = services.embedder.embed([query])[0]
    cos = [float(c) for c in ev.sentence_vectors.astype("float32") @ q]
    scored = [(a, b, c) for (a, b), c in zip(ev.spans, cos)]
    weight = cfg.settings.answer.passage_term_weight if cfg is not None else 0.0
    if not weight:
        return scored
    corpus = services.index()
    weights = corpus.idf_weights(corpus.query_terms(without_frame(query)))
    return with_terms(scored, [chunk.text[a:b] for a, b in ev.spans], weights,
                      corpus.query_terms, weight)


def with_terms(scored: list[tuple[int, int, float]], texts: list[str],
               weights: dict[str, float], terms: Callable[[str], list[str]],
               weight: float) -> list[tuple[int, int, float]]:
    """Each sentence's score plus ``weight`` times the IDF-weighted share of the question's
    terms (``weights``: term -> IDF) that its text holds (``terms``: the index's tokeniser)."""
    from ragstream.backends.keyword_index import weighted_share

    out = []
    for (a, b, score), text in zip(scored, texts):
        held = set(terms(text))
        out.append((a, b, score + weight * weighted_share(weights, held.__contains__)))
    return out


def composed_pieces(sp: SuperPrompt, comp: Composition, acfg: AnswerSettings,
                    a5: A5Config | None = None) -> list[str]:
    """The extractive answer's pieces: the passage (``passage.render``) when there is one,
    else the statements (``extractive_pieces``)."""
    if comp.passage is None:
        return extractive_pieces(sp, acfg, a5, comp.statements)
    limits = [lim for lim in answer_shape(sp, a5).limits if lim.bound != "min"]
    words = min((lim.value for lim in limits if lim.unit == "words"), default=None)
    count = min((lim.value for lim in limits if lim.unit in COUNTED_UNITS), default=None)
    passage = trim(comp.passage, words, count)  # a length A5's rules ask for
    number = {c: n for n, c in enumerate(sp.final_selection_ids, start=1)}
    return render_passage(passage, number)


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


def passage_block(sp: SuperPrompt, passage: Passage | None) -> str:
    """The passage the answer leads with, for the model, first and whole: its number in the
    Sources block, its section's title and its text (``PASSAGE_HEADER``); "" without one."""
    if passage is None or passage.chunk.id not in sp.final_selection_ids:
        return ""
    n = sp.final_selection_ids.index(passage.chunk.id) + 1
    from ragstream.answering.passage import title_of

    return (PASSAGE_HEADER.format(n=n, title=title_of(passage.chunk)) + passage.text.strip()
            + "\n\n" + PASSAGE_CUE.format(n=n) + "\n")


def answer_messages(sp: SuperPrompt, cfg: AppConfig, schema: dict | None = None,
                    passage: Passage | None = None) -> tuple[list[dict[str, str]], str]:
    """System: System_MD and the citation rule (with ``schema``, the sentence form's rule and
    the schema's outline). User: Prompt_MD, the passage that answers, first and whole
    (``passage_block``: the extractive answer's lead, ``ragstream.answering.passage``), then the rest of
    ``prompt_ready`` — S_CTX_MD, Attachments_MD and the recent conversation, as Prompt_Builder
    composed them — within the
    prompt budget (see the module docstring), then the closing cue (``ANSWER_CUE`` or
    ``SENTENCES_CUE``). Returns the messages and a note naming what was left out ("" when
    nothing was)."""
    from ragstream.agents.factory import TEMPLATE_TOKENS, TOKENIZER_SLACK
    from ragstream.backends.tokens import count_tokens
    from ragstream.state.render import render_conversation

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
    lead = passage_block(sp, passage)
    for extra, left_out in tries:
        blocks = [sp.Prompt_MD, lead, sp.S_CTX_MD, *extra, cue]
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
    evidence: Evidence | None = None
    a5 = cfg.agents.A5_Format_Enforcer
    comp = Composition([])  # the extractive answer's material: weighed, then given
    if not empty:  # decided before answering, in every mode: the LLM is not asked without it
        comp = compose(sp, cfg, services, a5)
        evidence = weigh(sp, comp.statements, build_query(sp.body), services,
                         question_terms(cfg), acfg.answerability)
        if not evidence.answerable:
            empty = f"the knowledge base does not answer this: {evidence.why_not}"
    if empty:
        text = no_results_text(services.store, acfg)
        emit(text)
        seen = f" (evidence: {evidence.describe()})" if evidence and evidence.describe() else ""
        done = Answer(text=text, mode="no-results", mode_reason=empty, confidence="Low",
                      confidence_reason=not_found_words(sp, evidence),
                      confidence_detail=f"nothing to answer from: {empty}{seen}")
        done.first_token_ms = emit.first_ms
        done.latency_ms = round((time.perf_counter() - started) * 1000.0, 1)
        return done

    mode, mode_reason, text = "extractive", "no LLM endpoint is configured", ""
    if llm is not None:
        result = StreamResult()
        try:
            form, why = answer_form(sp, acfg, llm)
            schema = sentences_schema(sp, acfg) if form == "sentences" else None
            messages, left_out = answer_messages(sp, cfg, schema, comp.passage)
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
        failed, checks = citation_checks(text, sp, acfg, term_reader(services, cfg),
                                         comp.passage)
        if failed:
            set_aside, set_aside_reason = text, "; ".join(failed)
            mode, mode_reason = "extractive", f"the model's answer was set aside: {set_aside_reason}"
            emit("\n\n" + SET_ASIDE_NOTICE + "\n\n")
    if mode == "extractive":
        pieces = composed_pieces(sp, comp, acfg, a5)
        for piece in pieces:
            emit(piece)
        text = "".join(pieces).strip() + "\n"
        first_ms = emit.first_ms if first_ms is None else first_ms

    cites, invalid = map_citations(citation_numbers(text, acfg.max_citation_range), sp)
    cited, total = cited_share(text, {c.n for c in cites if c.valid}, acfg)
    assert evidence is not None  # weighed above whenever there is something to answer from
    level, detail = rate(evidence, cited, total, invalid, acfg)
    lacking = lacking_words(sp.question, comp, question_terms(cfg)) if mode == "extractive" else []
    words = confidence_words(level, evidence, cited, total, invalid, acfg, lacking)
    number = {c: n for n, c in enumerate(sp.final_selection_ids, start=1)}
    ref = PassageRef(chunk_id=comp.passage.chunk.id, n=number[comp.passage.chunk.id],
                     start=comp.passage.start, end=comp.passage.end) \
        if mode == "extractive" and comp.passage is not None \
        and comp.passage.chunk.id in number else None
    unsupported, beside = "", ""
    if mode == "llm" and not cited:
        unsupported = UNSUPPORTED + (f" (its citations {invalid} name no source)" if invalid else "")
        if acfg.offer_extractive:
            beside = "".join(composed_pieces(sp, comp, acfg, a5)).strip() + "\n"
    return Answer(text=text, mode=mode, mode_reason=mode_reason, citations=cites,
                  invalid_citations=invalid, confidence=level, confidence_reason=words,
                  confidence_detail=detail, passage=ref, model=model, usage=usage,
                  first_token_ms=first_ms, error=error,
                  unsupported=unsupported, extractive_text=beside, set_aside=set_aside,
                  set_aside_reason=set_aside_reason, checks=checks, form=form_used, raw=raw,
                  latency_ms=round((time.perf_counter() - started) * 1000.0, 1))


# --------------------------------------------------------------------------- after the answer


def conversation_after(sp: SuperPrompt, ans: Answer, max_pairs: int) -> list[ConversationTurn]:
    """The recent conversation including this turn, the last ``max_pairs`` pairs (N4)."""
    turns = list(sp.recent_conversation) + [ConversationTurn(user=sp.user_text,
                                                             assistant=ans.text)]
    return [t.model_copy() for t in turns[-max_pairs:]] if max_pairs > 0 else []
