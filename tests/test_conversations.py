"""The conversation as a retrieval source (ragstream/workbench/conversations.py, backends/search/memory.py,
Engine.answer recording turns, run --conversation, the HTTP /answer's conversation): a real
Chroma in a temp dir, the real embedding model, the extractive answer (no LLM)."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing

import httpx
import pytest
from click.testing import CliRunner

from ragstream.common.errors import ConversationError, ConversationNotFoundError
from ragstream.interfaces import cli
from ragstream.interfaces.service.http import create_app
from ragstream.state.super_prompt import View
from ragstream.workbench.api import RAGPipeline
from ragstream.workbench.conversations import Conversations, chunk_id, is_conversation_chunk
from ragstream.workbench.engine import Engine
from ragstream.workbench.qa_log import MIGRATIONS
from tests.conftest import make_config, three_article_engine
from tests.test_service import serving


@pytest.fixture(scope="module")
def engine(tmp_path_factory, embedder) -> Engine:
    return three_article_engine(tmp_path_factory.mktemp("conv"), embedder)


def _turn(engine: Engine, prompt: str, name: str):
    sp = engine.run(engine.new(prompt, conversation_name=name))
    return engine.answer(sp)


def _ids(sp, view: str = View.RETRIEVAL) -> list[str]:
    return [r.chunk_id for r in sp.view(view)]


def test_a_turn_remembers_what_the_answer_asserted_each_sentence_with_its_source(engine):
    """Never the question (nor a fact the person stated in it), never a list of source labels:
    one line per answer sentence that cites a document, followed by that document's label."""
    name = "asserted"
    question = "I use RAGstream offline. How does the ReRanker choose its backend?"
    sp, ans = _turn(engine, question, name)
    assert sp.extras.turn.turn == 1 and sp.extras.turn.remembered, sp.extras.turn
    turn = engine.conversations().turns(name)[0]
    lines = turn.memory_text.splitlines()
    labels = {c.label for c in ans.sources}
    assert lines and all(" (from " in line for line in lines), lines
    for line in lines:
        said, source = line.rsplit(" (from ", 1)
        assert set(source.rstrip(")").split("; ")) <= labels, (source, labels)
        assert "[" not in said and not said.endswith("?")
    assert "I use RAGstream offline" not in turn.memory_text
    assert "Sources:" not in turn.memory_text and "`kb/" not in turn.memory_text
    chunk = turn.chunk()
    assert is_conversation_chunk(chunk) and chunk.source == "conversation"
    assert chunk.doc_type == "conversation" and chunk.heading_path[0].startswith("Turn 1 · ")
    assert chunk.citation_label.startswith("conversation § Turn 1 · ")

    # what the person said was never remembered: asked later, no turn brings it back
    later = engine.run(engine.new("Do I use RAGstream offline?", conversation_name=name))
    assert "I use RAGstream offline" not in later.S_CTX_MD
    # another conversation, and no conversation at all, never see the turn
    other = engine.run(engine.new("How does the ReRanker choose its backend?",
                                  conversation_name="elsewhere"))
    alone = engine.run("How does the ReRanker choose its backend?")
    for sp_other in (other, alone):
        for view in (View.RETRIEVAL, View.RERANKED, View.A3, View.A4):
            assert not [c for c in _ids(sp_other, view) if c.startswith(f"conversation:{name}#")]
    assert (other.extras.retrieval.conversation, other.extras.retrieval.conversation_chunks) == \
        ("elsewhere", 0)


