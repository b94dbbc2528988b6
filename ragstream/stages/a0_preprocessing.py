"""A0_PreProcessing: turn the raw prompt into the canonical ``sp.body`` (known keys, values kept verbatim).

Deterministic and memoryless: the same prompt and schema always give the same body, extras
and ``prompt_ready``, byte for byte (with the optional semantic fallback below: given the same
answer from the LLM). The vocabulary — canonical keys, aliases, words in other
languages, phrase templates, keyword cues, typo tolerance, MUST keys and their defaults — lives
in ``config/prompt_schema.json`` (``ragstream.prompt_schema``); this module holds the algorithm.

Header detection
----------------
The prompt is read line by line; lines inside fenced code blocks (``` or ~~~) are never
headers. A *header candidate* is a line whose label has at most ``max_label_words`` words,
in one of three styles:

* **heading** — a Markdown heading: ``## Task`` or ``## Task: value`` (a leading number such
  as ``## 1. Task`` is ignored);
* **bold** — a bold label that ends the line or is followed by ``:`` or a dash:
  ``**Task:** value``, ``**Task**: value``, ``__Task__``;
* **plain** — a label at the start of a line followed by ``:`` and a space (or the line's
  end), or by a spaced dash: ``Task: value``, ``TASK - value``, ``Aufgabe:``.

A heading or bold candidate is always a header (its formatting says so): if the ladder maps it
to no key it is an *unknown attribute*, and its value goes to
``sp.extras.unknown_attributes``. A plain candidate is a header only if the ladder maps it
to a key; otherwise (``Note: bring the slides``, ``The reason is simple: ...``) the line stays
part of the text it stands in. Every candidate's decision is logged in ``a0_decisions``
(``header`` says whether it opened a section). One exception keeps a titled prompt usable: when
no header gives a task or context (``# My question`` over free text), the prompt is read again
with unknown headings and bold labels as text, so it becomes the task like any unlabelled one.

A header's value is the rest of its line plus every following line up to the next header.
Text before the first header is the task when no header gives a task (a prompt with no headers
at all is simply the task); when a header does, that text is prepended to the context.
Repeated headers for one key are joined with a blank line. Only canonical keys with a
non-empty value enter ``sp.body``, in ``canonical_keys`` order.

The mapping ladder
------------------
Each label is normalised (``normalize_term``: NFKC, accents removed, case-folded, punctuation
and Markdown markup removed) and tried against these rungs, in order; the first hit wins and
its rung is recorded:

1. **exact** — the label is a canonical key (``context``).
2. **alias** — the label is an alias (``goal`` → purpose, ``background`` → context).
3. **typo** — optimal-string-alignment Damerau-Levenshtein distance to a key or alias, with
   one edit allowed per ``typo_chars_per_edit`` characters of the label, at most
   ``max_typo_edits``, for labels of at least ``min_typo_label_chars`` characters that are not
   in ``typo_exclusions`` (real words such as "next" ~ "text" or "note" ~ "tone"). The closest
   term wins; ties go to the alphabetically first term and are noted in the decision.
4. **bilingual** — the label is a word for a key in another language (``Aufgabe`` → task).
5. **template** — the label starts with a phrase template (``what i need`` → task); the
   longest matching phrase wins.
6. **keyword** — a cue word or phrase occurs inside the label (``hard deadline`` →
   constraints). If cues of several keys occur, the one ending last wins: in English the last
   noun of a label is its head (``format requirements`` are requirements).
7. **unknown** — nothing matched.

MUST keys
---------
``task`` is always required (TASK/CONTEXT rule): when it is empty but ``context`` is not, the
last question (a sentence ending in ``?``) moves from the context to the task; with no
question, the whole context becomes the task. Both empty raises ``EmptyPromptError``. Every
other MUST key that is still empty gets its schema default. ``sp.extras.body_sources`` says
for each body key whether its value is the user's (``user``), A0's inference (``derived``) or
a default (``default``); ``sp.extras.a0_rules`` says which rule fired and why.

Output
------
``sp.body``, ``sp.prompt_ready`` and, in ``sp.extras``: ``a0_decisions``, ``normalized_map``
(header label → key or null), ``unknown_attributes`` (``{"label", "value"}``), ``a0_rules``,
``body_sources``, ``semantic_used``, ``agent_modes["A0_PreProcessing"]`` and ``a0_body`` (a
snapshot of the body that A2 restores on a re-run). A0 never sets ``stage`` or
``history_of_stages`` (the controller does) and never touches the retrieval fields.

Semantic fallback
-----------------
With ``prompt_schema.modes.semantic_enabled`` (off by default: the offline mode) and an LLM
endpoint, the labels the ladder left **unknown** — and only those — are sent to a tiny
*Chooser* agent in one call (``config/agents/A0_PreProcessing.json``). For each label it answers
one canonical key or ``unknown`` with a confidence 0..1. A mapping is accepted only when the
key is canonical and the confidence reaches ``semantic_min_confidence``; the prompt is then
parsed again with the accepted mappings as an eighth rung, **semantic**, after the
deterministic ones (so nothing the ladder maps can change). An accepted label is a real header:
its value enters ``sp.body`` and leaves ``unknown_attributes``. Every label the LLM judged has
a decision with rung ``semantic`` and its ``confidence`` (its key is None when rejected, with
the reason in ``detail``), and ``sp.extras.semantic_used`` is True. With no unknown label
the LLM is not called; if the call fails or its reply stays invalid, A0 keeps the
deterministic result and ``agent_modes`` says why (``fallback``). Given the LLM's answer the
result is deterministic: a fixed threshold and every decision logged.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field
from rapidfuzz.distance import OSA

from ragstream.agents.factory import Agent, run_agent
from ragstream.config import AppConfig
from ragstream.errors import EmptyPromptError, PromptTooLongError
from ragstream.prompt_schema import CONTEXT_KEY, TASK_KEY, PromptSchema, normalize_term
from ragstream.records import A0Decision, A0Rule, AgentModeRecord, Extras, UnknownAttribute
from ragstream.render import compose_prompt_ready
from ragstream.services import Services
from ragstream.stages.stage import Stage
from ragstream.super_prompt import SuperPrompt
from ragstream.text import split_sentences

AGENT_NAME = "A0_PreProcessing"

#: joins the values of repeated headers for one key, and preamble + context
VALUE_JOINER = "\n\n"

SOURCE_USER, SOURCE_DERIVED, SOURCE_DEFAULT = "user", "derived", "default"

STYLE_HEADING, STYLE_BOLD, STYLE_PLAIN = "heading", "bold", "plain"

_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^ {0,3}#{1,6}\s+(?P<text>.+)$")
_HEADING_CLOSER = re.compile(r"\s+#+\s*$")
_BOLD = re.compile(
    r"^\s*(?P<mark>\*\*|__)(?P<label>[^*_:：\n]+)(?P<inner>[:：])?(?P=mark)"
    r"\s*(?P<outer>[:：\-–—])?\s*(?P<value>.*)$"
)
_DASHES = "-–—"
_PLAIN_SEPARATOR = re.compile(r"[:：](?=\s|$)|\s[-–—](?=\s|$)")
_PLAIN_LABEL = re.compile(r"^[^\W\d_][\w'’()/&\- ]*$")
_ENUMERATOR = re.compile(r"^\(?\d+[.)]\s*")
_HEADING_VALUE = re.compile(r"^(?P<label>[^:：]+)[:：]\s*(?P<value>.*)$")
_HAS_LETTER = re.compile(r"[^\W\d_]")
_CLOSERS = "\"')]»”’"


# --------------------------------------------------------------------------- vocabulary


#: one label of the semantic rung: (normalised label, key or None, detail, confidence)
SemanticEntry = tuple[str, str | None, str, float]


@dataclass(frozen=True)
class Vocabulary:
    """The schema's terms in normalised form, ready for the ladder's lookups."""

    canonical: dict[str, str]
    aliases: dict[str, str]
    typo_targets: tuple[tuple[str, str], ...]  # (term, key), sorted by term
    bilingual: dict[str, tuple[str, str]]  # word -> (key, language)
    templates: tuple[tuple[str, str], ...]  # (phrase, key), longest first
    cues: tuple[tuple[tuple[str, ...], str], ...]  # (cue words, key)
    typo_exclusions: frozenset[str]
    max_typo_edits: int
    typo_chars_per_edit: int
    min_typo_label_chars: int
    max_label_words: int
    #: the semantic rung, filled only from an LLM's answer by the semantic fallback
    semantic: tuple[SemanticEntry, ...] = ()

    @classmethod
    def from_schema(cls, schema: PromptSchema) -> Vocabulary:
        """Normalise the schema's keys, aliases, foreign words, templates and cues into lookup tables."""
        canonical = {normalize_term(k): k for k in schema.canonical_keys}
        aliases = _term_table(schema.aliases)
        bilingual: dict[str, tuple[str, str]] = {}
        for lang, table in schema.bilingual.items():
            for word, key in _term_table(table).items():
                bilingual.setdefault(word, (key, lang))
        templates = sorted(_term_table(schema.templates).items(),
                           key=lambda item: (-len(item[0]), item[0]))
        cues = sorted((tuple(term.split()), key)
                      for term, key in _term_table(schema.keyword_cues).items())
        return cls(
            canonical=canonical,
            aliases=aliases,
            typo_targets=tuple(sorted({**canonical, **aliases}.items())),
            bilingual=bilingual,
            templates=tuple(templates),
            cues=tuple(cues),
            typo_exclusions=frozenset(normalize_term(w) for w in schema.typo_exclusions),
            max_typo_edits=schema.max_typo_edits,
            typo_chars_per_edit=schema.typo_chars_per_edit,
            min_typo_label_chars=schema.min_typo_label_chars,
            max_label_words=schema.max_label_words,
        )


