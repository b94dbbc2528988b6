"""The chunk tables at 1280x900, over real SuperPrompts of the bundled KB: whole headers and
reasons, the section beside the chunk id, the Retrieval candidates the ReRanker did not
rerank, "—" for empty text, the text filter and the chunk pickers' labels."""

import itertools

import pytest

from ragstream.interfaces.ui import charts, chunk_moves, editing, grids, views
from ragstream.state.super_prompt import View

PROMPT = "Task: What does A3 do with near-duplicate chunks?"
#: the chunk tables' text columns: never None, never blank
TEXT = ("chunk id", grids.SECTION, "status", "reason", "rule", "by")


@pytest.fixture(scope="module")
def sp(kb_engine):
    return kb_engine.run(PROMPT)


@pytest.fixture(scope="module")
def sp_n2(kb_engine):
    """N2 = 10: 190 of the 200 Retrieval candidates are beyond N2."""
    return kb_engine.run(PROMPT, cfg=kb_engine.cfg.with_overrides({"limits.N2_RERANK_TOP_K": 10}))


@pytest.fixture(scope="module")
def sp_pinned(kb_engine):
    """A chunk pinned beyond N2 (its ReRanker reason is the longest), one the A3 gate dropped
    pinned, and one excluded."""
    sp = kb_engine.run("What is N3?")
    gated = next(r.chunk_id for r in sp.view(View.A3) if r.status == "dropped")
    excluded = sp.view(View.RETRIEVAL)[3].chunk_id
    sp = kb_engine.exclude(kb_engine.pin(kb_engine.pin(sp, "kb/faq.md#0"), gated), excluded)
    return kb_engine.resume(sp)


def tables(state):
    """Every stage's chunk table as the page builds it: (stage, rows, column configs)."""
    for stage, _ in views.VIEW_STAGES:
        rows = editing.with_marks(views.view_rows(state, stage), state)
        yield stage, rows, grids.table_columns(rows)


def fits(label, width, editable=False):
    return grids.label_width(label, editable) <= width


def test_rows_beyond_n2_read_not_reranked_with_their_own_rank(sp_n2):
    reranked = {r.chunk_id for r in sp_n2.view(View.RERANKED)}
    assert len(reranked) == 10
    rows = views.view_rows(sp_n2, View.RETRIEVAL)
    for row in rows:
        if row["chunk id"] in reranked:
            assert (row["status"], row["reason"]) == ("kept", grids.EMPTY)
        else:
            assert row["status"] == views.NOT_RERANKED
            assert row["reason"] == f"not reranked: beyond N2 (rank {row['rank']})"
    assert rows[-1]["reason"] == f"not reranked: beyond N2 (rank {len(rows)})"
    assert views.not_reranked(sp_n2) == {r["chunk id"] for r in rows} - reranked
    # the expander's count stays right: 10 kept, the rest not reranked
    assert views.table_summary(rows) == f"{len(rows)} rows, 10 kept, {len(rows) - 10} not reranked"
    assert sum(r["status"] == "kept" for r in rows) == 10


def test_before_the_reranker_runs_every_candidate_stays_kept(kb_engine):
    sp = kb_engine.run(PROMPT, until="Retrieval")
    rows = views.view_rows(sp, View.RETRIEVAL)
    assert rows and {r["status"] for r in rows} == {"kept"} and not views.not_reranked(sp)
    assert {r["stage"]: r["status"] for r in charts.score_points(sp)} == {"Retrieval": "kept"}
    assert views.table_summary(rows) == f"{len(rows)} rows, {len(rows)} kept"


