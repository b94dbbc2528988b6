"""``ragstream serve --workers 2`` for real: a subprocess on a free loopback port (started and
stopped by ``ragstream.measure.load.Service``, as the load test does), over a small knowledge
base ingested in this process, on the default engine and on a Milvus server. Both workers
answer /health and /retrieve (each response names its worker in ``X-RAGstream-Worker``), the
bearer token reaches them, a document this process ingests afterwards is found by both
without a restart, and SIGTERM stops them all gracefully."""

from __future__ import annotations

import itertools
import shutil
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from ragstream.interfaces.service.http import WORKER_HEADER
from ragstream.measure.load import Service, service_env
from ragstream.workbench.engine import Engine
from tests.conftest import KB, make_config

TOKEN = "workers-test-token-61b0e2"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
NEW_DOC = """---
title: Zorblatt calibration
doc_type: ops
last_update_date: 2026-11-01
---

# Zorblatt calibration

The zorblatt flux capacitor is calibrated every Tuesday with the quintessence gauge: set the
gauge to seven zorbs, wait for the flux needle to settle, then record the quintessence reading.
"""
NEW_QUERY = "How is the zorblatt flux capacitor calibrated with the quintessence gauge?"


@pytest.fixture(scope="module", params=["default engine", "milvus server"])
def served(request, tmp_path_factory) -> Iterator[tuple[Service, Engine, Path]]:
    """Two bundled articles ingested here, then ``serve --workers 2`` over the same store: the
    default engine's folder, or a Milvus server on loopback (``tests/servers.py``) that
    this process and both workers reach over the network."""
    root = tmp_path_factory.mktemp("workers")
    docs = root / "kb"
    docs.mkdir()
    for name in ("reranking.md", "faq.md"):
        shutil.copy(KB / name, docs / name)
    extra = {"RAGSTREAM_KB_DIR": str(docs)}
    server = None
    if request.param == "milvus server":
        pytest.importorskip("milvus_lite", reason="milvus-lite is not installed (requirements.txt pins it)")
        from tests.servers import MilvusServer

        server = MilvusServer(root / "milvus-data").start()
        extra["RAGSTREAM_MILVUS_URL"] = server.url
    try:
        engine = Engine(make_config(root / "index", **extra))
        assert engine.ingest(docs).failed == 0
        service = Service({**service_env(root / "index"), **extra}, workers=2, token=TOKEN)
        try:
            service.wait_ready(timeout=240)
            yield service, engine, docs
        finally:
            code = service.stop()
            assert code == 0, service.output()
            out = service.output(200)
            assert out.count("Finished server process") == 2, out  # both stopped gracefully
            assert "RAGstream: 2 workers stopped" in out
    finally:
        if server is not None:
            server.stop()


def _until_both(service: Service, request: Callable[[httpx.Client], httpx.Response],
                accept: Callable[[httpx.Response], bool], timeout: float = 60.0
                ) -> dict[str, httpx.Response]:
    """Send ``request`` on 8 fresh connections at once, round after round, until a response
    ``accept`` takes came from each of the 2 workers: the first such response per worker pid."""
    seen: dict[str, httpx.Response] = {}
    deadline = time.monotonic() + timeout

    def one(_: int) -> httpx.Response:
        with httpx.Client(base_url=service.url, timeout=60) as client:  # a connection of its own
            return request(client)

    with ThreadPoolExecutor(8) as pool:
        while len(seen) < 2:
            assert time.monotonic() < deadline, f"answers came only from workers {sorted(seen)}"
            for r in pool.map(one, range(8)):
                assert r.status_code == 200, r.text
                if accept(r):
                    seen.setdefault(r.headers[WORKER_HEADER], r)
    return seen


def test_two_workers_answer_health_and_retrieve(served):
    service, _engine, _docs = served
    pids = {str(p) for p in service.worker_pids}
    assert len(pids) == 2 and str(service.proc.pid) not in pids  # two processes besides the supervisor

    health = _until_both(service, lambda c: c.get("/health"), lambda r: True)
    assert set(health) == pids
    assert {r.json()["chunks"] for r in health.values()} == {health[next(iter(pids))].json()["chunks"]}
    assert all(r.json()["status"] == "ok" and r.json()["chunks"] > 0 for r in health.values())

    body = {"query": "What does the reranker do?", "context_key": "w:1", "min_relevance": 0}
    assert httpx.post(f"{service.url}/retrieve", json=body, timeout=60).status_code == 401
    found = _until_both(service, lambda c: c.post("/retrieve", json=body, headers=AUTH),
                        lambda r: True)
    assert set(found) == pids
    for r in found.values():
        chunks = r.json()["document_chunks"]
        assert chunks and Path(chunks[0]["metadata"]["path"]).name in ("reranking.md", "faq.md")


def test_a_document_ingested_by_another_process_is_seen_by_every_worker(served):
    service, engine, docs = served
    before = _until_both(service, lambda c: c.get("/health"), lambda r: True)
    n_before = {r.json()["chunks"] for r in before.values()}
    assert len(n_before) == 1

    (docs / "zorblatt.md").write_text(NEW_DOC, encoding="utf-8")
    report = engine.ingest(docs)  # this test process writes; the workers keep running
    assert report.processed == 1 and report.failed == 0

    after = _until_both(service, lambda c: c.get("/health"),
                        lambda r: r.json()["chunks"] > next(iter(n_before)))
    assert len({r.json()["chunks"] for r in after.values()}) == 1

    keys = itertools.count()

    def ask(client: httpx.Client) -> httpx.Response:  # each with its own key: never from the cache
        return client.post("/retrieve", headers=AUTH, json={
            "query": NEW_QUERY, "context_key": f"new:{next(keys)}", "min_relevance": 0,
            "max_chunks": 3})

    found = _until_both(service, ask, lambda r: bool(r.json()["document_chunks"]))
    for pid, r in found.items():
        top = r.json()["document_chunks"][0]
        assert Path(top["metadata"]["path"]).name == "zorblatt.md", (pid, top["metadata"])
        assert "quintessence" in top["text"]
