"""RAGstream retrieval quality and latency on BEIR SciFact (train queries).

What it does, with the project's own components only:

1. **Index.** One ``Chunk`` per abstract (id = doc id = the corpus ``_id``, heading path =
   the title) is embedded with ``ragstream.ingest.ingestor.embed_chunks`` in batches of many
   documents and written per document with ``ChromaStore.replace_document``, into its own
   Chroma folder (``--index-dir``, collection ``scifact``). The index is synchronised, not
   rebuilt: documents already stored with the same content hash are kept, so a second run (or
   a run after an interruption) only embeds what is missing. A manifest records the corpus
   fingerprint; when it and the store match, the index is reused as is.
2. **Queries.** For each train query (those with qrels, in ``queries.jsonl`` order) the real
   pipeline runs through the controller: A0 → A2 → Retrieval, and, for the first
   ``--rerank-queries`` of them, ReRanker.
3. **Rankings** read from the views:
   ``dense``    the Retrieval rows sorted by their dense score (ties by id);
   ``keyword``  the Retrieval rows sorted by their BM25 score (ties by id);
   ``fused``    the Retrieval view order (reciprocal rank fusion);
   ``reranked`` the ReRanker view (top N2) followed by the rest of the Retrieval order.
   ``dense`` and ``keyword`` are re-sorts of the fused top-N1 pool, not standalone searches
   over the whole corpus.
4. **Metrics** (``benchmarks.metrics``): nDCG@10, Recall@10, Recall@100, MRR@10; the fused
   vs reranked comparison uses the same (reranked) queries. **Latency**: the wall time the
   controller records per stage (``sp.stage_runs``), median and p95, after a warm-up that
   loads the models.
5. Optionally (``--tune-weights``) a grid over ``reranker.offline_weights``, tuned on the
   reranked queries with even ids and reported on those with odd ids, with the best setting
   confirmed by running the real ReRanker stage with it. No config file is changed.

Run from the project root:  ``.venv/bin/python -m benchmarks.scifact --help``
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import hashlib
import itertools
import json
import os
import platform
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

if __package__ in (None, ""):  # run as a file: make `benchmarks` and `ragstream` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

from benchmarks.metrics import NDCG_K, Qrels, mean_metrics, paired_comparison, query_metrics
from ragstream import controller
from ragstream.config import AppConfig, OfflineRerankWeights, load_config
from ragstream.services import Services, build_services
from ragstream.super_prompt import Chunk, SuperPrompt, ViewRow

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = PROJECT_ROOT.parent / "shared" / "data" / "scifact"
COLLECTION = "scifact"
MANIFEST = "scifact_manifest.json"
SYSTEMS = ("dense", "keyword", "fused", "reranked")
NDCG = f"nDCG@{NDCG_K}"
TAIL_PERCENTILE = 95  # latency is reported as median and this percentile
TOP_SETTINGS_SHOWN = 5  # best weight settings listed from the tuning grid

#: published nDCG@10 on the SciFact *test* split (300 queries), for context only
REFERENCES = [
    ("BM25 (BEIR paper, Thakur et al. 2021)", 0.665),
    ("BM25 (Anserini flat, BEIR leaderboard)", 0.679),
    ("all-MiniLM-L6-v2 dense (MTEB)", 0.645),
    ("BM25 + cross-encoder rerank (BEIR paper)", 0.688),
]


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class Doc:
    id: str
    title: str
    text: str

    @property
    def content_hash(self) -> str:
        return hashlib.sha256(f"{self.title}\0{self.text}".encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Query:
    id: str
    text: str


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = defaultdict(dict)
    with path.open(encoding="utf-8", newline="") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            qrels[row["query-id"]][row["corpus-id"]] = int(row["score"])
    return dict(qrels)


def select_queries(queries: Sequence[Query], qrels: dict[str, Qrels],
                   limit: int | None) -> list[Query]:
    """The first ``limit`` queries (file order) that have at least one relevant document."""
    judged = [q for q in queries if any(g > 0 for g in qrels.get(q.id, {}).values())]
    return judged if limit is None else judged[:limit]


def select_docs(docs: Sequence[Doc], queries: Sequence[Query], qrels: dict[str, Qrels],
                limit: int | None) -> list[Doc]:
    """All documents, or: every document judged for ``queries`` plus the first ``limit``
    others (file order). Output keeps file order."""
    if limit is None:
        return list(docs)
    needed = {d for q in queries for d in qrels[q.id]}
    others = [d.id for d in docs if d.id not in needed][:limit]
    keep = needed | set(others)
    return [d for d in docs if d.id in keep]


def corpus_fingerprint(docs: Sequence[Doc], cfg: AppConfig) -> str:
    """Changes with the documents' content and with the embedding settings."""
    e = cfg.settings.embedding
    h = hashlib.sha256(f"{e.model}\0{e.window_tokens}\n".encode())
    for d in sorted(docs, key=lambda d: d.id):
        h.update(f"{d.id}\0{d.content_hash}\n".encode())
    return h.hexdigest()


