"""``RAGPipeline``: RAGstream as the retrieval back end of another program.

    from ragstream import RAGPipeline
    rag = RAGPipeline()                      # the shipped config, the bundled knowledge base
    ctx = rag.retrieve("What can I do during movement?", context_key="channel-7:user-42")
    for chunk in ctx.document_chunks:
        print(chunk.relevance_score, chunk.metadata["source"], chunk.metadata["section"])

``retrieve`` runs the pipeline's own A0 → A2 → Retrieval → ReRanker on the query (hybrid
search, the same reranking), then scores each reranked candidate with the calibrated
relevance model (``ragstream.answering.relevance``) and keeps those at or above ``min_relevance``, most
relevant first, at most ``max_chunks``. When none qualifies the context is empty,
``meets_threshold`` is False and ``no_documents_reason`` says why (no exception).

* The query must be non-empty and at most ``prompt.max_prompt_chars`` (2,000) characters:
  ``InvalidQueryError`` otherwise.
* The same query, context key, limits and filters within ``retrieval.cache_ttl_seconds`` give
  the cached result (``cached=True``); any write to the store (an ingest, a re-ingest, a
  prune) renews its fingerprint, which is part of the cache key, so no stale result survives.
* A retrieval that takes longer than ``retrieval.timeout_s`` raises ``RetrievalTimeoutError``.
* An unreachable Chroma server raises ``VectorDBUnavailableError``.

Both take ``kb``: the named knowledge base to work on (``ragstream.knowledge.bases``; None or
"default": the bundled one). Its engine is made once and shares the models; each result names
the knowledge base it came from (``RAGContext.kb``, each chunk's ``metadata["kb"]``). An
unknown name raises ``KnowledgeBaseError`` (HTTP 404).

``ingest`` upserts documents given as text by their id (``ragstream.knowledge.ingest.ingestor.
ingest_documents``): an unchanged one is skipped, a changed one has all of its embeddings
replaced at once; a document that cannot be ingested is listed in ``errors`` and the others
go on. Its ``IngestionResult`` counts documents written and failed and the embeddings made.
"""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

from cachetools import TTLCache

from ragstream.answering.relevance import relevance, relevance_signals
from ragstream.common.config import AppConfig
from ragstream.common.errors import InvalidQueryError, RetrievalTimeoutError
from ragstream.state.render import rerank_query
from ragstream.state.super_prompt import Chunk, Filters, View
from ragstream.workbench.contract import (
    DocumentChunk,
    IngestionResult,
    RAGContext,
    RuleDocument,
    stable_uuid,
)
from ragstream.workbench.engine import Engine

#: results kept at most in the cache
CACHE_SIZE = 1024
#: concurrent retrievals (each mostly waits on numpy and the encoder, which release the GIL)
WORKERS = 4


def ingest_command(kb: str) -> str:
    """The command that fills knowledge base ``kb`` with a folder or a file of documents."""
    return f"ragstream ingest PATH --kb {kb}"


def fill_hint(kb: str) -> str:
    """How to fill an empty knowledge base, in words."""
    return f"fill it with `{ingest_command(kb)}` (PATH: a folder or a file of your documents)"


def example_topic(engine: Engine) -> str:
    """A section heading of ``engine``'s knowledge base, for an error message's example
    (``Engine.example_topic``); '' when it is empty or cannot be read."""
    return engine.example_topic()


