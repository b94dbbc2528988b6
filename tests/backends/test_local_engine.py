"""The knowledge base on its engines (Chroma + tantivy, ``LocalEngine``): every chunk held
with its vectors, one change seen by every process at its next query, writes cut short
repaired, the candidates' scores exact (real Chroma, real tantivy, real model)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ragstream.backends.doc_index import encode_chunks
from ragstream.common.text import clean_sentence, evidence_units
from ragstream.knowledge.ingest.chunker import parse_document
from ragstream.state.super_prompt import View

ROOT = Path(__file__).resolve().parents[2]

DOC = """# Fruit

## Bananas

Ripe bananas are yellow, sometimes with brown spots. They grow in bunches called hands.

```python
print("code is not evidence")
```

- Plantains are cooked before they are eaten.

## Apples

Apples keep for months in a cool cellar. Some varieties are best for baking.
"""


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_evidence_units_skip_code_and_keep_spans():
    units = evidence_units(DOC)
    texts = [t for _, _, t in units]
    assert "Ripe bananas are yellow, sometimes with brown spots." in texts
    assert "Plantains are cooked before they are eaten." in texts  # list marker removed
    assert not any("print" in t or "#" in t for t in texts)
    for s, e, t in units:
        assert clean_sentence(DOC[s:e]) == t


def test_the_engine_holds_every_chunk_with_its_vectors(fresh_engine, tmp_path):
    write(tmp_path / "kb", "fruit.md", DOC)
    fresh_engine.ingest(tmp_path / "kb")
    services = fresh_engine.services
    corpus = services.index()
    chunks = services.store.all_chunks()  # Chroma's records
    assert [c.id for c in corpus.all_chunks()] == [c.id for c in chunks]
    assert corpus.n_chunks == len(chunks)
    held = corpus.fetch([c.id for c in chunks])
    assert sum(len(s.window_vectors) for s in held.values()) == services.store.count_windows()
    for chunk in chunks:
        stored = held[chunk.id]
        assert stored.chunk == chunk
        assert np.allclose(np.linalg.norm(stored.window_vectors, axis=1), 1.0, atol=1e-3)
    for chunk, ev in zip(chunks, corpus.evidence(chunks)):
        assert ev is not None
        assert ev.sentences == [t for _, _, t in evidence_units(chunk.text)]
        assert len(ev.sentence_vectors) == len(ev.sentences)
        assert np.allclose(np.linalg.norm(ev.sentence_vectors, axis=1), 1.0, atol=1e-2)
    # the stored window vectors are what encoding the chunks gives now (up to batch effects:
    # int8 quantises activations per batch)
    records = encode_chunks(chunks, services.embedder)
    fresh = np.vstack([r.vector for r in records])
    stored = np.vstack([held[c.id].window_vectors for c in chunks])
    assert float(np.einsum("ij,ij->i", fresh, stored).min()) > 0.99


def test_a_change_costs_the_document_and_is_seen_at_the_next_query(fresh_engine, tmp_path):
    kb = tmp_path / "kb"
    write(kb, "fruit.md", DOC)
    fresh_engine.ingest(kb)
    services = fresh_engine.services
    first = services.index()
    engine = services.store.keyword_engine
    before = engine.documents()

    write(kb, "more.md", "# Pears\n\nPears ripen from the inside out, so pick them early.\n")
    fresh_engine.ingest(kb)
    second = services.index()
    assert second.fingerprint != first.fingerprint
    assert engine.documents() == {**before, "kb/more.md": engine.documents()["kb/more.md"]}
    found = second.keyword(second.query_terms("pears ripen inside"), 5)
    assert found and found[0][0].startswith("kb/more.md")
    near = second.dense(services.embedder.embed(["When should pears be picked?"]), 3)[0]
    assert near[0][0].startswith("kb/more.md")


def test_another_services_sees_a_change_without_a_rebuild(fresh_engine, tmp_path):
    """Another process (here: another Services on the same folder) writing to the store is
    seen at this one's next query: the keyword index is reread, the chunks written since
    this one's Chroma opened are searched exactly beside its HNSW."""
    from ragstream.workbench.engine import Engine

    kb = tmp_path / "kb"
    write(kb, "fruit.md", DOC)
    fresh_engine.ingest(kb)
    before = fresh_engine.services.index()
    assert before.dense(fresh_engine.services.embedder.embed(["apples"]), 2)[0]  # Chroma opened
    other = Engine(fresh_engine.cfg)
    other.services.embedder = fresh_engine.services.embedder
    write(kb, "fruit.md", DOC.replace("cool cellar", "cold cellar"))
    other.ingest(kb)
    after = fresh_engine.services.index()
    assert after.fingerprint != before.fingerprint
    assert any("cold cellar" in c.text for c in after.all_chunks())
    hits = after.find_text("cold cellar")
    assert hits and "cold cellar" in hits[0][0].text


