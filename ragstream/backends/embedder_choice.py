"""Which embedder the settings ask for, made: ``make_embedder(settings, cache_dir)`` picks the
torch model (``embedder.SentenceTransformerEmbedder``) or an ONNX one
(``onnx_embedder.OnnxEmbedder``) from ``EmbeddingSettings.backend``, "auto" decided by
``resolve_backend``. Apart from both so that neither embedder imports the other."""

from __future__ import annotations

from pathlib import Path

from ragstream.backends.embedder import (
    AUTO_BUNDLED_BACKEND,
    ONNX_BACKENDS,
    BaseEmbedder,
    SentenceTransformerEmbedder,
    is_bundled_model,
)
from ragstream.common.config import EmbeddingSettings
from ragstream.common.errors import ConfigError


def resolve_backend(settings: EmbeddingSettings) -> str:
    """The backend ``settings`` asks for, with "auto" decided: the best ONNX backend for the
    bundled model, "torch" for any other model."""
    backend = settings.backend
    bundled = is_bundled_model(settings.model)
    if backend == "auto":
        return AUTO_BUNDLED_BACKEND if bundled else "torch"
    if backend in ONNX_BACKENDS and not bundled:
        raise ConfigError(
            f"embedding.backend {backend!r} runs only the bundled 'all-MiniLM-L6-v2', but "
            f"embedding.model is {settings.model!r}. Set embedding.backend (or "
            f"RAGSTREAM_EMBEDDING_BACKEND) to 'torch' or 'auto' for this model.")
    return backend


def make_embedder(settings: EmbeddingSettings, cache_dir: Path) -> BaseEmbedder:
    """The embedder ``settings`` configure; nothing loads until it is first used. ONNX model
    files live in ``cache_dir/onnx/`` (``python -m ragstream.interfaces.doctor`` prepares them)."""
    backend = resolve_backend(settings)
    if backend == "torch":
        embedder: BaseEmbedder = SentenceTransformerEmbedder(
            settings.model, settings.window_tokens, settings.batch_size, settings.cache_size)
    else:
        from ragstream.backends.onnx_embedder import OnnxEmbedder

        embedder = OnnxEmbedder(backend, Path(cache_dir), name=settings.model,
                                window_tokens=settings.window_tokens,
                                batch_size=settings.batch_size, cache_size=settings.cache_size)
    # evidence sentences: pooled from the window's pass where the backend can (late chunking)
    embedder.late_chunking = settings.sentence_vectors == "late"
    return embedder
