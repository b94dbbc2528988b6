"""Stage order, re-runs, failure atomicity and timing, with the real stages."""

import pytest

from ragstream.common.errors import StageError, StageOrderError, UnknownStageError
from ragstream.stages import controller
from ragstream.state.super_prompt import PROMPT_BUILT

PROMPT = "Task: Explain how A3 decides which chunks to drop.\nAudience: beginner"


def test_out_of_order_stage_is_refused_naming_the_first(kb_engine):
    sp = kb_engine.new(PROMPT)
    with pytest.raises(StageOrderError) as err:
        kb_engine.run_stage(sp, "Retrieval")
    assert err.value.required == "A0_PreProcessing"
    assert "run A0_PreProcessing first" in str(err.value)
    sp = kb_engine.run_stage(sp, "A0_PreProcessing")
    with pytest.raises(StageOrderError, match="run A2_PromptShaper first"):
        kb_engine.run_stage(sp, "ReRanker")


def test_unknown_stage(kb_engine):
    with pytest.raises(UnknownStageError, match="Allowed stages: A0_PreProcessing"):
        kb_engine.run_stage(kb_engine.new(PROMPT), "A1_Nothing")


def test_stage_values_history_and_timing(kb_engine):
    sp = kb_engine.run(PROMPT)
    assert sp.stage == "a5"
    assert sp.history_of_stages == ["preprocessed", "a2", "retrieval", "reranked", "a3", "a4",
                                    "a5", PROMPT_BUILT]
    assert [r.stage for r in sp.stage_runs] == controller.STAGE_NAMES
    assert all(r.wall_ms >= 0 for r in sp.stage_runs)
    assert controller.next_stage(sp) is None
    # running all again on a finished state does nothing
    assert kb_engine.run(sp) is sp


def test_rerunning_an_earlier_stage_discards_later_results(kb_engine):
    full = kb_engine.run(PROMPT)
    again = kb_engine.run_stage(full, "Retrieval")
    assert again.stage == "retrieval"
    assert set(again.views_by_stage) == {"retrieval"}
    assert again.final_selection_ids == [] and again.S_CTX_MD == ""
    assert again.Attachments_MD == "" and again.extras.format_enforcer is None
    assert "## Sources" not in again.prompt_ready
    assert again.history_of_stages[-1] == "retrieval"  # history is append-only
    assert len(again.history_of_stages) == len(full.history_of_stages) + 1
    assert controller.next_stage(again) == "ReRanker"
    # the earlier state is untouched
    assert full.S_CTX_MD and "a4" in full.views_by_stage

    back = kb_engine.run_stage(full, "A0_PreProcessing")
    assert back.stage == "preprocessed" and back.views_by_stage == {}
    assert back.base_context_chunks == []


def test_rerunning_a4_restores_the_a3_selection(kb_engine):
    full = kb_engine.run(PROMPT)
    again = kb_engine.run_stage(full, "A4_Condenser")
    assert again.final_selection_ids == full.final_selection_ids
    assert again.S_CTX_MD == full.S_CTX_MD


def test_a_failing_stage_leaves_the_state_unchanged(kb_engine):
    sp = kb_engine.run(PROMPT, until="A2_PromptShaper")
    before = sp.model_dump_json()

    class BrokenStore:
        def version(self):
            raise ConnectionError("store went away")

    services = kb_engine.services
    saved = services.store
    services.store = BrokenStore()
    try:
        with pytest.raises(StageError) as err:
            kb_engine.run_stage(sp, "Retrieval")
    finally:
        services.store = saved
    assert "Retrieval failed" in str(err.value) and "store went away" in str(err.value)
    assert sp.model_dump_json() == before
    # and the pipeline carries on from there
    assert kb_engine.run_stage(sp, "Retrieval").stage == "retrieval"
