"""A5's length limits: "under 200 words", "1,000 words max", "3 to 5 paragraphs".

One regex over folded text, built from the config's cues, units and number words:
``[cue] NUMBER [to NUMBER] [filler] UNIT [cue]``. A range gives a min and a max, a cue before
or after the unit gives its bound, a bare number the unit's ``bare_number`` bound. A count
that describes each item ("one sentence per bullet", "keep each cell under 12 words") is not
a limit on the answer and is skipped. Repeated limits merge: the tightest max and min win.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ragstream.common.config import A5Config, LengthBound, LengthUnit
from ragstream.common.text import fold, keyword_matches
from ragstream.state.records import LengthLimit

#: punctuation that ends a clause: a negation never reaches across it
_CLAUSE_END = re.compile(r"[.,;:!?\n]")
_THOUSANDS = re.compile(r"[,.]")


@dataclass(frozen=True)
class LengthGrammar:
    """The compiled length regex and the tables that turn its groups into limits."""

    pattern: re.Pattern[str]
    per: re.Pattern[str] | None
    before: dict[str, LengthBound]
    after: dict[str, LengthBound]
    units: dict[str, LengthUnit]
    numbers: dict[str, int]


def blank(text: str, spans: Sequence[tuple[int, int]]) -> str:
    """``text`` with each span replaced by spaces (positions stay the same)."""
    for start, end in spans:
        text = text[:start] + " " * (end - start) + text[end:]
    return text


def _alternation(words: Iterable[str]) -> str:
    """Regex alternation of already folded words, longest first."""
    return "|".join(re.escape(w) for w in sorted(set(words), key=lambda w: (-len(w), w)))


def length_grammar(agent: A5Config) -> LengthGrammar:
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
    return LengthGrammar(re.compile(pattern), per, before, after, units, numbers)


def window_before(agent: A5Config, text: str, start: int) -> str:
    """The last ``negation_window_words`` words before ``start``, within the same clause."""
    clause = _CLAUSE_END.split(text[:start])[-1]
    return " ".join(clause.split()[-agent.negation_window_words:])


def _per_item(agent: A5Config, grammar: LengthGrammar, folded: str, m: re.Match[str]) -> bool:
    """Whether a count describes each item rather than the answer: "one sentence per
    bullet", "keep each cell under 12 words". Such a sentence is restated, not parsed."""
    if not agent.per_cues:
        return False
    if grammar.per is not None and grammar.per.match(folded, m.end()):
        return True
    return bool(keyword_matches(agent.per_cues, window_before(agent, folded, m.start())))


def _number(text: str, numbers: dict[str, int]) -> int:
    return numbers[text] if text in numbers else int(_THOUSANDS.sub("", text))


def find_lengths(agent: A5Config, grammar: LengthGrammar, folded: str
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


def merge_lengths(agent: A5Config, limits: list[LengthLimit]) -> list[LengthLimit]:
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


def unit_label(agent: A5Config, lim: LengthLimit) -> str:
    """The unit's word for this value: "word" for 1, "words" otherwise."""
    unit = agent.length_units[lim.unit]
    return unit.label_one if lim.value == 1 else unit.label
