"""The page driven in-process with Streamlit's AppTest over a temp index of the bundled KB."""

import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from ragstream.common.config import load_config
from ragstream.interfaces.ui import state as S
from ragstream.stages import controller
from tests.ingest.jobs_support import settled
from tests.ui.tabs import APP, TIMEOUT, fresh, open_box, open_tab, open_tables, sp

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", autouse=True)
def app_env(page_env):
    """Every test here drives the page over the session's temp index."""




def test_initial_page_gates_every_stage_but_a0():
    at = fresh()
    for name in controller.STAGE_NAMES:
        button = at.button(key=f"stage_{name}")
        assert button.disabled == (name != "A0_PreProcessing"), name
    assert "Run A0 Pre-processing first." in at.button(key="stage_Retrieval").help
    assert sp(at).stage == "raw"


def test_each_button_runs_its_stage_in_order():
    at = fresh()
    at.toggle(key=S.AUTO).set_value(False).run()
    expected = ["preprocessed", "a2", "retrieval", "reranked", "a3", "a4", "a5", "a5"]
    for name, value in zip(controller.STAGE_NAMES, expected):
        at.button(key=f"stage_{name}").click().run()
        assert not at.exception and not at.error, [e.value for e in at.error]
        assert sp(at).stage == value
        assert sp(at).history_of_stages[-1] in (value, "prompt_built")
        # the next button opens, the one after stays closed
        states = {b.key: b.disabled for b in at.button if (b.key or "").startswith("stage_")}
        nxt = controller.next_stage(sp(at))
        if nxt:
            assert states[f"stage_{nxt}"] is False
    assert "## Sources" in sp(at).prompt_ready
    # the prompt_ready box shows the state's text
    assert any(c.value.strip() == sp(at).prompt_ready.strip() for c in at.code)
    # one table per stage view
    open_tables(at)  # each table's grid is drawn while its expander is open
    assert len([d for d in at.dataframe]) >= 4


def test_auto_run_runs_every_remaining_stage():
    at = fresh()
    assert at.toggle(key=S.AUTO).value is True
    at.button(key="run").click().run()
    assert not at.error, [e.value for e in at.error]
    assert sp(at).stage == "a5" and sp(at).history_of_stages[-1] == "prompt_built"
    assert [r.stage for r in sp(at).stage_runs] == controller.STAGE_NAMES
    assert any("pipeline complete" in m.value for m in at.markdown)


def test_next_stage_button_with_auto_off():
    at = fresh()
    at.toggle(key=S.AUTO).set_value(False).run()
    at.button(key="run").click().run()
    assert sp(at).stage == "preprocessed"


def test_error_is_shown_and_state_kept():
    at = fresh()
    at.toggle(key=S.AUTO).set_value(False).run()
    at.button(key="stage_A0_PreProcessing").click().run()
    before = sp(at).model_dump_json()
    # an empty prompt makes A0 fail: the page says why, and keeps the earlier state
    at.text_area(key=S.PROMPT).set_value("   ").run()
    at.button(key="stage_A0_PreProcessing").click().run()
    assert not at.exception
    assert any("empty prompt" in e.value for e in at.error)
    assert sp(at).model_dump_json() == before
    # and the page keeps working
    at.text_area(key=S.PROMPT).set_value("What is BM25?").run()
    at.button(key="stage_A0_PreProcessing").click().run()
    assert not at.error and sp(at).body["task"] == "What is BM25?"


def test_settings_validation_and_reset():
    at = fresh()
    at.number_input(key="set_limits.N2_RERANK_TOP_K").set_value(500)
    at.button(key="FormSubmitter:settings-Apply").click().run()
    assert any("N2_RERANK_TOP_K" in e.value for e in at.error)
    assert at.session_state[S.OVERRIDES] == {}

    at.number_input(key="set_limits.N2_RERANK_TOP_K").set_value(5)
    at.number_input(key="set_limits.N3_FINAL_SELECTION_MAX").set_value(3)
    at.button(key="FormSubmitter:settings-Apply").click().run()
    assert not at.error
    assert at.session_state[S.OVERRIDES] == {"limits.N2_RERANK_TOP_K": 5,
                                              "limits.N3_FINAL_SELECTION_MAX": 3}
    at.button(key="run").click().run()
    assert len(sp(at).view("reranked")) <= 5 and len(sp(at).final_selection_ids) <= 3

    at.button(key="reset_settings").click().run()
    assert at.session_state[S.OVERRIDES] == {}
    assert at.number_input(key="set_limits.N2_RERANK_TOP_K").value == 50


