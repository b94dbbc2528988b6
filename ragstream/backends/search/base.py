"""What the stages ask of a search engine, whichever engine answers.

A knowledge base is served by one ``SearchEngine``: the default, ``LocalEngine`` (Chroma's
HNSW for the dense vectors, tantivy for BM25, filters and the chunk store, both in the
knowledge base's folder), or a server shared by many processes. A conversation's remembered
turns are a small ``MemoryEngine`` beside it. The stages see neither: they read a ``Corpus``
(``ragstream.backends.search.corpus``), which asks the engines for candidates and fetches
what it scores.

Every engine answers the same few calls. ``dense`` and ``keyword`` give *candidates*; the
scores the stages rank by are computed from what ``fetch`` returns (each candidate's stored
window vectors against every query piece, BM25 for every piece from ``keyword_scores``), so an
approximate index can change which chunks are candidates, never their scores.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ragstream.backends.search.keyword import StoredChunk
from ragstream.state.super_prompt import Filters


@dataclass
class Evidence:
    """What the ReRanker and A4 read for one chunk."""

    window_vectors: np.ndarray  # float32 (windows × dim)
    sentence_vectors: np.ndarray  # float32 (sentences × dim)
    sentences: list[str]  # clean sentence texts, in reading order
    spans: list[tuple[int, int]]  # each sentence's character span in the chunk's text


class SearchEngine(Protocol):
    """The calls a knowledge base's engine answers (``LocalEngine``, ``MemoryEngine``, …)."""

    name: str  # what it is, for messages: "Chroma + tantivy in /path", "conversation 'x'"

    def version(self) -> str:
        """Changes whenever the content changes (the key of what the ``Corpus`` caches)."""
        ...

    def count(self, filters: Filters | None = None) -> int:
        """How many chunks it holds (passing ``filters``)."""
        ...

    def dense(self, vectors: np.ndarray, k: int,
              filters: Filters | None = None) -> list[list[tuple[str, float]]]:
        """Per query vector, up to ``k`` chunks nearest by their best window, passing
        ``filters``: ``(chunk id, cosine)``, nearest first (the cosine may be approximate)."""
        ...

    def keyword(self, terms: Sequence[str], k: int,
                filters: Filters | None = None) -> list[tuple[str, float]]:
        """The ``k`` best BM25 matches of ``terms`` passing ``filters``, best first."""
        ...

    def keyword_scores(self, terms: Sequence[str], chunk_ids: Sequence[str]) -> dict[str, float]:
        """BM25 of each of ``chunk_ids`` that holds one of ``terms``."""
        ...

    def stats(self) -> tuple[int, float]:
        """(chunks, mean chunk length in terms): BM25's corpus statistics."""
        ...

    def doc_freqs(self, terms: Sequence[str]) -> dict[str, int]:
        """How many chunks hold each term."""
        ...

    def fetch(self, chunk_ids: Sequence[str]) -> dict[str, StoredChunk]:
        """The stored chunks of ``chunk_ids`` it holds."""
        ...

    def phrase(self, text: str, limit: int) -> list[str]:
        """Chunks whose words hold ``text``'s in a row (folded), at most ``limit``."""
        ...

    def values(self, field: str) -> list[str]:
        """Distinct values of a filter field (``doc_type``, ``source_name``)."""
        ...

    def document_chunks(self, doc_id: str) -> list[str]:
        """The chunk ids of one document."""
        ...

    def every_chunk(self) -> Iterable[StoredChunk]:
        """Every chunk (reads everything: evaluation and tools only)."""
        ...


def evidence_of(stored: StoredChunk) -> Evidence:
    """A stored chunk's vectors and evidence sentences, as the ReRanker and A4 read them."""
    from ragstream.common.text import clean_sentence

    text = stored.chunk.text
    return Evidence(window_vectors=stored.window_vectors,
                    sentence_vectors=stored.sentence_vectors,
                    sentences=[clean_sentence(text[a:b]) for a, b in stored.spans],
                    spans=list(stored.spans))


def best_cosines(stored: Sequence[StoredChunk], vectors: np.ndarray) -> np.ndarray:
    """(chunks × vectors): each chunk's best-window cosine to each of ``vectors`` (unit
    vectors); -1 for a chunk without windows. One product over every chunk's windows at
    once: at 100k chunks a query scores ~400 candidates, and one small product per chunk cost
    ~15 µs each in numpy's call overhead."""
    vectors = np.asarray(vectors, dtype=np.float32)
    out = np.full((len(stored), len(vectors)), -1.0, dtype=np.float32)
    windows = [s.window_vectors for s in stored]
    counts = np.fromiter((len(w) for w in windows), dtype=np.int64, count=len(windows))
    held = np.flatnonzero(counts)
    if len(held) and len(vectors):
        cosines = np.concatenate([windows[i] for i in held]) @ vectors.T
        starts = np.concatenate(([0], np.cumsum(counts[held])[:-1]))
        out[held] = np.maximum.reduceat(cosines, starts, axis=0)
    return out
