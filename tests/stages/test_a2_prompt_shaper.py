"""A2_PromptShaper, deterministic mode: keyword rules over the enums in
config/agents/A2_PromptShaper.json."""

from __future__ import annotations

import json

import pytest

from ragstream.common.config import A2Config, A2Field, load_config
from ragstream.stages import a2_prompt_shaper as a2
from ragstream.state.super_prompt import SuperPrompt

META = ("system", "audience", "tone", "depth")


@pytest.fixture(scope="module")
def cfg():
    return load_config()


def make_sp(body: dict[str, str], sources: dict[str, str] | None = None) -> SuperPrompt:
    """A SuperPrompt as A0 leaves it: every given key is the user's unless said otherwise."""
    sources = {k: "user" for k in body} | (sources or {})
    return SuperPrompt(user_text=body.get("task", ""), stage="preprocessed",
                       history_of_stages=["preprocessed"], body=dict(body),
                       extras={"body_sources": sources, "a0_body": dict(body)})


def shaped(cfg, task: str, **fields: str) -> SuperPrompt:
    return a2.run(make_sp({"task": task, **fields}), cfg, None)


def decision(sp: SuperPrompt, field: str) -> dict:
    (d,) = [d for d in sp.extras.a2_decisions if d.field == field]
    return d


# --------------------------------------------------------------------------- config


def test_config_has_real_enums_and_defaults(cfg):
    fields = cfg.agents.A2_PromptShaper.fields
    assert fields["system"].values == ["assistant", "software engineer", "data scientist",
                                       "researcher", "teacher", "technical writer", "analyst",
                                       "consultant"]
    assert fields["audience"].values == ["general", "beginner", "student", "developer", "expert",
                                         "executive"]
    assert fields["tone"].values == ["neutral", "friendly", "formal", "concise", "persuasive"]
    assert fields["depth"].values == ["overview", "standard", "deep-dive"]
    assert [fields[f].default for f in META] == ["assistant", "general", "neutral", "standard"]
    # every non-default value can be reached by some rule
    for name in META:
        field = fields[name]
        assert all(field.rules.get(v) for v in field.values if v != field.default), name


# --------------------------------------------------------------------------- rule choices


@pytest.mark.parametrize("task, field, expected", [
    ("Explain to a beginner in simple terms how BM25 works", "audience", "beginner"),
    ("Explain to a beginner in simple terms how BM25 works", "system", "teacher"),
    ("Explain to a beginner in simple terms how BM25 works", "tone", "friendly"),
    ("Fix the bug in this Python function", "system", "software engineer"),
    ("Train a regression model on this dataset", "system", "data scientist"),
    ("What does the literature and evidence say about this hypothesis?", "system", "researcher"),
    ("Write the README and a user guide for the CLI", "system", "technical writer"),
    ("Compare both index types and list pros and cons", "system", "analyst"),
    ("Recommend a strategy and a roadmap for the migration", "system", "consultant"),
    ("Prepare a one-page note for executives", "audience", "executive"),
    ("Help a student prepare for the exam", "audience", "student"),
    ("Describe the API for the dev team", "audience", "developer"),
    ("A note for experts on retrieval", "audience", "expert"),
    ("Write a formal report on the outage", "tone", "formal"),
    ("Give a brief answer: is Chroma embedded?", "tone", "concise"),
    ("Write a persuasive pitch to convince the team", "tone", "persuasive"),
    ("Give me a high-level overview of the pipeline", "depth", "overview"),
    ("An in-depth, detailed walk through the reranker internals", "depth", "deep-dive"),
    ("Erkläre ausführlich für Anfänger, wie BM25 funktioniert", "system", "teacher"),
    ("Erkläre ausführlich für Anfänger, wie BM25 funktioniert", "audience", "beginner"),
    ("Erkläre ausführlich für Anfänger, wie BM25 funktioniert", "depth", "deep-dive"),
    ("Fasse kurz zusammen, was A4 macht", "tone", "concise"),
])
def test_keyword_rules_choose_the_value(cfg, task, field, expected):
    sp = shaped(cfg, task)
    assert sp.body[field] == expected
    d = decision(sp, field)
    assert d.source == "rule" and d.matched and not d.clamped
    assert sp.extras.body_sources[field] == "a2"


def test_rules_read_context_purpose_and_format_but_not_text(cfg):
    sp = shaped(cfg, "Summarize the release", purpose="a note for executives")
    assert sp.body["audience"] == "executive"
    sp = shaped(cfg, "Summarize the release", text="a note for executives")
    assert sp.body["audience"] == "general"
    assert decision(sp, "audience").source == "default"


