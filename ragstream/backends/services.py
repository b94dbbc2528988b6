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

from ragstream.common.config import AppConfig

#: conversations' remembered turns kept searchable in memory (each a few dozen chunks)
MEMORIES_KEPT = 8


@dataclass
class Services:
    """The embedder, store (the knowledge base's search engine), keyword tokenizer, LLM
    client and reranker a stage may use."""

    embedder: Any = None
    store: Any = None  # the knowledge base's engine: a LocalEngine (Chroma + tantivy), …
    keyword_index: Any = None  # a KeywordIndex used as the query tokenizer (terms, stems)
    reranker_settings: Any = None
    llm: Any = None  # an LLM client; None means every agent runs deterministically
    kb_name: str = "default"  # the knowledge base ``store`` holds (ragstream.knowledge.bases)
    memory: Any = None  # a conversation's Memory searched with the knowledge base, or None
    _reranker: Any = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _models: Services | None = field(default=None, repr=False)  # whose reranker model is shared
    # shared with the copies ``with_memory`` makes: the knowledge base's current view, and
    # the conversations' turns made searchable
    _views: dict = field(default_factory=dict, repr=False)
    _memories: OrderedDict = field(default_factory=OrderedDict, repr=False)

    @property
    def llm_available(self) -> bool:
        """True when an LLM client is configured."""
        return self.llm is not None

    def index(self):
        """What the stages search (``Corpus``): the knowledge base's engine at its current
        version (a write by any process is a new version; an engine found out of step with
        the store is repaired first) and, with a conversation's ``memory``, its remembered
        turns beside it. Nothing of the corpus is loaded: the engines answer each query."""
        from ragstream.backends.search.corpus import Corpus, KnowledgeView
        from ragstream.backends.search.memory import MemoryEngine

        version = self.store.version()
        with self._lock:
            view = self._views.get("kb")
            if view is None or view.version != version:
                view = self._views["kb"] = KnowledgeView(self.store, version)
        engine = None
        if self.memory is not None:
            key = self.memory.fingerprint
            with self._lock:
                engine = self._memories.get(key)
            if engine is None:
                engine = MemoryEngine(self.memory, self.keyword_index)
                with self._lock:
                    self._memories[key] = engine
                    while len(self._memories) > MEMORIES_KEPT:
                        self._memories.popitem(last=False)
        return Corpus(view, self.keyword_index, engine, self.kb_name)

    def for_knowledge_base(self, cfg: AppConfig, name: str) -> Services:
        """Services for another knowledge base (``cfg``: its configuration): its own store;
        the embedder, the LLM client and a loaded reranker model are shared."""
        return replace(self, store=open_store(cfg), kb_name=name, memory=None, _reranker=None,
                       _lock=threading.Lock(), _models=self._models or self, _views={},
                       _memories=OrderedDict())

    def with_memory(self, memory) -> Services:
        """These services with a conversation's ``memory`` searched beside the knowledge base
        (``self`` when ``memory`` is None). What is kept of the engines is shared with these."""
        if memory is None:
            return self
        return replace(self, memory=memory, _reranker=None, _lock=threading.Lock(),
                       _models=self._models or self)

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
    from ragstream.backends.embedder_choice import make_embedder
    from ragstream.backends.keyword_index import KeywordIndex
    from ragstream.backends.llm import build_llm

    s = cfg.settings
    return Services(
        embedder=make_embedder(s.embedding, cfg.cache_dir),
        store=open_store(cfg),
        keyword_index=KeywordIndex(s.retrieval.stemmer, s.retrieval.stopwords),
        reranker_settings=s.reranker,
        llm=build_llm(s.llm),
    )


def open_store(cfg: AppConfig):
    """The engine ``cfg``'s knowledge base is stored in and searched by (nothing opened yet)."""
    from ragstream.backends.search.local import LocalEngine
    from ragstream.backends.vector_store import ChromaStore

    s = cfg.settings
    if s.vector_store.mode == "milvus":
        from ragstream.backends.search.milvus import MilvusEngine

        return MilvusEngine.from_settings(s.vector_store, cfg.index_dir, s.retrieval.stemmer,
                                          s.retrieval.stopwords)
    return LocalEngine.open(ChromaStore(s.vector_store, cfg.index_dir), s.retrieval.stemmer,
                            s.retrieval.stopwords)


def keyword_folder(cfg: AppConfig) -> Path:
    """Where ``cfg``'s collection keeps its keyword index: ``<index_dir>/keyword-<collection>``."""
    from ragstream.backends.search.local import keyword_folder as folder

    return folder(cfg.index_dir, cfg.settings.vector_store.collection)
