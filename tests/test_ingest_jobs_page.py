"""The page's background ingestions, driven in-process with AppTest over the session's temp
index and real documents (a copy of the bundled data/kb with a picture named .md):

* while a job ingests into a knowledge base, the sidebar shows a progress bar (the knowledge
  base, files done of total, the current file), chunks written and the time; the knowledge
  base is listed and can be selected (the page then says it is being ingested, N of 16 files),
  and the person can run the stages on another knowledge base meanwhile;
* a second session (a reload) finds the running job, and its Cancel button stops it; the
  session then shows that it was cancelled;
* "Create and select" with a folder creates and selects the knowledge base at once and ingests
  in the background; when the job ends the report names the refused file with its reason.

The job held half-way is a real ingestion paused at its sixth file by its progress callback,
so that what the page shows of a running job does not depend on the machine's speed."""

import re
import shutil
import threading
import uuid
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from ragstream.interfaces.ui import state as S
from ragstream.knowledge.ingest.jobs import REGISTRY
from tests.conftest import KB

APP = str(Path(__file__).resolve().parent.parent / "ui_streamlit.py")
PNG = bytes.fromhex("89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489")
FILES = len(list(KB.glob("*.md"))) + 1


@pytest.fixture(scope="module", autouse=True)
def page_env(tmp_path_factory, kb_engine):
    """The page over the session's already-ingested temp index, Streamlit's resource cache
    emptied before and after (as tests/ui's ``page_env``)."""
    import streamlit as st

    mp = pytest.MonkeyPatch()
    mp.setenv("RAGSTREAM_INDEX_DIR", str(kb_engine.cfg.index_dir))
    mp.setenv("RAGSTREAM_UPLOADS_DIR", str(tmp_path_factory.mktemp("jobs-page") / "uploads"))
    st.cache_resource.clear()
    yield
    st.cache_resource.clear()
    mp.undo()


def fresh() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=300).run()
    assert not at.exception, at.exception
    return at


@pytest.fixture
def docs(tmp_path) -> Path:
    folder = tmp_path / f"ops-{uuid.uuid4().hex[:6]}"
    shutil.copytree(KB, folder)
    (folder / "photo.md").write_bytes(PNG)
    return folder


@pytest.fixture
def held_job(kb_engine, docs):
    """A knowledge base whose folder is being ingested by a background job that waits at its
    sixth file until the test lets it go; the knowledge base is deleted afterwards. The page
    has been opened once before (its engine is made when the server starts, before any job)."""
    fresh()
    kb = kb_engine.create_kb(f"ops-{uuid.uuid4().hex[:6]}", docs)
    engine = kb_engine.for_kb(kb.name)
    reached, release = threading.Event(), threading.Event()

    def pause_at_sixth(i: int, _n: int, _name: str) -> None:
        if i == 5:
            reached.set()
            release.wait(300)

    def work():
        report = engine.ingest(docs, progress=pause_at_sixth)
        return {"report": {"kind": "folder", **report.model_dump()}, "error": None}

    job = REGISTRY.start(kb.name, kb.collection, "create", str(docs), work)
    assert reached.wait(300), "the job never reached its sixth file"
    yield kb, job, release
    release.set()
    job.wait(300)
    if kb_engine.knowledge_bases().find(kb.name) is not None:
        kb_engine.delete_kb(kb.name)


def notices(at: AppTest) -> str:
    return "\n".join(i.value for i in at.info)