def _term_table(table: dict[str, list[str]]) -> dict[str, str]:
    """key -> terms, turned into normalised term -> key (the schema forbids conflicts)."""
    return {normalize_term(term): key for key, terms in table.items() for term in terms}


# --------------------------------------------------------------------------- the ladder


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


# --------------------------------------------------------------------------- parsing


@dataclass(frozen=True)
class Candidate:
    """A line that looks like a header."""

    label: str
    value: str  # the text after the label on the same line
    style: str


@dataclass
class Section:
    """A header (or the text before the first header) and the lines that belong to it."""

    label: str | None
    key: str | None
    lines: list[str] = field(default_factory=list)

    @property
    def value(self) -> str:
        """The section's lines joined, without leading and trailing whitespace."""
        return "\n".join(self.lines).strip()


def find_candidate(line: str, max_words: int) -> Candidate | None:
    """The header candidate on ``line``, if its form is one of the three styles."""
    heading = _HEADING.match(line)
    if heading:
        return _heading_candidate(heading.group("text"), max_words)
    bold = _BOLD.match(line)
    if bold:
        return _bold_candidate(bold, max_words)
    return _plain_candidate(line, max_words)


def _heading_candidate(text: str, max_words: int) -> Candidate | None:
    text = _HEADING_CLOSER.sub("", text).strip().strip("*_").strip()
    text = _ENUMERATOR.sub("", text)
    inline = _HEADING_VALUE.match(text)
    if inline:
        found = _short(inline.group("label"), inline.group("value"), STYLE_HEADING, max_words)
        if found:
            return found
    return _short(text.rstrip(":： "), "", STYLE_HEADING, max_words)


