import math

import pytest

from ragstream.stages.scoring import logavgexp, reciprocal_rank_fusion


def test_logavgexp_reference_values():
    assert round(logavgexp([0.9, 0, 0, 0, 0], 9), 4) == 0.7213
    assert round(logavgexp([0.85] * 5, 9), 4) == 0.85


def test_logavgexp_is_a_soft_maximum():
    scores = [0.2, 0.5, 0.7]
    value = logavgexp(scores, 9)
    assert max(scores) - math.log(len(scores)) / 9 <= value <= max(scores)
    # a larger tau moves it towards the maximum
    assert logavgexp(scores, 50) > value


def test_logavgexp_stable_for_large_scores():
    assert logavgexp([1000.0, 1000.0], 9) == pytest.approx(1000.0)


def test_logavgexp_rejects_bad_input():
    with pytest.raises(ValueError):
        logavgexp([], 9)
    with pytest.raises(ValueError):
        logavgexp([0.5], 0)


def test_rrf_sums_reciprocal_ranks():
    fused = reciprocal_rank_fusion({"dense": ["a", "b"], "keyword": ["b", "c"]}, k=60)
    assert fused["a"] == pytest.approx(1 / 61)
    assert fused["b"] == pytest.approx(1 / 62 + 1 / 61)
    assert fused["c"] == pytest.approx(1 / 62)
    weighted = reciprocal_rank_fusion({"dense": ["a"], "keyword": ["c"]}, k=60,
                                      weights={"dense": 2.0, "keyword": 0.5})
    assert weighted["a"] == pytest.approx(2 / 61) and weighted["c"] == pytest.approx(0.5 / 61)
