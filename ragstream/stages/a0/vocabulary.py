"""A0's vocabulary: the prompt schema's terms in normalised form, as the ladder looks them up.

The terms live in ``config/prompt_schema.json`` (``ragstream.common.prompt_schema``): the canonical
keys, their aliases, words for them in other languages, phrase templates, keyword cues, the
typo tolerance and the longest label A0 reads. ``Vocabulary.from_schema`` normalises every
term once (``normalize_term``: NFKC, accents removed, case-folded, punctuation and Markdown
markup removed), so each rung of the ladder is a plain lookup. The semantic rung is empty
here; only the LLM fallback fills it, from the model's answer.
"""

from __future__ import annotations

from dataclasses import dataclass

from ragstream.common.prompt_schema import PromptSchema, normalize_term

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
