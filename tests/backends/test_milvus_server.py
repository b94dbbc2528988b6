"""The scale-out engine over the network: a real Milvus server process on loopback (Milvus
Lite's gRPC server, ``tests/servers.py``) reached with the client code a Milvus
standalone server or cluster answers (``RAGSTREAM_MILVUS_URL``). The pipeline on it gives
what it gives on Milvus Lite in this process; the server killed mid-session is a typed error
naming it and what to start, in far less than the seed's 10 s, for every call, and the same
engine works again when it is back (its data survived the kill); a server that hangs is
reported within the request timeout; the CLI says the same without a traceback; a server
killed in the middle of an ingest stops it typed, and the next ingest completes it. Two app
processes sharing one server: ``tests/test_serve_workers.py`` (``serve --workers 2``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("milvus_lite", reason="milvus-lite is not installed (requirements.txt pins it)")

from ragstream.backends.search.milvus import MilvusEngine, MilvusUnavailableError
from ragstream.common.errors import VectorDBUnavailableError, VectorStoreError
from ragstream.workbench.engine import Engine
from tests.conftest import KB, ROOT, make_config
from tests.servers import MilvusServer, free_port

#: seed 000: a retrieval call times out after 10 s and returns an error
SEED_TIMEOUT_S = 10.0
#: a dead server (connection refused) is reported within this many seconds
DEAD_SERVER_MAX_S = 5.0
DOCS = {
    "servers.md": "# Servers\n\n## When to run a server\nRun a Milvus server when several "
                  "processes or machines share one knowledge base. Point RAGstream at its URL.\n",
    "fruit.md": "# Fruit\n\n## Bananas\nBananas are yellow and grow in bunches called hands. "
                "They ripen after picking.\n",
}
PROMPT = "When should I run a Milvus server?"


@pytest.fixture
def milvus(tmp_path):
    server = MilvusServer(tmp_path / "milvus-data").start()
    yield server
    server.stop()


def tiny_kb(root: Path) -> Path:
    kb = root / "kb"
    kb.mkdir()
    for name, text in DOCS.items():
        (kb / name).write_text(text, encoding="utf-8")
    return kb


def on(url: str, index_dir: Path, embedder) -> Engine:
    engine = Engine(make_config(index_dir, RAGSTREAM_MILVUS_URL=url))
    engine.services.embedder = embedder
    return engine


def assert_unavailable(err: BaseException, url: str) -> None:
    assert isinstance(err, MilvusUnavailableError) and isinstance(err, VectorDBUnavailableError)
    assert isinstance(err, VectorStoreError) and err.url == url
    msg = str(err)
    assert f"The Milvus server at {url} cannot be reached" in msg
    assert "python -m milvus_lite server" in msg and "no restart of RAGstream is needed" in msg
    assert "Traceback" not in msg and "\n" not in msg  # one line, not pymilvus's gRPC dump


def test_the_pipeline_on_a_milvus_server_is_the_pipeline_on_milvus_lite(milvus, tmp_path, embedder):
    kb = tmp_path / "kb"
    kb.mkdir()
    for name in ("hybrid-retrieval.md", "chroma-server-mode.md", "reranking.md"):
        shutil.copy(KB / name, kb / name)
    server = on(milvus.url, tmp_path / "idx-server", embedder)
    lite = on(str(tmp_path / "lite" / "kb.db"), tmp_path / "idx-lite", embedder)
    assert isinstance(server.services.store, MilvusEngine) and not server.services.store.lite
    assert isinstance(lite.services.store, MilvusEngine) and lite.services.store.lite
    for engine in (server, lite):
        report = engine.ingest(kb)
        assert (report.processed, report.failed) == (3, 0)
    assert server.status()["chunks"] == lite.status()["chunks"] > 0

    prompt = "How does the ReRanker reorder the retrieved chunks?"
    a, b = server.run(prompt), lite.run(prompt)
    assert a.views_by_stage == b.views_by_stage
    assert a.prompt_ready == b.prompt_ready
    assert any(c.source == "kb/reranking.md" for c in a.base_context_chunks[:3])
    assert server.ingest(kb).skipped == 3  # unchanged documents are not written again


def test_a_server_killed_mid_session_fails_fast_typed_then_the_same_engine_recovers(
        milvus, tmp_path, embedder):
    engine = on(milvus.url, tmp_path / "idx", embedder)
    kb = tiny_kb(tmp_path)
    assert engine.ingest(kb).processed == 2
    before = engine.run(PROMPT)
    assert before.base_context_chunks and before.base_context_chunks[0].source == "kb/servers.md"
    sp = engine.run(PROMPT, until="A2_PromptShaper")  # the caller's state, ready for Retrieval
    sp_json = sp.model_dump_json()

    milvus.kill()
    for call in (lambda: engine.run(sp), lambda: engine.run_stage(sp, "Retrieval"),
                 lambda: engine.run(PROMPT), engine.status, lambda: engine.ingest(kb)):
        started = time.monotonic()
        with pytest.raises(VectorDBUnavailableError) as caught:
            call()
        elapsed = time.monotonic() - started
        assert elapsed < DEAD_SERVER_MAX_S, f"took {elapsed:.2f} s"
        assert_unavailable(caught.value, milvus.url)
        assert sp.model_dump_json() == sp_json  # the caller's SuperPrompt is untouched

    milvus.start()  # same port, same data folder: what was written before the kill is there
    after = engine.run(sp)
    assert after.views_by_stage == before.views_by_stage
    assert after.prompt_ready == before.prompt_ready
    assert engine.ingest(kb).skipped == 2


def test_a_hung_server_is_reported_within_the_request_timeout_and_answers_when_it_wakes(
        milvus, tmp_path, embedder):
    engine = on(milvus.url, tmp_path / "idx", embedder)
    assert engine.ingest(tiny_kb(tmp_path)).processed == 2
    before = engine.run(PROMPT)
    vs = engine.cfg.settings.vector_store
    timeout, connect = vs.request_timeout_s, vs.connect_timeout_s
    assert timeout + connect < SEED_TIMEOUT_S

    milvus.pause()  # the kernel still accepts connections; nothing answers
    try:
        started = time.monotonic()
        with pytest.raises(VectorDBUnavailableError) as caught:
            engine.run(PROMPT)
        elapsed = time.monotonic() - started
        assert_unavailable(caught.value, milvus.url)
        # a pass reads the version (one request timeout); its Retrieval, a moment later, is
        # told at once that the server did not answer, rather than waiting a second deadline
        assert f"no answer within {timeout:g} s" in str(caught.value)
        assert timeout - 0.5 < elapsed < SEED_TIMEOUT_S, f"took {elapsed:.2f} s"
        time.sleep(connect + 0.1)  # after that moment, the server is asked again
        started = time.monotonic()
        with pytest.raises(VectorDBUnavailableError, match="no answer within"):
            engine.services.store.version()
        assert time.monotonic() - started < timeout + connect + 1
    finally:
        milvus.resume()
    time.sleep(connect + 0.1)
    assert engine.run(PROMPT).views_by_stage == before.views_by_stage


def test_the_cli_names_an_unreachable_milvus_server_without_a_traceback(tmp_path):
    url = f"http://127.0.0.1:{free_port()}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGSTREAM_")}
    env.update(RAGSTREAM_INDEX_DIR=str(tmp_path / "idx"), RAGSTREAM_UPLOADS_DIR=str(tmp_path / "up"),
               RAGSTREAM_MILVUS_URL=url)
    done = subprocess.run([sys.executable, "-m", "ragstream", "run", PROMPT, "--no-sync"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert f"Error (vector store unavailable): The Milvus server at {url} cannot be reached" in done.stderr
    assert "python -m milvus_lite server" in done.stderr
    assert "Traceback" not in done.stderr and "_InactiveRpcError" not in done.stderr


def test_a_server_killed_during_an_ingest_stops_it_typed_and_the_next_ingest_completes(
        milvus, tmp_path, embedder):
    """Milvus has no transactions: the kill lands after the first rows are inserted, before
    the statistics and the document rows say so. The next ingest finds the write marked as
    cut short, recounts, and writes the documents whole."""
    engine = on(milvus.url, tmp_path / "idx", embedder)
    store = engine.services.store
    assert isinstance(store, MilvusEngine)
    real = store.client  # connected

    class KilledAfterInsert:
        def __init__(self, client):
            self._client = client

        def __getattr__(self, name):
            attr = getattr(self._client, name)
            if name != "insert":
                return attr

            def insert(*args, **kwargs):
                out = attr(*args, **kwargs)
                milvus.kill()
                return out
            return insert

    store._client = KilledAfterInsert(real)
    kb = tiny_kb(tmp_path)
    with pytest.raises(VectorDBUnavailableError, match="while writing documents") as caught:
        engine.ingest(kb)  # not a report with every file "failed": the run stops
    assert_unavailable(caught.value, milvus.url)

    milvus.start()
    cut = store.documents()  # listed before the kill, incomplete: no hash yet
    assert cut and not any(d.doc_hash for d in cut.values())
    report = engine.ingest(kb)
    assert (report.processed, report.failed) == (2, 0)
    docs = store.documents()
    assert sorted(docs) == ["kb/fruit.md", "kb/servers.md"] and all(d.doc_hash for d in docs.values())
    # the statistics are the documents' own: as a clean ingest into a new collection gives
    clean = Engine(make_config(tmp_path / "idx-clean", RAGSTREAM_MILVUS_URL=milvus.url,
                               RAGSTREAM_COLLECTION="clean_kb"))
    clean.services.embedder = embedder
    assert clean.ingest(kb).processed == 2
    assert store.stats() == clean.services.store.stats()
    terms = ["banana", "server", "process", "ripen"]
    assert store.doc_freqs(terms) == clean.services.store.doc_freqs(terms)
    assert engine.run(PROMPT).base_context_chunks[0].source == "kb/servers.md"