def test_the_journey_and_the_diff_say_the_same_words(sp_n2):
    beyond = views.view_rows(sp_n2, View.RETRIEVAL)[-1]
    said = views.beyond_n2_reason(beyond["rank"])
    journey = {r["stage"]: r for r in chunk_moves.journey_rows(sp_n2, beyond["chunk id"])}
    assert journey["Retrieval"]["status"] == journey["ReRanker"]["status"] == views.NOT_RERANKED
    assert said in journey["Retrieval"]["reason"]
    assert journey["ReRanker"]["reason"] == f"{said}, only the top 10 are reranked"
    assert journey["Final selection"]["status"] == "not selected"
    diff = {r["chunk id"]: r for r in chunk_moves.diff_rows(sp_n2, View.RETRIEVAL, View.RERANKED)}
    assert diff[beyond["chunk id"]]["status in B"] == views.NOT_RERANKED
    assert diff[beyond["chunk id"]]["reason"].startswith(said)
    # Retrieval as B: the candidate is there, not reranked
    back = {r["chunk id"]: r for r in chunk_moves.diff_rows(sp_n2, View.RERANKED, View.RETRIEVAL)}
    assert back[beyond["chunk id"]]["status in B"] == views.NOT_RERANKED


def test_the_histogram_counts_and_colours_the_candidates_not_reranked(sp_n2):
    points = [p for p in charts.score_points(sp_n2) if p["stage"] == "Retrieval"]
    assert sum(p["status"] == views.NOT_RERANKED for p in points) == len(points) - 10
    assert sum(p["status"] == "kept" for p in points) == 10
    by_stage = dict(charts.score_charts(sp_n2))
    spec = by_stage["Retrieval"].to_dict()
    assert spec["title"]["subtitle"] == f"10 kept, 0 dropped, {len(points) - 10} not reranked"
    colour = spec["encoding"]["color"]
    assert colour["scale"]["domain"] == ["kept", "dropped", views.NOT_RERANKED]
    assert "not reranked (grey)" in colour["legend"]["labelExpr"]
    assert spec["encoding"]["fillOpacity"]["scale"]["range"] == list(charts.STATUS_FILL_OPACITY.values())
    # a stage without such candidates keeps its two statuses
    assert views.NOT_RERANKED not in by_stage["ReRanker"].to_dict()["encoding"]["color"]["scale"]["domain"]


@pytest.mark.parametrize("state", ["sp", "sp_n2", "sp_pinned"])
def test_no_text_cell_is_none_or_blank(state, request):
    sp = request.getfixturevalue(state)
    for stage, rows, _ in tables(sp):
        for row in rows:
            for name in TEXT:
                if name in row:
                    assert isinstance(row[name], str) and row[name].strip(), (stage, name, row)
    some = sp.view(View.RETRIEVAL)[-1].chunk_id
    for row in chunk_moves.journey_rows(sp, some):
        assert all(isinstance(row[k], str) and row[k] for k in ("stage", "status", "reason"))
    for a, b in itertools.permutations(views.diff_stages(sp), 2):
        for row in chunk_moves.diff_rows(sp, a, b):
            assert all(isinstance(row[k], str) and row[k]
                       for k in ("move", "chunk id", "status in B", "reason"))


def test_a_score_a_row_lacks_stays_a_number_column(sp):
    rows = views.view_rows(sp, View.A4)
    unused = [r for r in rows if r["status"] == "dropped"]
    assert unused and all(r["sentences"] is None and r["citation"] is None for r in unused)
    assert all(list(r) == list(rows[0]) for r in rows)  # every row has every column


@pytest.mark.parametrize("state", ["sp", "sp_n2", "sp_pinned"])
def test_every_label_fits_its_width_and_the_widths_fill_the_table(state, request):
    sp = request.getfixturevalue(state)
    for stage, rows, columns in tables(sp):
        assert list(columns) == list(grids.chunk_table_rows(rows)[0])
        assert sum(c["width"] for c in columns.values()) == grids.TABLE_WIDTH, stage
        for name, config in columns.items():
            label = config.get("label", name)
            assert fits(label, config["width"], name in grids.CHECK_COLUMNS), (stage, label, config)
            if config.get("type_config", {}).get("type") == "number":
                assert config["help"]  # the whole name on hover
    for a, b in itertools.permutations(views.diff_stages(sp), 2):
        columns = chunk_moves.diff_columns(a, b)
        assert sum(c["width"] for c in columns.values()) == grids.TABLE_WIDTH
        assert all(fits(c.get("label", n), c["width"]) for n, c in columns.items()), columns
    journey = chunk_moves.journey_columns()
    assert sum(c["width"] for c in journey.values()) == grids.TABLE_WIDTH
    assert all(fits(c.get("label", n), c["width"]) for n, c in journey.items())