def test_a_turn_is_used_when_no_document_says_it_and_the_answer_says_so(tmp_path, embedder):
    """A turn remembered from a document that is gone since: the next question in the
    conversation is answered from the turn, and the answer's extras and the CLI say that it
    uses remembered turn 1 (its Sources label reads conversation § Turn 1)."""
    engine = three_article_engine(tmp_path, embedder)
    note = engine.cfg.kb_dir / "heronsgate.md"
    note.write_text("# Heronsgate\n\nThe Heronsgate staging cluster runs on exactly seven nodes "
                    "in the basement rack.\n", encoding="utf-8")
    engine.ensure_knowledge_base()
    name = "remembers"
    sp, ans = _turn(engine, "How many nodes does the Heronsgate staging cluster run on?", name)
    assert sp.extras.turn.remembered and "seven nodes" in engine.conversations().turns(name)[0].memory_text
    assert not sp.extras.turn.used_turns and sp.extras.turn.uses is None
    note.unlink()
    engine.ensure_knowledge_base()  # the document is gone; the turn remembers what it said
    sp, ans = _turn(engine, "How many nodes does the Heronsgate staging cluster run on?", name)
    assert ans.sources and ans.sources[0].chunk_id == chunk_id(name, 1)
    assert ans.sources[0].label.startswith("conversation § Turn 1 · ")
    assert "seven nodes" in ans.text
    assert sp.extras.turn.used_turns == [1]
    assert sp.extras.turn.uses.startswith(f"The answer uses remembered turn 1 of conversation {name!r}")
    assert json.loads(sp.to_json())["extras"]["turn"]["used_turns"] == [1]


def test_a_turn_that_found_nothing_is_kept_in_the_log_but_not_remembered(engine):
    name = "nothing-found"
    sp, ans = _turn(engine, "Which constellation is the brightest in the southern winter sky "
                            "over Patagonia?", name)
    assert ans.mode == "no-results", ans.mode_reason
    assert sp.extras.turn.turn == 1 and not sp.extras.turn.remembered
    assert "found nothing" in sp.extras.turn.why
    turns = engine.conversations().turns(name)
    assert len(turns) == 1 and not turns[0].in_memory
    assert engine.conversations().memory(name, engine.services.embedder) is None
    nxt = engine.run(engine.new("Which constellation is brightest over Patagonia?",
                                conversation_name=name), until="Retrieval")
    assert not [c for c in _ids(nxt) if c.startswith("conversation:")]
    assert (nxt.extras.retrieval.conversation, nxt.extras.retrieval.conversation_chunks) == (name, 0)
    assert len(nxt.recent_conversation) == 1


def test_forgetting_a_turn_takes_it_out_of_memory_and_makes_the_pass_out_of_date(engine):
    name = "forgetful"
    _turn(engine, "How does the ReRanker choose its backend?", name)
    question = "Which backend does the ReRanker use when no cross-encoder can be loaded?"
    sp = engine.run(engine.new(question, conversation_name=name), until="Retrieval")
    assert chunk_id(name, 1) in _ids(sp)  # a candidate
    engine.forget_turn(name, 1)
    stale = engine.stale(sp)
    assert stale is not None and stale.stage == "Retrieval"
    assert stale.reasons == ["the conversation's memory changed (a turn was added or forgotten)"]
    again = engine.resume(sp)
    assert chunk_id(name, 1) not in _ids(again)
    assert engine.new(question, conversation_name=name).recent_conversation == []
    turn = engine.conversations().turns(name)[0]
    assert turn.removed and not turn.in_memory
    with pytest.raises(ConversationNotFoundError, match="has no turn 9"):
        engine.forget_turn(name, 9)


def test_a_pin_of_a_conversation_chunk_is_checked_against_the_combined_index(engine):
    name = "pinning"
    _turn(engine, "How does the ReRanker choose its backend?", name)
    sp = engine.new("Where is the knowledge base folder configured?", conversation_name=name)
    sp = engine.pin(sp, chunk_id(name, 1))
    sp = engine.run(sp)
    assert chunk_id(name, 1) in sp.final_selection_ids
    with pytest.raises(Exception, match="conversation:pinning#7"):
        engine.pin(sp, chunk_id(name, 7))


