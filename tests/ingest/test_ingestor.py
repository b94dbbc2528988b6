"""Ingestion against a real Chroma in a temp dir with the real embedding model."""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ragstream.backends.search.local import LocalEngine
from ragstream.backends.vector_store import ChromaStore
from ragstream.common.errors import IngestError, IngestLockedError, VectorStoreError
from ragstream.knowledge.ingest.ingestor import IngestLock, ingest_path
from tests.conftest import ROOT


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


DOC_A = """---
title: Alpha
doc_type: guide
last_update_date: 2026-01-02
---
# Alpha

## Install
Run the setup script once. It creates a virtual environment in the repository.

## Use
Start the page with the run script. The page opens on port 8501.
"""
DOC_B = "# Beta\n\nBeta talks about bananas. Bananas are yellow.\n"


def test_skip_replace_delete(fresh_engine, tmp_path):
    kb = tmp_path / "kb"
    write(kb, "alpha.md", DOC_A)
    write(kb, "sub/beta.md", DOC_B)
    first = fresh_engine.ingest(kb)
    assert (first.processed, first.skipped, first.failed, first.deleted) == (2, 0, 0, 0)
    docs = fresh_engine.services.store.documents()
    assert sorted(docs) == ["kb/alpha.md", "kb/sub/beta.md"]
    chunk = fresh_engine.services.store.get_chunks(["kb/alpha.md#0"])["kb/alpha.md#0"]
    assert chunk.heading_path == ("Alpha", "Install")
    assert chunk.doc_type == "guide" and chunk.last_update_date == "2026-01-02"
    assert chunk.text.startswith("Run the setup script once.")

    again = fresh_engine.ingest(kb)
    assert (again.processed, again.skipped, again.deleted) == (0, 2, 0)

    write(kb, "sub/beta.md", DOC_B + "\n## More\nBananas grow in bunches called hands.\n")
    changed = fresh_engine.ingest(kb)
    assert (changed.processed, changed.skipped) == (1, 1)
    texts = [c.text for c in fresh_engine.services.store.all_chunks() if c.doc_id == "kb/sub/beta.md"]
    assert any("hands" in t for t in texts)

    (kb / "alpha.md").unlink()
    pruned = fresh_engine.ingest(kb)
    assert pruned.deleted == 1
    assert "kb/alpha.md" not in fresh_engine.services.store.documents()
    # the keyword index follows the store
    corpus = fresh_engine.services.index()
    assert "kb/alpha.md" not in fresh_engine.services.store.keyword_engine.documents()
    assert not any(c.id.startswith("kb/alpha.md") for c in corpus.all_chunks())
    assert not any(c.startswith("kb/alpha.md") for c, _ in corpus.keyword(corpus.query_terms(DOC_A), 50))


def test_single_file_does_not_prune(fresh_engine, tmp_path):
    kb = tmp_path / "kb"
    write(kb, "alpha.md", DOC_A)
    b = write(kb, "beta.md", DOC_B)
    fresh_engine.ingest(kb)
    report = fresh_engine.ingest(b)
    assert report.deleted == 0 and report.skipped == 1
    assert len(fresh_engine.services.store.documents()) == 2


def test_an_ingest_reads_and_prunes_its_own_folder_only(fresh_engine, tmp_path):
    """An ingest lists only the documents of its folder (ids '<folder name>/...'): folders
    whose names begin alike, and a folder of the same name elsewhere, are told apart."""
    kb, kb2, other = tmp_path / "kb", tmp_path / "kb2", tmp_path / "elsewhere" / "kb"
    write(kb, "alpha.md", DOC_A)
    write(kb, "beta.md", DOC_B)
    write(kb2, "alpha.md", DOC_A)
    assert fresh_engine.ingest(kb).processed == 2 and fresh_engine.ingest(kb2).processed == 1
    store = fresh_engine.services.store
    assert sorted(store.documents("kb/")) == ["kb/alpha.md", "kb/beta.md"]
    assert sorted(store.documents("kb")) == ["kb/alpha.md", "kb/beta.md", "kb2/alpha.md"]
    assert sorted(store.documents(ids=["kb2/alpha.md", "kb/gone.md"])) == ["kb2/alpha.md"]
    # not in step: Chroma's own listing, the same scope
    assert sorted(store.chroma.documents("kb/")) == ["kb/alpha.md", "kb/beta.md"]
    assert sorted(store.chroma.documents("kb2/", ids=["kb2/alpha.md", "kb/alpha.md"])) == ["kb2/alpha.md"]

    (kb / "beta.md").unlink()
    again = fresh_engine.ingest(kb)
    assert (again.processed, again.skipped, again.deleted) == (0, 1, 1)
    assert (fresh_engine.ingest(kb2).skipped, fresh_engine.ingest(kb2).deleted) == (1, 0)
    write(other, "alpha.md", DOC_A + "\nAnother copy.\n")
    moved = fresh_engine.ingest(other)  # same ids, another folder: it takes them over, and says so
    assert moved.processed == 1 and moved.deleted == 0
    assert any("replaces the document of the same id ingested from" in w for w in moved.warnings)
    assert sorted(store.documents()) == ["kb/alpha.md", "kb2/alpha.md"]


