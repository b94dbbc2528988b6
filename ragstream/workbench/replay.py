"""Replay one of an agent's model calls with edited messages, and apply what it would decide.

The Agents tab (and ``Engine.replay`` / ``Engine.apply_replay``) lets a person take a call an
agent made in this pass (``sp.extras.llm_calls[agent][i]``), edit any of its messages and send
them again to the endpoint, exactly as the agent would: ``form_of`` runs the agent's stage once
more on a copy of the state, answering its calls from the record, and notes how the stage makes
that call — the reply model and JSON schema (bounded as the stage bounds them for that call),
the model, temperature and reply budget, whether it asks for token log-probabilities, or, for
A3's yes/no judgment, the answers read from one token (``LLMClient.judge``). ``send`` sends the
edited messages that way (within the agent's prompt budget) and returns a ``Replayed``: the
reply as it came, the parsed reply or the error, and the probabilities. An endpoint's error is
in the result, not raised.

``Replayed.decision(sp, cfg, services)`` is what the stage would decide with that reply in place
of the one it got: the stage runs again on a copy of the state, the replayed call answered with
the new reply and its other calls with their recorded replies, so its own rules, weighing and
thresholds decide (A3's ``combine`` with protect_top_k, weak_relative, llm_drop_max and
llm_rescue_min; A2's and A5's ``choice_margin``; A4's rule share), and the person's edits apply
as in every run. The difference to the stage's current result, as the person's edits that make
it so (``Proposal``, each with a line for people), and what cannot be applied and why:

* **A2** — a ``field`` edit for each field (system, audience, tone, depth, confidence) whose
  value would change: ``A2: tone formal → neutral``.
* **A3** — per chunk whose verdict would change: a chunk the gate would now keep but drops
  becomes a ``pin``, one it would drop but keeps a ``drop`` (an edit A3 applies: "dropped by
  you"): ``A3: keep kb/x.md#3 (P(relevant) 0.93 ≥ llm_rescue_min 0.9; now dropped)``. A chunk
  the person pinned or dropped keeps that decision.
* **A4** — statements the condensed context would no longer have become ``statement_remove``
  edits, its new order ``statement_move`` edits. A sentence the reply would *add* cannot be
  applied — an edit can remove or move A4's statements, not add a sentence — and the decision
  says so.
* **A5** — hard rules it would drop become ``rule_remove`` edits, rules it would add
  ``rule_add``. The kind, languages and lengths cannot be applied (edits change A5's hard rules
  only) and are listed as such.
* **A0** (the semantic fallback) — each body field whose value would change becomes a
  ``field`` edit where the field's checks allow it (a field the prompt must have cannot be
  emptied; an A2 field takes only its listed values); a label's place among the unknown
  attributes cannot be applied.

When the stage would not use the reply (it would fall back to its rules, or would now make
other calls than the recorded ones because the state changed since), or its result is out of
date (``staleness``: a decision then would mix in what changed), nothing is proposed and
``why_not`` says why.

``apply(engine, sp, decision)`` records the proposals through the engine's edit calls
(``Engine.set_field``, ``pin``, ``drop``, ``remove_statement``, ``move_statement``,
``add_rule``, ``remove_rule``): they are the person's edits (source "you"), kept in
``sp.edits`` and exported with the state, and the stage they act on and every later one go out
of date until they run again. When the stage runs again it calls the model with its own
messages; the edits hold the replayed reply's decision in place.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import BaseModel

from ragstream.agents.factory import Agent, AgentFactory
from ragstream.agents.trace import call_record, clip
from ragstream.backends.llm import (
    AgentOutputError,
    CallLog,
    JSONResult,
    LLMClient,
    LLMError,
    NoLogprobsError,
    TokenChoice,
)
from ragstream.common.config import AppConfig
from ragstream.common.errors import RagstreamError
from ragstream.stages import a0_preprocessing as a0
from ragstream.stages import a2_prompt_shaper as a2
from ragstream.stages import a3_nli_gate as a3
from ragstream.stages import a4_condenser as a4
from ragstream.stages import a5_format_enforcer as a5
from ragstream.stages import controller, staleness
from ragstream.state import edits
from ragstream.state.records import A2_FIELDS, AgentCall, EditKind, SentMessage, short_text
from ragstream.state.super_prompt import SuperPrompt, View


class Editor(Protocol):
    """What ``apply`` needs of the ``Engine``: its edit methods (``Engine`` is one). Said here,
    so that this module and the engine, which calls it, do not import each other."""

    def set_field(self, sp: SuperPrompt, name: str, value: str,
                  cfg: AppConfig | None = None) -> SuperPrompt:
        """As ``Engine.set_field``."""

    def pin(self, sp: SuperPrompt, chunk_id: str,
            seen: SuperPrompt | None = None) -> SuperPrompt:
        """As ``Engine.pin``."""

    def drop(self, sp: SuperPrompt, chunk_id: str,
             seen: SuperPrompt | None = None) -> SuperPrompt:
        """As ``Engine.drop``."""

    def remove_statement(self, sp: SuperPrompt, key: str,
                         seen: SuperPrompt | None = None) -> SuperPrompt:
        """As ``Engine.remove_statement``."""

    def move_statement(self, sp: SuperPrompt, key: str, place: int,
                       seen: SuperPrompt | None = None) -> SuperPrompt:
        """As ``Engine.move_statement``."""

    def remove_rule(self, sp: SuperPrompt, rule: str,
                    seen: SuperPrompt | None = None) -> SuperPrompt:
        """As ``Engine.remove_rule``."""

    def add_rule(self, sp: SuperPrompt, text: str) -> SuperPrompt:
        """As ``Engine.add_rule``."""

A0, A2, A3, A4, A5 = (a0.AGENT_NAME, a2.AGENT_NAME, a3.NAME, a4.NAME, a5.AGENT_NAME)
#: the agents whose calls can be replayed, in pipeline order
AGENTS = (A0, A2, A3, A4, A5)

#: what the tab (and ``Engine.replay``) says when no endpoint is configured
NEEDS_ENDPOINT = ("Replay needs an LLM endpoint: set `llm.base_url` and `llm.model` in "
                  "`config/settings.json` (or `RAGSTREAM_LLM_BASE_URL` and "
                  "`RAGSTREAM_LLM_MODEL`) and restart the page; without one no call can be sent "
                  "again.")


class ReplayError(RagstreamError):
    """A call that cannot be replayed (no endpoint, no such call, messages that do not fit the
    call) or a replayed reply that cannot be applied."""

    kind = "replay"


# --------------------------------------------------------------------------- the decision


@dataclass(frozen=True)
class Proposal:
    """One edit a replayed reply calls for: its kind, target and value (as ``Engine.edit``
    takes them) and the line that says it (``A2: tone formal → neutral``)."""

    kind: EditKind
    target: str
    after: str | None
    line: str


@dataclass(frozen=True)
class Decision:
    """What the stage would decide with the replayed reply: the edits that make it so, the
    lines that say what stays or cannot be applied (``notes``), and, when nothing of it can be
    applied, why (``why_not``)."""

    stage: str
    proposals: tuple[Proposal, ...] = ()
    notes: tuple[str, ...] = ()
    why_not: str = ""
    #: what the stage read from the reply's tokens (A2, A5: each field's P(the model's value))
    probabilities: dict[str, float] | None = None

    @property
    def lines(self) -> list[str]:
        """Every line, the edits first."""
        return [p.line for p in self.proposals] + list(self.notes)

    @property
    def applicable(self) -> bool:
        """Whether there is an edit to apply."""
        return bool(self.proposals)


# --------------------------------------------------------------------------- the replayed call


@dataclass(frozen=True)
class CallForm:
    """How the agent's stage makes one call (``form_of``): a yes/no judgment (``answers``
    read from one token) or a JSON call (``output``, the reply model, and ``json_schema``,
    as bounded for that call, ``temperature``, ``max_tokens``, ``logprobs``); the model, what
    the call's numbers stand for (``items``) and the messages the stage sends now."""

    judgment: bool
    model: str
    output: type[BaseModel] | None = None
    json_schema: dict[str, Any] | None = None
    temperature: float = 0.0
    max_tokens: int = 0
    logprobs: bool = False
    answers: tuple[str, ...] = ()
    items: list[str] | None = None
    messages: list[dict[str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class Replayed:
    """A call sent again: which agent's call (``index`` in ``llm_calls[agent]``), how it was
    made (``form``), and the record of the new call (``call``: the messages sent, the raw
    reply, the parsed reply or the error, the probabilities of a judgment, the items its
    numbers stand for), the reply's tokens (for the stage to read values' probabilities from,
    as it does), and the seconds it took."""

    agent: str
    index: int
    form: CallForm
    call: AgentCall
    tokens: tuple[TokenChoice, ...] = ()
    repaired: bool = False
    seconds: float = 0.0

    @property
    def judgment(self) -> bool:
        """Whether the call was A3's yes/no judgment."""
        return self.form.judgment

    @property
    def ok(self) -> bool:
        """Whether the endpoint gave a valid reply."""
        return self.call.error is None and self.call.parsed is not None

    def decision(self, sp: SuperPrompt, cfg: AppConfig, services: Any) -> Decision:
        """What the agent's stage would decide with this reply: the stage runs again on a
        copy of ``sp`` with ``cfg`` and ``services`` (their LLM client's settings; no call
        reaches the endpoint), and its result is compared with ``sp``'s."""
        if not self.ok:
            return Decision(self.agent, why_not="The call gave no valid reply: there is nothing "
                                                "to apply." + (f" ({self.call.error})"
                                                               if self.call.error else ""))
        real = getattr(services, "llm", None)
        if real is None:
            raise ReplayError(NEEDS_ENDPOINT)
        calls = sp.extras.llm_calls.get(self.agent, [])
        if not 0 <= self.index < len(calls):
            return Decision(self.agent, why_not=f"{self.agent}'s call {self.index + 1} is not in "
                                                f"this state any more (the stage ran again or "
                                                f"was discarded): replay one of its calls now.")
        stale = controller.first_stale(sp, cfg, staleness.kb_fingerprint(services))
        if stale is not None and stale.index <= controller.STAGE_NAMES.index(self.agent):
            return Decision(self.agent, why_not=f"{stale.describe()}. Re-run it first, then "
                                                f"replay {self.agent}'s new call: a decision on "
                                                f"an out-of-date result would mix in what changed.")
        stub = _Recorded(real, self.agent, calls, self.index, cfg, replayed=self)
        work = sp.working_copy()
        controller.discard_from(work, controller.STAGE_NAMES.index(self.agent))
        try:
            work = controller.spec(self.agent).run(work, cfg, dataclasses.replace(services, llm=stub))
        except RagstreamError as err:
            return Decision(self.agent, why_not=f"{self.agent} would fail with this reply: {err}")
        if stub.differs:
            return Decision(self.agent, why_not=f"{self.agent} would now make other calls than "
                                                f"the ones recorded ({stub.differs}): the state "
                                                f"changed since it ran. Run {self.agent} again and "
                                                f"replay its new call.")
        mode = work.extras.agent_modes.get(self.agent)
        if mode is not None and mode.fallback:
            return Decision(self.agent, why_not=f"With this reply {self.agent} would fall back to "
                                                f"its rules ({mode.reason}): nothing of the reply "
                                                f"to apply.")
        diff = _DIFFS[self.agent]
        decision = diff(sp, work, cfg, self.form.items or [])
        return dataclasses.replace(decision, probabilities=stub.probabilities)


def call_digest(call: AgentCall) -> str:
    """A short hash of a recorded call: the same call (messages and reply) gives the same."""
    return hashlib.sha1(call.model_dump_json().encode("utf-8")).hexdigest()[:10]


# --------------------------------------------------------------------------- the stage, from the record


class _Captured(Exception):
    """Raised by ``_Recorded`` at the call ``form_of`` looks for, with its form."""

    def __init__(self, form: CallForm):
        super().__init__("captured")
        self.form = form


class _Recorded:
    """An LLM client for running an agent's stage again without the endpoint: its calls are
    answered, in order, with the replies recorded in ``calls`` — call ``index`` with
    ``replayed``'s reply when given; without it, that call stops the stage (``_Captured``) and
    says how it was made. Notes where the stage's calls differ from the recorded ones
    (``differs``), and the probabilities the stage read from call ``index``'s reply."""

    def __init__(self, real: LLMClient, agent: str, calls: list[AgentCall], index: int,
                 cfg: AppConfig, replayed: Replayed | None = None):
        self._real = real
        self.settings = real.settings
        self.agent = agent
        self.calls = calls
        self.index = index
        self.replayed = replayed
        self.taken = 0
        self.differs = ""
        self._log: CallLog | None = None
        self._judges = agent == A3 and any(
            c.probabilities is not None or set(c.parsed or {}) == {"answer", "probabilities"}
            or (c.messages and c.messages[0].content
                == a3.judge_messages(cfg.agents.A3_NLI_Gate, "", "")[0]["content"])
            for c in calls)

    @property
    def model(self) -> str:
        """The real client's model."""
        return self._real.model

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def offers_logprobs(self) -> bool | None:
        """For A3, whether it judged by probabilities in the recorded run; else the real
        client's answer."""
        return self._judges if self.agent == A3 else self._real.offers_logprobs()

    def _take(self, messages: list[dict[str, str]], log: CallLog) -> int:
        k = self.taken
        self.taken += 1
        log.messages = list(messages)
        if k >= len(self.calls):
            self.differs = self.differs or f"a call {k + 1}, of {len(self.calls)} recorded"
            raise LLMError(f"no recorded reply for call {k + 1}")
        limit = self.settings.inspect_chars
        recorded = self.calls[k].messages
        for i, m in enumerate(messages):
            said = clip(self._real.redact(m.get("content", ""), parts=False), limit)[0]
            if i >= len(recorded) or recorded[i].content != said or recorded[i].role != m.get("role"):
                self.differs = self.differs or f"call {k + 1}, message {i + 1}"
                break
        if k == self.index:
            self._log = log
        return k

    def _failed(self, k: int, judge: bool) -> RagstreamError:
        error = self.calls[k].error or "no valid reply was recorded"
        if judge and "log-probabilities" in error:
            return NoLogprobsError(error)
        if self._real.describe() in error or "Cannot reach" in error:
            return LLMError(error)
        return AgentOutputError(error)

    def chat_json(self, messages: list[dict[str, str]], schema: type[BaseModel], *, model: str = "",
                  temperature: float = 0.0, max_tokens: int = 800,
                  json_schema: dict[str, Any] | None = None, timeout: float | None = None,
                  log: CallLog | None = None, agent: str = "", logprobs: bool = False) -> JSONResult:
        """The recorded (or replayed) reply of the next call, validated as ``schema``."""
        log = log if log is not None else CallLog()
        k = self._take(messages, log)
        if k == self.index and self.replayed is None:
            raise _Captured(CallForm(judgment=False, model=model or self.model, output=schema,
                                     json_schema=json_schema, temperature=temperature,
                                     max_tokens=max_tokens, logprobs=logprobs, items=log.items,
                                     messages=list(messages)))
        call = self.calls[k] if k != self.index or self.replayed is None else self.replayed.call
        if call.parsed is None:
            raise self._failed(k, judge=False)
        value = schema.model_validate(call.parsed)
        log.raw, log.parsed, log.first_try_valid = call.raw, call.parsed, True
        if k == self.index and self.replayed is not None and logprobs:
            log.tokens = list(self.replayed.tokens)
            log.repaired = self.replayed.repaired
        return JSONResult(value, log)

    def judge(self, messages: list[dict[str, str]], answers: Any = ("yes", "no"), *,
              model: str = "", timeout: float | None = None, log: CallLog | None = None,
              agent: str = "") -> dict[str, float]:
        """The recorded (or replayed) probabilities of the next yes/no judgment."""
        log = log if log is not None else CallLog()
        k = self._take(messages, log)
        if k == self.index and self.replayed is None:
            raise _Captured(CallForm(judgment=True, model=model or self.model,
                                     answers=tuple(answers), items=log.items,
                                     messages=list(messages)))
        call = self.calls[k] if k != self.index or self.replayed is None else self.replayed.call
        probabilities = call.probabilities or (call.parsed or {}).get("probabilities")
        if not probabilities:
            raise self._failed(k, judge=True)
        log.probabilities = dict(probabilities)
        log.raw, log.parsed, log.first_try_valid = call.raw, call.parsed, True
        return dict(probabilities)

    @property
    def probabilities(self) -> dict[str, float] | None:
        """The probabilities the stage read from call ``index``'s reply (its call log's)."""
        return None if self._log is None else self._log.probabilities


def form_of(sp: SuperPrompt, agent: str, index: int, cfg: AppConfig, services: Any) -> CallForm:
    """How ``agent``'s stage makes call ``index`` (0-based) of ``sp``: the stage runs again on a
    copy, its calls before that one answered from the record, and stops at it. ``ReplayError``
    when the stage does not make that call now."""
    real = getattr(services, "llm", None)
    if agent not in AGENTS:
        raise ReplayError(f"{agent} is not an agent whose calls can be replayed; those are: "
                          f"{', '.join(AGENTS)}.")
    if real is None:
        raise ReplayError(NEEDS_ENDPOINT)
    calls = sp.extras.llm_calls.get(agent, [])
    stub = _Recorded(real, agent, calls, index, cfg)
    work = sp.working_copy()
    controller.discard_from(work, controller.STAGE_NAMES.index(agent))
    try:
        controller.spec(agent).run(work, cfg, dataclasses.replace(services, llm=stub))
    except _Captured as got:
        return got.form
    except RagstreamError as err:
        raise ReplayError(f"{agent} cannot run again on this state ({err}), so its call cannot "
                          f"be replayed.") from None
    raise ReplayError(f"{agent} would not make call {index + 1} now (it made {stub.taken}): the "
                      f"state changed since it ran. Run {agent} again and replay its new call.")


def send(call: AgentCall, agent: str, cfg: AppConfig, llm: LLMClient | None, form: CallForm,
         index: int = 0) -> Replayed:
    """Send ``call``'s messages (as edited) to the endpoint again, made as ``form`` says (the
    agent's model, temperature, reply budget and schema, or a yes/no judgment), within the
    agent's prompt budget. The endpoint's failure, or a reply that is not valid, is in the
    result's ``call.error``, not raised; ``ReplayError`` when no endpoint is configured."""
    if llm is None:
        raise ReplayError(NEEDS_ENDPOINT)
    bot: Agent = AgentFactory(cfg, llm).create(agent, form.output or a3.A3Output)
    messages = [{"role": m.role, "content": m.content} for m in call.messages]
    started = time.perf_counter()
    log = CallLog(items=form.items, messages=messages)
    try:
        if form.judgment:
            bot.judge(messages, form.answers or ("yes", "no"), item=(form.items or [""])[0])
        else:
            assert form.output is not None
            timeout = bot._timeout(messages)  # the agent's prompt budget, as ``Agent.ask``
            llm.chat_json(messages, form.output, model=form.model,
                          temperature=form.temperature, max_tokens=form.max_tokens,
                          json_schema=form.json_schema, timeout=timeout, log=log, agent=agent,
                          logprobs=form.logprobs)
    except (LLMError, AgentOutputError) as err:  # PromptBudgetError too: shown, not raised
        log.error = log.error or str(err)
    if bot.calls:
        log = bot.calls[-1]
    record = call_record(log, llm.settings.inspect_chars, lambda t: llm.redact(t, parts=False))
    return Replayed(agent=agent, index=index, form=form, call=record, tokens=tuple(log.tokens),
                    repaired=log.repaired, seconds=round(time.perf_counter() - started, 3))


def replay(sp: SuperPrompt, agent: str, index: int, messages: list[str] | None,
           cfg: AppConfig, services: Any) -> Replayed:
    """Send call ``index`` (0-based) of ``agent`` in ``sp`` again, as the agent makes it, its
    messages' texts replaced by ``messages`` (one per message, same roles; None: as they were)."""
    llm = getattr(services, "llm", None)
    if llm is None:
        raise ReplayError(NEEDS_ENDPOINT)
    calls = sp.extras.llm_calls.get(agent, [])
    if not 0 <= index < len(calls):
        have = f"{len(calls)} call{'s' if len(calls) != 1 else ''}" if calls else "no call"
        raise ReplayError(f"{agent} has no call {index + 1} in this pass ({have}); run "
                          f"{agent} in LLM mode first and pick one of its calls.")
    call = calls[index]
    if messages is not None:
        if len(messages) != len(call.messages):
            raise ReplayError(f"Call {index + 1} of {agent} has {len(call.messages)} messages; "
                              f"{len(messages)} texts were given. Give one text per message.")
        if not any(text.strip() for text in messages):
            raise ReplayError("Every message is empty: write at least one to send.")
        call = call.model_copy(update={"messages": [
            SentMessage(role=m.role, content=text) for m, text in zip(call.messages, messages)]})
    return send(call, agent, cfg, llm, form_of(sp, agent, index, cfg, services), index)


# --------------------------------------------------------------------------- what changes, per agent


def _a2_diff(sp: SuperPrompt, work: SuperPrompt, cfg: AppConfig,
             items: list[str]) -> Decision:
    why = {j.item: j.why for j in work.extras.judgments.get(A2, []) if j.why}
    proposals: list[Proposal] = []
    notes: list[str] = []
    for name in [*cfg.agents.A2_PromptShaper.fields, "confidence"]:
        now, new = sp.body.get(name, ""), work.body.get(name, "")
        said = f" ({why[name]})" if name in why else ""
        if new != now:
            proposals.append(Proposal("field", name, new, f"A2: {name} {now or '(empty)'} → {new}{said}"))
        else:
            notes.append(f"A2: {name} stays {now}{said}")
    return Decision(A2, tuple(proposals), tuple(notes))


def _a3_diff(sp: SuperPrompt, work: SuperPrompt, cfg: AppConfig, items: list[str]) -> Decision:
    rows = {r.chunk_id: r for r in sp.view(View.A3)}
    judged = {j.item: j for j in work.extras.judgments.get(A3, [])}

    def why(cid: str, reason: str, status: str) -> str:
        said = _gate_reason(reason, status)
        j = judged.get(cid)
        if j is not None and j.probability is not None and "P(relevant)" not in said:
            said = f"P(relevant) {j.probability:.2f}: {said}"
        return said

    proposals: list[Proposal] = []
    for row in work.view(View.A3):
        was = rows.get(row.chunk_id)
        if was is None or was.status == row.status:
            continue
        cid, said = row.chunk_id, why(row.chunk_id, row.reason, row.status)
        if row.status == "kept":
            proposals.append(Proposal("pin", cid, "pin", f"A3: keep {cid} ({said}; now dropped)"))
        else:
            proposals.append(Proposal("drop", cid, "drop", f"A3: drop {cid} ({said}; now kept)"))
    changed = {p.target for p in proposals}
    notes = [f"A3: {cid} stays {rows[cid].status} ({why(cid, rows[cid].reason, rows[cid].status)})"
             for cid in items if cid in rows and cid not in changed]
    if proposals and not work.final_selection_ids:
        notes.append("A3: applied, these drops leave the selection empty")
    return Decision(A3, tuple(proposals), tuple(notes))


def _gate_reason(reason: str, status: str) -> str:
    """A gate row's reason in a few words (a rescue without the rules' own reason)."""
    if not reason:
        return "the rules keep it" if status == "kept" else "the rules drop it"
    reason = reason.split(" (the rules would drop it", 1)[0]
    return reason.removeprefix("rescued by the model: ")


def _a4_diff(sp: SuperPrompt, work: SuperPrompt, cfg: AppConfig,
             items: list[str]) -> Decision:
    was, will = sp.extras.a4, work.extras.a4
    if was is None or will is None:
        return Decision(A4, why_not="A4's result is not in this state: run A4 first.")
    text_of = {edits.statement_key(s): s.text for s in [*was.condensed, *will.condensed]}
    now = [edits.statement_key(s) for s in was.condensed]
    new = [edits.statement_key(s) for s in will.condensed]
    proposals = [Proposal("statement_remove", key, None,
                          f"A4: remove statement {short_text(text_of[key])!r}")
                 for key in now if key not in new]
    order = [k for k in now if k in new]
    for place, key in enumerate([k for k in new if k in order]):
        if order[place] != key:
            order.remove(key)
            order.insert(place, key)
            proposals.append(Proposal("statement_move", key, str(place + 1),
                                      f"A4: move statement {short_text(text_of[key])!r} to "
                                      f"place {place + 1}"))
    notes = [f"A4: would add {short_text(text_of[key])!r} ({key.split('@')[0]}): cannot be "
             f"applied — an edit can remove or move A4's statements, not add a sentence"
             for key in new if key not in now]
    if not proposals and not notes:
        notes.append("A4: the condensed context would stay as it is")
    return Decision(A4, tuple(proposals), tuple(notes))


def _a5_diff(sp: SuperPrompt, work: SuperPrompt, cfg: AppConfig,
             items: list[str]) -> Decision:
    was, will = sp.extras.format_enforcer, work.extras.format_enforcer
    if was is None or will is None:
        return Decision(A5, why_not="A5's result is not in this state: run A5 first.")
    proposals = [Proposal("rule_remove", r, None, f"A5: remove rule {short_text(r)!r}")
                 for r in was.hard_rules if r not in will.hard_rules]
    proposals += [Proposal("rule_add", r, r, f"A5: add rule {short_text(r)!r}")
                  for r in will.hard_rules if r not in was.hard_rules]
    notes = [f"A5: {name} {getattr(was, name) or '(none)'} → {getattr(will, name) or '(none)'}: "
             f"cannot be applied (edits change A5's hard rules only)"
             for name in ("kind", "language", "code_language")
             if getattr(will, name) != getattr(was, name)]
    if will.length != was.length:
        notes.append("A5: the length limits would change: cannot be applied (edits change A5's "
                     "hard rules only)")
    if not proposals:
        notes.insert(0, "A5: the hard rules would stay as they are")
    return Decision(A5, tuple(proposals), tuple(notes))


def _a0_diff(sp: SuperPrompt, work: SuperPrompt, cfg: AppConfig,
             items: list[str]) -> Decision:
    now, new_body = sp.extras.a0_body or {}, work.extras.a0_body or {}
    proposals: list[Proposal] = []
    notes: list[str] = []
    for key in dict.fromkeys([*now, *new_body]):
        old, new = now.get(key, ""), new_body.get(key, "")
        if old == new:
            continue
        line = f"A0: {key} {short_text(old)!r} → {short_text(new)!r}" if old else \
            f"A0: {key} = {short_text(new)!r}"
        if key in A2_FIELDS and not new:
            notes.append(f"{line}: cannot be applied (emptying {key} leaves it to A2)")
            continue
        try:
            value = edits.check_field(cfg, key, new)
        except edits.EditError as err:
            notes.append(f"{line}: cannot be applied ({err})")
            continue
        proposals.append(Proposal("field", key, value, line))
    was = {u.label for u in sp.extras.unknown_attributes or []}
    will = {u.label for u in work.extras.unknown_attributes or []}
    if was != will:
        notes.append(f"A0: the unknown attributes would change ({', '.join(sorted(was ^ will))}): "
                     f"cannot be applied (edits set body fields only)")
    if not proposals and not notes:
        notes.append("A0: the body would stay as it is")
    return Decision(A0, tuple(proposals), tuple(notes))


_DIFFS = {A0: _a0_diff, A2: _a2_diff, A3: _a3_diff, A4: _a4_diff, A5: _a5_diff}


# --------------------------------------------------------------------------- applying it


def apply(engine: Editor, sp: SuperPrompt, decision: Decision,
          cfg: AppConfig | None = None) -> SuperPrompt:
    """Record ``decision``'s proposals as the person's edits, through the engine's edit calls
    (each checked as a hand-made edit is); the stage they act on and the later ones are then
    out of date. ``ReplayError`` when there is nothing to apply; ``EditError`` when an edit is
    refused (nothing is recorded then)."""
    if not decision.applicable:
        raise ReplayError(decision.why_not or f"Nothing to apply: the reply would leave "
                                              f"{decision.stage}'s decisions as they are.")
    seen = sp
    out = sp
    for p in decision.proposals:
        if p.kind == "field":
            out = engine.set_field(out, p.target, p.after or "", cfg)
        elif p.kind == "pin":
            out = engine.pin(out, p.target)
        elif p.kind == "drop":
            out = engine.drop(out, p.target)
        elif p.kind == "statement_remove":
            out = engine.remove_statement(out, p.target, seen=seen)
        elif p.kind == "statement_move":
            out = engine.move_statement(out, p.target, int(p.after or 1), seen=seen)
        elif p.kind == "rule_remove":
            out = engine.remove_rule(out, p.target, seen=seen)
        elif p.kind == "rule_add":
            out = engine.add_rule(out, p.after or "")
        else:
            raise ReplayError(f"A {p.kind} edit is not one a replay makes.")
    return out
