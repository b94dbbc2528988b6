"""The Agents tab's replay, driven with AppTest against the scripted OpenAI server on loopback:
edit a message of an agent's call, send it again, see the new reply and the decision it would
make, apply it (the page's out-of-date banner and re-run take over, and the re-run keeps the
edit); without an endpoint the tab says replay needs one and offers no send button."""

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from ragstream.interfaces.ui import inspector
from ragstream.interfaces.ui import state as S
from ragstream.stages import controller
from ragstream.workbench.engine import Engine
from ragstream.workbench.replay import NEEDS_ENDPOINT
from tests.fake_openai import FakeOpenAI, Reply
from tests.llm_support import every_agent, llm_config
from tests.llm_support import with_llm as llm_services
from tests.ui.tabs import open_tab

APP = str(Path(__file__).resolve().parents[2] / "ui_streamlit.py")
PROMPT = "Task: How do I start a Chroma server?\nFormat: bullet points"
A2 = "A2_PromptShaper"
#: what the edited message asks for; the scripted model then answers another tone
ASK = "Please answer it formally."
routes = every_agent({"reply": Reply.text("Start it with chroma run [1].")})


def a2_values(kb_engine) -> tuple[dict, str]:
    """A2's reply (each field's first value) and another tone."""
    fields = kb_engine.cfg.agents.A2_PromptShaper.fields
    first = {name: field.values[0] for name, field in fields.items()} | {"confidence": "low"}
    return first, fields["tone"].values[1]


@pytest.fixture(scope="module")
def server(kb_engine):
    first, tone = a2_values(kb_engine)

    def route(body: dict) -> Reply:
        if not body.get("stream") and "A2_PromptShaper" in body["messages"][0]["content"]:
            return Reply.json(first | {"tone": tone} if ASK in body["messages"][-1]["content"]
                              else first)
        return routes(body)

    with FakeOpenAI(models=["test-model"], responder=route) as s:
        yield s


@pytest.fixture
def with_endpoint(llm_page_env, server):
    llm_page_env.setenv("RAGSTREAM_LLM_BASE_URL", server.base_url)
    llm_page_env.setenv("RAGSTREAM_LLM_MODEL", "test-model")
    server.reset()
    yield server
    server.reset()


def agents_tab(at: AppTest):
    return next(t for t in at.tabs if t.label == "Agents")


def keys(elements) -> set:
    return {e.key for e in elements}


def test_edit_a_message_send_it_again_and_apply_the_decision(with_endpoint, kb_engine):
    server = with_endpoint
    first, tone = a2_values(kb_engine)
    at = AppTest.from_file(APP, default_timeout=300).run()
    open_tab(at, "Agents")
    at.text_area(key=S.PROMPT).set_value(PROMPT).run()
    at.button(key="run").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    sp = at.session_state[S.SP]
    assert sp.body["tone"] == first["tone"] and sp.answer is not None
    at = agents_tab(at).selectbox(key=S.INSPECT_AGENT).set_value(A2).run()

    # each message of A2's call in a text box, prefilled as sent
    fields = inspector.replay_fields(sp, A2, 0)
    (call,) = sp.extras.llm_calls[A2]
    assert [at.text_area(key=f.key).value for f in fields] == [m.content for m in call.messages]
    assert not keys(at.button) & {"replay_apply"}  # nothing sent yet: nothing to apply
    payload = json.loads(call.messages[1].content)
    payload["prompt"] += f" {ASK}"
    edited = json.dumps(payload)
    at.text_area(key=fields[1].key).set_value(edited).run()
    before = server.calls
    at.button(key="replay_send").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]

    # sent once, as edited; the new reply, parsed, and the decision it would make
    assert server.calls == before + 1
    assert server.chat_requests[-1].messages[-1]["content"] == edited
    tab = agents_tab(at)
    titles = [m.value for m in tab.markdown]
    assert any(t.startswith("**New reply") for t in titles)
    assert any(c.value == json.dumps(first | {"tone": tone}) for c in tab.code)  # the raw reply
    assert json.loads(tab.json[-1].value)["tone"] == tone  # the parsed reply
    lines = next(m.value for m in tab.markdown if m.value.startswith("- A2: "))
    assert f"- A2: tone {first['tone']} → {tone}" in lines
    assert at.session_state[S.SP].edits == []  # nothing changes until it is applied
    apply = at.button(key="replay_apply")
    assert apply.label == "Apply to A2 Prompt shaper" and not apply.disabled

    at = apply.click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    sp = at.session_state[S.SP]
    (edit,) = sp.edits
    assert (edit.kind, edit.target, edit.after, edit.stage) == ("field", "tone", tone, A2)
    assert controller.position(sp) == 0 and sp.resume_to is not None
    # the page's banner says what is out of date, and its re-run button takes over
    banner = " ".join(w.value for w in at.warning)
    assert "Your edits discarded the results from A2 Prompt shaper on" in banner
    assert at.button(key="resume").help.startswith("Re-run from A2 Prompt shaper")
    assert any("Applied to A2 Prompt shaper: 1 edit recorded as yours" in i.value for i in at.info)
    open_tab(at, "Chunk views")
    assert any("Out of date" in w.value for w in at.warning)  # the chunk tables' note
    assert "replay_apply" not in keys(at.button)  # the replay is forgotten once applied

    at = at.button(key="resume").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    sp = at.session_state[S.SP]
    assert sp.body["tone"] == tone and sp.extras.body_sources["tone"] == "you"
    assert controller.next_stage(sp) is None and not any("discarded" in w.value for w in at.warning)


def test_without_an_endpoint_the_tab_says_replay_needs_one(llm_page_env, server, kb_engine):
    # offline, before any model call
    at = AppTest.from_file(APP, default_timeout=300).run()
    open_tab(at, "Agents")
    tab = agents_tab(at)
    assert not tab.info  # one note says it all: no endpoint, so no model calls and no replay
    assert any("replaying a call needs the endpoint too" in c.value for c in tab.caption)
    assert "replay_send" not in keys(at.button)

    # a state whose agents called a model (run elsewhere), opened on a page without an endpoint
    cfg = llm_config(kb_engine.cfg, server)
    engine = Engine(cfg, llm_services(kb_engine.services, cfg))
    sp = engine.run(PROMPT, until=A2)
    assert sp.extras.llm_calls[A2]
    at = AppTest.from_file(APP, default_timeout=300)
    at.session_state[S.SP] = sp
    at.session_state[S.PROMPT] = sp.user_text
    at.run()
    assert not at.exception
    open_tab(at, "Agents")
    tab = agents_tab(at)
    assert tab.selectbox(key=S.INSPECT_AGENT).value == A2  # its calls are shown
    (note,) = tab.info
    assert note.value == NEEDS_ENDPOINT and "`llm.base_url`" in note.value
    assert not {"replay_send", "replay_apply"} & keys(at.button)
    assert not tab.text_area
