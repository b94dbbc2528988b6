"""Two runs compared (``ragstream.interfaces.ui.compare``) on real passes over the bundled knowledge base:
the inputs that differ, each chunk's move and its cause, the selection, the prompt diff, the
JSON and text forms and the side-by-side chart."""

from __future__ import annotations

import json

import pytest

from ragstream.interfaces.ui.compare import CHUNK_COLUMNS, VIEW_KEYS, Comparison, Side, compare
from ragstream.state.super_prompt import Filters, SuperPrompt, View

PROMPT = "How does the ReRanker choose its backend?"
OTHER = "How are documents chunked?"
N2 = "limits.N2_RERANK_TOP_K"
MIN_RELEVANCE = "agents.A3_NLI_Gate.min_relevance"


@pytest.fixture(scope="module")
def base(kb_engine) -> SuperPrompt:
    return kb_engine.run(PROMPT)


@pytest.fixture(scope="module")
def excluded(kb_engine, base) -> tuple[str, SuperPrompt]:
    """B: the base run with its first selected chunk excluded."""
    top = base.final_selection_ids[0]
    return top, kb_engine.resume(kb_engine.exclude(base, top))


def sides(engine, a: SuperPrompt, b: SuperPrompt, settings_b: dict | None = None) -> Comparison:
    return compare(Side("run 1", a, {}, engine.cfg), Side("run 2", b, settings_b or {}, engine.cfg))


def changed(a: SuperPrompt, b: SuperPrompt) -> set[str]:
    """Chunk ids whose (rank, status) differs, or that only one run has, at a chunk stage
    both runs reached."""
    out: set[str] = set()
    for key in VIEW_KEYS:
        if key in a.views_by_stage and key in b.views_by_stage:
            ra = {r.chunk_id: (r.rank, r.status) for r in a.view(key)}
            rb = {r.chunk_id: (r.rank, r.status) for r in b.view(key)}
            out |= {c for c in ra.keys() | rb.keys() if ra.get(c) != rb.get(c)}
    return out


def by_id(rows: list[dict]) -> dict[str, dict]:
    return {r["chunk id"]: r for r in rows}


# --------------------------------------------------------------------------- same inputs


def test_identical_runs_differ_in_nothing(kb_engine, base):
    again = kb_engine.run(PROMPT)
    cmp = sides(kb_engine, base, again)
    assert cmp.inputs == []
    assert cmp.moves() == [] and cmp.prompt_diff() == []
    assert cmp.selection_added == [] and cmp.selection_removed == []
    assert cmp.selection_kept == base.final_selection_ids
    rows = cmp.chunk_rows()
    assert len(rows) == sum(len(base.view(k)) for k in VIEW_KEYS)
    assert list(rows[0]) == CHUNK_COLUMNS
    assert {r["move"] for r in rows} == {"="}
    assert all(r["Δ rank"] == 0 and r["cause"] is None for r in rows)
    assert cmp.stages() == [k for k in VIEW_KEYS if k in base.views_by_stage]
    assert cmp.summary().startswith("inputs the same;")
    assert "final selection: +0 −0" in cmp.summary()


def test_a_move_without_any_input_change_is_unexplained(kb_engine, base):
    first, second = sorted(base.view(View.RERANKED), key=lambda r: r.rank)[:2]
    b = base.model_copy(deep=True)
    b.views_by_stage[View.RERANKED] = [
        r.model_copy(update={"rank": second.rank}) if r.chunk_id == first.chunk_id else
        r.model_copy(update={"rank": first.rank}) if r.chunk_id == second.chunk_id else r
        for r in base.view(View.RERANKED)]
    cmp = sides(kb_engine, base, b)
    assert cmp.inputs == []
    moves = by_id(cmp.moves())
    assert set(moves) == {first.chunk_id, second.chunk_id} == changed(base, b)
    delta = second.rank - first.rank
    assert moves[first.chunk_id]["what"] == f"moved ↓{delta}"
    assert moves[second.chunk_id]["what"] == f"moved ↑{delta}"
    assert {m["cause"] for m in moves.values()} == {"unexplained"}


# --------------------------------------------------------------------------- settings


