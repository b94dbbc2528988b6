"""The page's edit controls and its stale-state rules, driven in-process with AppTest over the
session's temp index of the bundled knowledge base."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from ragstream.interfaces.ui import state as S
from ragstream.stages import controller
from ragstream.state.edits import statement_key
from tests.ui.tabs import open_box, open_tab, open_tables

ROOT = Path(__file__).resolve().parents[2]
APP = str(ROOT / "ui_streamlit.py")
PROMPT = "Where can I see how many milliseconds each stage took?"
DROPPED = "kb/troubleshooting.md#8"  # the A3 gate drops it for PROMPT ("off-topic")


@pytest.fixture(scope="module", autouse=True)
def app_env(page_env):
    """Every test here drives the page over the session's temp index."""


def fresh(prompt: str = PROMPT, auto: bool = True) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=300).run()
    at.text_area(key=S.PROMPT).set_value(prompt).run()
    if not auto:
        at.toggle(key=S.AUTO).set_value(False).run()
    return at


def finished(prompt: str = PROMPT) -> AppTest:
    at = fresh(prompt)
    at.button(key="run").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert sp(at).answer is not None
    return at


def sp(at):
    return at.session_state[S.SP]


def nonce(at) -> int:
    return at.session_state[S.EDIT_NONCE]


def edit_table(at, key: str, rows: dict[int, dict]) -> None:
    """Tick cells of an editable table as the browser would (AppTest seeds the edit state)."""
    at.session_state[key] = {"edited_rows": rows, "added_rows": [], "deleted_rows": []}
    at.run()


def chunk_ids(table):
    """A chunk table's chunk ids: its chunk column says the id, then § the section."""
    return table["chunk"].str.split(" § ", n=1).str[0]


def edit_list(at):
    return next(d.value for d in at.dataframe if "edit" in d.value.columns
                and "note" in d.value.columns)


def warnings(at) -> str:
    return "\n".join(w.value for w in at.warning)


# --------------------------------------------------------------------------- stale state


def test_a_new_prompt_over_a_finished_run_is_never_answered_with_the_old_one():
    at = finished("What is N3?")
    conversation = len(at.session_state[S.CONVERSATION])
    at.text_area(key=S.PROMPT).set_value("How do I start a Chroma server?").run()
    answer = at.button(key="answer")
    assert answer.disabled and "A0 Pre-processing is out of date: the prompt text changed" in answer.help
    retrieve = at.button(key="stage_Retrieval")
    assert retrieve.disabled and retrieve.label == "⚠ Retrieval"
    assert "Run A0 Pre-processing first: its result is out of date." in retrieve.help
    a0 = at.button(key="stage_A0_PreProcessing")
    assert not a0.disabled and a0.label == "⚠ A0 Pre-processing"
    assert "**Out of date** — A0 Pre-processing is out of date: the prompt text changed." in warnings(at)
    # the earlier pass's answer is not shown as the answer to the new prompt
    earlier = next(e for e in at.expander
                   if e.label == "Out of date: the prompt text changed — the answer of the earlier pass")
    assert any(m.value.startswith("#### Answer") for m in earlier.markdown)
    # run all remaining: from A0, on the new prompt, answered once
    at.button(key="run").click().run()
    assert sp(at).user_text == "How do I start a Chroma server?" and sp(at).answer is not None
    assert "chroma run" in sp(at).answer.text.lower()
    turns = at.session_state[S.CONVERSATION]
    assert len(turns) == conversation + 1 and turns[-1].user == "How do I start a Chroma server?"
    assert not at.button(key="stage_Retrieval").disabled


def test_run_all_on_a_finished_pass_is_disabled_and_says_why():
    at = finished()
    runs, turns = len(sp(at).stage_runs), len(at.session_state[S.CONVERSATION])
    run = at.button(key="run")
    assert run.disabled and run.help == (
        "Nothing to run: every stage is current and this pass is answered. Change the prompt, "
        "a setting, a filter or an edit to run again.")
    assert len(sp(at).stage_runs) == runs and len(at.session_state[S.CONVERSATION]) == turns
    assert at.button(key="answer").disabled and "This pass is answered" in at.button(key="answer").help


