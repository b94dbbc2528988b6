"""Retrieval: the first ranked candidate list, by hybrid (dense + keyword) search.

1. Query: task, context and purpose from ``sp.body``, whitespace-normalised.
2. Pieces: the query's sentences, short ones joined to a neighbour, then adjacent pieces
   merged (smallest pair first) until at most N0 remain.
3. Candidates, from the engine's own indexes (``services.index()``, a ``Corpus``): per piece,
   its N1 nearest chunks (the engine's ANN index over the windows) and its N1 best BM25
   matches (the engine's keyword index), filters applied in the engine. The keyword search
   (and the reading of its hits) runs on a second thread while the pieces are encoded and
   the dense index asked; the BM25 of the dense candidates, while their rows are read.
4. The candidates are fetched (chunk, window vectors) and scored exactly: each one's cosine
   to every piece (its best window) from its stored vectors, and its BM25 for every piece
   from the engine, each piece's BM25 divided by that piece's best score anywhere so pieces
   weigh alike. An approximate index can change which chunks are candidates, never a score.
5. Per chunk, the piece scores are aggregated with LogAvgExp (τ from config), separately for
   dense and keyword; two rankings result (ties by chunk id).
6. Reciprocal rank fusion of the two rankings (k and weights from config); the top N1 by
   fused score (ties by id) become the view and ``base_context_chunks``.

With a named conversation (``sp.conversation_name``) the engine hands in services whose corpus
searches the conversation's remembered turns beside the knowledge base
(``backends.search.memory``): both are searched, scored and fused alike, each chunk once by
its id (a turn's id is ``conversation:<name>#<turn>``), and the record says which knowledge
base and conversation were searched. A turn whose sentences the documents among the top N1
hold is ranked after them (``sources.after_documents``): it never outranks a current
document that says the same thing.

``sp.filters`` (document type, source, update dates) restrict the search to the chunks that
pass them: the others are never candidates of either list (BM25's word statistics stay those
of the whole knowledge base).

The person's chunk edits (``ragstream.state.edits``): an *added* chunk is scored like the others
and always in the view (filters or N1 aside), pinned, reason "added by you"; a *pinned* one
among the top N1 says "pinned by you"; an *excluded* one among them is a dropped row, "excluded
by you", and the N1 kept rows are the best others. A pin or exclusion whose chunk is not among
the candidates (or not in the knowledge base any more) is noted as not applied.

Each row keeps its dense, keyword and fused scores and its rank in each list.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from ragstream.backends.search.base import best_cosines
from ragstream.common.config import AppConfig
from ragstream.common.errors import EmptyIndexError, StageError
from ragstream.common.text import sentences
from ragstream.stages import staleness
from ragstream.stages.scoring import rank_positions, reciprocal_rank_fusion
from ragstream.stages.sources import after_documents
from ragstream.stages.stage import Stage
from ragstream.state import edits
from ragstream.state.records import RetrievalRecord
from ragstream.state.render import build_query
from ragstream.state.super_prompt import Filters, SuperPrompt, View, ViewRow

NAME = "Retrieval"
DIGITS = 6  # scores are rounded so that views are byte-identical across runs
#: a pass's keyword search, and the reading of its hits' rows, run here while the main thread
#: encodes the pieces and asks the dense index: the encoder, both engines and SQLite work
#: outside Python's lock, so on two cores the two overlap (one per pass in flight)
_BESIDE = ThreadPoolExecutor(max_workers=8, thread_name_prefix="ragstream-keyword")


def split_query(query: str, max_pieces: int, min_words: int) -> list[str]:
    """The query's sentences, short ones joined to a neighbour, merged down to at most ``max_pieces``."""
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


def logavgexp_rows(scores: np.ndarray, tau: float) -> np.ndarray:
    """``scoring.logavgexp`` over the last axis of a matrix (one row per chunk)."""
    if scores.shape[-1] == 0:
        return np.zeros(scores.shape[:-1])
    m = scores.max(axis=-1, keepdims=True)
    return (m + np.log(np.exp(tau * (scores - m)).mean(axis=-1, keepdims=True)) / tau)[..., 0]


