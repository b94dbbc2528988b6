"""The keyword engine and chunk store of one knowledge base: a tantivy index on disk.

Tantivy (a Lucene-like search library, Rust) keeps, per chunk:

* its terms, for BM25 search in the engine: the chunk's title, heading path and text,
  stemmed and stop-word-free by the app's own tokenizer (``KeywordIndex.tokens``: Snowball
  via PyStemmer), so a query's terms are the terms the index holds;
* its words folded (case and accents aside), with positions, for phrase search;
* the fields the search filters read (document type, source path and name, update day);
* two columns a hit is named by: ``key`` (its id's 64-bit hash) and ``written`` (when its
  document was written).

What the later stages read for a candidate (the chunk, its window vectors, its evidence
sentences) is kept beside the index, by ``(key, written)``, in a ``ChunkStore`` (SQLite:
``chunk_store.py`` says why not in tantivy). A search reads its hits' two columns and the
rows only of those it has not read before (``CHUNKS_KEPT``, kept by ``(key, written)``: a
document written again has a new time, so nothing kept is stale).

A document is written whole and alone: its chunks are deleted by document id and added again
in one commit, so a change costs that document, and a reader opened before sees the
document as it was or as it is, never half. Every process reloads the index when another
one committed (``reload``: the new segments only, no rebuild), so all processes on one
folder see one state at their next query. Tantivy allows one writer at a time per folder:
a writer that finds the lock taken waits for it (``WRITE_WAIT_S``), then says so.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import hashlib
import json
import logging
import re
import shutil
import threading
import time
from collections import OrderedDict
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ragstream.backends.keyword_index import KeywordIndex, bm25_idf, index_text
from ragstream.backends.search.chunk_store import ChunkRow, ChunkStore, Row, vectors_bytes
from ragstream.common.errors import KeywordIndexUnreadableError, VectorStoreError
from ragstream.common.text import fold
from ragstream.state.super_prompt import Chunk, Filters

#: how long a writer waits for another process's write to finish
WRITE_WAIT_S = 30.0
#: the writer's memory budget (tantivy's minimum per thread is 15 MB)
WRITER_HEAP = 50_000_000
#: bump when the schema changes: an index of another version is set aside, and rebuilt from
#: the store by the next ingest or the next process that opens it (``LocalEngine.version``)
SCHEMA_VERSION = 9
#: stored chunks kept by an engine, across versions (each ~ 12 KB: ≤ ~25 MB)
CHUNKS_KEPT = 2048
_EPOCH = dt.date(1970, 1, 1)
_WORD = re.compile(r"\w+")

log = logging.getLogger(__name__)


def chunk_key(chunk_id: str) -> int:
    """A chunk id's ``key`` column: a signed 64-bit hash of it (the same in every process)."""
    return int.from_bytes(hashlib.blake2b(chunk_id.encode("utf-8"), digest_size=8).digest(),
                          "big", signed=True)


@dataclass(frozen=True)
class StoredChunk:
    """One chunk as the engine keeps it: the chunk, its document, its vectors and sentences."""

    chunk: Chunk
    doc_id: str
    doc_hash: str
    window_vectors: np.ndarray  # float32 (windows × dim)
    sentence_vectors: np.ndarray  # float32 (sentences × dim)
    spans: list[tuple[int, int]]  # each evidence sentence's character span in the chunk text
    written_ns: int  # when its document was written (ns since the epoch)
    ingested_at: str = ""  # when its document was ingested (ISO 8601), as the store says
    root: str = ""  # the folder (or API) its document came from

    @property
    def chunk_id(self) -> str:
        """The chunk's id (a ``RowChunk`` has it without parsing the chunk)."""
        return self.chunk.id


def glob_parts(pattern: str) -> list[tuple[str, str]]:
    """A shell pattern read as ``fnmatch.fnmatchcase`` reads it: ``("any", "*")``,
    ``("one", "?")``, ``("class", body)`` for ``[body]`` (``!`` first: negated), and
    ``("char", c)`` for everything else; each engine writes these in its own pattern language."""
    out, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "*":
            out.append(("any", ch))
        elif ch == "?":
            out.append(("one", ch))
        elif ch == "[" and (end := pattern.find("]", i + 2 if pattern[i + 1:i + 2] in "!]" else i + 1)) > 0:
            out.append(("class", pattern[i + 1:end]))
            i = end
        else:
            out.append(("char", ch))
        i += 1
    return out


