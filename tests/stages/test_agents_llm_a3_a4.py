"""A3 and A4 in LLM mode, against the scripted OpenAI server on loopback: the compact
contracts (numbers and short codes out, the sentences that matter in), the token budgets,
and the fallbacks."""

import json

import pytest

from ragstream.agents.factory import Agent, AgentFactory
from ragstream.backends.tokens import count_tokens
from ragstream.stages import controller
from ragstream.stages.a3_nli_gate import A3Output
from ragstream.state.edits import new_edit
from ragstream.state.records import A3Clamp
from tests.fake_openai import Reply
from tests.llm_support import llm_config, with_llm

PROMPT = "How does the ReRanker choose its backend when no cross-encoder is available?"


@pytest.fixture(scope="module")
def sp_reranked(kb_engine):
    return kb_engine.run(PROMPT, until="ReRanker")


def agents_after(cfg, stage: str):
    """``cfg`` with the agents before ``stage`` set to their deterministic mode: the state
    they ran in offline (``sp_reranked``, ``sp_gated``) stays current, so the controller lets
    ``stage`` run on it in LLM mode."""
    before = {"A3_NLI_Gate": ["A2_PromptShaper"],
              "A4_Condenser": ["A2_PromptShaper", "A3_NLI_Gate"]}[stage]
    for name in before:
        cfg = with_agent(cfg, name, mode="deterministic")
    return cfg


@pytest.fixture
def llm(kb_engine, server):
    cfg = agents_after(llm_config(kb_engine.cfg, server), "A3_NLI_Gate")
    return cfg, with_llm(kb_engine.services, cfg)


@pytest.fixture
def llm_a4(kb_engine, server):
    cfg = agents_after(llm_config(kb_engine.cfg, server), "A4_Condenser")
    return cfg, with_llm(kb_engine.services, cfg)


def payload(request) -> dict:
    return json.loads(request.messages[-1]["content"])


def with_agent(cfg, name: str, **update):
    agent = getattr(cfg.agents, name).model_copy(update=update)
    return cfg.model_copy(update={"agents": cfg.agents.model_copy(update={name: agent})})


def prompt_tokens(request) -> int:
    return sum(count_tokens(m["content"]) + 4 for m in request.messages)


def test_a3_list_mode_sends_numbered_best_sentences_and_reads_drops_by_number(sp_reranked, llm,
                                                                            server):
    cfg, services = llm
    cfg = with_agent(cfg, "A3_NLI_Gate", judge="list")
    server.script(Reply.json({"drop": [{"n": 3, "tag": "off-topic"}, {"n": 2, "tag": "boring"},
                                       {"n": 99, "tag": "duplicate"}]}))
    sp = controller.run_stage(sp_reranked, "A3_NLI_Gate", cfg, services)
    acfg = cfg.agents.A3_NLI_Gate
    assert sp.extras.agent_modes["A3_NLI_Gate"].mode == "llm"
    assert server.calls == 1 and "logprobs" not in server.chat_requests[-1]
    request = server.chat_requests[-1]
    sent = payload(request)["candidates"]
    ranked = [r.chunk_id for r in sp_reranked.view("reranked")]
    assert len(sent) == acfg.llm_max_candidates < sp.extras.a3.working_set
    chunks = sp.chunk_map()
    for n, line in enumerate(sent, start=1):  # "n: sentence … sentence", from that chunk
        number, text = line.split(": ", 1)
        assert int(number) == n and len(text) <= acfg.llm_chars
        first = text.split(" … ")[0]
        assert first[:40] in " ".join(chunks[ranked[n - 1]].text.split())
    assert prompt_tokens(request) <= AgentFactory(cfg, services.llm).create(
        "A3_NLI_Gate", A3Output).prompt_budget
    # the reply's schema bounds it: numbers 1..sent, at most sent drops, tags from the list
    schema = request["response_format"]["json_schema"]["schema"]["properties"]["drop"]
    assert schema["maxItems"] == len(sent)
    assert schema["items"]["properties"]["n"]["maximum"] == len(sent)
    assert schema["items"]["properties"]["tag"]["enum"] == ["duplicate", "off-topic", "conflicting"]
    assert sp.extras.llm_calls["A3_NLI_Gate"][0].items == ranked[:len(sent)]

    # ranks 2 and 3 are among the first protect_top_k: the model's word does not drop them
    rows = {r.chunk_id: r for r in sp.view("a3")}
    for cid in ranked[1:3]:
        assert rows[cid].status == "kept" and rows[cid].decided_by == "rule"
        assert "protected: among the first 3 (protect_top_k)" in rows[cid].reason
    assert rows[ranked[0]].status == "kept"
    assert A3Clamp(n=2, field="tag", value="boring", clamped_to="") in sp.extras.a3.clamped
    assert sp.extras.a3.unknown_numbers == [99]
    assert sp.extras.a3.judge == "list" and sp.extras.a3.sent == len(sent)
    judged = {j.item: j for j in sp.extras.judgments["A3_NLI_Gate"]}
    assert set(judged) == set(ranked[:len(sent)])
    assert judged[ranked[2]].model == "dropped" and judged[ranked[2]].final == "kept"
    assert judged[ranked[2]].probability is None and not judged[ranked[2]].changed
    # the rules decide the candidates the model was not sent, against their own floor
    plain = controller.run_stage(sp_reranked, "A3_NLI_Gate", with_agent(
        cfg, "A3_NLI_Gate", mode="deterministic"), services)
    rule_rows = {r.chunk_id: r for r in plain.view("a3")}
    for cid in ranked[len(sent):]:
        assert (rows[cid].status, rows[cid].reason) == (rule_rows[cid].status, rule_rows[cid].reason)
        assert rows[cid].decided_by == "rule"
    assert sp.final_selection_ids == [r.chunk_id for r in sp.view("a3") if r.status == "kept"]
    usage = sp.extras.llm_usage["A3_NLI_Gate"]
    assert usage.calls == 1 and usage.first_try_valid and usage.form == "json_schema"
    assert usage.seconds > 0 and usage.reply_budget == acfg.max_tokens
    assert sp.base_context_chunks == sp_reranked.base_context_chunks  # chunks untouched