def test_bad_files_fail_alone_with_a_reason(fresh_engine, tmp_path):
    kb = tmp_path / "kb"
    write(kb, "good.md", DOC_B)
    (kb / "latin1.md").write_bytes("Caf\xe9 au lait".encode("latin-1"))
    report = fresh_engine.ingest(kb)
    assert report.processed == 1 and report.failed == 1
    assert "kb/latin1.md" in report.errors[0] and "UTF-8" in report.errors[0]


def test_missing_path_and_wrong_type(fresh_engine, tmp_path):
    with pytest.raises(IngestError, match="does not exist"):
        fresh_engine.ingest(tmp_path / "nope")
    sheet = write(tmp_path, "doc.xlsx", "x")
    with pytest.raises(IngestError, match="not one of the ingestible types"):
        fresh_engine.ingest(sheet)


def test_long_chunk_is_embedded_in_windows_and_rebuilt_exactly(fresh_engine, tmp_path):
    # one section of ~300 tiktoken tokens (within the chunk budget) is > 256 word pieces
    # only if the window size is small: use the engine's embedder with a small window
    fresh_engine.services.embedder.window_tokens, old = 64, fresh_engine.services.embedder.window_tokens
    try:
        sentences = " ".join(f"Sentence number {i} explains one more detail of windowing." for i in range(25))
        write(tmp_path / "kb", "long.md", f"# Long\n\n{sentences}\n")
        report = fresh_engine.ingest(tmp_path / "kb")
        assert report.windows_written > report.chunks_written
        store = fresh_engine.services.store
        chunks = store.all_chunks()
        windows = store.window_vectors([c.id for c in chunks])
        assert any(len(windows[c.id]) > 1 for c in chunks)
        for c in chunks:
            assert c.text in sentences or sentences.startswith(c.text[:40])
        assert "".join(c.text for c in chunks).replace(" ", "") == sentences.replace(" ", "")
    finally:
        fresh_engine.services.embedder.window_tokens = old


class FailingStore(ChromaStore):
    """A real Chroma store whose second write batch fails (fault injection)."""

    fail_on_call = 2

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.calls = 0
        self.armed = False

    def _add(self, **kwargs):
        if self.armed:
            self.calls += 1
            if self.calls == self.fail_on_call:
                raise RuntimeError("disk full (injected)")
        super()._add(**kwargs)


def test_document_write_is_all_or_nothing(fresh_engine, tmp_path):
    cfg = fresh_engine.cfg
    settings = cfg.settings.vector_store.model_copy(update={"write_batch_size": 1})
    store = FailingStore(settings, cfg.index_dir)
    fresh_engine.services.store = LocalEngine(store, fresh_engine.services.store.keyword_engine)
    kb = tmp_path / "kb"
    write(kb, "alpha.md", DOC_A)
    assert fresh_engine.ingest(kb).processed == 1
    before = {c.id: c for c in store.all_chunks()}
    assert len(before) >= 2  # so the second batch is inside the document

    write(kb, "alpha.md", DOC_A.replace("port 8501", "port 9000") + "\n## Extra\nMore words here.\n")
    store.armed = True
    report = fresh_engine.ingest(kb)
    assert report.failed == 1 and "rolled back" in report.errors[0]
    after = {c.id: c for c in store.all_chunks()}
    assert after == before  # the old version, whole

    store.armed, store.calls = False, 0
    assert fresh_engine.ingest(kb).processed == 1
    assert any("9000" in c.text for c in store.all_chunks())


def test_replace_document_raises_vector_store_error(fresh_engine, tmp_path):
    store = FailingStore(fresh_engine.cfg.settings.vector_store, fresh_engine.cfg.index_dir)
    store.armed, store.fail_on_call = True, 1
    fresh_engine.services.store = store
    write(tmp_path / "kb", "b.md", DOC_B)
    with pytest.raises(VectorStoreError):
        from ragstream.knowledge.ingest.chunker import parse_document
        from ragstream.knowledge.ingest.ingestor import embed_chunks

        parsed = parse_document(DOC_B, "kb/b.md", fresh_engine.cfg.settings.chunking, "2026-01-01")
        store.replace_document("kb/b.md", embed_chunks(parsed.chunks, fresh_engine.services.embedder),
                               "h", "now")
    assert store.count_windows() == 0


