"""RAGstream: a stage-inspectable RAG prompt workbench.

The public names (``from ragstream import Engine, RAGPipeline, SuperPrompt, ...``) are imported
when first asked for (PEP 562), so ``import ragstream`` — which every ``ragstream`` command and
``python -m ragstream`` does first — costs nothing: a command imports only what it uses."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ragstream.common.config import AppConfig, load_config
    from ragstream.common.errors import RagstreamError
    from ragstream.state.edits import statement_key
    from ragstream.state.super_prompt import Chunk, Filters, SuperPrompt, ViewRow
    from ragstream.workbench.api import RAGPipeline
    from ragstream.workbench.engine import Engine

__all__ = ["AppConfig", "Chunk", "Engine", "Filters", "RAGPipeline", "RagstreamError", "SuperPrompt",
           "ViewRow", "load_config", "statement_key"]
__version__ = "0.9.0"

#: where each public name lives
_HOMES = {
    "AppConfig": "ragstream.common.config",
    "load_config": "ragstream.common.config",
    "RagstreamError": "ragstream.common.errors",
    "Chunk": "ragstream.state.super_prompt",
    "Filters": "ragstream.state.super_prompt",
    "SuperPrompt": "ragstream.state.super_prompt",
    "ViewRow": "ragstream.state.super_prompt",
    "statement_key": "ragstream.state.edits",
    "RAGPipeline": "ragstream.workbench.api",
    "Engine": "ragstream.workbench.engine",
}


def __getattr__(name: str) -> Any:
    """A public name, imported from its home module the first time it is asked for."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'ragstream' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # asked once: later look-ups find it directly
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
