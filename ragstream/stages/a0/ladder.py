"""A0's mapping ladder: one header label to a canonical key, or to none.

Each label is normalised (``normalize_term``) and tried against these rungs, in order; the
first hit wins and its rung is recorded with the reason:

1. **exact** — the label is a canonical key (``context``).
2. **alias** — the label is an alias (``goal`` → purpose, ``background`` → context).
3. **typo** — optimal-string-alignment Damerau-Levenshtein distance to a key or alias, with
   one edit allowed per ``typo_chars_per_edit`` characters of the label, at most
   ``max_typo_edits``, for labels of at least ``min_typo_label_chars`` characters that are not
   in ``typo_exclusions`` (real words such as "next" ~ "text" or "note" ~ "tone"). The closest
   term wins; ties go to the alphabetically first term and are noted in the detail.
4. **bilingual** — the label is a word for a key in another language (``Aufgabe`` → task).
5. **template** — the label starts with a phrase template (``what i need`` → task); the
   longest matching phrase wins.
6. **keyword** — a cue word or phrase occurs inside the label (``hard deadline`` →
   constraints). If cues of several keys occur, the one ending last wins: in English the last
   noun of a label is its head (``format requirements`` are requirements).
7. **unknown** — nothing matched.

After them comes the **semantic** rung, only when the LLM fallback has filled it: the model's
accepted (or rejected) answer for a label, with its confidence. It can never change what a
deterministic rung maps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rapidfuzz.distance import OSA

from ragstream.common.prompt_schema import normalize_term
from ragstream.stages.a0.vocabulary import Vocabulary


@dataclass(frozen=True)
class LabelMapping:
    """Where the ladder put one label: its normalised form, key (None if unmapped), rung and why."""

    normalized: str
    key: str | None
    rung: str
    detail: str
    confidence: float | None = None  # only for the semantic rung


Hit = tuple[str, str]  # (key, detail)


def _exact(norm: str, vocab: Vocabulary) -> Hit | None:
    key = vocab.canonical.get(norm)
    return (key, f"canonical key '{key}'") if key else None


def _alias(norm: str, vocab: Vocabulary) -> Hit | None:
    key = vocab.aliases.get(norm)
    return (key, f"alias '{norm}' of '{key}'") if key else None


def _typo(norm: str, vocab: Vocabulary) -> Hit | None:
    if len(norm) < vocab.min_typo_label_chars or norm in vocab.typo_exclusions:
        return None
    allowed = min(vocab.max_typo_edits, len(norm) // vocab.typo_chars_per_edit)
    if allowed <= 0:
        return None
    hits = sorted(
        (distance, term, key)
        for term, key in vocab.typo_targets
        if (distance := edit_distance(norm, term, allowed)) <= allowed
    )
    if not hits:
        return None
    distance, term, key = hits[0]
    detail = f"edit distance {distance} to '{term}'"
    rivals = [(t, k) for d, t, k in hits[1:] if d == distance and k != key]
    if rivals:
        detail += f" (tie with '{rivals[0][0]}' → '{rivals[0][1]}', broken alphabetically)"
    return key, detail


def _bilingual(norm: str, vocab: Vocabulary) -> Hit | None:
    found = vocab.bilingual.get(norm)
    if not found:
        return None
    key, lang = found
    return key, f"{lang} word '{norm}' for '{key}'"


def _template(norm: str, vocab: Vocabulary) -> Hit | None:
    for phrase, key in vocab.templates:
        if norm == phrase or norm.startswith(phrase + " "):
            return key, f"phrase template '{phrase}' for '{key}'"
    return None


def _keyword(norm: str, vocab: Vocabulary) -> Hit | None:
    words = norm.split()
    # (-end, -cue length, key, cue): the cue ending last, then the longest, wins
    found: list[tuple[int, int, str, str]] = []
    for cue, key in vocab.cues:
        size = len(cue)
        for start in range(len(words) - size + 1):
            if tuple(words[start:start + size]) == cue:
                found.append((-(start + size), -size, key, " ".join(cue)))
    if not found:
        return None
    _, _, key, phrase = min(found)
    return key, f"keyword '{phrase}' for '{key}'"


#: the rungs after normalisation, in the order they are tried
LADDER: tuple[tuple[str, Callable[[str, Vocabulary], Hit | None]], ...] = (
    ("exact", _exact),
    ("alias", _alias),
    ("typo", _typo),
    ("bilingual", _bilingual),
    ("template", _template),
    ("keyword", _keyword),
)


def map_label(label: str, vocab: Vocabulary) -> LabelMapping:
    """Climb the ladder for one header label; the first rung that answers wins. A label no
    rung maps is looked up in the semantic rung (the LLM's accepted or rejected answers)."""
    norm = normalize_term(label)
    if norm:
        for rung, attempt in LADDER:
            hit = attempt(norm, vocab)
            if hit:
                return LabelMapping(norm, hit[0], rung, hit[1])
        for term, key, detail, confidence in vocab.semantic:
            if term == norm:
                return LabelMapping(norm, key, "semantic", detail, confidence)
    return LabelMapping(norm, None, "unknown", "no rung matched")


def edit_distance(a: str, b: str, limit: int | None = None) -> int:
    """Optimal-string-alignment Damerau-Levenshtein distance (rapidfuzz's ``OSA``): inserting,
    deleting or substituting a character, or swapping two neighbouring ones, each costs one
    edit. A distance above ``limit`` is returned as ``limit + 1``, without computing it fully."""
    return OSA.distance(a, b, score_cutoff=limit)