def _bold_candidate(match: re.Match[str], max_words: int) -> Candidate | None:
    """``**Label:**``, ``**Label**: value``, ``**Label -**``; a bold word followed by more
    text without a separator is emphasis, not a header."""
    raw = match.group("label").rstrip()
    inner_dash = raw.endswith(tuple(_DASHES))
    separated = bool(match.group("inner") or match.group("outer") or inner_dash)
    if not separated and match.group("value"):
        return None
    label = _ENUMERATOR.sub("", raw.rstrip(_DASHES).strip())
    return _short(label, match.group("value"), STYLE_BOLD, max_words)


def _plain_candidate(line: str, max_words: int) -> Candidate | None:
    """``Label: value`` or ``LABEL - value`` at the start of the line."""
    separator = _PLAIN_SEPARATOR.search(line)
    if not separator:
        return None
    label = line[:separator.start()].strip()
    if not _PLAIN_LABEL.match(label):
        return None
    return _short(label, line[separator.end():], STYLE_PLAIN, max_words)


def _short(label: str, value: str, style: str, max_words: int) -> Candidate | None:
    label = label.strip().strip("*_").strip()
    if not _HAS_LETTER.search(label) or len(label.split()) > max_words:
        return None
    return Candidate(label=label, value=value.strip(), style=style)


