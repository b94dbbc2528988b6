"""The vector store: Chroma, embedded (``PersistentClient``) or a server (``HttpClient``).

One record per embedding *window* of a chunk: id ``"<chunk id>@w<i>"``, the window text as
the document, the window's vector, and the chunk's metadata. Chunks are rebuilt from their
windows (which partition the chunk text), so Chroma is the single source of truth for the
knowledge base; the keyword index is derived from it.

Chroma's shapes (ids/documents/metadatas lists, distances) stop here: callers see ``Chunk``
objects, chunk ids, cosine scores and numpy arrays.

Vectors are always passed explicitly: the collection is created without an embedding
function, and no call ever sends text for Chroma to embed (its default embedder would try to
download a model).

A Chroma server that goes away (http mode) is a ``VectorDBUnavailableError`` naming its URL,
from every call, never a bare httpx error. chromadb's ``HttpClient`` talks through an httpx
client made with ``timeout=None`` (it would wait forever for a server that accepts but does not
answer), so the store probes the server with its own timeouts before building the client and
then gives the client's session the same timeouts: ``connect_timeout_s`` to connect,
``request_timeout_s`` per request. A read that cannot connect (or whose connection drops) is
tried ``connect_retries`` more time(s) after ``retry_backoff_s``; a request that timed out
after connecting is not retried (that would double the wait), and a write is never retried
(``replace_documents`` is all-or-nothing only while the server answers; an ingest that stopped
half-way is completed by the next one). Measured with chromadb 1.5.9 / httpx 0.28: after the
server is restarted, the same client and collection objects work again (httpx drops dead
pooled connections), so nothing needs rebuilding; the store still forgets its collection
handle after a failure, so a server restarted on a fresh data folder is looked up by name again.
The four values are ``vector_store`` settings (``connect_timeout_s``, ``request_timeout_s``,
``connect_retries``, ``retry_backoff_s``).
"""

from __future__ import annotations

import functools
import json
import os
import sys
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from collections.abc import Collection as AbcCollection  # chromadb has a Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

import numpy as np

from ragstream.backends import chroma_reader
from ragstream.backends.doc_index import WindowRecord, pack_vectors, unpack_vectors
from ragstream.common.config import VectorStoreSettings
from ragstream.common.errors import StoreUnreadableError, VectorDBUnavailableError, VectorStoreError
from ragstream.state.super_prompt import Chunk

if TYPE_CHECKING:  # pragma: no cover
    from chromadb.api import ClientAPI
    from chromadb.api.models.Collection import Collection

GENERATION_KEY = "ragstream_generation"
#: persistent mode: a copy of the stamp beside Chroma's files (see ``ChromaStore.fingerprint``)
GENERATION_FILE_PREFIX = "ragstream-generation-"

_CHUNK_FIELDS = [
    "doc_id", "source", "title", "section", "doc_type", "last_update_date", "chunk_index",
    "start_line", "end_line", "word_count", "token_count", "has_code", "has_equations",
    "content_hash", "source_name", "page", "page_end",
]


_P = ParamSpec("_P")
_R = TypeVar("_R")
_guard = threading.local()  # .depth: > 0 inside a guarded call (nested calls are not re-guarded)


def _transport_error(err: BaseException) -> BaseException | None:
    """The network failure behind ``err`` (itself or a cause): no connection, a dropped
    connection or a timeout, as httpx or the OS reports it; None for anything else."""
    import httpx

    seen: set[int] = set()
    e: BaseException | None = err
    while e is not None and id(e) not in seen:
        if isinstance(e, httpx.TransportError | ConnectionError):
            return e
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return None


def _retryable(err: BaseException) -> bool:
    """A failure to connect (or a dropped connection) is worth one more try; a request that
    timed out after connecting is not (the server is there but does not answer)."""
    import httpx

    return not isinstance(err, httpx.TimeoutException) or isinstance(err, httpx.ConnectTimeout)