def test_fields_a0_defaulted_are_not_read(cfg):
    body = {"task": "Summarize the release", "purpose": "a note for executives"}
    assert a2.run(make_sp(body), cfg, None).body["audience"] == "executive"
    sp = a2.run(make_sp(body, {"purpose": "default"}), cfg, None)
    assert sp.body["audience"] == "general"


def test_decision_log_names_the_matched_keywords(cfg):
    sp = shaped(cfg, "Explain to a beginner in simple terms how BM25 works")
    assert decision(sp, "audience").model_dump() == {
        "field": "audience", "value": "beginner", "source": "rule",
        "matched": ["beginner", "simple terms"], "clamped": False, "in_enum": True,
    }
    assert [d.field for d in sp.extras.a2_decisions] == list(META)


def test_tie_goes_to_the_value_listed_first():
    field = A2Field(values=["a", "b", "c"], default="c", rules={"a": ["apple"], "b": ["berry"]})
    assert a2.choose_by_rules(field, "berry apple") == ("a", ["apple"])
    assert a2.choose_by_rules(field, "berry berry apple") == ("b", ["berry"])
    assert a2.choose_by_rules(field, "cherry") == ("c", [])


def test_keyword_grammar_whole_words_prefix_and_longest_phrase():
    assert a2.keyword_matches(["class"], "classification of classes") == []
    assert [k for _, _, k in a2.keyword_matches(["erklär*"], "die erklarung, erklare es")] == \
        ["erklär*", "erklär*"]
    # the longer phrase wins and is counted once
    assert [k for _, _, k in a2.keyword_matches(["code", "code block"], "one code block")] == \
        ["code block"]
    assert [k for _, _, k in a2.keyword_matches(["c++", "tl;dr"], "tl;dr: use c++ here")] == \
        ["tl;dr", "c++"]


# --------------------------------------------------------------------------- user fields


def test_user_specified_fields_are_kept_verbatim(cfg):
    sp = shaped(cfg, "Explain to a beginner in simple terms how BM25 works",
                audience="CTOs and staff engineers", tone="Friendly")
    assert sp.body["audience"] == "CTOs and staff engineers"
    assert sp.body["tone"] == "Friendly"
    assert decision(sp, "audience").model_dump() == {
        "field": "audience", "value": "CTOs and staff engineers", "source": "user",
        "matched": [], "clamped": False, "in_enum": False,
    }
    assert decision(sp, "tone").in_enum is True  # folded "friendly" is an enum value
    assert sp.extras.body_sources["audience"] == "user"
    assert sp.extras.body_sources["tone"] == "user"
    # the other two fields are still chosen by rules
    assert sp.body["system"] == "teacher" and sp.body["depth"] == "standard"


def test_a0_defaults_are_replaced_by_rules(cfg):
    body = {"task": "Write a detailed Python function", "audience": "general"}
    sp = a2.run(make_sp(body, {"audience": "default"}), cfg, None)
    assert sp.body["audience"] == "general"
    assert decision(sp, "audience").source == "default"
    sp = a2.run(make_sp({**body, "task": "A detailed note for the dev team"},
                        {"audience": "default"}), cfg, None)
    assert sp.body["audience"] == "developer"


# --------------------------------------------------------------------------- confidence


def test_bland_prompt_gets_defaults_and_low_confidence(cfg):
    sp = shaped(cfg, "What is the capital of France?")
    assert {k: sp.body[k] for k in META} == {"system": "assistant", "audience": "general",
                                              "tone": "neutral", "depth": "standard"}
    assert sp.body["confidence"] == "low"
    assert all(d.source == "default" and d.matched == [] for d in sp.extras.a2_decisions)
    assert sp.extras.body_sources["confidence"] == "a2"


def test_one_rule_gives_medium_confidence(cfg):
    sp = shaped(cfg, "Fix the bug in this Python function")
    assert [decision(sp, f).source for f in META] == ["rule", "default", "default", "default"]
    assert sp.body["confidence"] == "medium"