def parse_prompt(text: str, vocab: Vocabulary, unknown_headers: bool = True
                 ) -> tuple[list[Section], list[A0Decision]]:
    """Split the prompt into sections at its headers; log a decision for every candidate.

    With ``unknown_headers=False`` a heading or bold label that maps to no key is read as
    text, like a plain one (the fallback when no header gives a task or context).
    """
    sections = [Section(label=None, key=None)]
    decisions: list[A0Decision] = []
    fence: str | None = None
    for number, line in enumerate(text.split("\n"), 1):
        fence_mark = _FENCE.match(line)
        if fence_mark and (fence is None or fence_mark.group(1) == fence):
            fence = fence_mark.group(1) if fence is None else None
            sections[-1].lines.append(line)
            continue
        candidate = None if fence else find_candidate(line, vocab.max_label_words)
        if candidate is None:
            sections[-1].lines.append(line)
            continue
        mapping = map_label(candidate.label, vocab)
        formatted = candidate.style != STYLE_PLAIN
        is_header = mapping.key is not None or (formatted and unknown_headers)
        decisions.append(_decision(candidate, mapping, number, is_header))
        if is_header:
            opening = [candidate.value] if candidate.value else []
            sections.append(Section(label=candidate.label, key=mapping.key, lines=opening))
        else:
            sections[-1].lines.append(line)
    return sections, decisions


def _decision(candidate: Candidate, mapping: LabelMapping, line: int,
              is_header: bool) -> A0Decision:
    detail = mapping.detail
    if mapping.key is None:
        if is_header:
            detail += "; kept in unknown_attributes"
        elif candidate.style == STYLE_PLAIN:
            detail += "; a plain label that maps to no key is not a header, kept as text"
        else:
            detail += "; read as text because no header gives a task or context"
    return A0Decision(label=candidate.label, normalized=mapping.normalized, key=mapping.key,
                      rung=mapping.rung, detail=detail, style=candidate.style, header=is_header,
                      line=line, confidence=mapping.confidence)


# --------------------------------------------------------------------------- the body


@dataclass
class BodyDraft:
    """Values by key, where each came from, and the rules that fired."""

    values: dict[str, str] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    rules: list[A0Rule] = field(default_factory=list)

    def set(self, key: str, value: str, source: str) -> None:
        """Set ``key`` to ``value`` and record where the value came from."""
        self.values[key] = value
        self.sources[key] = source

    def drop(self, key: str) -> None:
        """Remove ``key``'s value and its source, if it has them."""
        self.values.pop(key, None)
        self.sources.pop(key, None)

    def note(self, rule: str, key: str, detail: str) -> None:
        """Log that ``rule`` fired for ``key``, with ``detail`` saying why."""
        self.rules.append(A0Rule(rule=rule, key=key, detail=detail))


def collect(sections: list[Section]) -> tuple[str, BodyDraft, list[UnknownAttribute]]:
    """The preamble, the user's values by key (repeats joined) and the unknown attributes."""
    preamble = sections[0].value
    joined: dict[str, list[str]] = {}
    unknown: list[UnknownAttribute] = []
    for section in sections[1:]:
        if section.key is None:
            unknown.append(UnknownAttribute(label=section.label or "", value=section.value))
        elif section.value:
            joined.setdefault(section.key, []).append(section.value)
    draft = BodyDraft()
    for key, parts in joined.items():
        draft.set(key, VALUE_JOINER.join(parts), SOURCE_USER)
    return preamble, draft, unknown


def place_preamble(preamble: str, draft: BodyDraft, had_headers: bool) -> None:
    """Text before the first header: the task if none is given, else more context."""
    if not preamble:
        return
    if not draft.values.get(TASK_KEY):
        draft.set(TASK_KEY, preamble, SOURCE_USER)
        why = ("text before the first header is the task (no header gives one)" if had_headers
               else "the prompt has no headers: all of it is the task")
        draft.note("preamble_is_task", TASK_KEY, why)
        return
    context = draft.values.get(CONTEXT_KEY)
    source = draft.sources[CONTEXT_KEY] if context else SOURCE_DERIVED
    draft.set(CONTEXT_KEY, VALUE_JOINER.join(p for p in (preamble, context) if p), source)
    draft.note("preamble_to_context", CONTEXT_KEY,
               "text before the first header joins the context (a header gives the task)")


