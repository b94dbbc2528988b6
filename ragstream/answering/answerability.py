"""Does the knowledge base answer the question? Decided before answering, from evidence a
reader would accept.

The answer step (``ragstream.answering.answer``) weighs the sentences it would answer with — the
extractive answer's statements (``extractive_statements``), each read with the title and
heading path of the chunk it comes from — against the question:

* ``names`` — the question's specific terms: code spans, dotted names (``path.join``),
  snake_case (``asn1_der_coding``), ``<tags>``, CamelCase (``removeListener``), flags
  (``--save-dev``), words mixing letters and digits (``BM25``), hyphened names
  (``X-Forwarded-For``) and protocol versions (``HTTP/2``). Each must appear in the
  sentences used, the chunks of the final selection or their headings; a name that does not
  makes the question unanswerable whatever the scores say: an answer about ``asn1Coding`` is
  no answer about ``asn1_der_coding``. So does a word in capitals (QUIC) or a capitalised
  name (Kubernetes) that no document of the knowledge base mentions (``proper_names``).
* ``lead_match`` / ``best_match`` — the cosine of the question to the answer's first
  sentence and to its best sentence (the embedder's unit vectors);
* ``rerank`` — the ReRanker's best score; ``lead_rerank`` — the ReRanker's score of the chunk
  the first sentence comes from (the sentence and the ranking agree when it is high);
* ``rerank_margin`` — how far the ReRanker's best score is ahead of its second: one section
  stands out, or several compete;
* ``dense`` — the Retrieval stage's best dense similarity;
* ``covered`` — the IDF-weighted share of the question's terms (stemmed, stop words out, as
  BM25 reads them) that the sentences used contain;
* ``unseen`` — the IDF-weighted share of the question's terms no chunk of the knowledge base
  contains;
* ``lead_heading`` — the cosine of the question to the section the first sentence comes from
  (its innermost heading and the one above it: "Installing a cross-encoder for offline use >
  Downloading the model on a connected machine").

Two logistic models read these features (weights in ``answer.answerability`` of
``config/settings.json``, fitted by ``benchmarks/calibrate_confidence.py`` on the project's
question sets, each set's questions asked of its own documents — answerable — and of the
other set's — unanswerable): ``answerable`` estimates that the knowledge base answers the
question, ``leads`` that the answer's first sentence comes from the section that answers it.
The question is answerable when every name appears and P(answerable) reaches
``min_answerable``; confidence is High when P(leads) reaches ``high_min_leads``, Medium
otherwise, Low when it is not answerable.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ragstream.backends.keyword_index import weighted_share
from ragstream.common.config import AnswerabilityModel, AnswerabilitySettings
from ragstream.state.records import Statement
from ragstream.state.super_prompt import SuperPrompt, View

FEATURES = ("lead_match", "best_match", "rerank", "lead_rerank", "rerank_margin", "dense",
            "covered", "unseen", "lead_heading", "lead_covered")

# `code`   path.join   asn1_der_coding   <magic>   removeListener / ReRanker   --save-dev   BM25
_CODE_SPAN = re.compile(r"`([^`\n]+)`")
_TAG = re.compile(r"</?([A-Za-z][\w:.-]*)\s*/?>")
_DOTTED = re.compile(r"(?<![\w.])(?:[A-Za-z_$][\w$]*)(?:\.[A-Za-z_$][\w$]*)+(?:\(\))?")
_SNAKE = re.compile(r"(?<![\w-])[A-Za-z0-9]*[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+(?![\w-])")
_CAMEL = re.compile(r"(?<![\w-])(?:[a-z]+[A-Z]|[A-Z][a-z]+[A-Z])[A-Za-z0-9]*(?![\w-])")
_FLAG = re.compile(r"(?<![\w-])--[A-Za-z][\w-]*(?![\w-])")  # not -g: a reader says "global"
_MIXED = re.compile(r"(?<![\w.-])(?=[A-Za-z]*\d)(?=\d*[A-Za-z])[A-Za-z\d]{2,}(?![\w-])")
#: a header's or field's name, capitalised words joined by hyphens: X-Forwarded-For
_HYPHENED = re.compile(r"(?<![\w-])[A-Z][A-Za-z0-9]*(?:-[A-Z][A-Za-z0-9]*)+(?![\w-])")
#: a protocol and its version: HTTP/2, HTTP/1.1, TLS/1.3
_VERSION = re.compile(r"(?<![\w/])[A-Za-z]{2,}/\d+(?:\.\d+)*(?![\w/])")
#: a word in capitals (three or more letters): an acronym, QUIC, HSTS, XAMPP
_ACRONYM = re.compile(r"(?<![\w-])[A-Z]{3,}s?(?![\w-])")
#: a quoted value the person gives as an example — after "like", "such as", "e.g.", "for
#: example", or as a call's argument — names nothing the documents must say:
#: "a file name like 'index.coffee.md'", "path.basename('C:\\temp\\myfile.html')"
_EXAMPLE = re.compile(r"(?:\b(?:like|such as|e\.g\.,?|for example,?|for instance,?)\s+|\(\s*)"
                      r"(['\"‘“])[^'\"‘’“”\n]{1,100}['\"’”]", re.IGNORECASE)
#: Latin abbreviations and the like that look dotted but name nothing
_NOT_NAMES = frozenset({"e.g", "i.e", "etc", "vs", "cf"})


def specific_names(question: str) -> list[str]:
    """The question's terms that name one thing (see the module docstring), in order, once
    each (case-insensitively); a dotted name's trailing ``()`` dropped."""
    found: list[str] = []

    def add(name: str) -> None:
        name = name.strip().removesuffix("()").strip(".,;:!?'\"")
        if len(name) > 1 and name.casefold() not in _NOT_NAMES and \
                name.casefold() not in (f.casefold() for f in found):
            found.append(name)

    for m in _CODE_SPAN.finditer(question):
        add(m.group(1))
    rest = _EXAMPLE.sub(" ", _CODE_SPAN.sub(" ", question))
    for m in _TAG.finditer(rest):
        add(m.group(1))
    rest = _TAG.sub(" ", rest)
    for pattern in (_HYPHENED, _VERSION):
        for m in pattern.finditer(rest):
            add(m.group(0))
        rest = pattern.sub(" ", rest)
    for pattern in (_DOTTED, _SNAKE, _CAMEL, _FLAG, _MIXED):
        for m in pattern.finditer(rest):
            if pattern is _DOTTED and m.group(0).casefold().rstrip(".") in _NOT_NAMES:
                continue
            add(m.group(0))
    return found


