"""The interaction log: one SQLite row per answered prompt (the prompt, the answer, its
citations, confidence and timings), so past answers can be reviewed and audited.

    log = QALog(cfg.index_dir / "qa_log.sqlite3")
    row_id = log.record(sp, answer)
    log.recent(10)   # newest first, JSON columns parsed
    log.count()

Table ``interactions``: ``ts`` (ISO 8601, UTC), question, answer, mode, citations (JSON),
invalid_citations (JSON), confidence and its reason, ``stage_latency_ms`` (JSON ``{stage:
wall_ms}`` from ``sp.stage_runs``), the answer's model and tokens, the agents' tokens
(``sp.extras.llm_usage``, summed) and the answer's latency; ``incomplete`` (version 2) is 1
for an answer that was stopped before it ended (the HTTP client of ``POST /answer`` went away),
whose ``answer`` is then the text streamed until then, else 0. Version 3 adds the named
conversations and their turns (``ragstream.workbench.conversations``); version 4 gives each conversation
its knowledge base, splitting one asked in several, and rebuilds what each remembered turn
holds (``_conversations_per_kb``).

The schema is versioned: ``MIGRATIONS`` lists the steps in order, and ``PRAGMA user_version``
counts the steps a file has. Opening a file applies the missing steps, each once and in its own
transaction, so an older file is upgraded in place with its rows; a file from a newer RAGstream
(a higher version) is refused with ``SchemaVersionError``.

Only fields of the ``SuperPrompt`` and the ``Answer`` are written. As a safeguard, the value of
every environment variable whose name looks like a secret (``*KEY*``, ``*TOKEN*``,
``*SECRET*``, ``*PASSWORD*``, and the configured ``llm.api_key_env``) is replaced by ``***``
wherever it would appear in a stored text. Each call opens its own connection, so one
``QALog`` may be shared across threads (Streamlit reruns).
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
from collections.abc import Callable, Iterable, Mapping
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ragstream.common.errors import SchemaVersionError
from ragstream.state.super_prompt import Answer, SuperPrompt

if TYPE_CHECKING:  # pragma: no cover
    from ragstream.answering.answer import TokenCallback
    from ragstream.common.config import AppConfig

TABLE = "interactions"
#: the table's columns in schema version 1, column -> SQL type, in table order (id comes
#: first); a later column belongs to the migration that adds it
V1_COLUMNS: dict[str, str] = {
    "ts": "TEXT",
    "question": "TEXT",
    "answer": "TEXT",
    "mode": "TEXT",
    "mode_reason": "TEXT",
    "citations": "TEXT",
    "invalid_citations": "TEXT",
    "confidence": "TEXT",
    "confidence_reason": "TEXT",
    "stage_latency_ms": "TEXT",
    "model": "TEXT",
    "prompt_tokens": "INTEGER",
    "completion_tokens": "INTEGER",
    "agent_prompt_tokens": "INTEGER",
    "agent_completion_tokens": "INTEGER",
    "latency_ms": "REAL",
    "first_token_ms": "REAL",
    "error": "TEXT",
}
JSON_COLUMNS = ("citations", "invalid_citations", "stage_latency_ms")
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
#: shorter values are not treated as secrets (they would blank out ordinary words)
MIN_SECRET_CHARS = 8
BUSY_TIMEOUT_S = 10.0
MASK = "***"


def _create_table(conn: sqlite3.Connection) -> None:
    """Version 1: the table, or the columns missing from a file written before versions were
    recorded (the unversioned code added new columns by name)."""
    cols = ", ".join(f"{name} {kind}" for name, kind in V1_COLUMNS.items())
    conn.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (id INTEGER PRIMARY KEY, {cols})")
    have = {r[1] for r in conn.execute(f"PRAGMA table_info({TABLE})")}
    for name, kind in V1_COLUMNS.items():
        if name not in have:
            conn.execute(f"ALTER TABLE {TABLE} ADD COLUMN {name} {kind}")


def _add_incomplete(conn: sqlite3.Connection) -> None:
    """Version 2: ``incomplete``, 1 for an answer stopped before it ended (0 for older rows)."""
    conn.execute(f"ALTER TABLE {TABLE} ADD COLUMN incomplete INTEGER NOT NULL DEFAULT 0")


def _add_conversations(conn: sqlite3.Connection) -> None:
    """Version 3: the named ``conversations`` and their ``turns`` (``ragstream.workbench.conversations``)."""
    conn.execute("CREATE TABLE conversations (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, "
                 "created_at TEXT NOT NULL)")
    conn.execute(
        "CREATE TABLE turns (id INTEGER PRIMARY KEY, conversation_id INTEGER NOT NULL REFERENCES "
        "conversations(id) ON DELETE CASCADE, turn INTEGER NOT NULL, ts TEXT NOT NULL, "
        "question TEXT NOT NULL, answer TEXT NOT NULL, sources TEXT NOT NULL DEFAULT '[]', "
        "kb TEXT NOT NULL DEFAULT '', interaction_id INTEGER, remembered INTEGER NOT NULL, "
        "why TEXT NOT NULL DEFAULT '', removed_at TEXT, memory_text TEXT NOT NULL DEFAULT '', "
        "encoding BLOB, "
        "encoded_with TEXT NOT NULL DEFAULT '', UNIQUE (conversation_id, turn))")


#: why a turn remembered before version 4 is no longer (its memory could not be rebuilt)
NOT_REBUILT = ("remembered before schema version 4 as its question and a list of sources; which "
               "source each sentence came from is not known, so it is no longer searched")


def _conversations_per_kb(conn: sqlite3.Connection) -> None:
    """Version 4: a conversation belongs to one knowledge base (``conversations.kb``). A
    conversation asked in several keeps the turns of the knowledge base of its first turn; the
    others' turns (with their numbers) go to a conversation ``<name>@<kb>`` of their own, so a
    turn stays with the knowledge base it was asked in. A remembered turn's memory is rebuilt
    as the answer's sentences, each with its own source (``memory.memory_text``) — its
    citation numbers mapped to the turn's sources in order, else through the interaction's
    citations; one whose sources cannot be told, or that keeps nothing, is no longer remembered
    (``NOT_REBUILT``). Rebuilt turns are encoded again when next searched."""
    from ragstream.answering.answer import citation_numbers
    from ragstream.common.config import AnswerSettings
    from ragstream.workbench.memory import check_name, kb_suffix, memory_text

    conn.execute("ALTER TABLE conversations ADD COLUMN kb TEXT NOT NULL DEFAULT 'default'")
    conn.execute("UPDATE turns SET kb = 'default' WHERE kb = ''")
    names = {r[0] for r in conn.execute("SELECT name FROM conversations")}
    for cid, name, created in conn.execute(
            "SELECT id, name, created_at FROM conversations ORDER BY id").fetchall():
        kbs = [r[0] for r in conn.execute("SELECT kb FROM turns WHERE conversation_id = ? "
                                          "GROUP BY kb ORDER BY MIN(turn)", (cid,))]
        if not kbs:
            continue
        conn.execute("UPDATE conversations SET kb = ? WHERE id = ?", (kbs[0], cid))
        for kb in kbs[1:]:
            suffix = kb_suffix(kb)
            base, n = check_name(name[:60 - len(suffix)].rstrip("@") + suffix), 1
            new = base
            while new in names:
                n += 1
                new = f"{base[:60 - len(str(n)) - 1]}-{n}"
            names.add(new)
            moved = conn.execute("INSERT INTO conversations (name, created_at, kb) VALUES (?, ?, ?)",
                                 (new, created, kb)).lastrowid
            conn.execute("UPDATE turns SET conversation_id = ? WHERE conversation_id = ? AND kb = ?",
                         (moved, cid, kb))
    cites = {r[0]: r[1] for r in conn.execute(f"SELECT id, citations FROM {TABLE}")}
    for tid, question, answer, sources, log_id in conn.execute(
            "SELECT id, question, answer, sources, interaction_id FROM turns WHERE remembered = 1"
    ).fetchall():
        labels = json.loads(sources or "[]")
        numbers = sorted(set(citation_numbers(answer, AnswerSettings().max_citation_range)))
        by_n = dict(zip(numbers, labels)) if len(numbers) == len(labels) else {
            c["n"]: c.get("label") or c.get("source", "")
            for c in json.loads(cites.get(log_id) or "[]") if c.get("valid", True)}
        text, why = memory_text(answer, by_n, question) if by_n else ("", NOT_REBUILT)
        conn.execute("UPDATE turns SET memory_text = ?, remembered = ?, why = ?, encoding = NULL, "
                     "encoded_with = '' WHERE id = ?",
                     (text, int(bool(text)), "" if text else f"{why} (schema version 4)", tid))


#: the schema migrations in order: step ``i`` takes a file from version ``i`` to ``i + 1``
MIGRATIONS: tuple[Callable[[sqlite3.Connection], None], ...] = (
    _create_table, _add_incomplete, _add_conversations, _conversations_per_kb)


def _user_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def migrate(conn: sqlite3.Connection, path: Path,
            migrations: tuple[Callable[[sqlite3.Connection], None], ...]) -> None:
    """Apply the ``migrations`` the file at ``path`` lacks (``PRAGMA user_version`` counts the
    ones it has), in order, one transaction each; a file from a newer RAGstream (more steps
    than ``migrations``) is refused with ``SchemaVersionError``."""
    while (version := _user_version(conn)) != len(migrations):
        if version > len(migrations):
            raise SchemaVersionError(path, version, len(migrations))
        # the write lock, then the version again: another process may have migrated
        conn.execute("BEGIN IMMEDIATE")
        with conn:  # commit, or roll the step back
            if _user_version(conn) == version:
                migrations[version](conn)
                conn.execute(f"PRAGMA user_version = {version + 1}")


def open_migrated(path: Path, migrations: tuple[Callable[[sqlite3.Connection], None], ...],
                  prepare: Callable[[sqlite3.Connection], None] | None = None) -> sqlite3.Connection:
    """A connection to the SQLite file ``path`` (made, with its folder, when missing): rows as
    ``sqlite3.Row``, ``BUSY_TIMEOUT_S`` to wait for a lock, ``prepare(conn)`` applied first (SQL
    functions), the schema brought up to date (``migrate``). Closed again if that fails."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_S)
    conn.row_factory = sqlite3.Row
    try:
        if prepare is not None:
            prepare(conn)
        migrate(conn, path, migrations)
    except BaseException:
        conn.close()
        raise
    return conn


