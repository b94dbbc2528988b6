"""The agent stack: AgentFactory → Agent (config + AgentPrompt) → LLMClient.

* ``AgentPrompt`` composes the messages from the agent's JSON config: the system message is
  the config's ``prompt_sections`` (in file order, each under its heading), then the reply's
  shape (``replies.outline`` of its schema: keys, enums and bounds, few tokens; the endpoint
  gets the schema itself); the user message is the stage's payload as compact JSON.
* ``Agent.ask(payload, schema)`` sends them with the agent's model and temperature, the
  request constrained by the schema (``LLMClient.chat_json``). Before the call the prompt is
  counted with tiktoken: it must fit ``prompt_budget`` — the agent's ``max_prompt_tokens``,
  and the model's ``llm.context_window`` less the reply's ``max_tokens`` —, else
  ``PromptBudgetError``; stages build their payload with ``Agent.fit`` so that it does.
* ``run_agent`` is how a stage uses it: in LLM mode it calls the LLM path; if the endpoint
  fails, the reply stays invalid, or the pass has spent ``llm.run_budget_s`` on model calls,
  it runs the deterministic path and records why in ``sp.extras.agent_modes``; after the
  endpoint failed earlier in the pass (``llm.one_pass``) it runs it at once, without a request,
  and says so ("ran offline at once: …"). Each agent's
  calls (tokens, seconds, first-try validity, form) go to ``sp.extras.llm_usage``, and what
  they sent and got back (messages, raw reply, parsed result; ``agents.trace``) to
  ``sp.extras.llm_calls``; the remaining run budget is each call's timeout.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from ragstream.agents.base import ModeDecision, record_mode, resolve_mode
from ragstream.agents.replies import outline
from ragstream.agents.trace import call_record
from ragstream.backends.llm import (
    AgentOutputError,
    CallLog,
    EndpointDownError,
    JSONResult,
    LLMClient,
    LLMError,
    NoLogprobsError,
    inline_schema,
    offline_words,
    pass_failure,
)
from ragstream.backends.tokens import count_tokens
from ragstream.common.config import AgentCommon, AppConfig
from ragstream.state.records import AgentCall, AgentUsage
from ragstream.state.super_prompt import SuperPrompt

M = TypeVar("M", bound=BaseModel)  # the agent's reply model
R = TypeVar("R")  # what a stage's LLM or deterministic path returns


#: tokens kept free in the context window for the chat template's own tokens
TEMPLATE_TOKENS = 48
#: other models' tokenizers count differently from tiktoken's: the context-window check allows
#: this much more than tiktoken says (the agent's own max_prompt_tokens is tiktoken's count)
TOKENIZER_SLACK = 1.15


class PromptBudgetError(AgentOutputError):
    """The smallest useful prompt for an agent does not fit its token budget."""


class RunBudgetError(LLMError):
    """The pass has spent ``llm.run_budget_s`` on model calls."""


class AgentPrompt(Generic[M]):
    """The messages for one agent: its config's prompt sections and its reply's schema."""

    def __init__(self, config: AgentCommon, output: type[M]):
        self.config = config
        self.output = output

    def system_message(self, schema: dict[str, Any] | None = None) -> str:
        """Build the system message: role line, the config's prompt sections and the reply's
        JSON schema (``schema``, else the reply model's own)."""
        spec = schema or inline_schema(self.output.model_json_schema())
        parts = [f"You are {self.config.agent_name} ({self.config.version}), one stage of the "
                 f"RAGstream prompt pipeline."]
        for title, text in self.config.prompt_sections.items():
            parts.append(f"## {title}\n{text.strip()}")
        parts.append("## Output\nReply with exactly one JSON object of this shape and nothing "
                     "else:\n" + outline(spec))
        return "\n\n".join(parts)

    def messages(self, payload: dict[str, Any],
                 schema: dict[str, Any] | None = None) -> list[dict[str, str]]:
        """Return the chat messages: the system message and the payload as JSON in a user message."""
        return [
            {"role": "system", "content": self.system_message(schema)},
            {"role": "user", "content": json.dumps(payload, ensure_ascii=False)},
        ]


@dataclass
class Agent(Generic[M]):
    """One agent bound to the LLM client; ``ask`` returns replies validated as ``M``."""

    config: AgentCommon
    prompt: AgentPrompt[M]
    llm: LLMClient
    encoding: str = "cl100k_base"
    #: ``time.monotonic()`` by which this agent's calls must end (the pass's run budget)
    deadline: float | None = None
    calls: list[CallLog] = field(default_factory=list)

    @property
    def model(self) -> str:
        """The agent's model from its config, else the LLM client's default model."""
        return self.config.model or self.llm.model

    @property
    def reply_budget(self) -> int:
        """The reply's token budget: the config's ``max_tokens``."""
        return self.config.max_tokens

    @property
    def prompt_budget(self) -> int:
        """The prompt's token budget (tiktoken): ``max_prompt_tokens``, and what the context
        window leaves beside the reply."""
        window = self.llm.settings.context_window - self.reply_budget - TEMPLATE_TOKENS
        return max(0, min(self.config.max_prompt_tokens, int(window / TOKENIZER_SLACK)))

    def prompt_tokens(self, payload: dict[str, Any], schema: dict[str, Any] | None = None) -> int:
        """The tiktoken count of the messages ``payload`` makes."""
        return self._count(self.prompt.messages(payload, schema))

    def _count(self, messages: list[dict[str, str]]) -> int:
        return sum(count_tokens(m["content"], self.encoding) + 4 for m in messages)

    def fit(self, build: Callable[[int], dict[str, Any]], most: int,
            schema: Callable[[int], dict[str, Any]] | None = None) -> tuple[dict[str, Any], int]:
        """The payload ``build(k)`` for the largest ``k`` ≤ ``most`` whose prompt fits the
        budget (binary search; ``k`` = 0 when not even one item fits)."""
        def fits(k: int) -> bool:
            return self.prompt_tokens(build(k), schema(k) if schema else None) <= self.prompt_budget

        lo, hi = 0, most
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if fits(mid):
                lo = mid
            else:
                hi = mid - 1
        return build(lo), lo

    def ask(self, payload: dict[str, Any], schema: dict[str, Any] | None = None, *,
            items: list[str] | None = None, logprobs: bool = False) -> JSONResult[M]:
        """Send the payload (its prompt within budget), the reply constrained by ``schema``
        (default: the reply model's); validate it as ``M``. ``items`` names what the
        payload's numbers stand for (kept with the call); with ``logprobs`` the reply's
        token log-probabilities are kept too, where the endpoint gives them."""
        messages = self.prompt.messages(payload, schema)
        timeout = self._timeout(messages)
        log = CallLog(items=items)
        self.calls.append(log)
        with self._budget_guard():
            return self.llm.chat_json(messages, self.prompt.output,
                                      model=self.model, temperature=self.config.temperature,
                                      max_tokens=self.reply_budget, json_schema=schema,
                                      timeout=timeout, log=log, agent=self.config.agent_name,
                                      logprobs=logprobs)

    def judge(self, messages: list[dict[str, str]], answers: tuple[str, ...] = ("yes", "no"),
              item: str = "") -> dict[str, float]:
        """One generated token read as the probability of each of ``answers``
        (``LLMClient.judge``), the messages within the prompt budget; ``item`` is what was
        judged (kept with the call)."""
        timeout = self._timeout(messages)
        log = CallLog(items=[item] if item else None)
        self.calls.append(log)
        with self._budget_guard():
            return self.llm.judge(messages, answers, model=self.model, timeout=timeout,
                                  log=log, agent=self.config.agent_name)

    def _timeout(self, messages: list[dict[str, str]]) -> float | None:
        """The call's timeout (what is left of the pass's run budget); the prompt must fit
        the budget."""
        tokens = self._count(messages)
        if tokens > self.prompt_budget:
            raise PromptBudgetError(
                f"{self.config.agent_name}'s prompt needs {tokens} tokens, over its budget of "
                f"{self.prompt_budget} (max_prompt_tokens {self.config.max_prompt_tokens}, "
                f"llm.context_window {self.llm.settings.context_window})")
        if self.deadline is None:
            return None
        timeout = self.deadline - time.monotonic()
        if timeout <= 0.5:
            raise RunBudgetError(self._budget_spent())
        return min(timeout, self.llm.settings.timeout_s)

    @contextmanager
    def _budget_guard(self) -> Iterator[None]:
        """An endpoint failure at the run budget's end is the budget's doing: say so."""
        try:
            yield
        except LLMError as err:
            if (not isinstance(err, NoLogprobsError) and self.deadline is not None
                    and time.monotonic() >= self.deadline - 0.5):
                raise RunBudgetError(self._budget_spent() + " while this agent waited for the "
                                     "model") from None
            raise

    def _budget_spent(self) -> str:
        budget = self.llm.settings.run_budget_s
        return f"the pass's LLM time budget (llm.run_budget_s = {budget:g} s) is spent"

    def usage(self) -> AgentUsage:
        """Sum calls, tokens and seconds over this agent's calls; the first reply's validity,
        the last call's form and finish reason; whether any reply was repaired."""
        last = self.calls[-1]
        return AgentUsage(
            model=self.model,
            calls=sum(c.usage.calls for c in self.calls),
            prompt_tokens=sum(c.usage.prompt_tokens for c in self.calls),
            completion_tokens=sum(c.usage.completion_tokens for c in self.calls),
            repaired=any(c.repaired for c in self.calls),
            seconds=round(sum(c.seconds for c in self.calls), 3),
            first_try_valid=all(c.first_try_valid for c in self.calls),
            form=last.form or None, finish_reason=last.finish_reason or None,
            prompt_budget=self.prompt_budget, reply_budget=self.reply_budget,
        )

    def trace(self) -> list[AgentCall]:
        """What each call sent and got back, bounded by ``llm.inspect_chars``, key redacted."""
        limit = self.llm.settings.inspect_chars
        return [call_record(c, limit, lambda text: self.llm.redact(text, parts=False))
                for c in self.calls]


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
        return Agent(config, AgentPrompt(config, output), self.llm,
                     encoding=self.cfg.settings.chunking.encoding)


def llm_seconds(sp: SuperPrompt) -> float:
    """Seconds this pass's agents have spent on model calls so far."""
    return sum(u.seconds for u in sp.extras.llm_usage.values())


def run_agent(sp: SuperPrompt, name: str, cfg: AppConfig, services,
              llm_path: Callable[[Agent[M]], R], deterministic_path: Callable[[], R],
              output: type[M], nothing_to_ask: str = "") -> R:
    """Run ``llm_path`` when the agent is in LLM mode, else (or when it fails) the
    deterministic path; record which ran and why. ``nothing_to_ask`` (a reason) keeps an
    ``auto`` agent from calling the model when the prompt leaves it nothing to decide."""
    agent_cfg: AgentCommon = getattr(cfg.agents, name)
    llm = getattr(services, "llm", None) if services is not None else None
    decision = resolve_mode(agent_cfg, cfg, llm_available=llm is not None)
    sp.extras.llm_usage.pop(name, None)  # an earlier run's calls are not this run's
    sp.extras.llm_calls.pop(name, None)
    sp.extras.judgments.pop(name, None)
    if decision.mode == "llm" and nothing_to_ask and agent_cfg.mode == "auto":
        decision = ModeDecision("deterministic", f"no model call needed: {nothing_to_ask}")
    if decision.mode == "llm":
        budget = cfg.settings.llm.run_budget_s
        spent = llm_seconds(sp)
        if spent >= budget - 0.5:
            who = ", ".join(f"{a} {u.seconds:.0f} s" for a, u in sp.extras.llm_usage.items())
            record_mode(sp, name, ModeDecision(
                "deterministic", f"ran by rule: this pass's model calls have spent the LLM time "
                                 f"budget (llm.run_budget_s = {budget:g} s: {who})"))
            sp.extras.agent_modes[name].fallback = True
            return deterministic_path()
        down = pass_failure()
        if down is not None:  # the endpoint failed earlier in this pass: no request at all
            record_mode(sp, name, ModeDecision("deterministic",
                                               f"ran offline at once: {offline_words(down)}"))
            sp.extras.agent_modes[name].fallback = True
            return deterministic_path()
        agent = AgentFactory(cfg, llm).create(name, output)
        agent.deadline = time.monotonic() + (budget - spent)
        try:
            result = llm_path(agent)
            record_mode(sp, name, decision)
            return result
        except (LLMError, AgentOutputError) as err:
            decision = ModeDecision("deterministic", (
                f"ran offline at once: {err}" if isinstance(err, EndpointDownError) else
                f"LLM mode failed, fell back: {err}"))
            record_mode(sp, name, decision)
            sp.extras.agent_modes[name].fallback = True
            return deterministic_path()
        finally:
            if agent.calls:
                sp.extras.llm_usage[name] = agent.usage()
                sp.extras.llm_calls[name] = agent.trace()
    record_mode(sp, name, decision)
    return deterministic_path()
