"""The Milvus engine on a real Milvus Lite database (``pymilvus`` + ``milvus-lite``, no mocks):
search in the engine with every filter kind agreeing with ``Filters.matches``, exact BM25
and statistics, the chunk store round trip, a change that costs one document seen by
another engine object at its next query, a second process refused, a server that is not
there, and Retrieval on Milvus keeping the chunks it keeps on the default engine."""

from __future__ import annotations

import datetime as dt
import shutil
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("milvus_lite", reason="milvus-lite is not installed (requirements.txt pins it)")

from ragstream.backends.doc_index import WindowRecord, encode_chunks
from ragstream.backends.keyword_index import KeywordIndex, bm25_idf, bm25_score, index_text
from ragstream.backends.search.milvus import (
    MilvusEngine,
    filter_expr,
    glob_like,
)
from ragstream.common.errors import VectorDBUnavailableError, VectorStoreError
from ragstream.state.super_prompt import Chunk, Filters

ROOT = Path(__file__).resolve().parents[2]
DIM = 8
TEXTS = {
    "faq/install.md": ("Installing", ["The package installs with pip in a virtual environment.",
                                      "Offline installs read wheels from a local folder."]),
    "faq/chunking.md": ("Chunking", ["Documents are split at their headings into chunks.",
                                     "Each chunk keeps its heading path."]),
    "guide/retrieval.md": ("Retrieval", ["Hybrid retrieval fuses dense and keyword rankings.",
                                         "Reciprocal rank fusion combines both lists."]),
    "notes/old_notes.md": ("Old notes", ["A note without a date about chunking tables.",
                                         "Tables keep their header rows in every chunk."]),
}
DATES = {"faq/install.md": "2025-03-01", "faq/chunking.md": "2025-06-15",
         "guide/retrieval.md": "2024-12-31", "notes/old_notes.md": ""}


