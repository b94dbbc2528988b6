"""On the page (AppTest, the session's temp index of the bundled knowledge base): edits belong
to the prompt they were made for — a new prompt is offered them, never given them — and an
out-of-date pass is folded, greyed and labelled, with nothing of it offered for copying."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from ragstream.interfaces.ui import state as S
from tests.ui.tabs import APP, TIMEOUT, open_tab

PROMPT = "Where can I see how many milliseconds each stage took?"
PINNED = "kb/troubleshooting.md#8"  # the A3 gate drops it for PROMPT; pinned, it leads
OTHER = "How do I start a Chroma server?"


@pytest.fixture(scope="module", autouse=True)
def app_env(page_env):
    """Every test here drives the page over the session's temp index."""


def sp(at):
    return at.session_state[S.SP]


def ok(at: AppTest) -> AppTest:
    assert not at.exception and not at.error, [e.value for e in at.error]
    return at


def pinned_pass() -> AppTest:
    """PROMPT run and answered with PINNED pinned by the person (from "Open a chunk")."""
    at = AppTest.from_file(APP, default_timeout=TIMEOUT).run()
    at.text_area(key=S.PROMPT).set_value(PROMPT).run()
    ok(at.button(key="run").click().run())
    at.selectbox(key="detail_chunk").set_value(PINNED).run()
    ok(at.button(key="detail_pin").click().run())
    ok(at.button(key="run").click().run())
    assert sp(at).final_selection_ids[0] == PINNED and sp(at).answer is not None
    return at


def offer_text(at: AppTest) -> str:
    return "\n".join(m.value for m in at.markdown)


def offer_rows(at: AppTest) -> list[dict]:
    frame = next(d.value for d in at.dataframe if list(d.value.columns)[:3] == ["kind", "target",
                                                                                "value"])
    return frame.to_dict("records")


def you_decided(state) -> set[str]:
    return {r.chunk_id for r in state.view("a4") if r.decided_by == "you"}


def test_a_new_prompt_is_offered_the_edits_and_runs_without_them_until_applied():
    at = pinned_pass()
    at.text_area(key=S.PROMPT).set_value(OTHER).run()
    assert "**1 edit of the previous prompt — apply it here**" in offer_text(at)
    assert offer_rows(at) == [{"kind": "pin", "target": PINNED, "value": "", "by": "you"}]
    # the edit list of the old prompt is not shown as this prompt's
    assert not any(e.label.startswith("Your edits") for e in at.expander)

    ok(at.button(key="run").click().run())  # not applied: the new pass has no edits
    assert sp(at).user_text == OTHER and sp(at).edits == [] and sp(at).answer is not None
    assert PINNED not in you_decided(sp(at))
    assert "**1 edit of the previous prompt — apply it here**" in offer_text(at)  # still offered

    ok(at.button(key="edits_offer_apply").click().run())  # the explicit choice
    assert [(e.kind, e.target, e.carried_from) for e in sp(at).edits] == [("pin", PINNED, PROMPT)]
    assert "of the previous prompt" not in offer_text(at)
    ok(at.button(key="run").click().run())
    assert sp(at).final_selection_ids[0] == PINNED and you_decided(sp(at)) == {PINNED}
    edits = next(d.value for d in at.dataframe if "made for" in d.value.columns)
    assert edits["made for"].tolist() == [f"carried from “{PROMPT[:39]}…”"]


def test_applied_before_the_new_prompt_runs_they_apply_when_it_runs_and_typing_back_restores_nothing():
    at = pinned_pass()
    at.text_area(key=S.PROMPT).set_value(OTHER).run()
    ok(at.button(key="edits_offer_apply").click().run())
    assert "**1 edit of “" in offer_text(at) and "will apply to this prompt**" in offer_text(at)
    ok(at.button(key="run").click().run())
    assert [(e.target, e.carried_from) for e in sp(at).edits] == [(PINNED, PROMPT)]
    assert sp(at).final_selection_ids[0] == PINNED

    # a third prompt, run without them; then the second prompt's text again: its edits are
    # offered, said to be from the last time it ran, and not restored unless applied
    at.text_area(key=S.PROMPT).set_value("What is N3?").run()
    ok(at.button(key="run").click().run())
    assert sp(at).edits == []
    at.text_area(key=S.PROMPT).set_value(OTHER).run()
    assert ("**1 edit made the last time this prompt ran — not applied to this pass; apply it "
            "here**") in offer_text(at)
    ok(at.button(key="run").click().run())
    assert sp(at).user_text == OTHER and sp(at).edits == [] and PINNED not in you_decided(sp(at))
    ok(at.button(key="edits_offer_dismiss").click().run())
    assert "of the previous prompt" not in offer_text(at)

    at.text_area(key=S.PROMPT).set_value(PROMPT).run()  # nothing left to offer
    assert not [b for b in at.button if b.key == "edits_offer_apply"]


def test_an_out_of_date_pass_is_folded_labelled_and_not_offered_for_copying():
    at = pinned_pass()
    assert any(PROMPT in c.value for c in at.code)  # the current prompt_ready, with its copy button
    at.text_area(key=S.PROMPT).set_value(OTHER).run()
    old = next(e for e in at.expander if e.label.startswith("Out of date: the prompt text changed — "
                                                            "prompt_ready of the earlier pass"))
    assert old.proto.expanded is False
    assert any(PROMPT in t.value for t in old.text)  # shown as text: no copy button
    assert not any(PROMPT in c.value for c in at.code)
    answer = next(e for e in at.expander if e.label.startswith(
        "Out of date: the prompt text changed — the answer of the earlier pass"))
    assert answer.proto.expanded is False
    tables = [e for e in at.expander if e.label.startswith(("Retrieval —", "ReRanker —",
                                                             "A3 Gate —", "A4 Condenser —"))]
    assert len(tables) == 4
    assert all(e.label.endswith(" · out of date: the prompt text changed")
               and e.proto.expanded is False for e in tables), [e.label for e in tables]
    # the Export tab offers the old prompt_ready only as out of date
    open_tab(at, "Runs")
    labels = [b.proto.label for b in at.get("download_button")]
    assert "Download the out-of-date prompt_ready (Markdown)" in labels
    assert "Download prompt_ready (Markdown)" not in labels
