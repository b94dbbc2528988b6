"""LLM modes of A0 (semantic header fallback), A2_PromptShaper and A5_Format_Enforcer.

Every test talks to a real HTTP server on 127.0.0.1 that speaks the OpenAI API
(``tests.fake_openai.FakeOpenAI``) through the real ``openai`` package and the real
``LLMClient``: JSON mode, validation with one repair, retries on 429/5xx/timeouts, no retry on
other 4xx, and the fall back to the deterministic mode with the reason recorded.
"""

from __future__ import annotations

import json

from ragstream.backends.llm import LLMClient
from ragstream.backends.services import Services
from ragstream.common.config import load_config
from ragstream.stages import a0_preprocessing as a0
from ragstream.stages import a2_prompt_shaper as a2
from ragstream.stages import a5_format_enforcer as a5
from ragstream.state.records import UnknownAttribute
from ragstream.state.super_prompt import SuperPrompt
from tests.fake_openai import Reply

KEY = "sk-secret-123456789"
META = ("system", "audience", "tone", "depth")
FORMAT_SPEC_KEYS = ["kind", "kind_source", "matched", "clamped", "code_language", "language",
                    "length", "names", "hard_rules", "example_shape", "normalized_format_spec"]


def llm_cfg(server, semantic: bool = False, **llm):
    """The shipped config pointed at ``server``, with a small timeout, in plain JSON mode
    (the mode with a repair round; the schema forms are tested at the end)."""
    llm.setdefault("structured_output", "json_object")
    cfg = load_config(env={"RAGSTREAM_LLM_BASE_URL": server.base_url,
                           "RAGSTREAM_LLM_MODEL": "test-model"})
    values = {"settings.llm.timeout_s": 2.0}
    values.update({f"settings.llm.{k}": v for k, v in llm.items()})
    if semantic:
        values["prompt_schema.modes"] = {"semantic_enabled": True}
    cfg = cfg.with_overrides(values)
    assert cfg.settings.llm.base_url == server.base_url
    return cfg


def services(cfg, key: str = KEY) -> Services:
    return Services(llm=LLMClient(cfg.settings.llm, environ={"OPENAI_API_KEY": key}))


def payload(request) -> dict:
    """The stage's payload: the user message of a chat request."""
    return json.loads(request.messages[1]["content"])


def mode(sp: SuperPrompt, agent: str) -> dict:
    return sp.extras.agent_modes[agent]


# --------------------------------------------------------------------------- A2


def a2_sp(body: dict[str, str], sources: dict[str, str] | None = None,
          user_text: str | None = None) -> SuperPrompt:
    """A SuperPrompt as A0 leaves it (format "Markdown" is A0's default)."""
    body = {"format": "Markdown", **body}
    sources = {k: "user" for k in body} | {"format": "default"} | (sources or {})
    return SuperPrompt(user_text=user_text or body["task"], stage="preprocessed",
                       history_of_stages=["preprocessed"], body=dict(body),
                       extras={"body_sources": sources, "a0_body": dict(body)})


A2_BODY = {"task": "Walk new hires through how BM25 ranks documents",
           "context": "They know Python but not information retrieval.",
           "purpose": "onboarding"}
A2_REPLY = {"system": "teacher", "audience": "beginner", "tone": "friendly",
            "depth": "deep-dive", "confidence": "high"}


def a2_decision(sp: SuperPrompt, field: str) -> dict:
    (d,) = [d for d in sp.extras.a2_decisions if d.field == field]
    return d