def test_three_or_more_rules_give_high_confidence(cfg):
    sp = shaped(cfg, "Explain to a beginner in simple terms how BM25 works")
    assert [decision(sp, f).source for f in META] == ["rule", "rule", "rule", "default"]
    assert sp.body["confidence"] == "high"
    sp = shaped(cfg, "Write a detailed Python function for the dev team, concisely")
    assert [decision(sp, f).source for f in META] == ["rule"] * 4
    sp = shaped(cfg, "Give management a persuasive pitch with a strategy recommendation")
    assert [decision(sp, f).source for f in META] == ["rule", "rule", "rule", "default"]
    assert sp.body["confidence"] == "high"


def test_user_given_fields_count_as_decided(cfg):
    sp = shaped(cfg, "What is the capital of France?", system="geographer", audience="children",
                tone="playful")
    assert sp.body["confidence"] == "high"


def test_confidence_thresholds_come_from_config(cfg):
    agent = cfg.agents.A2_PromptShaper.model_copy(
        update={"confidence_thresholds": {"high": 4, "medium": 2, "low": 0}})
    assert [a2.confidence_level(agent, n) for n in range(5)] == \
        ["low", "low", "medium", "medium", "high"]
    default_agent = cfg.agents.A2_PromptShaper
    assert [a2.confidence_level(default_agent, n) for n in range(5)] == \
        ["low", "medium", "medium", "high", "high"]


# --------------------------------------------------------------------------- clamp


def test_clamp_keeps_enum_values_and_defaults_the_rest(cfg):
    audience = cfg.agents.A2_PromptShaper.fields["audience"]
    assert a2.clamp(audience, "expert") == ("expert", False)
    assert a2.clamp(audience, "  Expert ") == ("expert", False)
    assert a2.clamp(audience, "wizards") == ("general", True)
    assert a2.clamp(audience, "") == ("general", True)
    depth = cfg.agents.A2_PromptShaper.fields["depth"]
    assert a2.clamp(depth, "Deep-Dive") == ("deep-dive", False)
    assert a2.clamp(depth, "deep dive") == ("standard", True)


# --------------------------------------------------------------------------- stage contract


def test_rerun_is_idempotent(cfg):
    first = shaped(cfg, "Explain to a beginner in simple terms how BM25 works", purpose="docs")
    second = a2.run(first.model_copy(deep=True), cfg, None)
    assert second.body == first.body
    assert second.extras == first.extras
    assert second.prompt_ready == first.prompt_ready
    # A2 restarts from A0's snapshot: a changed body does not leak into the next run
    edited = first.model_copy(deep=True)
    edited.body["audience"] = "executive"
    assert a2.run(edited, cfg, None).body == first.body


def test_deterministic_bytes(cfg):
    runs = [shaped(cfg, "Erkläre ausführlich für Anfänger, wie BM25 funktioniert",
                   context="Our KB is about search.") for _ in range(2)]
    assert runs[0].to_json() == runs[1].to_json()
    assert json.dumps(runs[0].body) == json.dumps(runs[1].body)


def test_prompt_ready_shows_the_shaped_body(cfg):
    sp = shaped(cfg, "Explain to a beginner in simple terms how BM25 works")
    assert "You are a teacher." in sp.prompt_ready
    assert "Tone: friendly · Depth: standard · Audience: beginner" in sp.prompt_ready
    assert "### Task\nExplain to a beginner in simple terms how BM25 works" in sp.prompt_ready


def test_stage_fields_mode_and_retrieval_untouched(cfg):
    sp = make_sp({"task": "Explain RRF"})
    sp.final_selection_ids = ["x"]
    sp.S_CTX_MD = "ctx"
    out = a2.run(sp, cfg, None)
    assert out.stage == "preprocessed" and out.history_of_stages == ["preprocessed"]
    assert out.final_selection_ids == ["x"] and out.S_CTX_MD == "ctx"
    assert out.views_by_stage == {} and out.base_context_chunks == []
    assert out.extras.agent_modes["A2_PromptShaper"].model_dump() == {
        "mode": "deterministic", "reason": "no LLM endpoint configured"}


def test_without_a0_bookkeeping_present_fields_count_as_the_users(cfg):
    sp = SuperPrompt(user_text="x", stage="preprocessed",
                     body={"task": "Explain BM25 to a beginner", "tone": "formal"})
    out = a2.run(sp, cfg, None)
    assert out.body["tone"] == "formal" and decision(out, "tone").source == "user"
    assert out.body["audience"] == "beginner"


def test_loaded_config_is_an_a2_config(cfg):
    assert isinstance(cfg.agents.A2_PromptShaper, A2Config)
    assert cfg.agents.A2_PromptShaper.confidence_values == ["low", "medium", "high"]
