"""The LLM answer's citation checks (``answer.check_citations``): an answer citing a number
that names no source, citing none of the top sources, or citing a source it shares no content
with is set aside, and the extractive answer is given instead, with the reason.

Real components: the session's engine over the bundled knowledge base, the real ``LLMClient``
talking to ``FakeOpenAI`` on loopback.
"""

from __future__ import annotations

import json

import pytest

from ragstream.answering.answer import SET_ASIDE_NOTICE, UNSUPPORTED, answer, citation_checks
from ragstream.common.text import sentences
from ragstream.interfaces.cli.passes import _print_answer_footer
from ragstream.state.super_prompt import SuperPrompt
from tests.fake_openai import FakeOpenAI, Reply
from tests.llm_support import answer_only, llm_config, with_llm

ON_TOPIC = "Which command starts the Chroma server?"  # source 1 clearly the "chroma run" section
#: every sentence cites source 1, whose text says each of these things
GOOD = ("Start it with the chroma run command [1]. It listens on the loopback interface [1]. "
        "RAGstream can talk to a Chroma server over HTTP [2].")
SET_ASIDE = "the model's answer was set aside: "


@pytest.fixture(scope="module")
def on_topic(kb_engine) -> SuperPrompt:
    return kb_engine.run(ON_TOPIC)


@pytest.fixture(scope="module")
def plain(kb_engine, on_topic):
    """The extractive answer (no endpoint): what a set-aside answer is replaced by."""
    return answer(on_topic, kb_engine.cfg, kb_engine.services)


@pytest.fixture
def llm_env(kb_engine, server):
    cfg = answer_only(llm_config(kb_engine.cfg, server))
    return cfg, with_llm(kb_engine.services, cfg)


def source_sentence(sp: SuperPrompt, n: int) -> str:
    """The first sentence of source ``n``'s text: what a faithful sentence citing it says."""
    return sentences(sp.chunk_map()[sp.final_selection_ids[n - 1]].text)[0].rstrip(".")


def assert_set_aside(ans, plain, model_text: str, tokens: list[str] | None = None) -> None:
    """``ans`` is the extractive answer standing in for ``model_text``."""
    assert ans.mode == "extractive" and ans.mode_reason.startswith(SET_ASIDE)
    assert ans.mode_reason == SET_ASIDE + ans.set_aside_reason
    assert ans.set_aside == model_text
    assert ans.text == plain.text and ans.citations == plain.citations  # what the eval reads
    assert ans.invalid_citations == [] and ans.confidence == plain.confidence
    assert ans.unsupported == "" and ans.extractive_text == "" and ans.checks == ""
    assert ans.error == "" and ans.model == "test-model"  # the model's call stays recorded
    assert ans.usage.completion_tokens > 0 and ans.first_token_ms is not None
    if tokens is not None:  # the model's words were shown: the notice, then the extractive one
        assert "".join(tokens) == (model_text + "\n\n" + SET_ASIDE_NOTICE + "\n\n"
                                   + plain.text.rstrip("\n") + "\n")


def test_a_good_answer_passes_the_checks_unchanged(on_topic, llm_env, server):
    cfg, services = llm_env
    server.script(Reply.text(GOOD))
    tokens: list[str] = []
    ans = answer(on_topic, cfg, services, on_token=tokens.append)
    assert ans.mode == "llm" and ans.text == "".join(tokens) == GOOD
    assert ans.set_aside == "" and ans.set_aside_reason == ""
    assert SET_ASIDE_NOTICE not in "".join(tokens)
    assert [c.n for c in ans.sources] == [1, 2] and ans.invalid_citations == []
    assert ("one of its first 3 sentences cites source [1] (answer.lead_sentences, "
            "answer.top_sources)") in ans.checks
    assert "at least 2 content terms" in ans.checks and "(answer.min_shared_terms)" in ans.checks


