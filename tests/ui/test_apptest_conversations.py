"""The page's named conversations, driven in-process with AppTest over the session's temp
index: an answer becomes a turn that the next prompt's Retrieval finds (shown as a turn of the
conversation), forgetting it takes it out, and the sidebar starts and reopens conversations."""

import uuid
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from ragstream.interfaces.ui import grids, views
from ragstream.interfaces.ui import state as S
from ragstream.state.super_prompt import Chunk, Citation
from ragstream.workbench.conversations import chunk_id
from tests.ui.tabs import fresh, open_box, open_tab, sp

ROOT = Path(__file__).resolve().parents[2]
FIRST = "How do I start a Chroma server?"


@pytest.fixture(scope="module", autouse=True)
def app_env(page_env):
    """Every test here drives the page over the session's temp index."""




def ask(at: AppTest, prompt: str) -> AppTest:
    """Type ``prompt`` and auto-run it (every stage, then the answer)."""
    at.text_area(key=S.PROMPT).set_value(prompt).run()
    at.button(key="run").click().run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    return at


def start_named(at: AppTest) -> str:
    name = f"onboarding-{uuid.uuid4().hex[:6]}"
    at.text_input(key=S.CHAT_NEW_NAME).set_value(name)
    at.button(key="new_chat").click().run()
    assert not at.error, [e.value for e in at.error]
    assert at.session_state[S.CHAT] == name
    return name


def retrieved(at: AppTest) -> list[str]:
    return [r.chunk_id for r in sp(at).view("retrieval")]


def test_an_answered_turn_is_searched_by_the_next_prompt_until_it_is_forgotten():
    at = fresh()
    name = start_named(at)
    assert at.selectbox(key=S.CHAT).value == name
    ask(at, FIRST)
    turn = sp(at).extras.turn
    assert (turn.conversation, turn.turn, turn.remembered) == (name, 1, True)
    assert any(c.value.startswith(f"Turn 1 of conversation '{name}' remembered") for c in at.caption)
    # the answer's own turn does not make its pass out of date
    assert not [w for w in at.warning if "Out of date" in w.value], [w.value for w in at.warning]
    assert at.button(key="answer").disabled and "This pass is answered" in at.button(key="answer").help
    # the sidebar lists it, with its turn
    assert at.selectbox(key=S.CHAT).options[0] == name
    assert any(c.value.startswith("1 turn, 1 remembered: ") for c in at.caption)
    ask(at, "How do I stop the Chroma server I started?")
    turn_1 = chunk_id(name, 1)
    assert turn_1 in retrieved(at), retrieved(at)[:5]
    record = sp(at).extras.retrieval
    assert (record.conversation, record.conversation_chunks) == (name, 1)
    said = f"Knowledge base: **default** and conversation **{name}** (1 remembered turn searched)"
    assert any(c.value == said for c in at.caption), [c.value for c in at.caption]
    # the tables and the journey show it as a turn of the conversation
    row = next(r for r in views.view_rows(sp(at), "retrieval") if r["chunk id"] == turn_1)
    assert row[grids.SECTION].startswith("conversation · Turn 1 · ")
    at.session_state[S.JOURNEY_CHUNK] = turn_1
    open_tab(at, "Chunk journey")
    assert any(turn_1 in (s.value or "") for s in at.selectbox if s.key == S.JOURNEY_CHUNK)
    # the expander lists both turns, newest first, and which go into the next prompt
    label = next(e.label for e in at.expander if e.label.startswith("Conversation — "))
    assert label == "Conversation — 2 earlier turn(s); 2 go into the next prompt", label
    at.session_state[S.CONVERSATION_SHOWN] = True  # as opening it by hand
    open_box(at, S.CONVERSATION_OPEN)
    heads = [m.value for m in at.markdown if m.value.startswith("**Turn ")]
    assert heads[0].startswith("**Turn 2 · ") and heads[1].startswith("**Turn 1 · "), heads
    assert all("goes into the next prompt" in h and "remembered: Retrieval searches it" in h
               for h in heads), heads
    # forget turn 1: out of the memory, out of the next prompt, and this pass is out of date
    at.button(key="forget_turn_1").click().run()
    assert not at.error, [e.value for e in at.error]
    assert [t.turn for t in at.session_state[S.CONVERSATION]] == [2]
    assert any("Turn 1 of" in i.value and "forgotten" in i.value for i in at.info)
    heads = [m.value for m in at.markdown if m.value.startswith("**Turn 1 · ")]
    assert heads and "forgotten" in heads[0]
    assert at.button(key="forget_turn_1").disabled
    banner = " ".join(w.value for w in at.warning)
    assert "the conversation's memory changed" in banner, banner
    ask(at, "How do I restart the Chroma server?")
    assert turn_1 not in retrieved(at)
    assert chunk_id(name, 2) in retrieved(at)
    assert FIRST not in sp(at).prompt_ready.split("## Recent conversation")[-1]


