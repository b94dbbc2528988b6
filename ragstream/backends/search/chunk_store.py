"""What the later stages read for a candidate, kept beside the keyword index: SQLite tables.

Each chunk's row holds the chunk (JSON) and its id and its window vectors (float32); a row
of its own in ``sentences`` holds its evidence sentences' vectors (float16) and spans. Both
are keyed by ``(key, written)``: the chunk id's 64-bit hash and the time its document was
written, the two columns tantivy names a hit by. A
document written again gets new rows (a new time); its old rows go once tantivy has
committed the new chunks, so a search's hits always have their rows (but for a reader whose
search ran just before a rewrite: its chunks of that document are then missing, and its next
query sees the new ones).

Why not in tantivy's own document store, as before: a stored chunk is ~10 KB with its
vectors, and tantivy rewrites the stored documents of every segment it merges. Its merge
policy is not reachable from Python, and with every chunk under 10,000 documents per segment
in its lowest layer, one write in a few merged the whole 10k-chunk index (4.5 s, growing with
the corpus). Without them, tantivy merges its postings and two columns; the vectors are
written once, here. SQLite in WAL mode: any number of processes read while one writes
(writers are already one at a time: tantivy's writer lock is taken first).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ragstream.common.errors import KeywordIndexUnreadableError

#: the file, in the keyword index's folder
FILE = "chunks.sqlite3"
#: keys per SELECT (SQLite's default limit on a statement's variables is 32,766)
PER_SELECT = 900

_SCHEMA = """
CREATE TABLE IF NOT EXISTS chunks (
    key INTEGER NOT NULL,
    written INTEGER NOT NULL,
    doc_id TEXT NOT NULL,
    doc_hash TEXT NOT NULL,
    chunk TEXT NOT NULL,
    windows BLOB NOT NULL,
    n_windows INTEGER NOT NULL,
    chunk_id TEXT NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS chunks_key ON chunks (key, written);
CREATE INDEX IF NOT EXISTS chunks_doc ON chunks (doc_id, written);
CREATE TABLE IF NOT EXISTS sentences (
    key INTEGER NOT NULL,
    written INTEGER NOT NULL,
    doc_id TEXT NOT NULL,
    sentences BLOB NOT NULL,
    spans TEXT NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS sentences_key ON sentences (key, written);
CREATE INDEX IF NOT EXISTS sentences_doc ON sentences (doc_id, written);
"""

#: a chunk as ``add`` takes it: (key, written, doc_id, doc_hash, chunk JSON, windows,
#: n_windows, sentences, spans JSON, chunk id). The id is also in the JSON: a hit is named
#: by its id without parsing the chunk (~20 µs each, ~400 hits a query at 100k chunks)
Row = tuple[int, int, str, str, str, bytes, int, bytes, str, str]
#: a chunk's row as ``rows`` reads it: (key, written, doc_id, doc_hash, chunk JSON, windows,
#: n_windows, chunk id). Its evidence sentences (vectors and spans) are a row of their own
#: (``sentences``): Retrieval reads ~400 candidates' windows a query at 100k chunks, the
#: ReRanker and A4 the sentences of ~50; apart, the rows Retrieval reads take half the
#: bytes (~5 KB instead of ~8 KB with four sentences), so more of them stay in the page cache
ChunkRow = tuple[int, int, str, str, str, bytes, int, str]


class ChunkStore:
    """The chunk rows of one keyword index (``folder/chunks.sqlite3``), opened on first use;
    one connection per process, used under a lock."""

    def __init__(self, folder: Path):
        self.path = Path(folder) / FILE
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            try:
                conn = sqlite3.connect(self.path, timeout=30.0, check_same_thread=False,
                                       isolation_level=None)
                # a row is ~8-10 KB: at SQLite's default 4 KB pages it spans an overflow chain
                # of three; 16 KB pages read 300 random rows in ~3 ms instead of ~5 (measured
                # on 20k SciFact-sized rows). Set before the first table (a new file only).
                conn.execute("PRAGMA page_size=16384")
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
                conn.executescript(_SCHEMA)
            except sqlite3.DatabaseError as err:
                raise KeywordIndexUnreadableError(self.path, f"its chunk store: {err}") from err
            self._conn = conn
        return self._conn

    def open(self) -> None:
        """Open (and make, if missing) the file."""
        with self._lock:
            self._db()

    def close(self) -> None:
        """Close the connection (the folder can then be deleted)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def add(self, rows: Iterable[Row]) -> None:
        """Write ``rows`` in one transaction (a row already there is kept as it is)."""
        with self._lock:
            db = self._db()
            db.execute("BEGIN IMMEDIATE")
            try:
                for r in rows:
                    db.execute("INSERT OR IGNORE INTO chunks VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                               (*r[:7], r[9]))
                    db.execute("INSERT OR IGNORE INTO sentences VALUES (?, ?, ?, ?, ?)",
                               (r[0], r[1], r[2], r[7], r[8]))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    def keep_only(self, written: dict[str, int | None]) -> None:
        """For each document, drop its rows of any other write than ``written[doc_id]``
        (None: every row of it; the document is gone)."""
        with self._lock:
            db = self._db()
            db.execute("BEGIN IMMEDIATE")
            try:
                for doc_id, ns in written.items():
                    for table in ("chunks", "sentences"):
                        if ns is None:
                            db.execute(f"DELETE FROM {table} WHERE doc_id = ?", (doc_id,))
                        else:
                            db.execute(f"DELETE FROM {table} WHERE doc_id = ? AND written != ?",
                                       (doc_id, ns))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    def keep_documents(self, doc_ids: Iterable[str]) -> int:
        """Drop the rows of every document not in ``doc_ids`` (left by a write cut short);
        how many went."""
        keep = set(doc_ids)
        with self._lock:
            db = self._db()
            held = [d for (d,) in db.execute("SELECT DISTINCT doc_id FROM chunks")]
        gone = [d for d in held if d not in keep]
        if gone:
            self.keep_only(dict.fromkeys(gone))
        return len(gone)

    def rows(self, wanted: Sequence[tuple[int, int]]) -> dict[tuple[int, int], ChunkRow]:
        """The chunk rows of ``wanted`` ``(key, written)`` pairs that the store holds."""
        return self._select("SELECT * FROM chunks", wanted)

    def sentences(self, wanted: Sequence[tuple[int, int]]
                  ) -> dict[tuple[int, int], tuple[bytes, str]]:
        """The evidence sentences (vectors, spans JSON) of ``wanted`` ``(key, written)``
        pairs that the store holds."""
        found = self._select("SELECT key, written, sentences, spans FROM sentences", wanted)
        return {kw: (r[2], r[3]) for kw, r in found.items()}

    def _select(self, select: str, wanted: Sequence[tuple[int, int]]) -> dict[tuple[int, int], Any]:
        want = set(wanted)
        keys = sorted({k for k, _ in want})
        out: dict[tuple[int, int], Any] = {}
        with self._lock:
            db = self._db()
            try:
                for i in range(0, len(keys), PER_SELECT):
                    part = keys[i:i + PER_SELECT]
                    for row in db.execute(
                            f"{select} WHERE key IN ({','.join('?' * len(part))})", part):
                        if (row[0], row[1]) in want:
                            out[(row[0], row[1])] = row
            except sqlite3.DatabaseError as err:
                raise KeywordIndexUnreadableError(self.path, f"its chunk store: {err}") from err
        return out


def vectors_bytes(windows: np.ndarray, sentences: np.ndarray) -> tuple[bytes, bytes]:
    """How a chunk's vectors are kept: windows as float32, sentences as float16."""
    return (np.ascontiguousarray(windows, dtype=np.float32).tobytes(),
            np.ascontiguousarray(sentences, dtype=np.float16).tobytes())
