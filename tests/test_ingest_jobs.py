"""Background ingestion jobs (``ragstream.knowledge.ingest.jobs``) on real documents — the bundled
knowledge base (data/kb) and two files the ingestor refuses — with the real engine and store:
the progress counts rise while the job works and end at files done = total with the chunks
written; each refused file is listed with its reason; a cancel stops between files and leaves
only whole documents (chunks counted per document in the store); a second job on the same
knowledge base is refused with what to do."""

import shutil
import threading
from collections import Counter
from pathlib import Path

import pytest

from ragstream.knowledge.ingest.chunker import parse_document
from ragstream.knowledge.ingest.jobs import REGISTRY, JobBusyError, clock
from tests.conftest import KB

#: the first bytes of a PNG picture, saved under a Markdown name
PNG = bytes.fromhex("89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489")
BUNDLED = sorted(p.name for p in KB.glob("*.md"))


@pytest.fixture
def docs(tmp_path) -> Path:
    """A copy of the bundled documents with a picture named .md and a Latin-1 text file."""
    folder = tmp_path / "docs"
    shutil.copytree(KB, folder)
    (folder / "photo.md").write_bytes(PNG)
    (folder / "notes-latin1.txt").write_bytes("Caf\xe9 cr\xe8me: the menu.\n".encode("latin-1"))
    return folder


def collection(engine) -> str:
    return engine.cfg.settings.vector_store.collection


def chunks_per_document(engine) -> Counter:
    """How many chunks of each document the store holds, counted one by one."""
    return Counter(c.doc_id for c in engine.services.store.all_chunks())


def expected_chunks(engine, folder: Path, name: str) -> int:
    """How many chunks the file gives when it is parsed on its own now."""
    text = (folder / name).read_text(encoding="utf-8")
    return len(parse_document(text, f"{folder.name}/{name}", engine.cfg.settings.chunking,
                              "2025-01-01").chunks)


def test_progress_rises_to_every_file_and_refused_files_are_named_with_reasons(fresh_engine, docs):
    seen: list[tuple[int, int, int]] = []  # (done, total, chunks) at the start of each file
    job = None

    def at_each_file(_i: int, _n: int, _name: str) -> None:
        p = job.progress()
        seen.append((p.done, p.total, p.chunks))

    job = REGISTRY.start("default", collection(fresh_engine), "folder", str(docs),
                         lambda: fresh_engine.ingest(docs, progress=at_each_file))
    assert job.wait(600) and job.state == "done", job.error
    files = len(BUNDLED) + 2
    report = job.result
    # the counts rise, never fall, and the total is every file from the start
    dones, chunks = [d for d, _t, _c in seen], [c for _d, _t, c in seen]
    assert {t for _d, t, _c in seen} == {files}
    assert dones == sorted(dones) and chunks == sorted(chunks)
    assert len(set(dones)) >= 3 and len(set(chunks)) >= 3, seen
    final = job.progress()
    assert (final.done, final.total, final.fraction) == (files, files, 1.0)
    assert final.chunks == report.chunks_written > 0
    assert final.remaining_s is not None and final.line().startswith(f"{files} of {files} files")
    assert (report.processed, report.failed) == (len(BUNDLED), 2)
    # each refused file with its reason, as the ingestor says it
    refused = {e.split(": ", 1)[0]: e for e in report.errors}
    assert "BinaryFileError" in refused["docs/photo.md"] and "PNG" in refused["docs/photo.md"]
    assert "NotUTF8Error" in refused["docs/notes-latin1.txt"]
    assert not job.running and REGISTRY.get(job.id) is job