# --------------------------------------------------------------------------- index


def make_chunk(doc: Doc, encoding) -> Chunk:
    return Chunk(
        id=doc.id, doc_id=doc.id, source=f"scifact/{doc.id}", title=doc.title,
        heading_path=(doc.title,), text=doc.text, word_count=len(doc.text.split()),
        token_count=len(encoding.encode(doc.text, disallowed_special=())),
        content_hash=doc.content_hash,
    )


def batched(items: Sequence, size: int) -> Iterable[Sequence]:
    for i in range(0, len(items), size):
        yield items[i:i + size]


def sync_index(docs: Sequence[Doc], fingerprint: str, cfg: AppConfig, services: Services,
               batch_docs: int, root: str, log) -> dict[str, Any]:
    """Make the store hold exactly ``docs``; embed only what is missing or changed."""
    from ragstream.backends.tokens import get_encoding
    from ragstream.ingest.ingestor import embed_chunks

    store = services.store
    manifest_path = cfg.index_dir / MANIFEST
    manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {}
    if (manifest.get("corpus_fingerprint") == fingerprint
            and manifest.get("store_fingerprint") == store.fingerprint()):
        log(f"index: reusing {store.location} ({manifest['documents']} documents, "
            f"{manifest['windows']} windows, built {manifest['built_at']})")
        return {**manifest, "reused": True}

    started = time.perf_counter()
    stored = store.documents()
    wanted = {d.id: d for d in docs}
    stale = [d for d in stored if d not in wanted]
    for doc_id in stale:
        store.delete_document(doc_id)
    todo = [d for d in docs if d.id not in stored or stored[d.id].doc_hash != d.content_hash]
    log(f"index: {len(docs)} documents wanted, {len(docs) - len(todo)} already stored, "
        f"{len(stale)} removed, {len(todo)} to embed into {store.location}")
    encoding = get_encoding(cfg.settings.chunking.encoding)
    now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat()
    done, windows = 0, 0
    for batch in batched(todo, batch_docs):
        records = embed_chunks([make_chunk(d, encoding) for d in batch], services.embedder)
        by_doc: dict[str, list] = defaultdict(list)
        for rec in records:
            by_doc[rec.chunk.doc_id].append(rec)
        for d in batch:
            store.replace_document(d.id, by_doc[d.id], d.content_hash, now, root)
        done += len(batch)
        windows += len(records)
        elapsed = time.perf_counter() - started
        rate = done / elapsed if elapsed else 0.0
        eta = (len(todo) - done) / rate if rate else 0.0
        log(f"  embedded {done}/{len(todo)} documents ({windows} windows), "
            f"{rate:.1f} docs/s, ETA {eta / 60:.1f} min")
    embed_s = time.perf_counter() - started
    bm25_started = time.perf_counter()
    services.keyword()  # build the BM25 index now, not inside the first query's timing
    manifest = {
        "corpus_fingerprint": fingerprint,
        "store_fingerprint": store.fingerprint(),
        "documents": len(docs),
        "windows": store.count_windows(),
        "embedded_now": len(todo),
        "embed_and_write_s": round(embed_s, 1),
        "bm25_build_s": round(time.perf_counter() - bm25_started, 1),
        "built_at": now,
        "embedding_model": cfg.settings.embedding.model,
    }
    manifest_path.write_text(json.dumps(manifest, indent=2))
    log(f"index: {manifest['documents']} documents in {manifest['windows']} windows; "
        f"embedding+writing {embed_s:.0f} s, BM25 {manifest['bm25_build_s']} s")
    return {**manifest, "reused": False}


