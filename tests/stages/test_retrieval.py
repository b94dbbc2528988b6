"""Retrieval over the bundled knowledge base (real Chroma, real model, real BM25)."""

import pytest

from ragstream.common.errors import EmptyIndexError
from ragstream.stages import controller
from ragstream.stages.retrieval import split_query
from ragstream.state.render import build_query


def test_split_query_caps_pieces_and_joins_short_ones():
    q = ("What is RRF? How does BM25 work? Explain dense retrieval. Why rerank? "
         "What does A3 drop? Ok. How are chunks made?")
    pieces = split_query(q, 5, 4)
    assert 1 <= len(pieces) <= 5
    assert " ".join(pieces).split() == q.split()  # nothing lost, order kept
    assert all(len(p.split()) >= 4 for p in pieces)
    assert split_query("short one", 5, 4) == ["short one"]


def test_build_query_uses_task_context_purpose():
    body = {"task": "Explain RRF.", "context": "We use  BM25.", "purpose": "Teach.",
            "format": "Markdown", "system": "x"}
    assert build_query(body) == "Explain RRF. We use BM25. Teach."


def run_until(engine, prompt, stage):
    return engine.run(prompt, until=stage)


def test_retrieval_view_rows_and_hit(kb_engine):
    sp = run_until(kb_engine, "What is reciprocal rank fusion and which k does it use?", "Retrieval")
    rows = sp.view("retrieval")
    assert 0 < len(rows) <= kb_engine.cfg.limits.N1_RETR_MAX_CANDIDATES
    assert [r.rank for r in rows] == list(range(1, len(rows) + 1))
    assert all({"dense", "keyword", "fused", "dense_rank"} <= set(r.scores) for r in rows)
    fused = [r.score for r in rows]
    assert fused == sorted(fused, reverse=True)
    # the right document comes first
    top_sources = {sp.chunk_map()[r.chunk_id].source for r in rows[:3]}
    assert "kb/hybrid-retrieval.md" in top_sources
    assert [c.id for c in sp.base_context_chunks] == [r.chunk_id for r in rows]
    assert sp.final_selection_ids == []
    record = sp.extras.retrieval
    assert record is not None and record.query and record.returned == len(rows)
    assert 1 <= len(record.pieces) <= kb_engine.cfg.limits.N0_QUERY_PIECES


def test_retrieval_respects_a_small_n1(kb_engine):
    cfg = kb_engine.cfg.with_limits(N1_RETR_MAX_CANDIDATES=7, N2_RERANK_TOP_K=5)
    sp = controller.run_all(controller.new_prompt("How do I configure the Chroma server?"), cfg,
                            kb_engine.services, until="Retrieval")
    assert len(sp.view("retrieval")) == 7
    assert len(sp.base_context_chunks) == 7


def test_keyword_only_match_is_found(kb_engine):
    # an exact identifier is found by BM25 even where dense similarity is weak
    sp = run_until(kb_engine, "RAGSTREAM_CHROMA_URL", "Retrieval")
    rows = sp.view("retrieval")
    assert any(r.scores.get("keyword", 0) > 0 for r in rows[:5])
    top = sp.chunk_map()[rows[0].chunk_id]
    assert "RAGSTREAM_CHROMA_URL" in top.text


def test_empty_index_is_a_clear_error(fresh_engine):
    with pytest.raises(EmptyIndexError, match="ingest"):
        fresh_engine.run("anything at all", until="Retrieval")