def test_cancel_stops_between_files_and_leaves_only_whole_documents(fresh_engine, docs):
    """The folder ingested, every file then changed, and the second ingest cancelled at the
    seventh file: the files read before the stop are in their new version, the others in
    their old one, each document whole, and nothing was pruned."""
    (docs / "photo.md").unlink()
    (docs / "notes-latin1.txt").unlink()
    first = fresh_engine.ingest(docs)
    assert first.processed == len(BUNDLED) and not first.cancelled
    old = chunks_per_document(fresh_engine)
    for name in BUNDLED:
        path = docs / name
        path.write_text(path.read_text() + "\n## Added later\n\n" + (
            "This paragraph was added for the second ingest and is long enough to be kept "
            "as text of its own in the chunk it lands in. ") * 12, encoding="utf-8")
    job = None

    def cancel_at_seventh(i: int, _n: int, _name: str) -> None:
        if i == 6:
            job.cancel()

    job = REGISTRY.start("default", collection(fresh_engine), "folder", str(docs),
                         lambda: fresh_engine.ingest(docs, progress=cancel_at_seventh))
    assert job.wait(600), "the job did not end"
    report = job.result
    assert job.state == "cancelled" and report.cancelled and job.error is None
    assert report.processed == 7 and report.deleted == 0
    not_read = [w.split(": ", 1)[0] for w in report.warnings if "cancelled before it" in w]
    assert not_read == [f"docs/{n}" for n in BUNDLED[7:]]
    assert job.progress().done == 7 and job.progress().total == len(BUNDLED)
    # every document is whole: its chunks in the store are those of one version of its file
    stored = fresh_engine.services.store.documents()
    counted = chunks_per_document(fresh_engine)
    assert sorted(stored) == [f"docs/{n}" for n in BUNDLED]  # none pruned, none half
    for name in BUNDLED:
        doc_id = f"docs/{name}"
        assert stored[doc_id].doc_hash, f"{doc_id} is partly written"
        assert counted[doc_id] == stored[doc_id].chunks
        if name in BUNDLED[:7]:
            assert counted[doc_id] == expected_chunks(fresh_engine, docs, name) > old[doc_id]
        else:
            assert counted[doc_id] == old[doc_id]
    # ingesting again finishes the work: the rest is written, the first seven are unchanged
    again = fresh_engine.ingest(docs)
    assert (again.processed, again.skipped) == (len(BUNDLED) - 7, 7)


def test_a_second_job_on_the_same_knowledge_base_is_refused_with_what_to_do(fresh_engine, docs):
    release = threading.Event()

    def held(i: int, _n: int, _name: str) -> None:
        if i == 2:
            release.wait(120)

    job = REGISTRY.start("default", collection(fresh_engine), "folder", str(docs),
                         lambda: fresh_engine.ingest(docs, progress=held))
    try:
        with pytest.raises(JobBusyError, match="is being ingested already .* cancel it"):
            REGISTRY.start("default", collection(fresh_engine), "folder", str(docs), lambda: None)
        assert REGISTRY.running(collection(fresh_engine)) == [job]
    finally:
        job.cancel()
        release.set()
    assert job.wait(600) and job.state == "cancelled"
    assert REGISTRY.running(collection(fresh_engine)) == []


def test_a_job_that_fails_keeps_its_error_in_words(fresh_engine, tmp_path):
    gone = tmp_path / "nowhere"
    job = REGISTRY.start("default", collection(fresh_engine), "folder", str(gone),
                         lambda: fresh_engine.ingest(gone))
    assert job.wait(60) and job.state == "failed"
    assert job.error == ("ingestion", f"{gone} does not exist. Give a folder of .md/.txt files "
                                      f"or one file.")


def test_times_read_as_a_clock():
    assert (clock(0), clock(75.2), clock(3725)) == ("0:00", "1:15", "1:02:05")


def test_a_job_cancelled_while_it_waits_for_the_lock_ends_without_reading_anything(fresh_engine,
                                                                                   docs):
    from ragstream.backends.lock import IngestLock

    with IngestLock(fresh_engine.cfg.index_dir, 0):  # another ingestion holds the index
        job = REGISTRY.start("default", collection(fresh_engine), "folder", str(docs),
                             lambda: fresh_engine.ingest(docs))
        assert not job.wait(0.5) and not job.progress().started
        assert job.progress().line().startswith("starting (waiting for another ingestion")
        job.cancel()
        assert job.wait(60), "a cancel while waiting for the lock did not end the job"
    assert job.state == "cancelled" and job.error is None
    assert job.result.processed == 0 and "cancelled while waiting" in job.result.warnings[0]
    assert fresh_engine.services.store.documents() == {}
