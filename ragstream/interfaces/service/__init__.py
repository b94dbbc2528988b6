"""The retrieval service: ``api`` (``RAGPipeline``, RAGstream as another program's retrieval
back end), ``contract`` (the request and result models) and ``http`` (the FastAPI app behind
``python -m ragstream serve``). Nothing heavy is imported here: FastAPI and uvicorn come with
``ragstream.interfaces.service.http``, the engine and the vector store with ``RAGPipeline``."""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ragstream.workbench.api import RAGPipeline

__all__ = ["RAGPipeline"]


def __getattr__(name: str) -> Any:
    """``RAGPipeline`` is imported when first asked for."""
    if name == "RAGPipeline":
        from ragstream.workbench.api import RAGPipeline

        return RAGPipeline
    raise AttributeError(f"module 'ragstream.service' has no attribute {name!r}")
