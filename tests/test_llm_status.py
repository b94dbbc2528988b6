"""A failing LLM endpoint is said once, in words that name the setting to change.

Against real endpoints on loopback: a port where nothing listens (connection refused), and
the scripted OpenAI server (``tests/fake_openai.py``) made to drop connections, answer 401 or
404 ``model_not_found``, or sleep past the timeout. The pass is the engine's: its stages and
its answer. Requests are counted twice over: by the client (every HTTP request its ``httpx``
client sends, each retry included) and, for the scripted server, by the server itself.
"""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from ragstream.backends.llm import EndpointDownError, LLMClient, LLMError, one_pass
from ragstream.common.config import load_config
from ragstream.workbench.engine import Engine
from tests.fake_openai import FakeOpenAI, Reply
from tests.llm_support import every_agent, with_llm
from tests.servers import free_port

KEY = "sk-status-secret-0123456789abcdef"
QUESTION = "How does reranking work?"
MSG = [{"role": "user", "content": "pick"}]
SETTINGS = ("RAGSTREAM_LLM_BASE_URL", "RAGSTREAM_LLM_MODEL", "OPENAI_API_KEY", "llm.timeout_s")


class Pick(BaseModel):
    colour: str


def refused_url() -> str:
    """The API root at a loopback port where nothing listens."""
    return f"http://127.0.0.1:{free_port()}/v1"


def client_at(base_url: str, environ: dict[str, str] | None = None, **settings) -> LLMClient:
    cfg = load_config(env={"RAGSTREAM_LLM_BASE_URL": base_url,
                           "RAGSTREAM_LLM_MODEL": "test-model"})
    values = {"timeout_s": 2.0, **settings}
    return LLMClient(cfg.settings.llm.model_copy(update=values),
                     environ={"OPENAI_API_KEY": KEY} if environ is None else environ)


def engine_at(kb_engine: Engine, base_url: str, **settings) -> Engine:
    cfg = kb_engine.cfg.with_overrides({
        "settings.llm.base_url": base_url, "settings.llm.model": "test-model",
        "settings.llm.timeout_s": 2.0,
        **{f"settings.llm.{k}": v for k, v in settings.items()}})
    return Engine(cfg, services=with_llm(kb_engine.services, cfg, {"OPENAI_API_KEY": KEY}))


def model_records(sp) -> dict[str, str]:
    """The reason of every agent that wanted the model and fell back to its rules."""
    return {name: m.reason for name, m in sp.extras.agent_modes.items() if m.fallback}


def dropping_until_up():
    """A responder for the scripted server that drops every connection while ``down["now"]``
    (the second item) is True, then answers every agent's request; and that switch."""
    route = every_agent({"reply": Reply.text("Reranking scores each chunk against the "
                                             "question [1].")})
    down = {"now": True}

    def respond(body: dict) -> Reply:
        return Reply.drop() if down["now"] else route(body)

    return respond, down


# --------------------------------------------------------------------------- one pass


def test_a_refused_endpoint_is_tried_once_per_pass_and_every_later_stage_says_why(kb_engine):
    engine = engine_at(kb_engine, refused_url(), max_attempts=3)
    llm = engine.services.llm
    sp, answer = engine.answer(engine.run(QUESTION))

    assert llm.requests == 3  # one series: the first call's three tries, nothing after it
    reasons = model_records(sp)
    failed = [n for n, r in reasons.items() if r.startswith("LLM mode failed")]
    at_once = [n for n, r in reasons.items() if r.startswith("ran offline at once")]
    assert len(failed) == 1 and len(at_once) >= 2, reasons
    for reason in reasons.values():
        assert "connection refused" in reason and "RAGSTREAM_LLM_BASE_URL" in reason
    for name in at_once:
        assert "failed earlier in this pass, not tried again" in reasons[name]
    # the answer belongs to the pass: offline too, without a request, and it says so
    assert answer.mode == "extractive"
    assert "not tried again" in answer.mode_reason and "connection refused" in answer.mode_reason
    assert llm.status.state == "failing" and llm.status.problem == "refused"

    # the next pass tries again (no lasting breaker): one more series
    engine.answer(engine.run(QUESTION))
    assert llm.requests == 6


