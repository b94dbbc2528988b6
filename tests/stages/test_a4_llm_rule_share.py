"""A4 in LLM mode weighed against its rules, against the scripted OpenAI server on loopback:
the extractive selection keeps ``rule_share`` of the budget, the top chunk's best sentence is
always in, the model's picks follow and give way first to the budget, and every chunk's
decision is recorded with the rule's and the model's verdicts side by side."""

import json

import pytest

from ragstream.backends.tokens import count_tokens
from ragstream.interfaces.ui import views
from ragstream.stages import controller
from ragstream.state.edits import new_edit
from tests.fake_openai import Reply
from tests.llm_support import llm_config, with_llm

PROMPT = "How does the ReRanker choose its backend when no cross-encoder is available?"
#: a budget small enough that the rules' share holds only some of their statements
BUDGET = 300


def with_agent(cfg, name: str, **update):
    agent = getattr(cfg.agents, name).model_copy(update=update)
    return cfg.model_copy(update={"agents": cfg.agents.model_copy(update={name: agent})})


@pytest.fixture(scope="module")
def sp_gated(kb_engine):
    return kb_engine.run(PROMPT, until="A3_NLI_Gate")


@pytest.fixture
def llm_a4(kb_engine, server):
    """A4 in LLM mode; A2 and A3 in their deterministic mode, as ``sp_gated`` ran them."""
    cfg = llm_config(kb_engine.cfg, server)
    for name in ("A2_PromptShaper", "A3_NLI_Gate"):
        cfg = with_agent(cfg, name, mode="deterministic")
    return cfg, with_llm(kb_engine.services, cfg)


def condense(sp, llm_a4, server, facts: list[int], **a4):
    """Run A4 in LLM mode with ``a4`` settings, the model replying ``facts``; the result and
    the sentences it was offered (sentence n is ``offered[n - 1]``)."""
    cfg, services = llm_a4
    server.script(Reply.json({"facts": facts, "open_issues": []}))
    out = controller.run_stage(sp, "A4_Condenser", with_agent(cfg, "A4_Condenser", **a4), services)
    assert out.extras.agent_modes["A4_Condenser"].mode == "llm"
    lines = json.loads(server.chat_requests[-1].messages[-1]["content"])["sentences"]
    return out, [line.split("] ", 1)[1] for line in lines]


def rules_alone(sp, kb_engine, **a4):
    """The deterministic A4 with the same settings: the rules' own selection."""
    cfg = with_agent(kb_engine.cfg, "A4_Condenser", **a4)
    return controller.run_stage(sp, "A4_Condenser", cfg, kb_engine.services)


def texts(sp) -> list[str]:
    return [s.text for s in sp.extras.a4.condensed]


def chunk_of(sp, sentence: str) -> str:
    chunks = sp.chunk_map()
    return next(c for c in sp.final_selection_ids if sentence in " ".join(chunks[c].text.split()))


def row(sp, chunk_id: str):
    return next(r for r in sp.view("a4") if r.chunk_id == chunk_id)


