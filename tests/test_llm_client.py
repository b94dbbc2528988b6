"""The LLM client against a real HTTP server on 127.0.0.1 that speaks the OpenAI API."""

import pytest
from pydantic import BaseModel

from ragstream.backends.llm import AgentOutputError, LLMClient, LLMError, StreamResult
from ragstream.config import load_config
from tests.fake_openai import Reply
from tests.llm_support import llm_config

KEY = "sk-secret-0123456789abcdef"


class Pick(BaseModel):
    colour: str
    n: int


def client(server, **settings) -> LLMClient:
    cfg = llm_config(load_config(env={}), server, **settings)
    return LLMClient(cfg.settings.llm, environ={"OPENAI_API_KEY": KEY})


MSG = [{"role": "user", "content": "pick"}]


def test_json_mode_and_validation(server):
    server.script(Reply.json({"colour": "red", "n": 3}))
    result = client(server).chat_json(MSG, Pick, max_tokens=50)
    assert result.value == Pick(colour="red", n=3) and not result.repaired
    req = server.requests[-1]
    assert req["response_format"] == {"type": "json_object"}
    assert req["temperature"] == 0.0 and req["model"] == "test-model"
    assert req.authorization == f"Bearer {KEY}"


def test_one_repair_attempt_then_error(server):
    server.script(Reply.text("not json {"), Reply.json({"colour": "blue", "n": 1}))
    result = client(server).chat_json(MSG, Pick)
    assert result.repaired and result.value.colour == "blue"
    repair = server.requests[-1].messages
    assert repair[-2] == {"role": "assistant", "content": "not json {"}
    assert "not valid" in repair[-1]["content"] and "colour" in repair[-1]["content"]

    server.reset()
    server.script(Reply.json({"colour": "red"}), Reply.text("still not json"))
    with pytest.raises(AgentOutputError, match="after one repair attempt"):
        client(server).chat_json(MSG, Pick)
    assert server.calls == 2


def test_429_then_success_is_retried(server):
    server.script(Reply.error(429, "rate limited", retry_after=0.01), Reply.json({"colour": "x", "n": 0}))
    assert client(server).chat_json(MSG, Pick).value.colour == "x"
    assert server.calls == 2


def test_repeated_500s_stop_after_three_tries(server):
    server.script(*[Reply.error(500, "boom")] * 5)
    with pytest.raises(LLMError, match="HTTP 500.*after 3 tries"):
        client(server).chat_json(MSG, Pick)
    assert server.calls == 3


def test_other_4xx_is_not_retried(server):
    server.script(Reply.error(400, "bad request"), Reply.json({"colour": "x", "n": 0}))
    with pytest.raises(LLMError, match="HTTP 400"):
        client(server).chat_json(MSG, Pick)
    assert server.calls == 1


def test_timeout_and_dropped_connection_are_retried(server):
    server.script(Reply.delay(1.0, Reply.json({"colour": "late", "n": 0})),
                  Reply.drop(), Reply.json({"colour": "ok", "n": 2}))
    assert client(server, timeout_s=0.3).chat_json(MSG, Pick).value.colour == "ok"
    assert server.calls == 3

    server.reset()
    server.script(*[Reply.delay(1.0, Reply.text("late"))] * 3)
    with pytest.raises(LLMError, match="did not answer within 0.3 s"):
        client(server, timeout_s=0.3, max_attempts=2).chat_json(MSG, Pick)


def test_key_never_appears_in_errors(server):
    server.script(Reply.error(401, f"Incorrect API key provided: {KEY}"))
    with pytest.raises(LLMError) as err:
        client(server).chat_json(MSG, Pick)
    assert KEY not in str(err.value) and KEY[:8] not in str(err.value)
    assert "HTTP 401" in str(err.value)


def test_streaming_yields_pieces_and_usage(server):
    server.script(Reply.text("Hybrid search fuses BM25 and dense results [1]."))
    result = StreamResult()
    pieces = list(client(server).stream_chat(MSG, result))
    assert len(pieces) > 3
    assert "".join(pieces) == result.text == "Hybrid search fuses BM25 and dense results [1]."
    assert result.usage.completion_tokens > 0 and result.first_token_ms is not None
    assert server.requests[-1]["stream"] is True


def test_unreachable_endpoint(tmp_path):
    cfg = load_config(env={"RAGSTREAM_LLM_BASE_URL": "http://127.0.0.1:9/v1",
                           "RAGSTREAM_LLM_MODEL": "m"})
    settings = cfg.settings.llm.model_copy(update={"backoff_base_s": 0.01, "backoff_max_s": 0.02,
                                                   "timeout_s": 1.0})
    with pytest.raises(LLMError, match="Cannot reach"):
        LLMClient(settings, environ={}).chat_json(MSG, Pick)


def test_a_200_that_is_not_a_chat_completion(server):
    server.script(Reply.raw(200, "<html>gateway</html>", content_type="text/html"))
    with pytest.raises(LLMError, match="not a chat completion"):
        client(server).chat_json(MSG, Pick)
    server.script(Reply.raw(200, '{"choices": [', content_type="application/json"))
    with pytest.raises(LLMError, match="not valid JSON"):
        client(server).chat_json(MSG, Pick)
