"""The external systems a stage may use, built once by the app and passed in.

Stages never import models or clients as globals: the CLI, the Python API and the Streamlit
page (through ``st.cache_resource``) build one ``Services`` and hand it to every stage call.
Everything heavy loads lazily on first use.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Services:
    embedder: Any = None
    store: Any = None
    keyword_index: Any = None
    reranker: Any = None
    llm: Any = None  # an LLM client; None means every agent runs deterministically

    @property
    def llm_available(self) -> bool:
        return self.llm is not None
