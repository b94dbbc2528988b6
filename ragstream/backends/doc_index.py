"""Encoding a knowledge base's chunks once, at ingestion.

Everything a query needs that depends only on the documents is computed when a document is
ingested (``encode_chunks``) and written, per document, to the knowledge base's engines
(``ragstream.backends.search``: Chroma's windows and the chunk rows beside tantivy, or Milvus):

* one vector per embedding *window* of a chunk (the dense retrieval signal);
* one vector per *evidence sentence* of a chunk (``text.evidence_units``: the ReRanker's
  best-sentence signal and A4's extraction candidates), stored with its window;
* the chunk text and metadata, from which its BM25 terms follow.

A query then costs one encoder call for its pieces plus the engines' searches; nothing of the
documents is encoded again.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ragstream.common.text import evidence_units
from ragstream.state.super_prompt import Chunk

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
