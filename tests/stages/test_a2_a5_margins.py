"""A2's and A5's choices from enums read as probabilities, weighed against their rules.

``ragstream.agents.choices.value_probabilities`` is tested on hand-made token lists; the stages
against the scripted OpenAI server on loopback (``tests.fake_openai``), whose replies carry
OpenAI-shaped token log-probabilities (``scripted``): a confident model's value is taken, an
unsure one's gives way to the rule (below ``choice_margin``), an endpoint without
log-probabilities (or one that refuses them) keeps the model's value as before, and a field
the user set is never changed.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from ragstream.agents.choices import locate_value, value_probabilities, weigh
from ragstream.backends.llm import LLMClient, TokenChoice
from ragstream.backends.services import Services
from ragstream.common.config import load_config
from ragstream.interfaces.ui import editing
from ragstream.interfaces.ui import state as S
from ragstream.stages import a2_prompt_shaper as a2
from ragstream.stages import a5_format_enforcer as a5
from ragstream.state import edits
from ragstream.state.super_prompt import SuperPrompt
from tests.fake_openai import FakeOpenAI, Reply

A2 = "A2_PromptShaper"
A5 = "A5_Format_Enforcer"
SYSTEMS = ["assistant", "software engineer", "data scientist", "researcher", "teacher",
           "technical writer", "analyst", "consultant"]


def tok(token: str, p: float = 1.0, *top: tuple[str, float]) -> TokenChoice:
    """A token chosen with probability ``p`` and its alternatives (text, probability)."""
    return TokenChoice(token, math.log(p), [(t, math.log(q)) for t, q in top])


# --------------------------------------------------------------------------- reading


def test_a_value_in_one_token_with_its_quote_fused():
    tokens = [tok('{"tone'), tok('":'), tok(' "'),
              tok("friendly", 0.6, ("friendly", 0.6), ("formal", 0.3), ("neutral", 0.1)),
              tok('"}')]
    odds = value_probabilities(tokens, "tone", ["neutral", "formal", "friendly"])
    assert odds is not None
    assert (odds.chosen, odds.probability, odds.runner_up) == ("friendly", 0.6, "formal")
    assert odds.margin == pytest.approx(0.3)
    assert odds.probabilities == pytest.approx({"neutral": 0.1, "formal": 0.3, "friendly": 0.6})

    # the opening quote in the token: alternatives must begin with it too
    fused = [tok('{"tone": '),
             tok('"friendly', 0.5, ('"friendly', 0.5), ('"formal', 0.25), (' "neutral', 0.25)),
             tok('"}')]
    odds = value_probabilities(fused, "tone", ["neutral", "formal", "friendly"])
    assert odds is not None  # ' "neutral' (another spacing) never reaches this value
    assert odds.probabilities == pytest.approx({"neutral": 0.0, "formal": 1 / 3,
                                                "friendly": 2 / 3}, abs=1e-4)


def test_a_value_split_over_several_tokens():
    tokens = [tok('{"system": "'),
              tok("software", 0.7, ("software", 0.7), ("teacher", 0.2), ("data", 0.1)),
              tok(" engineer", 0.99, (" engineer", 0.99)), tok('"'), tok("}")]
    odds = value_probabilities(tokens, "system", SYSTEMS)
    assert odds is not None and odds.chosen == "software engineer"
    assert odds.probability == pytest.approx(0.7) and odds.runner_up == "teacher"
    assert odds.probabilities["data scientist"] == pytest.approx(0.1)
    assert odds.margin == pytest.approx(0.5)


def test_a_first_token_that_begins_two_values_is_resolved_at_the_next_token():
    # '"te' begins "teacher" and "technical writer": the next token, on the model's path, splits it
    tokens = [tok('{"system": '), tok('"te', 0.8, ('"te', 0.8), ('"analyst', 0.2)),
              tok("acher", 0.75, ("acher", 0.75), ("chnical", 0.25)), tok('"}')]
    odds = value_probabilities(tokens, "system", SYSTEMS)
    assert odds is not None and odds.chosen == "teacher"
    assert odds.probabilities["teacher"] == pytest.approx(0.6)
    assert odds.probabilities["technical writer"] == pytest.approx(0.2)
    assert odds.probabilities["analyst"] == pytest.approx(0.2)
    assert odds.margin == pytest.approx(0.4)

    # an ambiguous alternative off the model's path is split evenly
    other = [tok('{"system": '), tok('"analyst', 0.6, ('"analyst', 0.6), ('"te', 0.4)), tok('"}')]
    odds = value_probabilities(other, "system", SYSTEMS)
    assert odds is not None and odds.chosen == "analyst"
    assert odds.probabilities["teacher"] == pytest.approx(0.2)
    assert odds.probabilities["technical writer"] == pytest.approx(0.2)
    assert odds.margin == pytest.approx(0.4)


def test_an_empty_value_and_a_value_that_closes_in_its_token():
    tokens = [tok('{"language": "'), tok('"', 0.7, ('"', 0.7), ("de", 0.3)), tok("}")]
    odds = value_probabilities(tokens, "language", ["", "de", "en"])
    assert odds is not None and odds.chosen == ""
    assert odds.probabilities == pytest.approx({"": 0.7, "de": 0.3, "en": 0.0})

    closed = [tok('{"kind": "'), tok('json"', 0.55, ('json"', 0.55), ('yaml"', 0.45)), tok("}")]
    odds = value_probabilities(closed, "kind", ["json", "yaml", "json_lines"])
    assert odds is not None and odds.margin == pytest.approx(0.1)
    assert odds.probabilities["json_lines"] == 0.0  # 'json"' closed the string: not its prefix


def test_only_the_top_level_key_is_read():
    text = '{"hard_rules": ["Say \\"kind\\": \\"json\\"."], "names": {"kind": "x"}, "kind": "table"}'
    assert locate_value(text, "kind") == (text.index("table"), "table")
    fenced = '```json\n{"kind": "yaml"}\n```'
    assert locate_value(fenced, "kind") == (fenced.index("yaml"), "yaml")
    assert locate_value('{"kind": null}', "kind") is None
    assert locate_value('{"other": "kind"}', "kind") is None


def test_nothing_to_read_gives_none():
    tokens = [tok('{"kind": "'), tok('html"', 0.9, ('html"', 0.9)), tok("}")]
    assert value_probabilities([], "kind", ["json"]) is None
    assert value_probabilities(tokens, "tone", ["json"]) is None  # no such key
    assert value_probabilities(tokens, "kind", ["json", "yaml"]) is None  # not an allowed value
    no_alternative = [tok('{"kind": "'), tok('json"', 0.9, ('html"', 0.9)), tok("}")]
    odds = value_probabilities(no_alternative, "kind", ["json", "yaml"])
    assert odds is not None and odds.probability == 1.0  # the chosen token counts, if unlisted


def test_weigh_takes_the_model_only_above_the_margin():
    tokens = [tok('{"tone": "'), tok('formal"', 0.55, ('formal"', 0.55), ('neutral"', 0.45)),
              tok("}")]
    odds = value_probabilities(tokens, "tone", ["neutral", "formal"])
    unsure = weigh("tone", "neutral", "formal", "formal", odds, 0.2)
    assert (unsure.final, unsure.decided_by) == ("neutral", "rule")
    assert unsure.why == ("P 0.55, neutral 0.45, margin 0.10 < choice_margin 0.2: the rule's "
                          "choice stands")
    sure = weigh("tone", "neutral", "formal", "formal", odds, 0.1)
    assert (sure.final, sure.decided_by) == ("formal", "llm")
    assert sure.judgment().changed and not unsure.judgment().changed
    blind = weigh("tone", "neutral", "formal", "formal", None, 0.2)
    assert (blind.final, blind.decided_by) == ("formal", "llm")
    assert blind.why.startswith("no probability from the endpoint")


# --------------------------------------------------------------------------- the fake server


def scripted(obj: dict, odds: dict[str, list[tuple[str, float]]]) -> Reply:
    """A reply whose content is ``json.dumps(obj)``, with OpenAI-shaped log-probabilities:
    each value named in ``odds`` is one token, quotes fused ('"teacher"'), its alternatives
    the values listed with their probabilities (the first is the value in ``obj``); the rest
    of the text is split before spaces into tokens the model was sure of."""
    text = json.dumps(obj)
    marks = sorted((text.index(f'"{key}": ') + len(f'"{key}": '), key) for key in odds)
    entries: list[tuple] = []
    pos = 0
    for start, key in marks:
        entries += [(piece, 0.0, ()) for piece in re.split(r"(?<=\S)(?=\s)", text[pos:start]) if piece]
        value = json.dumps(obj[key])
        alts = tuple((json.dumps(v), math.log(p)) for v, p in odds[key])
        assert alts[0][0] == value, "the first alternative is the value the reply holds"
        entries.append((value, alts[0][1], alts))
        pos = start + len(value)
    entries += [(piece, 0.0, ()) for piece in re.split(r"(?<=\S)(?=\s)", text[pos:]) if piece]
    assert "".join(e[0] for e in entries) == text
    return Reply("text", content=text, logprobs=tuple(entries))


def llm_cfg(server, **values):
    cfg = load_config(env={"RAGSTREAM_LLM_BASE_URL": server.base_url,
                           "RAGSTREAM_LLM_MODEL": "test-model"})
    return cfg.with_overrides({"settings.llm.timeout_s": 2.0,
                               "settings.llm.structured_output": "json_object", **values})


def services(cfg) -> Services:
    return Services(llm=LLMClient(cfg.settings.llm, environ={"OPENAI_API_KEY": "sk-test"}))


def a2_sp(body: dict[str, str], sources: dict[str, str] | None = None) -> SuperPrompt:
    """A SuperPrompt as A0 leaves it (format "Markdown" is A0's default)."""
    body = {"format": "Markdown", **body}
    sources = {k: "user" for k in body} | {"format": "default"} | (sources or {})
    return SuperPrompt(user_text=body["task"], stage="preprocessed",
                       history_of_stages=["preprocessed"], body=dict(body),
                       extras={"body_sources": sources, "a0_body": dict(body)})


# the rules choose: system "software engineer" ("python"), the other fields their defaults
# (audience general, tone neutral, depth standard), confidence medium
A2_BODY = {"task": "Walk new hires through how BM25 ranks documents",
           "context": "They know Python but not information retrieval."}
A2_REPLY = {"system": "teacher", "audience": "beginner", "tone": "friendly",
            "depth": "deep-dive", "confidence": "high"}


def judged(sp: SuperPrompt, agent: str) -> dict:
    return {j.item: j for j in sp.extras.judgments[agent]}


def decision(sp: SuperPrompt, field: str):
    (d,) = [d for d in sp.extras.a2_decisions or [] if d.field == field]
    return d


def test_a2_a_confident_model_is_taken_an_unsure_one_gives_way(server):
    cfg = llm_cfg(server)
    assert cfg.agents.A2_PromptShaper.choice_margin == 0.2  # config/agents/A2_PromptShaper.json
    server.script(scripted(A2_REPLY, {
        "system": [("teacher", 0.5), ("software engineer", 0.42), ("assistant", 0.08)],
        "depth": [("deep-dive", 0.9), ("standard", 0.1)]}))
    sp = a2.run(a2_sp(A2_BODY), cfg, services(cfg))

    (req,) = server.chat_requests
    assert req["logprobs"] is True and req["top_logprobs"] == cfg.settings.llm.logprobs_top
    # unsure (margin 0.08): the rule's choice stands, and its decision is the rule's
    assert sp.body["system"] == "software engineer"
    assert decision(sp, "system").source == "rule" and decision(sp, "system").matched == ["python"]
    system = judged(sp, A2)["system"]
    assert (system.rule, system.model, system.final, system.decided_by) == (
        "software engineer", "teacher", "software engineer", "rule")
    assert system.probability == pytest.approx(0.5) and not system.changed
    assert system.why == ("P 0.50, software engineer 0.42, margin 0.08 < choice_margin 0.2: "
                          "the rule's choice stands")
    # confident (margin 0.8): the model's value
    assert sp.body["depth"] == "deep-dive" and decision(sp, "depth").source == "llm"
    depth = judged(sp, A2)["depth"]
    assert (depth.rule, depth.final, depth.decided_by) == ("standard", "deep-dive", "llm")
    assert depth.changed and "margin 0.80 ≥ choice_margin 0.2" in depth.why
    # a field whose value the model was sure of (the fake's other tokens are certain)
    assert judged(sp, A2)["tone"].probability == 1.0 and sp.body["tone"] == "friendly"
    assert list(judged(sp, A2)) == ["system", "audience", "tone", "depth", "confidence"]
    probabilities = sp.extras.llm_calls[A2][0].probabilities
    assert probabilities is not None
    assert probabilities["system"] == pytest.approx(0.5)
    assert probabilities["depth"] == pytest.approx(0.9)

    # the page shows the model's word and the threshold beside the rule's choice
    rows = {r["field"]: r for r in editing.field_rows(sp, cfg)}
    assert rows["system"]["source"] == "rule"
    assert rows["system"]["why"] == ("A2 matched 'python'; model: teacher — P 0.50, software "
                                     "engineer 0.42, margin 0.08 < choice_margin 0.2: the "
                                     "rule's choice stands")
    assert rows["depth"]["source"] == "LLM"
    assert rows["depth"]["why"].startswith("A2's model chose it over the rule's 'standard': "
                                           "P 0.90, standard 0.10, margin 0.80 ≥ choice_margin")


def test_a2_choice_margin_is_the_configs(server):
    cfg = llm_cfg(server, **{"agents.A2_PromptShaper.choice_margin": 0.05})
    server.script(scripted(A2_REPLY, {
        "system": [("teacher", 0.5), ("software engineer", 0.42), ("assistant", 0.08)]}))
    sp = a2.run(a2_sp(A2_BODY), cfg, services(cfg))
    assert sp.body["system"] == "teacher" and decision(sp, "system").source == "llm"
    assert "margin 0.08 ≥ choice_margin 0.05" in judged(sp, A2)["system"].why


def test_a2_without_log_probabilities_keeps_the_models_values(server):
    cfg = llm_cfg(server)
    server.ignore_logprobs = True  # as a server that does not implement them
    server.script(Reply.json(A2_REPLY))  # asked for log-probabilities, answered without
    sp = a2.run(a2_sp(A2_BODY), cfg, services(cfg))
    assert {k: sp.body[k] for k in A2_REPLY} == A2_REPLY
    assert server.chat_requests[0]["logprobs"] is True
    system = judged(sp, A2)["system"]
    assert (system.rule, system.final, system.decided_by, system.probability) == (
        "software engineer", "teacher", "llm", None)
    assert system.why == "no probability from the endpoint: the model's choice is taken"
    assert sp.extras.llm_calls[A2][0].probabilities is None


def test_a2_a_server_that_refuses_log_probabilities_is_asked_again_without():
    with FakeOpenAI(models=["test-model"], refuse_logprobs=True) as server:
        cfg = llm_cfg(server)
        server.script(Reply.json(A2_REPLY))
        client = services(cfg)
        sp = a2.run(a2_sp(A2_BODY), cfg, client)
        first, second = server.chat_requests
    assert first["logprobs"] is True and "logprobs" not in second
    assert client.llm.offers_logprobs() is False
    assert sp.extras.agent_modes[A2].mode == "llm" and not sp.extras.agent_modes[A2].fallback
    assert {k: sp.body[k] for k in A2_REPLY} == A2_REPLY
    assert judged(sp, A2)["depth"].why.startswith("no probability from the endpoint")


def test_a2_fields_the_user_set_are_never_changed(server):
    cfg = llm_cfg(server)
    body = {**A2_BODY, "audience": "CFO and board", "tone": "formal"}
    server.script(scripted({**A2_REPLY, "audience": "developer", "tone": "friendly"}, {
        "audience": [("developer", 0.99), ("general", 0.01)],
        "tone": [("friendly", 0.97), ("formal", 0.03)]}))
    sp = a2.run(a2_sp(body, {"tone": edits.BY_YOU}), cfg, services(cfg))

    assert sp.body["audience"] == "CFO and board" and sp.body["tone"] == "formal"
    assert decision(sp, "audience").source == "user" and decision(sp, "tone").source == "you"
    audience = judged(sp, A2)["audience"]
    assert (audience.rule, audience.model, audience.final, audience.decided_by) == (
        "general", "developer", "CFO and board", "you")
    assert audience.probability == pytest.approx(0.99)
    tone = judged(sp, A2)["tone"]
    assert (tone.model, tone.final, tone.decided_by) == ("friendly", "formal", "you")


# --------------------------------------------------------------------------- A5


def a5_sp(**fields: str) -> SuperPrompt:
    body = {"task": "Explain reciprocal rank fusion", **fields}
    return SuperPrompt(user_text=body["task"], stage="a4", history_of_stages=["a4"],
                       body=body, extras={"body_sources": {k: "user" for k in body}})


A5_REPLY = {"kind": "bullet_list", "code_language": "", "language": "de",
            "hard_rules": ["Format the answer as a bulleted Markdown list, one point per bullet.",
                           "Keep it short."],
            "example_shape": "- ...", "normalized_format_spec": "Bulleted list, in German"}


def test_a5_an_unsure_kind_and_language_give_way_to_the_rules(server):
    cfg = llm_cfg(server)
    agent = cfg.agents.A5_Format_Enforcer
    assert agent.choice_margin == 0.2  # config/agents/A5_Format_Enforcer.json
    server.script(scripted(A5_REPLY, {
        "kind": [("bullet_list", 0.5), ("markdown", 0.45), ("table", 0.05)],
        "language": [("de", 0.55), ("", 0.45)]}))
    sp = a5.run(a5_sp(format="a short overview"), cfg, services(cfg))  # the rules: markdown, ""
    fe = sp.extras.format_enforcer
    assert fe is not None

    assert fe.mode == "llm" and (fe.kind, fe.kind_source, fe.language) == ("markdown", "default", "")
    # the model's rule for its kind is out; the rules' kind's rule comes first
    assert fe.hard_rules[:2] == [agent.kinds["markdown"].rule, "Keep it short."]
    assert fe.normalized_format_spec == agent.kinds["markdown"].label
    kind = judged(sp, A5)["kind"]
    assert (kind.rule, kind.model, kind.final, kind.decided_by) == (
        "markdown", "bullet_list", "markdown", "rule")
    assert "margin 0.05 < choice_margin 0.2" in kind.why
    language = judged(sp, A5)["language"]
    assert (language.rule, language.model, language.final) == ("", "de", "")
    assert "margin 0.10 < choice_margin 0.2" in language.why
    assert "code_language" not in judged(sp, A5)  # weighed for kind code only
    assert sp.extras.llm_calls[A5][0].probabilities == pytest.approx(
        {"kind": 0.5, "language": 0.55, "code_language": 1.0})

    line = editing.format_choices(sp)
    assert line is not None and line.startswith("A5's choices: kind **markdown** — the rules (")
    assert "model: bullet_list — P 0.50, markdown 0.45, margin 0.05 < choice_margin 0.2" in line


def test_a5_a_confident_kind_is_taken(server):
    cfg = llm_cfg(server)
    server.script(scripted(A5_REPLY, {
        "kind": [("bullet_list", 0.9), ("markdown", 0.1)], "language": [("de", 0.95), ("", 0.05)]}))
    sp = a5.run(a5_sp(format="a short overview"), cfg, services(cfg))
    fe = sp.extras.format_enforcer
    assert fe is not None
    assert (fe.kind, fe.kind_source, fe.language) == ("bullet_list", "llm", "de")
    assert fe.hard_rules[:2] == A5_REPLY["hard_rules"]
    assert fe.normalized_format_spec == "Bulleted list, in German"  # the model's own
    assert judged(sp, A5)["kind"].decided_by == "llm" and judged(sp, A5)["kind"].changed
    line = str(editing.format_choices(sp))
    assert "kind **bullet_list** — the model over the rules' markdown" in line


def test_a5_without_log_probabilities_keeps_the_models_kind(server):
    cfg = llm_cfg(server)
    server.ignore_logprobs = True
    server.script(Reply.json(A5_REPLY))
    sp = a5.run(a5_sp(format="a short overview"), cfg, services(cfg))
    assert sp.extras.format_enforcer is not None
    assert sp.extras.format_enforcer.kind == "bullet_list"
    kind = judged(sp, A5)["kind"]
    assert (kind.decided_by, kind.probability) == ("llm", None)
    assert kind.why == "no probability from the endpoint: the model's choice is taken"


# --------------------------------------------------------------------------- the page


def test_the_page_shows_the_threshold_beside_the_decision(kb_engine, tmp_path):
    """The Fields tab's why column and the line over A5's rules name the model's value, its
    probability and the margin against choice_margin, where the rule's choice stood."""
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    from tests.ui.tabs import open_tab

    def route(body: dict) -> Reply:
        system = body["messages"][0]["content"]
        if body.get("stream"):
            return Reply.text("Start it with chroma run [1].")
        if "A2_PromptShaper" in system:
            return scripted(A2_REPLY, {"system": [("teacher", 0.5), ("assistant", 0.42),
                                                  ("analyst", 0.08)]})
        if "A5_Format_Enforcer" in system:
            return scripted(A5_REPLY, {"kind": [("bullet_list", 0.5), ("markdown", 0.45)],
                                       "language": [("de", 0.55), ("", 0.45)]})
        return Reply.error(400, "unexpected request")

    mp = pytest.MonkeyPatch()
    with FakeOpenAI(models=["test-model"], responder=route) as server:
        mp.setenv("RAGSTREAM_INDEX_DIR", str(kb_engine.cfg.index_dir))
        mp.setenv("RAGSTREAM_UPLOADS_DIR", str(tmp_path / "uploads"))
        mp.setenv("RAGSTREAM_LLM_BASE_URL", server.base_url)
        mp.setenv("RAGSTREAM_LLM_MODEL", "test-model")
        mp.setenv("OPENAI_API_KEY", "sk-test")
        st.cache_resource.clear()
        try:
            at = AppTest.from_file(str(Path(__file__).resolve().parents[2] / "ui_streamlit.py"),
                                   default_timeout=300).run()
            at.session_state[S.OVERRIDES] = {"agents.A3_NLI_Gate.mode": "deterministic",
                                             "agents.A4_Condenser.mode": "deterministic",
                                             "settings.llm.structured_output": "json_object"}
            at.text_area(key=S.PROMPT).set_value(
                "Task: How do I start a Chroma server?\nFormat: a short overview").run()
            at.button(key="run").click().run()
            assert not at.exception and not at.error, [e.value for e in at.error]
            open_tab(at, "Fields")  # only the open tab is drawn
            fields = next(d.value for d in at.data_editor
                          if d.key == f"fields_{at.session_state[S.EDIT_NONCE]}")
            notes = [m.value for m in at.markdown]
            open_tab(at, "Context & rules")
        finally:
            st.cache_resource.clear()
            mp.undo()
    assert not at.exception and not at.error, [e.value for e in at.error]
    sp = at.session_state[S.SP]
    assert sp.body["system"] == "assistant" and sp.extras.format_enforcer.kind == "markdown"
    row = list(fields["field"]).index("system")
    why = ("A2: no keyword matched, the field's default; model: teacher — P 0.50, assistant "
           "0.42, margin 0.08 < choice_margin 0.2: the rule's choice stands")
    # the why column shows it whole, or cut with "…" and whole under the table
    shown = fields["why"][row]
    assert shown == why or (shown.endswith("…") and why.startswith(shown[:-1]) and any(
        f"**system** — assistant: {why}" in m for m in notes))
    (line,) = [c.value for c in at.caption if c.value.startswith("A5's choices:")]
    # (probabilities normalised over the values: 0.5 / 0.95, 0.45 / 0.95)
    assert "kind **markdown** — the rules (model: bullet_list — P 0.53, markdown 0.47, " \
           "margin 0.05 < choice_margin 0.2: the rule's choice stands)" in line
    assert "language **none** — the rules (model: de — P 0.55, none 0.45, margin 0.10" in line
