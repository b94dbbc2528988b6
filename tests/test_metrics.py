"""The ranking metrics of ``ragstream eval``, against values computed by hand."""

import math

import pytest

from ragstream.measure.metrics import (
    dcg_at_k,
    evaluate,
    mrr_at_k,
    ndcg_at_k,
    paired_comparison,
    precision_at_k,
    query_metrics,
    recall_at_k,
)

LOG2_3, LOG2_5 = math.log2(3), math.log2(5)


def test_ndcg_binary_by_hand():
    # relevant b (rank 2) and d (rank 4) retrieved, e never retrieved
    ranking, qrels = ["a", "b", "c", "d"], {"b": 1, "d": 1, "e": 1}
    dcg = 1 / LOG2_3 + 1 / LOG2_5                  # 0.63093 + 0.43068 = 1.06161
    idcg = 1 + 1 / LOG2_3 + 1 / 2                  # three relevant docs: 2.13093
    assert dcg_at_k(ranking, qrels, 10) == pytest.approx(1.061606, abs=1e-6)
    assert ndcg_at_k(ranking, qrels, 10) == pytest.approx(dcg / idcg)
    assert ndcg_at_k(ranking, qrels, 10) == pytest.approx(0.498189, abs=1e-6)


def test_ndcg_uses_grades_linearly():
    # grade 2 at rank 2, grade 1 at rank 1: DCG = 1 + 2/log2(3); ideal = 2 + 1/log2(3)
    assert ndcg_at_k(["b", "a"], {"a": 2, "b": 1}, 10) == pytest.approx(0.859719, abs=1e-6)
    assert ndcg_at_k(["a", "b"], {"a": 2, "b": 1}, 10) == pytest.approx(1.0)


def test_ndcg_cutoff_and_edge_cases():
    late = [f"x{i}" for i in range(10)] + ["rel"]  # the relevant doc is 11th
    assert ndcg_at_k(late, {"rel": 1}, 10) == 0.0
    assert ndcg_at_k(late, {"rel": 1}, 11) == pytest.approx(1 / math.log2(12))
    assert ndcg_at_k(["a"], {"a": 0}, 10) == 0.0      # grade 0 is not relevant
    assert ndcg_at_k([], {"a": 1}, 10) == 0.0
    # more relevant docs than k: the ideal ranking is cut at k too, so a perfect top 10 is 1.0
    many = {f"r{i:02d}": 1 for i in range(12)}
    assert ndcg_at_k(sorted(many), many, 10) == pytest.approx(1.0)


def test_recall():
    ranking, qrels = ["a", "b", "c", "d"], {"b": 1, "d": 1, "e": 1, "z": 0}
    assert recall_at_k(ranking, qrels, 10) == pytest.approx(2 / 3)
    assert recall_at_k(ranking, qrels, 2) == pytest.approx(1 / 3)
    assert recall_at_k(ranking, qrels, 1) == 0.0


def test_mrr():
    assert mrr_at_k(["a", "b", "c"], {"c": 1, "b": 1}, 10) == pytest.approx(0.5)
    assert mrr_at_k(["a", "b", "c"], {"a": 1}, 10) == 1.0
    assert mrr_at_k(["a", "b", "c"], {"c": 1}, 2) == 0.0
    late = [f"x{i}" for i in range(10)] + ["rel"]
    assert mrr_at_k(late, {"rel": 1}, 10) == 0.0


def test_duplicates_and_bad_k_are_rejected():
    with pytest.raises(ValueError):
        recall_at_k(["a", "a"], {"a": 1}, 10)
    with pytest.raises(ValueError):
        mrr_at_k(["a"], {"a": 1}, 0)


def test_evaluate_macro_averages_queries():
    rankings = {"q1": ["a", "b"], "q2": ["c", "d"]}
    qrels = {"q1": {"a": 1}, "q2": {"d": 1}}
    m = evaluate(rankings, qrels)
    assert m["MRR@10"] == pytest.approx((1 + 0.5) / 2)
    assert m["nDCG@10"] == pytest.approx((1 + 1 / LOG2_3) / 2)
    assert m["Recall@10"] == 1.0
    assert set(query_metrics(["a"], {"a": 1})) == {"nDCG@10", "Recall@10", "Recall@100", "MRR@10",
                                                       "P@5"}
    with pytest.raises(KeyError):
        evaluate({"q3": ["a"]}, qrels)


def test_precision():
    assert precision_at_k(["a", "b", "c", "d", "e", "f"], {"b": 1, "f": 1, "z": 1}, 5) == 0.2
    assert precision_at_k(["a"], {"a": 1}, 5) == 0.2  # fewer than k retrieved still divide by k


def test_paired_comparison_counts_and_interval():
    c = paired_comparison([0.5, 0.5, 0.2, 1.0], [0.7, 0.5, 0.1, 1.0], 500, 0, 0.95)
    assert c["mean_diff"] == pytest.approx((0.2 + 0.0 - 0.1 + 0.0) / 4)
    assert (c["better"], c["equal"], c["worse"]) == (1, 2, 1)
    assert -0.1 <= c["ci_low"] <= c["mean_diff"] <= c["ci_high"] <= 0.2
    same = paired_comparison([0.3, 0.6], [0.3, 0.6], 100, 0, 0.95)
    assert same["ci_low"] == same["ci_high"] == 0.0
    assert paired_comparison([0.1, 0.9], [0.2, 0.4], 200, 7, 0.9) == \
        paired_comparison([0.1, 0.9], [0.2, 0.4], 200, 7, 0.9)  # seeded: reproducible
    with pytest.raises(ValueError):
        paired_comparison([0.1], [0.1, 0.2], 10, 0, 0.95)
