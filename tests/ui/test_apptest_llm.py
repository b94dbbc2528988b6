"""The page with an LLM endpoint configured: the scripted OpenAI server on loopback."""

from pathlib import Path

import pytest
from streamlit.runtime.forward_msg_queue import ForwardMsgQueue
from streamlit.testing.v1 import AppTest

from ragstream.answering.answer import FALLBACK_NOTICE
from ragstream.interfaces.ui import actions
from ragstream.interfaces.ui import state as S
from tests.fake_openai import FakeOpenAI, Reply
from tests.llm_support import every_agent
from tests.ui.tabs import open_tab

APP = str(Path(__file__).resolve().parents[2] / "ui_streamlit.py")
KEY = "sk-page-secret-987654321"
ANSWER = "Start it with chroma run [1]. Then point RAGstream at it [2]. See also [99]."
CURSOR = " ▌"
#: the streamed answer's reply; a test may swap it
STREAM = {"reply": Reply.text(ANSWER)}


route = every_agent(STREAM)


@pytest.fixture(scope="module")
def server():
    with FakeOpenAI(models=["test-model"], responder=route) as s:
        yield s


@pytest.fixture(scope="module", autouse=True)
def app_env(kb_engine, server, tmp_path_factory):
    import streamlit as st

    mp = pytest.MonkeyPatch()
    mp.setenv("RAGSTREAM_INDEX_DIR", str(kb_engine.cfg.index_dir))
    mp.setenv("RAGSTREAM_UPLOADS_DIR", str(tmp_path_factory.mktemp("llm-page") / "uploads"))
    mp.setenv("RAGSTREAM_LLM_BASE_URL", server.base_url)
    mp.setenv("RAGSTREAM_LLM_MODEL", "test-model")
    mp.setenv("OPENAI_API_KEY", KEY)
    st.cache_resource.clear()
    yield
    st.cache_resource.clear()
    mp.undo()


@pytest.fixture
def drawn():
    """Every Markdown body the page sends to the browser, in order, including the ones a
    later rerun replaces (AppTest's element tree only keeps the last run's)."""
    bodies: list[str] = []

    def record(msg) -> None:
        if (msg.WhichOneof("type") == "delta" and msg.delta.WhichOneof("type") == "new_element"
                and msg.delta.new_element.WhichOneof("type") == "markdown"):
            bodies.append(msg.delta.new_element.markdown.body)

    ForwardMsgQueue.on_before_enqueue_msg(record)
    yield bodies
    ForwardMsgQueue.on_before_enqueue_msg(None)
    STREAM["reply"] = Reply.text(ANSWER)


def streamed_texts(bodies: list[str]) -> list[str]:
    """The growing answer texts drawn while it streamed (the cursor marks them)."""
    return [b[:-len(CURSOR)] for b in bodies if b.endswith(CURSOR)]


def test_page_runs_every_agent_through_the_llm_and_streams_the_answer(server, drawn, caplog):
    at = AppTest.from_file(APP, default_timeout=300).run()
    open_tab(at, "Evidence")
    # the citation checks off for this session: the model's answer is kept, [99] and all
    at.session_state[S.OVERRIDES] = {"settings.answer.check_citations": False}
    at.text_area(key=S.PROMPT).set_value("How do I start a Chroma server?").run()
    at.button(key="run").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    sp = at.session_state[S.SP]
    modes = sp.extras.agent_modes
    for agent in ("A2_PromptShaper", "A3_NLI_Gate", "A4_Condenser"):
        assert modes[agent].mode == "llm", (agent, modes[agent])
    # the prompt states no format: A5 has nothing to ask the model and says so
    assert modes["A5_Format_Enforcer"].reason.startswith("no model call needed")
    assert sp.body["system"] == "assistant"  # "wizard" is out of enum: clamped to the default
    ans = sp.answer
    assert ans.mode == "llm" and ans.model == "test-model" and ans.text == ANSWER
    # the answer was drawn as it streamed in: growing prefixes of it behind the cursor, then
    # the whole text; after the rerun the answer section shows it again
    growing = streamed_texts(drawn)
    assert len(growing) > 3 and all(ANSWER.startswith(t) for t in growing)
    assert [len(t) for t in growing] == sorted({len(t) for t in growing})
    start = drawn.index("#### Answer")
    assert drawn[start + 1:].index(ANSWER) > drawn[start + 1:].index(growing[-1] + CURSOR)
    assert any(m.value == ANSWER for m in at.markdown)
    # the answer's worker thread made no Streamlit call (it has no script-run context)
    assert not any(actions.ANSWER_THREAD in r.getMessage() for r in caplog.records)
    assert [c.n for c in ans.sources] == [1, 2] and ans.invalid_citations == [99]
    assert any("[99] is an invalid citation" in w.value for w in at.warning)
    assert any("Endpoint" in c.value and server.base_url in c.value for c in at.caption)
    # the key went to the server, and nowhere into the state or the page
    assert all(r.authorization == f"Bearer {KEY}" for r in server.chat_requests)
    assert KEY not in sp.model_dump_json()
    assert not any(KEY in str(m.value) for m in at.markdown) and not any(KEY in b for b in drawn)
    # the Evidence tab links each sentence through its [n] ([99] shown, disabled); the model's
    # own words cite the chunk without being one of its sentences: listed, not highlighted
    assert at.button(key="ev_A3_99").disabled
    at.button(key="ev_A1_1").click().run()
    assert at.session_state[S.EVIDENCE_CHUNK] == sp.final_selection_ids[0]
    assert any("A1 cites it without quoting it" in m.value for m in at.markdown), \
        [m.value for m in at.markdown if "chunk" in m.value]