def test_a2_valid_reply_is_applied(server):
    cfg = llm_cfg(server)
    server.script(Reply.json(A2_REPLY))
    sp = a2.run(a2_sp(A2_BODY), cfg, services(cfg))

    assert {k: sp.body[k] for k in (*META, "confidence")} == A2_REPLY
    assert mode(sp, "A2_PromptShaper").mode == "llm"
    assert "fallback" not in mode(sp, "A2_PromptShaper")
    for field in META:
        d = a2_decision(sp, field)
        assert d.source == "llm" and d.clamped is False and "original" not in d.model_dump()
        assert sp.extras.body_sources[field] == "a2"
    assert a2_decision(sp, "confidence").source == "llm"
    usage = sp.extras.llm_usage["A2_PromptShaper"]
    assert usage.calls == 1 and usage.model == "test-model"
    assert usage.prompt_tokens > 0 and usage.completion_tokens > 0
    assert usage.repaired is False
    assert "BM25" in sp.prompt_ready

    (req,) = server.chat_requests
    assert req["response_format"] == {"type": "json_object"}
    assert req["model"] == "test-model" and req["temperature"] == 0.0
    system = req.messages[0]["content"]
    assert "A2_PromptShaper" in system and "## Rules" in system and "## Output" in system
    # the reply's shape lists the closed lists once, in the system message
    assert '"depth": "overview"|"standard"|"deep-dive"' in system
    assert '"confidence": "low"|"medium"|"high"' in system
    sent = payload(req)
    assert sent["purpose"] == "onboarding" and sent["prompt"] == A2_BODY["task"]
    assert "task" not in sent  # the same text as the raw prompt: sent once
    assert "format" not in sent  # A0's default is not the user's wish
    assert "allowed_values" not in sent and "set_by_user" not in sent


def test_a2_out_of_enum_values_are_clamped_and_logged(server):
    cfg = llm_cfg(server)
    server.script(Reply.json({"system": "pirate captain", "audience": "BEGINNER",
                              "tone": "sarcastic", "depth": "overview",
                              "confidence": "very high"}))
    sp = a2.run(a2_sp(A2_BODY), cfg, services(cfg))

    # a value outside the enum never stands: the rule's choice does (the keyword rule's,
    # else the field's default), and the decision keeps what the model answered
    fields = cfg.agents.A2_PromptShaper.fields
    assert sp.body["system"] == "software engineer"  # the rule: "python" in the context
    assert sp.body["audience"] == "beginner"  # same value, other case: not clamped
    assert sp.body["tone"] == fields["tone"].default == "neutral"
    assert sp.body["depth"] == "overview"
    assert sp.body["confidence"] == "medium"  # the rule's count: one field decided by a rule
    assert a2_decision(sp, "system").model_dump() == {
        "field": "system", "value": "software engineer", "source": "rule",
        "matched": ["python"], "clamped": True, "in_enum": True, "original": "pirate captain"}
    assert a2_decision(sp, "tone").original == "sarcastic"
    assert a2_decision(sp, "tone").source == "default"
    assert a2_decision(sp, "confidence").clamped is True
    assert a2_decision(sp, "confidence").original == "very high"
    assert a2_decision(sp, "audience").clamped is False
    assert a2_decision(sp, "audience").source == "llm"
    judged = {j.item: j for j in sp.extras.judgments["A2_PromptShaper"]}
    assert judged["system"].decided_by == "rule" and judged["system"].model == "pirate captain"
    assert "not one of the values" in judged["system"].why
    assert mode(sp, "A2_PromptShaper").mode == "llm"


def test_a2_user_fields_stay_as_written(server):
    cfg = llm_cfg(server)
    server.script(Reply.json({**A2_REPLY, "audience": "developer", "tone": "concise"}))
    body = {**A2_BODY, "audience": "CFO and board", "tone": "Formal"}
    sp = a2.run(a2_sp(body), cfg, services(cfg))

    assert sp.body["audience"] == "CFO and board" and sp.body["tone"] == "Formal"
    assert a2_decision(sp, "audience").model_dump() == {
        "field": "audience", "value": "CFO and board", "source": "user", "matched": [],
        "clamped": False, "in_enum": False}
    assert a2_decision(sp, "tone").in_enum is True  # "Formal" folds to an enum value
    assert sp.extras.body_sources["audience"] == "user"
    assert sp.body["system"] == "teacher" and a2_decision(sp, "system").source == "llm"
    assert payload(server.chat_requests[0])["set_by_user"] == {"audience": "CFO and board",
                                                               "tone": "Formal"}


