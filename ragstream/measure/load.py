"""``python -m ragstream load``: many clients calling ``RAGPipeline.retrieve`` at once.

    from ragstream.measure.load import run_load, format_report
    result = run_load(chunks=(10_000, 100_000), clients=8, seconds=60)   # a JSON-ready dict
    print(format_report(result))

For each index size:

1. **The index.** The store (embedded Chroma in a temp folder, or a ``chroma run`` server given
   by ``chroma_url``, in its own collection ``ragstream_load``) is opened and its generation
   stamp read. ``bench.build_synthetic_index`` builds that many chunks (SciFact abstracts
   replicated, synthetic vectors: encoding 100k chunks would take hours on this machine) and
   the snapshot is saved where the app's ``IndexCache`` looks for it, keyed by that stamp. The
   store itself holds no records: retrieval reads only the in-memory snapshot, and asks the
   store for its stamp (``ChromaStore.fingerprint``) to know the snapshot is current. An
   embedded store is closed again, so that, as in a serving process over an unchanged
   knowledge base, the stamp is read from its copy on disk; a server is asked over HTTP.
2. **The service.** One ``Engine`` and one ``RAGPipeline`` (its own pool of ``api.WORKERS``
   threads, its result cache, its timeout), warmed up: what ``python -m ragstream serve`` holds.
3. **One client, then N clients**, each for ``seconds``: every client is a thread that calls
   ``retrieve`` back to back until the time is up (a call under way then finishes and counts).
   Queries are SciFact claims taken in turn from one shared list, each with its own
   ``context_key``, so the result cache never serves a call; the query-vector cache is emptied
   each time the list starts over, so no claim's vectors are reused either. An exception
   inside a client is counted (by kind, with the first messages), never raised.
4. **Figures**: queries, queries/s, p50 / p95 / max latency, errors, for both phases; the
   ratio p95(N clients) / p95(1 client); pass when there were no errors and the ratio is at
   most ``TARGET_RATIO``.

Clients are threads in this one process, as the service runs retrievals in a thread pool, so
Python's GIL and the machine's cores bound what N clients can get: with N clients always
waiting, each call's latency is about N / throughput (Little's law), so N clients stay within
3× of one client's latency only if they get more than N/3 times its throughput.
"""

from __future__ import annotations

import datetime as dt
import gc
import math
import resource
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ragstream.measure import bench
from ragstream.measure.bench import Abstract, Progress

SCHEMA = 1
DEFAULT_CLIENTS = 8
DEFAULT_SECONDS = 60.0
DEFAULT_CHUNKS = (10_000, 100_000)
#: the issue's target: p95 with N clients at most this many times the single-client p95
TARGET_RATIO = 3.0
#: the collection used on a Chroma server (never the app's own)
LOAD_COLLECTION = "ragstream_load"
#: how many times the store's stamp is read on its own, to time it
FINGERPRINT_SAMPLES = 200
#: error messages kept per phase
ERROR_SAMPLES = 5


def size_label(n: int) -> str:
    """``10000`` → ``"10k"``; sizes that are not whole thousands stay as they are."""
    return f"{n // 1000}k" if n >= 1000 and n % 1000 == 0 else str(n)


def read_data(folder: Path = bench.SCIFACT_DIR) -> tuple[list[Abstract], list[str]]:
    """SciFact's abstracts (the chunk texts) and the text of every query in ``queries.jsonl``;
    ``EvalDataError`` when the folder does not hold them."""
    from ragstream.errors import EvalDataError

    scifact = bench.load_scifact(0, Path(folder))
    queries = [str(q.get("text", "")).strip() for q in bench.read_jsonl(Path(folder) / "queries.jsonl")]
    queries = list(dict.fromkeys(q for q in queries if q))
    if not queries or not any(d.text.strip() for d in scifact.docs):
        raise EvalDataError(f"{folder}: corpus.jsonl or queries.jsonl holds no text.")
    return scifact.docs, queries