def test_upload_ingests_and_the_new_text_is_retrievable():
    at = fresh()
    at.file_uploader[0].set_value([
        ("okapi.md", b"# Okapi\n\nThe okapi is a giraffid native to the Congo. It has striped legs.\n",
         "text/markdown")])
    settled(at.run())  # chosen files are ingested at once (in the background): no button
    assert not at.error, [e.value for e in at.error]
    report = at.session_state[S.INGEST_REPORT]
    assert report["processed"] == 1 and report["failed"] == 0
    assert any("1 file chosen: 1 ingested" in s.value for s in at.success)
    at.text_area(key=S.PROMPT).set_value("Where is the okapi native to?").run()
    at.button(key="run").click().run()
    assert sp(at).final_selection_ids[0] == "uploads/okapi.md#0"


def test_folder_ingest_and_the_new_text_is_retrievable(tmp_path):
    at = fresh()
    docs = tmp_path / "notes"
    docs.mkdir()
    (docs / "zebra.md").write_text("# Zebras\n\nThe quagga was a subspecies of plains zebra "
                                   "that went extinct in 1883.\n", encoding="utf-8")
    at.text_input(key="ingest_folder").set_value(str(docs)).run()
    settled(at.button(key="ingest").click().run())
    assert not at.error, [e.value for e in at.error]
    report = at.session_state[S.INGEST_REPORT]
    assert report["processed"] == 1 and report["failed"] == 0
    assert any("1 processed" in s.value for s in at.success)
    at.text_area(key=S.PROMPT).set_value("When did the quagga go extinct?").run()
    at.button(key="run").click().run()
    assert sp(at).final_selection_ids[0] == "notes/zebra.md#0"


def test_ingest_without_a_folder_says_what_to_do():
    at = fresh()
    at.button(key="ingest").click().run()  # the folder's button; chosen files need none
    assert any("No folder given" in e.value for e in at.error)


def test_auto_run_answers_with_citations_and_logs_it():
    at = fresh()
    at.text_area(key=S.PROMPT).set_value("How do I start a Chroma server?").run()
    at.button(key="run").click().run()
    assert not at.error, [e.value for e in at.error]
    ans = sp(at).answer
    assert ans is not None and ans.mode == "extractive"
    assert ans.sources and all(c.chunk_id in sp(at).final_selection_ids for c in ans.sources)
    assert any(m.value.startswith("#### Answer") for m in at.markdown)
    assert any(e.label == f"Sources ({len(ans.sources)})" for e in at.expander)
    at.button(key="follow_cited").click().run()
    assert at.session_state[S.JOURNEY_CHUNK] == ans.sources[0].chunk_id
    # the turn is carried into the next prompt's Recent conversation block
    assert len(at.session_state[S.CONVERSATION]) == 1
    # the page shows the turn the next prompt will carry, without the answer's [n] markers
    shown = [e for e in at.expander if e.label.startswith("Conversation — 1 earlier turn(s); 1 go")]
    assert shown, [e.label for e in at.expander]
    open_box(at, S.CONVERSATION_OPEN)  # its turns are drawn while it is open
    shown = [e for e in at.expander if e.label.startswith("Conversation — 1 earlier turn(s); 1 go")]
    going = " ".join(m.value for m in shown[0].markdown)
    assert "**User:** How do I start a Chroma server?" in going
    assert "Turn 1 · " in going and "goes into the next prompt" in going
    assert "[1]" in ans.text and "[1]" not in going
    at.text_area(key=S.PROMPT).set_value("And how do I stop it?").run()
    at.button(key="run").click().run()
    assert "## Recent conversation" in sp(at).prompt_ready
    assert "How do I start a Chroma server?" in sp(at).prompt_ready
    # both interactions are in the Q&A log table
    open_tab(at, "Runs")
    log_df = [d for d in at.dataframe if "question" in d.value.columns]
    assert log_df and len(log_df[0].value) >= 2


