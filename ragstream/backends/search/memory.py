"""A conversation's remembered turns as a small engine searched beside the knowledge base.

A conversation remembers a few dozen turns at most (``conversations.Memory``: each turn's
chunk with the vectors stored when it was remembered), so everything here is exact and in
memory: dense search is every window's cosine, keyword search is BM25 of every turn (scored
by the ``Corpus`` with the knowledge base's statistics, so a turn weighs as a chunk would),
and filters are ``Filters.matches``. Nothing is encoded.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from ragstream.backends.keyword_index import KeywordIndex, index_text
from ragstream.backends.search.keyword import StoredChunk, phrase_words
from ragstream.state.super_prompt import Filters


class MemoryEngine:
    """The remembered turns of one conversation (``memory``), searchable."""

    def __init__(self, memory, tokenizer: KeywordIndex):
        self.memory = memory
        self.name = f"conversation {memory.name!r}"
        self.stored: dict[str, StoredChunk] = {}
        for c in memory.chunks:
            windows = memory.windows[c.id]
            dim = len(windows[0]) if windows else 0
            found = sorted(memory.sentences.get(c.id, []), key=lambda x: x[0])
            self.stored[c.id] = StoredChunk(
                chunk=c, doc_id=c.doc_id, doc_hash=memory.fingerprint,
                window_vectors=(np.vstack(windows).astype(np.float32) if windows
                                else np.zeros((0, dim), np.float32)),
                sentence_vectors=(np.vstack([v for _, v in found]).astype(np.float32) if found
                                  else np.zeros((0, dim), np.float32)),
                spans=[(int(a), int(b)) for (a, b), _ in found], written_ns=0)
        texts = [index_text(c) for c in memory.chunks]
        self.tokens: dict[str, list[str]] = dict(zip(self.stored, tokenizer.tokens(texts)))
        self._folded = {cid: " ".join(phrase_words(t)) for cid, t in zip(self.stored, texts)}

    def version(self) -> str:
        """The memory's fingerprint."""
        return self.memory.fingerprint

    def _passing(self, filters: Filters | None) -> list[StoredChunk]:
        return [s for s in self.stored.values() if filters is None or filters.matches(s.chunk)]

    def count(self, filters: Filters | None = None) -> int:
        """How many turns (passing ``filters``)."""
        return len(self._passing(filters))

    def dense(self, vectors: np.ndarray, k: int,
              filters: Filters | None = None) -> list[list[tuple[str, float]]]:
        """Every passing turn's exact best-window cosine, nearest ``k`` per vector."""
        vectors = np.asarray(vectors, dtype=np.float32)
        out: list[list[tuple[str, float]]] = [[] for _ in vectors]
        for s in self._passing(filters):
            if len(s.window_vectors):
                for i, cos in enumerate((s.window_vectors @ vectors.T).max(axis=0)):
                    out[i].append((s.chunk_id, float(cos)))
        return [sorted(found, key=lambda x: (-x[1], x[0]))[:k] for found in out]

    def doc_freqs(self, terms: Sequence[str]) -> dict[str, int]:
        """How many turns hold each term."""
        return {t: sum(t in set(tok) for tok in self.tokens.values()) for t in dict.fromkeys(terms)}

    def fetch(self, chunk_ids: Sequence[str]) -> dict[str, StoredChunk]:
        """The turns of ``chunk_ids`` it holds."""
        return {c: self.stored[c] for c in chunk_ids if c in self.stored}

    def phrase(self, text: str, limit: int) -> list[str]:
        """Turns whose folded words hold ``text``'s in a row."""
        wanted = " ".join(phrase_words(text))
        if not wanted:
            return []
        return [c for c, t in self._folded.items() if f" {wanted} " in f" {t} "][:limit]

    def values(self, field: str) -> list[str]:
        """A filter field's values among the turns."""
        return sorted({getattr(s.chunk, field) for s in self.stored.values()} - {""})

    def document_chunks(self, doc_id: str) -> list[str]:
        """The turns of one conversation 'document'."""
        return sorted(c for c, s in self.stored.items() if s.doc_id == doc_id)

    def every_chunk(self) -> Iterable[StoredChunk]:
        """Every turn."""
        return list(self.stored.values())
