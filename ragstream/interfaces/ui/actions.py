"""What the page's buttons do. Each action takes the session state, changes it, and turns a
``RagstreamError`` into a message under ``ERROR`` — the SuperPrompt then stays as it was."""

from __future__ import annotations

import datetime as dt
import math
import os
import queue
import re
import shutil
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from pydantic import ValidationError

from ragstream.common.config import AppConfig
from ragstream.common.errors import (
    FileTooLargeError,
    IngestError,
    RagstreamError,
    StaleResultError,
    UploadNameError,
)
from ragstream.interfaces.ui import runs_tab
from ragstream.interfaces.ui import state as S
from ragstream.knowledge.formats import CONVERTED_SUFFIXES
from ragstream.knowledge.ingest.ingestor import decode_text, ingest_path, refused, stored_documents
from ragstream.stages import controller
from ragstream.stages.staleness import Stale, kb_fingerprint
from ragstream.state import edits as edits_of
from ragstream.state.records import Edit, short_text
from ragstream.state.super_prompt import Filters, SuperPrompt, View
from ragstream.workbench.engine import Engine
from ragstream.workbench.replay import Decision, Replayed, ReplayError, call_digest

#: the stage whose result records what it searched (the knowledge base and conversation memory)
RETRIEVAL = "Retrieval"
#: the stage views the Chunk views tab has a table for
VIEW_KEYS = tuple(View.__members__.values())

#: settings a person may change for the session: dotted key -> label
EDITABLE_SETTINGS: dict[str, str] = {
    "limits.N0_QUERY_PIECES": "N0 query pieces",
    "limits.N1_RETR_MAX_CANDIDATES": "N1 retrieval candidates",
    "limits.N2_RERANK_TOP_K": "N2 rerank top-k",
    "limits.N3_FINAL_SELECTION_MAX": "N3 final selection",
    "limits.N4_RECENT_CONV_MAX_PAIRS": "N4 conversation pairs",
    "settings.retrieval.tau": "τ (LogAvgExp)",
    "settings.retrieval.rrf_k": "RRF k",
    "agents.A3_NLI_Gate.min_relevance": "A3 min relevance",
    "agents.A3_NLI_Gate.relative_min": "A3 relative floor",
    "agents.A3_NLI_Gate.duplicate_jaccard": "A3 duplicate Jaccard",
    "agents.A4_Condenser.budget_tokens": "A4 token budget",
}


#: per engine, the configurations made from session overrides, by the overrides: one object per
#: set of overrides, so a page draw validates them once (~3 ms each time otherwise) and the
#: staleness hashes of a configuration are computed once
_SESSION_CFGS: weakref.WeakKeyDictionary[Engine, dict[tuple, AppConfig]] = weakref.WeakKeyDictionary()
_SESSION_CFGS_KEPT = 32


def session_config(engine: Engine, st_state: S.SessionState) -> AppConfig:
    """The configuration with this session's setting overrides applied."""
    overrides = st_state.get(S.OVERRIDES) or {}
    if not overrides:
        return engine.cfg
    made = _SESSION_CFGS.setdefault(engine, {})
    key = tuple(sorted(overrides.items()))
    if key not in made:
        if len(made) >= _SESSION_CFGS_KEPT:
            made.clear()
        made[key] = engine.cfg.with_overrides(overrides)
    return made[key]


#: per engine, the knowledge base's status and the fingerprint it was read at
_STATUS: weakref.WeakKeyDictionary[Engine, tuple[str, dict[str, Any]]] = weakref.WeakKeyDictionary()


def kb_status(engine: Engine) -> dict[str, Any]:
    """``engine.status()`` for the sidebar, read again only when the knowledge base's
    fingerprint has changed (every write renews it, other processes' too): reading every
    document's record takes ~25 ms of each page draw, the fingerprint well under one."""
    fingerprint = kb_fingerprint(engine.services)
    kept = _STATUS.get(engine)
    if fingerprint is not None and kept is not None and kept[0] == fingerprint:
        return kept[1]
    status = engine.status()
    if fingerprint is not None:
        _STATUS[engine] = (fingerprint, status)
    return status


def _fail(st_state: S.SessionState, err: RagstreamError) -> None:
    st_state[S.ERROR] = (err.kind, str(err))


def pending_state(st_state: S.SessionState) -> SuperPrompt:
    """The state the next run starts from: the session's state with the prompt box's text and
    the sidebar's filters (and, when the text is new, the conversation so far: the page's
    named conversation, whose memory Retrieval searches, and its recent turns). What changed
    makes the stages that read it out of date (``staleness``).

    Edits belong to the prompt they were made for: a prompt text other than the shown pass's
    is a new prompt, which starts without that pass's edits (they are offered: ``edits_offer``)
    unless the person chose to apply them to it (``apply_offered_edits``)."""
    sp = st_state[S.SP]
    update: dict[str, Any] = {}
    text = st_state[S.PROMPT]
    if text != sp.user_text:
        update["user_text"] = text
        update["recent_conversation"] = list(st_state.get(S.CONVERSATION) or [])
        update["conversation_name"] = st_state.get(S.CHAT) or ""
        update["own_turn"] = 0  # a new question searches every turn, the last answer's too
        chosen = _carried_to(st_state, text)
        update["edits"] = edits_of.carried([], chosen.edits, chosen.prompt) if chosen else []
    filters = st_state.get(S.FILTERS) or Filters()
    if filters != sp.filters:
        update["filters"] = filters
    return sp.model_copy(update=update) if update else sp


@dataclass(frozen=True)
class EditsOffer:
    """Edits made for another prompt (``prompt``), which the page offers to the prompt in
    the box: applied only when the person says so."""

    prompt: str
    edits: tuple[Edit, ...]

    def title(self, text: str) -> str:
        """"3 edits of the previous prompt — apply them here", said of the prompt in the box
        (``text``); the same text typed again is said so: its edits are not back by themselves."""
        n = len(self.edits)
        what, them = (f"{n} edits", "them") if n != 1 else ("1 edit", "it")
        if self.prompt == text:
            return (f"{what} made the last time this prompt ran — not applied to this pass; "
                    f"apply {them} here")
        return f"{what} of the previous prompt — apply {them} here"


def _choice(st_state: S.SessionState, text: str) -> tuple[str, EditsOffer | None] | None:
    """What the person chose, before prompt ``text`` ran, about the edits offered to it:
    (text, the edits to apply) or (text, None) for "dismiss"; None when they chose nothing."""
    carry = st_state.get(S.EDITS_CARRY)
    return carry if carry and carry[0] == text else None


def _carried_to(st_state: S.SessionState, text: str) -> EditsOffer | None:
    """The edits the person chose to apply to prompt ``text`` when it runs, or None."""
    choice = _choice(st_state, text)
    return choice[1] if choice else None


