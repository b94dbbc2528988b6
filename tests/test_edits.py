"""A person's edits on real pipeline runs over the bundled knowledge base: each kind is
recorded in the state, applied by its stage every run, survives re-runs, says when it no longer
applies, and discards only the stages it affects."""

from __future__ import annotations

import json
import re

import pytest

from ragstream.answering.answer import extractive_statements
from ragstream.common.errors import EditError, StaleResultError
from ragstream.stages import controller
from ragstream.state.edits import statement_key
from ragstream.state.super_prompt import SuperPrompt

#: the gate drops kb/troubleshooting.md#8 for this question ("off-topic"), though the section
#: "Checking where the time goes" answers it
PROMPT = "Where can I see how many milliseconds each stage took?"
#: the document whose chunk the gate drops is pinned in these tests (one test deletes it)
DROPPED_FROM = "troubleshooting.md"


def gate_dropped(sp: SuperPrompt) -> str:
    """A chunk of ``DROPPED_FROM`` the A3 gate dropped as off-topic for ``sp``: its best-ranked
    one (which one depends on near-tied scores, so it is looked up, never named)."""
    return next(r.chunk_id for r in sp.view("a3") if r.status == "dropped"
                and r.reason.startswith("off-topic") and DROPPED_FROM in r.chunk_id)
DETERMINISTIC = ("body", "views_by_stage", "final_selection_ids", "S_CTX_MD", "prompt_ready")


@pytest.fixture(scope="module")
def full(kb_engine) -> SuperPrompt:
    return kb_engine.run(PROMPT)


def row(sp: SuperPrompt, view: str, chunk_id: str):
    return next((r for r in sp.view(view) if r.chunk_id == chunk_id), None)


def same_results(a: SuperPrompt, b: SuperPrompt) -> bool:
    return all(json.dumps(a.model_dump(mode="json")[k], sort_keys=False)
               == json.dumps(b.model_dump(mode="json")[k], sort_keys=False) for k in DETERMINISTIC)


# --------------------------------------------------------------------------- chunks


def test_a_chunk_the_gate_dropped_is_pinned_selected_and_cited_first(kb_engine, full):
    DROPPED = gate_dropped(full)
    gate = row(full, "a3", DROPPED)
    assert gate.status == "dropped" and gate.reason.startswith("off-topic")
    assert DROPPED not in full.final_selection_ids

    edited = kb_engine.pin(full, DROPPED)
    assert [(e.kind, e.target, e.stage) for e in edited.edits] == [("pin", DROPPED, "Retrieval")]
    assert edited.edits[0].before.startswith(f"A3: rank {gate.rank}, dropped (off-topic: score")
    # the pin acts on Retrieval: its results and the later stages' are discarded, A0/A2 stay
    assert edited.stage == "a2" and edited.body == full.body and edited.views_by_stage == {}
    assert edited.resume_to == "Prompt_Builder" and edited.answer is None

    sp = kb_engine.resume(edited)
    assert controller.next_stage(sp) is None and sp.resume_to is None
    assert row(sp, "retrieval", DROPPED).reason == "pinned by you"
    a3 = row(sp, "a3", DROPPED)
    assert a3.status == "kept" and a3.decided_by == "you"
    assert a3.reason.startswith("pinned by you (the gate would drop it: off-topic")
    assert sp.final_selection_ids[0] == DROPPED  # pinned ones first
    assert row(sp, "a4", DROPPED).reason == "pinned by you"
    assert "[1]" in sp.prompt_ready and f"(chunk {DROPPED})" in sp.Attachments_MD.split("### [2]")[0]
    first = extractive_statements(sp, kb_engine.cfg.settings.answer)[0]
    assert first.chunk_ids == [DROPPED]
    _, ans = kb_engine.answer(sp)
    assert ans.sources[0].chunk_id == DROPPED and ans.text.split("[")[1].startswith("1]")
    notes = {stage: [o.note for o in outs] for stage, outs in sp.extras.edit_outcomes.items()}
    assert notes["A4_Condenser"] == ["in the final selection as source [1]"]
    assert notes["A3_NLI_Gate"][0].startswith("kept by the gate, which would have dropped it")


