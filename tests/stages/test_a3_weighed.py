"""A3 in LLM mode weighs the model's word against the rules, against the scripted OpenAI
server on loopback: P(relevant) from a one-token yes/no judgment's log-probabilities, the
compact list where the endpoint gives none, the thresholds (protect_top_k, weak_relative,
llm_drop_max, llm_rescue_min), and a gate that never empties what the rules would fill."""

import pytest

from ragstream.stages import controller
from tests.fake_openai import FakeOpenAI, Reply
from tests.llm_support import llm_config, with_llm
from tests.stages.test_agents_llm_a3_a4 import PROMPT, agents_after, with_agent

A3 = "A3_NLI_Gate"


@pytest.fixture(scope="module")
def sp_reranked(kb_engine):
    return kb_engine.run(PROMPT, until="ReRanker")


@pytest.fixture(scope="module")
def rules(sp_reranked, kb_engine):
    """The rules' own verdicts, chunk id → row (A3 offline)."""
    sp = controller.run_stage(sp_reranked, A3, kb_engine.cfg, kb_engine.services)
    return {r.chunk_id: r for r in sp.view("a3")}


def setup(kb_engine, server, **a3):
    cfg = agents_after(llm_config(kb_engine.cfg, server), A3)
    cfg = with_agent(cfg, A3, **a3)
    return cfg, with_llm(kb_engine.services, cfg)


def passage_of(body: dict) -> str:
    return body["messages"][-1]["content"].split("Passage: ", 1)[1]


def judged_by(sp_reranked, p_of):
    """A responder: each yes/no call answered with ``p_of(rank)`` for the candidate whose
    passage it carries (found by the call's place: the calls go in reranked order)."""
    calls = []

    def respond(body):
        assert body["max_tokens"] == 1 and body["logprobs"] is True and body["top_logprobs"] >= 2
        calls.append(passage_of(body))
        return Reply.judgment(p_of(len(calls)))
    return respond, calls


def rows(sp):
    return {r.chunk_id: r for r in sp.view("a3")}


def test_a_model_that_says_no_to_everything_drops_only_weak_unprotected_candidates(
        kb_engine, sp_reranked, rules, server):
    cfg, services = setup(kb_engine, server, weak_relative=0.9)  # more are weak than by default
    acfg = cfg.agents.A3_NLI_Gate
    server.responder, calls = judged_by(sp_reranked, lambda rank: 0.01)
    sp = controller.run_stage(sp_reranked, A3, cfg, services)
    assert sp.extras.agent_modes[A3].mode == "llm"
    assert sp.extras.a3.judge == "probability" and len(calls) == acfg.llm_max_candidates
    ranked = [r for r in sp_reranked.view("reranked")][:acfg.llm_max_candidates]
    best = max(r.score for r in sp_reranked.view("reranked")[:acfg.max_candidates]
               if sp.chunk_map()[r.chunk_id].word_count >= acfg.min_words)
    got = rows(sp)
    dropped_by_model = 0
    for place, r in enumerate(ranked, start=1):
        row, rule = got[r.chunk_id], rules[r.chunk_id]
        assert row.rule_status == rule.status and row.scores["p_relevant"] == pytest.approx(0.01)
        weak = r.score < acfg.weak_relative * best
        if rule.status == "kept" and weak and place > acfg.protect_top_k:
            assert row.status == "dropped" and row.decided_by == "llm"
            assert "llm_drop_max 0.15" in row.reason and "weak_relative 0.9" in row.reason
            dropped_by_model += 1
        else:
            assert row.status == rule.status and row.decided_by == "rule"
    assert sp.final_selection_ids, "the gate never empties what the rules fill"
    assert got[ranked[0].chunk_id].status == "kept"
    changed = [j for j in sp.extras.judgments[A3] if j.changed]
    assert len(changed) == dropped_by_model == sp.extras.a3.changed > 0
    # each yes/no call is kept for the inspector: the chunk it judged and P(yes)
    calls = sp.extras.llm_calls[A3]
    assert [c.items for c in calls] == [[r.chunk_id] for r in ranked]
    assert all(c.probabilities["yes"] == pytest.approx(0.01) and c.raw == "No" for c in calls)
    assert calls[0].messages[-1].content.startswith("Question: ")
    # the thresholds the decisions were made with are in the record
    assert (sp.extras.a3.protect_top_k, sp.extras.a3.llm_drop_max) == (3, 0.15)


