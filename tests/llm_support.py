"""Helpers for tests that point RAGstream at the scripted OpenAI server on loopback."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable

from ragstream.backends.llm import LLMClient
from ragstream.config import AppConfig
from tests.fake_openai import Reply


def llm_config(cfg: AppConfig, server, **settings) -> AppConfig:
    values = {"settings.llm.base_url": server.base_url, "settings.llm.model": "test-model",
              "settings.llm.timeout_s": 2.0}
    values.update({f"settings.llm.{k}": v for k, v in settings.items()})
    return cfg.with_overrides(values)


def with_llm(services, cfg: AppConfig, environ: dict[str, str] | None = None):
    """A copy of ``services`` whose LLM client talks to ``cfg``'s endpoint."""
    return dataclasses.replace(services, llm=LLMClient(cfg.settings.llm, environ=environ or {}))


def every_agent(stream: dict, facts: tuple[str, str]) -> Callable[[dict], Reply]:
    """A responder for the scripted server: each agent (A2, A3, A4, A5) replies valid JSON (A4
    states ``facts`` citing sources 1 and 2), and a streamed request gets ``stream["reply"]``."""

    def route(body: dict) -> Reply:
        system = body["messages"][0]["content"]
        user = body["messages"][-1]["content"]
        if body.get("stream"):
            return stream["reply"]
        if "A2_PromptShaper" in system:
            return Reply.json({"system": "wizard", "audience": "developer", "tone": "concise",
                               "depth": "overview", "confidence": "high"})
        if "A3_NLI_Gate" in system:
            cands = json.loads(user)["candidates"]
            return Reply.json({"decisions": [{"n": c["n"], "decision": "keep" if c["n"] <= 4 else "drop",
                                              "tag": "" if c["n"] <= 4 else "off-topic",
                                              "reason": "test"} for c in cands]})
        if "A4_Condenser" in system:
            return Reply.json({"facts": [{"text": facts[0], "sources": [1]},
                                         {"text": facts[1], "sources": [2]}],
                               "constraints": [], "open_issues": []})
        if "A5_Format_Enforcer" in system:
            return Reply.json({"kind": "markdown", "hard_rules": ["Be brief."]})
        return Reply.error(400, "unexpected request")

    return route
