"""A0's semantic fallback: a tiny *Chooser* agent maps the labels the ladder left unknown.

With ``prompt_schema.modes.semantic_enabled`` (off by default: the offline mode) and an LLM
endpoint, the labels the ladder left **unknown** — and only those, one per normalised form, up
to ``semantic_max_labels`` — are sent to the Chooser in one call
(``config/agents/A0_PreProcessing.json``), each with its kind and the start of its text. For
each label it answers one canonical key or ``unknown`` with a confidence 0..1. A mapping is
accepted only when the key is canonical and the confidence reaches
``semantic_min_confidence``; the prompt is then parsed again with the answers as the ladder's
last rung, **semantic**, after the deterministic ones (so nothing the ladder maps can change).
An accepted label is a real header: its value enters the body and leaves
``unknown_attributes``. Every label the LLM judged has a decision with rung ``semantic`` and
its ``confidence`` (its key is None when rejected, with the reason in ``detail``). Given the
LLM's answer the result is deterministic: a fixed threshold and every decision logged.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

from ragstream.agents.factory import Agent
from ragstream.agents.replies import Items, Text, bound
from ragstream.backends.llm import inline_schema
from ragstream.common.config import AppConfig
from ragstream.common.prompt_schema import PromptSchema
from ragstream.stages.a0.body import Canonical, canonicalize
from ragstream.stages.a0.parser import STYLE_PLAIN
from ragstream.stages.a0.vocabulary import SemanticEntry, Vocabulary


def semantic_enabled(cfg: AppConfig) -> bool:
    """Whether ``prompt_schema.modes.semantic_enabled`` turns on the LLM fallback for unknown labels."""
    return bool(cfg.prompt_schema.modes.get("semantic_enabled", False))


# Key and confidence are checked by A0, not here. Pydantic puts a reply model's docstring into
# the schema the model is shown, so it says only what the reply holds.
class SemanticMapping(BaseModel):
    """One label's answer: its number, a canonical key or unknown, and how sure the mapping is."""

    n: int = Field(description="the label's number in the list")
    key: Text(40, "one of the canonical keys, or unknown")  # type: ignore[valid-type]
    confidence: float = Field(description="0 to 1: how sure the mapping is")


class SemanticOutput(BaseModel):
    """The reply: a key (or unknown) and a confidence for each numbered label."""

    mappings: Items(SemanticMapping, 200)  # type: ignore[valid-type]


def reply_schema(labels: list[UnknownLabel], schema: PromptSchema) -> dict:
    """SemanticOutput's schema for these labels: numbers 1..len(labels), keys as an enum."""
    return bound(inline_schema(SemanticOutput.model_json_schema()), {
        "mappings": {"maxItems": len(labels)},
        "mappings[].n": {"minimum": 1, "maximum": len(labels)},
        "mappings[].key": {"enum": [*schema.canonical_keys, "unknown"]},
        "mappings[].confidence": {"minimum": 0, "maximum": 1},
    })


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


def ask_semantic(agent: Agent, text: str, vocab: Vocabulary, labels: list[UnknownLabel],
                 cfg: AppConfig) -> Canonical:
    """Ask the Chooser about ``labels`` and parse the prompt again with its answers as the
    semantic rung."""
    schema = cfg.prompt_schema
    answer: SemanticOutput = agent.ask(semantic_payload(labels, schema),
                                       reply_schema(labels, schema)).value
    rung = judge_semantic(answer, labels, schema,
                          cfg.agents.A0_PreProcessing.semantic_min_confidence)
    return canonicalize(text, dataclasses.replace(vocab, semantic=rung), schema)

