"""The SQLite interaction log."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from datetime import datetime

import pytest

from ragstream.answering.answer import answer
from ragstream.common.errors import SchemaVersionError
from ragstream.stages.controller import STAGE_NAMES
from ragstream.state.super_prompt import Answer, AnswerUsage, Citation, StageRun, SuperPrompt
from ragstream.workbench import qa_log
from ragstream.workbench.qa_log import MIGRATIONS, V1_COLUMNS, QALog, answer_and_log

#: the table as the code before schema versions created it (git show HEAD:ragstream/workbench/qa_log.py
#: when versions came), with PRAGMA user_version left at 0
UNVERSIONED_DDL = (
    "CREATE TABLE interactions (id INTEGER PRIMARY KEY, ts TEXT, question TEXT, answer TEXT, "
    "mode TEXT, mode_reason TEXT, citations TEXT, invalid_citations TEXT, confidence TEXT, "
    "confidence_reason TEXT, stage_latency_ms TEXT, model TEXT, prompt_tokens INTEGER, "
    "completion_tokens INTEGER, agent_prompt_tokens INTEGER, agent_completion_tokens INTEGER, "
    "latency_ms REAL, first_token_ms REAL, error TEXT)")


def _sp(question: str = "What does RRF fuse?", **extras) -> SuperPrompt:
    return SuperPrompt(user_text=question, extras=extras, stage_runs=[
        StageRun(stage="Retrieval", wall_ms=12.5), StageRun(stage="ReRanker", wall_ms=30.0)])


def _version(path) -> int:
    with closing(sqlite3.connect(path)) as conn:
        return conn.execute("PRAGMA user_version").fetchone()[0]


def _columns(path) -> list[str]:
    with closing(sqlite3.connect(path)) as conn:
        return [r[1] for r in conn.execute("PRAGMA table_info(interactions)")]


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
                                 "completion_tokens": 5, "repaired": False},
             "A4_Condenser": {"model": "m", "calls": 2, "prompt_tokens": 60,
                              "completion_tokens": 15, "repaired": True}}
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
                                   "label": "", "page": ""}
    assert row["citations"][1]["valid"] is False and row["invalid_citations"] == [7]
    assert row["confidence"] == "Medium" and row["confidence_reason"].startswith("best")
    assert row["stage_latency_ms"] == {"Retrieval": 12.5, "ReRanker": 30.0}
    assert (row["model"], row["prompt_tokens"], row["completion_tokens"]) == ("m1", 100, 20)
    assert (row["agent_prompt_tokens"], row["agent_completion_tokens"]) == (100, 20)
    assert row["latency_ms"] == 812.3
    assert row["ts"].endswith("Z") and datetime.fromisoformat(row["ts"].replace("Z", "+00:00"))
    assert rows[0]["agent_prompt_tokens"] == 0 and rows[0]["citations"] == []
    assert [r["id"] for r in log.recent(limit=1)] == [2]
    assert _version(log.path) == len(MIGRATIONS)


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


def test_unversioned_file_is_upgraded_in_place(tmp_path):
    path = tmp_path / "qa.sqlite3"
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute(UNVERSIONED_DDL)
        for question in ("first", "second"):
            conn.execute(
                "INSERT INTO interactions (ts, question, answer, mode, citations, "
                "invalid_citations, stage_latency_ms, prompt_tokens, latency_ms) "
                "VALUES ('2025-01-01T00:00:00.000Z', ?, 'an answer [1]', 'llm', "
                "'[{\"n\": 1, \"valid\": true}]', '[]', '{\"Retrieval\": 1.5}', 7, 9.5)",
                (question,))
    assert _version(path) == 0

    log = QALog(path, environ={})
    assert log.count() == 2 and _version(path) == len(MIGRATIONS)
    assert _columns(path) == ["id", *V1_COLUMNS, "incomplete"]
    old = log.recent()
    assert [(r["id"], r["question"]) for r in old] == [(2, "second"), (1, "first")]
    assert old[1]["citations"] == [{"n": 1, "valid": True}] and old[1]["invalid_citations"] == []
    assert old[1]["stage_latency_ms"] == {"Retrieval": 1.5}
    assert (old[1]["prompt_tokens"], old[1]["latency_ms"], old[1]["error"]) == (7, 9.5, None)
    assert [r["incomplete"] for r in old] == [0, 0]
    assert log.record(_sp(), _answer()) == 3 and log.count() == 3


def test_unversioned_file_with_fewer_columns_gets_the_rest(tmp_path):
    path = tmp_path / "qa.sqlite3"
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("CREATE TABLE interactions (id INTEGER PRIMARY KEY, ts TEXT, question TEXT)")
        conn.execute("INSERT INTO interactions (ts, question) VALUES ('t', 'old')")
    log = QALog(path, environ={})
    log.record(_sp(), _answer())
    cols = _columns(path)
    assert cols[0] == "id" and set(V1_COLUMNS) <= set(cols)
    assert _version(path) == len(MIGRATIONS)
    assert log.count() == 2 and log.recent()[1]["question"] == "old"
    assert log.recent()[1]["citations"] == [] and log.recent()[1]["stage_latency_ms"] == {}


def test_migrations_run_in_order_once_each_in_a_transaction(tmp_path, monkeypatch):
    path = tmp_path / "qa.sqlite3"
    QALog(path, environ={}).record(_sp(), _answer())
    base, ran = MIGRATIONS, []

    def add_column(name: str, fail: bool = False):
        def step(conn: sqlite3.Connection) -> None:
            ran.append(name)
            conn.execute(f"ALTER TABLE interactions ADD COLUMN {name} TEXT")
            if fail:
                raise sqlite3.OperationalError(f"{name} failed halfway")
        return step

    monkeypatch.setattr(qa_log, "MIGRATIONS", (*base, add_column("note"),
                                               add_column("extra", fail=True)))
    with pytest.raises(sqlite3.OperationalError, match="halfway"):
        QALog(path).count()
    # the first new step is kept; the failed one left nothing behind
    assert ran == ["note", "extra"] and _version(path) == len(base) + 1
    assert "note" in _columns(path) and "extra" not in _columns(path)

    monkeypatch.setattr(qa_log, "MIGRATIONS", (*base, add_column("note"), add_column("extra")))
    log = QALog(path)
    assert log.count() == 1 and log.count() == 1
    assert ran == ["note", "extra", "extra"] and _version(path) == len(base) + 2
    assert _columns(path)[-2:] == ["note", "extra"]


def test_file_from_a_newer_version_is_refused(tmp_path, kb_engine):
    path = tmp_path / "qa.sqlite3"
    QALog(path, environ={}).record(_sp(), _answer())
    newer = len(MIGRATIONS) + 1
    with closing(sqlite3.connect(path)) as conn:
        conn.execute(f"PRAGMA user_version = {newer}")
    before = path.read_bytes()

    with pytest.raises(SchemaVersionError) as err:
        QALog(path).count()
    assert (err.value.found, err.value.supported) == (newer, len(MIGRATIONS))
    assert str(path) in str(err.value) and "newer RAGstream" in str(err.value)
    assert path.read_bytes() == before  # untouched

    # an answer is not lost to a log it cannot write
    sp = kb_engine.run("How does the ReRanker choose its backend?")
    out, ans = answer_and_log(kb_engine.cfg, kb_engine.services, sp, log_path=path)
    assert out.answer == ans and "schema version" in out.extras.qa_log.error
    assert path.read_bytes() == before


def test_an_answer_stopped_midway_is_recorded_as_incomplete(tmp_path):
    path = tmp_path / "qa.sqlite3"
    log = QALog(path, environ={})
    log.record(_sp(), _answer())
    log.record(_sp("stopped"), _answer(text="RRF fuses"), incomplete=True)
    newest, oldest = log.recent()
    assert (newest["question"], newest["answer"], newest["incomplete"]) == ("stopped", "RRF fuses", 1)
    assert oldest["incomplete"] == 0


def test_a_version_1_file_gains_the_incomplete_column_with_its_rows(tmp_path, monkeypatch):
    path = tmp_path / "qa.sqlite3"
    monkeypatch.setattr(qa_log, "MIGRATIONS", MIGRATIONS[:1])
    version_1 = QALog(path, environ={})
    monkeypatch.setattr(version_1, "row", lambda sp, ans, incomplete=False: {
        k: v for k, v in QALog.row(version_1, sp, ans).items() if k != "incomplete"})
    version_1.record(_sp("old"), _answer())
    assert _version(path) == 1 and "incomplete" not in _columns(path)

    monkeypatch.setattr(qa_log, "MIGRATIONS", MIGRATIONS)
    log = QALog(path, environ={})
    assert log.recent()[0]["incomplete"] == 0 and _version(path) == len(MIGRATIONS)
    log.record(_sp("new"), _answer(), incomplete=True)
    assert [(r["question"], r["incomplete"]) for r in log.recent()] == [("new", 1), ("old", 0)]
