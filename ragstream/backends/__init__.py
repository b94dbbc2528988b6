"""External systems behind small interfaces: the embedders (``embedder``, ``onnx_embedder``,
chosen by ``embedder_choice``), the vector store (``vector_store``), the search engines
(``search/``: Chroma with tantivy, Milvus, in memory), keyword and document indexes, the
reranker, the tokenizer, the LLM client (``llm``), telemetry, the index lock (``lock``) and
their assembly for one knowledge base (``services``). It imports ``state`` and ``common``."""

import os


def prepare_offline_env() -> None:
    """Hugging Face libraries: never reach for the hub, no progress bars, quiet logs."""
    for key, value in (("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1"),
                       ("TOKENIZERS_PARALLELISM", "false"), ("HF_HUB_DISABLE_PROGRESS_BARS", "1"),
                       ("TRANSFORMERS_VERBOSITY", "error")):
        os.environ.setdefault(key, value)
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    except ImportError:  # pragma: no cover
        pass
