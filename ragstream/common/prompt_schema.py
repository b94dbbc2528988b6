"""A0's header vocabulary, loaded from ``config/prompt_schema.json`` (owned by the A0 stage).

The schema names the canonical body keys and every word or phrase that A0's mapping ladder
may map onto them (see ``ragstream.stages.a0_preprocessing``). It is validated when loaded:

* every key named anywhere (MUST keys, defaults, aliases, bilingual words, templates, keyword
  cues) is a canonical key, and ``task`` and ``context`` are canonical (the TASK/CONTEXT rule
  needs them);
* ``task`` is a MUST key, and every other MUST key has a non-empty default;
* no term maps to two different keys within one rung (after normalisation), and no alias
  equals a different canonical key — otherwise the ladder's answer would depend on file order;
* a template phrase has at most ``max_label_words`` words (a longer one could never match).

All terms are compared in their normalised form (``normalize_term``), so the JSON may hold
them with accents, capitals or punctuation.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ragstream.common.text import fold

#: the keys the TASK/CONTEXT rule works on; they must be canonical
TASK_KEY = "task"
CONTEXT_KEY = "context"

_KEY_PATTERN = re.compile(r"^[a-z][a-z_]*$")
_NON_WORD = re.compile(r"[\W_]+", re.UNICODE)


def normalize_term(text: str) -> str:
    """The matching form of a header label or vocabulary term.

    ``fold`` (NFKC, accents removed, case-folded), then every run of punctuation, Markdown
    markup or whitespace becomes one space: ``"**Output-Format:**"`` → ``"output format"``.
    """
    return _NON_WORD.sub(" ", fold(text)).strip()


class PromptSchema(BaseModel):
    """A0's header vocabulary: canonical keys, MUST keys, defaults, aliases, typo rules and cues."""

    model_config = ConfigDict(extra="forbid")

    canonical_keys: list[str] = Field(min_length=1)
    must_keys: list[str] = Field(default_factory=lambda: [TASK_KEY])
    #: values for MUST keys the prompt leaves empty (only MUST keys are filled)
    defaults: dict[str, str] = Field(default_factory=dict)
    #: key -> other names for it ("goal" -> purpose)
    aliases: dict[str, list[str]] = Field(default_factory=dict)
    #: language code -> key -> words in that language ("de": {"task": ["Aufgabe"]})
    bilingual: dict[str, dict[str, list[str]]] = Field(default_factory=dict)
    #: the ceiling on edits for the tiny-typo rung
    max_typo_edits: int = Field(2, ge=0, le=3)
    #: one edit is allowed per this many characters of the label, up to ``max_typo_edits``
    typo_chars_per_edit: int = Field(4, ge=1, le=20)
    #: labels shorter than this are never typo-corrected
    min_typo_label_chars: int = Field(4, ge=1, le=20)
    #: real words that are one or two edits from a key ("next" ~ "text"): never corrected
    typo_exclusions: list[str] = Field(default_factory=list)
    #: key -> phrases matched as a whole-word prefix of the label ("what i need" -> task)
    templates: dict[str, list[str]] = Field(default_factory=dict)
    #: key -> words or phrases that, found inside a label, choose the key ("deadline")
    keyword_cues: dict[str, list[str]] = Field(default_factory=dict)
    #: a header label has at most this many words
    max_label_words: int = Field(4, ge=1, le=12)
    #: ``semantic_enabled``: let an LLM map the labels the ladder leaves unknown (A0's
    #: optional semantic fallback; off by default, the offline mode)
    modes: dict[str, bool] = Field(default_factory=lambda: {"semantic_enabled": False})
    #: key -> one line on what it holds; shown to the LLM by the semantic fallback
    key_descriptions: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _consistent(self) -> PromptSchema:
        keys = self.canonical_keys
        bad = [k for k in keys if not _KEY_PATTERN.match(k)]
        if bad:
            raise ValueError(f"canonical_keys must be lower-case names like 'task'; got {bad}")
        if len(set(keys)) != len(keys):
            raise ValueError("canonical_keys lists a key twice")
        for needed in (TASK_KEY, CONTEXT_KEY):
            if needed not in keys:
                raise ValueError(f"canonical_keys must include {needed!r} (A0's TASK/CONTEXT rule)")
        if TASK_KEY not in self.must_keys:
            raise ValueError(f"must_keys must include {TASK_KEY!r}: every prompt needs a task")
        _only_canonical("must_keys", self.must_keys, keys)
        _only_canonical("defaults", self.defaults, keys)
        _only_canonical("aliases", self.aliases, keys)
        _only_canonical("templates", self.templates, keys)
        _only_canonical("keyword_cues", self.keyword_cues, keys)
        _only_canonical("key_descriptions", self.key_descriptions, keys)
        unknown_modes = sorted(set(self.modes) - {"semantic_enabled"})
        if unknown_modes:
            raise ValueError(f"modes names {unknown_modes}; the only mode is 'semantic_enabled'")
        for lang, table in self.bilingual.items():
            _only_canonical(f"bilingual.{lang}", table, keys)
        missing = [k for k in self.must_keys
                   if k != TASK_KEY and not self.defaults.get(k, "").strip()]
        if missing:
            raise ValueError(f"MUST keys {missing} need a non-empty value in defaults")

        own_names = {k: [k] for k in keys}
        _unambiguous("aliases", [own_names, self.aliases])
        _unambiguous("bilingual", list(self.bilingual.values()))
        _unambiguous("templates", [self.templates])
        _unambiguous("keyword_cues", [self.keyword_cues])
        too_long = [p for phrases in self.templates.values() for p in phrases
                    if len(normalize_term(p).split()) > self.max_label_words]
        if too_long:
            raise ValueError(
                f"templates {too_long} have more than max_label_words "
                f"({self.max_label_words}) words and could never match a label"
            )
        return self


def _only_canonical(section: str, named: Iterable[str], keys: list[str]) -> None:
    unknown = [k for k in named if k not in keys]
    if unknown:
        raise ValueError(f"{section} names {unknown}, which are not canonical keys {keys}")


def _unambiguous(section: str, tables: list[dict[str, list[str]]]) -> None:
    owner: dict[str, str] = {}
    for table in tables:
        for key, terms in table.items():
            for term in terms:
                norm = normalize_term(term)
                if not norm:
                    raise ValueError(f"{section}: term {term!r} for {key!r} is empty")
                if owner.setdefault(norm, key) != key:
                    raise ValueError(
                        f"{section}: {term!r} maps to both {owner[norm]!r} and {key!r}; "
                        f"keep it under one key"
                    )
