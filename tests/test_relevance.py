"""The retrieval API's relevance score (ragstream/answering/relevance.py): its query terms are the ones
BM25 searches less the stop words, so a question's "where" and "do" do not count as words the
knowledge base lacks; an exact match in a one-document knowledge base is found, an off-topic
question to it is not (real engine, real Chroma in a temp dir, the real embedder)."""

from __future__ import annotations

from ragstream.answering.relevance import relevance_terms
from ragstream.backends.keyword_index import KeywordIndex
from ragstream.workbench.api import RAGPipeline

BOATS = ("# Harbour notes\n\nAt spring tide the harbour master sends every boat to the outer "
         "basin: boats moor at pier nine until the water falls again.\n")


def test_the_relevance_terms_are_bm25s_without_the_question_words(cfg):
    keyword = KeywordIndex(cfg.settings.retrieval.stemmer, cfg.settings.retrieval.stopwords)
    question = "Where do boats moor at spring tide?"
    terms = relevance_terms(question, keyword, cfg.settings.retrieval.relevance.stopwords)
    assert terms == ["boat", "moor", "spring", "tide"]
    assert set(terms) <= set(keyword.query_terms(question))  # every one a term BM25 scores
    assert {"where", "do"} <= set(keyword.query_terms(question)) - set(terms)


def test_an_exact_match_in_a_one_document_knowledge_base_is_found(fresh_engine, tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "harbour.md").write_text(BOATS, encoding="utf-8")
    report = fresh_engine.ingest(docs)
    assert report.failed == 0 and report.processed == 1
    rag = RAGPipeline(fresh_engine)
    floor = fresh_engine.cfg.settings.retrieval.min_relevance

    ctx = rag.retrieve("Where do boats moor at spring tide?", context_key="test:harbour")
    assert ctx.meets_threshold and not ctx.no_documents_reason
    assert [c.metadata["path"] for c in ctx.document_chunks] == ["docs/harbour.md"]
    assert "pier nine" in ctx.document_chunks[0].text
    assert ctx.document_chunks[0].relevance_score >= floor

    off = rag.retrieve("How do I cook pasta?", context_key="test:harbour")
    assert not off.meets_threshold and off.document_chunks == []
    assert "min_relevance" in off.no_documents_reason