def test_a_model_that_picks_weak_sentences_leaves_the_rules_share_and_the_top_sentence_in(
        sp_gated, llm_a4, server, kb_engine):
    top = sp_gated.final_selection_ids[0]
    rules = rules_alone(sp_gated, kb_engine, budget_tokens=BUDGET)
    extractive = texts(rules)
    assert rules.extras.a4.condensed[0].chunk_ids == [top]  # the rules lead with its best sentence
    sp, offered = condense(sp_gated, llm_a4, server, [12, 11], budget_tokens=BUDGET)
    weak = [offered[11], offered[10]]  # the last two offered: the weakest
    got = texts(sp)
    k = sp.extras.a4.statements_by["rule"]
    assert 2 <= k < len(extractive)
    # kept by rule, each chunk's best first (coverage_first), then by score: the top sentence first
    statements = rules.extras.a4.condensed
    firsts = [st.text for n, st in enumerate(statements)
              if st.chunk_ids[0] not in {o.chunk_ids[0] for o in statements[:n]}]
    assert got[:k] == (firsts + [t for t in extractive if t not in firsts])[:k]
    assert got[0] == extractive[0]
    assert sum(count_tokens(t) for t in got[:k]) <= 0.5 * BUDGET
    assert got[k:] == weak  # then the model's picks, in its order
    assert sp.extras.a4.statements_by == {"rule": k, "llm": 2}
    assert sp.extras.a4.rule_share == 0.5
    assert set(sp.final_selection_ids) == {c for s in sp.extras.a4.condensed for c in s.chunk_ids}
    top_row = row(sp, top)
    assert top_row.decided_by == "rule" and top_row.status == "kept"
    assert top_row.reason.startswith("kept by rule: within rule_share 0.5 of the 300-token budget")
    for sentence in weak:  # chunks the rules dropped at this budget: only the model brought them in
        cid = chunk_of(sp, sentence)
        assert cid not in rules.final_selection_ids
        assert (row(sp, cid).decided_by, row(sp, cid).reason) == ("llm", "chosen by the model")
    # the page says it beside the threshold (the agents' modes table), in LLM mode only
    note = f"LLM mode: {k} statements kept by rule (rule_share 0.5 of 300 tokens), 2 chosen by the model"
    assert views.a4_note(sp) == note
    assert next(r for r in views.mode_rows(sp) if r["component"] == "A4 Condenser")["why"].endswith(note)
    assert views.a4_note(rules) is None


def test_rule_share_0_is_the_models_choice_plus_the_top_chunks_best_sentence(
        sp_gated, llm_a4, server, kb_engine):
    top_best = rules_alone(sp_gated, kb_engine, budget_tokens=BUDGET).extras.a4.condensed[0]
    sp, offered = condense(sp_gated, llm_a4, server, [12, 11], budget_tokens=BUDGET, rule_share=0.0)
    assert top_best.text == offered[0]
    assert texts(sp) == [top_best.text, offered[11], offered[10]]
    assert sp.extras.a4.statements_by == {"rule": 1, "llm": 2}
    top_row = row(sp, top_best.chunk_ids[0])
    assert top_row.decided_by == "rule"
    assert top_row.reason.startswith("the top chunk: its best sentence is always in")
    # when the model chose it, it stays where the model put it
    sp, offered = condense(sp_gated, llm_a4, server, [12, 1], budget_tokens=BUDGET, rule_share=0.0)
    assert texts(sp) == [offered[11], top_best.text]


def test_rule_share_1_is_the_extractive_statements(sp_gated, llm_a4, server, kb_engine):
    sp, _ = condense(sp_gated, llm_a4, server, [12, 11], rule_share=1.0)
    rules = rules_alone(sp_gated, kb_engine)

    def facts(state):
        return [(s.text, s.chunk_ids, s.span) for s in state.extras.a4.condensed]

    assert facts(sp) == facts(rules)
    assert sp.final_selection_ids == rules.final_selection_ids
    assert sp.extras.a4.statements_by == {"rule": len(facts(rules)), "llm": 0}
    assert count_tokens(sp.S_CTX_MD) <= sp.extras.a4.budget_tokens