class RAGPipeline:
    """The retrieval service contract over an ``Engine``: ``retrieve`` (and, below, ``ingest``)."""

    def __init__(self, engine: Engine | None = None, cfg: AppConfig | None = None):
        self.engine = engine or Engine(cfg)
        rs = self.engine.cfg.settings.retrieval
        self._cache: TTLCache[tuple, RAGContext] | None = (
            TTLCache(maxsize=CACHE_SIZE, ttl=rs.cache_ttl_seconds) if rs.cache_ttl_seconds > 0 else None)
        self._cache_lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="ragstream-retrieve")

    @property
    def cfg(self) -> AppConfig:
        """The engine's configuration."""
        return self.engine.cfg

    def engine_for(self, kb: str | None) -> Engine:
        """The engine of knowledge base ``kb`` (None: this pipeline's own; ``Engine.for_kb``)."""
        return self.engine.for_kb(kb) if kb else self.engine

    # -- ingest -------------------------------------------------------------------------

    def ingest(self, documents: list[RuleDocument] | list[dict], kb: str | None = None) -> IngestionResult:
        """Upsert ``documents`` into knowledge base ``kb`` (see the module docstring); the cache
        is cleared after a write."""
        from ragstream.knowledge.ingest.ingestor import TextDocument, ingest_documents

        engine = self.engine_for(kb)
        docs = [d if isinstance(d, RuleDocument) else RuleDocument.model_validate(d) for d in documents]
        report = ingest_documents(
            [TextDocument(doc_id=str(d.document_id), filename=d.filename, text=d.content or "",
                          metadata={k: str(v) for k, v in d.metadata.items()}, data=d.data())
             for d in docs],
            engine.cfg, engine.services)
        if report.processed or report.deleted:
            self.clear_cache()
        return IngestionResult(
            job_id=uuid.uuid4(), documents_processed=report.processed,
            documents_failed=report.failed, embedding_count=report.windows_written,
            errors=report.errors, warnings=report.warnings, duration_seconds=report.duration_s,
        )

    # -- retrieve -----------------------------------------------------------------------

    def retrieve(self, query: str, context_key: str, max_chunks: int | None = None,
                 min_relevance: float | None = None, filters: Filters | dict | None = None,
                 kb: str | None = None) -> RAGContext:
        """The chunks of knowledge base ``kb`` most relevant to ``query`` (see the module
        docstring for the rules)."""
        engine = self.engine_for(kb)
        rs = self.cfg.settings.retrieval
        max_chunks = rs.max_chunks if max_chunks is None else max_chunks
        min_relevance = rs.min_relevance if min_relevance is None else min_relevance
        query = self.checked_query(query, kb)
        if not 1 <= max_chunks <= 100:
            raise InvalidQueryError(f"max_chunks is {max_chunks}; give a number from 1 to 100.")
        if not 0.0 <= min_relevance <= 1.0:
            raise InvalidQueryError(f"min_relevance is {min_relevance}; give a number from 0 to 1.")
        filters = filters if isinstance(filters, Filters) else Filters.model_validate(filters or {})
        future = self._pool.submit(self._retrieve_cached, engine, query, context_key, max_chunks,
                                   min_relevance, filters)
        try:
            return future.result(timeout=rs.timeout_s)
        except FutureTimeout:
            future.cancel()
            raise RetrievalTimeoutError(rs.timeout_s) from None

    def checked_query(self, query: str, kb: str | None = None) -> str:
        """``query`` stripped; ``InvalidQueryError`` when it is empty or over the limit (an
        empty one is told what knowledge base ``kb`` could answer: ``example_topic``)."""
        limit = self.cfg.settings.prompt.max_prompt_chars
        if not isinstance(query, str) or not query.strip():
            engine = self.engine_for(kb)
            topic = example_topic(engine)
            raise InvalidQueryError("The query is empty. Send a question" + (
                f", for example about {topic!r} (a section of knowledge base {engine.kb!r})."
                if topic else f" (knowledge base {engine.kb!r} is empty: {fill_hint(engine.kb)})."))
        if len(query) > limit:
            raise InvalidQueryError(f"The query has {len(query)} characters; the limit is {limit}. "
                                    f"Shorten it (or raise prompt.max_prompt_chars in "
                                    f"config/settings.json).")
        return query.strip()

    def clear_cache(self) -> None:
        """Forget every cached result."""
        if self._cache is not None:
            with self._cache_lock:
                self._cache.clear()

    def close(self) -> None:
        """Stop the worker threads (a retrieval still running finishes first)."""
        self._pool.shutdown(wait=True)

    def _retrieve_cached(self, engine: Engine, query: str, context_key: str, max_chunks: int,
                         min_relevance: float, filters: Filters) -> RAGContext:
        services = engine.services
        key = (engine.cfg.settings.vector_store.collection, query, context_key, max_chunks,
               min_relevance, filters, services.store.fingerprint())
        if self._cache is not None:
            with self._cache_lock:
                hit = self._cache.get(key)
            if hit is not None:
                return hit.model_copy(update={"cached": True})
        result = self._retrieve(engine, query, context_key, max_chunks, min_relevance, filters)
        if self._cache is not None:
            with self._cache_lock:
                self._cache[key] = result
        return result

    def _retrieve(self, engine: Engine, query: str, context_key: str, max_chunks: int,
                  min_relevance: float, filters: Filters) -> RAGContext:
        services = engine.services
        index = services.index()

        def empty(reason: str, scores: list[float] | None = None) -> RAGContext:
            avg = sum(scores) / len(scores) if scores else 0.0
            return RAGContext(context_id=uuid.uuid4(), query_id=uuid.uuid4(), context_key=context_key,
                              document_chunks=[], relevance_scores=[], total_chunks=0,
                              avg_relevance=round(avg, 6), meets_threshold=False,
                              min_relevance=min_relevance, no_documents_reason=reason,
                              kb=engine.kb)

        if index.n_chunks == 0:
            return empty(f"The knowledge base {engine.kb!r} is empty (0 chunks): "
                         f"{fill_hint(engine.kb)}.")
        if not filters.empty and not index.count(filters):
            return empty(f"No chunk matches the filters ({filters.describe()}).")
        sp = engine.new(query)
        sp.filters = filters
        sp = engine.run(sp, until="ReRanker")
        rows = sp.view(View.RERANKED)
        chunks = sp.chunk_map()
        candidates = [chunks[r.chunk_id] for r in rows]
        model = self.cfg.settings.retrieval.relevance
        signals = relevance_signals(rerank_query(sp.body, sp.extras.body_sources), candidates,
                                    services, model)
        scores = [round(float(s), 6) for s in relevance(signals, model)]
        order = sorted(range(len(rows)), key=lambda i: (-scores[i], rows[i].rank))
        chosen = [i for i in order if scores[i] >= min_relevance][:max_chunks]
        if not chosen:
            best = [scores[i] for i in order[:max_chunks]]
            return empty(f"No chunk reaches min_relevance {min_relevance:g} (best "
                         f"{best[0] if best else 0:.2f}): the knowledge base does not seem to "
                         f"cover this question.", best)
        found = [self._chunk(candidates[i], scores[i], engine.kb) for i in chosen]
        picked = [scores[i] for i in chosen]
        return RAGContext(
            context_id=uuid.uuid4(), query_id=uuid.uuid4(), context_key=context_key,
            document_chunks=found, relevance_scores=picked, total_chunks=len(found),
            avg_relevance=round(sum(picked) / len(picked), 6), meets_threshold=True,
            min_relevance=min_relevance, kb=engine.kb,
        )

    def _chunk(self, chunk: Chunk, score: float, kb: str) -> DocumentChunk:
        return DocumentChunk(
            chunk_id=chunk.id, document_id=stable_uuid(chunk.doc_id), text=chunk.text,
            metadata={
                "source": chunk.source_name or chunk.source,
                "doc_type": chunk.doc_type,
                "last_update_date": chunk.last_update_date,
                "section": chunk.section,
                "path": chunk.source,
                "heading_path": list(chunk.heading_path),
                "title": chunk.title,
                "chunk_ref": chunk.id,
                "kb": kb,
                "embedding_model": self.cfg.settings.embedding.model,
                **({"page": chunk.page, "page_end": chunk.page_end} if chunk.page else {}),
            },
            relevance_score=score, position_in_doc=chunk.chunk_index,
        )