def glob_regex(pattern: str) -> str:
    """A shell pattern (``*``, ``?``, ``[...]``, as ``fnmatch.fnmatchcase``) as a regular
    expression tantivy matches against a whole term."""
    out = []
    for kind, text in glob_parts(pattern):
        if kind == "class":
            body = "^" + text[1:] if text.startswith("!") else text
            out.append("[" + body.replace("\\", "\\\\") + "]")
        else:
            out.append({"any": ".*", "one": "."}.get(kind) or (text if text.isalnum() else re.escape(text)))
    return "".join(out)


#: the characters a regular expression of tantivy's (Rust's ``regex``) gives a meaning to
_REGEX_META = frozenset("\\.+*?()|[]{}^$#&-~")


def prefix_regex(prefix: str) -> str:
    """The regular expression tantivy matches a whole term against for "starts with
    ``prefix``": its characters literally, then anything."""
    return "".join("\\" + c if c in _REGEX_META else c for c in prefix) + "(?s:.*)"


def day_number(date: str) -> int | None:
    """Days since 1970-01-01 of an ISO date (its first ten characters), or None."""
    try:
        return (dt.date.fromisoformat(date[:10]) - _EPOCH).days
    except (TypeError, ValueError):
        return None


class KeywordEngine:
    """BM25 search, phrase search, filters and the chunk store of one knowledge base, in a
    tantivy index in ``folder``."""

    def __init__(self, folder: Path, stemmer: str = "english", stopwords: str = "en"):
        self.folder = Path(folder)
        self.tokenizer = KeywordIndex(stemmer, stopwords)
        self._index: Any = None  # tantivy.Index, opened on first use (tantivy loads lazily)
        self._schema: Any = None
        self._lock = threading.Lock()
        self.chunks = ChunkStore(self.folder)
        self._kept: OrderedDict[tuple[int, int], StoredChunk] = OrderedDict()  # (key, written)
        self._kept_lock = threading.Lock()

    # -- opening ------------------------------------------------------------------------

    def _build_schema(self):
        import tantivy

        sb = tantivy.SchemaBuilder()
        sb.add_text_field("id", stored=True, tokenizer_name="raw")
        sb.add_integer_field("key", fast=True)  # chunk_key(id): a hit named without a read
        sb.add_text_field("doc_id", tokenizer_name="raw")
        # "doc_id NUL doc_hash NUL ingested_at NUL root", a column: the documents are listed
        # (with their chunk counts) without reading a chunk
        sb.add_text_field("version", fast=True, tokenizer_name="raw")
        sb.add_text_field("terms", tokenizer_name="whitespace", index_option="freq")
        sb.add_text_field("words", tokenizer_name="whitespace", index_option="position")
        sb.add_text_field("doc_type", tokenizer_name="raw")
        sb.add_text_field("source", tokenizer_name="raw")
        sb.add_text_field("source_name", tokenizer_name="raw")
        sb.add_integer_field("day", indexed=True, fast=True)
        sb.add_integer_field("written", indexed=True, fast=True)
        sb.add_integer_field("n_terms", fast=True)  # BM25's document length
        return sb.build()

    @property
    def index(self):
        """The tantivy index, opened (or made) on first use."""
        if self._index is None:
            with self._lock:
                if self._index is None:
                    import tantivy

                    self._schema = self._build_schema()
                    self.folder.mkdir(parents=True, exist_ok=True)
                    with open(self.folder.parent / f".{self.folder.name}.lock", "a") as lock:
                        fcntl.flock(lock, fcntl.LOCK_EX)  # one process makes or sets it aside
                        try:
                            self._set_aside_other_version()
                            try:
                                index = tantivy.Index(self._schema, path=str(self.folder), reuse=True)
                            except ValueError as err:
                                raise KeywordIndexUnreadableError(self.folder, str(err)) from err
                            self.chunks.open()
                            marker = self.folder / "ragstream-schema"
                            if not marker.exists() or marker.read_text().strip() != str(SCHEMA_VERSION):
                                marker.write_text(str(SCHEMA_VERSION))
                            self._index = index
                        finally:
                            fcntl.flock(lock, fcntl.LOCK_UN)
        return self._index

    def of_this_version(self) -> bool:
        """True when the folder holds an index of this version's schema (or none yet, to be
        made): one of another version is set aside when opened, so it holds nothing."""
        if not (self.folder / "meta.json").exists():  # tantivy's index file: none yet
            return True
        marker = self.folder / "ragstream-schema"
        try:
            return (marker.read_text().strip() == str(SCHEMA_VERSION)
                    and self.chunks.path.exists())
        except OSError:
            return False

    def _set_aside_other_version(self) -> None:
        """An index made by another version of RAGstream (another schema), or without its
        chunk store, is derived data: it is removed, with its ``in-step`` marker, so the
        store's next reader or ingest rebuilds it from the store (``LocalEngine.repair``).
        Called holding the lock beside the folder: a second process opening it meanwhile
        finds the new index, not half of the old."""
        import tantivy

        if not tantivy.Index.exists(str(self.folder)) or self.of_this_version():
            return
        log.warning("the keyword index %s was made by another version of RAGstream (or its "
                    "chunk store is missing): it is rebuilt from the store", self.folder)
        aside = self.folder.with_name(f"{self.folder.name}.old-{time.time_ns()}")
        self.folder.rename(aside)
        shutil.rmtree(aside, ignore_errors=True)
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / "ragstream-schema").write_text(str(SCHEMA_VERSION))

    def close(self) -> None:
        """Forget the open index (its folder can then be deleted)."""
        with self._lock:
            self._index = None
        self.chunks.close()
        with self._kept_lock:
            self._kept.clear()

    def _searcher(self):
        """A searcher over the latest commit of any process (``reload`` opens new segments only)."""
        index = self.index
        index.reload()
        return index.searcher()

    # -- writing ------------------------------------------------------------------------

    def _writer(self):
        """The index's writer, once another process's write has finished (tantivy's lock)."""
        _steady_malloc()
        deadline = time.monotonic() + WRITE_WAIT_S
        while True:
            try:
                return self.index.writer(heap_size=WRITER_HEAP, num_threads=1)
            except ValueError as err:
                if "lock" not in str(err).lower() or time.monotonic() > deadline:
                    raise VectorStoreError(
                        f"The keyword index in {self.folder} cannot be written: {err}. Another "
                        "process may be ingesting; try again when it has finished.") from err
                time.sleep(0.05)

    def replace_documents(self, documents: Iterable[tuple[str, Sequence[StoredChunk]]]) -> None:
        """Write each ``(doc_id, chunks)``: its old chunks out, these in, all in one commit
        (an empty ``chunks`` removes the document). The new chunks' rows go in first, the old
        ones' out once the index has committed (each chunk of a document has its write time)."""
        import tantivy

        documents = [(doc_id, list(chunks)) for doc_id, chunks in documents]
        every = [s for _, chunks in documents for s in chunks]
        terms = iter(self.tokenizer.tokens([index_text(s.chunk) for s in every]))  # one call
        writer = self._writer()  # one writer at a time, of any process: the rows' too
        try:
            self.chunks.add(_row(s) for s in every)
            for doc_id, chunks in documents:
                writer.delete_documents_by_term("doc_id", doc_id)
                for stored in chunks:
                    writer.add_document(tantivy.Document(**self._fields(stored, next(terms))))
            writer.commit()
        except Exception:
            writer.rollback()
            raise
        try:
            self.chunks.keep_only({doc_id: chunks[0].written_ns if chunks else None
                                   for doc_id, chunks in documents})
        finally:
            writer.wait_merging_threads()

    def sweep(self) -> int:
        """Drop the chunk rows of documents the index does not hold (a write cut short after
        the rows went in); how many documents' rows went."""
        return self.chunks.keep_documents(self.documents())

    def delete_document(self, doc_id: str) -> None:
        """Remove every chunk of ``doc_id``."""
        self.replace_documents([(doc_id, ())])

    def _fields(self, s: StoredChunk, terms: list[str]) -> dict:
        c = s.chunk
        fields = {
            "id": c.id, "key": chunk_key(c.id), "doc_id": s.doc_id,
            "version": f"{s.doc_id}\0{s.doc_hash}\0{s.ingested_at}\0{s.root}",
            "terms": " ".join(terms), "n_terms": len(terms),
            "words": " ".join(phrase_words(index_text(c))),
            "doc_type": c.doc_type, "source": c.source, "source_name": c.source_name,
            "written": s.written_ns,
        }
        day = day_number(c.last_update_date)
        if day is not None:
            fields["day"] = day
        return fields

    # -- queries ------------------------------------------------------------------------

    def _filter_query(self, filters: Filters | None):
        """The query ``filters`` make (None when they are empty), scoring nothing."""
        import tantivy

        if filters is None or filters.empty:
            return None
        Q, schema = tantivy.Query, self._schema
        must = []
        if filters.doc_type:
            must.append(Q.term_set_query(schema, "doc_type", list(filters.doc_type)))
        if filters.source:
            must.append(Q.boolean_query(
                [(tantivy.Occur.Should, Q.regex_query(schema, "source", glob_regex(s)))
                 for s in filters.source]
                + [(tantivy.Occur.Should, Q.term_set_query(schema, "source_name", list(filters.source)))]))
        if filters.updated_from or filters.updated_to:
            lo = (filters.updated_from - _EPOCH).days if filters.updated_from else None
            hi = (filters.updated_to - _EPOCH).days if filters.updated_to else None
            must.append(Q.range_query(schema, "day", tantivy.FieldType.Integer, lo, hi))
        return Q.const_score_query(Q.boolean_query([(tantivy.Occur.Must, q) for q in must]), 0.0)

    def _terms_query(self, terms: Sequence[str]):
        import tantivy

        Q = tantivy.Query
        return Q.boolean_query([(tantivy.Occur.Should, Q.term_query(self._schema, "terms", t))
                                for t in terms])

    def _scored(self, query, filters: Filters | None, only: Sequence[str] | None):
        import tantivy

        Q = tantivy.Query
        must = [(tantivy.Occur.Must, query)]
        if (f := self._filter_query(filters)) is not None:
            must.append((tantivy.Occur.Must, f))
        if only is not None:
            must.append((tantivy.Occur.Must, Q.const_score_query(
                Q.term_set_query(self._schema, "id", list(only)), 0.0)))
        return Q.boolean_query(must) if len(must) > 1 else query

    def _read(self, searcher, addrs, known: dict[int, str] | None = None,
              whole: bool = False) -> list[StoredChunk | str | None]:
        """What ``addrs`` hold, from their ``key`` and ``written`` columns: a chunk read before
        (kept), a name in ``known`` (key → id, when the caller knows the ids), or else its
        row, read and kept; None for one whose row is gone (its document was written again
        since this search). ``whole``: always the stored chunk."""
        addrs = list(addrs)
        if not addrs:
            return []
        keys = searcher.fast_field_values("key", addrs)
        written = searcher.fast_field_values("written", addrs)
        out: list[StoredChunk | str | None] = []
        todo: dict[tuple[int, int], list[int]] = {}
        with self._kept_lock:
            for i, (key, w) in enumerate(zip(keys, written)):
                if not whole and known is not None and key in known:
                    out.append(known[key])
                    continue
                s = self._kept.get((key, w))
                if s is not None:
                    self._kept.move_to_end((key, w))
                else:
                    todo.setdefault((key, w), []).append(i)
                out.append(s)
        if todo:
            rows = self.chunks.rows(list(todo))
            with self._kept_lock:
                for kw, at in todo.items():
                    row = rows.get(kw)
                    if row is None:
                        continue
                    s = self._kept[kw] = self._stored(row)
                    for i in at:
                        out[i] = s
                while len(self._kept) > CHUNKS_KEPT:
                    self._kept.popitem(last=False)
        return out

    def _ids(self, searcher, hits, known: dict[int, str] | None = None) -> list[tuple[str, float]]:
        """``(chunk id, score)`` of each hit (but one whose row is gone)."""
        named = self._read(searcher, [addr for _, addr in hits], known)
        return [(n if isinstance(n, str) else n.chunk_id, float(score))
                for n, (score, _) in zip(named, hits) if n is not None]

    def _chunks(self, searcher, hits) -> list[StoredChunk]:
        """The stored chunks of ``hits`` (but those whose row is gone)."""
        return [s for s in self._read(searcher, [addr for _, addr in hits], whole=True)
                if isinstance(s, StoredChunk)]

    def search(self, terms: Sequence[str], k: int, filters: Filters | None = None,
               only: Sequence[str] | None = None) -> list[tuple[str, float]]:
        """The ``k`` chunks with the best BM25 score for ``terms`` (stemmed, as
        ``query_terms`` gives them), best first, among those passing ``filters`` (and, if
        given, among ``only``): ``(chunk id, score)``. Nothing for no terms."""
        return self.search_many([terms], k, filters, only)[0]

    def search_many(self, queries: Sequence[Sequence[str]], k: int, filters: Filters | None = None,
                    only: Sequence[str] | None = None) -> list[list[tuple[str, float]]]:
        """``search`` for each of several term lists, on one searcher."""
        searcher = self._searcher()
        known = None if only is None else {chunk_key(c): c for c in only}
        out: list[list[tuple[str, float]]] = []
        for terms in queries:
            terms = [t for t in terms if t]
            if not terms or k <= 0 or (only is not None and not only):
                out.append([])
                continue
            hits = searcher.search(self._scored(self._terms_query(terms), filters, only), k,
                                   count=False).hits
            out.append(self._ids(searcher, hits, known))
        return out

    def scores(self, terms: Sequence[str], chunk_ids: Sequence[str]) -> dict[str, float]:
        """The BM25 score for ``terms`` of each of ``chunk_ids`` that holds one of them."""
        return dict(self.search(terms, len(chunk_ids), only=chunk_ids))

    def query_terms(self, query: str) -> list[str]:
        """The stemmed, stop-word-free terms of ``query``, as the index holds them."""
        return self.tokenizer.query_terms(query)

    def count(self, filters: Filters | None = None) -> int:
        """How many chunks the index holds (passing ``filters``, if given)."""

        searcher = self._searcher()
        f = self._filter_query(filters)
        if f is None:
            return int(searcher.num_docs)
        return int(searcher.search(f, 1, count=True).count)

    def doc_freq(self, term: str) -> int:
        """How many chunks hold ``term`` (a stemmed term)."""
        return int(self._searcher().doc_freq("terms", term))

    def idf(self, term: str) -> float:
        """BM25's IDF of ``term`` (``bm25_idf``: highest for a term no chunk holds; 0 when
        nothing is indexed)."""
        searcher = self._searcher()
        n = int(searcher.num_docs)
        return bm25_idf(n, int(searcher.doc_freq("terms", term))) if n else 0.0

    def stats(self) -> tuple[int, float]:
        """BM25's corpus statistics: how many chunks, and their mean length in terms."""
        searcher = self._searcher()
        n = int(searcher.num_docs)
        if not n:
            return 0, 0.0
        found = searcher.aggregate(tantivy_all(), {"len": {"avg": {"field": "n_terms"}}})
        return n, float(found["len"]["value"] or 0.0)

    def doc_freqs(self, terms: Sequence[str]) -> dict[str, int]:
        """How many chunks hold each of ``terms``, from one searcher."""
        searcher = self._searcher()
        return {t: int(searcher.doc_freq("terms", t)) for t in dict.fromkeys(terms)}

    def values(self, field: str) -> list[str]:
        """The distinct values of a filter field (``doc_type``, ``source_name``) the index
        holds, from its term dictionary: no chunk is read."""
        return sorted(t for t, _ in self._searcher().terms_with_prefix(field, "") if t)

    def document_chunks(self, doc_id: str, limit: int = 10_000) -> list[str]:
        """The ids of ``doc_id``'s chunks."""
        import tantivy

        searcher = self._searcher()
        q = tantivy.Query.term_query(self._schema, "doc_id", doc_id)
        return sorted(searcher.doc(addr)["id"][0]  # a light document: its id alone is stored
                      for _, addr in searcher.search(q, limit, count=False).hits)

    def every_chunk(self, page: int = 1000) -> Iterable[StoredChunk]:
        """Every stored chunk, a page at a time: this reads the whole index (evaluation and
        tools; never on a query's path)."""
        searcher = self._searcher()
        n = int(searcher.num_docs)
        for offset in range(0, n, page):
            yield from self._chunks(
                searcher, searcher.search(tantivy_all(), page, count=False, offset=offset).hits)

    def phrase(self, text: str, limit: int) -> list[str]:
        """The chunks whose title, headings or text hold ``text``'s words in a row (folded:
        case and accents aside), at most ``limit``, best BM25 first."""
        import tantivy

        words = phrase_words(text)
        if not words or limit <= 0:
            return []
        searcher = self._searcher()  # opens the index (and its schema) on first use
        Q = tantivy.Query
        query = (Q.term_query(self._schema, "words", words[0]) if len(words) == 1
                 else Q.phrase_query(self._schema, "words", list[Any](words)))
        return [cid for cid, _ in self._ids(searcher, searcher.search(query, limit, count=False).hits)]

    def fetch(self, chunk_ids: Sequence[str]) -> dict[str, StoredChunk]:
        """The stored chunks of ``chunk_ids`` that the index holds."""
        import tantivy

        ids = list(dict.fromkeys(chunk_ids))
        if not ids:
            return {}
        searcher = self._searcher()
        hits = searcher.search(tantivy.Query.term_set_query(self._schema, "id", ids), len(ids),
                               count=False).hits
        return {s.chunk_id: s for s in self._chunks(searcher, hits)}

    def written_since(self, written_ns: int, limit: int = 100_000,
                      besides: Iterable[int] = ()) -> list[StoredChunk]:
        """The chunks of the documents written after ``written_ns`` (at most ``limit``), but
        for those written at the times ``besides``."""
        import tantivy

        searcher = self._searcher()
        Q = tantivy.Query
        q = Q.range_query(self._schema, "written", tantivy.FieldType.Integer,
                          written_ns, None, include_lower=False)
        if besides:
            q = Q.boolean_query([(tantivy.Occur.Must, q)] + [
                (tantivy.Occur.MustNot, Q.term_query(self._schema, "written", int(ns)))
                for ns in besides])
        return self._chunks(searcher, searcher.search(q, limit, count=False).hits)

    def documents(self, prefix: str = "", ids: Collection[str] | None = None) -> dict[str, str]:
        """The documents the index holds (those of ``document_info``'s scope): id → hash."""
        return {d: info[0] for d, info in self.document_info(prefix, ids).items()}

    def document_info(self, prefix: str = "", ids: Collection[str] | None = None
                      ) -> dict[str, tuple[str, int, str, str]]:
        """The documents the index holds: id → (hash, chunks, ingested_at, root), from the
        ``version`` column (a terms aggregation: no chunk is read). Only those whose id starts
        with ``prefix`` and, given ``ids``, is one of them: an ingest of one folder lists that
        folder's documents, not the knowledge base's (0.81 s at 100,000 documents)."""
        import tantivy

        searcher = self._searcher()
        n = int(searcher.num_docs)
        if not n or (ids is not None and not ids):
            return {}
        Q = tantivy.Query
        scope = [Q.regex_query(self._schema, "doc_id", prefix_regex(prefix))] if prefix else []
        if ids is not None:
            scope.append(Q.term_set_query(self._schema, "doc_id", sorted(set(ids))))
        out: dict[str, tuple[str, int, str, str]] = {}
        self._versions(searcher, scope, n, None, out)
        return dict(sorted(out.items()))

    def _versions(self, searcher, scope: list, n: int, span: tuple[int, int] | None,
                  out: dict[str, tuple[str, int, str, str]]) -> None:
        """The ``version`` terms of the chunks that match every query of ``scope`` (all
        chunks for none) and were written within ``span`` (any time for None) into ``out``.
        tantivy refuses an aggregation of more than 65,000 buckets (seen at 100,000
        documents: every ingest failed); then the chunks are split by their write time, which
        a document's chunks share, into halves aggregated one at a time."""
        import tantivy

        Q = tantivy.Query
        parts = list(scope)
        if span is not None:
            parts.append(Q.range_query(self._schema, "written", tantivy.FieldType.Integer,
                                       span[0], span[1], include_lower=True, include_upper=True))
        query = (Q.all_query() if not parts else parts[0] if len(parts) == 1
                 else Q.boolean_query([(tantivy.Occur.Must, q) for q in parts]))
        try:
            found = searcher.aggregate(query, {"docs": {"terms": {"field": "version", "size": n}}})
        except ValueError as err:
            if "bucket limit" not in str(err):
                raise
            if span is None:
                stats = searcher.aggregate(query, {"w": {"stats": {"field": "written"}}})["w"]
                # the statistics are floats: widened past their rounding (~256 ns here)
                span = (int(stats["min"]) - 4096, int(stats["max"]) + 4096)
            lo, hi = span
            if lo >= hi:  # one write of more documents than tantivy aggregates at once
                raise
            mid = lo + (hi - lo) // 2
            for half in ((lo, mid), (mid + 1, hi)):
                self._versions(searcher, scope, n, half, out)
            return
        for b in found["docs"]["buckets"]:
            doc_id, doc_hash, ingested_at, root = (b["key"].split("\0") + ["", "", ""])[:4]
            out[doc_id] = (doc_hash, int(b["doc_count"]), ingested_at, root)

    def _stored(self, row: ChunkRow) -> StoredChunk:
        return RowChunk(row, self.chunks)