class QueryFeed:
    """The queries, handed out in turn to every client; ``on_wrap`` runs when the list starts over."""

    def __init__(self, queries: list[str], on_wrap: Callable[[], None] | None = None):
        if not queries:
            raise ValueError("QueryFeed needs at least one query")
        self.queries = queries
        self.on_wrap = on_wrap
        self.handed = 0
        self.rounds = 0
        self._lock = threading.Lock()

    def next(self) -> tuple[str, int]:
        """The next query and its sequence number (unique across all clients)."""
        with self._lock:
            seq = self.handed
            self.handed += 1
            i = seq % len(self.queries)
            if i == 0 and seq > 0:
                self.rounds += 1
                if self.on_wrap is not None:
                    self.on_wrap()
            return self.queries[i], seq


def latency_summary(values_ms: list[float]) -> dict[str, float | None]:
    """p50, p95, max and mean of millisecond timings, rounded to 0.01 ms (None when empty)."""
    if not values_ms:
        return {"p50_ms": None, "p95_ms": None, "max_ms": None, "mean_ms": None}
    a = np.asarray(values_ms, dtype=np.float64)
    return {"p50_ms": round(float(np.percentile(a, 50)), 2),
            "p95_ms": round(float(np.percentile(a, 95)), 2),
            "max_ms": round(float(a.max()), 2), "mean_ms": round(float(a.mean()), 2)}


def run_phase(call: Callable[[str, str], Any], feed: QueryFeed, clients: int, seconds: float,
              name: str = "load", tick: Callable[[float], None] | None = None) -> dict[str, Any]:
    """``clients`` threads calling ``call(query, context_key)`` back to back for ``seconds``;
    an exception is counted and kept (kind, first messages), never raised. Returns queries
    (calls finished, = the sum of ``per_client``), ok, errors, wall seconds, queries/s and
    the latencies of the calls that succeeded, and ``cpu_cores``: this process's CPU time over
    the wall time (how many cores the phase kept busy). ``tick(elapsed_s)`` about once a second."""
    latencies: list[list[float]] = [[] for _ in range(clients)]
    failures: list[list[tuple[str, str, float]]] = [[] for _ in range(clients)]
    cached = [0] * clients
    start = threading.Barrier(clients + 1)
    deadline = [math.inf]

    def client(k: int) -> None:
        start.wait()
        while time.perf_counter() < deadline[0]:
            query, seq = feed.next()
            t0 = time.perf_counter()
            try:
                out = call(query, f"{name}:{k}:{seq}")
            except Exception as err:  # counted, not raised: the run goes on
                failures[k].append((type(err).__name__, str(err).splitlines()[0][:200] if str(err)
                                    else "", (time.perf_counter() - t0) * 1000.0))
                continue
            latencies[k].append((time.perf_counter() - t0) * 1000.0)
            if getattr(out, "cached", False):
                cached[k] += 1

    threads = [threading.Thread(target=client, args=(k,), name=f"ragstream-load-{k}", daemon=True)
               for k in range(clients)]
    for t in threads:
        t.start()
    cpu0 = _process_cpu_s()
    t0 = time.perf_counter()
    deadline[0] = t0 + seconds
    start.wait()
    for t in threads:
        while t.is_alive():
            t.join(timeout=1.0)
            if tick:
                tick(min(time.perf_counter() - t0, seconds))
    wall = time.perf_counter() - t0
    cpu = _process_cpu_s() - cpu0
    per_client = [len(latencies[k]) + len(failures[k]) for k in range(clients)]
    ok = sum(len(x) for x in latencies)
    errors = [f for fs in failures for f in fs]
    kinds: dict[str, int] = {}
    for kind, _msg, _ms in errors:
        kinds[kind] = kinds.get(kind, 0) + 1
    return {
        "clients": clients, "seconds": seconds, "wall_s": round(wall, 2),
        "queries": sum(per_client), "per_client": per_client, "ok": ok, "errors": len(errors),
        "error_kinds": kinds, "error_samples": [f"{k}: {m}" for k, m, _ms in errors[:ERROR_SAMPLES]],
        "cached": sum(cached),
        "qps": round(ok / wall, 2) if wall > 0 else None,
        "cpu_cores": round(cpu / wall, 2) if wall > 0 else None,
        **latency_summary([x for xs in latencies for x in xs]),
    }


