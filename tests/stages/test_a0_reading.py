"""A follow-up read with its conversation (``stages.a0.reading``, A0's ``read_follow_up``)."""

from __future__ import annotations

import pytest

from ragstream.stages import a0_preprocessing as a0
from ragstream.stages.a0.reading import gerund, is_follow_up, read
from ragstream.state.super_prompt import ConversationTurn, SuperPrompt
from tests.fake_openai import FakeOpenAI, Reply
from tests.llm_support import llm_config, with_llm

HTTPS = "How do I redirect all http traffic to https?"


@pytest.mark.parametrize("question", [
    "and how do I do that in .htaccess instead?", "And on Windows?", "What about the ReRanker?",
    "does that also work in a .htaccess file?", "Which other modes could I set it to?",
    "How do I switch them off?", "and the other isolation levels?", "Why?",
    "which exception do I get when that happens?", "What is logged if this fails?",
])
def test_questions_that_lean_on_the_conversation_are_follow_ups(question):
    assert is_follow_up(question)


@pytest.mark.parametrize("question", [
    "How do I password-protect a directory?", "Where do globally installed packages end up?",
    "Which files that change are re-ingested?", "What does path.join do?",
    "Which exception is raised when a file that is missing is opened?",
])
def test_self_contained_questions_are_left_as_they_are(question):
    assert not is_follow_up(question)
    assert read(question, [HTTPS]) is None


def test_do_that_takes_the_earlier_action():
    r = read("and how do I do that in .htaccess instead?", [HTTPS])
    assert r is not None and r.rule == "action"
    assert r.text == "How do I redirect all http traffic to https in .htaccess instead?"
    assert r.after == HTTPS
    # asked again after its own reading: not doubled
    again = read("and how do I do that in .htaccess instead?",
                 [HTTPS, "and how do I do that in .htaccess instead?"])
    assert again is not None and again.text.count(".htaccess") == 1


def test_a_bare_phrase_takes_the_place_of_the_earlier_one_with_its_preposition():
    r = read("And on Windows?", ["Where do globally installed packages end up on Linux?"])
    assert r is not None and r.rule == "phrase"
    assert r.text == "Where do globally installed packages end up on Windows?"


def test_a_pronoun_becomes_the_earlier_action_or_what_it_acts_on():
    r = read("does that also work in a .htaccess file?", ["How do I password-protect a directory?"])
    assert r is not None and r.rule == "pronoun"
    assert r.text == "Does password-protecting a directory also work in a .htaccess file?"
    r = read("and how do I switch them off completely?",
             ["How do I enable .htaccess files for a directory?"])
    assert r is not None and r.text == "How do I switch .htaccess files for a directory off completely?"
    assert gerund("set up the log") == "setting up the log" and gerund("stop it") == "stopping it"
    assert gerund("use x") == "using x" and gerund("open x") == "opening x"


@pytest.mark.parametrize("earlier, question, rule, reading", [
    ("How do I write rows to a CSV file?", "and if my rows are dicts rather than lists?",
     "condition", "How do I write rows to a CSV file if my rows are dicts rather than lists?"),
    ("How do I make an argparse argument that must be an integer?",
     "and only allow the values 1 to 3?", "continuation",
     "How do I make an argparse argument that must be an integer and only allow the values 1 to 3?"),
])
def test_a_bare_condition_or_continuation_completes_the_earlier_question(earlier, question,
                                                                        rule, reading):
    """Python's csv and argparse pages, asked as a developer would: "and if my rows are dicts
    rather than lists?" and "and only allow the values 1 to 3?" say nothing alone; read with
    the earlier question they are what a person would have asked in one go."""
    r = read(question, [earlier])
    assert r is not None and (r.rule, r.text) == (rule, reading)


def test_a_condition_with_its_own_question_or_a_noun_phrase_is_no_completion():
    r = read("And if I publish a package under that scope, where does it go?",
             ["Can one scope point to two registries?"])
    assert r is not None and r.rule != "condition"
    r = read("and only the .txt files?", ["How do I list what's in a directory with pathlib?"])
    assert r is not None and r.rule != "continuation"


def test_every_rule_a_reading_names_is_said_in_words_on_the_page():
    import re
    from pathlib import Path

    from ragstream.interfaces.ui.answer_view import RULES
    source = Path("ragstream/stages/a0/reading.py").read_text(encoding="utf-8")
    named = set(re.findall(r'(?:done\(.*?|Reading\(.*?), "(\w+)"(?:, earlier)?\)', source))
    assert {"action", "condition", "continuation", "phrase", "pronoun", "topic", "context"} <= named
    assert named <= set(RULES), named - set(RULES)


