"""``ragstream.measure.scale`` and ``ragstream.measure.bench``, for real at a small size.

The scale bench runs once, quick, on a 1,000-chunk knowledge base built through the real
store (``LocalEngine``: Chroma + tantivy) in a temp cache: a serving, a writer and an ingesting
process each load the real embedder. The bench's quick run reuses that scale result for its
retrieval part (everything else in it runs for real). No timing limits and no exact ranks:
the figures depend on the machine. 100k and 1M are the benchmark command's
(``python -m ragstream bench --scale [--sizes 10k,100k,1M]``), not tests.
"""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from ragstream.common.config import PROJECT_ROOT
from ragstream.measure import bench, harness, scale

N = 1_000
LABEL = "1k"
FIGURES = ("ingest_words_per_s", "encode_words_per_s", "ingest_vs_encode", "pipeline_p50_ms",
           "pipeline_p95_ms", "api_retrieve_p50_ms", "api_retrieve_p95_ms", "cold_run_s", "peak_rss_mb")
MAPS = ("retrieval_p50_ms", "retrieval_p95_ms", "rerank_p50_ms", "rerank_p95_ms")


def positive(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


@pytest.fixture(scope="module")
def docs():
    if not (harness.SCIFACT_DIR / "corpus.jsonl").is_file():
        pytest.skip(f"the SciFact data set is not at {harness.SCIFACT_DIR} (shared/ beside the "
                    f"checkout, or RAGSTREAM_BENCH_SCIFACT)")
    return [d for d in harness.load_scifact(0).docs if d.text.strip()]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("bench-scale")


@pytest.fixture(scope="module")
def built(docs, cache, embedder):
    """The knowledge base built (first call) and found in the cache (second call)."""
    folder = scale.size_folder(cache, N)
    first = scale.build_store(N, folder, docs, embedder.dimension)
    again = scale.build_store(N, folder, docs, embedder.dimension)
    return first, again


@pytest.fixture(scope="module")
def scale_run(built, cache, embedder):
    calls: list[tuple[str, int, int]] = []
    result = scale.run_scale({LABEL: N}, quick=True, cache=cache, dim=embedder.dimension,
                             progress=lambda *a: calls.append(a))
    return result, calls


@pytest.fixture(scope="module")
def measured(scale_run):
    return scale_run[0]["sizes"][LABEL]


# --------------------------------------------------------------------------- scale


def test_sizes_parse():
    assert scale.parse_sizes("10k,100k,1M") == {"10k": 10_000, "100k": 100_000, "1M": 1_000_000}
    assert scale.parse_sizes(" 2000 , 1m") == {"2k": 2000, "1M": 1_000_000}
    for bad in ("", "lots", "5"):
        with pytest.raises(ValueError):
            scale.parse_sizes(bad)


def test_synthetic_documents_are_seeded_and_shaped_like_ingested_ones(docs):
    corpus = scale.SyntheticCorpus(docs[:50], 384)
    doc_id, records, digest = corpus.document(3, 35)
    again = scale.SyntheticCorpus(docs[:50], 384).document(3, 35)[1]
    assert doc_id.startswith(scale.ROOT) and digest
    chunks = {r.chunk.id: r.chunk for r in records}
    assert len(chunks) == 5  # document 3 of 35 chunks: chunks 30..34
    for rec, twin in zip(records, again):
        assert np.array_equal(rec.vector, twin.vector)
        assert abs(float(np.linalg.norm(rec.vector)) - 1.0) < 1e-4
        if rec.sentence_vectors is not None:
            assert len(rec.sentence_vectors) == len(rec.sentence_spans) <= scale.SENTENCES_MAX
    for cid, chunk in chunks.items():  # the windows partition the chunk text, as Chroma needs
        wins = sorted((r for r in records if r.chunk.id == cid), key=lambda r: r.window)
        assert "".join(chunk.text[r.start:r.end] for r in wins) == chunk.text
        assert {r.n_windows for r in wins} == {len(wins)} and 1 <= len(wins) <= 2


def test_the_store_is_built_then_reused_from_the_cache(built, cache):
    first, again = built
    assert first["reused"] is False and again["reused"] is True
    assert first["chunks"] == again["chunks"] == N and first["documents"] == N // scale.CHUNKS_PER_DOC
    assert again["build_s"] == first["build_s"] and positive(first["build_chunks_per_s"])
    assert positive(first["disk_mb"]) and first["windows"] >= N
    assert "vectors: synthetic" in first["data"]
    assert (scale.size_folder(cache, N) / "manifest.json").is_file()


def test_a_stopped_build_resumes_where_it_stopped(docs, tmp_path, monkeypatch, embedder):
    class Stop(Exception):
        pass

    def stop_after_two(_phase, done, _total):
        if done >= 6:
            raise Stop

    monkeypatch.setattr(scale, "DOCS_PER_WRITE", 3)
    folder = scale.size_folder(tmp_path, 100)
    with pytest.raises(Stop):
        scale.build_store(100, folder, docs, embedder.dimension, stop_after_two)
    assert scale.read_manifest(folder) is None and scale.read_progress(folder, 100)["documents_done"] == 6
    written: list[int] = []
    done = scale.build_store(100, folder, docs, embedder.dimension, lambda _p, d, _t: written.append(d))
    assert done["reused"] is False and done["build_runs"] == 2 and done["chunks"] == 100
    assert written[0] == 9 and written[-1] == 10  # documents 6..9 only
    assert scale.build_store(100, folder, docs, embedder.dimension)["reused"] is True


BUILDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from ragstream.measure import bench, harness, scale
    scale.DOCS_PER_WRITE = 2
    docs = [d for d in harness.load_scifact(0).docs if d.text.strip()]
    def tick(_phase, done, _total):
        print("done", done, flush=True)
        time.sleep(0.05)
    scale.build_store(400, Path(sys.argv[1]), docs, int(sys.argv[2]), tick)
""")


@pytest.mark.parametrize("signum, returncode", [(signal.SIGTERM, 143), (signal.SIGINT, -signal.SIGINT)])
def test_a_signal_stops_the_build_between_two_writes_and_it_resumes(docs, tmp_path, embedder,
                                                                   signum, returncode):
    """Killed in the middle of Chroma's write, a 1M build was left unreadable: a signal now
    takes effect after the write in progress, says so, and the same build resumes."""
    folder = scale.size_folder(tmp_path, 400)
    proc = subprocess.Popen([sys.executable, "-c", BUILDER, str(folder), str(embedder.dimension)],
                            cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:
            if line.split() == ["done", "4"]:
                proc.send_signal(signum)
                break
        _out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == returncode, err[-2000:]
    assert "stopping after the write in progress" in err and "the same command resumes it" in err
    done = scale.read_progress(folder, 400)["documents_done"]
    assert 4 <= done < 40 and done % 2 == 0
    from ragstream.backends.services import open_store

    store = open_store(harness.bench_config(folder / "index"))
    try:  # readable, and holding exactly the documents written
        assert store.count() == done * scale.CHUNKS_PER_DOC
    finally:
        store.close()
    resumed = scale.build_store(400, folder, docs, embedder.dimension)
    assert resumed["chunks"] == 400 and resumed["build_runs"] == 2


def test_a_change_by_another_process_is_seen_by_the_serving_process(measured):
    u = measured["update_to_queryable"]
    assert u["all_found"], u
    for r in u["rounds"]:
        assert r["found"] and r["queries"] >= 1 and positive(r["write_ms"])
        assert isinstance(r["seen_ms"], float)  # may be < 0: a query can see it as it returns
    f = measured["first_after_change"]
    for r in f["rounds"]:
        assert positive(r["first_ms"]) and positive(r["warm_ms"]) and positive(r["ratio"])


def test_the_cached_store_is_left_as_built(scale_run, cache, built):
    from ragstream.backends.services import open_store

    store = open_store(harness.bench_config(scale.size_folder(cache, N) / "index"))
    try:
        docs = list(store.keyword_engine.documents())
        assert sum(d.startswith(scale.ROOT + "/") for d in docs) == N // scale.CHUNKS_PER_DOC
        assert sum(d.startswith("extra/") for d in docs) == 5  # the files ingested beside them
        assert not [d for d in docs if d.startswith(scale.PROBE_PREFIX)]  # the changes undone
        assert store.count() > N and store.in_step()
    finally:
        store.close()


def test_retrieval_memory_and_ingest_figures_are_produced(measured):
    r = measured["retrieval"]
    assert measured["chunks"] >= N and measured["windows"] >= N
    assert r["n"] == r["queries"] * r["repeats"] > 0
    assert 0 < r["p50_ms"] <= r["p95_ms"] <= r["max_ms"]
    assert positive(r["encode"]["p50_ms"]) and r["pieces_mean"] >= 1
    s = measured["serving"]
    for key in ("rss_model_mb", "rss_warm_mb", "rss_after_queries_mb", "peak_before_changes_mb",
                "peak_after_changes_mb", "peak_growth"):
        assert positive(s[key]), key
    i = measured["ingest"]
    for key in ("encode_chunks_per_s", "write_chunks_per_s", "ingest_chunks_per_s", "ingest_vs_encode"):
        assert positive(i[key]), key
    assert i["ingest_vs_encode"] <= 1 and i["windows"] >= i["chunks"] > 0
    o = measured["one_file"]
    assert o["one_file_processed"] == 1 and o["one_removed_deleted"] == 1
    assert positive(o["ratio"]) and all(positive(x) for x in o["nothing_new_s"])
    c = o["cli"]  # the same as whole `ragstream ingest` processes on the benchmark's store
    assert c["one_file_processed"] == 1 and c["one_removed_deleted"] == 1
    assert c["one_file_s"] > 0 and min(c["nothing_new_s"]) > 0 and positive(c["peak_growth"])


def test_scale_targets_json_and_report(scale_run):
    result, calls = scale_run
    json.loads(json.dumps(result, allow_nan=False))  # strict JSON
    names = " | ".join(t["name"] for t in result["targets"])
    for part in ("Retrieval p95", "store write to the first query that sees it",
                 "adding one file", "first query after another process's change",
                 "peak memory with a change"):
        assert part in names
    assert all(t["pass"] in (True, False, None) for t in result["targets"])
    nm = result["sizes"]["1M"]["not_measured"]  # never silently skipped
    assert "opt-in" in nm["note"] and positive(nm["estimated_build_s"])
    report = scale.format_scale_report(result)
    e = result["sizes"][LABEL]
    assert harness.fmt(e["retrieval"]["p95_ms"]) in report and "SYNTHETIC" in report
    assert nm["note"] in report
    assert report.count("[   met]") + report.count("[MISSED]") + report.count("[   n/a]") \
        == len(result["targets"])
    assert calls and calls[-1][1] == calls[-1][2]


# --------------------------------------------------------------------------- bench


@pytest.fixture(scope="module")
def run(scale_run):
    """``run_bench(quick=True)`` for real, its retrieval part the scale run above."""
    calls: list[tuple[str, int, int]] = []
    original = bench.measure_retrieval

    def reuse(progress, dim, sizes=None, cache=None):
        progress("retrieval", 1, 1)
        return scale_run[0]

    bench.measure_retrieval = reuse
    try:
        result = bench.run_bench(quick=True, progress=lambda *a: calls.append(a))
    finally:
        bench.measure_retrieval = original
    return result, calls


@pytest.fixture(scope="module")
def result(run):
    return run[0]


@pytest.fixture(scope="module")
def report(result):
    return bench.format_report(result)


def test_json_keys_types_and_values(result):
    for key in FIGURES:
        assert positive(result[key]), (key, result[key])
    for key in MAPS:
        assert isinstance(result[key], dict) and result[key], key
        for label, value in result[key].items():
            assert isinstance(label, str) and positive(value), (key, label, value)
    assert set(result["retrieval_p50_ms"]) == set(result["retrieval_p95_ms"]) == {LABEL}
    assert "offline" in result["rerank_p95_ms"]
    for label in result["retrieval_p95_ms"]:
        assert result["retrieval_p50_ms"][label] <= result["retrieval_p95_ms"][label]
    assert result["quick"] is True
    json.loads(json.dumps(result, allow_nan=False))  # strict JSON: no NaN or inf anywhere


def test_the_work_really_ran(result):
    ing = result["ingest"]
    assert ing["failed"] == 0 and ing["processed"] == ing["files"] > ing["scifact_docs"] > 0
    assert ing["words"] > 0 and ing["encoded_texts"] >= ing["windows"] > 0 and ing["encoder_calls"]
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


def test_retrieval_is_on_the_real_store_and_labelled_synthetic(result):
    e = result["retrieval"][LABEL]
    assert e["synthetic"] is True and "vectors: synthetic" in e["data"]
    assert e["chunks"] >= N and positive(e["serving_peak_rss_mb"])
    assert result["retrieval_data"][LABEL] == e["data"]
    assert positive(result["memory"]["serving_peak_rss_mb"])


def test_targets_cover_every_goal(result):
    names = " | ".join(t["name"] for t in result["targets"])
    for part in ("retrieval p95", "rerank p95, offline", "pipeline p95", "ingestion throughput",
                 "ingestion / raw encode", "fresh CLI run", "peak memory",
                 "store write to the first query that sees it", "adding one file"):
        assert part in names
    for t in result["targets"]:
        assert t["pass"] in (True, False, None) and t["op"] in ("<=", ">=")


def test_report_mentions_every_figure(result, report):
    for key in ("ingest_words_per_s", "encode_words_per_s", "pipeline_p50_ms",
                "pipeline_p95_ms", "api_retrieve_p50_ms", "api_retrieve_p95_ms", "peak_rss_mb"):
        assert harness.fmt(result[key]) in report, key
    assert harness.fmt(result["cold_run_s"], 2) in report
    assert harness.fmt(result["ingest_vs_encode"], 3) in report
    for key in MAPS:
        for label, value in result[key].items():
            assert harness.fmt(value) in report, (key, label)
            assert label in report
    for label, e in result["retrieval"].items():
        assert f"{label}: " in report and e["data"] in report
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
