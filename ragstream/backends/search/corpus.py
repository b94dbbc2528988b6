"""What the stages search: a knowledge base's engine, and a conversation's turns beside it.

``Corpus`` is the one object Retrieval, the ReRanker, A3/A4, the relevance and answerability
scores, the chunk pickers and the retrieval API read. It asks the engines for candidates
(``dense``, ``keyword``), fetches the candidates (``fetch``: chunk, window vectors, evidence
sentences) and answers the few corpus statistics the scores use (``idf``, ``unseen_share``,
coverage). It never holds the corpus: what it keeps is bounded (``FETCH_KEPT`` fetched
chunks, their terms, document frequencies), per version of the knowledge base
(``KnowledgeView``: a write by any process is a new version, so nothing kept is ever stale).

The knowledge base's engine and the conversation's (``MemoryEngine``) are searched alike and
their answers merged: dense candidates by cosine, keyword candidates by BM25 (a turn is
scored with the knowledge base's statistics, ``bm25_score``, as if it were one more chunk),
``idf`` over both. A turn's id (``conversation:<name>#<turn>``) says where it comes from.
"""

from __future__ import annotations

import difflib
import threading
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from ragstream.backends.keyword_index import (
    KeywordIndex,
    bm25_idf,
    bm25_score,
    index_text,
    weighted_share,
)
from ragstream.backends.search.base import Evidence, evidence_of
from ragstream.backends.search.keyword import StoredChunk
from ragstream.state.super_prompt import Chunk, Filters

#: fetched chunks kept per knowledge base version (each ~ its vectors: 2 windows and 6
#: sentences of 384 floats ≈ 12 KB, so ≤ ~25 MB)
FETCH_KEPT = 2048
#: document frequencies kept per version
DF_KEPT = 20_000


class KnowledgeView:
    """One version of a knowledge base's engine, with what is kept of it (bounded)."""

    def __init__(self, engine, version: str):
        self.engine = engine
        self.version = version
        self._fetched: OrderedDict[str, StoredChunk | None] = OrderedDict()
        self._df: dict[str, int] = {}
        self._stats: tuple[int, float] | None = None
        self.terms: OrderedDict[tuple[str, int], frozenset[str]] = OrderedDict()  # (id, hash(text))
        self._lock = threading.Lock()

    def stats(self) -> tuple[int, float]:
        """(chunks, mean length in terms), once per version."""
        if self._stats is None:
            self._stats = self.engine.stats()
        return self._stats

    def doc_freqs(self, terms: Sequence[str]) -> dict[str, int]:
        """Document frequencies, kept per version."""
        with self._lock:
            todo = [t for t in dict.fromkeys(terms) if t not in self._df]
        if todo:
            found = self.engine.doc_freqs(todo)
            with self._lock:
                if len(self._df) + len(found) > DF_KEPT:
                    self._df.clear()
                self._df.update(found)
        with self._lock:
            return {t: self._df.get(t, 0) for t in terms}

    def fetch(self, chunk_ids: Sequence[str]) -> dict[str, StoredChunk]:
        """The stored chunks of ``chunk_ids`` the engine holds, kept (LRU, ``FETCH_KEPT``)."""
        ids = list(dict.fromkeys(chunk_ids))
        with self._lock:
            todo = [c for c in ids if c not in self._fetched]
        if todo:
            found = self.engine.fetch(todo)
            with self._lock:
                for c in todo:
                    self._fetched[c] = found.get(c)
                while len(self._fetched) > FETCH_KEPT:
                    self._fetched.popitem(last=False)
        out = {}
        with self._lock:
            for c in ids:
                s = self._fetched.get(c)
                if c in self._fetched:
                    self._fetched.move_to_end(c)
                if s is not None:
                    out[c] = s
        if len(out) < len(ids):  # evicted meanwhile by another thread: read again
            out.update(self.engine.fetch([c for c in ids if c not in out]))
        return out