def _process_cpu_s() -> float:
    """CPU seconds used so far by this process, all threads (user + system)."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def time_fingerprint(store, samples: int = FINGERPRINT_SAMPLES) -> dict[str, float | None]:
    """p50 / p95 / max of ``store.fingerprint()`` alone: what the store adds to each of its reads."""
    times = []
    for _ in range(samples):
        t0 = time.perf_counter()
        store.fingerprint()
        times.append((time.perf_counter() - t0) * 1000.0)
    out = latency_summary(times)
    return {k: (round(v, 3) if v is not None else None) for k, v in out.items()}


class _Counter:
    """A thread-safe count of calls made through ``wrap``."""

    def __init__(self):
        self.count = 0
        self._lock = threading.Lock()

    def wrap(self, fn: Callable[[], str]) -> Callable[[], str]:
        """``fn``, counting each call."""
        def counted() -> str:
            with self._lock:
                self.count += 1
            return fn()
        return counted


def load_config_for(index_dir: Path, chroma_url: str | None):
    """The shipped config (no LLM, no environment overrides) with its paths in ``index_dir``;
    with ``chroma_url``, the Chroma server there (mode http) and the collection ``LOAD_COLLECTION``."""
    from ragstream.config import load_config

    env = {"RAGSTREAM_INDEX_DIR": str(index_dir), "RAGSTREAM_UPLOADS_DIR": str(index_dir / "uploads")}
    if chroma_url:
        env.update(RAGSTREAM_CHROMA_URL=chroma_url, RAGSTREAM_COLLECTION=LOAD_COLLECTION)
    return load_config(env=env)


def measure_size(n_chunks: int, docs: list[Abstract], feed: QueryFeed, embedder, clients: int,
                 seconds: float, work_dir: Path, chroma_url: str | None = None,
                 progress: Progress | None = None) -> dict[str, Any]:
    """Build the index of ``n_chunks`` behind a real store, then one client and ``clients``
    clients for ``seconds`` each against one ``RAGPipeline`` (see the module docstring)."""
    from ragstream.engine import Engine
    from ragstream.service.api import WORKERS, RAGPipeline
    from ragstream.services import build_services

    label = size_label(n_chunks)
    cfg = load_config_for(work_dir / f"index-{label}", chroma_url)
    services = build_services(cfg)
    services.embedder = embedder  # loaded once for every size
    store = services.store
    if progress:
        progress(f"{label}: build the index", 0, 1)
    t0 = time.perf_counter()
    index = bench.build_synthetic_index(n_chunks, docs, embedder.dimension, cfg)
    index.fingerprint = store.fingerprint()
    index.save(services.index_cache.folder)
    build_s = time.perf_counter() - t0
    if progress:
        progress(f"{label}: build the index", 1, 1)
    windows, sentences = len(index.window_vectors), len(index.sentence_vectors)
    del index
    gc.collect()
    if cfg.settings.vector_store.mode == "persistent":
        store.close()  # as a serving process over an unchanged KB: the stamp comes from its file
    counter = _Counter()
    store.fingerprint = counter.wrap(store.fingerprint)  # an instance attribute: counts the reads

    engine = Engine(cfg, services)
    rag = RAGPipeline(engine)
    feed.on_wrap = embedder.clear_cache  # a claim asked again is encoded again
    try:
        t0 = time.perf_counter()
        engine.warm_up()  # the encoder, the snapshot from disk, the reranker
        held = services.index().n_chunks
        if held != n_chunks:
            raise RuntimeError(f"the service holds {held} chunks, not {n_chunks}")
        for _ in range(3):  # the first calls pay for lazy loads
            query, seq = feed.next()
            rag.retrieve(query, f"warm:{seq}")
        warm_s = time.perf_counter() - t0
        fingerprint = time_fingerprint(store)

        def call(query: str, key: str):
            return rag.retrieve(query, key)

        def ticker(phase: str) -> Callable[[float], None]:
            return lambda s: progress(phase, int(s), int(math.ceil(seconds))) if progress else None

        reads_before = counter.count
        single = run_phase(call, feed, 1, seconds, "single", ticker(f"{label}: 1 client"))
        reads_single = counter.count - reads_before
        many = run_phase(call, feed, clients, seconds, "many", ticker(f"{label}: {clients} clients"))
    finally:
        rag.close()
    p1, pn = single["p95_ms"], many["p95_ms"]
    ratio = round(pn / p1, 2) if p1 and pn else None
    passed = bool(single["errors"] == 0 and many["errors"] == 0 and ratio is not None
                  and ratio <= TARGET_RATIO)
    result = {
        "chunks": n_chunks, "windows": windows, "evidence_sentences": sentences,
        "build_s": round(build_s, 2), "warm_s": round(warm_s, 2),
        "store": {"mode": cfg.settings.vector_store.mode, "location": store.location,
                  "fingerprint_ms": fingerprint,
                  "fingerprint_reads_per_query": (round(reads_single / single["queries"], 2)
                                                  if single["queries"] else None)},
        "api_workers": WORKERS,
        "single": single, "many": many,
        "single_p95_ms": p1, "p95_ms": pn, "ratio": ratio, "target_ratio": TARGET_RATIO,
        "pass": passed,
        "data": (f"texts: SciFact abstracts replicated to {n_chunks:,} chunks; vectors synthetic "
                 f"(bench.build_synthetic_index); the store holds no records"),
    }
    shutil.rmtree(services.index_cache.folder, ignore_errors=True)
    return result


def _drop_load_collection(chroma_url: str, work_dir: Path) -> None:
    """Delete ``LOAD_COLLECTION`` from the server (it holds only this run's stamp)."""
    from ragstream.services import build_services

    store = build_services(load_config_for(work_dir / "cleanup", chroma_url)).store
    try:
        store.client.delete_collection(LOAD_COLLECTION)
    except Exception:  # already gone, or the server went away: nothing to clean
        pass


def run_load(chunks: tuple[int, ...] | list[int] = DEFAULT_CHUNKS, clients: int = DEFAULT_CLIENTS,
             seconds: float = DEFAULT_SECONDS, chroma_url: str | None = None,
             data: Path = bench.SCIFACT_DIR, progress: Progress | None = None) -> dict[str, Any]:
    """Measure every size in ``chunks`` (see the module docstring); a JSON-ready dict."""
    from ragstream.services import build_services

    if clients < 1 or seconds <= 0 or not chunks or min(chunks) < 1:
        raise ValueError("clients ≥ 1, seconds > 0 and at least one size ≥ 1 are needed")
    docs, queries = read_data(Path(data))  # first: a missing data set fails before any work
    started = time.perf_counter()
    meter = bench._CpuMeter()
    loads = [bench.load_average()]
    result: dict[str, Any] = {
        "schema": SCHEMA,
        "started_at": dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat(),
        "machine": {**bench.machine_info(), "load_avg_start": loads[0]},
        "clients": clients, "seconds": seconds,
        "store_mode": "http" if chroma_url else "persistent",
        "chroma_url": chroma_url,
        "queries_available": len(queries),
        "query_policy": ("SciFact claims in turn, shared by all clients; each call has its own "
                         "context_key (the result cache never serves one); the query-vector cache "
                         "is emptied whenever the claims start over"),
        "clients_are": "threads of one process, calling one RAGPipeline (its own worker pool)",
        "sizes": {},
    }
    work = Path(tempfile.mkdtemp(prefix="ragstream-load-"))
    try:
        cfg = load_config_for(work / "embedder", None)
        embedder = build_services(cfg).embedder
        embedder.embed(["warm up"])
        result["embedder"] = f"{cfg.settings.embedding.model} ({getattr(embedder, 'backend', '?')})"
        feed = QueryFeed(queries)
        for n in chunks:
            entry = measure_size(n, docs, feed, embedder, clients, seconds, work, chroma_url, progress)
            entry["load_avg"] = bench.load_average()
            loads.append(entry["load_avg"])
            result["sizes"][size_label(n)] = entry
            gc.collect()  # the size's index goes before the next one is built
        result["query_rounds"] = feed.rounds
    finally:
        if chroma_url:
            _drop_load_collection(chroma_url, work)
        shutil.rmtree(work, ignore_errors=True)
    busy = meter.others_cores()
    result["machine"].update(load_avg_end=bench.load_average(),
                             load_1min_max_seen=max(x[0] for x in loads),
                             other_processes_cpu_cores=busy)
    # the load average counts this run's own threads (and lags a minute behind): the CPU time
    # of other processes, measured over the run, says whether anything else ran
    result["machine"]["contended"] = bool(not math.isnan(busy) and busy > 0.3)
    result["pass"] = all(e["pass"] for e in result["sizes"].values())
    result["wall_s"] = round(time.perf_counter() - started, 1)
    return result


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.1f}"


