"""The cross-encoder reranker: a sentence-transformers ``CrossEncoder`` read offline.

It reads the query and each passage together, so it is slower than the first stage but sees
how they relate. The model loads from a local folder, or the local Hugging Face cache when
given a hub id, on the CPU; nothing is downloaded.

Scores are ``sigmoid(logit)``: in [0, 1], in the model's own order, and applied exactly once.
``CrossEncoder.predict`` already applies the model's activation (a sigmoid by default for a
one-logit model, or whatever the model folder names, e.g. ``Identity``), so the class asks it
for the raw logits and squashes them itself: a sigmoid on top of ``predict``'s default output
would map every score into (0.5, 0.73) and flatten the differences between passages.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ragstream.backends import prepare_offline_env


def sigmoid(x: float) -> float:
    """The logistic function, without overflow for large negative logits."""
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    z = math.exp(x)
    return z / (1.0 + z)


class CrossEncoderReranker:
    """Scores query-passage pairs with a local sentence-transformers cross-encoder on the CPU."""

    backend = "cross-encoder"

    def __init__(self, model: str, batch_size: int = 16):
        """``model``: a local folder, or a hub id already in the local Hugging Face cache.
        Importing sentence-transformers takes seconds, so it happens here, not at import."""
        prepare_offline_env()
        import torch
        from sentence_transformers import CrossEncoder

        local = Path(model).expanduser()
        path = str(local) if local.exists() else model
        self.model_name = model
        self.batch_size = batch_size
        self._model = CrossEncoder(path, device="cpu", local_files_only=True)
        if self._model.num_labels != 1:
            raise ValueError(f"{model} has {self._model.num_labels} output labels; a reranker "
                             f"needs a model with one relevance logit per pair")
        self._raw = torch.nn.Identity()  # predict's activation: none, we apply the sigmoid

    def score(self, query: str, passages: Sequence[str],
              window_vectors: Sequence[np.ndarray] | None = None) -> list[float]:
        """One score in [0, 1] per passage, in the order given (``window_vectors`` is unused:
        the model reads the texts)."""
        if not passages:
            return []
        logits = self._model.predict([(query, p) for p in passages], batch_size=self.batch_size,
                                     activation_fn=self._raw, show_progress_bar=False,
                                     convert_to_numpy=True)
        return [sigmoid(float(x)) for x in np.ravel(logits)]
