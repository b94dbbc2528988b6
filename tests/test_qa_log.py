"""The SQLite interaction log."""

from __future__ import annotations

import sqlite3
from datetime import datetime

from ragstream.answer import answer
from ragstream.controller import STAGE_NAMES
from ragstream.qa_log import COLUMNS, QALog
from ragstream.super_prompt import Answer, AnswerUsage, Citation, StageRun, SuperPrompt


def _sp(question: str = "What does RRF fuse?", **extras) -> SuperPrompt:
    return SuperPrompt(user_text=question, extras=extras, stage_runs=[
        StageRun(stage="Retrieval", wall_ms=12.5), StageRun(stage="ReRanker", wall_ms=30.0)])


def _answer(**kw) -> Answer:
    base = dict(text="RRF fuses rankings [1]. Nonsense [7].", mode="llm", confidence="Medium",
                confidence_reason="best retrieval similarity 0.39", model="m1",
                usage=AnswerUsage(prompt_tokens=100, completion_tokens=20), latency_ms=812.3,
                citations=[Citation(n=1, chunk_id="kb/a.md#0", source="kb/a.md", section="A"),
                           Citation(n=7, valid=False)],
                invalid_citations=[7])
    base.update(kw)
    return Answer(**base)


def test_record_and_read_back(tmp_path):
    log = QALog(tmp_path / "sub" / "qa.sqlite3", environ={})
    assert log.count() == 0 and log.recent() == []
    usage = {"A2_PromptShaper": {"model": "m", "calls": 1, "prompt_tokens": 40,
                                 "completion_tokens": 5},
             "A4_Condenser": {"model": "m", "calls": 2, "prompt_tokens": 60,
                              "completion_tokens": 15}}
    first = log.record(_sp(llm_usage=usage), _answer())
    second = log.record(_sp("second"), _answer(text="other", mode="no-results", citations=[],
                                               invalid_citations=[], usage=AnswerUsage()))
    assert (first, second) == (1, 2) and log.count() == 2

    rows = log.recent()
    assert [r["question"] for r in rows] == ["second", "What does RRF fuse?"]
    row = rows[1]
    assert row["answer"] == "RRF fuses rankings [1]. Nonsense [7]." and row["mode"] == "llm"
    assert row["citations"][0] == {"n": 1, "valid": True, "chunk_id": "kb/a.md#0",
                                   "source": "kb/a.md", "section": "A", "title": "",
                                   "label": ""}
    assert row["citations"][1]["valid"] is False and row["invalid_citations"] == [7]
    assert row["confidence"] == "Medium" and row["confidence_reason"].startswith("best")
    assert row["stage_latency_ms"] == {"Retrieval": 12.5, "ReRanker": 30.0}
    assert (row["model"], row["prompt_tokens"], row["completion_tokens"]) == ("m1", 100, 20)
    assert (row["agent_prompt_tokens"], row["agent_completion_tokens"]) == (100, 20)
    assert row["latency_ms"] == 812.3
    assert row["ts"].endswith("Z") and datetime.fromisoformat(row["ts"].replace("Z", "+00:00"))
    assert rows[0]["agent_prompt_tokens"] == 0 and rows[0]["citations"] == []
    assert [r["id"] for r in log.recent(limit=1)] == [2]


def test_real_pipeline_interaction_has_every_stage_latency(kb_engine, tmp_path):
    sp = kb_engine.run("How does the ReRanker choose its backend?")
    ans = answer(sp, kb_engine.cfg, kb_engine.services)
    log = QALog(tmp_path / "qa.sqlite3")
    log.record(sp, ans)
    row = log.recent()[0]
    assert list(row["stage_latency_ms"]) == STAGE_NAMES
    assert all(v >= 0 for v in row["stage_latency_ms"].values())
    assert row["mode"] == "extractive" and row["citations"]
    assert [c["n"] for c in row["citations"]] == [c.n for c in ans.citations]


def test_secrets_from_the_environment_are_never_written(tmp_path):
    secret = "sk-test-0123456789abcdef"
    env = {"OPENAI_API_KEY": secret, "CUSTOM_LLM_VAR": "gsk_another_secret_value", "HOME": "/root"}
    log = QALog(tmp_path / "qa.sqlite3", environ=env, secret_env=["CUSTOM_LLM_VAR"])
    log.record(_sp(f"my key is {secret}"),
               _answer(error="HTTP 401 for gsk_another_secret_value", text=f"echo {secret}"))
    raw = (tmp_path / "qa.sqlite3").read_bytes()
    assert secret.encode() not in raw and b"gsk_another_secret_value" not in raw
    row = log.recent()[0]
    assert row["question"] == "my key is ***" and row["error"] == "HTTP 401 for ***"
    assert row["answer"] == "echo ***"


def test_old_file_gets_missing_columns(tmp_path):
    path = tmp_path / "qa.sqlite3"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE interactions (id INTEGER PRIMARY KEY, ts TEXT, question TEXT)")
        conn.execute("INSERT INTO interactions (ts, question) VALUES ('t', 'old')")
    log = QALog(path, environ={})
    log.record(_sp(), _answer())
    with sqlite3.connect(path) as conn:
        cols = [r[1] for r in conn.execute("PRAGMA table_info(interactions)")]
    assert cols[0] == "id" and set(COLUMNS) <= set(cols)
    assert log.count() == 2 and log.recent()[1]["question"] == "old"
    assert log.recent()[1]["citations"] == [] and log.recent()[1]["stage_latency_ms"] == {}