def test_an_excluded_chunk_is_dropped_at_every_stage_and_makes_room(kb_engine, full):
    top = full.final_selection_ids[0]
    sp = kb_engine.resume(kb_engine.exclude(full, top))
    retrieval = row(sp, "retrieval", top)
    assert (retrieval.status, retrieval.reason, retrieval.decided_by) == ("dropped", "excluded by you", "you")
    assert top not in [r.chunk_id for r in sp.view("reranked")]
    assert top not in sp.final_selection_ids
    n1 = kb_engine.cfg.limits.N1_RETR_MAX_CANDIDATES
    assert len(sp.kept_ids("retrieval")) == min(n1, len(full.view("retrieval")))
    journey_reason = row(sp, "retrieval", top).reason
    assert journey_reason == "excluded by you"


def test_a_chunk_retrieval_did_not_return_is_added_pinned(kb_engine, full):
    cfg = kb_engine.cfg.with_limits(N1_RETR_MAX_CANDIDATES=10, N2_RERANK_TOP_K=10)
    small = kb_engine.run(PROMPT, cfg=cfg)
    chunk = kb_engine.find_chunks("Chunk boundaries fall between sentences, never inside one")[0][0]
    assert chunk.id not in {r.chunk_id for r in small.view("retrieval")}
    sp = kb_engine.resume(kb_engine.add_chunk(small, chunk.id), cfg=cfg)
    added = row(sp, "retrieval", chunk.id)
    assert added is not None and added.reason == "added by you" and added.rank == 11
    assert row(sp, "reranked", chunk.id).reason.endswith("added by you")
    assert row(sp, "a3", chunk.id).status == "kept"
    assert sp.final_selection_ids[0] == chunk.id
    note = sp.extras.edit_outcomes["Retrieval"][0].note
    assert note.startswith("brought in at Retrieval rank 11 (rank ")


def test_unknown_chunk_field_or_value_is_refused_and_nothing_changes(kb_engine, full):
    with pytest.raises(EditError, match=r"Unknown chunk id 'kb/faq\.md#999'.*Did you mean kb/faq\.md#9"):
        kb_engine.pin(full, "kb/faq.md#999")
    with pytest.raises(EditError, match="Unknown field 'colour'. Fields you can set: system, task"):
        kb_engine.set_field(full, "colour", "red")
    with pytest.raises(EditError, match="'grumpy' is not a value of tone. Choose one of: neutral"):
        kb_engine.set_field(full, "tone", "grumpy")
    with pytest.raises(EditError, match="task cannot be empty"):
        kb_engine.set_field(full, "task", "  ")
    assert full.edits == [] and controller.next_stage(full) is None


# --------------------------------------------------------------------------- fields


def test_a_field_set_by_hand_reads_set_by_you_and_discards_only_later_stages(kb_engine, full):
    sp = kb_engine.set_field(full, "tone", "FORMAL")  # matched without case, stored as listed
    assert sp.edits[-1].after == "formal" and sp.edits[-1].stage == "A2_PromptShaper"
    assert sp.edits[-1].before == full.body["tone"]
    assert sp.stage == "preprocessed" and sp.extras.a0_decisions == full.extras.a0_decisions
    sp = kb_engine.resume(sp)
    assert sp.body["tone"] == "formal" and sp.extras.body_sources["tone"] == "you"
    decision = next(d for d in sp.extras.a2_decisions if d.field == "tone")
    assert decision.source == "you"
    assert "Tone: formal" in sp.System_MD

    task = kb_engine.resume(kb_engine.set_field(full, "task", "How is a chunk split?"))
    assert task.extras.body_sources["task"] == "you"
    assert task.extras.retrieval.query == "How is a chunk split?"
    assert task.edits[-1].stage == "A0_PreProcessing"


def test_role_with_its_own_article_is_not_doubled(kb_engine):
    sp = kb_engine.run("Role: a senior support engineer\nTask: What is N3?", until="A2_PromptShaper")
    assert "You are a senior support engineer." in sp.prompt_ready
    assert "an a senior" not in sp.prompt_ready


# --------------------------------------------------------------------------- A4 and A5