# --------------------------------------------------------------------------- rankings


def rank_by_score(rows: Sequence[ViewRow], key: str) -> list[str]:
    """Row ids sorted by ``scores[key]`` descending, ties by id (the pipeline's rule)."""
    return [r.chunk_id for r in sorted(rows, key=lambda r: (-r.scores.get(key, 0.0), r.chunk_id))]


def head_then_rest(head: Sequence[str], full: Sequence[str]) -> list[str]:
    """``head`` followed by the ids of ``full`` not in it, in ``full``'s order."""
    seen = set(head)
    return list(head) + [c for c in full if c not in seen]


def rankings_from(sp: SuperPrompt) -> dict[str, list[str]]:
    rows = sp.view("retrieval")
    fused = [r.chunk_id for r in rows]
    out = {"dense": rank_by_score(rows, "dense"), "keyword": rank_by_score(rows, "keyword"),
           "fused": fused}
    if sp.view("reranked"):
        out["reranked"] = head_then_rest([r.chunk_id for r in sp.view("reranked")], fused)
    return out


def stage_ms(sp: SuperPrompt) -> dict[str, float]:
    return {run.stage: run.wall_ms for run in sp.stage_runs}


def latency_summary(values: Sequence[float]) -> dict[str, float]:
    arr = np.asarray(values, dtype=np.float64)
    if not len(arr):
        return {}
    return {"n": int(len(arr)), "median_ms": round(float(np.median(arr)), 1),
            f"p{TAIL_PERCENTILE}_ms": round(float(np.percentile(arr, TAIL_PERCENTILE)), 1),
            "mean_ms": round(float(arr.mean()), 1), "max_ms": round(float(arr.max()), 1)}


# --------------------------------------------------------------------------- weight tuning

FEATURES = ("query_cosine", "best_sentence_cosine", "term_coverage")


@dataclass
class RerankCase:
    """What the offline ReRanker saw for one query, enough to re-score it with other weights."""
    query_id: str
    candidates: list[str]
    features: list[dict[str, float]]
    fused: list[str]
    stage_ranking: list[str]  # what the real ReRanker stage produced (default weights)
    sp: SuperPrompt  # the state after Retrieval, to re-run the real stage


def offline_features(query_id: str, sp: SuperPrompt, stage_ranking: list[str], cfg: AppConfig,
                     services: Services) -> RerankCase | None:
    """The offline backend's features for the candidates the ReRanker stage scored (the same
    inputs the stage builds; the embeddings come from the embedder's cache)."""
    from ragstream.render import rerank_query
    from ragstream.stages.reranker import passage

    choice = services.reranker
    if choice.backend != "offline":
        return None
    candidates = sp.kept_ids("retrieval")[: cfg.limits.N2_RERANK_TOP_K]
    chunks = sp.chunk_map()
    query = rerank_query(sp.body, sp.extras.get("body_sources"))
    stored = services.store.window_vectors(candidates)
    vectors = [stored[c] for c in candidates] if all(c in stored for c in candidates) else None
    feats = choice.reranker.features(query, [passage(chunks[c]) for c in candidates], vectors)
    return RerankCase(query_id, candidates, feats, [r.chunk_id for r in sp.view("retrieval")],
                      stage_ranking, sp)


def rescore(case: RerankCase, weights: Sequence[float], digits: int) -> list[str]:
    """The ranking the ReRanker stage would produce with ``weights`` (same formula, rounding
    and tie rule as ``OfflineReranker.score`` and the stage)."""
    total = sum(weights) or 1.0
    scores = {c: round(sum(w * f[name] for w, name in zip(weights, FEATURES)) / total, digits)
              for c, f in zip(case.candidates, case.features)}
    head = sorted(case.candidates, key=lambda c: (-scores[c], c))
    return head_then_rest(head, case.fused)


def weight_grid(step: float) -> list[tuple[float, ...]]:
    """Non-negative weight triples on the simplex with the given step (only ratios matter)."""
    n = round(1 / step)
    return [(i / n, j / n, (n - i - j) / n)
            for i, j in itertools.product(range(n + 1), repeat=2) if i + j <= n]