def test_otherwise_the_earlier_question_is_its_context_and_a_third_turn_leans_on_the_second():
    r = read("and which one answers a request for a name I didn't configure?",
             ["How do I set up two name-based virtual hosts on one IP?"])
    assert r is not None and r.rule == "context"
    assert r.text.startswith("Which one answers a request for a name I didn't configure?")
    assert "(after: How do I set up two name-based virtual hosts on one IP.)" in r.text
    third = read("what happens when one of them goes down?",
                 ["How do I put Apache in front of an app server?",
                  "and how do I spread the load over two of them?"])
    assert third is not None
    assert "spread the load" in third.text and "Apache in front of an app server" in third.text
    assert third.text.count("(after:") == 1


def _follow_up(text: str = "and how do I do that in .htaccess instead?") -> SuperPrompt:
    return SuperPrompt(user_text=text, recent_conversation=[
        ConversationTurn(user=HTTPS, assistant="Use a Redirect in the port-80 virtual host. [1]")])


def test_a0_puts_the_reading_in_the_task_and_records_it(cfg):
    sp = a0.run(_follow_up(), cfg, None)
    reading = sp.extras.reading
    assert reading is not None and reading.by == "rule" and reading.rule == "action"
    assert sp.body["task"] == reading.text == sp.question
    assert reading.typed == "and how do I do that in .htaccess instead?"
    assert sp.extras.body_sources["task"] == "derived"
    assert any(r.rule == "follow_up" for r in sp.extras.a0_rules)
    assert '"reading"' in sp.model_dump_json()
    # without the conversation the same words are read as they are
    alone = a0.run(SuperPrompt(user_text=sp.user_text), cfg, None)
    assert alone.extras.reading is None and alone.question == alone.user_text
    # a self-contained question after the same turn: no reading
    other = a0.run(_follow_up("How do I password-protect a directory?"), cfg, None)
    assert other.extras.reading is None


def test_the_persons_task_replaces_the_reading_and_says_so(cfg):
    from ragstream.state import edits

    sp = _follow_up()
    sp.edits = [edits.new_edit(sp, "field", "task", after="How do I use mod_rewrite for https?")]
    sp = a0.run(sp, cfg, None)
    assert sp.body["task"] == "How do I use mod_rewrite for https?" == sp.question
    assert sp.extras.reading is not None and "your task replaced" in (sp.extras.reading.note or "")


def test_with_an_llm_the_model_reads_it_and_the_rule_is_the_fallback(cfg, embedder):
    from ragstream.backends.services import Services

    written = "How do I force HTTPS with mod_rewrite in a .htaccess file?"

    def route(body):
        assert "without the conversation" in body["messages"][0]["content"]
        assert HTTPS in body["messages"][1]["content"]
        return Reply.json({"standalone": written})

    with FakeOpenAI(models=["test-model"], responder=route) as server:
        mcfg = llm_config(cfg, server)
        services = with_llm(Services(embedder=embedder), mcfg)
        sp = a0.run(_follow_up(), mcfg, services)
        assert server.calls == 1
    reading = sp.extras.reading
    assert reading is not None and reading.by == "model" and sp.body["task"] == written
    assert "the rule read" in (reading.note or "")
    # the endpoint fails: the rule reads it, and the record says why
    with FakeOpenAI(models=["test-model"], responder=lambda b: Reply.error(500, "down")) as server:
        mcfg = llm_config(cfg, server, max_attempts=1)
        services = with_llm(Services(embedder=embedder), mcfg)
        sp = a0.run(_follow_up(), mcfg, services)
    assert sp.extras.reading is not None and sp.extras.reading.by == "rule"
    assert "failed" in (sp.extras.reading.note or "")
    assert sp.body["task"] == "How do I redirect all http traffic to https in .htaccess instead?"


@pytest.mark.parametrize("reply, why", [
    ("Yes, you can redirect with RewriteRule in .htaccess.", "answers instead of asking"),
    (HTTPS, "earlier question again"),
    ("How do I redirect all http traffic to https?  ", "earlier question again"),
    ("How do I redirect traffic to https on my server?", "leaves out 'htaccess'"),
])
def test_a_models_reading_that_answers_repeats_or_drops_the_new_words_is_set_aside(
        cfg, embedder, reply, why):
    from ragstream.backends.services import Services

    with FakeOpenAI(models=["test-model"], responder=lambda b: Reply.json(
            {"standalone": reply})) as server:
        mcfg = llm_config(cfg, server)
        sp = a0.run(_follow_up(), mcfg, with_llm(Services(embedder=embedder), mcfg))
    reading = sp.extras.reading
    assert reading is not None and reading.by == "rule" and why in (reading.note or "")
    assert sp.body["task"] == "How do I redirect all http traffic to https in .htaccess instead?"
