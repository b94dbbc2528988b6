"""The page driven in-process with Streamlit's AppTest over a temp index of the bundled KB."""

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from ragstream import controller
from ragstream.ui import state as S

ROOT = Path(__file__).resolve().parents[2]
APP = str(ROOT / "ui_streamlit.py")
TIMEOUT = 300


@pytest.fixture(scope="module", autouse=True)
def app_env(tmp_path_factory, kb_engine):
    """Point the page at the session's already-ingested temp index (shared with kb_engine)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("RAGSTREAM_INDEX_DIR", str(kb_engine.cfg.index_dir))
    mp.setenv("RAGSTREAM_UPLOADS_DIR", str(tmp_path_factory.mktemp("page") / "uploads"))
    import streamlit as st

    st.cache_resource.clear()
    yield
    st.cache_resource.clear()
    mp.undo()


def fresh() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT).run()
    assert not at.exception, at.exception
    return at


def sp(at):
    return at.session_state[S.SP]


def test_initial_page_gates_every_stage_but_a0():
    at = fresh()
    for name in controller.STAGE_NAMES:
        button = at.button(key=f"stage_{name}")
        assert button.disabled == (name != "A0_PreProcessing"), name
    assert "Run A0_PreProcessing first." in at.button(key="stage_Retrieval").help
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
    at.run()
    at.button(key="ingest").click().run()
    assert not at.error, [e.value for e in at.error]
    report = at.session_state[S.INGEST_REPORT]
    assert report["processed"] == 1 and report["failed"] == 0
    assert any("1 processed" in s.value for s in at.success)
    assert at.file_uploader[0].value in (None, [])  # cleared for the next upload
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
    at.button(key="ingest").click().run()
    assert not at.error, [e.value for e in at.error]
    report = at.session_state[S.INGEST_REPORT]
    assert report["processed"] == 1 and report["failed"] == 0
    assert any("1 processed" in s.value for s in at.success)
    at.text_area(key=S.PROMPT).set_value("When did the quagga go extinct?").run()
    at.button(key="run").click().run()
    assert sp(at).final_selection_ids[0] == "notes/zebra.md#0"


def test_ingest_without_files_says_what_to_do():
    at = fresh()
    at.button(key="ingest").click().run()
    assert any("No files were uploaded" in e.value for e in at.error)


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
    at.text_area(key=S.PROMPT).set_value("And how do I stop it?").run()
    at.button(key="run").click().run()
    assert "## Recent conversation" in sp(at).prompt_ready
    assert "How do I start a Chroma server?" in sp(at).prompt_ready
    # both interactions are in the Q&A log table
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
