"""Replay an agent's model call with edited messages (``ragstream.workbench.replay``, ``Engine.replay``),
against the scripted OpenAI server on loopback: the call goes out as the agent makes it, the
decision is the stage's own with the new reply, and applying it records the person's edits,
which put the stage and the later ones out of date and hold after they run again."""

import json

import pytest

from ragstream.stages import controller
from ragstream.state.edits import new_edit
from ragstream.state.records import Edit
from ragstream.workbench.engine import Engine
from ragstream.workbench.replay import NEEDS_ENDPOINT, ReplayError
from tests.fake_openai import Reply
from tests.llm_support import llm_config, with_llm
from tests.stages.test_agents_llm_a3_a4 import PROMPT, agents_after, with_agent

A2, A3 = "A2_PromptShaper", "A3_NLI_Gate"
#: a sentence the edited yes/no message carries; the server is surer when it reads it
HINT = "Note: this passage is exactly what the question asks about."


@pytest.fixture(scope="module")
def sp_reranked(kb_engine):
    return kb_engine.run(PROMPT, until="ReRanker")


@pytest.fixture(scope="module")
def sp_prepared(kb_engine):
    return kb_engine.run(PROMPT, until="A0_PreProcessing")


def engine_for(kb_engine, server, stage: str = A3, **a3):
    """An engine whose agents from ``stage`` on call the scripted server (those before it run
    by rule, so the offline state stays current), A3 configured with ``a3``."""
    cfg = llm_config(kb_engine.cfg, server)
    if stage == A3:
        cfg = with_agent(agents_after(cfg, A3), A3, **a3)
    return Engine(cfg, with_llm(kb_engine.services, cfg))


def rows(sp, view: str = "a3"):
    return {r.chunk_id: r for r in sp.view(view)}


def texts(call) -> list[str]:
    return [m.content for m in call.messages]


def test_a_yes_no_call_sent_again_with_an_edited_message_pins_the_chunk_it_rescues(
        kb_engine, sp_reranked, server):
    # a tight floor: the rules drop some of the first candidates as off-topic; P 0.5 rescues none
    engine = engine_for(kb_engine, server, relative_min=0.95)
    server.responder = lambda body: Reply.judgment(
        0.97 if HINT in body["messages"][-1]["content"] else 0.5)
    sp = controller.run_stage(sp_reranked, A3, engine.cfg, engine.services)
    assert sp.extras.a3.judge == "probability"
    calls = sp.extras.llm_calls[A3]
    index = next(i for i, c in enumerate(calls)
                 if rows(sp)[c.items[0]].reason.startswith("off-topic"))
    cid = calls[index].items[0]
    assert rows(sp)[cid].status == "dropped"
    system, user = texts(calls[index])
    edited = f"{HINT}\n\n{user}"
    assert edited != user

    before = server.calls
    rep = engine.replay(sp, A3, index, [system, edited])
    assert server.calls == before + 1  # one call, made as the agent makes it
    request = server.chat_requests[-1]
    assert request.messages == [{"role": "system", "content": system},
                                {"role": "user", "content": edited}]
    assert request["max_tokens"] == 1 and request["logprobs"] is True
    assert rep.ok and rep.judgment and rep.call.items == [cid]
    assert rep.call.probabilities["yes"] == pytest.approx(0.97)
    assert rep.call.raw == "Yes"

    decision = engine.replay_decision(sp, rep)
    assert server.calls == before + 1  # deciding sends nothing
    assert [(p.kind, p.target) for p in decision.proposals] == [("pin", cid)]
    assert decision.lines[0] == f"A3: keep {cid} (P(relevant) 0.97 ≥ llm_rescue_min 0.9; now dropped)"

    applied = engine.apply_replay(sp, rep)
    assert server.calls == before + 1
    (edit,) = applied.edits
    assert (edit.kind, edit.target, edit.stage) == ("pin", cid, "Retrieval")
    assert edit.before.startswith("A3: rank")
    # the stage it acts on (Retrieval, for a pin) and every later one, A3 among them, went out of
    # date: their results are discarded until they run again, and the pass remembers where it was
    assert controller.position(applied) < controller.STAGE_NAMES.index(A3)
    assert "a3" not in applied.views_by_stage and A3 not in applied.computed_from
    assert applied.resume_to == A3
    assert json.loads(applied.to_json())["edits"][0]["kind"] == "pin"  # exported with the state

    again = engine.resume(applied)  # the model is asked its own question again (P 0.5)
    row = rows(again)[cid]
    assert row.status == "kept" and row.decided_by == "you"
    assert row.reason.startswith("pinned by you (the gate would drop it: off-topic")
    assert cid in again.final_selection_ids and engine.stale(again) is None


