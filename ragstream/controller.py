"""The controller: runs stages in order, one at a time or all remaining (auto mode).

* A stage may run when every stage before it has run in the current pass; otherwise
  ``StageOrderError`` names the stage that must run first.
* Re-running a stage (or an earlier one) first discards the results of that stage and of
  every later stage, so the state never mixes two passes.
* Stages work on a deep copy: when one raises, the caller's ``SuperPrompt`` is untouched.
  Unexpected exceptions are wrapped in ``StageError``.
* The controller, not the stage, sets ``stage``, appends to ``history_of_stages`` and
  records the stage's wall time and mode in ``stage_runs``.
"""

from __future__ import annotations

import importlib
import time
from dataclasses import dataclass
from typing import Callable

from ragstream.config import AppConfig
from ragstream.errors import RagstreamError, StageError, StageOrderError, UnknownStageError
from ragstream.render import compose_prompt_ready
from ragstream.super_prompt import PROMPT_BUILT, StageRun, SuperPrompt


@dataclass(frozen=True)
class StageSpec:
    name: str
    value: str  # the SuperPrompt.stage value after it ran (Prompt_Builder keeps "a5")
    module: str
    label: str

    @property
    def history_value(self) -> str:
        return PROMPT_BUILT if self.name == "Prompt_Builder" else self.value

    def function(self) -> Callable:
        return importlib.import_module(f"ragstream.stages.{self.module}").run


STAGES: list[StageSpec] = [
    StageSpec("A0_PreProcessing", "preprocessed", "a0_preprocessing", "A0 Prep"),
    StageSpec("A2_PromptShaper", "a2", "a2_prompt_shaper", "A2 Shape"),
    StageSpec("Retrieval", "retrieval", "retrieval", "Retrieve"),
    StageSpec("ReRanker", "reranked", "reranker", "Rerank"),
    StageSpec("A3_NLI_Gate", "a3", "a3_nli_gate", "A3 Gate"),
    StageSpec("A4_Condenser", "a4", "a4_condenser", "A4 Condense"),
    StageSpec("A5_Format_Enforcer", "a5", "a5_format_enforcer", "A5 Format"),
    StageSpec("Prompt_Builder", "a5", "prompt_builder", "Build"),
]
STAGE_NAMES = [s.name for s in STAGES]
_BY_NAME = {s.name: s for s in STAGES}
_VALUE_POS = {"raw": -1, **{s.value: i for i, s in enumerate(STAGES[:-1])}}
AGENT_STAGES = ("A0_PreProcessing", "A2_PromptShaper", "A3_NLI_Gate", "A4_Condenser",
                "A5_Format_Enforcer")


def spec(name: str) -> StageSpec:
    if name not in _BY_NAME:
        raise UnknownStageError(name, STAGE_NAMES)
    return _BY_NAME[name]


def new_prompt(text: str, conversation: list | None = None) -> SuperPrompt:
    return SuperPrompt(user_text=text, recent_conversation=conversation or [])


def position(sp: SuperPrompt) -> int:
    """Index of the last stage completed in the current pass (-1: none)."""
    pos = _VALUE_POS[sp.stage]
    if sp.stage == "a5" and sp.history_of_stages and sp.history_of_stages[-1] == PROMPT_BUILT:
        pos = len(STAGES) - 1
    return pos


def next_stage(sp: SuperPrompt) -> str | None:
    pos = position(sp)
    return STAGE_NAMES[pos + 1] if pos + 1 < len(STAGES) else None


def blocked_by(sp: SuperPrompt, name: str) -> str | None:
    """The stage that must run before ``name`` can, or None when ``name`` may run now."""
    idx = STAGE_NAMES.index(spec(name).name)
    pos = position(sp)
    return None if idx <= pos + 1 else STAGE_NAMES[pos + 1]


def discard_from(sp: SuperPrompt, idx: int) -> None:
    """Remove the results of stage ``idx`` and all later stages (in place)."""
    names = STAGE_NAMES[idx:]
    ex = sp.extras
    sp.answer = None  # an answer belongs to one finished pass
    ex.pop("qa_log", None)
    if "A0_PreProcessing" in names:
        sp.body, sp.extras, sp.prompt_ready = {}, {}, ""
    elif "A2_PromptShaper" in names:
        sp.body = dict(ex.get("a0_body", sp.body))
        ex.pop("a2_decisions", None)
        sources = ex.get("body_sources", {})
        for key in [k for k, v in sources.items() if v == "a2"]:
            if key in sp.body:
                sources[key] = "default"
            else:
                del sources[key]
    if "Retrieval" in names:
        sp.base_context_chunks = []
        ex.pop("retrieval", None)
    for stage_name, view, extra in (("Retrieval", "retrieval", "retrieval"),
                                    ("ReRanker", "reranked", "reranker"),
                                    ("A3_NLI_Gate", "a3", "a3"),
                                    ("A4_Condenser", "a4", "a4"),
                                    ("A5_Format_Enforcer", None, "format_enforcer")):
        if stage_name in names:
            if view:
                sp.views_by_stage.pop(view, None)
            ex.pop(extra, None)
    if "A3_NLI_Gate" in names:
        sp.final_selection_ids = []
    elif "A4_Condenser" in names:
        sp.final_selection_ids = sp.kept_ids("a3")
    if "A4_Condenser" in names:
        sp.S_CTX_MD = ""
    if "Prompt_Builder" in names:
        sp.System_MD = sp.Prompt_MD = sp.Attachments_MD = ""
        if sp.body:
            sp.prompt_ready = compose_prompt_ready(sp.body)
    for agent in names:
        ex.get("agent_modes", {}).pop(agent, None)
    if idx > 0:
        sp.stage = STAGES[idx - 1].value
    else:
        sp.stage = "raw"


def run_stage(sp: SuperPrompt, name: str, cfg: AppConfig, services) -> SuperPrompt:
    """Run one stage on a copy of ``sp`` and return the new state."""
    st = spec(name)
    required = blocked_by(sp, name)
    if required:
        raise StageOrderError(name, required)
    idx = STAGE_NAMES.index(name)
    work = sp.working_copy()
    discard_from(work, idx)
    started = time.perf_counter()
    try:
        work = st.function()(work, cfg, services)
    except RagstreamError:
        raise
    except Exception as err:  # noqa: BLE001 - every failure reaches the user as a StageError
        raise StageError(name, f"{type(err).__name__}: {err}") from err
    wall_ms = (time.perf_counter() - started) * 1000.0
    work.stage = st.value
    work.history_of_stages.append(st.history_value)
    mode = work.extras.get("agent_modes", {}).get(name, {}).get("mode", "")
    if name == "ReRanker":
        mode = work.extras.get("reranker", {}).get("backend", "")
    work.stage_runs.append(StageRun(stage=name, wall_ms=round(wall_ms, 1), mode=mode))
    return work


def run_all(sp: SuperPrompt, cfg: AppConfig, services, until: str | None = None,
            on_stage: Callable[[str, SuperPrompt], None] | None = None) -> SuperPrompt:
    """Auto mode: run every remaining stage in order (through ``until`` if given)."""
    stop = STAGE_NAMES.index(spec(until).name) if until else len(STAGES) - 1
    while True:
        nxt = next_stage(sp)
        if nxt is None or STAGE_NAMES.index(nxt) > stop:
            return sp
        sp = run_stage(sp, nxt, cfg, services)
        if on_stage:
            on_stage(nxt, sp)
