"""The external systems a stage may use, built once by the app and passed in.

Stages never import models or clients as globals: the CLI, the Python API and the Streamlit
page (through ``st.cache_resource``) build one ``Services`` with ``build_services`` and hand
it to every stage call. Everything heavy loads lazily on first use.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from ragstream.config import AppConfig


@dataclass
class Services:
    """The embedder, store, keyword tokenizer, LLM client, index cache and reranker a stage may use."""

    embedder: Any = None
    store: Any = None
    keyword_index: Any = None  # a KeywordIndex used as the query tokenizer (terms, stems)
    reranker_settings: Any = None
    llm: Any = None  # an LLM client; None means every agent runs deterministically
    index_cache: Any = None  # an IndexCache: the in-memory DocumentIndex of ``store``
    _reranker: Any = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def llm_available(self) -> bool:
        """True when an LLM client is configured."""
        return self.llm is not None

    def index(self):
        """The ``DocumentIndex`` of the store as it is now (vectors, evidence, BM25), from
        memory, from its copy on disk, or rebuilt from the store when the store changed."""
        return self.index_cache.current(self.store)

    def keyword(self):
        """The BM25 index of the store as it is now."""
        return self.index().keyword

    @property
    def reranker(self):
        """A ``RerankerChoice`` (reranker, backend name, reason), loaded on first use."""
        with self._lock:
            if self._reranker is None:
                from ragstream.backends.reranker import load_reranker

                self._reranker = load_reranker(self.reranker_settings, self)
            return self._reranker


def build_services(cfg: AppConfig) -> Services:
    """The services ``cfg`` configures; models and the reranker load on first use."""
    from ragstream.backends.doc_index import IndexCache
    from ragstream.backends.embedder import make_embedder
    from ragstream.backends.keyword_index import KeywordIndex
    from ragstream.backends.llm import build_llm
    from ragstream.backends.vector_store import ChromaStore

    s = cfg.settings
    index_dir = cfg.index_dir / f"docindex-{s.vector_store.collection}"
    return Services(
        embedder=make_embedder(s.embedding, cfg.cache_dir),
        store=ChromaStore(s.vector_store, cfg.index_dir),
        keyword_index=KeywordIndex(s.retrieval.stemmer, s.retrieval.stopwords),
        reranker_settings=s.reranker,
        llm=build_llm(s.llm),
        index_cache=IndexCache(index_dir, s.retrieval.stemmer, s.retrieval.stopwords),
    )