def test_off_topic_prompt_gets_the_no_results_answer():
    at = fresh()
    at.text_area(key=S.PROMPT).set_value("How do I cook pasta?").run()
    at.button(key="run").click().run()
    ans = sp(at).answer
    assert ans.mode == "no-results" and ans.confidence == "Low"
    assert "couldn't find" in ans.text and "Getting started with RAGstream" in ans.text


def test_answer_button_waits_for_the_pipeline():
    at = fresh()
    at.toggle(key=S.AUTO).set_value(False).run()
    assert at.button(key="answer").disabled
    for name in controller.STAGE_NAMES:
        at.button(key=f"stage_{name}").click().run()
    assert not at.button(key="answer").disabled
    at.button(key="answer").click().run()
    assert sp(at).answer is not None
    # re-running a stage discards the answer
    at.button(key="stage_A4_Condenser").click().run()
    assert sp(at).answer is None


def test_sidebar_filters_restrict_the_next_retrieval():
    at = fresh()
    at.multiselect(key="filter_doc_type").select("faq")
    at.button(key="FormSubmitter:filter_form-Apply filters").click().run()
    assert not at.error, [e.value for e in at.error]
    assert at.session_state[S.FILTERS].doc_type == ("faq",)
    assert any("doc_type=faq" in c.value for c in at.caption)
    at.button(key="run").click().run()
    state = sp(at)
    chunks = state.chunk_map()
    assert state.filters.doc_type == ("faq",)
    assert {chunks[r.chunk_id].doc_type for r in state.view("retrieval")} == {"faq"}


def test_an_unreachable_chroma_server_is_named_on_the_page(monkeypatch):
    import socket

    import streamlit as st

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("RAGSTREAM_CHROMA_URL", f"http://127.0.0.1:{port}")
    st.cache_resource.clear()
    try:
        at = AppTest.from_file(APP, default_timeout=TIMEOUT).run()
        assert not at.exception, at.exception
        (error,) = at.error
        assert "vector store unavailable" in error.value and f"127.0.0.1:{port}" in error.value
        assert "cannot be reached" in error.value
    finally:
        st.cache_resource.clear()


def test_an_over_limit_prompt_is_refused_at_the_box_with_the_numbers():
    at = fresh()
    limit = load_config().settings.prompt.max_prompt_chars
    text = "How are documents chunked? " + "x" * (limit + 1000 - 27)
    at.text_area(key=S.PROMPT).set_value(text).run()
    assert len(text) == limit + 1000
    assert any(f"{limit + 1000:,} / {limit:,} characters" in e.value for e in at.error), \
        [e.value for e in at.error]
    # nothing that would run the prompt can be clicked, and the help says why
    assert at.button(key="run").disabled
    assert at.button(key="stage_A0_PreProcessing").disabled
    assert f"{limit:,} characters" in at.button(key="stage_A0_PreProcessing").help
    assert sp(at).stage == "raw"
    # at the limit, it runs
    at.text_area(key=S.PROMPT).set_value(text[:limit]).run()
    assert not at.error and not at.button(key="run").disabled
    at.button(key="run").click().run()
    assert sp(at).stage == "a5" and len(sp(at).user_text) == limit


def test_stage_buttons_come_in_rows_that_keep_their_labels():
    at = fresh()
    keys = [b.key for b in at.button if (b.key or "").startswith("stage_")]
    assert keys == [f"stage_{n}" for n in controller.STAGE_NAMES]
    # the stage's name is in every button's tooltip
    for st in controller.STAGES:
        assert at.button(key=f"stage_{st.name}").help.startswith(f"{st.label}: ")