def test_a_citation_out_of_range_sets_the_answer_aside(on_topic, plain, llm_env, server, capsys):
    cfg, services = llm_env
    n = len(on_topic.final_selection_ids)
    text = GOOD + f" The heartbeat answers when it is up [{n + 1}][99]."
    server.script(Reply.text(text))
    tokens: list[str] = []
    ans = answer(on_topic, cfg, services, on_token=tokens.append)
    assert_set_aside(ans, plain, text, tokens)
    assert ans.set_aside_reason == (f"citations [{n + 1}], [99] name no source "
                                    f"(the Sources block has [1]–[{n}])")
    _print_answer_footer(ans)  # the CLI says so after the streamed text
    assert f"Mode: extractive — {SET_ASIDE}citations [{n + 1}], [99]" in capsys.readouterr().out


def test_citing_none_of_the_top_sources_sets_the_answer_aside(on_topic, plain, llm_env, server):
    cfg, services = llm_env
    assert len(on_topic.final_selection_ids) >= 6
    text = source_sentence(on_topic, 5) + " [5]."  # faithful to source 5, yet not a top one
    server.script(Reply.text(text), Reply.text(text))
    ans = answer(on_topic, cfg, services)
    assert_set_aside(ans, plain, text)
    assert ans.set_aside_reason == ("none of its first 3 sentences (answer.lead_sentences) "
                                    "cites source [1] (answer.top_sources)")

    wider = cfg.with_overrides({"settings.answer.top_sources": 5})
    kept = answer(on_topic, wider, services)
    assert kept.mode == "llm" and kept.text == text and "top 5 sources" in kept.checks


def test_source_one_must_be_cited_in_the_answers_opening(on_topic, plain, llm_env, server):
    cfg, services = llm_env
    late = " ".join(source_sentence(on_topic, n) + f" [{n}]." for n in (2, 3, 4, 1))
    server.script(Reply.text(late), Reply.text(late))
    ans = answer(on_topic, cfg, services)  # [1] only in the fourth sentence: set aside
    assert_set_aside(ans, plain, late)
    assert "none of its first 3 sentences (answer.lead_sentences)" in ans.set_aside_reason
    opening = cfg.with_overrides({"settings.answer.lead_sentences": 4})
    kept = answer(on_topic, opening, services)
    assert kept.mode == "llm" and kept.text == late


def test_a_cited_sentence_sharing_nothing_with_its_source_sets_the_answer_aside(
        on_topic, plain, llm_env, server):
    cfg, services = llm_env
    off = "Bananas ripen quickly when they are kept in a warm kitchen beside apples [1]."
    longer = ("Penguins migrate thousands of kilometres every winter across the frozen southern "
              "ocean in search of krill [2].")
    text = f"{GOOD} {off} {longer}"
    server.script(Reply.text(text))
    ans = answer(on_topic, cfg, services)
    assert_set_aside(ans, plain, text)
    assert ans.set_aside_reason == (
        "2 cited sentences share fewer than 2 content terms (answer.min_shared_terms) with "
        f'each source they cite: "{off}", "{longer[:80].rstrip()}…"')

    server.script(Reply.text(text))  # the threshold decides: 0 compares no content
    off_check = cfg.with_overrides({"settings.answer.min_shared_terms": 0})
    kept = answer(on_topic, off_check, services)
    assert kept.mode == "llm" and kept.text == text
    assert "content not compared (answer.min_shared_terms 0)" in kept.checks


def test_the_content_check_reads_stems_and_asks_a_short_sentence_only_what_it_has(
        kb_engine, on_topic):
    acfg = kb_engine.cfg.settings.answer
    terms = kb_engine.services.keyword_index.terms

    def failed(text: str, **change) -> list[str]:
        return citation_checks(text, on_topic, acfg.model_copy(update=change), terms)[0]

    assert failed("The servers listened on their own folders [1].") == []  # stems match
    assert failed("Bananas listen carefully to the music [1].")  # one shared term of 3
    assert failed("Bananas listen carefully to the music [1].", min_shared_terms=1) == []
    assert failed("It runs Chroma [1].") == []  # two content terms, both in source 1
    assert failed("Bananas, chroma [1].", min_sentence_words=2)  # 1 of 2: not enough
    assert failed("The penguin is there [1].")[0].startswith("1 cited sentence shares fewer")
    # a sentence citing two sources needs its content in one of them
    assert failed("It listens on the loopback interface [2, 1].") == []
    assert failed("It listens on the loopback interface [2].")


