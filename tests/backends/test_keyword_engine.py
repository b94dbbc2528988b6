"""The keyword engine (a real tantivy index on disk): BM25 search, filters and phrases in the
engine, the chunk store round trip, a change that costs one document, and another process's
write seen at the next query without a rebuild."""

import datetime as dt
import subprocess
import sys
import textwrap
import zlib

import numpy as np
import pytest

from ragstream.backends.keyword_index import KeywordIndex, index_text
from ragstream.backends.search.keyword import KeywordEngine, StoredChunk, glob_regex
from ragstream.common.errors import VectorStoreError
from ragstream.state.super_prompt import Chunk, Filters

DIM = 8
TEXTS = {
    "faq/install.md": ("Installing", ["The package installs with pip in a virtual environment.",
                                      "Offline installs read wheels from a local folder."]),
    "faq/chunking.md": ("Chunking", ["Documents are split at their headings into chunks.",
                                     "Each chunk keeps its heading path."]),
    "guide/retrieval.md": ("Retrieval", ["Hybrid retrieval fuses dense and keyword rankings.",
                                         "Reciprocal rank fusion combines both lists."]),
    "notes/old.md": ("Old notes", ["A note without a date about chunking tables."]),
}
DATES = {"faq/install.md": "2025-03-01", "faq/chunking.md": "2025-06-15",
         "guide/retrieval.md": "2024-12-31", "notes/old.md": ""}


def stored(source: str, version: str = "1", written: int = 1) -> list[StoredChunk]:
    title, paragraphs = TEXTS[source]
    rng = np.random.default_rng(zlib.crc32(f"{source}@{version}".encode()))
    out = []
    for i, text in enumerate(paragraphs):
        chunk = Chunk(id=f"{source}#{i}", doc_id=source, text=text, source=source, title=title,
                      heading_path=(title,), doc_type=source.split("/")[0],
                      last_update_date=DATES[source], source_name="manual" if "guide" in source else "")
        spans = [(0, len(text))]
        out.append(StoredChunk(chunk, source, f"hash-{version}",
                               rng.normal(size=(1 + i, DIM)).astype(np.float32),
                               rng.normal(size=(1, DIM)).astype(np.float32), spans, written))
    return out


@pytest.fixture
def engine(tmp_path):
    eng = KeywordEngine(tmp_path / "keyword")
    eng.replace_documents([(s, stored(s)) for s in TEXTS])
    return eng


def ids(found):
    return [cid for cid, _ in found]


def test_bm25_search_finds_the_chunk_that_holds_the_words(engine):
    found = engine.search(engine.query_terms("How is reciprocal rank fusion done?"), 3)
    assert ids(found)[0] == "guide/retrieval.md#1"
    assert all(score > 0 for _, score in found)
    assert engine.search([], 5) == [] and engine.search(engine.query_terms("zebra"), 5) == []


def test_its_scores_follow_the_apps_bm25_order(engine):
    """The engine's BM25 and the in-memory bm25s index rank a corpus alike (the same terms:
    the app's tokenizer stems and drops stop words for both)."""
    chunks = [s.chunk for src in TEXTS for s in stored(src)]
    mem = KeywordIndex().build([c.id for c in chunks], [index_text(c) for c in chunks])
    for query in ("chunks headings", "keyword rankings fusion", "pip virtual environment"):
        s = mem.scores(query)
        best_mem = mem.ids[int(np.argmax(s))]
        assert ids(engine.search(engine.query_terms(query), 1)) == [best_mem]


def test_scores_of_given_chunks_only(engine):
    terms = engine.query_terms("chunks headings")
    got = engine.scores(terms, ["faq/chunking.md#1", "faq/install.md#0"])
    assert set(got) == {"faq/chunking.md#1"} and got["faq/chunking.md#1"] > 0


@pytest.mark.parametrize(("filters", "expected"), [
    (Filters(doc_type=("faq",)), {"faq/install.md#0", "faq/install.md#1", "faq/chunking.md#0",
                                  "faq/chunking.md#1"}),
    (Filters(source=("faq/chunk*",)), {"faq/chunking.md#0", "faq/chunking.md#1"}),
    (Filters(source=("manual",)), {"guide/retrieval.md#0", "guide/retrieval.md#1"}),
    (Filters(updated_from=dt.date(2025, 1, 1)), {"faq/install.md#0", "faq/install.md#1",
                                                 "faq/chunking.md#0", "faq/chunking.md#1"}),
    (Filters(updated_to=dt.date(2025, 3, 1)), {"faq/install.md#0", "faq/install.md#1",
                                               "guide/retrieval.md#0", "guide/retrieval.md#1"}),
])
def test_filters_are_applied_in_the_engine_as_filters_matches_says(engine, filters, expected):
    every = [s.chunk for src in TEXTS for s in stored(src)]
    assert {c.id for c in every if filters.matches(c)} == expected  # the rule itself
    terms = engine.query_terms("chunks pip installs fusion rankings note headings wheels")
    assert set(ids(engine.search(terms, 20, filters))) <= expected
    assert engine.count(filters) == len(expected)