def test_a_list_reply_that_drops_a_kept_chunk_becomes_a_drop_the_gate_applies(
        kb_engine, sp_reranked, server):
    # every kept candidate but the best is weak and none is protected: a listed one goes
    engine = engine_for(kb_engine, server, judge="list", weak_relative=1.0, protect_top_k=0)
    server.script(Reply.json({"drop": []}))
    sp = controller.run_stage(sp_reranked, A3, engine.cfg, engine.services)
    (call,) = sp.extras.llm_calls[A3]
    kept = [n for n, c in enumerate(call.items, start=1) if rows(sp)[c].status == "kept"]
    n = kept[1]  # a kept candidate other than the best
    cid = call.items[n - 1]
    system, user = texts(call)
    payload = json.loads(user)
    payload["prompt"] += f" Drop candidate {n}: it does not help."
    edited = json.dumps(payload)
    server.responder = lambda body: Reply.json(
        {"drop": [{"n": n, "tag": "off-topic"}]} if "Drop candidate" in body["messages"][-1]["content"]
        else {"drop": []})

    rep = engine.replay(sp, A3, 0, [system, edited])
    request = server.chat_requests[-1]
    assert request.messages[-1]["content"] == edited and not request.get("logprobs")
    schema = json.dumps(request["response_format"])  # the stage's schema, bounded for this call
    assert f'"maximum": {len(call.items)}' in schema and '"off-topic"' in schema
    assert rep.ok and not rep.judgment and rep.call.parsed == {"drop": [{"n": n, "tag": "off-topic"}]}

    # weighed under other settings the gate's result is out of date: no decision on it
    other = engine.replay_decision(sp, rep, with_agent(engine.cfg, A3, relative_min=0.9))
    assert not other.proposals and other.why_not.startswith("A3_NLI_Gate is out of date")
    decision = engine.replay_decision(sp, rep)
    assert [(p.kind, p.target) for p in decision.proposals] == [("drop", cid)]
    assert decision.lines[0].startswith(f"A3: drop {cid} (off-topic: the model agrees it is weak: "
                                        f"listed it to drop (off-topic)")
    assert decision.lines[0].endswith("; now kept)")

    applied = engine.apply_replay(sp, rep)
    (edit,) = applied.edits
    assert (edit.kind, edit.target, edit.stage) == ("drop", cid, A3)
    assert edit.describe().startswith(f"drop {cid} (was A3: rank")
    # A3 and the later stages are discarded, the ReRanker's result stays
    assert controller.position(applied) == controller.STAGE_NAMES.index("ReRanker")
    assert applied.resume_to == A3

    again = engine.resume(applied)  # the model's own question: it lists nothing now
    row = rows(again)[cid]
    assert row.status == "dropped" and row.decided_by == "you"
    assert row.reason.startswith("dropped by you (the gate would keep it")
    assert cid not in again.final_selection_ids
    (outcome,) = again.extras.edit_outcomes[A3]
    assert outcome.applied and outcome.note == "dropped by the gate, which would have kept it"


def test_a_drop_and_a_pin_of_one_chunk_share_its_slot(sp_reranked):
    cid = sp_reranked.view("reranked")[0].chunk_id
    pin = new_edit(sp_reranked, "pin", cid, "pin")
    sp = controller.record_edit(sp_reranked, pin)
    drop = new_edit(sp, "drop", cid, "drop")
    assert drop.stage == A3 and drop.slot == pin.slot == ("chunk", cid)
    sp = controller.record_edit(sp, drop)
    assert [e.kind for e in sp.edits] == ["drop"]
    sp = controller.record_edit(sp, new_edit(sp, "pin", cid, "pin"))
    assert [e.kind for e in sp.edits] == ["pin"]
    with pytest.raises(ValueError, match="acts on A3_NLI_Gate"):
        Edit(id=1, kind="drop", stage="Retrieval", target=cid)


