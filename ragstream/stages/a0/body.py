"""A0's body builder: sections to the canonical body, with the MUST rules and their log.

Only canonical keys with a non-empty value enter the body, in ``canonical_keys`` order.
Repeated headers for one key are joined with a blank line. Unknown sections become
``unknown_attributes``.

Text before the first header is the task when no header gives a task (a prompt with no
headers at all is simply the task); when a header does, that text is prepended to the context.

MUST keys: ``task`` is always required (TASK/CONTEXT rule): when it is empty but ``context``
is not, the last question (a sentence ending in ``?``) moves from the context to the task;
with no question, the whole context becomes the task. Both empty raises ``EmptyPromptError``,
with one exception that keeps a titled prompt usable: when the only headers are unknown
headings or bold labels (``# My question`` over free text), the prompt is read again with
those labels as text, so it becomes the task like any unlabelled one. Every other MUST key
that is still empty gets its schema default.

Each body key's source is the user's (``user``), A0's inference (``derived``) or a default
(``default``); every rule that fired is logged with its reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ragstream.common.errors import EmptyPromptError
from ragstream.common.prompt_schema import CONTEXT_KEY, TASK_KEY, PromptSchema
from ragstream.common.text import split_sentences
from ragstream.stages.a0.parser import Section, parse_prompt
from ragstream.stages.a0.vocabulary import Vocabulary
from ragstream.state.records import A0Decision, A0Rule, UnknownAttribute

#: joins the values of repeated headers for one key, and preamble + context
VALUE_JOINER = "\n\n"

SOURCE_USER, SOURCE_DERIVED, SOURCE_DEFAULT = "user", "derived", "default"

_CLOSERS = "\"')]»”’"


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
