"""The in-memory DocumentIndex: built from the store at ingestion, kept consistent with it,
saved whole, and read instead of the store at query time (real Chroma, real model)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ragstream.backends.doc_index import DocumentIndex, encode_chunks
from ragstream.ingest.chunker import parse_document
from ragstream.text import clean_sentence, evidence_units

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


def test_index_holds_every_chunk_with_its_vectors(fresh_engine, tmp_path):
    write(tmp_path / "kb", "fruit.md", DOC)
    fresh_engine.ingest(tmp_path / "kb")
    services = fresh_engine.services
    index = services.index()
    chunks = services.store.all_chunks()
    assert [c.id for c in index.chunks] == [c.id for c in chunks] == index.ids
    assert index.window_offsets[-1] == len(index.window_vectors) == services.store.count_windows()
    norms = np.linalg.norm(index.window_vectors, axis=1)
    assert np.allclose(norms, 1.0, atol=1e-3)
    for chunk in chunks:
        ev = index.evidence(chunk)
        assert ev is not None
        assert ev.sentences == [t for _, _, t in evidence_units(chunk.text)]
        assert len(ev.sentence_vectors) == len(ev.sentences)
        assert np.allclose(np.linalg.norm(ev.sentence_vectors, axis=1), 1.0, atol=1e-2)
    # the stored window vectors are what encoding the chunks gives now (up to batch effects:
    # int8 quantises activations per batch)
    records = encode_chunks(chunks, services.embedder)
    fresh = np.vstack([r.vector for r in records])
    assert float(np.einsum("ij,ij->i", fresh, index.window_vectors).min()) > 0.99


def test_snapshot_on_disk_is_reused_and_rebuilt_when_stale(fresh_engine, tmp_path):
    kb = tmp_path / "kb"
    write(kb, "fruit.md", DOC)
    fresh_engine.ingest(kb)
    services = fresh_engine.services
    folder = services.index_cache.folder
    first = services.index()
    assert (folder / "manifest.json").is_file()
    loaded = DocumentIndex.load(folder, first.fingerprint, services.index_cache.new_keyword_index())
    assert loaded is not None and loaded.ids == first.ids
    assert np.array_equal(loaded.window_vectors, first.window_vectors)
    assert DocumentIndex.load(folder, "another-generation",
                              services.index_cache.new_keyword_index()) is None

    write(kb, "more.md", "# Pears\n\nPears ripen from the inside out, so pick them early.\n")
    fresh_engine.ingest(kb)
    second = services.index()
    assert second.fingerprint != first.fingerprint
    assert any(c.startswith("kb/more.md") for c in second.ids)

    # a damaged copy on disk is rebuilt from the store, not trusted
    (folder / "arrays.npz").write_bytes(b"not an npz file")
    services.index_cache._index = None
    again = services.index()
    assert again.ids == second.ids


def test_a_second_process_sees_the_new_generation(fresh_engine, tmp_path):
    """Another process (here: another Services) writing to the store makes this one's index
    stale: the next query rebuilds it."""
    from ragstream.engine import Engine

    kb = tmp_path / "kb"
    write(kb, "fruit.md", DOC)
    fresh_engine.ingest(kb)
    before = fresh_engine.services.index()
    other = Engine(fresh_engine.cfg)
    other.services.embedder = fresh_engine.services.embedder
    write(kb, "fruit.md", DOC.replace("cool cellar", "cold cellar"))
    other.ingest(kb)
    after = fresh_engine.services.index()
    assert after.fingerprint != before.fingerprint
    assert any("cold cellar" in c.text for c in after.chunks)


def test_a_half_written_document_is_rewritten(fresh_engine, tmp_path):
    kb = tmp_path / "kb"
    write(kb, "fruit.md", DOC)
    fresh_engine.ingest(kb)
    store = fresh_engine.services.store
    # lose one window, as a write killed half-way would
    ids = store.collection.get(where={"doc_id": "kb/fruit.md"}, include=[])["ids"]
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
    code = ("import sys; from ragstream.engine import Engine; e = Engine(); "
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

    from ragstream.engine import Engine
    from tests.conftest import make_config

    killed = Engine(make_config(tmp_path / "killed"))
    report = killed.ingest(kb)
    assert report.failed == 0 and report.processed + report.skipped == 24
    clean = Engine(make_config(tmp_path / "clean"))
    clean.services.embedder = killed.services.embedder
    clean.ingest(kb)
    a, b = killed.services.index(), clean.services.index()
    assert a.ids == b.ids
    assert [c.text for c in a.chunks] == [c.text for c in b.chunks]
    # the same vectors up to batch effects (int8 quantises activations per batch, and the
    # killed run wrote smaller batches)
    assert a.window_vectors.shape == b.window_vectors.shape
    assert float(np.einsum("ij,ij->i", a.window_vectors, b.window_vectors).min()) > 0.98
    assert killed.services.store.count_windows() == clean.services.store.count_windows()


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

    from ragstream.super_prompt import Chunk

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
