"""Retrieval: the first ranked candidate list, by hybrid search (seed 001 §5.3).

1. Query: task, context and purpose from ``sp.body``, whitespace-normalised.
2. Pieces: the query's sentences, short ones joined to a neighbour, then adjacent pieces
   merged (smallest pair first) until at most N0 remain.
3. Dense: each piece is embedded; Chroma proposes the nearest chunks per piece; then every
   candidate's exact cosine to every piece is computed from its stored window vectors (best
   window), so no candidate is scored from a partial list.
4. Keyword: BM25 (bm25s) scores of every chunk per piece, each piece's scores divided by that
   piece's best score so pieces weigh alike; candidates are each piece's top N1 with a score.
5. Per chunk, the piece scores are aggregated with LogAvgExp (τ from config), separately for
   dense and keyword; two rankings result (ties by chunk id).
6. Reciprocal rank fusion of the two rankings (k and weights from config); the top N1 by
   fused score (ties by id) become the view and ``base_context_chunks``.

Each row keeps its dense, keyword and fused scores and its rank in each list.
"""

from __future__ import annotations

import re

import numpy as np

from ragstream.config import AppConfig
from ragstream.errors import EmptyIndexError, StageError
from ragstream.scoring import logavgexp, rank_positions, reciprocal_rank_fusion
from ragstream.super_prompt import SuperPrompt, ViewRow
from ragstream.text import sentences

NAME = "Retrieval"
NAME_VIEW = "retrieval"
QUERY_KEYS = ("task", "context", "purpose")
DIGITS = 6  # scores are rounded so that views are byte-identical across runs


def build_query(body: dict[str, str]) -> str:
    parts = [body.get(k, "").strip() for k in QUERY_KEYS]
    return re.sub(r"\s+", " ", " ".join(p for p in parts if p)).strip()


def split_query(query: str, max_pieces: int, min_words: int) -> list[str]:
    pieces = sentences(query) or [query]
    # join pieces shorter than min_words to their neighbour (the previous one if any)
    merged: list[str] = []
    for piece in pieces:
        if merged and len(piece.split()) < min_words:
            merged[-1] = f"{merged[-1]} {piece}"
        elif merged and len(merged[-1].split()) < min_words:
            merged[-1] = f"{merged[-1]} {piece}"
        else:
            merged.append(piece)
    while len(merged) > max_pieces:
        sizes = [len(a.split()) + len(b.split()) for a, b in zip(merged, merged[1:])]
        i = sizes.index(min(sizes))
        merged[i:i + 2] = [f"{merged[i]} {merged[i + 1]}"]
    return merged


def run(sp: SuperPrompt, cfg: AppConfig, services) -> SuperPrompt:
    limits, rs = cfg.limits, cfg.settings.retrieval
    query = build_query(sp.body)
    if not query:
        raise StageError(NAME, "the prompt has no task, context or purpose to search for; "
                               "run A0_PreProcessing on a non-empty prompt first.")
    store = services.store
    if store.count_windows() == 0:
        raise EmptyIndexError(cfg.settings.vector_store.collection)
    pieces = split_query(query, limits.N0_QUERY_PIECES, rs.min_piece_tokens)
    n1 = limits.N1_RETR_MAX_CANDIDATES

    # dense candidates, then exact per-piece cosine from every candidate's window vectors
    piece_vecs = services.embedder.embed(pieces)
    candidates: set[str] = set()
    for hits in store.query(piece_vecs, n1):
        candidates.update(hits)

    # keyword scores for all chunks, per piece, normalised by the piece's best score
    kw = services.keyword()
    kw_ids = kw.ids
    kw_matrix = np.zeros((len(pieces), len(kw_ids)), dtype=np.float64)
    for i, piece in enumerate(pieces):
        s = kw.scores(piece).astype(np.float64)
        top = s.max() if len(s) else 0.0
        if top > 0:
            kw_matrix[i] = s / top
            best = sorted((j for j in np.flatnonzero(s > 0)), key=lambda j: (-s[j], kw_ids[j]))
            candidates.update(kw_ids[j] for j in best[:n1])
    kw_col = {cid: j for j, cid in enumerate(kw_ids)}

    ordered = sorted(candidates)
    stored_chunks, windows = store.chunks_with_vectors(ordered)
    dense: dict[str, float] = {}
    keyword: dict[str, float] = {}
    for cid in ordered:
        piece_cos = (windows[cid] @ piece_vecs.T).max(axis=0) if cid in windows else np.zeros(len(pieces))
        dense[cid] = round(logavgexp([float(x) for x in piece_cos], rs.tau), DIGITS)
        j = kw_col.get(cid)
        kscores = [float(x) for x in kw_matrix[:, j]] if j is not None else [0.0] * len(pieces)
        keyword[cid] = round(logavgexp(kscores, rs.tau), DIGITS) if any(kscores) else 0.0

    dense_rank = sorted(ordered, key=lambda c: (-dense[c], c))
    kw_rank = sorted((c for c in ordered if keyword[c] > 0), key=lambda c: (-keyword[c], c))
    fused = reciprocal_rank_fusion({"dense": dense_rank, "keyword": kw_rank}, rs.rrf_k,
                                   {"dense": rs.dense_weight, "keyword": rs.keyword_weight})
    fused = {c: round(v, DIGITS + 2) for c, v in fused.items()}
    top = sorted(ordered, key=lambda c: (-fused[c], c))[:n1]
    d_pos, k_pos = rank_positions(dense_rank), rank_positions(kw_rank)

    rows = []
    for rank, cid in enumerate(top, start=1):
        scores = {"fused": fused[cid], "dense": dense[cid], "keyword": keyword[cid],
                  "dense_rank": float(d_pos[cid])}
        if cid in k_pos:
            scores["keyword_rank"] = float(k_pos[cid])
        rows.append(ViewRow(chunk_id=cid, rank=rank, score=fused[cid], scores=scores))

    missing = [c for c in top if c not in stored_chunks]
    if missing:
        raise StageError(NAME, f"the vector store lost chunks while reading: {missing[:3]}; "
                               f"re-ingest the knowledge base.")
    sp.base_context_chunks = [stored_chunks[c] for c in top]
    sp.views_by_stage[NAME_VIEW] = rows
    sp.extras["retrieval"] = {
        "query": query,
        "pieces": pieces,
        "candidates_considered": len(ordered),
        "returned": len(rows),
        "tau": rs.tau,
        "rrf_k": rs.rrf_k,
        "index_chunks": len(kw_ids),
    }
    return sp