def test_a_session_starts_in_a_new_conversation_of_its_own():
    at, other = fresh(), fresh()
    name = at.session_state[S.CHAT]
    assert name.startswith("chat-") and other.session_state[S.CHAT] != name
    assert at.selectbox(key=S.CHAT).options[0] == name
    assert any(c.value.startswith("New, of knowledge base 'default': no turns yet.")
               for c in at.caption)
    ask(at, FIRST)
    assert sp(at).extras.turn.conversation == name and sp(at).extras.turn.turn == 1
    ask(at, "How do I stop the Chroma server I started?")
    assert chunk_id(name, 1) in retrieved(at)
    assert sp(at).conversation_name == name


def test_clear_starts_a_new_conversation_and_the_old_one_can_be_reopened():
    at = fresh()
    name = start_named(at)
    ask(at, FIRST)
    at.button(key="clear_conversation").click().run()
    new = at.session_state[S.CHAT]
    assert new != name and new.startswith("chat-")
    assert at.session_state[S.CONVERSATION] == []
    options = at.selectbox(key=S.CHAT).options
    assert options[:2] == [new, name]
    ask(at, "What is BM25?")
    assert not any(i.startswith(f"conversation:{name}#") for i in retrieved(at))
    assert sp(at).extras.turn.conversation == new
    # back to the first one: its turn goes into the next prompt, and its memory is searched
    at.selectbox(key=S.CHAT).set_value(name).run()
    assert [t.user for t in at.session_state[S.CONVERSATION]] == [FIRST]
    ask(at, "And how do I stop it?")
    assert chunk_id(name, 1) in retrieved(at)
    assert FIRST in sp(at).prompt_ready
    assert sp(at).extras.turn.conversation == name and sp(at).extras.turn.turn == 2


def test_a_type_filter_leaves_the_turns_out_unless_it_names_conversation():
    at = fresh()
    name = start_named(at)
    ask(at, FIRST)
    at.multiselect(key=S.FILTER_TYPES_WIDGET).select("faq")
    at.button(key="FormSubmitter:filter_form-Apply filters").click().run()
    ask(at, "How do I stop the Chroma server I started?")
    assert chunk_id(name, 1) not in retrieved(at)
    at.multiselect(key=S.FILTER_TYPES_WIDGET).select("conversation")
    at.button(key="FormSubmitter:filter_form-Apply filters").click().run()
    at.button(key="run").click().run()
    assert at.session_state[S.FILTERS].doc_type == ("faq", "conversation")
    assert chunk_id(name, 1) in retrieved(at)


def test_a_conversation_chunk_reads_as_a_turn_of_its_conversation():
    chunk = Chunk(id=chunk_id("onboarding", 3), doc_id="conversation:onboarding",
                  text="Question: q\n\nAnswer: a", source="conversation", source_name="onboarding",
                  title="Conversation onboarding", heading_path=("Turn 3 · 2026-11-24 14:02",),
                  section="Turn 3", doc_type="conversation")
    assert views.section_label(chunk) == "conversation · Turn 3 · 2026-11-24 14:02"
    assert views.choice_label(chunk).startswith("conversation:onboarding#3 · conversation · Turn 3")
    cited = Citation(n=2, chunk_id=chunk.id, source="conversation", section=chunk.heading_label)
    assert views.citation_line(cited) == "[2] conversation onboarding § Turn 3 · 2026-11-24 14:02"
    doc = Citation(n=1, chunk_id="kb/faq.md#2", source="faq.md", section="Setup")
    assert views.citation_line(doc, bold=True) == "**[1]** faq.md § Setup"