@pytest.mark.timeout(300)
def test_a_second_process_write_reaches_a_reader_whose_chroma_is_open(fresh_engine, tmp_path):
    """Chroma's HNSW in a process that has it open is not refreshed by another process's
    writes; the reader still finds a document another process added (exact search over what
    was written since it opened) and never returns one it removed."""
    kb = tmp_path / "kb"
    write(kb, "fruit.md", DOC)
    write(kb, "nuts.md", "# Nuts\n\nWalnuts and hazelnuts keep best in a sealed jar in the freezer.\n")
    fresh_engine.ingest(kb)
    services = fresh_engine.services
    ask = services.embedder.embed(["How long do cherries keep on the tree?"])
    assert services.index().dense(ask, 5)[0]  # this process's Chroma is open now
    (kb / "nuts.md").unlink()
    write(kb, "cherries.md", "# Cherries\n\nSour cherries keep on the tree for weeks after they "
                             "ripen, sweet ones only days.\n")
    env = {**os.environ, "RAGSTREAM_INDEX_DIR": str(fresh_engine.cfg.index_dir),
           "PYTHONPATH": str(ROOT)}
    code = ("import sys; from ragstream.workbench.engine import Engine; "
            "r = Engine().ingest(sys.argv[1], prune=True); assert r.failed == 0, r.errors")
    subprocess.run([sys.executable, "-c", code, str(kb)], env=env, cwd=ROOT, check=True, timeout=240)

    corpus = services.index()
    near = [c for c, _ in corpus.dense(ask, 5)[0]]
    assert near[0].startswith("kb/cherries.md")
    assert not corpus.fetch([c for c in near if c.startswith("kb/nuts.md")])
    sp = fresh_engine.run("How long do cherries keep on the tree?", until="Retrieval")
    kept = sp.kept_ids(View.RETRIEVAL)
    assert kept[0].startswith("kb/cherries.md")
    assert not any(c.startswith("kb/nuts.md") for c in kept)


def test_a_write_cut_short_between_the_engines_is_repaired(fresh_engine, tmp_path, caplog):
    """Chroma written, tantivy not (a process killed between the two writes): a query says
    so and searches what tantivy holds; the next ingest finds them out of step and rewrites
    the document in tantivy from the store (nothing re-encoded)."""
    import logging

    kb = tmp_path / "kb"
    write(kb, "fruit.md", DOC)
    fresh_engine.ingest(kb)
    store = fresh_engine.services.store
    parsed = parse_document(DOC.replace("cool cellar", "cold cellar"), "kb/fruit.md",
                            fresh_engine.cfg.settings.chunking, "2026-01-01")
    records = encode_chunks(parsed.chunks, fresh_engine.services.embedder)
    store.chroma.replace_documents([("kb/fruit.md", records, "new-hash")], "2026-01-01T00:00:00+00:00")
    assert not store.in_step()
    with caplog.at_level(logging.WARNING, logger="ragstream.backends.search.local"):
        corpus = fresh_engine.services.index()
    assert any("out of step" in r.getMessage() for r in caplog.records)
    def phrase(corpus, text):
        return [c.id for c, how in corpus.find_text(text) if how == "phrase"]

    assert not phrase(corpus, "cold cellar")  # tantivy still holds the old text
    report = fresh_engine.ingest(kb)  # the file is unchanged: only the repair writes
    assert any("out of step" in w and "1 document(s) rewritten" in w for w in report.warnings)
    assert store.in_step()
    assert store.keyword_engine.documents()["kb/fruit.md"] != "new-hash"  # the file's own again
    corpus = fresh_engine.services.index()
    assert not phrase(corpus, "cold cellar") and phrase(corpus, "cool cellar")


def test_a_half_written_document_is_rewritten(fresh_engine, tmp_path):
    kb = tmp_path / "kb"
    write(kb, "fruit.md", DOC)
    fresh_engine.ingest(kb)
    store = fresh_engine.services.store
    # lose one window, as a write killed half-way would
    ids = store.collection.get(where={"doc_id": "kb/fruit.md"}, include=[])["ids"]
    store.chroma._bump_generation()  # a write's opening stamp, as the killed write left it
    store.collection.delete(ids=[sorted(ids)[-1]])
    assert store.documents()["kb/fruit.md"].doc_hash == ""  # incomplete: no trusted hash
    report = fresh_engine.ingest(kb)
    assert report.processed == 1 and report.skipped == 0
    assert sorted(store.collection.get(where={"doc_id": "kb/fruit.md"}, include=[])["ids"]) == sorted(ids)


