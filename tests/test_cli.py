"""The CLI as a user runs it: a subprocess, a temp index, the bundled KB."""

import json
import os
import re
import subprocess
import sys
import time
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


def test_a_query_on_an_unchanged_kb_rewrites_nothing(tmp_path, small_kb):
    """The engines answer a fresh process's query as they are: nothing is rebuilt or
    rewritten (no file of the knowledge base's folder changes)."""
    idx = tmp_path / "idx"
    cli("ingest", str(small_kb), index_dir=idx)
    before = {p: p.stat().st_mtime_ns for p in idx.rglob("*") if p.is_file()}
    code = ("import sys; from ragstream.workbench.engine import Engine; sp = Engine().run('What does RRF "
            "fuse?'); print(sp.stage, len(sp.final_selection_ids) > 0)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "RAGSTREAM_INDEX_DIR": str(idx)}, timeout=600,
                         check=True)
    assert out.stdout.split() == ["a5", "True"]
    changed = sorted(str(p.relative_to(idx)) for p, t in before.items()
                     if p.exists() and p.stat().st_mtime_ns != t and "keyword-" in str(p))
    assert changed == []


def test_errors_are_clear_and_exit_non_zero(tmp_path, small_kb):
    idx = tmp_path / "idx"
    out = cli("run", "   ", index_dir=idx, kb=small_kb, check=False)
    assert out.returncode == 2
    assert "Error (empty prompt)" in out.stderr and "Traceback" not in out.stderr
    out = cli("run", "x", "--until", "Nowhere", index_dir=idx, check=False)
    assert out.returncode == 2 and "A0_PreProcessing" in out.stderr


def test_run_answer_streams_text_sources_and_confidence(tmp_path, small_kb):
    from ragstream.workbench.qa_log import QALog

    idx = tmp_path / "idx"
    out = cli("run", "What does RRF fuse?", "--answer", index_dir=idx, kb=small_kb)
    text, _, footer = out.stdout.partition("\nSources:")
    # a short answer: cited sentences, no headings
    assert re.search(r"\. \[\d+\]", text) and not text.startswith("**") and "[1]" in text
    lines = footer.splitlines()
    assert lines[1].startswith("  [1] kb/") and " § " in lines[1]
    # the confidence in words, then its figures on a line of their own
    at = next(i for i, ln in enumerate(lines) if ln.startswith("Confidence: "))
    assert re.match(r"Confidence: (High|Medium|Low) — \w", lines[at]), lines[at]
    assert lines[at + 1].startswith("  figures: first sentence matches the question")
    assert any(ln.startswith("Mode: extractive") for ln in lines)

    out = cli("run", "How do I cook pasta?", "--answer", "--json", index_dir=idx, kb=small_kb)
    ans = json.loads(out.stdout)["answer"]
    assert ans["mode"] == "no-results" and ans["confidence"] == "Low"
    assert ans["text"].startswith("I couldn't find this in the knowledge base. It covers:")
    assert QALog(idx / "qa_log.sqlite3").count() == 2

    out = cli("run", "x", "--answer", "--until", "Retrieval", index_dir=idx, check=False)
    assert out.returncode == 2 and "--answer needs every stage" in out.stderr


# --------------------------------------------------------------------------- retrieve, --filter

RULES_KB = ROOT / "tests" / "fixtures" / "rules_kb"


@pytest.fixture(scope="module")
def rules_index(tmp_path_factory, embedder) -> Path:
    """The rules knowledge base ingested once (in this process) into an index the CLI reads."""
    from ragstream.workbench.engine import Engine
    from tests.conftest import make_config

    idx = tmp_path_factory.mktemp("cli-rules") / "idx"
    engine = Engine(make_config(idx))
    engine.services.embedder = embedder
    assert engine.ingest(RULES_KB).processed == 6
    return idx


def test_retrieve_prints_the_rag_context_as_json_or_a_table(rules_index):
    from ragstream.workbench.contract import RAGContext

    out = cli("retrieve", "What can I do during movement?", "--json", "--no-sync", "--max-chunks", "4",
              "--min-relevance", "0", "--context-key", "chan:user", index_dir=rules_index)
    ctx = RAGContext.model_validate_json(out.stdout)
    assert ctx.context_key == "chan:user" and ctx.total_chunks == len(ctx.document_chunks) == 4
    assert ctx.relevance_scores == sorted(ctx.relevance_scores, reverse=True)
    assert ctx.document_chunks[0].metadata["section"] == "Movement Phase"
    assert {c.metadata["doc_type"] for c in ctx.document_chunks} - {"faq"}  # not only FAQs

    out = cli("retrieve", "Barricade rules", "--no-sync", "--min-relevance", "0", "--max-chunks", "2",
              "--filter", "doc_type=killzone,faq", "--filter", "updated_from=2025-01-01",
              index_dir=rules_index)
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["#", "relevance", "type", "updated", "source", "§", "section"]
    assert lines[1].split()[0] == "1" and " § " in lines[1] and lines[1].split()[2] in ("killzone", "faq")
    assert lines[-1].startswith("2 chunks, average relevance ")


def test_run_filter_restricts_retrieval_to_faq_chunks(rules_index):
    out = cli("run", "What can I do during movement?", "--filter", "doc_type=faq", "--until",
              "Retrieval", "--json", "--no-sync", index_dir=rules_index)
    sp = json.loads(out.stdout)
    assert sp["filters"]["doc_type"] == ["faq"]
    types = {c["id"]: c["doc_type"] for c in sp["base_context_chunks"]}
    rows = sp["views_by_stage"]["retrieval"]
    assert rows and {types[r["chunk_id"]] for r in rows} == {"faq"}


