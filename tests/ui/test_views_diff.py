"""The stage diff and the rank-movement chart, over a real SuperPrompt of the bundled KB."""

import pytest

from ragstream.interfaces.ui import charts, chunk_moves, grids, views
from ragstream.state.super_prompt import View

PROMPT = "How are documents chunked?"


@pytest.fixture(scope="module")
def sp(kb_engine):
    return kb_engine.run(PROMPT)


def by_id(rows):
    return {r["chunk id"]: r for r in rows}


def test_move_is_rank_in_a_minus_rank_in_b():
    assert chunk_moves.move_label(5, 2, dropped=False) == ("↑3", 3)
    assert chunk_moves.move_label(2, 9, dropped=False) == ("↓7", -7)
    assert chunk_moves.move_label(4, 4, dropped=False) == ("=", 0)
    assert chunk_moves.move_label(None, 4, dropped=False) == ("new", None)
    assert chunk_moves.move_label(3, 4, dropped=True) == ("dropped", None)
    assert chunk_moves.move_label(3, None, dropped=False) == ("dropped", None)


def test_retrieval_to_reranker_moves_and_the_n2_cut(sp):
    retrieval, reranked = sp.view(View.RETRIEVAL), sp.view(View.RERANKED)
    rows = chunk_moves.diff_rows(sp, View.RETRIEVAL, View.RERANKED)
    assert len(rows) == len(retrieval)  # every candidate once
    assert list(rows[0]) == chunk_moves.DIFF_ORDER
    rows_by_id = by_id(rows)
    rank_b = {r.chunk_id: r.rank for r in reranked}
    for r in retrieval:
        row = rows_by_id[r.chunk_id]
        assert row["rank in A"] == r.rank
        if r.chunk_id in rank_b:
            delta = r.rank - rank_b[r.chunk_id]
            assert row["Δ rank"] == delta and row["rank in B"] == rank_b[r.chunk_id]
            assert row["move"] == ("=" if delta == 0 else f"↑{delta}" if delta > 0 else f"↓{-delta}")
        else:  # beyond N2: not reranked, with its retrieval rank, as the chunk table says
            assert row["move"] == "dropped" and row["rank in B"] is None and row["Δ rank"] is None
            assert row["status in B"] == views.NOT_RERANKED
            assert row["reason"].startswith(f"not reranked: beyond N2 (rank {r.rank})")
    assert any(m.startswith("↑") for m in (r["move"] for r in rows))
    assert any(m.startswith("↓") for m in (r["move"] for r in rows))


def test_a3_to_a4_carries_the_gates_reason_and_a4s(sp):
    rows = by_id(chunk_moves.diff_rows(sp, View.A3, View.A4))
    for r in sp.view(View.A3):
        if r.status == "dropped":  # A4 never saw it: dropped, with the gate's reason
            assert rows[r.chunk_id]["move"] == "dropped"
            assert rows[r.chunk_id]["status in B"] == "not reached"
            assert r.reason in rows[r.chunk_id]["reason"]
    unused = [r for r in sp.view(View.A4) if r.status == "dropped"]
    assert unused
    for r in unused:  # A4 has it but did not use it: dropped, with A4's reason
        row = rows[r.chunk_id]
        assert row["move"] == "dropped" and row["rank in B"] == r.rank
        assert row["reason"].startswith("not used by A4")


def test_new_when_stage_a_does_not_have_the_chunk(sp):
    rows = chunk_moves.diff_rows(sp, View.A4, View.RETRIEVAL)
    in_a4 = {r.chunk_id for r in sp.view(View.A4)}
    new = [r for r in rows if r["move"] == "new"]
    assert new and all(r["chunk id"] not in in_a4 and r["rank in A"] is None for r in new)
    assert len(rows) == len(sp.view(View.RETRIEVAL))


def test_same_stage_moves_nothing(sp):
    rows = chunk_moves.diff_rows(sp, View.RERANKED, View.RERANKED)
    assert {r["move"] for r in rows} == {"="}