def test_protect_top_k_and_weak_relative_bound_what_the_model_may_drop(
        kb_engine, sp_reranked, rules, server):
    # weak_relative 1: every kept candidate but the best is weak; protect nothing
    cfg, services = setup(kb_engine, server, weak_relative=1.0, protect_top_k=0)
    server.responder, _ = judged_by(sp_reranked, lambda rank: 0.0)
    sp = controller.run_stage(sp_reranked, A3, cfg, services)
    first = sp_reranked.view("reranked")[0].chunk_id
    assert sp.final_selection_ids[0] == first and rows(sp)[first].decided_by == "rule"
    sent = {j.item for j in sp.extras.judgments[A3]}
    assert all(rows(sp)[c].status == "dropped" for c in sent if c != first
               and rules[c].status == "kept")
    # protect_top_k 5: the first five stay whatever the model says
    cfg, services = setup(kb_engine, server, weak_relative=1.0, protect_top_k=5)
    server.responder, _ = judged_by(sp_reranked, lambda rank: 0.0)
    sp = controller.run_stage(sp_reranked, A3, cfg, services)
    for r in sp_reranked.view("reranked")[:5]:
        assert rows(sp)[r.chunk_id].status == rules[r.chunk_id].status


def test_a_confident_model_rescues_a_candidate_the_rules_drop(kb_engine, sp_reranked, rules,
                                                                server):
    # a tighter floor makes the rules drop some of the first candidates as off-topic
    cfg, services = setup(kb_engine, server, relative_min=0.95)
    sent = sp_reranked.view("reranked")[:cfg.agents.A3_NLI_Gate.llm_max_candidates]
    plain = controller.run_stage(sp_reranked, A3, with_agent(cfg, A3, mode="deterministic"),
                                 services)
    off = [i for i, r in enumerate(sent, start=1)
           if rows(plain)[r.chunk_id].reason.startswith("off-topic")]
    assert len(off) >= 2
    rescue, doubt = off[0], off[1]
    server.responder, _ = judged_by(sp_reranked, lambda rank: {rescue: 0.97, doubt: 0.6}.get(rank, 0.5))
    sp = controller.run_stage(sp_reranked, A3, cfg, services)
    saved, kept_out = rows(sp)[sent[rescue - 1].chunk_id], rows(sp)[sent[doubt - 1].chunk_id]
    assert saved.status == "kept" and saved.decided_by == "llm" and saved.rule_status == "dropped"
    assert saved.reason.startswith("rescued by the model: P(relevant) 0.97 ≥ llm_rescue_min 0.9")
    assert kept_out.status == "dropped" and kept_out.decided_by == "rule"
    assert "not sure enough to rescue it (P(relevant) 0.60 < llm_rescue_min 0.9)" in kept_out.reason
    assert [j.item for j in sp.extras.judgments[A3] if j.changed] == [saved.chunk_id]
    # the rules' floor for the candidates the model did not see is the rules' own
    for r in sp_reranked.view("reranked")[len(sent):]:
        assert rows(sp)[r.chunk_id].status == rows(plain)[r.chunk_id].status


def test_list_mode_never_empties_the_selection(kb_engine, sp_reranked, rules, server):
    cfg, services = setup(kb_engine, server, judge="list", protect_top_k=0, weak_relative=1.0)
    server.script(Reply.json({"drop": [{"n": n, "tag": "duplicate"} for n in range(1, 11)]}))
    sp = controller.run_stage(sp_reranked, A3, cfg, services)
    assert sp.extras.agent_modes[A3].mode == "llm"
    assert sp.final_selection_ids and sp.final_selection_ids[0] == sp_reranked.view("reranked")[0].chunk_id


def test_without_logprobs_auto_judges_by_list(kb_engine, sp_reranked):
    def respond(body):  # a server that ignores logprobs: a plain "Yes", then the list
        return Reply.text("Yes") if body.get("max_tokens") == 1 else Reply.json({"drop": []})
    with FakeOpenAI(ignore_logprobs=True, responder=respond) as server:
        _without_logprobs(kb_engine, sp_reranked, server, respond)


def _without_logprobs(kb_engine, sp_reranked, server, respond):
    cfg, services = setup(kb_engine, server)
    sp = controller.run_stage(sp_reranked, A3, cfg, services)
    assert sp.extras.agent_modes[A3].mode == "llm" and sp.extras.a3.judge == "list"
    assert "without token log-probabilities" in sp.extras.a3.judge_note
    assert server.calls == 2 and services.llm.offers_logprobs() is False
    # asked no more: the next run goes straight to the list
    server.reset()
    server.responder = respond
    controller.run_stage(sp_reranked, A3, cfg, services)
    assert server.calls == 1 and "logprobs" not in server.chat_requests[0]


