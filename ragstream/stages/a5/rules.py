"""A5's rendering: hard-rule sentences, the example shape and the one-line format spec."""

from __future__ import annotations

import json
import re

from ragstream.common.config import A5Config, FormatKind
from ragstream.common.text import fold, keyword_matches, sentences
from ragstream.stages.a5.lengths import LengthGrammar, blank, unit_label
from ragstream.state.records import LengthLimit

#: list markers at the start of a constraint line: "- ", "* ", "1. ", "2) ", "[ ] "
_LIST_MARKER = re.compile(r"^\s*(?:[-*•+]|\d+[.)]|\[[ xX]?\])\s+")


def as_rule(text: str) -> str:
    """A constraint sentence as a rule: one line, capitalised, ending in punctuation."""
    text = " ".join(text.split())
    if not text:
        return ""
    text = text[0].upper() + text[1:]
    return text if text[-1] in ".!?" else text + "."


def says_more(agent: A5Config, grammar: LengthGrammar, raw: str) -> bool:
    """Whether ``raw`` holds a word beyond format keywords, language cues, length phrases and
    filler words. Only then is it restated as a rule: "JSON object" or "under 200 words" are
    already rules, "no jargon" or "a table, not bullets" are not."""
    text = fold(raw)
    text = blank(text, [m.span() for m in grammar.pattern.finditer(text)])
    covered = [kw for spec in agent.kinds.values()
               for kw in [*spec.keywords, *spec.task_cues, spec.label]]
    covered += [c for lang in agent.answer_languages.values() for c in lang.cues]
    covered += [w for words in agent.code_languages.values() for w in words]
    text = blank(text, [(start, end) for start, end, _ in keyword_matches(covered, text)])
    fillers = {fold(w) for w in agent.filler_words}
    return any(w not in fillers for w in re.findall(r"\w+", text))


def constraint_rules(agent: A5Config, grammar: LengthGrammar, constraints: str) -> list[str]:
    """Each constraint sentence (or ';'-separated part) as a rule, unless the parsed rules
    already say all of it."""
    rules = []
    for line in constraints.splitlines():
        line = _LIST_MARKER.sub("", line)
        for sentence in sentences(line):
            for part in sentence.split(";"):
                if says_more(agent, grammar, part):
                    rules.append(as_rule(part))
    return rules


def dedupe(rules: list[str]) -> list[str]:
    """The non-empty rules in order, each once (compared folded)."""
    seen: set[str] = set()
    out = []
    for rule in rules:
        key = fold(rule)
        if rule and key not in seen:
            seen.add(key)
            out.append(rule)
    return out


def shape(agent: A5Config, kind: FormatKind, names: list[str]) -> str:
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


def spec_line(agent: A5Config, kind: FormatKind, code_language: str, names: list[str],
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
    parts.extend(agent.length_phrases[lim.bound].format(n=lim.value, unit=unit_label(agent, lim))
                 for lim in length)
    return ", ".join(parts)
