"""The default engine: Chroma embedded for the dense vectors, tantivy beside it for the rest.

``LocalEngine`` is a knowledge base's store and its search, in one folder, in process:

* **Chroma** (``ChromaStore``, the record of truth) holds each chunk's windows and their
  vectors; its HNSW index gives a query piece's dense candidates.
* **tantivy** (``KeywordEngine``, ``<index_dir>/keyword-<collection>``) holds each chunk's
  terms (BM25 in the engine), its folded words (phrase search) and its filter fields; beside
  it, a SQLite table (``ChunkStore``) holds what the later stages read for a candidate (the
  chunk, its window vectors, its evidence sentences).

**Writes** go to both, one document at a time: Chroma first (all or nothing), then tantivy
(one commit), then a marker, ``in-step``, naming the Chroma generation both now hold. A
change costs that document in both engines, and every process sees it at its next query.

**Out of step.** A process killed between the two writes leaves Chroma ahead of tantivy (its
generation is not the marker's). The next process to read finds that, when no ingestion
holds the folder's lock (``ingest_busy``: one running is still writing), compares the two
engines' document hashes, and rewrites in tantivy the documents that differ from Chroma's
records (``repair``): it costs the documents out of step, and no answer is ever read from
an index that disagrees with the store. A store made before tantivy was beside it is
indexed the same way, once.

**Chroma across processes.** Chroma's HNSW lives in the memory of the process that opened
the collection and is not refreshed by another process's writes (its persistent client is
not process-safe). So the documents written since this process opened Chroma are read from
tantivy (``written_since``: the change, never the corpus) and their windows scored exactly
beside the HNSW's answer; a chunk the HNSW still returns but tantivy no longer holds is left
out when the candidates are fetched. Past ``DELTA_MAX`` such chunks, Chroma is reopened.
A Chroma server (``vector_store.mode = http``) is one process: nothing is stale there.

**Filters** run in tantivy for keyword search. Chroma filters outside its graph (176 ms at
100k windows, docs/engines.md), so dense search asks the HNSW for more windows than it needs
and keeps those passing the filters, asking again for four times as many until enough pass
or none are left.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Collection, Iterable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import numpy as np

from ragstream.backends.search.keyword import KeywordEngine, StoredChunk, stored_chunks
from ragstream.backends.vector_store import ChromaStore, StoredDocument
from ragstream.state.super_prompt import Chunk, Filters

log = logging.getLogger(__name__)

#: windows asked of the HNSW per chunk wanted (most chunks have one window; fewer distinct
#: chunks than wanted asks again for twice as many)
WINDOW_OVERFETCH = 1.25
#: chunks written since this process opened Chroma that are scored exactly beside its HNSW;
#: past this, Chroma is reopened (its HNSW then holds them)
DELTA_MAX = 5000
#: writes of this process remembered (left out of the exact delta: its own HNSW has them)
OWN_MAX = 1000
#: documents rewritten in tantivy per commit when it is brought in step with Chroma
REPAIR_BATCH = 200
#: the marker file in the keyword folder: the Chroma generation both engines hold
IN_STEP = "in-step"
#: a write seen by Chroma's reader this long before it opened is counted as maybe unseen
OPEN_MARGIN_NS = 2_000_000_000


def _Fields(meta: dict) -> Chunk:
    """A window's metadata as far as ``Filters.matches`` reads it (document type, source,
    source name, update date: stored with every window)."""
    return cast(Chunk, SimpleNamespace(**meta))


def keyword_folder(index_dir: Path, collection: str) -> Path:
    """Where a collection's tantivy index lives: ``<index_dir>/keyword-<collection>``."""
    return Path(index_dir) / f"keyword-{collection}"