@pytest.mark.timeout(600)
def test_sigkill_during_ingest_then_reingest_equals_a_clean_ingest(tmp_path):
    """A process killed while ingesting leaves a store that the next ingest completes; the
    index read afterwards is exactly the one a clean ingest gives."""
    kb = tmp_path / "kb"
    for i in range(24):
        write(kb, f"doc{i:02d}.md", DOC.replace("Bananas", f"Bananas {i}").replace("Apples", f"Apples {i}"))
    env = {**os.environ, "RAGSTREAM_INDEX_DIR": str(tmp_path / "killed"), "PYTHONPATH": str(ROOT)}
    code = ("import sys; from ragstream.workbench.engine import Engine; e = Engine(); "
            "e.cfg = e.cfg.with_overrides({'settings.chunking.ingest_batch_chunks': 2}); "
            "e.ingest(sys.argv[1], progress=lambda i, n, d: print(i, flush=True))")
    proc = subprocess.Popen([sys.executable, "-c", code, str(kb)], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, text=True)
    for line in proc.stdout:  # kill it once a third of the files are through
        if int(line.split()[0]) >= 8:
            break
    assert proc.poll() is None, "the ingest finished before it could be killed; use more files"
    proc.send_signal(signal.SIGKILL)
    proc.wait()

    from ragstream.workbench.engine import Engine
    from tests.conftest import make_config

    killed = Engine(make_config(tmp_path / "killed"))
    report = killed.ingest(kb)
    assert report.failed == 0 and report.processed + report.skipped == 24
    clean = Engine(make_config(tmp_path / "clean"))
    clean.services.embedder = killed.services.embedder
    clean.ingest(kb)
    a, b = killed.services.index(), clean.services.index()
    ca, cb = a.all_chunks(), b.all_chunks()
    assert [c.id for c in ca] == [c.id for c in cb]
    assert [c.text for c in ca] == [c.text for c in cb]
    ha, hb = a.fetch([c.id for c in ca]), b.fetch([c.id for c in cb])
    va = np.vstack([ha[c.id].window_vectors for c in ca])
    vb = np.vstack([hb[c.id].window_vectors for c in cb])
    # the same vectors up to batch effects (int8 quantises activations per batch, and the
    # killed run wrote smaller batches)
    assert va.shape == vb.shape
    assert float(np.einsum("ij,ij->i", va, vb).min()) > 0.98
    assert killed.services.store.count_windows() == clean.services.store.count_windows()
    assert killed.services.store.in_step()


def test_parse_and_encode_agree_with_stored_spans(fresh_engine):
    parsed = parse_document(DOC, "kb/fruit.md", fresh_engine.cfg.settings.chunking, "2026-01-01")
    records = encode_chunks(parsed.chunks, fresh_engine.services.embedder)
    for rec in records:
        for (s, e) in rec.sentence_spans:
            assert rec.start <= s < rec.end or rec.window == rec.n_windows - 1
            assert clean_sentence(rec.chunk.text[s:e])


def test_late_chunked_sentence_vectors(embedder):
    """A sentence's vector is pooled from its window's model pass; one the input limit cut off
    is embedded on its own, so no stored vector is ever missing."""
    if not hasattr(embedder, "embed_with_spans"):
        pytest.skip(f"the {embedder.backend} backend embeds sentences separately")
    head = "Ripe bananas are yellow. "
    text = head + "Filler words follow here. " * 120 + "Apples keep for months."
    tail = (len(text) - len("Apples keep for months."), len(text))
    vectors, pooled = embedder.embed_with_spans([text], [[(0, len(head) - 1), tail]])
    assert float(vectors[0] @ embedder.embed_batch([text])[0]) > 0.999
    first = pooled[0][0]
    assert np.isclose(np.linalg.norm(first), 1.0, atol=1e-3)
    alone = embedder.embed_batch(["Ripe bananas are yellow."])[0]
    assert float(first @ alone) > 0.5  # the same sentence, read in context
    assert np.isnan(pooled[0][1]).all()  # past the 256 word pieces the model reads

    from ragstream.state.super_prompt import Chunk

    chunk = Chunk(id="t.md#0", doc_id="t.md", source="t.md", text=text)
    old = embedder.window_tokens
    embedder.window_tokens = 2000  # one window, longer than the model reads
    try:
        records = encode_chunks([chunk], embedder)
    finally:
        embedder.window_tokens = old
    vecs = np.vstack([r.sentence_vectors for r in records if r.sentence_vectors is not None])
    assert np.isfinite(vecs).all()
    spans = [s for r in records for s in r.sentence_spans]
    last = vecs[spans.index(tail)]
    assert float(last @ embedder.embed_batch(["Apples keep for months."])[0]) > 0.99


@pytest.mark.parametrize("how", ["deleted", "another version", "chunk store deleted",
                                 "chroma opened first"])
