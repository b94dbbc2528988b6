"""``ragstream.measure.load`` / ``python -m ragstream load``: a tiny real run (the encoder, an embedded
Chroma store in a temp folder, a synthetic index of a few hundred chunks, 2 client threads for
about a second per phase) and an error inside a client, counted rather than raised. No timing
limits: the figures depend on the machine."""

from __future__ import annotations

import json
import threading

import pytest
from click.testing import CliRunner

from ragstream.cli import main
from ragstream.measure import load
from ragstream.service.api import RAGPipeline

TOPICS = ["insulin", "microglia", "telomerase", "malaria", "statins", "cortisol", "dopamine",
          "vitamin D", "influenza", "collagen", "leptin", "p53", "autophagy", "hypoxia"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
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


def test_smoke_run_through_the_cli(data, tmp_path):
    out = tmp_path / "load.json"
    res = CliRunner().invoke(main, ["load", "--chunks", "300", "--clients", "2", "--seconds", "1",
                                    "--data", str(data), "--json", "--out", str(out)])
    assert res.exit_code == 0, res.output
    result = json.loads(out.read_text(encoding="utf-8"))
    json.dumps(result, allow_nan=False)  # strict JSON
    assert result["clients"] == 2 and result["seconds"] == 1 and result["store_mode"] == "persistent"
    assert set(result["sizes"]) == {"300"}
    e = result["sizes"]["300"]
    for key in ("chunks", "single", "many", "single_p95_ms", "p95_ms", "ratio", "pass", "store",
                "load_avg"):
        assert key in e, key
    assert e["chunks"] == 300 and e["windows"] >= 300
    for phase, clients in (("single", 1), ("many", 2)):
        p = e[phase]
        assert p["clients"] == clients and len(p["per_client"]) == clients
        assert p["queries"] == sum(p["per_client"]) == p["ok"] + p["errors"]
        assert all(n > 0 for n in p["per_client"]), p["per_client"]  # every client ran
        assert p["errors"] == 0 and p["error_kinds"] == {} and p["cached"] == 0
        assert positive(p["qps"]) and positive(p["wall_s"]) and p["wall_s"] >= 1
        assert positive(p["cpu_cores"])
        assert 0 < p["p50_ms"] <= p["p95_ms"] <= p["max_ms"]
    # the ratio comes from this run's two phases
    assert e["single_p95_ms"] == e["single"]["p95_ms"] and e["p95_ms"] == e["many"]["p95_ms"]
    assert e["ratio"] == round(e["many"]["p95_ms"] / e["single"]["p95_ms"], 2)
    assert e["pass"] == (e["ratio"] <= load.TARGET_RATIO)
    assert e["store"]["fingerprint_reads_per_query"] >= 1
    assert positive(e["store"]["fingerprint_ms"]["p50_ms"])
    assert result["pass"] == e["pass"]
    report = load.format_report(result)  # the --json run also wrote the text figures' source
    assert "2 clients" in report and "1 client:" in report and "p95 ratio" in report


def test_an_error_inside_a_client_is_counted_and_reported(data, monkeypatch):
    original = RAGPipeline._retrieve_cached

    def flaky(self, engine, query, context_key, *args):
        seq = int(context_key.rsplit(":", 1)[-1])
        if not context_key.startswith("warm") and seq % 2 == 0:
            raise RuntimeError(f"injected failure {seq}")
        return original(self, engine, query, context_key, *args)

    monkeypatch.setattr(RAGPipeline, "_retrieve_cached", flaky)
    result = load.run_load(chunks=(200,), clients=2, seconds=1.0, data=data)  # no exception
    e = result["sizes"]["200"]
    for phase in ("single", "many"):
        p = e[phase]
        assert p["errors"] > 0 and p["error_kinds"] == {"RuntimeError": p["errors"]}
        assert p["queries"] == sum(p["per_client"]) == p["ok"] + p["errors"]
        assert p["ok"] > 0 and abs(p["ok"] - p["errors"]) <= p["clients"]  # every other call failed
        assert p["error_samples"] and "injected failure" in p["error_samples"][0]
    assert e["pass"] is False and result["pass"] is False
    report = load.format_report(result)
    assert "RuntimeError ×" in report and "error: RuntimeError: injected failure" in report
    assert "[MISS]" in report


def test_run_phase_counts_every_call_and_keeps_errors():
    seen: list[str] = []
    lock = threading.Lock()

    def call(query: str, key: str) -> str:
        with lock:
            seen.append(key)
        if query == "bad":
            raise ValueError("no good")
        return query

    wraps: list[int] = []
    feed = load.QueryFeed(["a", "bad", "c"], on_wrap=lambda: wraps.append(1))
    p = load.run_phase(call, feed, clients=3, seconds=0.2)
    assert p["queries"] == sum(p["per_client"]) == len(seen) == feed.handed == p["ok"] + p["errors"]
    assert len(set(seen)) == len(seen)  # every call had its own context key
    assert p["error_kinds"] == {"ValueError": p["errors"]} and p["errors"] >= 1
    assert p["error_samples"][0] == "ValueError: no good"
    assert len(wraps) == feed.rounds == (feed.handed - 1) // 3


def test_missing_data_is_a_clear_error(tmp_path):
    res = CliRunner().invoke(main, ["load", "--data", str(tmp_path), "--seconds", "1"])
    assert res.exit_code == 2
    assert "corpus.jsonl" in res.output


def test_chunks_option_is_parsed():
    res = CliRunner().invoke(main, ["load", "--chunks", "10k,zero"])
    assert res.exit_code == 2 and "--chunks" in res.output