def test_judgments_record_the_rule_and_the_model_side_by_side(sp_gated, llm_a4, server, kb_engine):
    rules = rules_alone(sp_gated, kb_engine, budget_tokens=BUDGET)
    sp, offered = condense(sp_gated, llm_a4, server, [12, 11], budget_tokens=BUDGET)
    judgments = sp.extras.judgments["A4_Condenser"]
    assert [j.item for j in judgments] == sp_gated.final_selection_ids  # one per candidate
    sent = {chunk_of(sp_gated, s) for s in offered}
    chosen = {chunk_of(sp_gated, offered[11]), chunk_of(sp_gated, offered[10])}
    for j in judgments:
        assert j.rule == ("kept" if j.item in rules.final_selection_ids else "dropped")
        assert j.model == (None if j.item not in sent else "kept" if j.item in chosen else "dropped")
        assert j.final == ("kept" if j.item in sp.final_selection_ids else "dropped")
        assert j.decided_by == ("rule" if j.final == j.rule else "llm")
        assert j.why == row(sp, j.item).reason
    by = {j.item: j for j in judgments}
    top = by[sp_gated.final_selection_ids[0]]
    assert (top.rule, top.final, top.decided_by, top.changed) == ("kept", "kept", "rule", False)
    brought = [j for j in judgments if j.changed and j.final == "kept"]
    assert {j.item for j in brought} == chosen  # the model brought in what the rules dropped
    assert all(j.rule == "dropped" and j.model == "kept" for j in brought)
    # the rules' share holds a sentence of every chunk they kept (coverage first): the model's
    # word cannot lose one, though its sentences beyond the share are left out
    assert all(j.final == "kept" for j in judgments if j.rule == "kept")
    assert sp.extras.a4.statements_by["rule"] < len(texts(rules))
    assert any(not j.changed and j.final == "dropped" for j in judgments)
    saved = sp.model_dump(mode="json")["extras"]["judgments"]["A4_Condenser"]
    assert [j["decided_by"] for j in saved] == [j.decided_by for j in judgments]


def test_the_budget_is_trimmed_from_the_models_end(sp_gated, llm_a4, server):
    base, offered = condense(sp_gated, llm_a4, server, [], budget_tokens=BUDGET)
    ruled = texts(base)  # the model chose nothing: the rules' share alone
    assert ruled and base.extras.a4.statements_by["llm"] == 0
    everything = list(range(len(offered), 0, -1))  # every sentence, the weakest first
    sp, _ = condense(sp_gated, llm_a4, server, everything, budget_tokens=BUDGET)
    got = texts(sp)
    assert got[:len(ruled)] == ruled  # the rules' part is never cut for the model's
    wanted = [offered[n - 1] for n in everything if offered[n - 1] not in ruled]
    picked = got[len(ruled):]
    assert picked and picked == wanted[:len(picked)] and len(picked) < len(wanted)
    assert sp.extras.a4.trimmed_for_budget == len(wanted) - len(picked)
    assert sum(count_tokens(t) for t in picked) <= 0.5 * BUDGET
    assert count_tokens(sp.S_CTX_MD) <= BUDGET


def test_a_pinned_chunk_leads_before_the_rules_share(kb_engine, sp_gated, llm_a4, server):
    pinned = sp_gated.final_selection_ids[-1]
    sp = controller.record_edit(sp_gated, new_edit(sp_gated, "pin", pinned, "pin"))
    rules = controller.run_all(sp, kb_engine.cfg, kb_engine.services, until="A4_Condenser")
    cfg, services = llm_a4
    server.script(Reply.json({"facts": [1], "open_issues": []}))
    sp = controller.run_all(sp, cfg, services, until="A4_Condenser")
    assert sp.extras.agent_modes["A4_Condenser"].mode == "llm"
    assert sp.final_selection_ids[0] == pinned
    statements = sp.extras.a4.condensed
    assert statements[0].chunk_ids == [pinned]  # the person's chunk first
    k = sp.extras.a4.statements_by["rule"]
    assert sp.extras.a4.statements_by["you"] == 1 and k >= 2
    theirs = rules.extras.a4.condensed
    firsts = [st.text for n, st in enumerate(theirs)  # each chunk's best first (coverage_first)
              if st.chunk_ids[0] not in {o.chunk_ids[0] for o in theirs[:n]}]
    ordered = [t for t in firsts + [st.text for st in theirs if st.text not in firsts]
               if t != statements[0].text]
    assert texts(sp)[1:1 + k] == ordered[:k]  # then the rules' share
    assert (row(sp, pinned).decided_by, row(sp, pinned).reason) == ("you", "pinned by you")
    mine = next(j for j in sp.extras.judgments["A4_Condenser"] if j.item == pinned)
    assert (mine.final, mine.decided_by, mine.changed) == ("kept", "you", False)
