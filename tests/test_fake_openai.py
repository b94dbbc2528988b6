"""The fake OpenAI server, driven by the real ``openai`` client over real HTTP."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.request

import openai
import pytest

from tests.fake_openai import FakeOpenAI, Reply, fake_openai, split_tokens  # noqa: F401

MODEL = "gpt-4o-mini"
MESSAGES = [{"role": "system", "content": "You are agent A2."},
            {"role": "user", "content": "What is RAG?"}]

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def server():
    with FakeOpenAI(models=[MODEL, "gpt-4o"]) as srv:
        yield srv
    assert srv.active_threads == 0, "handler threads must not outlive the server"


def client_for(server: FakeOpenAI, *, max_retries: int = 0, timeout: float = 1.0) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="sk-test",
                         max_retries=max_retries, timeout=timeout)


def ask(client: openai.OpenAI, **kwargs):
    return client.chat.completions.create(model=MODEL, messages=MESSAGES, **kwargs)


# -- answers ------------------------------------------------------------------------------

def test_base_url_is_loopback(server):
    assert server.base_url == f"http://127.0.0.1:{server.port}/v1"
    assert server.port > 0


def test_non_streaming_text(server):
    server.script(Reply.text("Retrieval augmented generation."))
    with client_for(server) as client:
        resp = ask(client)
    assert resp.object == "chat.completion"
    assert resp.id and resp.created > 0
    assert resp.model == MODEL
    assert resp.choices[0].message.role == "assistant"
    assert resp.choices[0].message.content == "Retrieval augmented generation."
    assert resp.choices[0].finish_reason == "stop"
    assert resp.usage.prompt_tokens == 7  # words in "You are agent A2." + "What is RAG?"
    assert resp.usage.completion_tokens == 3
    assert resp.usage.total_tokens == 10
    assert server.calls == 1 and server.pending == 0
    assert server.requests[0]["messages"] == MESSAGES
    assert server.requests[0].model == MODEL
    assert server.errors == []


def test_replies_are_used_in_order(server):
    server.script("first", Reply.text("second"))
    with client_for(server) as client:
        assert ask(client).choices[0].message.content == "first"
        assert ask(client).choices[0].message.content == "second"
    assert server.calls == 2


def test_json_mode(server):
    server.script(Reply.json({"agent": "A2", "keep": [1, 2]}))
    with client_for(server) as client:
        resp = ask(client, response_format={"type": "json_object"})
    assert json.loads(resp.choices[0].message.content) == {"agent": "A2", "keep": [1, 2]}
    assert server.requests[0]["response_format"] == {"type": "json_object"}


def test_json_mode_invalid_json_is_passed_through(server):
    server.script(Reply.text("not json {"))
    with client_for(server) as client:
        content = ask(client, response_format={"type": "json_object"}).choices[0].message.content
    assert content == "not json {"
    with pytest.raises(json.JSONDecodeError):
        json.loads(content)


def test_streaming_assembles_text_and_reports_usage(server):
    text = "Retrieval  augmented generation,\nexplained. "
    server.script(Reply.text(text))
    with client_for(server) as client:
        stream = ask(client, stream=True, stream_options={"include_usage": True})
        chunks = list(stream)
    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert pieces == split_tokens(text) and len(pieces) == 4
    assert "".join(pieces) == text
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert [c.choices[0].finish_reason for c in finals] == ["stop"]
    last = chunks[-1]
    assert last.choices == []
    assert (last.usage.prompt_tokens, last.usage.completion_tokens, last.usage.total_tokens) == (7, 4, 11)
    assert all(c.usage is None for c in chunks[:-1])


def test_streaming_without_include_usage_has_no_usage_chunk(server):
    server.script(Reply.text("a b c"))
    with client_for(server) as client:
        chunks = list(ask(client, stream=True))
    assert all(c.choices for c in chunks)
    assert all(c.usage is None for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "a b c"


def test_streaming_wire_format():
    """The raw bytes: SSE ``data:`` lines, a [DONE] terminator, chunked transfer."""
    with FakeOpenAI() as srv:
        srv.script(Reply.text("Hi there"))
        req = urllib.request.Request(
            srv.base_url + "/chat/completions", method="POST",
            data=json.dumps({"model": MODEL, "messages": MESSAGES, "stream": True,
                             "stream_options": {"include_usage": True}}).encode(),
            headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=1) as resp:
            assert resp.headers["Content-Type"].startswith("text/event-stream")
            assert resp.headers["Transfer-Encoding"] == "chunked"
            raw = resp.read().decode()
    events = raw.split("\n\n")
    assert events[-1] == "" and events[-2] == "data: [DONE]"
    payloads = [json.loads(e[len("data: "):]) for e in events[:-2]]
    assert all(e.startswith("data: ") for e in events[:-1])
    assert [p["choices"][0]["delta"].get("content") for p in payloads[1:3]] == ["Hi ", "there"]
    assert payloads[-2]["choices"][0]["finish_reason"] == "stop"
    assert payloads[-1]["choices"] == [] and payloads[-1]["usage"]["completion_tokens"] == 2


def test_stream_cut_mid_way_is_a_connection_error(server):
    server.script(Reply.text("one two three four", cut_after=2))
    got = []
    with client_for(server) as client:
        stream = ask(client, stream=True)
        with pytest.raises(openai.APIConnectionError):
            for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    got.append(chunk.choices[0].delta.content)
    assert got == ["one ", "two "]


def test_models_list(server):
    with client_for(server) as client:
        assert [m.id for m in client.models.list()] == [MODEL, "gpt-4o"]
        assert client.models.retrieve("gpt-4o").id == "gpt-4o"
        with pytest.raises(openai.NotFoundError):
            client.models.retrieve("no-such-model")
    assert server.calls == 0  # only chat completions count as calls
    assert [r.path for r in server.requests] == ["/v1/models", "/v1/models/gpt-4o",
                                                 "/v1/models/no-such-model"]


# -- errors -------------------------------------------------------------------------------

def test_429_raises_rate_limit_error(server):
    server.script(Reply.error(429, "Rate limit reached", retry_after=0.01))
    with client_for(server) as client, pytest.raises(openai.RateLimitError) as info:
        ask(client)
    err = info.value
    assert err.status_code == 429
    assert err.response.headers["retry-after"] == "0.01"
    assert err.body == {"message": "Rate limit reached", "type": "rate_limit_error",
                        "param": None, "code": "rate_limit_exceeded"}
    assert "Rate limit reached" in err.message


def test_429_then_ok_is_retried_by_the_client(server):
    server.script(Reply.error(429, "slow down", retry_after=0.01), Reply.text("fine now"))
    with client_for(server, max_retries=1) as client:
        resp = ask(client)
    assert resp.choices[0].message.content == "fine now"
    assert server.calls == 2
    assert server.requests[0]["messages"] == server.requests[1]["messages"]


def test_500_raises_internal_server_error(server):
    server.script(Reply.error(500, "The server had an error"))
    with client_for(server) as client, pytest.raises(openai.InternalServerError) as info:
        ask(client)
    assert info.value.status_code == 500
    assert info.value.body["type"] == "server_error"


def test_503_raises_internal_server_error(server):
    server.script(Reply.error(503, "overloaded", retry_after=1))
    with client_for(server) as client, pytest.raises(openai.InternalServerError) as info:
        ask(client)
    assert info.value.status_code == 503


def test_400_raises_bad_request(server):
    server.script(Reply.error(400, "Invalid 'messages'", code="invalid_value"))
    with client_for(server, max_retries=2) as client, pytest.raises(openai.BadRequestError) as info:
        ask(client)
    assert info.value.body["code"] == "invalid_value"
    assert server.calls == 1  # a 400 is not retried


def test_401_raises_authentication_error(server):
    server.script(Reply.error(401, "Incorrect API key provided"))
    with client_for(server) as client, pytest.raises(openai.AuthenticationError):
        ask(client)


def test_streaming_request_can_fail_with_a_status(server):
    server.script(Reply.error(429, "slow down"))
    with client_for(server) as client, pytest.raises(openai.RateLimitError):
        ask(client, stream=True)


def test_delay_longer_than_timeout_raises_timeout(server):
    server.script(Reply.delay(1.0, then=Reply.text("too late")), Reply.text("on time"))
    with client_for(server, timeout=0.2) as client:
        started = time.monotonic()
        with pytest.raises(openai.APITimeoutError):
            ask(client)
        assert time.monotonic() - started < 0.9
        # The server is still healthy; the late answer goes nowhere.
        assert ask(client).choices[0].message.content == "on time"
    assert server.calls == 2


def test_late_answer_to_a_gone_client_does_not_break_the_server(server):
    server.script(Reply.delay(0.3, then=Reply.text("late " * 2000)), Reply.text("ok"))
    with client_for(server, timeout=0.1) as client, pytest.raises(openai.APITimeoutError):
        ask(client)
    time.sleep(0.5)  # let the delayed handler write into the closed connection
    with client_for(server) as client:
        assert ask(client).choices[0].message.content == "ok"
    assert server.errors == []


def test_short_delay_then_answer(server):
    server.script(Reply.delay(0.05, then=Reply.text("after a pause")))
    with client_for(server) as client:
        assert ask(client).choices[0].message.content == "after a pause"


def test_dropped_connection_raises_connection_error(server):
    server.script(Reply.drop(), Reply.text("back"))
    with client_for(server) as client:
        with pytest.raises(openai.APIConnectionError) as info:
            ask(client)
        assert not isinstance(info.value, openai.APITimeoutError)
        assert ask(client).choices[0].message.content == "back"


def test_raw_non_json_body_in_a_200(server):
    """What the real client does with a gateway's HTML page in a 200: it returns the text
    as a plain ``str`` instead of a ChatCompletion -- no exception."""
    server.script(Reply.raw(200, b"<html>gateway</html>", "text/html"))
    with client_for(server) as client:
        resp = ask(client)
    assert resp == "<html>gateway</html>"


def test_raw_malformed_json_body(server):
    """A truncated JSON body in a 200 escapes the client as a bare ``json.JSONDecodeError``
    (a ValueError), not as an ``openai.OpenAIError``."""
    server.script(Reply.raw(200, b'{"choices": [', "application/json"))
    with client_for(server) as client, pytest.raises(json.JSONDecodeError):
        ask(client)


# -- responder, recording -----------------------------------------------------------------

def test_responder_answers_when_the_queue_is_empty():
    def route(body):
        system = body["messages"][0]["content"]
        if "A2" in system:
            return Reply.json({"agent": "A2"})
        return Reply.text(f"echo: {body['messages'][-1]['content']}")

    with FakeOpenAI(responder=route) as srv:
        srv.script(Reply.text("scripted first"))
        with client_for(srv) as client:
            assert ask(client).choices[0].message.content == "scripted first"
            assert json.loads(ask(client).choices[0].message.content) == {"agent": "A2"}
            other = client.chat.completions.create(
                model=MODEL, messages=[{"role": "system", "content": "You are A5."},
                                       {"role": "user", "content": "ping"}])
            assert other.choices[0].message.content == "echo: ping"
        assert srv.calls == 3


def test_unscripted_request_is_a_clear_non_retried_error(server):
    with client_for(server, max_retries=2) as client, pytest.raises(openai.InternalServerError) as info:
        ask(client)
    assert "no scripted reply" in info.value.message
    assert server.calls == 1
    assert len(server.errors) == 1


def test_responder_exception_is_reported(server):
    server.responder = lambda body: 1 / 0
    with client_for(server) as client, pytest.raises(openai.InternalServerError):
        ask(client)
    assert "ZeroDivisionError" in server.errors[0]


def test_authorization_header_carries_the_key(server):
    server.script("ok")
    with client_for(server) as client:
        ask(client)
    req = server.requests[0]
    assert req.authorization == "Bearer sk-test"
    assert req.headers["content-type"] == "application/json"
    assert req.method == "POST" and req.path == "/v1/chat/completions"


def test_reset_clears_script_and_records(server):
    server.script("a", "b")
    with client_for(server) as client:
        ask(client)
    server.responder = lambda body: Reply.text("x")
    server.reset()
    assert (server.calls, server.requests, server.pending, server.responder) == (0, [], 0, None)


def test_concurrent_requests(server):
    n = 4
    barrier = threading.Barrier(n, timeout=5)

    def respond(body):
        barrier.wait()  # passes only when all n requests are being served at the same time
        return Reply.text(body["messages"][-1]["content"])

    server.responder = respond
    clients = [client_for(server, timeout=10) for _ in range(n)]
    results: dict[int, str] = {}

    def worker(i: int) -> None:
        resp = clients[i].chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": f"q{i}"}])
        results[i] = resp.choices[0].message.content

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    for c in clients:
        c.close()
    assert server.errors == []
    assert results == {i: f"q{i}" for i in range(n)}
    assert server.calls == n


# -- lifecycle ----------------------------------------------------------------------------

def test_close_is_clean_even_with_open_keepalive_and_pending_delay():
    before = {t.ident for t in threading.enumerate()}
    srv = FakeOpenAI().start()
    srv.script("ok", Reply.delay(30))
    client = client_for(srv, timeout=60)
    ask(client)  # leaves an idle keep-alive connection open
    waiter = threading.Thread(target=lambda: pytest.raises(openai.APIError, ask, client), daemon=True)
    waiter.start()
    deadline = time.monotonic() + 2
    while srv.calls < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    started = time.monotonic()
    srv.close()
    assert time.monotonic() - started < 2
    waiter.join(2)
    client.close()
    assert srv.active_threads == 0
    leftover = [t for t in threading.enumerate()
                if t.ident not in before and t.name.startswith("fake-openai")]
    assert leftover == []
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", srv.port), timeout=0.5).close()
    srv.close()  # idempotent


def test_fixture_helper(fake_openai):  # noqa: F811 - the imported fixture
    fake_openai.script("from the fixture")
    with client_for(fake_openai) as client:
        assert ask(client).choices[0].message.content == "from the fixture"