def test_statements_removed_and_moved_keep_their_citations_and_a_rewritten_one_is_your_note(
        kb_engine, full):
    statements = full.extras.a4.condensed
    first, second, last = statements[0], statements[1], statements[-1]
    sp = kb_engine.edit_statement(full, statement_key(second), "Each stage's wall time is in the history.")
    sp = kb_engine.remove_statement(sp, statement_key(first), seen=full)
    sp = kb_engine.move_statement(sp, statement_key(last), 1)  # unchecked: A4 was discarded
    assert sp.stage == "a3" and "a3" in sp.views_by_stage  # A4 onward discarded, A3 kept
    sp = kb_engine.resume(sp)
    condensed = sp.extras.a4.condensed
    assert condensed[0].text == last.text
    assert first.text not in [s.text for s in condensed]
    rewritten = next(s for s in condensed if statement_key(s) == statement_key(second))
    assert rewritten.text == "Each stage's wall time is in the history." and rewritten.edited
    assert rewritten.chunk_ids == second.chunk_ids
    assert sp.extras.a4.edited == "3 statements changed by hand: 1 rewritten, 1 removed, 1 moved"
    assert "_Edited: 3 statements changed by hand" in sp.S_CTX_MD
    # the rewritten statement's words are the person's: a note of theirs, never a cited source
    assert "- Your note: Each stage's wall time is in the history.\n" in sp.prompt_ready
    assert not re.search(r"wall time is in the history\.? *\[\d", sp.prompt_ready)
    assert "### Your notes" in sp.S_CTX_MD
    assert first.text not in sp.S_CTX_MD
    # the extractive answer follows the person's order, and leaves the person's note out
    chosen = extractive_statements(sp, kb_engine.cfg.settings.answer)
    assert chosen[0].text == last.text
    assert all("wall time is in the history" not in s.text for s in chosen)


def test_a_statement_edit_that_no_longer_applies_says_so(kb_engine, full):
    key = statement_key(full.extras.a4.condensed[0])
    sp = kb_engine.remove_statement(full, key)
    sp = kb_engine.resume(kb_engine.set_field(sp, "task", "How do I start a Chroma server?"))
    outcome = sp.extras.edit_outcomes["A4_Condenser"]
    assert [o.applied for o in outcome] == [False]
    assert "is not in the list any more" in outcome[0].note
    assert len(sp.edits) == 2  # kept, never silently lost


def test_rules_rewritten_removed_moved_and_added(kb_engine, full):
    rules = full.extras.format_enforcer.hard_rules
    sp = kb_engine.edit_rule(full, rules[0], "Answer in two short paragraphs.")
    sp = kb_engine.remove_rule(sp, rules[1], seen=full)
    sp = kb_engine.add_rule(sp, "Name the stage you mean.")
    sp = kb_engine.move_rule(sp, rules[2], 1, seen=full)
    with pytest.raises(EditError, match="No rule 'nope' in the current rules"):
        kb_engine.remove_rule(sp, "nope", seen=full)
    assert sp.stage == "a4"
    sp = kb_engine.resume(sp)
    assert sp.extras.format_enforcer.hard_rules == [rules[2], "Answer in two short paragraphs.",
                                                    *rules[3:], "Name the stage you mean."]
    assert sp.extras.format_enforcer.edited.startswith("4 rules changed by hand")
    assert "- Name the stage you mean." in sp.System_MD and rules[1] not in sp.prompt_ready
    with pytest.raises(EditError, match="No rule 'nope' in the current rules"):
        kb_engine.remove_rule(sp, "nope")
    with pytest.raises(EditError, match="moves to a place 1, 2"):
        kb_engine.move_rule(sp, rules[2], 0)


# --------------------------------------------------------------------------- reruns


def test_same_prompt_config_and_edits_give_byte_identical_results(kb_engine, full):
    DROPPED = gate_dropped(full)
    sp = kb_engine.pin(full, DROPPED)
    sp = kb_engine.set_field(sp, "audience", "expert")
    sp = kb_engine.resume(sp)
    sp = kb_engine.remove_statement(sp, statement_key(sp.extras.a4.condensed[-1]))
    once = kb_engine.resume(sp)
    fresh = kb_engine.run(controller.new_prompt(PROMPT, edits=once.edits))
    assert same_results(once, fresh)
    assert json.loads(once.to_json())["edits"] == json.loads(fresh.to_json())["edits"]