def edits_offer(st_state: S.SessionState) -> EditsOffer | None:
    """The edits of another prompt the page offers to the prompt in the box, or None: while
    the box holds a new prompt, the shown pass's own edits (else the offer kept when the page
    last left a prompt); once it ran, the offer kept. None once the person applied or
    dismissed them, and when applying them would add nothing."""
    sp, text = st_state[S.SP], st_state[S.PROMPT]
    kept = st_state.get(S.EDITS_OFFER)
    if text != sp.user_text:
        if _choice(st_state, text) is not None:
            return None
        if sp.edits:
            return EditsOffer(sp.user_text, tuple(sp.edits))
    if kept is None:
        return None
    now = sp.edits if text == sp.user_text else []
    return kept if edits_of.carried(now, kept.edits, kept.prompt) else None


def carried_edits(st_state: S.SessionState) -> EditsOffer | None:
    """The edits the person chose to apply to the prompt in the box, before it has run."""
    text = st_state[S.PROMPT]
    return _carried_to(st_state, text) if text != st_state[S.SP].user_text else None


def apply_offered_edits(engine: Engine, st_state: S.SessionState) -> bool:
    """"Apply them here": the offered edits (``edits_offer``) become edits of the prompt in
    the box, each saying which prompt it was made for. Before that prompt has run, they are
    applied when it runs; once it ran, they are recorded now (the stages they act on go out
    of date, and ↻ Re-run applies them)."""
    offer = edits_offer(st_state)
    if offer is None:
        st_state[S.NOTICE] = "No edits of another prompt to apply."
        return False
    n = len(offer.edits)
    what = f"{n} edit{'s' if n != 1 else ''} of “{short_text(offer.prompt, 60)}”"
    text = st_state[S.PROMPT]
    if text != st_state[S.SP].user_text:
        st_state[S.EDITS_CARRY] = (text, offer)
        st_state[S.NOTICE] = f"{what} will apply to this prompt when it runs."
        return True
    source = controller.new_prompt(offer.prompt, edits=list(offer.edits))
    done = _edit(engine, st_state, lambda sp: engine.carry_edits(sp, source),
                 f"Applied here: {what}.")
    if done:
        st_state[S.EDITS_OFFER] = None
    return done


def dismiss_offered_edits(st_state: S.SessionState) -> None:
    """"Dismiss": stop offering the edits (the prompt in the box runs without them, and they
    are not offered after it ran). "Don't apply them", for edits chosen for the prompt in the
    box before it ran: they are offered again instead."""
    text = st_state[S.PROMPT]
    if text == st_state[S.SP].user_text:
        st_state[S.EDITS_OFFER] = None
    elif _carried_to(st_state, text) is not None:
        st_state[S.EDITS_CARRY] = None
    else:
        st_state[S.EDITS_CARRY] = (text, None)
        st_state[S.EDITS_OFFER] = None


def _left(st_state: S.SessionState, left: SuperPrompt, sp: SuperPrompt) -> None:
    """The page ran a new prompt (``sp``) after ``left``'s pass: ``left``'s edits, unless the
    person applied or dismissed them, are kept to be offered; the choice is spent."""
    choice = _choice(st_state, sp.user_text)
    if choice is None and left.edits:
        st_state[S.EDITS_OFFER] = EditsOffer(left.user_text, tuple(left.edits))
    elif choice is not None and (choice[1] is None or st_state.get(S.EDITS_OFFER) == choice[1]):
        st_state[S.EDITS_OFFER] = None
    st_state[S.EDITS_CARRY] = None


def out_of_date(engine: Engine, st_state: S.SessionState) -> Stale | None:
    """The first stage whose result no longer matches what the page would run it with now
    (prompt box, sidebar settings and filters, edits, knowledge base and conversation
    memory), or None."""
    try:
        cfg = session_config(engine, st_state)
    except RagstreamError:
        return None
    return engine.stale(pending_state(st_state), cfg)


def _after_run(st_state: S.SessionState, sp: SuperPrompt) -> None:
    """Keep ``sp``; once the stages an edit discarded have run again, the old ones go. A
    pass of a new prompt leaves the old prompt's edits on offer (``_left``)."""
    left = st_state[S.SP]
    if sp.user_text != left.user_text:
        _left(st_state, left, sp)
    st_state[S.SP] = sp
    if sp.resume_to is None:
        st_state[S.BEFORE_EDITS] = None


def set_filters(st_state: S.SessionState, doc_type: list[str], source: str,
                updated_from: dt.date | None, updated_to: dt.date | None) -> bool:
    """Validate and keep the sidebar's filters (``source``: comma-separated names or path
    patterns); on a bad value set ``ERROR`` and keep the old ones."""
    st_state[S.ERROR] = None
    try:
        st_state[S.FILTERS] = Filters(
            doc_type=tuple(doc_type),
            source=tuple(s.strip() for s in source.split(",") if s.strip()),
            updated_from=updated_from, updated_to=updated_to)
        return True
    except ValidationError as err:
        problems = "; ".join(e["msg"] for e in err.errors())
        st_state[S.ERROR] = ("filters", f"The filters were not changed: {problems}.")
        return False


def filter_choices(engine: Engine) -> dict[str, list[str]]:
    """The document types and declared source names in the knowledge base, for the filter
    widgets; the type ``conversation`` too (the turns of the page's conversation that
    Retrieval searches with the knowledge base: a type filter without it leaves them out)."""
    from ragstream.workbench.conversations import DOC_TYPE

    corpus = engine.services.index()
    return {"doc_type": sorted(set(corpus.values("doc_type")) | {DOC_TYPE}),
            "source": corpus.values("source_name")}


#: (agent, model, seconds waited so far), shown while an agent waits for the model
WaitCallback = Callable[[str, str, float], None]
POLL_S = 0.25


