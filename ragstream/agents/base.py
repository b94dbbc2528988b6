"""What every agent stage shares: deciding its mode and saying which mode ran.

An agent runs in LLM mode when its config allows it (``mode`` is ``auto`` or ``llm``) and an
LLM endpoint is configured; otherwise it runs its deterministic algorithm. Either way the
decision and its reason are recorded in ``sp.extras.agent_modes[agent_name]`` so the GUI
and the JSON export can show it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ragstream.common.config import AgentCommon, AppConfig
from ragstream.common.errors import ConfigError
from ragstream.state.records import AgentModeRecord
from ragstream.state.super_prompt import SuperPrompt


@dataclass(frozen=True)
class ModeDecision:
    """Which mode an agent runs in ("llm" or "deterministic") and why."""

    mode: str  # "llm" or "deterministic"
    reason: str


def resolve_mode(agent: AgentCommon, cfg: AppConfig, llm_available: bool) -> ModeDecision:
    """Pick LLM or deterministic mode from config and LLM availability; raise if LLM is forced but absent."""
    if agent.mode == "deterministic":
        return ModeDecision("deterministic", "agent config sets mode=deterministic")
    if not llm_available:
        if agent.mode == "llm":
            raise ConfigError(
                f"{agent.agent_name} is configured with mode='llm' but no LLM endpoint is "
                f"configured. Set llm.base_url in config/settings.json (or RAGSTREAM_LLM_BASE_URL), "
                f"or set mode to 'auto' or 'deterministic' in config/agents/{agent.agent_name}.json."
            )
        return ModeDecision("deterministic", "no LLM endpoint configured")
    return ModeDecision("llm", f"LLM endpoint configured (model {agent.model or cfg.settings.llm.model})")


def record_mode(sp: SuperPrompt, agent_name: str, decision: ModeDecision) -> None:
    """Store the mode and reason in ``sp.extras.agent_modes[agent_name]``."""
    sp.extras.agent_modes[agent_name] = AgentModeRecord(mode=decision.mode, reason=decision.reason)
