"""External systems behind small interfaces: embedder, vector store, keyword index,
reranker, tokenizer (and, later, the LLM client)."""

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
