"""Auto mode against a real model (`pytest -m real_llm`), e.g. a llama.cpp or Ollama server.

Set RAGSTREAM_TEST_LLM_BASE_URL (e.g. http://127.0.0.1:8080/v1) and RAGSTREAM_TEST_LLM_MODEL;
for a hosted API also the key in OPENAI_API_KEY (or RAGSTREAM_TEST_LLM_KEY_ENV naming another
variable). Not part of the default run.
"""

import os

import pytest

from ragstream import controller
from ragstream.answer import answer
from ragstream.backends.llm import LLMClient

BASE_URL = os.environ.get("RAGSTREAM_TEST_LLM_BASE_URL", "")
MODEL = os.environ.get("RAGSTREAM_TEST_LLM_MODEL", "")

pytestmark = [
    pytest.mark.real_llm,
    pytest.mark.skipif(not (BASE_URL and MODEL), reason=(
        "needs a real LLM: set RAGSTREAM_TEST_LLM_BASE_URL and RAGSTREAM_TEST_LLM_MODEL")),
]

PROMPTS = [
    "How does RAGstream fuse dense and keyword search results?",
    "Task: Explain what A3 drops and why.\nFormat: a short numbered list",
]


@pytest.fixture(scope="module")
def real(kb_engine):
    import dataclasses

    cfg = kb_engine.cfg.with_overrides({
        "settings.llm.base_url": BASE_URL, "settings.llm.model": MODEL,
        "settings.llm.api_key_env": os.environ.get("RAGSTREAM_TEST_LLM_KEY_ENV", "OPENAI_API_KEY"),
        "settings.llm.timeout_s": 300.0})
    return cfg, dataclasses.replace(kb_engine.services, llm=LLMClient(cfg.settings.llm))


@pytest.mark.parametrize("prompt", PROMPTS)
def test_auto_mode_with_a_real_model(real, prompt):
    cfg, services = real
    sp = controller.run_all(controller.new_prompt(prompt), cfg, services)
    modes = sp.extras.agent_modes
    # every agent either used the model or says exactly why it fell back (JSON validity)
    for agent in ("A2_PromptShaper", "A3_NLI_Gate", "A4_Condenser", "A5_Format_Enforcer"):
        assert modes[agent].mode in ("llm", "deterministic"), modes[agent]
        if modes[agent].mode == "deterministic":
            assert modes[agent].fallback and modes[agent].reason
    llm_agents = [a for a, m in modes.items() if m.mode == "llm"]
    assert llm_agents, f"no agent produced valid JSON: {modes}"
    # stage invariants
    ids = [c.id for c in sp.base_context_chunks]
    assert len(ids) == len(set(ids))
    assert len(sp.final_selection_ids) <= cfg.limits.N3_FINAL_SELECTION_MAX
    assert set(sp.final_selection_ids) <= set(ids)
    ans = answer(sp, cfg, services)
    assert ans.text.strip()
    # every valid citation points at a chunk that was in the prompt
    for c in ans.sources:
        assert c.chunk_id == sp.final_selection_ids[c.n - 1]
        assert f"(chunk {c.chunk_id})" in sp.Attachments_MD