def test_the_score_columns_have_short_labels_and_their_whole_names_in_help(sp):
    columns = grids.table_columns(views.view_rows(sp, View.RETRIEVAL))
    assert (columns["keyword"]["label"], columns["dense"]["label"]) == ("keyword", "dense")
    assert columns["keyword"]["help"].startswith("keyword:")
    assert columns["score (fused)"]["label"] == "fused"  # the score that orders it, by its kind
    columns = grids.table_columns(views.view_rows(sp, View.RERANKED))
    assert columns["rank_change"]["label"] == "Δrank"
    assert columns["rank_change"]["type_config"]["format"] == "%+d"


def test_rows_are_tall_enough_to_wrap_their_lines(sp):
    assert grids.TABLE_ROW_HEIGHT > 64  # the grid wraps text only in rows taller than 4rem
    # a row of n lines holds the glyphs, n - 1 line heights and the top padding
    for n in range(2, 7):
        need = grids.GLYPH_PX + (n - 1) * grids.LINE_HEIGHT * grids.GLYPH_PX + grids.ROW_PAD
        assert need <= grids.row_height(n) and grids.row_height(n) > 64
    assert grids.row_height(1) == grids.ROW_HEIGHT
    assert grids.table_height(2) == grids.ROW_HEIGHT + 2 * grids.TABLE_ROW_HEIGHT + 3
    assert grids.table_height(200) == grids.TABLE_MAX_HEIGHT
    assert grids.table_height(3, row_height=grids.ROW_HEIGHT) == 4 * grids.ROW_HEIGHT + 3


def test_text_lines_wraps_as_the_grid_does():
    # a cell whose line holds "scored by the" in the grid's font
    width = grids.text_px("scored by the") + grids.CELL_PADDING + grids.CELL_SLACK
    assert grids.text_lines("", width) == 1
    # a line breaks at its last space that fits; the next is measured with that space
    assert grids.wrap("scored by the offline backend", width) == ["scored by the", "offline", "backend"]
    assert grids.text_lines("scored by the offline backend", width + grids.text_px(" offline")) == 2
    assert grids.breaks_a_word("kb/writing-a-good-knowledge-base.md#12", width)
    assert not grids.breaks_a_word("scored by the offline backend", width)
    # the narrowest width for whole words in two lines
    fit = grids.fit_width(["dropped", "not reranked"], lines=2, whole_words=True)
    assert grids.fits("not reranked", fit, 2) and not grids.fits("not reranked", fit - 1, 2)
    # a text too long for its lines is cut after a whole word, with "…", and then fits
    cut = grids.fit_text("scored by the offline backend", width, 2)
    assert cut == "scored by the offline…" and grids.fits(cut, width, 2)
    assert grids.fit_text("kb/writing-a-good-knowledge-base.md#12", width, 2).endswith("…")


@pytest.mark.parametrize("state", ["sp", "sp_n2"])
def test_the_chunk_and_reason_columns_show_every_cell_whole(state, request):
    sp = request.getfixturevalue(state)
    for stage, rows, columns in tables(sp):
        drawn = grids.chunk_grid(rows, columns)
        assert drawn.row_height == grids.TABLE_ROW_HEIGHT
        assert drawn.cut == [], (stage, drawn.cut)
        for shown in drawn.rows:  # no word broken, no line lost
            for name in (grids.CHUNK, "reason"):
                assert grids.fits(shown[name], columns[name]["width"], grids.TABLE_LINES), shown
        # the chunk id first, then its section
        assert all(s[grids.CHUNK].startswith(r["chunk id"]) for s, r in zip(drawn.rows, rows))


