"""The MCP server (ragstream/interfaces/service/mcp_server.py) through the official SDK's own client, over
both transports and for real: ``python -m ragstream mcp`` started as a subprocess over stdio,
and ``python -m ragstream mcp --http --allow-ingest`` as a subprocess serving streamable HTTP on
loopback behind a bearer token. The tools are listed with descriptions; search returns
excerpts and ids, get_chunk and get_document the whole texts they name; answer gives the same
citations as the engine's own pass on the same question; "nothing found" is a result and bad
input a tool error with the typed error's message; ingest exists only when asked for."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

pytest.importorskip("mcp", reason="the mcp SDK is not installed (requirements.txt pins it)")

from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from ragstream.interfaces.service.mcp_server import EXCERPT_CHARS, HTTP_PATH
from ragstream.workbench.engine import Engine
from tests.conftest import KB, ROOT, make_config
from tests.servers import free_port

TOKEN = "mcp-test-token-7d41c0"
TOOLS = {"search", "answer", "get_chunk", "get_document", "list_knowledge_bases"}
QUESTION = "How does the ReRanker score the candidates?"


@pytest.fixture(scope="module")
def index(tmp_path_factory, embedder) -> tuple[Path, Engine]:
    """Three bundled articles ingested into an index folder the servers open."""
    root = tmp_path_factory.mktemp("mcp")
    docs = root / "kb"
    docs.mkdir()
    for name in ("reranking.md", "faq.md", "hybrid-retrieval.md"):
        shutil.copy(KB / name, docs / name)
    engine = Engine(make_config(root / "index", RAGSTREAM_KB_DIR=str(docs)))
    engine.services.embedder = embedder
    assert engine.ingest(docs).processed == 3
    return root, engine


def server_env(root: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGSTREAM_")}
    env.update(RAGSTREAM_INDEX_DIR=str(root / "index"), RAGSTREAM_UPLOADS_DIR=str(root / "up"),
               RAGSTREAM_KB_DIR=str(root / "kb"), **extra)
    return env


def structured(result) -> dict:
    assert not result.is_error, result.content
    return result.structured_content


def error_text(result) -> str:
    assert result.is_error and result.content
    return result.content[0].text


def test_over_stdio_the_tools_search_fetch_and_answer(index):
    root, engine = index
    params = StdioServerParameters(command=sys.executable, args=["-m", "ragstream", "mcp"],
                                   env=server_env(root), cwd=str(ROOT))

    async def session() -> dict:
        async with Client(params, read_timeout_seconds=120) as client:
            listed = (await client.list_tools()).tools
            out: dict = {"tools": {t.name: t for t in listed}}
            out["search"] = structured(await client.call_tool("search", {"question": QUESTION}))
            first = out["search"]["chunks"][0]
            out["chunk"] = structured(await client.call_tool("get_chunk", {"chunk_id": first["chunk_id"]}))
            out["document"] = structured(await client.call_tool("get_document", {"path": first["path"]}))
            out["answer"] = structured(await client.call_tool("answer", {"question": QUESTION}))
            out["kbs"] = structured(await client.call_tool("list_knowledge_bases", {}))
            out["none"] = structured(await client.call_tool(
                "search", {"question": "How do I cook pasta al dente?"}))
            out["empty"] = error_text(await client.call_tool("search", {"question": "  "}))
            out["unknown"] = error_text(await client.call_tool(
                "search", {"question": QUESTION, "kb": "nowhere"}))
            out["no_chunk"] = error_text(await client.call_tool("get_chunk", {"chunk_id": "kb/none.md#0"}))
            return out

    got = asyncio.run(session())
    tools = got["tools"]
    assert set(tools) == TOOLS  # no ingest unless the server is started with it
    for tool in tools.values():
        assert len(tool.description or "") > 80, tool.name  # enough for a model to call it right
    assert all(p.get("description") for p in tools["search"].input_schema["properties"].values())

    found = got["search"]
    assert found["found"] and found["kb"] == "default" and found["chunks"]
    for c in found["chunks"]:
        assert 0.0 <= c["relevance"] <= 1.0 and c["source"] and c["section"]
        assert c["chunk_id"] == c["chunk_ref"] and c["chunk_id"].startswith("kb/")
        assert len(c["excerpt"]) <= EXCERPT_CHARS + 2  # an excerpt, not the document
    assert found["chunks"][0]["path"] == "kb/reranking.md"
    first = found["chunks"][0]
    whole = got["chunk"]["text"]
    assert whole.startswith(first["excerpt"].removesuffix(" …"))
    assert whole in got["document"]["text"] and got["document"]["chunks"] > 1

    # the same citations as the engine's own pass on the same question
    _sp, ans = engine.answer(engine.run(QUESTION))
    answered = got["answer"]
    assert [c["chunk_id"] for c in answered["citations"]] == [c.chunk_id for c in ans.sources]
    assert answered["text"] == ans.text and answered["confidence"] == ans.confidence
    assert engine.runs().get(answered["run_id"]).origin == "api"

    assert got["kbs"]["knowledge_bases"] == [{"name": "default", "chunks": engine.status()["chunks"]}]
    assert got["none"]["found"] is False and got["none"]["chunks"] == []
    assert "does not seem to cover" in got["none"]["reason"]
    assert "The query is empty" in got["empty"]
    assert "There is no knowledge base 'nowhere'" in got["unknown"] and "default" in got["unknown"]
    assert "There is no chunk 'kb/none.md#0'" in got["no_chunk"]


@pytest.fixture
def http_server(index) -> Iterator[str]:
    root, _engine = index
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "ragstream", "mcp", "--http", "--port", str(port), "--allow-ingest"],
        cwd=ROOT, env=server_env(root, RAGSTREAM_API_TOKEN=TOKEN), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}{HTTP_PATH}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the MCP server did not start"
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        output, _ = proc.communicate(timeout=30)
        assert TOKEN not in output  # never logged


def test_over_http_behind_the_token_with_ingest_when_asked_for(http_server):
    import httpx2

    assert httpx.post(http_server, json={}, timeout=10).status_code == 401
    assert httpx.post(http_server, json={}, headers={"Authorization": "Bearer wrong"},
                      timeout=10).status_code == 401
    doc = ("# Zorblatt calibration\n\nThe zorblatt flux capacitor is calibrated every Tuesday with "
           "the quintessence gauge set to seven zorbs.\n")

    async def session() -> dict:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with httpx2.AsyncClient(headers=headers, timeout=120) as http, \
                Client(streamable_http_client(http_server, http_client=http)) as client:
            out: dict = {"tools": {t.name for t in (await client.list_tools()).tools}}
            out["ingest"] = structured(await client.call_tool(
                "ingest", {"filename": "ops/zorblatt.md", "content": doc}))
            out["search"] = structured(await client.call_tool(
                "search", {"question": "How is the zorblatt flux capacitor calibrated?", "max_chunks": 3}))
            return out

    got = asyncio.run(session())
    assert got["tools"] == TOOLS | {"ingest"}
    assert got["ingest"]["processed"] == 1 and got["ingest"]["failed"] == 0
    assert got["search"]["found"] and "quintessence" in got["search"]["chunks"][0]["excerpt"]


def test_the_engine_down_is_a_tool_error_naming_what_to_start(tmp_path, embedder):
    """Not an empty result that would read as "nothing found"."""
    from ragstream.interfaces.service.mcp_server import build_server
    from ragstream.workbench.api import RAGPipeline

    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    engine = Engine(make_config(tmp_path / "index", RAGSTREAM_CHROMA_URL=url))
    engine.services.embedder = embedder

    async def session() -> list[str]:
        async with Client(build_server(RAGPipeline(engine))) as client:
            return [error_text(await client.call_tool(name, args)) for name, args in (
                ("search", {"question": QUESTION}), ("answer", {"question": QUESTION}))]

    for text in asyncio.run(session()):
        assert "vector store unavailable" in text and f"The Chroma server at {url} cannot be reached" in text
        assert "chroma run" in text
