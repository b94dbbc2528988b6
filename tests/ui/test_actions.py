"""The actions without the page: the upload action (AppTest cannot drive st.file_uploader) and
the streamed answer's worker thread."""

import datetime as dt
import threading
import time

import pytest

from ragstream.answering.answer import FALLBACK_NOTICE
from ragstream.common.errors import StageOrderError
from ragstream.interfaces.ui import actions, ingesting
from ragstream.interfaces.ui import state as S
from ragstream.state.super_prompt import Answer, SuperPrompt
from ragstream.workbench.engine import Engine
from tests.fake_openai import Reply
from tests.llm_support import answer_only, llm_config, with_llm


def test_ingest_uploads_saves_and_ingests(fresh_engine, tmp_path):
    st_state = {}
    S.init_state(st_state)
    ok = ingesting.ingest_uploads(fresh_engine, st_state,
                                [("notes.md", b"# Notes\n\nOwls hunt at night. They fly silently.\n")])
    assert ok, st_state[S.ERROR]
    assert (fresh_engine.cfg.uploads_dir / "notes.md").is_file()
    assert st_state[S.INGEST_REPORT]["processed"] == 1
    assert "uploads/notes.md" in fresh_engine.services.store.documents()


def test_ingest_uploads_rejects_other_types(fresh_engine):
    st_state = {}
    S.init_state(st_state)
    assert not ingesting.ingest_uploads(fresh_engine, st_state, [("x.xlsx", b"PK\x03\x04")])
    kind, message = st_state[S.ERROR]
    assert kind == "ingestion" and "x.xlsx" in message


def test_a_pdf_upload_is_ingested_or_refused_with_its_reason(fresh_engine):
    """A PDF is one of the uploader's types; a damaged one is named in the report with why,
    beside the Markdown file uploaded with it, which is ingested."""
    st_state = {}
    S.init_state(st_state)
    assert "pdf" in ingesting.upload_types(fresh_engine) and "docx" in ingesting.upload_types(fresh_engine)
    ok = ingesting.ingest_uploads(fresh_engine, st_state, [("broken.pdf", b"%PDF-1.7\n1 0 obj <<"),
                                                         ("notes.md", b"# Notes\n\nSome text to keep.\n")])
    assert ok, st_state[S.ERROR]
    report = st_state[S.INGEST_REPORT]
    assert report["processed"] == 1 and report["failed"] == 1
    assert "uploads/broken.pdf" in report["errors"][0] and "DamagedFileError" in report["errors"][0]


# --------------------------------------------------------------------------- the streamed answer

ON_TOPIC = "Which command starts the Chroma server?"  # source 1 clearly the "chroma run" section


@pytest.fixture(scope="module")
def finished(kb_engine) -> SuperPrompt:
    """A super-prompt whose eight stages have run (deterministic agents)."""
    return kb_engine.run(ON_TOPIC)


def session(sp: SuperPrompt) -> dict:
    st_state: dict = {}
    S.init_state(st_state)
    st_state[S.SP], st_state[S.PROMPT] = sp, sp.user_text
    return st_state


def answer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == actions.ANSWER_THREAD]


def scripted(kb_engine, answer) -> Engine:
    """An engine over the session's KB whose ``answer`` is ``answer``."""
    engine = Engine(kb_engine.cfg, kb_engine.services)
    engine.answer = answer
    return engine


def test_answer_stream_yields_the_answer_then_keeps_and_logs_it(kb_engine, finished):
    st_state = session(finished)
    log = kb_engine.qa_log()
    before = log.count()
    pieces = list(actions.answer_stream(kb_engine, st_state))
    assert st_state[S.ERROR] is None
    ans = st_state[S.SP].answer
    assert ans is not None and ans.mode == "extractive" and ans.sources
    assert len(pieces) > 1 and "".join(pieces) == ans.text
    assert st_state[S.SP].extras.qa_log.id and log.count() == before + 1
    assert [t.assistant for t in st_state[S.CONVERSATION]] == [ans.text]
    assert not answer_threads()


def test_pieces_arrive_in_order_while_the_answer_still_runs(kb_engine, finished):
    taken = threading.Semaphore(0)
    words = ["Owls ", "hunt ", "at ", "night ", "[1]."]

    def answer(sp, on_token=None, cfg=None):
        for word in words:
            on_token(word)
            # the next piece is produced only once the reader has this one: a generator that
            # gave the pieces out only after the answer returned would time out here
            if not taken.acquire(timeout=10):
                raise RuntimeError("the piece was not read while the answer ran")
        done = sp.model_copy(deep=True)
        done.answer = Answer(text="".join(words))
        return done, done.answer

    st_state = session(finished)
    got = []
    for piece in actions.answer_stream(scripted(kb_engine, answer), st_state):
        got.append(piece)
        taken.release()
    assert got == words
    assert st_state[S.ERROR] is None and st_state[S.SP].answer.text == "".join(words)
    assert not answer_threads()