def test_a3_list_mode_sends_only_what_fits_its_prompt_budget(sp_reranked, llm, server):
    cfg, services = llm
    cfg = with_agent(cfg, "A3_NLI_Gate", max_prompt_tokens=700, llm_max_candidates=40,
                     judge="list")
    server.script(Reply.json({"drop": []}))
    sp = controller.run_stage(sp_reranked, "A3_NLI_Gate", cfg, services)
    request = server.chat_requests[-1]
    sent = payload(request)["candidates"]
    assert 0 < len(sent) < 40 and prompt_tokens(request) <= 700
    assert sp.extras.a3.sent == len(sent)
    assert len(sp.extras.judgments["A3_NLI_Gate"]) == len(sent)
    # with a window too small for even one candidate, the rules decide and say why
    tiny = with_agent(cfg, "A3_NLI_Gate", max_prompt_tokens=64)
    sp = controller.run_stage(sp_reranked, "A3_NLI_Gate", tiny, services)
    mode = sp.extras.agent_modes["A3_NLI_Gate"]
    assert mode.fallback and "prompt budget" in mode.reason


def test_a3_falls_back_when_the_endpoint_fails(sp_reranked, llm, server, kb_engine):
    cfg, services = llm
    server.script(Reply.error(503, "overloaded"), *[Reply.error(503, "overloaded")] * 3)
    sp = controller.run_stage(sp_reranked, "A3_NLI_Gate", cfg, services)
    mode = sp.extras.agent_modes["A3_NLI_Gate"]
    assert mode.mode == "deterministic" and mode.fallback is True
    assert "HTTP 503" in mode.reason
    plain = controller.run_stage(sp_reranked, "A3_NLI_Gate", kb_engine.cfg, kb_engine.services)
    assert sp.views_by_stage["a3"] == plain.views_by_stage["a3"]


@pytest.fixture(scope="module")
def sp_gated(kb_engine):
    return kb_engine.run(PROMPT, until="A3_NLI_Gate")


def test_a4_chooses_sentences_by_number_and_keeps_their_text_and_span(sp_gated, llm_a4, server):
    cfg, services = llm_a4
    cfg = with_agent(cfg, "A4_Condenser", rule_share=0.0)  # the model's choice alone
    server.script(Reply.json({"facts": [2, 1, 99, 2],
                              "open_issues": ["Speed of the cross-encoder is not covered."]}))
    sp = controller.run_stage(sp_gated, "A4_Condenser", cfg, services)
    acfg = cfg.agents.A4_Condenser
    assert sp.extras.agent_modes["A4_Condenser"].mode == "llm"
    request = server.chat_requests[-1]
    lines = payload(request)["sentences"]
    assert 2 <= len(lines) <= acfg.llm_max_sentences
    schema = request["response_format"]["json_schema"]["schema"]["properties"]
    assert schema["facts"]["items"]["maximum"] == len(lines)
    assert schema["open_issues"]["maxItems"] == 2
    sentences = [line.split("] ", 1)[1] for line in lines]
    statements = sp.extras.a4.condensed
    # the model's order (sentence 1, the top chunk's best, is in anyway: where the model put it)
    assert [s.text for s in statements] == [sentences[1], sentences[0]]
    chunks = sp.chunk_map()
    for s in statements:  # the sources' own sentences, with their spans
        a, b = s.span
        assert " ".join(chunks[s.chunk_ids[0]].text[a:b].split()) == s.text
        assert s.text in sp.S_CTX_MD
    assert sp.extras.a4.invalid_citations == [99]
    assert "Speed of the cross-encoder is not covered." in sp.S_CTX_MD
    assert set(sp.final_selection_ids) == {c for s in statements for c in s.chunk_ids}
    dropped = [r for r in sp.view("a4") if r.status == "dropped"]
    assert dropped and all(r.reason for r in dropped)


