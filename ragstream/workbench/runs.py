"""The run history: every pass kept in SQLite, one row per run, so that a pass can be listed,
looked at again, compared with another, exported and imported.

A run is one ``SuperPrompt`` as the stages left it (and its answer, once given), the session's
setting overrides that differed from the configuration files (dotted key -> value, e.g.
``{"limits.N2_RERANK_TOP_K": 20}``) and, optionally, a small snapshot of the state after each
stage (``StageSnapshot``).

    store = RunStore(cfg.runs_path, keep=cfg.settings.runs.keep)   # or engine.runs()
    run_id = store.save(sp, session="abc", settings={"limits.N2_RERANK_TOP_K": 20})
    store.save(sp_answered, run_id=run_id)        # the same run, updated in place
    store.list(20, search="rerank")               # RunMeta, newest first
    store.get(run_id).sp                          # StoredRun: the meta, sp and the snapshots
    store.latest("abc"), store.previous(run_id), store.count(), store.delete(run_id)
    new_id = store.import_json(text)              # a file of sp.to_json(), validated
    export_json(store.get(new_id))                # the same JSON as the page's download

Table ``runs``: ``id`` (never reused), ``created`` and ``updated`` (ISO 8601, UTC, ms, ``Z``),
``session`` (who saved it: the page's session, "" from the CLI), ``parent`` (the run it was
made from, or NULL), ``origin`` ("page", "cli", "import", "python", or "api": answered through
the OpenAI-compatible route or the MCP server), then what a list shows without opening the
run: ``prompt`` (``sp.user_text``), ``stage`` (``sp.stage``, the stage reached), ``answer``
(its first line, "" when none), ``settings`` (the overrides, JSON), ``filters`` (in words, ""
when none), ``edits`` (how many), ``kb`` (the knowledge base's fingerprint when Retrieval ran)
and ``wall_ms`` (the stages' wall times plus the answer's
latency); and the big parts, zlib-compressed: ``sp`` (the SuperPrompt's JSON) and ``stages``
(the snapshots' JSON). An index on ``session`` finds a session's latest run. After each new
run the oldest are deleted so that at most ``keep`` remain.

Table ``drafts`` (schema version 2): per ``session``, the page's state with the person's edits
(chunk decisions, fields, notes, rules) that no pass has run yet, the state they were made on
(``seen``, shown marked out of date) and the run they were made on; saved at every edit,
dropped when a pass of the session is kept, so that a reload loses none of them
(``save_draft``, ``draft``, ``drop_draft``).

The schema is versioned as the interaction log's is (``ragstream.workbench.qa_log``): ``MIGRATIONS``
lists the steps in order, ``PRAGMA user_version`` counts the steps a file has, a missing step
is applied when the file is opened and a file from a newer RAGstream is refused with
``SchemaVersionError``. Every text stored (the JSON before it is compressed too) has the value
of every secret-looking environment variable (and of ``secret_env``) replaced by ``***``.
Each call opens its own connection, so one ``RunStore`` may be shared across threads.
"""

from __future__ import annotations

import builtins
import json
import os
import sqlite3
import zlib
from collections.abc import Callable, Iterable, Mapping
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ragstream.common.errors import RunFileError, RunNotFoundError
from ragstream.state.super_prompt import SuperPrompt
from ragstream.workbench.qa_log import MASK, _secrets, open_migrated

if TYPE_CHECKING:  # pragma: no cover
    from ragstream.common.config import AppConfig

TABLE = "runs"
#: the table of the sessions' edits not yet run (``RunStore.save_draft``)
DRAFTS = "drafts"
#: zlib's level for the stored JSON: a whole pass (~315 kB of JSON) packs to ~85 kB in ~2.5 ms
#: at 1, ~70 kB in ~7 ms at the default 6; the page saves after every stage click, so 1
ZLIB_LEVEL = 1
#: where a run came from: the Streamlit page, ``ragstream run``, an imported file, Python code
ORIGINS = ("page", "cli", "import", "python", "api")
#: the columns ``list`` reads: everything but the two compressed parts
META_COLUMNS = ("id", "created", "updated", "session", "parent", "origin", "prompt", "stage",
                "answer", "settings", "filters", "edits", "kb", "wall_ms")
