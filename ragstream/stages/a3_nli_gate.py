"""A3_NLI_Gate: keep or drop each reranked candidate, with the reason (seed 001 §5.5).

Deterministic mode (the default with no LLM endpoint), in reranked order:

1. Working set: the first ``max_candidates``; the rest are dropped ("beyond working set").
2. Trivial: fewer than ``min_words`` words.
3. Relevance: a rerank score below ``min_relevance``, or below ``relative_min`` × the best
   score in the working set, is dropped as off-topic.
4. Near-duplicates: a chunk whose word 3-shingle Jaccard similarity with an already kept
   chunk is ≥ ``duplicate_jaccard`` is dropped as a duplicate of that chunk.

Kept ids, in reranked order, become ``final_selection_ids``. Chunks are never modified.
"""

from __future__ import annotations

from ragstream.agents.base import record_mode, resolve_mode
from ragstream.config import AppConfig
from ragstream.errors import StageError
from ragstream.super_prompt import SuperPrompt, ViewRow
from ragstream.text import jaccard, shingles

NAME = "A3_NLI_Gate"
NAME_VIEW = "a3"


def run(sp: SuperPrompt, cfg: AppConfig, services) -> SuperPrompt:
    acfg = cfg.agents.A3_NLI_Gate
    decision = resolve_mode(acfg, cfg, llm_available=bool(services and services.llm_available))
    record_mode(sp, NAME, decision)
    ranked = sp.view("reranked")
    if not ranked:
        raise StageError(NAME, "the ReRanker view is empty; run ReRanker first.")
    chunks = sp.chunk_map()
    working = ranked[: acfg.max_candidates]
    best = max((r.score for r in working), default=0.0)
    floor = acfg.relative_min * best

    rows: list[ViewRow] = []
    kept_shingles: list[tuple[str, set]] = []
    for row in ranked:
        chunk = chunks[row.chunk_id]
        status, reason, dup_sim = "kept", "", 0.0
        if row.rank > acfg.max_candidates:
            status, reason = "dropped", f"beyond working set (max_candidates={acfg.max_candidates})"
        elif chunk.word_count < acfg.min_words:
            status, reason = "dropped", f"trivial: {chunk.word_count} words < min_words {acfg.min_words}"
        elif row.score < acfg.min_relevance:
            status, reason = "dropped", (f"off-topic: score {row.score:.3f} < min_relevance "
                                         f"{acfg.min_relevance:.3f}")
        elif row.score < floor:
            status, reason = "dropped", (f"off-topic: score {row.score:.3f} < {acfg.relative_min:g} "
                                         f"× best {best:.3f} = {floor:.3f}")
        else:
            sh = shingles(chunk.text)
            for other_id, other in kept_shingles:
                sim = jaccard(sh, other)
                if sim >= acfg.duplicate_jaccard:
                    status, dup_sim = "dropped", sim
                    reason = (f"duplicate of {other_id} (Jaccard {sim:.2f} ≥ "
                              f"{acfg.duplicate_jaccard:.2f})")
                    break
            if status == "kept":
                kept_shingles.append((chunk.id, sh))
        scores = {"rerank": row.score}
        if dup_sim:
            scores["duplicate_jaccard"] = round(dup_sim, 6)
        rows.append(ViewRow(chunk_id=row.chunk_id, rank=len(rows) + 1, score=row.score,
                            scores=scores, status=status, reason=reason))

    sp.views_by_stage[NAME_VIEW] = rows
    sp.final_selection_ids = [r.chunk_id for r in rows if r.status == "kept"]
    sp.extras["a3"] = {
        "kept": len(sp.final_selection_ids),
        "dropped": len(rows) - len(sp.final_selection_ids),
        "best_score": best,
        "relative_floor": round(floor, 6),
    }
    return sp
