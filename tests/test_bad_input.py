"""Bad input (issue 11): every bad input gets a typed error or warning naming the problem and
the fix, nothing already ingested is lost, and the page keeps working.

What other test files already prove is not repeated here: the retrieval API's and the HTTP
service's refusal of empty and over-long queries (tests/test_api.py
``test_invalid_queries_are_refused``, tests/test_service.py), a Latin-1 file in a folder
(tests/ingest/test_ingestor.py ``test_bad_files_fail_alone_with_a_reason``), the empty prompt
on the page (tests/ui/test_apptest.py ``test_error_is_shown_and_state_kept``), the API's
repeated document id, path-like file name and bad date (tests/test_api.py
``test_ingest_refuses_bad_documents_and_goes_on``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tracemalloc
import unicodedata
from pathlib import Path

import pytest
from click.testing import CliRunner
from streamlit.testing.v1 import AppTest

from ragstream.common.config import DEFAULT_CONFIG_DIR, load_config
from ragstream.common.errors import ConfigError, KeywordIndexUnreadableError, StoreUnreadableError
from ragstream.interfaces import cli, doctor
from ragstream.interfaces.ui import ingesting
from ragstream.interfaces.ui import state as S
from ragstream.knowledge.ingest.ingestor import TextDocument, ingest_documents
from ragstream.state.super_prompt import View
from ragstream.workbench.engine import Engine
from tests.conftest import ROOT, make_config

GOOD = "# Owls\n\nOwls hunt at night. They fly silently over the fields.\n"
PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06" + bytes(64)


def write(folder: Path, name: str, data: str | bytes) -> Path:
    """Write ``data`` (text as UTF-8) to ``folder/name``, making folders; return the path."""
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data, encoding="utf-8")
    return path


def engine_with(tmp_path: Path, embedder, **settings) -> Engine:
    """An engine on its own temp index, with ``settings`` (dotted under ``settings.``) changed."""
    cfg = make_config(tmp_path / "index")
    if settings:
        cfg = cfg.with_overrides({f"settings.{k}": v for k, v in settings.items()})
    engine = Engine(cfg)
    engine.services.embedder = embedder
    return engine


def fresh_session() -> dict:
    """A page session state with every key's default."""
    st_state: dict = {}
    S.init_state(st_state)
    return st_state


# --------------------------------------------------------------------------- 1, 2: prompts


@pytest.fixture
def cli_on(kb_engine, monkeypatch):
    """Run a CLI command in-process on the session's engine; returns ``(exit code, stdout, stderr)``."""
    monkeypatch.setattr(cli, "_engine", lambda kb=None: Engine(kb_engine.cfg, kb_engine.services))

    def run(*args: str):
        result = CliRunner().invoke(cli.main, list(args))
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception
        return result.exit_code, result.stdout, result.stderr

    return run


@pytest.mark.parametrize("prompt", ["", "   ", " \n\t \n"])
def test_cli_refuses_an_empty_or_blank_prompt_and_query(cli_on, prompt):
    code, out, err = cli_on("run", prompt, "--no-sync")
    assert code == 2 and out == ""
    assert err.startswith("Error (empty prompt): The prompt is empty. Type a question or task")
    code, out, err = cli_on("retrieve", prompt, "--no-sync")
    assert code == 2 and out == ""
    assert err.startswith("Error (invalid query): The query is empty. Send a question")


def test_cli_refuses_a_prompt_and_query_over_2000_characters(cli_on):
    long = "x" * 2001
    code, _, err = cli_on("run", long, "--no-sync")
    assert code == 2
    assert err.strip() == ("Error (prompt too long): The prompt has 2001 characters; the limit is "
                           "2000. Shorten it or raise prompt.max_prompt_chars in config/settings.json.")
    code, _, err = cli_on("retrieve", long, "--no-sync")
    assert code == 2 and err.startswith("Error (invalid query): The query has 2001 characters; "
                                        "the limit is 2000. Shorten it")
    # at the limit both are accepted
    assert cli_on("run", "x" * 1999 + "?", "--no-sync", "--until", "A0_PreProcessing")[0] == 0