def test_chunk_tables_show_the_columns_an_analyst_needs():
    at = fresh()
    at.text_area(key=S.PROMPT).set_value("How are documents chunked?").run()
    at.button(key="run").click().run()
    open_tables(at)
    tables = [d.value for d in at.dataframe if "chunk" in d.value.columns]
    assert len(tables) == 4
    for frame in tables:
        columns = list(frame.columns)
        # the chunk: its id (it names the file), then § its section (the heading path below
        # the document's title)
        assert columns[:4] == ["pin", "exclude", "rank", "chunk"]
        assert columns[4].startswith("score") and columns[-2:] == ["status", "reason"]
        assert not frame["pin"].any() and not frame["exclude"].any()  # no edits yet
        assert "preview" not in columns
        assert frame["chunk"].str.match(r"^kb/[^ ]+\.md#\d+ § ").all()
        sections = frame["chunk"].str.split(" § ", n=1).str[1]
        assert sections.str.contains(" > ").any() and not sections.str.contains(".md").any()


def test_the_journey_opens_on_the_top_chunk_of_the_latest_stage():
    at = fresh()
    open_tab(at, "Chunk journey")
    at.toggle(key=S.AUTO).set_value(False).run()
    for name in controller.STAGE_NAMES[:4]:  # A0, A2, Retrieval, ReRanker
        at.button(key=f"stage_{name}").click().run()
    top = sp(at).view("reranked")[0].chunk_id
    assert at.selectbox(key=S.JOURNEY_CHUNK).value == top
    journey = next(d.value for d in at.dataframe if "stage" in d.value.columns
                   and "reason" in d.value.columns)
    assert list(journey["stage"]) == ["Retrieval", "ReRanker", "A3 Gate", "A4 Condenser"]
    assert list(journey["rank"][:2]) == [sp(at).view("retrieval")[[r.chunk_id for r in
                                          sp(at).view("retrieval")].index(top)].rank, 1]
    assert list(journey["status"][2:]) == ["stage not run", "stage not run"]
    # after the next stage, it follows the new latest stage's top chunk
    at.button(key="stage_A3_NLI_Gate").click().run()
    at.button(key="stage_A4_Condenser").click().run()
    assert at.selectbox(key=S.JOURNEY_CHUNK).value == sp(at).view("a4")[0].chunk_id
    # a chunk picked by hand stays picked until a stage runs
    other = sp(at).view("retrieval")[-1].chunk_id
    at.selectbox(key=S.JOURNEY_CHUNK).set_value(other).run()
    assert at.selectbox(key=S.JOURNEY_CHUNK).value == other


def test_the_journey_gives_each_stage_its_real_reason():
    at = fresh()
    open_tab(at, "Chunk journey")
    at.text_area(key=S.PROMPT).set_value("How are documents chunked?").run()
    at.button(key="run").click().run()
    state = sp(at)
    n2 = len(state.view("reranked"))
    journey = lambda: next(d.value for d in at.dataframe  # noqa: E731
                           if list(d.value.columns[:1]) == ["stage"] and "reason" in d.value.columns)
    # the default chunk was selected, and says so
    rows = journey()
    assert list(rows["stage"]) == ["Retrieval", "ReRanker", "A3 Gate", "A4 Condenser",
                                   "Final selection"]
    assert rows["status"].iloc[-1] == "selected"
    assert "used by A4" in rows["reason"].iloc[3]
    # a chunk below the N2 cut: its retrieval rank and the cut
    below = state.view("retrieval")[n2].chunk_id
    at.selectbox(key=S.JOURNEY_CHUNK).set_value(below).run()
    rows = journey()
    assert f"not reranked: beyond N2 (rank {n2 + 1})" in rows["reason"].iloc[0]
    assert rows["status"].iloc[1] == "not reranked"
    assert f"not reranked: beyond N2 (rank {n2 + 1})" in rows["reason"].iloc[1]
    assert all(f"rank {n2 + 1}" in r for r in rows["reason"].iloc[2:])
    assert rows["status"].iloc[-1] == "not selected"
    # a chunk the A3 gate dropped: the gate's own reason, at A3 and after it
    dropped = [r for r in state.view("a3") if r.status == "dropped"]
    if dropped:
        at.selectbox(key=S.JOURNEY_CHUNK).set_value(dropped[0].chunk_id).run()
        rows = journey()
        assert rows["reason"].iloc[2] == f"dropped by the A3 Gate: {dropped[0].reason}"
        assert dropped[0].reason in rows["reason"].iloc[3]
    # a chunk A4 did not use: why
    unused = [r for r in state.view("a4") if r.status == "dropped"]
    if unused:
        at.selectbox(key=S.JOURNEY_CHUNK).set_value(unused[0].chunk_id).run()
        rows = journey()
        assert rows["reason"].iloc[3].startswith("not used by A4")
        assert rows["status"].iloc[-1] == "not selected"