def test_an_endpoint_that_comes_back_is_used_by_the_next_pass(kb_engine):
    respond, down = dropping_until_up()

    with FakeOpenAI(models=["test-model"], responder=respond) as server:
        engine = engine_at(kb_engine, server.base_url, max_attempts=3)
        sp, answer = engine.answer(engine.run(QUESTION))
        # the server saw one series of chat requests (the first call and its retries)
        assert server.calls == 3 == engine.services.llm.requests
        reasons = model_records(sp)
        assert sum(r.startswith("ran offline at once") for r in reasons.values()) >= 2, reasons
        assert answer.mode == "extractive" and "not tried again" in answer.mode_reason
        assert engine.services.llm.status.state == "failing"

        down["now"] = False
        sp, answer = engine.answer(engine.run(QUESTION))
        assert not model_records(sp), model_records(sp)
        llm_agents = [n for n, m in sp.extras.agent_modes.items() if m.mode == "llm"]
        assert len(llm_agents) >= 3, sp.extras.agent_modes
        # the answer asked the model too (its reply is then checked like any other)
        assert sum(r.stream for r in server.chat_requests) == 1
        assert "not tried again" not in answer.mode_reason and answer.usage.completion_tokens
        assert server.calls > 3 + len(llm_agents)
        assert engine.services.llm.status.state == "reachable"
        assert engine.services.llm.status.message == ""


def test_stages_run_one_by_one_go_on_with_the_pass_until_the_endpoint_answers(kb_engine):
    """Stepping through the stages by hand is one pass too: after A2's call fails, the next
    stages run offline at once; once a check gets an answer, the next stage asks again."""
    from ragstream.stages import controller

    respond, down = dropping_until_up()

    with FakeOpenAI(models=["test-model"], responder=respond) as server:
        engine = engine_at(kb_engine, server.base_url, max_attempts=2)
        llm = engine.services.llm
        sp = engine.new(QUESTION)
        for name in controller.STAGE_NAMES[:5]:  # A0, A2, Retrieval, ReRanker, A3
            sp = engine.run_stage(sp, name)
        assert server.calls == 2 == llm.requests  # A2's call and its retry, nothing after
        assert model_records(sp)["A3_NLI_Gate"].startswith("ran offline at once")
        # the endpoint comes back and a check says so: the next stage asks the model
        down["now"] = False
        llm.check()  # (the scripted server answers only the agents' requests: a 400 here)
        assert llm.status.state == "reachable"
        sp = engine.run_stage(sp, "A4_Condenser")
        assert sp.extras.agent_modes["A4_Condenser"].mode == "llm", sp.extras.agent_modes
        assert server.calls > 2


def test_within_a_pass_a_failed_endpoint_is_not_asked_again_outside_it_is():
    llm = client_at(refused_url(), max_attempts=2)
    with one_pass() as state:
        with pytest.raises(LLMError) as first:
            llm.chat_json(MSG, Pick)
        assert llm.requests == 2 and state.failure is first.value
        with pytest.raises(EndpointDownError, match="not tried again: Cannot reach"):
            llm.chat_json(MSG, Pick)
        assert llm.requests == 2
    with pytest.raises(LLMError, match="Cannot reach"):  # a new pass (or none) asks again
        llm.chat_json(MSG, Pick)
    assert llm.requests == 4


# --------------------------------------------------------------------------- each failure


def named(message: str) -> set[str]:
    """Which of the four settings a message names."""
    return {s for s in SETTINGS if s in message}


