"""The page's Agents tab (the agent inspector), driven with AppTest: offline it says how to
turn LLM mode on; with the scripted OpenAI server on loopback it shows each agent stage's
figures, messages, raw reply and parsed result, a fallback's reason, and never the key."""

import json
from pathlib import Path

import pytest
from streamlit.runtime.forward_msg_queue import ForwardMsgQueue
from streamlit.testing.v1 import AppTest

from ragstream.interfaces.ui import inspector, views
from ragstream.interfaces.ui import state as S
from tests.fake_openai import FakeOpenAI, Reply
from tests.llm_support import every_agent
from tests.ui.tabs import open_tab

APP = str(Path(__file__).resolve().parents[2] / "ui_streamlit.py")
KEY = "sk-agents-tab-secret-112358132134"
PROMPT = "Task: How do I start a Chroma server?\nFormat: bullet points"
AGENTS = ["A2_PromptShaper", "A3_NLI_Gate", "A4_Condenser", "A5_Format_Enforcer"]
route = every_agent({"reply": Reply.text("Start it with chroma run [1].")})


def agent_of(body: dict) -> str:
    system = body["messages"][0]["content"]
    return next((a for a in AGENTS if a in system), "")


@pytest.fixture(scope="module")
def server():
    with FakeOpenAI(models=["test-model"], responder=route) as s:
        yield s


@pytest.fixture
def with_llm(llm_page_env, server):
    llm_page_env.setenv("RAGSTREAM_LLM_BASE_URL", server.base_url)
    llm_page_env.setenv("RAGSTREAM_LLM_MODEL", "test-model")
    llm_page_env.setenv("OPENAI_API_KEY", KEY)
    server.reset()
    yield server
    server.reset()


@pytest.fixture
def sent_to_browser():
    """Every message the page sends to the browser, as text (a later rerun's included)."""
    texts: list[str] = []
    ForwardMsgQueue.on_before_enqueue_msg(lambda msg: texts.append(str(msg)))
    yield texts
    ForwardMsgQueue.on_before_enqueue_msg(None)


def agents_tab(at: AppTest):
    return next(t for t in at.tabs if t.label == "Agents")


def run_page() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=300).run()
    at.text_area(key=S.PROMPT).set_value(PROMPT).run()
    at.button(key="run").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    return at


def test_offline_the_tab_says_how_to_turn_llm_mode_on(llm_page_env):
    at = run_page()
    open_tab(at, "Agents")
    tab = agents_tab(at)
    assert not tab.selectbox and not tab.code
    (caption,) = tab.caption
    assert "no LLM endpoint is configured" in caption.value and "`llm.base_url`" in caption.value


def test_the_tab_shows_each_agents_call_and_switches_between_them(with_llm, sent_to_browser):
    server = with_llm

    def echo_then_route(body: dict) -> Reply:
        # a server with plain JSON mode only: the client steps down to json_object, the form
        # with a repair round
        form = body.get("response_format") or {}
        if form.get("type") == "json_schema" or "schema" in form:
            return Reply.error(400, "response_format with a schema is not supported")
        # A2's first reply echoes the request's Authorization header (invalid: repaired)
        if agent_of(body) == "A2_PromptShaper" and len(body["messages"]) == 2:
            return Reply.text(f"The header you sent: {server.last_request.authorization}")
        if agent_of(body) == "A3_NLI_Gate":
            return Reply.text("I think chunks 5 to 8 are off-topic.")  # not JSON: falls back
        return route(body)

    server.responder = echo_then_route
    at = run_page()
    open_tab(at, "Agents")
    sp = at.session_state[S.SP]
    tab = agents_tab(at)
    select = tab.selectbox(key=S.INSPECT_AGENT)
    names = [views.stage_label(agent) for agent in AGENTS]  # each stage by its name
    assert select.options == names and select.value == "A5_Format_Enforcer"  # the latest
    overview = tab.dataframe[0].value
    assert list(overview["agent"]) == names
    assert list(overview["ran as"]) == ["LLM", "rules (LLM failed)", "LLM", "LLM"]

    # A5: its line, its two messages as the server received them, the reply and the result
    (a5_request,) = [r for r in server.chat_requests if agent_of(r.body) == "A5_Format_Enforcer"]
    line = next(m.value for m in tab.markdown if m.value.startswith("**A5 Format enforcer**"))
    usage = sp.extras.llm_usage["A5_Format_Enforcer"]
    assert "model `test-model`" in line and "first reply valid: yes" in line
    assert f"tokens in {usage.prompt_tokens:,} / out {usage.completion_tokens:,}" in line
    labels = [e.label for e in tab.expander]
    assert labels[0].startswith("1. system ·") and labels[1].startswith("2. user ·")
    assert tab.expander[0].code[0].value == a5_request.messages[0]["content"]
    assert json.loads(tab.expander[1].code[0].value) == json.loads(
        a5_request.messages[1]["content"])  # shown indented
    raw = sp.extras.llm_calls["A5_Format_Enforcer"][0].raw
    assert tab.code[-1].value == raw
    assert json.loads(tab.json[0].value) == sp.extras.llm_calls["A5_Format_Enforcer"][0].parsed
    assert not tab.warning

    # A3 fell back: the reason, the error, the reply it could not read, no parsed result
    at = tab.selectbox(key=S.INSPECT_AGENT).set_value("A3_NLI_Gate").run()
    tab = agents_tab(at)
    (warning,) = tab.warning
    assert warning.value.startswith("Fell back to rules: LLM mode failed")
    assert "not valid JSON" in warning.value
    assert any(c.value == "I think chunks 5 to 8 are off-topic." for c in tab.code)
    assert any("not valid JSON" in c.value for c in tab.code)  # the call's error
    assert not tab.json

    # A2 was repaired: four messages, the first reply among them with the key replaced
    at = tab.selectbox(key=S.INSPECT_AGENT).set_value("A2_PromptShaper").run()
    tab = agents_tab(at)
    line = next(m.value for m in tab.markdown if m.value.startswith("**A2 Prompt shaper**"))
    assert "first reply valid: no" in line and "repaired in a second round" in line
    assert len(tab.expander) == 4 and "first reply, sent back" in tab.expander[2].label
    assert tab.expander[2].code[0].value == "The header you sent: Bearer ***"
    assert json.loads(tab.json[0].value)["system"] == "wizard"

    # the key went to the server, and nowhere into the state, the export or the page
    assert {r.authorization for r in server.chat_requests} == {f"Bearer {KEY}"}
    assert KEY not in at.session_state[S.SP].to_json()
    assert sent_to_browser and not any(KEY in text for text in sent_to_browser)
    assert any("Bearer ***" in text for text in sent_to_browser)


def test_before_any_model_call_the_tab_says_which_agents_call_it(with_llm):
    at = AppTest.from_file(APP, default_timeout=300).run()
    open_tab(at, "Agents")
    assert not at.exception
    (caption,) = agents_tab(at).caption
    assert caption.value == inspector.NO_CALL_YET and not with_llm.chat_requests
