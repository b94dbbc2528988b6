"""Who may use the HTTP service (ragstream/interfaces/service/auth.py and http.py): tokens
from a real tokens file with scopes and knowledge bases, the real service on loopback (uvicorn),
httpx and the real ``openai`` client. A read token is refused on /ingest and DELETE /kb with a
403 naming the scope; a token for one knowledge base is refused on another and sees only its
own; a wrong token through the openai client shows the service's words; every /v1 error has
OpenAI's shape; failed attempts are counted (/health, the log, never the token) and slowed;
``serve`` and ``mcp --http`` off loopback without a token refuse to start; an empty knowledge
base is named with the command that fills it; the empty-query example comes from the knowledge
base asked; a chunk's id is the same on /retrieve, /answer and /v1."""

from __future__ import annotations

import hashlib
import json
import logging
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from ragstream.interfaces.service.auth import Failures, Tokens, TokensFileError, is_loopback
from ragstream.interfaces.service.http import create_app
from ragstream.workbench.api import RAGPipeline
from ragstream.workbench.engine import Engine
from tests.conftest import KB, ROOT, make_config, rules_and_notes_engine
from tests.servers import free_port
from tests.test_service import RULES_KB, answer_events, serving

ADMIN = "admin-token-0d6f1b2c9a8e7f65"
READER = "reader-token-6a2e91c04b7d3f58"
NOTES = "notes-token-f3a8c2d1e0b94756"
HASHED = "hashed-token-9c1d7e2a5b3f8046"
TOKENS = (ADMIN, READER, NOTES, HASHED)
QUERY = "What can I do during movement?"


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture(scope="module")
def engine(tmp_path_factory, embedder) -> Engine:
    """The rules knowledge base as the default, and "notes" (the reranking article) beside it."""
    root = tmp_path_factory.mktemp("auth")
    engine = rules_and_notes_engine(root, embedder)
    return engine


@pytest.fixture(scope="module")
def tokens_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("tokens") / "tokens.json"
    path.write_text(json.dumps({"tokens": [
        {"name": "admin", "token": ADMIN, "scopes": ["read", "write"]},
        {"name": "chat", "token": READER, "scopes": ["read"]},
        {"name": "notes-bot", "token": NOTES, "scopes": ["read", "write"], "kbs": ["notes"]},
        {"name": "hashed", "sha256": hashlib.sha256(HASHED.encode()).hexdigest(), "scopes": ["read"]},
    ]}))
    return path


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture(scope="module")
def service(engine, tokens_file) -> Iterator[tuple[str, Failures, Lines]]:
    """The service behind the tokens file; its failure counter (delays of milliseconds) and
    every line the service logs."""
    failures = Failures(free=3, base_s=0.001, cap_s=0.004)
    lines = Lines()
    loggers = [logging.getLogger(n) for n in ("ragstream", "uvicorn", "uvicorn.access")]
    saved = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.DEBUG)
        lg.addHandler(lines)
    app = create_app(RAGPipeline(engine), tokens=Tokens.load(None, tokens_file), failures=failures)
    try:
        with serving(app) as url:
            yield url, failures, lines
    finally:
        for lg, level in zip(loggers, saved):
            lg.setLevel(level)
            lg.removeHandler(lines)
    for line in lines.lines:  # no token, whole or in part, in anything the service logged
        assert not any(t[:12] in line for t in TOKENS), line


def client(url: str, token: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=token, max_retries=0, timeout=60)


DOC = {"document_id": "memo-1", "filename": "memo.md",
       "content": "# Memo\n\nThe quarterly memo is filed every March.\n"}


def test_a_read_token_is_refused_on_ingest_and_delete_naming_the_scope(service, engine):
    url, _, _ = service
    for token in (READER, HASHED):
        r = httpx.post(f"{url}/ingest", json=[DOC], headers=auth(token))
        assert r.status_code == 403, r.text
        body = r.json()
        assert body["error"] == "forbidden" and "needs the write scope" in body["message"]
        assert "has the scope read" in body["message"]
        r = httpx.delete(f"{url}/kb/notes", params={"confirm": "notes"}, headers=auth(token))
        assert r.status_code == 403 and "write scope" in r.json()["message"]
        r = httpx.post(f"{url}/kb", json={"name": "intruder"}, headers=auth(token))
        assert r.status_code == 403
    assert "'chat'" in httpx.post(f"{url}/ingest", json=[DOC], headers=auth(READER)).json()["message"]
    # nothing was written or deleted; the read token still reads
    assert {kb.name for kb in engine.knowledge_bases().all()} == {"default", "notes"}
    r = httpx.post(f"{url}/retrieve", json={"query": QUERY, "context_key": "k"}, headers=auth(READER),
                   timeout=60)
    assert r.status_code == 200 and r.json()["document_chunks"]
    # a read token through the OpenAI client: the chat works
    assert client(url, READER).models.list().data