def with_offline_weights(cfg: AppConfig, weights: Sequence[float]) -> AppConfig:
    w = OfflineRerankWeights(**dict(zip(FEATURES, weights)))
    reranker = cfg.settings.reranker.model_copy(update={"offline_weights": w})
    settings = cfg.settings.model_copy(update={"reranker": reranker})
    return cfg.model_copy(update={"settings": settings})


def tune_weights(cases: list[RerankCase], qrels: dict[str, Qrels], cfg: AppConfig,
                 services: Services, step: float, log) -> dict[str, Any]:
    from ragstream.stages.reranker import DIGITS

    tune = [c for c in cases if int(c.query_id) % 2 == 0]
    held = [c for c in cases if int(c.query_id) % 2 == 1]
    if not tune or not held:
        log("tuning: needs reranked queries with both even and odd ids; skipped")
        return {}

    def ndcg(split: list[RerankCase], weights) -> float:
        return mean_metrics([query_metrics(rescore(c, weights, DIGITS), qrels[c.query_id])
                             for c in split])[NDCG]

    default = tuple(getattr(cfg.settings.reranker.offline_weights, f) for f in FEATURES)
    # the re-scoring must reproduce the stage exactly, or the grid means nothing
    mismatches = sum(rescore(c, default, DIGITS) != c.stage_ranking for c in cases)
    if mismatches:
        log(f"tuning: WARNING re-scoring with the default weights differs from the ReRanker "
            f"view on {mismatches} of {len(cases)} queries")
    grid = weight_grid(step)
    scored = sorted(((ndcg(tune, w), w) for w in grid), key=lambda t: (-t[0], t[1]))
    best = scored[0][1]
    singles = {name: tuple(1.0 if i == j else 0.0 for j in range(len(FEATURES)))
               for i, name in enumerate(FEATURES)}
    fused_held = mean_metrics([query_metrics(c.fused, qrels[c.query_id]) for c in held])[NDCG]

    # confirm the winner with the real stage and a ReRanker built with those weights
    tuned_cfg = with_offline_weights(cfg, best)
    tuned_services = Services(embedder=services.embedder, store=services.store,
                              keyword_index=services.keyword_index,
                              reranker_settings=tuned_cfg.settings.reranker, llm=None)
    confirmed = []
    for c in held:
        sp = controller.run_all(c.sp, tuned_cfg, tuned_services, until="ReRanker")
        confirmed.append(query_metrics(rankings_from(sp)["reranked"], qrels[c.query_id]))
    result = {
        "split": "tune on even query ids, report on odd query ids (reranked subset)",
        "tune_queries": len(tune), "held_out_queries": len(held), "grid_step": step,
        "grid_size": len(grid), "rescore_mismatches_vs_stage": mismatches,
        "default_weights": dict(zip(FEATURES, default)),
        "best_weights_on_tune": dict(zip(FEATURES, best)),
        "best_settings_on_tune": [{"weights": dict(zip(FEATURES, w)), NDCG: s}
                                  for s, w in scored[:TOP_SETTINGS_SHOWN]],
        "tune_split": {"default": ndcg(tune, default), "best": scored[0][0],
                       "fused": mean_metrics([query_metrics(c.fused, qrels[c.query_id])
                                              for c in tune])[NDCG]},
        "held_out": {"fused": fused_held, "default": ndcg(held, default),
                     "tuned": ndcg(held, best),
                     "tuned_confirmed_by_stage": mean_metrics(confirmed)[NDCG],
                     **{f"only_{k}": ndcg(held, w) for k, w in singles.items()}},
    }
    return result


# --------------------------------------------------------------------------- reporting


def machine_info() -> dict[str, Any]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "cpu_model": model, "platform": platform.platform(),
            "python": platform.python_version(),
            "load_average_1_5_15min": [round(x, 2) for x in os.getloadavg()]}


def format_table(rows: list[tuple[str, int, dict[str, float]]]) -> str:
    names = [NDCG, "Recall@10", "Recall@100", "MRR@10"]
    width = max(len(r[0]) for r in rows) + 2
    lines = [f"{'system':<{width}}{'queries':>8}" + "".join(f"{n:>12}" for n in names)]
    lines.append("-" * len(lines[0]))
    for label, n, m in rows:
        lines.append(f"{label:<{width}}{n:>8}" + "".join(f"{m[k]:>12.4f}" for k in names))
    return "\n".join(lines)


def ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


