"""A2_PromptShaper: choose ``system``, ``audience``, ``tone``, ``depth`` and ``confidence``.

A2 is a *chooser*, never a writer: every field takes one value from a closed list in
``config/agents/A2_PromptShaper.json``. This module implements the deterministic mode, used
whenever no LLM endpoint is configured ("keyword rules over the enums"):

1. Start from A0's snapshot of the body (``sp.extras.a0_body``), so running A2 twice gives
   the same result.
2. A field the user wrote (``body_sources[key] == "user"``) is kept verbatim; the log notes
   whether it happens to be one of the enum values.
3. Any other field is chosen by keyword rules. Each enum value's keywords are counted as whole
   words or phrases in the folded task, context, purpose and format (leaving out the ones A0
   only filled with a default, such as format "Markdown"). The value with the most
   matches wins; ties go to the value listed first in ``values``; no match at all gives the
   field's ``default``.
4. ``confidence`` grows with the number of fields that were *decided* (by the user or by a
   rule) rather than defaulted, using ``confidence_thresholds``.

Keyword grammar (config): a keyword is folded like the text (case, accents, ``ß``), matches
whole words only, and may end in ``*`` to match any word that starts with it
(``"erklär*"`` matches "erkläre", "erklären", "Erklärung").

LLM mode (an endpoint is configured; a *Chooser*, one call through ``run_agent``):

* The payload holds the task, context, purpose and format the rules would read (not A0's
  defaults) and the raw prompt; the allowed values of every field and of the confidence are
  the reply schema's enums (shown in the system message, enforced by a constrained endpoint).
* The reply (:class:`A2LLMOutput`, plain strings so that any value reaches A2) is passed
  through :func:`clamp`: an out-of-enum value becomes the field's ``default`` (for the
  confidence, ``confidence_default``) and its decision says ``clamped: true`` with the
  ``original`` value. Chosen fields have ``source: "llm"``; the confidence gets a decision too.
* Fields the user wrote are kept verbatim, exactly as in deterministic mode.
* If the endpoint fails or the reply stays invalid after one repair, the deterministic mode
  runs and ``agent_modes`` records the fallback and why.

Both modes return an :class:`A2Output`, so everything after the decision is shared.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict

from ragstream import edits, render, staleness
from ragstream.agents.factory import Agent, run_agent
from ragstream.agents.replies import Text, bound
from ragstream.backends.llm import inline_schema
from ragstream.config import A2Config, A2Field, AppConfig
from ragstream.records import A2Decision
from ragstream.services import Services
from ragstream.stages.stage import Stage
from ragstream.super_prompt import SuperPrompt
from ragstream.text import fold, keyword_matches

AGENT_NAME = "A2_PromptShaper"

#: the body fields whose text the keyword rules read
SOURCE_KEYS: tuple[str, ...] = ("task", "context", "purpose", "format")
#: sources whose value A2 keeps verbatim: the prompt's own and the person's edit
GIVEN = ("user", edits.BY_YOU)



# The reply A2 asks the LLM for. Plain strings: enum checks happen in clamp(), so an
# out-of-enum value is clamped and logged rather than failing validation. (The docstring goes
# into the schema the model is shown.)
class A2LLMOutput(BaseModel):
    """The reply: the answering model's role, the audience, tone and depth, and how sure these are."""

    system: Text(60, "the role the answering model should take")  # type: ignore[valid-type]
    audience: Text(60, "who will read the answer")  # type: ignore[valid-type]
    tone: Text(60, "the tone of the answer")  # type: ignore[valid-type]
    depth: Text(60, "how detailed the answer should be")  # type: ignore[valid-type]
    confidence: Text(20, "how sure you are of these choices")  # type: ignore[valid-type]


def reply_schema(agent: A2Config) -> dict:
    """A2LLMOutput's schema with each field's allowed values as its enum."""
    enums: dict[str, dict[str, Any]] = {name: {"enum": list(field.values)}
                                        for name, field in agent.fields.items()}
    enums["confidence"] = {"enum": list(agent.confidence_values)}
    return bound(inline_schema(A2LLMOutput.model_json_schema()), enums)


class A2Output(BaseModel):
    """What either mode decides: one value per field, the confidence, and the log."""

    model_config = ConfigDict(extra="forbid")

    values: dict[str, str]
    confidence: str
    decisions: list[A2Decision]


# --------------------------------------------------------------------------- keyword matching