def test_a4_llm_mode_keeps_a_pinned_chunk_the_model_passed_over(kb_engine, sp_gated, llm_a4,
                                                                 server):
    cfg, services = llm_a4
    cfg = with_agent(cfg, "A4_Condenser", rule_share=0.0)  # the model's choice alone
    pinned = sp_gated.final_selection_ids[-1]  # A3 kept it; the model is told to choose [1] only
    sp = controller.record_edit(sp_gated, new_edit(sp_gated, "pin", pinned, "pin"))
    server.script(Reply.json({"facts": [1], "open_issues": []}))
    sp = controller.run_all(sp, cfg, services, until="A4_Condenser")
    assert sp.extras.agent_modes["A4_Condenser"].mode == "llm"
    assert sp.final_selection_ids[0] == pinned
    statements = sp.extras.a4.condensed
    assert statements[0].chunk_ids == [pinned]  # its best sentence, first
    assert len(statements) == 2
    row = next(r for r in sp.view("a4") if r.chunk_id == pinned)
    assert (row.status, row.reason, row.decided_by) == ("kept", "pinned by you", "you")


def test_a4_llm_output_is_held_to_the_budget(sp_gated, llm_a4, server):
    cfg, services = llm_a4
    cfg = with_agent(cfg, "A4_Condenser", budget_tokens=80)
    server.script(Reply.json({"facts": list(range(1, 21)), "open_issues": ["x", "y"]}))
    sp = controller.run_stage(sp_gated, "A4_Condenser", cfg, services)
    assert count_tokens(sp.S_CTX_MD) <= 80
    assert sp.extras.a4.trimmed_for_budget > 0 and sp.extras.a4.condensed


@pytest.mark.parametrize("form, calls, says", [
    ("json_object", 2, "after one repair attempt"),
    ("json_schema", 1, "asked for its schema (json_schema)"),
])
def test_a4_invalid_reply_falls_back_to_extractive(sp_gated, kb_engine, server, form, calls, says):
    cfg = agents_after(llm_config(kb_engine.cfg, server, structured_output=form), "A4_Condenser")
    services = with_llm(kb_engine.services, cfg)
    server.script(Reply.text("Sure! Here is the context:"), Reply.json({"facts": "oops"}))
    sp = controller.run_stage(sp_gated, "A4_Condenser", cfg, services)
    mode = sp.extras.agent_modes["A4_Condenser"]
    assert mode.mode == "deterministic" and mode.fallback and says in mode.reason
    assert server.calls == calls
    assert sp.extras.llm_usage["A4_Condenser"].first_try_valid is False
    plain = controller.run_stage(sp_gated, "A4_Condenser", kb_engine.cfg, kb_engine.services)
    assert sp.S_CTX_MD == plain.S_CTX_MD


def test_a4_reply_cut_off_is_reported_as_such(sp_gated, llm_a4, server):
    cfg, services = llm_a4
    server.script(Reply.text('{"facts": [1, 2, 3', finish_reason="length"))
    sp = controller.run_stage(sp_gated, "A4_Condenser", cfg, services)
    mode = sp.extras.agent_modes["A4_Condenser"]
    assert mode.fallback and "cut off at max_tokens=" in mode.reason and server.calls == 1
    assert sp.extras.llm_usage["A4_Condenser"].finish_reason == "length"


def test_an_agent_counts_its_prompt_against_the_models_context_window(kb_engine, server):
    cfg = llm_config(kb_engine.cfg, server, context_window=1024)
    agent: Agent = AgentFactory(cfg, with_llm(kb_engine.services, cfg).llm).create(
        "A3_NLI_Gate", A3Output)
    a3 = cfg.agents.A3_NLI_Gate
    assert agent.prompt_budget == int((1024 - a3.max_tokens - 48) / 1.15) < a3.max_prompt_tokens
