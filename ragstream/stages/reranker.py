"""ReRanker: re-score the top N2 retrieval candidates against the whole prompt at once.

The query is the plain-text Prompt (task, purpose, context, format — no System block, no
attachments). Each candidate is scored with its heading path in front of its text by the
configured backend (a cross-encoder, or the offline re-scorer when none can be loaded, which
reads the vectors computed at ingestion and embeds only the query); the view is sorted by
that score (ties by id) and names the backend that ran; a remembered conversation turn whose
sentences the documents among the candidates hold is ranked after them
(``sources.after_documents``). ``final_selection_ids`` is not touched.

A chunk the person pinned or added is reranked wherever Retrieval ranked it, beyond N2 too
(its reason says so).
"""

from __future__ import annotations

from ragstream.common.config import AppConfig
from ragstream.common.errors import StageError
from ragstream.stages.sources import after_documents
from ragstream.stages.stage import Stage
from ragstream.state import edits
from ragstream.state.records import RerankerRecord
from ragstream.state.render import rerank_query
from ragstream.state.super_prompt import SuperPrompt, View, ViewRow

NAME = "ReRanker"
DIGITS = 6


def run(sp: SuperPrompt, cfg: AppConfig, services) -> SuperPrompt:
    """Score the top N2 retrieval candidates against the prompt; write them, best first, to its view."""
    retrieved = sp.kept_ids(View.RETRIEVAL)
    if not retrieved:
        raise StageError(NAME, "Retrieval returned no candidates; nothing to rerank. "
                               "Ingest documents or rephrase the prompt, then run Retrieval again.")
    n2 = cfg.limits.N2_RERANK_TOP_K
    chunk_edits = edits.chunk_edits(sp.edits)
    kept_by_you = set(chunk_edits.kept)
    candidates = retrieved[:n2] + [c for c in retrieved[n2:] if c in kept_by_you]
    chunks = sp.chunk_map()
    choice = services.reranker
    query = rerank_query(sp.body, sp.extras.body_sources)
    scores = choice.reranker.score(query, [chunks[c] for c in candidates])
    if len(scores) != len(candidates):
        raise StageError(NAME, f"the {choice.backend} backend returned {len(scores)} scores "
                               f"for {len(candidates)} candidates")
    before = {r.chunk_id: r.rank for r in sp.view(View.RETRIEVAL)}
    beyond_n2 = set(retrieved[n2:])
    scored = {cid: round(float(s), DIGITS) for cid, s in zip(candidates, scores)}
    order = sorted(candidates, key=lambda c: (-scored[c], c))
    # a remembered turn never outranks the documents that say what it says
    order, after = after_documents(order, chunks, cfg.settings.conversations.covered_share)
    scored_by = f"scored by the {choice.backend} backend"
    rows = []
    for rank, cid in enumerate(order, start=1):
        reason, by = scored_by, "rule"
        if cid in after:
            reason += f"; ranked after {', '.join(after[cid])}: a remembered turn saying what it says"
        if cid in kept_by_you:
            beyond = cid in beyond_n2
            reason += (f"; reranked though beyond N2 (retrieval rank {before[cid]}): "
                       if beyond else "; ") + chunk_edits.reason(cid)
            by = "you" if beyond else "rule"
            edits.note(sp, NAME, chunk_edits.by_id[cid], True, f"reranked at rank {rank}" +
                       (f" though beyond N2={n2}" if beyond else ""))
        rows.append(ViewRow(chunk_id=cid, rank=rank, score=scored[cid],
                            scores={"rerank": scored[cid], "retrieval_rank": float(before[cid]),
                                    "rank_change": float(before[cid] - rank)},
                            reason=reason, decided_by=by))
    sp.views_by_stage[View.RERANKED] = rows
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


STAGE = Stage(name=NAME, value="reranked", label="ReRanker", run=run, discard=discard,
              view=View.RERANKED, mode=mode,
              reads=("limits.N2_RERANK_TOP_K", "settings.reranker"))