class CallClock:
    """Which agent is waiting for the model and since when; set from the run's thread
    (``backends.llm.watching``), read by the page's thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._call: tuple[str, str, float] | None = None

    def call_started(self, agent: str, model: str) -> None:
        """Note that ``agent`` waits for ``model`` from now."""
        with self._lock:
            self._call = (agent, model, time.monotonic())

    def call_ended(self, agent: str) -> None:
        """Note that the call is over."""
        with self._lock:
            self._call = None

    def waiting(self) -> tuple[str, str, float] | None:
        """(agent, model, seconds) of the call under way, or None."""
        with self._lock:
            if self._call is None:
                return None
            agent, model, since = self._call
            return agent, model, time.monotonic() - since


def _watched(work: Callable[[Callable[[Any], None]], Any], on_event: Callable[[Any], None],
             on_wait: WaitCallback | None) -> Any:
    """Run ``work(emit)`` in a worker thread that makes no Streamlit call: what it ``emit``s is
    handed to ``on_event`` here, and every ``POLL_S`` seconds the model call under way (if any)
    to ``on_wait``. Returns ``work``'s result; re-raises its exception here."""
    from ragstream.backends.llm import watching

    events: queue.SimpleQueue[Any] = queue.SimpleQueue()
    clock = CallClock()
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            with watching(clock):
                outcome["result"] = work(events.put)
        except BaseException as exc:  # handed to the page's thread
            outcome["error"] = exc

    worker = threading.Thread(target=run, name="ragstream-stages", daemon=True)
    worker.start()
    while True:
        alive = worker.is_alive()
        while True:
            try:
                on_event(events.get_nowait())
            except queue.Empty:
                break
        if not alive:
            break
        call = clock.waiting()
        if call is not None and on_wait is not None:
            on_wait(*call)
        worker.join(POLL_S)
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("result")


def _reset_views(st_state: S.SessionState) -> None:
    """Forget the journey's chunk, the diff's stages, the evidence panel's chunk and which
    chunk tables are open: after a run they follow the new state."""
    st_state[S.JOURNEY_CHUNK] = None
    st_state[S.DIFF_A] = None
    st_state[S.DIFF_B] = None
    st_state[S.OPEN_TABLES] = {}  # the chunk tables open on the latest stage's again
    for view in VIEW_KEYS:
        S.forget(st_state, S.table_open(view))
    _reset_evidence(st_state)


def remember_table(st_state: S.SessionState, view: str) -> None:
    """The person opened or closed the chunk table of ``view``: keep it so while its title's
    counts change (an edit, a filter), until the next run."""
    st_state[S.OPEN_TABLES] = {**(st_state.get(S.OPEN_TABLES) or {}),
                               view: bool(st_state.get(S.table_open(view)))}


def _reset_evidence(st_state: S.SessionState) -> None:
    """Forget the evidence panel's chunk and sentence: it opens on the first cited chunk."""
    st_state[S.EVIDENCE_CHUNK] = None
    st_state[S.EVIDENCE_SENTENCE] = None


def run_stage(engine: Engine, st_state: S.SessionState, name: str,
              on_wait: WaitCallback | None = None) -> bool:
    """Run one stage on the pending state (the prompt box's text, the sidebar's filters); on
    failure — an earlier stage must run first, or is out of date — set ``ERROR`` and return
    False. ``on_wait`` hears, while an agent waits for the model, who and how long. The chunk
    journey and the stage diff go back to their defaults (the latest stage's top chunk;
    ReRanker vs A4, or the two latest chunk stages)."""
    st_state[S.ERROR] = None
    _reset_views(st_state)
    started = st_state[S.SP]
    try:
        sp = pending_state(st_state)
        cfg = session_config(engine, st_state)
        _after_run(st_state, _watched(lambda _emit: engine.run_stage(sp, name, cfg),
                                      lambda _event: None, on_wait))
    except RagstreamError as err:
        _fail(st_state, err)
        return False
    runs_tab.record(engine, st_state, started, [name])
    return True


#: what "Run all remaining stages" says when there is nothing to run
NOTHING_TO_RUN = ("Nothing to run: every stage is current and this pass is answered. Change the "
                  "prompt, a setting, a filter or an edit to run again.")


def run_remaining(engine: Engine, st_state: S.SessionState,
                  on_stage: Callable[[int, int, str], None] | None = None,
                  on_wait: WaitCallback | None = None, until: str | None = None) -> bool:
    """Auto mode: every remaining stage of the pending state, from the first one that is out
    of date (through ``until`` if given). Returns True when the pass is then complete and
    waits for its answer; with nothing to run and the pass answered, says so in ``NOTICE``
    and returns False. ``on_stage(done, total, name)`` as each stage starts and ``(total,
    total, "")`` at the end; ``on_wait(agent, model, seconds)`` while an agent waits for the
    model. The chunk journey and the stage diff go back to their defaults."""
    st_state[S.ERROR] = None
    started, finished = st_state[S.SP], []
    try:
        sp = pending_state(st_state)
        cfg = session_config(engine, st_state)
        names = controller.remaining(sp, until, engine.stale(sp, cfg))
        if not names:
            if sp.answer is not None or until is not None:
                st_state[S.NOTICE] = NOTHING_TO_RUN if sp.answer is not None else (
                    f"Nothing to run: the stages through {until} are current.")
                return False
            return True
        _reset_views(st_state)

        def on_event(event: tuple[str, Any]) -> None:
            kind, value = event
            if kind == "starting" and on_stage:
                on_stage(names.index(value), len(names), value)
            elif kind == "finished":
                name, done_sp = value
                _after_run(st_state, done_sp)  # each finished stage is kept, even if a later one fails
                finished.append(name)

        def work(emit: Callable[[Any], None]) -> None:
            engine.run(sp, until=until, cfg=cfg, before_stage=lambda name: emit(("starting", name)),
                       on_stage=lambda name, done_sp: emit(("finished", (name, done_sp))))

        _watched(work, on_event, on_wait)
        if on_stage:
            on_stage(len(names), len(names), "")
        return controller.next_stage(st_state[S.SP]) is None
    except RagstreamError as err:
        _fail(st_state, err)
        return False
    finally:  # the stages that finished are kept as a run, even when a later one failed
        runs_tab.record(engine, st_state, started, finished)


#: "not given: work it out" for the functions that take the page's ``out_of_date`` result
UNKNOWN: Any = object()


def resume_plan(engine: Engine, st_state: S.SessionState,
                stale: Stale | None = UNKNOWN) -> tuple[str, str] | None:
    """(first, last) stage of "re-run to where you were": from the first stage that is out of
    date (``stale``, as ``out_of_date`` gives it) or that an edit discarded, to the furthest
    stage the pass had reached; None when nothing needs re-running."""
    sp = pending_state(st_state)
    if stale is UNKNOWN:
        stale = out_of_date(engine, st_state)
    if stale is None and sp.resume_to is None:
        return None
    target = controller.resume_target(sp)
    start = controller.start_index(sp, stale)
    if target is None or start > controller.STAGE_NAMES.index(target):
        return None
    return controller.STAGE_NAMES[start], target


def resume(engine: Engine, st_state: S.SessionState,
           on_stage: Callable[[int, int, str], None] | None = None,
           on_wait: WaitCallback | None = None) -> bool:
    """Re-run from the first stage that is out of date or that an edit discarded, to where
    the pass had got (see ``resume_plan``)."""
    plan = resume_plan(engine, st_state)
    if plan is None:
        st_state[S.NOTICE] = "Nothing to re-run: every stage shown is current."
        return False
    run_remaining(engine, st_state, on_stage, on_wait, until=plan[1])
    return st_state[S.ERROR] is None


