"""The page's LLM block (Streamlit's AppTest): the endpoint's state in the sidebar, in words,
and the "Test connection" button; against a loopback port where nothing listens and the
scripted OpenAI server (``tests/fake_openai.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from ragstream.interfaces.ui import llm_status
from ragstream.interfaces.ui import state as S
from tests.fake_openai import FakeOpenAI, Reply
from tests.llm_support import every_agent
from tests.servers import free_port

APP = str(Path(__file__).resolve().parents[1] / "ui_streamlit.py")
KEY = "sk-page-status-secret-24680"


@pytest.fixture
def page(kb_engine, tmp_path):
    """``page(base_url)``: the page over the session's index, its LLM endpoint at
    ``base_url``, drawn once."""
    import streamlit as st

    mp = pytest.MonkeyPatch()

    def open_page(base_url: str) -> AppTest:
        mp.setenv("RAGSTREAM_INDEX_DIR", str(kb_engine.cfg.index_dir))
        mp.setenv("RAGSTREAM_UPLOADS_DIR", str(tmp_path / "uploads"))
        mp.setenv("RAGSTREAM_LLM_BASE_URL", base_url)
        mp.setenv("RAGSTREAM_LLM_MODEL", "test-model")
        mp.setenv("OPENAI_API_KEY", KEY)
        st.cache_resource.clear()  # a new engine, with a new client for this endpoint
        at = AppTest.from_file(APP, default_timeout=300).run()
        assert not at.exception, at.exception
        return at

    yield open_page
    st.cache_resource.clear()
    mp.undo()


def sidebar(at: AppTest, kind: str) -> list[str]:
    return [e.value for e in getattr(at.sidebar, kind)]


def test_an_unreachable_endpoint_is_shown_with_its_reason_and_tested(page):
    url = f"http://127.0.0.1:{free_port()}/v1"
    at = page(url)
    assert any("Not asked yet" in c and url in c and "test-model" in c
               for c in sidebar(at, "caption")), sidebar(at, "caption")
    assert not sidebar(at, "error")

    at.button(key=llm_status.TEST).click().run()
    assert not at.exception, at.exception
    errors = sidebar(at, "error")
    assert any(e.startswith("**Not reachable**") for e in errors), errors
    tested = [e for e in errors if e.startswith("Test connection (")]
    assert len(tested) == 1 and "connection refused" in tested[0], errors
    assert "RAGSTREAM_LLM_BASE_URL" in tested[0]
    assert sidebar(at, "warning") == [
        f"Answering offline because nothing listens at {url}: the agents run their rules and "
        "answers are extractive until it answers again."]
    # the test's finding is the last error: said once, not twice
    assert not any(c.startswith("Last error:") for c in sidebar(at, "caption"))

    # an auto run on the page: the first agent that asks finds it down, the rest say so
    at.text_area(key=S.PROMPT).set_value("How does reranking work?").run()
    at.button(key="run").click().run()
    assert not at.exception, at.exception
    sp = at.session_state[S.SP]
    reasons = [m.reason for m in sp.extras.agent_modes.values() if m.fallback]
    assert sum(r.startswith("ran offline at once") for r in reasons) >= 2, reasons
    assert sp.answer.mode == "extractive" and "not tried again" in sp.answer.mode_reason
    assert any(e.startswith("**Not reachable**") for e in sidebar(at, "error"))
    # the pass's failure (three tries) is now the last error, beside the earlier test's
    assert any(c.startswith("Last error: Cannot reach") and "(3 tries)" in c
               for c in sidebar(at, "caption")), sidebar(at, "caption")
    assert KEY not in "".join(sidebar(at, "caption") + sidebar(at, "error"))


def test_a_reachable_endpoint_is_shown_reachable_after_the_test(page):
    with FakeOpenAI(models=["test-model", "other-model"],
                    responder=every_agent({"reply": Reply.text("ok")})) as server:
        at = page(server.base_url)
        server.script(Reply.text("OK"))
        at.button(key=llm_status.TEST).click().run()
        assert not at.exception, at.exception
        successes = sidebar(at, "success")
        assert any(s.startswith("**Reachable**") for s in successes), successes
        tested = [s for s in successes if s.startswith("Test connection (")]
        assert len(tested) == 1 and "model test-model replied" in tested[0]
        assert "it lists 2 models" in tested[0]
        assert not sidebar(at, "warning") and not sidebar(at, "error")
        assert server.chat_requests[-1].authorization == f"Bearer {KEY}"

        # the model goes away: the next test says which setting to change
        server.script(Reply.error(404, "The model `test-model` does not exist",
                                  code="model_not_found"))
        at.button(key=llm_status.TEST).click().run()
        warning = sidebar(at, "warning")
        assert warning and warning[0].startswith(
            "Answering offline because the endpoint has no model 'test-model'")
        tested = [e for e in sidebar(at, "error") if e.startswith("Test connection (")]
        assert "RAGSTREAM_LLM_MODEL" in tested[0] and "It serves: other-model, test-model" \
            in tested[0]