def score_values(field: A2Field, folded_text: str) -> dict[str, tuple[int, list[str]]]:
    """Per enum value: the number of keyword matches and the keywords that matched (in
    config order)."""
    scores: dict[str, tuple[int, list[str]]] = {}
    for value in field.values:
        keywords = field.rules.get(value, [])
        found = keyword_matches(keywords, folded_text)
        hits = {kw for _, _, kw in found}
        scores[value] = (len(found), [kw for kw in keywords if kw in hits])
    return scores


def choose_by_rules(field: A2Field, folded_text: str) -> tuple[str, list[str]]:
    """The best-scoring value and its matched keywords; ``(default, [])`` when nothing matched.

    Ties are broken by the order of ``field.values`` (``max`` keeps the first maximum).
    """
    scores = score_values(field, folded_text)
    best = max(field.values, key=lambda v: scores[v][0])
    if scores[best][0] == 0:
        return field.default, []
    return best, scores[best][1]


# --------------------------------------------------------------------------- enums


def clamp(field: A2Field, value: str) -> tuple[str, bool]:
    """``(enum value, False)`` if ``value`` is one of the field's values (compared folded),
    else ``(default, True)``. Used on every value the LLM mode returns."""
    wanted = fold(value or "")
    for allowed in field.values:
        if fold(allowed) == wanted:
            return allowed, False
    return field.default, True


def confidence_level(agent: A2Config, decided: int) -> str:
    """The highest level whose threshold ``decided`` reaches.

    Levels are ranked by threshold (ties by their order in ``confidence_values``); a level
    without a threshold is never chosen by count. If none is reached, the first level wins.
    """
    ranked = sorted(
        (lvl for lvl in agent.confidence_values if lvl in agent.confidence_thresholds),
        key=lambda lvl: (-agent.confidence_thresholds[lvl], agent.confidence_values.index(lvl)),
    )
    for level in ranked:
        if decided >= agent.confidence_thresholds[level]:
            return level
    return agent.confidence_values[0]


# --------------------------------------------------------------------------- the two modes


def _source_of(key: str, body: dict[str, str], sources: dict[str, str]) -> str:
    """Where ``body[key]`` came from. Without A0's bookkeeping, a present value is the user's."""
    if key in sources:
        return sources[key]
    return "user" if body.get(key, "").strip() else "default"


def _decide(agent: A2Config, body: dict[str, str], sources: dict[str, str],
            choose: Callable[[str, A2Field], A2Decision]) -> tuple[dict[str, str], list[A2Decision]]:
    """One decision per field: the user's own value (or the person's edit) kept verbatim, the
    others by ``choose``."""
    values: dict[str, str] = {}
    decisions: list[A2Decision] = []
    for name, field in agent.fields.items():
        given = body.get(name, "").strip()
        source = _source_of(name, body, sources)
        if given and source in GIVEN:
            _, outside = clamp(field, given)
            decision = A2Decision(field=name, value=body[name],
                                  source="you" if source == edits.BY_YOU else "user",
                                  in_enum=not outside)
        else:
            decision = choose(name, field)
        values[name] = decision.value
        decisions.append(decision)
    return values, decisions


def _deterministic(agent: A2Config, body: dict[str, str], sources: dict[str, str]) -> A2Output:
    folded = fold("\n".join(body[k] for k in _read_keys(body, sources)))

    def by_rules(name: str, field: A2Field) -> A2Decision:
        value, matched = choose_by_rules(field, folded)
        return A2Decision(field=name, value=value, source="rule" if matched else "default",
                          matched=matched)

    values, decisions = _decide(agent, body, sources, by_rules)
    decided = sum(d.source in ("user", "rule", "you") for d in decisions)
    return A2Output(values=values, confidence=confidence_level(agent, decided), decisions=decisions)


def _read_keys(body: dict[str, str], sources: dict[str, str]) -> list[str]:
    """The source fields the user gave or A0 derived (not A0's defaults)."""
    return [k for k in SOURCE_KEYS if render.stated(body, sources, k).strip()]


def llm_payload(agent: A2Config, body: dict[str, str], sources: dict[str, str],
                prompt: str) -> dict:
    """What the LLM sees: the prompt's fields and the raw prompt (the closed lists are the
    reply schema's enums, which the system message shows)."""
    payload: dict = {k: body[k] for k in _read_keys(body, sources)
                     if body[k].strip() != prompt.strip()}  # the raw prompt says it already
    payload["prompt"] = prompt
    given = {name: body[name] for name in agent.fields
             if body.get(name, "").strip() and _source_of(name, body, sources) in GIVEN}
    if given:
        payload["set_by_user"] = given
    return payload