class LocalEngine:
    """A knowledge base in Chroma (dense) and tantivy (keyword, filters, chunk store) on one
    folder: the store the ingestion writes and the ``SearchEngine`` retrieval reads. Any
    attribute it does not define is the ``ChromaStore``'s (``documents``, ``fingerprint``,
    ``location``, ``settings``, …)."""

    def __init__(self, chroma: ChromaStore, keyword: KeywordEngine):
        self.chroma = chroma
        self.keyword_engine = keyword
        self._opened_ns: int | None = None  # when this process's Chroma was opened
        self._delta: tuple[str, list[StoredChunk]] | None = None  # (version, chunks)
        self._own: set[int] = set()  # the write times of this process's writes (its HNSW has them)
        self._lock = threading.Lock()
        self._warned = ""  # the out-of-step version last warned about
        self._repairing = False
        chroma.on_open = self._on_open

    @classmethod
    def open(cls, chroma: ChromaStore, stemmer: str = "english", stopwords: str = "en") -> LocalEngine:
        """The engine of ``chroma``'s collection, its keyword index in the usual folder."""
        folder = keyword_folder(chroma.index_dir, chroma.settings.collection)
        return cls(chroma, KeywordEngine(folder, stemmer, stopwords))

    def __getattr__(self, name: str):
        # only called for names this class does not define: the Chroma store's
        return getattr(self.__dict__["chroma"], name)

    @property
    def name(self) -> str:
        """Both engines and where they are, for messages."""
        return f"Chroma at {self.chroma.location} with tantivy at {self.keyword_engine.folder}"

    # -- writing ------------------------------------------------------------------------

    def replace_documents(self, documents: list[tuple[str, list, str]], ingested_at: str,
                          root: str = "") -> None:
        """Swap each ``(doc_id, records, doc_hash)``'s chunks for ``records`` (encoded
        windows) in Chroma, then in tantivy, then mark both in step."""
        self._before_write()
        self.chroma.replace_documents(documents, ingested_at, root)
        now = time.time_ns()
        self._own.add(now)
        self.keyword_engine.replace_documents(
            (doc_id, stored_chunks(records, doc_id, digest, now, ingested_at, root))
            for doc_id, records, digest in documents)
        self._mark_in_step()

    def replace_document(self, doc_id: str, records: list, doc_hash: str, ingested_at: str,
                         root: str = "") -> None:
        """``replace_documents`` for one document."""
        self.replace_documents([(doc_id, records, doc_hash)], ingested_at, root)

    def delete_document(self, doc_id: str) -> int:
        """Remove a document from both engines; how many windows Chroma held."""
        self._before_write()
        n = self.chroma.delete_document(doc_id)
        self.keyword_engine.delete_document(doc_id)
        self._mark_in_step()
        return n

    def _before_write(self) -> None:
        """Bring tantivy in step first when it is not (a new store: nothing to compare; one a
        write was cut short in: the documents that differ), so that marking both in step after
        this write is true."""
        if not self.in_step():
            self.repair()

    def drop(self) -> None:
        """Delete the collection and its keyword index."""
        import shutil

        self.chroma.drop()
        self.keyword_engine.close()
        shutil.rmtree(self.keyword_engine.folder, ignore_errors=True)

    def close(self) -> None:
        """Close both (a folder can then be deleted and reopened)."""
        self.chroma.close()
        self.keyword_engine.close()
        self._opened_ns, self._delta = None, None

    def _marker(self) -> Path:
        return self.keyword_engine.folder / IN_STEP

    def _mark_in_step(self) -> None:
        """Record the Chroma generation tantivy now matches (a new file, then a rename)."""
        marker = self._marker()
        marker.parent.mkdir(parents=True, exist_ok=True)
        tmp = marker.with_name(f"{IN_STEP}.{time.time_ns()}.tmp")
        tmp.write_text(self.chroma.fingerprint(), encoding="utf-8")
        tmp.replace(marker)

    def _marked(self) -> str:
        """The Chroma generation tantivy holds ("" when none, or its index is of another
        version: it is rebuilt when opened)."""
        if not self.keyword_engine.of_this_version():
            return ""
        try:
            return self._marker().read_text(encoding="utf-8").strip()
        except OSError:
            return ""

    # -- in step ------------------------------------------------------------------------

    def version(self) -> str:
        """Chroma's generation and the one tantivy was last brought in step with: changes
        with every write of either (the ``Corpus``'s cache key). Out of step with no ingestion
        writing (a write cut short between the two engines, a store made before tantivy was
        beside it, a keyword index of another version), the process that opens Chroma
        repairs it then (``_on_open``); one that has Chroma open already says so, once per
        version, and searches what tantivy holds (its Chroma may not see another process's
        latest records): the next ingest or ``python -m ragstream repair`` mends it."""
        generation, marked = self.chroma.fingerprint(), self._marked()
        version = f"{generation}|{marked}"
        if generation == marked or version == self._warned:
            return version
        if self.chroma._client is None:
            _ = self.chroma.client  # opening it brings tantivy in step (_on_open)
            generation, marked = self.chroma.fingerprint(), self._marked()
            if generation == marked:
                return f"{generation}|{marked}"
        from ragstream.backends.lock import ingest_busy

        if ingest_busy(self.chroma.index_dir):
            return version  # an ingestion is writing: it marks both in step when done
        self._warned = version
        log.warning("the keyword index %s is out of step with the store (a write was cut "
                    "short): searching what it holds; the next ingest, or `python -m "
                    "ragstream repair`, rewrites the documents that differ",
                    self.keyword_engine.folder)
        return version

    def _on_open(self) -> None:
        """Chroma has just opened in this process, so it reads every process's records: if
        tantivy is not in step with them and no ingestion is writing, repair it now (holding
        the ingestion lock)."""
        if self._repairing or self.in_step():
            return
        from ragstream.backends.lock import IngestLock
        from ragstream.common.errors import IngestLockedError

        try:
            with IngestLock(self.chroma.index_dir, 0.0):
                if not self.in_step():
                    self._repairing = True
                    try:
                        self.repair(own=True)
                    finally:
                        self._repairing = False
        except IngestLockedError:
            pass  # an ingestion is writing: it marks both in step when done

    def documents(self, prefix: str = "", ids: Collection[str] | None = None
                  ) -> dict[str, StoredDocument]:
        """The stored documents whose id starts with ``prefix`` and, given ``ids``, is one of
        them; from tantivy's ``version`` column (no chunk is read; Chroma's listing reads
        every window's metadata: 64 s at 100k chunks). When tantivy is not in step with
        Chroma, Chroma's own listing (a document written half lists no hash)."""
        if not self.in_step():
            return self.chroma.documents(prefix, ids)
        self.chroma.count_windows()  # the store opens (a damaged one says so, typed)
        return {d: StoredDocument(d, h, n, at, root)
                for d, (h, n, at, root) in self.keyword_engine.document_info(prefix, ids).items()}

    def fingerprint(self) -> str:
        """What a pass's results were computed from (``staleness``, the API's result cache):
        the ``version`` of both engines, so a result computed between the two writes of a
        change (Chroma's done, tantivy's not yet) is out of date once tantivy has it too."""
        return self.version()

    def in_step(self) -> bool:
        """True when tantivy holds what Chroma holds (the marker names Chroma's generation)."""
        return self._marked() == self.chroma.fingerprint()

    def repair(self, own: bool = False) -> list[str]:
        """Compare the documents' hashes in Chroma and tantivy and rewrite in tantivy each
        that differs (from Chroma's records; nothing is encoded), removing those Chroma no
        longer holds; then mark both in step. Costs the documents that differ. ``own``: this
        process's Chroma has just opened (its HNSW holds them all: they are not searched
        exactly beside it as others' writes)."""
        generation = self.chroma.fingerprint()
        docs = self.chroma.documents()
        stored = {d: doc.doc_hash for d, doc in docs.items()}
        held = self.keyword_engine.documents()
        differ = sorted(d for d, h in stored.items() if held.get(d) != h)
        gone = sorted(set(held) - set(stored))
        if differ or gone:
            log.warning("the keyword index %s was out of step with the store (%d documents "
                        "differ, %d removed): rewriting them from the store",
                        self.keyword_engine.folder, len(differ), len(gone))
        now = time.time_ns()
        if own:  # Chroma opened just now, under the lock: its HNSW holds what it rewrites
            self._own.add(now)
        for i in range(0, len(differ), REPAIR_BATCH):
            batch = differ[i:i + REPAIR_BATCH]
            chunks, windows, sentences, _dim = self.chroma.read_index_records(batch)
            by_doc: dict[str, list[StoredChunk]] = {d: [] for d in batch}
            for c in chunks:
                found = sorted(sentences.get(c.id, []), key=lambda x: x[0])
                vectors = np.vstack(windows[c.id]).astype(np.float32)
                by_doc[c.doc_id].append(StoredChunk(
                    chunk=c, doc_id=c.doc_id, doc_hash=stored[c.doc_id], window_vectors=vectors,
                    sentence_vectors=(np.vstack([v for _, v in found]).astype(np.float32) if found
                                      else np.zeros((0, vectors.shape[1]), np.float32)),
                    spans=[(int(a), int(b)) for (a, b), _ in found], written_ns=now,
                    ingested_at=docs[c.doc_id].ingested_at, root=docs[c.doc_id].root))
            self.keyword_engine.replace_documents(by_doc.items())
        if gone:
            self.keyword_engine.replace_documents((d, ()) for d in gone)
        self.keyword_engine.sweep()
        if self.chroma.fingerprint() == generation:  # nobody wrote meanwhile
            self._mark_in_step()
        return differ + gone

    # -- searching ----------------------------------------------------------------------

    def count(self, filters: Filters | None = None) -> int:
        """How many chunks tantivy holds (passing ``filters``)."""
        return self.keyword_engine.count(filters)

    def keyword(self, terms: Sequence[str], k: int,
                filters: Filters | None = None) -> list[tuple[str, float]]:
        """BM25 in tantivy, filters in the engine."""
        return self.keyword_engine.search(terms, k, filters)

    def keyword_scores(self, terms: Sequence[str], chunk_ids: Sequence[str]) -> dict[str, float]:
        """BM25 of the given chunks, from tantivy."""
        return self.keyword_engine.scores(terms, chunk_ids)

    def keyword_many(self, queries: Sequence[Sequence[str]], k: int,
                     filters: Filters | None = None) -> list[list[tuple[str, float]]]:
        """``keyword`` for each query piece's terms, on one tantivy searcher."""
        return self.keyword_engine.search_many(queries, k, filters)

    def stats(self) -> tuple[int, float]:
        """tantivy's chunk count and mean length in terms."""
        return self.keyword_engine.stats()

    def doc_freqs(self, terms: Sequence[str]) -> dict[str, int]:
        """Document frequencies from tantivy's term dictionary."""
        return self.keyword_engine.doc_freqs(terms)

    def fetch(self, chunk_ids: Sequence[str]) -> dict[str, StoredChunk]:
        """The stored chunks, from tantivy."""
        return self.keyword_engine.fetch(chunk_ids)

    def phrase(self, text: str, limit: int) -> list[str]:
        """Phrase search in tantivy."""
        return self.keyword_engine.phrase(text, limit)

    def values(self, field: str) -> list[str]:
        """A filter field's values, from tantivy's term dictionary."""
        return self.keyword_engine.values(field)

    def document_chunks(self, doc_id: str) -> list[str]:
        """A document's chunk ids, from tantivy."""
        return self.keyword_engine.document_chunks(doc_id)

    def every_chunk(self) -> Iterable[StoredChunk]:
        """Every chunk, from tantivy (evaluation and tools only)."""
        return self.keyword_engine.every_chunk()

    def dense(self, vectors: np.ndarray, k: int,
              filters: Filters | None = None) -> list[list[tuple[str, float]]]:
        """Per query vector, the ``k`` chunks nearest by their best window: Chroma's HNSW
        (over-fetched, then filtered), and the chunks written since this process opened
        Chroma, scored exactly."""
        vectors = np.asarray(vectors, dtype=np.float32)
        if k <= 0 or not len(vectors):
            return [[] for _ in vectors]
        found = self._hnsw(vectors, k, filters)
        delta = [s for s in self._written_since_open() if filters is None or filters.matches(s.chunk)]
        for stored in delta:  # each chunk's best window against every piece at once
            cosines = (stored.window_vectors @ vectors.T).max(axis=0)
            for best, cos in zip(found, cosines.tolist()):
                best[stored.chunk_id] = cos
        return [sorted(best.items(), key=lambda x: (-x[1], x[0]))[:k] for best in found]

    def _hnsw(self, vectors: np.ndarray, k: int, filters: Filters | None) -> list[dict[str, float]]:
        if self._opened_ns is None:
            self._opened_ns = time.time_ns() - OPEN_MARGIN_NS
        found: list[dict[str, float]] = [{} for _ in vectors]
        n = int(k * WINDOW_OVERFETCH) + 1  # Chroma gives fewer when it holds fewer
        todo = list(range(len(vectors)))
        while todo:
            # the metadata only when the filters read it (a window's id names its chunk; one
            # removed since this process loaded the HNSW is dropped when fetched)
            res = self.chroma.nearest(vectors[todo], n, metadata=filters is not None)
            metas = res.get("metadatas") or [[None] * len(ids) for ids in res["ids"]]
            again = []
            for j, i in enumerate(todo):
                best = found[i] = {}
                for wid, meta, dist in zip(res["ids"][j], metas[j], res["distances"][j]):
                    cid = wid.rsplit("@w", 1)[0]
                    if cid in best:
                        continue
                    if filters is not None and (meta is None or not filters.matches(_Fields(meta))):
                        continue
                    best[cid] = 1.0 - float(dist)
                if len(best) < k and len(res["ids"][j]) == n:  # more may pass further out
                    again.append(i)
            todo, n = again, n * (4 if filters is not None else 2)
        return found

    def _written_since_open(self) -> list[StoredChunk]:
        """The chunks written (by any process) since this process opened Chroma, once per
        version; past ``DELTA_MAX`` of them, Chroma is reopened instead."""
        if self.chroma.settings.mode == "http" or self._opened_ns is None:
            return []
        version = self.version()
        with self._lock:
            if self._delta is not None and self._delta[0] == version:
                return self._delta[1]
            delta = self.keyword_engine.written_since(self._opened_ns, DELTA_MAX + 1, self._own)
            if len(delta) > DELTA_MAX or len(self._own) > OWN_MAX:
                log.info("%d chunks written by others since Chroma was opened here: reopening it",
                         len(delta))
                self.chroma.close()
                self._opened_ns, self._own = time.time_ns() - OPEN_MARGIN_NS, set()
                delta = self.keyword_engine.written_since(self._opened_ns, DELTA_MAX + 1)
            self._delta = (version, delta)
            return delta
