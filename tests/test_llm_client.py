"""The LLM client against a real HTTP server on 127.0.0.1 that speaks the OpenAI API.

Waits between retries are measured with the server's own timestamps. The openai client's
backoff waits 0.375-0.5 s before its first retry and 0.75-1 s before its second, unless the
server names a wait in ``Retry-After`` or ``retry-after-ms``.
"""

import logging

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
OK = Reply.json({"colour": "x", "n": 0})


def waits(server) -> list[float]:
    """Seconds between consecutive chat requests, as the server received them."""
    times = [r.received_at for r in server.chat_requests]
    return [later - earlier for earlier, later in zip(times, times[1:])]


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


def test_429_then_success_is_retried_after_a_backoff(server):
    server.script(Reply.error(429, "rate limited"), OK)
    assert client(server).chat_json(MSG, Pick).value.colour == "x"
    assert server.calls == 2
    assert waits(server)[0] >= 0.35


def test_repeated_500s_back_off_longer_and_stop_after_three_tries(server):
    server.script(*[Reply.error(500, "boom")] * 5)
    with pytest.raises(LLMError, match="HTTP 500.*after 3 tries"):
        client(server).chat_json(MSG, Pick)
    assert server.calls == 3
    first, second = waits(server)
    assert 0.35 <= first < second


def test_retry_after_from_the_server_is_honoured(server):
    server.script(Reply.error(429, "slow down", retry_after=1), OK)
    assert client(server).chat_json(MSG, Pick).value.colour == "x"
    assert server.calls == 2
    assert waits(server)[0] >= 1.0  # the server's 1 s, not the client's own 0.375-0.5 s

    server.reset()
    server.script(Reply.error(503, "busy", headers={"retry-after-ms": "50"}), OK)
    assert client(server).chat_json(MSG, Pick).value.colour == "x"
    assert 0.05 <= waits(server)[0] < 0.35  # the server's 50 ms, shorter than the backoff


def test_a_retry_after_over_two_minutes_is_not_waited_for(server):
    server.script(Reply.error(429, "quota exceeded", retry_after=600), OK)
    with pytest.raises(LLMError, match="HTTP 429: .*quota exceeded"):
        client(server).chat_json(MSG, Pick)
    assert server.calls == 1


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_other_4xx_is_not_retried(server, status):
    server.script(Reply.error(status, "not for you"), OK)
    with pytest.raises(LLMError, match=f"HTTP {status}: ") as err:
        client(server).chat_json(MSG, Pick)
    assert "tries" not in str(err.value)
    assert server.calls == 1


def test_timeout_and_dropped_connection_are_retried(server):
    server.script(Reply.delay(1.0, Reply.json({"colour": "late", "n": 0})),
                  Reply.drop(), Reply.json({"colour": "ok", "n": 2}))
    assert client(server, timeout_s=0.3).chat_json(MSG, Pick).value.colour == "ok"
    assert server.calls == 3

    server.reset()
    server.script(*[Reply.delay(1.0, Reply.text("late"))] * 3)
    with pytest.raises(LLMError, match=r"did not answer within 0.3 s \(2 tries\)"):
        client(server, timeout_s=0.3, max_attempts=2).chat_json(MSG, Pick)


def test_key_never_appears_in_errors_or_logs(server, caplog):
    server.script(Reply.error(500, f"key {KEY} is overloaded", headers={"retry-after-ms": "10"}),
                  Reply.error(401, f"Incorrect API key provided: {KEY}"))
    with caplog.at_level(logging.DEBUG), pytest.raises(LLMError) as err:
        client(server).chat_json(MSG, Pick)
    assert KEY not in str(err.value) and KEY[:8] not in str(err.value)
    assert "HTTP 401" in str(err.value) and server.calls == 2
    assert "Retrying request" in caplog.text  # the openai client's retry was logged ...
    assert KEY not in caplog.text and KEY[:8] not in caplog.text  # ... without the key


def test_streaming_yields_pieces_and_usage(server):
    server.script(Reply.text("Hybrid search fuses BM25 and dense results [1]."))
    result = StreamResult()
    pieces = list(client(server).stream_chat(MSG, result))
    assert len(pieces) > 3
    assert "".join(pieces) == result.text == "Hybrid search fuses BM25 and dense results [1]."
    assert result.usage.completion_tokens > 0 and result.first_token_ms is not None
    assert server.requests[-1]["stream"] is True


def test_a_streaming_request_is_retried(server):
    server.script(Reply.error(503, "busy", headers={"retry-after-ms": "10"}),
                  Reply.text("fine now"))
    result = StreamResult()
    assert "".join(client(server).stream_chat(MSG, result)) == "fine now"
    assert server.calls == 2 and result.usage.calls == 1


def test_unreachable_endpoint(tmp_path):
    cfg = load_config(env={"RAGSTREAM_LLM_BASE_URL": "http://127.0.0.1:9/v1",
                           "RAGSTREAM_LLM_MODEL": "m"})
    settings = cfg.settings.llm.model_copy(update={"max_attempts": 2, "timeout_s": 1.0})
    with pytest.raises(LLMError, match=r"Cannot reach .*\(2 tries\)"):
        LLMClient(settings, environ={}).chat_json(MSG, Pick)


def test_a_200_that_is_not_a_chat_completion(server):
    server.script(Reply.raw(200, "<html>gateway</html>", content_type="text/html"))
    with pytest.raises(LLMError, match="not a chat completion"):
        client(server).chat_json(MSG, Pick)
    server.script(Reply.raw(200, '{"choices": [', content_type="application/json"))
    with pytest.raises(LLMError, match="not valid JSON"):
        client(server).chat_json(MSG, Pick)
