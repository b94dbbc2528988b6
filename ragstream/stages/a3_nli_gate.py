"""A3_NLI_Gate: keep or drop each reranked candidate, with the reason.

Pre-filter (always, deterministic), in reranked order:

1. Working set: the first ``max_candidates``; the rest are dropped ("beyond working set").
2. Trivial: fewer than ``min_words`` words.

Gate over the working set — deterministic mode (no LLM endpoint, or the LLM failed):

3. Relevance: a rerank score below ``min_relevance``, or below ``relative_min`` × the best
   score in the working set, is dropped as off-topic.
4. Near-duplicates: a chunk whose word 3-shingle Jaccard similarity with an already kept
   chunk is ≥ ``duplicate_jaccard`` is dropped as a duplicate of that chunk.

LLM mode (a compact contract): the model sees the prompt and the first candidates in reranked
order — at most ``llm_max_candidates``, as many as fit the agent's prompt budget —, each as
its number and the ``llm_sentences`` sentences closest to the prompt (from the sentence
vectors computed at ingestion; nothing is embedded but the prompt). It replies with the
numbers to drop and a tag for each (duplicate, off-topic, conflicting), nothing else; every
candidate it does not list is kept. A tag outside the list is clamped to "" and logged in
``extras.a3["clamped"]``, a number outside the list is logged in ``unknown_numbers``; a
candidate that was not sent gets the deterministic decision, logged in ``unjudged``.

A chunk the person pinned or added is kept whatever the gate decided: its reason says so and
what the gate would have done ("pinned by you (the gate would drop it: off-topic: …)"). Each row says
who decided it (``decided_by``: the rule, the LLM, or you).

Kept ids, in reranked order, become ``final_selection_ids``. Chunks are never modified.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, Field

from ragstream import edits, staleness
from ragstream.agents.factory import Agent, PromptBudgetError, run_agent
from ragstream.agents.replies import Items, Text, bound
from ragstream.backends.llm import inline_schema
from ragstream.backends.reranker import evidence_for
from ragstream.config import AppConfig
from ragstream.errors import StageError
from ragstream.records import A3Clamp, A3Record
from ragstream.render import rerank_query
from ragstream.stages.stage import Stage
from ragstream.super_prompt import Chunk, RowStatus, SuperPrompt, View, ViewRow
from ragstream.text import jaccard, shingles

NAME = "A3_NLI_Gate"
TAGS = ("duplicate", "off-topic", "conflicting")

#: (status, reason, extra scores) for one candidate
Verdict = tuple[RowStatus, str, dict[str, float]]


class A3Drop(BaseModel):
    """A candidate to drop: its number and why, as a tag."""

    n: int = Field(description="the candidate's number")
    tag: Text(12, "duplicate, off-topic or conflicting")  # type: ignore[valid-type]


class A3Output(BaseModel):
    """The reply: the candidates to drop; every candidate not listed is kept."""

    drop: Items(A3Drop, 64, "the candidates to drop, by number")  # type: ignore[valid-type]


def reply_schema(sent: int) -> dict:
    """A3Output's schema for ``sent`` candidates: numbers 1..sent, the tags as an enum."""
    return bound(inline_schema(A3Output.model_json_schema()), {
        "drop": {"maxItems": sent},
        "drop[].n": {"minimum": 1, "maximum": sent},
        "drop[].tag": {"enum": list(TAGS)},
    })


def run(sp: SuperPrompt, cfg: AppConfig, services) -> SuperPrompt:
    """Keep or drop each reranked chunk (LLM or rules); write the A3 view and ``final_selection_ids``."""
    acfg = cfg.agents.A3_NLI_Gate
    ranked = sp.view(View.RERANKED)
    if not ranked:
        raise StageError(NAME, "the ReRanker view is empty; run ReRanker first.")
    chunks = sp.chunk_map()

    verdicts: dict[str, Verdict] = {}
    candidates = []
    for row in ranked:
        chunk = chunks[row.chunk_id]
        if row.rank > acfg.max_candidates:
            verdicts[row.chunk_id] = ("dropped", f"beyond working set (max_candidates="
                                                 f"{acfg.max_candidates})", {})
        elif chunk.word_count < acfg.min_words:
            verdicts[row.chunk_id] = ("dropped", f"trivial: {chunk.word_count} words < min_words "
                                                 f"{acfg.min_words}", {})
        else:
            candidates.append(row)

    log: dict = {}
    gate = run_agent(
        sp, NAME, cfg, services,
        llm_path=lambda agent: _llm_gate(agent, sp, candidates, chunks, cfg, services, log),
        deterministic_path=lambda: _rule_gate(candidates, chunks, cfg),
        output=A3Output,
    )
    verdicts.update(gate)
    by_llm = sp.extras.mode_of(NAME) == "llm"
    unjudged = set(log.get("unjudged") or [])
    decided: dict[str, str] = {r.chunk_id: "llm" if by_llm and r.chunk_id not in unjudged else "rule"
                               for r in candidates}
    chunk_edits = edits.chunk_edits(sp.edits)
    for cid in chunk_edits.kept:
        if cid not in verdicts:
            continue
        status, reason, extra = verdicts[cid]
        overruled = f" (the gate would drop it: {reason})" if status == "dropped" else ""
        verdicts[cid] = ("kept", chunk_edits.reason(cid) + overruled, extra)
        decided[cid] = "you"
        edits.note(sp, NAME, chunk_edits.by_id[cid], True, "kept by the gate" + (
            f", which would have dropped it ({reason})" if status == "dropped" else ""))

    rows: list[ViewRow] = []
    for row in ranked:
        status, reason, extra = verdicts[row.chunk_id]
        rows.append(ViewRow(chunk_id=row.chunk_id, rank=len(rows) + 1, score=row.score,
                            scores={"rerank": row.score, **extra}, status=status, reason=reason,
                            decided_by=decided.get(row.chunk_id, "rule")))
    sp.views_by_stage[View.A3] = rows
    sp.final_selection_ids = [r.chunk_id for r in rows if r.status == "kept"]
    sp.extras.a3 = A3Record(kept=len(sp.final_selection_ids),
                            dropped=len(rows) - len(sp.final_selection_ids),
                            working_set=len(candidates), **log)
    return sp