#: a capitalised word (Qdrant, Unix)
_CAPITALISED = r"(?<![\w'’-])[A-Z][a-z]+[A-Za-z]*(?![\w'’-])"
#: a capitalised word that does not open a sentence: a product's or a thing's name (Qdrant)
_PROPER = re.compile(r"(?<![.!?:]\s)(?<!^)" + _CAPITALISED)


def proper_names(question: str) -> list[str]:
    """The question's words in capitals (``_ACRONYM``: QUIC, HSTS) and its capitalised words
    that open no sentence (Kubernetes, Pinecone), once each, in order: not names that must
    appear in the answer (CLI, API, Windows are everyday words of a manual), but a knowledge
    base that mentions one nowhere cannot be asked about it."""
    text = _CODE_SPAN.sub(" ", question).strip()
    found = [m.group(0) for m in _ACRONYM.finditer(text)]
    found += [m.group(0) for m in _PROPER.finditer(text) if m.group(0) != "I"]
    return list(dict.fromkeys(found))


#: at most this many of the selection's capitalised names are weighed against an unknown one
NEAR_CANDIDATES = 400


def near_names(unknown: Sequence[str], text: str, embedder, min_cos: float,
               terms: Callable[[str], set[str]]) -> dict[str, str]:
    """For each name of ``unknown`` (a question's capitalised name no document mentions), the
    capitalised name or word in capitals of ``text`` (the sources selected) closest to it in
    meaning, when their cosine (``embedder``'s unit vectors) reaches ``min_cos``: the pages say
    "Unix" where the question says "Linux". Names without one are left out. Words that open
    sentences and name nothing ("The", "If") are stop words: ``terms`` (the keyword index's
    reading of words) holds none of them."""
    if not unknown or min_cos > 1.0:
        return {}
    found = [m.group(0) for m in _ACRONYM.finditer(text)]
    found += re.findall(_CAPITALISED, text)
    asked = [u.casefold() for u in unknown]
    # another form of the same name (MPMs for MPM) is no other name for it: the rules that
    # read names decide about it
    cands = [c for c in dict.fromkeys(found) if terms(c)
             and not any(a in c.casefold() or c.casefold() in a for a in asked)][:NEAR_CANDIDATES]
    if not cands:
        return {}
    vectors = embedder.embed([*unknown, *cands])
    sims = vectors[:len(unknown)] @ vectors[len(unknown):].T
    out: dict[str, str] = {}
    for i, name in enumerate(unknown):
        j = int(np.argmax(sims[i]))
        if float(sims[i, j]) >= min_cos:
            out[name] = cands[j]
    return out