@pytest.fixture
def page(kb_engine, tmp_path, monkeypatch):
    """The page over the session's ingested index, with its own uploads folder."""
    import streamlit as st

    monkeypatch.setenv("RAGSTREAM_INDEX_DIR", str(kb_engine.cfg.index_dir))
    monkeypatch.setenv("RAGSTREAM_UPLOADS_DIR", str(tmp_path / "uploads"))
    st.cache_resource.clear()
    yield lambda: AppTest.from_file(str(ROOT / "ui_streamlit.py"), default_timeout=300).run()
    st.cache_resource.clear()


def test_page_shows_blank_and_over_long_prompts_as_errors_and_keeps_working(page):
    at = page()
    at.text_area(key=S.PROMPT).set_value(" \n\t ").run()
    at.button(key="run").click().run()  # auto-run: every stage
    assert not at.exception
    assert [e.value for e in at.error if "empty prompt" in e.value], [e.value for e in at.error]
    assert at.session_state[S.SP].stage == "raw"  # nothing ran

    # an over-long prompt is refused at the box: the numbers shown, the run buttons disabled
    at.text_area(key=S.PROMPT).set_value("y" * 2001).run()
    assert not at.exception
    assert any("2,001 / 2,000 characters" in e.value for e in at.error), [e.value for e in at.error]
    assert at.button(key="run").disabled
    assert at.session_state[S.SP].stage == "raw"
    at.text_area(key=S.PROMPT).set_value("What is BM25?").run()
    at.button(key="run").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert at.session_state[S.SP].stage == "a5"


# --------------------------------------------------------------------------- 3, 4: not text


def test_binary_files_are_refused_and_the_others_ingested(fresh_engine, tmp_path):
    kb = tmp_path / "kb"
    write(kb, "good.md", GOOD)
    write(kb, "image.md", PNG)  # a PNG renamed .md
    write(kb, "notes.txt", "Some text with a \x00 NUL byte in the middle.\n")
    write(kb, "utf16.md", "# Owls\n\nText.\n".encode("utf-16"))  # with its byte-order mark
    report = fresh_engine.ingest(kb)
    assert (report.processed, report.failed) == (1, 3), report.errors
    errors = dict(line.split(": ", 1) for line in report.errors)
    assert errors["kb/image.md"] == (
        "BinaryFileError: binary file, not text (it starts like a PNG image): only UTF-8 Markdown "
        "or plain text can be ingested. Convert it to text (or remove it from the folder).")
    assert errors["kb/notes.txt"].startswith(
        "BinaryFileError: binary file, not text (a NUL byte at byte 17)")
    assert errors["kb/utf16.md"] == ("NotUTF8Error: not UTF-8 text (a UTF-16 byte-order mark at "
                                     "byte 0); save the file as UTF-8 and ingest again")
    assert sorted(fresh_engine.services.store.documents()) == ["kb/good.md"]


def test_a_file_that_turns_bad_keeps_its_stored_version(fresh_engine, tmp_path):
    kb = tmp_path / "kb"
    write(kb, "good.md", GOOD)
    write(kb, "later.md", "# Later\n\nHedgehogs sleep through the winter.\n")
    assert fresh_engine.ingest(kb).processed == 2
    before = fresh_engine.services.store.get_chunks(["kb/later.md#0"])
    write(kb, "later.md", PNG)  # replaced by a binary file: refused, not pruned
    report = fresh_engine.ingest(kb)
    assert (report.failed, report.deleted) == (1, 0) and "BinaryFileError" in report.errors[0]
    assert fresh_engine.services.store.get_chunks(["kb/later.md#0"]) == before
    write(kb, "later.md", "Caf\xe9".encode("latin-1"))  # the same for text that is not UTF-8
    report = fresh_engine.ingest(kb)
    assert (report.failed, report.deleted) == (1, 0) and "NotUTF8Error" in report.errors[0]
    assert fresh_engine.services.store.get_chunks(["kb/later.md#0"]) == before