#: validation problems ``parse_run_json`` names one by one; the rest are counted
MAX_LISTED_PROBLEMS = 5
#: how a refused run file can be fixed, the end of every ``RunFileError`` of ``parse_run_json``
_FILE_FIX = ("Import a file exported by `python -m ragstream runs export ID` or by the page's "
             "\"Download SuperPrompt (JSON)\", unchanged.")


def _create_table(conn: sqlite3.Connection) -> None:
    """Version 1: the ``runs`` table and its index on ``session``."""
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {TABLE} ("
        "id INTEGER PRIMARY KEY AUTOINCREMENT, "  # AUTOINCREMENT: a deleted id is never reused
        "created TEXT NOT NULL, updated TEXT NOT NULL, session TEXT NOT NULL DEFAULT '', "
        "parent INTEGER, origin TEXT NOT NULL, prompt TEXT NOT NULL, stage TEXT NOT NULL, "
        "answer TEXT NOT NULL DEFAULT '', settings TEXT NOT NULL DEFAULT '{}', "
        "filters TEXT NOT NULL DEFAULT '', edits INTEGER NOT NULL DEFAULT 0, kb TEXT, "
        "wall_ms REAL NOT NULL DEFAULT 0, sp BLOB NOT NULL, stages BLOB NOT NULL)")
    conn.execute(f"CREATE INDEX IF NOT EXISTS {TABLE}_session ON {TABLE} (session, id)")


def _create_drafts(conn: sqlite3.Connection) -> None:
    """Version 2: the ``drafts`` table: per session, the state with the person's edits (notes,
    rules, chunk decisions) that no pass has run yet, so that a reload brings them back."""
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {DRAFTS} ("
        "session TEXT PRIMARY KEY, updated TEXT NOT NULL, run_id INTEGER, "
        "sp BLOB NOT NULL, seen BLOB)")


#: the schema migrations in order: step ``i`` takes a file from version ``i`` to ``i + 1``
MIGRATIONS: tuple[Callable[[sqlite3.Connection], None], ...] = (_create_table, _create_drafts)



def _now() -> str:
    """The time now, as ``created`` and ``updated`` hold it: ``2025-06-01T12:34:56.789Z``."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _casefold(value: str | None) -> str | None:
    """SQLite's ``casefold()``: Python's, so that a search ignores case beyond ASCII too."""
    return value.casefold() if isinstance(value, str) else value


def _like_pattern(text: str) -> str:
    """``text`` anywhere, as a LIKE pattern with escape ``\\``: its ``%`` and ``_`` match only
    themselves."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


# --------------------------------------------------------------------------- models


class StageSnapshot(BaseModel):
    """The state right after one stage ran: small enough to keep one per stage of every run."""

    model_config = ConfigDict(extra="forbid")

    stage: str
    prompt_ready: str = ""
    body: dict[str, str] = Field(default_factory=dict)
    wall_ms: float = 0.0

    @classmethod
    def of(cls, stage: str, sp: SuperPrompt) -> StageSnapshot:
        """The snapshot of ``sp`` just after ``stage`` ran (its wall time: the stage's last
        run in ``sp.stage_runs``, 0 when it has none) — what ``on_stage(stage, sp)`` gets."""
        wall = next((r.wall_ms for r in reversed(sp.stage_runs) if r.stage == stage), 0.0)
        return cls(stage=stage, prompt_ready=sp.prompt_ready, body=dict(sp.body), wall_ms=wall)


