"""The controller: runs stages in order, one at a time or all remaining (auto mode).

* A stage may run when every stage before it has run in the current pass; otherwise
  ``StageOrderError`` names the stage that must run first.
* Re-running a stage (or an earlier one) first discards the results of that stage and of
  every later stage, so the state never mixes two passes.
* Stages work on a deep copy: when one raises, the caller's ``SuperPrompt`` is untouched.
  Unexpected exceptions are wrapped in ``StageError``.
* The controller, not the stage, sets ``stage``, appends to ``history_of_stages``, records
  the stage's wall time and mode in ``stage_runs`` and what its result was computed from in
  ``computed_from`` (``ragstream.stages.staleness``).
* A stage may not run on top of an out-of-date result (``StaleResultError`` names it and
  why); auto mode and ``resume`` re-run from the first out-of-date stage.
* A person's edit (``record_edit``) joins ``sp.edits`` and discards the results of the stage
  it acts on and every later one, no others; ``resume_to`` remembers how far the pass had got.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ragstream.backends import telemetry
from ragstream.backends.llm import goes_on, one_pass, pass_down, pass_open
from ragstream.common.config import AppConfig
from ragstream.common.errors import (
    RagstreamError,
    StageError,
    StageOrderError,
    StaleResultError,
    UnknownStageError,
)
from ragstream.stages import STAGES, Stage, staleness
from ragstream.state.edits import Edit, merged
from ragstream.state.super_prompt import StageRun, SuperPrompt

STAGE_NAMES = [s.name for s in STAGES]
_BY_NAME = {s.name: s for s in STAGES}
_VALUE_POS = {"raw": -1, **{s.value: i for i, s in enumerate(STAGES[:-1])}}


def spec(name: str) -> Stage:
    """The stage called ``name``; ``UnknownStageError`` lists the names there are."""
    if name not in _BY_NAME:
        raise UnknownStageError(name, STAGE_NAMES)
    return _BY_NAME[name]


def new_prompt(text: str, conversation: list | None = None,
               edits: list[Edit] | None = None) -> SuperPrompt:
    """A fresh state for ``text`` (and the conversation so far, and edits to carry over)."""
    return SuperPrompt(user_text=text, recent_conversation=conversation or [],
                       edits=list(edits or []))


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


def first_stale(sp: SuperPrompt, cfg: AppConfig, kb: str | None) -> staleness.Stale | None:
    """The first stage of the current pass whose result no longer matches its inputs
    (``staleness.inputs_of``: what it would read now from ``sp``, ``cfg`` and the knowledge
    base's fingerprint ``kb``), or None when the pass is current. A stage without recorded
    inputs counts as out of date."""
    for i, stage in enumerate(STAGES[:position(sp) + 1]):
        was = sp.computed_from.get(stage.name)
        if was is None:
            return staleness.Stale(i, stage.name, ["what it was computed from was not recorded"])
        now = staleness.inputs_of(stage.name, stage.reads, sp, cfg, kb, stage.uses_llm)
        reasons = staleness.differences(was, now)
        if reasons:
            return staleness.Stale(i, stage.name, reasons)
    return None


def discard_from(sp: SuperPrompt, idx: int) -> None:
    """Remove the results of stage ``idx`` and all later stages (in place): each of them
    forgets what it owns, in pipeline order; an answer belongs to one finished pass."""
    sp.answer = None
    sp.extras.qa_log = None
    sp.extras.turn = None
    for stage in STAGES[idx:]:
        stage.discard(sp)
        sp.extras.agent_modes.pop(stage.name, None)
        sp.extras.llm_usage.pop(stage.name, None)
        sp.extras.llm_calls.pop(stage.name, None)
        sp.extras.judgments.pop(stage.name, None)
        sp.extras.edit_outcomes.pop(stage.name, None)
        sp.computed_from.pop(stage.name, None)
    sp.stage = STAGES[idx - 1].value if idx > 0 else "raw"


#: ``run_stage``'s ``kb`` when the caller has not read the knowledge base's fingerprint
READ_KB: Any = object()


def run_stage(sp: SuperPrompt, name: str, cfg: AppConfig, services,
              kb: str | None = READ_KB, checked: bool = False) -> SuperPrompt:
    """Run one stage on a copy of ``sp`` and return the new state. Refused when an earlier
    stage must run first, or when an earlier stage's result is out of date. ``kb``: the
    knowledge base's fingerprint, when the caller has just read it; ``checked``: the caller
    (auto mode) has just found the stages before this one current."""
    st = spec(name)
    required = blocked_by(sp, name)
    if required:
        raise StageOrderError(name, required)
    idx = STAGE_NAMES.index(name)
    if kb is READ_KB:
        kb = staleness.kb_fingerprint(services)
    stale = None if checked else first_stale(sp, cfg, kb)
    if stale is not None and stale.index < idx:
        raise StaleResultError(name, stale.stage, stale.reasons)
    work = sp.working_copy()
    discard_from(work, idx)
    # a stage run by itself right after the one before goes on with that stage's pass: a
    # failed endpoint is not asked again until a call or a check gets an answer
    carried = None if pass_open() or idx != position(sp) + 1 else \
        goes_on(sp._llm_down, getattr(services, "llm", None))
    with telemetry.span(f"ragstream.stage {name}", {"ragstream.stage": name}) as span, \
            one_pass(carried):  # None: the open pass, else a new one
        started = time.perf_counter()
        try:
            work = st.run(work, cfg, services)
        except RagstreamError:
            raise
        except Exception as err:
            raise StageError(name, f"{type(err).__name__}: {err}") from err
        wall_ms = (time.perf_counter() - started) * 1000.0
        work.stage = st.value
        work._llm_down = pass_down()  # the pass's answer does not ask a failed endpoint again
        work.history_of_stages.append(st.recorded)
        work.stage_runs.append(StageRun(stage=name, wall_ms=round(wall_ms, 1), mode=st.mode_of(work)))
        work.computed_from[name] = staleness.inputs_of(name, st.reads, work, cfg, kb, st.uses_llm)
        if work.resume_to is not None and STAGE_NAMES.index(work.resume_to) <= idx:
            work.resume_to = None
        if span.is_recording():
            telemetry.set_attributes(span, stage_attributes(work, st, wall_ms))
    return work


def stage_attributes(sp: SuperPrompt, st: Stage, wall_ms: float) -> dict[str, Any]:
    """A stage's span attributes: its mode and time, and, for a stage that ranks chunks, its
    view's counts by status and by who decided (``decided_by``: the rule, a model, a person)."""
    out: dict[str, Any] = {"ragstream.stage.mode": st.mode_of(sp),
                           "ragstream.stage.wall_ms": round(wall_ms, 1), "ragstream.edits": len(sp.edits)}
    if st.view:
        rows = sp.view(st.view)
        out["ragstream.view.rows"] = len(rows)
        for status in sorted({r.status for r in rows}):
            out[f"ragstream.view.{status}"] = sum(r.status == status for r in rows)
        for who in sorted({r.decided_by for r in rows}):
            out[f"ragstream.decided_by.{who}"] = sum(r.decided_by == who for r in rows)
    return out


def start_index(sp: SuperPrompt, stale: staleness.Stale | None = None) -> int:
    """Where a run goes on from: the first out-of-date stage, else the next one."""
    nxt = position(sp) + 1
    return min(stale.index, nxt) if stale is not None else nxt


def remaining(sp: SuperPrompt, until: str | None = None,
              stale: staleness.Stale | None = None) -> list[str]:
    """The stages auto mode would run next, in order (through ``until`` if given): from the
    first out-of-date stage (``stale``, see ``first_stale``) or the next one."""
    stop = STAGE_NAMES.index(spec(until).name) if until else len(STAGES) - 1
    return STAGE_NAMES[start_index(sp, stale):stop + 1]


def resume_target(sp: SuperPrompt) -> str | None:
    """Where "re-run to where you were" stops: the furthest of the stage reached and the one
    the pass had reached before an edit discarded results (None before any stage ran)."""
    reached = position(sp)
    if sp.resume_to is not None:
        reached = max(reached, STAGE_NAMES.index(sp.resume_to))
    return STAGE_NAMES[reached] if reached >= 0 else None


def run_all(sp: SuperPrompt, cfg: AppConfig, services, until: str | None = None,
            on_stage: Callable[[str, SuperPrompt], None] | None = None,
            before_stage: Callable[[str], None] | None = None) -> SuperPrompt:
    """Auto mode: run every remaining stage in order (through ``until`` if given), starting
    again at the first stage whose result is out of date. ``before_stage(name)`` is called as
    a stage starts, ``on_stage(name, sp)`` with the state after it; when a stage fails, the
    states already passed to ``on_stage`` are complete. The stages are one LLM pass
    (``llm.one_pass``): after the endpoint fails, the later ones run offline at once."""
    kb = staleness.kb_fingerprint(services)
    stale = first_stale(sp, cfg, kb)
    with one_pass():  # after the endpoint fails, the pass's later stages do not call it
        for name in remaining(sp, until, stale):
            if before_stage:
                before_stage(name)
            # the stages before the first out-of-date one are current, and each stage run here
            # is current with the same configuration and knowledge base
            sp = run_stage(sp, name, cfg, services, kb, checked=True)
            if on_stage:
                on_stage(name, sp)
    return sp


# --------------------------------------------------------------------------- edits


def record_edit(sp: SuperPrompt, edit: Edit) -> SuperPrompt:
    """A copy of ``sp`` with ``edit`` in its slot (``edits.merged``) and the results of the
    stage it acts on, and of every later stage, discarded (none when the pass has not reached
    that stage yet); ``resume_to`` keeps how far the pass had got."""
    work = sp.working_copy()
    work.edits = merged(work.edits, edit)
    _discard_for(work, [edit.stage])
    return work


def remove_edits(sp: SuperPrompt, ids: list[int] | None = None) -> SuperPrompt:
    """A copy of ``sp`` without the edits numbered ``ids`` (all of them when None), the
    results of the stages they acted on (and later ones) discarded: those stages' own
    decisions come back when they run again."""
    work = sp.working_copy()
    gone = [e for e in work.edits if ids is None or e.id in ids]
    work.edits = [e for e in work.edits if e not in gone]
    _discard_for(work, [e.stage for e in gone])
    return work


def _discard_for(sp: SuperPrompt, stages: list[str]) -> None:
    if not stages:
        return
    idx = min(STAGE_NAMES.index(s) for s in stages)
    reached = position(sp)
    if reached < idx:
        return
    target = resume_target(sp)
    discard_from(sp, idx)
    sp.resume_to = target
