"""What a conversation's turn remembers, and how a conversation is named: the sentences an
answer asserted, each with its own source (``memory_text``), left out what the person wrote
(``own_texts``); a conversation's name (``check_name``) and the suffix of one migrated from
another knowledge base (``kb_suffix``). The conversations' store (``conversations``) and the
QA log's migrations (``qa_log``) both read it; it imports neither."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence

from ragstream.common.config import AppConfig
from ragstream.common.errors import ConversationError
from ragstream.stages.sources import FROM
from ragstream.state.records import CHUNK_KINDS, GATE_KINDS
from ragstream.state.render import strip_citations
from ragstream.state.super_prompt import SuperPrompt

DEFAULT_KB = "default"
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,59}$")
NAME_RULE = ("1 to 60 characters: letters, digits, '.', '-', '_' or '@', starting with a letter "
             "or digit")


def check_name(name: str) -> str:
    """``name`` stripped, or ``ConversationError`` saying what a name may be."""
    clean = str(name).strip()
    if not NAME_PATTERN.match(clean):
        raise ConversationError(f"{name!r} cannot be a conversation's name: use {NAME_RULE}.")
    return clean


def kb_suffix(kb: str) -> str:
    """``@<kb>`` as a name may end: a migrated conversation's turns of another knowledge base
    go to ``<name>@<kb>`` (its spaces become '-')."""
    return "@" + re.sub(r"[^A-Za-z0-9._-]", "-", kb or DEFAULT_KB)


_LIST_MARK = re.compile(r"^\s*(?:[-*+•]|\d+[.)])\s+")


def own_texts(sp: SuperPrompt) -> list[str]:
    """What the person wrote for this prompt, which no turn remembers as a fact: the values of
    their edits (a statement rewritten in A4, a rule rewritten or added in A5, a body field set
    by hand), the statements A4 marks as theirs, and A5's rules (what the answer must look like,
    not what the documents say)."""
    placed = (*CHUNK_KINDS, *GATE_KINDS, "statement_move", "rule_move")  # no words of theirs
    texts = [e.after for e in sp.edits if e.after and e.kind not in placed]
    a4 = sp.extras.a4
    for s in a4.condensed if a4 else []:
        if s.by_you:
            texts.append(s.text)
    spec = sp.extras.format_enforcer
    texts += list(spec.hard_rules) if spec else []
    return [t for t in texts if t.strip()]


def memory_text(answer: str, labels: Mapping[int, str], question: str = "",
                own: Sequence[str] = (), cfg: AppConfig | None = None,
                turns: Collection[int] = ()) -> tuple[str, str]:
    """What a turn remembers, and why nothing when it is empty: the sentences the ``answer``
    asserted, one per line, each without its ``[n]`` and followed by its own source(s), ``Chunks
    are split at headings. (from kb/chunking.md § Sections)``. ``labels`` maps each valid
    citation number of a document to its label; ``turns`` are the numbers citing remembered
    turns. Left out: a sentence that cites no document (it says where it comes from nowhere;
    one citing only earlier turns is in the memory already), a question, a sentence of the
    ``question`` itself (what the person said is not what the documents say), and one taken
    from the person's ``own`` texts (``own_texts``): one with at least ``conversations.own_share`` of its word
    3-shingles in either (``cfg``'s settings; the defaults without one). Sentences are read as
    the answer's citation checks read them (``answer_sentences``, ``answer.min_sentence_words``)."""
    from ragstream.answering.answer import answer_sentences, citation_numbers
    from ragstream.common.config import Settings
    from ragstream.common.text import shingles

    settings = cfg.settings if cfg is not None else Settings()
    own_share = settings.conversations.own_share
    min_words, max_range = settings.answer.min_sentence_words, settings.answer.max_citation_range

    asked = shingles(question)
    theirs = [shingles(t) for t in own]
    kept: list[str] = []
    left = {"cite no source": 0, "repeat the question": 0, "are your own words": 0,
            "repeat an earlier turn": 0}
    for sentence in answer_sentences(answer, min_words):
        numbers = citation_numbers(sentence, max_range)
        sources = [labels[n] for n in numbers if n in labels]
        bare = " ".join(_LIST_MARK.sub("", strip_citations(sentence)).split())
        bare = re.sub(r"\s+([.,;:!?])", r"\1", bare)
        mine = shingles(bare)
        if not sources and any(n in turns for n in numbers):
            left["repeat an earlier turn"] += 1
        elif not sources:
            left["cite no source"] += 1
        elif bare.endswith("?") or len(mine & asked) >= own_share * len(mine):
            left["repeat the question"] += 1
        elif any(len(mine & t) >= own_share * len(mine) for t in theirs):
            left["are your own words"] += 1
        else:
            line = f"{bare}{FROM}{'; '.join(dict.fromkeys(sources))})"
            if line not in kept:
                kept.append(line)
    if kept:
        return "\n".join(kept), ""
    said = [f"{n} {'sentence' if n == 1 else 'sentences'} {what if n != 1 else _one(what)}"
            for what, n in left.items() if n]
    return "", ("nothing it asserted can be remembered" + (f": {', '.join(said)}" if said
                                                          else ": it has no sentence"))


def _one(what: str) -> str:
    return {"cite no source": "cites no source", "repeat the question": "repeats the question",
            "are your own words": "is your own words",
            "repeat an earlier turn": "repeats an earlier turn"}[what]