def test_a_running_job_shows_progress_and_its_knowledge_base_is_selectable(held_job):
    kb, job, _release = held_job
    done = job.progress().done
    at = fresh()
    # the bar: files done of total and the file being read; below it chunks and times
    bars = [p for p in at.sidebar.get("progress")]
    assert len(bars) == 1, bars
    assert f"Ingesting into **{kb.name}**" in bars[0].text
    assert f"{done} of {FILES} files · now {Path(kb.folder).name}/" in bars[0].text, bars[0].text
    assert bars[0].value == int(100 * done / FILES)
    line = next(c.value for c in at.sidebar.caption if "chunks written" in c.value)
    assert re.fullmatch(r"\d+ chunks? written · \d+:\d\d elapsed(, about \d+:\d\d left)?",
                        line), line
    assert at.button(key=f"ingest_cancel_{job.id}").label == "Cancel"
    # listed at once, and selectable
    picker = at.selectbox(key=S.KB)
    assert kb.name in picker.options
    picker.set_value(kb.name).run()
    assert not at.exception and at.session_state[S.KB] == kb.name
    assert f"it is being ingested ({done} of {FILES} files)" in notices(at)
    # meanwhile the stages run on another knowledge base (the job holds the ingest lock)
    at.selectbox(key=S.KB).set_value("default").run()
    at.text_area(key=S.PROMPT).set_value("How does hybrid retrieval combine BM25 and vectors?").run()
    at.button(key="run").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    sp = at.session_state[S.SP]
    assert sp.extras.retrieval.kb == "default" and sp.final_selection_ids
    assert job.running


def test_a_second_session_finds_the_running_job_and_cancels_it(held_job, kb_engine):
    kb, job, release = held_job
    first = fresh()
    first.selectbox(key=S.KB).set_value(kb.name).run()
    reloaded = fresh()  # a reload: a new session of the page
    assert any(kb.name in p.text for p in reloaded.sidebar.get("progress"))
    reloaded.button(key=f"ingest_cancel_{job.id}").click().run()
    assert not reloaded.exception
    assert job.watch.stopping
    cancelling = reloaded.button(key=f"ingest_cancel_{job.id}")
    assert cancelling.label == "Cancelling…" and cancelling.disabled
    release.set()
    assert job.wait(300) and job.state == "cancelled"
    # each session that saw it running says so on its knowledge base, once
    for at in (first, reloaded):
        at.selectbox(key=S.KB).set_value(kb.name).run()
        assert not at.exception
        said = [i.value for i in at.info]
        assert any(f"The ingest into {kb.name!r} was cancelled after" in s for s in said), said
        assert not at.sidebar.get("progress")
    # only whole documents: each stored one has all of its chunks
    engine = kb_engine.for_kb(kb.name)
    stored = engine.services.store.documents()
    assert stored and len(stored) < FILES - 1
    assert all(d.doc_hash for d in stored.values())


def test_create_and_select_ingests_in_the_background_and_names_the_refused_file(kb_engine, docs):
    name = f"ops-{uuid.uuid4().hex[:6]}"
    at = fresh()
    try:
        at.text_input(key=S.KB_NEW_NAME).set_value(name)
        at.text_input(key=S.KB_NEW_FOLDER).set_value(str(docs))
        at.button(key="FormSubmitter:kb_create-Create and select").click().run()
        assert not at.exception and not at.error, [e.value for e in at.error]
        # created and selected at once, the ingest running (or done) in the background
        assert at.session_state[S.KB] == name
        assert any(f"Knowledge base {name!r} created and selected; its folder" in i.value
                   and "in the background" in i.value for i in at.info), [i.value for i in at.info]
        jobs = [j for j in REGISTRY.jobs() if j.kb == name]
        assert len(jobs) == 1 and jobs[0].kind == "create"
        assert jobs[0].wait(600) and jobs[0].state == "done", jobs[0].error
        at.run()
        assert not at.exception
        # the report: the refused file named with its reason; the documents counted
        errors = [e.value for e in at.sidebar.error]
        assert len(errors) == 1 and "photo.md" in errors[0] and "image" in errors[0], errors
        assert any(f"Knowledge base {name!r}: {FILES - 1} documents ingested from {docs} in "
                   in i.value and "; 1 refused, named in the report below." in i.value
                   for i in at.info), [i.value for i in at.info]
        documents = next(m for m in at.metric if m.label == "Documents")
        assert documents.value == str(FILES - 1)
        assert not at.sidebar.get("progress")
    finally:
        if kb_engine.knowledge_bases().find(name) is not None:
            kb_engine.delete_kb(name)
