"""The benchmark's metric and ranking helpers, against values computed by hand."""

import math

import pytest

from benchmarks.metrics import (dcg_at_k, evaluate, mrr_at_k, ndcg_at_k, query_metrics,
                                recall_at_k)
from benchmarks.scifact import (Doc, Query, head_then_rest, rank_by_score, rescore,
                                select_docs, select_queries, weight_grid, RerankCase)
from ragstream.super_prompt import SuperPrompt, ViewRow

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
    assert set(query_metrics(["a"], {"a": 1})) == {"nDCG@10", "Recall@10", "Recall@100", "MRR@10"}
    with pytest.raises(KeyError):
        evaluate({"q3": ["a"]}, qrels)


def test_rank_by_score_breaks_ties_by_id_and_head_then_rest():
    rows = [ViewRow(chunk_id=c, rank=i, score=0.0, scores={"dense": s})
            for i, (c, s) in enumerate([("b", 0.5), ("a", 0.5), ("c", 0.9), ("d", 0.1)], 1)]
    assert rank_by_score(rows, "dense") == ["c", "a", "b", "d"]
    assert head_then_rest(["c", "a"], ["a", "b", "c", "d"]) == ["c", "a", "b", "d"]


def test_rescore_matches_offline_formula():
    feats = [{"query_cosine": 0.9, "best_sentence_cosine": 0.1, "term_coverage": 0.0},
             {"query_cosine": 0.2, "best_sentence_cosine": 0.8, "term_coverage": 1.0}]
    case = RerankCase("1", ["x", "y"], feats, ["x", "y", "z"], [], SuperPrompt())
    assert rescore(case, (1.0, 0.0, 0.0), 6) == ["x", "y", "z"]
    assert rescore(case, (0.0, 1.0, 0.0), 6) == ["y", "x", "z"]
    assert rescore(case, (0.5, 0.5, 0.0), 6) == ["x", "y", "z"]  # tie 0.5 vs 0.5: by id


def test_weight_grid_is_the_simplex():
    grid = weight_grid(0.5)
    assert sorted(grid) == sorted([(0, 0, 1), (0, 0.5, 0.5), (0, 1, 0), (0.5, 0, 0.5),
                                   (0.5, 0.5, 0), (1, 0, 0)])
    assert len(weight_grid(0.1)) == 66


def test_selection_keeps_judged_docs_and_query_order():
    queries = [Query("5", "q5"), Query("1", "q1"), Query("3", "q3")]
    qrels = {"5": {"d9": 1}, "3": {"d2": 1}}
    assert [q.id for q in select_queries(queries, qrels, None)] == ["5", "3"]
    chosen = select_queries(queries, qrels, 1)
    assert [q.id for q in chosen] == ["5"]
    docs = [Doc(f"d{i}", "", "") for i in range(10)]
    assert [d.id for d in select_docs(docs, chosen, qrels, 2)] == ["d0", "d1", "d9"]
    assert len(select_docs(docs, chosen, qrels, None)) == 10


def test_paired_comparison_counts_and_interval():
    from benchmarks.metrics import paired_comparison

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
