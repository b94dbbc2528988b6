"""ReRanker: re-score the top N2 retrieval candidates against the whole prompt at once.

The query is the plain-text Prompt (task, purpose, context, format — no System block, no
attachments). Each candidate is scored with its heading path in front of its text by the
configured backend (a cross-encoder, or the offline re-scorer when none can be loaded, which
reads the vectors computed at ingestion and embeds only the query); the view is sorted by
that score (ties by id) and names the backend that ran. ``final_selection_ids``
is not touched.
"""

from __future__ import annotations

from ragstream.config import AppConfig
from ragstream.errors import StageError
from ragstream.records import RerankerRecord
from ragstream.render import rerank_query
from ragstream.stages.stage import Stage
from ragstream.super_prompt import SuperPrompt, View, ViewRow

NAME = "ReRanker"
DIGITS = 6


def run(sp: SuperPrompt, cfg: AppConfig, services) -> SuperPrompt:
    """Score the top N2 retrieval candidates against the prompt; write them, best first, to its view."""
    retrieved = sp.kept_ids(View.RETRIEVAL)
    if not retrieved:
        raise StageError(NAME, "Retrieval returned no candidates; nothing to rerank. "
                               "Ingest documents or rephrase the prompt, then run Retrieval again.")
    candidates = retrieved[: cfg.limits.N2_RERANK_TOP_K]
    chunks = sp.chunk_map()
    choice = services.reranker
    query = rerank_query(sp.body, sp.extras.body_sources)
    scores = choice.reranker.score(query, [chunks[c] for c in candidates])
    if len(scores) != len(candidates):
        raise StageError(NAME, f"the {choice.backend} backend returned {len(scores)} scores "
                               f"for {len(candidates)} candidates")
    before = {cid: i for i, cid in enumerate(candidates, start=1)}
    scored = {cid: round(float(s), DIGITS) for cid, s in zip(candidates, scores)}
    order = sorted(candidates, key=lambda c: (-scored[c], c))
    sp.views_by_stage[View.RERANKED] = [
        ViewRow(chunk_id=cid, rank=rank, score=scored[cid],
                scores={"rerank": scored[cid], "retrieval_rank": float(before[cid]),
                        "rank_change": float(before[cid] - rank)},
                reason=f"scored by the {choice.backend} backend")
        for rank, cid in enumerate(order, start=1)
    ]
    sp.extras.reranker = RerankerRecord(backend=choice.backend, reason=choice.reason, query=query,
                                        candidates=len(candidates))
    return sp


def discard(sp: SuperPrompt) -> None:
    """Forget the reranked view and the backend facts."""
    sp.views_by_stage.pop(View.RERANKED, None)
    sp.extras.reranker = None


def mode(sp: SuperPrompt) -> str:
    """The backend that scored (cross-encoder or offline)."""
    return sp.extras.reranker.backend if sp.extras.reranker else ""


STAGE = Stage(name=NAME, value="reranked", label="Rerank", run=run, discard=discard,
              view=View.RERANKED, mode=mode)