def top_rows(scores: np.ndarray, n: int, positive: bool = False) -> np.ndarray:
    """Row numbers of the ``n`` best scores (ties: lower row, i.e. smaller chunk id)."""
    rows = np.flatnonzero(scores > 0) if positive else np.arange(len(scores))
    if len(rows) > n:
        # a partition first (fast on long lists), then an exact, tie-stable sort of the few
        cut = np.partition(scores[rows], len(rows) - n)[len(rows) - n]
        rows = rows[scores[rows] >= cut]
    order = np.lexsort((rows, -scores[rows]))
    return rows[order][:n]


class Candidates:
    """Each piece's ``n`` nearest chunks and ``n`` best keyword matches, from the engines
    (``ids``), with each piece's keyword hits and their BM25 (``bm25``: the scores need not be
    asked again for those)."""

    def __init__(self, corpus, vectors: np.ndarray, terms: list[list[str]], n: int,
                 filters: Filters | None, dense: bool = True, keyword: bool = True,
                 keyword_hits: Future[list[list[tuple[str, float]]]] | None = None):
        self.ids: set[str] = set()
        self.filtered = filters is not None
        self.bm25: list[dict[str, float]] = [{} for _ in terms]
        if dense:
            for near in corpus.dense(vectors, n, filters):
                self.ids.update(c for c, _ in near)
        if keyword:  # the keyword search started before the dense one, if it was
            hits = (keyword_hits.result() if keyword_hits is not None
                    else corpus.keyword_many(terms, n, filters))
            self.bm25 = [dict(h) for h in hits]
            for piece in self.bm25:
                self.ids.update(piece)


def keyword_candidates(corpus, terms: list[list[str]], n: int,
                       filters: Filters | None) -> list[list[tuple[str, float]]]:
    """Each piece's ``n`` best keyword matches, their rows read (and kept by the corpus, so
    the fetch of every candidate reads only the dense ones)."""
    hits = corpus.keyword_many(terms, n, filters)
    corpus.fetch(sorted({c for piece in hits for c, _ in piece}))
    return hits


def keyword_by_piece(corpus, chunk_ids: list[str], terms: list[list[str]],
                     found: Candidates | None = None) -> list[dict[str, float]]:
    """Per piece, each of ``chunk_ids``' BM25 divided by the piece's best score anywhere (so
    pieces weigh alike); a chunk that holds none of the piece's terms is left out. ``found``:
    the keyword hits already scored (only the other chunks are asked for their BM25; without
    filters, a piece's first hit is its best anywhere)."""
    out: list[dict[str, float]] = [{} for _ in terms]
    if not chunk_ids:
        return out
    known = found.bm25 if found is not None else [{} for _ in terms]
    if found is not None and not found.filtered:
        best = [max(hits.values(), default=0.0) for hits in known]
    else:
        best = [hits[0][1] if hits else 0.0 for hits in corpus.keyword_many(terms, 1)]
    for i, piece in enumerate(terms):
        if best[i] <= 0:
            continue
        got = dict(known[i])
        rest = [c for c in chunk_ids if c not in got]
        if rest:
            got.update(corpus.keyword_scores(piece, rest))
        out[i] = {c: got[c] / best[i] for c in chunk_ids if got.get(c, 0.0) > 0}
    return out


def keyword_matrix(by_piece: list[dict[str, float]], ordered: list[str]) -> np.ndarray:
    """``keyword_by_piece`` as a (chunks × pieces) matrix, 0 where a piece matched nothing."""
    kw = np.zeros((len(ordered), len(by_piece)), dtype=np.float64)
    for i, scores in enumerate(by_piece):
        if scores:
            kw[:, i] = [scores.get(c, 0.0) for c in ordered]
    return kw