def diff_table(at):
    return next(d.value for d in at.dataframe if "move" in d.value.columns)


def test_the_stage_diff_compares_the_two_stages_picked():
    at = fresh()
    open_tab(at, "Stage diff")
    at.toggle(key=S.AUTO).set_value(False).run()
    for name in controller.STAGE_NAMES[:3]:  # A0, A2, Retrieval: one chunk stage, no diff yet
        at.button(key=f"stage_{name}").click().run()
    assert not any("move" in d.value.columns for d in at.dataframe)
    assert any("compare two stages" in c.value for c in at.caption)
    at.button(key="stage_ReRanker").click().run()
    # two chunk stages: the two latest are compared
    assert (at.selectbox(key=S.DIFF_A).value, at.selectbox(key=S.DIFF_B).value) == \
        ("retrieval", "reranked")
    at.button(key="stage_A3_NLI_Gate").click().run()
    at.button(key="stage_A4_Condenser").click().run()
    # the first two consecutive stages that differ by default (the ReRanker reorders
    # Retrieval's top N2); picked: ReRanker vs A4, with the table and the rank-movement chart
    assert (at.selectbox(key=S.DIFF_A).value, at.selectbox(key=S.DIFF_B).value) == \
        ("retrieval", "reranked")
    at.selectbox(key=S.DIFF_A).set_value("reranked").run()
    at.selectbox(key=S.DIFF_B).set_value("a4").run()
    assert (at.selectbox(key=S.DIFF_A).value, at.selectbox(key=S.DIFF_B).value) == \
        ("reranked", "a4")
    frame = diff_table(at)
    assert list(frame.columns) == ["rank in A", "rank in B", "move", "Δ rank", "chunk id",
                                   "status in B", "reason"]
    assert len(frame) == len(sp(at).view("reranked"))
    assert (frame["move"] == "dropped").sum() == sum(
        r.status == "dropped" for r in sp(at).view("a4")) + sum(
        r.status == "dropped" for r in sp(at).view("a3"))
    bump = [c.proto.spec for c in at.get("vega_lite_chart") if "Rank movement" in c.proto.spec]
    assert len(bump) == 1 and "Rank movement of the top 20 chunks at A4 Condenser" in bump[0]
    # choosing Retrieval as A changes the table: every candidate, with moves and the N2 cut
    at.selectbox(key=S.DIFF_A).set_value("retrieval").run()
    at.selectbox(key=S.DIFF_B).set_value("reranked").run()
    assert not at.exception
    frame = diff_table(at)
    assert len(frame) == len(sp(at).view("retrieval"))
    assert frame["move"].str.startswith("↑").any() and frame["move"].str.startswith("↓").any()
    assert frame["reason"].str.startswith("not reranked: beyond N2").any()
    # the order control sorts it
    at.selectbox(key=S.DIFF_SORT).set_value("biggest rise").run()
    deltas = [d for d in diff_table(at)["Δ rank"] if d == d and d is not None]
    assert deltas == sorted(deltas, reverse=True)
    # a stage run brings the diff back to its default pair
    at.button(key="stage_A4_Condenser").click().run()
    assert (at.selectbox(key=S.DIFF_A).value, at.selectbox(key=S.DIFF_B).value) == \
        ("retrieval", "reranked")


def evidence_boxes(at):
    return [h.proto.body for h in at.get("html") if 'class="rs-evidence"' in h.proto.body]