def test_changed_settings_mark_the_stages_that_read_them_and_one_click_reruns():
    at = finished()
    at.number_input(key="set_agents.A3_NLI_Gate.min_relevance").set_value(0.3)
    at.button(key="FormSubmitter:settings-Apply").click().run()
    labels = {b.key: b.label for b in at.button if (b.key or "").startswith("stage_")}
    assert labels["stage_ReRanker"] == "✓ ReRanker" and labels["stage_A3_NLI_Gate"] == "⚠ A3 Gate"
    assert labels["stage_A4_Condenser"] == "⚠ A4 Condenser"
    assert at.button(key="stage_A4_Condenser").disabled and at.button(key="answer").disabled
    assert "settings changed: A3 Gate" in warnings(at)
    assert any("A4 Condenser — " in e.label and "out of date" in e.label for e in at.expander)
    resume = at.button(key="resume")
    assert resume.label == "↻ Re-run A3 Gate → Prompt Builder"
    assert resume.help.startswith("Re-run from A3 Gate (the first stage out of date) to Prompt Builder")
    resume.click().run()
    assert not at.exception and "resume" not in [b.key for b in at.button]
    assert all(r.score >= 0.3 or r.status == "dropped" for r in sp(at).view("a3"))
    assert not at.button(key="answer").disabled


def test_changed_filters_mark_retrieval():
    at = finished()
    at.multiselect(key="filter_doc_type").select("faq")
    at.button(key="FormSubmitter:filter_form-Apply filters").click().run()
    assert at.button(key="stage_Retrieval").label == "⚠ Retrieval"
    assert "the filters changed: none → doc_type=faq" in warnings(at)
    at.button(key="stage_Retrieval").click().run()
    assert {c.doc_type for c in sp(at).base_context_chunks} == {"faq"}
    assert at.button(key="stage_ReRanker").label == "ReRanker"  # discarded, runs next


def test_prompt_ready_shows_the_condensed_context_after_a4_and_the_rules_after_a5():
    at = fresh(auto=False)
    shown = []
    for name in controller.STAGE_NAMES:
        at.button(key=f"stage_{name}").click().run()
        shown.append(at.code[0].value)
    a2, a3, a4, a5 = shown[1], shown[4], shown[5], shown[6]
    assert a3 == a2 and "## Condensed context" not in a3
    assert "## Condensed context" in a4 and "### Rules" not in a4
    assert "### Rules" in a5 and "## Condensed context" in a5 and "## Sources" not in a5
    assert "## Sources" in shown[7]


# --------------------------------------------------------------------------- edits


def test_pinning_from_a_table_then_one_click_reruns_with_it_selected():
    at = finished()
    a3 = [r.chunk_id for r in sp(at).view("a3")]
    open_tables(at)
    edit_table(at, f"view_a3_{nonce(at)}", {a3.index(DROPPED): {"pin": True}})
    assert [(e.kind, e.target) for e in sp(at).edits] == [("pin", DROPPED)]
    assert sp(at).stage == "a2" and sp(at).answer is None
    # the discarded stages stay in view, marked; the answer waits
    assert "Your edits discarded the results from Retrieval on" in warnings(at)
    assert any(e.label.startswith("A3 Gate — ") and "out of date" in e.label for e in at.expander)
    table = next(d.value for d in at.data_editor if d.key == f"view_a3_{nonce(at)}")
    assert table.loc[chunk_ids(table) == DROPPED, "pin"].item()
    assert at.button(key="answer").disabled
    at.button(key="resume").click().run()
    assert not at.exception and controller.next_stage(sp(at)) is None
    assert sp(at).final_selection_ids[0] == DROPPED
    a4 = next(d.value for d in at.data_editor if d.key == f"view_a4_{nonce(at)}")
    row = a4[chunk_ids(a4) == DROPPED].iloc[0]
    assert row["pin"] and row["status"] == "kept" and row["reason"] == "pinned by you"
    assert at.session_state[S.BEFORE_EDITS] is None
    # unticking undoes it
    a4_ids = list(chunk_ids(a4))
    edit_table(at, f"view_a4_{nonce(at)}", {a4_ids.index(DROPPED): {"pin": False}})
    assert sp(at).edits == []


def test_exclude_and_undo_from_open_a_chunk_and_the_journey():
    at = finished()
    top = sp(at).final_selection_ids[0]
    at.selectbox(key="detail_chunk").set_value(top).run()
    at.button(key="detail_exclude").click().run()
    assert [(e.kind, e.target) for e in sp(at).edits] == [("exclude", top)]
    assert at.button(key="detail_exclude").disabled and not at.button(key="detail_undo").disabled
    at.button(key="resume").click().run()
    assert top not in sp(at).final_selection_ids
    open_tab(at, "Chunk journey")
    journey_pick = at.selectbox(key=S.JOURNEY_CHUNK)
    journey_pick.set_value(top).run()
    journey = next(d.value for d in at.dataframe if "stage" in d.value.columns
                   and "reason" in d.value.columns)
    assert "excluded by you" in journey["reason"].iloc[0]
    assert journey["reason"].iloc[1] == "dropped by Retrieval: excluded by you"
    at.button(key="journey_undo").click().run()
    assert sp(at).edits == []