def test_turns_are_stored_encoded_once_scrubbed_and_reencoded_for_another_model(engine, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-conversation-secret-0042")
    name = "secrets"
    _turn(engine, "My key is sk-test-conversation-secret-0042; how does the ReRanker "
                  "choose its backend?", name)
    _turn(engine, "How does the ReRanker choose its backend?", name)  # remembered
    convs = Conversations(engine.cfg.qa_log_path, secret_env=["OPENAI_API_KEY"])
    with closing(sqlite3.connect(convs.path)) as conn:
        rows = conn.execute(
            "SELECT question, encoding, encoded_with, memory_text FROM turns t JOIN conversations c "
            "ON c.id = t.conversation_id WHERE c.name = ? ORDER BY turn", (name,)).fetchall()
        assert conn.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
    assert not [r for r in rows if "sk-test" in "".join(str(v) for v in r)]
    assert "***" in rows[0][0]
    _, blob, made_with, _ = rows[1]
    assert blob and made_with.endswith(":384")
    memory = convs.memory(name, engine.services.embedder)
    assert memory is not None and len(memory.windows[chunk_id(name, 2)]) >= 1
    turn_2 = "conversation_id = (SELECT id FROM conversations WHERE name = ?) AND turn = 2"
    with closing(sqlite3.connect(convs.path)) as conn, conn:
        conn.execute(f"UPDATE turns SET encoded_with = 'another-model:384' WHERE {turn_2}", (name,))
    again = convs.memory(name, engine.services.embedder)
    assert again is not None and again.fingerprint == memory.fingerprint
    with closing(sqlite3.connect(convs.path)) as conn:
        assert conn.execute(f"SELECT encoded_with FROM turns WHERE {turn_2}",
                            (name,)).fetchone()[0] == made_with
    with pytest.raises(ConversationError, match="cannot be a conversation's name"):
        engine.new("x", conversation_name="has space")


def test_cli_run_answer_conversation_resumes_and_conversation_commands(engine, monkeypatch):
    monkeypatch.setattr(cli, "_engine", lambda kb=None: Engine(engine.base_cfg, engine.services))
    runner = CliRunner()
    first = runner.invoke(cli.main, ["run", "How does the ReRanker choose its backend?", "--answer",
                                     "--conversation", "cli-conv", "--no-save", "--no-sync"])
    assert first.exit_code == 0, first.output
    assert "turn 1 of conversation 'cli-conv' remembered" in first.output
    second = runner.invoke(cli.main, ["run", "Which reranker backend runs offline?", "--json",
                                      "--conversation", "cli-conv", "--no-save", "--no-sync",
                                      "--answer"])
    sp = json.loads(second.output[second.output.index("{"):])
    assert sp["conversation_name"] == "cli-conv" and len(sp["recent_conversation"]) == 1
    assert sp["recent_conversation"][0]["turn"] == 1
    assert chunk_id("cli-conv", 1) in [r["chunk_id"] for r in sp["views_by_stage"]["retrieval"]]
    assert sp["extras"]["turn"]["turn"] == 2

    listed = json.loads(runner.invoke(cli.main, ["conversation", "list", "--json"]).output)
    mine = next(c for c in listed if c["name"] == "cli-conv")
    assert (mine["turns"], mine["kb"]) == (2, "default") and mine["in_memory"] >= 1
    shown = runner.invoke(cli.main, ["conversation", "show", "cli-conv"]).output
    assert "turn 1 · " in shown and "remembered" in shown and "ReRanker choose" in shown
    assert "remembers: " in shown and " (from kb/" in shown
    forgot = runner.invoke(cli.main, ["conversation", "forget", "cli-conv", "1"])
    assert forgot.exit_code == 0 and "forgotten" in forgot.output
    assert "forgotten" in runner.invoke(cli.main, ["conversation", "show", "cli-conv"]).output
    kept = runner.invoke(cli.main, ["conversation", "delete", "cli-conv"], input="n\n")
    assert kept.exit_code == 1 and "cli-conv" in engine.conversations().names()
    gone = runner.invoke(cli.main, ["conversation", "delete", "cli-conv", "--yes"])
    assert gone.exit_code == 0 and "cli-conv" not in engine.conversations().names()
    missing = runner.invoke(cli.main, ["conversation", "show", "cli-conv"])
    assert missing.exit_code == 2 and "There is no conversation 'cli-conv'" in missing.output


def test_http_answer_continues_a_named_conversation(engine):
    pipeline = RAGPipeline(Engine(engine.base_cfg, engine.services))
    with serving(create_app(pipeline)) as url:
        def ask(query: str) -> dict:
            body = {"query": query, "context_key": "c:u", "conversation": "over-http"}
            with httpx.stream("POST", f"{url}/answer", json=body, timeout=120) as resp:
                assert resp.status_code == 200
                text = resp.read().decode()
            done = text[text.index("event: done"):].split("data: ", 1)[1].split("\n", 1)[0]
            return json.loads(done)

        first = ask("How does the ReRanker choose its backend?")
        assert (first["conversation"], first["turn"], first["remembered"], first["kb"]) == \
            ("over-http", 1, True, "default")
        second = ask("Which reranker backend runs offline?")
        assert second["turn"] == 2
    pipeline.close()
    turns = engine.conversations().turns("over-http")
    assert [t.turn for t in turns] == [1, 2] and "runs offline" in turns[1].question


def test_memory_text_keeps_sourced_sentences_not_the_question_nor_the_persons_words():
    from ragstream.workbench.conversations import memory_text

    answer = ("The ReRanker uses the cross-encoder when its model is on disk. [1] Otherwise it "
              "falls back to the offline backend, which mixes cosine and BM25 features. [1][2]\n"
              "- Which reranker runs on a box without model files? [1]\n"
              "- Our box has no model files at all. [2]\n"
              "- Keep every answer under five sentences please. [1]\n"
              "- This sentence cites nothing at all here.\n"
              "- What turn 3 said is repeated here as it was. [3]")
    text, why = memory_text(answer, {1: "reranking.md § Backends", 2: "faq.md § Reranker"},
                            question="Our box has no model files at all. Which reranker runs?",
                            own=["Keep every answer under five sentences please."], turns=[3])
    assert why == ""
    assert text.splitlines() == [
        "The ReRanker uses the cross-encoder when its model is on disk. (from reranking.md § Backends)",
        "Otherwise it falls back to the offline backend, which mixes cosine and BM25 features. "
        "(from reranking.md § Backends; faq.md § Reranker)"]
    nothing, why = memory_text("Our box has no model files at all. [1] No citation here at all.",
                               {1: "r.md"}, question="Our box has no model files at all. Which?")
    assert nothing == "" and why == ("nothing it asserted can be remembered: 1 sentence cites "
                                     "no source, 1 sentence repeats the question")


def test_asked_again_the_documents_lead_not_the_earlier_turn(engine):
    """The same question twice in one conversation: the first turn says what the documents say,
    so at Retrieval and the ReRanker it ranks after them (its reason says so), the A3 gate drops
    it as their duplicate, and the answer cites the documents, never the turn."""
    name = "asked-twice"
    # a plain question: one with a personal preamble ("I run RAGstream on a laptop without a
    # GPU. …") sits near answer.answerability.min_answerable, where another CPU may refuse it
    question = "How does the ReRanker choose its backend?"
    first, first_ans = _turn(engine, question, name)
    again, ans = _turn(engine, question, name)
    turn_1 = chunk_id(name, 1)
    from ragstream.stages.sources import covering

    for view in (View.RETRIEVAL, View.RERANKED):
        ids = _ids(again, view)
        row = next(r for r in again.view(view) if r.chunk_id == turn_1)
        chunks = again.chunk_map()
        held_by = covering([chunks[c] for c in ids], engine.cfg.settings.conversations.covered_share)
        assert held_by.get(turn_1), "the documents among the candidates say what the turn says"
        # it ranks after every document saying what it says: moved there (its reason says so),
        # or there already (the answer quoted the best-ranked document alone)
        assert all(ids.index(d) < ids.index(turn_1) for d in held_by[turn_1]), (view, row)
        if "ranked after " in row.reason:  # moved there: the reason names the documents
            assert "a remembered turn saying what it says" in row.reason, row.reason
    a3 = next(r for r in again.view(View.A3) if r.chunk_id == turn_1)
    assert a3.status == "dropped" and a3.reason.startswith("duplicate of "), a3.reason
    assert turn_1 not in again.final_selection_ids
    assert not [c for c in ans.sources if c.chunk_id.startswith("conversation:")]
    assert first_ans.sources[0].chunk_id in [c.chunk_id for c in ans.sources][:2]
    assert question not in ans.text and again.extras.turn.uses is None


def test_the_turns_are_searched_beside_the_knowledge_base(engine, tmp_path, embedder):
    """A conversation's turns are a small engine beside the knowledge base's: each turn keeps
    its own stored vectors (exact cosines), its BM25 is the knowledge base's formula with the
    knowledge base's statistics (a chunk holding the same words scores alike), and a store
    with no documents yet still searches a turn."""
    import numpy as np

    from ragstream.backends.keyword_index import bm25_idf, bm25_score, index_text

    name = "combined"
    _turn(engine, "How does the ReRanker choose its backend?", name)
    memory = engine.conversations().memory(name, engine.services.embedder)
    kb = engine.services.index()
    both = engine.services.with_memory(memory).index()
    turn = memory.chunks[0]
    assert both.n_chunks == kb.n_chunks + 1 and both.memory_chunks == 1
    assert both.chunk(turn.id) == turn and kb.chunk(turn.id) is None
    q = engine.services.embedder.embed(["offline backend cross-encoder model on disk"])
    near = dict(both.dense(q, kb.n_chunks + 1)[0])
    want = float((np.vstack(memory.windows[turn.id]) @ q[0]).max())
    assert abs(near[turn.id] - want) < 1e-5
    terms = both.query_terms("offline backend cross-encoder model on disk")
    n, avg = both._stats()
    df = both.doc_freqs(terms)
    expected = bm25_score(both.tokenizer.query_terms(index_text(turn)), terms,
                          {t: bm25_idf(n, df[t]) for t in terms}, avg)
    assert expected > 0 and abs(both.keyword_scores(terms, [turn.id])[turn.id] - expected) < 1e-6
    assert turn.id in {c for c, _ in both.keyword(terms, kb.n_chunks + 1)}
    ev = both.evidence([turn])[0]
    assert ev is not None and len(ev.sentences) >= 1

    empty = Engine(make_config(tmp_path / "index", RAGSTREAM_KB_DIR=str(tmp_path / "none")))
    empty.services.embedder = embedder
    alone = empty.services.with_memory(memory).index()
    assert [c.id for c in alone.all_chunks()] == [chunk_id(name, 1)]
    assert [c for c, _ in alone.dense(q, 5)[0]] == [chunk_id(name, 1)]


def test_an_answered_pass_stays_current_and_never_finds_its_own_answer(engine):
    name = "own-answer"
    sp, _ = _turn(engine, "How does the ReRanker choose its backend?", name)
    assert sp.own_turn == 1 and engine.stale(sp) is None  # its own turn does not outdate it
    edited = engine.resume(engine.exclude(sp, _ids(sp)[0]))  # a re-run of the same prompt
    assert chunk_id(name, 1) not in _ids(edited) and edited.own_turn == 1
    again, _ = engine.answer(edited)
    assert again.extras.turn.turn == 2 and again.own_turn == 1 and engine.stale(again) is None
    fresh = engine.run(engine.new("Which reranker backend runs offline?", conversation_name=name))
    assert fresh.own_turn == 0 and {chunk_id(name, 1), chunk_id(name, 2)} <= set(_ids(fresh))
