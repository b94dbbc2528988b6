"""A conversation belongs to one knowledge base, and a remembered turn holds only what the answer
asserted (ragstream/workbench/conversations.py, Engine.new/services_for/answer, the CLI's --kb with
--conversation, the HTTP /answer's kb + conversation, the Q&A log's schema version 4): a real
Chroma in a temp dir, the real embedding model, the extractive answer (no LLM)."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from ragstream.common.errors import ConversationKnowledgeBaseError
from ragstream.interfaces import cli
from ragstream.interfaces.service.http import create_app
from ragstream.state import edits
from ragstream.state.super_prompt import View
from ragstream.workbench.api import RAGPipeline
from ragstream.workbench.conversations import Conversations, chunk_id
from ragstream.workbench.engine import Engine
from ragstream.workbench.qa_log import MIGRATIONS, migrate
from tests.conftest import three_article_engine
from tests.test_service import serving

#: a page of Node.js-like API documentation: knowledge base A
NODE_PATH = ("# path\n\nThe path module provides utilities for working with file and directory "
             "paths.\n\n## path.join([...paths])\n\nThe path.join() method joins all given path "
             "segments together using the platform-specific separator as a delimiter, then "
             "normalizes the resulting path. Zero-length path segments are ignored.\n\n"
             "## path.basename(path)\n\nThe path.basename() method returns the last portion of a "
             "path, similar to the Unix basename command.\n")
QUESTION = "What does path.join do?"
#: the turn knowledge base A remembers (asked so that A surely answers it)
ASKED_IN_A = "What does the path.join() method do with the given path segments?"
VIEWS = (View.RETRIEVAL, View.RERANKED, View.A3, View.A4)


@pytest.fixture(scope="module")
def base(tmp_path_factory, embedder) -> Engine:
    """Knowledge base B: the default, three bundled articles that never mention path.join."""
    return three_article_engine(tmp_path_factory.mktemp("scope"), embedder)


@pytest.fixture(scope="module")
def node(base, tmp_path_factory) -> Engine:
    """Knowledge base A, "nodejs": the path module's page."""
    folder = tmp_path_factory.mktemp("node-docs")
    (folder / "path.md").write_text(NODE_PATH, encoding="utf-8")
    base.create_kb("nodejs", folder)
    engine = base.for_kb("nodejs")
    assert engine.ingest().processed == 1
    return engine


@pytest.fixture(scope="module")
def node_turn(node):
    """path.join asked and answered in knowledge base A's conversation "node-chat"."""
    sp, ans = node.answer(node.run(node.new(ASKED_IN_A, conversation_name="node-chat")))
    assert sp.extras.turn.remembered, sp.extras.turn
    return sp, ans


def _conversation_ids(sp: dict | object, name: str) -> list[str]:
    views = sp["views_by_stage"] if isinstance(sp, dict) else \
        {v: [r.model_dump() for r in sp.view(v)] for v in VIEWS}
    return [r["chunk_id"] for rows in views.values() for r in rows
            if r["chunk_id"].startswith(f"conversation:{name}#")]