def test_a_chunk_found_by_its_text_is_added_pinned():
    at = finished()
    open_box(at, S.SEARCH_OPEN)
    at.text_input(key=S.CHUNK_SEARCH).set_value("fall between sentences, never inside").run()
    add = at.button(key="add_0")
    assert add.label == "Add"
    add.click().run()
    chunk = sp(at).edits[0].target
    assert (sp(at).edits[0].kind, chunk) == ("add", "kb/chunking-and-ingestion.md#4")
    assert at.button(key="add_0").label == "Added" and at.button(key="add_0").disabled
    at.button(key="resume").click().run()
    assert sp(at).final_selection_ids[0] == chunk
    row = next(r for r in sp(at).view("retrieval") if r.chunk_id == chunk)
    assert row.reason == "added by you"


def test_fields_are_set_in_the_table_and_a_value_outside_the_choices_is_refused():
    at = finished()
    open_tab(at, "Fields")
    key = f"fields_{nonce(at)}"
    fields = next(d.value for d in at.data_editor if d.key == key)
    assert list(fields.columns) == ["field", "value", "source", "match", "why", "choices"]
    tone = list(fields["field"]).index("tone")
    assert fields["source"][tone] == "default" and "formal" in fields["choices"][tone]
    edit_table(at, key, {tone: {"value": "grumpy"}})
    assert at.error and "'grumpy' is not a value of tone. Choose one of:" in at.error[0].value
    assert sp(at).edits == []
    edit_table(at, f"fields_{nonce(at)}", {tone: {"value": "formal"}})
    assert [(e.kind, e.target, e.after) for e in sp(at).edits] == [("field", "tone", "formal")]
    assert sp(at).stage == "preprocessed"  # A2 onward discarded; A0 kept
    at.button(key="resume").click().run()
    fields = next(d.value for d in at.data_editor if d.key == f"fields_{nonce(at)}")
    assert fields["value"][tone] == "formal" and fields["source"][tone] == "you"
    assert "Tone: formal" in at.code[0].value


def test_statements_and_rules_are_edited_in_place():
    at = finished()
    open_tab(at, "Context & rules")
    first = sp(at).extras.a4.condensed[0]
    area = at.text_area(key=f"context_{nonce(at)}_1")
    area.set_value("The history tab lists each stage's wall time.").run()
    assert sp(at).edits[-1].kind == "statement_text"
    assert sp(at).edits[-1].target == statement_key(first)
    at.button(key=f"context_{nonce(at)}_2_up").click().run()  # drawn from the state before
    assert sp(at).edits[-1].kind == "statement_move" and sp(at).edits[-1].after == "1"
    at.button(key="resume").click().run()
    condensed = sp(at).extras.a4.condensed
    assert condensed[1].text == "The history tab lists each stage's wall time." and condensed[1].edited
    assert "_Edited: 2 statements changed by hand" in sp(at).S_CTX_MD
    # rules: remove the first, add one of the person's own
    rule = sp(at).extras.format_enforcer.hard_rules[0]
    at.button(key=f"rule_{nonce(at)}_1_remove").click().run()
    at.text_input(key=f"new_rule_{nonce(at)}").set_value("Name the stage you mean.").run()
    at.button(key="add_rule").click().run()
    at.button(key="resume").click().run()
    rules = sp(at).extras.format_enforcer.hard_rules
    assert rule not in rules and rules[-1] == "Name the stage you mean."
    assert "- Name the stage you mean." in at.code[0].value


def test_the_edit_list_undoes_one_edit_or_clears_them_all():
    at = finished()
    at.selectbox(key="detail_chunk").set_value(DROPPED).run()
    at.button(key="detail_pin").click().run()
    open_tab(at, "Fields")
    edit_table(at, f"fields_{nonce(at)}", {1: {"value": "How long did each stage take?"}})
    assert [e.kind for e in sp(at).edits] == ["pin", "field"]
    listed = edit_list(at)
    assert list(listed["status"]) == ["waiting", "waiting"]
    at.button(key="resume").click().run()
    listed = edit_list(at)
    assert list(listed["status"]) == ["applied", "applied"]
    assert listed["note"][0] == "A4 Condenser: in the final selection as source [1]"
    at.selectbox(key=f"undo_pick_{nonce(at)}").set_value(sp(at).edits[1].id).run()
    at.button(key="undo_edit").click().run()
    assert [e.kind for e in sp(at).edits] == ["pin"]
    at.button(key="clear_edits").click().run()
    assert sp(at).edits == []
    assert "Edits cleared: the stages decide by themselves again." in [i.value for i in at.info][0]