def answer_refusal(engine: Engine, st_state: S.SessionState,
                   stale: Stale | None = UNKNOWN) -> str | None:
    """Why the pass cannot be answered now (not complete, out of date, answered), or None."""
    sp = pending_state(st_state)
    nxt = controller.next_stage(sp)
    if nxt is not None:
        return f"Run every stage first (next: {nxt})."
    if stale is UNKNOWN:
        stale = out_of_date(engine, st_state)
    if stale is not None:
        return f"{stale.describe()}. Run the stages again first."
    if sp.answer is not None:
        return ANSWERED
    return None


#: why a pass is not answered twice
ANSWERED = "This pass is answered. Change the prompt, a setting, a filter or an edit to answer again."


class _Abandoned(BaseException):
    """Raised in the answer's worker thread when nobody reads its pieces any more."""


_DONE = object()  # the worker's last item on the queue
ANSWER_THREAD = "ragstream-answer"  # the worker thread's name


def answer_stream(engine: Engine, st_state: S.SessionState) -> Generator[str, None, None]:
    """Answer the finished super-prompt, yielding its text piece by piece as it streams in;
    then log it and carry the turn into the conversation, or set ``ERROR`` on failure.

    The answer runs in a worker thread (no Streamlit call is made there) whose pieces come
    through a queue. Closing the generator early stops the answer at its next piece and
    waits for the thread; an exception other than a ``RagstreamError`` is re-raised here."""
    st_state[S.ERROR] = None
    try:
        cfg = session_config(engine, st_state)
    except RagstreamError as err:
        _fail(st_state, err)
        return
    sp = st_state[S.SP]
    stale = out_of_date(engine, st_state)  # the prompt box's text and the sidebar count too
    if stale is not None:
        _fail(st_state, StaleResultError("Answer", stale.stage, stale.reasons))
        return
    if sp.answer is not None:
        st_state[S.ERROR] = ("answer refused", ANSWERED)
        return
    pieces: queue.SimpleQueue[object] = queue.SimpleQueue()
    abandoned = threading.Event()
    outcome: dict[str, Any] = {}

    def on_token(piece: str) -> None:
        if abandoned.is_set():
            raise _Abandoned
        pieces.put(piece)

    def work() -> None:
        try:
            outcome["result"] = engine.answer(sp, on_token=on_token, cfg=cfg)
        except BaseException as exc:  # handed to the reading thread
            outcome["error"] = exc
        finally:
            pieces.put(_DONE)

    worker = threading.Thread(target=work, name=ANSWER_THREAD, daemon=True)
    worker.start()
    try:
        while (piece := pieces.get()) is not _DONE:
            yield cast(str, piece)
    finally:
        abandoned.set()
        worker.join()
    failure = outcome.get("error")
    if isinstance(failure, RagstreamError):
        _fail(st_state, failure)
        return
    if failure is not None:
        raise failure
    done_sp, ans = outcome["result"]
    st_state[S.SP] = done_sp  # current: it searched the turns before its own (sp.own_turn)
    runs_tab.record(engine, st_state, sp, [])
    _reset_evidence(st_state)  # the answer's first cited chunk, now there is an answer
    _carry_turn(engine, st_state, st_state[S.SP], ans, cfg)


def _carry_turn(engine: Engine, st_state: S.SessionState, sp: SuperPrompt, ans: Any,
                cfg: AppConfig) -> None:
    """Carry the answered turn into the next prompt: its conversation's last N4 turns as kept
    (with their numbers, so that one can be forgotten), or, when the turn was not kept, the
    pass's turns and this one."""
    turn = sp.extras.turn
    st_state[S.CHAT_LIST] = None  # the list counts this turn
    if turn is None or turn.error or not turn.turn:
        st_state[S.CONVERSATION] = engine.conversation_after(sp, ans, cfg)
        return
    try:
        st_state[S.CONVERSATION] = engine.conversations().recent(
            turn.conversation, cfg.limits.N4_RECENT_CONV_MAX_PAIRS)
    except RagstreamError as err:
        st_state[S.CONVERSATION] = engine.conversation_after(sp, ans, cfg)
        st_state[S.NOTICE] = f"The conversation could not be read again: {err}"


def conversation_block(engine: Engine, st_state: S.SessionState) -> tuple[str, int]:
    """The turns the next prompt's Recent conversation block will hold, as Prompt_Builder renders
    them (the earlier answers without their [n] markers; the block's heading left to the page),
    and how many they are (the last N4)."""
    from ragstream.state.render import CONVERSATION_HEADING, render_conversation

    n4 = session_config(engine, st_state).limits.N4_RECENT_CONV_MAX_PAIRS
    turns = st_state[S.CONVERSATION]
    block = render_conversation(turns, n4).removeprefix(CONVERSATION_HEADING).strip()
    return block, min(len(turns), max(n4, 0))


def apply_settings(engine: Engine, st_state: S.SessionState, values: dict[str, Any]) -> bool:
    """Validate ``values`` (dotted key -> value) with the config rules; keep them if valid."""
    st_state[S.ERROR] = None
    changed = {k: v for k, v in values.items() if engine.cfg.get(k) != v}
    try:
        engine.cfg.with_overrides(changed)
    except RagstreamError as err:
        _fail(st_state, err)
        return False
    st_state[S.OVERRIDES] = changed
    st_state[S.NOTICE] = (f"Session settings applied ({len(changed)} changed)." if changed
                          else "Settings match the configuration files.")
    return True


def reset_settings(st_state: S.SessionState) -> None:
    """Drop the session's setting overrides, so the configuration files apply again."""
    st_state[S.OVERRIDES] = {}
    st_state[S.ERROR] = None
    st_state[S.NOTICE] = "Settings reset to the configuration files."


#: characters that separate folders in an uploaded name, from any system
_PATH_SEPARATORS = re.compile(r"[\\/]")
#: longest file name (in UTF-8 bytes) most file systems take
MAX_NAME_BYTES = 255


def upload_types(engine: Engine) -> list[str]:
    """The file types the page's uploader accepts: exactly the ones ingestion reads."""
    return sorted({e.lower().lstrip(".") for e in engine.cfg.settings.chunking.extensions})


def upload_limit_mb(engine: Engine, server_limit_mb: int) -> int:
    """The uploader's per-file limit in whole MB (its ``max_upload_size``, which it shows as
    "Limit N MB per file" and holds a larger file back with): ``ingestion.max_file_mb`` rounded
    up, never over the server's own limit (``server.maxUploadSize``, ``server_limit_mb``). A
    file between a fractional limit and the whole MB is refused by ingestion, named in the
    report."""
    limit = math.ceil(engine.cfg.settings.ingestion.max_file_mb)
    return max(1, min(limit, server_limit_mb)) if server_limit_mb > 0 else max(1, limit)


