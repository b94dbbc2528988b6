"""Questions about the documents' own product that they leave out (issue 45): the names a
question gives that the knowledge base never mentions make it unanswerable, and the answer
says so in words."""

from __future__ import annotations

from ragstream.answering.answer import answer
from ragstream.answering.answerability import proper_names, specific_names


def test_header_names_and_protocol_versions_are_specific_names():
    names = specific_names("How do I log X-Forwarded-For behind a balancer, and enable HTTP/2?")
    assert "X-Forwarded-For" in names and "HTTP/2" in names
    assert specific_names("Does Name-Based hosting work?") == ["Name-Based"]


def test_capitalised_names_and_acronyms_but_not_the_opening_word():
    assert proper_names("How do I run RAGstream on Kubernetes with HSTS?") == ["HSTS", "Kubernetes"]
    assert proper_names("Where is it? Windows keeps it.") == []  # each opens a sentence
    assert "I" not in proper_names("Can I do it?")


def test_a_question_naming_what_no_document_mentions_is_not_found(kb_engine):
    sp = kb_engine.run("How do I store RAGstream's vectors in Pinecone instead of Chroma?")
    ans = answer(sp, kb_engine.cfg, kb_engine.services)
    assert ans.confidence == "Low" and ans.mode == "no-results"
    assert "Pinecone" in ans.confidence_reason and ans.confidence_reason.startswith("Low: ")
    assert "It covers:" in ans.text  # and says what the knowledge base does cover
    # the same question about a store the documents describe is answered
    sp = kb_engine.run("How do I point RAGstream at a Chroma server instead of the embedded store?")
    ans = answer(sp, kb_engine.cfg, kb_engine.services)
    assert ans.confidence != "Low" and ans.mode == "extractive"
