"""How relevant a chunk is to a query, as one calibrated number in [0, 1].

The retrieval API (``RAGPipeline.retrieve``) reports it as ``relevance_score`` and compares it
with ``min_relevance``. It is a logistic model over three signals, all read from what was
computed at ingestion (only the query is embedded):

* ``window_cosine`` — the chunk's best embedding window against the query;
* ``sentence_cosine`` — the chunk's best evidence sentence against the query;
* ``coverage`` — the IDF-weighted share of the query's terms that the chunk contains; a term
  the knowledge base never uses weighs most, so a question about something the documents do
  not mention covers little anywhere;
* ``unseen`` — the IDF-weighted share of the query's terms that no chunk of the knowledge base
  contains (the same for every chunk of one query): "barricade" in a question to a knowledge
  base that never says it.

The query's terms are the keyword index's own (``relevance_terms``): BM25's tokens, stemmer
and vocabulary, without the stop words of ``retrieval.relevance.stopwords``. BM25's own list
(``retrieval.stopwords``, Lucene's 33 words) keeps question words such as "where" and "do";
no chunk says them, so counted as terms they would be unseen words of every question and, in
a small knowledge base where every word a chunk holds has a low IDF, outweigh the words that
match ("Where do boats moor at spring tide?" against "boats moor at pier nine at spring tide").

``relevance = 1 / (1 + exp(-(w · signals + bias)))``, the weights in
``retrieval.relevance`` of ``config/settings.json``. They are fitted by
``benchmarks/calibrate_relevance.py`` (logistic regression on judged query–chunk pairs), so
the score reads as the estimated probability that a reader would judge the chunk relevant.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ragstream.backends.keyword_index import KeywordIndex
from ragstream.backends.reranker import evidence_for
from ragstream.common.config import RelevanceModel
from ragstream.state.super_prompt import Chunk

SIGNALS = ("window_cosine", "sentence_cosine", "coverage", "unseen")


def relevance_terms(query: str, keyword: KeywordIndex, stopwords: str) -> list[str]:
    """The terms of ``query`` that coverage and unseen weigh: the ones BM25 searches
    (``keyword``'s tokeniser and stemmer) less the stop words of the list ``stopwords``
    (``en_plus`` holds BM25's ``en``, so each term is one BM25 scores)."""
    return KeywordIndex(keyword.stemmer_name, stopwords).query_terms(query)


def relevance_signals(query: str, chunks: Sequence[Chunk], services,
                      model: RelevanceModel) -> np.ndarray:
    """(chunks × 4) signals in ``SIGNALS`` order; one query encoding (usually cached); the
    query's terms are ``relevance_terms`` with ``model.stopwords``."""
    if not chunks:
        return np.zeros((0, len(SIGNALS)))
    q = services.embedder.embed([query])[0]
    corpus = services.index()
    evidence = evidence_for(chunks, corpus, services.embedder)
    terms = relevance_terms(query, services.keyword_index, model.stopwords)
    held = corpus.fetch([c.id for c in chunks])
    missing = [c.id for c in chunks if c.id not in held]
    if missing:
        raise ValueError(f"relevance is scored for indexed chunks only; not in the index: {missing}")
    coverage = corpus.weighted_coverage(terms, chunks)
    unseen = corpus.unseen_share(terms)
    out = np.zeros((len(chunks), len(SIGNALS)))
    for i, ev in enumerate(evidence):
        window = float((ev.window_vectors @ q).max())
        sentence = float((ev.sentence_vectors @ q).max()) if len(ev.sentence_vectors) else window
        out[i] = (window, sentence, coverage[i], unseen)
    return out


def relevance(signals: np.ndarray, model: RelevanceModel) -> np.ndarray:
    """The calibrated score of each row of ``signals`` (logistic model, weights from config)."""
    w = np.asarray([model.window_cosine, model.sentence_cosine, model.coverage, model.unseen])
    return 1.0 / (1.0 + np.exp(-(signals @ w + model.bias)))