def unit(rng: np.random.Generator, n: int) -> np.ndarray:
    v = rng.normal(size=(n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def records(source: str, version: str = "1", paragraphs: list[str] | None = None) -> list[WindowRecord]:
    """A document's encoded windows: chunk i has i + 1 windows (deterministic unit vectors)
    and one evidence sentence per window."""
    title, texts = TEXTS[source]
    rng = np.random.default_rng(zlib.crc32(f"{source}@{version}".encode()))
    out = []
    for i, text in enumerate(paragraphs or texts):
        chunk = Chunk(id=f"{source}#{i}", doc_id=source, text=text, source=source, title=title,
                      heading_path=(title,), doc_type=source.split("/")[0],
                      last_update_date=DATES[source],
                      source_name="manual" if "guide" in source else "")
        n = i + 1
        cut = [len(text) * w // n for w in range(n + 1)]
        vectors = unit(rng, n)
        for w in range(n):
            out.append(WindowRecord(chunk, w, n, cut[w], cut[w + 1], vectors[w],
                                    ((cut[w], cut[w + 1]),), unit(rng, 1)))
    return out


def write_all(engine: MilvusEngine) -> None:
    engine.replace_documents([(s, records(s), "hash-1") for s in TEXTS], "2026-01-01T00:00:00")


def all_chunks() -> dict[str, Chunk]:
    return {r.chunk.id: r.chunk for s in TEXTS for r in records(s)}


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    """One Milvus Lite database for the read-only tests (opening one costs ~2 s)."""
    eng = MilvusEngine(str(tmp_path_factory.mktemp("milvus") / "kb.db"), "kb_read")
    write_all(eng)
    yield eng
    eng.close()


def ids(found) -> list[str]:
    return [cid for cid, _ in found]


# -- expressions ----------------------------------------------------------------------------


def test_shell_patterns_become_like_patterns():
    assert glob_like("faq/*") == ("faq/%", True)
    assert glob_like("faq/?.md") == ("faq/_.md", True)
    # a literal underscore or percent, or a class, cannot be said exactly: checked afterwards
    assert glob_like("notes/old_notes.md") == ("notes/old_notes.md", False)
    assert glob_like("[fg]*") == ("_%", False)
    expr, recheck = filter_expr(Filters(doc_type=("faq",), source=('a"b*',),
                                        updated_to=dt.date(2025, 1, 1)))
    assert 'doc_type in ["faq"]' in expr and r'source like "a\"b%"' in expr
    assert "day <=" in expr and "day >=" in expr and recheck is None


# -- search ---------------------------------------------------------------------------------


def test_dense_search_finds_a_chunk_by_its_window(engine):
    target = records("guide/retrieval.md")[0]  # chunk #0: one window, its vector the row's
    found = engine.dense(target.vector[None, :], 3)[0]
    assert found[0][0] == "guide/retrieval.md#0" and found[0][1] == pytest.approx(1.0, abs=1e-4)
    assert [s for _, s in found] == sorted((s for _, s in found), reverse=True)
    assert engine.dense(np.zeros((0, DIM), np.float32), 3) == []


def test_keyword_search_scores_are_the_apps_bm25(engine):
    chunks = all_chunks()
    tok = KeywordIndex()
    tokens = dict(zip(chunks, tok.tokens([index_text(c) for c in chunks.values()])))
    n, avg = len(tokens), sum(map(len, tokens.values())) / len(tokens)
    assert engine.stats() == (n, pytest.approx(avg))
    terms = tok.query_terms("Which chunks keep their heading path?")
    df = {t: sum(t in set(v) for v in tokens.values()) for t in terms}
    assert engine.doc_freqs(terms + ["zebra"]) == {**df, "zebra": 0}
    idf = {t: bm25_idf(n, df[t]) for t in terms}
    exact = {c: bm25_score(v, terms, idf, avg) for c, v in tokens.items()}
    exact = {c: s for c, s in exact.items() if s > 0}
    found = engine.keyword(terms, 10)
    assert ids(found)[0] == "faq/chunking.md#1"
    assert dict(found) == pytest.approx(exact)
    assert engine.keyword_scores(terms, ["faq/chunking.md#1", "faq/install.md#0", "nope#1"]) == \
        pytest.approx({"faq/chunking.md#1": exact["faq/chunking.md#1"]})
    assert engine.keyword([], 5) == [] and engine.keyword(tok.query_terms("zebra"), 5) == []


FILTERS = [
    Filters(doc_type=("faq",)),
    Filters(doc_type=("faq", "notes")),
    Filters(source=("faq/*",)),
    Filters(source=("guide/retrieval.m?",)),
    Filters(source=("notes/old_notes.md",)),  # a literal underscore: re-checked exactly
    Filters(source=("notes/old?notes.md",)),
    Filters(source=("[fg]*/*.md",)),  # a class: re-checked exactly
    Filters(source=("manual",)),  # a declared source name
    Filters(updated_from=dt.date(2025, 1, 1)),
    Filters(updated_to=dt.date(2025, 3, 1)),
    Filters(updated_from=dt.date(2025, 3, 1), updated_to=dt.date(2025, 6, 14)),
    Filters(doc_type=("faq",), source=("*chunking*",), updated_from=dt.date(2025, 6, 1)),
]


@pytest.mark.parametrize("filters", FILTERS, ids=lambda f: f.describe())
def test_each_filter_kind_passes_what_filters_matches_passes(engine, filters):
    chunks = all_chunks()
    passing = {c for c, chunk in chunks.items() if filters.matches(chunk)}
    assert engine.count(filters) == len(passing)
    vectors = unit(np.random.default_rng(7), 2)
    for found in engine.dense(vectors, 100, filters):
        assert set(ids(found)) == passing
    terms = KeywordIndex().query_terms("chunk tables pip retrieval fusion heading notes wheels")
    holding = {c for c in passing
               if set(terms) & set(KeywordIndex().query_terms(index_text(chunks[c])))}
    assert set(ids(engine.keyword(terms, 100, filters))) == holding
    # fewer than all: the best ones passing
    if len(passing) > 1:
        assert len(engine.dense(vectors[:1], 1, filters)[0]) == 1


# -- the chunk store ------------------------------------------------------------------------


def test_fetch_returns_the_stored_chunk_and_its_exact_vectors(engine):
    recs = [r for r in records("faq/chunking.md") if r.chunk.id == "faq/chunking.md#1"]
    got = engine.fetch(["faq/chunking.md#1", "missing#0"])
    assert list(got) == ["faq/chunking.md#1"]
    s = got["faq/chunking.md#1"]
    assert s.chunk == recs[0].chunk and s.doc_id == "faq/chunking.md" and s.doc_hash == "hash-1"
    assert s.window_vectors.dtype == np.float32
    assert np.array_equal(s.window_vectors, np.vstack([r.vector for r in recs]))  # exact
    expected = np.vstack([r.sentence_vectors for r in recs])
    np.testing.assert_allclose(s.sentence_vectors, expected, atol=2e-3)  # stored as float16
    assert s.spans == [tuple(r.sentence_spans[0]) for r in recs]


def test_listing_phrases_values_and_documents(engine):
    assert engine.document_chunks("faq/install.md") == ["faq/install.md#0", "faq/install.md#1"]
    assert engine.values("doc_type") == ["faq", "guide", "notes"]
    assert engine.values("source_name") == ["manual"]
    assert engine.phrase("RECIPROCAL rank", 5) == ["guide/retrieval.md#1"]
    assert engine.phrase("rank reciprocal", 5) == [] and engine.phrase("", 5) == []
    docs = engine.documents()
    assert set(docs) == set(TEXTS) and docs["faq/install.md"].doc_hash == "hash-1"
    assert docs["faq/install.md"].chunks == 2
    # an ingest lists only the documents of its folder (ids start with its name) or its ids
    assert set(engine.documents("faq/")) == {"faq/install.md", "faq/chunking.md"}
    assert set(engine.documents("f_q/")) == set() == set(engine.documents("fa%"))  # not like's
    assert set(engine.documents("notes/old_")) == {"notes/old_notes.md"}
    assert set(engine.documents(ids=["guide/retrieval.md", "guide/gone.md"])) == {"guide/retrieval.md"}
    assert engine.documents("faq/", ids=["guide/retrieval.md"]) == {} == engine.documents(ids=[])
    assert sorted(s.chunk.id for s in engine.every_chunk()) == sorted(all_chunks())
    assert engine.count() == len(all_chunks())
    assert engine.count_windows() == sum(len(records(s)) for s in TEXTS)


# -- writes ---------------------------------------------------------------------------------


def test_a_change_costs_one_document_and_is_seen_by_another_engine(tmp_path):
    path = str(tmp_path / "kb.db")
    writer = MilvusEngine(path, "kb_write")
    write_all(writer)
    reader = MilvusEngine(path, "kb_write")  # a second engine object on the same database
    before = reader.version()
    written = {s.chunk.id: s.written_ns for s in reader.fetch(list(all_chunks())).values()}
    assert reader.keyword(["wheel"], 5) and reader.doc_freqs(["zebra"]) == {"zebra": 0}

    writer.replace_document("faq/install.md", records(
        "faq/install.md", "2", ["Zebras install nothing.", "Zebra stripes."]), "hash-2", "later")
    after = reader.version()
    assert after != before
    assert set(ids(reader.keyword(["zebra"], 5))) == {"faq/install.md#0", "faq/install.md#1"}
    assert reader.keyword(["wheel"], 5) == []  # the old text is gone, nothing else changed
    assert reader.doc_freqs(["zebra", "wheel"]) == {"zebra": 2, "wheel": 0}
    assert reader.documents()["faq/install.md"].doc_hash == "hash-2"
    new_vec = records("faq/install.md", "2")[0].vector
    assert reader.dense(new_vec[None, :], 1)[0][0][0] == "faq/install.md#0"
    kept = {s.chunk.id: s.written_ns for s in reader.fetch(list(all_chunks())).values()}
    assert all(kept[c] == written[c] for c in kept if not c.startswith("faq/install.md"))

    assert writer.delete_document("guide/retrieval.md") == 3  # windows: 1 + 2
    assert reader.version() not in (before, after)
    assert reader.fetch(["guide/retrieval.md#0"]) == {}
    assert reader.count(Filters(source=("manual",))) == 0
    assert reader.values("source_name") == []
    assert "guide/retrieval.md" not in reader.documents()
    n, _ = reader.stats()
    assert n == len(all_chunks()) - 2
    assert reader.delete_document("guide/retrieval.md") == 0
    writer.recount()  # a repair changes nothing when nothing is off
    assert reader.stats()[0] == n and reader.doc_freqs(["zebra"]) == {"zebra": 2}


def test_a_second_process_cannot_open_a_milvus_lite_database(tmp_path):
    """Milvus Lite locks its folder: a second process is told to use a server instead."""
    path = str(tmp_path / "kb.db")
    eng = MilvusEngine(path, "kb_lock")
    write_all(eng)
    script = textwrap.dedent(f"""
        from ragstream.backends.search.milvus import MilvusEngine
        from ragstream.common.errors import VectorStoreError
        try:
            MilvusEngine({path!r}, "kb_lock").version()
        except VectorStoreError as err:
            print("refused:", err)
        else:
            print("opened")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         cwd=ROOT, timeout=120).stdout
    assert out.startswith("refused:") and "one process" in out and "Milvus server" in out
    assert eng.version()  # still open here


def test_an_unreachable_server_names_the_engine_and_what_to_start():
    eng = MilvusEngine("http://127.0.0.1:9", "kb_none", timeout_s=1.0)
    with pytest.raises(VectorDBUnavailableError) as err:
        eng.version()
    assert isinstance(err.value, VectorStoreError)
    assert "Milvus server at http://127.0.0.1:9" in str(err.value) and "Start it" in str(err.value)


# -- Retrieval on Milvus and on the default engine ------------------------------------------


@pytest.fixture(scope="module")
def real_embedder(tmp_path_factory):
    from ragstream.backends.embedder_choice import make_embedder
    from tests.conftest import make_config

    cfg = make_config(tmp_path_factory.mktemp("emb") / "index")
    return make_embedder(cfg.settings.embedding, cfg.cache_dir)


def test_retrieval_keeps_the_same_chunks_on_milvus_as_on_the_default_engine(tmp_path, real_embedder):
    from ragstream.backends.search.local import LocalEngine
    from ragstream.backends.services import Services
    from ragstream.backends.vector_store import ChromaStore
    from ragstream.knowledge.ingest.chunker import parse_document
    from ragstream.stages import controller
    from tests.conftest import KB, make_config

    cfg = make_config(tmp_path / "index")
    documents = []
    for name in ("reranking.md", "faq.md", "configuration.md", "hybrid-retrieval.md"):
        parsed = parse_document((KB / name).read_text(encoding="utf-8"), f"kb/{name}",
                                cfg.settings.chunking, "2026-01-01")
        documents.append((parsed.doc_id, encode_chunks(parsed.chunks, real_embedder),
                          parsed.content_hash))
    local = LocalEngine.open(ChromaStore(cfg.settings.vector_store, cfg.index_dir))
    milvus = MilvusEngine(str(tmp_path / "milvus.db"), cfg.settings.vector_store.collection)
    for store in (local, milvus):
        store.replace_documents(documents, "2026-01-01T00:00:00")
    assert milvus.stats()[0] == local.stats()[0] > 20

    def kept(store, question: str, filters: Filters | None = None) -> list[str]:
        services = Services(embedder=real_embedder, store=store, keyword_index=KeywordIndex())
        sp = controller.new_prompt(question)
        if filters is not None:
            sp.filters = filters
        sp = controller.run_all(sp, cfg, services, until="Retrieval")
        return [r.chunk_id for r in sp.view("retrieval") if r.status == "kept"]

    for question, filters in [
        ("What is reciprocal rank fusion and which k does it use?", None),
        ("How does the ReRanker choose its backend?", None),
        ("How do I configure the Chroma server?", Filters(source=("kb/conf*",))),
    ]:
        a, b = kept(local, question, filters), kept(milvus, question, filters)
        assert a and b
        overlap = len(set(a) & set(b)) / len(set(a) | set(b))
        assert overlap >= 0.8, (question, a, b)
        assert set(a[:3]) & set(b[:3])  # the best ones agree too
    local.close()
    milvus.close()
    shutil.rmtree(tmp_path / "index", ignore_errors=True)
