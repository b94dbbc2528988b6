"""The agent stack: AgentFactory → Agent (config + AgentPrompt) → LLMClient.

* ``AgentPrompt`` composes the messages from the agent's JSON config: the system message is
  the config's ``prompt_sections`` (in file order, each under its heading), then the output
  contract (the pydantic model's JSON schema); the user message is the stage's payload as
  JSON.
* ``Agent.ask(payload)`` sends them with the agent's model, temperature and max tokens (JSON
  mode) and returns the validated output (one repair attempt inside the client).
* ``run_agent`` is how a stage uses it: in LLM mode it calls the LLM path; if the endpoint
  fails or the reply stays invalid, it falls back to the deterministic path and records why
  in ``sp.extras.agent_modes``. Token usage goes to ``sp.extras.llm_usage``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from ragstream.agents.base import ModeDecision, record_mode, resolve_mode
from ragstream.backends.llm import AgentOutputError, JSONResult, LLMClient, LLMError
from ragstream.config import AgentCommon, AppConfig
from ragstream.records import AgentUsage
from ragstream.super_prompt import SuperPrompt

M = TypeVar("M", bound=BaseModel)  # the agent's reply model
R = TypeVar("R")  # what a stage's LLM or deterministic path returns


class AgentPrompt(Generic[M]):
    """The messages for one agent: its config's prompt sections and its reply model's schema."""

    def __init__(self, config: AgentCommon, output: type[M]):
        self.config = config
        self.output = output

    def system_message(self) -> str:
        """Build the system message: role line, the config's prompt sections and the reply JSON schema."""
        parts = [f"You are {self.config.agent_name} ({self.config.version}), one stage of the "
                 f"RAGstream prompt pipeline."]
        for title, text in self.config.prompt_sections.items():
            parts.append(f"## {title}\n{text.strip()}")
        parts.append("## Output\nReply with exactly one JSON object and nothing else. It must "
                     "match this JSON schema:\n"
                     + json.dumps(self.output.model_json_schema(), ensure_ascii=False))
        return "\n\n".join(parts)

    def messages(self, payload: dict[str, Any]) -> list[dict[str, str]]:
        """Return the chat messages: the system message and the payload as JSON in a user message."""
        return [
            {"role": "system", "content": self.system_message()},
            {"role": "user", "content": json.dumps(payload, ensure_ascii=False, indent=1)},
        ]


@dataclass
class Agent(Generic[M]):
    """One agent bound to the LLM client; ``ask`` returns replies validated as ``M``."""

    config: AgentCommon
    prompt: AgentPrompt[M]
    llm: LLMClient
    results: list[JSONResult[M]] = field(default_factory=list)

    @property
    def model(self) -> str:
        """The agent's model from its config, else the LLM client's default model."""
        return self.config.model or self.llm.model

    def ask(self, payload: dict[str, Any]) -> JSONResult[M]:
        """Send the payload to the LLM, validate the JSON reply as ``M``, keep and return the result."""
        result = self.llm.chat_json(self.prompt.messages(payload), self.prompt.output,
                                    model=self.model, temperature=self.config.temperature,
                                    max_tokens=self.config.max_tokens)
        self.results.append(result)
        return result

    def usage(self) -> AgentUsage:
        """Sum calls and token counts over this agent's results and say whether any reply was repaired."""
        return AgentUsage(
            model=self.model,
            calls=sum(r.usage.calls for r in self.results),
            prompt_tokens=sum(r.usage.prompt_tokens for r in self.results),
            completion_tokens=sum(r.usage.completion_tokens for r in self.results),
            repaired=any(r.repaired for r in self.results),
        )


class AgentFactory:
    """Builds an agent from its name in the config and its reply model."""

    def __init__(self, cfg: AppConfig, llm: LLMClient | None):
        self.cfg = cfg
        self.llm = llm

    def create(self, name: str, output: type[M]) -> Agent[M]:
        """Build the named agent from its config; raise LLMError when no LLM endpoint is configured."""
        if self.llm is None:
            raise LLMError(f"{name} needs an LLM endpoint; none is configured.")
        config = getattr(self.cfg.agents, name)
        return Agent(config, AgentPrompt(config, output), self.llm)


def run_agent(sp: SuperPrompt, name: str, cfg: AppConfig, services,
              llm_path: Callable[[Agent[M]], R], deterministic_path: Callable[[], R],
              output: type[M]) -> R:
    """Run ``llm_path`` when the agent is in LLM mode, else (or when it fails) the
    deterministic path; record which ran and why."""
    agent_cfg: AgentCommon = getattr(cfg.agents, name)
    llm = getattr(services, "llm", None) if services is not None else None
    decision = resolve_mode(agent_cfg, cfg, llm_available=llm is not None)
    if decision.mode == "llm":
        agent = AgentFactory(cfg, llm).create(name, output)
        try:
            result = llm_path(agent)
            record_mode(sp, name, decision)
            return result
        except (LLMError, AgentOutputError) as err:
            decision = ModeDecision("deterministic", f"LLM mode failed, fell back: {err}")
            record_mode(sp, name, decision)
            sp.extras.agent_modes[name].fallback = True
            return deterministic_path()
        finally:
            if agent.results:
                sp.extras.llm_usage[name] = agent.usage()
    record_mode(sp, name, decision)
    return deterministic_path()