def test_a2_malformed_twice_falls_back_to_rules(server):
    cfg = llm_cfg(server)
    server.script(Reply.text("Sure! The system is teacher."), Reply.text('{"system": "teacher"'))
    sp = a2.run(a2_sp(A2_BODY), cfg, services(cfg))

    assert server.calls == 2  # the first answer and one repair
    entry = mode(sp, "A2_PromptShaper")
    assert entry.mode == "deterministic" and entry.fallback is True
    assert "after one repair attempt" in entry.reason
    offline = a2.run(a2_sp(A2_BODY), cfg, None)
    assert sp.body == offline.body
    assert sp.extras.a2_decisions == offline.extras.a2_decisions


def test_a2_malformed_then_valid_is_repaired(server):
    cfg = llm_cfg(server)
    server.script(Reply.json({"system": "teacher"}), Reply.json(A2_REPLY))
    sp = a2.run(a2_sp(A2_BODY), cfg, services(cfg))

    assert server.calls == 2
    assert mode(sp, "A2_PromptShaper").mode == "llm"
    assert sp.body["depth"] == "deep-dive"
    assert sp.extras.llm_usage["A2_PromptShaper"].repaired is True
    repair = server.chat_requests[1].messages
    assert repair[-2]["role"] == "assistant" and "not valid" in repair[-1]["content"]


def test_a2_rate_limit_is_retried(server):
    cfg = llm_cfg(server)
    server.script(Reply.error(429, "slow down", retry_after=0.01), Reply.json(A2_REPLY))
    sp = a2.run(a2_sp(A2_BODY), cfg, services(cfg))
    assert server.calls == 2
    assert mode(sp, "A2_PromptShaper").mode == "llm"
    assert sp.body["system"] == "teacher"


def test_a2_server_errors_three_tries_then_fallback(server):
    # log-probabilities off: in auto, a 500 to a request that asks for them is read as their
    # refusal and the request is sent once more without them (tests/stages/test_a2_a5_margins.py)
    cfg = llm_cfg(server, logprobs="off")
    server.script(*[Reply.error(500, "boom")] * 3)
    sp = a2.run(a2_sp(A2_BODY), cfg, services(cfg))
    assert server.calls == 3
    entry = mode(sp, "A2_PromptShaper")
    assert entry.fallback is True and entry.mode == "deterministic"
    assert "HTTP 500" in entry.reason and "after 3 tries" in entry.reason
    assert sp.body == a2.run(a2_sp(A2_BODY), cfg, None).body


def test_a2_bad_request_is_not_retried(server):
    cfg = llm_cfg(server, logprobs="off")  # else a 400 is read as log-probabilities refused
    server.script(Reply.error(400, "model does not support json_object"))
    sp = a2.run(a2_sp(A2_BODY), cfg, services(cfg))
    assert server.calls == 1
    entry = mode(sp, "A2_PromptShaper")
    assert entry.fallback is True and "HTTP 400" in entry.reason
    assert "tries" not in entry.reason


def test_a2_timeout_falls_back(server):
    cfg = llm_cfg(server, timeout_s=0.3)
    server.script(*[Reply.delay(1.5, then=Reply.json(A2_REPLY))] * 3)
    sp = a2.run(a2_sp(A2_BODY), cfg, services(cfg))
    assert server.calls == 3  # a timeout is retried like a network error
    entry = mode(sp, "A2_PromptShaper")
    assert entry.fallback is True and "did not answer within 0.3 s" in entry.reason
    assert sp.body == a2.run(a2_sp(A2_BODY), cfg, None).body