def _rule_gate(candidates: list[ViewRow], chunks: dict[str, Chunk], cfg: AppConfig) -> dict[str, Verdict]:
    acfg = cfg.agents.A3_NLI_Gate
    best = max((r.score for r in candidates), default=0.0)
    floor = acfg.relative_min * best
    out: dict[str, Verdict] = {}
    kept_shingles: list[tuple[str, set]] = []
    for row in candidates:
        chunk = chunks[row.chunk_id]
        if row.score < acfg.min_relevance:
            out[row.chunk_id] = ("dropped", f"off-topic: score {row.score:.3f} < min_relevance "
                                            f"{acfg.min_relevance:.3f}", {})
            continue
        if row.score < floor:
            out[row.chunk_id] = ("dropped", f"off-topic: score {row.score:.3f} < "
                                            f"{acfg.relative_min:g} × best {best:.3f} = {floor:.3f}", {})
            continue
        sh = shingles(chunk.text)
        duplicate = None
        for other_id, other in kept_shingles:
            sim = jaccard(sh, other)
            if sim >= acfg.duplicate_jaccard:
                duplicate = (other_id, sim)
                break
        if duplicate:
            other_id, sim = duplicate
            out[row.chunk_id] = ("dropped", f"duplicate of {other_id} (Jaccard {sim:.2f} ≥ "
                                            f"{acfg.duplicate_jaccard:.2f})",
                                 {"duplicate_jaccard": round(sim, 6)})
        else:
            kept_shingles.append((chunk.id, sh))
            out[row.chunk_id] = ("kept", "", {})
    return out


def _llm_gate(agent: Agent, sp: SuperPrompt, candidates: list[ViewRow], chunks: dict[str, Chunk],
              cfg: AppConfig, services, log: dict) -> dict[str, Verdict]:
    acfg = cfg.agents.A3_NLI_Gate
    if not candidates:
        return {}
    query = rerank_query(sp.body, sp.extras.body_sources)
    most = min(len(candidates), acfg.llm_max_candidates)
    lines = _evidence_lines(query, [chunks[r.chunk_id] for r in candidates[:most]], services,
                            acfg.llm_sentences, acfg.llm_chars)

    def payload(k: int) -> dict:
        return {"prompt": query[:acfg.llm_chars * 2], "candidates": lines[:k]}

    body, sent = agent.fit(payload, most, schema=reply_schema)
    if not sent:
        raise PromptBudgetError(f"not one candidate fits A3's prompt budget of "
                                f"{agent.prompt_budget} tokens")
    answer: A3Output = agent.ask(body, reply_schema(sent)).value
    clamped: list[A3Clamp] = []
    unjudged: list[str] = []
    unknown: list[int] = []
    out: dict[str, Verdict] = {r.chunk_id: ("kept", "", {}) for r in candidates[:sent]}
    for d in answer.drop:
        if not 1 <= d.n <= sent:
            unknown.append(d.n)
            continue
        tag = d.tag.strip().lower()
        if tag and tag not in TAGS:
            clamped.append(A3Clamp(n=d.n, field="tag", value=d.tag, clamped_to=""))
            tag = ""
        out[candidates[d.n - 1].chunk_id] = ("dropped", f"LLM: {tag or 'dropped'}", {})
    if len(candidates) > sent:
        why = (f"beyond llm_max_candidates={acfg.llm_max_candidates}" if sent == most
               and most < len(candidates) else f"over the prompt budget of {agent.prompt_budget} tokens")
        rules = _rule_gate(candidates, chunks, cfg)
        for r in candidates[sent:]:
            status, reason, extra = rules[r.chunk_id]
            out[r.chunk_id] = (status, f"not sent to the LLM ({why}); by rule: "
                               + (reason or "kept"), extra)
            unjudged.append(r.chunk_id)
    log.update({"clamped": clamped, "unjudged": unjudged, "unknown_numbers": unknown})
    return out


def _evidence_lines(query: str, chunks: list[Chunk], services, per_chunk: int,
                    max_chars: int) -> list[str]:
    """``"n: sentence … sentence"`` for each chunk: its ``per_chunk`` sentences closest to
    the query, in reading order, cut at ``max_chars``."""
    evidence = evidence_for(chunks, services.index(), services.embedder)
    q = services.embedder.embed([query])[0]
    lines = []
    for n, ev in enumerate(evidence, start=1):
        if ev.sentences:
            sims = np.asarray(ev.sentence_vectors) @ q
            best = sorted(np.argsort(-sims, kind="stable")[:per_chunk].tolist())
            text = " … ".join(ev.sentences[i] for i in best)
        else:
            text = " ".join(chunks[n - 1].text.split())
        text = " ".join(text.split())
        lines.append(f"{n}: {text[:max_chars]}")
    return lines


def discard(sp: SuperPrompt) -> None:
    """Forget the gate's view, its facts and the selection it made."""
    sp.views_by_stage.pop(View.A3, None)
    sp.extras.a3 = None
    sp.final_selection_ids = []


STAGE = Stage(name=NAME, value="a3", label="A3 Gate", run=run, discard=discard, view=View.A3,
              reads=(staleness.AGENT,))