def enforce_task(draft: BodyDraft) -> None:
    """TASK/CONTEXT rule: promote the context's last question (or all of it) to the task."""
    if draft.values.get(TASK_KEY):
        return
    context = draft.values.get(CONTEXT_KEY, "")
    if not context:
        raise EmptyPromptError("The prompt has no task: no Task header, no text outside "
                               "headers and no Context to take a question from.")
    split = split_last_question(context)
    if split:
        question, rest = split
        draft.set(TASK_KEY, question, SOURCE_DERIVED)
        if rest:
            draft.values[CONTEXT_KEY] = rest
        else:
            draft.drop(CONTEXT_KEY)
        draft.note("task_from_context_question", TASK_KEY,
                   "task was empty: moved the last question of the context to the task")
    else:
        draft.set(TASK_KEY, context, SOURCE_DERIVED)
        draft.drop(CONTEXT_KEY)
        draft.note("task_from_context", TASK_KEY,
                   "task was empty and the context asks no question: the context is the task")


def split_last_question(text: str) -> tuple[str, str] | None:
    """(last sentence ending in '?', the text without it), or None if nothing asks."""
    questions = [(s, e) for s, e in split_sentences(text)
                 if text[s:e].strip().rstrip(_CLOSERS).endswith("?")]
    if not questions:
        return None
    start, end = questions[-1]
    return text[start:end].strip(), (text[:start] + text[end:]).strip()


def fill_defaults(draft: BodyDraft, schema: PromptSchema) -> None:
    """Give every MUST key except the task that is still empty its schema default, and log it."""
    for key in schema.must_keys:
        if key != TASK_KEY and not draft.values.get(key):
            default = schema.defaults[key]
            draft.set(key, default, SOURCE_DEFAULT)
            draft.note("default", key, f"MUST key '{key}' was empty: default {default!r}")


@dataclass
class Canonical:
    """Everything A0 derives from one prompt."""

    decisions: list[A0Decision]
    body: dict[str, str]
    sources: dict[str, str]
    rules: list[A0Rule]
    unknown: list[UnknownAttribute]


def build_body(sections: list[Section], decisions: list[A0Decision],
               schema: PromptSchema) -> Canonical:
    """The body and its bookkeeping, keys in canonical order."""
    preamble, draft, unknown = collect(sections)
    place_preamble(preamble, draft, had_headers=len(sections) > 1)
    enforce_task(draft)
    fill_defaults(draft, schema)
    order = [k for k in schema.canonical_keys if draft.values.get(k)]
    return Canonical(
        decisions=decisions,
        body={k: draft.values[k] for k in order},
        sources={k: draft.sources[k] for k in order},
        rules=draft.rules,
        unknown=unknown,
    )


def canonicalize(text: str, vocab: Vocabulary, schema: PromptSchema) -> Canonical:
    """Parse and build the body. A prompt whose only headers are unknown headings or bold
    labels (``# My question`` over free text) would have neither task nor context: it is
    read again with those labels as text, so it becomes the task like any unlabelled prompt."""
    sections, decisions = parse_prompt(text, vocab)
    try:
        return build_body(sections, decisions, schema)
    except EmptyPromptError:
        if not any(d.header and d.key is None for d in decisions):
            raise
    sections, decisions = parse_prompt(text, vocab, unknown_headers=False)
    result = build_body(sections, decisions, schema)
    result.rules.insert(0, A0Rule(
        rule="unknown_headers_as_text", key=TASK_KEY,
        detail="no header gives a task or context: unknown headings and bold labels were read as text",
    ))
    return result


# --------------------------------------------------------------------------- the stage


def checked_text(user_text: str, limit: int) -> str:
    """The prompt with line ends unified; raise if it is empty or too long."""
    if not user_text.strip():
        raise EmptyPromptError()
    if len(user_text) > limit:
        raise PromptTooLongError(len(user_text), limit)
    return user_text.replace("\r\n", "\n").replace("\r", "\n")


def semantic_enabled(cfg: AppConfig) -> bool:
    """Whether ``prompt_schema.modes.semantic_enabled`` turns on the LLM fallback for unknown labels."""
    return bool(cfg.prompt_schema.modes.get("semantic_enabled", False))