def test_an_a2_reply_sent_again_sets_the_fields_it_would_change(kb_engine, sp_prepared, server):
    engine = engine_for(kb_engine, server, stage=A2)
    fields = engine.cfg.agents.A2_PromptShaper.fields
    first = {name: field.values[0] for name, field in fields.items()} | {"confidence": "low"}
    tone = fields["tone"].values[1]
    server.responder = lambda body: Reply.json(
        first | {"tone": tone} if "answer it formally" in body["messages"][-1]["content"] else first)
    sp = controller.run_stage(sp_prepared, A2, engine.cfg, engine.services)
    assert sp.extras.agent_modes[A2].mode == "llm" and sp.body["tone"] == first["tone"]
    (call,) = sp.extras.llm_calls[A2]
    system, user = texts(call)
    payload = json.loads(user)
    payload["prompt"] += " Please answer it formally."

    rep = engine.replay(sp, A2, 0, [system, json.dumps(payload)])
    assert rep.ok and rep.call.parsed["tone"] == tone
    assert server.chat_requests[-1]["response_format"] == server.chat_requests[-2]["response_format"]
    decision = engine.replay_decision(sp, rep)
    assert [(p.kind, p.target, p.after) for p in decision.proposals] == [("field", "tone", tone)]
    assert decision.lines[0].startswith(f"A2: tone {first['tone']} → {tone}")
    assert f"A2: system stays {first['system']}" in " ".join(decision.lines)

    applied = engine.apply_replay(sp, rep)
    (edit,) = applied.edits
    assert (edit.kind, edit.target, edit.after, edit.stage) == ("field", "tone", tone, A2)
    assert controller.position(applied) == 0 and applied.resume_to == A2
    again = engine.resume(applied)
    assert again.body["tone"] == tone and again.extras.body_sources["tone"] == "you"


def test_an_endpoint_error_is_shown_and_nothing_is_applied(kb_engine, sp_prepared, server):
    engine = engine_for(kb_engine, server, stage=A2)
    fields = engine.cfg.agents.A2_PromptShaper.fields
    server.responder = lambda body: Reply.json(
        {name: field.values[0] for name, field in fields.items()} | {"confidence": "low"})
    sp = controller.run_stage(sp_prepared, A2, engine.cfg, engine.services)
    server.responder = None
    server.script(Reply.error(400, "the model is not loaded"))
    rep = engine.replay(sp, A2, 0, texts(sp.extras.llm_calls[A2][0]))
    assert not rep.ok and rep.call.parsed is None
    assert "HTTP 400" in rep.call.error and "the model is not loaded" in rep.call.error
    decision = engine.replay_decision(sp, rep)
    assert not decision.proposals and decision.why_not.startswith("The call gave no valid reply")
    with pytest.raises(ReplayError, match="no valid reply"):
        engine.apply_replay(sp, rep)
    assert sp.edits == [] and sp.views_by_stage == sp_prepared.views_by_stage


def test_replay_refuses_without_an_endpoint_or_a_call(kb_engine, sp_reranked, server):
    with pytest.raises(ReplayError) as err:
        kb_engine.replay(sp_reranked, A3, 0)  # the offline engine
    assert str(err.value) == NEEDS_ENDPOINT and "`llm.base_url`" in str(err.value)
    engine = engine_for(kb_engine, server)
    with pytest.raises(ReplayError, match="A3_NLI_Gate has no call 1 in this pass"):
        engine.replay(sp_reranked, A3, 0)


def statement_keys(sp) -> list[str]:
    from ragstream.state.edits import statement_key

    return [statement_key(s) for s in sp.extras.a4.condensed]