def format_report(result: dict[str, Any]) -> str:
    """The result as text: per size, both phases, the ratio and pass / MISS."""
    m = result["machine"]
    lines = [
        f"RAGstream load — {result['started_at']}, {result['wall_s']:,.1f} s",
        f"machine: {m.get('cpu_model', '?')}, {m['cpus']} CPUs, Python {m['python']}; load "
        f"average (1/5/15 min) start {m['load_avg_start']}, end {m['load_avg_end']}; other "
        f"processes kept {bench.fmt(m['other_processes_cpu_cores'], 2)} cores busy on average",
        f"store: {result['store_mode']}" + (f" ({result['chroma_url']})" if result["chroma_url"] else
                                            " (embedded Chroma)")
        + f"; clients: {result['clients_are']}",
        f"queries: {result['query_policy']} ({result['queries_available']:,} claims, "
        f"{result.get('query_rounds', 0)} restart(s))",
        f"target: {result['clients']} clients for {bench.fmt(result['seconds'])} s, zero errors, "
        f"p95 ≤ {TARGET_RATIO:g}× the single-client p95",
    ]
    if m.get("contended"):
        lines.append("WARNING: another process was using the CPU during the run; the figures are "
                     "pessimistic.")
    for label, e in result["sizes"].items():
        st = e["store"]
        fp = st["fingerprint_ms"]
        lines += ["", f"{label}: {e['chunks']:,} chunks, {e['windows']:,} windows (SYNTHETIC vectors; "
                      f"built and saved in {e['build_s']:.1f} s); RAGPipeline with "
                      f"{e['api_workers']} workers; load average after {e['load_avg']}",
                  f"  store stamp read: p50 {fp['p50_ms']} ms, p95 {fp['p95_ms']} ms "
                  f"({st['fingerprint_reads_per_query']} reads per query)"]
        for phase in ("single", "many"):
            p = e[phase]
            lines.append(
                f"  {p['clients']} client{'s' if p['clients'] != 1 else ''}: {p['queries']:,} "
                f"queries in {p['wall_s']:.1f} s = {bench.fmt(p['qps'], 2)} q/s, "
                f"{bench.fmt(p['cpu_cores'], 2)} cores busy; p50 {_ms(p['p50_ms'])} "
                f"ms, p95 {_ms(p['p95_ms'])} ms, max {_ms(p['max_ms'])} ms; errors {p['errors']}"
                + (f" ({', '.join(f'{k} × {v}' for k, v in p['error_kinds'].items())})"
                   if p["errors"] else "") + (f"; {p['cached']} served from cache" if p["cached"] else ""))
            for sample in p["error_samples"]:
                lines.append(f"    error: {sample}")
        lines.append(f"  [{'pass' if e['pass'] else 'MISS'}] p95 ratio {bench.fmt(e['ratio'], 2)}× "
                     f"(target ≤ {TARGET_RATIO:g}×), errors {e['single']['errors'] + e['many']['errors']}")
    return "\n".join(lines)
