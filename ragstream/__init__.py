"""RAGstream: a stage-inspectable RAG prompt workbench."""

from ragstream.config import AppConfig, load_config
from ragstream.engine import Engine
from ragstream.errors import RagstreamError
from ragstream.super_prompt import Chunk, SuperPrompt, ViewRow

__all__ = ["AppConfig", "Chunk", "Engine", "RagstreamError", "SuperPrompt", "ViewRow",
           "load_config"]
__version__ = "0.1.0"
