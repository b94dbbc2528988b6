"""The LLM client against a real HTTP server on 127.0.0.1 that speaks the OpenAI API.

Waits between retries are measured with the server's own timestamps. The openai client's
backoff waits 0.375-0.5 s before its first retry and 0.75-1 s before its second, unless the
server names a wait in ``Retry-After`` or ``retry-after-ms``.
"""

import logging

import pytest
from pydantic import BaseModel

from ragstream.backends.llm import (
    AgentOutputError,
    CallLog,
    LLMClient,
    LLMError,
    ReplyCutOffError,
    StreamResult,
)
from ragstream.common.config import load_config
from tests.fake_openai import Reply
from tests.llm_support import llm_config

KEY = "sk-secret-0123456789abcdef"


class Pick(BaseModel):
    colour: str
    n: int


def client(server, **settings) -> LLMClient:
    settings.setdefault("structured_output", "json_schema")  # no probing: retries as configured
    cfg = llm_config(load_config(env={}), server, **settings)
    return LLMClient(cfg.settings.llm, environ={"OPENAI_API_KEY": KEY})


MSG = [{"role": "user", "content": "pick"}]
OK = Reply.json({"colour": "x", "n": 0})


def waits(server) -> list[float]:
    """Seconds between consecutive chat requests, as the server received them."""
    times = [r.received_at for r in server.chat_requests]
    return [later - earlier for earlier, later in zip(times, times[1:])]


PICK_SCHEMA = {"properties": {"colour": {"type": "string"}, "n": {"type": "integer"}},
               "required": ["colour", "n"], "type": "object"}


@pytest.mark.parametrize("form, expected", [
    ("json_schema", {"response_format": {"type": "json_schema", "json_schema": {
        "name": "Pick", "strict": True, "schema": {**PICK_SCHEMA, "additionalProperties": False}}}}),
    ("llama_cpp", {"response_format": {"type": "json_object", "schema": PICK_SCHEMA}}),
    ("ollama", {"format": PICK_SCHEMA}),
    ("json_object", {"response_format": {"type": "json_object"}}),
])
def test_each_form_sends_the_schema_as_its_endpoint_reads_it(server, form, expected):
    server.script(Reply.json({"colour": "red", "n": 3}))
    result = client(server, structured_output=form).chat_json(MSG, Pick, max_tokens=50)
    assert result.value == Pick(colour="red", n=3) and not result.repaired
    assert result.log.form == form and result.log.first_try_valid
    req = server.requests[-1]
    for key, value in expected.items():
        assert req[key] == value
    if form != "json_object":  # the schema goes in one place only
        assert ("format" in req) == (form == "ollama")
    assert req["temperature"] == 0.0 and req["model"] == "test-model" and req["max_tokens"] == 50
    assert req.authorization == f"Bearer {KEY}"


def test_a_given_schema_replaces_the_models_own(server):
    server.script(OK)
    bounded = {**PICK_SCHEMA, "properties": {**PICK_SCHEMA["properties"],
                                             "colour": {"type": "string", "enum": ["x", "y"]}}}
    client(server, structured_output="llama_cpp").chat_json(MSG, Pick, json_schema=bounded)
    assert server.requests[-1]["response_format"]["schema"] == bounded


def test_openai_strict_mode_gets_closed_objects_without_string_lengths():
    from ragstream.backends.llm import strict_schema

    schema = {"type": "object", "properties": {
        "a": {"type": "string", "maxLength": 9, "default": ""},
        "b": {"type": "array", "maxItems": 2, "items": {
            "type": "object", "properties": {"c": {"type": "integer"}}}}}}
    strict = strict_schema(schema, lengths=False)
    assert strict["required"] == ["a", "b"] and strict["additionalProperties"] is False
    assert strict["properties"]["a"] == {"type": "string"}  # no maxLength, no default
    inner = strict["properties"]["b"]
    assert inner["maxItems"] == 2 and inner["items"]["required"] == ["c"]
    assert strict_schema(schema)["properties"]["a"]["maxLength"] == 9


