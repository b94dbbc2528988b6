"""A5_Format_Enforcer: turn the requested output format into hard rules for the answer.

A5 makes sure the final answer will follow the requested structure. It reads
``body["format"]``, ``body["constraints"]`` and ``body["task"]`` and writes one
:class:`FormatSpec` to ``sp.extras.format_enforcer``; Prompt_Builder later renders its
``hard_rules`` into the System block. A5 changes nothing else: not the body, not
``prompt_ready``, not ``final_selection_ids`` or ``S_CTX_MD``.

Deterministic mode ("normalising the requested format into hard rules"), every table in
``config/agents/A5_Format_Enforcer.json``:

Fields A0 only filled with a default (``body_sources[key] == "default"``, e.g. format
"Markdown") were not asked for and are not read.

* **kind** — the format, from keyword counts per kind. The format field is read first, then
  the constraints, then the task (which only counts stricter ``task_cues`` such as "as a
  table"); the first text with any match decides, a tie goes to the kind listed first, and no
  match at all gives ``default_format``. A keyword shortly after a negation ("no tables",
  "nicht als Tabelle") does not count.
* **code_language** — for code, the first language named (it tags the code fences).
* **language** — the answer language, from cues such as "in German" / "auf Deutsch".
* **length** — limits like "under 200 words", "max 5 bullets", "in 3 sentences",
  "höchstens 100 Wörter", "3 to 5 paragraphs"; repeated limits keep the tightest.
* **names** — table columns or JSON/YAML keys ("with columns Name, Role and Since").
* **hard_rules** — imperative sentences: the kind's rule, names, language, lengths, the
  format text itself when it says more than the kind, each constraint sentence, and the
  ``always_rules`` (cite sources as [n]; use only the context).
* **example_shape** — a short skeleton for json, yaml, table and checklist answers.
* **normalized_format_spec** — one line, e.g. "Markdown table, in German, at most 200 words".

Keywords use A2's grammar (folded, whole words, ``*`` for a prefix).

LLM mode (an endpoint is configured; a Writer/Extractor, one call through ``run_agent``): the
payload holds the task, format and constraints (not A0's defaults) and the allowed kinds,
answer languages, code languages and length units. The reply (:class:`A5LLMOutput`, plain
strings) becomes the same ``FormatSpec``:

* ``kind`` through :func:`clamp_kind` (unknown → ``default_format``); the answer language,
  code language and length limits are checked against the config tables too. Every value
  that had to be changed or dropped is listed in ``format_enforcer.clamps``.
* ``hard_rules``: the model's rules, one line each, without empty or duplicate ones (or the
  kind's rule if it gave none), then the ``always_rules`` — always present and always last,
  exactly as in deterministic mode.
* ``example_shape`` and ``normalized_format_spec`` are the model's unless the kind was clamped
  (then they are built from the config, as in deterministic mode).

``format_enforcer`` then also says ``"mode": "llm"``. If the endpoint fails or the reply stays
invalid after one repair, the deterministic mode runs and ``agent_modes`` records why.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, get_args

from pydantic import BaseModel, Field

from ragstream.agents.factory import Agent, run_agent
from ragstream.config import A5Config, AppConfig, FormatKind, LengthBound, LengthUnit
from ragstream.records import FormatClamp, FormatSpec, KindSource, LengthLimit
from ragstream.services import Services
from ragstream.stages.stage import Stage
from ragstream.super_prompt import SuperPrompt
from ragstream.text import fold, keyword_matches, sentences

AGENT_NAME = "A5_Format_Enforcer"

FORMAT_KINDS: tuple[FormatKind, ...] = get_args(FormatKind)

#: a body field A5 reads
SourceKey = Literal["format", "constraints", "task"]
#: where the kind came from: a body field, ``default_format`` or the LLM
#: the body fields A5 reads, in the order they take precedence
SOURCE_KEYS: tuple[SourceKey, ...] = ("format", "constraints", "task")

#: punctuation that ends a clause: a negation never reaches across it
_CLAUSE_END = re.compile(r"[.,;:!?\n]")
#: list markers at the start of a constraint line: "- ", "* ", "1. ", "2) ", "[ ] "
_LIST_MARKER = re.compile(r"^\s*(?:[-*•+]|\d+[.)]|\[[ xX]?\])\s+")
_THOUSANDS = re.compile(r"[,.]")


# One length limit as the LLM states it (checked against the config by A5). The LLM reply
# models' docstrings go into the schema the model is shown, so they say only what the reply holds.
class A5LLMLength(BaseModel):
    """One length limit: a unit, a bound (max, min, exact or about) and a number."""

    unit: str = Field(description="words, sentences, paragraphs, items, lines or characters")
    bound: str = Field(description="max, min, exact or about")
    value: int = Field(description="the number")


# The reply A5 asks the LLM for: FormatSpec's fields, with plain strings so that out-of-enum
# values reach A5 and are clamped and logged instead of failing validation.
class A5LLMOutput(BaseModel):
    """The reply: the answer's kind, languages, length limits, names, hard rules, shape and format line."""

    kind: str = Field(description="one of allowed_kinds")
    code_language: str = Field("", description="for kind code: one of code_languages, else ''")
    language: str = Field("", description="answer language code from answer_languages, or ''")
    length: list[A5LLMLength] = Field(default_factory=list)
    names: list[str] = Field(default_factory=list,
                             description="table columns or JSON/YAML keys the prompt names")
    hard_rules: list[str] = Field(description="short imperative sentences the answer must obey")
    example_shape: str = Field("", description="a short skeleton of the answer, or ''")
    normalized_format_spec: str = Field("", description="one line naming the format")


