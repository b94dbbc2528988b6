"""What the page's buttons do. Each action takes the session state, changes it, and turns a
``RagstreamError`` into a message under ``ERROR`` — the SuperPrompt then stays as it was."""


from __future__ import annotations

import datetime as dt
import queue
import threading
import time
import weakref
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, cast

from pydantic import ValidationError

from ragstream.common.config import AppConfig
from ragstream.common.errors import (
    RagstreamError,
    StaleResultError,
)
from ragstream.interfaces.ui import runs_tab
from ragstream.interfaces.ui import state as S
from ragstream.stages import controller
from ragstream.stages.staleness import Stale, kb_fingerprint
from ragstream.state import edits as edits_of
from ragstream.state.records import Edit, short_text
from ragstream.state.super_prompt import Filters, SuperPrompt, View
from ragstream.workbench.engine import Engine

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


def fail(st_state: S.SessionState, err: RagstreamError) -> None:
    """Put ``err`` under ``ERROR``: the page names it at its top, and goes on."""
    st_state[S.ERROR] = (err.kind, str(err))


def edit(engine: Engine, st_state: S.SessionState, change: Callable[[SuperPrompt], SuperPrompt],
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
        fail(st_state, err)
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
    done = edit(engine, st_state, lambda sp: engine.carry_edits(sp, source),
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
        fail(st_state, err)
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
        fail(st_state, err)
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
        fail(st_state, err)
        return
    sp = st_state[S.SP]
    stale = out_of_date(engine, st_state)  # the prompt box's text and the sidebar count too
    if stale is not None:
        fail(st_state, StaleResultError("Answer", stale.stage, stale.reasons))
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
        fail(st_state, failure)
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
        fail(st_state, err)
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
