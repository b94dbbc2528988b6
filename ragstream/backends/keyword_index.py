"""BM25 keyword search with bm25s (Snowball stemming via PyStemmer), persisted on disk.

The index is derived from the vector store: it is rebuilt from the store's chunks whenever
the store's fingerprint changes, and saved under ``<index_dir>/bm25/`` with the chunk id
order and the fingerprint it was built from. A chunk is indexed with its title and heading
path, so words in headings count.
"""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path
from typing import Sequence

import numpy as np

from ragstream.super_prompt import Chunk


def index_text(chunk: Chunk) -> str:
    return " ".join([chunk.title, *chunk.heading_path, chunk.text])


class KeywordIndex:
    def __init__(self, folder: Path, stemmer: str = "english", stopwords: str = "en"):
        self.folder = Path(folder)
        self.stemmer_name = stemmer
        self.stopwords = stopwords
        self._retriever = None
        self._ids: list[str] = []
        self._fingerprint = ""
        self._lock = threading.Lock()

    @property
    def stemmer(self):
        import Stemmer

        return Stemmer.Stemmer(self.stemmer_name)

    def _tokenize(self, texts: Sequence[str]) -> list[list[str]]:
        import bm25s

        return bm25s.tokenize(list(texts), stopwords=self.stopwords, stemmer=self.stemmer,
                              return_ids=False, show_progress=False)

    @property
    def ids(self) -> list[str]:
        return self._ids

    @property
    def fingerprint(self) -> str:
        return self._fingerprint

    def ensure(self, chunks_loader, fingerprint: str) -> None:
        """Make the index match ``fingerprint``: load it from disk, or rebuild and save it."""
        with self._lock:
            if self._retriever is not None and self._fingerprint == fingerprint:
                return
            if self._load(fingerprint):
                return
            self._build(chunks_loader(), fingerprint)

    def _load(self, fingerprint: str) -> bool:
        meta_file = self.folder / "ragstream_meta.json"
        if not meta_file.is_file():
            return False
        meta = json.loads(meta_file.read_text(encoding="utf-8"))
        if meta.get("fingerprint") != fingerprint:
            return False
        self._ids = meta["ids"]
        self._fingerprint = fingerprint
        if not self._ids:
            self._retriever = "empty"
            return True
        import bm25s

        self._retriever = bm25s.BM25.load(str(self.folder), show_progress=False)
        return True

    def _build(self, chunks: list[Chunk], fingerprint: str) -> None:
        import bm25s

        chunks = sorted(chunks, key=lambda c: c.id)
        ids = [c.id for c in chunks]
        tmp = self.folder.with_name(self.folder.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        retriever: object = "empty"
        if chunks:
            retriever = bm25s.BM25()
            retriever.index(self._tokenize([index_text(c) for c in chunks]), show_progress=False)
            retriever.save(str(tmp), show_progress=False)
        (tmp / "ragstream_meta.json").write_text(
            json.dumps({"fingerprint": fingerprint, "ids": ids}), encoding="utf-8")
        shutil.rmtree(self.folder, ignore_errors=True)
        tmp.replace(self.folder)
        self._retriever, self._ids, self._fingerprint = retriever, ids, fingerprint

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every indexed chunk (aligned with ``ids``) for ``query``."""
        n = len(self._ids)
        tokens = self._tokenize([query])[0]
        if not tokens or self._retriever in (None, "empty"):
            return np.zeros(n, dtype=np.float32)
        return np.asarray(self._retriever.get_scores(tokens), dtype=np.float32)

    def query_terms(self, query: str) -> list[str]:
        """The stemmed, stop-word-free terms of ``query`` (as the index sees them)."""
        return self._tokenize([query])[0]

    def terms(self, text: str) -> set[str]:
        return set(self._tokenize([text])[0])