def upload_help(engine: Engine) -> str:
    """The uploader's help: what it takes, the real size limit, and what happens on choosing."""
    mb = engine.cfg.settings.ingestion.max_file_mb
    return (f"Markdown, text, PDF, Word (.docx), PowerPoint (.pptx), HTML and EPUB, up to {mb:g} MB "
            f"each (ingestion.max_file_mb). Chosen files are ingested at once; a refused file is "
            f"not kept in the knowledge base's folder, and the report below says why. The list "
            f"shows what was chosen: taking a file off it leaves the knowledge base as it is.")


def upload_name(name: str, allowed: set[str]) -> str:
    """The file name an upload is saved under: its last path part (``../``, absolute and
    Windows paths lose their folders), without control characters or leading dots (a hidden
    file would never be ingested). ``UploadNameError`` when nothing usable remains, the name is
    too long, or its type is not ingestible."""
    base = _PATH_SEPARATORS.split(name)[-1]
    base = "".join(ch for ch in base if ch.isprintable()).strip().lstrip(".").strip()
    if not base:
        raise UploadNameError(f"{name!r}: no file name is left once its folders are removed; "
                              f"upload a file with a plain name such as 'notes.md'.")
    if len(base.encode("utf-8")) > MAX_NAME_BYTES:
        raise UploadNameError(f"{base[:40]}…: the file name is longer than {MAX_NAME_BYTES} "
                              f"bytes; rename the file and upload it again.")
    if Path(base).suffix.lower() not in allowed:
        raise UploadNameError(f"{base} is not one of the ingestible types "
                              f"({', '.join(sorted(allowed))}).")
    return base


def _save_inside(folder: Path, name: str, data: bytes) -> None:
    """Write ``data`` as ``folder/name``, never outside ``folder``: the path is checked after
    resolving, and the file is written beside it and renamed over it (so a symbolic link of
    that name is replaced, never written through)."""
    root = folder.resolve()
    target = root / name
    if target.parent != root or target.name != name:
        raise UploadNameError(f"{name!r} would be saved outside {root}; upload it under a plain "
                              f"file name.")
    tmp = root / f".upload-{uuid.uuid4().hex}.part"  # hidden: an ingest never reads it
    try:
        tmp.write_bytes(data)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def _keep_previous(folder: Path, name: str) -> Path | None:
    """A hidden copy (a second link, or a copy where links are not possible) of the file an
    upload is about to replace, to put back if the upload is refused; None when there is none."""
    target = folder / name
    if not (target.exists() or target.is_symlink()):
        return None
    kept = folder / f".upload-kept-{uuid.uuid4().hex}"  # hidden: an ingest never reads it
    try:
        os.link(target, kept, follow_symlinks=False)
    except OSError:
        shutil.copy2(target, kept, follow_symlinks=False)
    return kept


#: what became of one upload (the report's ``files``: name, outcome, reason)
INGESTED, UNCHANGED, REFUSED = "ingested", "unchanged", "refused"
#: what the report's line for an unchanged upload says
UNCHANGED_REASON = "already in the knowledge base, unchanged: nothing to do"
#: an error class's name at the start of a report line (``UnsupportedFormatError: …``)
_ERROR_TYPE = re.compile(r"^([A-Z]\w*Error): ")


def _reason(line: str, name: str) -> str:
    """The reason in a report line about ``name``, for a person: without the error's class name
    and without ``name`` repeated at its start (``photo.pdf: it is an image, not a PDF…`` →
    ``it is an image, not a PDF…``)."""
    def unnamed(text: str) -> str:
        for prefix in (f"{name}: ", f"{name!r}: "):
            if text.startswith(prefix):
                return text[len(prefix):]
        return text

    return unnamed(_ERROR_TYPE.sub("", unnamed(line), count=1))


def _file_row(name: str, outcome: str, reason: str = "") -> dict[str, str]:
    return {"name": name, "outcome": outcome, "reason": reason}


def _handled_uploads(st_state: S.SessionState) -> list[str]:
    """The uploader's file ids already ingested (or refused): those of the last upload report."""
    report = st_state.get(S.INGEST_REPORT)
    return list(report.get("upload_ids", ())) if report and report.get("kind") == "upload" else []


def new_uploads(st_state: S.SessionState, uploads: list[Any] | None) -> list[Any]:
    """The uploader's files (Streamlit's ``UploadedFile``: ``file_id``, ``name``,
    ``getvalue()``) not ingested yet. The uploader keeps what was chosen, beside any file the
    browser held back itself (over the size limit, said beside the file), so that nothing
    chosen disappears unexplained; a page draw ingests only what was added since. (Its key
    names the knowledge base, and a folder ingest empties it: the ids are those of the last
    upload report.)"""
    handled = set(_handled_uploads(st_state))
    return [f for f in uploads or [] if f.file_id not in handled]


