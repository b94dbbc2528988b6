"""The conversation as a retrieval source (ragstream/conversations.py, DocumentIndex.with_memory,
Engine.answer recording turns, run --conversation, the HTTP /answer's conversation): a real
Chroma in a temp dir, the real embedding model, the extractive answer (no LLM)."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing

import httpx
import pytest
from click.testing import CliRunner

from ragstream import cli
from ragstream.conversations import Conversations, chunk_id, is_conversation_chunk
from ragstream.engine import Engine
from ragstream.errors import ConversationError, ConversationNotFoundError
from ragstream.qa_log import MIGRATIONS
from ragstream.service.api import RAGPipeline
from ragstream.service.http import create_app
from ragstream.super_prompt import View
from tests.conftest import make_config, three_article_engine
from tests.test_service import serving

#: turn 1 states a fact the knowledge base does not hold, then asks about the KB
FACT_TURN = ("Our staging cluster is called Heronsgate and runs on exactly seven nodes. "
             "How does the ReRanker choose its backend?")
FACT_QUESTION = "How many nodes does the Heronsgate staging cluster run on?"
#: ten turns in between, each about the knowledge base and answered from it
BETWEEN = [
    "What does the cross-encoder read when it scores a candidate?",
    "Does RAGstream need an internet connection or an API key?",
    "Where is the knowledge base folder configured?",
    "How do I change the number of chunks in the final selection?",
    "What is the offline reranker made of?",
    "How can I make the ReRanker use the offline backend?",
    "Which settings control the embedding model?",
    "Where are the uploaded files kept?",
    "How do I point RAGstream at an OpenAI-compatible endpoint?",
    "What does the batch size of the reranker change?",
]


@pytest.fixture(scope="module")
def engine(tmp_path_factory, embedder) -> Engine:
    return three_article_engine(tmp_path_factory.mktemp("conv"), embedder)


def _turn(engine: Engine, prompt: str, name: str):
    sp = engine.run(engine.new(prompt, conversation_name=name))
    return engine.answer(sp)


def _ids(sp, view: str = View.RETRIEVAL) -> list[str]:
    return [r.chunk_id for r in sp.view(view)]


def test_a_fact_of_turn_1_is_retrieved_in_turn_12_and_no_other_conversation_sees_it(engine):
    name = "heronsgate"
    sp, ans = _turn(engine, FACT_TURN, name)
    assert sp.extras.turn.turn == 1 and sp.extras.turn.remembered, sp.extras.turn
    for prompt in BETWEEN:
        sp, ans = _turn(engine, prompt, name)
        assert sp.extras.turn.remembered, (prompt, sp.extras.turn)
    assert sp.extras.turn.turn == 11

    n4 = engine.cfg.limits.N4_RECENT_CONV_MAX_PAIRS
    twelfth = engine.new(FACT_QUESTION, conversation_name=name)
    # turn 1 is older than the N4 turns the prompt carries: only retrieval can bring it back
    assert len(twelfth.recent_conversation) == n4 == 10
    assert not any("Heronsgate" in t.user for t in twelfth.recent_conversation)
    twelfth = engine.run(twelfth)
    turn_1 = chunk_id(name, 1)
    ids = _ids(twelfth)
    assert ids.index(turn_1) == 0, ids[:5]  # the best candidate of all
    assert turn_1 in twelfth.final_selection_ids
    chunk = twelfth.chunk_map()[turn_1]
    assert is_conversation_chunk(chunk) and chunk.source == "conversation"
    assert chunk.doc_type == "conversation" and chunk.heading_path[0].startswith("Turn 1 · ")
    assert chunk.citation_label.startswith("conversation § Turn 1 · ")
    assert "seven nodes" in chunk.text and "Sources: " in chunk.text and "[1]" not in chunk.text
    record = twelfth.extras.retrieval
    assert (record.kb, record.conversation, record.conversation_chunks) == ("default", name, 11)
    assert "Heronsgate" in twelfth.prompt_ready  # the remembered turn is a source of the prompt
    twelfth, ans = engine.answer(twelfth)
    assert ans.sources and ans.sources[0].chunk_id == turn_1 and "seven nodes" in ans.text

    # another conversation, and no conversation at all, never see it
    other, _ = _turn(engine, FACT_QUESTION, "elsewhere")
    alone = engine.run(FACT_QUESTION)
    for sp_other in (other, alone):
        for view in (View.RETRIEVAL, View.RERANKED, View.A3, View.A4):
            assert not [c for c in _ids(sp_other, view) if c.startswith(f"conversation:{name}#")]
        assert "seven nodes" not in sp_other.prompt_ready
    assert (other.extras.retrieval.conversation, other.extras.retrieval.conversation_chunks) == \
        ("elsewhere", 0)


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
    _turn(engine, "Our release train is named Bramblewood. How does the ReRanker choose its "
                  "backend?", name)
    question = "What is our release train named Bramblewood about?"
    sp = engine.run(engine.new(question, conversation_name=name), until="Retrieval")
    assert chunk_id(name, 1) in _ids(sp)[:3]
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
    _turn(engine, "Our cache server is Tollgate. How does the ReRanker choose its backend?", name)
    sp = engine.new("Where is the knowledge base folder configured?", conversation_name=name)
    sp = engine.pin(sp, chunk_id(name, 1))
    sp = engine.run(sp)
    assert chunk_id(name, 1) in sp.final_selection_ids
    with pytest.raises(Exception, match="conversation:pinning#7"):
        engine.pin(sp, chunk_id(name, 7))


def test_turns_are_stored_encoded_once_scrubbed_and_reencoded_for_another_model(engine, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-conversation-secret-0042")
    name = "secrets"
    sp, _ = _turn(engine, "My key is sk-test-conversation-secret-0042; how does the ReRanker "
                          "choose its backend?", name)
    convs = Conversations(engine.cfg.qa_log_path, secret_env=["OPENAI_API_KEY"])
    with closing(sqlite3.connect(convs.path)) as conn:
        (question, blob, made_with), = conn.execute(
            "SELECT question, encoding, encoded_with FROM turns t JOIN conversations c ON "
            "c.id = t.conversation_id WHERE c.name = ?", (name,))
        assert conn.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
    assert "sk-test" not in question and "***" in question
    assert blob and made_with.endswith(":384")
    memory = convs.memory(name, engine.services.embedder)
    assert memory is not None and len(memory.windows[chunk_id(name, 1)]) >= 1
    with closing(sqlite3.connect(convs.path)) as conn, conn:
        conn.execute("UPDATE turns SET encoded_with = 'another-model:384' WHERE question = ?", (question,))
    again = convs.memory(name, engine.services.embedder)
    assert again is not None and again.fingerprint == memory.fingerprint
    with closing(sqlite3.connect(convs.path)) as conn:
        assert conn.execute("SELECT encoded_with FROM turns WHERE question = ?",
                            (question,)).fetchone()[0] == made_with
    with pytest.raises(ConversationError, match="cannot be a conversation's name"):
        engine.new("x", conversation_name="has space")


def test_cli_run_answer_conversation_resumes_and_conversation_commands(engine, monkeypatch):
    monkeypatch.setattr(cli, "_engine", lambda kb=None: Engine(engine.base_cfg, engine.services))
    runner = CliRunner()
    first = runner.invoke(cli.main, ["run", "Our tape library is Quillfeather. How does the ReRanker "
                                            "choose its backend?", "--answer", "--conversation",
                                     "cli-conv", "--no-save", "--no-sync"])
    assert first.exit_code == 0, first.output
    assert "turn 1 of conversation 'cli-conv' remembered" in first.output
    second = runner.invoke(cli.main, ["run", "What is the Quillfeather tape library?", "--json",
                                      "--conversation", "cli-conv", "--no-save", "--no-sync",
                                      "--answer"])
    sp = json.loads(second.output[second.output.index("{"):])
    assert sp["conversation_name"] == "cli-conv" and len(sp["recent_conversation"]) == 1
    assert sp["recent_conversation"][0]["turn"] == 1
    assert sp["views_by_stage"]["retrieval"][0]["chunk_id"] == chunk_id("cli-conv", 1)
    assert sp["extras"]["turn"]["turn"] == 2

    listed = json.loads(runner.invoke(cli.main, ["conversation", "list", "--json"]).output)
    mine = next(c for c in listed if c["name"] == "cli-conv")
    assert (mine["turns"], mine["in_memory"]) == (2, 2)
    shown = runner.invoke(cli.main, ["conversation", "show", "cli-conv"]).output
    assert "turn 1 · " in shown and "remembered" in shown and "Quillfeather" in shown
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

        first = ask("Our printer is named Larkspur. How does the ReRanker choose its backend?")
        assert (first["conversation"], first["turn"], first["remembered"], first["kb"]) == \
            ("over-http", 1, True, "default")
        second = ask("What is the printer Larkspur?")
        assert second["turn"] == 2
    pipeline.close()
    turns = engine.conversations().turns("over-http")
    assert [t.turn for t in turns] == [1, 2] and "Larkspur" in turns[1].question


def test_a_turn_remembers_what_it_adds_not_what_it_quoted():
    from ragstream.conversations import memory_text

    source = ("The ReRanker uses the cross-encoder when its model is on disk. Otherwise it falls "
              "back to the offline backend, which mixes cosine and BM25 features.")
    answer = ("The ReRanker uses the cross-encoder when its model is on disk. [1] Otherwise it "
              "falls back to the offline backend, which mixes cosine and BM25 features. [1]\n"
              "- In our setup that means the offline backend, since the box has no model. [2]")
    text = memory_text("Our box has no model files. Which reranker runs?", answer,
                       ["reranking.md § Backends"], [source])
    assert text.split("\n\n") == [
        "Our box has no model files. Which reranker runs?",
        "In our setup that means the offline backend, since the box has no model.",
        "Sources: `reranking.md § Backends`"]
    # an extractive answer joins a lead-in to a sentence: still the source's words
    joined = ("Otherwise it falls back to the offline backend: The ReRanker uses the cross-encoder "
              "when its model is on disk. [1]")
    assert memory_text("Which?", joined, ["r.md"], [source]) == "Which?\n\nSources: `r.md`"


def test_asked_again_the_documents_lead_not_the_earlier_turn(engine):
    """The same question twice in one conversation: the first turn is a candidate (and kept),
    but it neither sets the A3 gate's bar (it scores far above every document for the same
    words) nor gives the answer's sentences (a question, the prompt's own words, the sources'
    labels and the quoted sentences are not answers)."""
    name = "asked-twice"
    question = "I run RAGstream on a laptop without a GPU. How does the ReRanker choose its backend?"
    first, first_ans = _turn(engine, question, name)
    again, ans = _turn(engine, question, name)
    turn_1 = chunk_id(name, 1)
    assert turn_1 in _ids(again)[:3]
    kept = again.kept_ids(View.A3)
    assert turn_1 in kept and len([c for c in kept if not c.startswith("conversation:")]) >= 3
    assert ans.sources and not ans.sources[0].chunk_id.startswith("conversation:")
    documents = [c.chunk_id for c in ans.sources if not c.chunk_id.startswith("conversation:")]
    assert first_ans.sources[0].chunk_id in documents[:2], (documents, first_ans.sources)
    assert "laptop without a GPU" not in ans.text


def test_the_combined_index_is_the_two_as_one(engine, tmp_path, embedder):
    """with_memory gives each chunk its own vectors and the BM25 of the union, as an index
    built from scratch over both would; a store with no documents yet still searches a turn."""
    import numpy as np

    from ragstream.backends.keyword_index import KeywordIndex

    name = "combined"
    _turn(engine, "Our backup robot is Pennywhistle. How does the ReRanker choose its backend?", name)
    memory = engine.conversations().memory(name, engine.services.embedder)
    kb = engine.services.index()
    both = kb.with_memory(memory, KeywordIndex())
    assert both.n_chunks == kb.n_chunks + 1 and both.ids[-1] == chunk_id(name, 1)
    def windows(c):
        i = both.row(c.id)
        return list(both.window_vectors[both.window_offsets[i]:both.window_offsets[i + 1]])

    def sentences(c):
        i = both.row(c.id)
        a, b = both.sentence_offsets[i], both.sentence_offsets[i + 1]
        return [((int(x), int(y)), v) for (x, y), v in zip(both.sentence_spans[a:b],
                                                            both.sentence_vectors[a:b])]

    scratch = type(kb).from_records(
        "x", kb.chunks + list(memory.chunks),
        {**{c.id: windows(c) for c in kb.chunks}, **memory.windows},
        {**{c.id: sentences(c) for c in kb.chunks}, **memory.sentences}, kb.dim, KeywordIndex())
    query = "Pennywhistle backup robot reranker backend"
    mine = dict(zip(both.ids, both.keyword.scores(query)))
    theirs = dict(zip(scratch.ids, scratch.keyword.scores(query)))
    assert mine.keys() == theirs.keys() and all(abs(mine[k] - theirs[k]) < 1e-5 for k in mine)
    q = engine.services.embedder.embed([query])
    a, b = both.piece_cosines(q), scratch.piece_cosines(q)
    assert all(abs(a[both.row(c)][0] - b[scratch.row(c)][0]) < 1e-5 for c in both.ids)
    turn = both.chunks[-1]
    assert both.evidence(turn) is not None and len(both.evidence(turn).sentences) >= 1

    empty = Engine(make_config(tmp_path / "index", RAGSTREAM_KB_DIR=str(tmp_path / "none")))
    empty.services.embedder = embedder
    alone = empty.services.index().with_memory(memory, KeywordIndex())
    assert alone.ids == [chunk_id(name, 1)] and alone.piece_cosines(q).shape == (1, 1)
    assert np.isfinite(alone.piece_cosines(q)).all()


def test_an_answered_pass_stays_current_and_never_finds_its_own_answer(engine):
    name = "own-answer"
    sp, _ = _turn(engine, "Our lab printer is Wrenfield. How does the ReRanker choose its backend?", name)
    assert sp.own_turn == 1 and engine.stale(sp) is None  # its own turn does not outdate it
    edited = engine.resume(engine.exclude(sp, _ids(sp)[0]))  # a re-run of the same prompt
    assert chunk_id(name, 1) not in _ids(edited) and edited.own_turn == 1
    again, _ = engine.answer(edited)
    assert again.extras.turn.turn == 2 and again.own_turn == 1 and engine.stale(again) is None
    fresh = engine.run(engine.new("What is the Wrenfield printer?", conversation_name=name))
    assert fresh.own_turn == 0 and {chunk_id(name, 1), chunk_id(name, 2)} <= set(_ids(fresh))