# --------------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.scifact",
        description="RAGstream retrieval quality (nDCG@10, Recall@10/100, MRR@10) and stage "
                    "latency on BEIR SciFact train queries.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--data-dir", type=Path, default=DEFAULT_DATA,
                   help="BEIR SciFact folder (corpus.jsonl, queries.jsonl, qrels/)")
    p.add_argument("--qrels", default="train", help="qrels split file name in qrels/ (no .tsv)")
    p.add_argument("--index-dir", type=Path, default=Path("/tmp/ragstream-scifact"),
                   help="where the benchmark's Chroma + BM25 index lives (built or reused)")
    p.add_argument("--limit-docs", type=int, default=None,
                   help="index only the selected queries' judged documents plus this many others "
                        "(None = the whole corpus)")
    p.add_argument("--limit-queries", type=int, default=None,
                   help="first N queries with qrels, in queries.jsonl order (None = all)")
    p.add_argument("--rerank-queries", type=int, default=200,
                   help="run the ReRanker on the first N selected queries (it is the slow stage)")
    p.add_argument("--n1", type=int, default=None,
                   help="override N1_RETR_MAX_CANDIDATES (None = config/pipeline_limits.json)")
    p.add_argument("--embed-batch-docs", type=int, default=256,
                   help="abstracts embedded per embed_chunks call while indexing")
    p.add_argument("--progress-every", type=int, default=50, help="print progress every N queries")
    p.add_argument("--tune-weights", action="store_true",
                   help="grid-search reranker.offline_weights: tune on even query ids, report "
                        "on odd ids of the reranked subset (config files are not changed)")
    p.add_argument("--tune-step", type=float, default=0.1, help="grid step for --tune-weights")
    p.add_argument("--bootstrap-resamples", type=int, default=2000,
                   help="resamples for the paired bootstrap interval of nDCG@10 differences")
    p.add_argument("--bootstrap-seed", type=int, default=0, help="seed of that bootstrap")
    p.add_argument("--confidence", type=float, default=0.95, help="bootstrap interval level")
    p.add_argument("--out", type=Path, default=None,
                   help="results JSON (None = /tmp/ragstream-scifact-<timestamp>.json)")
    args = p.parse_args(argv)
    for name in ("limit_docs", "limit_queries", "rerank_queries", "n1", "embed_batch_docs",
                 "progress_every", "bootstrap_resamples"):
        value = getattr(args, name)
        if value is not None and value < (0 if name in ("limit_docs", "rerank_queries") else 1):
            p.error(f"--{name.replace('_', '-')} must be positive, got {value}")
    if not 0 < args.tune_step <= 0.5:
        p.error("--tune-step must lie in (0, 0.5]")
    if not 0 < args.confidence < 1:
        p.error("--confidence must lie in (0, 1)")
    return args


