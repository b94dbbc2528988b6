"""A5's LLM mode: the payload, the reply model and the reply checked into a ``FormatSpec``.

The payload holds the task, format and constraints (not A0's defaults) and the allowed kinds,
answer languages, code languages and length units. The reply (:class:`A5LLMOutput`, plain
strings) becomes the same ``FormatSpec`` as in deterministic mode:

* ``kind`` through :func:`clamp_kind`; the answer language, code language and length limits
  are checked against the config tables too. Every value that had to be changed or dropped is
  listed in ``format_enforcer.clamps``.
* The model's judgment is weighed against the rules' (:class:`RuleChoice`: the deterministic
  spec, which always runs, and the code language the prompt names) for the enum fields:
  ``kind``, ``language`` and, when the kind is code, ``code_language``
  (:func:`ragstream.agents.choices.weigh`). The call asks for token log-probabilities; where
  the endpoint gives them each field's value is read as probabilities over its enum and kept
  in the call's record (``llm_calls[...].probabilities``). A value the model chose that the
  rules did not is taken when its probability exceeds the runner-up's by at least
  ``choice_margin`` (A5's config), else the rules' choice stands; without probabilities (or
  for a repaired reply) it is taken, as before. A value outside the config's lists never
  stands: the rules' choice does (and the clamp says so). Each weighed field is a
  ``Judgment`` (rule, model with its probability, final, who decided, why with the threshold).
  Length units and bounds are enums too, but a list of limits has no rule to weigh against
  item by item: they are only checked.
* ``kind_source`` and ``matched`` are the rules' where the rules' kind stood or the model
  agreed; "llm" where the model's kind was taken over the rules'.
* ``hard_rules``: the model's rules, one line each, without empty or duplicate ones (or the
  kind's rule if it gave none), then the ``always_rules`` — always present and always last,
  exactly as in deterministic mode. Where the rules' choice stood over a model's value, the
  model's rules that restate the config's rule for its value are taken out and the config's
  rule for the value that stood comes first.
* ``example_shape`` is the model's unless its kind did not stand, ``normalized_format_spec``
  unless one of its weighed values did not (then they are built from the config, as in
  deterministic mode).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import cast, get_args

from pydantic import BaseModel, Field

from ragstream.agents import choices
from ragstream.agents.choices import Odds
from ragstream.agents.factory import Agent
from ragstream.agents.replies import Items, Text, bound
from ragstream.backends.llm import inline_schema
from ragstream.common.config import A5Config, FormatKind
from ragstream.common.text import fold
from ragstream.stages.a5.lengths import merge_lengths
from ragstream.stages.a5.rules import as_rule, dedupe, shape, spec_line
from ragstream.state.records import FormatClamp, FormatSpec, Judgment, LengthLimit
from ragstream.state.render import stated

FORMAT_KINDS: tuple[FormatKind, ...] = get_args(FormatKind)


# One length limit as the LLM states it (checked against the config by A5). The LLM reply
# models' docstrings go into the schema the model is shown, so they say only what the reply holds.
class A5LLMLength(BaseModel):
    """One length limit: a unit, a bound (max, min, exact or about) and a number."""

    unit: Text(12, "words, sentences, paragraphs, items, lines or characters")  # type: ignore[valid-type]
    bound: Text(8, "max, min, exact or about")  # type: ignore[valid-type]
    value: int = Field(description="the number")


# The reply A5 asks the LLM for: FormatSpec's fields, with plain strings so that out-of-enum
# values reach A5 and are clamped and logged instead of failing validation.
class A5LLMOutput(BaseModel):
    """The reply: the answer's kind, languages, length limits, names, hard rules, shape and format line."""

    kind: Text(20, "one of allowed_kinds")  # type: ignore[valid-type]
    code_language: Text(20, "for kind code: the code's language, else ''") = ""  # type: ignore[valid-type]
    language: Text(8, "answer language code from answer_languages, or ''") = ""  # type: ignore[valid-type]
    length: Items(A5LLMLength, 3) = Field(default_factory=list)  # type: ignore[valid-type]
    names: Items(Text(40), 12, "table columns or JSON/YAML keys the prompt names") = Field(  # type: ignore[valid-type]
        default_factory=list)
    hard_rules: Items(Text(120), 6, "short imperative sentences the answer must obey")  # type: ignore[valid-type]
    example_shape: Text(200, "a short skeleton of the answer, or ''") = ""  # type: ignore[valid-type]
    normalized_format_spec: Text(120, "one line naming the format") = ""  # type: ignore[valid-type]


def reply_schema(agent: A5Config) -> dict:
    """A5LLMOutput's schema with the config's closed lists as enums."""
    return bound(inline_schema(A5LLMOutput.model_json_schema()), {
        "kind": {"enum": list(agent.kinds)},
        "code_language": {"enum": ["", *agent.code_languages]},
        "language": {"enum": ["", *agent.answer_languages]},
        "length[].unit": {"enum": list(agent.length_units)},
        "length[].bound": {"enum": list(agent.length_rules)},
    })


