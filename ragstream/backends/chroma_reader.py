"""A read-only way into an embedded Chroma store that does not import ``chromadb``.

``import chromadb`` costs ~0.5 s (its Python API, its telemetry and OpenTelemetry exporters,
its embedding functions, ``overrides`` checking ~160 method signatures), more than the rest
of a ``ragstream run --no-sync``. A pass only asks the store for its HNSW's nearest windows,
and that is one call of Chroma's Rust core, ``chromadb_rust_bindings`` (~25 ms to import),
the same call chromadb's own ``RustBindingsAPI._query`` makes for ``Collection.query``. So
a persistent ``ChromaStore`` that has not opened its client answers ``nearest`` here, with
the same bindings built with the same settings ``PersistentClient`` builds them with (a
test compares both answers on one store, so a chromadb upgrade that changes them fails it).

One reader per folder per process (Chroma, too, shares one system per folder): every store
object of a folder reads through the same HNSW, as they do through one client. Anything
else (a write, a listing, a collection not made yet, settings the environment changes) goes
through chromadb's client, and once a client is opened on a folder the folder's reader is
dropped: from then on every store object of that folder reads through the client's system,
which sees this process's writes.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

# chromadb's defaults (chromadb.config: DEFAULT_TENANT, DEFAULT_DATABASE)
TENANT = "default_tenant"
DATABASE = "default_database"
#: Chroma settings read from the environment: with any of them set, the client is used
_CHROMA_ENV = ("ALLOW_RESET", "MIGRATIONS", "MIGRATIONS_HASH_ALGORITHM", "CHROMA_ALLOW_RESET")

_lock = threading.RLock()
_readers: dict[str, ChromaReader] = {}
#: folders a chromadb client has been opened on in this process: read through it
_client_opened: set[str] = set()


class ChromaReader:
    """Chroma's Rust core on one persistent folder, for queries only."""

    def __init__(self, path: str, bindings: Any):
        self.path = path
        self._bindings = bindings
        self._collections: dict[str, str] = {}  # name -> collection id

    @classmethod
    def open(cls, path: str) -> ChromaReader | None:
        """The bindings on ``path`` as ``PersistentClient`` would make them, or None when the
        folder holds no store yet (the client makes it) or they cannot be made (the client
        then says why, typed)."""
        if not Path(path, "chroma.sqlite3").is_file():
            return None
        if any(key in os.environ or key.lower() in os.environ for key in _CHROMA_ENV):
            return None
        try:
            import resource  # POSIX (chromadb asks Windows' C runtime instead: the client is used)

            import chromadb_rust_bindings as rb

            config = rb.SqliteDBConfig(hash_type=rb.MigrationHash.MD5,
                                       migration_mode=rb.MigrationMode.Apply,
                                       url=f"{path}/chroma.sqlite3")
            # as chromadb's RustBindingsAPI: each HNSW index holds 4 data files and 1 metadata file
            cache = resource.getrlimit(resource.RLIMIT_NOFILE)[0] // 5
            bindings = rb.Bindings(allow_reset=False, sqlite_db_config=config, persist_path=path,
                                   hnsw_cache_size=cache)
        except Exception:
            return None
        return cls(path, bindings)

    def collection_id(self, name: str) -> str | None:
        """The id of collection ``name``, or None when there is no such collection."""
        cid = self._collections.get(name)
        if cid is None:
            try:
                cid = str(self._bindings.get_collection(name, TENANT, DATABASE).id)
            except Exception:
                return None
            self._collections[name] = cid
        return cid

    def query(self, collection_id: str, vectors: np.ndarray, n: int,
              include: list[str]) -> dict[str, Any]:
        """``Collection.query(query_embeddings=vectors, n_results=n, include=include)``'s
        ids, distances and metadatas (None unless included)."""
        rows = list(np.asarray(vectors, dtype=np.float32))
        res = self._bindings.query(collection_id, None, rows, n, None, None, include, TENANT,
                                   DATABASE)
        return {"ids": res.ids, "distances": res.distances, "metadatas": res.metadatas}


def reader_for(path: str) -> ChromaReader | None:
    """The reader of folder ``path`` (made on first use), or None when reads go through a
    chromadb client there (one was opened in this process) or no reader can be made."""
    with _lock:
        if path in _client_opened:
            return None
        reader = _readers.get(path)
        if reader is None:
            reader = ChromaReader.open(path)
            if reader is not None:
                _readers[path] = reader
        return reader


def client_opening(path: str) -> None:
    """A chromadb client opens on ``path``: its reader is dropped (its HNSW would not see
    the client's writes); reads there go through the client from now on."""
    with _lock:
        _client_opened.add(path)
        _readers.pop(path, None)


def forget(path: str) -> None:
    """``path``'s store is closed (it may be deleted and made again): nothing of it is kept."""
    with _lock:
        _client_opened.discard(path)
        _readers.pop(path, None)