def piece_scores(corpus, held: dict, ordered: list[str], vectors: np.ndarray,
                 terms: list[list[str]], found: Candidates | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(candidates × pieces) best-window cosine, from the fetched window vectors, and the
    normalised BM25 (``keyword_by_piece``)."""
    dense = best_cosines([held[c] for c in ordered], vectors)
    return dense, keyword_matrix(keyword_by_piece(corpus, ordered, terms, found), ordered)


def aggregate_dense(by_piece: np.ndarray, rows: np.ndarray, tau: float) -> np.ndarray:
    """LogAvgExp over the pieces, rounded (views are byte-identical across runs)."""
    return np.round(logavgexp_rows(by_piece[rows].astype(np.float64), tau), DIGITS)


def aggregate_keyword(by_piece: np.ndarray, rows: np.ndarray, tau: float) -> np.ndarray:
    """LogAvgExp over the pieces; 0 for a chunk no piece matched."""
    kw = by_piece[rows]
    out = np.round(logavgexp_rows(kw, tau), DIGITS)
    return np.where(kw.max(axis=1) > 0, out, 0.0) if len(rows) else out


def single_ranking(services, pieces: list[str], system: str, k: int, tau: float) -> list[str]:
    """One signal's ranking alone, as the evaluation reports it: ``"dense"`` (LogAvgExp of
    the best-window cosines) or ``"bm25"`` (of the normalised BM25), the best ``k`` of each
    piece's ``k`` candidates of that signal (ties by id)."""
    corpus = services.index()
    vectors = services.embedder.embed(pieces)
    terms = corpus.tokenizer.tokens(pieces)
    dense = system == "dense"
    found = Candidates(corpus, vectors, terms, k, None, dense, not dense)
    held = corpus.fetch(sorted(found.ids))
    ordered = sorted(held)
    dense_pp, keyword_pp = piece_scores(corpus, held, ordered, vectors, terms, found)
    rows = np.arange(len(ordered))
    scores = (aggregate_dense(dense_pp, rows, tau) if dense
              else aggregate_keyword(keyword_pp, rows, tau))
    return [ordered[r] for r in top_rows(scores, k, positive=not dense)]


def run(sp: SuperPrompt, cfg: AppConfig, services) -> SuperPrompt:
    """Hybrid search for the body's query; the top N1 by fused score become the view and base context."""
    limits, rs = cfg.limits, cfg.settings.retrieval
    query = build_query(sp.body)
    if not query:
        raise StageError(NAME, "the prompt has no task, context or purpose to search for; "
                               "run A0_PreProcessing on a non-empty prompt first.")
    corpus = services.index()  # the knowledge base's engine, a conversation's turns beside it
    total = corpus.n_chunks
    if total == 0:
        raise EmptyIndexError(cfg.settings.vector_store.collection)
    filters = None if sp.filters.empty else sp.filters
    if filters is not None and not corpus.count(filters):
        raise StageError(NAME, f"no chunk matches the filters ({sp.filters.describe()}); "
                               "widen or clear them.")
    pieces = split_query(query, limits.N0_QUERY_PIECES, rs.min_piece_tokens)
    n1 = limits.N1_RETR_MAX_CANDIDATES
    chunk_edits = edits.chunk_edits(sp.edits)
    terms = corpus.tokenizer.tokens(pieces)
    keyword_hits = _BESIDE.submit(keyword_candidates, corpus, terms, n1, filters)
    vectors = services.embedder.embed(pieces)
    found = Candidates(corpus, vectors, terms, n1, filters, keyword_hits=keyword_hits)
    # a chunk the person added is a candidate whatever the filters say
    wanted = sorted(found.ids | set(chunk_edits.added))
    keyword_scored = _BESIDE.submit(keyword_by_piece, corpus, wanted, terms, found)
    held = corpus.fetch(wanted)
    ordered = sorted(held)  # chunk id order (a chunk whose row is gone is no candidate)
    dense_pp = best_cosines([held[c] for c in ordered], vectors)
    keyword_pp = keyword_matrix(keyword_scored.result(), ordered)
    rows = np.arange(len(ordered))
    dense = dict(zip(ordered, aggregate_dense(dense_pp, rows, rs.tau).tolist()))
    keyword = dict(zip(ordered, aggregate_keyword(keyword_pp, rows, rs.tau).tolist()))

    dense_rank = sorted(ordered, key=lambda c: (-dense[c], c))
    kw_rank = sorted((c for c in ordered if keyword[c] > 0), key=lambda c: (-keyword[c], c))
    fused = reciprocal_rank_fusion({"dense": dense_rank, "keyword": kw_rank}, rs.rrf_k,
                                   {"dense": rs.dense_weight, "keyword": rs.keyword_weight})
    fused = {c: round(v, DIGITS + 2) for c, v in fused.items()}
    fused_order = sorted(ordered, key=lambda c: (-fused[c], c))
    top = _top(fused_order, n1, chunk_edits)
    # a remembered turn never outranks the documents that say what it says
    top, after = after_documents(top, {c: held[c].chunk for c in top},
                                 cfg.settings.conversations.covered_share)
    d_pos, k_pos = rank_positions(dense_rank), rank_positions(kw_rank)

    out_rows = []
    for rank, cid in enumerate(top, start=1):
        scores = {"fused": fused[cid], "dense": dense[cid], "keyword": keyword[cid],
                  "dense_rank": float(d_pos[cid])}
        if cid in k_pos:
            scores["keyword_rank"] = float(k_pos[cid])
        why = chunk_edits.reason(cid)
        moved = (f"ranked after {', '.join(after[cid])}: a remembered turn saying what it says"
                 if cid in after else "")
        out_rows.append(ViewRow(chunk_id=cid, rank=rank, score=fused[cid], scores=scores,
                                status="dropped" if why == edits.EXCLUDED else "kept",
                                reason="; ".join(r for r in (why, moved) if r),
                                decided_by="you" if why else "rule"))
    _note_chunk_edits(sp, chunk_edits, top, fused_order, corpus, held, filters)

    sp.base_context_chunks = [held[c].chunk for c in top]
    sp.views_by_stage[View.RETRIEVAL] = out_rows
    sp.extras.retrieval = RetrievalRecord(
        query=query, pieces=pieces, candidates_considered=len(ordered), returned=len(out_rows),
        tau=rs.tau, rrf_k=rs.rrf_k, index_chunks=total,
        kb=getattr(services, "kb_name", "default"),
        conversation=sp.conversation_name,
        conversation_chunks=corpus.memory_chunks,
    )
    return sp