def _describe(err: BaseException) -> str:
    import httpx

    text = str(err).strip() or "no details"
    if isinstance(err, httpx.TimeoutException):
        text = f"no answer in time: {text}"
    return f"{type(err).__name__}: {text}"


def _reaching_server(during: str, retry: bool = True) -> Callable[
        [Callable[Concatenate[ChromaStore, _P], _R]], Callable[Concatenate[ChromaStore, _P], _R]]:
    """Http mode: turn a failure to reach the server into ``VectorDBUnavailableError``
    (``during`` says what the store was doing), retrying a read that could not connect."""
    def decorate(method: Callable[Concatenate[ChromaStore, _P], _R]
                 ) -> Callable[Concatenate[ChromaStore, _P], _R]:
        @functools.wraps(method)
        def guarded(self: ChromaStore, *args: _P.args, **kwargs: _P.kwargs) -> _R:
            depth = getattr(_guard, "depth", 0)
            if self.settings.mode != "http" or depth:
                return method(self, *args, **kwargs)
            attempts = 1 + (max(0, self.connect_retries) if retry else 0)
            _guard.depth = depth + 1
            try:
                for attempt in range(1, attempts + 1):
                    try:
                        return method(self, *args, **kwargs)
                    except Exception as err:
                        cause = _transport_error(err)
                        if cause is None:
                            raise
                        self._collection = None  # looked up by name again on the next call
                        if attempt < attempts and _retryable(cause):
                            time.sleep(self.retry_backoff_s * attempt)
                            continue
                        raise VectorDBUnavailableError(self.location, _describe(cause), during) from err
                raise AssertionError("unreachable")  # pragma: no cover
            finally:
                _guard.depth = depth
        return guarded
    return decorate


#: held while a client or collection is opened (chromadb's first open is not thread-safe)
_OPENING = threading.RLock()
_READING = "reading the knowledge base"
_WRITING = ("writing to it (documents being written may be incomplete there until the next "
            "ingest, which completes them)")


@dataclass(frozen=True)
class StoredDocument:
    """One ingested document as the store lists it: id, hash, chunk count, ingest time and root."""

    doc_id: str
    doc_hash: str
    chunks: int
    ingested_at: str
    root: str


def _metadata(rec: WindowRecord, doc_hash: str, ingested_at: str, root: str,
              doc_windows: int) -> dict[str, Any]:
    c = rec.chunk
    meta: dict[str, Any] = {f: getattr(c, f) for f in _CHUNK_FIELDS}
    meta.update(
        chunk_id=c.id,
        heading_path=json.dumps(list(c.heading_path), ensure_ascii=False),
        window=rec.window,
        n_windows=rec.n_windows,
        doc_hash=doc_hash,
        doc_windows=doc_windows,
        ingested_at=ingested_at,
        root=root,
        # the evidence sentences that start in this window: spans in the chunk text, vectors
        sentence_spans=json.dumps([list(s) for s in rec.sentence_spans]),
        sentence_vectors=pack_vectors(rec.sentence_vectors),
    )
    return meta


def _chunk_from(records: list[tuple[dict[str, Any], str]]) -> Chunk:
    """Rebuild a chunk from its windows' (metadata, document) pairs."""
    records = sorted(records, key=lambda r: r[0]["window"])
    meta = records[0][0]
    # a store written before a field existed lacks it: the chunk keeps that field's default
    fields = {f: meta[f] for f in _CHUNK_FIELDS if f in meta}
    return Chunk(
        id=meta["chunk_id"],
        text="".join(doc for _, doc in records),
        heading_path=tuple(json.loads(meta["heading_path"])),
        **fields,
    )


