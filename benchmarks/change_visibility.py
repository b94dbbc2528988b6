"""Is one process's change seen by another process's next Retrieval?

A writer process writes probe documents (each with a word of its own) into a knowledge base's
store, holding the ingestion lock as an ingest does; this process polls with the Retrieval
stage until the probe is among its candidates, and says after how many queries and how long.

    .venv/bin/python -m benchmarks.change_visibility STORE_INDEX_DIR [ROUNDS]

STORE_INDEX_DIR: a copy of a store (e.g. of the ``index`` folder of ``bench --scale``'s
cached 10k store): the probes are written into it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

from ragstream.common.config import load_config
from ragstream.measure import scale
from ragstream.measure.harness import SCIFACT_DIR
from ragstream.stages import retrieval
from ragstream.workbench.engine import Engine


def write_probes(idx: Path) -> None:
    """The writer: one probe document per line of stdin (``doc_id<TAB>text``), encoded and
    written under the ingestion lock; prints ``ok`` after each."""
    from ragstream.backends.doc_index import encode_chunks
    from ragstream.backends.lock import IngestLock
    from ragstream.knowledge.ingest.chunker import parse_document

    cfg = load_config(env={"RAGSTREAM_INDEX_DIR": str(idx), "RAGSTREAM_UPLOADS_DIR": str(idx / "uploads")})
    engine = Engine(cfg)
    for line in sys.stdin:
        doc_id, text = line.rstrip("\n").split("\t")
        parsed = parse_document(text, doc_id, cfg.settings.chunking, "2026-01-01")
        records = encode_chunks(parsed.chunks, engine.services.embedder)
        with IngestLock(idx, 30):
            engine.services.store.replace_documents([(doc_id, records, f"h-{doc_id}")],
                                                    "2026-01-01T00:00:00+00:00", "probe")
        print("ok", flush=True)


def main(idx: Path, rounds: int) -> None:
    """Poll ``rounds`` times, each after one probe written by the writer process."""
    env = {"RAGSTREAM_INDEX_DIR": str(idx), "RAGSTREAM_UPLOADS_DIR": str(idx / "uploads")}
    cfg = load_config(env=env)
    engine = Engine(cfg)
    prompts = scale._claims(40)
    with open(SCIFACT_DIR / "corpus.jsonl", encoding="utf-8") as f:
        abstracts = [json.loads(line)["text"] for line, _ in zip(f, range(rounds))]
    writer = subprocess.Popen([sys.executable, "-m", "benchmarks.change_visibility", str(idx), "write"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              env={**os.environ, **env})
    assert writer.stdin is not None and writer.stdout is not None
    for r in range(rounds):
        nonce = f"scaleprobe{uuid.uuid4().hex[:12]}"
        doc_id = f"probe/{nonce}-a.md"
        sp = engine.run(f"{nonce}: {prompts[r % len(prompts)]}", until="A2_PromptShaper")
        retrieval.run(sp.model_copy(deep=True), cfg, engine.services)  # this process's view is open
        writer.stdin.write(f"{doc_id}\tThe {nonce} finding. {abstracts[r]}\n")
        writer.stdin.flush()
        writer.stdout.readline()
        started, found, n = time.monotonic(), False, 0
        while time.monotonic() - started < 10:
            out = retrieval.run(sp.model_copy(deep=True), cfg, engine.services)
            n += 1
            if any(c.doc_id == doc_id for c in out.base_context_chunks):
                found = True
                break
        print(f"round {r}: seen={found} after {n} queries, {time.monotonic() - started:.2f} s",
              flush=True)
    writer.stdin.close()
    writer.wait(60)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[2] == "write":
        write_probes(Path(sys.argv[1]))
    else:
        main(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 8)