def test_glob_patterns_match_as_fnmatch_does():
    import fnmatch
    import re

    for pattern in ("faq/*", "*.md", "guide/re?rieval.md", "[fg]*", "[!f]*", "a+b(c).md"):
        rx = re.compile(glob_regex(pattern))
        for name in ("faq/install.md", "guide/retrieval.md", "a+b(c).md", "notes/old.md"):
            assert bool(rx.fullmatch(name)) == fnmatch.fnmatchcase(name, pattern), (pattern, name)


def test_the_stored_chunk_comes_back_whole(engine):
    want = {s.chunk.id: s for s in stored("guide/retrieval.md")}
    got = engine.fetch(list(want) + ["no/such.md#0"])
    assert set(got) == set(want)
    for cid, s in want.items():
        assert got[cid].chunk == s.chunk and got[cid].doc_hash == "hash-1"
        assert np.array_equal(got[cid].window_vectors, s.window_vectors)
        assert np.allclose(got[cid].sentence_vectors, s.sentence_vectors, atol=1e-2)
        assert got[cid].spans == s.spans


def test_a_search_names_its_hits_from_columns_and_reads_each_stored_chunk_once(engine, monkeypatch):
    """A stored chunk holds its vectors (~10 KB in a real one): a search names its hits from
    the ``key`` and ``written`` columns and reads a chunk's row only the first time it is a
    hit; a search among given chunks reads none; a document written again is read anew
    (its chunks are never served as they were) and its old rows are gone."""
    reads: list[str] = []
    real = KeywordEngine._stored

    def counted(self, row):
        got = real(self, row)
        reads.append(got.chunk.id)
        return got

    monkeypatch.setattr(KeywordEngine, "_stored", counted)
    terms = engine.query_terms("chunks headings tables")
    first = engine.search(terms, 5)
    assert len(first) >= 2 and sorted(reads) == sorted(ids(first))
    reads.clear()
    assert engine.search(terms, 5) == first and reads == []
    assert set(engine.fetch(ids(first))) == set(ids(first)) and reads == []
    engine.scores(engine.query_terms("pip wheels"), ["faq/install.md#0", "faq/install.md#1"])
    assert reads == []
    new = stored("faq/chunking.md", "2", written=7)
    engine.replace_documents([("faq/chunking.md", new)])
    got = engine.fetch(["faq/chunking.md#0"])["faq/chunking.md#0"]
    assert reads == ["faq/chunking.md#0"] and got.doc_hash == "hash-2" and got.written_ns == 7
    assert np.array_equal(got.window_vectors, new[0].window_vectors)
    # the evidence sentences are their own rows, read when first asked for
    assert got.spans == new[0].spans
    assert np.allclose(got.sentence_vectors, new[0].sentence_vectors, atol=1e-3)  # float16
    db = engine.chunks._db()
    for table in ("chunks", "sentences"):
        assert db.execute(f"SELECT DISTINCT written FROM {table} WHERE doc_id = 'faq/chunking.md'"
                          ).fetchall() == [(7,)]
    unread = engine.fetch(["faq/chunking.md#1"])["faq/chunking.md#1"]  # its sentences not read
    engine.delete_document("faq/chunking.md")
    # read after its document went: no sentences (the ReRanker scores its windows), never
    # another chunk's or a mismatched pair
    assert unread.spans == [] and unread.sentence_vectors.shape == (0, DIM)
    for table in ("chunks", "sentences"):
        assert db.execute(f"SELECT COUNT(*) FROM {table} WHERE doc_id = 'faq/chunking.md'"
                          ).fetchone() == (0,)


def test_a_phrase_is_found_in_the_text_case_and_accents_aside(engine):
    assert engine.phrase("Reciprocal RANK fusion", 5) == ["guide/retrieval.md#1"]
    assert engine.phrase("fusion reciprocal", 5) == []
    # punctuation is not part of a word: "lists." ends the phrase "both lists"
    assert engine.phrase("combines both lists", 5) == ["guide/retrieval.md#1"]
    assert engine.phrase("lists. Reciprocal", 5) == []


def test_replacing_a_document_changes_that_document_only(engine):
    before = engine.documents()
    engine.replace_documents([("faq/install.md", stored("faq/install.md", "2", 5)[:1])])
    after = engine.documents()
    assert after["faq/install.md"] == "hash-2"
    assert {k: v for k, v in after.items() if k != "faq/install.md"} == \
        {k: v for k, v in before.items() if k != "faq/install.md"}
    assert "faq/install.md#1" not in engine.fetch(["faq/install.md#1"])
    assert [s.chunk.id for s in engine.written_since(1)] == ["faq/install.md#0"]
    engine.delete_document("faq/install.md")
    assert "faq/install.md" not in engine.documents() and engine.count() == 5