def llm_payload(agent: A5Config, body: dict[str, str], body_sources: dict[str, str]) -> dict:
    """The prompt's format, constraints and task (not A0's defaults) and the default kind; the
    closed lists are the reply schema's enums."""
    payload: dict = {}
    for key in ("task", "format", "constraints"):
        value = stated(body, body_sources, key)
        if value.strip():
            payload[key] = value
    payload["default_kind"] = agent.default_format
    return payload


def clamp_kind(agent: A5Config, value: str) -> tuple[FormatKind, bool]:
    """``(kind, False)`` if ``value`` names a known kind ("JSON", "bullet list"), else
    ``(default_format, True)``. Used on the kind the LLM mode returns."""
    wanted = re.sub(r"[\s-]+", "_", (value or "").strip().lower())
    known = list(agent.kinds) or list(FORMAT_KINDS)
    for kind in known:
        if kind == wanted:
            return kind, False
    return agent.default_format, True


def _fold_tag(value: str) -> str:
    return " ".join(fold(value or "").split())


def _clamp_language(agent: A5Config, value: str) -> str | None:
    """The answer-language code for a code, a name or a cue ("de", "German", "auf Deutsch");
    "" for none; None when it names no configured language."""
    wanted = _fold_tag(value)
    if not wanted:
        return ""
    for code, lang in agent.answer_languages.items():
        if wanted in {fold(code), fold(lang.name), *(fold(c) for c in lang.cues)}:
            return code
    return None


def _clamp_code_language(agent: A5Config, value: str) -> str | None:
    """The code-fence tag for a tag or a word naming it; "" for none; None when unknown."""
    wanted = _fold_tag(value)
    if not wanted:
        return ""
    for tag, words in agent.code_languages.items():
        if wanted == fold(tag) or wanted in {fold(w) for w in words}:
            return tag
    return None


def _clamp_length(agent: A5Config, item: A5LLMLength) -> LengthLimit | None:
    unit_word = _fold_tag(item.unit)
    unit = next((u for u, spec in agent.length_units.items()
                 if unit_word in {fold(u), fold(spec.label), fold(spec.label_one),
                                  *(fold(k) for k in spec.keywords)}), None)
    bound_word = _fold_tag(item.bound)
    bound = next((b for b in agent.length_rules if b == bound_word), None)
    if unit is None or bound is None or item.value < 1:
        return None
    return LengthLimit(unit=unit, bound=bound, value=item.value)


def _clean_rules(agent: A5Config, rules: list[str]) -> list[str]:
    """The model's rules as one-line sentences, without empty ones and without the
    always_rules (which follow all others)."""
    always = {fold(r) for r in agent.always_rules}
    out = []
    for rule in rules:
        rule = as_rule(rule or "")
        if rule and fold(rule) not in always:
            out.append(rule)
    return dedupe(out)


@dataclass(frozen=True)
class RuleChoice:
    """What A5's rules choose for the fields the model's choice is weighed against: the
    deterministic spec, and the code language the prompt names first (whatever the kind)."""

    spec: FormatSpec
    code_language: str = ""


def _config_rule(agent: A5Config, field: str, value: str) -> str:
    """The config's hard rule that states ``value`` of ``field`` ("" for none)."""
    if not value:
        return ""
    if field == "kind":
        spec = agent.kinds.get(cast(FormatKind, value))
        return spec.rule if spec else ""
    if field == "language":
        lang = agent.answer_languages.get(value)
        return agent.language_rule.format(name=lang.name) if lang else ""
    return agent.code_language_rule.format(language=value)


def _restate(agent: A5Config, rules: list[str], weighed: list[choices.Weighed]) -> list[str]:
    """The model's rules where the rules' choice stood over the model's value: its rules that
    restate the config's rule for its own value are taken out, and the config's rule for the
    value that stood goes first."""
    first: list[str] = []
    for w in weighed:
        if w.final == w.model:
            continue
        gone = fold(_config_rule(agent, w.field, w.model or ""))
        rules = [r for r in rules if not gone or fold(r) != gone]
        if rule := _config_rule(agent, w.field, w.final):
            first.append(rule)
    return dedupe(first + rules)


def from_llm(agent: A5Config, answer: A5LLMOutput, rule: RuleChoice | None = None,
             odds: dict[str, Odds | None] | None = None,
             no_odds: str = choices.NO_PROBABILITY) -> tuple[FormatSpec, list[FormatClamp]]:
    """The model's answer as a ``FormatSpec``, weighed against ``rule`` (``weigh_reply``);
    and the list of values that were clamped or dropped."""
    spec, clamps, _ = weigh_reply(agent, answer, rule, odds, no_odds)
    return spec, clamps


