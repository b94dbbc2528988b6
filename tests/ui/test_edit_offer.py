"""The page's edit offer, driven through its actions on a plain session state: a new prompt's
pending state has no edits of the shown pass; "Dismiss" before it runs means they are not
offered after it either; "Apply them here" before it runs applies them when it runs."""

from __future__ import annotations

from ragstream.interfaces.ui import actions, edit_actions
from ragstream.interfaces.ui import state as S

PROMPT = "Where can I see how many milliseconds each stage took?"
PINNED = "kb/troubleshooting.md#8"
OTHER = "How do I start a Chroma server?"


def pinned_session(engine) -> dict:
    st_state: dict = {}
    S.init_state(st_state)
    st_state[S.PROMPT] = PROMPT
    actions.run_remaining(engine, st_state, until="A2_PromptShaper")
    assert edit_actions.chunk_action(engine, st_state, PINNED, "pin")
    assert [e.target for e in st_state[S.SP].edits] == [PINNED]
    return st_state


def test_dismissed_before_the_new_prompt_runs_they_are_not_offered_after(kb_engine):
    st_state = pinned_session(kb_engine)
    st_state[S.PROMPT] = OTHER
    offer = actions.edits_offer(st_state)
    assert offer is not None and offer.prompt == PROMPT and [e.target for e in offer.edits] == [PINNED]
    assert offer.title(OTHER) == "1 edit of the previous prompt — apply it here"
    assert actions.pending_state(st_state).edits == []  # offered, not given

    actions.dismiss_offered_edits(st_state)
    assert actions.edits_offer(st_state) is None
    actions.run_remaining(kb_engine, st_state, until="A0_PreProcessing")
    assert st_state[S.SP].user_text == OTHER and st_state[S.SP].edits == []
    assert actions.edits_offer(st_state) is None


def test_applied_before_the_new_prompt_runs_they_apply_when_it_runs(kb_engine):
    st_state = pinned_session(kb_engine)
    st_state[S.PROMPT] = OTHER
    assert actions.apply_offered_edits(kb_engine, st_state)
    assert actions.edits_offer(st_state) is None
    chosen = actions.carried_edits(st_state)
    assert chosen is not None and chosen.prompt == PROMPT
    assert [(e.target, e.carried_from) for e in actions.pending_state(st_state).edits] == [
        (PINNED, PROMPT)]
    # putting the shown pass's own text back, before anything ran, is that same pass
    st_state[S.PROMPT] = PROMPT
    assert [e.carried_from for e in actions.pending_state(st_state).edits] == [None]
    st_state[S.PROMPT] = OTHER
    actions.run_remaining(kb_engine, st_state, until="A0_PreProcessing")
    assert [(e.target, e.carried_from) for e in st_state[S.SP].edits] == [(PINNED, PROMPT)]
    assert actions.edits_offer(st_state) is None and st_state[S.EDITS_CARRY] is None
