"""The run history (``ragstream.workbench.runs``) and its CLI: a real SQLite file in a temp folder."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
import zlib
from contextlib import closing
from datetime import datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from ragstream.common.config import load_config
from ragstream.common.errors import ConfigError, RunFileError, RunNotFoundError, SchemaVersionError
from ragstream.interfaces import cli
from ragstream.state.records import Edit, StageInputs, edit_stage
from ragstream.state.super_prompt import Answer, Filters, StageRun, SuperPrompt
from ragstream.workbench.engine import Engine
from ragstream.workbench.runs import (
    MIGRATIONS,
    RunMeta,
    RunStore,
    StageSnapshot,
    StoredRun,
    export_json,
    parse_run_json,
)

ROOT = Path(__file__).resolve().parent.parent
SECRET = "sk-abcdefgh12345"


def _sp(prompt: str = "What does RRF fuse?", *, answered: bool = False, **fields) -> SuperPrompt:
    """A small SuperPrompt that went through Retrieval and ReRanker (and was answered)."""
    base: dict = dict(
        user_text=prompt, stage="reranked", body={"task": prompt, "tone": "neutral"},
        stage_runs=[StageRun(stage="Retrieval", wall_ms=12.5), StageRun(stage="ReRanker", wall_ms=30.0)],
        final_selection_ids=["kb/a.md#0", "kb/b.md#2"],
        computed_from={"Retrieval": StageInputs(kb="kb-fingerprint-1")})
    if answered:
        base["answer"] = Answer(text="\n  RRF fuses the two rankings [1].\nMore detail [2].",
                                latency_ms=100.0)
    base.update(fields)
    return SuperPrompt(**base)


def _store(tmp_path: Path, **kw) -> RunStore:
    kw.setdefault("environ", {})
    return RunStore(tmp_path / "hist" / "runs.sqlite3", **kw)


def _version(path: Path) -> int:
    with closing(sqlite3.connect(path)) as conn:
        return conn.execute("PRAGMA user_version").fetchone()[0]


def _stored_texts(path: Path) -> list[str]:
    """Every value of every row, the BLOBs decompressed: what the file holds, readable."""
    with closing(sqlite3.connect(path)) as conn:
        rows = conn.execute("SELECT * FROM runs").fetchall()
    return [zlib.decompress(v).decode() if isinstance(v, bytes) else str(v) for r in rows for v in r]


# --------------------------------------------------------------------------- the store


def test_save_list_and_get(tmp_path):
    store = _store(tmp_path)
    assert store.count() == 0 and store.list() == []
    pin = Edit(id=1, kind="pin", stage=edit_stage("pin", "kb/a.md#0"), target="kb/a.md#0", after="pin")
    sp = _sp(answered=True, filters=Filters(doc_type=("faq",)), edits=[pin])
    snaps = {"Retrieval": StageSnapshot.of("Retrieval", sp)}
    run_id = store.save(sp, session="s1", settings={"limits.N2_RERANK_TOP_K": 20}, origin="python",
                        stages=snaps)
    assert run_id == 1 and store.count() == 1

    [meta] = store.list()
    assert isinstance(meta, RunMeta) and not isinstance(meta, StoredRun)
    assert (meta.id, meta.session, meta.parent, meta.origin) == (1, "s1", None, "python")
    assert (meta.prompt, meta.stage, meta.answer) == ("What does RRF fuse?", "reranked",
                                                      "RRF fuses the two rankings [1].")
    assert meta.settings == {"limits.N2_RERANK_TOP_K": 20}
    assert (meta.filters, meta.edits, meta.kb) == ("doc_type=faq", 1, "kb-fingerprint-1")
    assert meta.wall_ms == 142.5  # 12.5 + 30 + the answer's 100
    assert meta.created == meta.updated and meta.created.endswith("Z") and len(meta.created) == 24
    assert datetime.fromisoformat(meta.created.replace("Z", "+00:00"))
    assert meta.differences() == ["limits.N2_RERANK_TOP_K=20", "filters: doc_type=faq", "edits 1"]

    run = store.get(run_id)
    assert run.sp == sp and run.meta == meta
    assert run.stages == snaps and run.stages["Retrieval"].wall_ms == 12.5
    assert run.stages["Retrieval"].body == {"task": "What does RRF fuse?", "tone": "neutral"}


def test_an_unanswered_run_without_filters_or_retrieval(tmp_path):
    store = _store(tmp_path)
    meta = store.get(store.save(SuperPrompt(user_text="hi"))).meta
    assert (meta.answer, meta.filters, meta.edits, meta.kb, meta.wall_ms) == ("", "", 0, None, 0.0)
    assert meta.stage == "raw" and meta.origin == "page" and meta.differences() == []


def test_update_in_place_keeps_the_id_and_what_was_not_given(tmp_path):
    store = _store(tmp_path)
    snaps = {"ReRanker": StageSnapshot(stage="ReRanker", prompt_ready="p", wall_ms=3.0)}
    run_id = store.save(_sp(), session="s1", settings={"settings.retrieval.tau": 5.0}, origin="cli",
                        parent=None, stages=snaps)
    before = store.get(run_id)
    time.sleep(0.01)
    assert store.save(_sp(answered=True), run_id=run_id) == run_id
    after = store.get(run_id)
    assert store.count() == 1
    assert after.created == before.created and after.updated > before.updated
    assert (after.session, after.origin) == ("s1", "cli")  # who saved it stays
    assert after.answer == "RRF fuses the two rankings [1]." and after.sp.answer is not None
    assert after.settings == {"settings.retrieval.tau": 5.0} and after.stages == snaps  # kept
    store.save(_sp(), run_id=run_id, settings={}, stages={})
    assert store.get(run_id).settings == {} and store.get(run_id).stages == {}
    with pytest.raises(RunNotFoundError, match="no run 9 "):
        store.save(_sp(), run_id=9)
    with pytest.raises(ValueError, match="origin must be one of"):
        store.save(_sp(), origin="shell")


def test_list_newest_first_search_and_session(tmp_path):
    store = _store(tmp_path)
    prompts = ["How does RERANKING work?", "What is 100% recall?", "snake_case names",
               "Über die Fusion", "What is recall at k?"]
    for i, prompt in enumerate(prompts):
        store.save(_sp(prompt), session="a" if i % 2 == 0 else "b")
    assert [m.id for m in store.list()] == [5, 4, 3, 2, 1]
    assert [m.id for m in store.list(limit=2)] == [5, 4]
    assert [m.id for m in store.list(search="reranking")] == [1]  # any case
    assert [m.id for m in store.list(search="über")] == [4]  # beyond ASCII too
    assert [m.id for m in store.list(search="recall")] == [5, 2]
    assert [m.id for m in store.list(search="100%")] == [2]  # % is a plain character
    assert store.list(search="%") == store.list(search="100%")
    assert [m.id for m in store.list(search="e_c")] == [3]  # _ is a plain character
    assert store.list(search="nowhere") == []
    assert [m.id for m in store.list(session="b")] == [4, 2]
    assert [m.id for m in store.list(search="recall", session="a")] == [5]


def test_latest_and_previous(tmp_path):
    store = _store(tmp_path)
    first = store.save(_sp("one"), session="a")
    second = store.save(_sp("two"), session="b")
    third = store.save(_sp("three"), session="a", parent=first)
    fourth = store.save(_sp("four"), session="a")
    latest = store.latest("a")
    assert latest is not None and latest.id == fourth and latest.sp.user_text == "four"
    assert store.latest("nobody") is None
    assert store.previous(first) is None  # the oldest
    assert store.previous(second).id == first  # no parent: the next older
    assert store.previous(third).id == first  # its parent first
    assert store.previous(fourth).id == third
    store.delete(first)  # a parent that is gone: the next older instead
    assert store.previous(third).id == second
    with pytest.raises(RunNotFoundError):
        store.previous(99)


def test_prune_to_keep_and_ids_are_never_reused(tmp_path):
    store = _store(tmp_path, keep=3)
    for i in range(5):
        store.save(_sp(f"prompt {i}"))
    assert store.count() == 3 and [m.id for m in store.list()] == [5, 4, 3]
    with pytest.raises(RunNotFoundError):
        store.get(1)
    store.delete(5)
    assert store.save(_sp("again")) == 6  # the deleted newest id is not given out again
    assert [m.id for m in store.list()] == [6, 4, 3]
    with pytest.raises(ValueError, match="keep must be at least 1"):
        RunStore(tmp_path / "x.sqlite3", keep=0)


def test_get_and_delete_of_a_missing_run_say_how_to_list_runs(tmp_path):
    store = _store(tmp_path)
    with pytest.raises(RunNotFoundError) as err:
        store.get(42)
    msg = str(err.value)
    assert "no run 42 in" in msg and str(store.path) in msg and "ragstream runs list" in msg
    assert err.value.kind == "run not found" and err.value.run_id == 42
    with pytest.raises(RunNotFoundError):
        store.delete(42)


def test_a_damaged_run_is_named(tmp_path):
    store = _store(tmp_path)
    run_id = store.save(_sp())
    with closing(sqlite3.connect(store.path)) as conn, conn:
        conn.execute("UPDATE runs SET sp = ? WHERE id = ?", (b"not zlib", run_id))
    with pytest.raises(RunFileError, match=f"Run {run_id} in .* cannot be read back"):
        store.get(run_id)
    assert store.list()[0].id == run_id  # the meta is still listed


# --------------------------------------------------------------------------- schema


def test_an_empty_file_is_migrated_and_a_newer_one_refused(tmp_path):
    path = tmp_path / "runs.sqlite3"
    path.write_bytes(b"")  # an empty file is an empty database
    store = RunStore(path, environ={})
    assert store.count() == 0 and _version(path) == len(MIGRATIONS) == 2
    with closing(sqlite3.connect(path)) as conn:
        indexes = [r[1] for r in conn.execute("PRAGMA index_list(runs)")]
    assert "runs_session" in indexes
    store.save(_sp())
    assert RunStore(path, environ={}).count() == 1  # opening again changes nothing

    newer = tmp_path / "newer.sqlite3"
    with closing(sqlite3.connect(newer)) as conn:
        conn.execute("PRAGMA user_version = 7")
    with pytest.raises(SchemaVersionError, match="schema version 7.*versions up to 2"):
        RunStore(newer, environ={}).count()
    with pytest.raises(SchemaVersionError):
        RunStore(newer, environ={}).save(_sp())
    assert _version(newer) == 7  # left as it was


def test_a_version_1_history_gains_the_drafts_table_and_keeps_its_runs(tmp_path):
    path = tmp_path / "runs.sqlite3"
    with closing(sqlite3.connect(path)) as conn, conn:
        MIGRATIONS[0](conn)
        conn.execute("PRAGMA user_version = 1")
    with closing(sqlite3.connect(path)) as conn, conn:  # a run saved by the version-1 code
        conn.execute("INSERT INTO runs (created, updated, origin, prompt, stage, sp, stages) "
                     "VALUES ('t', 't', 'cli', 'p', 'raw', ?, ?)",
                     (zlib.compress(_sp().to_json().encode()), zlib.compress(b"{}")))
    store = RunStore(path, environ={})
    assert store.count() == 1 and store.draft("s") is None and _version(path) == 2
    store.save_draft("s", _sp("an edited prompt"), run_id=1)
    assert store.draft("s").sp.user_text == "an edited prompt"


# --------------------------------------------------------------------------- drafts


def test_a_sessions_draft_is_kept_replaced_and_dropped(tmp_path, monkeypatch):
    store = _store(tmp_path, environ={"RAGSTREAM_TEST_API_KEY": SECRET})
    run_id = store.save(_sp(), session="abc")
    seen = _sp()
    edited = _sp(f"with my key {SECRET}")
    store.save_draft("abc", edited, seen, run_id)
    draft = store.draft("abc")
    assert draft.run_id == run_id and draft.seen == seen
    assert draft.sp.user_text == "with my key ***"  # scrubbed like a run
    with closing(sqlite3.connect(store.path)) as conn:
        blobs = [zlib.decompress(r[0]).decode() for r in conn.execute("SELECT sp FROM drafts")]
    assert blobs and not [b for b in blobs if SECRET in b]
    assert store.draft("other") is None  # one session's draft is its own
    store.save_draft("abc", _sp("again"), None, run_id)  # the newest replaces it
    assert store.draft("abc").sp.user_text == "again" and store.draft("abc").seen is None
    store.drop_draft("abc")
    assert store.draft("abc") is None
    assert store.count() == 1  # the runs are not touched


def test_a_damaged_draft_is_named_and_the_runs_still_read(tmp_path):
    store = _store(tmp_path)
    run_id = store.save(_sp(), session="abc")
    store.save_draft("abc", _sp("edited"), run_id=run_id)
    with closing(sqlite3.connect(store.path)) as conn, conn:
        conn.execute("UPDATE drafts SET sp = ?", (b"not zlib",))
    with pytest.raises(RunFileError, match="'abc' made and did not run yet.*make the edits again"):
        store.draft("abc")
    assert store.get(run_id).sp == _sp()


# --------------------------------------------------------------------------- secrets


def test_secrets_are_scrubbed_everywhere_even_compressed(tmp_path, monkeypatch):
    monkeypatch.setenv("RAGSTREAM_TEST_API_KEY", SECRET)
    store = RunStore(tmp_path / "runs.sqlite3")  # the real environment
    sp = _sp(f"my key is {SECRET}, keep it", answered=True, body={"task": SECRET})
    run_id = store.save(sp, session=f"s-{SECRET}", settings={"llm.key": SECRET},
                        stages={"A0_PreProcessing": StageSnapshot(stage="A0_PreProcessing",
                                                                  prompt_ready=SECRET)})
    assert SECRET.encode() not in store.path.read_bytes()
    texts = _stored_texts(store.path)
    assert not [t for t in texts if SECRET in t]
    assert any("my key is ***, keep it" in t for t in texts)
    run = store.get(run_id)
    assert run.prompt == run.sp.user_text == "my key is ***, keep it"
    assert run.settings == {"llm.key": "***"} and run.session == "s-***"
    assert run.stages["A0_PreProcessing"].prompt_ready == "***"
    assert store.list(search="my key is ***")[0].id == run_id


def test_a_named_secret_and_one_json_escapes_are_scrubbed(tmp_path):
    odd = 'pa"ss\\word-12345'  # JSON writes it as pa\"ss\\word-12345
    store = _store(tmp_path, environ={"MY_LLM_CREDS": "plainvalue123", "ODD_TOKEN": odd},
                   secret_env=["MY_LLM_CREDS"])
    run_id = store.save(_sp(f"a plainvalue123 and {odd}"))
    texts = _stored_texts(store.path)
    assert not [t for t in texts if "plainvalue123" in t or odd in t or
                json.dumps(odd)[1:-1] in t]
    assert store.get(run_id).sp.user_text == "a *** and ***"


# --------------------------------------------------------------------------- files


def test_export_import_round_trip(tmp_path):
    store = _store(tmp_path)
    sp = _sp(answered=True, filters=Filters(source=("faq/*",)))
    run = store.get(store.save(sp, settings={"limits.N3_FINAL_SELECTION_MAX": 8}))
    text = export_json(run)
    assert text == sp.to_json()  # the page's download, byte for byte
    assert parse_run_json(text) == sp
    new_id = store.import_json(text)
    imported = store.get(new_id)
    assert imported.sp == sp and imported.origin == "import" and imported.settings == {}
    assert export_json(imported) == text


@pytest.mark.parametrize(("text", "says"), [
    ("{not json", "The file is not JSON: Expecting property name enclosed in double quotes at "
                  "line 1, column 2."),
    ("", "The file is not JSON: Expecting value at line 1, column 1."),
    ("[1, 2]", "The file holds JSON a list, not an object"),
    ('"a string"', "The file holds JSON a string, not an object"),
    ("3", "The file holds JSON a number, not an object"),
])
def test_import_refuses_what_is_not_a_json_object(tmp_path, text, says):
    store = _store(tmp_path)
    with pytest.raises(RunFileError) as err:
        store.import_json(text)
    assert str(err.value).startswith(says)
    assert "ragstream runs export" in str(err.value) and err.value.kind == "run file"
    assert store.count() == 0


def test_import_names_missing_and_wrong_fields(tmp_path):
    good = json.loads(_sp().to_json())
    missing = {k: v for k, v in good.items() if k != "user_text"}
    with pytest.raises(RunFileError) as err:
        parse_run_json(json.dumps(missing), "old.json")
    msg = str(err.value)
    assert msg.startswith("old.json is not a valid SuperPrompt (1 problem):")
    assert "  - user_text: missing" in msg

    wrong = {**good, "stage": "nowhere", "edits": "none", "colour": "red"}
    with pytest.raises(RunFileError) as err:
        parse_run_json(json.dumps(wrong))
    msg = str(err.value)
    assert "(3 problems)" in msg
    assert "  - stage: Input should be 'raw', 'preprocessed'" in msg
    assert "  - edits: Input should be a valid list" in msg
    assert "  - colour: Extra inputs are not permitted" in msg

    with pytest.raises(RunFileError) as err:
        parse_run_json("{}")
    msg = str(err.value)
    n = len(SuperPrompt.model_fields)
    assert f"({n} problems)" in msg and f"… and {n - 5} more" in msg
    assert msg.count("\n  - ") == 5


def test_a_real_pass_is_stored_and_restored_equal(kb_engine, tmp_path):
    snaps: dict[str, StageSnapshot] = {}
    sp = kb_engine.run("What does A3 do?",
                       on_stage=lambda name, state: snaps.update({name: StageSnapshot.of(name, state)}))
    store = _store(tmp_path)
    run = store.get(store.save(sp, origin="python", stages=snaps))
    assert run.sp == sp and run.sp.to_json() == sp.to_json()
    assert run.stage == "a5" and run.kb == sp.computed_from["Retrieval"].kb and run.kb
    assert list(run.stages) == [r.stage for r in sp.stage_runs]
    assert run.stages["Prompt_Builder"].prompt_ready == sp.prompt_ready
    assert run.wall_ms == round(sum(r.wall_ms for r in sp.stage_runs), 1)
    assert parse_run_json(export_json(run)) == sp


# --------------------------------------------------------------------------- config


def test_config_and_engine_point_at_the_history(tmp_path):
    cfg = load_config(env={"RAGSTREAM_INDEX_DIR": str(tmp_path)})
    assert (cfg.settings.runs.file, cfg.settings.runs.keep) == ("runs.sqlite3", 200)
    assert cfg.runs_path == tmp_path / "runs.sqlite3"
    assert cfg.runs_path.parent == cfg.qa_log_path.parent
    cfg = cfg.with_overrides({"settings.runs.keep": 5, "settings.runs.file": "h.sqlite3"})
    store = RunStore.for_config(cfg)
    assert (store.path, store.keep) == (tmp_path / "h.sqlite3", 5)
    with pytest.raises(ConfigError, match="runs.keep"):
        cfg.with_overrides({"settings.runs.keep": 0})


# --------------------------------------------------------------------------- CLI, in process


@pytest.fixture
def runs_cli(kb_engine, tmp_path, monkeypatch):
    """The CLI in-process on the session's knowledge base, its index folder (and so its run
    history) in ``tmp_path``; returns ``(invoke, store)``."""
    idx = tmp_path / "idx"
    monkeypatch.setenv("RAGSTREAM_INDEX_DIR", str(idx))
    monkeypatch.setenv("RAGSTREAM_UPLOADS_DIR", str(tmp_path / "uploads"))
    monkeypatch.setattr(cli, "_engine", lambda kb=None: Engine(load_config(), kb_engine.services))

    def invoke(*args: str):
        result = CliRunner().invoke(cli.main, list(args))
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception
        return result

    store = RunStore(idx / "runs.sqlite3", environ={})
    return invoke, store


def test_cli_run_saves_a_run_and_no_save_does_not(runs_cli):
    invoke, store = runs_cli
    out = invoke("run", "What does A3 do?", "--no-sync")
    assert out.exit_code == 0, out.output
    assert out.stderr.splitlines()[-1] == "run 1 saved" and "saved" not in out.stdout
    run = store.get(1)
    assert out.stdout == run.sp.prompt_ready + "\n"
    assert (run.origin, run.settings, run.session, run.stage) == ("cli", {}, "", "a5")
    assert list(run.stages) == [r.stage for r in run.sp.stage_runs]

    out = invoke("run", "What does A3 do?", "--no-sync", "--json")
    assert out.exit_code == 0 and SuperPrompt.from_json(out.stdout) == store.get(2).sp

    out = invoke("run", "What does A3 do?", "--no-sync", "--no-save", "--until", "Retrieval")
    assert out.exit_code == 0 and "saved" not in out.stderr and store.count() == 2


def test_cli_run_answer_is_one_run_with_its_answer(runs_cli):
    invoke, store = runs_cli
    out = invoke("run", "What does A3 do?", "--no-sync", "--answer")
    assert out.exit_code == 0, out.output
    assert store.count() == 1
    run = store.get(1)
    assert run.sp.answer is not None and run.answer and run.answer in out.stdout
    assert run.wall_ms >= run.sp.answer.latency_ms


def test_cli_runs_list_show_export_import(runs_cli, tmp_path):
    invoke, store = runs_cli
    assert invoke("runs", "list").stdout.startswith("No runs saved yet in ")
    assert json.loads(invoke("runs", "list", "--json").stdout) == []
    first = store.save(_sp("How does reranking work?", answered=True),
                       settings={"limits.N2_RERANK_TOP_K": 20})
    second = store.save(_sp("What does RRF fuse?", filters=Filters(doc_type=("faq",))))

    listed = json.loads(invoke("runs", "list", "--json").stdout)
    assert [m["id"] for m in listed] == [second, first]
    assert listed[1]["settings"] == {"limits.N2_RERANK_TOP_K": 20}
    assert set(listed[0]) == set(RunMeta.model_fields)
    assert [m["id"] for m in json.loads(invoke("runs", "list", "--json", "--limit", "1").stdout)] == [second]
    found = json.loads(invoke("runs", "list", "--json", "--search", "RERANK").stdout)
    assert [m["id"] for m in found] == [first]

    table = invoke("runs", "list").stdout.splitlines()
    assert table[0].split() == ["id", "time", "(UTC)", "stage", "prompt", "answer", "differs"]
    assert table[1].lstrip().startswith(f"{second} ") and "filters: doc_type=faq" in table[1]
    assert "RRF fuses the two rankings [1]." in table[2] and "limits.N2_RERANK_TOP_K=20" in table[2]
    assert "No run's prompt holds 'pasta'." in invoke("runs", "list", "--search", "pasta").stdout

    shown = invoke("runs", "show", str(first))
    assert shown.exit_code == 0
    text = shown.stdout
    assert text.startswith(f"Run {first}: saved ") and "Prompt: How does reranking work?" in text
    assert "Differs from the files: limits.N2_RERANK_TOP_K=20" in text
    assert "Retrieval" in text and "12.5" in text and "total" in text and "142.5" in text
    assert "Final selection (2 chunks):\n  kb/a.md#0\n  kb/b.md#2\n" in text
    assert "RRF fuses the two rankings [1].\nMore detail [2]." in text
    as_json = json.loads(invoke("runs", "show", str(first), "--json").stdout)
    assert as_json["id"] == first and SuperPrompt.model_validate(as_json["sp"]) == store.get(first).sp

    missing = invoke("runs", "show", "99")
    assert missing.exit_code == 2 and missing.stdout == ""
    assert missing.stderr.startswith("Error (run not found): There is no run 99")

    exported = invoke("runs", "export", str(first)).stdout
    assert exported == store.get(first).sp.to_json() + "\n"
    path = tmp_path / "run.json"
    out = invoke("runs", "export", str(first), "--out", str(path))
    assert out.exit_code == 0 and out.stdout == "" and path.read_text() == store.get(first).sp.to_json()
    imported = invoke("runs", "import", str(path))
    assert imported.exit_code == 0, imported.output
    new_id = int(imported.stdout)
    assert new_id == 3 and store.get(new_id).sp == store.get(first).sp
    assert store.get(new_id).origin == "import"


@pytest.mark.parametrize(("content", "says"), [
    (b"[1, 2]", "holds JSON a list, not an object"),
    (b"{oops", "is not JSON: Expecting property name enclosed in double quotes at line 1, column 2."),
    (b'{"user_text": 3}', "is not a valid SuperPrompt"),
    (b"\xff\xfe{}", "is not UTF-8 text"),
])
def test_cli_a_bad_import_exits_non_zero_with_the_reason(runs_cli, tmp_path, content, says):
    invoke, store = runs_cli
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    out = invoke("runs", "import", str(path))
    assert out.exit_code == 2 and out.stdout == ""
    assert out.stderr.startswith(f"Error (run file): {path}") and says in out.stderr
    assert store.count() == 0


# --------------------------------------------------------------------------- CLI, as a user runs it


def test_cli_run_in_a_fresh_process_saves_its_pass(tmp_path):
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "reranking.md").write_text((ROOT / "data" / "kb" / "reranking.md").read_text())
    idx = tmp_path / "idx"
    env = {**os.environ, "RAGSTREAM_INDEX_DIR": str(idx), "RAGSTREAM_KB_DIR": str(kb),
           "RAGSTREAM_UPLOADS_DIR": str(tmp_path / "uploads")}

    def ragstream(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "ragstream", *args], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=600, check=True)

    out = ragstream("run", "How does the ReRanker choose its backend?", "--json")
    sp = SuperPrompt.from_json(out.stdout)  # stdout is the JSON alone
    assert "run 1 saved" in out.stderr
    listed = json.loads(ragstream("runs", "list", "--json").stdout)
    assert [m["id"] for m in listed] == [1] and listed[0]["origin"] == "cli"
    assert SuperPrompt.from_json(ragstream("runs", "export", "1").stdout) == sp
    ragstream("run", "How does the ReRanker choose its backend?", "--no-save", "--no-sync")
    assert RunStore(idx / "runs.sqlite3", environ={}).count() == 1


def test_cli_runs_diff_names_each_moved_chunk_with_its_cause(runs_cli):
    invoke, store = runs_cli
    invoke("run", "What does A3 do with near-duplicate chunks?", "--no-sync")
    first = store.list(1)[0]
    top = store.get(first.id).sp.final_selection_ids[0]
    invoke("run", "What does A3 do with near-duplicate chunks?", "--no-sync", "--exclude", top)
    second = store.list(1)[0]
    a, b = store.get(first.id).sp, store.get(second.id).sp
    out = invoke("runs", "diff", str(first.id), str(second.id)).stdout
    assert f"exclude {top}" in out
    moved = {r.chunk_id for r in a.view("a4")} ^ {r.chunk_id for r in b.view("a4")}
    assert moved and all(chunk_id in out for chunk_id in moved)  # every chunk added or removed
    assert top in out and "-" in out and "+" in out  # and prompt_ready's diff
    data = json.loads(invoke("runs", "diff", str(first.id), str(second.id), "--json").stdout)
    assert top in data["selection"]["removed"]
    assert any(m["chunk id"] == top and "exclude" in m["cause"] for m in data["moves"])
    missing = invoke("runs", "diff", str(first.id), "99999")
    assert missing.exit_code == 2 and "99999" in missing.output
