"""Runs on the page (AppTest over the session's temp index): every pass is kept as it runs,
stage by stage in one run; running again makes a new run linked to the one before; a reload
(the same ``?session=``) restores the session's latest run; the Runs tab lists, searches and
opens runs and opens a JSON file as one (a file that is not a run is refused, with why); the
Compare tab compares the page's run with the one before it."""

import json
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from ragstream.common.config import load_config
from ragstream.interfaces.ui import state as S
from ragstream.interfaces.ui.runs_tab import COMPARE_TAB
from ragstream.stages import controller
from ragstream.workbench.runs import RunStore
from tests.ui.tabs import open_tab

ROOT = Path(__file__).resolve().parents[2]
APP = str(ROOT / "ui_streamlit.py")
PROMPT = "Task: What does A3 do with near-duplicate chunks?"


@pytest.fixture(scope="module", autouse=True)
def app_env(page_env):
    """Every test here drives the page over the session's temp index."""


def store() -> RunStore:
    return RunStore.for_config(load_config())


def page(session: str | None = None) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=300)
    if session:
        at.query_params[S.SESSION] = session
    at.run()
    assert not at.exception, at.exception
    return at


def run_by_hand(at: AppTest, names: list[str]) -> None:
    for name in names:
        at.button(key=f"stage_{name}").click().run()
        assert not at.exception and not at.error, [e.value for e in at.error]


def test_a_pass_is_one_run_and_running_again_makes_a_linked_one():
    at = page()
    session = at.session_state[S.SESSION]
    assert at.query_params[S.SESSION] == [session] or at.query_params[S.SESSION] == session
    at.toggle(key=S.AUTO).set_value(False).run()
    at.text_area(key=S.PROMPT).set_value(PROMPT).run()
    run_by_hand(at, controller.STAGE_NAMES[:3])
    first = at.session_state[S.RUN_ID]
    kept = store().get(first)
    assert kept.session == session and kept.origin == "page" and kept.parent is None
    assert kept.stage == at.session_state[S.SP].stage == "retrieval"
    assert list(kept.stages) == controller.STAGE_NAMES[:3]  # the state after each stage
    assert kept.stages["A0_PreProcessing"].prompt_ready != kept.stages["Retrieval"].prompt_ready \
        or kept.stages["Retrieval"].prompt_ready == kept.sp.prompt_ready
    assert kept.sp == at.session_state[S.SP]
    # the next stage goes on in the same run
    run_by_hand(at, ["ReRanker"])
    assert at.session_state[S.RUN_ID] == first
    assert store().get(first).stage == "reranked"
    # running A0 again starts a new run, linked to the first
    run_by_hand(at, ["A0_PreProcessing"])
    second = at.session_state[S.RUN_ID]
    assert second != first and store().get(second).parent == first
    assert list(store().get(second).stages) == ["A0_PreProcessing"]
    # a setting changed for the session is kept with the run that used it
    at.number_input(key=S.setting_widget("limits.N2_RERANK_TOP_K")).set_value(7)
    at.button(key="FormSubmitter:settings-Apply").click().run()
    at.toggle(key=S.AUTO).set_value(True).run()
    at.button(key="run").click().run()
    assert not at.error, [e.value for e in at.error]
    third = at.session_state[S.RUN_ID]
    kept = store().get(third)
    assert kept.settings == {"limits.N2_RERANK_TOP_K": 7}
    assert kept.sp.answer is not None and kept.answer  # the answer went into the same run
    assert len(kept.sp.views_by_stage["reranked"]) <= 7


def test_a_reload_restores_the_sessions_latest_run():
    at = page()
    session = at.session_state[S.SESSION]
    at.text_area(key=S.PROMPT).set_value("How are documents chunked?").run()
    at.button(key="run").click().run()
    shown = at.session_state[S.SP]
    assert shown.answer is not None
    # a reload: a fresh session state, the same URL
    again = page(session)
    restored = again.session_state[S.SP]
    assert restored == shown
    assert again.session_state[S.PROMPT] == "How are documents chunked?"
    assert again.session_state[S.RUN_ID] == at.session_state[S.RUN_ID]
    assert any(f"Restored run {at.session_state[S.RUN_ID]}" in i.value for i in again.info)
    assert any(m.value.startswith("#### Answer") for m in again.markdown)
    # the restored pass is current: nothing to re-run, the answer is not out of date
    assert again.button(key="answer").disabled
    assert not any("out of date" in e.label for e in again.expander)
    # another session (another browser) does not get it
    other = page()
    assert other.session_state[S.SP].stage == "raw"


def test_the_runs_tab_lists_searches_and_opens_a_run():
    at = page()
    at.text_area(key=S.PROMPT).set_value("Which reranker backends are there?").run()
    at.button(key="run").click().run()
    opened_id = at.session_state[S.RUN_ID]
    at.text_area(key=S.PROMPT).set_value("How are documents chunked?").run()
    at.button(key="run").click().run()
    assert at.session_state[S.RUN_ID] != opened_id
    open_tab(at, "Runs")
    listed = at.dataframe[0].value
    assert list(listed.columns)[:4] == ["run", "time (UTC)", "prompt", "stage"]
    assert listed["run"].iloc[0] == f"▶ {at.session_state[S.RUN_ID]}"  # newest first, marked
    # the search finds runs by their prompt text
    at.text_input(key=S.RUNS_SEARCH).set_value("reranker backends").run()
    found = at.dataframe[0].value
    assert len(found) >= 1 and all("reranker backends" in p.lower() for p in found["prompt"])
    # pick the row of the first run and open it
    row = [r.strip("▶ ") for r in found["run"]].index(str(opened_id))
    at.session_state["runs_table_reranker backends_False"] = {
        "selection": {"rows": [row], "columns": [], "cells": []}}
    at.run()
    assert any(f"**Run {opened_id}**" in m.value for m in at.markdown)
    at.button(key="open_run").click().run()
    assert not at.error, [e.value for e in at.error]
    assert at.session_state[S.SP] == store().get(opened_id).sp
    assert at.session_state[S.PROMPT] == "Which reranker backends are there?"
    # going on from an opened run makes a new run, linked to it
    at.button(key="stage_A0_PreProcessing").click().run()
    assert store().get(at.session_state[S.RUN_ID]).parent == opened_id