class _parsed:
    """``functools.cached_property`` without its lock (Python 3.11 takes an ``RLock`` at every
    first read: ~6 µs, and a query at 100k chunks reads ~750 fields of ~300 rows first): the
    value is computed once and put in the instance's ``__dict__``, where later reads find it
    before this descriptor. Two threads reading one field of a kept row at once both parse
    it, into equal values: harmless."""

    def __init__(self, fn: Any):
        self.fn, self.name = fn, fn.__name__
        self.__doc__ = fn.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        value = obj.__dict__[self.name] = self.fn(obj)
        return value


if TYPE_CHECKING:  # the checker reads the fields as the cached properties they behave as
    _parsed = cached_property  # type: ignore[misc,assignment]


class RowChunk(StoredChunk):
    """A ``StoredChunk`` read from its row, each field parsed when first read: Retrieval
    reads every candidate's window vectors but the chunk of its top N1 only, and the
    ReRanker and A4 the sentences of theirs (at 100k chunks, ~300 candidates a query), which
    are read from the store then (their own row: ``chunk_store.ChunkRow``)."""

    _row: ChunkRow
    _store: ChunkStore
    ingested_at = ""
    root = ""

    def __init__(self, row: ChunkRow, store: ChunkStore):
        object.__setattr__(self, "_row", row)  # the dataclass's fields are parsed, not set
        object.__setattr__(self, "_store", store)

    @_parsed
    def chunk(self) -> Chunk:
        """The chunk."""
        return Chunk.model_validate_json(self._row[4])

    @_parsed
    def chunk_id(self) -> str:
        """The chunk's id, from its column."""
        return self._row[7]

    @_parsed
    def doc_id(self) -> str:
        """Its document."""
        return self._row[2]

    @_parsed
    def doc_hash(self) -> str:
        """Its document's hash."""
        return self._row[3]

    @_parsed
    def written_ns(self) -> int:
        """When its document was written."""
        return int(self._row[1])

    @_parsed
    def window_vectors(self) -> np.ndarray:
        """Its windows' vectors (windows × dim)."""
        n = self._row[6]
        windows = np.frombuffer(self._row[5], dtype=np.float32)
        return windows.reshape(n, len(windows) // n if n else 0)

    @_parsed
    def _evidence(self) -> tuple[list[tuple[int, int]], np.ndarray]:
        """Its evidence sentences' spans and vectors, read from their row (none if the row
        is gone: its document was written again since this chunk was read)."""
        dim = self.window_vectors.shape[1]
        found = self._store.sentences([(self._row[0], self._row[1])]).get((self._row[0], self._row[1]))
        if found is None:
            return [], np.zeros((0, dim), dtype=np.float32)
        spans = [(int(a), int(b)) for a, b in json.loads(found[1])]
        return spans, (np.frombuffer(found[0], dtype=np.float16).astype(np.float32)
                       .reshape(len(spans), dim))

    @_parsed
    def spans(self) -> list[tuple[int, int]]:
        """Its evidence sentences' character spans."""
        return self._evidence[0]

    @_parsed
    def sentence_vectors(self) -> np.ndarray:
        """Its evidence sentences' vectors (sentences × dim)."""
        return self._evidence[1]


def _row(s: StoredChunk) -> Row:
    """A stored chunk's row in the ``ChunkStore``."""
    windows, sentences = vectors_bytes(s.window_vectors, s.sentence_vectors)
    return (chunk_key(s.chunk.id), s.written_ns, s.doc_id, s.doc_hash,
            json.dumps(s.chunk.model_dump(mode="json"), ensure_ascii=False),
            windows, len(s.window_vectors), sentences, json.dumps([list(x) for x in s.spans]),
            s.chunk.id)


_MALLOC_SET = False


def _steady_malloc() -> None:
    """Keep a writing process's memory from growing write after write: glibc raises the size
    from which it maps a large allocation on its own each time one is freed, and from then on
    serves such blocks from heaps it keeps; tantivy's writer (a new one per write, with its
    own threads and buffers) left ~4 MB more anonymous memory per write (230 → 286 MB over 12
    one-document writes at 10k chunks). Fixed at glibc's initial 128 KiB, it stays flat (230
    → 244 MB, the first write's). Once per process, on the first write; glibc only."""
    global _MALLOC_SET
    if _MALLOC_SET:
        return
    _MALLOC_SET = True
    import ctypes
    import ctypes.util
    import sys

    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt(-3, 128 * 1024)  # M_MMAP_THRESHOLD (a fixed one turns the raising off)
    except (OSError, AttributeError):
        pass  # another C library: nothing to set


def phrase_words(text: str) -> list[str]:
    """The words phrase search compares: folded (case and accents aside), punctuation out
    ("cellar." is "cellar")."""
    return _WORD.findall(fold(text))


def tantivy_all():
    """The query every chunk matches."""
    import tantivy

    return tantivy.Query.all_query()


def stored_chunks(records: Sequence, doc_id: str, doc_hash: str, written_ns: int,
                  ingested_at: str = "", root: str = "") -> list[StoredChunk]:
    """A document's chunks as the engine stores them, from its encoded windows
    (``doc_index.encode_chunks``: each chunk's windows, with the evidence sentences that
    start in each)."""
    by_chunk: dict[str, list] = {}
    for rec in records:
        by_chunk.setdefault(rec.chunk.id, []).append(rec)
    out = []
    for recs in by_chunk.values():
        recs.sort(key=lambda r: r.window)
        sentences = sorted(((span, vec) for r in recs if r.sentence_vectors is not None
                            for span, vec in zip(r.sentence_spans, r.sentence_vectors)),
                           key=lambda x: x[0])
        dim = len(recs[0].vector)
        out.append(StoredChunk(
            chunk=recs[0].chunk, doc_id=doc_id, doc_hash=doc_hash,
            window_vectors=np.vstack([r.vector for r in recs]).astype(np.float32),
            sentence_vectors=(np.vstack([v for _, v in sentences]).astype(np.float32)
                              if sentences else np.zeros((0, dim), np.float32)),
            spans=[(int(a), int(b)) for (a, b), _ in sentences], written_ns=written_ns,
            ingested_at=ingested_at, root=root))
    return out
