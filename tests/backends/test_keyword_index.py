"""The BM25 index's word statistics that the relevance model reads."""

import math

import numpy as np
import pytest

from ragstream.backends.keyword_index import KeywordIndex


@pytest.fixture
def index() -> KeywordIndex:
    return KeywordIndex().build(["a", "b", "c", "d"], [
        "Barricades give cover to operatives.", "Operatives move in the movement phase.",
        "Operatives shoot in the shooting phase.", "Operatives fight in the fight phase."])


def idf(n: int, df: int) -> float:
    return math.log(1 + (n - df + 0.5) / (df + 0.5))


def test_weighted_coverage_weighs_rare_words_more(index):
    terms = index.query_terms("barricade operatives")  # barricad: in 1 chunk, oper: in all 4
    got = index.weighted_coverage(terms, np.arange(4))
    rare, common = idf(4, 1), idf(4, 4)
    assert got == pytest.approx([1.0, common / (rare + common), common / (rare + common),
                                 common / (rare + common)])


def test_unseen_share_is_the_weight_of_words_no_chunk_holds(index):
    assert index.unseen_share(index.query_terms("movement phase")) == 0.0
    terms = index.query_terms("pasta operatives")  # pasta: no chunk
    assert index.unseen_share(terms) == pytest.approx(idf(4, 0) / (idf(4, 0) + idf(4, 4)))
    assert index.unseen_share(index.query_terms("pasta pizza")) == 1.0
    assert index.unseen_share([]) == 0.0 and KeywordIndex().unseen_share(["x"]) == 0.0