def test_a_json_file_opens_as_a_run_and_a_bad_one_is_refused(kb_engine):
    sp = kb_engine.run("How does the ReRanker choose its backend?")
    at = page()
    open_tab(at, "Runs")

    def upload(name: str, data: bytes) -> None:
        uploader = at.file_uploader(key=f"run_file_{at.session_state[S.EDIT_NONCE]}")
        uploader.set_value((name, data, "application/json")).run()
        at.button(key="open_run_file").click().run()

    broken = json.loads(sp.to_json())
    broken["user_text"] = 3
    upload("broken.json", json.dumps(broken).encode())
    kind, message = at.session_state[S.ERROR]
    assert kind == "run file" and "user_text" in message and "broken.json" in message
    assert any("broken.json" in e.value for e in at.error)  # said on the page
    upload("notes.json", b"not json at all")
    assert "notes.json" in at.session_state[S.ERROR][1] and "JSON" in at.session_state[S.ERROR][1]
    assert at.session_state[S.SP].stage == "raw"  # nothing was opened
    upload("run.json", sp.to_json().encode())
    assert not at.error, [e.value for e in at.error]
    assert at.session_state[S.SP] == sp
    kept = store().get(at.session_state[S.RUN_ID])
    assert kept.origin == "import" and kept.sp == sp


def test_the_compare_tab_compares_the_run_with_the_one_before():
    at = page()
    at.text_area(key=S.PROMPT).set_value(PROMPT).run()
    at.button(key="run").click().run()
    first = at.session_state[S.RUN_ID]
    excluded = at.session_state[S.SP].final_selection_ids[0]
    open_tab(at, "Chunk views")
    at.selectbox(key="detail_chunk").set_value(excluded).run()
    at.button(key="detail_exclude").click().run()
    at.button(key="resume").click().run()
    second = at.session_state[S.RUN_ID]
    assert second != first and excluded not in at.session_state[S.SP].final_selection_ids
    open_tab(at, COMPARE_TAB)
    assert at.selectbox(key=S.COMPARE_A).value == first
    assert at.selectbox(key=S.COMPARE_B).value == second
    inputs = next(d.value for d in at.dataframe if "input" in d.value.columns)
    assert any("edit" in str(v).lower() for v in inputs["input"])
    chunks = next(d.value for d in at.dataframe if "cause" in d.value.columns)
    row = chunks[chunks["chunk id"] == excluded].iloc[0]
    assert "exclude" in row["cause"] and (row["status B"] == "dropped" or pd.isna(row["status B"]))
    assert any(f"`{excluded}`" in m.value and "removed in B" in m.value for m in at.markdown)
    assert any(c.language == "diff" for c in at.code)


def test_edits_not_yet_run_come_back_after_a_reload_with_where_each_chunk_stood():
    at = page()
    session = at.session_state[S.SESSION]
    at.text_area(key=S.PROMPT).set_value(PROMPT).run()
    at.button(key="run").click().run()
    assert not at.error, [e.value for e in at.error]
    ran = at.session_state[S.RUN_ID]
    retrieved = [r.chunk_id for r in at.session_state[S.SP].view("retrieval")]
    first, second = retrieved[0], retrieved[1]
    # two exclusions, one after the other: the first discards Retrieval's results
    for chunk in (first, second):
        at.selectbox(key="detail_chunk").set_value(chunk).run()
        at.button(key="detail_exclude").click().run()
        assert not at.exception and not at.error, [e.value for e in at.error]
    made = at.session_state[S.SP].edits
    assert [(e.kind, e.target) for e in made] == [("exclude", first), ("exclude", second)]
    # the edit list's words are true at every rank: both stood in Retrieval's results
    for edit in made:
        assert edit.before and "not retrieved" not in edit.before, edit.before
        assert "Retrieval" in edit.before or "ReRanker" in edit.before or "A3" in edit.before \
            or "A4" in edit.before, edit.before
    # a reload before re-running: the edits are back, on the run they were made on, and said
    again = page(session)
    assert again.session_state[S.RUN_ID] == ran
    assert [(e.kind, e.target) for e in again.session_state[S.SP].edits] == \
        [("exclude", first), ("exclude", second)]
    said = " ".join(i.value for i in again.info)
    assert f"Restored run {ran}" in said and "2 edits not yet run" in said, said
    assert first in said and second in said
    # the stages they discarded are shown as they were, marked out of date, and one click
    # applies them; the run that does is kept, and a second reload has nothing pending
    assert again.session_state[S.BEFORE_EDITS] is not None
    again.button(key="resume").click().run()
    assert not again.exception and not again.error, [e.value for e in again.error]
    final = again.session_state[S.SP].final_selection_ids
    assert first not in final and second not in final
    third = page(session)
    assert third.session_state[S.SP].edits == again.session_state[S.SP].edits
    assert not any("not yet run" in i.value for i in third.info)
    assert store().draft(session) is None
