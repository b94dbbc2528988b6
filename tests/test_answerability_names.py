"""Questions about the documents' own product that they leave out (issue 45): the names a
question gives that the knowledge base never mentions make it unanswerable, and the answer
says so in words."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

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


def test_a_close_name_in_the_sources_stands_for_one_no_document_uses(kb_engine, embedder):
    from ragstream.answering.answer import question_terms
    from ragstream.answering.answerability import near_names

    terms = question_terms(kb_engine.cfg)

    text = ("On Unix or MacOS, using the bash shell, run source <venv>/bin/activate. On Windows, "
            "using PowerShell, run <venv>\\Scripts\\Activate.ps1. The MPMs are listed below.")
    near = near_names(["Linux", "Kubernetes", "MPM"], text, embedder, 0.65, terms)
    assert near == {"Linux": "Unix"}  # MPMs is the same name, not a close one: not weighed
    assert near_names(["Linux"], text, embedder, 1.01, terms) == {}  # above 1: never
    assert near_names(["Linux"], "No names here at all.", embedder, 0.65, terms) == {}
    # another product of the same kind is no other name for it (Linux and Windows: 0.58)
    assert near_names(["Linux"], "On Windows, using PowerShell, run Activate.ps1.", embedder,
                      0.65, terms) == {}


PYTHON_HTML = Path("/usr/share/doc/python3.11/html")
PYTHON_VENV = [PYTHON_HTML / "tutorial" / "venv.html", PYTHON_HTML / "library" / "venv.html",
               PYTHON_HTML / "library" / "zipfile.html"]


@pytest.mark.skipif(not all(p.is_file() for p in PYTHON_VENV),
                    reason="Debian's python3.11-doc is not installed (scripts/setup.sh installs it)")
def test_a_platform_the_manual_names_otherwise_is_answered_at_medium(tmp_path, fresh_engine):
    """Python's own venv pages (the tutorial's and the library's, Debian's python3.11-doc,
    which nobody here wrote; the zipfile page beside them) say "POSIX" and "Unix or MacOS",
    never "Linux": asking how to activate a venv on Linux is answered,
    at Medium, saying which name the pages use; a platform they do not cover stays "not found"."""
    docs = tmp_path / "python"
    docs.mkdir()
    for page in PYTHON_VENV:
        shutil.copy(page, docs / f"{page.parent.name}-{page.name}")
    engine = fresh_engine
    report = engine.ingest(docs)
    assert report.failed == 0, report.errors
    sp = engine.run("How do I create a virtual environment and activate it on Linux?")
    ans = answer(sp, engine.cfg, engine.services)
    assert ans.mode == "extractive" and ans.confidence == "Medium", ans.confidence_reason
    assert "the sources say Unix where the question says Linux" in ans.confidence_reason
    assert "Linux in no document; the sources say Unix" in ans.confidence_detail  # the figures
    assert "activate" in ans.text
    sp = engine.run("How do I create a virtual environment and activate it on Kubernetes?")
    ans = answer(sp, engine.cfg, engine.services)
    assert ans.confidence == "Low" and "Kubernetes" in ans.confidence_reason
