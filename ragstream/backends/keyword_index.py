"""BM25 keyword search with bm25s (Snowball stemming via PyStemmer).

The app's tokenizer (``query_terms``, ``tokens``, ``terms``): the engines index these terms
(``backends.search``), so a query's terms are the index's. Its in-memory BM25 over a list of
chunks is the reference the engines' scores are tested against. A chunk is indexed with its
title and heading path, so words in headings count.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ragstream.state.super_prompt import Chunk

if TYPE_CHECKING:  # pragma: no cover
    import bm25s


def index_text(chunk: Chunk) -> str:
    """The text a chunk is indexed under: its title, heading path and text joined by spaces."""
    return " ".join([chunk.title, *chunk.heading_path, chunk.text])


def bm25_idf(n: int, df: int) -> float:
    """BM25's (Lucene's) IDF of a term ``df`` of ``n`` chunks hold: never negative, highest
    for a term no chunk holds."""
    return float(np.log(1.0 + (n - df + 0.5) / (df + 0.5)))


def weighted_share(weights: Mapping[str, float], held: Callable[[str], bool]) -> float:
    """The share of the terms' total weight (their IDFs) carried by the terms ``held`` picks;
    0 when they weigh nothing."""
    total = sum(weights.values())
    return sum(w for t, w in weights.items() if held(t)) / total if total else 0.0


#: BM25's term-frequency saturation and length normalisation (tantivy's and Lucene's defaults)
BM25_K1, BM25_B = 1.2, 0.75


def bm25_score(tokens: Sequence[str], terms: Sequence[str], idf: Mapping[str, float],
               avg_len: float) -> float:
    """BM25 of one text (its ``tokens``) for the distinct ``terms``, with the corpus's
    ``idf`` per term and mean length ``avg_len`` (what the engine scores a chunk with)."""
    if not tokens:
        return 0.0
    counts: dict[str, int] = {}
    for t in tokens:
        counts[t] = counts.get(t, 0) + 1
    norm = BM25_K1 * (1.0 - BM25_B + BM25_B * len(tokens) / (avg_len or len(tokens)))
    return float(sum(idf[t] * counts[t] * (BM25_K1 + 1.0) / (counts[t] + norm)
                     for t in dict.fromkeys(terms) if t in counts))


@functools.lru_cache(maxsize=4)
def _stemmer(name: str):
    import Stemmer

    return Stemmer.Stemmer(name)


#: bm25s's token pattern (scikit-learn's CountVectorizer's): words of two characters or more
_TOKEN = re.compile(r"(?u)\b\w\w+\b")
#: the stop-word list names bm25s knows (``bm25s.tokenization._infer_stopwords``) and its lists'
#: names in ``bm25s/stopwords.py``
_STOPWORD_LISTS = {
    "english": "EN", "en": "EN", "english_plus": "EN_PLUS", "en_plus": "EN_PLUS",
    "german": "GERMAN", "de": "GERMAN", "dutch": "DUTCH", "nl": "DUTCH", "french": "FRENCH",
    "fr": "FRENCH", "spanish": "SPANISH", "es": "SPANISH", "portuguese": "PORTUGUESE",
    "pt": "PORTUGUESE", "italian": "ITALIAN", "it": "ITALIAN", "russian": "RUSSIAN",
    "ru": "RUSSIAN", "swedish": "SWEDISH", "sv": "SWEDISH", "norwegian": "NORWEGIAN",
    "no": "NORWEGIAN", "chinese": "CHINESE", "zh": "CHINESE", "turkish": "TURKISH",
    "tr": "TURKISH", "korean": "KOREAN", "ko": "KOREAN", "danish": "DANISH", "da": "DANISH",
}


@functools.lru_cache(maxsize=8)
def _stopwords(name: str) -> frozenset[str]:
    """bm25s's stop-word list ``name``, read from ``bm25s/stopwords.py`` without importing the
    ``bm25s`` package (it imports scipy: ~0.1 s of a query's start); a name bm25s does not
    know is bm25s's own error."""
    import importlib.util

    key = _STOPWORD_LISTS.get(name)
    spec = importlib.util.find_spec("bm25s")  # finds the package, does not run it
    folders = list(spec.submodule_search_locations or []) if spec else []
    if key is None or not folders:
        from bm25s.tokenization import _infer_stopwords

        return frozenset(_infer_stopwords(name))
    # the module alone (constants only), under a name of its own: bm25s is not imported
    found = importlib.util.spec_from_file_location("_ragstream_bm25s_stopwords",
                                                   Path(folders[0], "stopwords.py"))
    assert found is not None and found.loader is not None
    lists = importlib.util.module_from_spec(found)
    found.loader.exec_module(lists)
    return frozenset(getattr(lists, f"STOPWORDS_{key}"))


class KeywordIndex:
    """BM25 index over chunks in a fixed id order, with stemmed terms and per-chunk term coverage."""

    def __init__(self, stemmer: str = "english", stopwords: str = "en"):
        self.stemmer_name = stemmer
        self.stopwords = stopwords
        self._retriever: bm25s.BM25 | None = None  # None when no chunk is indexed
        self._ids: list[str] = []

    # -- tokens -------------------------------------------------------------------------

    def _tokenize(self, texts: Sequence[str]) -> list[list[str]]:
        """What ``bm25s.tokenize(texts, stopwords=…, stemmer=…, return_ids=False)`` gives
        (lower-cased words of two characters or more, stop words left out, each stemmed),
        without importing bm25s (a test holds the two equal)."""
        stop = _stopwords(self.stopwords)
        words = [[w for w in _TOKEN.findall(text.lower()) if w not in stop] for text in texts]
        unique = list(dict.fromkeys(w for ws in words for w in ws))
        stems = dict(zip(unique, _stemmer(self.stemmer_name).stemWords(unique)))
        return [[stems[w] for w in ws] for ws in words]

    def query_terms(self, query: str) -> list[str]:
        """The stemmed, stop-word-free terms of ``query`` (as the index sees them)."""
        return self._tokenize([query])[0]

    def terms(self, text: str) -> set[str]:
        """The set of distinct stemmed, stop-word-free terms of ``text``."""
        return set(self.query_terms(text))

    # -- building, saving, loading ------------------------------------------------------

    @property
    def ids(self) -> list[str]:
        """The indexed chunk ids, in index order."""
        return self._ids

    def tokens(self, texts: Sequence[str]) -> list[list[str]]:
        """Each text's stemmed, stop-word-free terms, as ``build`` indexes them."""
        return self._tokenize(texts) if texts else []

    def build(self, ids: Sequence[str], texts: Sequence[str] = (),
              tokens: Sequence[list[str]] | None = None) -> KeywordIndex:
        """Index ``texts`` (or their ``tokens``, already made) under ``ids`` (replacing any
        previous index) and return self."""
        import bm25s

        self._ids = list(ids)
        self._retriever = None
        if self._ids:
            self._retriever = bm25s.BM25()
            self._retriever.index(list(tokens) if tokens is not None else self._tokenize(texts),
                                  show_progress=False)
        return self

    def save(self, folder: Path) -> None:
        """Save the BM25 index to ``folder``; nothing is written when no chunk is indexed."""
        if self._retriever is not None:
            self._retriever.save(str(folder), show_progress=False)

    def load(self, folder: Path, ids: Sequence[str]) -> KeywordIndex:
        """Load the BM25 index saved in ``folder`` for ``ids`` and return self."""
        import bm25s

        self._ids = list(ids)
        self._retriever = (bm25s.BM25.load(str(folder), show_progress=False)
                           if self._ids else None)
        return self

    # -- scoring ------------------------------------------------------------------------

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every indexed chunk (aligned with ``ids``) for ``query``."""
        return self.scores_for_terms(self.query_terms(query))

    def scores_for_terms(self, terms: list[str]) -> np.ndarray:
        """BM25 score of every indexed chunk for already tokenised ``terms`` (zeros when none is known)."""
        n = len(self._ids)
        if not terms or self._retriever is None:
            return np.zeros(n, dtype=np.float32)
        known = self._retriever.get_tokens_ids(terms)
        if not known:
            return np.zeros(n, dtype=np.float32)
        return np.asarray(self._retriever.get_scores(known), dtype=np.float32)

    def _idf(self, term: str) -> tuple[float, int | None]:
        """BM25's IDF of ``term`` and its token id (None for a term no chunk holds: IDF at
        document frequency 0, the highest there is)."""
        assert self._retriever is not None
        t = self._retriever.vocab_dict.get(term)
        indptr = self._retriever.scores["indptr"]
        df = int(indptr[t + 1] - indptr[t]) if t is not None else 0
        return bm25_idf(len(self._ids), df), (t if df else None)

    def idf(self, term: str) -> float:
        """BM25's IDF of ``term`` in this index (highest for a term no chunk holds; 0 when
        nothing is indexed)."""
        return self._idf(term)[0] if self._retriever is not None else 0.0

    def unseen_share(self, terms: Sequence[str]) -> float:
        """The IDF-weighted share of the distinct ``terms`` that no indexed chunk contains: near 1
        for a question whose distinctive words the knowledge base never uses."""
        distinct = sorted(set(terms))
        if not distinct or self._retriever is None:
            return 0.0
        found = {t: self._idf(t) for t in distinct}
        return weighted_share({t: idf for t, (idf, _) in found.items()}, lambda t: found[t][1] is None)

    def weighted_coverage(self, terms: Sequence[str], rows: np.ndarray) -> np.ndarray:
        """For each chunk in ``rows``, the IDF-weighted share of the distinct ``terms`` it
        contains. A term no chunk holds weighs most (IDF at document frequency 0), so a query
        whose distinctive words the knowledge base never uses covers little anywhere."""
        rows = np.asarray(rows, dtype=np.int64)
        distinct = sorted(set(terms))
        if not distinct or self._retriever is None:
            return np.zeros(len(rows), dtype=np.float64)
        indptr, indices = self._retriever.scores["indptr"], self._retriever.scores["indices"]
        got = np.zeros(len(self._ids), dtype=np.float64)
        total = 0.0
        for term in distinct:
            idf, t = self._idf(term)
            total += idf
            if t is not None:
                got[indices[indptr[t]:indptr[t + 1]]] += idf
        return got[rows] / total

    def coverage(self, terms: Sequence[str], rows: np.ndarray) -> np.ndarray:
        """For each chunk in ``rows`` (positions in ``ids``), the share of the distinct
        ``terms`` it contains (0 when there are none)."""
        rows = np.asarray(rows, dtype=np.int64)
        distinct = sorted(set(terms))
        if not distinct or self._retriever is None:
            return np.zeros(len(rows), dtype=np.float64)
        hits = np.zeros(len(self._ids), dtype=np.int32)
        indptr, indices = self._retriever.scores["indptr"], self._retriever.scores["indices"]
        for t in self._retriever.get_tokens_ids(distinct):
            hits[indices[indptr[t]:indptr[t + 1]]] += 1
        return hits[rows] / len(distinct)
