"""A real `chroma run` server on loopback as the vector store (vector_store.mode = http),
including the server going away mid-session and coming back."""

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ragstream.backends.search.local import LocalEngine
from ragstream.backends.vector_store import ChromaStore
from ragstream.common.errors import VectorDBUnavailableError, VectorStoreError
from ragstream.workbench.engine import Engine
from tests.conftest import KB, ROOT, make_config
from tests.servers import ChromaServer, free_port

#: a dead server (connection refused) must be reported within this many seconds
DEAD_SERVER_MAX_S = 5.0


@pytest.fixture(scope="module")
def chroma_server(tmp_path_factory):
    server = ChromaServer(tmp_path_factory.mktemp("chroma-server")).start()
    yield server.url
    server.stop()


@pytest.fixture
def own_server(tmp_path):
    """A server of this test's own, which the test may stop and start."""
    server = ChromaServer(tmp_path / "chroma-data").start()
    yield server
    server.stop()


def small_kb(root: Path) -> Path:
    kb = root / "kb"
    kb.mkdir()
    for name in ("hybrid-retrieval.md", "chroma-server-mode.md", "reranking.md"):
        shutil.copy(KB / name, kb / name)
    return kb


def test_server_mode_gives_the_same_pipeline_result(chroma_server, tmp_path, embedder):
    kb = small_kb(tmp_path)
    server = Engine(make_config(tmp_path / "idx-http", RAGSTREAM_CHROMA_URL=chroma_server))
    local = Engine(make_config(tmp_path / "idx-local"))
    for engine in (server, local):
        engine.services.embedder = embedder
        report = engine.ingest(kb)
        assert report.processed == 3 and report.failed == 0
    assert server.services.store.location == chroma_server
    assert server.status()["chunks"] == local.status()["chunks"] > 0

    prompt = "When should I switch from the embedded store to a Chroma server?"
    a, b = server.run(prompt), local.run(prompt)
    assert a.views_by_stage == b.views_by_stage
    assert a.prompt_ready == b.prompt_ready
    assert any(c.source == "kb/chroma-server-mode.md" for c in a.base_context_chunks[:3])

    # re-ingest against the server skips unchanged documents
    assert server.ingest(kb).skipped == 3


def test_unreachable_server_is_a_clear_error(tmp_path):
    engine = Engine(make_config(tmp_path / "idx", RAGSTREAM_CHROMA_URL=f"http://127.0.0.1:{free_port()}"))
    with pytest.raises(VectorStoreError, match="chroma run"):
        engine.status()


# -- the server goes away mid-session ------------------------------------------------------

DOCS = {
    "servers.md": "# Servers\n\n## When to run a server\nRun a Chroma server when several processes "
                  "share one knowledge base. Start it with chroma run and point RAGstream at its URL.\n",
    "fruit.md": "# Fruit\n\n## Bananas\nBananas are yellow and grow in bunches called hands. "
                "They ripen after picking.\n",
}
PROMPT = "When should I run a Chroma server?"


def tiny_kb(root: Path) -> Path:
    kb = root / "kb"
    kb.mkdir()
    for name, text in DOCS.items():
        (kb / name).write_text(text, encoding="utf-8")
    return kb


def assert_unavailable(err: VectorDBUnavailableError, url: str) -> None:
    msg = str(err)
    assert isinstance(err, VectorStoreError) and err.url == url
    assert f"The Chroma server at {url} cannot be reached" in msg
    assert "chroma run" in msg and 'vector_store.mode to "persistent"' in msg


def test_server_stopped_mid_session_fails_fast_typed_then_recovers(own_server, tmp_path, embedder):
    engine = Engine(make_config(tmp_path / "idx", RAGSTREAM_CHROMA_URL=own_server.url))
    engine.services.embedder = embedder
    kb = tiny_kb(tmp_path)
    assert engine.ingest(kb).processed == 2
    before_outage = engine.run(PROMPT)
    sp = engine.run(PROMPT, until="A2_PromptShaper")  # the caller's state, ready for Retrieval
    sp_json = sp.model_dump_json()

    own_server.stop()
    for call in (lambda: engine.run(sp), lambda: engine.run_stage(sp, "Retrieval"),
                 lambda: engine.run(PROMPT), engine.status, lambda: engine.ingest(kb)):
        started = time.monotonic()
        with pytest.raises(VectorDBUnavailableError) as caught:
            call()
        elapsed = time.monotonic() - started
        assert elapsed < DEAD_SERVER_MAX_S, f"took {elapsed:.2f} s"
        assert_unavailable(caught.value, own_server.url)
        assert sp.model_dump_json() == sp_json  # the caller's SuperPrompt is untouched

    # the same engine works again once the server is back: no restart, no new client
    own_server.start()
    after = engine.run(sp)
    assert after.views_by_stage == before_outage.views_by_stage
    assert after.prompt_ready == before_outage.prompt_ready
    assert engine.ingest(kb).skipped == 2


