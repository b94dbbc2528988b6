"""Per-stage wall time of the whole pipeline on the bundled knowledge base.

    .venv/bin/python -m benchmarks.stage_latency [--repeats 5] [--index-dir DIR]

Ingests data/kb into a fresh index (timed), warms the models up, then runs every prompt of
PROMPTS `--repeats` times through all eight stages and the (extractive) answer, and prints the
median and p95 wall time of each stage, and each stage's median as a ratio of Retrieval's median
measured in the same run. Cold-start costs (model loading) are reported separately.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path

PROMPTS = [
    "How does the ReRanker choose its backend when no cross-encoder is available?",
    "Task: Explain reciprocal rank fusion.\nAudience: beginner\nFormat: bullet points",
    "## Task\nWhy did A3 drop my chunk?\n## Context\nI see chunks marked dropped in the a3 table.",
    "How do I start a Chroma server and point RAGstream at it?",
    "What does the condensed context contain, and how is its budget enforced?",
]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--index-dir", default="", help="default: a new temp folder")
    args = parser.parse_args()

    from ragstream.config import load_config
    from ragstream.engine import Engine

    index_dir = Path(args.index_dir or tempfile.mkdtemp(prefix="ragstream-latency-"))
    cfg = load_config(env={"RAGSTREAM_INDEX_DIR": str(index_dir),
                           "RAGSTREAM_UPLOADS_DIR": str(index_dir / "uploads")})
    engine = Engine(cfg)
    t0 = time.perf_counter()
    report = engine.ensure_knowledge_base()
    ingest_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    engine.warm_up()
    warm_s = time.perf_counter() - t0
    print(f"ingest: {report.summary()} (wall {ingest_s:.1f} s, model load included)")
    print(f"warm-up (embedder, BM25, reranker): {warm_s:.1f} s")
    t0 = time.perf_counter()
    again = engine.ensure_knowledge_base()
    print(f"re-ingest unchanged: {again.skipped} skipped in {time.perf_counter() - t0:.2f} s")

    times: dict[str, list[float]] = defaultdict(list)
    for _ in range(args.repeats):
        for prompt in PROMPTS:
            # a fresh engine state each time, but the same loaded models: steady-state latency
            engine.services.embedder._cache.clear()
            sp = engine.run(prompt)
            for run in sp.stage_runs:
                times[run.stage].append(run.wall_ms)
            t0 = time.perf_counter()
            engine.answer(sp)
            times["Answer (extractive)"].append((time.perf_counter() - t0) * 1000)
            times["total"].append(sum(r.wall_ms for r in sp.stage_runs)
                                  + times["Answer (extractive)"][-1])

    base = statistics.median(times["Retrieval"])
    print(f"\n{len(PROMPTS)} prompts × {args.repeats} repeats on {report.files_seen} documents; "
          f"reranker backend: {engine.services.reranker.backend}")
    print(f"{'stage':<22}{'median ms':>12}{'p95 ms':>10}{'× Retrieval':>13}")
    for stage, values in times.items():
        med = statistics.median(values)
        print(f"{stage:<22}{med:>12.1f}{pct(values, 0.95):>10.1f}{med / base:>13.2f}")


if __name__ == "__main__":
    main()