def weigh_reply(agent: A5Config, answer: A5LLMOutput, rule: RuleChoice | None = None,
                odds: dict[str, Odds | None] | None = None,
                no_odds: str = choices.NO_PROBABILITY,
                ) -> tuple[FormatSpec, list[FormatClamp], list[Judgment]]:
    """The model's answer as a ``FormatSpec``, every value checked against the config and the
    enum fields (kind, answer language, and for kind code the code language) weighed against
    ``rule``'s (``choices.weigh``, with ``odds``: their probabilities, where the endpoint gave
    them; without ``rule``, the deterministic spec of an empty prompt); the values that were
    clamped or dropped; and a ``Judgment`` per weighed field."""
    rule = rule or RuleChoice(FormatSpec(kind=agent.default_format, kind_source="default"))
    odds = odds or {}
    clamps: list[FormatClamp] = []
    weighed: list[choices.Weighed] = []

    def note(field: str, value: object, clamped_to: object, why: str) -> None:
        clamps.append(FormatClamp(field=field, value=value, clamped_to=clamped_to, why=why))

    def weigh(field: str, rule_value: str, said: str, model: str | None) -> str:
        got = odds.get(field)
        w = choices.weigh(field, rule_value, said, model,
                          got if got is not None and got.chosen == model else None,
                          agent.choice_margin, no_odds)
        weighed.append(w)
        return w.final

    model_kind, kind_clamped = clamp_kind(agent, answer.kind)
    kind = cast(FormatKind, weigh("kind", rule.spec.kind, answer.kind,
                                  None if kind_clamped else model_kind))
    if kind_clamped:
        note("kind", answer.kind, kind, "not one of the allowed kinds: the rules' kind")
    models_kind = not kind_clamped and kind == model_kind
    spec = agent.kinds.get(kind)

    code_language = _clamp_code_language(agent, answer.code_language)
    if kind == "code":
        chosen = weigh("code_language", rule.code_language, answer.code_language, code_language)
        if code_language is None:
            note("code_language", answer.code_language, chosen,
                 "not one of code_languages: the rules' choice")
        code_language = chosen
    else:
        if code_language is None:
            note("code_language", answer.code_language, "", "not one of code_languages")
        elif code_language:
            note("code_language", answer.code_language, "", f"kind is {kind}, not code")
        code_language = ""

    model_language = _clamp_language(agent, answer.language)
    language = weigh("language", rule.spec.language, answer.language, model_language)
    if model_language is None:
        note("language", answer.language, language,
             "not one of answer_languages: the rules' choice")
    language_name = agent.answer_languages[language].name if language else ""

    limits = []
    for item in answer.length:
        limit = _clamp_length(agent, item)
        if limit is None:
            note("length", item.model_dump(), None, "unknown unit or bound, or a value below 1")
        else:
            limits.append(limit)
    length = merge_lengths(agent, limits)

    names: list[str] = []
    for name in answer.names:
        name = " ".join((name or "").split()).strip(" \"'`*")
        if name and len(name.split()) <= agent.max_name_words and name not in names:
            names.append(name)
        elif name and name not in names:
            note("names", name, None, f"more than max_name_words ({agent.max_name_words}) words")
    if names and kind not in agent.name_list_rules:
        note("names", names, [], f"kind {kind} has no columns or keys")
        names = []

    rules = _restate(agent, _clean_rules(agent, answer.hard_rules), weighed)
    if not rules and spec and spec.rule:
        rules = [spec.rule]
    rules = dedupe(rules + list(agent.always_rules))

    example = answer.example_shape.strip("\n")
    line = " ".join(answer.normalized_format_spec.split())
    if not models_kind or not example.strip():
        example = shape(agent, kind, names)
    if any(w.final != w.model for w in weighed) or not line:
        line = spec_line(agent, kind, code_language, names, language_name, length)

    kind_source, matched = ("llm", []) if models_kind and kind != rule.spec.kind else (
        rule.spec.kind_source, list(rule.spec.matched))
    return FormatSpec(
        kind=kind, kind_source=kind_source, matched=matched, clamped=kind_clamped,
        code_language=code_language, language=language, length=length, names=names,
        hard_rules=rules, example_shape=example, normalized_format_spec=line,
    ), clamps, [w.judgment() for w in weighed]


def ask(llm_agent: Agent, agent: A5Config, body: dict[str, str],
        body_sources: dict[str, str], rule: RuleChoice | None = None,
        ) -> tuple[FormatSpec, list[Judgment]]:
    """One call to the model (with token log-probabilities, where the endpoint gives them),
    its reply weighed against ``rule`` and checked into a ``FormatSpec`` with ``mode`` "llm"
    and the clamps; and the judgments. The call's record keeps each weighed field's
    probability (``probabilities``: field → P(the model's value))."""
    result = llm_agent.ask(llm_payload(agent, body, body_sources), reply_schema(agent),
                           logprobs=True)
    allowed: dict[str, list[str]] = {
        "kind": list(agent.kinds), "language": ["", *agent.answer_languages],
        "code_language": ["", *agent.code_languages]}
    odds = {name: choices.value_probabilities(result.log.tokens, name, values)
            for name, values in allowed.items()}
    result.log.probabilities = {n: o.probability for n, o in odds.items() if o is not None} or None
    no_odds = choices.no_odds_reason(llm_agent.llm.offers_logprobs(), bool(result.log.tokens),
                                     result.repaired)
    spec, clamps, judgments = weigh_reply(agent, result.value, rule, odds, no_odds)
    return spec.model_copy(update={"mode": "llm", "clamps": clamps}), judgments
