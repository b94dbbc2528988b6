"""The agent inspector: pure functions from a SuperPrompt to what the page's Agents tab shows.

For every agent stage that ran in LLM mode, or tried to and fell back to its rules: the
figures of its calls (``sp.extras.llm_usage``), its mode and fallback reason
(``sp.extras.agent_modes``) and what it sent and got back (``sp.extras.llm_calls``: the
messages, the raw reply, the parsed result).

Replay (``ragstream.workbench.replay``): for one call of the agent shown, each message in a text box
(``replay_fields``, prefilled with the message as recorded), a button that sends them again,
and the new reply with the decision it would make (``replay_view``: the raw reply, the parsed
reply or the error, the probabilities, the decision's lines and the "Apply to <stage>" button's
label and whether it can be pressed). Without an endpoint the tab says so
(``REPLAY_NEEDS_ENDPOINT``) and offers no send button. The page only draws what these return;
the session state is handled in ``ragstream.interfaces.ui.actions`` (``replay_send``, ``replay_apply``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ragstream.agents.trace import cut_marker
from ragstream.interfaces.ui.grids import TABLE_WIDTH
from ragstream.interfaces.ui.views import plain_names, stage_label
from ragstream.stages import controller
from ragstream.state.records import AgentCall, SentMessage
from ragstream.state.super_prompt import SuperPrompt
from ragstream.workbench.replay import NEEDS_ENDPOINT, Decision, Replayed, call_digest

#: what the tab says when no agent has called the model, by whether an endpoint is configured
NO_ENDPOINT = ("No agent runs in LLM mode: no LLM endpoint is configured, so every agent ran its "
               "rules. To inspect the model calls, set `llm.base_url` and `llm.model` in "
               "`config/settings.json` (or `RAGSTREAM_LLM_BASE_URL` and `RAGSTREAM_LLM_MODEL`, "
               "the key in the variable `llm.api_key_env` names) and run the stages again; "
               "replaying a call needs the endpoint too.")
NO_CALL_YET = ("No agent has called the model in this pass yet. Run the stages: A0 calls it only "
               "for header labels its rules cannot map (when `semantic_enabled`), A2 and A5 only "
               "when the prompt leaves them something to decide, and an agent whose config sets "
               "`mode` to `deterministic` never does.")


@dataclass(frozen=True)
class MessageView:
    """One message or reply as the tab shows it: a title and the text in a code block."""

    title: str
    text: str
    language: str


@dataclass(frozen=True)
class CallView:
    """One model call: its messages, the raw reply, the parsed result, the error if any."""

    title: str
    messages: list[MessageView]
    raw: MessageView
    parsed: dict[str, Any] | None
    error: str | None


def inspected_agents(sp: SuperPrompt) -> list[str]:
    """The agent stages, in pipeline order, that ran in LLM mode or tried it and fell back."""
    ex = sp.extras
    out = []
    for name in controller.STAGE_NAMES:
        mode = ex.agent_modes.get(name)
        if name in ex.llm_calls or (mode is not None and (mode.mode == "llm" or mode.fallback)):
            out.append(name)
    return out


def pick(sp: SuperPrompt, current: str | None) -> str | None:
    """The agent to show: ``current`` while it is inspectable, else the latest one."""
    agents = inspected_agents(sp)
    if current in agents:
        return current
    return agents[-1] if agents else None


def empty_note(llm_configured: bool) -> str:
    """What the tab says when no agent stage is inspectable."""
    return NO_CALL_YET if llm_configured else NO_ENDPOINT


def _yes(value: bool) -> str:
    return "yes" if value else "no"


def ran_as(sp: SuperPrompt, agent: str) -> str:
    """How the agent ran: "LLM", "rules (LLM failed)" or its mode."""
    mode = sp.extras.agent_modes.get(agent)
    if mode is None:
        return "not run"
    if mode.fallback:
        return "rules (LLM failed)"
    return "LLM" if mode.mode == "llm" else mode.mode


def fallback_reason(sp: SuperPrompt, agent: str) -> str:
    """Why LLM mode failed and the rules ran, or "" when it did not fail."""
    mode = sp.extras.agent_modes.get(agent)
    return mode.reason if mode is not None and mode.fallback else ""


#: the overview's fixed columns: pixels, and a short label where the name is long (its whole
#: name on hover); the fallback reason gets what they leave of the table's width
OVERVIEW_COLUMNS: dict[str, tuple[int, str]] = {
    "agent": (150, ""), "ran as": (120, ""), "replies": (56, ""), "tokens in": (56, "in"),
    "tokens out": (56, "out"), "seconds": (60, "s"), "first reply valid": (68, "1st valid"),
}


def overview_rows(sp: SuperPrompt) -> list[dict[str, Any]]:
    """A row per inspectable agent stage: how it ran, replies, tokens in and out, seconds,
    whether the first reply was valid and the fallback reason (the model and the finish
    reason are in the stage's summary line)."""
    rows = []
    for agent in inspected_agents(sp):
        usage = sp.extras.llm_usage.get(agent)
        rows.append({
            "agent": stage_label(agent),
            "ran as": ran_as(sp, agent),
            "replies": usage.calls if usage else 0,
            "tokens in": usage.prompt_tokens if usage else 0,
            "tokens out": usage.completion_tokens if usage else 0,
            "seconds": usage.seconds if usage else 0.0,
            "first reply valid": _yes(usage.first_try_valid) if usage else "",
            "fallback reason": plain_names(fallback_reason(sp, agent)),
        })
    return rows


def overview_columns(total: int = TABLE_WIDTH) -> dict[str, dict[str, Any]]:
    """Column configs for the overview, ``total`` pixels wide: no sideways scrolling at
    1280 px; a long fallback reason is cut in its cell and shown whole under the selector."""
    out: dict[str, dict[str, Any]] = {}
    for name, (width, label) in OVERVIEW_COLUMNS.items():
        out[name] = {"width": width, **({"label": label, "help": name} if label else {})}
    out["seconds"]["type_config"] = {"type": "number", "format": "%.2f"}
    out["fallback reason"] = {"width": total - sum(w for w, _ in OVERVIEW_COLUMNS.values())}
    return out


def summary_line(sp: SuperPrompt, agent: str) -> str:
    """One Markdown line: the agent, the model, replies, tokens in / out, seconds, whether the
    first reply was valid, repaired or cut off, the finish reason and the form asked for."""
    usage = sp.extras.llm_usage.get(agent)
    parts = [f"**{stage_label(agent)}**", ran_as(sp, agent)]
    if usage is None:
        parts.append("no request was sent")
        return " · ".join(parts)
    parts += [f"model `{usage.model}`",
              f"{usage.calls} {'reply' if usage.calls == 1 else 'replies'}",
              f"tokens in {usage.prompt_tokens:,} / out {usage.completion_tokens:,}",
              f"{usage.seconds:.2f} s",
              f"first reply valid: {_yes(usage.first_try_valid)}"]
    if usage.repaired:
        parts.append("repaired in a second round")
    if usage.finish_reason == "length":
        parts.append("cut off at max_tokens")
    elif usage.finish_reason:
        parts.append(f"finish: {usage.finish_reason}")
    if usage.form:
        parts.append(f"form: {usage.form}")
    return " · ".join(parts)


def _shown(content: str, role: str, cut: int | None) -> tuple[str, str, str]:
    """The text to show, its code language and a note: JSON is shown indented."""
    if not cut:
        try:
            value = json.loads(content)
        except ValueError:
            value = None
        if isinstance(value, dict | list):
            return json.dumps(value, indent=2, ensure_ascii=False), "json", "JSON, shown indented"
    return content, "markdown" if role == "system" else "text", ""


def _length_note(content: str, cut: int | None) -> str:
    """The text's length as sent, and how much of it the record cut."""
    if not cut:
        return f"{len(content):,} characters"
    whole = len(content) - len(cut_marker(cut)) + cut
    return f"{whole:,} characters, {cut:,} cut from the middle (llm.inspect_chars)"


def message_view(message: SentMessage, n: int, repair: bool) -> MessageView:
    """How the tab shows the ``n``-th message of a request (``repair``: a repair round's)."""
    text, language, how = _shown(message.content, message.role, message.cut)
    role = message.role
    if repair and n == 3:
        role += ", the model's first reply, sent back"
    elif repair and n == 4:
        role += ", the repair request"
    notes = ", ".join(x for x in (_length_note(message.content, message.cut), how) if x)
    return MessageView(f"{n}. {role} · {notes}", text, language)


def call_view(call: AgentCall, n: int, of: int) -> CallView:
    """How the tab shows one call (the ``n``-th of ``of``)."""
    repair = len(call.messages) > 2 and call.messages[2].role == "assistant"
    messages = [message_view(m, i, repair) for i, m in enumerate(call.messages, start=1)]
    raw_note = _length_note(call.raw, call.raw_cut) if call.raw else "no reply"
    raw = MessageView(f"Raw reply · {raw_note}", call.raw, "json" if call.parsed else "text")
    title = f"Call {n} of {of}" if of > 1 else ""
    return CallView(title, messages, raw, call.parsed, call.error)


def call_views(sp: SuperPrompt, agent: str) -> list[CallView]:
    """Every model call of ``agent`` in this pass, as the tab shows it."""
    calls = sp.extras.llm_calls.get(agent, [])
    return [call_view(c, i, len(calls)) for i, c in enumerate(calls, start=1)]


# --------------------------------------------------------------------------- replay

#: what the replay section says without an endpoint (and no send button is drawn)
REPLAY_NEEDS_ENDPOINT = NEEDS_ENDPOINT
#: what "Send again" does, on hover
SEND_HELP = ("Send these messages to the endpoint again, as the agent makes the call (its model, "
             "reply schema and budget). Nothing changes in the pass until you apply the decision.")


@dataclass(frozen=True)
class ReplayField:
    """One message of the call to replay, as an editable text box: its widget key (new for
    every call, so a new call starts from its own messages), label, text and height."""

    key: str
    label: str
    text: str
    height: int


@dataclass(frozen=True)
class ReplayView:
    """A replayed call as the tab shows it: the raw reply, the parsed reply or the error, the
    probabilities in words, the decision's lines, and the apply button's label, state and help."""

    raw: MessageView
    parsed: dict[str, Any] | None
    error: str | None
    probabilities: str
    lines: list[str]
    why_not: str
    apply_label: str
    can_apply: bool
    apply_help: str


def replay_calls(sp: SuperPrompt, agent: str) -> list[int]:
    """The calls of ``agent`` one may replay (0-based indices in ``llm_calls[agent]``)."""
    return list(range(len(sp.extras.llm_calls.get(agent, []))))


def call_label(sp: SuperPrompt, agent: str, index: int) -> str:
    """``Call 3 of 8 · kb/faq.md#2``: the call's number and what it judged, for the picker."""
    calls = sp.extras.llm_calls.get(agent, [])
    items = calls[index].items if index < len(calls) else None
    what = f" · {items[0]}" if items and len(items) == 1 else \
        f" · {len(items)} items" if items else ""
    return f"Call {index + 1} of {len(calls)}{what}"


def replay_key(agent: str, index: int, call: AgentCall, n: int) -> str:
    """The widget key of message ``n`` (1-based) of call ``index`` of ``agent``."""
    return f"replay_{agent}_{index}_{call_digest(call)}_{n}"


def replay_fields(sp: SuperPrompt, agent: str, index: int) -> list[ReplayField]:
    """A text box per message of call ``index``, prefilled as recorded (a message the record
    cut is sent as shown, and its label says so)."""
    calls = sp.extras.llm_calls.get(agent, [])
    if not 0 <= index < len(calls):
        return []
    call = calls[index]
    out = []
    for n, m in enumerate(call.messages, start=1):
        note = (f" · {m.cut:,} characters were cut from the record: it is sent as shown"
                if m.cut else "")
        out.append(ReplayField(replay_key(agent, index, call, n), f"{n}. {m.role}{note}",
                               m.content, 220 if m.role == "system" else 160))
    return out


def probability_words(replayed: Replayed, decision: Decision | None) -> str:
    """The reply's probabilities in words: ``P(yes) 0.97 · P(no) 0.03`` for a judgment;
    ``P(tone = the model's value) 0.91 · …`` where the stage read them from a JSON reply."""
    if replayed.call.probabilities:
        return " · ".join(f"P({k}) {v:.2f}" for k, v in replayed.call.probabilities.items())
    if decision is not None and decision.probabilities:
        return " · ".join(f"P({k}) {v:.2f}" for k, v in decision.probabilities.items())
    return ""


def replay_view(replayed: Replayed, decision: Decision) -> ReplayView:
    """How the tab shows a replayed call and the decision it would make."""
    call = replayed.call
    note = _length_note(call.raw, call.raw_cut) if call.raw else "no reply"
    raw = MessageView(f"New reply · {note} · {replayed.seconds:.2f} s", call.raw,
                      "json" if call.parsed and not replayed.judgment else "text")
    if decision.applicable:
        n = len(decision.proposals)
        help_text = (f"Record {'this edit' if n == 1 else f'these {n} edits'} as yours: "
                     f"{stage_label(decision.stage)} and the later stages go out of date, and ↻ Re-run "
                     f"brings them back with the edits applied.")
    else:
        help_text = decision.why_not or "The reply would change nothing the edits can say."
    return ReplayView(raw=raw, parsed=call.parsed, error=call.error,
                      probabilities=probability_words(replayed, decision),
                      lines=[plain_names(line) for line in decision.lines],
                      why_not=plain_names(decision.why_not) if decision.why_not else decision.why_not,
                      apply_label=f"Apply to {stage_label(decision.stage)}",
                      can_apply=decision.applicable,
                      apply_help=help_text)
