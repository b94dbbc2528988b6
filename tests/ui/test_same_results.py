"""Same engine, same results: one question asked through the page (AppTest, auto-run with the
answer), the CLI (``ragstream run --answer --json``, a subprocess), Python (``Engine``), the
OpenAI-compatible route (the ``openai`` client against the real server) and the MCP server
(the SDK's client) gives the same final selection's citations and the same answer, for the
same knowledge base and settings."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import openai
import pytest
from mcp import Client

from ragstream.interfaces.service.http import create_app
from ragstream.interfaces.service.mcp_server import build_server
from ragstream.interfaces.service.openai_compat import SOURCES_HEADER
from ragstream.interfaces.ui import state as S
from ragstream.workbench.api import RAGPipeline
from tests.conftest import ROOT
from tests.test_service import serving
from tests.ui.tabs import fresh, sp

QUESTION = "How do I start a Chroma server?"


@pytest.fixture(scope="module", autouse=True)
def app_env(page_env):
    """The page drives the session's temp index, which every other way reads too."""


def test_the_page_cli_python_openai_route_and_mcp_give_the_same_answer(kb_engine):
    # Python
    _sp, ans = kb_engine.answer(kb_engine.run(QUESTION))
    cited = [c.chunk_id for c in ans.sources]
    assert cited and ans.mode == "extractive"

    # the page
    at = fresh()
    at.text_area(key=S.PROMPT).set_value(QUESTION).run()
    at.button(key="run").click().run()
    assert not at.error, [e.value for e in at.error]
    page = sp(at).answer
    assert [c.chunk_id for c in page.sources] == cited and page.text == ans.text

    # the CLI
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGSTREAM_")}
    env.update(RAGSTREAM_INDEX_DIR=str(kb_engine.cfg.index_dir),
               RAGSTREAM_UPLOADS_DIR=str(kb_engine.cfg.index_dir.parent / "cli-uploads"))
    done = subprocess.run([sys.executable, "-m", "ragstream", "run", QUESTION, "--answer", "--json",
                           "--no-sync", "--no-save"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    cli = json.loads(done.stdout)["answer"]
    assert [c["chunk_id"] for c in cli["citations"] if c["valid"]] == cited
    assert cli["text"] == ans.text

    # the OpenAI-compatible route
    with serving(create_app(RAGPipeline(kb_engine), token=None)) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=120)
        reply = client.chat.completions.create(
            model="ragstream/default", messages=[{"role": "user", "content": QUESTION}])
    assert [c["chunk_id"] for c in reply.model_extra["citations"]] == cited
    assert reply.choices[0].message.content.split("\n\n" + SOURCES_HEADER)[0] == ans.text.rstrip("\n")

    # the MCP server
    async def mcp_answer() -> dict:
        async with Client(build_server(RAGPipeline(kb_engine))) as c:
            return (await c.call_tool("answer", {"question": QUESTION})).structured_content

    got = asyncio.run(mcp_answer())
    assert [c["chunk_ref"] for c in got["citations"]] == cited and got["text"] == ans.text