def test_a_reason_too_long_for_its_lines_is_cut_and_whole_in_the_row_detail(sp_pinned):
    cut = 0
    for stage, rows, columns in tables(sp_pinned):
        drawn = grids.chunk_grid(rows, columns)
        for row, shown in zip(rows, drawn.rows):
            assert grids.fits(shown["reason"], columns["reason"]["width"], grids.TABLE_LINES)
            if shown["reason"] != grids.plain_limits(row["reason"]):
                cut += 1
                assert shown["reason"].endswith("…") and "reason" in drawn.cut
                assert row["reason"] in views.row_detail(sp_pinned, stage, row["chunk id"])
    assert cut  # the ReRanker's "reranked though beyond N2 (retrieval rank …): pinned by you"


def test_the_row_detail_says_the_whole_row_in_one_line(sp_n2):
    row = views.view_rows(sp_n2, View.RETRIEVAL)[-1]
    chunk = sp_n2.chunk_map()[row["chunk id"]]
    line = views.row_detail(sp_n2, View.RETRIEVAL, row["chunk id"])
    assert "\n" not in line
    assert line.startswith(f"{chunk.id} § {chunk.heading_label} · rank {row['rank']} · not reranked")
    assert f"dense {float(row['dense']):.4g}" in line and "dense_rank" in line
    assert line.endswith(f"reason: {row['reason']}")
    assert views.row_detail(sp_n2, View.A4, row["chunk id"]).endswith("is not in A4 Condenser's view.")


def test_the_section_column_shows_the_heading_path_and_the_file_once(sp):
    # every chunk of the bundled KB sits under its document's H1: the section leaves it out
    for _, rows, _ in tables(sp):
        for row in rows:
            chunk = sp.chunk_map()[row["chunk id"]]
            assert chunk.source not in row[grids.SECTION]
            said = " ".join(str(v) for k, v in row.items() if k != "reason")
            assert said.count(chunk.source) == 1, row  # in the chunk id alone
            path = chunk.heading_path
            assert row[grids.SECTION] == " > ".join(path[1:] if len(path) > 1 else path)
    assert "source § section" not in views.view_rows(sp, View.A3)[0]


def test_the_section_leaves_out_the_documents_top_heading_only():
    from ragstream.state.super_prompt import Chunk

    def chunk(n, *path, title="T"):
        return Chunk(id=f"d.md#{n}", doc_id="d.md", source="d.md", title=title, text="x",
                     heading_path=path)

    assert views.section_label(chunk(0, "T", "A", "B")) == "A > B"
    assert views.section_label(chunk(0, "T")) == "T"
    assert views.section_label(chunk(0)) == ""
    # a front matter title other than the H1: the H1 every chunk of the document starts with
    two = [chunk(0, "H1", "A"), chunk(1, "H1", "B", "C")]
    tops = views.top_headings(two)
    assert tops == {"d.md": "H1"}
    assert [views.section_label(c, tops["d.md"]) for c in two] == ["A", "B > C"]
    # no H1: the first headings differ, nothing is left out
    assert views.top_headings([chunk(0, "A", "x"), chunk(1, "B", "y")]) == {}
    assert views.top_headings([chunk(0, "A", "x")]) == {}  # one chunk cannot tell


def phrase_of(sp, chunk_id):
    """Three words of the chunk's text that no other retrieved chunk holds, and that are not in
    its id or section."""
    chunk = sp.chunk_map()[chunk_id]
    words = chunk.text.split()
    for i in range(len(words) - 2):
        phrase = " ".join(words[i:i + 3])
        outside = f"{chunk.id} {chunk.heading_label}".casefold()
        if any(w.casefold() in outside for w in words[i:i + 3]):
            continue
        if sum(phrase.casefold() in " ".join(c.text.split()).casefold()
               for c in sp.base_context_chunks) == 1:
            return phrase
    raise AssertionError(f"no phrase of its own in {chunk_id}")


