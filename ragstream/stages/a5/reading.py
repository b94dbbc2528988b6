"""What A5 reads from the prompt: the body fields, the kind, the languages and the names.

Each body field is folded once, and its length phrases are blanked out, so that "no more
than 5" reads as a length and not as a negation. Keywords use A2's grammar (folded, whole
words, ``*`` for a prefix); a keyword within ``negation_window_words`` after a negation cue,
in the same clause, does not count.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from ragstream.common.config import A5Config, FormatKind
from ragstream.common.text import fold, keyword_matches
from ragstream.stages.a5.lengths import LengthGrammar, blank, find_lengths, window_before
from ragstream.state.records import KindSource, LengthLimit
from ragstream.state.render import stated

#: a body field A5 reads
SourceKey = Literal["format", "constraints", "task"]
#: the body fields A5 reads, in the order they take precedence
SOURCE_KEYS: tuple[SourceKey, ...] = ("format", "constraints", "task")


@dataclass(frozen=True)
class Source:
    """One body field as A5 reads it."""

    name: SourceKey
    raw: str
    folded: str
    #: ``folded`` with length phrases blanked out, so "no more than 5" is not a negation
    blanked: str


def read_sources(agent: A5Config, grammar: LengthGrammar, body: dict[str, str],
                 body_sources: dict[str, str]) -> tuple[list[Source], list[LengthLimit]]:
    """The body fields in ``SOURCE_KEYS`` order (A0's defaults read as empty) and the length
    limits found in them, not yet merged."""
    sources: list[Source] = []
    found: list[LengthLimit] = []
    for key in SOURCE_KEYS:
        raw = stated(body, body_sources, key)
        folded = fold(raw)
        limits, spans = find_lengths(agent, grammar, folded)
        found.extend(limits)
        sources.append(Source(key, raw, folded, blank(folded, spans)))
    return sources, found


def _negated(agent: A5Config, src: Source, start: int) -> bool:
    """Whether a negation cue stands within ``negation_window_words`` before ``start``, in
    the same clause."""
    return bool(keyword_matches(agent.negation_cues, window_before(agent, src.blanked, start)))


def _hits(agent: A5Config, src: Source, keywords: Sequence[str]) -> list[tuple[int, int, str]]:
    return [h for h in keyword_matches(keywords, src.folded) if not _negated(agent, src, h[0])]


def detect_kind(agent: A5Config, sources: list[Source]) -> tuple[FormatKind, KindSource, list[str]]:
    """``(kind, source name, matched keywords)``: the first source with any keyword hit
    decides (the task by its ``task_cues`` only), the most hits win, a tie goes to the kind
    listed first; no hit at all gives ``default_format``."""
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


def first_named(agent: A5Config, sources: list[Source], table: dict[str, list[str]]) -> str:
    """The key of ``table`` whose words occur first: in the first source with any match, at
    the earliest position; a tie goes to the key listed first."""
    order = list(table)
    for src in sources:
        found = [(h[0], order.index(key), key)
                 for key, words in table.items() for h in _hits(agent, src, words)]
        if found:
            return min(found)[2]
    return ""


def name_list(agent: A5Config, kind: FormatKind, sources: list[Source],
              stop_words: Sequence[str], grammar: LengthGrammar) -> list[str]:
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
