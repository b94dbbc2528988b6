"""A real `chroma run` server on loopback as the vector store (vector_store.mode = http)."""

import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from ragstream.engine import Engine
from ragstream.errors import VectorStoreError
from tests.conftest import KB, make_config

CHROMA = Path(sys.executable).parent / "chroma"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def chroma_server(tmp_path_factory):
    port = free_port()
    data = tmp_path_factory.mktemp("chroma-server")
    proc = subprocess.Popen([str(CHROMA), "run", "--path", str(data), "--host", "127.0.0.1",
                             "--port", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"{url}/api/v2/heartbeat", timeout=2) as r:
                json.loads(r.read())
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"chroma run did not start on port {port}")
            time.sleep(0.25)
    yield url
    proc.terminate()
    proc.wait(timeout=20)


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