def test_filter_rows_finds_a_chunk_by_a_phrase_inside_its_text(sp):
    rows = views.view_rows(sp, View.RETRIEVAL)
    target = rows[7]["chunk id"]
    phrase = phrase_of(sp, target)
    found = views.filter_rows(rows, sp, phrase)
    assert target in [r["chunk id"] for r in found] and len(found) < len(rows)
    # every word, in any order, any case: the same chunk among fewer rows
    shuffled = " ".join(reversed(phrase.upper().split()))
    again = views.filter_rows(rows, sp, shuffled)
    assert target in [r["chunk id"] for r in again] and len(again) < len(rows)
    for row in again:
        chunk = sp.chunk_map()[row["chunk id"]]
        hay = " ".join([chunk.text, chunk.id, chunk.heading_label, row["reason"]]).casefold()
        assert all(w.casefold() in hay for w in phrase.split())
    assert views.filter_rows(rows, sp, "  ") == rows
    assert views.filter_rows(rows, sp, "zzqx-nowhere") == []
    # by the section's words and the reason's too, and in the stage diff's rows
    assert views.filter_rows(views.view_rows(sp, View.A3), sp, "off-topic")
    diff = chunk_moves.diff_rows(sp, View.RETRIEVAL, View.RERANKED)
    assert target in [r["chunk id"] for r in views.filter_rows(diff, sp, phrase)]


def test_chunk_labels_hold_the_id_the_section_and_words_of_the_text(sp):
    labels = views.chunk_labels(sp)
    assert list(labels) == views.chunk_choices(sp)
    row_sections = {r["chunk id"]: r[grids.SECTION] for r in views.view_rows(sp, View.RETRIEVAL)}
    for chunk in sp.base_context_chunks:
        label = labels[chunk.id]
        assert label == views.chunk_choice_label(sp, chunk.id)
        assert label.startswith(f"{chunk.id} · ")
        assert len(label) <= views.CHOICE_LABEL_CHARS + views.WORD_SLACK + 1  # with "…"
        first = " ".join(chunk.text.split()[:2])
        assert f" · {first}" in label, (first, label)
        shown = label.rsplit(" · ", 1)[1]
        if shown.endswith("…"):  # cut after a whole word
            flat = " ".join(chunk.text.split())
            assert flat.startswith(shown[:-1]) and flat[len(shown) - 1] in " ,;:", label
        section = row_sections[chunk.id]
        assert section.split(" > ")[-1][:8] in label  # the most specific heading
    assert views.chunk_choice_label(sp, "kb/nowhere.md#0") == "kb/nowhere.md#0"


def test_tables_with_no_rows_have_no_columns():
    assert grids.table_columns([]) == {}
    assert grids.text_widths([], 300) == {}
    widths = grids.text_widths([{"chunk id": "a", grids.SECTION: "b", "reason": "c"}], 200)
    assert sum(widths.values()) == 200  # too narrow: shared in proportion, adding up


def test_a_weighed_table_in_llm_mode_fits_too(sp):
    """A3 in LLM mode: the rules' verdict, who decided and P(relevant) beside the rest; a
    reason too long for three lines is whole in the row detail."""
    long = ("rescued by the model: P(relevant) 0.97 ≥ llm_rescue_min 0.9 (the rules would drop "
            "it: off-topic: score 0.280 < 0.5 × best 0.560 = 0.280)")
    weighed = [r.model_copy(update={"rule_status": "dropped" if i == 4 else r.status,
                                    "decided_by": "llm" if i == 4 else "rule",
                                    "reason": long if i == 4 else r.reason,
                                    "scores": {**r.scores, "p_relevant": 0.97}})
               for i, r in enumerate(sp.view(View.A3))]
    state = sp.model_copy(update={"views_by_stage": {**sp.views_by_stage, View.A3: weighed}})
    rows = editing.with_marks(views.view_rows(state, View.A3), state)
    columns = grids.table_columns(rows)
    assert {"rule", "by", "p_relevant"} <= set(columns)
    assert sum(c["width"] for c in columns.values()) == grids.TABLE_WIDTH
    assert all(fits(c.get("label", n), c["width"], n in grids.CHECK_COLUMNS)
               for n, c in columns.items()), columns
    assert columns["p_relevant"]["label"] == "P rel"
    assert "reason" in grids.cut_columns(rows, columns)
    assert "reason" in grids.chunk_grid(rows, columns).cut
    line = views.row_detail(state, View.A3, rows[4]["chunk id"])
    assert line.endswith(f"reason: {long}") and "decided by llm (the rules: dropped)" in line