@pytest.mark.parametrize("command, value, says", [
    ("run", "colour=red", "KEY one of doc_type, source, updated_from, updated_to"),
    ("retrieve", "doc_type", "KEY one of doc_type, source, updated_from, updated_to"),
    ("retrieve", "updated_from=2025-31-01", "Dates are YYYY-MM-DD"),
    ("run", "updated_from=2025-06-01", None),  # paired below with an earlier updated_to
])
def test_a_bad_filter_is_a_usage_error(tmp_path, command, value, says):
    extra = ["--filter", "updated_to=2025-01-01"] if says is None else []
    out = cli(command, "movement", "--filter", value, *extra, index_dir=tmp_path / "idx", check=False)
    assert out.returncode == 2 and "Usage:" in out.stderr and "--filter" in out.stderr
    assert (says or "is after updated_to") in out.stderr and "Traceback" not in out.stderr


def test_serve_answers_over_http_and_requires_the_token_from_the_named_variable(rules_index):
    import socket

    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = "cli-serve-token-8d3e1f"
    env = {**os.environ, "RAGSTREAM_INDEX_DIR": str(rules_index), "MY_SERVICE_TOKEN": token}
    proc = subprocess.Popen([sys.executable, "-m", "ragstream", "serve", "--port", str(port),
                             "--token-env", "MY_SERVICE_TOKEN"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            try:
                health = httpx.get(f"{url}/health", timeout=2)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the service did not start"
                time.sleep(0.2)
        assert health.status_code == 200 and health.json()["chunks"] > 0
        body = {"query": "Barricade rules", "context_key": "k", "min_relevance": 0}
        assert httpx.post(f"{url}/retrieve", json=body).status_code == 401
        ok = httpx.post(f"{url}/retrieve", json=body, headers={"Authorization": f"Bearer {token}"},
                        timeout=60)
        assert ok.status_code == 200 and ok.json()["document_chunks"]
    finally:
        proc.terminate()
        output, _ = proc.communicate(timeout=30)
    assert "bearer token required (from $MY_SERVICE_TOKEN)" in output
    assert '"POST /retrieve HTTP/1.1" 401' in output and token not in output

    empty = subprocess.run([sys.executable, "-m", "ragstream", "serve", "--token-env", "MY_SERVICE_TOKEN"],
                           cwd=ROOT, env={**env, "MY_SERVICE_TOKEN": " "}, capture_output=True,
                           text=True, timeout=60)
    assert empty.returncode == 2 and "$MY_SERVICE_TOKEN is set but empty" in empty.stderr


def test_run_with_edits_records_them_and_refuses_unknown_ones(tmp_path, small_kb):
    idx = tmp_path / "idx"
    cli("ingest", str(small_kb), index_dir=idx)
    found = json.loads(cli("find", "reciprocal rank fusion", "--json", "--no-sync",
                           index_dir=idx).stdout)
    assert found and found[0]["match"] == "phrase"
    assert "reciprocal rank fusion" in found[0]["text"].lower()
    pinned = found[-1]["chunk_id"]
    out = cli("run", "What does RRF fuse?", "--json", "--no-sync", "--pin", pinned,
              "--set", "tone=formal", "--set", "audience=expert", index_dir=idx)
    sp = json.loads(out.stdout)
    assert [(e["kind"], e["target"], e["after"]) for e in sp["edits"]] == [
        ("field", "tone", "formal"), ("field", "audience", "expert"), ("pin", pinned, "pin")]
    assert sp["final_selection_ids"][0] == pinned
    assert sp["body"]["tone"] == "formal" and sp["extras"]["body_sources"]["tone"] == "you"
    assert sp["extras"]["edit_outcomes"]["A4_Condenser"][0]["note"] == (
        "in the final selection as source [1]")

    text = cli("run", "What does RRF fuse?", "--no-sync", "--pin", pinned, index_dir=idx)
    assert f"edit 1: pin {pinned}" in text.stderr and "source [1]" in text.stderr

    for args, says in [(("--pin", "kb/nothing.md#1"), "Unknown chunk id 'kb/nothing.md#1'"),
                       (("--set", "tone=grumpy"), "'grumpy' is not a value of tone. Choose one of:"),
                       (("--set", "colour=red"), "Unknown field 'colour'. Fields you can set:"),
                       (("--set", "tone"), "write FIELD=VALUE")]:
        out = cli("run", "What does RRF fuse?", "--no-sync", *args, index_dir=idx, check=False)
        assert out.returncode == 2 and says in out.stderr, out.stderr
        assert "## System" not in out.stdout  # nothing ran


def test_run_answer_names_a_pdf_sources_page(tmp_path):
    """The CLI's Sources list names a PDF chunk's page (``kb/faq.pdf p. 2 § …``)."""
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "faq.pdf").write_bytes((ROOT / "benchmarks" / "formats" / "kb-pdf" / "faq.pdf").read_bytes())
    out = cli("run", "Does RAGstream need an internet connection or an API key?", "--answer",
              index_dir=tmp_path / "idx", kb=kb)
    sources = out.stdout.partition("\nSources:")[2].splitlines()[1:]
    listed = [ln for ln in sources if ln.startswith("  [")]
    assert listed and all(re.match(r"  \[\d+\] kb/faq\.pdf pp?\. \d+(–\d+)? § ", ln) for ln in listed), listed