def test_a_store_made_before_the_keyword_index_is_indexed_by_the_next_process(fresh_engine, tmp_path,
                                                                              how):
    """A store whose keyword index is missing (the folder deleted), made by another version
    of RAGstream (another schema), or without its chunk rows: the next process to open the store builds the
    keyword index from the store's records (nothing encoded) and answers from it, whichever
    call opens Chroma first."""
    import shutil

    from ragstream.backends.search.keyword import SCHEMA_VERSION
    from ragstream.workbench.engine import Engine

    kb = tmp_path / "kb"
    write(kb, "fruit.md", DOC)
    fresh_engine.ingest(kb)
    expected = fresh_engine.run("Where do apples keep?").kept_ids(View.RETRIEVAL)
    store = fresh_engine.services.store
    folder = store.keyword_engine.folder
    store.close()
    if how == "another version":
        (folder / "ragstream-schema").write_text(str(SCHEMA_VERSION - 1))
        held = {p.name for p in folder.iterdir()}
    elif how == "chunk store deleted":  # the index without its rows would answer nothing
        for f in folder.glob("chunks.sqlite3*"):
            f.unlink()
    else:
        shutil.rmtree(folder)
    later = Engine(fresh_engine.cfg)
    later.services.embedder = fresh_engine.services.embedder
    if how == "chroma opened first":
        assert later.services.store.count_windows() > 0
        assert later.services.store.in_step()
    assert later.run("Where do apples keep?").kept_ids(View.RETRIEVAL) == expected
    assert later.services.store.in_step()
    assert set(later.services.store.keyword_engine.documents()) == {"kb/fruit.md"}
    # rewritten from the Chroma this process has just opened: its HNSW holds them, so they
    # are not also searched exactly beside it at every query as another process's writes
    assert later.services.store._written_since_open() == []
    if how == "another version":
        assert (folder / "ragstream-schema").read_text() == str(SCHEMA_VERSION)
        segments = {p.name for p in folder.iterdir() if p.suffix == ".store"}
        assert segments and not segments & held  # rebuilt, not the old segments reused
        assert not any(p.name.startswith(folder.name + ".old-") for p in folder.parent.iterdir())


def test_a_pass_made_between_the_two_writes_of_a_change_is_out_of_date_after_the_second(
        fresh_engine, tmp_path):
    """Retrieval run while a change is half written (Chroma has it, tantivy not yet) is not
    current once tantivy has it too: what a pass was computed from is both engines' version."""
    from ragstream.backends.search.keyword import stored_chunks

    kb = tmp_path / "kb"
    write(kb, "fruit.md", DOC)
    fresh_engine.ingest(kb)
    store = fresh_engine.services.store
    text = "# Plums\n\nPlums dry into prunes in the sun.\n"
    parsed = parse_document(text, "kb/plums.md", fresh_engine.cfg.settings.chunking, "2026-01-01")
    records = encode_chunks(parsed.chunks, fresh_engine.services.embedder)
    store.chroma.replace_documents([("kb/plums.md", records, "h")], "2026-01-01T00:00:00+00:00")
    half = fresh_engine.run("What do plums dry into?", until="Retrieval")
    assert not any(c.startswith("kb/plums.md") for c in half.kept_ids(View.RETRIEVAL))
    assert fresh_engine.stale(half) is None
    store.keyword_engine.replace_documents([("kb/plums.md", stored_chunks(records, "kb/plums.md", "h", 1))])
    store._mark_in_step()
    assert fresh_engine.stale(half) is not None
    whole = fresh_engine.resume(half)
    assert whole.kept_ids(View.RETRIEVAL)[0].startswith("kb/plums.md")


def test_a_store_chroma_opens_but_cannot_read_is_a_typed_error_naming_the_repair(fresh_engine, tmp_path):
    """Seen at 1M chunks after a writer was killed in the middle of a Chroma write: Chroma
    opened the folder, then every call failed with its own ``InternalError`` ("Failed to
    apply logs to the hnsw segment writer"), raised raw from the open hook's first read. The
    damage itself was not reproduced on demand; Chroma's error is raised from that read."""
    from chromadb.errors import InternalError

    from ragstream.common.errors import StoreUnreadableError

    write(tmp_path / "kb", "fruit.md", DOC)
    assert fresh_engine.ingest(tmp_path / "kb").processed == 1
    store = fresh_engine.services.store
    store.close()
    chroma = store.chroma
    real = chroma.documents

    def damaged(*args, **kwargs):
        raise InternalError("Error executing plan: Error sending backfill request to compactor: "
                            "Failed to apply logs to the hnsw segment writer")

    chroma.documents = damaged
    store.keyword_engine.folder.joinpath("in-step").unlink()  # the open hook reads the store
    with pytest.raises(StoreUnreadableError) as caught:
        store.version()
    assert "python -m ragstream repair" in str(caught.value)
    assert "Failed to apply logs to the hnsw segment writer" in str(caught.value)
    chroma.documents = real  # the next call opens it again
    assert store.version()