class ChromaStore:
    """The Chroma collection of chunk windows, embedded on disk or over HTTP, with all-or-nothing writes."""

    def __init__(self, settings: VectorStoreSettings, index_dir: Path):
        self.settings = settings
        self.index_dir = Path(index_dir)
        self._client: ClientAPI | None = None
        #: called once the client has opened, under the opening lock (the ``LocalEngine``
        #: brings its keyword index in step then, from a view of every process's records)
        self.on_open: Callable[[], None] | None = None
        self._collection: Collection | None = None
        self._reading = False  # reading through the folder's ChromaReader (client not opened)
        # http mode (see the module docstring)
        self.connect_timeout_s = settings.connect_timeout_s
        self.request_timeout_s = settings.request_timeout_s
        self.connect_retries = settings.connect_retries
        self.retry_backoff_s = settings.retry_backoff_s

    # -- connection ---------------------------------------------------------------------

    @property
    def location(self) -> str:
        """Where the store lives: the server URL in http mode, else ``index_dir/chroma``."""
        if self.settings.mode == "http":
            return self.settings.url
        return str(self.index_dir / "chroma")

    @property
    def client(self) -> ClientAPI:
        """The Chroma client, opened on first use; raise VectorStoreError when it cannot be
        opened (VectorDBUnavailableError when the server cannot be reached)."""
        if self._client is None:
            with _OPENING:  # two threads' first queries open one client, not two
                if self._client is None:
                    self._open_client()
                    if self.on_open is not None:
                        self._run_on_open()
        assert self._client is not None  # _open_client raises when it cannot open one
        return self._client

    def _run_on_open(self) -> None:
        """The open hook (``LocalEngine`` brings tantivy in step), its first reads of the store:
        a store Chroma opens but cannot read (seen after a writer was killed in the middle of a
        write at 1M chunks: ``InternalError: ... Failed to apply logs to the hnsw segment
        writer`` on every call) is ``StoreUnreadableError``, naming the repair, not Chroma's
        own error; the client is dropped, so the next call tries again."""
        from ragstream.common.errors import RagstreamError

        assert self.on_open is not None
        try:
            self.on_open()
        except RagstreamError:
            raise
        except Exception as err:
            if self.settings.mode != "persistent":
                raise
            self.close()
            raise StoreUnreadableError(self.location, f"{type(err).__name__}: {err}") from err

    def _open_client(self) -> None:
        if self.settings.mode == "persistent":
            chroma_reader.client_opening(self.location)
        import chromadb
        from chromadb.config import Settings

        chroma_settings = Settings(anonymized_telemetry=False)
        try:
            if self.settings.mode == "http":
                self._client = self._open_http_client(chroma_settings)
            else:
                path = self.index_dir / "chroma"
                path.mkdir(parents=True, exist_ok=True)
                self._client = chromadb.PersistentClient(path=str(path), settings=chroma_settings)
        except Exception as err:
            self._client = None
            cause = _transport_error(err) if self.settings.mode == "http" else None
            if cause is not None:
                raise VectorDBUnavailableError(self.location, _describe(cause), "connecting") from err
            if self.settings.mode == "persistent":
                self.close()  # Chroma keeps the half-opened system per folder: drop it
                if (self.index_dir / "chroma").is_dir() and any((self.index_dir / "chroma").iterdir()):
                    raise StoreUnreadableError(self.location, f"{type(err).__name__}: {err}") from err
            raise VectorStoreError(
                f"Cannot open the Chroma vector store at {self.location}: {err}. "
                + ("Start the server (chroma run --path DIR --host 127.0.0.1 --port PORT) or "
                   "unset RAGSTREAM_CHROMA_URL to use the embedded store."
                   if self.settings.mode == "http" else
                   "Check that the folder is writable (paths.index_dir in config/settings.json).")
            ) from err

    def _open_http_client(self, chroma_settings) -> ClientAPI:
        """An ``HttpClient`` whose requests time out: the server is probed with the store's
        timeouts first (chromadb sends requests while it builds the client, with none), and
        the client's httpx session then gets the same timeouts."""
        from urllib.parse import urlparse

        import chromadb
        import httpx

        u = urlparse(self.settings.url)
        host, port, ssl = u.hostname or "127.0.0.1", u.port or 8000, u.scheme == "https"
        timeout = self.http_timeout
        api = chroma_settings.chroma_server_api_default_path  # a str enum: "/api/v2"
        probe = f"{'https' if ssl else 'http'}://{host}:{port}{getattr(api, 'value', api)}/heartbeat"
        httpx.get(probe, timeout=timeout).raise_for_status()
        client = chromadb.HttpClient(host=host, port=port, ssl=ssl, settings=chroma_settings)
        session = getattr(getattr(client, "_server", None), "_session", None)
        if isinstance(session, httpx.Client):
            session.timeout = timeout
        return client

    @property
    def http_timeout(self):
        """The httpx timeout of every request to a Chroma server (connect, then per request)."""
        import httpx

        return httpx.Timeout(self.request_timeout_s, connect=self.connect_timeout_s)

    @property
    def collection(self):
        """The cosine-space collection, created if missing; raise VectorStoreError if it cannot be opened."""
        if self._collection is None:
            with _OPENING:
                if self._collection is None:
                    self._open_collection()
        return self._collection

    def _open_collection(self) -> None:
        try:
            self._collection = self.client.get_or_create_collection(
                name=self.settings.collection,
                configuration={"hnsw": {"space": "cosine"}},
                embedding_function=None,
            )
        except Exception as err:
            raise VectorStoreError(
                f"Cannot open collection {self.settings.collection!r} at {self.location}: {err}"
            ) from err

    def close(self) -> None:
        """Forget the client (a persistent folder can then be deleted and reopened). Chroma
        shares one system per folder across the clients of a process, so its cache is
        cleared even when this object never opened one (but chromadb is not imported for it)."""
        self._client, self._collection, self._reading = None, None, False
        if self.settings.mode == "persistent":
            chroma_reader.forget(self.location)
        if self.settings.mode == "persistent" and "chromadb" in sys.modules:
            from chromadb.api.shared_system_client import SharedSystemClient

            SharedSystemClient.clear_system_cache()

    def drop(self) -> None:
        """Delete the whole collection (and, in persistent mode, its generation stamp's copy);
        nothing else in the store is touched. A collection that does not exist is no error."""
        try:
            names = {getattr(c, "name", c) for c in self.client.list_collections()}
            if self.settings.collection in names:
                self.client.delete_collection(self.settings.collection)
        except VectorStoreError:
            raise
        except Exception as err:
            raise VectorStoreError(f"Cannot delete collection {self.settings.collection!r} at "
                                   f"{self.location}: {err}") from err
        self._collection = None
        path = self._generation_file
        if path is not None:
            path.unlink(missing_ok=True)

    # -- reading ------------------------------------------------------------------------

    @_reaching_server(_READING)
    def count_windows(self) -> int:
        """How many windows the collection holds."""
        return int(self.collection.count())

    @_reaching_server(_READING)
    def nearest(self, vectors: np.ndarray, n: int, metadata: bool = True) -> dict[str, Any]:
        """The HNSW's ``n`` nearest windows of each vector: ids, cosine distances and (with
        ``metadata``) metadata, None for a window removed since this process loaded the index."""
        include = ["metadatas", "distances"] if metadata else ["distances"]
        found = self._reader()
        if found is not None:
            reader, collection_id = found
            return reader.query(collection_id, vectors, n, include)
        return self.collection.query(query_embeddings=np.asarray(vectors, dtype=np.float32),
                                     n_results=n, include=include)

    def _reader(self) -> tuple[chroma_reader.ChromaReader, str] | None:
        """Persistent mode before the client is opened: the folder's ``ChromaReader`` and the
        collection's id (the open hook runs on this store's first read through it, as when
        its client opens); None when reads go through the client."""
        if self._client is not None or self.settings.mode != "persistent":
            return None
        with _OPENING:
            reader = chroma_reader.reader_for(self.location)
            collection_id = reader.collection_id(self.settings.collection) if reader else None
            if reader is None or collection_id is None:
                return None
            if not self._reading:
                self._reading = True
                if self.on_open is not None:
                    self._run_on_open()  # a repair may open the client: then read through it
        if self._client is not None or chroma_reader.reader_for(self.location) is not reader:
            return None
        return reader, collection_id

    def _get_all(self, include: list[str], where: dict | None = None) -> dict[str, Any]:
        page, offset = 5000, 0
        out: dict[str, list] = {"ids": [], **{k: [] for k in include}}
        while True:
            res = self.collection.get(where=where, include=include, limit=page, offset=offset)
            out["ids"].extend(res["ids"])
            for k in include:
                out[k].extend(res[k] if res.get(k) is not None else [])
            if len(res["ids"]) < page:
                return out
            offset += page

    @_reaching_server(_READING)
    def documents(self, prefix: str = "", ids: AbcCollection[str] | None = None
                  ) -> dict[str, StoredDocument]:
        """The stored documents whose id starts with ``prefix`` and, given ``ids``, is one of
        them (Chroma's metadata filters have no "starts with": the prefix is checked here). A
        document whose windows are not all present (a write that was killed half-way) is
        listed with an empty hash, so the next ingest rewrites it."""
        if ids is not None and not ids:
            return {}
        res = self._get_all(["metadatas"], None if ids is None
                            else {"doc_id": {"$in": sorted(set(ids))}})
        if prefix:
            res["metadatas"] = [m for m in res["metadatas"] if m["doc_id"].startswith(prefix)]
        chunks: dict[str, set[str]] = defaultdict(set)
        windows: dict[str, int] = defaultdict(int)
        first: dict[str, dict] = {}
        for meta in res["metadatas"]:
            chunks[meta["doc_id"]].add(meta["chunk_id"])
            windows[meta["doc_id"]] += 1
            first.setdefault(meta["doc_id"], meta)

        def doc_hash(d: str, m: dict) -> str:
            expected = m.get("doc_windows")
            return m["doc_hash"] if expected in (None, windows[d]) else ""

        return {
            d: StoredDocument(d, doc_hash(d, m), len(chunks[d]), m["ingested_at"], m.get("root", ""))
            for d, m in sorted(first.items())
        }

    @_reaching_server(_READING)
    def all_chunks(self) -> list[Chunk]:
        """Every chunk, sorted by id."""
        return self._chunks_where(None)

    @_reaching_server(_READING)
    def get_chunks(self, chunk_ids: Iterable[str]) -> dict[str, Chunk]:
        """The chunks with the given ids, by id (ids not stored are left out)."""
        ids = sorted(set(chunk_ids))
        if not ids:
            return {}
        return {c.id: c for c in self._chunks_where({"chunk_id": {"$in": ids}})}

    def _chunks_where(self, where: dict | None) -> list[Chunk]:
        res = self._get_all(["metadatas", "documents"], where)
        grouped: dict[str, list] = defaultdict(list)
        for meta, doc in zip(res["metadatas"], res["documents"]):
            grouped[meta["chunk_id"]].append((meta, doc))
        return [_chunk_from(grouped[cid]) for cid in sorted(grouped)]

    @_reaching_server(_READING)
    def window_vectors(self, chunk_ids: Iterable[str]) -> dict[str, np.ndarray]:
        """All window vectors of each chunk, as a (windows × dim) array."""
        ids = sorted(set(chunk_ids))
        if not ids:
            return {}
        res = self._get_all(["metadatas", "embeddings"], {"chunk_id": {"$in": ids}})
        grouped: dict[str, list] = defaultdict(list)
        for meta, vec in zip(res["metadatas"], res["embeddings"]):
            grouped[meta["chunk_id"]].append((meta["window"], vec))
        return {cid: np.asarray([v for _, v in sorted(rows, key=lambda r: r[0])], dtype=np.float32)
                for cid, rows in grouped.items()}

    @_reaching_server(_READING)
    def read_index_records(self, doc_ids: Sequence[str] | None = None):
        """Every chunk's records (of ``doc_ids`` only, if given), in one pass over the store:
        the chunks, each chunk's window vectors (in window order) and its evidence sentences
        as ``((start, end), vector)``; and the vector dimension."""
        where = (None if doc_ids is None else
                 {"doc_id": {"$in": list(doc_ids)}} if len(doc_ids) != 1 else {"doc_id": doc_ids[0]})
        res = self._get_all(["metadatas", "documents", "embeddings"], where)
        grouped: dict[str, list] = defaultdict(list)
        dim = 0
        for meta, doc, vec in zip(res["metadatas"], res["documents"], res["embeddings"]):
            grouped[meta["chunk_id"]].append((meta, doc, vec))
            dim = len(vec)
        chunks, windows, sentences = [], {}, {}
        for cid, rows in grouped.items():
            rows.sort(key=lambda r: r[0]["window"])
            chunks.append(_chunk_from([(m, d) for m, d, _ in rows]))
            windows[cid] = [np.asarray(v, dtype=np.float32) for _, _, v in rows]
            sents: list[tuple[tuple[int, ...], np.ndarray]] = []
            for meta, _doc, _vec in rows:
                spans = json.loads(meta.get("sentence_spans") or "[]")
                vecs = unpack_vectors(meta.get("sentence_vectors") or "", dim)
                sents.extend((tuple(span), v) for span, v in zip(spans, vecs))
            sentences[cid] = sents
        return chunks, windows, sentences, dim

    # -- writing ------------------------------------------------------------------------

    def replace_document(self, doc_id: str, records: list[WindowRecord], doc_hash: str,
                         ingested_at: str, root: str = "") -> None:
        """Swap a document's windows for ``records``: all of them are written, or none."""
        self.replace_documents([(doc_id, records, doc_hash)], ingested_at, root)

    @_reaching_server(_WRITING, retry=False)
    def replace_documents(self, documents: list[tuple[str, list[WindowRecord], str]],
                          ingested_at: str, root: str = "") -> None:
        """Swap each ``(doc_id, records, doc_hash)``'s windows for ``records`` in one write.

        All-or-nothing for the whole batch (so for every document in it): the old windows
        are read first; if any write fails, the new windows are removed, the old ones
        restored, and ``VectorStoreError`` is raised. The generation stamp is renewed before
        the first write and after the last, so a process killed half-way never leaves a
        snapshot of the store that claims to be current.
        """
        if not documents:
            return
        coll = self.collection
        doc_ids = [d for d, _, _ in documents]
        old = self._get_all(["metadatas", "documents", "embeddings"],
                            {"doc_id": {"$in": doc_ids}} if len(doc_ids) > 1 else {"doc_id": doc_ids[0]})
        rows = [(rec, _metadata(rec, digest, ingested_at, root, len(records)))
                for _doc, records, digest in documents for rec in records]
        new_ids = [rec.id for rec, _ in rows]
        batch = self.settings.write_batch_size
        try:
            self._bump_generation()
            if old["ids"]:
                coll.delete(ids=old["ids"])
            for i in range(0, len(rows), batch):
                part = rows[i:i + batch]
                self._add(
                    ids=[r.id for r, _ in part],
                    embeddings=np.asarray([r.vector for r, _ in part], dtype=np.float32),
                    documents=[r.chunk.text[r.start:r.end] for r, _ in part],
                    metadatas=[m for _, m in part],
                )
            self._bump_generation()
        except Exception as err:
            self._rollback(new_ids, old)
            try:
                self._bump_generation()
            except Exception:
                pass
            names = doc_ids[0] if len(doc_ids) == 1 else f"{len(doc_ids)} documents ({doc_ids[0]}, …)"
            raise VectorStoreError(
                f"Writing {names!s} failed and was rolled back (the previous version, if any, "
                f"is intact): {err}"
            ) from err

    def _add(self, **kwargs: Any) -> None:
        self.collection.add(**kwargs)

    def _rollback(self, new_ids: list[str], old: dict[str, Any]) -> None:
        coll = self.collection
        present = coll.get(ids=new_ids, include=[])["ids"] if new_ids else []
        if present:
            coll.delete(ids=present)
        if old["ids"]:
            coll.add(ids=old["ids"], embeddings=np.asarray(old["embeddings"], dtype=np.float32),
                     documents=old["documents"], metadatas=old["metadatas"])

    @_reaching_server(_WRITING, retry=False)
    def delete_document(self, doc_id: str) -> int:
        """Delete every window of ``doc_id`` and return how many were deleted."""
        ids = self.collection.get(where={"doc_id": doc_id}, include=[])["ids"]
        if ids:
            self._bump_generation()  # before and after, as in replace_documents
            self.collection.delete(ids=ids)
            self._bump_generation()
        return len(ids)

    def _bump_generation(self) -> None:
        """Record that the collection changed (read by ``fingerprint``, also across processes)."""
        self._set_generation(uuid.uuid4().hex)

    def _set_generation(self, generation: str) -> None:
        """The stamp goes into the collection's metadata, then (persistent mode) into its copy
        on disk, written whole (temporary file, then rename). A crash between the two leaves
        the copy at the previous stamp, which is still a stamp taken before the data changed."""
        self.collection.modify(metadata={GENERATION_KEY: generation})
        path = self._generation_file
        if path is not None:
            tmp = path.with_name(f"{path.name}.{uuid.uuid4().hex}.tmp")
            tmp.write_text(generation, encoding="utf-8")
            os.replace(tmp, path)

    @property
    def _generation_file(self) -> Path | None:
        if self.settings.mode != "persistent":
            return None
        return self.index_dir / "chroma" / f"{GENERATION_FILE_PREFIX}{self.settings.collection}"

    def _seed_generation_copy(self, generation: str) -> None:
        """Give a store written before the copy existed its copy. Created only if absent, so it
        can never overwrite a newer stamp that a writer put there meanwhile."""
        path = self._generation_file
        if path is None or path.exists():
            return
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except OSError:
            return
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(generation)

    def _generation_copy(self) -> str | None:
        path = self._generation_file
        try:
            return (path.read_text(encoding="utf-8").strip() or None) if path else None
        except OSError:
            return None

    @_reaching_server(_READING)
    def fingerprint(self) -> str:
        """Changes whenever any document is added, replaced or removed.

        Cheap: a generation stamp kept in the collection's metadata and renewed by every write
        of this class, before and after it (re-read from the store, so writes by other
        processes count too). A collection without the stamp is fingerprinted once from all
        its documents' hashes, and that fingerprint becomes its stamp.

        In persistent mode every write also leaves a copy of the stamp in a file beside
        Chroma's own (written after the collection's, before and after each write), and the
        copy is what is read: no Chroma call per query (each stage of a pass asks)."""
        copy = self._generation_copy()  # renewed by every write, read without a Chroma call
        if copy:
            return copy
        try:
            _ = self.collection  # made if it does not exist yet
            fresh = self.client.get_collection(self.settings.collection)
            generation = (fresh.metadata or {}).get(GENERATION_KEY)
        except Exception as err:
            raise VectorStoreError(f"Cannot read collection {self.settings.collection!r} at "
                                   f"{self.location}: {err}") from err
        if generation:
            self._seed_generation_copy(str(generation))
            return str(generation)
        # a collection from before the stamp existed: fingerprint it once, then stamp it
        scanned = self._scan_fingerprint()
        self._set_generation(scanned)
        return scanned

    def _scan_fingerprint(self) -> str:
        import hashlib

        docs = self.documents()
        h = hashlib.sha256()
        for d in docs.values():
            h.update(f"{d.doc_id}\0{d.doc_hash}\0{d.ingested_at}\n".encode())
        return h.hexdigest()
