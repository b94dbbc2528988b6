"""Who may use the MCP server over HTTP (ragstream/interfaces/service/mcp_server.py): the streamable HTTP
app behind a real tokens file, served by uvicorn on loopback, driven by the MCP SDK's own
client. A read token's ``ingest`` call and a token for one knowledge base's ``search`` of
another are tool errors naming the token and what it lacks; such a token lists only its own
knowledge bases; a wrong token is a 401, counted. ``search`` and ``answer`` both take
``question`` and accept ``query`` as the same; neither is a clear tool error with an example
from the knowledge base; a chunk's id is the same in search, answer and get_chunk."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

pytest.importorskip("mcp", reason="the mcp SDK is not installed (requirements.txt pins it)")

import uvicorn
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from ragstream.interfaces.service.auth import Failures, Tokens
from ragstream.interfaces.service.mcp_server import HTTP_PATH, http_app
from ragstream.workbench.api import RAGPipeline
from tests.conftest import KB, rules_and_notes_engine

ADMIN = "mcp-admin-token-51c0e9a7d2b8"
READER = "mcp-reader-token-0b7f3e2a9c14"
NOTES = "mcp-notes-token-8e2d4c6a1f03"
QUESTION = "How does the ReRanker order the chunks?"


@pytest.fixture(scope="module")
def served(tmp_path_factory, embedder) -> Iterator[tuple[str, Failures]]:
    root = tmp_path_factory.mktemp("mcp-auth")
    engine = rules_and_notes_engine(root, embedder)
    path = root / "tokens.json"
    path.write_text(json.dumps({"tokens": [
        {"name": "admin", "token": ADMIN, "scopes": ["read", "write"]},
        {"name": "assistant", "token": READER, "scopes": ["read"]},
        {"name": "notes-only", "token": NOTES, "scopes": ["read", "write"], "kbs": ["notes"]}]}))
    failures = Failures(base_s=0.001, cap_s=0.004)
    app = http_app(RAGPipeline(engine), allow_ingest=True, tokens=Tokens.load(None, path),
                   failures=failures)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}{HTTP_PATH}", failures
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def calls(url: str, token: str, todo: list[tuple[str, dict]]) -> list:
    """The results of the tool calls ``todo``, in one session with ``token``."""
    import httpx2

    async def session() -> list:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=120) as http, \
                Client(streamable_http_client(url, http_client=http)) as client:
            return [await client.call_tool(name, args) for name, args in todo]

    return asyncio.run(session())


def ok(result) -> dict:
    assert not result.is_error, result.content
    return result.structured_content


def error(result) -> str:
    assert result.is_error and result.content
    return result.content[0].text


def test_a_read_token_may_search_but_not_ingest(served):
    url, _ = served
    searched, ingested = calls(url, READER, [
        ("search", {"question": QUESTION, "kb": "notes"}),
        ("ingest", {"filename": "memo.md", "content": "# Memo\n\nFiled in March.\n"})])
    assert ok(searched)["found"]
    said = error(ingested)
    assert "forbidden" in said and "The token 'assistant' has the scope read" in said
    assert "needs the write scope" in said and READER not in said


def test_a_token_for_one_knowledge_base_is_refused_on_another(served):
    url, _ = served
    mine, theirs, answer, chunk, listed, write = calls(url, NOTES, [
        ("search", {"question": QUESTION, "kb": "notes"}),
        ("search", {"question": QUESTION, "kb": "default"}),
        ("answer", {"question": QUESTION}),  # the default knowledge base
        ("get_chunk", {"chunk_id": "rules_kb/barricades.md#0"}),
        ("list_knowledge_bases", {}),
        ("ingest", {"filename": "memo.md", "content": "# Memo\n\nFiled in March.\n"})])
    assert ok(mine)["found"] and ok(mine)["kb"] == "notes"
    for refused in (theirs, answer, chunk, write):
        said = error(refused)
        assert "The token 'notes-only' may use the knowledge bases 'notes', not 'default'" in said
    assert [kb["name"] for kb in ok(listed)["knowledge_bases"]] == ["notes"]
    (everything,) = calls(url, ADMIN, [("list_knowledge_bases", {})])
    assert [kb["name"] for kb in ok(everything)["knowledge_bases"]] == ["default", "notes"]


def test_a_wrong_token_is_a_401_and_counted(served):
    url, failures = served
    before = failures.total
    for headers in ({}, {"Authorization": "Bearer mcp-admin-token-51c0e9a7d2b9"}):
        r = httpx.post(url, json={}, headers=headers, timeout=10)
        assert r.status_code == 401 and "Authorization: Bearer <token>" in r.json()["message"]
        assert "51c0e9a7d2b" not in r.text
    assert failures.total == before + 2


def test_search_and_answer_take_question_and_accept_query(served):
    url, _ = served
    by_question, by_query, answered, answered_by_query, neither, both = calls(url, ADMIN, [
        ("search", {"question": QUESTION, "kb": "notes"}),
        ("search", {"query": QUESTION, "kb": "notes"}),
        ("answer", {"question": QUESTION, "kb": "notes"}),
        ("answer", {"query": QUESTION, "kb": "notes"}),
        ("answer", {"kb": "notes"}),
        ("search", {"question": QUESTION, "query": "Something else", "kb": "notes"})])
    assert ok(by_question)["chunks"] == ok(by_query)["chunks"]
    assert ok(answered)["text"] == ok(answered_by_query)["text"]
    said = error(neither)
    assert "answer needs `question`, the question in plain words" in said
    assert "Field required" not in said and "`query` is accepted as the same" in said
    topic = re.search(r'"What does it say about (.+)\?"', said)
    assert topic and f"# {topic.group(1)}" in (KB / "reranking.md").read_text()
    assert "Send only `question`" in error(both)


def test_a_chunk_has_the_same_id_in_search_answer_and_get_chunk(served):
    url, _ = served
    searched, answered = calls(url, ADMIN, [("search", {"question": QUESTION, "kb": "notes"}),
                                            ("answer", {"question": QUESTION, "kb": "notes"})])
    chunks = ok(searched)["chunks"]
    assert chunks and all(c["chunk_id"] == c["chunk_ref"] for c in chunks)
    assert all(re.fullmatch(r"notes/reranking\.md#\d+|[\w/.-]+reranking\.md#\d+", c["chunk_id"])
               for c in chunks), [c["chunk_id"] for c in chunks]
    cites = ok(answered)["citations"]
    assert cites and all(c["chunk_id"] == c["chunk_ref"] for c in cites)
    first = chunks[0]["chunk_id"]
    by_id, by_ref = calls(url, ADMIN, [("get_chunk", {"chunk_id": first, "kb": "notes"}),
                                       ("get_chunk", {"chunk_ref": first, "kb": "notes"})])
    assert ok(by_id)["chunk_id"] == first and ok(by_id)["text"] == ok(by_ref)["text"]
