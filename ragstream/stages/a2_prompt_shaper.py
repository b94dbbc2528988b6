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
* The call asks for token log-probabilities; where the endpoint gives them, each field's
  value is read as probabilities over its enum (:func:`ragstream.agents.choices.value_probabilities`)
  and kept in the call's record (``llm_calls[...].probabilities``: field → P(the model's value)).
* The model's judgment is weighed against the rules' (:func:`ragstream.agents.choices.weigh`;
  the rules, i.e. the deterministic mode, always run: it is cheap). Per field, and for the
  confidence (whose rule is the count of decided fields):

  - the model's value is one of the field's values (:func:`clamp`, compared folded) and
    differs from the rule's: it is taken when its probability exceeds the runner-up's by at
    least ``choice_margin`` (A2's config), else the rule's choice stands; without
    probabilities from the endpoint (or for a repaired reply) it is taken, as before;
  - it is the rule's value: the rule's decision (the model agrees);
  - it is none of the values: the rule's choice stands, and the decision says
    ``clamped: true`` with the ``original`` answer.

  A decision the model's value made has ``source: "llm"``; where the rule's choice stood the
  decision is the deterministic one (``source`` "rule" with its keywords, or "default";
  the confidence's "rule"). Every field (and the confidence) gets a ``Judgment`` in
  ``sp.extras.judgments["A2_PromptShaper"]``: the rule's value, the model's with its
  probability, what stood, who decided ("rule", "llm", "you") and why, with the threshold
  (e.g. "P 0.54, researcher 0.46, margin 0.08 < choice_margin 0.2: the rule's choice
  stands"). The page's Fields tab shows it beside the field.
* Fields the user wrote (or a person edited) are kept verbatim, exactly as in deterministic
  mode; their judgment says "you" and still shows what the rule and the model would choose.
* If the endpoint fails or the reply stays invalid after one repair, the deterministic mode
  runs and ``agent_modes`` records the fallback and why.

Both modes return an :class:`A2Output`, so everything after the decision is shared.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict

from ragstream.agents import choices
from ragstream.agents.choices import Odds
from ragstream.agents.factory import Agent, run_agent
from ragstream.agents.replies import Text, bound
from ragstream.backends.llm import inline_schema
from ragstream.backends.services import Services
from ragstream.common.config import A2Config, A2Field, AppConfig
from ragstream.common.text import fold, keyword_matches
from ragstream.stages import staleness
from ragstream.stages.stage import Stage
from ragstream.state import edits, render
from ragstream.state.records import A2Decision, Judgment
from ragstream.state.super_prompt import SuperPrompt

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
    #: LLM mode: per field, the rule's value, the model's and what stood (``extras.judgments``)
    judgments: list[Judgment] = []


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


def _folded(body: dict[str, str], sources: dict[str, str]) -> str:
    """The text the keyword rules read, folded."""
    return fold("\n".join(body[k] for k in _read_keys(body, sources)))


def _deterministic(agent: A2Config, body: dict[str, str], sources: dict[str, str]) -> A2Output:
    folded = _folded(body, sources)

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
             sources: dict[str, str], odds: dict[str, Odds | None] | None = None,
             no_odds: str = choices.NO_PROBABILITY) -> A2Output:
    """The LLM's choices weighed against the rules' (``choices.weigh``, with ``odds``: each
    field's probabilities, where the endpoint gave them): the model's value where it stands,
    else the rule's decision as deterministic mode makes it; the user's own fields kept
    verbatim. ``judgments`` has the rule's, the model's and the final value of every field."""
    odds = odds or {}
    rule = _deterministic(agent, body, sources)
    rule_by = {d.field: d for d in rule.decisions}
    folded = _folded(body, sources)
    weighed: dict[str, choices.Weighed] = {}

    def weigh(name: str, levels: A2Field, rule_value: str, said: str) -> choices.Weighed:
        value, clamped = clamp(levels, said)
        model = None if clamped else value
        got = odds.get(name)
        got = got if got is not None and got.chosen == model else None
        weighed[name] = choices.weigh(name, rule_value, said, model, got, agent.choice_margin,
                                      no_odds)
        return weighed[name]

    def by_llm(name: str, field: A2Field) -> A2Decision:
        said = getattr(answer, name)
        w = weigh(name, field, rule_by[name].value, said)
        if w.decided_by == "llm":
            return A2Decision(field=name, value=w.final, source="llm")
        return rule_by[name].model_copy(update={"clamped": w.model is None,
                                                "original": said if w.model is None else None})

    values, decisions = _decide(agent, body, sources, by_llm)
    given = {d.field: d.value for d in decisions if d.source in GIVEN}
    for name, field in agent.fields.items():
        if name in given:  # what the rule and the model would have chosen, beside it
            said = getattr(answer, name)
            value, clamped = clamp(field, said)
            model = None if clamped else value
            got = odds.get(name)
            weighed[name] = choices.given(
                name, choose_by_rules(field, folded)[0], said, model,
                got if got is not None and got.chosen == model else None, given[name])
    levels = A2Field(values=list(agent.confidence_values), default=agent.confidence_default)
    w = weigh("confidence", levels, rule.confidence, answer.confidence)
    decisions.append(A2Decision(field="confidence", value=w.final,
                                source="llm" if w.decided_by == "llm" else "rule",
                                clamped=w.model is None,
                                original=answer.confidence if w.model is None else None))
    order = [*agent.fields, "confidence"]
    return A2Output(values=values, confidence=w.final, decisions=decisions,
                    judgments=[weighed[n].judgment() for n in order if n in weighed])


def _llm(llm_agent: Agent, agent: A2Config, body: dict[str, str], sources: dict[str, str],
         prompt: str) -> A2Output:
    result = llm_agent.ask(llm_payload(agent, body, sources, prompt), reply_schema(agent),
                           logprobs=True)
    allowed: dict[str, list[str]] = {name: field.values for name, field in agent.fields.items()}
    allowed["confidence"] = agent.confidence_values
    odds = {name: choices.value_probabilities(result.log.tokens, name, values)
            for name, values in allowed.items()}
    result.log.probabilities = {n: o.probability for n, o in odds.items() if o is not None} or None
    no_odds = choices.no_odds_reason(llm_agent.llm.offers_logprobs(), bool(result.log.tokens),
                                     result.repaired)
    return from_llm(agent, result.value, body, sources, odds, no_odds)


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

    judgments = list(output.judgments)
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
        judgments = [j if j.item != "confidence" else j.model_copy(update={
            "final": body["confidence"], "decided_by": "you",
            "why": "set by you: neither the rule nor the model changes it"}) for j in judgments]
    for name, edit in mine.items():
        was = next((d.value for d in output.decisions if d.field == name), None)
        said = f" (A2 would choose {was!r})" if was is not None and was != edit.after else ""
        edits.note(sp, AGENT_NAME, edit, True, f"{name} set by you{said}")

    sp.body = body
    sp.extras.body_sources = sources
    sp.extras.a2_decisions = decisions
    if judgments:
        sp.extras.judgments[AGENT_NAME] = judgments
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


STAGE = Stage(name=AGENT_NAME, value="a2", label="A2 Prompt shaper", run=run, discard=discard,
              reads=(staleness.AGENT,))
