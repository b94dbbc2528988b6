"""RAGstream: a stage-inspectable RAG prompt workbench."""

from typing import TYPE_CHECKING, Any

from ragstream.common.config import AppConfig, load_config
from ragstream.common.errors import RagstreamError
from ragstream.state.super_prompt import Chunk, Filters, SuperPrompt, ViewRow
from ragstream.workbench.engine import Engine

if TYPE_CHECKING:
    from ragstream.workbench.api import RAGPipeline

__all__ = ["AppConfig", "Chunk", "Engine", "Filters", "RAGPipeline", "RagstreamError", "SuperPrompt",
           "ViewRow", "load_config"]
__version__ = "0.9.0"


def __getattr__(name: str) -> Any:
    """``RAGPipeline`` is imported when first asked for (the CLI and the page do not need it)."""
    if name == "RAGPipeline":
        from ragstream.workbench.api import RAGPipeline

        return RAGPipeline
    raise AttributeError(f"module 'ragstream' has no attribute {name!r}")