def _top(fused_order: list[str], n1: int, chunk_edits: edits.ChunkEdits) -> list[str]:
    """The view's chunks, best fused score first: the first ``n1`` that are not excluded, the
    excluded ones among them (shown dropped), and every added one wherever it ranks."""
    if not chunk_edits:
        return fused_order[:n1]
    top: list[str] = []
    kept = 0
    for cid in fused_order:
        if cid in chunk_edits.excluded:
            if kept < n1:
                top.append(cid)
        elif kept < n1 or cid in chunk_edits.added:
            top.append(cid)
            kept += 1
    return top


def _note_chunk_edits(sp: SuperPrompt, chunk_edits: edits.ChunkEdits, top: list[str],
                      fused_order: list[str], corpus, held: dict, filters: Filters | None) -> None:
    """Say, for each chunk edit, what Retrieval did with it or why it could not apply it."""
    place = {c: i for i, c in enumerate(top, start=1)}
    among = {c: i for i, c in enumerate(fused_order, start=1)}
    for cid, edit in chunk_edits.by_id.items():
        chunk = held[cid].chunk if cid in held else corpus.chunk(cid)
        if cid in place:
            said = {"pin": "kept", "add": "brought in", "exclude": "dropped"}[edit.kind]
            where = f"at Retrieval rank {place[cid]}"
            if edit.kind == "add" and place[cid] != among[cid]:
                where += f" (rank {among[cid]} of the {len(fused_order)} scored)"
            if edit.kind == "add" and filters is not None and chunk is not None \
                    and not filters.matches(chunk):
                where += ", outside the filters"
            edits.note(sp, NAME, edit, True, f"{said} {where}")
        elif chunk is None:
            edits.note(sp, NAME, edit, False, f"not applied: {cid} is not in the knowledge base "
                                              "any more (re-ingested or removed)")
        elif filters is not None and not filters.matches(chunk):
            edits.note(sp, NAME, edit, False, f"not applied: {cid} is left out by the filters "
                                              f"({sp.filters.describe()})")
        else:
            edits.note(sp, NAME, edit, False, f"not applied: {cid} is not among Retrieval's "
                                              f"{sum(c not in chunk_edits.excluded for c in top)} "
                                              "candidates for this prompt" +
                                              ("; add it to bring it in" if edit.kind == "pin" else ""))


def discard(sp: SuperPrompt) -> None:
    """Forget the candidates, their view and the query facts."""
    sp.base_context_chunks = []
    sp.views_by_stage.pop(View.RETRIEVAL, None)
    sp.extras.retrieval = None


STAGE = Stage(name=NAME, value="retrieval", label="Retrieval", run=run, discard=discard,
              view=View.RETRIEVAL,
              reads=(staleness.FILTERS, staleness.KB, "limits.N0_QUERY_PIECES",
                     "limits.N1_RETR_MAX_CANDIDATES", "settings.retrieval.tau",
                     "settings.retrieval.rrf_k", "settings.retrieval.dense_weight",
                     "settings.retrieval.keyword_weight", "settings.retrieval.min_piece_tokens",
                     "settings.embedding"))