def test_a_turn_of_one_knowledge_base_is_never_a_candidate_in_another(base, node, node_turn):
    turn = node.conversations().turns("node-chat")[0]
    assert turn.kb == "nodejs" and "joins all given path segments" in turn.memory_text
    assert "segments together using the platform-specific separator as a delimiter, then " \
        "normalizes the resulting path. (from node-docs" in turn.memory_text  # its own source
    assert all("/path.md § path" in line.rsplit(" (from ", 1)[1] for line in
               turn.memory_text.splitlines())
    assert ASKED_IN_A not in turn.memory_text and "Sources:" not in turn.memory_text

    # continuing it with the default knowledge base is refused, with what to do instead
    with pytest.raises(ConversationKnowledgeBaseError, match="belongs to knowledge base 'nodejs'"):
        base.new(QUESTION, conversation_name="node-chat")
    stray = node.new(QUESTION, conversation_name="node-chat")  # made for A, run on B
    with pytest.raises(ConversationKnowledgeBaseError, match="--kb 'nodejs'"):
        base.run(stray)
    assert base.conversations().memory("node-chat", base.services.embedder, kb="default") is None
    assert base.services_for(stray).memory is None  # never handed to B's stages

    # B's own conversation: the same question finds nothing of A's turn, says nothing of it
    sp, ans = base.answer(base.run(base.new(QUESTION, conversation_name="b-chat")))
    assert _conversation_ids(sp, "node-chat") == []
    assert sp.extras.retrieval.kb == "default" and sp.extras.retrieval.conversation_chunks == 0
    assert "path segments" not in ans.text and "path.join" not in sp.S_CTX_MD
    assert base.conversations().kb_of("b-chat") == "default"
    assert base.conversations().names("default") == ["b-chat"]
    assert base.conversations().names("nodejs") == ["node-chat"]
    # and A's conversation still searches its turn with A
    again = node.run(node.new(QUESTION, conversation_name="node-chat"), until="Retrieval")
    assert chunk_id("node-chat", 1) in [r.chunk_id for r in again.view(View.RETRIEVAL)]


def test_cli_kb_with_conversation_refuses_another_kbs_and_never_mixes(base, node, node_turn,
                                                                      monkeypatch):
    monkeypatch.setattr(cli, "_engine", lambda kb=None: base.for_kb(kb))
    runner = CliRunner()
    refused = runner.invoke(cli.main, ["run", QUESTION, "--answer", "--kb", "default",
                                       "--conversation", "node-chat", "--no-save", "--no-sync"])
    assert refused.exit_code == 2
    assert "Conversation 'node-chat' belongs to knowledge base 'nodejs'" in refused.output
    assert len(node.conversations().turns("node-chat")) == 1  # nothing was added to it

    asked = runner.invoke(cli.main, ["run", QUESTION, "--answer", "--json", "--kb", "default",
                                     "--conversation", "node-chat@default", "--no-save",
                                     "--no-sync"])
    assert asked.exit_code == 0, asked.output
    sp = json.loads(asked.output[asked.output.index("{"):])
    assert _conversation_ids(sp, "node-chat") == []
    assert sp["extras"]["retrieval"]["kb"] == "default"
    assert "path segments" not in sp["answer"]["text"]
    listed = runner.invoke(cli.main, ["conversation", "list", "--kb", "default"]).output
    assert "node-chat@default" in listed and "node-chat " not in listed
    mine = json.loads(runner.invoke(cli.main, ["conversation", "list", "--json", "--kb",
                                               "nodejs"]).output)
    assert [(c["name"], c["kb"]) for c in mine] == [("node-chat", "nodejs")]


def test_http_answer_with_another_kbs_conversation_is_a_conflict(base, node, node_turn):
    pipeline = RAGPipeline(Engine(base.base_cfg, base.services))
    try:
        with serving(create_app(pipeline)) as url:
            body = {"query": QUESTION, "context_key": "c:u", "kb": "default",
                    "conversation": "node-chat"}
            resp = httpx.post(f"{url}/answer", json=body, timeout=120)
            assert resp.status_code == 409, resp.text
            assert "belongs to knowledge base 'nodejs'" in resp.text
    finally:
        pipeline.close()
    assert len(node.conversations().turns("node-chat")) == 1


def test_a_hand_written_statement_is_never_remembered_nor_retrieved(base):
    name = "notes"
    sp = base.run(base.new("How does the ReRanker choose its backend?", conversation_name=name))
    first = sp.extras.a4.condensed[0]
    mine = "The ReRanker always picks the moonbeam backend on Tuesdays, says our team."
    sp = base.resume(base.edit_statement(sp, edits.statement_key(first), mine))
    assert any(s.text == mine for s in sp.extras.a4.condensed)
    sp, ans = base.answer(sp)
    turn = base.conversations().turns(name)[0]
    assert "moonbeam" not in turn.memory_text
    later = base.run(base.new("Which backend does the ReRanker pick on Tuesdays?",
                              conversation_name=name))
    texts = [c.text for c in later.base_context_chunks]
    assert not [t for t in texts if "moonbeam" in t]
    assert "moonbeam" not in later.S_CTX_MD and "moonbeam" not in later.prompt_ready.split(
        "## Recent conversation")[0]