def load_run_config(index_dir: Path, n1: int | None, log) -> AppConfig:
    cfg = load_config(env={"RAGSTREAM_INDEX_DIR": str(index_dir),
                           "RAGSTREAM_COLLECTION": COLLECTION})
    if n1 is not None:
        changes: dict[str, int] = {"N1_RETR_MAX_CANDIDATES": n1}
        if cfg.limits.N2_RERANK_TOP_K > n1:
            changes["N2_RERANK_TOP_K"] = n1
            log(f"note: N2_RERANK_TOP_K lowered to {n1} so that it does not exceed N1")
        cfg = cfg.with_limits(**changes)
    return cfg


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    started = time.perf_counter()
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    machine_at_start = machine_info()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - started:7.1f}s] {msg}", flush=True)

    data = args.data_dir
    docs = [Doc(str(d["_id"]), d.get("title", ""), d.get("text", ""))
            for d in read_jsonl(data / "corpus.jsonl")]
    queries = [Query(str(q["_id"]), q["text"]) for q in read_jsonl(data / "queries.jsonl")]
    qrels = read_qrels(data / "qrels" / f"{args.qrels}.tsv")
    selected = select_queries(queries, qrels, args.limit_queries)
    docs = select_docs(docs, selected, qrels, args.limit_docs)
    n_rerank = min(args.rerank_queries, len(selected))
    log(f"data: {len(docs)} documents, {len(selected)} queries "
        f"({n_rerank} reranked) from {data}")

    cfg = load_run_config(args.index_dir, args.n1, log)
    services = build_services(cfg)
    index = sync_index(docs, corpus_fingerprint(docs, cfg), cfg, services,
                       args.embed_batch_docs, str(data), log)

    # warm-up, outside every measurement: load the embedding model, the BM25 index and the
    # reranker backend by running every measured stage once, on a prompt that is not one of
    # the queries (the first indexed document's title)
    warm = controller.run_all(controller.new_prompt(docs[0].title), cfg, services,
                              until="ReRanker" if n_rerank else "Retrieval")
    backend = services.reranker.backend if n_rerank else ""
    log(f"warm-up done; ReRanker backend: {backend or '(not run)'} "
        f"({services.reranker.reason if n_rerank else ''})")
    del warm

    per_query: list[dict[str, Any]] = []
    cases: list[RerankCase] = []
    loop_started = time.perf_counter()
    for i, q in enumerate(selected):
        sp = controller.run_all(controller.new_prompt(q.text), cfg, services, until="Retrieval")
        after_retrieval = sp
        if i < n_rerank:
            sp = controller.run_all(sp, cfg, services, until="ReRanker")
            if args.tune_weights:
                case = offline_features(q.id, after_retrieval, rankings_from(sp)["reranked"],
                                        cfg, services)
                if case is not None:
                    cases.append(case)
        ranks = rankings_from(sp)
        per_query.append({
            "query_id": q.id,
            "stage_ms": stage_ms(sp),
            "pieces": len(sp.extras["retrieval"]["pieces"]),
            "metrics": {name: query_metrics(r, qrels[q.id]) for name, r in ranks.items()},
            "top10": {name: r[:NDCG_K] for name, r in ranks.items()},
        })
        if (i + 1) % args.progress_every == 0 or i + 1 == len(selected):
            elapsed = time.perf_counter() - loop_started
            fused_so_far = mean_metrics([p["metrics"]["fused"] for p in per_query])[NDCG]
            log(f"  {i + 1}/{len(selected)} queries, {elapsed / (i + 1):.2f} s/query, "
                f"fused {NDCG} so far {fused_so_far:.4f}")

    # ---------------------------------------------------------------- quality
    def summary(subset: list[dict[str, Any]], system: str) -> dict[str, float]:
        return mean_metrics([p["metrics"][system] for p in subset])

    reranked_subset = per_query[:n_rerank]
    quality = {"all_queries": {s: summary(per_query, s) for s in ("dense", "keyword", "fused")}}
    if reranked_subset:
        quality["reranked_subset"] = {s: summary(reranked_subset, s) for s in SYSTEMS}
    table = [("dense-only", len(per_query), quality["all_queries"]["dense"]),
             ("keyword-only (BM25)", len(per_query), quality["all_queries"]["keyword"]),
             ("fused (Retrieval view)", len(per_query), quality["all_queries"]["fused"])]
    if reranked_subset:
        sub = quality["reranked_subset"]
        table += [(f"fused, first {n_rerank} queries", n_rerank, sub["fused"]),
                  (f"reranked ({backend}), same queries", n_rerank, sub["reranked"])]
    ratios = {
        "fused_vs_dense_ndcg10": ratio(quality["all_queries"]["fused"][NDCG],
                                       quality["all_queries"]["dense"][NDCG]),
        "fused_vs_keyword_ndcg10": ratio(quality["all_queries"]["fused"][NDCG],
                                         quality["all_queries"]["keyword"][NDCG]),
    }
    if reranked_subset:
        ratios["reranked_vs_fused_ndcg10"] = ratio(quality["reranked_subset"]["reranked"][NDCG],
                                                   quality["reranked_subset"]["fused"][NDCG])

    # paired per-query differences of nDCG@10, with a bootstrap interval
    def compare(subset: list[dict[str, Any]], base: str, other: str) -> dict[str, float]:
        return paired_comparison([p["metrics"][base][NDCG] for p in subset],
                                 [p["metrics"][other][NDCG] for p in subset],
                                 args.bootstrap_resamples, args.bootstrap_seed, args.confidence)

    comparisons = {"fused - dense": compare(per_query, "dense", "fused"),
                   "fused - keyword": compare(per_query, "keyword", "fused")}
    if reranked_subset:
        comparisons["reranked - fused"] = compare(reranked_subset, "fused", "reranked")

    # ---------------------------------------------------------------- latency
    latency = {stage: latency_summary([p["stage_ms"][stage] for p in per_query
                                       if stage in p["stage_ms"]])
               for stage in ("A0_PreProcessing", "A2_PromptShaper", "Retrieval", "ReRanker")}
    # the embedder caches what it embedded (the ReRanker's candidate sentences), so later
    # queries that meet the same abstracts rerank faster: show the two halves apart
    half = n_rerank // 2
    if half:
        for label, part in (("first_half", per_query[:half]),
                            ("second_half", per_query[half:n_rerank])):
            latency[f"ReRanker_{label}"] = latency_summary([p["stage_ms"]["ReRanker"]
                                                            for p in part])

    tuning = tune_weights(cases, qrels, cfg, services, args.tune_step, log) if cases else {}

    # ---------------------------------------------------------------- print
    print()
    print(f"RAGstream on BEIR SciFact ({args.qrels} queries): {len(docs)} documents, "
          f"N1={cfg.limits.N1_RETR_MAX_CANDIDATES}, N2={cfg.limits.N2_RERANK_TOP_K}")
    print(format_table(table))
    print()
    print("ratios (nDCG@10): " + ", ".join(f"{k} = {v:.3f}" for k, v in ratios.items()))
    print(f"per-query {NDCG} differences (mean, {args.confidence:.0%} paired bootstrap "
          f"interval, queries better / equal / worse):")
    for name, c in comparisons.items():
        print(f"  {name:<18} {c['mean_diff']:+.4f}  [{c['ci_low']:+.4f}, {c['ci_high']:+.4f}]"
              f"   {c['better']} / {c['equal']} / {c['worse']}  (n={c['queries']})")
    print()
    print("latency per query (controller stage wall time, after warm-up):")
    for stage, s in latency.items():
        if s:
            tail = s[f"p{TAIL_PERCENTILE}_ms"]
            print(f"  {stage:<22} median {s['median_ms']:8.1f} ms   "
                  f"p{TAIL_PERCENTILE} {tail:8.1f} ms   (n={s['n']})")
    print()
    print("published nDCG@10 on the SciFact TEST split (300 queries) — context only; this run "
          "uses the TRAIN queries, the only ones shipped, so it is not a like-for-like comparison:")
    for label, value in REFERENCES:
        print(f"  {label:<44} {value:.3f}")
    if tuning:
        h = tuning["held_out"]
        print()
        print(f"offline_weights grid ({tuning['grid_size']} settings, step {args.tune_step}): "
              f"tuned on {tuning['tune_queries']} even-id queries, reported on "
              f"{tuning['held_out_queries']} odd-id queries")
        print(f"  best on tune split: {tuning['best_weights_on_tune']}")
        print(f"  held-out {NDCG}: fused {h['fused']:.4f} | default weights {h['default']:.4f} | "
              f"tuned {h['tuned']:.4f} (real stage: {h['tuned_confirmed_by_stage']:.4f})")
        print("  single features on held-out: " + ", ".join(
            f"{k[5:]} {v:.4f}" for k, v in h.items() if k.startswith("only_")))

    result = {
        "benchmark": "BEIR SciFact", "qrels_split": args.qrels, "date": stamp,
        "command": " ".join(["python -m benchmarks.scifact",
                             *(argv if argv is not None else sys.argv[1:])]),
        "machine": machine_at_start,
        "config": {"limits": cfg.limits.model_dump(),
                   "retrieval": cfg.settings.retrieval.model_dump(),
                   "reranker": cfg.settings.reranker.model_dump(),
                   "embedding": cfg.settings.embedding.model_dump()},
        "index": {k: v for k, v in index.items()},
        "documents": len(docs), "queries": len(selected), "reranked_queries": n_rerank,
        "reranker_backend": backend,
        "quality": quality, "ratios": ratios, "comparisons_ndcg10": comparisons,
        "latency": latency,
        "references_test_split": dict((label, v) for label, v in REFERENCES),
        "tuning": tuning,
        "loop_s": round(time.perf_counter() - loop_started, 1),
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        "per_query": per_query,
    }
    out = args.out or Path(f"/tmp/ragstream-scifact-{stamp}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print()
    log(f"results written to {out}")
    return result


if __name__ == "__main__":
    main()
