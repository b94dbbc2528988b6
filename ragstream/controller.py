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

import time
from collections.abc import Callable

from ragstream.config import AppConfig
from ragstream.errors import RagstreamError, StageError, StageOrderError, UnknownStageError
from ragstream.stages import STAGES, Stage
from ragstream.super_prompt import StageRun, SuperPrompt

STAGE_NAMES = [s.name for s in STAGES]
_BY_NAME = {s.name: s for s in STAGES}
_VALUE_POS = {"raw": -1, **{s.value: i for i, s in enumerate(STAGES[:-1])}}


def spec(name: str) -> Stage:
    """The stage called ``name``; ``UnknownStageError`` lists the names there are."""
    if name not in _BY_NAME:
        raise UnknownStageError(name, STAGE_NAMES)
    return _BY_NAME[name]


def new_prompt(text: str, conversation: list | None = None) -> SuperPrompt:
    """A fresh state for ``text`` (and the conversation so far)."""
    return SuperPrompt(user_text=text, recent_conversation=conversation or [])


def position(sp: SuperPrompt) -> int:
    """Index of the last stage completed in the current pass (-1: none)."""
    pos = _VALUE_POS[sp.stage]
    last = STAGES[-1]
    if sp.stage == last.value and sp.history_of_stages and sp.history_of_stages[-1] == last.recorded:
        pos = len(STAGES) - 1
    return pos


def next_stage(sp: SuperPrompt) -> str | None:
    """The stage that runs next in this pass, or None when the pass is complete."""
    pos = position(sp)
    return STAGE_NAMES[pos + 1] if pos + 1 < len(STAGES) else None


def blocked_by(sp: SuperPrompt, name: str) -> str | None:
    """The stage that must run before ``name`` can, or None when ``name`` may run now."""
    idx = STAGE_NAMES.index(spec(name).name)
    pos = position(sp)
    return None if idx <= pos + 1 else STAGE_NAMES[pos + 1]


def discard_from(sp: SuperPrompt, idx: int) -> None:
    """Remove the results of stage ``idx`` and all later stages (in place): each of them
    forgets what it owns, in pipeline order; an answer belongs to one finished pass."""
    sp.answer = None
    sp.extras.qa_log = None
    for stage in STAGES[idx:]:
        stage.discard(sp)
        sp.extras.agent_modes.pop(stage.name, None)
        sp.extras.llm_usage.pop(stage.name, None)
        sp.extras.llm_calls.pop(stage.name, None)
    sp.stage = STAGES[idx - 1].value if idx > 0 else "raw"


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
        work = st.run(work, cfg, services)
    except RagstreamError:
        raise
    except Exception as err:
        raise StageError(name, f"{type(err).__name__}: {err}") from err
    wall_ms = (time.perf_counter() - started) * 1000.0
    work.stage = st.value
    work.history_of_stages.append(st.recorded)
    work.stage_runs.append(StageRun(stage=name, wall_ms=round(wall_ms, 1), mode=st.mode_of(work)))
    return work


def remaining(sp: SuperPrompt, until: str | None = None) -> list[str]:
    """The stages auto mode would run next, in order (through ``until`` if given)."""
    stop = STAGE_NAMES.index(spec(until).name) if until else len(STAGES) - 1
    return STAGE_NAMES[position(sp) + 1:stop + 1]


def run_all(sp: SuperPrompt, cfg: AppConfig, services, until: str | None = None,
            on_stage: Callable[[str, SuperPrompt], None] | None = None,
            before_stage: Callable[[str], None] | None = None) -> SuperPrompt:
    """Auto mode: run every remaining stage in order (through ``until`` if given).
    ``before_stage(name)`` is called as a stage starts, ``on_stage(name, sp)`` with the state
    after it; when a stage fails, the states already passed to ``on_stage`` are complete."""
    for name in remaining(sp, until):
        if before_stage:
            before_stage(name)
        sp = run_stage(sp, name, cfg, services)
        if on_stage:
            on_stage(name, sp)
    return sp