def from_llm(agent: A2Config, answer: A2LLMOutput, body: dict[str, str],
             sources: dict[str, str]) -> A2Output:
    """The LLM's choices, each clamped to its enum; the user's own fields kept verbatim."""

    def by_llm(name: str, field: A2Field) -> A2Decision:
        raw = getattr(answer, name)
        value, clamped = clamp(field, raw)
        return A2Decision(field=name, value=value, source="llm", clamped=clamped,
                          original=raw if clamped else None)

    values, decisions = _decide(agent, body, sources, by_llm)
    levels = A2Field(values=list(agent.confidence_values), default=agent.confidence_default)
    confidence, clamped = clamp(levels, answer.confidence)
    decisions.append(A2Decision(field="confidence", value=confidence, source="llm",
                                clamped=clamped,
                                original=answer.confidence if clamped else None))
    return A2Output(values=values, confidence=confidence, decisions=decisions)


def _llm(llm_agent: Agent, agent: A2Config, body: dict[str, str], sources: dict[str, str],
         prompt: str) -> A2Output:
    answer: A2LLMOutput = llm_agent.ask(llm_payload(agent, body, sources, prompt),
                                        reply_schema(agent)).value
    return from_llm(agent, answer, body, sources)


def run(sp: SuperPrompt, cfg: AppConfig, services: Services | None) -> SuperPrompt:
    """Fill the meta-fields of ``sp.body`` and log each decision in ``sp.extras``."""
    agent = cfg.agents.A2_PromptShaper
    ex = sp.extras
    body = dict(ex.a0_body if ex.a0_body is not None else sp.body)
    sources = dict(ex.a0_sources if ex.a0_sources is not None else ex.body_sources or {})
    mine = edits.field_edits(sp.edits, AGENT_NAME)
    for name, edit in mine.items():
        if name in agent.fields:
            body[name] = edit.after or ""
            sources[name] = edits.BY_YOU
    output = run_agent(
        sp, AGENT_NAME, cfg, services,
        llm_path=lambda llm_agent: _llm(llm_agent, agent, body, sources, sp.user_text),
        deterministic_path=lambda: _deterministic(agent, body, sources),
        output=A2LLMOutput,
        nothing_to_ask="the user set every field" if all(
            body.get(n, "").strip() and _source_of(n, body, sources) in GIVEN
            for n in agent.fields) else "",
    )

    decisions = list(output.decisions)
    for d in decisions:
        if d.field not in output.values:  # the confidence's own decision (LLM mode)
            continue
        body[d.field] = output.values[d.field]
        if d.source not in GIVEN:
            sources[d.field] = "a2"
    body["confidence"] = output.confidence
    sources["confidence"] = "a2"
    if "confidence" in mine:
        edit = mine["confidence"]
        body["confidence"] = edit.after or output.confidence
        sources["confidence"] = edits.BY_YOU
        decisions = [d for d in decisions if d.field != "confidence"]
        decisions.append(A2Decision(field="confidence", value=body["confidence"], source="you"))
    for name, edit in mine.items():
        was = next((d.value for d in output.decisions if d.field == name), None)
        said = f" (A2 would choose {was!r})" if was is not None and was != edit.after else ""
        edits.note(sp, AGENT_NAME, edit, True, f"{name} set by you{said}")

    sp.body = body
    sp.extras.body_sources = sources
    sp.extras.a2_decisions = decisions
    sp.prompt_ready = render.compose_prompt_ready(sp.body)
    return sp


def discard(sp: SuperPrompt) -> None:
    """Forget A2's work: the body as A0 left it, A2's decisions and the fields it filled."""
    ex = sp.extras
    sp.body = dict(ex.a0_body if ex.a0_body is not None else sp.body)
    ex.a2_decisions = None
    if ex.a0_sources is not None:
        ex.body_sources = dict(ex.a0_sources)
        return
    sources = ex.body_sources or {}
    for key in [k for k, v in sources.items() if v == "a2"]:
        if key in sp.body:
            sources[key] = "default"
        else:
            del sources[key]


STAGE = Stage(name=AGENT_NAME, value="a2", label="A2 Shape", run=run, discard=discard,
              reads=(staleness.AGENT,))