@dataclass(frozen=True)
class _Source:
    """One body field as A5 reads it."""

    name: SourceKey
    raw: str
    folded: str
    #: ``folded`` with length phrases blanked out, so "no more than 5" is not a negation
    blanked: str


def _blank(text: str, spans: Sequence[tuple[int, int]]) -> str:
    """``text`` with each span replaced by spaces (positions stay the same)."""
    for start, end in spans:
        text = text[:start] + " " * (end - start) + text[end:]
    return text


def _alternation(words: Iterable[str]) -> str:
    """Regex alternation of already folded words, longest first."""
    return "|".join(re.escape(w) for w in sorted(set(words), key=lambda w: (-len(w), w)))


# --------------------------------------------------------------------------- length limits


@dataclass(frozen=True)
class _LengthGrammar:
    pattern: re.Pattern[str]
    per: re.Pattern[str] | None
    before: dict[str, LengthBound]
    after: dict[str, LengthBound]
    units: dict[str, LengthUnit]
    numbers: dict[str, int]


def _length_grammar(agent: A5Config) -> _LengthGrammar:
    """The length regex: ``[cue] NUMBER [to NUMBER] [filler] UNIT [cue]``, on folded text."""
    before = {fold(c): bound for bound, cues in agent.length_cues_before.items() for c in cues}
    after = {fold(c): bound for bound, cues in agent.length_cues_after.items() for c in cues}
    units = {fold(k): unit for unit, u in agent.length_units.items() for k in u.keywords}
    numbers = {fold(w): n for w, n in agent.number_words.items()}
    number = r"\d{1,3}(?:[,.]\d{3})+|\d{1,6}" + (f"|{_alternation(numbers)}" if numbers else "")
    range_part = (rf"(?:\s*(?:{_alternation([fold(w) for w in agent.range_words])})\s*"
                  rf"(?P<num2>{number})(?!\w))?" if agent.range_words else "")
    pattern = (
        r"(?<!\w)"
        + (rf"(?:(?P<pre>{_alternation(before)})\s+)?" if before else "")
        + rf"(?P<num>{number})(?!\w)"
        + range_part
        + rf"(?:[\s-]+(?!\d)\w+){{0,{agent.max_filler_words}}}?"
        + rf"[\s-]+(?P<unit>{_alternation(units)})(?!\w)"
        + (rf"(?:\s+(?P<post>{_alternation(after)})(?!\w))?" if after else "")
    )
    per_words = [fold(c) for c in agent.per_cues]
    per = re.compile(rf"\s+(?:{_alternation(per_words)})(?!\w)") if per_words else None
    return _LengthGrammar(re.compile(pattern), per, before, after, units, numbers)


def _window_before(agent: A5Config, text: str, start: int) -> str:
    """The last ``negation_window_words`` words before ``start``, within the same clause."""
    clause = _CLAUSE_END.split(text[:start])[-1]
    return " ".join(clause.split()[-agent.negation_window_words:])