def test_another_process_write_is_seen_at_the_next_query(engine, tmp_path):
    """A second process adds a document; this process's next search finds it (a reload of
    the new segment, no rebuild) while this process holds the index open."""
    assert engine.search(engine.query_terms("quantum entanglement"), 5) == []
    script = textwrap.dedent(f"""
        import numpy as np
        from ragstream.backends.search.keyword import KeywordEngine, StoredChunk
        from ragstream.state.super_prompt import Chunk
        c = Chunk(id="new.md#0", doc_id="new.md", text="Quantum entanglement explained.",
                  source="new.md")
        KeywordEngine({str(engine.folder)!r}).replace_documents(
            [("new.md", [StoredChunk(c, "new.md", "h", np.ones((1, {DIM}), np.float32),
                                          np.zeros((0, {DIM}), np.float32), [], 9)])])
    """)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    assert ids(engine.search(engine.query_terms("quantum entanglement"), 5)) == ["new.md#0"]
    assert engine.count() == 8


def test_a_writer_waits_for_another_and_then_says_so(engine, monkeypatch):
    import ragstream.backends.search.keyword as kw

    monkeypatch.setattr(kw, "WRITE_WAIT_S", 0.3)
    held = engine.index.writer(heap_size=kw.WRITER_HEAP, num_threads=1)  # the lock is taken
    try:
        with pytest.raises(VectorStoreError, match="Another process may be ingesting"):
            engine.delete_document("faq/install.md")
    finally:
        held.rollback()
        del held
    engine.delete_document("faq/install.md")  # free again
    assert "faq/install.md" not in engine.documents()


def test_idf_is_the_apps_bm25_idf(engine):
    chunks = [s.chunk for src in TEXTS for s in stored(src)]
    mem = KeywordIndex().build([c.id for c in chunks], [index_text(c) for c in chunks])
    for term in ("chunk", "fusion", "zebra"):
        assert engine.idf(term) == pytest.approx(mem.idf(term))
    assert engine.idf("zebra") > engine.idf("chunk")


def test_rows_left_by_a_write_cut_short_are_swept(engine):
    """Rows written for a document whose index commit never came (a process killed between
    the two) are never read, and ``sweep`` (run by the store's repair) drops them."""
    from ragstream.backends.search.keyword import _row

    ghost = stored("faq/install.md", "9", written=99)
    for s in ghost:
        object.__setattr__(s, "doc_id", "ghost.md")
    engine.chunks.add(_row(s) for s in ghost)
    assert "ghost.md" not in engine.documents()
    assert engine.sweep() == 1
    db = engine.chunks._db()
    assert db.execute("SELECT COUNT(*) FROM chunks WHERE doc_id = 'ghost.md'").fetchone() == (0,)
    assert engine.count() == 7 and len(engine.fetch(["faq/install.md#0"])) == 1


def test_more_documents_than_one_aggregation_holds_are_all_listed(tmp_path):
    """tantivy refuses a terms aggregation of more than 65,000 buckets: a knowledge base of
    100,000 documents failed every ingest (its listing). The listing is split by write time."""
    eng = KeywordEngine(tmp_path / "keyword")
    vec = np.ones((1, DIM), dtype=np.float32)
    n = 66_000
    for written, part in ((1, range(0, n // 2)), (2, range(n // 2, n))):
        docs = []
        for d in part:
            doc_id = f"many/{d:06d}.md"
            chunk = Chunk(id=f"{doc_id}#0", doc_id=doc_id, text=f"note {d}", source=doc_id,
                          title="Note", heading_path=("Note",))
            docs.append((doc_id, [StoredChunk(chunk, doc_id, f"hash-{d}", vec, vec[:0], [], written)]))
        eng.replace_documents(docs)
    other = Chunk(id="other/a.md#0", doc_id="other/a.md", text="another folder",
                  source="other/a.md", title="Other", heading_path=("Other",))
    eng.replace_documents([("other/a.md", [StoredChunk(other, "other/a.md", "h", vec, vec[:0], [], 3)])])
    info = eng.document_info()
    assert len(info) == n + 1 and info["many/000000.md"][:2] == ("hash-0", 1)
    assert info[f"many/{n - 1:06d}.md"][:2] == (f"hash-{n - 1}", 1)
    # one folder's documents (an ingest lists only its own): split the same way
    assert eng.document_info("many/") == {d: i for d, i in info.items() if d != "other/a.md"}
    assert list(eng.document_info("other/")) == ["other/a.md"]
    assert list(eng.document_info(ids=["many/000007.md", "many/none.md"])) == ["many/000007.md"]
