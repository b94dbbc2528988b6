"""Auto mode against a real model (`pytest -m real_llm`), e.g. a llama.cpp or Ollama server.

Set RAGSTREAM_TEST_LLM_BASE_URL (e.g. http://127.0.0.1:8765/v1, llama.cpp's ``llama-server``:
``../shared/LOCAL_LLM.md`` and the README) and RAGSTREAM_TEST_LLM_MODEL;
for a hosted API also the key in OPENAI_API_KEY (or RAGSTREAM_TEST_LLM_KEY_ENV naming another
variable). Not part of the default run. The prompts are ``benchmarks.real_llm.PROMPTS``
(answerable, unanswerable, German headers, format requests, a conversation follow-up), run
with ``benchmarks.real_llm.LOCAL_PROFILE``; at the end the tier prints the figures table (per
agent: first-try valid JSON, fallbacks, median seconds per call; the median run + answer, time
to the first answer token, answerable prompts with a valid citation) and writes it to
``test-artifacts/real_llm_figures.json``. The assertions are the pipeline's contracts, which
hold whatever the model answers; the model's quality is in the figures.
"""

import dataclasses
import json
import os
from pathlib import Path

import pytest

from benchmarks.real_llm import FIGURES, LOCAL_PROFILE, PROMPTS, figures, render, run_prompt
from ragstream.answering.answer import cited_share
from ragstream.backends.llm import LLMClient
from ragstream.workbench.engine import Engine

BASE_URL = os.environ.get("RAGSTREAM_TEST_LLM_BASE_URL", "")
MODEL = os.environ.get("RAGSTREAM_TEST_LLM_MODEL", "")
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"

pytestmark = [
    pytest.mark.real_llm,
    pytest.mark.skipif(not (BASE_URL and MODEL), reason=(
        "needs a real LLM: set RAGSTREAM_TEST_LLM_BASE_URL and RAGSTREAM_TEST_LLM_MODEL")),
]


@pytest.fixture(scope="module")
def real(kb_engine, request):
    cfg = kb_engine.cfg.with_overrides({
        "settings.llm.base_url": BASE_URL, "settings.llm.model": MODEL,
        "settings.llm.api_key_env": os.environ.get("RAGSTREAM_TEST_LLM_KEY_ENV", "OPENAI_API_KEY"),
        **LOCAL_PROFILE})
    engine = Engine(cfg, dataclasses.replace(kb_engine.services, llm=LLMClient(cfg.settings.llm)))
    runs: dict = {"done": {}, "records": []}
    yield engine, runs
    if runs["records"]:
        figs = figures(runs["records"])
        ARTIFACTS.mkdir(exist_ok=True)
        (ARTIFACTS / "real_llm_figures.json").write_text(json.dumps(
            {"figures": figs, "records": [dataclasses.asdict(r) for r in runs["records"]]},
            indent=1, ensure_ascii=False))
        # printed by conftest's pytest_terminal_summary (output is captured until then)
        request.config.stash[FIGURES] = render(figs, MODEL)


@pytest.mark.parametrize("prompt", PROMPTS, ids=[p.id for p in PROMPTS])
def test_auto_mode_with_a_real_model(real, prompt):
    engine, runs = real
    sp, ans, record = run_prompt(engine, prompt, runs["done"])
    runs["done"][prompt.id] = (sp, ans)
    runs["records"].append(record)
    cfg = engine.cfg
    modes = sp.extras.agent_modes
    # every agent either used the model or says exactly why it did not
    for agent in ("A2_PromptShaper", "A3_NLI_Gate", "A4_Condenser", "A5_Format_Enforcer"):
        assert modes[agent].mode in ("llm", "deterministic"), modes[agent]
        if modes[agent].mode == "deterministic":
            assert modes[agent].reason
        usage = sp.extras.llm_usage.get(agent)
        if usage is not None:  # every call stayed within the agent's budgets
            assert usage.completion_tokens <= usage.reply_budget * usage.calls
    # the pass kept to its time budget (one call may overrun by its own timeout's slack)
    assert sum(u.seconds for u in sp.extras.llm_usage.values()) <= \
        cfg.settings.llm.run_budget_s + 5
    # stage invariants
    ids = [c.id for c in sp.base_context_chunks]
    assert len(ids) == len(set(ids))
    assert len(sp.final_selection_ids) <= cfg.limits.N3_FINAL_SELECTION_MAX
    assert set(sp.final_selection_ids) <= set(ids)
    assert ans.text.strip()
    # the model is evidence, never the last word: it never empties what the rules would fill
    rows = sp.view("a3")
    if any(r.rule_status == "kept" for r in rows):
        assert sp.kept_ids("a3"), "the gate emptied a selection its rules would fill"
    if modes["A3_NLI_Gate"].mode == "llm":
        judged = sp.extras.judgments["A3_NLI_Gate"]
        by_id = {r.chunk_id: r for r in rows}
        assert judged and all(by_id[j.item].rule_status == j.rule for j in judged)
    for c in ans.sources:  # a valid citation names a chunk that was in the prompt
        assert c.chunk_id == sp.final_selection_ids[c.n - 1]
    if ans.mode == "llm":  # unsupported exactly when no sentence cites a valid source
        cited, _total = cited_share(ans.text, {c.n for c in ans.sources}, cfg.settings.answer)
        assert bool(ans.unsupported) == (cited == 0)
        assert bool(ans.extractive_text.strip()) == bool(ans.unsupported)
    if prompt.kind == "unanswerable":
        assert ans.mode == "no-results", ans.mode_reason
    if prompt.kind == "german":
        assert sp.body["task"].startswith("Erkläre") and sp.body["format"] == "Stichpunkte"
    if prompt.kind == "format":  # the rules read the format; a model's kind is from the list
        spec = sp.extras.format_enforcer
        assert spec.kind in cfg.agents.A5_Format_Enforcer.kinds and spec.hard_rules
        if modes["A5_Format_Enforcer"].mode == "deterministic":
            assert spec.kind == {"list": "numbered_list", "table": "table"}[prompt.id]
    if prompt.kind == "follow-up":
        assert sp.recent_conversation and "Chroma server" in sp.recent_conversation[-1].user
        assert "## Recent conversation" in sp.prompt_ready