def _per_item(agent: A5Config, grammar: _LengthGrammar, folded: str, m: re.Match[str]) -> bool:
    """Whether a count describes each item rather than the answer: "one sentence per
    bullet", "keep each cell under 12 words". Such a sentence is restated, not parsed."""
    if not agent.per_cues:
        return False
    if grammar.per is not None and grammar.per.match(folded, m.end()):
        return True
    return bool(keyword_matches(agent.per_cues, _window_before(agent, folded, m.start())))


def _number(text: str, numbers: dict[str, int]) -> int:
    return numbers[text] if text in numbers else int(_THOUSANDS.sub("", text))


def _find_lengths(agent: A5Config, grammar: _LengthGrammar, folded: str
                  ) -> tuple[list[LengthLimit], list[tuple[int, int]]]:
    """Length limits in one folded text, and the character spans they cover."""
    if not agent.length_units:
        return [], []
    limits: list[LengthLimit] = []
    spans: list[tuple[int, int]] = []
    for m in grammar.pattern.finditer(folded):
        if _per_item(agent, grammar, folded, m):
            continue
        spans.append(m.span())
        unit = grammar.units[m.group("unit")]
        n = _number(m.group("num"), grammar.numbers)
        if m.groupdict().get("num2"):
            lo, hi = sorted((n, _number(m.group("num2"), grammar.numbers)))
            found: list[tuple[LengthBound, int]] = [("min", lo), ("max", hi)]
        elif m.groupdict().get("pre"):
            found = [(grammar.before[m.group("pre")], n)]
        elif m.groupdict().get("post"):
            found = [(grammar.after[m.group("post")], n)]
        else:
            found = [(agent.length_units[unit].bare_number, n)]
        limits.extend(LengthLimit(unit=unit, bound=b, value=v) for b, v in found if v >= 1)
    return limits, spans


def _merge_lengths(agent: A5Config, limits: list[LengthLimit]) -> list[LengthLimit]:
    """One limit per (unit, bound): the tightest max and min, the first exact/about value;
    ordered by unit, then bound, both in config order."""
    merged: dict[tuple[LengthUnit, LengthBound], int] = {}
    for lim in limits:
        key = (lim.unit, lim.bound)
        if key not in merged:
            merged[key] = lim.value
        elif lim.bound == "max":
            merged[key] = min(merged[key], lim.value)
        elif lim.bound == "min":
            merged[key] = max(merged[key], lim.value)
    unit_order = list(agent.length_units)
    bound_order = list(agent.length_rules)  # the config validator ensures every bound is there
    keys = sorted(merged, key=lambda k: (unit_order.index(k[0]), bound_order.index(k[1])))
    return [LengthLimit(unit=u, bound=b, value=merged[(u, b)]) for u, b in keys]


def _unit_label(agent: A5Config, lim: LengthLimit) -> str:
    unit = agent.length_units[lim.unit]
    return unit.label_one if lim.value == 1 else unit.label


# --------------------------------------------------------------------------- keyword hits


def _negated(agent: A5Config, src: _Source, start: int) -> bool:
    """Whether a negation cue stands within ``negation_window_words`` before ``start``, in
    the same clause."""
    return bool(keyword_matches(agent.negation_cues, _window_before(agent, src.blanked, start)))


def _hits(agent: A5Config, src: _Source, keywords: Sequence[str]) -> list[tuple[int, int, str]]:
    return [h for h in keyword_matches(keywords, src.folded) if not _negated(agent, src, h[0])]


def _detect_kind(agent: A5Config, sources: list[_Source]) -> tuple[FormatKind, KindSource, list[str]]:
    """``(kind, source name, matched keywords)``; see the module docstring."""
    for src in sources:
        scores = {
            kind: _hits(agent, src, spec.task_cues if src.name == "task" else spec.keywords)
            for kind, spec in agent.kinds.items()
        }
        if not any(scores.values()):
            continue
        best = max(agent.kinds, key=lambda k: len(scores[k]))  # first maximum = config order
        hit_words = {kw for _, _, kw in scores[best]}
        spec = agent.kinds[best]
        keywords = spec.task_cues if src.name == "task" else spec.keywords
        return best, src.name, [kw for kw in keywords if kw in hit_words]
    return agent.default_format, "default", []


