"""``python -m ragstream bench --scale``: retrieval and change costs at 10k, 100k and 1M chunks,
on the real store (``LocalEngine``: Chroma embedded + tantivy), measured on this machine.

    from ragstream.measure.scale import run_scale, format_scale_report, parse_sizes
    result = run_scale(parse_sizes("10k,100k"))      # a JSON-ready dict
    print(format_scale_report(result))                # each figure next to its target

**The knowledge base** of N chunks is written through the store the ingestion writes:
``services.open_store`` on a config whose ``index_dir`` is the benchmark's cache folder, then
``LocalEngine.replace_documents`` in batches of ``DOCS_PER_WRITE`` documents of
``CHUNKS_PER_DOC`` chunks. The chunk texts are SciFact abstracts replicated (unique ids: 5,183
abstracts, so 100k chunks repeat each ~19 times); the vectors are *synthetic* (encoding 100k
chunks would take hours here): clustered unit vectors of the model's dimension, 1 or 2 windows
per chunk (``TWO_WINDOWS`` of them two, as SciFact ingests into 1.84), and one vector per
evidence sentence (``text.evidence_units``, the first ``SENTENCES_MAX``), stored as ingestion
stores them. It is built once and kept in ``<cache>/<N>-v<FORMAT>/`` (``cache_root``:
``~/.cache/ragstream/bench-scale`` or ``RAGSTREAM_BENCH_SCALE_CACHE``), reused by later runs;
the build time, chunks/s and size on disk are recorded in its ``manifest.json``. A build
that was stopped (Ctrl-C or SIGTERM: either takes effect after the write in progress, so that
the store stays readable) resumes where it stopped on the next run (``progress.json``).

**Per size**, three separate processes (``sys.executable``, this checkout), as the app runs:

1. *The serving process* (``_serve``) builds the services (the real embedder), runs A0 and A2
   once per prompt (SciFact claims), then times the Retrieval stage alone
   (``stages.retrieval.run``) per prompt, the query cache emptied before each call: the
   figures *include* encoding the query pieces; the encoding alone is timed beside it
   (``embedder.embed`` of the same pieces, cache emptied) and reported. Its resident memory
   (``VmRSS``) after warm-up and after the timed queries, and its peak (``VmHWM``).
2. *A writer process* (``_write``: the store and the embedder, as an ingestion holds them)
   writes one document (one chunk, encoded for real with ``encode_chunks``, holding a unique
   word and the claim the poll asks) with ``replace_documents``, holding the folder's
   ``IngestLock`` as an ingestion does, while the serving process polls with that word and
   claim: **update-to-queryable** is the time from the write's return (wall clock, shared
   by the processes) to the end of the first query whose Retrieval view holds the new chunk.
   Then the writer writes another document while the serving process is idle, and the serving
   process runs one claim: **first query after another process's change**, against the same
   claim's warm median of step 1 (its baseline in the same run). ``rounds`` times each; the
   documents are removed again at the end, so the cached knowledge base stays as built.
3. *An ingesting process* (``_ingest``): **ingestion throughput**: ``encode_chunks`` (the real
   embedder: windows and evidence sentences) of SciFact abstracts as chunks, then the
   ``replace_documents`` of those records into the store at size N, chunks/s of each and of
   both; **one file against nothing new**: ``ingest_path`` (what ``ragstream ingest`` calls) on
   a folder of a few Markdown files beside the knowledge base, with nothing new (three times)
   and with one file added, in this process; then the same as whole ``python -m ragstream
   ingest`` processes (``_cli_ingest``: process start, model and store opened, as a person
   runs it and as issue 33 measured it, 8.7 s against 4.4 s); the target is judged on those.
   An ingest lists only its folder's documents; the time to list the whole store's
   (``documents()``) is reported beside. The peak memory of each ingest (``VmHWM`` reset
   before it through ``/proc/self/clear_refs``; a process's own ``ru_maxrss``) is compared,
   as is the serving process's before and after the changes.

Targets (issue 33): Retrieval p95 ≤ 50 ms at 100k; flat at every size: write to first seeing
query ≤ 1 s; one-file ingest ≤ 1.5× a nothing-new ingest; first query after a change ≤ 2× warm;
no process's peak memory grows by more than 10 % with a change.

It stays whole: it is one benchmark, and the serving and writing processes it starts run its
own functions (``_child_main``) on the store it built, so the parent's and the children's
halves of each measurement sit side by side; what it shares with the other commands is in
``harness``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import math
import os
import queue
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ragstream.common.config import PROJECT_ROOT
from ragstream.measure.harness import (
    SCIFACT_DIR,
    Abstract,
    CpuMeter,
    bench_config,
    bench_env,
    current_rss_mb,
    fmt,
    load_average,
    load_scifact,
    machine_info,
    peak_rss_mb,
    read_jsonl,
    summary,
)

Progress = Callable[[str, int, int], None]  # (phase, done, total), like bench's

SCHEMA = 1
#: bump when the synthetic knowledge base changes: an older cache is built again
FORMAT = 2  # 2: the keyword index lists documents with their ingest time and root (schema 4)
SIZES = {"2k": 2_000, "10k": 10_000, "100k": 100_000, "1M": 1_000_000}
#: what ``bench --scale`` measures without ``--sizes`` (1M is opt-in: see ``estimate``)
DEFAULT_SIZES = ("10k", "100k")
CHUNKS_PER_DOC = 10
#: documents per ``replace_documents`` call while building (2,000 chunks: Chroma's add dominates)
DOCS_PER_WRITE = 200
CLUSTERS = 512
#: share of chunks with two windows (SciFact ingests into 1.84 windows per abstract)
TWO_WINDOWS = 0.84
#: evidence sentences kept per chunk (a SciFact abstract has ~9; the disk at 1M is the limit)
SENTENCES_MAX = 4
SEED = 20260101
ROOT = "bench-scale"          # the synthetic documents' ingest root
PROBE_ROOT = "bench-scale-probe"
PROBE_PREFIX = "scale-probe/"  # the documents the writer and the ingest process add and remove
TIMEOUT_S = 1800.0             # any one answer of a child process
POLL_TIMEOUT_S = 60.0

#: (limit, at_least) per target key
TARGETS = {
    "retrieval_p95_ms": 50.0,           # at 100k chunks, default engine
    "seen_ms": 1000.0,                  # store write to the first query that sees it
    "one_file_ratio": 1.5,              # one-file ingest / nothing-new ingest
    "first_after_change_ratio": 2.0,    # first query after another process's change / warm
    "peak_growth": 1.10,                # a process's peak memory with a change / without
}


# --------------------------------------------------------------------------- sizes and cache


def parse_sizes(text: str) -> dict[str, int]:
    """``"10k,100k,1M"`` → ``{"10k": 10000, …}``; a plain number (``"2000"``) is accepted and
    labelled like the others (``"2k"``)."""
    out: dict[str, int] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        key = next((k for k in SIZES if k.lower() == part.lower()), None)
        if key is not None:
            out[key] = SIZES[key]
            continue
        mult = {"k": 1_000, "m": 1_000_000}.get(part[-1].lower(), 1)
        try:
            n = int(float(part[:-1] if mult > 1 else part) * mult)
        except ValueError:
            raise ValueError(f"not a size: {part!r} (use e.g. 10k, 100k, 1M or 2000)") from None
        if n < CHUNKS_PER_DOC:
            raise ValueError(f"a size must be at least {CHUNKS_PER_DOC} chunks: {part!r}")
        out[size_label(n)] = n
    if not out:
        raise ValueError("no size given")
    return out


def size_label(n: int) -> str:
    """``1000000`` → ``"1M"``, ``10000`` → ``"10k"``, others as they are."""
    if n % 1_000_000 == 0:
        return f"{n // 1_000_000}M"
    return f"{n // 1000}k" if n % 1000 == 0 else str(n)


def cache_root() -> Path:
    """Where built knowledge bases are kept: ``RAGSTREAM_BENCH_SCALE_CACHE`` or
    ``~/.cache/ragstream/bench-scale`` (outside the checkout)."""
    env = os.environ.get("RAGSTREAM_BENCH_SCALE_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "ragstream" / "bench-scale"


def size_folder(root: Path, n: int) -> Path:
    """The cache folder of an ``n``-chunk knowledge base: ``<root>/<n>-v<FORMAT>``."""
    return Path(root) / f"{n}-v{FORMAT}"


def disk_mb(folder: Path) -> float:
    """Size of the files under ``folder`` in MB."""
    return round(sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file()) / 2**20, 1)


# --------------------------------------------------------------------------- the synthetic KB


class SyntheticCorpus:
    """The documents of the synthetic knowledge base: document ``d`` holds chunks
    ``d*CHUNKS_PER_DOC …``, chunk ``i``'s text is the ``i``-th abstract (cycling), its vectors
    seeded by ``d``: the same knowledge base on every machine."""

    def __init__(self, docs: list[Abstract], dim: int, seed: int = SEED):
        self.docs = [d for d in docs if d.text.strip()]
        if not self.docs:
            raise ValueError("no abstract with text to build chunks from")
        self.dim = dim
        self.seed = seed
        rng = np.random.default_rng(seed)
        centers = rng.standard_normal((CLUSTERS, dim)).astype(np.float32)
        self.centers = centers / np.linalg.norm(centers, axis=1, keepdims=True)
        self._units: dict[int, list[tuple[int, int]]] = {}

    def _spans(self, j: int) -> list[tuple[int, int]]:
        from ragstream.backends.doc_index import MIN_EVIDENCE_WORDS
        from ragstream.common.text import evidence_units

        got = self._units.get(j)
        if got is None:
            got = self._units[j] = [(a, b) for a, b, _t in
                                    evidence_units(self.docs[j].text, MIN_EVIDENCE_WORDS)][:SENTENCES_MAX]
        return got

    def _unit(self, rng: np.random.Generator, base: np.ndarray, noise: float) -> np.ndarray:
        v = base + noise * rng.standard_normal(base.shape).astype(np.float32) / math.sqrt(self.dim)
        return (v / np.linalg.norm(v, axis=-1, keepdims=True)).astype(np.float32)

    def document(self, d: int, n_chunks: int) -> tuple[str, list, str]:
        """Document ``d`` of an ``n_chunks`` knowledge base as ``(doc_id, records, doc_hash)``,
        ready for ``replace_documents``; its chunk count and window / sentence counts are
        the records'."""
        from ragstream.backends.doc_index import WindowRecord
        from ragstream.state.super_prompt import Chunk

        rng = np.random.default_rng((self.seed, d))
        doc_id = f"{ROOT}/{d:07d}.md"
        records: list[WindowRecord] = []
        first = d * CHUNKS_PER_DOC
        for k, i in enumerate(range(first, min(first + CHUNKS_PER_DOC, n_chunks))):
            j = i % len(self.docs)
            a = self.docs[j]
            text = a.text
            chunk = Chunk.model_construct(
                id=f"{doc_id}#{k}", doc_id=doc_id, text=text, source=doc_id, source_name="",
                title=a.title, heading_path=(a.title,) if a.title else (), section=a.title,
                doc_type="doc", last_update_date="2026-01-01", chunk_index=k, start_line=0,
                end_line=0, word_count=len(text.split()), token_count=0, has_code=False,
                has_equations=False, content_hash=f"synthetic-{j}", page=0, page_end=0)
            cut = text.find(" ", len(text) // 2) if rng.random() < TWO_WINDOWS else -1
            bounds = [(0, cut), (cut, len(text))] if cut > 0 else [(0, len(text))]
            center = self.centers[rng.integers(CLUSTERS)]
            windows = self._unit(rng, np.tile(center, (len(bounds), 1)), 0.8)
            spans = self._spans(j)
            for w, (lo, hi) in enumerate(bounds):
                last = w == len(bounds) - 1
                mine = tuple(s for s in spans if lo <= s[0] and (s[0] < hi or last))
                sent = (self._unit(rng, np.tile(windows[w], (len(mine), 1)), 0.5) if mine else None)
                records.append(WindowRecord(chunk=chunk, window=w, n_windows=len(bounds), start=lo,
                                            end=hi, vector=windows[w], sentence_spans=mine,
                                            sentence_vectors=sent))
        return doc_id, records, f"synthetic-v{FORMAT}-{d}"


def read_manifest(folder: Path) -> dict[str, Any] | None:
    """The manifest of a complete cached knowledge base in ``folder``, or None."""
    try:
        m = json.loads((Path(folder) / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return m if m.get("format") == FORMAT and m.get("complete") else None


def read_progress(folder: Path, n: int) -> dict[str, Any] | None:
    """The record of an interrupted build of ``n`` chunks in ``folder`` (seconds spent, runs),
    or None when there is none to resume."""
    try:
        got = json.loads((Path(folder) / "progress.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    ok = got.get("format") == FORMAT and got.get("chunks") == n and (Path(folder) / "index").is_dir()
    return got if ok else None


@contextlib.contextmanager
def _stop_between_writes(say: Callable[[str], None]):
    """While the store is built, SIGINT (Ctrl-C) and SIGTERM take effect between two writes:
    a process killed in the middle of Chroma's write can leave its folder unreadable (seen at
    1M: ``Failed to apply logs to the hnsw segment writer`` on every call), and the hours of
    build before it are lost. Yields the signals received; the caller stops at the next
    boundary. A second Ctrl-C stops at once, as the person insists. Only in the main thread
    (elsewhere signals cannot be caught, and nothing changes)."""
    got: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield got
        return

    def note(signum: int, _frame: Any) -> None:
        if got and signum == signal.SIGINT:
            raise KeyboardInterrupt
        if not got:
            say("stopping after the write in progress, so that the store stays readable "
                "(Ctrl-C again stops at once and can leave it unreadable)")
        got.append(signum)

    old = {s: signal.signal(s, note) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield got
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def _say_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def build_store(n: int, folder: Path, docs: list[Abstract], dim: int,
                progress: Progress | None = None, label: str = "") -> dict[str, Any]:
    """The ``n``-chunk knowledge base in ``folder``: reused when a complete one of this
    ``FORMAT`` is there (``reused: True``), else built through the real store (``open_store``,
    ``LocalEngine.replace_documents``) and its manifest written last. A build that was
    stopped is resumed (``progress.json``: the documents the store already holds are not
    written again; the seconds of every run are added up). Returns the manifest: chunks,
    documents, windows, sentences, build seconds, chunks/s, MB on disk."""
    from ragstream.backends.services import open_store

    folder = Path(folder)
    found = read_manifest(folder)
    if found is not None and found.get("chunks") == n:
        return {**found, "reused": True, "folder": str(folder)}
    state = read_progress(folder, n)
    if state is None:
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        state = {"format": FORMAT, "chunks": n, "build_s": 0.0, "store_write_s": 0.0, "runs": 0}
    state["runs"] += 1
    cfg = bench_config(folder / "index")
    store = open_store(cfg)
    corpus = SyntheticCorpus(docs, dim)
    n_docs = -(-n // CHUNKS_PER_DOC)
    now = dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat()
    phase = f"{label or size_label(n)}: build"
    started = time.perf_counter()
    spent, write_s = state["build_s"], state["store_write_s"]

    def save(done: int) -> None:
        state.update(build_s=round(spent + time.perf_counter() - started, 1),
                     store_write_s=round(write_s, 1), documents_done=done)
        (folder / "progress.json").write_text(json.dumps(state), encoding="utf-8")

    try:
        held: dict[str, str] = {}
        if state["runs"] > 1:
            store.version()  # a write cut short between the engines is repaired first
            held = store.keyword_engine.documents()  # a document written half has no hash
        todo = [d for d in range(n_docs)
                if held.get(f"{ROOT}/{d:07d}.md") != f"synthetic-v{FORMAT}-{d}"]
        with _stop_between_writes(_say_stderr) as signals:
            for k in range(0, len(todo), DOCS_PER_WRITE):
                batch = [corpus.document(d, n) for d in todo[k:k + DOCS_PER_WRITE]]
                t0 = time.perf_counter()
                store.replace_documents(batch, now, ROOT)
                write_s += time.perf_counter() - t0
                done = n_docs - len(todo) + min(k + DOCS_PER_WRITE, len(todo))
                save(done)
                if progress:
                    progress(phase, done, n_docs)
                if signals:
                    _say_stderr(f"{phase} stopped after {done:,} of {n_docs:,} documents, kept in "
                                f"{folder}: the same command resumes it")
                    if signals[0] == signal.SIGINT:
                        raise KeyboardInterrupt
                    raise SystemExit(128 + signals[0])
        save(n_docs)
        chunks, windows = store.count(), store.count_windows()
    finally:
        store.close()
    if chunks != n:
        raise RuntimeError(f"the store holds {chunks} chunks after writing {n}")
    # every evidence sentence of a chunk's abstract is in one of its windows
    sentences = sum(len(corpus._spans(i % len(corpus.docs))) for i in range(n))
    build_s = state["build_s"]
    manifest = {
        "format": FORMAT, "complete": True, "chunks": n, "documents": n_docs,
        "windows": windows, "sentences": sentences, "dim": dim,
        "build_s": build_s, "store_write_s": state["store_write_s"], "build_runs": state["runs"],
        "build_chunks_per_s": round(n / build_s, 1),
        "disk_mb": disk_mb(folder),
        "built_at": dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat(),
        "machine": {k: v for k, v in machine_info().items() if k in ("cpus", "cpu_model", "memory_gb")},
        "load_avg_after": load_average(),
        "data": (f"texts: {min(len(corpus.docs), n):,} SciFact abstracts"
                 + (f" replicated to {n:,} chunks (unique ids)" if n > len(corpus.docs) else "")
                 + f"; vectors: synthetic (clustered unit vectors, {CLUSTERS} clusters, "
                   f"{windows / n:.2f} windows and {sentences / n:.2f} evidence sentences per "
                   f"chunk; not from the encoder)"),
    }
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    return {**manifest, "reused": False, "folder": str(folder)}


# --------------------------------------------------------------------------- child processes

TAG = "@@scale "


def _say(kind: str, **data: Any) -> None:
    """A message to the parent: one line on stdout, ``TAG`` + JSON."""
    sys.stdout.write(TAG + json.dumps({"kind": kind, **data}) + "\n")
    sys.stdout.flush()


def _commands():
    """The parent's commands, one JSON object per line of stdin."""
    for line in sys.stdin:
        if line.strip():
            yield json.loads(line)


def _reset_peak() -> bool:
    """Reset this process's ``VmHWM`` to its current RSS (Linux ``clear_refs`` 5)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _services(folder: Path):
    from ragstream.backends.services import build_services

    cfg = bench_config(Path(folder) / "index")
    services = build_services(cfg)
    services.embedder.embed(["warm up"])
    return cfg, services


def _probe_chunk(doc_id: str, text: str):
    from ragstream.state.super_prompt import Chunk

    return Chunk(id=f"{doc_id}#0", doc_id=doc_id, text=text, source=doc_id, title="Probe",
                 heading_path=("Probe",), section="Probe", word_count=len(text.split()))


def _serve(folder: Path, params: dict[str, Any]) -> None:
    """The serving process (see the module docstring, 1)."""
    from ragstream.stages import retrieval
    from ragstream.workbench.engine import Engine, settle_memory

    t0 = time.perf_counter()
    cfg, services = _services(folder)
    engine = Engine(cfg, services)
    embedder = services.embedder
    model_s = time.perf_counter() - t0
    rss_model = current_rss_mb()
    prepared = [engine.run(t, until="A2_PromptShaper") for t in params["prompts"]]

    def timed(sp, clear: bool = True):
        work = sp.model_copy(deep=True)
        if clear:
            embedder.clear_cache()
        start = time.perf_counter()
        out = retrieval.run(work, cfg, services)
        return (time.perf_counter() - start) * 1000.0, out

    first_ms, _ = timed(prepared[0])  # opens Chroma and tantivy (the HNSW is loaded)
    for sp in prepared[:params["warm"]]:
        timed(sp)
    settle_memory()  # as the service's warm-up does (warm_pipeline)
    rss_warm = current_rss_mb()
    times: dict[int, list[float]] = {i: [] for i in range(len(prepared))}
    encode: list[float] = []
    pieces: list[int] = []
    for _ in range(params["repeats"]):
        for i, sp in enumerate(prepared):
            ms, out = timed(sp)
            times[i].append(ms)
            got = out.extras.retrieval.pieces
            pieces.append(len(got))
            embedder.clear_cache()
            start = time.perf_counter()
            embedder.embed(got)
            encode.append((time.perf_counter() - start) * 1000.0)
    every = [t for ts in times.values() for t in ts]
    engine_part = [t - e for t, e in zip([times[i][r] for r in range(params["repeats"])
                                          for i in range(len(prepared))], encode)]
    corpus = services.index()
    _say("ready", model_load_s=round(model_s, 2), first_query_ms=round(first_ms, 1),
         chunks=corpus.n_chunks, windows=services.store.count_windows(),
         retrieval=summary(every), encode=summary(encode), without_encode=summary(engine_part),
         pieces_mean=round(statistics.mean(pieces), 2), pieces_max=max(pieces),
         warm_ms={str(i): round(statistics.median(ts), 2) for i, ts in times.items()},
         rss_model_mb=round(rss_model, 1), rss_warm_mb=round(rss_warm, 1),
         rss_after_mb=round(current_rss_mb(), 1), peak_rss_mb=round(peak_rss_mb(), 1),
         queries=len(every))

    for cmd in _commands():
        what = cmd["do"]
        if what == "poll":
            sp = engine.run(cmd["text"], until="A2_PromptShaper")
            _say("polling")
            deadline = time.monotonic() + cmd.get("timeout_s", POLL_TIMEOUT_S)
            n, last_miss_end, seen = 0, None, None
            while time.monotonic() < deadline:
                start_ns = time.time_ns()
                _ms, out = timed(sp, clear=False)
                end_ns = time.time_ns()
                n += 1
                if any(c.doc_id == cmd["doc_id"] for c in out.base_context_chunks):
                    seen = {"start_ns": start_ns, "end_ns": end_ns,
                            "ms": round((end_ns - start_ns) / 1e6, 2)}
                    break
                last_miss_end = end_ns
            _say("polled", found=seen is not None, seen=seen, queries=n, last_miss_end_ns=last_miss_end)
        elif what == "first":
            i = int(cmd["i"])
            ms, _ = timed(prepared[i])
            again = [timed(prepared[i])[0] for _ in range(2)]
            _say("first", ms=round(ms, 2), warm_ms=round(statistics.median(times[i]), 2),
                 again_ms=[round(x, 2) for x in again])
        elif what == "mem":
            _say("mem", rss_mb=round(current_rss_mb(), 1), peak_rss_mb=round(peak_rss_mb(), 1))
        elif what == "quit":
            break


def _write(folder: Path, params: dict[str, Any]) -> None:
    """The writer process (see the module docstring, 2): writes and removes probe documents
    on command, each with ``replace_documents`` holding the folder's ``IngestLock``, as an
    ingestion writes (a reader that finds the two engines out of step meanwhile then knows a
    write is under way, instead of repairing it)."""
    from ragstream.backends.doc_index import encode_chunks
    from ragstream.backends.lock import IngestLock

    cfg, services = _services(folder)
    store, embedder = services.store, services.embedder
    t0 = time.perf_counter()
    store.version()
    store.count_windows()
    open_s = time.perf_counter() - t0
    now = dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat()
    wait_s = cfg.settings.chunking.ingest_lock_wait_s

    def replace(documents: list) -> None:
        with IngestLock(cfg.index_dir, wait_s):
            store.replace_documents(documents, now, PROBE_ROOT)

    def write(doc_id: str, text: str) -> dict[str, Any]:
        records = encode_chunks([_probe_chunk(doc_id, text)], embedder)
        start_ns, p0 = time.time_ns(), time.perf_counter()
        replace([(doc_id, records, uuid.uuid4().hex)])
        return {"start_ns": start_ns, "end_ns": time.time_ns(),
                "write_ms": round((time.perf_counter() - p0) * 1000.0, 2)}

    # the first write of a process opens what a write needs (Chroma's HNSW, the encoder's
    # buffers for a document of the probes' size): timed apart
    warm_id = f"{PROBE_PREFIX}writer-warm-up.md"
    first = write(warm_id, "A warm-up document of the scale benchmark's writer. "
                  + params.get("warm_text", ""))
    p0 = time.perf_counter()
    replace([(warm_id, [], "")])
    first["delete_ms"] = round((time.perf_counter() - p0) * 1000.0, 2)
    _say("ready", open_s=round(open_s, 2), first_write=first, rss_mb=round(current_rss_mb(), 1),
         peak_rss_mb=round(peak_rss_mb(), 1))
    for cmd in _commands():
        what = cmd["do"]
        if what == "write":
            _say("written", **write(cmd["doc_id"], cmd["text"]))
        elif what == "delete":
            p0 = time.perf_counter()
            replace([(d, [], "") for d in cmd["doc_ids"]])
            _say("deleted", ms=round((time.perf_counter() - p0) * 1000.0, 2))
        elif what == "mem":
            _say("mem", rss_mb=round(current_rss_mb(), 1), peak_rss_mb=round(peak_rss_mb(), 1))
        elif what == "quit":
            break


def _ingest(folder: Path, params: dict[str, Any]) -> None:
    """The ingesting process (see the module docstring, 3)."""
    from ragstream.backends.doc_index import encode_chunks
    from ragstream.backends.lock import IngestLock
    from ragstream.knowledge.ingest.ingestor import ingest_path, stored_documents
    from ragstream.state.super_prompt import Chunk

    cfg, services = _services(folder)
    store, embedder = services.store, services.embedder
    store.version()
    now = dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat()
    abstracts = params["abstracts"]

    # ingestion throughput: encode the chunks, then write them (as one ingest batch)
    chunks = []
    for k, (title, text) in enumerate(abstracts[:params["throughput_chunks"]]):
        doc_id = f"{PROBE_PREFIX}throughput-{k // CHUNKS_PER_DOC:03d}.md"
        chunks.append(Chunk(id=f"{doc_id}#{k % CHUNKS_PER_DOC}", doc_id=doc_id, text=text,
                            source=doc_id, title=title, heading_path=(title,), section=title,
                            chunk_index=k % CHUNKS_PER_DOC, word_count=len(text.split())))
    t0 = time.perf_counter()
    records = encode_chunks(chunks, embedder)
    encode_s = time.perf_counter() - t0
    by_doc: dict[str, list] = {}
    for rec in records:
        by_doc.setdefault(rec.chunk.doc_id, []).append(rec)
    with IngestLock(cfg.index_dir, cfg.settings.chunking.ingest_lock_wait_s):
        t0 = time.perf_counter()
        store.replace_documents([(d, r, uuid.uuid4().hex) for d, r in by_doc.items()], now,
                                PROBE_ROOT)
        write_s = time.perf_counter() - t0
        store.replace_documents([(d, [], "") for d in by_doc], now, PROBE_ROOT)
    throughput = {
        "chunks": len(chunks), "windows": len(records),
        "sentences": sum(len(r.sentence_spans) for r in records),
        "words": sum(c.word_count for c in chunks),
        "encode_s": round(encode_s, 3), "write_s": round(write_s, 3),
        "encode_chunks_per_s": round(len(chunks) / encode_s, 1),
        "write_chunks_per_s": round(len(chunks) / write_s, 1),
        "ingest_chunks_per_s": round(len(chunks) / (encode_s + write_s), 1),
        "ingest_vs_encode": round(encode_s / (encode_s + write_s), 3),
    }

    # listing the store's documents: every ingest does it first
    t0 = time.perf_counter()
    listed = len(stored_documents(store))
    list_s = time.perf_counter() - t0

    # one file added against nothing new, on a folder of a few Markdown files
    extra = Path(params["extra_dir"])
    new = extra / "new.md"
    new.unlink(missing_ok=True)
    setup = ingest_path(extra, cfg, services)  # brings the store in step with the folder

    def ingest() -> dict[str, Any]:
        reset = _reset_peak()
        t0 = time.perf_counter()
        rep = ingest_path(extra, cfg, services)
        s = time.perf_counter() - t0
        return {"s": round(s, 3), "processed": rep.processed, "skipped": rep.skipped,
                "deleted": rep.deleted, "failed": rep.failed,
                "peak_rss_mb": round(peak_rss_mb(), 1) if reset else None}

    def add_file() -> None:
        new.write_text(f"# A new file\n\nWritten by the scale benchmark at {time.time_ns()}: "
                       f"{abstracts[0][1]}\n", encoding="utf-8")

    nothing = [ingest() for _ in range(3)]
    add_file()
    one = ingest()
    new.unlink()
    removed = ingest()

    # the same as whole `ragstream ingest` processes, as a person runs it (and as issue 33
    # measured it: process start, the model and the store opened, included)
    cli_nothing = [_cli_ingest(folder, extra) for _ in range(3)]
    add_file()
    cli_one = _cli_ingest(folder, extra)
    new.unlink()
    cli_removed = _cli_ingest(folder, extra)
    _say("ingest", throughput=throughput, listed_documents=listed, list_documents_s=round(list_s, 3),
         setup={"processed": setup.processed, "deleted": setup.deleted, "failed": setup.failed},
         nothing_new=nothing, one_file=one, one_removed=removed,
         cli={"nothing_new": cli_nothing, "one_file": cli_one, "one_removed": cli_removed},
         peak_reset=nothing[0]["peak_rss_mb"] is not None,
         rss_mb=round(current_rss_mb(), 1), peak_rss_mb=round(peak_rss_mb(), 1))


#: runs the command after it and writes its peak memory (kB) to stderr's last line. A child
#: of a large process is started sharing its memory (vfork), and Linux keeps that size as the
#: child's ``ru_maxrss`` through ``exec``: a small parent keeps the figure the child's own.
_PEAK_OF = ("import resource, subprocess, sys; rc = subprocess.call(sys.argv[1:]); "
            "sys.stderr.write('\\npeak-kb %d\\n' % resource.getrusage("
            "resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(rc)")


def _cli_ingest(folder: Path, extra: Path) -> dict[str, Any]:
    """One ``python -m ragstream ingest <extra> --json`` process on the benchmark's store: its
    wall time (the ~20 ms of the small process that measures its peak memory included), its
    report's counts and its own peak memory."""
    cmd = [sys.executable, "-c", _PEAK_OF, sys.executable, "-m", "ragstream", "ingest",
           str(extra), "--json"]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=bench_env(Path(folder) / "index"), capture_output=True,
                          cwd=PROJECT_ROOT, check=False)
    s = time.perf_counter() - t0
    err = done.stderr.decode(errors="replace")
    if done.returncode:
        raise RuntimeError(f"`ragstream ingest` exited with {done.returncode}: {err[-2000:]}")
    report = json.loads(done.stdout)
    peak_kb = int(err.rsplit("peak-kb ", 1)[1].split()[0])
    return {"s": round(s, 3), "processed": report["processed"], "skipped": report["skipped"],
            "deleted": report["deleted"], "failed": report["failed"],
            "peak_rss_mb": round(peak_kb / 1024, 1)}


ROLES = {"serve": _serve, "write": _write, "ingest": _ingest}


def _child_main(argv: list[str]) -> None:
    """Entry point of a child process: ``role folder params.json``."""
    role, folder, params_file = argv
    try:
        params = json.loads(Path(params_file).read_text(encoding="utf-8"))
        ROLES[role](Path(folder), params)
    except BaseException as err:  # the parent reads why, then the exit code
        _say("error", message=f"{type(err).__name__}: {err}", trace=traceback.format_exc()[-2000:])
        raise


class _Child:
    """A child process speaking ``TAG`` lines on stdout and taking commands on stdin."""

    def __init__(self, role: str, folder: Path, params: dict[str, Any], work: Path):
        work.mkdir(parents=True, exist_ok=True)
        params_file = work / f"{role}-params.json"
        params_file.write_text(json.dumps(params), encoding="utf-8")
        self.role = role
        self.log = work / f"{role}.log"
        code = "import sys; from ragstream.measure.scale import _child_main; _child_main(sys.argv[1:])"
        self._log = self.log.open("w", encoding="utf-8")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code, role, str(folder), str(params_file)],
            cwd=PROJECT_ROOT, env=bench_env(Path(folder) / "index"), text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log)
        self.messages: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(TAG):
                self.messages.put(json.loads(line[len(TAG):]))
        self.messages.put({"kind": "exit"})

    def send(self, **cmd: Any) -> None:
        """One command."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()

    def expect(self, kind: str, timeout: float = TIMEOUT_S) -> dict[str, Any]:
        """The next message, which must be of ``kind``."""
        try:
            msg = self.messages.get(timeout=timeout)
        except queue.Empty:
            raise RuntimeError(f"the {self.role} process gave no {kind!r} in {timeout:.0f} s "
                               f"(log: {self.log})") from None
        if msg["kind"] != kind:
            tail = self.log.read_text(encoding="utf-8", errors="replace")[-1500:]
            raise RuntimeError(f"the {self.role} process said {msg['kind']!r} instead of "
                               f"{kind!r}: {msg.get('message', '')}\n{msg.get('trace', tail)}")
        return msg

    def close(self) -> None:
        """Ask it to quit; kill it if it does not."""
        if self.proc.poll() is None:
            try:
                self.send(do="quit")
                self.proc.stdin.close()  # type: ignore[union-attr]
            except (OSError, ValueError):
                pass
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


# --------------------------------------------------------------------------- one size


def _claims(n: int, folder: Path = SCIFACT_DIR) -> list[str]:
    """The first ``n`` SciFact claims (``queries.jsonl``, file order)."""
    return [str(q["text"]).strip() for q in read_jsonl(Path(folder) / "queries.jsonl")
            if str(q.get("text", "")).strip()][:n]


def _write_extra(folder: Path, docs: list[Abstract], n: int) -> Path:
    """The few Markdown files ingested beside the synthetic knowledge base (kept with it)."""
    folder.mkdir(parents=True, exist_ok=True)
    for i, d in enumerate(docs[:n]):
        path = folder / f"extra-{i}.md"
        body = f"# {d.title}\n\n{d.text}\n"
        if not path.exists() or path.read_text(encoding="utf-8") != body:
            path.write_text(body, encoding="utf-8")
    return folder


def measure_size(label: str, n: int, folder: Path, docs: list[Abstract], quick: bool,
                 work: Path, progress: Progress | None = None) -> dict[str, Any]:
    """The serving, writer and ingesting processes' figures on the cached ``n``-chunk
    knowledge base in ``folder`` (see the module docstring)."""
    rounds = 2 if quick else 5
    prompts = _claims(10 if quick else 40)
    serve_params = {"prompts": prompts, "warm": 3 if quick else 8, "repeats": 1 if quick else 2}
    phase = f"{label}: measure"
    steps = 3 + 2 * rounds
    done = 0

    def tick() -> None:
        nonlocal done
        done += 1
        if progress:
            progress(phase, done, steps)

    out: dict[str, Any] = {}
    serve = _Child("serve", folder, serve_params, work / label)
    writer = None
    try:
        ready = serve.expect("ready")
        tick()
        writer = _Child("write", folder, {"warm_text": docs[rounds + 1].text}, work / label)
        w_ready = writer.expect("ready")
        tick()
        seen, firsts, writes, probes = [], [], [], []
        for r in range(rounds):
            nonce = f"scaleprobe{uuid.uuid4().hex[:12]}"
            doc_a = f"{PROBE_PREFIX}{nonce}-a.md"
            serve.send(do="poll", doc_id=doc_a, text=f"{nonce}: {prompts[r % len(prompts)]}",
                       timeout_s=POLL_TIMEOUT_S)
            serve.expect("polling")
            time.sleep(0.2)  # the poll is under way when the write lands
            writer.send(do="write", doc_id=doc_a,
                        # the claim itself: the nonce alone can rank below N1 when the
                        # claim's words match many chunks (SciFact's 5th claim at 10k did)
                        text=f"The {nonce} finding: {prompts[r % len(prompts)]} {docs[r].text}")
            w = writer.expect("written")
            p = serve.expect("polled", POLL_TIMEOUT_S + 120)
            writes.append(w["write_ms"])
            seen.append({"found": p["found"], "queries": p["queries"],
                         "seen_ms": (round((p["seen"]["end_ns"] - w["end_ns"]) / 1e6, 1)
                                     if p["found"] else None),
                         "seeing_query_ms": p["seen"]["ms"] if p["found"] else None,
                         "write_ms": w["write_ms"]})
            tick()
            doc_b = f"{PROBE_PREFIX}{nonce}-b.md"
            writer.send(do="write", doc_id=doc_b, text=f"Another change, {nonce}. {docs[r + 1].text}")
            writes.append(writer.expect("written")["write_ms"])
            i = r % len(prompts)
            serve.send(do="first", i=i)
            f = serve.expect("first")
            firsts.append({"prompt": i, "first_ms": f["ms"], "warm_ms": f["warm_ms"],
                           "ratio": round(f["ms"] / f["warm_ms"], 2), "again_ms": f["again_ms"]})
            probes += [doc_a, doc_b]
            tick()
        writer.send(do="delete", doc_ids=probes)
        deleted_ms = writer.expect("deleted")["ms"]
        serve.send(do="mem")
        s_mem = serve.expect("mem")
        writer.send(do="mem")
        w_mem = writer.expect("mem")
    finally:
        serve.close()
        if writer is not None:
            writer.close()

    extra = _write_extra(folder / "extra", docs[-10:], 5)
    ingest = _Child("ingest", folder, {
        "extra_dir": str(extra), "throughput_chunks": 30 if quick else 100,
        "abstracts": [(d.title, d.text) for d in docs[20:20 + (30 if quick else 100)]]}, work / label)
    try:
        ing = ingest.expect("ingest")
    finally:
        ingest.close()
    tick()

    found = [s["seen_ms"] for s in seen if s["found"]]
    ratios = [f["ratio"] for f in firsts]
    out.update(
        chunks=ready["chunks"], windows=ready["windows"],
        retrieval={**ready["retrieval"], "encode": ready["encode"],
                   "without_encode": ready["without_encode"], "pieces_mean": ready["pieces_mean"],
                   "pieces_max": ready["pieces_max"], "queries": len(prompts),
                   "repeats": serve_params["repeats"], "first_query_of_process_ms": ready["first_query_ms"]},
        serving={"model_load_s": ready["model_load_s"], "rss_model_mb": ready["rss_model_mb"],
                 "rss_warm_mb": ready["rss_warm_mb"], "rss_after_queries_mb": ready["rss_after_mb"],
                 "queries": ready["queries"], "peak_before_changes_mb": ready["peak_rss_mb"],
                 "peak_after_changes_mb": s_mem["peak_rss_mb"], "rss_end_mb": s_mem["rss_mb"],
                 "peak_growth": round(s_mem["peak_rss_mb"] / ready["peak_rss_mb"], 3)},
        update_to_queryable={"rounds": seen, "all_found": all(s["found"] for s in seen),
                             "median_ms": round(statistics.median(found), 1) if found else None,
                             "max_ms": max(found) if found else None},
        first_after_change={"rounds": firsts, "median_ratio": round(statistics.median(ratios), 2),
                            "max_ratio": max(ratios)},
        writer={"open_s": w_ready["open_s"], "first_write_ms": w_ready["first_write"]["write_ms"],
                "first_delete_ms": w_ready["first_write"]["delete_ms"],
                "write_ms": summary(writes), "delete_probes_ms": deleted_ms,
                "peak_after_warm_up_mb": w_ready["peak_rss_mb"], "peak_end_mb": w_mem["peak_rss_mb"],
                "peak_growth": round(w_mem["peak_rss_mb"] / w_ready["peak_rss_mb"], 3)},
        ingest={**ing["throughput"], "listed_documents": ing["listed_documents"],
                "list_documents_s": ing["list_documents_s"]},
        one_file={**_one_file_figures(ing["nothing_new"], ing["one_file"], ing["one_removed"]),
                  "cli": _one_file_figures(**ing["cli"])},
    )
    return out


def _one_file_figures(nothing_new: list[dict[str, Any]], one_file: dict[str, Any],
                      one_removed: dict[str, Any]) -> dict[str, Any]:
    """Ingests with nothing new, then one adding a file, then one after it was removed (in
    the ingesting process, or as ``ragstream ingest`` processes): times, the one-file ratio,
    and the peak memory's growth when each ingest's peak was measured."""
    nothing = [x["s"] for x in nothing_new]
    peaks = [x["peak_rss_mb"] for x in nothing_new if x["peak_rss_mb"]]
    base = statistics.median(nothing)
    return {"nothing_new_s": nothing, "nothing_new_median_s": base,
            "one_file_s": one_file["s"], "one_removed_s": one_removed["s"],
            "ratio": round(one_file["s"] / base, 2),
            "one_file_processed": one_file["processed"],
            "one_removed_deleted": one_removed["deleted"],
            "peak_nothing_new_mb": max(peaks) if peaks else None,
            "peak_one_file_mb": one_file["peak_rss_mb"],
            "peak_growth": (round(one_file["peak_rss_mb"] / max(peaks), 3)
                            if peaks and one_file["peak_rss_mb"] else None)}


# --------------------------------------------------------------------------- the run


def estimate(label: str, n: int, built: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """For a size not measured: the build time the largest built size's rate predicts (a lower
    bound: HNSW inserts slow down as the graph grows) and its disk size, pro rata."""
    if not built:
        return {"chunks": n, "note": "no size was built in this run to extrapolate from"}
    base_label = max(built, key=lambda k: built[k]["chunks"])
    base = built[base_label]
    rate = base["build_chunks_per_s"]
    return {"chunks": n, "from": base_label, "build_chunks_per_s": rate,
            "estimated_build_s": round(n / rate),
            "estimated_disk_mb": round(base["disk_mb"] * n / base["chunks"]),
            "note": (f"not measured: opt-in (--sizes {label}); building it would take about "
                     f"{n / rate / 3600:.1f} h at the {base_label} rate of {rate:,.0f} chunks/s "
                     f"(a lower bound) and ~{base['disk_mb'] * n / base['chunks'] / 1024:.0f} GB "
                     f"of disk")}


def _target(name: str, value: Any, key: str, at_least: bool, unit: str, note: str = "") -> dict[str, Any]:
    limit = TARGETS[key]
    ok = None if value is None or (isinstance(value, float) and math.isnan(value)) else (
        value >= limit if at_least else value <= limit)
    return {"name": name, "value": value, "limit": limit, "op": ">=" if at_least else "<=",
            "unit": unit, "pass": ok, "note": note}


def evaluate_targets(r: dict[str, Any]) -> list[dict[str, Any]]:
    """Each measured size's figures against ``TARGETS``."""
    t = []
    for label, e in r["sizes"].items():
        if "error" in e:
            t.append(_target(f"{label}: measured", math.nan, "retrieval_p95_ms", False, "ms",
                             f"failed: {e['error'].splitlines()[0][:200]}"))
            continue
        if "retrieval" not in e:
            continue
        p95 = e["retrieval"]["p95_ms"]
        t.append(_target(f"{label}: Retrieval p95", p95, "retrieval_p95_ms", False, "ms",
                         "the target is set at 100k" if label != "100k" else
                         f"query encoding p95 {fmt(e['retrieval']['encode']['p95_ms'])} ms included"))
        u = e["update_to_queryable"]
        t.append(_target(f"{label}: store write to the first query that sees it (worst of "
                         f"{len(u['rounds'])})", u["max_ms"] if u["all_found"] else math.nan,
                         "seen_ms", False, "ms",
                         "" if u["all_found"] else "a change was never seen within the poll time"))
        o = e["one_file"]
        c = o["cli"]  # as a person runs it, and as the issue measured it: a whole process each
        t.append(_target(f"{label}: `ragstream ingest` adding one file / with nothing new",
                         c["ratio"], "one_file_ratio", False, "×",
                         f"{fmt(c['one_file_s'], 2)} s against {fmt(c['nothing_new_median_s'], 2)} "
                         f"s; in one process {fmt(o['one_file_s'], 2)} s against "
                         f"{fmt(o['nothing_new_median_s'], 2)} s"))
        f = e["first_after_change"]
        t.append(_target(f"{label}: first query after another process's change / warm (median "
                         f"of {len(f['rounds'])})", f["median_ratio"], "first_after_change_ratio",
                         False, "×", f"worst {fmt(f['max_ratio'], 2)}×"))
        growth = [("serving", e["serving"]["peak_growth"]), ("writer", e["writer"]["peak_growth"])]
        if o["peak_growth"] is not None:
            growth.append(("ingest", o["peak_growth"]))
        worst = max(growth, key=lambda x: x[1])
        t.append(_target(f"{label}: peak memory with a change / without (worst process)", worst[1],
                         "peak_growth", False, "×",
                         ", ".join(f"{k} {fmt(v, 3)}×" for k, v in growth)))
    return t


def run_scale(sizes: dict[str, int], quick: bool = False, cache: Path | None = None,
              progress: Progress | None = None, dim: int | None = None) -> dict[str, Any]:
    """Build (or reuse) each size's knowledge base in ``cache`` (``cache_root()``) and measure it
    (see the module docstring); return a JSON-ready dict. ``quick``: fewer prompts, rounds and
    chunks encoded. ``dim``: the vector length (default: the configured embedder's)."""
    started = time.perf_counter()
    meter = CpuMeter()
    cache = Path(cache) if cache is not None else cache_root()
    scifact = load_scifact(0)
    docs = [d for d in scifact.docs if d.text.strip()]
    if dim is None:
        from ragstream.backends.services import build_services

        dim = int(build_services(bench_config(cache / "probe-config")).embedder.dimension)
    result: dict[str, Any] = {
        "schema": SCHEMA, "quick": quick, "cache": str(cache),
        "started_at": dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat(),
        "machine": {**machine_info(), "load_avg_start": load_average()},
        "engine": "LocalEngine (Chroma embedded HNSW + tantivy)", "sizes": {},
    }
    work = cache / f"run-{os.getpid()}"
    built: dict[str, dict[str, Any]] = {}
    try:
        for label, n in sizes.items():
            folder = size_folder(cache, n)
            try:
                store = build_store(n, folder, docs, dim, progress, label)
                built[label] = store
                entry: dict[str, Any] = {"store": {k: v for k, v in store.items() if k != "machine"}}
                entry.update(measure_size(label, n, folder, docs, quick, work, progress))
            except (RuntimeError, OSError, ValueError) as err:  # the other sizes still count
                entry = {"error": f"{type(err).__name__}: {err}"[:2000]}
            entry["load_avg"] = load_average()
            result["sizes"][label] = entry
        for label, n in SIZES.items():
            if n > max(sizes.values()) and label not in sizes and n >= 1_000_000:
                result["sizes"][label] = {"not_measured": estimate(label, n, built),
                                          "cached": read_manifest(size_folder(cache, n)) is not None}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    measured = [e for e in result["sizes"].values() if "serving" in e]
    if len(measured) > 1:
        a, b = measured[0]["serving"], measured[-1]["serving"]
        result["serving_rss_growth"] = round(b["rss_after_queries_mb"] / a["rss_after_queries_mb"], 2)
    result["machine"].update(load_avg_end=load_average(), other_processes_cpu_cores=meter.others_cores())
    result["wall_s"] = round(time.perf_counter() - started, 1)
    result["targets"] = evaluate_targets(result)
    return result


# --------------------------------------------------------------------------- the report


def _mark(ok: bool | None) -> str:
    return "n/a" if ok is None else ("met" if ok else "MISSED")


def format_scale_report(result: dict[str, Any]) -> str:
    """The result as text: per size the store, its figures, then the targets met / missed."""
    m = result["machine"]
    lines = [f"RAGstream scale bench{' (quick)' if result['quick'] else ''} — "
             f"{result['started_at']}, {fmt(result['wall_s'])} s; {result['engine']}",
             f"machine: {m.get('cpu_model', '?')}, {m['cpus']} CPUs, {fmt(m.get('memory_gb'))} GB; "
             f"load average start {m['load_avg_start']}, end {m['load_avg_end']}; other processes "
             f"kept {fmt(m['other_processes_cpu_cores'], 2)} cores busy on average",
             f"cache: {result['cache']}", ""]
    for label, e in result["sizes"].items():
        if "error" in e:
            lines += [f"{label}: FAILED — {e['error']}", ""]
            continue
        if "not_measured" in e:
            nm = e["not_measured"]
            lines += [f"{label} ({fmt(nm['chunks'])} chunks): {nm['note']}"
                      + ("; its knowledge base is already cached" if e.get("cached") else ""), ""]
            continue
        s, r, sv = e["store"], e["retrieval"], e["serving"]
        lines.append(f"{label}: {fmt(e['chunks'])} chunks, {fmt(e['windows'])} windows")
        lines.append(f"  store: {'reused from the cache (built' if s['reused'] else 'built'} in "
                     f"{fmt(s['build_s'])} s = {fmt(s['build_chunks_per_s'])} chunks/s, "
                     f"{fmt(s['disk_mb'])} MB on disk{')' if s['reused'] else ''}")
        lines.append(f"    SYNTHETIC — {s['data']}")
        lines.append(f"  Retrieval stage (query encoding included): p50 {fmt(r['p50_ms'])} ms, "
                     f"p95 {fmt(r['p95_ms'])} ms, max {fmt(r['max_ms'])} ms ({r['n']} calls, "
                     f"{r['queries']} SciFact claims × {r['repeats']}, {fmt(r['pieces_mean'], 2)} "
                     f"pieces on average); encoding alone p50 {fmt(r['encode']['p50_ms'])} ms, "
                     f"p95 {fmt(r['encode']['p95_ms'])} ms; the rest p50 "
                     f"{fmt(r['without_encode']['p50_ms'])} ms, p95 {fmt(r['without_encode']['p95_ms'])} ms; "
                     f"first query of the process {fmt(r['first_query_of_process_ms'])} ms")
        lines.append(f"  serving process RSS: {fmt(sv['rss_model_mb'])} MB with the model, "
                     f"{fmt(sv['rss_warm_mb'])} MB after warm-up, {fmt(sv['rss_after_queries_mb'])} MB "
                     f"after {sv['queries']} queries; peak {fmt(sv['peak_before_changes_mb'])} MB, "
                     f"{fmt(sv['peak_after_changes_mb'])} MB after the changes")
        u = e["update_to_queryable"]
        lines.append("  update-to-queryable (another process's replace_documents returns → the end "
                     f"of the first query whose view holds it): median {fmt(u['median_ms'])} ms, worst "
                     f"{fmt(u['max_ms'])} ms; rounds: " + ", ".join(
                         f"{fmt(x['seen_ms'])} ms (query {fmt(x['seeing_query_ms'])} ms, write "
                         f"{fmt(x['write_ms'])} ms)" if x["found"] else "NOT SEEN" for x in u["rounds"]))
        f = e["first_after_change"]
        lines.append("  first query after another process's change / the claim's warm median: "
                     f"median {fmt(f['median_ratio'], 2)}×, worst {fmt(f['max_ratio'], 2)}×; " + ", ".join(
                         f"{fmt(x['first_ms'])}/{fmt(x['warm_ms'])} ms" for x in f["rounds"]))
        w = e["writer"]
        lines.append(f"  writer process: store opened in {fmt(w['open_s'], 2)} s; its first write "
                     f"{fmt(w['first_write_ms'])} ms, then p50 {fmt(w['write_ms']['p50_ms'])} ms; "
                     f"peak {fmt(w['peak_after_warm_up_mb'])} → {fmt(w['peak_end_mb'])} MB")
        i = e["ingest"]
        lines.append(f"  ingestion throughput ({i['chunks']} SciFact abstracts as chunks, "
                     f"{i['windows']} windows, {i['sentences']} sentences): encode_chunks "
                     f"{fmt(i['encode_chunks_per_s'])} chunks/s, store write "
                     f"{fmt(i['write_chunks_per_s'])} chunks/s, both {fmt(i['ingest_chunks_per_s'])} "
                     f"chunks/s = {fmt(i['ingest_vs_encode'], 3)}× raw encoding")
        o = e["one_file"]
        lines.append("  ingest_path on a folder of 5 files: nothing new "
                     + ", ".join(fmt(x, 2) for x in o["nothing_new_s"])
                     + f" s; one file added {fmt(o['one_file_s'], 2)} s ({fmt(o['ratio'], 2)}×); "
                     f"one removed {fmt(o['one_removed_s'], 2)} s; listing the store's "
                     f"{fmt(i['listed_documents'])} documents alone {fmt(i['list_documents_s'], 2)} s; "
                     f"peak {fmt(o['peak_nothing_new_mb'])} → {fmt(o['peak_one_file_mb'])} MB")
        c = o["cli"]
        lines.append("  `ragstream ingest` processes on that folder: nothing new "
                     + ", ".join(fmt(x, 2) for x in c["nothing_new_s"])
                     + f" s; one file added {fmt(c['one_file_s'], 2)} s ({fmt(c['ratio'], 2)}×); "
                     f"one removed {fmt(c['one_removed_s'], 2)} s; peak "
                     f"{fmt(c['peak_nothing_new_mb'])} → {fmt(c['peak_one_file_mb'])} MB")
        lines.append("")
    if "serving_rss_growth" in result:
        measured = [k for k, e in result["sizes"].items() if "serving" in e]
        first, last = measured[0], measured[-1]
        lines += [f"serving process RSS after the queries, {last} against {first}: "
                  f"{fmt(result['serving_rss_growth'], 2)}× (Chroma's HNSW is held in memory)", ""]
    lines.append("Targets")
    for t in result["targets"]:
        digits = 2 if t["unit"] == "×" else 1
        lines.append(f"  [{_mark(t['pass']):>6}] {t['name']}: {fmt(t['value'], digits)} {t['unit']} "
                     f"(target {t['op']} {fmt(t['limit'], digits)} {t['unit']})"
                     + (f" — {t['note']}" if t["note"] else ""))
    return "\n".join(lines)
