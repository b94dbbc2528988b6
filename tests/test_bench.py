"""``ragstream.measure.bench``: one quick run (real encoder, real Chroma in temp dirs, real stages);
the result's keys, types and sanity, and a report that shows every figure. No timing limits:
the figures depend on the machine."""

from __future__ import annotations

import json
import math

import pytest

from ragstream.measure import bench

FIGURES = ("ingest_words_per_s", "encode_words_per_s", "ingest_vs_encode", "pipeline_p50_ms",
           "pipeline_p95_ms", "api_retrieve_p50_ms", "api_retrieve_p95_ms", "cold_run_s", "peak_rss_mb")
MAPS = ("retrieval_p50_ms", "retrieval_p95_ms", "rerank_p50_ms", "rerank_p95_ms")


@pytest.fixture(scope="module")
def run():
    if not (bench.SCIFACT_DIR / "corpus.jsonl").is_file():
        pytest.skip(f"the SciFact data set is not at {bench.SCIFACT_DIR} (shared/ beside the "
                    f"checkout, or RAGSTREAM_BENCH_SCIFACT)")
    calls: list[tuple[str, int, int]] = []
    result = bench.run_bench(quick=True, progress=lambda *a: calls.append(a))
    return result, calls


@pytest.fixture(scope="module")
def result(run):
    return run[0]


@pytest.fixture(scope="module")
def report(result):
    return bench.format_report(result)


def positive(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def test_json_keys_types_and_values(result):
    for key in FIGURES:
        assert positive(result[key]), (key, result[key])
    for key in MAPS:
        assert isinstance(result[key], dict) and result[key], key
        for label, value in result[key].items():
            assert isinstance(label, str) and positive(value), (key, label, value)
    assert set(result["retrieval_p50_ms"]) == set(result["retrieval_p95_ms"]) == {"1k", "5k"}
    assert "offline" in result["rerank_p95_ms"]
    for label in result["retrieval_p95_ms"]:
        assert result["retrieval_p50_ms"][label] <= result["retrieval_p95_ms"][label]
    assert result["quick"] is True
    json.loads(json.dumps(result, allow_nan=False))  # strict JSON: no NaN or inf anywhere


def test_the_work_really_ran(result):
    ing = result["ingest"]
    assert ing["failed"] == 0 and ing["processed"] == ing["files"] > ing["scifact_docs"] > 0
    assert ing["words"] > 0 and ing["encoded_texts"] >= ing["windows"] and ing["encoder_calls"]
    assert result["rerank"]["backends"]["offline"]["mean_candidates"] > 0
    # a cross-encoder is always timed: the configured one, or a same-size stand-in, said so
    backends = result["rerank"]["backends"]
    assert "cross-encoder" in backends or (
        "cross-encoder-proxy" in backends and "stand-in" in result["rerank"]["proxy_note"]
        and result["rerank"]["skipped"]["cross-encoder"])
    for e in backends.values():
        assert e["mean_candidates"] > 0 and e["p50_ms"] > 0
    p = result["pipeline"]
    assert p["n"] == p["prompts"] * p["repeats"] and p["answer_modes"]
    assert {"Retrieval", "ReRanker", "Prompt_Builder", "answer"} <= set(p["stage_median_ms"])
    assert result["cold_run"]["errors"] == [] and len(result["cold_run"]["runs_s"]) == 1
    m = result["machine"]
    assert m["cpus"] >= 1 and len(m["load_avg_start"]) == len(m["load_avg_end"]) == 3


def test_large_collection_is_labelled_synthetic(result):
    entries = result["retrieval"]
    largest = list(entries)[-1]
    assert entries[largest]["chunks"] == 5000 > entries["1k"]["chunks"] == 1000
    for label, e in entries.items():
        assert e["synthetic"] is True
        assert "vectors: synthetic" in e["data"]
        assert e["replicated_texts"] is (e["chunks"] > 5183)  # SciFact has 5,183 abstracts
        assert ("replicated" in e["data"]) is e["replicated_texts"]
        assert result["retrieval_data"][label] == e["data"]
        assert e["index_memory"]["total_mb"] > 0
    fresh = entries[largest]["fresh_process"]
    assert "error" not in fresh, fresh
    assert fresh["chunks"] == 5000 and positive(fresh["peak_rss_mb"])
    assert positive(result["memory"]["fresh_process_peak_rss_mb"])


def test_targets_cover_every_goal(result):
    names = " | ".join(t["name"] for t in result["targets"])
    for part in ("retrieval p95", "rerank p95, offline", "pipeline p95", "ingestion throughput",
                 "ingestion / raw encode", "fresh CLI run", "peak memory"):
        assert part in names
    for t in result["targets"]:
        assert t["pass"] in (True, False, None) and t["op"] in ("<=", ">=")


def test_report_mentions_every_figure(result, report):
    for key in ("ingest_words_per_s", "encode_words_per_s", "pipeline_p50_ms",
                "pipeline_p95_ms", "api_retrieve_p50_ms", "api_retrieve_p95_ms", "peak_rss_mb"):
        assert bench.fmt(result[key]) in report, key
    assert bench.fmt(result["cold_run_s"], 2) in report
    assert bench.fmt(result["ingest_vs_encode"], 3) in report
    for key in MAPS:
        for label, value in result[key].items():
            assert bench.fmt(value) in report, (key, label)
            assert label in report
    for label, e in result["retrieval"].items():
        assert f"{label}: " in report and e["data"] in report
        assert bench.fmt(e["fresh_process"]["peak_rss_mb"]) in report if "fresh_process" in e else True
    assert report.count("SYNTHETIC") == len(result["retrieval"])
    for t in result["targets"]:
        assert t["name"] in report
    assert report.count("[pass]") + report.count("[MISS]") + report.count("[ n/a]") == len(result["targets"])
    for stage in result["pipeline"]["stage_median_ms"]:
        assert stage in report
    assert str(result["machine"]["load_avg_start"]) in report


def test_progress_reaches_the_end_of_every_phase(run):
    _result, calls = run
    last: dict[str, tuple[int, int]] = {}
    for phase, done, total in calls:
        assert 0 <= done <= total
        last[phase] = (done, total)
    assert set(last) == {"ingest", "rerank", "pipeline", "api", "cold run", "retrieval"}
    assert all(done == total for done, total in last.values())