def _first_named(agent: A5Config, sources: list[_Source], table: dict[str, list[str]]) -> str:
    """The key of ``table`` whose words occur first: in the first source with any match, at
    the earliest position; a tie goes to the key listed first."""
    order = list(table)
    for src in sources:
        found = [(h[0], order.index(key), key)
                 for key, words in table.items() for h in _hits(agent, src, words)]
        if found:
            return min(found)[2]
    return ""


# --------------------------------------------------------------------------- names


def _name_list(agent: A5Config, kind: FormatKind, sources: list[_Source],
               stop_words: Sequence[str], grammar: _LengthGrammar) -> list[str]:
    """Column or key names after a cue such as "columns" / "keys", or [] if none or unclear."""
    cues = agent.name_list_cues.get(kind)
    if not cues:
        return []
    cue_re = re.compile(
        r"(?<!\w)(?:" + "|".join(re.escape(c) for c in sorted(cues, key=len, reverse=True))
        + r")(?:\s*[:=(]\s*|\s+)(?P<list>[^.;:\n()]+)", re.IGNORECASE)
    joiners = "|".join(re.escape(j) for j in agent.name_list_joiners)
    split_re = re.compile(r"\s*(?:[,;|/]" + (rf"|\s(?:{joiners})\s" if joiners else "") + r")\s*",
                          re.IGNORECASE)
    fillers = {fold(w) for w in agent.filler_words}
    for src in sources:
        m = cue_re.search(src.raw)
        if not m:
            continue
        names: list[str] = []
        for item in split_re.split(m.group("list")):
            words = item.strip(" \t\"'`*").split()
            # the list ends where a language cue or a length phrase begins ("... in German")
            folded = " ".join(fold(w) for w in words)
            ends = [h[0] for h in keyword_matches(stop_words, folded)]
            ends += [lm.start() for lm in grammar.pattern.finditer(folded)]
            if ends:
                words = words[:folded[:min(ends)].count(" ")]
            while len(words) > 1 and fold(words[0]) in fillers:
                words = words[1:]
            name = " ".join(words).strip(" \"'`*")
            if ends and not name:
                break
            if not name or len(words) > agent.max_name_words:
                return []
            if name not in names:
                names.append(name)
            if ends:
                break
        return names
    return []


def _shape(agent: A5Config, kind: FormatKind, names: list[str]) -> str:
    """The example skeleton: built from the names when there are any, else the config's."""
    if names and kind == "table":
        return "\n".join(["| " + " | ".join(names) + " |",
                          "| " + " | ".join("---" for _ in names) + " |",
                          "| " + " | ".join("..." for _ in names) + " |"])
    if names and kind == "json":
        return json.dumps({n: "..." for n in names}, indent=2, ensure_ascii=False)
    if names and kind == "yaml":
        return "\n".join(f"{n}: ..." for n in names)
    spec = agent.kinds.get(kind)
    return spec.example_shape if spec else ""


# --------------------------------------------------------------------------- rules


def _as_rule(text: str) -> str:
    """A constraint sentence as a rule: one line, capitalised, ending in punctuation."""
    text = " ".join(text.split())
    if not text:
        return ""
    text = text[0].upper() + text[1:]
    return text if text[-1] in ".!?" else text + "."


def _says_more(agent: A5Config, grammar: _LengthGrammar, raw: str) -> bool:
    """Whether ``raw`` holds a word beyond format keywords, language cues, length phrases and
    filler words. Only then is it restated as a rule: "JSON object" or "under 200 words" are
    already rules, "no jargon" or "a table, not bullets" are not."""
    text = fold(raw)
    text = _blank(text, [m.span() for m in grammar.pattern.finditer(text)])
    covered = [kw for spec in agent.kinds.values()
               for kw in [*spec.keywords, *spec.task_cues, spec.label]]
    covered += [c for lang in agent.answer_languages.values() for c in lang.cues]
    covered += [w for words in agent.code_languages.values() for w in words]
    text = _blank(text, [(start, end) for start, end, _ in keyword_matches(covered, text)])
    fillers = {fold(w) for w in agent.filler_words}
    return any(w not in fillers for w in re.findall(r"\w+", text))