def test_an_answer_that_says_the_same_thing_twice_fails(kb_engine, on_topic):
    """The local 0.5B model, looping, wrote one sentence three times over in an answer on the
    Apache manual; it was kept and rated High. Now it fails the checks and the extractive
    answer is given."""
    acfg = kb_engine.cfg.settings.answer
    terms = kb_engine.services.keyword_index.terms
    once = "Chroma runs as a server on the loopback interface [1]."
    again = "Chroma runs as a server on the loopback interface, listening there [1]."
    other = "Each server keeps its data in a folder of its own [1]."
    failed = citation_checks(f"{once} {other} {again}", on_topic, acfg, terms)[0]
    assert any(f.startswith("it says the same thing twice:") and "listening there" in f
               for f in failed)
    assert not any("twice" in f for f in citation_checks(f"{once} {other}", on_topic, acfg,
                                                          terms)[0])


def test_an_uncited_answer_is_set_aside_too(on_topic, plain, llm_env, server):
    cfg, services = llm_env
    text = "Chroma is a database that runs as a server. It is fast."
    server.script(Reply.text(text))
    ans = answer(on_topic, cfg, services)
    assert_set_aside(ans, plain, text)
    assert ans.set_aside_reason.startswith(UNSUPPORTED)
    assert ans.set_aside_reason.endswith(
        "(sentences of 3 words or more count: answer.min_sentence_words)")


def test_check_citations_off_keeps_the_old_behaviour(on_topic, plain, llm_env, server):
    cfg, services = llm_env
    unchecked = cfg.with_overrides({"settings.answer.check_citations": False})
    n = len(on_topic.final_selection_ids)
    wrong = f"Bananas ripen quickly in a warm kitchen [{n}]. See the sources [99]."
    uncited = "Chroma is a database that runs as a server. It is fast."
    server.script(Reply.text(wrong), Reply.text(uncited))

    kept = answer(on_topic, unchecked, services)
    assert kept.mode == "llm" and kept.text == wrong and kept.invalid_citations == [99]
    assert kept.set_aside == "" and kept.checks == "" and kept.unsupported == ""

    labelled = answer(on_topic, unchecked, services)
    assert labelled.mode == "llm" and labelled.text == uncited
    assert labelled.unsupported.startswith(UNSUPPORTED)
    assert labelled.extractive_text == plain.text and labelled.set_aside == ""


@pytest.fixture
def llama_server():
    """The scripted server, looking like a llama.cpp server: the sentence (JSON) form."""
    with FakeOpenAI(models=["test-model"], owned_by="llamacpp") as s:
        yield s


def test_the_sentence_form_goes_through_the_same_checks(kb_engine, on_topic, plain,
                                                        llama_server):
    cfg = answer_only(llm_config(kb_engine.cfg, llama_server))
    services = with_llm(kb_engine.services, cfg)
    # the fake server ignores the schema's enum, as a server that does not enforce it would
    reply = {"sentences": [
        {"text": "Start the server with chroma run.", "sources": [1]},
        {"text": "Bananas ripen quickly when they are kept in a warm kitchen.", "sources": [2]},
        {"text": "It listens on the loopback interface.", "sources": [40]},
    ]}
    good = {"sentences": reply["sentences"][:1]}
    llama_server.script(Reply.text(json.dumps(reply)), Reply.text(json.dumps(good)))
    tokens: list[str] = []
    ans = answer(on_topic, cfg, services, on_token=tokens.append)
    model_text = ("Start the server with chroma run [1]. Bananas ripen quickly when they are kept "
                  "in a warm kitchen [2]. It listens on the loopback interface [40].\n")
    assert_set_aside(ans, plain, model_text)
    assert "".join(tokens).startswith(model_text + "\n\n" + SET_ASIDE_NOTICE)
    assert ans.form == "sentences" and json.loads(ans.raw) == reply  # the model's JSON, kept
    reasons = ans.set_aside_reason.split("; ")
    assert reasons[0].startswith("citation [40] names no source")
    assert reasons[1].startswith("1 cited sentence shares fewer than 2 content terms")
    assert '"Bananas ripen quickly' in reasons[1] and len(reasons) == 2

    passed = answer(on_topic, cfg, services)
    assert passed.mode == "llm" and passed.text == "Start the server with chroma run [1].\n"
    assert passed.form == "sentences" and passed.checks
