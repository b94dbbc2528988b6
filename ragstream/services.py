"""The external systems a stage may use, built once by the app and passed in.

Stages never import models or clients as globals: the CLI, the Python API and the Streamlit
page (through ``st.cache_resource``) build one ``Services`` with ``build_services`` and hand
it to every stage call. Everything heavy loads lazily on first use.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ragstream.config import AppConfig

#: combined (knowledge base + conversation) indexes kept in memory
COMBINED_KEPT = 8


@dataclass
class Services:
    """The embedder, store, keyword tokenizer, LLM client, index cache and reranker a stage may use."""

    embedder: Any = None
    store: Any = None
    keyword_index: Any = None  # a KeywordIndex used as the query tokenizer (terms, stems)
    reranker_settings: Any = None
    llm: Any = None  # an LLM client; None means every agent runs deterministically
    index_cache: Any = None  # an IndexCache: the in-memory DocumentIndex of ``store``
    kb_name: str = "default"  # the knowledge base ``store`` holds (ragstream.knowledge_bases)
    memory: Any = None  # a conversation's Memory searched with the knowledge base, or None
    _reranker: Any = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _models: Services | None = field(default=None, repr=False)  # whose reranker model is shared
    _combined: OrderedDict = field(default_factory=OrderedDict, repr=False)

    @property
    def llm_available(self) -> bool:
        """True when an LLM client is configured."""
        return self.llm is not None

    def index(self):
        """The ``DocumentIndex`` of the store as it is now (vectors, evidence, BM25), from
        memory, from its copy on disk, or rebuilt from the store when the store changed; with
        a conversation's ``memory``, the two as one index (made once per pair of versions)."""
        kb = self.index_cache.current(self.store)
        if self.memory is None:
            return kb
        key = (kb.fingerprint, self.memory.fingerprint)
        with self._lock:
            both = self._combined.get(key)
        if both is None:
            both = kb.with_memory(self.memory, self.index_cache.new_keyword_index())
            with self._lock:
                self._combined[key] = both
                while len(self._combined) > COMBINED_KEPT:
                    self._combined.popitem(last=False)
        return both

    def for_knowledge_base(self, cfg: AppConfig, name: str) -> Services:
        """Services for another knowledge base (``cfg``: its configuration): its own store and
        index; the embedder, the LLM client and a loaded reranker model are shared."""
        from ragstream.backends.doc_index import IndexCache
        from ragstream.backends.vector_store import ChromaStore

        s = cfg.settings
        return replace(self, store=ChromaStore(s.vector_store, cfg.index_dir), kb_name=name,
                       index_cache=IndexCache(snapshot_folder(cfg), s.retrieval.stemmer,
                                              s.retrieval.stopwords),
                       memory=None, _reranker=None, _lock=threading.Lock(),
                       _models=self._models or self, _combined=OrderedDict())

    def with_memory(self, memory) -> Services:
        """These services with a conversation's ``memory`` searched beside the knowledge base
        (``self`` when ``memory`` is None). The combined indexes are cached with this one's."""
        if memory is None:
            return self
        return replace(self, memory=memory, _reranker=None, _lock=threading.Lock(),
                       _models=self._models or self)

    def keyword(self):
        """The BM25 index of the store as it is now."""
        return self.index().keyword

    @property
    def reranker(self):
        """A ``RerankerChoice`` (reranker, backend name, reason), loaded on first use."""
        with self._lock:
            if self._reranker is None and self._models is not None:
                from ragstream.backends.reranker import share_reranker

                self._reranker = share_reranker(self._models.reranker, self)
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
    return Services(
        embedder=make_embedder(s.embedding, cfg.cache_dir),
        store=ChromaStore(s.vector_store, cfg.index_dir),
        keyword_index=KeywordIndex(s.retrieval.stemmer, s.retrieval.stopwords),
        reranker_settings=s.reranker,
        llm=build_llm(s.llm),
        index_cache=IndexCache(snapshot_folder(cfg), s.retrieval.stemmer, s.retrieval.stopwords),
    )


def snapshot_folder(cfg: AppConfig) -> Path:
    """Where ``cfg``'s collection keeps its index snapshot: ``<index_dir>/docindex-<collection>``."""
    return cfg.index_dir / f"docindex-{cfg.settings.vector_store.collection}"