def _constraint_rules(agent: A5Config, grammar: _LengthGrammar, constraints: str) -> list[str]:
    """Each constraint sentence (or ';'-separated part) as a rule, unless the parsed rules
    already say all of it."""
    rules = []
    for line in constraints.splitlines():
        line = _LIST_MARKER.sub("", line)
        for sentence in sentences(line):
            for part in sentence.split(";"):
                if _says_more(agent, grammar, part):
                    rules.append(_as_rule(part))
    return rules


def _dedupe(rules: list[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for rule in rules:
        key = fold(rule)
        if rule and key not in seen:
            seen.add(key)
            out.append(rule)
    return out


def clamp_kind(agent: A5Config, value: str) -> tuple[FormatKind, bool]:
    """``(kind, False)`` if ``value`` names a known kind ("JSON", "bullet list"), else
    ``(default_format, True)``. Used on the kind the LLM mode returns."""
    wanted = re.sub(r"[\s-]+", "_", (value or "").strip().lower())
    known = list(agent.kinds) or list(FORMAT_KINDS)
    for kind in known:
        if kind == wanted:
            return kind, False
    return agent.default_format, True


# --------------------------------------------------------------------------- the stage


def _deterministic(agent: A5Config, body: dict[str, str],
                   body_sources: dict[str, str]) -> FormatSpec:
    grammar = _length_grammar(agent)
    sources: list[_Source] = []
    found: list[LengthLimit] = []
    for key in SOURCE_KEYS:
        raw = "" if body_sources.get(key) == "default" else (body.get(key, "") or "")
        folded = fold(raw)
        limits, spans = _find_lengths(agent, grammar, folded)
        found.extend(limits)
        sources.append(_Source(key, raw, folded, _blank(folded, spans)))
    length = _merge_lengths(agent, found)

    kind, kind_source, matched = _detect_kind(agent, sources)
    spec = agent.kinds.get(kind)
    code_language = _first_named(agent, sources, agent.code_languages) if kind == "code" else ""
    language = _first_named(agent, sources,
                            {code: lang.cues for code, lang in agent.answer_languages.items()})
    language_name = agent.answer_languages[language].name if language else ""
    stop_words = [c for lang in agent.answer_languages.values() for c in lang.cues]
    names = _name_list(agent, kind, sources, stop_words, grammar)

    rules: list[str] = []
    if spec and spec.rule:
        rules.append(spec.rule)
    if code_language:
        rules.append(agent.code_language_rule.format(language=code_language))
    if names and kind in agent.name_list_rules:
        rules.append(agent.name_list_rules[kind].format(names=", ".join(names)))
    if language_name:
        rules.append(agent.language_rule.format(name=language_name))
    rules.extend(agent.length_rules[lim.bound].format(n=lim.value, unit=_unit_label(agent, lim))
                 for lim in length)
    fmt = sources[0].raw
    if _says_more(agent, grammar, fmt):
        rules.append(_as_rule(agent.format_rule.format(format=" ".join(fmt.split()))))
    rules.extend(_constraint_rules(agent, grammar, sources[1].raw))
    rules.extend(agent.always_rules)

    return FormatSpec(
        kind=kind, kind_source=kind_source, matched=matched, code_language=code_language,
        language=language, length=length, names=names, hard_rules=_dedupe(rules),
        example_shape=_shape(agent, kind, names),
        normalized_format_spec=_spec_line(agent, kind, code_language, names, language_name,
                                          length),
    )


def _spec_line(agent: A5Config, kind: FormatKind, code_language: str, names: list[str],
               language_name: str, length: list[LengthLimit]) -> str:
    """The one-line spec: "Markdown table (Stage | Effect), in German, at most 200 words"."""
    spec = agent.kinds.get(kind)
    label = spec.label if spec else kind
    if code_language:
        label += f" ({code_language})"
    if names:
        label += " (" + " | ".join(names) + ")"
    parts = [label]
    if language_name:
        parts.append(agent.language_phrase.format(name=language_name))
    parts.extend(agent.length_phrases[lim.bound].format(n=lim.value, unit=_unit_label(agent, lim))
                 for lim in length)
    return ", ".join(parts)


# --------------------------------------------------------------------------- LLM mode


def llm_payload(agent: A5Config, body: dict[str, str], body_sources: dict[str, str]) -> dict:
    """The prompt's format, constraints and task (not A0's defaults) and the closed lists."""
    payload: dict = {}
    for key in ("task", "format", "constraints"):
        value = "" if body_sources.get(key) == "default" else (body.get(key, "") or "")
        if value.strip():
            payload[key] = value
    payload["allowed_kinds"] = {kind: spec.label for kind, spec in agent.kinds.items()}
    payload["default_kind"] = agent.default_format
    payload["answer_languages"] = {code: lang.name for code, lang in agent.answer_languages.items()}
    payload["code_languages"] = list(agent.code_languages)
    payload["length_units"] = list(agent.length_units)
    payload["length_bounds"] = list(agent.length_rules)
    return payload


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
        rule = _as_rule(rule or "")
        if rule and fold(rule) not in always:
            out.append(rule)
    return _dedupe(out)


def from_llm(agent: A5Config, answer: A5LLMOutput) -> tuple[FormatSpec, list[FormatClamp]]:
    """The model's answer as a ``FormatSpec``, every value checked against the config; and the
    list of values that were clamped or dropped."""
    clamps: list[FormatClamp] = []

    def note(field: str, value: object, clamped_to: object, why: str) -> None:
        clamps.append(FormatClamp(field=field, value=value, clamped_to=clamped_to, why=why))

    kind, kind_clamped = clamp_kind(agent, answer.kind)
    if kind_clamped:
        note("kind", answer.kind, kind, "not one of the allowed kinds: default_format")
    spec = agent.kinds.get(kind)

    code_language = _clamp_code_language(agent, answer.code_language)
    if code_language is None:
        note("code_language", answer.code_language, "", "not one of code_languages")
        code_language = ""
    if code_language and kind != "code":
        note("code_language", answer.code_language, "", f"kind is {kind}, not code")
        code_language = ""

    language = _clamp_language(agent, answer.language)
    if language is None:
        note("language", answer.language, "", "not one of answer_languages")
        language = ""
    language_name = agent.answer_languages[language].name if language else ""

    limits = []
    for item in answer.length:
        limit = _clamp_length(agent, item)
        if limit is None:
            note("length", item.model_dump(), None, "unknown unit or bound, or a value below 1")
        else:
            limits.append(limit)
    length = _merge_lengths(agent, limits)

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

    rules = _clean_rules(agent, answer.hard_rules)
    if not rules and spec and spec.rule:
        rules = [spec.rule]
    rules = _dedupe(rules + list(agent.always_rules))

    shape = answer.example_shape.strip("\n")
    line = " ".join(answer.normalized_format_spec.split())
    if kind_clamped or not shape.strip():
        shape = _shape(agent, kind, names)
    if kind_clamped or not line:
        line = _spec_line(agent, kind, code_language, names, language_name, length)

    return FormatSpec(
        kind=kind, kind_source="llm", matched=[], clamped=kind_clamped,
        code_language=code_language, language=language, length=length, names=names,
        hard_rules=rules, example_shape=shape, normalized_format_spec=line,
    ), clamps


def _llm(llm_agent: Agent, agent: A5Config, body: dict[str, str],
         body_sources: dict[str, str]) -> FormatSpec:
    answer: A5LLMOutput = llm_agent.ask(llm_payload(agent, body, body_sources)).value
    spec, clamps = from_llm(agent, answer)
    return spec.model_copy(update={"mode": "llm", "clamps": clamps})


def run(sp: SuperPrompt, cfg: AppConfig, services: Services | None) -> SuperPrompt:
    """Write the answer's format rules to ``sp.extras.format_enforcer``."""
    agent = cfg.agents.A5_Format_Enforcer
    body_sources = sp.extras.body_sources or {}
    sp.extras.format_enforcer = run_agent(
        sp, AGENT_NAME, cfg, services,
        llm_path=lambda llm_agent: _llm(llm_agent, agent, sp.body, body_sources),
        deterministic_path=lambda: _deterministic(agent, sp.body, body_sources),
        output=A5LLMOutput,
    )
    return sp


def discard(sp: SuperPrompt) -> None:
    """Forget the format spec and hard rules."""
    sp.extras.format_enforcer = None


STAGE = Stage(name=AGENT_NAME, value="a5", label="A5 Format", run=run, discard=discard)