def test_answer_stream_reports_a_ragstream_error_as_before(kb_engine, finished):
    unfinished = kb_engine.run(ON_TOPIC, until="A4_Condenser")
    with pytest.raises(StageOrderError) as expected:
        kb_engine.answer(unfinished)
    st_state = session(unfinished)
    assert list(actions.answer_stream(kb_engine, st_state)) == []
    assert st_state[S.ERROR] == (expected.value.kind, str(expected.value))
    assert st_state[S.SP] is unfinished and st_state[S.SP].answer is None
    assert st_state[S.CONVERSATION] == []
    assert not answer_threads()


def test_answer_stream_reraises_any_other_error_from_the_worker(kb_engine, finished):
    def answer(sp, on_token=None, cfg=None):
        on_token("Half an answer")
        raise ValueError("the model file is corrupt")

    st_state = session(finished)
    got = []
    with pytest.raises(ValueError, match="the model file is corrupt"):
        for piece in actions.answer_stream(scripted(kb_engine, answer), st_state):
            got.append(piece)
    assert got == ["Half an answer"] and st_state[S.SP] is finished
    assert not answer_threads()


def test_closing_the_stream_early_stops_the_worker(kb_engine, finished):
    seen = {"stopped": False, "pieces": 0}

    def answer(sp, on_token=None, cfg=None):
        try:
            while seen["pieces"] < 500:  # a long answer (5 s): the reader going away ends it
                seen["pieces"] += 1
                on_token(f"piece {seen['pieces']} ")
                time.sleep(0.01)
        except BaseException:
            seen["stopped"] = True
            raise
        raise AssertionError("the answer ran to its end although nobody read it")

    st_state = session(finished)
    stream = actions.answer_stream(scripted(kb_engine, answer), st_state)
    assert next(stream) == "piece 1 " and next(stream) == "piece 2 "
    assert answer_threads()
    stream.close()
    assert not answer_threads() and seen["stopped"] and seen["pieces"] < 500
    assert st_state[S.SP] is finished and st_state[S.ERROR] is None


def test_llm_answer_streams_and_a_broken_stream_falls_back_with_the_notice(kb_engine, finished,
                                                                            server):
    cfg = answer_only(llm_config(kb_engine.cfg, server))
    engine = Engine(cfg, with_llm(kb_engine.services, cfg))
    good = "Start it with the chroma run command [1]. It listens on loopback [1]."
    server.script(Reply.text(good), Reply.text("Start it with the chroma run [1] and", cut_after=3))

    st_state = session(finished)
    pieces = list(actions.answer_stream(engine, st_state))
    ans = st_state[S.SP].answer
    assert ans.mode == "llm" and len(pieces) > 3 and "".join(pieces) == ans.text == good

    st_state = session(finished)
    streamed = "".join(actions.answer_stream(engine, st_state))
    ans = st_state[S.SP].answer
    assert ans.mode == "extractive" and ans.error and st_state[S.ERROR] is None
    assert streamed.startswith("Start it with ") and FALLBACK_NOTICE in streamed
    assert streamed.endswith(ans.text)
    assert not answer_threads()


def test_sidebar_filters_are_validated_and_apply_from_the_next_retrieval(kb_engine):
    st_state: dict = {}
    S.init_state(st_state)
    st_state[S.PROMPT] = "How do I start a Chroma server?"
    choices = actions.filter_choices(kb_engine)
    assert "faq" in choices["doc_type"] and "guide" in choices["doc_type"]
    assert "conversation" in choices["doc_type"]  # the page's conversation turns, filtered alike

    assert not actions.set_filters(st_state, [], "", dt.date(2026, 2, 1), dt.date(2025, 1, 1))
    assert st_state[S.ERROR][0] == "filters" and "after" in st_state[S.ERROR][1]
    assert st_state[S.FILTERS].empty

    assert actions.set_filters(st_state, ["faq"], "", None, None)
    assert actions.run_remaining(kb_engine, st_state)
    sp = st_state[S.SP]
    assert sp.filters.doc_type == ("faq",)
    chunks = sp.chunk_map()
    assert sp.view("retrieval") and {chunks[r.chunk_id].doc_type for r in sp.view("retrieval")} == {"faq"}

    # a narrower source pattern: the next auto run starts again and uses it
    assert actions.set_filters(st_state, [], "kb/chroma-*", None, None)
    assert actions.run_remaining(kb_engine, st_state)
    sp = st_state[S.SP]
    assert {sp.chunk_map()[r.chunk_id].source for r in sp.view("retrieval")} == {"kb/chroma-server-mode.md"}
