"""The HTTP service (ragstream/interfaces/service/http.py): real uvicorn servers on loopback, real HTTP calls
(httpx), the real embedding model and one temp index of the rules knowledge base for the whole
module; LLM mode talks to the scripted OpenAI server."""

from __future__ import annotations

import dataclasses
import json
import logging
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import uvicorn

import ragstream
from ragstream.interfaces.service.auth import Failures
from ragstream.interfaces.service.http import (
    MAX_BODY_BYTES,
    AnswerRequest,
    CitationEvent,
    DoneEvent,
    Message,
    create_app,
)
from ragstream.state.super_prompt import ConversationTurn
from ragstream.workbench.api import RAGPipeline
from ragstream.workbench.contract import IngestionResult, RAGContext
from ragstream.workbench.engine import Engine
from tests.conftest import make_config
from tests.fake_openai import FakeOpenAI, Reply
from tests.llm_support import every_agent, llm_config, with_llm

ROOT = Path(__file__).resolve().parent.parent
RULES_KB = Path(__file__).parent / "fixtures" / "rules_kb"
TOKEN = "svc-test-token-5f1c9a2b7e"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
QUERY = "What can I do during movement?"
ANSWER = ("During the Movement phase an operative makes one move action [1]. Crossing a barricade "
          "costs one extra inch [2]. Charges follow their own rule [99].")
LONG_ANSWER = " ".join(f"word{i}" for i in range(40)) + " [1]."
#: the streamed answer's reply; a test may swap it
STREAM = {"reply": Reply.text(ANSWER)}
SERVICE_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access", "fastapi", "starlette", "ragstream")


route = every_agent(STREAM)


# --------------------------------------------------------------------------- servers


