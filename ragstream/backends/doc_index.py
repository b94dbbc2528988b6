"""The knowledge base in memory: encode once, score fast.

Everything a query needs that depends only on the documents is computed when a document is
ingested and kept with its windows in the vector store (Chroma, the record of truth):

* one vector per embedding *window* of a chunk (the dense retrieval signal);
* one vector per *evidence sentence* of a chunk (``text.evidence_units``: the ReRanker's
  best-sentence signal and A4's extraction candidates), stored in the window's metadata;
* the chunk text and metadata, from which the BM25 index and each chunk's term set follow.

``DocumentIndex`` holds all of it as contiguous matrices, chunks in id order, so a query
costs one encoder call for its pieces plus a few matrix products: no per-query reads from
Chroma and no per-query encoding of document text. It is a snapshot of the store at one
*fingerprint* (``ChromaStore.fingerprint``, renewed by every write). ``IndexCache`` keeps the
current snapshot in memory and a copy on disk (``<index_dir>/docindex-<collection>/``,
written to a temporary folder and swapped in whole), and rebuilds it from the store when the
fingerprint moves on — after any ingest, re-ingest or prune, by this or another process.
"""

from __future__ import annotations

import base64
import json
import logging
import shutil
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ragstream.backends.keyword_index import KeywordIndex, index_text
from ragstream.backends.search.base import Evidence
from ragstream.super_prompt import Chunk, Filters
from ragstream.text import clean_sentence, evidence_units, fold

log = logging.getLogger(__name__)

FORMAT_VERSION = 2
#: sentences shorter than this are headings or fragments, not evidence
MIN_EVIDENCE_WORDS = 3
SCAN_BLOCK_ROWS = 4096  # window vectors scored per block (4096 × 384 float32 = 6 MiB)


# --------------------------------------------------------------------------- encoding


@dataclass(frozen=True)
class WindowRecord:
    """One embedding window of a chunk, with the evidence sentences that start inside it."""

    chunk: Chunk
    window: int
    n_windows: int
    start: int  # character span of the window inside chunk.text
    end: int
    vector: np.ndarray
    sentence_spans: tuple[tuple[int, int], ...] = ()
    sentence_vectors: np.ndarray | None = None

    @property
    def id(self) -> str:
        """The window's id: the chunk id followed by ``@w`` and the window number."""
        return f"{self.chunk.id}@w{self.window}"


def encode_chunks(chunks: Sequence[Chunk], embedder) -> list[WindowRecord]:
    """Every chunk's windows (heading path in front) and evidence sentences, embedded.

    An embedder that can pool spans of its input (``embed_with_spans``, the ONNX backends)
    embeds each window once and takes every evidence sentence's vector from the same pass:
    the mean of the sentence's own contextual token states (late chunking). Any other
    embedder, or a sentence cut off by the model's input limit, is embedded on its own.
    """
    windows: list[tuple[Chunk, int, int, int, int]] = []
    texts: list[str] = []
    window_units: list[list[tuple[int, int, str]]] = []  # per window: its evidence sentences
    spans: list[list[tuple[int, int]]] = []  # per window: the sentences' spans in its text
    for chunk in chunks:
        bounds = embedder.windows(chunk.text)
        context = chunk.heading_label
        units = evidence_units(chunk.text, MIN_EVIDENCE_WORDS)
        for w, (a, b) in enumerate(bounds):
            raw = chunk.text[a:b]
            window_text = raw.strip()
            lead = len(raw) - len(raw.lstrip())
            prefix = len(context) + 1 if context else 0
            last = w == len(bounds) - 1
            mine = [u for u in units if a <= u[0] and (u[0] < b or last)]
            windows.append((chunk, w, len(bounds), a, b))
            texts.append(f"{context}\n{window_text}" if context else window_text)
            window_units.append(mine)
            spans.append([(prefix + s - a - lead, prefix + min(e, b) - a - lead) for s, e, _ in mine])
    if not texts:
        return []
    pool = getattr(embedder, "embed_with_spans", None) if getattr(embedder, "late_chunking", False) else None
    if pool is not None:
        vectors, span_vectors = pool(texts, spans)
    else:
        encode = getattr(embedder, "embed_batch", embedder.embed)
        vectors, span_vectors = np.asarray(encode(texts), dtype=np.float32), [None] * len(texts)
    # sentences without a pooled vector (no pooling, or cut off at the input limit)
    todo = [(i, j) for i, units in enumerate(window_units) for j in range(len(units))
            if span_vectors[i] is None or not np.isfinite(span_vectors[i][j]).all()]
    if todo:
        encode = getattr(embedder, "embed_batch", embedder.embed)
        fresh = np.asarray(encode([window_units[i][j][2] for i, j in todo]), dtype=np.float32)
        for (i, j), vec in zip(todo, fresh):
            if span_vectors[i] is None:
                span_vectors[i] = np.full((len(window_units[i]), vectors.shape[1]), np.nan,
                                          dtype=np.float32)
            span_vectors[i][j] = vec
    return [
        WindowRecord(chunk=c, window=w, n_windows=n, start=a, end=b,
                     vector=np.asarray(vectors[i], dtype=np.float32),
                     sentence_spans=tuple((u[0], u[1]) for u in window_units[i]),
                     sentence_vectors=(np.asarray(span_vectors[i], dtype=np.float32)
                                       if window_units[i] else None))
        for i, (c, w, n, a, b) in enumerate(windows)
    ]