def name_pattern(name: str) -> re.Pattern[str]:
    """``name`` as a whole term, any case: ``path.join`` in "path.join(" but not in
    "xpath.joined"; a tag's name with or without its brackets."""
    return re.compile(r"(?<![\w])" + re.escape(name) + r"(?![\w])", re.IGNORECASE)


def missing_names(names: Sequence[str], text: str) -> list[str]:
    """The names that ``text`` does not contain as whole terms."""
    return [n for n in names if not name_pattern(n).search(text)]


def probability(features: dict[str, float], model: AnswerabilityModel) -> float:
    """The logistic model's probability for ``features`` (weights from config)."""
    z = model.bias + sum(getattr(model, k) * features.get(k, 0.0) for k in FEATURES)
    return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, z))))


@dataclass(frozen=True)
class Evidence:
    """What the answer step weighed before answering, and its verdict (shown in
    ``confidence_reason``)."""

    names: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    features: dict[str, float] = field(default_factory=dict)
    p_answerable: float = 0.0
    p_leads: float = 0.0
    answerable: bool = False
    why_not: str = ""
    near: dict[str, str] = field(default_factory=dict)  # Linux -> Unix: named by a close name

    def describe(self) -> str:
        """The evidence in a reader's words, e.g. "best sentence matches the question 0.71;
        rerank 0.66; 90% of the question's terms in the sentences used; P(answerable) 0.97"."""
        f = self.features
        parts = []
        if f:
            parts.append(f"first sentence matches the question {f['lead_match']:.2f} (best "
                         f"{f['best_match']:.2f}; its section {f.get('lead_heading', 0.0):.2f})")
            parts.append(f"best rerank score {f['rerank']:.2f} (first sentence's chunk "
                         f"{f['lead_rerank']:.2f})")
            parts.append(f"{f['covered']:.0%} of the question's terms in the sentences used"
                         + (f", {f['unseen']:.0%} in no document" if f["unseen"] else ""))
        if self.names:
            found = [n for n in self.names if n not in self.missing]
            if found:
                parts.append(f"named: {', '.join(found)} (found)")
            if self.missing:
                parts.append(f"{', '.join(self.missing)} not in the sentences used")
        for name, close in self.near.items():
            parts.append(f"{name} in no document; the sources say {close} (close in meaning)")
        if f:
            parts.append(f"P(answerable) {self.p_answerable:.2f}, P(leads with the answer) "
                         f"{self.p_leads:.2f}")
        return "; ".join(parts)


