"""Rerankers: score (query, passage) pairs. Higher is more relevant; scores lie in [0, 1].

* ``CrossEncoderReranker`` — sentence-transformers ``CrossEncoder`` (default
  ``cross-encoder/ms-marco-MiniLM-L-6-v2``), loaded from a local folder or the local Hugging
  Face cache only; logits go through a sigmoid.
* ``OfflineReranker`` — used when no cross-encoder can be loaded (no package on this machine
  ships one). It really re-scores each passage against the *whole* query, with three signals
  the first-stage retrieval did not use:
  - ``query_cosine``: cosine of the full query and the passage (best embedding window);
  - ``best_sentence_cosine``: cosine of the full query and the passage's best sentence,
    which favours a passage that answers in one place over one that is vaguely on topic;
  - ``term_coverage``: the IDF-free share of the query's stemmed content words found in the
    passage (exact-term evidence, e.g. names and numbers).
  The score is their weighted sum (weights in ``reranker.offline_weights``).

``load_reranker`` picks the backend (``reranker.backend``: auto | cross-encoder | offline) and
says which one ran and why, for the view and the GUI.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Sequence

import numpy as np

from ragstream.backends import prepare_offline_env
from ragstream.config import RerankerSettings
from ragstream.errors import ModelLoadError
from ragstream.text import sentences


class Reranker(Protocol):
    backend: str

    def score(self, query: str, passages: Sequence[str],
              window_vectors: Sequence[np.ndarray] | None = None) -> list[float]:
        """``window_vectors``: the passages' stored embedding windows, when the caller has
        them (a backend may use them to save work, or ignore them)."""


@dataclass
class RerankerChoice:
    reranker: Reranker
    backend: str
    reason: str


class CrossEncoderReranker:
    backend = "cross-encoder"

    def __init__(self, model: str, batch_size: int = 16):
        prepare_offline_env()
        from sentence_transformers import CrossEncoder

        path = str(Path(model).expanduser()) if Path(model).expanduser().exists() else model
        self.model_name = model
        self.batch_size = batch_size
        self._model = CrossEncoder(path, device="cpu", local_files_only=True)

    def score(self, query: str, passages: Sequence[str],
              window_vectors: Sequence[np.ndarray] | None = None) -> list[float]:
        if not passages:
            return []
        logits = self._model.predict([(query, p) for p in passages], batch_size=self.batch_size,
                                     show_progress_bar=False, convert_to_numpy=True)
        return [1.0 / (1.0 + math.exp(-float(x))) for x in np.ravel(logits)]


#: sentences shorter than this are headings or fragments, not evidence
MIN_SENTENCE_WORDS = 3


class OfflineReranker:
    backend = "offline"

    def __init__(self, embedder, terms, weights):
        """``embedder``: an Embedder; ``terms``: text -> set of stemmed content words."""
        self.embedder = embedder
        self.terms = terms
        self.weights = weights

    def features(self, query: str, passages: Sequence[str],
                 window_vectors: Sequence[np.ndarray] | None = None) -> list[dict[str, float]]:
        if not passages:
            return []
        q = self.embedder.embed([query])[0]
        units: list[str] = []  # texts to embed: windows (unless given), then sentences
        spans: list[tuple[int, int, int]] = []
        for i, p in enumerate(passages):
            windows = [] if window_vectors is not None else (
                [p[a:b] for a, b in self.embedder.windows(p)] or [p])
            sents = [s for s in sentences(p) if len(s.split()) >= MIN_SENTENCE_WORDS] or [p]
            start = len(units)
            units.extend(windows)
            units.extend(sents)
            spans.append((start, start + len(windows), start + len(windows) + len(sents)))
        sims = self.embedder.embed(units) @ q
        q_terms = self.terms(query)
        out = []
        for i, (p, (a, b, c)) in enumerate(zip(passages, spans)):
            window_sims = (np.asarray(window_vectors[i]) @ q) if window_vectors is not None else sims[a:b]
            coverage = (len(q_terms & self.terms(p)) / len(q_terms)) if q_terms else 0.0
            out.append({
                "query_cosine": max(0.0, float(window_sims.max())),
                "best_sentence_cosine": max(0.0, float(sims[b:c].max())),
                "term_coverage": coverage,
            })
        return out

    def score(self, query: str, passages: Sequence[str],
              window_vectors: Sequence[np.ndarray] | None = None) -> list[float]:
        w = self.weights
        total = w.query_cosine + w.best_sentence_cosine + w.term_coverage or 1.0
        return [
            (w.query_cosine * f["query_cosine"] + w.best_sentence_cosine * f["best_sentence_cosine"]
             + w.term_coverage * f["term_coverage"]) / total
            for f in self.features(query, passages, window_vectors)
        ]


def load_reranker(settings: RerankerSettings, embedder, terms) -> RerankerChoice:
    def offline(reason: str) -> RerankerChoice:
        return RerankerChoice(OfflineReranker(embedder, terms, settings.offline_weights),
                              "offline", reason)

    if settings.backend == "offline":
        return offline("reranker.backend is 'offline'")
    try:
        ce = CrossEncoderReranker(settings.model, settings.batch_size)
        return RerankerChoice(ce, "cross-encoder", f"cross-encoder {settings.model} loaded")
    except Exception as err:  # noqa: BLE001 - any load failure means "not available offline"
        if settings.backend == "cross-encoder":
            raise ModelLoadError(
                f"The cross-encoder {settings.model!r} could not be loaded offline ({err}). "
                f"Put the model folder on disk and set reranker.model to its path, or set "
                f"reranker.backend to 'auto' or 'offline'."
            ) from err
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        return offline(f"cross-encoder {settings.model} not available offline ({first_line[:160]})")
