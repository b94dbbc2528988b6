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


def test_the_tokenizer_gives_what_bm25s_gives_without_importing_it():
    """The tokenizer every engine indexes with is bm25s's (``bm25s.tokenize``, its stop-word
    lists, PyStemmer), made without importing bm25s: for every list name bm25s knows, with
    two stemmers, on the bundled knowledge base and some awkward text, the terms are the same."""
    from pathlib import Path

    import bm25s
    import Stemmer

    from ragstream.backends.keyword_index import _STOPWORD_LISTS

    kb = Path(__file__).resolve().parents[2] / "data" / "kb"
    texts = [p.read_text(encoding="utf-8") for p in sorted(kb.glob("*.md"))] + [
        "", "a", "How are documents chunked?", "Ünïcode ÉCOLE straße 東京 2024 x_y a1 don't",
        "Wie werden Dokumente zerlegt? Comment les documents sont-ils découpés ?"]
    for name in [*_STOPWORD_LISTS, "en"]:
        for stemmer in ("english", "german"):
            expected = bm25s.tokenize(texts, stopwords=name, stemmer=Stemmer.Stemmer(stemmer),
                                      return_ids=False, show_progress=False)
            assert KeywordIndex(stemmer, name).tokens(texts) == expected, (name, stemmer)
    with pytest.raises(ValueError, match="not recognized"):  # bm25s's own error, as before
        KeywordIndex("english", "klingon").tokens(["a text"])
