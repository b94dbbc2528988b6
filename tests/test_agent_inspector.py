"""The agent inspector's records (``sp.extras.llm_calls``) on real pipeline runs against the
scripted OpenAI server on 127.0.0.1: what each agent sent, what the server returned, the
parsed result and the figures; a repair round, a failing server, re-runs, discards, the JSON
export (also the CLI's ``run --json``) and the API key, which never appears."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ragstream.agents.trace import clip, cut_marker
from ragstream.interfaces.ui import inspector
from ragstream.interfaces.ui.grids import TABLE_WIDTH
from ragstream.stages import controller
from ragstream.state.super_prompt import SuperPrompt
from tests.conftest import ROOT
from tests.fake_openai import FakeOpenAI, Reply, count_tokens
from tests.llm_support import every_agent, llm_config, with_llm

PROMPT = "Task: How do I start a Chroma server?\nFormat: bullet points"
AGENTS = ["A2_PromptShaper", "A3_NLI_Gate", "A4_Condenser", "A5_Format_Enforcer"]
KEY = "sk-inspector-secret-24681357"
KEY_ENV = "RAGSTREAM_TEST_INSPECTOR_KEY"  # llm.api_key_env names it


def agent_of(body: dict) -> str:
    system = body["messages"][0]["content"]
    return next((a for a in AGENTS if a in system), "")


class Recorder:
    """The every-agent responder, noting what it returned to each agent."""

    def __init__(self) -> None:
        self.route = every_agent({"reply": Reply.text("unused")})
        self.replies: list[tuple[str, str]] = []

    def __call__(self, body: dict) -> Reply:
        reply = self.route(body)
        self.replies.append((agent_of(body), reply.content))
        return reply


@pytest.fixture(scope="module")
def server():
    with FakeOpenAI(models=["test-model"]) as s:
        yield s


@pytest.fixture
def recorder(server):
    server.reset()
    server.responder = rec = Recorder()
    return rec


@pytest.fixture(scope="module")
def llm(kb_engine, server):
    cfg = llm_config(kb_engine.cfg, server, structured_output="json_object", api_key_env=KEY_ENV,
                     max_attempts=1)  # A3 in one list call (its yes/no calls: test_a3_weighed)
    cfg = cfg.with_overrides({"agents.A3_NLI_Gate.judge": "list"})
    return cfg, with_llm(kb_engine.services, cfg, environ={KEY_ENV: KEY})


def run_all(llm) -> SuperPrompt:
    cfg, services = llm
    return controller.run_all(controller.new_prompt(PROMPT), cfg, services)


def requests_of(server, agent: str) -> list:
    return [r for r in server.chat_requests if agent_of(r.body) == agent]


def sent(call) -> list[dict[str, str]]:
    return [{"role": m.role, "content": m.content} for m in call.messages]


def test_each_agent_records_what_it_sent_and_what_the_server_returned(llm, server, recorder):
    sp = run_all(llm)
    assert inspector.inspected_agents(sp) == AGENTS
    columns = inspector.overview_columns()
    assert list(columns) == list(inspector.overview_rows(sp)[0])
    assert sum(c["width"] for c in columns.values()) == TABLE_WIDTH
    for agent in AGENTS:
        (req,) = requests_of(server, agent)
        (call,) = sp.extras.llm_calls[agent]
        # the messages as the server received them, the reply as it sent it
        assert sent(call) == req.messages and [m.role for m in call.messages] == ["system", "user"]
        assert all(m.cut is None for m in call.messages) and call.raw_cut is None
        (reply,) = [content for a, content in recorder.replies if a == agent]
        assert call.raw == reply and call.error is None
        # the parsed result is the validated reply, as JSON
        assert call.parsed is not None
        for key, value in json.loads(reply).items():
            assert call.parsed[key] == value, (agent, key)
        # the figures are llm_usage's, counted as the server counted them
        usage = sp.extras.llm_usage[agent]
        assert usage.prompt_tokens == sum(count_tokens(m["content"]) for m in req.messages)
        assert usage.completion_tokens == count_tokens(reply)
        assert usage.calls == 1 and usage.first_try_valid and not usage.repaired
        assert usage.seconds > 0 and usage.finish_reason == "stop" and usage.form == "json_object"
        assert inspector.fallback_reason(sp, agent) == ""
    # A2's model answered "wizard" (out of its enum): the parsed result keeps the answer, the
    # body the clamped value
    assert sp.extras.llm_calls["A2_PromptShaper"][0].parsed["system"] == "wizard"
    assert sp.body["system"] == "assistant"
    assert sp.extras.llm_calls["A3_NLI_Gate"][0].parsed["drop"][0] == {"n": 5, "tag": "off-topic"}
    # A0 did not call the model (semantic fallback off): it has no entry
    assert "A0_PreProcessing" not in sp.extras.llm_calls


def test_an_invalid_first_reply_is_recorded_with_its_repair_round(llm, server, recorder):
    sp = run_all(llm)
    invalid = "Sure! The audience is developers and the tone concise."
    server.script(Reply.text(invalid))  # A2's first reply; the repair goes to the responder
    again = controller.run_stage(sp, "A2_PromptShaper", *llm)
    first, repair = requests_of(server, "A2_PromptShaper")[-2:]
    (call,) = again.extras.llm_calls["A2_PromptShaper"]
    assert sent(call) == repair.messages != first.messages
    assert [m.role for m in call.messages] == ["system", "user", "assistant", "user"]
    assert call.messages[2].content == invalid
    assert "That reply is not valid: not JSON" in call.messages[3].content
    assert call.raw == recorder.replies[-1][1] and call.parsed["system"] == "wizard"
    usage = again.extras.llm_usage["A2_PromptShaper"]
    assert usage.first_try_valid is False and usage.repaired is True and usage.calls == 2
    assert usage.prompt_tokens == sum(count_tokens(m["content"])
                                      for r in (first, repair) for m in r.messages)
    # re-running A2 replaced its record and discarded the later stages' ones
    assert list(again.extras.llm_calls) == ["A2_PromptShaper"]
    assert len(sp.extras.llm_calls["A2_PromptShaper"][0].messages) == 2  # the old state is untouched
    titles = [m.title for m in inspector.call_views(again, "A2_PromptShaper")[0].messages]
    assert "the model's first reply, sent back" in titles[2] and "the repair request" in titles[3]


def test_a_failing_server_leaves_the_error_and_the_fallback_reason(llm, server, recorder):
    sp = run_all(llm)
    server.script(Reply.error(503, "overloaded"))
    failed = controller.run_stage(sp, "A3_NLI_Gate", *llm)
    (call,) = failed.extras.llm_calls["A3_NLI_Gate"]
    assert "HTTP 503" in call.error and call.raw == "" and call.parsed is None
    assert sent(call) == requests_of(server, "A3_NLI_Gate")[-1].messages
    mode = failed.extras.agent_modes["A3_NLI_Gate"]
    assert mode.fallback and "HTTP 503" in mode.reason
    assert inspector.fallback_reason(failed, "A3_NLI_Gate") == mode.reason
    row = next(r for r in inspector.overview_rows(failed) if r["agent"] == "A3 Gate")
    assert row["ran as"] == "rules (LLM failed)" and row["fallback reason"] == mode.reason
    assert row["first reply valid"] == "no" and row["tokens out"] == 0
    # the later stages ran after the fallback; A4 in LLM mode again
    rest = controller.run_all(failed, *llm)
    assert inspector.inspected_agents(rest) == AGENTS
    # a re-run that succeeds replaces the failed call's record
    fixed = controller.run_stage(rest, "A3_NLI_Gate", *llm)
    (call,) = fixed.extras.llm_calls["A3_NLI_Gate"]
    assert call.error is None and call.parsed is not None and not fixed.extras.agent_modes[
        "A3_NLI_Gate"].fallback
    assert inspector.fallback_reason(fixed, "A3_NLI_Gate") == ""


def test_a_fallback_before_any_call_is_inspectable_without_a_record(kb_engine, server, recorder):
    cfg = llm_config(kb_engine.cfg, server, structured_output="json_object",
                     run_budget_s=0.4)  # spent before A2 asks
    sp = controller.run_all(controller.new_prompt(PROMPT), cfg, with_llm(kb_engine.services, cfg),
                            until="A2_PromptShaper")
    assert not server.chat_requests and not sp.extras.llm_calls
    assert inspector.inspected_agents(sp) == ["A2_PromptShaper"]
    assert "no request was sent" in inspector.summary_line(sp, "A2_PromptShaper")
    assert "llm.run_budget_s" in inspector.fallback_reason(sp, "A2_PromptShaper")
    assert inspector.call_views(sp, "A2_PromptShaper") == []


def test_discarding_a_stage_removes_its_record(llm, recorder):
    sp = run_all(llm)
    controller.discard_from(sp, controller.STAGE_NAMES.index("A3_NLI_Gate"))
    assert list(sp.extras.llm_calls) == ["A2_PromptShaper"]
    assert inspector.inspected_agents(sp) == ["A2_PromptShaper"]
    assert inspector.pick(sp, "A4_Condenser") == "A2_PromptShaper"
    controller.discard_from(sp, 0)
    assert not sp.extras.llm_calls and "llm_calls" not in json.loads(sp.to_json())["extras"]


def test_the_json_export_holds_the_records_and_reads_back(llm, recorder):
    sp = run_all(llm)
    data = json.loads(sp.to_json())["extras"]["llm_calls"]
    assert list(data) == AGENTS
    a4 = data["A4_Condenser"][0]
    assert set(a4) == {"messages", "raw", "parsed", "items"}  # nothing cut, no error: left out
    assert a4["raw"] == sp.extras.llm_calls["A4_Condenser"][0].raw
    assert [m["role"] for m in a4["messages"]] == ["system", "user"]
    assert SuperPrompt.from_json(sp.to_json()).extras.llm_calls == sp.extras.llm_calls


def test_long_texts_are_cut_in_the_middle_and_say_so(kb_engine, server, recorder):
    cfg = llm_config(kb_engine.cfg, server, structured_output="json_object", inspect_chars=400)
    cfg = cfg.with_overrides({"agents.A3_NLI_Gate.judge": "list"})
    sp = controller.run_all(controller.new_prompt(PROMPT), cfg, with_llm(kb_engine.services, cfg),
                            until="A3_NLI_Gate")
    (req,) = requests_of(server, "A3_NLI_Gate")
    (call,) = sp.extras.llm_calls["A3_NLI_Gate"]
    for message, whole in zip(call.messages, req.messages):
        text = whole["content"]
        assert len(text) > 400 and message.cut == len(text) - 400
        assert message.content == text[:300] + cut_marker(message.cut) + text[-100:]
    view = inspector.call_views(sp, "A3_NLI_Gate")[0].messages[1]
    assert f"{len(req.messages[1]['content']):,} characters, {call.messages[1].cut:,} cut" in view.title
    assert view.language == "text"  # a cut JSON payload is shown as it is kept
    assert clip("short", 400) == ("short", 0)


def test_the_api_key_appears_nowhere_even_when_the_server_echoes_it(kb_engine, server):
    """The key goes to the server in the Authorization header; a server that puts it into a
    reply (A2's invalid first one, A4's two invalid ones) has it replaced by ***."""
    server.reset()
    route = every_agent({"reply": Reply.text("unused")})
    a4_tries: list[int] = []

    def echo(body: dict) -> Reply:
        header = server.last_request.authorization
        if agent_of(body) == "A4_Condenser":
            a4_tries.append(1)
            return Reply.text(f"I cannot answer. You sent: {header}")
        if agent_of(body) == "A2_PromptShaper" and len(body["messages"]) == 2:
            return Reply.text(f"Your header was {header}")
        return route(body)

    server.responder = echo
    cfg = llm_config(kb_engine.cfg, server, structured_output="json_object", api_key_env=KEY_ENV)
    sp = controller.run_all(controller.new_prompt(PROMPT), cfg,
                            with_llm(kb_engine.services, cfg, environ={KEY_ENV: KEY}))
    assert {r.authorization for r in server.chat_requests} == {f"Bearer {KEY}"}
    assert len(a4_tries) == 2 and sp.extras.agent_modes["A4_Condenser"].fallback
    a2 = sp.extras.llm_calls["A2_PromptShaper"][0]
    assert a2.messages[2].content == "Your header was Bearer ***"
    assert sp.extras.llm_calls["A4_Condenser"][0].raw == "I cannot answer. You sent: Bearer ***"
    export = sp.to_json()
    assert KEY not in export and KEY[:12] not in export
    shown = [inspector.summary_line(sp, a) + inspector.fallback_reason(sp, a) for a in AGENTS]
    shown += [json.dumps(inspector.overview_rows(sp))]
    for agent in AGENTS:
        for call in inspector.call_views(sp, agent):
            shown += [m.title + m.text for m in call.messages] + [call.raw.text, str(call.error)]
    assert not any(KEY in text for text in shown)


def test_the_cli_run_json_carries_the_records_and_never_the_key(kb_engine, server, recorder):
    env = {**os.environ, "RAGSTREAM_INDEX_DIR": str(kb_engine.cfg.index_dir),
           "RAGSTREAM_LLM_BASE_URL": server.base_url, "RAGSTREAM_LLM_MODEL": "test-model",
           "OPENAI_API_KEY": KEY}
    out = subprocess.run([sys.executable, "-m", "ragstream", "run", PROMPT, "--json", "--no-sync"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert KEY not in out.stdout and KEY not in out.stderr
    calls = json.loads(out.stdout)["extras"]["llm_calls"]
    assert list(calls) == AGENTS
    for agent in AGENTS:  # A3: one yes/no call per candidate, each recorded
        requests = requests_of(server, agent)
        assert len(calls[agent]) == len(requests) == (10 if agent == "A3_NLI_Gate" else 1)
        for call, req in zip(calls[agent], requests):
            assert call["messages"] == [{"role": m["role"], "content": m["content"]}
                                        for m in req.messages]
            assert req.authorization == f"Bearer {KEY}"