class Corpus:
    """A knowledge base (``kb``: its ``KnowledgeView``) and, if given, a conversation's
    remembered turns (``memory``: a ``MemoryEngine``), searched as one."""

    def __init__(self, kb: KnowledgeView, tokenizer: KeywordIndex, memory=None, kb_name: str = "default"):
        self.kb = kb
        self.memory = memory
        self.tokenizer = tokenizer
        self.kb_name = kb_name

    @property
    def fingerprint(self) -> str:
        """The version searched: the knowledge base's, with the conversation's."""
        return self.kb.version + (f" + {self.memory.version()}" if self.memory else "")

    @property
    def engine_name(self) -> str:
        """The knowledge base's engine, for messages."""
        return self.kb.engine.name

    # -- sizes --------------------------------------------------------------------------

    def count(self, filters: Filters | None = None) -> int:
        """How many chunks pass ``filters`` (all when None), turns included."""
        f = None if filters is None or filters.empty else filters
        n = self.kb.stats()[0] if f is None else self.kb.engine.count(f)
        return n + (self.memory.count(f) if self.memory else 0)

    @property
    def n_chunks(self) -> int:
        """How many chunks are searched (the knowledge base's and the turns)."""
        return self.count()

    @property
    def memory_chunks(self) -> int:
        """How many remembered turns are searched beside the knowledge base."""
        return self.memory.count() if self.memory else 0

    # -- terms and statistics -----------------------------------------------------------

    def query_terms(self, text: str) -> list[str]:
        """The stemmed, stop-word-free terms of ``text``, as the index holds them."""
        return self.tokenizer.query_terms(text)

    def terms(self, chunk: Chunk) -> frozenset[str]:
        """The distinct terms a chunk is indexed under."""
        return self.terms_of([chunk])[0]

    def terms_of(self, chunks: Sequence[Chunk]) -> list[frozenset[str]]:
        """Each chunk's distinct indexed terms: the ones not kept yet tokenised in one call,
        then kept with the version (bounded, ``FETCH_KEPT``)."""
        kept = self.kb.terms
        keys = [(c.id, hash(c.text)) for c in chunks]
        todo = {k: c for k, c in zip(keys, chunks) if k not in kept}
        if todo:
            made = self.tokenizer.tokens([index_text(c) for c in todo.values()])
            with self.kb._lock:
                for k, tokens in zip(todo, made):
                    kept[k] = frozenset(tokens)
                while len(kept) > FETCH_KEPT:
                    kept.popitem(last=False)
        out: list[frozenset[str]] = []
        for k, c in zip(keys, chunks):
            got = kept.get(k)  # evicted meanwhile by another thread: made again
            out.append(got if got is not None else frozenset(self.tokenizer.query_terms(index_text(c))))
        return out

    def _stats(self) -> tuple[int, float]:
        n, avg = self.kb.stats()
        if self.memory:
            lengths = [len(t) for t in self.memory.tokens.values()]
            if lengths:
                avg = (avg * n + sum(lengths)) / (n + len(lengths))
                n += len(lengths)
        return n, avg

    def doc_freqs(self, terms: Sequence[str]) -> dict[str, int]:
        """How many chunks (and turns) hold each term."""
        df = self.kb.doc_freqs(terms)
        if self.memory:
            extra = self.memory.doc_freqs(terms)
            df = {t: df[t] + extra[t] for t in df}
        return df

    def idf(self, term: str) -> float:
        """BM25's IDF of ``term`` (highest for a term nothing holds; 0 when nothing is indexed)."""
        n = self._stats()[0]
        return bm25_idf(n, self.doc_freqs([term])[term]) if n else 0.0

    def idf_weights(self, terms: Sequence[str]) -> dict[str, float]:
        """BM25's IDF of each distinct term (none when nothing is indexed)."""
        distinct = sorted(set(terms))
        n = self._stats()[0]
        if not distinct or not n:
            return {}
        df = self.doc_freqs(distinct)
        return {t: bm25_idf(n, df[t]) for t in distinct}

    def unseen_share(self, terms: Sequence[str]) -> float:
        """The IDF-weighted share of the distinct ``terms`` no chunk contains: near 1 for a
        question whose distinctive words the knowledge base never uses."""
        weights = self.idf_weights(terms)
        df = self.doc_freqs(list(weights)) if weights else {}
        return weighted_share(weights, lambda t: not df[t])

    def coverage(self, terms: Sequence[str], chunks: Sequence[Chunk]) -> list[float]:
        """For each chunk, the share of the distinct ``terms`` it is indexed under."""
        distinct = set(terms)
        if not distinct:
            return [0.0] * len(chunks)
        return [len(distinct & t) / len(distinct) for t in self.terms_of(chunks)]

    def weighted_coverage(self, terms: Sequence[str], chunks: Sequence[Chunk]) -> list[float]:
        """For each chunk, the IDF-weighted share of the distinct ``terms`` it holds (a term
        nothing holds weighs most)."""
        weights = self.idf_weights(terms)
        if not weights:
            return [0.0] * len(chunks)
        return [weighted_share(weights, held.__contains__) for held in self.terms_of(chunks)]

    # -- candidates ---------------------------------------------------------------------

    def dense(self, vectors: np.ndarray, k: int,
              filters: Filters | None = None) -> list[list[tuple[str, float]]]:
        """Per query vector, the ``k`` nearest chunks and turns: ``(id, cosine)``."""
        f = None if filters is None or filters.empty else filters
        found = self.kb.engine.dense(vectors, k, f)
        if self.memory:
            found = [sorted(a + b, key=lambda x: (-x[1], x[0]))[:k]
                     for a, b in zip(found, self.memory.dense(vectors, k, f))]
        return found

    def _memory_bm25(self, terms: Sequence[str], ids: set[str] | None = None) -> dict[str, float]:
        if not self.memory or not terms:
            return {}
        n, avg = self._stats()
        df = self.doc_freqs(terms)
        idf = {t: bm25_idf(n, df[t]) for t in df}
        out = {}
        for cid, tokens in self.memory.tokens.items():
            if ids is None or cid in ids:
                score = bm25_score(tokens, terms, idf, avg)
                if score > 0:
                    out[cid] = score
        return out

    def keyword(self, terms: Sequence[str], k: int,
                filters: Filters | None = None) -> list[tuple[str, float]]:
        """The ``k`` best BM25 matches of ``terms`` (chunks and turns), best first."""
        return self.keyword_many([terms], k, filters)[0]

    def keyword_many(self, queries: Sequence[Sequence[str]], k: int,
                     filters: Filters | None = None) -> list[list[tuple[str, float]]]:
        """``keyword`` for each query piece's terms: one engine call when the engine batches
        them (``keyword_many``), the turns' matches merged into each piece's."""
        f = None if filters is None or filters.empty else filters
        many = getattr(self.kb.engine, "keyword_many", None)
        found = (many(queries, k, f) if many is not None
                 else [self.kb.engine.keyword(terms, k, f) for terms in queries])
        if not self.memory:
            return found
        merged = []
        for terms, hits in zip(queries, found):
            turns = [(c, v) for c, v in self._memory_bm25(terms).items()
                     if f is None or f.matches(self.memory.stored[c].chunk)]
            merged.append(sorted(hits + turns, key=lambda x: (-x[1], x[0]))[:k])
        return merged

    def best_keyword(self, terms: Sequence[str]) -> float:
        """The best BM25 any chunk or turn has for ``terms`` (0 when none holds one)."""
        top = self.keyword(terms, 1)
        return top[0][1] if top else 0.0

    def keyword_scores(self, terms: Sequence[str], chunk_ids: Sequence[str]) -> dict[str, float]:
        """BM25 of each of ``chunk_ids`` holding one of ``terms`` (0-scored ones left out)."""
        if not terms or not chunk_ids:
            return {}
        mine = set(self.memory.stored) if self.memory else set()
        kb_ids = [c for c in chunk_ids if c not in mine]
        out = self.kb.engine.keyword_scores(terms, kb_ids) if kb_ids else {}
        out.update(self._memory_bm25(terms, set(chunk_ids) & mine))
        return out

    # -- chunks -------------------------------------------------------------------------

    def fetch(self, chunk_ids: Sequence[str]) -> dict[str, StoredChunk]:
        """The stored chunks and turns of ``chunk_ids`` (those not held are left out)."""
        out = dict(self.memory.fetch(chunk_ids)) if self.memory else {}
        rest = [c for c in chunk_ids if c not in out]
        if rest:
            out.update(self.kb.fetch(rest))
        return out

    def chunk(self, chunk_id: str) -> Chunk | None:
        """The chunk (or turn) of that id, or None when nothing of that id is held."""
        s = self.fetch([chunk_id]).get(chunk_id)
        return s.chunk if s else None

    def holds(self, chunk: Chunk) -> bool:
        """True when this very chunk (same id, same text) is held."""
        s = self.fetch([chunk.id]).get(chunk.id)
        return s is not None and s.chunk.text == chunk.text

    def evidence(self, chunks: Sequence[Chunk]) -> list[Evidence | None]:
        """Each chunk's stored vectors and sentences (None for one not held as it is)."""
        held = self.fetch([c.id for c in chunks])
        return [evidence_of(held[c.id]) if c.id in held and held[c.id].chunk.text == c.text
                else None for c in chunks]

    def values(self, field: str) -> list[str]:
        """The values a filter field (``doc_type``, ``source_name``) has."""
        got = set(self.kb.engine.values(field))
        if self.memory:
            got |= set(self.memory.values(field))
        return sorted(got)

    def near_ids(self, chunk_id: str, n: int = 3) -> list[str]:
        """Chunk ids close to ``chunk_id`` (a typo's likely meaning): among its document's
        chunks, else among the chunks of the closest document ids."""
        doc = chunk_id.rsplit("#", 1)[0]
        ids = self.kb.engine.document_chunks(doc)
        if not ids:
            docs: dict = getattr(self.kb.engine, "documents", dict)()
            for d in difflib.get_close_matches(doc, list(docs), n=2, cutoff=0.6):
                ids += self.kb.engine.document_chunks(d)
        return difflib.get_close_matches(chunk_id, ids, n=n, cutoff=0.6)

    def find_text(self, text: str, limit: int = 20) -> list[tuple[Chunk, str]]:
        """Chunks (and turns) whose words hold ``text``'s in a row (folded: case, accents
        and spacing aside), each with ``"phrase"``; then, when fewer than ``limit`` were found,
        the best BM25 matches of its words, each with ``"words"``."""
        found = (self.memory.phrase(text, limit) if self.memory else [])
        found += self.kb.engine.phrase(text, limit - len(found))
        out = [(c, "phrase") for c in found]
        if len(out) < limit:
            seen = set(found)
            out += [(c, "words") for c, _ in self.keyword(self.query_terms(text), limit + len(seen))
                    if c not in seen][:limit - len(out)]
        held = self.fetch([c for c, _ in out])
        return [(held[c].chunk, how) for c, how in out if c in held]

    def all_chunks(self) -> list[Chunk]:
        """Every chunk and turn, by id: reads the whole store (evaluation and tools only)."""
        chunks = [s.chunk for s in self.kb.engine.every_chunk()]
        if self.memory:
            chunks += [s.chunk for s in self.memory.every_chunk()]
        return sorted(chunks, key=lambda c: c.id)