def test_a_grid_never_grows_past_its_width_when_a_word_is_longer_than_its_column():
    """Cells whose longest words cannot all fit (a run's chunk ids, a pasted URL) make the
    text columns give way: the widths still add up to the table's width, so the Runs table
    never scrolls sideways (it did, with the runs the other tests had left in the store)."""
    from ragstream.interfaces.ui import runs_tab

    long = "x" * 60
    rows = [{"run": "12", "time (UTC)": "2026-11-25 21:03", "prompt": f"pin {long}",
             "stage": "A5 Format enforcer", "answer": f"a {long}",
             "differs": "setting agents.A3_NLI_Gate.min_relevance 0.1 → 0.2; pin kb/troubleshooting.md#8",
             "from": "11", "by": "import"}]
    shown = grids.grid(rows, runs_tab.run_columns(), total=runs_tab.RUNS_TABLE_WIDTH)
    assert sum(c["width"] for c in shown.columns.values()) <= runs_tab.RUNS_TABLE_WIDTH
    assert all(c["width"] >= grids.label_width(n) for n, c in shown.columns.items())


def test_a_long_cell_does_not_squeeze_the_short_ones_and_is_whole_for_the_hover():
    """A run whose answer runs to paragraphs: the prompt and the stage beside it keep their
    width and show whole; the answer is cut with "…", and its whole text is in the hidden data
    the page's hover script reads (``hover_data``), keyed by the text the cell shows."""
    import html
    import json
    import re

    from ragstream.interfaces.ui import runs_tab

    answer = " ".join(f"Sentence {i} of a long answer about chunking documents." for i in range(40))
    rows = [{"run": "3", "time (UTC)": "11-26 02:04", "prompt": "How are documents chunked?",
             "stage": "A5 Format enforcer", "answer": answer, "differs": "—", "from": "—",
             "by": "page"}]
    shown = grids.grid(rows, runs_tab.run_columns(), total=runs_tab.RUNS_TABLE_WIDTH,
                       lines=grids.TABLE_LINES)
    assert shown.rows[0]["prompt"] == "How are documents chunked?"
    assert shown.rows[0]["stage"] == "A5 Format enforcer"
    assert shown.cut == ["answer"] and shown.rows[0]["answer"].endswith(grids.CUT_MARK)
    span = grids.hover_data(shown)
    data = json.loads(html.unescape(re.search(r'data-ragstream-whole="([^"]*)"', span)[1]))
    assert data["whole"] == {shown.rows[0]["answer"]: answer}
    assert data["row"] == shown.row_height and data["header"] == grids.ROW_HEIGHT
    assert grids.hover_data(grids.grid([{"a": "short"}])) == ""


def test_two_cells_cut_to_the_same_text_show_both_whole_texts():
    rows = [{"note": "alpha beta gamma " * 20 + "one"}, {"note": "alpha beta gamma " * 20 + "two"}]
    shown = grids.grid(rows, {"note": {"width": 200}}, lines=2)
    assert shown.rows[0]["note"] == shown.rows[1]["note"]
    assert shown.whole[shown.rows[0]["note"]].split(grids.WHOLE_SEPARATOR) == [
        r["note"].strip() for r in rows]
