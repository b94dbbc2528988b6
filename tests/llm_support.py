"""Helpers for tests that point RAGstream at the scripted OpenAI server on loopback."""

from __future__ import annotations

import dataclasses

from ragstream.backends.llm import LLMClient
from ragstream.config import AppConfig


def llm_config(cfg: AppConfig, server, **settings) -> AppConfig:
    values = {"settings.llm.base_url": server.base_url, "settings.llm.model": "test-model",
              "settings.llm.timeout_s": 2.0}
    values.update({f"settings.llm.{k}": v for k, v in settings.items()})
    return cfg.with_overrides(values)


def with_llm(services, cfg: AppConfig, environ: dict[str, str] | None = None):
    """A copy of ``services`` whose LLM client talks to ``cfg``'s endpoint."""
    return dataclasses.replace(services, llm=LLMClient(cfg.settings.llm, environ=environ or {}))
