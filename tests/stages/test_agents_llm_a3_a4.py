"""A3 and A4 in LLM mode, against the scripted OpenAI server on loopback."""

import json

import pytest

from ragstream import controller
from ragstream.backends.tokens import count_tokens
from ragstream.records import A3Clamp
from tests.fake_openai import Reply
from tests.llm_support import llm_config, with_llm

PROMPT = "How does the ReRanker choose its backend when no cross-encoder is available?"


@pytest.fixture(scope="module")
def sp_reranked(kb_engine):
    return kb_engine.run(PROMPT, until="ReRanker")


@pytest.fixture
def llm(kb_engine, server):
    cfg = llm_config(kb_engine.cfg, server)
    return cfg, with_llm(kb_engine.services, cfg)


def payload(request) -> dict:
    return json.loads(request.messages[-1]["content"])


def test_a3_llm_keeps_and_drops_with_tags(sp_reranked, llm, server):
    cfg, services = llm

    def respond(body):
        cands = json.loads(body["messages"][-1]["content"])["candidates"]
        decisions = [{"n": c["n"], "decision": "keep" if c["n"] % 3 else "drop",
                      "tag": "" if c["n"] % 3 else "off-topic", "reason": "judged"} for c in cands]
        decisions[0]["decision"] = "maybe"        # out of enum -> clamped to keep
        decisions[1]["tag"] = "boring"            # out of enum tag -> ""
        return Reply.json({"decisions": decisions[:-1]})  # the last one is left unjudged

    server.responder = respond
    sp = controller.run_stage(sp_reranked, "A3_NLI_Gate", cfg, services)
    assert sp.extras.agent_modes["A3_NLI_Gate"].mode == "llm"
    sent = payload(server.requests[-1])
    assert "system" in server.requests[-1].messages[0]["role"]
    assert "A3_NLI_Gate" in server.requests[-1].messages[0]["content"]
    assert len(sent["candidates"]) == sp.extras.a3.working_set
    rows = {r.chunk_id: r for r in sp.view("a3")}
    by_n = {c["n"]: c["id"] for c in sent["candidates"]}
    assert rows[by_n[3]].status == "dropped" and rows[by_n[3]].reason.startswith("LLM: off-topic")
    assert rows[by_n[1]].status == "kept"
    clamped = sp.extras.a3.clamped
    assert A3Clamp(n=1, field="decision", value="maybe", clamped_to="keep") in (clamped or [])
    assert any(c.field == "tag" and c.value == "boring" for c in clamped)
    last = by_n[max(by_n)]
    assert sp.extras.a3.unjudged == [last]
    assert rows[last].reason.startswith("not judged by the LLM; by rule:")
    assert sp.final_selection_ids == [r.chunk_id for r in sp.view("a3") if r.status == "kept"]
    assert sp.extras.llm_usage["A3_NLI_Gate"].calls == 1
    # chunks are untouched
    assert sp.base_context_chunks == sp_reranked.base_context_chunks


def test_a3_falls_back_when_the_endpoint_fails(sp_reranked, llm, server, kb_engine):
    cfg, services = llm
    server.script(*[Reply.error(503, "overloaded")] * 3)
    sp = controller.run_stage(sp_reranked, "A3_NLI_Gate", cfg, services)
    mode = sp.extras.agent_modes["A3_NLI_Gate"]
    assert mode.mode == "deterministic" and mode.fallback is True
    assert "HTTP 503" in mode.reason and server.calls == 3
    plain = controller.run_stage(sp_reranked, "A3_NLI_Gate", kb_engine.cfg, kb_engine.services)
    assert sp.views_by_stage["a3"] == plain.views_by_stage["a3"]


@pytest.fixture(scope="module")
def sp_gated(kb_engine):
    return kb_engine.run(PROMPT, until="A3_NLI_Gate")


def test_a4_llm_condenses_with_valid_citations_only(sp_gated, llm, server):
    cfg, services = llm
    server.script(Reply.json({
        "facts": [{"text": "The ReRanker falls back to an offline backend.", "sources": [2, 1]},
                  {"text": "A statement citing nothing real.", "sources": [99]},
                  {"text": "An uncited statement.", "sources": []}],
        "constraints": [{"text": "backend must be auto, cross-encoder or offline.", "sources": [3]}],
        "open_issues": ["Speed of the cross-encoder is not covered."],
    }))
    sp = controller.run_stage(sp_gated, "A4_Condenser", cfg, services)
    assert sp.extras.agent_modes["A4_Condenser"].mode == "llm"
    sent = payload(server.requests[-1])["sources"]
    assert len(sent) <= cfg.limits.N3_FINAL_SELECTION_MAX
    ids = [s_["n"] for s_ in sent]
    # surviving ids: the cited ones (1, 2, 3), in A3 order, renumbered
    a3_kept = sp_gated.final_selection_ids
    assert sp.final_selection_ids == [a3_kept[0], a3_kept[1], a3_kept[2]]
    assert "- The ReRanker falls back to an offline backend. [2][1]" in sp.S_CTX_MD
    assert "### Constraints\n- backend must be auto, cross-encoder or offline. [3]" in sp.S_CTX_MD
    assert "### Open issues\n- Speed of the cross-encoder is not covered." in sp.S_CTX_MD
    assert "citing nothing real" not in sp.S_CTX_MD and "uncited" not in sp.S_CTX_MD
    assert sp.extras.a4.invalid_citations == [99]
    assert sp.extras.a4.uncited_dropped == ["A statement citing nothing real.",
                                                  "An uncited statement."]
    dropped = [r for r in sp.view("a4") if r.status == "dropped"]
    assert all(r.reason for r in dropped) and len(ids) >= 3


def test_a4_llm_output_is_held_to_the_budget(sp_gated, llm, server):
    cfg, services = llm
    agents = cfg.agents.model_copy(update={"A4_Condenser": cfg.agents.A4_Condenser.model_copy(
        update={"budget_tokens": 80})})
    cfg = cfg.model_copy(update={"agents": agents})
    long = [{"text": f"Fact number {i} about reranking backends and offline scoring.", "sources": [1 + i % 3]}
            for i in range(30)]
    server.script(Reply.json({"facts": long, "constraints": [], "open_issues": ["x"] * 5}))
    sp = controller.run_stage(sp_gated, "A4_Condenser", cfg, services)
    assert count_tokens(sp.S_CTX_MD) <= 80
    assert sp.extras.a4.trimmed_for_budget > 0
    assert "Fact number 0 " in sp.S_CTX_MD and "Fact number 29 " not in sp.S_CTX_MD


def test_a4_malformed_twice_falls_back_to_extractive(sp_gated, llm, server, kb_engine):
    cfg, services = llm
    server.script(Reply.text("Sure! Here is the context:"), Reply.json({"facts": "oops"}))
    sp = controller.run_stage(sp_gated, "A4_Condenser", cfg, services)
    mode = sp.extras.agent_modes["A4_Condenser"]
    assert mode.mode == "deterministic" and mode.fallback
    assert "after one repair attempt" in mode.reason
    plain = controller.run_stage(sp_gated, "A4_Condenser", kb_engine.cfg, kb_engine.services)
    assert sp.S_CTX_MD == plain.S_CTX_MD
