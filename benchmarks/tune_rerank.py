"""Choose the offline ReRanker's weights on one half of a BEIR split, report on the other.

    .venv/bin/python -m benchmarks.tune_rerank --data ../shared/data/scifact --split train

Uses the index ``ragstream eval`` builds (and builds it if needed). For every judged query it
runs A0 → A2 → Retrieval through the ``Engine`` and records the offline ReRanker's signals
(``OfflineReranker.features``) for the top N2 candidates. Then every weight setting on a
simplex grid (step ``--step``) is scored by nDCG@10 of "reranked top N2, then the rest of the
hybrid list" — on the queries with **even** ids only. The best setting, the shipped setting
and hybrid retrieval are then reported on the **odd** ids, which the search never saw, with
a paired bootstrap interval against hybrid. Nothing in ``config/`` is changed.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

import numpy as np

from ragstream.backends.services import build_services
from ragstream.common.config import load_config
from ragstream.measure.evaluation import eval_config, load_beir, select_queries, sync_index
from ragstream.measure.metrics import NDCG_K, ndcg_at_k, paired_comparison
from ragstream.state.super_prompt import View
from ragstream.workbench.engine import Engine

FEATURES = ("query_cosine", "best_sentence_cosine", "term_coverage", "query_bm25")


def simplex(step: float, n: int) -> list[tuple[float, ...]]:
    k = round(1 / step)
    return [tuple(round(c * step, 4) for c in combo)
            for combo in itertools.product(range(k + 1), repeat=n) if sum(combo) == k]


def collect(data: Path, split: str):
    cfg = load_config()
    docs, queries, qrels = load_beir(data, split)
    ecfg = eval_config(cfg, data)
    services = build_services(ecfg)
    sync_index(docs, ecfg, services)
    reranker = services.reranker.reranker
    engine = Engine(ecfg, services)
    cases = []
    chosen = select_queries(queries, qrels)
    for n, q in enumerate(chosen, start=1):
        sp = engine.run(q.text, until="Retrieval")
        hybrid = sp.kept_ids(View.RETRIEVAL)
        head = hybrid[: ecfg.limits.N2_RERANK_TOP_K]
        chunks = sp.chunk_map()
        from ragstream.state.render import rerank_query

        feats = reranker.features(rerank_query(sp.body, sp.extras.body_sources),
                                  [chunks[c] for c in head])
        cases.append({"id": q.id, "hybrid": hybrid, "head": head,
                      "x": np.asarray([[f[k] for k in FEATURES] for f in feats]),
                      "qrels": qrels[q.id]})
        if n % 100 == 0:
            print(f"  {n}/{len(chosen)} queries", file=sys.stderr)
    return cases, ecfg


def ranking(case, w: np.ndarray) -> list[str]:
    s = np.round(case["x"] @ w / (w.sum() or 1.0), 6)
    order = sorted(range(len(case["head"])), key=lambda i: (-s[i], case["head"][i]))
    head = [case["head"][i] for i in order]
    return head + [c for c in case["hybrid"] if c not in set(head)]


def ndcgs(cases, w) -> list[float]:
    return [ndcg_at_k(ranking(c, w)[:100], c["qrels"], NDCG_K) for c in cases]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--split", default="train")
    ap.add_argument("--step", type=float, default=0.1)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()

    cases, cfg = collect(args.data, args.split)
    even = [c for c in cases if int(c["id"]) % 2 == 0]
    odd = [c for c in cases if int(c["id"]) % 2 == 1]
    grid = simplex(args.step, len(FEATURES))
    scored = sorted(((float(np.mean(ndcgs(even, np.asarray(w)))), w) for w in grid),
                    key=lambda t: (-t[0], t[1]))
    best_even, best = scored[0]
    shipped = tuple(cfg.settings.reranker.offline_weights.model_dump()[k] for k in FEATURES)
    hybrid_odd = [ndcg_at_k(c["hybrid"][:100], c["qrels"], NDCG_K) for c in odd]
    report = {
        "features": FEATURES, "grid": len(grid), "step": args.step,
        "tuning_queries": len(even), "held_out_queries": len(odd),
        "best_weights": best, "best_on_tuning": round(best_even, 4),
        "top5_on_tuning": [(round(s, 4), w) for s, w in scored[:5]],
        "held_out": {
            "hybrid": round(float(np.mean(hybrid_odd)), 4),
            "best": round(float(np.mean(ndcgs(odd, np.asarray(best)))), 4),
            "shipped": round(float(np.mean(ndcgs(odd, np.asarray(shipped)))), 4),
        },
        "shipped_weights": shipped,
        "best_vs_hybrid_held_out": paired_comparison(hybrid_odd, ndcgs(odd, np.asarray(best)),
                                                     2000, 0, 0.95),
        "all_queries": {"hybrid": round(float(np.mean(
            [ndcg_at_k(c["hybrid"][:100], c["qrels"], NDCG_K) for c in cases])), 4),
            "shipped": round(float(np.mean(ndcgs(cases, np.asarray(shipped)))), 4)},
    }
    for name, i in zip(FEATURES, range(len(FEATURES))):
        w = np.zeros(len(FEATURES))
        w[i] = 1
        report["held_out"][f"only {name}"] = round(float(np.mean(ndcgs(odd, w))), 4)
    text = json.dumps(report, indent=2, default=list)
    if args.out:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