# --------------------------------------------------------------------------- semantic fallback


# Key and confidence are checked by A0, not here. Pydantic puts a reply model's docstring into
# the schema the model is shown, so it says only what the reply holds.
class SemanticMapping(BaseModel):
    """One label's answer: its number, a canonical key or unknown, and how sure the mapping is."""

    n: int = Field(description="the label's number in the list")
    key: str = Field(description="one of the canonical keys, or unknown")
    confidence: float = Field(description="0 to 1: how sure the mapping is")


class SemanticOutput(BaseModel):
    """The reply: a key (or unknown) and a confidence for each numbered label."""

    mappings: list[SemanticMapping]


@dataclass(frozen=True)
class UnknownLabel:
    """A label the ladder left unknown, as sent to the LLM (first occurrence)."""

    n: int
    label: str
    normalized: str
    style: str
    header: bool
    preview: str


def unknown_labels(result: Canonical, text: str, cfg: AppConfig) -> list[UnknownLabel]:
    """Labels no deterministic rung mapped (one per normalised form, in prompt order), up to
    ``semantic_max_labels``."""
    agent = cfg.agents.A0_PreProcessing
    lines = text.split("\n")
    starts = sorted({d.line for d in result.decisions})
    seen: set[str] = set()
    out: list[UnknownLabel] = []
    for d in result.decisions:
        if d.key is not None or d.rung != "unknown" or not d.normalized:
            continue
        if d.normalized in seen:
            continue
        seen.add(d.normalized)
        if len(out) >= agent.semantic_max_labels:
            break
        # the label's line and what follows it, up to the next candidate (3 lines at most)
        stop = next((n for n in starts if n > d.line), len(lines) + 1)
        stop = min(stop, d.line + 3)
        following = " ".join(" ".join(lines[d.line - 1:stop - 1]).split())
        out.append(UnknownLabel(n=len(out) + 1, label=d.label, normalized=d.normalized,
                                style=d.style, header=d.header,
                                preview=following[:agent.semantic_preview_chars]))
    return out


def semantic_payload(labels: list[UnknownLabel], schema: PromptSchema) -> dict[str, Any]:
    """The Chooser's input: the canonical keys with their descriptions, each label with kind and line."""
    return {
        "canonical_keys": {k: schema.key_descriptions.get(k, "") for k in schema.canonical_keys},
        "labels": [
            {"n": u.n, "label": u.label,
             "kind": ("a plain 'Label:' line; it may be ordinary text" if u.style == STYLE_PLAIN
                      else f"a {u.style} header"),
             "line": u.preview}
            for u in labels
        ],
    }


def judge_semantic(answer: SemanticOutput, labels: list[UnknownLabel], schema: PromptSchema,
                   min_confidence: float) -> tuple[SemanticEntry, ...]:
    """The semantic rung from the LLM's answer: accepted and rejected labels, each with its
    reason. A label the LLM did not answer stays unknown (with that reason)."""
    keys = set(schema.canonical_keys)
    by_n = {u.n: u for u in labels}
    answered: dict[int, SemanticMapping] = {}
    for m in answer.mappings:
        if m.n in by_n:
            answered.setdefault(m.n, m)  # the first answer for a number counts
    rung: list[SemanticEntry] = []
    for u in labels:
        mapping = answered.get(u.n)
        if mapping is None:
            rung.append((u.normalized, None, "semantic: the LLM gave no answer for this label; "
                                             "kept unknown", 0.0))
            continue
        raw_key = " ".join(mapping.key.split())
        key = raw_key.lower()
        confidence = mapping.confidence
        if not 0.0 <= confidence <= 1.0 or confidence != confidence:  # NaN too
            rung.append((u.normalized, None, f"semantic: the LLM's confidence {mapping.confidence!r} is "
                                             f"outside 0..1; kept unknown", 0.0))
            continue
        confidence = round(confidence, 4)
        if key == "unknown" or not key:
            rung.append((u.normalized, None, "semantic: the LLM answered unknown "
                                             f"(confidence {confidence:.2f})", confidence))
        elif key not in keys:
            rung.append((u.normalized, None, f"semantic: the LLM answered {raw_key[:40]!r}, "
                                             f"which is not a canonical key; kept unknown",
                         confidence))
        elif confidence < min_confidence:
            rung.append((u.normalized, None, f"semantic: the LLM proposed '{key}' with confidence "
                                             f"{confidence:.2f} < semantic_min_confidence "
                                             f"{min_confidence:.2f}; kept unknown", confidence))
        else:
            rung.append((u.normalized, key, f"semantic: the LLM mapped it to '{key}' with "
                                            f"confidence {confidence:.2f} ≥ "
                                            f"semantic_min_confidence {min_confidence:.2f}",
                         confidence))
    return tuple(rung)


