"""Helpers for tests that point RAGstream at the scripted OpenAI server on loopback."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable

from ragstream.backends.llm import LLMClient
from ragstream.common.config import AppConfig
from tests.fake_openai import Reply


def llm_config(cfg: AppConfig, server, **settings) -> AppConfig:
    values = {"settings.llm.base_url": server.base_url, "settings.llm.model": "test-model",
              "settings.llm.timeout_s": 2.0}
    values.update({f"settings.llm.{k}": v for k, v in settings.items()})
    return cfg.with_overrides(values)


AGENTS = ("A0_PreProcessing", "A2_PromptShaper", "A3_NLI_Gate", "A4_Condenser",
          "A5_Format_Enforcer")


def answer_only(cfg: AppConfig) -> AppConfig:
    """``cfg`` with every agent in its deterministic mode, so that only the answer calls the
    model: a pass computed offline stays current under it (the controller and the answer
    refuse a pass whose agents would now run in another mode)."""
    return cfg.with_overrides({f"agents.{name}.mode": "deterministic" for name in AGENTS})


def with_llm(services, cfg: AppConfig, environ: dict[str, str] | None = None):
    """A copy of ``services`` whose LLM client talks to ``cfg``'s endpoint."""
    return dataclasses.replace(services, llm=LLMClient(cfg.settings.llm, environ=environ or {}))


def every_agent(stream: dict) -> Callable[[dict], Reply]:
    """A responder for the scripted server: each agent (A2, A3, A4, A5) replies valid JSON in
    its compact contract (A3 drops candidates after the 4th as off-topic, or, asked yes/no
    with log-probabilities, says Yes at 0.8 — neither sure enough to rescue nor doubtful
    enough to drop; A4 chooses one sentence from each of two sources), and a streamed request
    gets ``stream["reply"]``."""

    def route(body: dict) -> Reply:
        system = body["messages"][0]["content"]
        user = body["messages"][-1]["content"]
        if body.get("stream"):
            return stream["reply"]
        if "Passage: " in user and body.get("max_tokens") == 1:  # A3's yes/no judgment
            return Reply.judgment(0.8)
        if "A2_PromptShaper" in system:
            return Reply.json({"system": "wizard", "audience": "developer", "tone": "concise",
                               "depth": "overview", "confidence": "high"})
        if "A3_NLI_Gate" in system:
            sent = len(json.loads(user)["candidates"])
            return Reply.json({"drop": [{"n": n, "tag": "off-topic"} for n in range(5, sent + 1)]})
        if "A4_Condenser" in system:  # the first sentence of each of the first two sources
            firsts: dict[str, int] = {}
            for line in json.loads(user)["sentences"]:
                k, rest = line.split(": ", 1)
                firsts.setdefault(rest.split("]", 1)[0], int(k))
            return Reply.json({"facts": sorted(firsts.values())[:2], "open_issues": []})
        if "A5_Format_Enforcer" in system:
            return Reply.json({"kind": "markdown", "hard_rules": ["Be brief."]})
        return Reply.error(400, "unexpected request")

    return route