def test_a_token_for_one_knowledge_base_is_refused_on_another(service):
    url, _, _ = service
    body = {"query": "How does the ReRanker order the chunks?", "context_key": "k"}
    ok = httpx.post(f"{url}/retrieve", json={**body, "kb": "notes"}, headers=auth(NOTES), timeout=60)
    assert ok.status_code == 200 and ok.json()["kb"] == "notes"
    for kb in ("default", None):  # no kb: the default one
        r = httpx.post(f"{url}/retrieve", json={**body, "kb": kb}, headers=auth(NOTES))
        assert r.status_code == 403
        message = r.json()["message"]
        assert "'notes-bot' may use the knowledge bases 'notes', not 'default'" in message
    assert httpx.post(f"{url}/answer", json={**body, "kb": "default"}, headers=auth(NOTES)).status_code == 403
    assert httpx.post(f"{url}/ingest", params={"kb": "default"}, json=[DOC],
                      headers=auth(NOTES)).status_code == 403
    assert httpx.delete(f"{url}/kb/default", params={"confirm": "default"},
                        headers=auth(NOTES)).status_code == 403
    # it lists only its own
    assert [kb["name"] for kb in httpx.get(f"{url}/kb", headers=auth(NOTES)).json()] == ["notes"]
    assert [kb["name"] for kb in httpx.get(f"{url}/kb", headers=auth(ADMIN)).json()] == ["default", "notes"]

    notes = client(url, NOTES)
    assert [m.id for m in notes.models.list()] == ["ragstream/notes"]
    reply = notes.chat.completions.create(model="ragstream/notes", messages=[
        {"role": "user", "content": "How does the ReRanker order the chunks?"}])
    assert reply.model_extra["ragstream"]["kb"] == "notes"
    with pytest.raises(openai.PermissionDeniedError) as caught:
        notes.chat.completions.create(model="ragstream/default",
                                      messages=[{"role": "user", "content": QUERY}])
    assert "may use the knowledge bases 'notes', not 'default'" in str(caught.value)
    assert caught.value.body["code"] == "forbidden"


def test_every_v1_error_has_openais_shape_and_the_client_shows_the_message(service):
    url, _, _ = service
    with pytest.raises(openai.AuthenticationError) as caught:
        client(url, "not-a-token-at-all").models.list()
    assert "The bearer token is not one this service accepts" in str(caught.value)
    assert set(caught.value.body) == {"message", "type", "param", "code"}
    assert caught.value.body["code"] == "unauthorized" and "not-a-token" not in str(caught.value)

    plain = httpx.get(f"{url}/v1/models")  # no header at all
    assert plain.status_code == 401 and set(plain.json()["error"]) == {"message", "type", "param", "code"}
    assert "needs the header 'Authorization: Bearer <token>'" in plain.json()["error"]["message"]

    ok = client(url, ADMIN)
    with pytest.raises(openai.NotFoundError) as missing:  # a path the route does not have
        ok.embeddings.create(model="ragstream/default", input="x")
    assert ("the OpenAI-compatible routes are GET /v1/models and POST /v1/chat/completions"
            in str(missing.value))
    with pytest.raises(openai.BadRequestError) as invalid:  # a body that does not validate (422)
        ok.chat.completions.create(model="ragstream/default", messages=[])
    assert invalid.value.status_code == 400 and invalid.value.body["param"] == "messages"
    assert "The request body is not valid: body.messages" in str(invalid.value)
    with pytest.raises(openai.NotFoundError) as unknown:
        ok.chat.completions.create(model="ragstream/nowhere", messages=[{"role": "user", "content": QUERY}])
    assert "There is no knowledge base 'nowhere'" in str(unknown.value)
    # outside /v1 the service's own shape
    r = httpx.get(f"{url}/nothing-here", headers=auth(ADMIN))
    assert r.status_code == 404 and r.json()["error"] == "not found"