def _secrets(environ: Mapping[str, str], names: Iterable[str]) -> list[str]:
    wanted = {n for n in names if n}
    values = {v for k, v in environ.items()
              if (k in wanted or _SECRET_NAME.search(k)) and len(v or "") >= MIN_SECRET_CHARS}
    return sorted(values, key=len, reverse=True)


class QALog:
    """The SQLite interaction log: one row per answered prompt, secrets scrubbed, schema migrated."""

    def __init__(self, path: str | Path, environ: Mapping[str, str] | None = None,
                 secret_env: Iterable[str] = ()):
        self.path = Path(path)
        self._secrets = _secrets(os.environ if environ is None else environ, secret_env)

    # -- plumbing -----------------------------------------------------------------------

    def connect(self) -> sqlite3.Connection:
        """A new connection to the log's file, its schema up to date (the caller closes it)."""
        return open_migrated(self.path, MIGRATIONS)

    def scrub(self, value: Any) -> Any:
        """``value`` with every secret's value replaced by ``***`` (a text; others as they are)."""
        if isinstance(value, str):
            for secret in self._secrets:
                value = value.replace(secret, MASK)
        return value

    # -- public -------------------------------------------------------------------------

    def row(self, sp: SuperPrompt, answer: Answer, incomplete: bool = False) -> dict[str, Any]:
        """The values ``record`` writes (without ``id``)."""
        latencies: dict[str, float] = {}
        for run in sp.stage_runs:
            latencies[run.stage] = run.wall_ms
        agents = sp.extras.llm_usage.values()
        return {
            "ts": datetime.now(UTC).isoformat(timespec="milliseconds")
                  .replace("+00:00", "Z"),
            "question": sp.user_text,
            "answer": answer.text,
            "mode": answer.mode,
            "mode_reason": answer.mode_reason,
            "citations": json.dumps([c.model_dump() for c in answer.citations],
                                    ensure_ascii=False),
            "invalid_citations": json.dumps(answer.invalid_citations),
            "confidence": answer.confidence,
            "confidence_reason": answer.confidence_reason,
            "stage_latency_ms": json.dumps(latencies, ensure_ascii=False),
            "model": answer.model,
            "prompt_tokens": answer.usage.prompt_tokens,
            "completion_tokens": answer.usage.completion_tokens,
            "agent_prompt_tokens": sum(u.prompt_tokens for u in agents),
            "agent_completion_tokens": sum(u.completion_tokens for u in agents),
            "latency_ms": answer.latency_ms,
            "first_token_ms": answer.first_token_ms,
            "error": answer.error,
            "incomplete": int(incomplete),
        }

    def record(self, sp: SuperPrompt, answer: Answer, incomplete: bool = False) -> int:
        """Append one interaction (``incomplete``: the answer was stopped); returns its row id."""
        values = {k: self.scrub(v) for k, v in self.row(sp, answer, incomplete).items()}
        names = list(values)
        sql = (f"INSERT INTO {TABLE} ({', '.join(names)}) "
               f"VALUES ({', '.join('?' for _ in names)})")
        with closing(self.connect()) as conn, conn:
            cur = conn.execute(sql, [values[n] for n in names])
            if cur.lastrowid is None:  # pragma: no cover - sqlite3 sets it after an INSERT
                raise sqlite3.DatabaseError(f"{self.path}: the new row has no row id")
            return cur.lastrowid

    def recent(self, limit: int = 50) -> list[dict[str, Any]]:
        """The last ``limit`` interactions, newest first, JSON columns parsed."""
        with closing(self.connect()) as conn:
            rows = conn.execute(f"SELECT * FROM {TABLE} ORDER BY id DESC LIMIT ?",
                                (int(limit),)).fetchall()
        out = []
        for r in rows:
            item = dict(r)
            for col in JSON_COLUMNS:
                empty: Any = {} if col == "stage_latency_ms" else []
                item[col] = json.loads(item[col]) if item.get(col) else empty
            out.append(item)
        return out

    def count(self) -> int:
        """How many interactions the log holds."""
        with closing(self.connect()) as conn:
            return int(conn.execute(f"SELECT COUNT(*) FROM {TABLE}").fetchone()[0])


def answer_and_log(engine_cfg: AppConfig, services, sp: SuperPrompt,
                   on_token: TokenCallback | None = None,
                   log_path: str | Path | None = None) -> tuple[SuperPrompt, Answer]:
    """Answer ``sp``, return a copy of it holding the answer (``sp.answer``) and the answer,
    and record the interaction in the QA log (``<index_dir>/qa_log.sqlite3`` by default).

    A log that cannot be written does not cost the answer: the problem is noted in
    ``extras.qa_log.error`` instead of the row id."""
    from ragstream.answering.answer import answer
    from ragstream.state.records import QALogRecord

    ans = answer(sp, engine_cfg, services, on_token)
    out = sp.working_copy()  # the chunks and view rows are frozen: shared, not copied
    out.answer = ans
    path = Path(log_path) if log_path else engine_cfg.qa_log_path
    try:
        row = QALog(path, secret_env=[engine_cfg.settings.llm.api_key_env]).record(out, ans)
        out.extras.qa_log = QALogRecord(path=str(path), id=row)
    except (sqlite3.Error, OSError, SchemaVersionError) as err:
        out.extras.qa_log = QALogRecord(path=str(path),
                                        error=f"the interaction could not be logged: {err}")
    return out, ans