def test_documents_given_as_text_are_checked_like_files(fresh_engine):
    cfg = fresh_engine.cfg.with_overrides({"settings.ingestion.max_file_mb": 0.001})  # 1,048 bytes
    docs = [TextDocument("nul", "a.md", "# A\n\nText \x00 here.\n", {}),
            TextDocument("big", "b.md", "# B\n\n" + "Word. " * 300, {}),
            TextDocument("ok", "c.md", GOOD, {})]
    report = ingest_documents(docs, cfg, fresh_engine.services)
    assert (report.processed, report.failed) == (1, 2)
    assert report.errors[0].startswith("nul: BinaryFileError: binary file, not text (a NUL "
                                       "character at position 10)")
    assert report.errors[1].startswith("big: FileTooLargeError: file too large: 0.0 MB, the limit "
                                       "is 0.001 MB (ingestion.max_file_mb")


# --------------------------------------------------------------------------- 5: size


def test_a_50_mb_file_is_refused_by_its_size_without_being_read(fresh_engine, tmp_path):
    kb = tmp_path / "kb"
    write(kb, "good.md", GOOD)
    big = kb / "big.md"
    with big.open("wb") as f:
        f.truncate(50 * 1024 * 1024)  # sparse: 50 MB of NUL bytes, none on disk
    fresh_engine.ingest(tmp_path / "kb" / "good.md")  # load what a first ingest loads
    tracemalloc.start()
    try:
        report = fresh_engine.ingest(kb)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 * 1024 * 1024, f"peak {peak / 2**20:.1f} MiB: the file was read"
    assert (report.failed, report.skipped) == (1, 1)
    assert report.errors == [
        "kb/big.md: FileTooLargeError: file too large: 50.0 MB, the limit is 10 MB "
        "(ingestion.max_file_mb in config/settings.json). Split it into smaller files, or raise "
        "the limit."]
    assert sorted(fresh_engine.services.store.documents()) == ["kb/good.md"]


def test_the_size_limit_is_a_setting(tmp_path, embedder):
    engine = engine_with(tmp_path, embedder, **{"ingestion.max_file_mb": 0.002})  # 2,097 bytes
    kb = tmp_path / "kb"
    write(kb, "small.md", GOOD)
    write(kb, "large.md", "# Large\n\n" + "Owls are birds. " * 200)  # 3,209 bytes
    report = engine.ingest(kb)
    assert (report.processed, report.failed) == (1, 1)
    assert "kb/large.md: FileTooLargeError" in report.errors[0] and "0.002 MB" in report.errors[0]
    with pytest.raises(ConfigError, match="ingestion.max_file_mb"):
        engine.cfg.with_overrides({"settings.ingestion.max_file_mb": 0})


# --------------------------------------------------------------------------- 6, 7: structure


def test_empty_and_heading_only_markdown_are_warnings_and_nothing_is_stored(fresh_engine, tmp_path):
    kb = tmp_path / "kb"
    write(kb, "good.md", GOOD)
    write(kb, "empty.md", "")
    write(kb, "blank.md", " \n\n  \n")
    write(kb, "headings.md", "# Only\n\n## Headings\n\n### Here\n")
    write(kb, "meta.md", "---\ntitle: Only meta\n---\n")
    report = fresh_engine.ingest(kb)
    assert (report.processed, report.failed, report.errors) == (1, 0, [])
    warnings = [w for w in report.warnings if "nothing stored" in w]
    assert warnings == [
        "kb/blank.md: empty document: nothing stored; write some text in it, or remove it",
        "kb/empty.md: empty document: nothing stored; write some text in it, or remove it",
        "kb/headings.md: only headings, no text under them: nothing stored; add text under the "
        "headings, or remove the document",
        "kb/meta.md: front matter only, no body text: nothing stored; add text below the front "
        "matter",
    ]
    assert not any("headings.md" in w and "derived" in w for w in report.warnings)
    assert sorted(fresh_engine.services.store.documents()) == ["kb/good.md"]