def test_a_read_that_cannot_connect_is_retried_once_after_a_backoff(own_server, tmp_path, monkeypatch):
    store = ChromaStore(make_config(tmp_path / "idx", RAGSTREAM_CHROMA_URL=own_server.url)
                        .settings.vector_store, tmp_path / "idx")
    store.retry_backoff_s = 0.3
    store.count_windows()  # connected
    session = store.client._server._session  # chromadb's httpx client
    requests: list[float] = []
    real_request = session.request

    def counting(*a, **kw):
        requests.append(time.monotonic())
        return real_request(*a, **kw)

    monkeypatch.setattr(session, "request", counting)
    own_server.stop()
    with pytest.raises(VectorDBUnavailableError, match="ConnectError") as caught:
        store.fingerprint()
    assert "while reading" in str(caught.value)
    assert len(requests) == 2 and requests[1] - requests[0] >= 0.3  # one retry, after the backoff
    requests.clear()
    with pytest.raises(VectorDBUnavailableError, match="while writing"):
        store.delete_document("kb/fruit.md")
    assert len(requests) == 1  # a write is not retried


def test_a_hung_server_times_out_instead_of_waiting_forever(own_server, tmp_path):
    """chromadb's HttpClient has no timeout; the store's own applies to a client it already
    holds and to one it opens while the server hangs."""
    settings = make_config(tmp_path / "idx", RAGSTREAM_CHROMA_URL=own_server.url).settings.vector_store
    store = ChromaStore(settings, tmp_path / "idx")
    store.request_timeout_s = 1.0
    store.count_windows()
    session = store.client._server._session  # chromadb's httpx client: the timeout reached it
    assert session.timeout.read == 1.0 and session.timeout.connect == store.connect_timeout_s
    own_server.pause()
    try:
        for s in (store, ChromaStore(settings, tmp_path / "idx")):
            s.request_timeout_s = 1.0
            started = time.monotonic()
            with pytest.raises(VectorDBUnavailableError, match="no answer in time"):
                s.fingerprint()
            assert time.monotonic() - started < 1.0 + 2.0  # one timeout: a timeout is not retried
    finally:
        own_server.resume()
    assert store.count_windows() == 0  # and it answers again


def test_cli_reports_an_unreachable_server_with_its_typed_error(tmp_path):
    url = f"http://127.0.0.1:{free_port()}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGSTREAM_")}
    env.update(RAGSTREAM_INDEX_DIR=str(tmp_path / "idx"), RAGSTREAM_UPLOADS_DIR=str(tmp_path / "up"),
               RAGSTREAM_CHROMA_URL=url)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "ragstream", "run", PROMPT, "--no-sync"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert f"Error (vector store unavailable): The Chroma server at {url} cannot be reached" in done.stderr
    assert "Traceback" not in done.stderr
    assert time.monotonic() - started < 60


def test_server_lost_during_an_ingest_stops_it_typed_and_the_next_ingest_completes(own_server, tmp_path,
                                                                                  embedder):
    class DyingStore(ChromaStore):
        """The server is stopped just before the first window write of the run."""

        armed = True

        def _add(self, **kwargs):
            if self.armed:
                self.armed = False
                own_server.stop()
            super()._add(**kwargs)

    cfg = make_config(tmp_path / "idx", RAGSTREAM_CHROMA_URL=own_server.url)
    engine = Engine(cfg)
    engine.services.embedder = embedder
    engine.services.store = LocalEngine(DyingStore(cfg.settings.vector_store, cfg.index_dir),
                                        engine.services.store.keyword_engine)
    kb = tiny_kb(tmp_path)
    with pytest.raises(VectorDBUnavailableError, match="while writing") as caught:
        engine.ingest(kb)  # not a report with every file "failed": the run stops
    assert_unavailable(caught.value, own_server.url)

    own_server.start()
    report = engine.ingest(kb)
    assert (report.processed, report.failed) == (2, 0)
    docs = engine.services.store.documents()
    assert sorted(docs) == ["kb/fruit.md", "kb/servers.md"] and all(d.doc_hash for d in docs.values())
    assert engine.services.index().n_chunks == sum(d.chunks for d in docs.values())