def test_a_smaller_n2_names_the_setting_as_the_cause(kb_engine, base):
    file_n2 = kb_engine.cfg.limits.N2_RERANK_TOP_K
    n2 = len(base.view(View.RERANKED)) // 2
    b = kb_engine.run(PROMPT, cfg=kb_engine.cfg.with_overrides({N2: n2}))
    cmp = sides(kb_engine, base, b, {N2: n2})
    assert cmp.inputs == [{"input": f"setting {N2}", "A": str(file_n2), "B": str(n2)}]

    kept_b = {r.chunk_id for r in b.view(View.RERANKED)}
    cut = [r.chunk_id for r in base.view(View.RERANKED) if r.chunk_id not in kept_b]
    assert len(cut) == len(base.view(View.RERANKED)) - n2 > 0
    named = f"setting {N2} {file_n2} → {n2}"
    moves = by_id(cmp.moves())
    assert set(moves) == changed(base, b)
    for chunk_id in cut:  # cut at the ReRanker: the setting that stage reads
        assert moves[chunk_id]["stage"] == "ReRanker" and moves[chunk_id]["what"] == "removed"
        assert moves[chunk_id]["cause"] == named
    assert all(named in m["cause"] for m in moves.values())  # later stages follow it
    rows = by_id(cmp.chunk_rows(View.RERANKED))
    for chunk_id in cut:
        row = rows[chunk_id]
        assert (row["move"], row["rank B"], row["status B"], row["Δ rank"]) == ("dropped", None, None, None)
    assert f"{N2} {file_n2} → {n2}" in cmp.summary()
    assert cmp.summary().startswith("1 input differs (settings: ")