def test_a_paragraph_longer_than_the_chunk_budget(fresh_engine, tmp_path):
    budget = fresh_engine.cfg.settings.chunking.max_tokens
    run_on = " ".join(f"owl{i} hunts" for i in range(400))  # one sentence, ~1,200 tokens
    sentences = " ".join(f"Owl {i} hunts mice at night." for i in range(150))  # one paragraph
    write(tmp_path / "kb", "long.md", f"# Run on\n\n{run_on}\n\n# Sentences\n\n{sentences}\n")
    report = fresh_engine.ingest(tmp_path / "kb")
    assert report.processed == 1 and report.failed == 0
    split = [w for w in report.warnings if "split at word boundaries" in w]
    assert len(split) == 1 and split[0].startswith("kb/long.md: line 3: a sentence of ")
    assert f"longer than max_tokens={budget}" in split[0]
    chunks = fresh_engine.services.store.all_chunks()
    assert all(c.token_count <= budget for c in chunks)
    first = [c.text for c in chunks if c.section == "Run on"]
    assert len(first) > 1 and " ".join(first) == run_on  # cut only between words
    second = [c.text for c in chunks if c.section == "Sentences"]
    assert len(second) > 1 and all(t.endswith("at night.") for t in second)  # between sentences
    assert " ".join(second) == sentences


# --------------------------------------------------------------------------- 8: upload names


def test_upload_names_are_reduced_to_a_file_name_inside_the_uploads_folder(fresh_engine, tmp_path):
    uploads = fresh_engine.cfg.uploads_dir
    uploads.mkdir(parents=True, exist_ok=True)
    outside = write(tmp_path, "outside.md", "# Outside\n\nMust not change.\n")
    (uploads / "link.md").symlink_to(outside)  # a planted link: replaced, never written through
    st_state = fresh_session()
    body = b"# Up\n\nUploaded owls hunt at night.\n"
    ok = ingesting.ingest_uploads(fresh_engine, st_state, [
        ("../../escape.md", body), ("/etc/absolute.md", body), ("..\\..\\windows.md", body),
        (".hidden.md", body), ("nul\x00byte.md", body), ("link.md", body), ("..", body),
        ("a/dup.md", body), ("b/dup.md", body)])
    assert ok, st_state[S.ERROR]
    saved = sorted(p.name for p in uploads.iterdir())
    assert saved == ["absolute.md", "dup.md", "escape.md", "hidden.md", "link.md", "nulbyte.md",
                     "windows.md"]
    assert not (uploads / "link.md").is_symlink()
    assert outside.read_text() == "# Outside\n\nMust not change.\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["index", "outside.md", "uploads"])
    report = st_state[S.INGEST_REPORT]
    assert report["processed"] == 7 and report["failed"] == 2
    assert report["errors"] == [
        "'..': no file name is left once its folders are removed; upload a file with a plain "
        "name such as 'notes.md'.",
        "dup.md: another upload in this batch has the same file name; rename one of them and "
        "upload it again."]
    assert "'../../escape.md' was saved as 'escape.md': an upload keeps only its file name" \
        in report["warnings"]
    assert sorted(d for d in fresh_engine.services.store.documents()) == [
        f"uploads/{n}" for n in saved]


