"""Rerankers: score chunks against the whole query. Higher is more relevant; scores lie in [0, 1].

* ``cross-encoder`` — a sentence-transformers ``CrossEncoder`` (default
  ``cross-encoder/ms-marco-MiniLM-L-6-v2``) loaded from a local folder or the local Hugging
  Face cache only (``ragstream.backends.cross_encoder``). It reads each passage (heading path
  + text) with the query: real model work per candidate.
* ``offline`` — used when no cross-encoder can be loaded (no package on this machine ships
  one). It re-scores each chunk against the *whole* query with three signals the first
  stage did not use, all read from vectors computed at ingestion (fetched from the engine), so a
  query costs one encoder call plus matrix products:
  - ``query_cosine``: cosine of the full query and the chunk's best embedding window;
  - ``best_sentence_cosine``: cosine of the full query and the chunk's best evidence
    sentence, which favours a chunk that answers in one place over one vaguely on topic;
  - ``term_coverage``: the share of the query's stemmed content words found in the chunk
    (exact-term evidence such as names and numbers), from the BM25 index's term matrix;
  - ``query_bm25``: BM25 of the whole query, divided by the best-matching chunk's (so 1 is
    the corpus's best lexical match), from the same index;
  - ``chunk_terms``: the IDF-weighted share of the query's terms the chunk (with its title and
    headings) holds: a rare word of the question counts for more than a common one;
  - ``heading_terms``: the same share for its section's headings (the innermost two): a
    section titled for what is asked ("Simple reverse proxying" for "… as a reverse proxy?");
  - ``how_code``: 1 for a chunk holding a code or configuration block when the query asks how
    (``reranker.how_cues``): the block is how it is done.
  The score is their weighted sum (weights in ``reranker.offline_weights``). A chunk the
  index does not hold (a super-prompt older than the last ingest) is encoded on the spot.

``load_reranker`` picks the backend (``reranker.backend``: auto | cross-encoder | offline) and
says which one ran and why, for the view and the GUI.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from ragstream.backends.doc_index import encode_chunks
from ragstream.backends.keyword_index import weighted_share
from ragstream.backends.search.base import Evidence
from ragstream.common.config import RerankerSettings
from ragstream.common.errors import ModelLoadError
from ragstream.common.text import asks_how, without_frame
from ragstream.state.super_prompt import Chunk


class Reranker(Protocol):
    """What a reranker offers: its backend name and one score per chunk for a query."""

    backend: str

    def score(self, query: str, chunks: Sequence[Chunk]) -> list[float]:
        """One score in [0, 1] per chunk, in the order given."""


@dataclass
class RerankerChoice:
    """The reranker in use, its backend name, and why it was chosen."""

    reranker: Reranker
    backend: str
    reason: str


def passage(chunk: Chunk) -> str:
    """What a cross-encoder reads: the heading path, then the text."""
    heading = chunk.heading_label
    return f"{heading}\n{chunk.text}" if heading else chunk.text


class PassageReranker:
    """A reranker that reads passage texts (a cross-encoder), given chunks."""

    def __init__(self, model):
        self.model = model
        self.backend = model.backend

    def score(self, query: str, chunks: Sequence[Chunk]) -> list[float]:
        """Score the chunks' passages (heading path, then text) with the wrapped model."""
        return self.model.score(query, [passage(c) for c in chunks])


def evidence_for(chunks: Sequence[Chunk], corpus, embedder) -> list[Evidence]:
    """Each chunk's stored vectors (``corpus``: fetched from the engine); chunks it does not
    hold as they are are encoded now."""
    found = corpus.evidence(chunks) if corpus is not None else [None] * len(chunks)
    missing = [c for c, e in zip(chunks, found) if e is None]
    fresh: dict[str, Evidence] = {}
    if missing:
        records = encode_chunks(missing, embedder)
        for c in missing:
            mine = [r for r in records if r.chunk.id == c.id]
            dim = len(mine[0].vector)
            spans = [s for r in mine for s in r.sentence_spans]
            vecs = [r.sentence_vectors for r in mine if r.sentence_vectors is not None]
            fresh[c.id] = Evidence(
                window_vectors=np.vstack([r.vector for r in mine]).astype(np.float32),
                sentence_vectors=(np.vstack(vecs).astype(np.float32) if vecs
                                  else np.zeros((0, dim), dtype=np.float32)),
                sentences=[c.text[a:b] for a, b in spans], spans=list(spans))
    return [e if e is not None else fresh[c.id] for c, e in zip(chunks, found)]