def test_failed_attempts_are_counted_logged_without_the_token_and_slowed(service):
    url, failures, lines = service
    before = httpx.get(f"{url}/health").json()["failed_auth"]
    base = failures.count("127.0.0.1")
    for i in range(5):
        r = httpx.post(f"{url}/retrieve", json={"query": QUERY, "context_key": "k"},
                       headers=auth(f"{ADMIN[:-1]}{i}"))  # one character off
        assert r.status_code == 401
    assert httpx.get(f"{url}/health").json()["failed_auth"] == before + 5
    assert failures.count("127.0.0.1") == base + 5
    refused = [line for line in lines.lines if line.startswith("refused POST /retrieve from 127.0.0.1")]
    assert len(refused) >= 5 and f"failed attempt {base + 5} from that address" in refused[-1]
    assert "a wrong token" in refused[-1]
    # a valid token from the address starts its count again
    assert httpx.get(f"{url}/kb", headers=auth(ADMIN)).status_code == 200
    assert failures.count("127.0.0.1") == 0

    # the delay grows with an address's failures, capped (the default policy)
    policy = Failures()
    delays = [policy.delay_for(n) for n in range(1, 12)]
    assert delays[:3] == [0.0, 0.0, 0.0] and delays[3] > 0
    assert all(b >= a for a, b in zip(delays, delays[1:])) and delays[-1] == policy.cap_s
    assert [policy.record("10.0.0.9")[0] for _ in range(3)] == [1, 2, 3] and policy.count("10.0.0.8") == 0


@pytest.mark.parametrize("entry, says", [
    ({"name": "a", "token": "short"}, "shorter than 16 characters"),
    ({"name": "a", "token": "x" * 20, "scopes": ["admin"]},
     "scopes must be a list of \"read\" and \"write\""),
    ({"name": "a", "token": "x" * 20, "kbs": "default"}, "kbs must be a list"),
    ({"token": "x" * 20}, "needs a \"name\""),
    ({"name": "a", "token": "y" * 20, "sha256": "00"}, "not both or neither"),
    ({"name": "a", "sha256": "zz"}, "sha256 is not 64 hex digits"),
    ({"name": "a", "token": "x" * 20, "role": "admin"}, "unknown fields ['role']"),
])
def test_a_bad_tokens_file_entry_is_named_without_its_token(tmp_path, entry, says):
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps({"tokens": [entry]}))
    with pytest.raises(TokensFileError) as caught:
        Tokens.load(None, path)
    assert says in str(caught.value) and str(path) in str(caught.value)
    assert "x" * 16 not in str(caught.value) and "y" * 16 not in str(caught.value)
    path.write_text("{not json")
    with pytest.raises(TokensFileError, match="is not JSON"):
        Tokens.load(None, path)


def test_tokens_from_the_variable_and_the_file_compared_by_value(tokens_file):
    tokens = Tokens.load("MY_TOKEN", tokens_file, env={"MY_TOKEN": " legacy-full-token-123 "})
    full = tokens.authenticate("legacy-full-token-123")
    assert full is not None and full.scopes == {"read", "write"} and full.kbs is None
    assert tokens.authenticate(HASHED).name == "hashed"
    assert tokens.from_header(f"Bearer {NOTES}").kbs == {"notes"}
    assert tokens.from_header(f"Basic {NOTES}") is None and tokens.from_header("Bearer ") is None
    assert tokens.authenticate(NOTES[:-1]) is None
    described = tokens.describe()
    assert "bearer token required (from $MY_TOKEN and the tokens file)" in described
    assert "notes-bot read and write on notes" in described
    assert not any(t in described + repr(tokens) for t in (*TOKENS, "legacy-full-token-123"))
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.4") and not is_loopback("example.org")