def test_bad_uploads_are_not_saved_and_the_others_are_ingested(fresh_engine):
    st_state = fresh_session()
    limit = fresh_engine.cfg.settings.ingestion.max_file_bytes
    ok = ingesting.ingest_uploads(fresh_engine, st_state, [
        ("photo.md", PNG), ("latin.md", "Caf\xe9".encode("latin-1")),
        ("huge.md", b"x" * (limit + 1)), ("fine.md", GOOD.encode())])
    assert ok, st_state[S.ERROR]
    assert sorted(p.name for p in fresh_engine.cfg.uploads_dir.iterdir()) == ["fine.md"]
    report = st_state[S.INGEST_REPORT]
    assert (report["processed"], report["failed"]) == (1, 3)
    assert [e.split(": ")[:2] for e in report["errors"]] == [
        ["photo.md", "BinaryFileError"], ["latin.md", "NotUTF8Error"],
        ["huge.md", "FileTooLargeError"]]
    # every upload refused: the page says why and nothing is ingested
    st_state = fresh_session()
    assert not ingesting.ingest_uploads(fresh_engine, st_state, [("photo.md", PNG)])
    kind, message = st_state[S.ERROR]
    assert kind == "ingestion" and message.startswith("photo.md: BinaryFileError: binary file")


# --------------------------------------------------------------------------- 9: same id


def test_ids_differing_only_in_case_or_unicode_form_are_two_documents(fresh_engine, tmp_path):
    """Within one folder two files never share an id: the id is the path, and paths that differ
    only in case or Unicode normalisation are different files (and different ids) here."""
    kb = tmp_path / "kb"
    nfc, nfd = unicodedata.normalize("NFC", "café.md"), unicodedata.normalize("NFD", "café.md")
    for i, name in enumerate([nfc, nfd, "Notes.md", "notes.md"]):
        write(kb, name, f"# Doc {i}\n\nDocument number {i} talks about owls.\n")
    if len(list(kb.iterdir())) != 4:
        pytest.fail("this file system folds case or Unicode forms: the names are one file here")
    report = fresh_engine.ingest(kb)
    assert (report.processed, report.failed) == (4, 0)
    assert len(fresh_engine.services.store.documents()) == 4
    lookalikes = [w for w in report.warnings if "differ only in letter case or Unicode form" in w]
    assert len(lookalikes) == 2 and all("stored as 2 separate documents" in w for w in lookalikes)


def test_a_folder_of_the_same_name_elsewhere_replaces_with_a_warning(fresh_engine, tmp_path):
    write(tmp_path / "a" / "kb", "x.md", GOOD)
    write(tmp_path / "b" / "kb", "x.md", "# Other\n\nA different document with the same path.\n")
    assert fresh_engine.ingest(tmp_path / "a" / "kb").processed == 1
    report = fresh_engine.ingest(tmp_path / "b" / "kb")
    assert report.processed == 1
    assert report.warnings[0] == (
        f"kb/x.md: replaces the document of the same id ingested from {tmp_path / 'a' / 'kb'} "
        f"(ids are '<folder name>/<path in the folder>', so two folders with the same name share "
        f"them); if both are wanted, rename one of the folders")


# --------------------------------------------------------------------------- 10: metadata


def test_a_folder_with_required_metadata_skips_documents_without_it(tmp_path, embedder):
    engine = engine_with(tmp_path, embedder, **{"ingestion.require_metadata": True})
    kb = tmp_path / "kb"
    write(kb, "declared.md", "---\nsource: Field guide\ndoc_type: guide\n"
                             "last_update_date: 2025-09-15\n---\n" + GOOD)
    write(kb, "partial.md", "---\ndoc_type: guide\n---\n" + GOOD)
    write(kb, "bare.md", GOOD)
    report = engine.ingest(kb)
    assert (report.processed, report.failed) == (1, 2)
    assert report.errors == [
        "kb/bare.md: InvalidDocumentError: missing required metadata source, doc_type, "
        "last_update_date; add it to the document's front matter (or its metadata), or turn "
        "ingestion.require_metadata off to derive defaults",
        "kb/partial.md: InvalidDocumentError: missing required metadata source, "
        "last_update_date; add it to the document's front matter (or its metadata), or turn "
        "ingestion.require_metadata off to derive defaults"]
    assert list(engine.services.store.documents()) == ["kb/declared.md"]


# --------------------------------------------------------------------------- 11: config