def pack_vectors(vectors: np.ndarray | None) -> str:
    """Sentence vectors as float16 bytes in base64 (a Chroma metadata value is a scalar)."""
    if vectors is None or len(vectors) == 0:
        return ""
    return base64.b64encode(np.ascontiguousarray(vectors, dtype=np.float16).tobytes()).decode()


def unpack_vectors(packed: str, dim: int) -> np.ndarray:
    """Decode ``pack_vectors`` output back into a float16 matrix with ``dim`` columns."""
    if not packed:
        return np.zeros((0, dim), dtype=np.float16)
    return np.frombuffer(base64.b64decode(packed), dtype=np.float16).reshape(-1, dim)


# --------------------------------------------------------------------------- the snapshot


@dataclass
class DocumentIndex:
    """Snapshot of the store at one fingerprint: chunks, window and sentence vectors, and the BM25 index."""

    fingerprint: str
    chunks: list[Chunk]  # sorted by id (with_memory: the knowledge base's, then the turns')
    window_vectors: np.ndarray  # float32 (W × dim), grouped by chunk in chunk order
    window_offsets: np.ndarray  # int64 (C + 1): chunk i owns rows offsets[i]:offsets[i+1]
    sentence_vectors: np.ndarray  # float16 (S × dim), grouped by chunk
    sentence_offsets: np.ndarray  # int64 (C + 1)
    sentence_spans: np.ndarray  # int32 (S × 2): character spans in the chunk text
    keyword: KeywordIndex
    _row: dict[str, int] = field(default_factory=dict, repr=False)
    _passing: dict[Filters, np.ndarray] = field(default_factory=dict, repr=False)
    _folded: list[str] | None = field(default=None, repr=False)
    _tokens: list[list[str]] | None = field(default=None, repr=False)  # BM25 terms, for with_memory

    def __post_init__(self) -> None:
        self._row = {c.id: i for i, c in enumerate(self.chunks)}

    # -- lookups ------------------------------------------------------------------------

    @property
    def ids(self) -> list[str]:
        """The chunk ids in index order, as the keyword index holds them."""
        return self.keyword.ids

    @property
    def n_chunks(self) -> int:
        """How many chunks the index holds."""
        return len(self.chunks)

    @property
    def dim(self) -> int:
        """Length of the window vectors (0 when there are none)."""
        return int(self.window_vectors.shape[1]) if self.window_vectors.ndim == 2 else 0

    def row(self, chunk_id: str) -> int | None:
        """Position of ``chunk_id`` in the index, or None when it is not indexed."""
        return self._row.get(chunk_id)

    def holds(self, chunk: Chunk) -> bool:
        """True when the index has this very chunk (same id, same text)."""
        i = self._row.get(chunk.id)
        return i is not None and self.chunks[i].text == chunk.text

    def passing(self, filters: Filters) -> np.ndarray:
        """A boolean per chunk (index order): whether it passes ``filters``. Kept per filter
        set, since the index never changes (a new fingerprint is a new index)."""
        mask = self._passing.get(filters)
        if mask is None:
            mask = np.fromiter((filters.matches(c) for c in self.chunks), dtype=bool,
                               count=len(self.chunks))
            if len(self._passing) >= 64:
                self._passing.clear()
            self._passing[filters] = mask
        return mask

    # -- scoring ------------------------------------------------------------------------

    def piece_cosines(self, vectors: np.ndarray) -> np.ndarray:
        """(chunks × pieces): each chunk's best-window cosine to each query vector.

        The scan reads every window vector once per call, so it is bound by memory, not
        arithmetic: one matrix-vector product per piece over blocks of ``SCAN_BLOCK_ROWS``
        windows that stay in the CPU cache while each piece is scored. (One matrix product
        with a few query columns streams the whole matrix ~3× slower with OpenBLAS here: 49 vs
        26 ms for 3 pieces at 184k windows.)"""
        q = np.asarray(vectors, dtype=np.float32)
        if self.n_chunks == 0:
            return np.zeros((0, len(q)), dtype=np.float32)
        wv = self.window_vectors
        sims = np.empty((len(wv), len(q)), dtype=np.float32)
        if len(q) == 1:
            sims[:, 0] = wv @ q[0]
        else:
            for start in range(0, len(wv), SCAN_BLOCK_ROWS):
                block = wv[start:start + SCAN_BLOCK_ROWS]
                for i, vec in enumerate(q):
                    sims[start:start + len(block), i] = block @ vec
        return np.maximum.reduceat(sims, self.window_offsets[:-1], axis=0)

    def evidence(self, chunk: Chunk) -> Evidence | None:
        """The stored vectors of ``chunk``, or None when the index does not hold it."""
        if not self.holds(chunk):
            return None
        i = self._row[chunk.id]
        w0, w1 = self.window_offsets[i], self.window_offsets[i + 1]
        s0, s1 = self.sentence_offsets[i], self.sentence_offsets[i + 1]
        text = chunk.text
        spans = [(int(a), int(b)) for a, b in self.sentence_spans[s0:s1]]
        return Evidence(
            window_vectors=self.window_vectors[w0:w1],
            sentence_vectors=self.sentence_vectors[s0:s1].astype(np.float32),
            sentences=[clean_sentence(text[a:b]) for a, b in spans],
            spans=spans,
        )

    def find_text(self, text: str, limit: int = 20) -> list[tuple[Chunk, str]]:
        """Chunks whose text holds ``text`` (compared folded: case, accents and spacing
        aside), in index order, each with ``"phrase"``; then, when fewer than ``limit`` were
        found, the best BM25 matches of its words, each with ``"words"``. The folded texts are
        made once per index (it never changes: a new fingerprint is a new index)."""
        wanted = fold(text)
        if not wanted:
            return []
        if self._folded is None:
            self._folded = [fold(c.text) for c in self.chunks]
        found = [i for i, t in enumerate(self._folded) if wanted in t][:limit]
        out = [(self.chunks[i], "phrase") for i in found]
        if len(out) < limit:
            scores = self.keyword.scores(text)
            seen = set(found)
            for i in np.argsort(-scores, kind="stable"):
                if len(out) >= limit or scores[i] <= 0:
                    break
                if int(i) not in seen:
                    out.append((self.chunks[int(i)], "words"))
        return out

    # -- building -----------------------------------------------------------------------

    @classmethod
    def from_records(cls, fingerprint: str, chunks: list[Chunk],
                     windows: dict[str, list[np.ndarray]],
                     sentences: dict[str, list[tuple[tuple[int, int], np.ndarray]]],
                     dim: int, keyword: KeywordIndex) -> DocumentIndex:
        """Build the index from the store's records: chunks sorted by id, vectors stacked, BM25 built."""
        chunks = sorted(chunks, key=lambda c: c.id)
        w_rows, w_off, s_rows, s_spans, s_off = [], [0], [], [], [0]
        for c in chunks:
            w_rows.extend(windows[c.id])
            w_off.append(len(w_rows))
            for span, vec in sorted(sentences.get(c.id, []), key=lambda x: x[0]):
                s_spans.append(span)
                s_rows.append(vec)
            s_off.append(len(s_rows))
        keyword.build([c.id for c in chunks], [index_text(c) for c in chunks])
        return cls(
            fingerprint=fingerprint,
            chunks=chunks,
            window_vectors=(np.vstack(w_rows).astype(np.float32) if w_rows
                            else np.zeros((0, dim), dtype=np.float32)),
            window_offsets=np.asarray(w_off, dtype=np.int64),
            sentence_vectors=(np.vstack(s_rows).astype(np.float16) if s_rows
                              else np.zeros((0, dim), dtype=np.float16)),
            sentence_offsets=np.asarray(s_off, dtype=np.int64),
            sentence_spans=(np.asarray(s_spans, dtype=np.int32).reshape(-1, 2)),
            keyword=keyword,
        )

    def with_memory(self, memory, keyword: KeywordIndex) -> DocumentIndex:
        """This index and a conversation's ``memory`` (``ragstream.conversations.Memory``) as
        one index: this index's chunks, then the memory's (a turn already held is not added
        twice), with their stored vectors, and ``keyword`` built over all of them (BM25's word
        statistics are those of the two together; this index's chunk texts are tokenised once
        and kept). Retrieval, the ReRanker and A3/A4 then score both alike; nothing is encoded."""
        held = set(self._row)
        extra = [c for c in memory.chunks if c.id not in held]
        w_rows: list[np.ndarray] = [self.window_vectors]
        w_off = list(self.window_offsets)
        s_rows: list[np.ndarray] = [self.sentence_vectors]
        s_spans: list[np.ndarray] = [self.sentence_spans]
        s_off = list(self.sentence_offsets)
        w_count, s_count = int(w_off[-1]), int(s_off[-1])
        for c in extra:
            windows = memory.windows[c.id]
            found = sorted(memory.sentences.get(c.id, []), key=lambda x: x[0])
            if windows:
                w_rows.append(np.vstack(windows).astype(np.float32))
            w_count += len(windows)
            w_off.append(w_count)
            if found:
                s_rows.append(np.vstack([v for _, v in found]).astype(np.float16))
                s_spans.append(np.asarray([span for span, _ in found], dtype=np.int32).reshape(-1, 2))
            s_count += len(found)
            s_off.append(s_count)
        if self._tokens is None:
            self._tokens = keyword.tokens([index_text(c) for c in self.chunks])
        chunks = self.chunks + extra
        keyword.build([c.id for c in chunks],
                      tokens=self._tokens + keyword.tokens([index_text(c) for c in extra]))
        def stack(parts: list[np.ndarray], dtype) -> np.ndarray:  # an empty store has no columns
            full = [p for p in parts if p.size]
            return np.vstack(full).astype(dtype, copy=False) if full else parts[0].astype(dtype)

        return DocumentIndex(
            fingerprint=f"{self.fingerprint} + {memory.fingerprint}", chunks=chunks,
            window_vectors=stack(w_rows, np.float32),
            window_offsets=np.asarray(w_off, dtype=np.int64),
            sentence_vectors=stack(s_rows, np.float16),
            sentence_offsets=np.asarray(s_off, dtype=np.int64),
            sentence_spans=stack(s_spans, np.int32).reshape(-1, 2), keyword=keyword)

    # -- disk ---------------------------------------------------------------------------

    def save(self, folder: Path) -> None:
        """Write the snapshot to ``folder`` whole: a temporary folder, then one rename."""
        folder = Path(folder)
        tmp = folder.with_name(folder.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        np.savez(tmp / "arrays.npz", window_vectors=self.window_vectors,
                 window_offsets=self.window_offsets, sentence_vectors=self.sentence_vectors,
                 sentence_offsets=self.sentence_offsets, sentence_spans=self.sentence_spans)
        (tmp / "chunks.json").write_text(
            json.dumps([c.model_dump(mode="json") for c in self.chunks], ensure_ascii=False),
            encoding="utf-8")
        self.keyword.save(tmp / "bm25")
        # the manifest goes last: a folder without it is never loaded
        (tmp / "manifest.json").write_text(json.dumps({
            "format": FORMAT_VERSION, "fingerprint": self.fingerprint,
            "chunks": self.n_chunks, "windows": int(len(self.window_vectors)),
            "sentences": int(len(self.sentence_vectors)), "dim": self.dim,
        }), encoding="utf-8")
        old = folder.with_name(folder.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        if folder.exists():
            folder.replace(old)
        tmp.replace(folder)
        shutil.rmtree(old, ignore_errors=True)

    @classmethod
    def load(cls, folder: Path, fingerprint: str, keyword: KeywordIndex) -> DocumentIndex | None:
        """The snapshot in ``folder`` if it was made at ``fingerprint``, else None."""
        folder = Path(folder)
        try:
            manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as err:
            log.warning("the index snapshot manifest %s is damaged (%s): rebuilding the index "
                        "from the store", folder / "manifest.json", err)
            return None
        if manifest.get("format") != FORMAT_VERSION or manifest.get("fingerprint") != fingerprint:
            return None
        try:
            arrays = np.load(folder / "arrays.npz")
            chunks = [Chunk.model_validate(c) for c in
                      json.loads((folder / "chunks.json").read_text(encoding="utf-8"))]
            keyword.load(folder / "bm25", [c.id for c in chunks])
            return cls(fingerprint=fingerprint, chunks=chunks,
                       window_vectors=arrays["window_vectors"],
                       window_offsets=arrays["window_offsets"],
                       sentence_vectors=arrays["sentence_vectors"],
                       sentence_offsets=arrays["sentence_offsets"],
                       sentence_spans=arrays["sentence_spans"], keyword=keyword)
        except Exception as err:  # any damage: the store still holds everything, rebuild from it
            log.warning("the index snapshot in %s cannot be loaded (%s: %s): rebuilding the index "
                        "from the store", folder, type(err).__name__, err)
            return None


class IndexCache:
    """The current ``DocumentIndex`` of one store: in memory, on disk, rebuilt when stale."""

    def __init__(self, folder: Path, stemmer: str = "english", stopwords: str = "en"):
        self.folder = Path(folder)
        self.stemmer = stemmer
        self.stopwords = stopwords
        self._index: DocumentIndex | None = None
        self._lock = threading.Lock()

    def new_keyword_index(self) -> KeywordIndex:
        """A new, empty BM25 index with this cache's stemmer and stop words."""
        return KeywordIndex(self.stemmer, self.stopwords)

    def current(self, store) -> DocumentIndex:
        """The index at the store's current fingerprint: from memory, else from disk, else built and saved."""
        fingerprint = store.fingerprint()
        with self._lock:
            if self._index is not None and self._index.fingerprint == fingerprint:
                return self._index
            index = DocumentIndex.load(self.folder, fingerprint, self.new_keyword_index())
            if index is None:
                index = self.build(store, fingerprint)
                index.save(self.folder)
            self._index = index
            return index

    def build(self, store, fingerprint: str) -> DocumentIndex:
        """Build a fresh index from the store's window and sentence records."""
        chunks, windows, sentences, dim = store.read_index_records()
        return DocumentIndex.from_records(fingerprint, chunks, windows, sentences, dim,
                                          self.new_keyword_index())
