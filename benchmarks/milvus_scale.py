"""Milvus Lite at scale through ``MilvusEngine``: build, search, fetch and one-document writes.

    .venv/bin/python benchmarks/milvus_scale.py --chunks 100000

Chunks are SciFact's texts (``/work/shared/data/scifact/corpus.jsonl``, repeated to reach
``--chunks``), ten per document, each with two synthetic 384-dim window vectors (clustered
unit vectors) and six evidence sentence vectors, written through ``replace_documents`` as
the ingestion writes them. A third of the documents are ``doc_type`` "paper" (the filtered
dense search keeps those). Queries are SciFact's questions: their terms for BM25, a vector
near a random chunk's for dense search. Prints one line per figure (milliseconds).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ragstream.backends.doc_index import WindowRecord
from ragstream.backends.search.milvus import MilvusEngine
from ragstream.state.super_prompt import Chunk, Filters

SCIFACT = Path("/work/shared/data/scifact")
DIM = 384
PER_DOC = 10


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def documents(n_chunks: int, rng: np.random.Generator, centres: np.ndarray, texts: list[tuple[str, str]],
              start: int = 0, version: str = "1"):
    """``(doc_id, records, doc_hash)`` for chunks ``start`` … ``start + n_chunks``."""
    out = []
    for d in range(start // PER_DOC, (start + n_chunks) // PER_DOC):
        doc_id = f"scifact/{d:07d}.md"
        doc_type = "paper" if d % 3 == 0 else "abstract"
        recs = []
        for i in range(PER_DOC):
            title, text = texts[(d * PER_DOC + i) % len(texts)]
            chunk = Chunk(id=f"{doc_id}#{i}", doc_id=doc_id, text=text, source=doc_id, title=title,
                          heading_path=(title[:80],), doc_type=doc_type,
                          last_update_date=f"2025-{1 + d % 12:02d}-01")
            base = centres[rng.integers(len(centres))]
            windows = unit(base + 0.3 * rng.normal(size=(2, DIM)))
            cut = len(text) // 2
            for w, (a, b) in enumerate(((0, cut), (cut, len(text)))):
                step = max(1, (b - a) // 3)
                spans = tuple((a + j * step, min(b, a + (j + 1) * step)) for j in range(3))
                recs.append(WindowRecord(chunk, w, 2, a, b, windows[w], spans,
                                         unit(windows[w] + 0.2 * rng.normal(size=(3, DIM)))))
        out.append((doc_id, recs, f"{doc_id}@{version}"))
    return out


def pct(values: list[float]) -> str:
    ms = sorted(v * 1000 for v in values)
    return f"p50 {statistics.median(ms):.1f} ms, p95 {ms[int(0.95 * (len(ms) - 1))]:.1f} ms"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--batch", type=int, default=2000, help="chunks per replace_documents call")
    ap.add_argument("--db", default="", help="the .db path (default: a temporary folder)")
    args = ap.parse_args()

    rng = np.random.default_rng(0)
    texts = [(r["title"], r["text"]) for r in map(json.loads, (SCIFACT / "corpus.jsonl").open())
             if r["text"].strip()]
    questions = [json.loads(x)["text"] for x in (SCIFACT / "queries.jsonl").open()][:args.queries]
    centres = unit(rng.normal(size=(200, DIM)))
    folder = Path(args.db).parent if args.db else Path(tempfile.mkdtemp(prefix="milvus-scale-"))
    db = args.db or str(folder / "kb.db")
    engine = MilvusEngine(db, "scale")
    n = args.chunks - args.chunks % PER_DOC

    t0 = time.perf_counter()
    for start in range(0, n, args.batch):
        engine.replace_documents(documents(min(args.batch, n - start), rng, centres, texts, start),
                                 "2026-01-01T00:00:00")
        done = start + min(args.batch, n - start)
        if done % (10 * args.batch) == 0 or done == n:
            print(f"  {done} chunks written, {time.perf_counter() - t0:.0f} s", flush=True)
    build = time.perf_counter() - t0
    print(f"build: {n} chunks in {build:.1f} s ({n / build:.0f} chunks/s); "
          f"{engine.stats()[0]} chunks, mean {engine.stats()[1]:.1f} terms")

    vectors = unit(centres[rng.integers(len(centres), size=args.queries)]
                   + 0.3 * rng.normal(size=(args.queries, DIM)))
    terms = [engine.tokenizer.query_terms(q) for q in questions]
    engine.dense(vectors[:2], 50)  # warm: segment indexes load on first use
    engine.keyword(terms[0], 50)

    def timed(fn, items) -> list[float]:
        out = []
        for x in items:
            t = time.perf_counter()
            fn(x)
            out.append(time.perf_counter() - t)
        return out

    print(f"dense top-50: {pct(timed(lambda v: engine.dense(v[None, :], 50), vectors))}")
    print(f"BM25 top-50 (Milvus candidates, re-scored): "
          f"{pct(timed(lambda t: engine.keyword(t, 50), terms))}")
    papers = Filters(doc_type=("paper",))
    print(f"filtered dense top-50 (doc_type: a third): "
          f"{pct(timed(lambda v: engine.dense(v[None, :], 50, papers), vectors))}")
    candidates = [[c for c, _ in engine.dense(v[None, :], 50)[0]] for v in vectors[:30]]
    print(f"fetch 50 candidates: {pct(timed(engine.fetch, candidates))}")
    print(f"keyword_scores of 50 candidates: "
          f"{pct(timed(lambda c: engine.keyword_scores(terms[0], c), candidates))}")
    print(f"version(): {pct(timed(lambda _: engine.version(), range(50)))}")

    writes, visible = [], []
    for i in range(10):
        start = (i * 37 % (n // PER_DOC)) * PER_DOC
        doc_id, recs, _ = documents(PER_DOC, rng, centres, texts, start=start)[0]
        word = f"zzmarker{i}"
        recs = [WindowRecord(r.chunk.model_copy(update={"text": r.chunk.text + f" {word}"}), r.window,
                             r.n_windows, r.start, r.end, r.vector, r.sentence_spans,
                             r.sentence_vectors) for r in recs]
        t = time.perf_counter()
        engine.replace_document(doc_id, recs, f"{doc_id}@v{i}", "2026-01-02T00:00:00")
        writes.append(time.perf_counter() - t)
        found = engine.keyword([word], 20)
        visible.append(time.perf_counter() - t)
        assert len(found) == PER_DOC, found
    print(f"one-document write ({PER_DOC} chunks): {pct(writes)}; "
          f"write + first query that sees it: {pct(visible)}")
    size = sum(f.stat().st_size for f in Path(db).rglob("*") if f.is_file())
    print(f"on disk: {size / 1e9:.2f} GB")
    engine.close()
    if not args.db:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
