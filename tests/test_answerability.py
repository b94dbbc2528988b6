"""Before answering, the answer step decides whether the knowledge base answers the question
(``ragstream.answering.answerability``): a question about something the documents never say, or naming
a term none of the sentences used mentions, gets the not-found answer with Low confidence in
every mode, and the LLM is not asked; an answerable question is not Low.

Real components: a small knowledge base in a temp dir (real Chroma, the real embedder), the
bundled one, and for LLM mode the real ``LLMClient`` talking to ``FakeOpenAI`` on loopback.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragstream.answering.answer import NO_RESULTS_LEAD, answer, kb_titles
from ragstream.answering.answerability import missing_names, specific_names
from ragstream.workbench.engine import Engine
from tests.conftest import docs_engine, make_config
from tests.fake_openai import Reply
from tests.llm_support import answer_only, llm_config, with_llm

ROOT = Path(__file__).resolve().parents[1]
RULES_KB = ROOT / "tests" / "fixtures" / "rules_kb"
JUDGED = ROOT / "benchmarks" / "data" / "relevance_questions.json"

DOCS = {
    "asn1.md": (
        "# ASN.1 tools\n\n"
        "## The asn1Coding utility\n\n"
        "The asn1Coding utility reads an ASN.1 definition file and a value assignment, and "
        "writes the DER encoding of the value to a file. It reports the first syntax error "
        "it meets with its line number.\n\n"
        "## The asn1Decoding utility\n\n"
        "The asn1Decoding utility reads a DER encoded file and prints the decoded value of "
        "the type you name, checking it against the ASN.1 definition file.\n"),
    "knots.md": (
        "# Sailing knots\n\n"
        "## The bowline\n\n"
        "A bowline makes a fixed loop at the end of a rope. Sailors tie it to moor a boat to "
        "a ring or a post, because it does not slip and is easy to untie after a load.\n\n"
        "## The clove hitch\n\n"
        "A clove hitch fastens a rope to a post quickly. It can slip under a changing load, "
        "so sailors back it up with two half hitches.\n"),
    "intro.md": "# 1 Introduction\n\nThis small collection explains a few tools and knots.\n",
}


@pytest.fixture(scope="module")
def small_kb(tmp_path_factory, embedder) -> Engine:
    """An engine over the three small documents above, ingested once for the module."""
    return docs_engine(tmp_path_factory.mktemp("answerability"), DOCS, embedder)


@pytest.mark.parametrize("question, names", [
    ("What does path.join do?", ["path.join"]),
    ("What does asn1_der_coding do?", ["asn1_der_coding"]),
    ("What is the <magic> element for?", ["magic"]),
    ("How does removeListener differ from off()?", ["removeListener"]),
    ("When should I pass `--save-dev` to npm install?", ["--save-dev"]),
    ("How does BM25 score a chunk, e.g. a short one?", ["BM25"]),
    ("How are documents chunked?", []),
    # a quoted example value is the person's, not a name the documents must say
    ("How do I get the extension of a file name like 'index.coffee.md'?", []),
    ("path.basename('C:\\temp\\myfile.html') returns the whole string on Linux. Why?",
     ["path.basename"]),
    ("What does 'path.join' do?", ["path.join"]),
])
def test_specific_names_are_the_terms_that_name_one_thing(question, names):
    assert specific_names(question) == names


def test_a_name_is_found_as_a_whole_term_only():
    text = "Use path.join( to build it; xpath.joined is another thing. The <magic> element."
    assert missing_names(["path.join", "magic", "asn1_der_coding"], text) == ["asn1_der_coding"]
    assert missing_names(["path.join"], "xpath.joined paths") == ["path.join"]


def test_a_question_the_knowledge_base_does_not_cover_is_not_found_and_low(small_kb):
    sp = small_kb.run("How long should sourdough bread proof before baking?")
    ans = answer(sp, small_kb.cfg, small_kb.services)
    assert ans.mode == "no-results" and ans.confidence == "Low"
    assert ans.text.startswith(NO_RESULTS_LEAD + " It covers:")
    assert not ans.citations
    assert ans.confidence_detail.startswith("nothing to answer from")


def test_in_llm_mode_the_model_is_not_asked(small_kb, server):
    cfg = answer_only(llm_config(small_kb.cfg, server))
    services = with_llm(small_kb.services, cfg)
    server.script(Reply.text("Sourdough proofs for four hours [1]."))
    sp = Engine(cfg, services).run("How long should sourdough bread proof before baking?")
    ans = answer(sp, cfg, services)
    assert server.calls == 0
    assert ans.mode == "no-results" and ans.confidence == "Low"
    assert ans.text.startswith(NO_RESULTS_LEAD)


def test_a_specific_name_missing_from_the_sentences_used_is_not_answerable(small_kb, server):
    """The question is about the same tools (similar words, the same section ranks first), but
    names a function no sentence used mentions: not found, in both modes, and the reason says
    which name."""
    sp = small_kb.run("What does asn1_der_coding do?")
    assert sp.final_selection_ids  # retrieval found the ASN.1 sections
    ans = answer(sp, small_kb.cfg, small_kb.services)
    assert ans.mode == "no-results" and ans.confidence == "Low"
    assert "asn1_der_coding" in ans.mode_reason and "asn1_der_coding" in ans.confidence_reason
    cfg = answer_only(llm_config(small_kb.cfg, server))
    services = with_llm(small_kb.services, cfg)
    sp = Engine(cfg, services).run("What does asn1_der_coding do?")
    assert answer(sp, cfg, services).mode == "no-results" and server.calls == 0


def test_an_answerable_question_is_answered_and_not_low(small_kb):
    sp = small_kb.run("What does the asn1Coding utility do?")
    ans = answer(sp, small_kb.cfg, small_kb.services)
    assert ans.mode == "extractive" and ans.confidence != "Low", ans.confidence_reason
    assert ans.citations and "asn1Coding" in ans.text
    assert "P(answerable)" in ans.confidence_detail and "asn1Coding (found)" in ans.confidence_detail


def test_path_join_asked_of_the_bundled_kb_is_not_found(kb_engine):
    """The issue's example: the bundled knowledge base (about RAGstream) never mentions
    path.join; it used to get a Medium answer about chunking."""
    sp = kb_engine.run("What does path.join do?")
    ans = answer(sp, kb_engine.cfg, kb_engine.services)
    assert ans.mode == "no-results" and ans.confidence == "Low"
    assert ans.text.startswith(NO_RESULTS_LEAD) and "path.join" in ans.confidence_reason


def test_an_on_topic_question_of_the_bundled_kb_is_not_low(kb_engine):
    sp = kb_engine.run("How do I start a Chroma server?")
    ans = answer(sp, kb_engine.cfg, kb_engine.services)
    assert ans.mode == "extractive" and ans.confidence != "Low", ans.confidence_reason


def test_what_the_knowledge_base_covers_skips_titles_that_say_nothing(small_kb):
    titles, total = kb_titles(small_kb.services.store, 20)
    assert total == 3
    assert "1 Introduction" not in titles and "intro" in titles  # a numbered heading: the file
    assert {"ASN.1 tools", "Sailing knots"} <= set(titles)


@pytest.fixture(scope="module")
def rules_kb(tmp_path_factory, embedder) -> Engine:
    """An engine over the rules fixture, which the confidence fit never saw."""
    engine = Engine(make_config(tmp_path_factory.mktemp("answerability-rules")))
    engine.services.embedder = embedder
    assert engine.ingest(RULES_KB).failed == 0
    return engine


def _judged_rules_questions() -> list[tuple[str, bool]]:
    judged = json.loads(JUDGED.read_text(encoding="utf-8"))["check"]["questions"]
    return [(q["q"], bool(q.get("relevant"))) for q in judged]


@pytest.mark.parametrize("question, on_topic", _judged_rules_questions())
def test_held_out_questions_are_low_exactly_when_off_topic(rules_kb, question, on_topic):
    """The rules fixture's judged questions (benchmarks/data/relevance_questions.json, 'check':
    never seen by the confidence fit): an on-topic one is answered (not Low), an off-topic
    one ("How do I cook pasta?", "What is nDCG@10?") is not found, Low."""
    sp = rules_kb.run(question)
    got = answer(sp, rules_kb.cfg, rules_kb.services_for(sp))
    if on_topic:
        assert got.mode != "no-results" and got.confidence != "Low", got.confidence_reason
    else:
        assert got.mode == "no-results" and got.confidence == "Low", got.confidence_reason


def test_what_the_knowledge_base_covers_names_a_web_page_without_its_site(fresh_engine, tmp_path):
    docs = tmp_path / "pages"
    docs.mkdir()
    (docs / "events.html").write_text(
        "<html><head><title>Events | Node.js v18.20.4 Documentation</title></head><body>"
        "<h1>Events</h1><p>Much of the Node.js core API is built around an asynchronous "
        "event-driven architecture in which emitters emit named events.</p></body></html>")
    assert fresh_engine.ingest(docs).failed == 0
    titles, total = kb_titles(fresh_engine.services.store, 20)
    assert (titles, total) == (["Events"], 1)