def test_the_evidence_tab_links_every_sentence_to_its_chunk():
    at = fresh()
    open_tab(at, "Evidence")
    at.text_area(key=S.PROMPT).set_value("How are documents chunked?").run()
    at.button(key="run").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    state = sp(at)
    ids = state.final_selection_ids
    statements = state.extras.a4.condensed
    buttons = {b.key: b for b in at.button if (b.key or "").startswith("ev_")}
    # a [n] button for each answer sentence's citation and each condensed statement's source
    assert any(k.startswith("ev_A1_") for k in buttons)
    assert len([k for k in buttons if k.startswith("ev_C")]) == len(statements)
    # the panel opens on the answer's first cited chunk, its used sentences marked
    first = next(k for k in buttons if k.startswith("ev_A1_"))
    assert at.selectbox(key=S.EVIDENCE_CHUNK).value == ids[int(first.rsplit("_", 1)[1]) - 1]
    assert any("<mark" in box for box in evidence_boxes(at))
    assert any("sentences of this chunk were used" in m.value or "sentence of this chunk was used"
               in m.value for m in at.markdown)
    # a condensed statement's button opens its chunk, the statement outlined
    key = next(k for k in buttons if k.startswith("ev_C3_"))
    n = int(key.rsplit("_", 1)[1])
    at.button(key=key).click().run()
    assert not at.exception
    assert at.session_state[S.EVIDENCE_CHUNK] == ids[n - 1]
    assert at.session_state[S.EVIDENCE_SENTENCE] == "C3"
    assert at.selectbox(key=S.EVIDENCE_CHUNK).value == ids[n - 1]
    assert at.button(key=key).proto.type == "primary"
    outlined = [m for box in evidence_boxes(at)
                for m in re.findall(r'<mark data-keys="([^"]*)"[^>]*outline', box)]
    assert outlined and all("C3" in keys.split() for keys in outlined)
    # picking a chunk by hand forgets the sentence
    other = next(c.id for c in state.base_context_chunks if c.id not in ids)
    at.selectbox(key=S.EVIDENCE_CHUNK).set_value(other).run()
    assert at.session_state[S.EVIDENCE_SENTENCE] is None
    assert any("No sentence of the answer or of the condensed context cites this chunk" in m.value
               for m in at.markdown)
    # the chunk tables' "Open a chunk" shows the same highlights
    open_tab(at, "Chunk views")
    at.selectbox(key="detail_chunk").set_value(ids[0]).run()
    open_box(at, S.DETAIL_TEXT)  # its text is drawn while its expander is open
    assert sum("<mark" in box for box in evidence_boxes(at)) >= 2
    # a new run opens the new answer's first cited chunk again
    at.button(key="stage_A0_PreProcessing").click().run()
    at.button(key="run").click().run()
    open_tab(at, "Evidence")
    assert at.session_state[S.EVIDENCE_SENTENCE] is None
    assert at.selectbox(key=S.EVIDENCE_CHUNK).value == ids[int(first.rsplit("_", 1)[1]) - 1]


def test_the_condensed_context_links_before_there_is_an_answer():
    at = fresh()
    open_tab(at, "Evidence")
    at.toggle(key=S.AUTO).set_value(False).run()
    at.text_area(key=S.PROMPT).set_value("How are documents chunked?").run()
    for name in controller.STAGE_NAMES[:3]:  # before A4 nothing links
        at.button(key=f"stage_{name}").click().run()
    assert any("Run A4 Condenser to link" in c.value for c in at.caption)
    for name in controller.STAGE_NAMES[3:6]:  # ReRanker, A3, A4
        at.button(key=f"stage_{name}").click().run()
    assert sp(at).answer is None
    keys = [b.key for b in at.button if (b.key or "").startswith("ev_")]
    assert keys and all(k.startswith("ev_C") for k in keys)
    assert any("No answer yet" in c.value for c in at.caption)
    first = sp(at).extras.a4.condensed and keys[0]
    n = int(first.rsplit("_", 1)[1])
    assert at.selectbox(key=S.EVIDENCE_CHUNK).value == sp(at).final_selection_ids[n - 1]
    assert any("<mark" in box for box in evidence_boxes(at))