def test_edits_survive_a_rerun_from_a0(kb_engine, full):
    DROPPED = gate_dropped(full)
    sp = kb_engine.resume(kb_engine.pin(full, DROPPED))
    back = kb_engine.run_stage(sp, "A0_PreProcessing")
    assert back.edits == sp.edits and back.views_by_stage == {}
    again = kb_engine.run(back)
    assert again.final_selection_ids[0] == DROPPED and same_results(again, sp)


def test_undo_and_clear_restore_the_stages_own_decisions(kb_engine, full):
    DROPPED = gate_dropped(full)
    sp = kb_engine.resume(kb_engine.set_field(kb_engine.pin(full, DROPPED), "tone", "formal"))
    pin = next(e for e in sp.edits if e.kind == "pin")
    undone = kb_engine.resume(kb_engine.undo_edits(sp, [pin.id]))
    assert [e.kind for e in undone.edits] == ["field"]
    assert row(undone, "a3", DROPPED).status == "dropped"
    cleared = kb_engine.resume(kb_engine.undo_edits(sp))
    assert cleared.edits == [] and same_results(cleared, full)


def test_pinning_replaces_an_exclusion_of_the_same_chunk(kb_engine, full):
    DROPPED = gate_dropped(full)
    sp = kb_engine.pin(kb_engine.exclude(full, DROPPED), DROPPED)
    assert [(e.kind, e.target) for e in sp.edits] == [("pin", DROPPED)]


def test_an_edit_whose_chunk_left_the_knowledge_base_says_so(fresh_engine, kb_copy):
    engine = fresh_engine
    engine.ingest(kb_copy)
    sp = engine.run(PROMPT)
    DROPPED = gate_dropped(sp)
    sp = engine.resume(engine.pin(sp, DROPPED))
    assert sp.final_selection_ids[0] == DROPPED
    (kb_copy / DROPPED_FROM).unlink()
    engine.ingest(kb_copy)
    stale = engine.stale(sp)
    assert stale is not None and stale.stage == "Retrieval"
    assert "the knowledge base changed" in stale.reasons[0]
    with pytest.raises(StaleResultError, match="Retrieval's result no longer matches"):
        engine.run_stage(sp, "A4_Condenser")
    with pytest.raises(StaleResultError):
        engine.answer(sp)
    sp = engine.run(sp)  # auto mode re-runs from the first out-of-date stage
    assert engine.stale(sp) is None
    outcome = sp.extras.edit_outcomes["Retrieval"][0]
    assert not outcome.applied
    assert outcome.note == (f"not applied: {DROPPED} is not in the knowledge base any more "
                            "(re-ingested or removed)")
    assert DROPPED not in sp.final_selection_ids and len(sp.edits) == 1


# --------------------------------------------------------------------------- staleness


def test_changed_settings_mark_the_first_stage_that_reads_them(kb_engine, full):
    assert kb_engine.stale(full) is None
    a3 = kb_engine.cfg.with_overrides({"agents.A3_NLI_Gate.min_relevance": 0.3})
    stale = kb_engine.stale(full, a3)
    assert (stale.stage, stale.reasons) == ("A3_NLI_Gate", ["settings changed: agents.A3_NLI_Gate"])
    n2 = kb_engine.cfg.with_limits(N2_RERANK_TOP_K=20)
    assert kb_engine.stale(full, n2).stage == "ReRanker"
    with pytest.raises(StaleResultError, match="ReRanker's result no longer matches"):
        kb_engine.run_stage(full, "A3_NLI_Gate", n2)
    rerun = kb_engine.run(full, cfg=n2)
    assert len(rerun.view("reranked")) == 20 and kb_engine.stale(rerun, n2) is None
    assert rerun.body == full.body and rerun.stage_runs[-5].stage == "ReRanker"


def test_filters_and_prompt_text_are_inputs_too(kb_engine, full):
    from ragstream.state.super_prompt import Filters

    filtered = full.model_copy(update={"filters": Filters(doc_type=("faq",))})
    stale = kb_engine.stale(filtered)
    assert stale.stage == "Retrieval"
    assert stale.reasons == ["the filters changed: none → doc_type=faq"]
    retyped = full.model_copy(update={"user_text": "How do I start a Chroma server?"})
    assert kb_engine.stale(retyped).stage == "A0_PreProcessing"
    assert kb_engine.stale(retyped).reasons == ["the prompt text changed"]
