"""``ragstream.measure.load``: a tiny real run (a two-article knowledge base ingested by
``ragstream ingest``, ``ragstream serve --workers 2`` on a free loopback port, the load
generator in its own process, 2 clients for about a second per phase); the generator counting
HTTP errors and refused connections rather than raising; a synthetic store written through the
real store. No timing limits: the figures depend on the machine."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from ragstream.interfaces.cli import main
from ragstream.measure import load
from tests.conftest import KB
from tests.test_service import serving  # a real uvicorn on a free loopback port

TOPICS = ["insulin", "microglia", "telomerase", "malaria", "statins", "cortisol", "dopamine",
          "vitamin D", "influenza", "collagen", "leptin", "p53", "autophagy", "hypoxia"]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """A tiny BEIR folder: one abstract and two claims per topic."""
    folder = tmp_path_factory.mktemp("tiny-scifact")
    with (folder / "corpus.jsonl").open("w", encoding="utf-8") as f:
        for i, t in enumerate(TOPICS):
            f.write(json.dumps({"_id": str(i), "title": f"The role of {t}",
                                "text": f"We studied {t} in a cohort of patients. Levels of {t} "
                                        f"rose after treatment. The effect of {t} on outcome was "
                                        f"small but significant."}) + "\n")
    with (folder / "queries.jsonl").open("w", encoding="utf-8") as f:
        for i, t in enumerate(TOPICS):
            f.write(json.dumps({"_id": str(2 * i), "text": f"{t} levels rise after treatment."}) + "\n")
            f.write(json.dumps({"_id": str(2 * i + 1), "text": f"{t} has no effect on outcome."}) + "\n")
    return folder


def positive(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0


def test_a_real_run_against_serve_with_two_workers(data, tmp_path):
    kb = tmp_path / "kb"
    kb.mkdir()
    for name in ("reranking.md", "faq.md"):
        shutil.copy(KB / name, kb / name)
    result = load.run_load((), clients=2, seconds=1.5, data=data, workers=(2,), kb=kb)
    json.dumps(result, allow_nan=False)  # strict JSON
    assert result["clients"] == 2 and result["workers"] == [2] and result["store_mode"] == "persistent"
    assert set(result["knowledge_bases"]) == {"kb"}
    e = result["knowledge_bases"]["kb"]
    assert e["store"]["documents"] == 2 and e["store"]["failed"] == 0 and e["store"]["chunks"] > 0
    c = e["by_workers"]["2"]
    assert c["exit_code"] == 0  # SIGTERM stopped the service gracefully
    assert len(c["worker_pids"]) == 2
    for pid in map(str, c["worker_pids"]):
        assert positive(c["memory_kib"][pid]["VmRSS"]) and positive(c["memory_kib"][pid]["VmHWM"])
    assert positive(c["rss_per_worker_mib"])
    assert c["warm"]["errors"] == 0 and c["warm"]["requests"] > 0
    for phase, clients in (("single", 1), ("many", 2)):
        p = c[phase]
        assert p["clients"] == clients and len(p["per_client"]) == clients
        assert p["requests"] == sum(p["per_client"]) == p["ok"] + p["errors"]
        assert all(n > 0 for n in p["per_client"]), p["per_client"]  # every client ran
        assert p["errors"] == 0 and p["error_kinds"] == {} and p["cached"] == 0, p["error_samples"]
        assert positive(p["rps"]) and p["wall_s"] >= 1.5
        assert 0 < p["p50_ms"] <= p["p95_ms"] <= p["p99_ms"] <= p["max_ms"]
        assert set(p["by_worker"]) <= set(map(str, c["worker_pids"]))
        assert sum(p["by_worker"].values()) == p["requests"]
        assert p["service_cores"] is not None and p["generator_cores"] is not None
    assert c["speedup"] == round(c["many"]["rps"] / c["single"]["rps"], 2)
    assert c["pass"] == (c["speedup"] >= load.TARGET_SPEEDUP) and result["pass"] == c["pass"]
    report = load.format_report(result)
    assert "--workers 2" in report and "1 client:" in report and "2 clients:" in report
    assert "2 clients / 1 client = " in report and "requests/s" in report


# --------------------------------------------------------------------------- the generator alone


async def _flaky_app(scope, receive, send) -> None:
    """Every other request (by its context key's sequence number) is a 503."""
    assert scope["type"] == "http"
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    seq = int(json.loads(body)["context_key"].rsplit(":", 1)[-1])
    status, answer = (503, b'{"error":"down"}') if seq % 2 else (200, b'{"cached":false}')
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(answer)).encode()),
                            (b"x-ragstream-worker", b"4242")]})
    await send({"type": "http.response.body", "body": answer})




def test_the_generator_counts_http_errors_and_refused_connections():
    spec = {"host": "127.0.0.1", "queries": ["a", "b", "c"], "timeout_s": 5, "seconds": 0.3,
            "clients": 3, "name": "t", "token": "x"}
    with serving(_flaky_app) as url:
        p = load.generate({**spec, "port": int(url.rsplit(":", 1)[1])})
    assert p["requests"] == sum(p["per_client"]) == p["ok"] + p["errors"] > 0
    assert p["error_kinds"] == {"HTTP 503": p["errors"]} and abs(p["ok"] - p["errors"]) <= 1
    assert p["error_samples"][0] == 'HTTP 503: {"error":"down"}'
    assert p["by_worker"] == {"4242": p["requests"]} and p["cached"] == 0

    p = load.generate({**spec, "port": load.free_port(), "clients": 1, "seconds": 0.1})
    assert p["ok"] == 0 and p["errors"] > 0 and set(p["error_kinds"]) == {"ConnectionRefusedError"}
    assert p["rps"] == 0 and p["p50_ms"] is None


def test_a_synthetic_store_is_built_through_the_real_store_and_reused(data, tmp_path):
    from ragstream.backends.services import open_store
    from ragstream.common.config import load_config

    index_dir, built = load.synthetic_store(25, data, cache=tmp_path / "cache")
    assert built["chunks"] == 25 and not built["reused"]
    store = open_store(load_config(env={"RAGSTREAM_INDEX_DIR": str(index_dir)}))
    try:
        assert store.count() == 25
        assert store.keyword(["insulin"], 5)  # found by the keyword engine
    finally:
        store.close()
    again_dir, again = load.synthetic_store(25, data, cache=tmp_path / "cache")
    assert again_dir == index_dir and again["reused"]


def test_latency_summary_matches_numpy():
    import numpy as np

    values = [5.0, 1.0, 3.0, 2.0, 4.0, 10.0, 7.5]
    s = load.latency_summary(values)
    for q in (50, 95, 99):
        assert s[f"p{q}_ms"] == round(float(np.percentile(values, q)), 2)
    assert s["max_ms"] == 10.0 and load.latency_summary([])["p50_ms"] is None


def test_missing_data_is_a_clear_error(tmp_path):
    res = CliRunner().invoke(main, ["load", "--data", str(tmp_path), "--seconds", "1"])
    assert res.exit_code == 2
    assert "corpus.jsonl" in res.output


def test_chunks_option_is_parsed():
    res = CliRunner().invoke(main, ["load", "--chunks", "10k,zero"])
    assert res.exit_code == 2 and "--chunks" in res.output
