"""The service: the FastAPI app behind ``ragstream serve`` (``http``), the OpenAI-compatible
route (``openai_compat``), the MCP server (``mcp_server``), the token guard (``auth``) and what
they share (``streaming``). ``RAGPipeline``, the retrieval API they serve, and its contract
are the workbench's (``ragstream.workbench.api``, ``contract``); it is importable from here
too. Nothing heavy is imported here: FastAPI and uvicorn come with ``http``, the engine and
the vector store with ``RAGPipeline``."""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ragstream.workbench.api import RAGPipeline

__all__ = ["RAGPipeline"]


def __getattr__(name: str) -> Any:
    """``RAGPipeline`` is imported when first asked for."""
    if name == "RAGPipeline":
        from ragstream.workbench.api import RAGPipeline

        return RAGPipeline
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