def test_each_failure_names_its_own_setting_and_never_the_key(server):
    cases: dict[str, LLMError] = {}

    server.script(Reply.error(404, "The model `test-model` does not exist or you do not have "
                                   "access to it.", code="model_not_found"))
    llm = client_at(server.base_url, structured_output="auto")
    with pytest.raises(LLMError) as err:
        llm.chat_json(MSG, Pick)
    cases["model"] = err.value
    assert server.calls == 1  # an unknown model is not a refused request form: no step-down

    server.reset()
    server.script(Reply.error(401, f"Incorrect API key provided: {KEY[:8]}...{KEY[-4:]}"))
    with pytest.raises(LLMError) as err:
        client_at(server.base_url, structured_output="json_schema").chat_json(MSG, Pick)
    cases["key"] = err.value

    server.reset()
    server.script(Reply.delay(2.0, Reply.json({"colour": "late"})))
    with pytest.raises(LLMError) as err:
        client_at(server.base_url, structured_output="json_schema", timeout_s=0.3,
                  max_attempts=1).chat_json(MSG, Pick)
    cases["timeout"] = err.value

    with pytest.raises(LLMError) as err:
        client_at(refused_url(), max_attempts=1).chat_json(MSG, Pick)
    cases["refused"] = err.value

    expected = {"model": {"RAGSTREAM_LLM_MODEL"}, "key": {"OPENAI_API_KEY"},
                "timeout": {"llm.timeout_s"}, "refused": {"RAGSTREAM_LLM_BASE_URL"}}
    for problem, error in cases.items():
        message = str(error)
        assert error.problem == problem, message
        assert named(message) == expected[problem], message
        assert KEY not in message and KEY[:8] not in message and KEY[-4:] not in message
    assert "has no model 'test-model'" in str(cases["model"])
    assert "refused the API key (HTTP 401" in str(cases["key"])
    assert "did not answer within 0.3 s" in str(cases["timeout"])
    assert "connection refused, nothing listens there" in str(cases["refused"])


def test_a_missing_key_is_named_as_missing(server):
    server.script(Reply.error(401, "You didn't provide an API key."))
    with pytest.raises(LLMError, match=r"no key is sent: \$OPENAI_API_KEY is not set"):
        client_at(server.base_url, environ={}, structured_output="json_schema").chat_json(MSG, Pick)


def test_a_failure_in_the_answer_names_the_answer_model_setting(server):
    from ragstream.backends.llm import StreamResult

    server.script(Reply.error(404, "model 'big' not found, try pulling it first"))
    llm = client_at(server.base_url, answer_model="big")
    with pytest.raises(LLMError, match="has no model 'big'.*llm.answer_model") as err:
        list(llm.stream_chat(MSG, StreamResult()))
    assert "RAGSTREAM_LLM_MODEL" not in str(err.value)


# --------------------------------------------------------------------------- Test connection


def test_test_connection_reports_what_it_found(server):
    llm = client_at(server.base_url)
    assert llm.status.state == "unknown"
    server.script(Reply.text("OK"))
    check = llm.check()
    assert check.ok and check.models == ["test-model"], check.message
    assert "model test-model replied" in check.message
    assert llm.status.state == "reachable" and llm.status.models == ["test-model"]
    asked = server.chat_requests[-1]
    assert asked["max_tokens"] == 1 and asked.model == "test-model"
    assert asked.authorization == f"Bearer {KEY}"

    server.script(Reply.error(404, "The model `test-model` does not exist", code="model_not_found"))
    check = llm.check()
    assert not check.ok and "RAGSTREAM_LLM_MODEL" in check.message
    assert check.message.endswith("It serves: test-model.")
    assert llm.status.state == "failing" and llm.status.problem == "model"


def test_test_connection_to_nothing_says_so_without_retrying():
    llm = client_at(refused_url(), max_attempts=3)
    check = llm.check()
    assert not check.ok and "connection refused" in check.message
    assert "RAGSTREAM_LLM_BASE_URL" in check.message
    assert llm.requests == 1  # a check is one request, not a series
    assert llm.status.state == "failing" and llm.status.message == check.message
