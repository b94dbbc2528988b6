"""The ``python`` answer set (``benchmarks/python_docs/questions.json``): ten pages of the Python
3.11 manual as Debian's ``python3.11-doc`` installs them, copied by
``benchmarks/python_docs/make_docs.py``. The set is checked the way ``ragstream eval --answers``
checks it before asking anything (``load_questions``, then ``check_sections`` over the chunks):
every section holds a chunk, every key stands in its question's sections, no ``absent`` string
of an unanswerable question stands in any document. The chunks are made as ingestion makes them
(``converted_text`` → ``parse_document`` with the app's chunking settings), without an index or
the embedding model, so the test is fast."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from benchmarks.python_docs.make_docs import FILES, make, missing
from ragstream.knowledge.ingest.chunker import parse_document
from ragstream.knowledge.ingest.ingestor import converted_text, list_files, read_bytes
from ragstream.measure.question_sets import check_sections, load_questions
from ragstream.state.super_prompt import Chunk

ROOT = Path(__file__).resolve().parent.parent
SET = ROOT / "benchmarks" / "python_docs" / "questions.json"


@pytest.fixture(scope="module")
def python_set(tmp_path_factory) -> Path:
    """The question set beside a ``docs`` folder of its own, made from the installed manual."""
    if missing():
        pytest.skip(f"Debian packages missing: {' '.join(missing())} (scripts/setup.sh --browser "
                    "installs it, or: sudo apt-get install python3.11-doc)")
    folder = tmp_path_factory.mktemp("python")
    make(folder / "docs")
    shutil.copyfile(SET, folder / SET.name)
    return folder / SET.name


def _chunks(docs: Path, cfg) -> list[Chunk]:
    """The chunks ``ragstream ingest`` makes of ``docs``: the same files, ids, conversion and chunking."""
    out: list[Chunk] = []
    for file in list_files(docs, cfg.settings.chunking.extensions):
        text, _ = converted_text(file.name, read_bytes(file, cfg.settings.ingestion))
        doc_id = f"{docs.name}/{file.relative_to(docs).as_posix()}"
        out += parse_document(text, doc_id, cfg.settings.chunking, "2026-01-01").chunks
    return out


def test_the_pages_are_copied_with_a_gitignore_that_keeps_them_out(python_set):
    docs = python_set.parent / "docs"
    assert sorted(p.name for p in docs.glob("*.html")) == sorted(FILES)
    assert (docs / ".gitignore").read_text().splitlines() == ["*", "!.gitignore"]
    assert make(docs) == docs  # a second call finds every file there and does nothing


def test_the_set_loads_and_every_label_stands_in_the_pages(python_set, cfg):
    qs = load_questions(python_set)
    assert qs.name == "python" and qs.docs.name == "docs"
    chunks = _chunks(qs.docs, cfg)
    assert {c.source for c in chunks} == {f"docs/{name}" for name in FILES}
    check_sections(qs, chunks)  # sections hold chunks, keys stand in them, absent strings absent


def test_the_set_has_its_three_kinds_of_questions(python_set):
    qs = load_questions(python_set)
    assert len(qs.questions) >= 30 and all(q.id.startswith("py-") and q.keys for q in qs.questions)
    assert len(qs.followups) >= 10 and all(f.id.startswith("py-f") for f in qs.followups)
    assert all(2 <= len(f.turns) <= 3 and all(t.keys for t in f.turns) for f in qs.followups)
    assert len(qs.unanswerable) >= 10 and all(u.id.startswith("py-u") for u in qs.unanswerable)
    used = {s.file for secs in qs.sections.values() for s in secs}
    assert used == set(FILES)  # every page is asked about
