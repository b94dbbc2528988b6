"""Ranking metrics of ``ragstream eval``, in the form BEIR reports them (pytrec_eval).

* nDCG@k: gain = the qrels grade (linear, as trec_eval's ``ndcg_cut``), discount
  ``1 / log2(rank + 1)``; the ideal DCG uses *all* judged relevant documents of the query,
  whether or not the system retrieved them.
* Recall@k: relevant documents in the top k / all relevant documents of the query.
* MRR@k: 1 / rank of the first relevant document in the top k (0 when there is none).
* P@k: relevant documents in the top k / k.

A document is relevant when its grade is > 0. ``Qrels`` maps document id -> grade for one
query; a ranking is a list of document ids, best first, without duplicates.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from statistics import fmean

Qrels = Mapping[str, int]

#: the cut-offs reported for SciFact; nDCG@10 is BEIR's headline metric
NDCG_K = 10
RECALL_KS = (10, 100)
MRR_K = 10
PRECISION_K = 5


def _check(ranking: Sequence[str], k: int) -> None:
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    if len(set(ranking)) != len(ranking):
        raise ValueError("the ranking lists a document twice; metrics would count it twice")


def relevant(qrels: Qrels) -> set[str]:
    """The documents with a grade above 0."""
    return {doc for doc, grade in qrels.items() if grade > 0}


def dcg_at_k(ranking: Sequence[str], qrels: Qrels, k: int) -> float:
    """Discounted cumulative gain of the top ``k`` (negative grades count as 0)."""
    _check(ranking, k)
    return sum(max(qrels.get(doc, 0), 0) / math.log2(rank + 1)
               for rank, doc in enumerate(ranking[:k], start=1))


def ndcg_at_k(ranking: Sequence[str], qrels: Qrels, k: int) -> float:
    """DCG at ``k`` divided by the ideal DCG of the positive grades (0 when there are none)."""
    ideal_grades = sorted((g for g in qrels.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(rank + 1) for rank, g in enumerate(ideal_grades, start=1))
    if idcg == 0:
        return 0.0
    return dcg_at_k(ranking, qrels, k) / idcg


def recall_at_k(ranking: Sequence[str], qrels: Qrels, k: int) -> float:
    """Share of the relevant documents found in the top ``k`` (0 when none is relevant)."""
    _check(ranking, k)
    rel = relevant(qrels)
    if not rel:
        return 0.0
    return len(rel.intersection(ranking[:k])) / len(rel)


def mrr_at_k(ranking: Sequence[str], qrels: Qrels, k: int) -> float:
    """Reciprocal rank of the first relevant document in the top ``k``, else 0."""
    _check(ranking, k)
    rel = relevant(qrels)
    for rank, doc in enumerate(ranking[:k], start=1):
        if doc in rel:
            return 1.0 / rank
    return 0.0


def precision_at_k(ranking: Sequence[str], qrels: Qrels, k: int) -> float:
    """Relevant documents in the top ``k``, divided by ``k``."""
    _check(ranking, k)
    return len(relevant(qrels).intersection(ranking[:k])) / k


def query_metrics(ranking: Sequence[str], qrels: Qrels) -> dict[str, float]:
    """All reported metrics of one query's ranking."""
    out = {f"nDCG@{NDCG_K}": ndcg_at_k(ranking, qrels, NDCG_K)}
    out.update({f"Recall@{k}": recall_at_k(ranking, qrels, k) for k in RECALL_KS})
    out[f"MRR@{MRR_K}"] = mrr_at_k(ranking, qrels, MRR_K)
    out[f"P@{PRECISION_K}"] = precision_at_k(ranking, qrels, PRECISION_K)
    return out


def mean_metrics(per_query: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Macro average over queries (each query weighs the same, as in BEIR)."""
    if not per_query:
        return {}
    return {name: fmean(m[name] for m in per_query) for name in per_query[0]}


def evaluate(rankings: Mapping[str, Sequence[str]],
             qrels: Mapping[str, Qrels]) -> dict[str, float]:
    """Mean metrics over the queries in ``rankings`` (every one must have qrels)."""
    missing = [q for q in rankings if q not in qrels]
    if missing:
        raise KeyError(f"no qrels for queries {missing[:5]}")
    return mean_metrics([query_metrics(rankings[q], qrels[q]) for q in rankings])


def paired_comparison(a: Sequence[float], b: Sequence[float], resamples: int, seed: int,
                      confidence: float) -> dict[str, float]:
    """Per-query differences ``b - a`` (same queries, same order): their mean, a percentile
    bootstrap confidence interval of the mean, and how many queries got better, stayed equal
    or got worse. Deterministic for a given ``seed``."""
    import numpy as np

    if len(a) != len(b) or not a:
        raise ValueError("paired comparison needs two equally long, non-empty score lists")
    diffs = [y - x for x, y in zip(a, b)]
    n = len(diffs)
    rng = np.random.default_rng(seed)
    means = np.sort(np.asarray(diffs)[rng.integers(0, n, size=(resamples, n))].mean(axis=1))
    tail = (1 - confidence) / 2
    lo = float(means[min(int(tail * resamples), resamples - 1)])
    hi = float(means[min(int((1 - tail) * resamples), resamples - 1)])
    return {"mean_diff": fmean(diffs), "ci_low": lo, "ci_high": hi, "confidence": confidence,
            "better": sum(d > 0 for d in diffs), "equal": sum(d == 0 for d in diffs),
            "worse": sum(d < 0 for d in diffs), "queries": n}