def test_page_shows_the_fallback_notice_when_the_llm_stream_breaks(server, drawn):
    STREAM["reply"] = Reply.text(ANSWER, cut_after=3)
    at = AppTest.from_file(APP, default_timeout=300).run()
    at.text_area(key=S.PROMPT).set_value("How do I start a Chroma server?").run()
    at.button(key="run").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    ans = at.session_state[S.SP].answer
    assert ans.mode == "extractive" and ans.error
    growing = streamed_texts(drawn)
    assert growing and growing[0].startswith("Start it ")
    assert any(FALLBACK_NOTICE in t for t in growing)
    assert any(ans.error in c.value for c in at.caption)
    assert any(m.value.strip() == ans.text.strip() for m in at.markdown)


def test_page_names_the_agent_waiting_for_the_model_and_labels_an_uncited_answer(server, drawn):
    progress: list[str] = []

    def record(msg) -> None:
        if (msg.WhichOneof("type") == "delta" and msg.delta.WhichOneof("type") == "new_element"
                and msg.delta.new_element.WhichOneof("type") == "progress"):
            el = msg.delta.new_element.progress
            progress.append(f"{el.value}|{el.text}")

    def slow_a3(body):
        reply = route(body)
        return Reply.delay(1.2, reply) if "A3_NLI_Gate" in body["messages"][0]["content"] else reply

    ForwardMsgQueue.on_before_enqueue_msg(record)
    server.responder = slow_a3
    STREAM["reply"] = Reply.text("Chroma is a database that runs as a server. It is fast.")
    try:
        at = AppTest.from_file(APP, default_timeout=300).run()
        at.text_area(key=S.PROMPT).set_value("How do I start a Chroma server?").run()
        at.button(key="run").click().run()
    finally:
        ForwardMsgQueue.on_before_enqueue_msg(None)
        server.responder = route
    assert not at.exception and not at.error, [e.value for e in at.error]
    waits = [p for p in progress if "A3 Gate is calling the model test-model" in p]
    assert waits and waits[0].split("|")[1].startswith("Running A3 Gate (")
    # honest progress: it ends at 100% and says so
    assert progress[-1] == "100|All 8 stages done."
    ans = at.session_state[S.SP].answer
    # the citation checks set the uncited answer aside: the extractive one is the answer, the
    # label says why (naming the setting and its value) and the model's words are folded away
    uncited = "Chroma is a database that runs as a server. It is fast."
    assert ans.mode == "extractive" and ans.set_aside == uncited
    assert not ans.unsupported and not ans.extractive_text
    assert any(w.value.startswith("**The model's answer was set aside** — no sentence of it "
                                  "cites") and "3 words or more count: answer.min_sentence_words"
               in w.value for w in at.warning), [w.value for w in at.warning]
    assert any(m.value.strip() == ans.text.strip() for m in at.markdown)
    expander = next(e for e in at.expander if e.label == "The model's answer (set aside)")
    assert any(m.value.strip() == uncited for m in expander.markdown), \
        [m.value for m in expander.markdown]