@contextmanager
def serving(app) -> Iterator[str]:
    """``app`` served by a real uvicorn on a free loopback port, in a thread."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, log_level="debug", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


class Captured(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.name} {record.getMessage()} {record.args!r} "
                          f"{record.exc_text or ''}")


@pytest.fixture(scope="module")
def logs() -> Iterator[Captured]:
    """Every record the service side logs (uvicorn, FastAPI, Starlette, RAGstream), at DEBUG."""
    handler = Captured()
    saved = {}
    for name in SERVICE_LOGGERS:
        logger = logging.getLogger(name)
        saved[name] = logger.level
        logger.setLevel(logging.DEBUG)
        logger.addHandler(handler)
    yield handler
    for name, level in saved.items():
        logging.getLogger(name).setLevel(level)
        logging.getLogger(name).removeHandler(handler)


@pytest.fixture(scope="module")
def rules(tmp_path_factory, embedder) -> Engine:
    """An engine over the rules knowledge base, ingested once for the module."""
    engine = Engine(make_config(tmp_path_factory.mktemp("service-index")))
    engine.services.embedder = embedder
    report = engine.ingest(RULES_KB)
    assert report.failed == 0 and report.processed == 6, report.errors
    return engine


@pytest.fixture(scope="module")
def plain(rules, logs) -> Iterator[str]:
    """The service without a token or an LLM (extractive answers)."""
    with serving(create_app(RAGPipeline(rules), token=None)) as url:
        yield url


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(models=["test-model"], responder=route) as server:
        yield server


@pytest.fixture(scope="module")
def llm(rules, fake, logs) -> Iterator[tuple[str, Engine]]:
    """The service with a bearer token and an LLM endpoint (the scripted server); its engine."""
    # the answer's citation checks off: the service passes on the model's answer as it is,
    # its [99] too (tests/test_answer_checks.py checks the citations)
    cfg = llm_config(rules.cfg, fake).with_overrides({"settings.answer.check_citations": False})
    engine = Engine(cfg, services=with_llm(rules.services, cfg))
    # failed attempts are slowed by a few milliseconds here (the delays' growth: test_service_auth.py)
    with serving(create_app(RAGPipeline(engine), token=TOKEN,
                            failures=Failures(base_s=0.001, cap_s=0.005))) as url:
        yield url, engine


@pytest.fixture
def stream_reply():
    yield STREAM
    STREAM["reply"] = Reply.text(ANSWER)


def sse(response: httpx.Response) -> Iterator[tuple[str, dict]]:
    """The events of an SSE response as they arrive: (event, data)."""
    event, data = "message", []
    for line in response.iter_lines():
        if not line:
            if data:
                yield event, json.loads("\n".join(data))
            event, data = "message", []
        elif line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())


def answer_events(url: str, body: dict, headers: dict | None = None) -> list[tuple[str, dict]]:
    with httpx.stream("POST", f"{url}/answer", json=body, headers=headers, timeout=60) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        return list(sse(r))


# --------------------------------------------------------------------------- /health, /retrieve


def test_health_needs_no_token_and_reports_the_index(plain, llm, rules):
    for url in (plain, llm[0]):
        r = httpx.get(f"{url}/health")
        assert r.status_code == 200
        assert r.json() == {"status": "ok", "chunks": rules.services.index().n_chunks,
                            "store_mode": "persistent", "version": ragstream.__version__,
                            "message": "", "kb": "default", "failed_auth": r.json()["failed_auth"]}
    assert r.json()["chunks"] > 6


def test_retrieve_returns_the_rag_context_most_relevant_first(plain, rules):
    body = {"query": "Barricade rules", "context_key": "test:user1", "max_chunks": 4,
            "min_relevance": 0.0}
    r = httpx.post(f"{plain}/retrieve", json=body, timeout=30)
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    ctx = RAGContext.model_validate(r.json())
    assert ctx.context_key == "test:user1" and ctx.total_chunks == len(ctx.document_chunks) == 4
    assert ctx.relevance_scores == [c.relevance_score for c in ctx.document_chunks]
    assert ctx.relevance_scores == sorted(ctx.relevance_scores, reverse=True)
    assert ctx.meets_threshold and ctx.min_relevance == 0.0
    for chunk in ctx.document_chunks:
        assert {"source", "doc_type", "last_update_date", "section"} <= set(chunk.metadata)
    # the same chunks, in the same order, as the Python API gives
    direct = RAGPipeline(rules).retrieve("Barricade rules", "test:user1", max_chunks=4, min_relevance=0.0)
    assert [c.chunk_id for c in ctx.document_chunks] == [c.chunk_id for c in direct.document_chunks]

    faq = httpx.post(f"{plain}/retrieve", json={**body, "filters": {"doc_type": ["faq"]}}, timeout=30)
    chunks = faq.json()["document_chunks"]
    assert chunks and {c["metadata"]["doc_type"] for c in chunks} == {"faq"}


@pytest.mark.parametrize("query, problem", [("", "empty"), ("x" * 2001, "2001 characters")])
def test_an_invalid_query_is_422_with_the_error_body(plain, query, problem):
    r = httpx.post(f"{plain}/retrieve", json={"query": query, "context_key": "k"})
    assert r.status_code == 422
    body = r.json()
    assert set(body) == {"error", "message"} and body["error"] == "invalid query"
    assert problem in body["message"]


@pytest.mark.parametrize("body, where", [
    ({"query": "movement"}, "context_key"),
    ({"query": "movement", "context_key": "k", "filters": {"colour": ["red"]}}, "filters.colour"),
    ({"query": "movement", "context_key": "k", "filters": {"updated_from": "2025-13-01"}},
     "filters.updated_from"),
    ({"query": "movement", "context_key": "k", "max_chunks": "many"}, "max_chunks"),
])
def test_a_malformed_body_is_422_naming_the_field(plain, body, where):
    r = httpx.post(f"{plain}/retrieve", json=body)
    assert r.status_code == 422
    assert r.json()["error"] == "invalid request" and where in r.json()["message"]


def test_out_of_range_limits_are_invalid_queries(plain):
    r = httpx.post(f"{plain}/retrieve", json={"query": "movement", "context_key": "k", "max_chunks": 0})
    assert r.status_code == 422 and r.json()["error"] == "invalid query"
    assert "max_chunks" in r.json()["message"]


def test_a_body_over_the_limit_is_413(plain):
    big = {"query": "movement", "context_key": "k" * (MAX_BODY_BYTES + 10)}
    r = httpx.post(f"{plain}/retrieve", json=big)
    assert r.status_code == 413 and r.json()["error"] == "request too large"
    assert f"{MAX_BODY_BYTES:,}" in r.json()["message"]

    def chunked():  # no Content-Length: the limit is enforced on the bytes as they arrive
        yield b'{"query": "movement", "context_key": "'
        for _ in range(MAX_BODY_BYTES // 65536 + 2):
            yield b"k" * 65536
        yield b'"}'

    r = httpx.post(f"{plain}/answer", content=chunked(), headers={"Content-Type": "application/json"})
    assert r.status_code == 413 and r.json()["error"] == "request too large"
    assert "content-length" not in {k.lower() for k in r.request.headers}
    # a body just under the limit is read and validated as usual
    r = httpx.post(f"{plain}/retrieve", json={"query": "", "context_key": "k" * (MAX_BODY_BYTES - 100)})
    assert r.status_code == 422
    assert httpx.get(f"{plain}/health").status_code == 200


def test_the_bearer_token_is_required_and_never_echoed_or_logged(llm, logs):
    url, _ = llm
    body = {"query": "Barricade rules", "context_key": "k", "min_relevance": 0.0}
    seen: list[httpx.Response] = []
    for headers in ({}, {"Authorization": f"Bearer {TOKEN}x"}, {"Authorization": f"Bearer {TOKEN[:-1]}"},
                    {"Authorization": f"Basic {TOKEN}"}, {"Authorization": TOKEN}):
        r = httpx.post(f"{url}/retrieve", json=body, headers=headers)
        assert r.status_code == 401, headers
        assert r.json()["error"] == "unauthorized" and r.headers["www-authenticate"] == "Bearer"
        seen.append(r)
    for path in ("/openapi.json", "/docs", "/no-such-path"):
        r = httpx.get(f"{url}{path}")
        assert r.status_code == 401, path
        seen.append(r)
    seen.append(ok := httpx.post(f"{url}/retrieve", json=body, headers=AUTH, timeout=30))
    assert ok.status_code == 200 and ok.json()["document_chunks"]
    seen.append(schema := httpx.get(f"{url}/openapi.json", headers=AUTH))
    assert schema.status_code == 200
    assert schema.json()["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    seen.append(httpx.get(f"{url}/health"))
    assert seen[-1].status_code == 200

    for r in seen:
        assert TOKEN[:12] not in r.text and TOKEN[:12] not in str(r.headers)
    assert any("/retrieve" in line for line in logs.lines)  # the capture works
    assert not [line for line in logs.lines if TOKEN[:12] in line]


def test_openapi_lists_the_endpoints_with_the_models_descriptions(plain):
    schema = httpx.get(f"{plain}/openapi.json").json()
    assert {"/health", "/retrieve", "/ingest", "/answer"} <= set(schema["paths"])
    assert set(schema["paths"]["/retrieve"]) == {"post"} and set(schema["paths"]["/health"]) == {"get"}
    models = schema["components"]["schemas"]
    assert "most relevant first" in models["RAGContext"]["description"]
    assert "2,000" in models["RetrieveRequest"]["properties"]["query"]["description"]
    assert models["DocumentChunk"]["properties"]["metadata"]["description"].startswith("source")
    responses = schema["paths"]["/retrieve"]["post"]["responses"]
    assert {"200", "401", "413", "422", "503", "504"} <= set(responses)
    assert "text/event-stream" in schema["paths"]["/answer"]["post"]["responses"]["200"]["content"]
    assert "`event: citation`" in schema["paths"]["/answer"]["post"]["description"]


def test_an_unreachable_store_is_503_and_a_timeout_504(tmp_path, rules, embedder):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    down = Engine(make_config(tmp_path / "down", RAGSTREAM_CHROMA_URL=f"http://127.0.0.1:{port}"))
    down.services.embedder = embedder
    # a store that takes a second to read, against a time limit of 0.2 s
    slow_services = dataclasses.replace(rules.services)
    slow_services.index = lambda: (time.sleep(1.0), rules.services.index())[1]
    slow = Engine(rules.cfg.with_overrides({"settings.retrieval.timeout_s": 0.2}),
                  services=slow_services)
    body = {"query": "Barricade rules", "context_key": "k"}
    with serving(create_app(RAGPipeline(down))) as url:
        r = httpx.post(f"{url}/retrieve", json=body, timeout=60)
        assert r.status_code == 503 and r.json()["error"] == "vector store unavailable"
        assert "chroma run" in r.json()["message"]
        health = httpx.get(f"{url}/health", timeout=60)
        assert health.status_code == 503 and health.json()["status"] == "unavailable"
        assert health.json()["store_mode"] == "http" and health.json()["chunks"] is None
        r = httpx.post(f"{url}/answer", json=body, timeout=60)  # the stages fail before the stream
        assert r.status_code == 503 and r.json()["error"] == "vector store unavailable"
    with serving(create_app(RAGPipeline(slow))) as url:
        t0 = time.monotonic()
        r = httpx.post(f"{url}/retrieve", json=body, timeout=60)
        assert r.status_code == 504 and r.json()["error"] == "retrieval timeout"
        assert "0.2 s" in r.json()["message"] and time.monotonic() - t0 < 0.9


# --------------------------------------------------------------------------- /ingest


def test_ingest_upserts_rule_documents_with_its_own_body_limit(tmp_path, embedder):
    engine = Engine(make_config(tmp_path / "index"))
    engine.services.embedder = embedder
    text = (RULES_KB / "rules-1-phases.md").read_text(encoding="utf-8")
    assert len(text.encode()) > 2_000
    doc_id = str(uuid.uuid4())
    doc = {"document_id": doc_id, "filename": "rules-1-phases.md", "content": text,
           "metadata": {"source": "Core Rules v3.1", "doc_type": "core-rules",
                        "last_update_date": "2025-09-15"}}
    limit = len(json.dumps([doc]).encode()) * 3 // 2  # one document fits, two do not
    app = create_app(RAGPipeline(engine), max_body_bytes=2_000, max_ingest_body_bytes=limit)
    with serving(app) as url:
        r = httpx.post(f"{url}/ingest", json=[doc], timeout=120)
        assert r.status_code == 200, r.text
        result = IngestionResult.model_validate(r.json())
        assert (result.documents_processed, result.documents_failed) == (1, 0)
        assert result.embedding_count > 0 and result.errors == []

        ctx = httpx.post(f"{url}/retrieve", json={"query": "What happens in the Movement phase?",
                                                  "context_key": "k", "min_relevance": 0.0}).json()
        assert {c["document_id"] for c in ctx["document_chunks"]} == {doc_id}
        again = httpx.post(f"{url}/ingest", json=[doc], timeout=120).json()
        assert (again["documents_processed"], again["documents_failed"]) == (0, 0)

        # the same body is over /retrieve's limit, and /ingest has its own
        r = httpx.post(f"{url}/retrieve", json={"query": text, "context_key": "k"})
        assert r.status_code == 413
        r = httpx.post(f"{url}/ingest", json=[doc, {**doc, "document_id": "other"}])
        assert r.status_code == 413 and f"{limit:,} bytes" in r.json()["message"]
        r = httpx.post(f"{url}/ingest", json=[{"document_id": doc_id, "content": "x"}])
        assert r.status_code == 422 and "filename" in r.json()["message"]


# --------------------------------------------------------------------------- /answer


def test_answer_streams_tokens_citations_and_done_in_llm_mode(llm, fake, stream_reply):
    url, engine = llm
    history = [{"role": "user", "content": "Which phase comes first?"},
               {"role": "assistant", "content": "The Initiative phase."}]
    before = engine.qa_log().count()
    events = answer_events(url, {"query": QUERY, "context_key": "chan:user", "conversation_history": history},
                           AUTH)

    kinds = [k for k, _ in events]
    n_tokens = kinds.count("token")
    assert n_tokens > 5 and kinds[:n_tokens] == ["token"] * n_tokens
    assert kinds[n_tokens:] == ["citation", "citation", "done"]
    tokens = [d["token"] for k, d in events if k == "token"]
    assert "".join(tokens) == ANSWER

    streamed = fake.chat_requests[-1]
    assert streamed.stream and "Which phase comes first?" in streamed.messages[-1]["content"]
    row = engine.qa_log().recent(1)[0]
    assert engine.qa_log().count() == before + 1
    assert row["answer"] == ANSWER and row["mode"] == "llm" and row["incomplete"] == 0
    valid = [c for c in row["citations"] if c["valid"]]
    cites = [CitationEvent.model_validate(d) for k, d in events if k == "citation"]
    assert [(c.n, c.chunk_ref, c.path, c.section, c.label) for c in cites] == [
        (c["n"], c["chunk_id"], c["source"], c["section"], c["label"]) for c in valid]
    assert [c.n for c in cites] == [1, 2] and cites[0].source == "Core Rules v3.1"

    done = DoneEvent.model_validate(events[-1][1])
    assert done.context_key == "chan:user" and done.mode == "llm" and done.invalid_citations == [99]
    assert done.total_tokens == row["prompt_tokens"] + row["completion_tokens"] > 0
    assert done.token_events == n_tokens and done.qa_log_id == row["id"]
    assert isinstance(events[-1][1]["latency_ms"], int) and 0 < done.latency_ms < 60_000


def test_a_client_that_disconnects_stops_the_answer_and_is_logged_incomplete(llm, fake, stream_reply):
    url, engine = llm
    pieces = len(LONG_ANSWER.split())
    stream_reply["reply"] = Reply.text(LONG_ANSWER, chunk_delay=0.15)  # 6 s when read to the end
    before = engine.qa_log().count()
    body = {"query": QUERY, "context_key": "chan:user"}
    with httpx.stream("POST", f"{url}/answer", json=body, headers=AUTH, timeout=60) as r:
        assert r.status_code == 200
        first = next(sse(r))
        assert first == ("token", {"token": "word0 "})
        live = fake.active_threads
    left = time.monotonic()  # the response is closed: the client is gone

    deadline = left + 4
    while engine.qa_log().count() == before and time.monotonic() < deadline:
        time.sleep(0.05)
    stopped_after = time.monotonic() - left
    assert engine.qa_log().count() == before + 1, "no Q&A log row for the abandoned answer"
    assert stopped_after < 2.0, f"the answer went on for {stopped_after:.1f} s"

    row = engine.qa_log().recent(1)[0]
    assert row["incomplete"] == 1 and "disconnected" in row["error"]
    assert row["question"] == QUERY and row["mode"] == "llm"
    assert row["answer"].startswith("word0 ") and LONG_ANSWER.startswith(row["answer"])
    assert len(row["answer"].split()) < pieces / 2
    # the model's stream was closed too: its connection's handler thread on the fake server ended
    while fake.active_threads >= live and time.monotonic() < deadline:
        time.sleep(0.05)
    assert fake.active_threads < live, "the fake LLM server still streams to a closed answer"
    assert time.monotonic() - left < pieces * 0.15 / 2


def test_answer_without_an_llm_streams_the_same_event_shapes(plain, rules):
    events = answer_events(plain, {"query": QUERY, "context_key": "k",
                                   "conversation_history": [{"user": "hi", "assistant": "hello"}]})
    kinds = [k for k, _ in events]
    assert kinds[0] == "token" and kinds[-1] == "done" and "citation" in kinds
    assert set(kinds) == {"token", "citation", "done"}
    for kind, data in events:
        if kind == "token":
            assert set(data) == {"token"} and data["token"]
        elif kind == "citation":
            assert set(data) == set(CitationEvent.model_fields)
    done = events[-1][1]
    assert set(done) == set(DoneEvent.model_fields)
    assert done["mode"] == "extractive" and done["total_tokens"] == 0
    row = rules.qa_log().recent(1)[0]
    text = "".join(d["token"] for k, d in events if k == "token")
    assert row["id"] == done["qa_log_id"] and row["answer"].strip() == text.strip()
    assert [c["n"] for c in row["citations"] if c["valid"]] == [d["n"] for k, d in events if k == "citation"]


def test_answer_checks_its_request_before_streaming(plain):
    r = httpx.post(f"{plain}/answer", json={"query": "  ", "context_key": "k"})
    assert r.status_code == 422 and r.json()["error"] == "invalid query"
    history = [{"user": f"q{i}", "assistant": f"a{i}"} for i in range(11)]
    r = httpx.post(f"{plain}/answer", json={"query": QUERY, "context_key": "k",
                                            "conversation_history": history})
    assert r.status_code == 422 and "conversation_history" in r.json()["message"]
    r = httpx.post(f"{plain}/answer", json={"query": QUERY, "context_key": "k",
                                            "conversation_history": [{"role": "system", "content": "x"}]})
    assert r.status_code == 422 and r.json()["error"] == "invalid request"


def test_conversation_history_in_either_shape_becomes_turns():
    req = AnswerRequest(query="q", context_key="k", conversation_history=[
        Message(role="user", content="u1"), Message(role="assistant", content="a1"),
        ConversationTurn(user="u2", assistant="a2"),
        Message(role="user", content="u3"), Message(role="user", content="u4"),
        Message(role="assistant", content="a4")])
    assert [(t.user, t.assistant) for t in req.turns()] == [("u1", "a1"), ("u2", "a2"), ("u3", ""),
                                                           ("u4", "a4")]
    parsed = AnswerRequest.model_validate({"query": "q", "context_key": "k", "conversation_history": [
        {"user": "u", "assistant": "a"}, {"role": "assistant", "content": "b"}]})
    assert [(t.user, t.assistant) for t in parsed.turns()] == [("u", "a"), ("", "b")]


# --------------------------------------------------------------------------- the example


def test_the_example_script_retrieves_and_streams_an_answer(plain):
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "retrieve_and_answer.py"), QUERY,
                          "--url", plain, "--doc-type", "faq", "--doc-type", "core-rules"],
                         capture_output=True, text=True, timeout=120, check=True)
    head, _, rest = out.stdout.partition("\nAnswer:\n")
    assert head.startswith("Retrieved ") and rest
    answer, _, sources = rest.partition("\n\nSources:")
    assert "[1]" in answer and sources.splitlines()[1].startswith("  [1] ")
    assert "(extractive, confidence " in sources