def test_fingerprint_changes_with_every_write_and_is_stamped(fresh_engine, tmp_path):
    from ragstream.backends.vector_store import GENERATION_KEY

    store = fresh_engine.services.store.chroma  # the store's own stamp
    write(tmp_path / "kb", "a.md", DOC_B)
    fresh_engine.ingest(tmp_path / "kb")
    first = store.fingerprint()
    assert store.fingerprint() == first  # stable without writes
    write(tmp_path / "kb", "a.md", DOC_B + "\nMore about bananas here.\n")
    fresh_engine.ingest(tmp_path / "kb")
    second = store.fingerprint()
    assert second != first
    # a collection without a stamp (made before stamps existed) is scanned once, then stamped
    store.collection.modify(metadata={GENERATION_KEY: ""})
    store._generation_file.unlink()  # nor its copy on disk
    scanned = store.fingerprint()
    assert scanned == store._scan_fingerprint()
    assert store.client.get_collection(store.settings.collection).metadata[GENERATION_KEY] == scanned


def test_unopened_store_reads_the_stamp_copy_and_sees_other_writers(fresh_engine, tmp_path):
    """A process that has not opened Chroma fingerprints from the stamp's copy on disk (no
    chromadb client made), and still sees every write another store object makes."""
    store = fresh_engine.services.store.chroma  # the store's own stamp
    write(tmp_path / "kb", "a.md", DOC_B)
    fresh_engine.ingest(tmp_path / "kb")
    copy = store._generation_file
    assert copy.read_text(encoding="utf-8") == store.fingerprint()

    reader = ChromaStore(store.settings, store.index_dir)
    first = reader.fingerprint()
    assert first == store.fingerprint() and reader._client is None  # Chroma never opened
    write(tmp_path / "kb", "a.md", DOC_B + "\nMore about bananas here.\n")
    fresh_engine.ingest(tmp_path / "kb")
    assert reader.fingerprint() == store.fingerprint() != first and reader._client is None


def test_a_store_without_the_copy_is_read_from_chroma_and_given_one(fresh_engine, tmp_path):
    store = fresh_engine.services.store.chroma  # the store's own stamp
    write(tmp_path / "kb", "a.md", DOC_B)
    fresh_engine.ingest(tmp_path / "kb")
    stamp = store.fingerprint()
    store._generation_file.unlink()  # as written by a version before the copy existed
    reader = ChromaStore(store.settings, store.index_dir)
    assert reader.fingerprint() == stamp and reader._client is not None  # read from Chroma
    assert store._generation_file.read_text(encoding="utf-8") == stamp  # and seeded
    # seeding never replaces a copy that is there (a writer's newer stamp)
    store._generation_file.write_text("newer", encoding="utf-8")
    reader._seed_generation_copy(stamp)
    assert store._generation_file.read_text(encoding="utf-8") == "newer"


# -- one ingestion per index at a time ------------------------------------------------------

HOLD = ("import sys, time\n"
        "from ragstream.knowledge.ingest.ingestor import IngestLock\n"
        "IngestLock(sys.argv[1], 60).acquire()\n"
        "print('held', flush=True)\n"
        "time.sleep(600)\n")


def test_lock_names_its_holder_and_a_killed_holder_never_blocks(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], cwd=ROOT,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        started = time.monotonic()
        with pytest.raises(IngestLockedError) as caught:
            IngestLock(tmp_path, wait_s=0.3).acquire()
        assert time.monotonic() - started >= 0.3
        err = caught.value
        assert err.pid == holder.pid and err.index_dir == str(tmp_path)
        assert str(tmp_path) in str(err) and f"process {holder.pid}" in str(err)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=10)
    # the kernel dropped the dead holder's lock: taken at once, without waiting
    with IngestLock(tmp_path, wait_s=0) as lock:
        assert not lock.contended
        assert (tmp_path / "ingest.lock").read_text().strip() == str(os.getpid())


def test_lock_waits_for_a_holder_that_finishes(tmp_path):
    first = IngestLock(tmp_path, wait_s=60)
    first.acquire()
    threading.Timer(0.5, first.release).start()
    with IngestLock(tmp_path, wait_s=10) as second:  # its own open file: excluded like a process
        assert second.contended and second.waited_s >= 0.4
        assert second.waited_for == os.getpid()


def test_second_ingest_into_one_index_waits_or_is_refused(fresh_engine, tmp_path):
    kb = tmp_path / "kb"
    write(kb, "b.md", DOC_B)
    cfg, services = fresh_engine.cfg, fresh_engine.services
    held = IngestLock(cfg.index_dir, wait_s=60)
    held.acquire()
    try:
        with pytest.raises(IngestLockedError, match=f"Another ingestion into {cfg.index_dir}"):
            ingest_path(kb, cfg, services, lock_wait_s=0.2)
        assert not (cfg.index_dir / "chroma").exists()  # refused before touching the store
        threading.Timer(0.5, held.release).start()
        report = ingest_path(kb, cfg, services, lock_wait_s=30)
    finally:
        held.release()
    assert report.processed == 1
    assert any(w.startswith("waited ") and f"process {os.getpid()}" in w for w in report.warnings)