def test_a_server_that_refuses_logprobs_gets_the_list(kb_engine, sp_reranked):
    with FakeOpenAI(refuse_logprobs=True, responder=lambda body: Reply.json({"drop": []})) as srv:
        cfg, services = setup(kb_engine, srv)
        sp = controller.run_stage(sp_reranked, A3, cfg, services)
        assert sp.extras.a3.judge == "list" and "refused token log-probabilities" in \
            sp.extras.a3.judge_note and "HTTP 400" in sp.extras.a3.judge_note
        assert [bool(r.get("logprobs")) for r in srv.chat_requests] == [True, False]
        # judge: probability insists: the rules decide, and the mode says why
        cfg, services = setup(kb_engine, srv, judge="probability")
        sp = controller.run_stage(sp_reranked, A3, cfg, services)
        mode = sp.extras.agent_modes[A3]
        assert mode.mode == "deterministic" and mode.fallback and "log-probabilities" in mode.reason


def test_a_list_reply_cut_off_falls_back_to_the_rules(kb_engine, sp_reranked, rules, server):
    cfg, services = setup(kb_engine, server, judge="list")
    server.script(Reply.text('{"drop": [{"n": 1, "tag": "dup', finish_reason="length"))
    sp = controller.run_stage(sp_reranked, A3, cfg, services)
    mode = sp.extras.agent_modes[A3]
    assert mode.mode == "deterministic" and "cut off" in mode.reason
    assert {c: r.status for c, r in rows(sp).items()} == {c: r.status for c, r in rules.items()}


def test_a_judgment_without_yes_or_no_leaves_that_candidate_to_the_rules(
        kb_engine, sp_reranked, rules, server):
    cfg, services = setup(kb_engine, server)
    replies = iter([Reply.judgment(0.9, yes="Maybe", no="Perhaps")] + [Reply.judgment(0.5)] * 20)
    server.responder = lambda body: next(replies)
    sp = controller.run_stage(sp_reranked, A3, cfg, services)
    first = sp_reranked.view("reranked")[0].chunk_id
    assert sp.extras.a3.unjudged == [first] and "p_relevant" not in rows(sp)[first].scores
    assert first not in {j.item for j in sp.extras.judgments[A3]}


def test_the_a3_table_shows_the_rule_beside_what_stood_and_the_thresholds(
        kb_engine, sp_reranked, server):
    from ragstream.interfaces.ui import views

    cfg, services = setup(kb_engine, server, relative_min=0.95)
    server.responder, _ = judged_by(sp_reranked, lambda rank: 0.97 if rank == 5 else 0.5)
    sp = controller.run_stage(sp_reranked, A3, cfg, services)
    table = views.view_rows(sp, "a3")
    assert {"rule", "by", "p_relevant"} <= set(table[0])
    rescued = table[4]
    assert (rescued["rule"], rescued["status"], rescued["by"]) == ("dropped", "kept", "llm")
    assert rescued["p_relevant"] == pytest.approx(0.97)
    assert views.decision_note(sp, "a3") == (
        "LLM mode (P(relevant) from a yes/no token, 10 candidates asked): a candidate is "
        "dropped only when its score is weak (< 0.7 × best) and the model agrees (P ≤ 0.15), "
        "never among the first 3; P ≥ 0.9 rescues one the rules drop. The model changed 1 "
        "decision.")
    # offline: no model, no rule column and no note
    plain = controller.run_stage(sp_reranked, A3, kb_engine.cfg, kb_engine.services)
    assert "rule" not in views.view_rows(plain, "a3")[0]
    assert views.decision_note(plain, "a3") is None


def test_a_model_that_keeps_everything_changes_nothing_it_is_not_sure_of(
        kb_engine, sp_reranked, rules, server):
    cfg, services = setup(kb_engine, server)
    server.responder, _ = judged_by(sp_reranked, lambda rank: 0.75)  # "Yes", not sure enough
    sp = controller.run_stage(sp_reranked, A3, cfg, services)
    assert {c: r.status for c, r in rows(sp).items()} == {c: r.status for c, r in rules.items()}
    assert sp.extras.a3.changed == 0 and all(j.model == "kept" for j in sp.extras.judgments[A3])