def test_api_key_is_sent_but_never_stored(server, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    cfg = llm_cfg(server)
    assert cfg.settings.llm.api_key_env == "OPENAI_API_KEY"
    client = LLMClient(cfg.settings.llm)  # reads the key from the environment

    server.script(Reply.json(A2_REPLY))
    ok = a2.run(a2_sp(A2_BODY), cfg, Services(llm=client))
    assert server.chat_requests[-1].authorization == f"Bearer {KEY}"
    assert KEY not in ok.model_dump_json()

    server.script(Reply.error(401, f"Incorrect API key provided: {KEY}. Check your key."))
    failed = a2.run(a2_sp(A2_BODY), cfg, Services(llm=client))
    entry = mode(failed, "A2_PromptShaper")
    assert entry.fallback is True and "HTTP 401" in entry.reason
    assert server.chat_requests[-1].authorization == f"Bearer {KEY}"
    assert server.calls == 2  # a 401 is not retried
    dumped = failed.model_dump_json()
    assert KEY not in dumped and KEY[-9:] not in dumped


# --------------------------------------------------------------------------- A5


def a5_sp(**fields: str) -> SuperPrompt:
    body = {"task": "Explain reciprocal rank fusion", "format": "Markdown", **fields}
    sources = {k: "user" for k in body}
    if "format" not in fields:
        sources["format"] = "default"
    return SuperPrompt(user_text=body["task"], stage="a4", history_of_stages=["a4"],
                       body=body, extras={"body_sources": sources})


def test_a5_unknown_kind_is_clamped_and_grounding_rules_come_last(server):
    cfg = llm_cfg(server)
    agent = cfg.agents.A5_Format_Enforcer
    server.script(Reply.json({
        "kind": "HTML page",
        "language": "German",
        "code_language": "python",
        "length": [{"unit": "words", "bound": "max", "value": 200},
                   {"unit": "pages", "bound": "max", "value": 2}],
        "hard_rules": [agent.always_rules[1], "", "  Write in German ", "write in german.",
                       "Keep it under 200 words", agent.always_rules[0]],
        "example_shape": "<html>...</html>",
        "normalized_format_spec": "HTML page in German",
    }))
    sp = a5_sp(format="an HTML page", constraints="in German, under 200 words")
    body_before = dict(sp.body)
    out = a5.run(sp, cfg, services(cfg))
    fe = out.extras.format_enforcer

    assert list(fe.model_dump()) == [*FORMAT_SPEC_KEYS, "mode", "clamps"]
    assert fe.mode == "llm" and mode(out, "A5_Format_Enforcer").mode == "llm"
    assert fe.kind == agent.default_format == "markdown"
    # an unknown kind never stands: the rules' kind does, with the rules' source
    assert fe.clamped is True and fe.kind_source == "default"
    assert fe.language == "de" and fe.code_language == ""
    assert [x.model_dump() for x in fe.length] == [{"unit": "words", "bound": "max", "value": 200}]
    # the rules' kind stood over the model's: its rule comes first
    assert fe.hard_rules == [agent.kinds["markdown"].rule, "Write in German.",
                             "Keep it under 200 words.", *agent.always_rules]
    # a clamped kind: the spec line and the shape come from the config, not the model
    assert fe.normalized_format_spec == "Markdown, in German, at most 200 words"
    assert fe.example_shape == agent.kinds["markdown"].example_shape
    clamped = {c.field: c for c in fe.clamps}
    assert clamped["kind"].value == "HTML page" and clamped["kind"].clamped_to == "markdown"
    assert clamped["length"].value["unit"] == "pages"
    assert clamped["code_language"].value == "python"
    assert out.body == body_before  # A5 writes only extras

    sent = payload(server.chat_requests[0])
    assert sent["format"] == "an HTML page" and sent["constraints"].startswith("in German")
    assert sent["default_kind"] == "markdown" and "allowed_kinds" not in sent
    assert '"kind": "json"|"yaml"|' in server.chat_requests[0].messages[0]["content"]


def test_a5_asks_no_model_when_the_prompt_states_no_format_or_constraints(server):
    cfg = llm_cfg(server)
    sp = a2_sp({"task": "List the stages in a table"})
    out = a5.run(sp, cfg, services(cfg))
    assert server.calls == 0
    m = mode(out, "A5_Format_Enforcer")
    assert m.mode == "deterministic" and not m.fallback
    assert m.reason == ("no model call needed: the prompt states no format or constraints; "
                        "the rules read the task")
    assert out.extras.format_enforcer.kind == "table"  # the rules read it from the task


def test_a2_asks_no_model_when_the_user_set_every_field(server):
    cfg = llm_cfg(server)
    given = {"task": "Explain RRF", "system": "teacher", "audience": "student",
             "tone": "friendly", "depth": "overview"}
    out = a2.run(a2_sp(given, {k: "user" for k in given}), cfg, services(cfg))
    assert server.calls == 0
    assert mode(out, "A2_PromptShaper").reason == "no model call needed: the user set every field"
    assert all(out.body[k] == v for k, v in given.items())


def test_a5_valid_reply_keeps_the_models_spec(server):
    cfg = llm_cfg(server)
    agent = cfg.agents.A5_Format_Enforcer
    server.script(Reply.json({
        "kind": "Table", "names": ["Stage", "Effect", "Stage"],
        "hard_rules": ["Answer with a Markdown table with the columns Stage and Effect."],
        "normalized_format_spec": "Markdown table (Stage | Effect)",
    }))
    out = a5.run(a5_sp(format="table of stages and their effect"), cfg, services(cfg))
    fe = out.extras.format_enforcer
    assert fe.kind == "table" and fe.clamped is False and fe.clamps == []
    assert fe.names == ["Stage", "Effect"]
    assert fe.example_shape.startswith("| Stage | Effect |")
    assert fe.normalized_format_spec == "Markdown table (Stage | Effect)"
    assert fe.hard_rules[-2:] == agent.always_rules
    assert fe.hard_rules[0].startswith("Answer with a Markdown table")
    assert a5.FormatSpec.model_validate(fe.model_dump(include=set(FORMAT_SPEC_KEYS)))


def test_a5_no_rules_from_the_model_still_gets_kind_and_grounding_rules(server):
    cfg = llm_cfg(server)
    agent = cfg.agents.A5_Format_Enforcer
    server.script(Reply.json({"kind": "json", "hard_rules": ["", "   "]}))
    fe = a5.run(a5_sp(format="JSON"), cfg, services(cfg)).extras.format_enforcer
    assert fe.hard_rules == [agent.kinds["json"].rule, *agent.always_rules]


def test_a5_fallback_is_exactly_the_deterministic_spec(server):
    cfg = llm_cfg(server)
    server.script(Reply.text("no"), Reply.text("still no"))
    fields = {"format": "Markdown table with columns Stage, Effect in German",
              "constraints": "under 200 words"}
    out = a5.run(a5_sp(**fields), cfg, services(cfg))
    assert server.calls == 2
    assert mode(out, "A5_Format_Enforcer").fallback is True
    offline = a5.run(a5_sp(**fields), cfg, None)
    assert out.extras.format_enforcer == offline.extras.format_enforcer
    assert out.extras.format_enforcer is not None
    assert list(out.extras.format_enforcer.model_dump()) == FORMAT_SPEC_KEYS


# --------------------------------------------------------------------------- A0 semantic


A0_PROMPT = ("Task: Summarise the migration plan\n"
             "Hintergrundinfos: Wir ziehen von Postgres 12 auf 16 um.\n"
             "**Zielpublikum:** Entwickler im Team\n")


def semantic_reply(*mappings: tuple[int, str, float]) -> Reply:
    return Reply.json({"mappings": [{"n": n, "key": k, "confidence": c} for n, k, c in mappings]})


def a0_decision(sp: SuperPrompt, label: str) -> dict:
    (d,) = [d for d in sp.extras.a0_decisions if d.label == label]
    return d


def test_a0_semantic_maps_unknown_labels_into_the_body(server):
    cfg = llm_cfg(server, semantic=True)
    offline = a0.run(SuperPrompt(user_text=A0_PROMPT), cfg, None)
    assert "context" not in offline.body and "audience" not in offline.body
    assert offline.extras.unknown_attributes == [UnknownAttribute(label="Zielpublikum",
                                                                  value="Entwickler im Team")]

    server.script(semantic_reply((1, "context", 0.93), (2, "Audience", 0.9)))
    sp = a0.run(SuperPrompt(user_text=A0_PROMPT), cfg, services(cfg))

    assert sp.body["task"] == "Summarise the migration plan"
    assert sp.body["context"] == "Wir ziehen von Postgres 12 auf 16 um."
    assert sp.body["audience"] == "Entwickler im Team"
    assert sp.extras.unknown_attributes == []
    assert sp.extras.body_sources["context"] == "user"
    assert sp.extras.semantic_used is True
    assert mode(sp, "A0_PreProcessing").mode == "llm"
    assert sp.extras.llm_usage["A0_PreProcessing"].calls == 1
    hint = a0_decision(sp, "Hintergrundinfos")
    assert (hint.key, hint.rung, hint.confidence, hint.header) == (
        "context", "semantic", 0.93, True)
    assert "0.93" in hint.detail and "0.70" in hint.detail
    assert a0_decision(sp, "Zielpublikum").key == "audience"
    assert a0_decision(sp, "Task").rung == "exact"  # the ladder's own answers stay
    assert sp.extras.normalized_map["Hintergrundinfos"] == "context"
    assert "Entwickler im Team" in sp.prompt_ready
    assert list(sp.extras.model_dump())[-8:] == ["a0_rules", "body_sources", "semantic_used",
                                                 "agent_modes", "a0_body", "a0_sources",
                                                 "llm_usage", "llm_calls"]

    (req,) = server.chat_requests  # one call for all unknown labels
    sent = payload(req)
    assert [(x["n"], x["label"]) for x in sent["labels"]] == [(1, "Hintergrundinfos"),
                                                              (2, "Zielpublikum")]
    assert "Postgres" in sent["labels"][0]["line"]
    assert list(sent["canonical_keys"]) == cfg.prompt_schema.canonical_keys
    assert sent["canonical_keys"]["audience"]  # with a description
    assert "Task" not in json.dumps(sent["labels"])  # known labels are not sent


def test_a0_semantic_low_confidence_or_bad_key_stays_unknown(server):
    cfg = llm_cfg(server, semantic=True)
    threshold = cfg.agents.A0_PreProcessing.semantic_min_confidence
    server.script(semantic_reply((1, "context", 0.4), (2, "readers", 0.99)))
    sp = a0.run(SuperPrompt(user_text=A0_PROMPT), cfg, services(cfg))

    offline = a0.run(SuperPrompt(user_text=A0_PROMPT), cfg, None)
    assert sp.body == offline.body
    assert sp.extras.unknown_attributes == [UnknownAttribute(label="Zielpublikum",
                                                             value="Entwickler im Team")]
    low = a0_decision(sp, "Hintergrundinfos")
    assert (low.key, low.rung, low.confidence, low.header) == (
        None, "semantic", 0.4, False)
    assert f"< semantic_min_confidence {threshold:.2f}" in low.detail
    bad = a0_decision(sp, "Zielpublikum")
    assert (bad.key, bad.rung) == (None, "semantic")
    assert "not a canonical key" in bad.detail
    assert sp.extras.semantic_used is True
    assert mode(sp, "A0_PreProcessing").mode == "llm"


def test_a0_semantic_threshold_is_configurable(server):
    cfg = llm_cfg(server, semantic=True).with_overrides(
        {"agents.A0_PreProcessing.semantic_min_confidence": 0.3})
    server.script(semantic_reply((1, "context", 0.4), (2, "unknown", 0.9)))
    sp = a0.run(SuperPrompt(user_text=A0_PROMPT), cfg, services(cfg))
    assert sp.body["context"] == "Wir ziehen von Postgres 12 auf 16 um."
    assert a0_decision(sp, "Zielpublikum").key is None
    assert "answered unknown" in a0_decision(sp, "Zielpublikum").detail


def test_a0_semantic_disabled_sends_nothing(server):
    cfg = llm_cfg(server)  # the shipped schema: semantic_enabled is false
    assert cfg.prompt_schema.modes["semantic_enabled"] is False
    sp = a0.run(SuperPrompt(user_text=A0_PROMPT), cfg, services(cfg))
    assert server.requests == [] and server.calls == 0
    assert sp.extras.semantic_used is False
    assert mode(sp, "A0_PreProcessing").model_dump() == {
        "mode": "deterministic", "reason": "prompt_schema.modes.semantic_enabled is false"}
    assert sp.model_dump_json() == a0.run(SuperPrompt(user_text=A0_PROMPT), cfg,
                                          None).model_dump_json()


def test_a0_semantic_without_unknown_labels_does_not_call(server):
    cfg = llm_cfg(server, semantic=True)
    sp = a0.run(SuperPrompt(user_text="Task: compare\nZiel: a decision"), cfg, services(cfg))
    assert server.calls == 0
    assert mode(sp, "A0_PreProcessing").mode == "deterministic"
    assert mode(sp, "A0_PreProcessing").reason.startswith("no unknown headers")
    assert sp.extras.semantic_used is False


def test_a0_semantic_failure_keeps_the_deterministic_result(server):
    cfg = llm_cfg(server, semantic=True)
    server.script(Reply.json({"mappings": [{"n": 1, "key": "context"}]}),  # no confidence
                  Reply.text("[]"))
    sp = a0.run(SuperPrompt(user_text=A0_PROMPT), cfg, services(cfg))
    assert server.calls == 2
    entry = mode(sp, "A0_PreProcessing")
    assert entry.mode == "deterministic" and entry.fallback is True
    assert "SemanticOutput" in entry.reason
    assert sp.extras.semantic_used is False
    offline = a0.run(SuperPrompt(user_text=A0_PROMPT), cfg, None)
    assert sp.body == offline.body
    assert sp.extras.a0_decisions == offline.extras.a0_decisions

    # a later run without the LLM leaves no stale usage behind
    plain_cfg = cfg.with_overrides({"prompt_schema.modes": {"semantic_enabled": False}})
    again = a0.run(sp, plain_cfg, None)
    assert not again.extras.llm_usage and "llm_usage" not in again.extras.model_dump()
    assert not again.extras.llm_calls and "llm_calls" not in again.extras.model_dump()


def test_a0_semantic_maps_an_unknown_setext_heading(server):
    cfg = llm_cfg(server, semantic=True)
    text = "Task: Summarise the migration plan\n\nHintergrundinfos\n----------------\nWir ziehen um."
    server.script(semantic_reply((1, "context", 0.9)))
    sp = a0.run(SuperPrompt(user_text=text), cfg, services(cfg))
    assert sp.body["context"] == "Wir ziehen um."
    hint = a0_decision(sp, "Hintergrundinfos")
    assert (hint.key, hint.rung, hint.style, hint.line) == ("context", "semantic", "heading", 3)
    (req,) = server.chat_requests
    assert payload(req)["labels"][0]["kind"] == "a heading header"


# --------------------------------------------------------------------------- schemas


def test_a2_a5_and_a0_send_their_closed_lists_as_enums_in_the_schema(server):
    cfg = llm_cfg(server, semantic=True, structured_output="llama_cpp")
    server.script(Reply.json({"system": "wizard", "audience": "developer", "tone": "concise",
                              "depth": "overview", "confidence": "high"}))
    a2.run(a2_sp({"task": "Explain RRF"}), cfg, services(cfg))
    schema = server.chat_requests[-1]["response_format"]["schema"]["properties"]
    a2cfg = cfg.agents.A2_PromptShaper
    for name in META:
        assert schema[name]["enum"] == a2cfg.fields[name].values
    assert schema["confidence"]["enum"] == a2cfg.confidence_values

    server.script(Reply.json({"kind": "markdown", "hard_rules": ["Be brief."]}))
    sp = a2_sp({"task": "Explain RRF", "format": "a table"}, {"task": "user", "format": "user"})
    a5.run(sp, cfg, services(cfg))
    schema = server.chat_requests[-1]["response_format"]["schema"]["properties"]
    assert schema["kind"]["enum"] == list(cfg.agents.A5_Format_Enforcer.kinds)
    assert schema["hard_rules"]["maxItems"] == 6 and schema["hard_rules"]["items"]["maxLength"] == 120
    for field in schema.values():  # nothing unbounded: every string and list has its limit
        if field.get("type") == "string":
            assert "enum" in field or "maxLength" in field
        if field.get("type") == "array":
            assert "maxItems" in field