def ingest_uploads(engine: Engine, st_state: S.SessionState, files: list[tuple[str, bytes]],
                   progress: Callable[[int, int, str], None] | None = None,
                   ids: Sequence[str] = ()) -> bool:
    """Save uploaded (name, bytes) pairs in the uploads folder (the selected knowledge base's
    folder) and ingest them, and only them; keep the report under ``INGEST_REPORT`` with what
    became of each file (``files``: ingested, unchanged or refused, with the reason) and the
    uploader's ids of the files handled so far (``upload_ids``: ``ids`` are these files').

    Each name is reduced to a plain file name (``upload_name``; a changed name is reported in
    the warnings). An upload that is refused — a name that cannot be used, a type that is not
    ingested, two uploads with one name, over ``ingestion.max_file_mb``, binary or not UTF-8 —
    is not saved; one refused by ingestion (empty, damaged, not what its name says, no text…)
    is removed again. Either way nothing of the person's is lost: a file of that name the
    folder held before is put back as it was (and its ingested version kept). Returns False
    when nothing went in: every upload refused, or the ingestion itself failed (the folder is
    then left as it was); ``ERROR`` says why too."""
    st_state[S.ERROR] = None
    if not files:
        _fail(st_state, IngestError("No files were uploaded. Choose files first (Markdown, text, PDF, "
                                    "Word, PowerPoint, HTML or EPUB)."))
        return False
    handled = _handled_uploads(st_state) + [i for i in ids if i]
    folder = engine.cfg.uploads_dir
    allowed = {e.lower() for e in engine.cfg.settings.chunking.extensions}
    limits = engine.cfg.settings.ingestion
    accepted: dict[str, bytes] = {}
    rows: list[dict[str, str]] = []  # one per upload, in the order given
    errors: list[str] = []
    warnings: list[str] = []
    for name, data in files:
        safe = name
        try:
            safe = upload_name(name, allowed)
            if safe in accepted:
                raise UploadNameError(f"{safe}: another upload in this batch has the same file "
                                      f"name; rename one of them and upload it again.")
            if len(data) > limits.max_file_bytes:
                raise FileTooLargeError(len(data), limits.max_file_mb)
            if Path(safe).suffix.lower() not in CONVERTED_SUFFIXES:  # converted ones: at ingestion
                decode_text(data)
        except IngestError as err:
            line = err.args[0] if isinstance(err, UploadNameError) else refused(safe, err)
            errors.append(line)
            rows.append(_file_row(safe, REFUSED, _reason(line, safe)))
            continue
        if safe != name:
            warnings.append(f"{name!r} was saved as {safe!r}: an upload keeps only its file name")
        accepted[safe] = data
        rows.append(_file_row(safe, INGESTED))
    report = None
    root = folder.resolve().name  # the uploads' ids: "<folder name>/<file name>"
    try:
        if accepted:
            folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        failure: RagstreamError | None = IngestError(
            f"The uploads folder {folder} cannot be made ({err.strerror}); check "
            f"paths.uploads_dir in config/settings.json.")
    else:
        failure = None
        kept: dict[str, Path | None] = {}  # saved upload -> the file of its name, kept aside
        for safe, data in list(accepted.items()):
            try:
                kept[safe] = _keep_previous(folder, safe)
                _save_inside(folder, safe, data)
            except (OSError, UploadNameError) as err:
                line = (f"{safe}: could not be saved in {folder} ({err}); check the folder "
                        f"(paths.uploads_dir) and upload it again")
                errors.append(line)
                _put_back(folder, safe, kept.pop(safe, None), saved=False)
                del accepted[safe]
                _set_row(rows, safe, REFUSED, _reason(line, safe))
        store = engine.services.store
        try:
            if accepted:
                ids = [f"{root}/{safe}" for safe in accepted]
                before = {i: d.doc_hash for i, d in stored_documents(store, ids=ids).items()}
                report = ingest_path(folder, engine.cfg, engine.services, prune=False,
                                     progress=progress, only=list(accepted))
                after = {i: d.doc_hash for i, d in stored_documents(store, ids=ids).items()}
        except RagstreamError as err:
            for safe in accepted:
                _put_back(folder, safe, kept.get(safe))
            failure = err
    if failure is not None:  # nothing went in: every file chosen is named with why
        for safe in accepted:
            _set_row(rows, safe, REFUSED, f"not ingested: {failure}")
        errors.append(str(failure))
    elif report is not None:
        ingest_errors: list[str] = []
        put_back: list[str] = []
        for safe in accepted:
            doc_id = f"{root}/{safe}"
            said = [e for e in report.errors if e.startswith(f"{doc_id}: ")]
            if said or doc_id not in after:
                note = next((w for w in report.warnings if w.startswith(f"{doc_id}: ")), "")
                line = said[0] if said else (note or f"{doc_id}: nothing was stored")
                ingest_errors.append(line)
                _set_row(rows, safe, REFUSED, _reason(line[len(doc_id) + 2:], safe))
                if _put_back(folder, safe, kept.get(safe)):
                    put_back.append(safe)
            else:
                unchanged = before.get(doc_id) == after[doc_id]
                _set_row(rows, safe, UNCHANGED if unchanged else INGESTED,
                         UNCHANGED_REASON if unchanged else "")
                previous = kept.get(safe)
                if previous is not None:  # the upload replaced it for good
                    previous.unlink(missing_ok=True)
        gone = [s for s in put_back if f"{root}/{s}" not in after]
        if gone:  # a refused upload took its predecessor's chunks (an empty one): bring them back
            try:
                ingest_path(folder, engine.cfg, engine.services, prune=False, only=gone)
            except RagstreamError as err:
                warnings.append(f"{', '.join(gone)}: put back in the folder, but not ingested "
                                f"again ({err}); ingest the folder to bring them back")
        refused_ids = {e.split(": ", 1)[0] for e in ingest_errors}
        errors += ingest_errors
        warnings += [w for w in report.warnings if w.split(": ", 1)[0] not in refused_ids]
    outcomes = [r["outcome"] for r in rows]
    summary: dict[str, Any] = {
        "kind": "upload",
        "root": str(folder),
        "files_seen": len(rows),
        "processed": outcomes.count(INGESTED),
        "skipped": outcomes.count(UNCHANGED),
        "failed": outcomes.count(REFUSED),
        "deleted": 0,  # an upload never deletes: a refused one puts back what it replaced
        "chunks_written": report.chunks_written if report else 0,
        "windows_written": report.windows_written if report else 0,
        "errors": errors,
        "warnings": warnings,
        "duration_s": report.duration_s if report else 0.0,
        "files": rows,
        "upload_ids": handled,
    }
    st_state[S.INGEST_REPORT] = summary
    if failure is not None:
        _fail(st_state, failure)
        return False
    if summary["processed"] + summary["skipped"] == 0:
        _fail(st_state, IngestError(" ".join(errors)))
        return False
    return True


def _set_row(rows: list[dict[str, str]], name: str, outcome: str, reason: str) -> None:
    """Record what became of the upload saved as ``name``."""
    for row in rows:
        if row["name"] == name and row["outcome"] != REFUSED:
            row.update(outcome=outcome, reason=reason)
            return


def _put_back(folder: Path, name: str, kept: Path | None, saved: bool = True) -> bool:
    """Undo the upload saved as ``folder/name``: the file it replaced (kept aside as ``kept``)
    goes back, or, when there was none, the upload is removed. True when a file was put back."""
    target = folder / name
    if kept is not None:
        os.replace(kept, target)
        return True
    if saved:
        target.unlink(missing_ok=True)
    return False


def ingest_folder(engine: Engine, st_state: S.SessionState, folder: str | Path,
                  prune: bool | None = None,
                  progress: Callable[[int, int, str], None] | None = None) -> bool:
    """Ingest the files in ``folder`` and keep the report; on failure set ``ERROR`` and return
    False. The uploader starts afresh either way (its files were handled under the upload
    report this one replaces)."""
    st_state[S.ERROR] = None
    st_state[S.UPLOAD_NONCE] = (st_state.get(S.UPLOAD_NONCE) or 0) + 1
    if isinstance(folder, str) and not folder.strip():
        _fail(st_state, IngestError("No folder given: type the path of a folder on this machine in "
                                    "the box above the button. (Files chosen in \"Add documents\" "
                                    "are ingested as soon as they are chosen.)"))
        return False
    try:
        report = engine.ingest(folder, prune=prune, progress=progress)
    except RagstreamError as err:
        _fail(st_state, err)
        return False
    st_state[S.INGEST_REPORT] = {"kind": "folder", **report.model_dump()}
    return True


