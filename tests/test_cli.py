"""The CLI as a user runs it: a subprocess, a temp index, the bundled KB."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def cli(*args, index_dir: Path, kb: Path | None = None, check=True):
    env = {**os.environ, "RAGSTREAM_INDEX_DIR": str(index_dir)}
    if kb:
        env["RAGSTREAM_KB_DIR"] = str(kb)
    return subprocess.run([sys.executable, "-m", "ragstream", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600, check=check)


@pytest.fixture(scope="module")
def small_kb(tmp_path_factory):
    kb = tmp_path_factory.mktemp("cli") / "kb"
    kb.mkdir()
    for name in ("reranking.md", "hybrid-retrieval.md"):
        (kb / name).write_text((ROOT / "data" / "kb" / name).read_text())
    return kb


def test_ingest_run_json_and_until(tmp_path, small_kb):
    idx = tmp_path / "idx"
    out = cli("ingest", str(small_kb), "--json", index_dir=idx)
    report = json.loads(out.stdout)
    assert report["processed"] == 2 and report["failed"] == 0

    out = cli("run", "What does RRF fuse?", "--json", index_dir=idx, kb=small_kb)
    sp = json.loads(out.stdout)
    assert sp["stage"] == "a5" and sp["final_selection_ids"]
    assert all(c["source"].startswith("kb/") for c in sp["base_context_chunks"])

    out = cli("run", "What does RRF fuse?", "--until", "Retrieval", index_dir=idx, kb=small_kb)
    assert out.stdout.startswith("## System") and "## Sources" not in out.stdout

    out = cli("status", index_dir=idx)
    assert json.loads(out.stdout)["documents"] == 2


def test_a_query_on_an_unchanged_kb_does_not_load_chroma(tmp_path, small_kb):
    """The snapshot of the index is current, so a fresh process answers from it alone: no
    chromadb import (about a second of a fresh CLI run)."""
    idx = tmp_path / "idx"
    cli("ingest", str(small_kb), index_dir=idx)
    cli("run", "What does RRF fuse?", "--no-sync", index_dir=idx)  # writes the snapshot
    code = ("import sys; from ragstream.engine import Engine; sp = Engine().run('What does RRF "
            "fuse?'); print(sp.stage, 'chromadb' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "RAGSTREAM_INDEX_DIR": str(idx)}, timeout=600,
                         check=True)
    assert out.stdout.split() == ["a5", "False"]


def test_errors_are_clear_and_exit_non_zero(tmp_path, small_kb):
    idx = tmp_path / "idx"
    out = cli("run", "   ", index_dir=idx, kb=small_kb, check=False)
    assert out.returncode == 2
    assert "Error (empty prompt)" in out.stderr and "Traceback" not in out.stderr
    out = cli("run", "x", "--until", "Nowhere", index_dir=idx, check=False)
    assert out.returncode == 2 and "A0_PreProcessing" in out.stderr


def test_run_answer_streams_text_sources_and_confidence(tmp_path, small_kb):
    from ragstream.qa_log import QALog

    idx = tmp_path / "idx"
    out = cli("run", "What does RRF fuse?", "--answer", index_dir=idx, kb=small_kb)
    text, _, footer = out.stdout.partition("\nSources:")
    assert text.startswith("**What the knowledge base says**") and "[1]" in text
    lines = footer.splitlines()
    assert lines[1].startswith("  [1] kb/") and " § " in lines[1]
    assert any(ln.startswith("Confidence: ") and " — best retrieval similarity" in ln
               for ln in lines)
    assert any(ln.startswith("Mode: extractive") for ln in lines)

    out = cli("run", "How do I cook pasta?", "--answer", "--json", index_dir=idx, kb=small_kb)
    ans = json.loads(out.stdout)["answer"]
    assert ans["mode"] == "no-results" and ans["confidence"] == "Low"
    assert ans["text"].startswith("I couldn't find this in the knowledge base. It covers:")
    assert QALog(idx / "qa_log.sqlite3").count() == 2

    out = cli("run", "x", "--answer", "--until", "Retrieval", index_dir=idx, check=False)
    assert out.returncode == 2 and "--answer needs every stage" in out.stderr