@pytest.mark.parametrize("args", [["serve", "--host", "0.0.0.0"], ["mcp", "--http", "--host", "0.0.0.0"]])
def test_a_start_off_loopback_without_a_token_is_refused(tmp_path, args):
    env = {k: v for k, v in __import__("os").environ.items()
           if k not in ("RAGSTREAM_API_TOKEN", "RAGSTREAM_API_TOKENS_FILE")}
    env["RAGSTREAM_INDEX_DIR"] = str(tmp_path / "index")
    port = free_port()
    out = subprocess.run([sys.executable, "-m", "ragstream", *args, "--port", str(port)], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    assert "Not starting on 0.0.0.0 without a token" in out.stderr
    assert "export RAGSTREAM_API_TOKEN=" in out.stderr and "--host 127.0.0.1" in out.stderr
    assert not (tmp_path / "index").exists()  # refused before anything was opened


def test_an_empty_knowledge_base_is_named_with_the_command_that_fills_it(tmp_path, embedder):
    empty = Engine(make_config(tmp_path / "index"))
    empty.services.embedder = embedder
    with serving(create_app(RAGPipeline(empty))) as url:
        health = httpx.get(f"{url}/health").json()
        r = httpx.post(f"{url}/retrieve", json={"query": "", "context_key": "k"})
        found = httpx.post(f"{url}/retrieve", json={"query": QUERY, "context_key": "k"}, timeout=60)
    assert health["status"] == "empty" and health["chunks"] == 0
    assert "The knowledge base 'default' is empty (0 chunks)" in health["message"]
    assert "`ragstream ingest PATH --kb default`" in health["message"]
    assert r.status_code == 422 and "knowledge base 'default' is empty" in r.json()["message"]
    assert "movement" not in r.json()["message"]
    assert "ragstream ingest PATH --kb default" in found.json()["no_documents_reason"]


def test_serve_says_at_start_that_the_knowledge_base_is_empty(tmp_path):
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("RAGSTREAM_")}
    env.update(RAGSTREAM_INDEX_DIR=str(tmp_path / "index"), RAGSTREAM_UPLOADS_DIR=str(tmp_path / "up"))
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "ragstream", "serve", "--port", str(port)],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=5)
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline, "serve did not start"
                time.sleep(0.3)
    finally:
        proc.terminate()
        output, _ = proc.communicate(timeout=30)
    assert health.json()["status"] == "empty"
    assert "no token required (loopback only)" in output
    assert ("Warning (empty knowledge base): The knowledge base 'default' is empty (0 chunks)"
            in output), output
    assert "`ragstream ingest PATH --kb default`" in output


def test_the_empty_query_example_comes_from_the_knowledge_base_asked(service):
    url, _, _ = service
    headings = {
        kb: {line.lstrip("#").strip() for f in folder.glob("*.md")
             for line in f.read_text().splitlines() if line.startswith("#")}
        for kb, folder in (("default", RULES_KB), ("notes", KB))}
    for kb in ("default", "notes"):
        r = httpx.post(f"{url}/retrieve", json={"query": " ", "context_key": "k", "kb": kb},
                       headers=auth(ADMIN))
        message = r.json()["message"]
        topic = re.search(r"for example about '(.+)' \(a section of knowledge base '(\w+)'\)", message)
        assert r.status_code == 422 and topic, message
        assert topic.group(2) == kb and topic.group(1) in headings[kb]
    notes = client(url, ADMIN)
    with pytest.raises(openai.BadRequestError) as caught:
        notes.chat.completions.create(model="ragstream/notes", messages=[{"role": "user", "content": ""}])
    said = re.search(r"for example about '(.+?)'", str(caught.value))
    assert said and said.group(1) in {h for h in headings["notes"]}
    assert (KB / "reranking.md").read_text().count(said.group(1)) >= 1


def test_a_chunk_has_one_id_on_every_route(service):
    url, _, _ = service
    body = {"query": QUERY, "context_key": "k"}
    found = httpx.post(f"{url}/retrieve", json=body, headers=auth(ADMIN), timeout=60).json()
    ids = [c["chunk_id"] for c in found["document_chunks"]]
    assert ids and all(re.fullmatch(r"rules_kb/[\w-]+\.md#\d+", i) for i in ids), ids
    assert [c["metadata"]["chunk_ref"] for c in found["document_chunks"]] == ids
    events = answer_events(url, body, auth(ADMIN))
    cited = [d for kind, d in events if kind == "citation"]
    assert cited and all(d["chunk_id"] == d["chunk_ref"] for d in cited)
    reply = client(url, ADMIN).chat.completions.create(
        model="ragstream/default", messages=[{"role": "user", "content": QUERY}])
    assert [c["chunk_id"] for c in reply.model_extra["citations"]] == [d["chunk_id"] for d in cited]
    assert all(re.fullmatch(r"rules_kb/[\w-]+\.md#\d+", d["chunk_id"]) for d in cited)