class RunMeta(BaseModel):
    """What a list of runs shows of one run, without opening its SuperPrompt."""

    model_config = ConfigDict(extra="forbid")

    id: int
    created: str = Field(description="when it was saved first: ISO 8601, UTC, ms, 'Z'")
    updated: str = Field(description="when it was saved last (= created until updated)")
    session: str = Field("", description="the session that saved it; '' from the CLI")
    parent: int | None = Field(None, description="the run it was made from, if any")
    origin: str = Field("python", description="'page', 'cli', 'import', 'python' or 'api'")
    prompt: str = Field("", description="the prompt text, sp.user_text")
    stage: str = Field("raw", description="the stage reached, sp.stage")
    answer: str = Field("", description="the answer's first line; '' when not answered")
    settings: dict[str, Any] = Field(default_factory=dict, description=(
        "the session's setting overrides that differed from the configuration files"))
    filters: str = Field("", description="the filters in words; '' when none")
    edits: int = Field(0, description="how many edits the person made")
    kb: str | None = Field(None, description="the knowledge base's fingerprint (Retrieval's)")
    wall_ms: float = Field(0.0, description="the stages' wall times plus the answer's latency")

    def differences(self) -> list[str]:
        """What this run did differently from the configuration files, one item each:
        ``["limits.N2_RERANK_TOP_K=20", "filters: doc_type=faq", "edits 2"]`` (empty: none)."""
        parts = [f"{key}={value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)}"
                 for key, value in sorted(self.settings.items())]
        if self.filters:
            parts.append(f"filters: {self.filters}")
        if self.edits:
            parts.append(f"edits {self.edits}")
        return parts


class StoredRun(RunMeta):
    """A whole run: its meta, the SuperPrompt and the snapshot after each stage (by stage name;
    empty when the saver passed none)."""

    sp: SuperPrompt
    stages: dict[str, StageSnapshot] = Field(default_factory=dict)

    @property
    def meta(self) -> RunMeta:
        """The run's meta alone (what ``RunStore.list`` gives)."""
        return RunMeta.model_validate(self.model_dump(include=set(RunMeta.model_fields)))


class Draft(BaseModel):
    """A session's state with edits that no pass has run yet (``RunStore.save_draft``)."""

    session: str
    updated: str
    run_id: int | None = None
    sp: SuperPrompt
    seen: SuperPrompt | None = None


def meta_of(sp: SuperPrompt) -> dict[str, Any]:
    """The columns a run's meta takes from ``sp``: prompt, stage, answer (its first line),
    filters, edits, kb and wall_ms."""
    answer = ""
    if sp.answer is not None:
        answer = next((line.strip() for line in sp.answer.text.splitlines() if line.strip()), "")
    retrieval = sp.computed_from.get("Retrieval")
    wall = sum(r.wall_ms for r in sp.stage_runs) + (sp.answer.latency_ms if sp.answer else 0.0)
    return {
        "prompt": sp.user_text,
        "stage": sp.stage,
        "answer": answer,
        "filters": "" if sp.filters.empty else sp.filters.describe(),
        "edits": len(sp.edits),
        "kb": retrieval.kb if retrieval is not None else None,
        "wall_ms": round(wall, 1),
    }


# --------------------------------------------------------------------------- files