def _semantic(agent: Agent, text: str, vocab: Vocabulary, labels: list[UnknownLabel],
              cfg: AppConfig) -> Canonical:
    schema = cfg.prompt_schema
    answer: SemanticOutput = agent.ask(semantic_payload(labels, schema)).value
    rung = judge_semantic(answer, labels, schema,
                          cfg.agents.A0_PreProcessing.semantic_min_confidence)
    return canonicalize(text, dataclasses.replace(vocab, semantic=rung), schema)


def resolve_canonical(sp: SuperPrompt, text: str, vocab: Vocabulary, cfg: AppConfig,
                      services: Services | None) -> tuple[Canonical, AgentModeRecord, bool]:
    """The body (with the semantic fallback when it applies), A0's ``agent_modes`` entry and
    whether the LLM's answer was used."""
    ladder = canonicalize(text, vocab, cfg.prompt_schema)
    if not semantic_enabled(cfg):
        reason = "prompt_schema.modes.semantic_enabled is false"
        return ladder, AgentModeRecord(mode="deterministic", reason=reason), False
    labels = unknown_labels(ladder, text, cfg)
    if not labels:
        reason = "no unknown headers: the deterministic ladder mapped every label"
        return ladder, AgentModeRecord(mode="deterministic", reason=reason), False
    used: list[bool] = []

    def llm_path(agent: Agent) -> Canonical:
        out = _semantic(agent, text, vocab, labels, cfg)
        used.append(True)
        return out

    result = run_agent(sp, AGENT_NAME, cfg, services, llm_path=llm_path,
                       deterministic_path=lambda: ladder, output=SemanticOutput)
    return result, sp.extras.agent_modes[AGENT_NAME], bool(used)


def write_extras(sp: SuperPrompt, result: Canonical, mode: AgentModeRecord,
                 semantic_used: bool = False) -> None:
    """Replace A0's records; the other agents' modes and LLM usage stay."""
    normalized_map: dict[str, str | None] = {}
    for decision in result.decisions:
        if decision.header:
            normalized_map.setdefault(decision.label, decision.key)
    ex = sp.extras
    ex.a0_decisions = result.decisions
    ex.normalized_map = normalized_map
    ex.unknown_attributes = result.unknown
    ex.a0_rules = result.rules
    ex.body_sources = result.sources
    ex.semantic_used = semantic_used
    ex.agent_modes[AGENT_NAME] = mode
    ex.a0_body = dict(result.body)


def run(sp: SuperPrompt, cfg: AppConfig, services: Services | None) -> SuperPrompt:
    """Canonicalise ``sp.user_text`` into ``sp.body`` and build ``sp.prompt_ready``.

    Raises ``EmptyPromptError`` or ``PromptTooLongError`` before changing anything. Leaves
    ``stage``, ``history_of_stages`` and the retrieval fields alone.
    """
    text = checked_text(sp.user_text, cfg.settings.prompt.max_prompt_chars)
    vocab = Vocabulary.from_schema(cfg.prompt_schema)
    sp.extras.llm_usage.pop(AGENT_NAME, None)  # an earlier run's usage is not this run's
    result, mode, semantic_used = resolve_canonical(sp, text, vocab, cfg, services)

    sp.body = result.body
    write_extras(sp, result, mode, semantic_used)
    sp.prompt_ready = compose_prompt_ready(result.body)
    return sp


def discard(sp: SuperPrompt) -> None:
    """Forget A0's work: the body, every extra (all later stages build on them), the prompt."""
    sp.body, sp.extras, sp.prompt_ready = {}, Extras(), ""


STAGE = Stage(name=AGENT_NAME, value="preprocessed", label="A0 Prep", run=run, discard=discard)