@pytest.mark.parametrize("owned_by, ollama, expected", [
    ("llamacpp", None, "llama_cpp"),  # llama.cpp's own server
    ("me", None, "llama_cpp"),  # llama-cpp-python's server
    ("fake-openai", "0.12.6", "ollama"),
    ("vllm", None, "json_schema"),
])
def test_auto_detects_the_endpoints_form(owned_by, ollama, expected):
    from tests.fake_openai import FakeOpenAI

    with FakeOpenAI(models=["test-model"], owned_by=owned_by, ollama_version=ollama) as fake:
        fake.script(OK)
        result = client(fake, structured_output="auto").chat_json(MSG, Pick)
        assert result.log.form == expected
        body = fake.chat_requests[-1]
        if expected == "ollama":
            assert body["format"]["properties"]["colour"] == {"type": "string"}
        else:
            assert body["response_format"]["type"] == {"llama_cpp": "json_object"}.get(
                expected, expected)


def test_auto_steps_down_when_the_server_refuses_a_form_and_remembers(server):
    # like llama-cpp-python 0.3 answering json_schema with HTTP 500; no retries while probing
    server.script(Reply.error(500, "unsupported response_format"), OK, OK)
    llm = client(server, structured_output="auto")
    assert llm.chat_json(MSG, Pick).log.form == "llama_cpp"
    forms = [r["response_format"] for r in server.chat_requests]
    assert forms[0]["type"] == "json_schema"
    assert forms[1] == {"type": "json_object", "schema": PICK_SCHEMA}
    assert llm.chat_json(MSG, Pick).log.form == "llama_cpp"  # remembered: no new probe
    assert server.calls == 3


def test_plain_json_mode_gets_one_repair_attempt_then_error(server):
    server.script(Reply.text("not json {"), Reply.json({"colour": "blue", "n": 1}))
    result = client(server, structured_output="json_object").chat_json(MSG, Pick)
    assert result.repaired and result.value.colour == "blue" and not result.log.first_try_valid
    repair = server.requests[-1].messages
    assert repair[-2] == {"role": "assistant", "content": "not json {"}
    assert "not valid" in repair[-1]["content"] and "colour" in repair[-1]["content"]

    server.reset()
    server.script(Reply.json({"colour": "red"}), Reply.text("still not json"))
    with pytest.raises(AgentOutputError, match="after one repair attempt"):
        client(server, structured_output="json_object").chat_json(MSG, Pick)
    assert server.calls == 2


def test_a_schema_constrained_endpoint_gets_no_repair_round(server):
    server.script(Reply.json({"colour": "red"}))
    with pytest.raises(AgentOutputError, match="asked for its schema"):
        client(server, structured_output="llama_cpp").chat_json(MSG, Pick)
    assert server.calls == 1


def test_a_reply_cut_off_at_max_tokens_is_reported_as_such_without_a_repair(server):
    server.script(Reply.text('{"colour": "re', finish_reason="length"))
    log = CallLog()
    with pytest.raises(ReplyCutOffError, match="cut off at max_tokens=7"):
        client(server, structured_output="json_object").chat_json(MSG, Pick, max_tokens=7,
                                                                  log=log)
    assert server.calls == 1
    assert log.finish_reason == "length" and log.error and not log.first_try_valid


def test_the_watcher_hears_each_call(server):
    from ragstream.backends.llm import watching

    heard = []

    class Watcher:
        def call_started(self, agent, model):
            heard.append(("start", agent, model))

        def call_ended(self, agent):
            heard.append(("end", agent))

    server.script(OK)
    with watching(Watcher()):
        client(server).chat_json(MSG, Pick, agent="A3_NLI_Gate")
    server.script(OK)
    client(server).chat_json(MSG, Pick, agent="A4_Condenser")  # outside the block: not heard
    assert heard == [("start", "A3_NLI_Gate", "test-model"), ("end", "A3_NLI_Gate")]


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
    with pytest.raises(LLMError,
                       match=r"did not answer within 0.3 s \(2 tries; the limit was llm.timeout_s\)"):
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
