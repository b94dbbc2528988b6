"""A3_NLI_Gate: keep or drop each reranked candidate, with the reason.

Pre-filter (always, deterministic), in reranked order:

1. Working set: the first ``max_candidates``; the rest are dropped ("beyond working set").
2. Trivial: fewer than ``min_words`` words.

Gate over the working set — deterministic mode (no LLM endpoint, or the LLM failed):

3. Relevance: a rerank score below ``min_relevance``, or below ``relative_min`` × the best
   score in the working set, is dropped as off-topic.
4. Near-duplicates: a chunk whose word 3-shingle Jaccard similarity with an already kept
   chunk is ≥ ``duplicate_jaccard`` is dropped as a duplicate of that chunk.

LLM mode: the model sees the prompt and the numbered candidates (id, source, snippet) and
answers keep/drop with a tag (duplicate, off-topic, conflicting) and a short reason for each.
Out-of-enum values are clamped (decision → ``default_decision``, tag → "") and logged in
``extras.a3["clamped"]``; a candidate the model did not judge gets the deterministic
decision, also logged.

Kept ids, in reranked order, become ``final_selection_ids``. Chunks are never modified.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from ragstream.agents.factory import Agent, run_agent
from ragstream.config import AppConfig
from ragstream.errors import StageError
from ragstream.records import A3Clamp, A3Record
from ragstream.render import rerank_query
from ragstream.stages.stage import Stage
from ragstream.super_prompt import Chunk, RowStatus, SuperPrompt, View, ViewRow
from ragstream.text import jaccard, shingles

NAME = "A3_NLI_Gate"
DECISIONS = ("keep", "drop")
TAGS = ("duplicate", "off-topic", "conflicting")

#: (status, reason, extra scores) for one candidate
Verdict = tuple[RowStatus, str, dict[str, float]]


class A3Decision(BaseModel):
    """One candidate's verdict: its number, keep or drop, the drop's tag and a short reason."""

    n: int = Field(description="the candidate's number in the list")
    decision: str = Field(description="keep or drop")
    tag: str = Field("", description="for a drop: duplicate, off-topic or conflicting")
    reason: str = Field("", description="one short sentence")


class A3Output(BaseModel):
    """The reply: a keep-or-drop decision for each numbered candidate."""

    decisions: list[A3Decision]


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
        llm_path=lambda agent: _llm_gate(agent, sp, candidates, chunks, cfg, log),
        deterministic_path=lambda: _rule_gate(candidates, chunks, cfg),
        output=A3Output,
    )
    verdicts.update(gate)

    rows: list[ViewRow] = []
    for row in ranked:
        status, reason, extra = verdicts[row.chunk_id]
        rows.append(ViewRow(chunk_id=row.chunk_id, rank=len(rows) + 1, score=row.score,
                            scores={"rerank": row.score, **extra}, status=status, reason=reason))
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
              cfg: AppConfig, log: dict) -> dict[str, Verdict]:
    acfg = cfg.agents.A3_NLI_Gate
    if not candidates:
        return {}
    snippet = cfg.settings.prompt.snippet_chars
    payload = {
        "prompt": rerank_query(sp.body, sp.extras.body_sources),
        "allowed_decisions": list(DECISIONS),
        "allowed_tags": list(TAGS),
        "candidates": [
            {"n": n, "id": r.chunk_id, "source": chunks[r.chunk_id].citation_label,
             "snippet": " ".join(chunks[r.chunk_id].text.split())[:snippet]}
            for n, r in enumerate(candidates, start=1)
        ],
    }
    answer: A3Output = agent.ask(payload).value
    by_n = {r_n: r for r_n, r in enumerate(candidates, start=1)}
    clamped: list[A3Clamp] = []
    unjudged: list[str] = []
    unknown: list[int] = []
    out: dict[str, Verdict] = {}
    for d in answer.decisions:
        row = by_n.get(d.n)
        if row is None:
            unknown.append(d.n)
            continue
        decision, tag = d.decision.strip().lower(), d.tag.strip().lower()
        if decision not in DECISIONS:
            clamped.append(A3Clamp(n=d.n, field="decision", value=d.decision,
                                   clamped_to=acfg.default_decision))
            decision = acfg.default_decision
        if tag and tag not in TAGS:
            clamped.append(A3Clamp(n=d.n, field="tag", value=d.tag, clamped_to=""))
            tag = ""
        reason = " ".join(d.reason.split())
        if decision == "keep":
            out[row.chunk_id] = ("kept", "", {})
        else:
            why = f"LLM: {tag or 'dropped'}" + (f" — {reason}" if reason else "")
            out[row.chunk_id] = ("dropped", why, {})
    missing = [r for r in candidates if r.chunk_id not in out]
    if missing:
        rules = _rule_gate(candidates, chunks, cfg)
        for r in missing:
            status, reason, extra = rules[r.chunk_id]
            out[r.chunk_id] = (status, "not judged by the LLM; by rule: "
                               + (reason or "kept"), extra)
            unjudged.append(r.chunk_id)
    log.update({"clamped": clamped, "unjudged": unjudged, "unknown_numbers": unknown})
    return out


def discard(sp: SuperPrompt) -> None:
    """Forget the gate's view, its facts and the selection it made."""
    sp.views_by_stage.pop(View.A3, None)
    sp.extras.a3 = None
    sp.final_selection_ids = []


STAGE = Stage(name=NAME, value="a3", label="A3 Gate", run=run, discard=discard, view=View.A3)
