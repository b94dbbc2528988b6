"""Shared fixtures: a real Chroma in a temp dir, the real embedding model, the bundled KB."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ragstream.common.config import load_config
from ragstream.workbench.engine import Engine
from tests.fake_openai import FakeOpenAI

ROOT = Path(__file__).resolve().parent.parent
KB = ROOT / "data" / "kb"


def make_config(index_dir: Path, **env: str):
    """The shipped config with every writable path in a temp folder."""
    return load_config(env={"RAGSTREAM_INDEX_DIR": str(index_dir),
                            "RAGSTREAM_UPLOADS_DIR": str(Path(index_dir).parent / "uploads"),
                            **env})


@pytest.fixture(scope="session")
def cfg(tmp_path_factory):
    return make_config(tmp_path_factory.mktemp("index"))


@pytest.fixture(scope="session")
def kb_engine(cfg) -> Engine:
    """An engine over the bundled knowledge base, ingested once for the whole session."""
    engine = Engine(cfg)
    report = engine.ingest(KB)
    assert report.failed == 0, report.errors
    assert report.processed > 0
    return engine


@pytest.fixture(scope="session")
def embedder(kb_engine):
    return kb_engine.services.embedder


@pytest.fixture
def fresh_engine(tmp_path, embedder) -> Engine:
    """An engine with its own empty store (the embedding model is shared: it loads once)."""
    engine = Engine(make_config(tmp_path / "index"))
    engine.services.embedder = embedder
    return engine


def docs_engine(root: Path, docs: dict[str, str], embedder) -> Engine:
    """An engine in ``root`` whose default knowledge base is ``docs`` (file name -> text),
    written into ``root/kb`` and ingested; the embedding model is shared."""
    folder = root / "kb"
    folder.mkdir()
    for name, text in docs.items():
        (folder / name).write_text(text)
    engine = Engine(make_config(root / "index", RAGSTREAM_KB_DIR=str(folder)))
    engine.services.embedder = embedder
    report = engine.ensure_knowledge_base()
    assert report.failed == 0 and report.processed == len(docs), report.errors
    return engine


def rules_and_notes_engine(root: Path, embedder) -> Engine:
    """An engine in ``root`` whose default knowledge base is the rules fixture (six documents,
    ingested) and a second one, "notes" (the bundled reranking article, ingested), beside it;
    the embedding model is shared."""
    engine = Engine(make_config(root / "index"))
    engine.services.embedder = embedder
    assert engine.ingest(ROOT / "tests" / "fixtures" / "rules_kb").processed == 6
    notes = root / "notes"
    notes.mkdir()
    shutil.copy(KB / "reranking.md", notes / "reranking.md")
    engine.create_kb("notes", notes)
    other = engine.for_kb("notes")
    other.services.embedder = embedder
    assert other.ingest(notes).processed == 1
    return engine


def three_article_engine(root: Path, embedder) -> Engine:
    """An engine in ``root`` whose default knowledge base is three bundled articles (reranking,
    faq, configuration), ingested; the embedding model is shared."""
    docs = root / "kb"
    docs.mkdir()
    for name in ("reranking.md", "faq.md", "configuration.md"):
        shutil.copy(KB / name, docs / name)
    engine = Engine(make_config(root / "index", RAGSTREAM_KB_DIR=str(docs)))
    engine.services.embedder = embedder
    assert engine.ensure_knowledge_base().failed == 0
    return engine


@pytest.fixture
def kb_copy(tmp_path) -> Path:
    target = tmp_path / "kb"
    shutil.copytree(KB, target)
    return target


@pytest.fixture
def server():
    """The scripted OpenAI-compatible server on 127.0.0.1 (script it per test)."""
    with FakeOpenAI(models=["test-model"]) as s:
        yield s


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Print what a tier left in ``FIGURES`` (after the run, when output is no longer captured)."""
    from benchmarks.real_llm import FIGURES  # one module object for both sides (not conftest's)

    text = config.stash.get(FIGURES, "")
    if text:
        terminalreporter.write_sep("=", "real-model figures")
        terminalreporter.write_line(text)


@pytest.fixture(scope="session")
def tiny_answer_set(tmp_path_factory) -> Path:
    """A question set for the answer benchmark: two articles of the bundled knowledge base
    and three questions about them (the third asks for a list)."""
    import json

    root = tmp_path_factory.mktemp("answers")
    docs = root / "docs"
    docs.mkdir()
    for name in ("chroma-server-mode.md", "hybrid-retrieval.md"):
        (docs / name).write_text((KB / name).read_text())
    path = root / "tiny.json"
    path.write_text(json.dumps({"name": "tiny", "docs": "docs", "questions": [
        {"id": "t1", "question": "What does reciprocal rank fusion do with the two rankings?",
         "sections": ["hybrid-retrieval.md § Reciprocal rank fusion"]},
        {"id": "t2", "question": "How do I start a Chroma server?",
         "sections": ["chroma-server-mode.md § Starting a Chroma server"]},
        {"id": "t3", "question": "List every step to configure RAGstream for a Chroma server.",
         "kind": "list",
         "sections": ["chroma-server-mode.md § Configuring RAGstream for server mode"]}]}))
    return path
