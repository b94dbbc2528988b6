"""Reading an embedded Chroma store through its Rust core (``backends.chroma_reader``): the
same answers as chromadb's client, and the client's view once this process writes (real
Chroma, real model)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from ragstream.backends import chroma_reader
from ragstream.backends.chroma_reader import ChromaReader
from ragstream.state.super_prompt import View
from ragstream.workbench.engine import Engine
from tests.conftest import make_config

ROOT = Path(__file__).resolve().parents[2]

QUERIES = ["How are documents chunked?", "How does the ReRanker choose its backend?",
           "Which port does the Chroma server listen on?"]


def test_the_reader_answers_as_chromas_client(kb_engine):
    """The nearest windows, their distances and metadata, exactly as ``Collection.query``
    gives them, with and without the metadata, for one vector and several."""
    store = kb_engine.services.store.chroma
    vectors = np.asarray(kb_engine.services.embedder.embed(QUERIES), dtype=np.float32)
    reader = ChromaReader.open(store.location)
    assert reader is not None
    cid = reader.collection_id(store.settings.collection)
    assert cid == str(store.collection.id)
    assert reader.collection_id("no-such-collection") is None
    for rows in (vectors[:1], vectors):
        for include in (["distances"], ["metadatas", "distances"]):
            got = reader.query(cid, rows, 9, include)
            want = store.collection.query(query_embeddings=rows, n_results=9, include=include)
            assert got["ids"] == want["ids"] and got["distances"] == want["distances"]
            assert got["metadatas"] == want["metadatas"]
            assert (got["metadatas"] is None) == ("metadatas" not in include)


def test_no_reader_on_a_folder_without_a_store(tmp_path):
    assert ChromaReader.open(str(tmp_path / "chroma")) is None  # the client makes the store


def test_a_store_read_through_the_reader_then_written_here_reads_the_write(tmp_path, embedder):
    """A store another process wrote is read through the reader (chromadb's client is not
    opened); once this process writes (through a client, from another engine object), the
    first engine reads through the client too and finds the new document first."""
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "fruit.md").write_text("# Fruit\n\nRipe bananas are yellow and grow in bunches called "
                                 "hands.\n", encoding="utf-8")
    env = {**os.environ, "RAGSTREAM_INDEX_DIR": str(tmp_path / "index"), "PYTHONPATH": str(ROOT)}
    code = ("import sys; from ragstream.workbench.engine import Engine; "
            "r = Engine().ingest(sys.argv[1], prune=True); assert r.failed == 0, r.errors")
    subprocess.run([sys.executable, "-c", code, str(kb)], env=env, cwd=ROOT, check=True,
                   timeout=300)

    first = Engine(make_config(tmp_path / "index"))
    first.services.embedder = embedder
    sp = first.run("What colour are ripe bananas?", until="Retrieval")
    assert sp.kept_ids(View.RETRIEVAL)[0].startswith("kb/fruit.md")
    chroma = first.services.store.chroma
    assert chroma._client is None and chroma_reader.reader_for(chroma.location) is not None

    (kb / "stones.md").write_text("# Stones\n\nGranite is a hard igneous rock used for kitchen "
                                  "counters.\n", encoding="utf-8")
    other = Engine(make_config(tmp_path / "index"))
    other.services.embedder = embedder
    assert other.ingest(kb, prune=True).processed == 1
    assert chroma_reader.reader_for(chroma.location) is None  # reads go through the client now
    ask = embedder.embed(["Which rock is used for kitchen counters?"])
    near = first.services.index().dense(ask, 3)[0]
    assert near[0][0].startswith("kb/stones.md")
    assert chroma._client is not None  # the first engine's store opened its client to read
    first.services.store.close()
    other.services.store.close()