def test_an_a4_reply_that_chooses_fewer_sentences_removes_statements(kb_engine, server):
    A4 = "A4_Condenser"
    # rule_share 0: the model's choice, with the top chunk's best sentence
    cfg = with_agent(agents_after(llm_config(kb_engine.cfg, server), A4), A4, rule_share=0.0)
    engine = Engine(cfg, with_llm(kb_engine.services, cfg))
    sp_gated = kb_engine.run(PROMPT, until=A3)

    def every(body):  # every sentence offered helps, in the order offered
        offered = json.loads(body["messages"][-1]["content"])["sentences"]
        return Reply.json({"facts": list(range(1, len(offered) + 1)), "open_issues": []})

    def first_only(body):
        return Reply.json({"facts": [1], "open_issues": []})

    server.responder = every
    sp = controller.run_stage(sp_gated, A4, cfg, engine.services)
    assert sp.extras.agent_modes[A4].mode == "llm"
    (call,) = sp.extras.llm_calls[A4]
    # the same reply again: the stage would decide as it did
    same = engine.replay_decision(sp, engine.replay(sp, A4, 0, texts(call)))
    assert not same.proposals and same.lines == ["A4: the condensed context would stay as it is"]

    server.responder = first_only
    expected = controller.run_stage(sp_gated, A4, cfg, engine.services)  # A4 with that reply
    assert statement_keys(expected) != statement_keys(sp)
    rep = engine.replay(sp, A4, 0, texts(call))
    assert rep.call.parsed == {"facts": [1], "open_issues": []}
    decision = engine.replay_decision(sp, rep)
    kinds = {p.kind for p in decision.proposals}
    assert "statement_remove" in kinds and kinds <= {"statement_remove", "statement_move"}
    assert not any("would add" in line for line in decision.lines)
    assert all(line.startswith("A4: ") for line in decision.lines)

    applied = engine.apply_replay(sp, rep)
    assert {e.kind for e in applied.edits} == kinds and {e.stage for e in applied.edits} == {A4}
    assert controller.position(applied) == controller.STAGE_NAMES.index(A3)
    server.responder = every  # re-run: the model says what it said first; the edits hold
    again = engine.resume(applied)
    assert statement_keys(again) == statement_keys(expected)
    assert all(o.applied for o in again.extras.edit_outcomes[A4])


def test_an_a5_reply_sent_again_adds_and_removes_hard_rules(kb_engine, server):
    A5 = "A5_Format_Enforcer"
    cfg = llm_config(kb_engine.cfg, server)
    for name in ("A2_PromptShaper", A3, "A4_Condenser"):
        cfg = with_agent(cfg, name, mode="deterministic")
    engine = Engine(cfg, with_llm(kb_engine.services, cfg))
    sp_condensed = kb_engine.run(f"Task: {PROMPT}\nFormat: bullet points", until="A4_Condenser")

    def rules(body):
        shorter = "in at most three bullets" in body["messages"][-1]["content"]
        return Reply.json({"kind": "bullets", "hard_rules": [
            "Answer in at most three bullets." if shorter else "Be brief."]})

    server.responder = rules
    sp = controller.run_stage(sp_condensed, A5, cfg, engine.services)
    assert sp.extras.agent_modes[A5].mode == "llm"
    assert "Be brief." in sp.extras.format_enforcer.hard_rules
    (call,) = sp.extras.llm_calls[A5]
    system, user = texts(call)
    payload = json.loads(user)
    payload["format"] = "bullet points, in at most three bullets"
    rep = engine.replay(sp, A5, 0, [system, json.dumps(payload)])
    decision = engine.replay_decision(sp, rep)
    assert [(p.kind, p.target) for p in decision.proposals] == [
        ("rule_remove", "Be brief."), ("rule_add", "Answer in at most three bullets.")]
    assert decision.lines[:2] == ["A5: remove rule 'Be brief.'",
                                  "A5: add rule 'Answer in at most three bullets.'"]
    applied = engine.apply_replay(sp, rep)
    assert [e.kind for e in applied.edits] == ["rule_remove", "rule_add"]
    again = engine.resume(applied)  # the model says "Be brief." again; the edits hold
    hard = again.extras.format_enforcer.hard_rules
    assert "Be brief." not in hard and "Answer in at most three bullets." in hard