class OfflineReranker:
    """Reranks without a model download: a weighted mix of cosine, term coverage and BM25 features."""

    backend = "offline"

    def __init__(self, services, weights, how_cues: Sequence[str] = ()):
        """``services``: where the embedder, the keyword tokenizer and the index come from
        (read at each call, so a swapped embedder or a re-ingested store is seen);
        ``how_cues``: the phrases of a query that asks how (``reranker.how_cues``)."""
        self.services = services
        self.weights = weights
        self.how_cues = tuple(how_cues)

    def features(self, query: str, chunks: Sequence[Chunk]) -> list[dict[str, float]]:
        """Per chunk: window and best-sentence cosine to the query, query-term coverage and relative BM25."""
        if not chunks:
            return []
        services = self.services
        q = services.embedder.embed([query])[0]
        corpus = services.index()
        evidence = evidence_for(chunks, corpus, services.embedder)
        terms = corpus.query_terms(without_frame(query))  # "how does X work": X, not work
        coverage = corpus.coverage(terms, chunks)
        weights = corpus.idf_weights(terms)
        weighted = [weighted_share(weights, held.__contains__) for held in corpus.terms_of(chunks)]
        headings = [weighted_share(weights, set(corpus.query_terms(" ".join(c.heading_path[-2:])))
                                   .__contains__) for c in chunks]
        how = asks_how(query, self.how_cues)
        held = [c.id for c in chunks if corpus.holds(c)]
        bm25 = corpus.keyword_scores(terms, held)
        best_bm25 = corpus.best_keyword(terms) if held else 0.0
        out = []
        for c, ev, cov, wcov, head in zip(chunks, evidence, coverage, weighted, headings):
            window_cos = float((ev.window_vectors @ q).max())
            sent_cos = (float((ev.sentence_vectors @ q).max()) if len(ev.sentence_vectors)
                        else window_cos)
            out.append({
                "query_cosine": max(0.0, window_cos),
                "best_sentence_cosine": max(0.0, sent_cos),
                "term_coverage": float(cov),
                "query_bm25": bm25.get(c.id, 0.0) / best_bm25 if best_bm25 > 0 else 0.0,
                "chunk_terms": float(wcov),
                "heading_terms": float(head),
                "how_code": 1.0 if how and c.has_code else 0.0,
            })
        return out

    def score(self, query: str, chunks: Sequence[Chunk]) -> list[float]:
        """Per chunk, the weighted mean of its features with ``offline_weights`` as weights."""
        weights = self.weights.model_dump()
        total = sum(weights.values()) or 1.0
        return [sum(w * f[name] for name, w in weights.items()) / total
                for f in self.features(query, chunks)]


def find_local_model(model: str) -> str | None:
    """A folder for ``model`` on this machine (a path, or the local Hugging Face cache), or
    None. Checked before importing sentence-transformers, which takes seconds."""
    path = Path(model).expanduser()
    if path.exists():
        return str(path)
    hub = os.environ.get("HF_HUB_CACHE") or str(
        Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface")) / "hub")
    cached = Path(hub) / ("models--" + model.replace("/", "--"))
    return model if cached.is_dir() else None


def share_reranker(choice: RerankerChoice, services) -> RerankerChoice:
    """``choice`` (another ``Services``' reranker) for ``services``: a cross-encoder is shared
    as it is (it reads passages only); the offline reranker is made again, reading ``services``'
    index."""
    if isinstance(choice.reranker, OfflineReranker):
        return RerankerChoice(OfflineReranker(services, choice.reranker.weights,
                                              choice.reranker.how_cues), choice.backend,
                              choice.reason)
    return choice


def load_reranker(settings: RerankerSettings, services) -> RerankerChoice:
    """The cross-encoder when it loads offline, else the offline reranker, with the reason."""
    def offline(reason: str) -> RerankerChoice:
        return RerankerChoice(OfflineReranker(services, settings.offline_weights, settings.how_cues),
                              "offline", reason)

    if settings.backend == "offline":
        return offline("reranker.backend is 'offline'")
    if settings.backend == "auto" and find_local_model(settings.model) is None:
        return offline(f"cross-encoder {settings.model} not available offline (no such folder "
                       f"and not in the local Hugging Face cache)")
    try:
        from ragstream.backends.cross_encoder import CrossEncoderReranker

        ce = CrossEncoderReranker(settings.model, settings.batch_size)
        return RerankerChoice(PassageReranker(ce), "cross-encoder",
                              f"cross-encoder {settings.model} loaded")
    except Exception as err:
        if settings.backend == "cross-encoder":
            raise ModelLoadError(
                f"The cross-encoder {settings.model!r} could not be loaded offline ({err}). "
                f"Put the model folder on disk and set reranker.model to its path, or set "
                f"reranker.backend to 'auto' or 'offline'."
            ) from err
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        return offline(f"cross-encoder {settings.model} not available offline ({first_line[:160]})")