def test_orders(sp):
    a, b = View.RETRIEVAL, View.RERANKED
    by_b = chunk_moves.diff_rows(sp, a, b)  # default: rank in B, then the rest by rank in A
    ranks_b = [r["rank in B"] for r in by_b]
    present = [x for x in ranks_b if x is not None]
    assert present == sorted(present) and ranks_b[:len(present)] == present
    tail = [r["rank in A"] for r in by_b[len(present):]]
    assert tail == sorted(tail)
    by_a = chunk_moves.diff_rows(sp, a, b, "rank in A")
    assert [r["rank in A"] for r in by_a] == sorted(r["rank in A"] for r in by_a)
    rise = chunk_moves.diff_rows(sp, a, b, "biggest rise")
    deltas = [r["Δ rank"] for r in rise if r["Δ rank"] is not None]
    assert deltas == sorted(deltas, reverse=True) and deltas[0] > 0
    assert rise[-1]["move"] == "dropped"
    fall = chunk_moves.diff_rows(sp, a, b, "biggest fall")
    assert [r["Δ rank"] for r in fall if r["Δ rank"] is not None] == sorted(deltas)
    with pytest.raises(ValueError, match="rank in B"):
        chunk_moves.diff_rows(sp, a, b, "alphabetical")


def test_default_pair_and_summary(sp):
    # the first two consecutive stages that differ: the ReRanker reorders Retrieval's top N2
    assert chunk_moves.diff_default(sp) == (View.RETRIEVAL, View.RERANKED)
    assert chunk_moves.diff_default(sp, View.RETRIEVAL, View.A3) == (View.RETRIEVAL, View.A3)
    assert chunk_moves.diff_default(sp, "a5", View.A3) == (View.RETRIEVAL, View.RERANKED)
    line = chunk_moves.diff_summary(chunk_moves.diff_rows(sp, View.RERANKED, View.A4), View.RERANKED, View.A4)
    assert line.startswith("ReRanker → A4 Condenser: ") and " dropped" in line


def test_diff_columns_fit_the_table_width():
    cols = chunk_moves.diff_columns(View.RERANKED, View.A4)
    assert list(cols) == chunk_moves.DIFF_ORDER
    assert sum(c["width"] for c in cols.values()) == grids.TABLE_WIDTH
    # short labels that fit their widths; the stages in the help
    assert cols["rank in A"]["label"] == "A rank" and cols["rank in B"]["label"] == "B rank"
    assert cols["rank in A"]["help"] == "rank in A (ReRanker)"
    assert cols["status in B"]["help"] == "status in B (A4 Condenser)"
    assert all(grids.label_width(c.get("label", n)) <= c["width"] for n, c in cols.items())
    # with the rows: the chunk id as wide as the longest one, the widths still add up
    rows = [{"chunk id": "kb/writing-a-good-knowledge-base.md#12"}]
    cols = chunk_moves.diff_columns(View.RERANKED, View.A4, rows=rows)
    assert sum(c["width"] for c in cols.values()) == grids.TABLE_WIDTH
    assert grids.fits(rows[0]["chunk id"], cols["chunk id"]["width"], 1)


def test_bump_points_follow_the_latest_stages_top_chunks(sp):
    points = charts.bump_points(sp)
    top = [r.chunk_id for r in sorted(sp.view(View.A4), key=lambda r: r.rank)[:charts.BUMP_TOP]]
    assert {p["chunk id"] for p in points} == set(top)
    stages = [t for _, t in views.VIEW_STAGES]
    for p in points:
        assert p["stage"] in stages and p["status"] in ("kept", "dropped") and p["reason"]
    # each chunk has a point at every stage whose view has it, with that stage's rank
    first = [p for p in points if p["chunk id"] == top[0]]
    assert [p["stage"] for p in first] == stages


def test_bump_chart_encodes_rank_reversed_and_shape(sp):
    spec = charts.bump_chart(sp).to_dict()
    line, dots = spec["layer"]
    assert line["mark"]["type"] == "line" and dots["mark"]["type"] == "point"
    assert line["encoding"]["y"]["scale"]["reverse"] is True
    assert dots["encoding"]["shape"]["field"] == "status"
    assert line["encoding"]["x"]["sort"] == [t for _, t in views.VIEW_STAGES]
    assert "top 20" in spec["title"]["text"]
    assert charts.bump_chart(type(sp)()) is None