def parse_run_json(text: str, name: str = "The file") -> SuperPrompt:
    """The SuperPrompt in ``text``, which must be what ``sp.to_json()`` exports (the page's
    "Download SuperPrompt (JSON)", ``ragstream runs export``): a JSON object with every field
    of a SuperPrompt, each valid. Anything else raises ``RunFileError`` saying what is wrong
    (``name`` is how the message names the text, e.g. its file name) and how to fix it."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise RunFileError(f"{name} is not JSON: {err.msg} at line {err.lineno}, column "
                           f"{err.colno}. {_FILE_FIX}") from None
    if not isinstance(data, dict):
        kind = {list: "a list", str: "a string", bool: "true or false", type(None): "null"}.get(
            type(data), "a number")
        raise RunFileError(f"{name} holds JSON {kind}, not an object: a run file is one "
                           f"SuperPrompt, a JSON object with user_text, stage, body, … "
                           f"{_FILE_FIX}")
    problems = [f"{field}: missing (every SuperPrompt export has it)"
                for field in SuperPrompt.model_fields if field not in data]
    try:
        sp = SuperPrompt.model_validate(data)
    except ValidationError as err:
        problems += [f"{'.'.join(str(p) for p in e['loc']) or '(top level)'}: {e['msg']}"
                     for e in err.errors()]
    else:
        if not problems:
            return sp
    shown = problems[:MAX_LISTED_PROBLEMS]
    more = len(problems) - len(shown)
    lines = "\n".join(f"  - {p}" for p in shown) + (f"\n  … and {more} more" if more else "")
    raise RunFileError(f"{name} is not a valid SuperPrompt ({len(problems)} problem"
                       f"{'s' if len(problems) != 1 else ''}):\n{lines}\n{_FILE_FIX}")


def export_json(run: StoredRun) -> str:
    """The run's SuperPrompt as JSON: the same text as the page's "Download SuperPrompt (JSON)"
    (``sp.to_json()``), which ``parse_run_json`` and ``RunStore.import_json`` read back."""
    return run.sp.to_json()


# --------------------------------------------------------------------------- the store


class RunStore:
    """The SQLite run history: save (insert or update) runs, list and search them, read one
    back, import and export; secrets scrubbed, schema migrated, at most ``keep`` runs kept."""

    def __init__(self, path: str | Path, keep: int = 200, environ: Mapping[str, str] | None = None,
                 secret_env: Iterable[str] = ()):
        if keep < 1:
            raise ValueError(f"keep must be at least 1, not {keep}")
        self.path = Path(path)
        self.keep = keep
        secrets = _secrets(os.environ if environ is None else environ, secret_env)
        # a secret with a quote, a backslash or a control character appears escaped in JSON
        escaped = {json.dumps(s, ensure_ascii=False)[1:-1] for s in secrets}
        self._secrets = sorted(set(secrets) | escaped, key=len, reverse=True)

    @classmethod
    def for_config(cls, cfg: AppConfig) -> RunStore:
        """The run history ``cfg`` configures: ``cfg.runs_path``, keeping ``runs.keep`` runs and
        scrubbing the LLM API key's value (``llm.api_key_env``) besides the usual secrets."""
        return cls(cfg.runs_path, keep=cfg.settings.runs.keep,
                   secret_env=[cfg.settings.llm.api_key_env])

    # -- plumbing -----------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        return open_migrated(self.path, MIGRATIONS, prepare=lambda conn: conn.create_function(
            "casefold", 1, _casefold, deterministic=True))

    def _scrub(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, MASK)
        return text

    def _pack(self, text: str) -> bytes:
        """A JSON text as stored: scrubbed, then compressed (level ``ZLIB_LEVEL``)."""
        return zlib.compress(self._scrub(text).encode("utf-8"), ZLIB_LEVEL)

    def _unpack(self, blob: bytes, run_id: int, part: str) -> str:
        try:
            return zlib.decompress(blob).decode("utf-8")
        except (zlib.error, UnicodeDecodeError) as err:
            raise self._unreadable(run_id, part, str(err)) from None

    def _unreadable(self, run_id: int, part: str, detail: str) -> RunFileError:
        return RunFileError(
            f"Run {run_id} in {self.path} cannot be read back: its {part} is damaged ({detail}). "
            f"Other runs are not affected; to start a new history, move the file away (a new "
            f"one is created in its place).")

    @staticmethod
    def _meta(row: sqlite3.Row) -> RunMeta:
        item = {name: row[name] for name in META_COLUMNS}
        item["settings"] = json.loads(item["settings"] or "{}")
        return RunMeta.model_validate(item)

    def _stages_json(self, stages: Mapping[str, StageSnapshot]) -> str:
        return json.dumps({name: snap.model_dump() for name, snap in stages.items()},
                          ensure_ascii=False)

    # -- saving -------------------------------------------------------------------------

    def save(self, sp: SuperPrompt, *, session: str = "", settings: Mapping[str, Any] | None = None,
             origin: str = "page", parent: int | None = None, run_id: int | None = None,
             stages: Mapping[str, StageSnapshot] | None = None) -> int:
        """Keep ``sp`` as a run and return its id.

        Without ``run_id``: a new run (``settings`` and ``stages`` default to none), after which
        the oldest runs are deleted so that at most ``keep`` remain. With ``run_id``: that run
        is updated in place — same id, ``created``, ``session``, ``origin`` and ``parent``, a
        new ``updated`` and everything taken from ``sp``; ``settings`` and ``stages`` replace
        the stored ones when given and are kept when None. ``RunNotFoundError`` when there is
        no run ``run_id``; ``ValueError`` for an origin not in ``ORIGINS``."""
        if origin not in ORIGINS:
            raise ValueError(f"origin must be one of {', '.join(ORIGINS)}, not {origin!r}")
        now = _now()
        values: dict[str, Any] = {"updated": now, **meta_of(sp)}
        values = {k: self._scrub(v) if isinstance(v, str) else v for k, v in values.items()}
        values["sp"] = self._pack(sp.to_json(indent=None))
        if settings is not None or run_id is None:
            values["settings"] = self._scrub(json.dumps(dict(settings or {}), ensure_ascii=False,
                                                        sort_keys=True, default=str))
        if stages is not None or run_id is None:
            values["stages"] = self._pack(self._stages_json(stages or {}))
        with closing(self._connect()) as conn, conn:
            if run_id is not None:
                names = list(values)
                cur = conn.execute(
                    f"UPDATE {TABLE} SET {', '.join(f'{n} = ?' for n in names)} WHERE id = ?",
                    [values[n] for n in names] + [int(run_id)])
                if cur.rowcount == 0:
                    raise RunNotFoundError(run_id, self.path)
                return int(run_id)
            values.update(created=now, session=self._scrub(session), parent=parent, origin=origin)
            names = list(values)
            cur = conn.execute(f"INSERT INTO {TABLE} ({', '.join(names)}) "
                               f"VALUES ({', '.join('?' for _ in names)})",
                               [values[n] for n in names])
            if cur.lastrowid is None:  # pragma: no cover - sqlite3 sets it after an INSERT
                raise sqlite3.DatabaseError(f"{self.path}: the new run has no id")
            conn.execute(f"DELETE FROM {TABLE} WHERE id <= "
                         f"(SELECT id FROM {TABLE} ORDER BY id DESC LIMIT 1 OFFSET ?)", (self.keep,))
            return cur.lastrowid

    def import_json(self, text: str, origin: str = "import", name: str = "The file") -> int:
        """Save the SuperPrompt of a run file (``parse_run_json``: ``RunFileError`` naming the
        text as ``name`` when it is not one) as a new run without setting overrides; return its
        id."""
        return self.save(parse_run_json(text, name), origin=origin, settings={})

    def delete(self, run_id: int) -> None:
        """Delete run ``run_id``; ``RunNotFoundError`` when there is none. Its id is not reused."""
        with closing(self._connect()) as conn, conn:
            if conn.execute(f"DELETE FROM {TABLE} WHERE id = ?", (int(run_id),)).rowcount == 0:
                raise RunNotFoundError(run_id, self.path)

    # -- reading ------------------------------------------------------------------------

    def list(self, limit: int = 50, search: str = "", session: str | None = None) -> builtins.list[RunMeta]:
        """At most ``limit`` runs, newest first: those whose prompt holds ``search`` (any case;
        ``%`` and ``_`` are plain characters) and, when given, of ``session`` only."""
        where, params = [], []
        if search:
            where.append("casefold(prompt) LIKE ? ESCAPE '\\'")
            params.append(_like_pattern(search.casefold()))
        if session is not None:
            where.append("session = ?")
            params.append(session)
        sql = (f"SELECT {', '.join(META_COLUMNS)} FROM {TABLE}"
               + (f" WHERE {' AND '.join(where)}" if where else "") + " ORDER BY id DESC LIMIT ?")
        with closing(self._connect()) as conn:
            rows = conn.execute(sql, [*params, max(0, int(limit))]).fetchall()
        return [self._meta(r) for r in rows]

    def get(self, run_id: int) -> StoredRun:
        """Run ``run_id`` whole; ``RunNotFoundError`` when there is none."""
        with closing(self._connect()) as conn:
            row = conn.execute(f"SELECT * FROM {TABLE} WHERE id = ?", (int(run_id),)).fetchone()
        if row is None:
            raise RunNotFoundError(run_id, self.path)
        meta = self._meta(row)
        try:
            sp = SuperPrompt.model_validate_json(self._unpack(row["sp"], meta.id, "SuperPrompt"))
            stages = {name: StageSnapshot.model_validate(snap) for name, snap in
                      json.loads(self._unpack(row["stages"], meta.id, "stage snapshots")).items()}
        except (ValidationError, ValueError) as err:  # json.JSONDecodeError is a ValueError
            raise self._unreadable(meta.id, "SuperPrompt or stage snapshots", str(err)) from None
        return StoredRun(**meta.model_dump(), sp=sp, stages=stages)

    def latest(self, session: str) -> StoredRun | None:
        """The newest run of ``session``, or None when it saved none (or they were pruned)."""
        with closing(self._connect()) as conn:
            row = conn.execute(f"SELECT id FROM {TABLE} WHERE session = ? ORDER BY id DESC LIMIT 1",
                               (session,)).fetchone()
        return self.get(row["id"]) if row is not None else None

    def previous(self, run_id: int) -> RunMeta | None:
        """The run saved just before run ``run_id``: its parent when it has one that is still
        kept, else the next older run; None for the oldest. ``RunNotFoundError`` when there is
        no run ``run_id``."""
        cols = ", ".join(META_COLUMNS)
        with closing(self._connect()) as conn:
            row = conn.execute(f"SELECT parent FROM {TABLE} WHERE id = ?", (int(run_id),)).fetchone()
            if row is None:
                raise RunNotFoundError(run_id, self.path)
            found = None
            if row["parent"] is not None:
                found = conn.execute(f"SELECT {cols} FROM {TABLE} WHERE id = ?",
                                     (row["parent"],)).fetchone()
            if found is None:
                found = conn.execute(f"SELECT {cols} FROM {TABLE} WHERE id < ? ORDER BY id DESC "
                                     f"LIMIT 1", (int(run_id),)).fetchone()
        return self._meta(found) if found is not None else None

    # -- drafts: a session's edits that no pass has run yet ------------------------------

    def save_draft(self, session: str, sp: SuperPrompt, seen: SuperPrompt | None = None,
                   run_id: int | None = None) -> None:
        """Keep ``sp`` (the page's state with edits not yet run) as ``session``'s draft, with
        ``seen`` (the state whose results those edits discarded, still shown marked out of
        date) and the run the edits were made on; it replaces the session's earlier draft."""
        values = (self._scrub(session), _now(), run_id, self._pack(sp.to_json(indent=None)),
                  self._pack(seen.to_json(indent=None)) if seen is not None else None)
        with closing(self._connect()) as conn, conn:
            conn.execute(f"INSERT OR REPLACE INTO {DRAFTS} (session, updated, run_id, sp, seen) "
                         "VALUES (?, ?, ?, ?, ?)", values)

    def draft(self, session: str) -> Draft | None:
        """``session``'s draft, or None when it has none. ``RunFileError`` when it cannot be
        read back."""
        with closing(self._connect()) as conn:
            row = conn.execute(f"SELECT * FROM {DRAFTS} WHERE session = ?", (session,)).fetchone()
        if row is None:
            return None
        try:
            sp = SuperPrompt.model_validate_json(zlib.decompress(row["sp"]))
            seen = (SuperPrompt.model_validate_json(zlib.decompress(row["seen"]))
                    if row["seen"] is not None else None)
        except (ValidationError, ValueError, zlib.error) as err:
            raise RunFileError(f"The edits session {session!r} made and did not run yet, kept in "
                               f"{self.path}, cannot be read back ({str(err)[:200]}). The runs "
                               f"are not affected; make the edits again.") from None
        return Draft(session=session, updated=row["updated"], run_id=row["run_id"], sp=sp,
                     seen=seen)

    def drop_draft(self, session: str) -> None:
        """Forget ``session``'s draft (a pass ran its edits, or they were all undone)."""
        with closing(self._connect()) as conn, conn:
            conn.execute(f"DELETE FROM {DRAFTS} WHERE session = ?", (session,))

    def count(self) -> int:
        """How many runs the history holds."""
        with closing(self._connect()) as conn:
            return int(conn.execute(f"SELECT COUNT(*) FROM {TABLE}").fetchone()[0])