@pytest.mark.parametrize("change, expected", [
    ({"max_file_size": 5}, "  - ingestion.max_file_size: unknown key; allowed keys here: "
                           "max_file_mb, require_metadata (got 5)"),
    ({"max_file_mb": -1}, "  - ingestion.max_file_mb: Input should be greater than 0 (got -1)"),
    ({"max_file_mb": "big"}, "  - ingestion.max_file_mb: Input should be a valid number, unable "
                             "to parse string as a number (got 'big')"),
    ({"require_metadata": "sometimes"}, "  - ingestion.require_metadata: Input should be a valid "
                                        "boolean, unable to interpret input (got 'sometimes')"),
])
def test_unknown_and_bad_config_values_name_the_file_the_key_and_the_fix(tmp_path, change, expected):
    cdir = tmp_path / "config"
    shutil.copytree(DEFAULT_CONFIG_DIR, cdir)
    path = cdir / "settings.json"
    data = json.loads(path.read_text())
    data["ingestion"].update(change)
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError) as err:
        load_config(cdir, env={})
    assert str(err.value).splitlines() == [f"Invalid configuration in {path}:", expected]


def test_the_shipped_config_sets_the_size_limit():
    assert load_config(env={}).settings.ingestion.max_file_mb == 10


# --------------------------------------------------------------------------- 12: damaged index


def fields(sp) -> str:
    """What a query's result must keep across a rebuild: views, selection, prompt_ready."""
    data = sp.model_dump(mode="json")
    return json.dumps({k: data[k] for k in ("views_by_stage", "final_selection_ids", "prompt_ready")})


def garble(path: Path) -> None:
    """Flip bits in 64 of every 512 bytes of ``path`` (its header included)."""
    data = bytearray(path.read_bytes())
    for i in range(0, len(data), 512):
        data[i:i + 64] = bytes((b ^ 0x5A) for b in data[i:i + 64])
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", ["meta.json", "chunks.sqlite3", "out of step"])
def test_a_damaged_or_out_of_step_keyword_index_is_named_and_repaired(fresh_engine, tmp_path, damage,
                                                                      monkeypatch):
    """A keyword index that cannot be opened stops a query with a typed error naming the
    repair; one out of step with the store (a document missing) is found by ``repair
    --check`` and mended by the next query. ``repair`` makes either again from the store."""
    write(tmp_path / "kb", "good.md", GOOD)
    write(tmp_path / "kb", "more.md", "# Hedgehogs\n\nHedgehogs sleep through the winter.\n")
    fresh_engine.ingest(tmp_path / "kb")
    first = fresh_engine.run("When do owls hunt?")
    expected, kept = fields(first), set(first.kept_ids(View.RETRIEVAL))
    store = fresh_engine.services.store
    folder = store.keyword_engine.folder
    assert doctor.keyword_problem(store, True) == ""
    store.close()
    if damage == "meta.json":
        (folder / "meta.json").write_text('{"index_settings": {', encoding="utf-8")
    elif damage == "chunks.sqlite3":  # the chunk rows beside the index, garbled
        for extra in ("-wal", "-shm"):
            (folder / f"chunks.sqlite3{extra}").unlink(missing_ok=True)
        (folder / "chunks.sqlite3").write_bytes(b"not a database, " * 64)
    else:
        store.chroma.delete_document("kb/more.md")  # removed from the store, not from tantivy
    found = doctor.check(fresh_engine.cfg, fresh_engine.services)
    assert found.store_state == "ok" and found.keyword_state != "ok", found.keyword_state
    if damage != "out of step":
        assert found.keyword_state.startswith("damaged: it cannot be opened") and not found.healthy
        again = Engine(fresh_engine.cfg)
        again.services.embedder = fresh_engine.services.embedder
        with pytest.raises(KeywordIndexUnreadableError, match="ragstream repair"):
            again.run("When do owls hunt?")
        for var, path in (("RAGSTREAM_INDEX_DIR", fresh_engine.cfg.index_dir),
                          ("RAGSTREAM_KB_DIR", tmp_path / "kb"),
                          ("RAGSTREAM_UPLOADS_DIR", fresh_engine.cfg.uploads_dir)):
            monkeypatch.setenv(var, str(path))
        result = CliRunner().invoke(cli.main, ["repair"])
        assert result.exit_code == 0, result.output
        assert "brought the keyword index in step with the store: 2 document(s) rewritten" in result.stdout
        assert CliRunner().invoke(cli.main, ["repair", "--check"]).stdout.splitlines() == [
            f"store     {store.location}: ok", f"keywords  {folder}: ok"]
    else:
        assert found.keyword_state.startswith("out of step with the store: 1 document(s) differ")
    again = Engine(fresh_engine.cfg)
    again.services.embedder = fresh_engine.services.embedder
    if damage == "out of step":  # the next ingest mends it
        report = again.ingest(tmp_path / "kb", prune=False)
        assert any("out of step" in w for w in report.warnings), report.warnings
    sp = again.run("When do owls hunt?")
    assert again.services.store.in_step()
    held = set(again.services.store.keyword_engine.documents())
    assert held == set(again.services.store.documents())
    assert held == {"kb/good.md", "kb/more.md"}
    if damage != "out of step":  # nothing re-encoded: the same pass, byte for byte
        assert fields(sp) == expected
    else:  # more.md encoded again (in another batch: int8 moves its vectors slightly)
        assert set(sp.kept_ids(View.RETRIEVAL)) == kept