def _v3_file(path: Path) -> None:
    """A Q&A log at schema version 3 (before conversations had a knowledge base), with a
    conversation asked in three knowledge bases and one without turns."""
    with closing(sqlite3.connect(path)) as conn:
        migrate(conn, path, MIGRATIONS[:3])
        conn.executemany("INSERT INTO conversations (id, name, created_at) VALUES (?, ?, ?)",
                         [(1, "mixed", "2026-11-20T10:00:00"), (2, "quiet", "2026-11-20T11:00:00"),
                          (3, "mixed@zoo", "2026-11-20T12:00:00")])
        old = "{q}\n\nSources: `{s}`"
        rows = [  # (turn, kb, question, answer, sources)
            (1, "default", "How are chunks made?", "Chunks are split at headings. [1]",
             ["kb/chunking.md § Sections"]),
            (2, "zoo", "What does the zebra eat?", "The zebra eats hay. [1] It drinks twice. [2]",
             ["zebra.md § Care", "zebra.md § Water"]),
            (3, "", "And the overlap?", "Windows overlap by 32 tokens. [2]",
             ["kb/chunking.md § Windows"]),
            (4, "my docs", "Who wrote it?", "Nobody knows. [1] [2] [3]", ["a.md"]),
        ]
        for turn, kb, q, a, sources in rows:
            conn.execute("INSERT INTO turns (conversation_id, turn, ts, question, answer, sources, "
                         "kb, remembered, memory_text, encoding, encoded_with) VALUES "
                         "(1, ?, ?, ?, ?, ?, ?, 1, ?, x'00', 'm:384')",
                         (turn, f"2026-11-20T10:0{turn}:00Z", q, a, json.dumps(sources), kb,
                          old.format(q=q, s=sources[0])))
        conn.commit()
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 3


def test_an_older_file_is_upgraded_each_turn_staying_with_its_knowledge_base(tmp_path):
    path = tmp_path / "qa_log.sqlite3"
    _v3_file(path)
    convs = Conversations(path)
    infos = {c.name: c for c in convs.all()}
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS) == 4
    assert {n: (c.kb, c.turns) for n, c in infos.items()} == {
        "mixed": ("default", 2), "quiet": ("default", 0), "mixed@zoo": ("default", 0),
        "mixed@zoo-2": ("zoo", 1), "mixed@my-docs": ("my docs", 1)}
    mixed = convs.turns("mixed")
    assert [(t.turn, t.kb) for t in mixed] == [(1, "default"), (3, "default")]
    assert mixed[0].memory_text == "Chunks are split at headings. (from kb/chunking.md § Sections)"
    # turn 3 cites [2] but had one source: which one is known, as there is one number
    assert mixed[1].memory_text == "Windows overlap by 32 tokens. (from kb/chunking.md § Windows)"
    zoo = convs.turns("mixed@zoo-2")
    assert [t.turn for t in zoo] == [2] and zoo[0].memory_text.splitlines() == [
        "The zebra eats hay. (from zebra.md § Care)", "It drinks twice. (from zebra.md § Water)"]
    lost = convs.turns("mixed@my-docs")[0]  # three numbers, one source: not told apart
    assert not lost.remembered and "schema version 4" in lost.why and lost.memory_text == ""
    assert all("Sources:" not in t.memory_text for t in mixed + zoo)
    with closing(sqlite3.connect(path)) as conn:  # rebuilt turns are encoded again when searched
        assert conn.execute("SELECT COUNT(*) FROM turns WHERE encoding IS NOT NULL").fetchone()[0] == 0
    # each conversation is continued only with its own knowledge base
    convs.check_kb("mixed@zoo-2", "zoo")
    with pytest.raises(ConversationKnowledgeBaseError):
        convs.check_kb("mixed", "zoo")