@dataclass(frozen=True)
class IngestSummary:
    """How the sidebar shows the last ingest: ``kind`` (``upload``, shown under the uploader, or
    ``folder``, under the folder's button), ``level`` (``error`` when a file failed, ``warning``
    when one was skipped or gave nothing to store, else ``success``), a headline, one line per
    refused or skipped file with what is wrong with it, what to do about them (each piece of
    advice once, however many files it concerns), and the warnings."""

    kind: str
    level: str
    headline: str
    lines: list[str]
    advice: list[str]
    warnings: list[str]

    @property
    def text(self) -> str:
        """The headline, the files' lines and the advice, as Markdown for one message box."""
        parts = [self.headline]
        if self.lines:
            parts.append("\n".join(f"- {line}" for line in self.lines))
        return "\n\n".join(parts + self.advice)


def _plural(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


#: a reason's first sentence (what is wrong) and the rest (what to do about it)
_WHAT_THEN_TODO = re.compile(r"^(.+?\.)\s+([A-Z].*)$", re.S)


def _file_lines(named: list[tuple[str, str]]) -> tuple[list[str], list[str]]:
    """``(name, reason)`` pairs as the report's lines (`` `name` — what is wrong``) and the
    advice their reasons give, each once, in order (the narrow sidebar would repeat the same
    paragraph for every refused file otherwise)."""
    lines: list[str] = []
    advice: list[str] = []
    for name, reason in named:
        split = _WHAT_THEN_TODO.match(reason)
        what, todo = (split[1], split[2]) if split else (reason, "")
        lines.append(f"`{name}` — {what}")
        if todo and todo not in advice:
            advice.append(todo)
    return lines, advice


def ingest_summary(report: dict[str, Any] | None) -> IngestSummary | None:
    """What the sidebar says about ``report`` (``INGEST_REPORT``), or None when there is none."""
    if not report:
        return None
    if report.get("kind") == "upload":
        rows = report["files"]
        bad = [r for r in rows if r["outcome"] == REFUSED]
        same = [r for r in rows if r["outcome"] == UNCHANGED]
        said = [f"{report['processed']} ingested ({_plural(report['chunks_written'], 'chunk')})"]
        said += [f"{len(same)} skipped (unchanged)"] if same else []
        said += [f"{len(bad)} refused and not kept"] if bad else []
        headline = f"{_plural(len(rows), 'file')} chosen: {', '.join(said)}."
        lines, advice = _file_lines([(r["name"], r["reason"]) for r in bad + same])
        level = "error" if bad else "warning" if same else "success"
        return IngestSummary("upload", level, headline, lines, advice, list(report["warnings"]))
    not_stored = [w for w in report["warnings"] if "nothing stored" in w]
    headline = (f"Ingested: {report['processed']} processed, {report['skipped']} skipped "
                f"(unchanged), {report['failed']} failed, {report['deleted']} deleted, "
                f"{report['chunks_written']} chunks.")
    level = ("error" if report["failed"] else
             "warning" if report["skipped"] or not_stored else "success")
    named = []
    for line in list(report["errors"]) + not_stored:
        doc_id, _, rest = line.partition(": ")
        named.append((doc_id, _reason(rest, doc_id.rsplit("/", 1)[-1])))
    lines, advice = _file_lines(named)
    others = [w for w in report["warnings"] if w not in not_stored]
    return IngestSummary("folder", level, headline, lines, advice, others)


def run_eval(engine: Engine, st_state: S.SessionState, path: str, limit: int | None,
             progress: Callable[[str, int, int], None] | None = None) -> bool:
    """Run the Eval tab's question set with the files' settings and the session's (when they
    differ) and keep the outcome in ``EVAL_RESULT`` — or ``{"error": (kind, message)}``: a bad
    question file names its problem, and the page goes on."""
    from ragstream.backends.services import build_services
    from ragstream.interfaces.ui import eval_tab

    def services_for(cfg: AppConfig):
        services = build_services(cfg)
        services.embedder = engine.services.embedder  # the model already loaded
        return services

    try:
        st_state[S.EVAL_RESULT] = eval_tab.run(
            path, engine.cfg, session_config(engine, st_state), st_state.get(S.OVERRIDES) or {},
            limit, services_for, progress)
    except RagstreamError as err:
        st_state[S.EVAL_RESULT] = {"error": (err.kind, str(err))}
        return False
    return True


# --------------------------------------------------------------------------- edits


def _edit(engine: Engine, st_state: S.SessionState, change: Callable[[SuperPrompt], SuperPrompt],
          notice: str) -> bool:
    """Apply ``change`` (one or more of the engine's edit calls) to the session's state. The
    stages an edit discards are shown as they were, marked out of date, until they run again
    (``BEFORE_EDITS``); a refused edit sets ``ERROR`` and changes nothing. Either way the
    editable tables start afresh from the state."""
    st_state[S.ERROR] = None
    sp = st_state[S.SP]
    st_state[S.EDIT_NONCE] = (st_state.get(S.EDIT_NONCE) or 0) + 1
    try:
        new = change(sp)
    except RagstreamError as err:
        _fail(st_state, err)
        return False
    if controller.position(new) < controller.position(sp) and st_state.get(S.BEFORE_EDITS) is None:
        st_state[S.BEFORE_EDITS] = sp
    st_state[S.SP] = new
    plan = resume_plan(engine, st_state)
    if st_state[S.PROMPT] != new.user_text:  # the box holds a new prompt: not this edit's
        notice += (" It is an edit of the shown pass's prompt; the prompt in the box is a new "
                   "one, which starts without it (apply it there with “Apply them here”).")
    elif plan:
        notice += f" Re-run {plan[0]} → {plan[1]} to apply it."
    st_state[S.NOTICE] = notice
    runs_tab.keep_draft(engine, st_state)  # a reload brings the edits back
    return True


def seen_state(st_state: S.SessionState) -> SuperPrompt:
    """The state the person is looking at: the one before the edits that discarded results,
    while those results are shown."""
    return st_state.get(S.BEFORE_EDITS) or st_state[S.SP]


def change_chunks(engine: Engine, st_state: S.SessionState, changes: list) -> bool:
    """Apply the chunk tables' changes (``editing.ChunkChange``: pin, unpin, exclude, include)."""
    if not changes:
        return False

    seen = seen_state(st_state)  # where each chunk stood, though an earlier edit discarded it

    def change(sp: SuperPrompt) -> SuperPrompt:
        for c in changes:
            if c.action in ("pin", "exclude"):
                sp = (engine.pin if c.action == "pin" else engine.exclude)(sp, c.chunk_id,
                                                                           seen=seen)
            else:
                gone = [e.id for e in sp.edits if e.kind in ("pin", "add", "exclude", "drop")
                        and e.target == c.chunk_id]
                sp = engine.undo_edits(sp, gone) if gone else sp
        return sp

    said = ", ".join(f"{c.action} {c.chunk_id}" for c in changes)
    return _edit(engine, st_state, change, f"Recorded: {said}.")


def chunk_action(engine: Engine, st_state: S.SessionState, chunk_id: str, action: str) -> bool:
    """Pin, exclude, add (pinned) or clear the person's decision on one chunk."""
    if action == "add":
        seen = seen_state(st_state)
        return _edit(engine, st_state, lambda sp: engine.add_chunk(sp, chunk_id, seen=seen),
                     f"Added {chunk_id}, pinned.")
    from ragstream.interfaces.ui.editing import ChunkChange

    return change_chunks(engine, st_state, [ChunkChange(chunk_id, action)])


def set_fields(engine: Engine, st_state: S.SessionState, values: dict[str, str]) -> bool:
    """Set the body fields whose value differs from the state's (the fields table)."""
    sp = st_state[S.SP]
    changed = {k: v for k, v in values.items() if (v or "") != sp.body.get(k, "")}
    if not changed:
        st_state[S.EDIT_NONCE] = (st_state.get(S.EDIT_NONCE) or 0) + 1
        return False
    cfg = session_config(engine, st_state)

    def change(state: SuperPrompt) -> SuperPrompt:
        for name, value in changed.items():
            state = engine.set_field(state, name, value, cfg)
        return state

    said = ", ".join(f"{k} = {v!r}" for k, v in changed.items())
    return _edit(engine, st_state, change, f"Set by you: {said}.")


def item_action(engine: Engine, st_state: S.SessionState, what: str, action: str, key: str,
                value: str | int | None = None) -> bool:
    """Edit a statement of A4's context or a rule of A5 (``what``: "statement" / "rule";
    ``action``: "text", "remove", "move" to place ``value``, or "add": a rule, or a note of
    the person's own in A4's context)."""
    seen = seen_state(st_state)
    if what == "rule" and action == "add":
        return _edit(engine, st_state, lambda sp: engine.add_rule(sp, str(value or "")),
                     "Rule added.")
    if what == "statement" and action == "add":  # the person's note: theirs, never cited
        return _edit(engine, st_state, lambda sp: engine.add_note(sp, str(value or "")),
                     "Note added (yours: listed under “Your notes”, never cited).")
    calls: dict[str, Callable[..., SuperPrompt]] = {
        "statement text": engine.edit_statement, "statement remove": engine.remove_statement,
        "statement move": engine.move_statement, "rule text": engine.edit_rule,
        "rule remove": engine.remove_rule, "rule move": engine.move_rule}
    call = calls[f"{what} {action}"]
    args = (key,) if action == "remove" else (key, value)
    word = {"text": "rewritten", "remove": "removed", "move": f"moved to place {value}"}[action]
    return _edit(engine, st_state, lambda sp: call(sp, *args, seen=seen),
                 f"{what.capitalize()} {word}.")


def undo_edit(engine: Engine, st_state: S.SessionState, edit_id: int | None = None) -> bool:
    """Undo one edit, or every edit ("Clear edits"): the stages they acted on decide by
    themselves again when they run."""
    sp = st_state[S.SP]
    if not sp.edits:
        return False
    ids = None if edit_id is None else [edit_id]
    said = "Edits cleared: the stages decide by themselves again." if ids is None else \
        f"Edit {edit_id} undone."
    return _edit(engine, st_state, lambda state: engine.undo_edits(state, ids), said)


def find_chunks(engine: Engine, text: str, limit: int = 12) -> list[tuple[Any, str]]:
    """The knowledge base's chunks that hold ``text`` (then its best keyword matches)."""
    return engine.find_chunks(text, limit) if text.strip() else []


# --------------------------------------------------------------------------- replay (the Agents tab)


@dataclass(frozen=True)
class ShownReplay:
    """The Agents tab's last replay: which call (agent, index, and its digest, so that a call
    the stage made anew does not show another's replay), the replayed call and its decision."""

    agent: str
    index: int
    digest: str
    replayed: Replayed
    decision: Decision


def replay_send(engine: Engine, st_state: S.SessionState, agent: str, index: int) -> bool:
    """Send call ``index`` of ``agent`` again with the messages as the tab's text boxes hold
    them, and keep the reply and the decision it would make (``REPLAY``). No endpoint, or a
    call the stage would not make now, sets ``ERROR``; the endpoint's own failure is shown as
    the reply's error."""
    from ragstream.interfaces.ui import inspector

    st_state[S.ERROR] = None
    sp = st_state[S.SP]
    calls = sp.extras.llm_calls.get(agent, [])
    try:
        cfg = session_config(engine, st_state)
        if not 0 <= index < len(calls):
            raise ReplayError(f"{agent} has no call {index + 1} in this pass any more: pick one "
                              f"of its calls.")
        call = calls[index]
        texts = [st_state.get(f.key) if st_state.get(f.key) is not None else f.text
                 for f in inspector.replay_fields(sp, agent, index)]
        replayed = engine.replay(sp, agent, index, texts, cfg)
        decision = engine.replay_decision(sp, replayed, cfg)
    except RagstreamError as err:
        _fail(st_state, err)
        return False
    st_state[S.REPLAY] = ShownReplay(agent, index, call_digest(call), replayed, decision)
    return True


def shown_replay(st_state: S.SessionState, agent: str, index: int) -> ShownReplay | None:
    """The kept replay of call ``index`` of ``agent``, while that call is the one in the state."""
    shown = st_state.get(S.REPLAY)
    if not isinstance(shown, ShownReplay) or (shown.agent, shown.index) != (agent, index):
        return None
    calls = st_state[S.SP].extras.llm_calls.get(agent, [])
    if index >= len(calls) or call_digest(calls[index]) != shown.digest:
        return None
    return shown


def replay_apply(engine: Engine, st_state: S.SessionState) -> bool:
    """Record the kept replay's decision as the person's edits of its stage (weighed again
    against the state as it is now); its stage and the later ones go out of date, and the
    page's banner and ↻ Re-run take over. The replay is then forgotten."""
    shown = st_state.get(S.REPLAY)
    if not isinstance(shown, ShownReplay):
        st_state[S.NOTICE] = "Nothing to apply: send a call again first."
        return False
    cfg = session_config(engine, st_state)
    n = len(shown.decision.proposals)
    done = _edit(engine, st_state, lambda sp: engine.apply_replay(sp, shown.replayed, cfg),
                 f"Applied to {shown.agent}: {n} edit{'s' if n != 1 else ''} recorded as yours.")
    if done:
        st_state[S.REPLAY] = None
    return done