def tree_digest(folder: Path) -> dict[str, str]:
    """sha256 of every file under ``folder``, by relative path."""
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_an_unreadable_store_is_named_and_repair_moves_it_aside_and_reingests(fresh_engine, tmp_path):
    kb = tmp_path / "kb"
    write(kb, "good.md", GOOD)
    write(kb, "more.md", "# Hedgehogs\n\nHedgehogs sleep through the winter.\n")
    fresh_engine.ingest(kb)
    expected = fields(fresh_engine.run("When do owls hunt?"))
    sources = tree_digest(kb)
    store = fresh_engine.services.store
    store.close()
    sqlite = fresh_engine.cfg.index_dir / "chroma" / "chroma.sqlite3"
    garble(sqlite)
    garbled = sqlite.read_bytes()
    broken = Engine(fresh_engine.cfg)
    broken.services.embedder = fresh_engine.services.embedder
    with pytest.raises(StoreUnreadableError) as err:
        broken.ingest(kb)
    assert str(err.value).startswith(f"The knowledge base store at {store.location} cannot be read (")
    assert "run `python -m ragstream repair`" in str(err.value)
    # the status the sidebar and `ragstream status` show names it the same way, call after call
    for _ in range(2):
        with pytest.raises(StoreUnreadableError, match="ragstream repair"):
            broken.status()
    broken.services.store.close()

    env = {**os.environ, "RAGSTREAM_INDEX_DIR": str(fresh_engine.cfg.index_dir),
           "RAGSTREAM_KB_DIR": str(kb), "RAGSTREAM_UPLOADS_DIR": str(fresh_engine.cfg.uploads_dir)}
    out = subprocess.run([sys.executable, "-m", "ragstream", "repair"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith(f"store     {store.location}: unreadable: ")
    backups = list(fresh_engine.cfg.index_dir.glob("backup-*"))
    assert len(backups) == 1
    assert f"done      moved {store.location} to {backups[0] / 'chroma'}" in lines
    assert any(ln.startswith(f"done      ingested {kb} again: 2 processed") for ln in lines)
    assert (backups[0] / "chroma" / "chroma.sqlite3").read_bytes() == garbled  # kept, as it was
    assert tree_digest(kb) == sources  # the source documents are untouched

    healed = Engine(fresh_engine.cfg)
    healed.services.embedder = fresh_engine.services.embedder
    assert sorted(healed.services.store.documents()) == ["kb/good.md", "kb/more.md"]
    assert fields(healed.run("When do owls hunt?")) == expected
    healed.services.store.close()