def test_a_higher_a3_floor_names_the_setting_for_the_chunks_it_drops(kb_engine, base):
    file_value = kb_engine.cfg.get(MIN_RELEVANCE)
    kept = sorted((r for r in base.view(View.A3) if r.status == "kept"), key=lambda r: -r.score)
    floor = round(kept[len(kept) // 2].score, 3)
    assert kept[0].score >= floor > file_value
    b = kb_engine.run(PROMPT, cfg=kb_engine.cfg.with_overrides({MIN_RELEVANCE: floor}))
    cmp = sides(kb_engine, base, b, {MIN_RELEVANCE: floor})
    assert cmp.inputs == [{"input": f"setting {MIN_RELEVANCE}", "A": str(file_value), "B": str(floor)}]

    below = [r.chunk_id for r in kept if r.score < floor]
    assert below
    named = f"setting {MIN_RELEVANCE} {file_value} → {floor}"
    moves = by_id(cmp.moves())
    assert set(moves) == changed(base, b)
    for chunk_id in below:
        assert moves[chunk_id]["stage"] == "A3 Gate"
        assert moves[chunk_id]["what"].startswith("kept→dropped")
        assert moves[chunk_id]["cause"] == named
    assert all(named in m["cause"] for m in moves.values())
    assert set(cmp.selection_removed) == set(base.final_selection_ids) - set(b.final_selection_ids)


def test_a_setting_overridden_on_one_side_shows_the_files_value_on_the_other(kb_engine, base):
    cmp = compare(Side("run 1", base, {N2: 7}), Side("run 2", base, {}, kb_engine.cfg))
    assert cmp.inputs == [{"input": f"setting {N2}", "A": "7",
                           "B": str(kb_engine.cfg.limits.N2_RERANK_TOP_K)}]
    without_files = compare(Side("run 1", base, {N2: 7}), Side("run 2", base, {}))
    assert without_files.inputs == [{"input": f"setting {N2}", "A": "7", "B": "file value"}]


# --------------------------------------------------------------------------- edits


def test_a_pin_in_b_is_the_cause_for_that_chunk(kb_engine, base):
    pinned = next(r.chunk_id for r in base.view(View.A3) if r.status == "dropped")
    b = kb_engine.resume(kb_engine.pin(base, pinned))
    cmp = sides(kb_engine, base, b)
    edits_row = next(r for r in cmp.inputs if r["input"] == "edits")
    assert edits_row["A"] == "none" and edits_row["B"] == b.edits[0].describe()

    moves = by_id(cmp.moves())
    assert set(moves) == changed(base, b) and pinned in moves
    assert moves[pinned]["cause"] == f"your edit in B: pin {pinned}"
    assert moves[pinned]["what"].startswith("dropped→kept")
    assert all(f"pin {pinned}" in m["cause"] for m in moves.values())
    assert cmp.selection_added == [c for c in b.final_selection_ids if c not in base.final_selection_ids]
    assert pinned in cmp.selection_added

    backwards = by_id(sides(kb_engine, b, base).moves())  # the edit is A's now
    assert backwards[pinned]["cause"] == f"your edit in A: pin {pinned}"
    assert backwards[pinned]["what"].startswith("kept→dropped")


def test_an_exclude_in_b_is_the_cause_and_moves_the_others(kb_engine, base, excluded):
    top, b = excluded
    cmp = sides(kb_engine, base, b)
    moves = by_id(cmp.moves())
    assert set(moves) == changed(base, b)
    assert moves[top]["stage"] == "Retrieval" and moves[top]["what"].startswith("kept→dropped")
    assert moves[top]["cause"] == f"your edit in B: exclude {top}"
    others = [m for c, m in moves.items() if c != top]
    assert others and all(f"edit in B: exclude {top}" in m["cause"] for m in others)
    assert not any(m["cause"].startswith("your edit") for m in others)
    # every row that differs carries its chunk's cause; the rows that do not carry none
    for row in cmp.chunk_rows():
        if row["chunk id"] in moves and (row["rank A"], row["status A"]) != (row["rank B"], row["status B"]):
            assert row["cause"] == moves[row["chunk id"]]["cause"]
        elif row["chunk id"] not in moves:
            assert row["cause"] is None


def test_selection_changes_follow_the_two_final_selections(kb_engine, base, excluded):
    _, b = excluded
    cmp = sides(kb_engine, base, b)
    final_a, final_b = base.final_selection_ids, b.final_selection_ids
    assert cmp.selection_removed == [c for c in final_a if c not in final_b]
    assert cmp.selection_added == [c for c in final_b if c not in final_a]
    assert cmp.selection_kept == [c for c in final_b if c in final_a]
    assert cmp.selection_removed  # the excluded chunk at least
    reordered = base.model_copy(update={"final_selection_ids": final_a[::-1]})
    same_chunks = sides(kb_engine, base, reordered)
    assert same_chunks.selection_kept == final_a[::-1]  # in B's order
    assert same_chunks.selection_added == same_chunks.selection_removed == []
    assert (f"final selection: +{len(cmp.selection_added)} −{len(cmp.selection_removed)}"
            in cmp.summary())


# --------------------------------------------------------------------------- filters, prompt, KB


def test_a_filter_in_b_names_the_filter(kb_engine, base):
    kept_type = base.chunk_map()[base.view(View.RETRIEVAL)[0].chunk_id].doc_type
    sp = kb_engine.new(PROMPT)
    sp.filters = Filters(doc_type=(kept_type,))
    b = kb_engine.run(sp)
    cmp = sides(kb_engine, base, b)
    assert cmp.inputs == [{"input": "filters", "A": "none", "B": f"doc_type={kept_type}"}]

    chunks = base.chunk_map()
    left_out = [r.chunk_id for r in base.view(View.RETRIEVAL) if chunks[r.chunk_id].doc_type != kept_type]
    assert left_out
    moves = by_id(cmp.moves())
    assert set(moves) == changed(base, b)
    for chunk_id in left_out:
        assert moves[chunk_id]["what"] == "removed" and moves[chunk_id]["stage"] == "Retrieval"
        assert moves[chunk_id]["cause"] == f"filter in B: doc_type={kept_type}"
    assert all(f"doc_type={kept_type}" in m["cause"] for m in moves.values())


def test_a_different_prompt_is_named(kb_engine, base):
    b = kb_engine.run(OTHER)
    cmp = sides(kb_engine, base, b)
    assert cmp.inputs == [{"input": "prompt", "A": PROMPT, "B": OTHER}]
    moves = cmp.moves()
    assert {m["chunk id"] for m in moves} == changed(base, b)
    assert moves and {m["cause"] for m in moves} == {"prompt changed"}


def test_a_changed_document_and_knowledge_base_are_named(kb_engine, base):
    first, second = sorted(base.view(View.RETRIEVAL), key=lambda r: r.rank)[:2]
    b = base.model_copy(deep=True)
    b.base_context_chunks = [c.model_copy(update={"text": c.text + " (revised)"})
                             if c.id == first.chunk_id else c for c in base.base_context_chunks]
    b.views_by_stage[View.RETRIEVAL] = [
        r.model_copy(update={"rank": second.rank}) if r.chunk_id == first.chunk_id else
        r.model_copy(update={"rank": first.rank}) if r.chunk_id == second.chunk_id else r
        for r in base.view(View.RETRIEVAL)]
    retrieval = base.computed_from["Retrieval"]
    b.computed_from["Retrieval"] = retrieval.model_copy(update={"kb": "another fingerprint"})
    cmp = sides(kb_engine, base, b)
    assert cmp.inputs == [{"input": "knowledge base", "A": retrieval.kb, "B": "another fingerprint"}]
    moves = by_id(cmp.moves())
    source = base.chunk_map()[first.chunk_id].source
    assert moves[first.chunk_id]["cause"] == f"changed document: {source}; knowledge base changed"
    assert moves[second.chunk_id]["cause"] == "knowledge base changed"


def test_a_stage_one_run_did_not_reach_is_no_move(kb_engine, base):
    b = kb_engine.run(PROMPT, until="ReRanker")
    cmp = sides(kb_engine, base, b)
    assert {"input": "stage reached", "A": "Prompt Builder", "B": "ReRanker"} in cmp.inputs
    assert cmp.moves() == []
    rows = cmp.chunk_rows(View.A3)
    assert len(rows) == len(base.view(View.A3))
    assert {r["move"] for r in rows} == {"not run in B"}
    assert all(r["rank B"] is None and r["cause"] is None for r in rows)
    assert cmp.chunk_rows("A3 Gate") == rows  # by its title too


# --------------------------------------------------------------------------- outputs


def test_prompt_diff_has_the_lines_each_side_has_alone(kb_engine, base, excluded):
    _, b = excluded
    diff = sides(kb_engine, base, b).prompt_diff()
    assert diff[0] == "--- run 1 (A) prompt_ready" and diff[1] == "+++ run 2 (B) prompt_ready"
    lines_a, lines_b = base.prompt_ready.splitlines(), b.prompt_ready.splitlines()
    minus = {line[1:] for line in diff[2:] if line.startswith("-")}
    plus = {line[1:] for line in diff[2:] if line.startswith("+")}
    assert minus and plus
    assert minus <= set(lines_a) and plus <= set(lines_b)
    assert set(lines_a) - set(lines_b) <= minus and set(lines_b) - set(lines_a) <= plus


def test_text_lines_name_every_moved_chunk(kb_engine, base, excluded):
    top, b = excluded
    cmp = sides(kb_engine, base, b)
    lines = cmp.text_lines()
    text = "\n".join(lines)
    moved = changed(base, b)
    assert moved
    for chunk_id in moved:
        assert any(line.strip().startswith(chunk_id + " ") for line in lines), chunk_id
    assert f"your edit in B: exclude {top}" in text
    assert cmp.summary() in lines
    for chunk_id in cmp.selection_removed:
        assert chunk_id in text
    assert "\n".join(cmp.prompt_diff()) in text


def test_to_dict_is_json_with_the_answers(kb_engine, base, excluded):
    _, b = excluded
    answered_a, ans_a = kb_engine.answer(base)
    answered_b, ans_b = kb_engine.answer(b)
    cmp = compare(Side("run 1", answered_a, {}, kb_engine.cfg),
                  Side("run 2", answered_b, {N2: kb_engine.cfg.limits.N2_RERANK_TOP_K}, kb_engine.cfg))
    data = json.loads(json.dumps(cmp.to_dict()))
    assert data["summary"] == cmp.summary()
    assert data["moves"] == cmp.moves() and data["chunks"] == cmp.chunk_rows()
    assert data["selection"] == {"added": cmp.selection_added, "removed": cmp.selection_removed,
                                 "kept": cmp.selection_kept}
    assert data["a"]["label"] == "run 1"
    assert data["b"]["settings"] == {N2: kb_engine.cfg.limits.N2_RERANK_TOP_K}
    for side, ans in (("A", ans_a), ("B", ans_b)):
        got = data["answers"][side]
        assert got["text"] == ans.text and got["confidence"] == ans.confidence and got["mode"] == ans.mode
        assert got["sources"] == [f"[{c.n}] {c.label}" for c in ans.sources]
        assert got["sources"]
    assert not any(r["input"].startswith("setting") for r in cmp.inputs)  # the override = the file
    unanswered = sides(kb_engine, base, b).answers()
    assert unanswered[0] == {"text": None, "confidence": None, "mode": None, "sources": []}


def test_bump_chart_holds_both_runs_with_shared_colours(kb_engine, base, excluded):
    top, b = excluded
    cmp = sides(kb_engine, base, b)
    chart = cmp.bump_chart(top=10)
    frame = chart.data
    assert set(frame["run"]) == {"A: run 1", "B: run 2"}
    runs = {"A: run 1": base, "B: run 2": b}
    titles = {"Retrieval": View.RETRIEVAL, "ReRanker": View.RERANKED, "A3 Gate": View.A3,
              "A4 Condenser": View.A4}
    for point in frame.to_dict("records"):
        sp = runs[point["run"]]
        row = next(r for r in sp.view(titles[point["stage"]]) if r.chunk_id == point["chunk id"])
        assert (point["rank"], point["status"]) == (row.rank, row.status)
    assert frame["chunk id"].nunique() == 10
    assert ((frame["chunk id"] == top) & (frame["run"] == "B: run 2")
            & (frame["status"] == "dropped")).any()
    spec = chart.to_dict()
    domains = [layer["encoding"]["color"]["scale"]["domain"] for layer in spec["spec"]["layer"]]
    assert domains[0] == domains[1] and set(domains[0]) == set(frame["chunk id"])
    assert spec["resolve"]["scale"]["y"] == "shared" and spec["facet"]["column"]["field"] == "run"
    assert sides(kb_engine, kb_engine.new(PROMPT), kb_engine.new(PROMPT)).bump_chart() is None
