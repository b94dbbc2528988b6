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
    embedder: Any = None
    store: Any = None
    keyword_index: Any = None
    reranker_settings: Any = None
    llm: Any = None  # an LLM client; None means every agent runs deterministically
    _reranker: Any = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def llm_available(self) -> bool:
        return self.llm is not None

    def keyword(self):
        """The BM25 index, brought up to date with the vector store first."""
        self.keyword_index.ensure(self.store.all_chunks, self.store.fingerprint())
        return self.keyword_index

    @property
    def reranker(self):
        """A ``RerankerChoice`` (reranker, backend name, reason), loaded on first use."""
        with self._lock:
            if self._reranker is None:
                from ragstream.backends.reranker import load_reranker

                self._reranker = load_reranker(self.reranker_settings, self.embedder,
                                               self.keyword_index.terms)
            return self._reranker


def build_services(cfg: AppConfig) -> Services:
    from ragstream.backends.embedder import SentenceTransformerEmbedder
    from ragstream.backends.llm import build_llm
    from ragstream.backends.keyword_index import KeywordIndex
    from ragstream.backends.vector_store import ChromaStore

    s = cfg.settings
    store = ChromaStore(s.vector_store, cfg.index_dir)
    bm25_dir = cfg.index_dir / f"bm25-{s.vector_store.collection}"
    return Services(
        embedder=SentenceTransformerEmbedder(s.embedding.model, s.embedding.window_tokens,
                                             s.embedding.batch_size),
        store=store,
        keyword_index=KeywordIndex(bm25_dir, s.retrieval.stemmer, s.retrieval.stopwords),
        reranker_settings=s.reranker,
        llm=build_llm(s.llm),
    )