def features(sp: SuperPrompt, statements: Sequence[Statement], used_text: str, query: str,
             services, terms: Callable[[str], set[str]]) -> dict[str, float]:
    """The features of ``FEATURES`` for the answer made of ``statements`` (``used_text``:
    their texts with their chunks' titles and headings)."""
    rerank_rows = sp.view(View.RERANKED)
    rerank = {r.chunk_id: r.scores.get("rerank", r.score) for r in rerank_rows}
    ranked = sorted(rerank.values(), reverse=True)
    lead_chunk = statements[0].chunk_ids[0] if statements[0].chunk_ids else ""
    section = _section_text(sp.chunk_map().get(lead_chunk))  # the first sentence's section
    vectors = services.embedder.embed([query, *(s.text for s in statements), section])
    cosines = vectors[1:-1] @ vectors[0]
    dense = [r.scores["dense"] for r in sp.view(View.RETRIEVAL) if "dense" in r.scores]
    corpus = services.index()
    asked = sorted(terms(query))
    weights = corpus.idf_weights(asked)
    covered = weighted_share(weights, terms(used_text).__contains__)
    lead = sp.chunk_map().get(lead_chunk)
    own = "\n".join(s.text for s in statements if s.chunk_ids[:1] == [lead_chunk])
    lead_text = f"{lead.title}\n{' '.join(lead.heading_path)}\n{own}" if lead is not None else own
    lead_covered = weighted_share(weights, terms(lead_text).__contains__)
    return {
        "lead_match": float(cosines[0]),
        "best_match": float(np.max(cosines)),
        "rerank": float(max(rerank.values(), default=0.0)),
        "lead_rerank": float(rerank.get(lead_chunk, 0.0)),
        "rerank_margin": float(ranked[0] - ranked[1]) if len(ranked) > 1 else 0.0,
        "dense": float(max(dense, default=0.0)),
        "covered": float(covered),
        "unseen": float(corpus.unseen_share(asked)),
        "lead_heading": float(vectors[-1] @ vectors[0]),
        "lead_covered": float(lead_covered),
    }


def _section_text(chunk) -> str:
    """What a chunk's section is called: its innermost heading and the one above it, or its
    document's title when it has none."""
    if chunk is None:
        return ""
    return " > ".join(chunk.heading_path[-2:]) or chunk.title


def weigh(sp: SuperPrompt, statements: Sequence[Statement], query: str, services,
          terms: Callable[[str], set[str]], settings: AnswerabilitySettings) -> Evidence:
    """Decide whether the sentences the answer would be made of answer the question."""
    names = specific_names(sp.question)
    if not statements:
        return Evidence(names=names, missing=list(names),
                        why_not="no sentence of the selection states anything to answer with")
    chunks = sp.chunk_map()
    heads = {f"{c.title}\n{' '.join(c.heading_path)}" for s in statements
             for c in (chunks.get(cid) for cid in s.chunk_ids[:1]) if c is not None}
    used_text = "\n".join([*(s.text for s in statements), *sorted(heads)])
    # a name the question asks about must stand in the sources the answer is chosen from
    selected = "\n".join(f"{c.title}\n{' '.join(c.heading_path)}\n{c.text}"
                         for c in (chunks.get(cid) for cid in sp.final_selection_ids)
                         if c is not None)
    missing = missing_names(names, f"{used_text}\n{selected}") \
        if settings.names_must_appear else []
    corpus = services.index()
    unknown = [a for a in proper_names(sp.question) if a not in names
               and (stems := sorted(terms(a))) and corpus.unseen_share(stems) >= 1.0] \
        if settings.names_must_appear else []
    near = near_names(unknown, selected, services.embedder, settings.near_name_min, terms)
    unknown = [a for a in unknown if a not in near]
    f = features(sp, statements, used_text, query, services, terms)
    p_answerable = probability(f, settings.answerable)
    p_leads = probability(f, settings.leads)
    why_not = ""
    if unknown:
        many = len(unknown) != 1
        why_not = (f"the question names {', '.join(unknown)}; no document of the knowledge base "
                   f"mentions {'them' if many else 'it'}")
        missing = [*missing, *unknown]
    elif missing:
        many = len(missing) != 1
        why_not = (f"the question names {', '.join(missing)}; no sentence used (nor its heading) "
                   f"mentions {'them' if many else 'it'}")
    elif p_answerable < settings.min_answerable:
        why_not = (f"P(answerable) {p_answerable:.2f} is below answer.answerability."
                   f"min_answerable {settings.min_answerable:g}")
    return Evidence(names=names, missing=missing, features=f, p_answerable=p_answerable,
                    p_leads=p_leads, answerable=not why_not, why_not=why_not, near=near)
