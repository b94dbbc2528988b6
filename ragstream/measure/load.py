"""``python -m ragstream load``: the real HTTP service under load, one client then many.

    from ragstream.measure.load import run_load, format_report
    result = run_load(chunks=(), clients=8, seconds=20, workers=(1, 2))   # a JSON-ready dict
    print(format_report(result))

    python -m ragstream.measure.load --workers 1,2 --clients 8 --seconds 20   # every option

Everything measured is what a deployment runs; nothing is called in process:

1. **The knowledge bases.** The bundled one (``data/kb``, or ``kb``: any documents folder) is
   ingested by ``python -m ragstream ingest`` into a store of its own in a temp folder; each
   size in ``chunks`` is the synthetic store of ``bench --scale`` (``scale.build_store``:
   SciFact abstracts as texts, synthetic vectors, since encoding 100k chunks would take
   hours here) written through the real store (``services.open_store`` →
   ``LocalEngine.replace_documents``: Chroma and tantivy), so retrieval over it runs as over
   an ingested one; it is built once and reused from ``scale.cache_root()``.
2. **The service**, for each count in ``workers``: ``python -m ragstream serve --workers N`` on a
   free loopback port, with a bearer token (the guard runs as in production) and the shipped
   configuration except ``embedding.cache_size = 0``: with a few hundred distinct claims a
   run would otherwise ask some again and get their query vectors from the cache. Every
   request has its own ``context_key``, so the result cache never serves one either (each
   response's ``cached`` is checked and counted). The run waits until every worker has said
   "Application startup complete", then warms the workers up (their first calls pay for
   lazy loads): ``WARM_SECONDS`` of load with as many clients as the second phase.
3. **The load generator** is another process (``--generate SPEC``): asyncio over raw HTTP/1.1
   keep-alive connections, one per client, written to cost the machine as little as possible
   (a few tens of microseconds a request; its own CPU time is reported, since on a 2-core
   machine it competes with the service). One client, then ``clients`` clients, each for
   ``seconds``; every client sends the next request as soon as the previous answer is read.
   A refused or broken connection, a timeout (``REQUEST_TIMEOUT_S``) or any status but 200 is
   an error: counted by kind, with the first messages, never raised.
4. **Figures** per worker count: requests/s, p50 / p95 / p99 / max latency, errors, which
   worker answered how many (the ``X-RAGstream-Worker`` header), the cores the workers and the
   generator kept busy, and each worker's memory (``VmRSS`` and its peak ``VmHWM`` from
   ``/proc/<pid>/status``). The speed-up is ``clients``' requests/s over one client's, both in
   this run; the target (issue 33) is ≥ ``TARGET_SPEEDUP`` with zero errors. ``pass`` at the
   top is that of the largest worker count measured (the configuration built to meet it).

Why workers: one process runs a retrieval mostly in Python (tokenising, scoring, building the
response), under the GIL, so more clients only queue behind one core's worth of Python and
add thread switching; N processes share no memory and no GIL, so on C cores up to C requests
run at once. ``by_worker`` shows whether they did: the kernel hands each *connection* to the
worker that wakes first, and a client keeps its connection, so 8 clients connecting at once
may all be served by one worker.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import math
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ragstream.measure.scale import size_label

SCHEMA = 2
DEFAULT_CLIENTS = 8
DEFAULT_SECONDS = 20.0
#: synthetic store sizes measured besides the bundled knowledge base (none by default)
DEFAULT_CHUNKS: tuple[int, ...] = ()
DEFAULT_WORKERS = (1, 2)
#: the issue's target: N clients get at least this many times one client's requests/s
TARGET_SPEEDUP = 1.5
#: a request without an answer by then is an error
REQUEST_TIMEOUT_S = 30.0
#: how long a service may take to start every worker
START_TIMEOUT_S = 240.0
#: how long the warm-up load runs before the phases (seconds)
WARM_SECONDS = 2.0
#: error messages kept per phase
ERROR_SAMPLES = 5
#: the dimension of the synthetic vectors (all-MiniLM-L6-v2's, the shipped model)
SYNTHETIC_DIM = 384
ROOT = Path(__file__).resolve().parents[2]
BUNDLED_KB = ROOT / "data" / "kb"

Progress = Callable[[str, int, int], None]


def read_queries(folder: Path) -> list[str]:
    """The distinct texts of ``queries.jsonl`` in ``folder`` (SciFact's claims); ``EvalDataError``
    when the folder does not hold them."""
    from ragstream.common.errors import EvalDataError

    path = Path(folder) / "queries.jsonl"
    if not path.is_file() or not (Path(folder) / "corpus.jsonl").is_file():
        raise EvalDataError(f"{folder}: corpus.jsonl and queries.jsonl are needed (a BEIR folder, "
                            f"e.g. SciFact); give --data.")
    texts = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            texts.append(str(json.loads(line).get("text", "")).strip())
    queries = list(dict.fromkeys(t for t in texts if t))
    if not queries:
        raise EvalDataError(f"{path} holds no query text.")
    return queries


def latency_summary(values_ms: Sequence[float]) -> dict[str, float | None]:
    """p50, p95, p99, max and mean of millisecond timings, rounded to 0.01 ms (None when empty)."""
    if not values_ms:
        return {"p50_ms": None, "p95_ms": None, "p99_ms": None, "max_ms": None, "mean_ms": None}
    s = sorted(values_ms)

    def pct(p: float) -> float:  # linear interpolation, as numpy.percentile
        x = (len(s) - 1) * p / 100.0
        lo = math.floor(x)
        hi = min(lo + 1, len(s) - 1)
        return s[lo] + (s[hi] - s[lo]) * (x - lo)

    return {"p50_ms": round(pct(50), 2), "p95_ms": round(pct(95), 2), "p99_ms": round(pct(99), 2),
            "max_ms": round(s[-1], 2), "mean_ms": round(sum(s) / len(s), 2)}


# --------------------------------------------------------------------------- the load generator


class _HttpError(Exception):
    """A response that is not HTTP/1.1 as expected (no Content-Length, a bad status line)."""


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 response: its status, headers (lower-case names) and body (Content-Length)."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[1].isdigit():
        raise _HttpError(f"bad status line {lines[0][:80]!r}")
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    if "content-length" not in headers:
        raise _HttpError("a response without Content-Length")
    body = await reader.readexactly(int(headers["content-length"]))
    return int(parts[1]), headers, body


async def _generate(spec: dict[str, Any]) -> dict[str, Any]:
    """Run the phase ``spec`` describes (see ``generate``) and return its figures."""
    host, port, clients = spec["host"], int(spec["port"]), int(spec["clients"])
    queries: list[str] = spec["queries"]
    offset, name, timeout = int(spec.get("offset", 0)), spec["name"], float(spec["timeout_s"])
    auth = f"Authorization: Bearer {spec['token']}\r\n" if spec.get("token") else ""
    head = (f"POST /retrieve HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"{auth}Content-Length: %d\r\n\r\n").encode("latin-1")
    latencies: list[list[float]] = [[] for _ in range(clients)]
    failures: list[list[str]] = [[] for _ in range(clients)]
    workers: dict[str, int] = {}
    cached = [0] * clients
    counter = [0]
    started = asyncio.Event()
    deadline = [math.inf]

    async def client(k: int) -> None:
        reader: asyncio.StreamReader | None = None
        writer: asyncio.StreamWriter | None = None
        await started.wait()
        while time.perf_counter() < deadline[0]:
            seq = counter[0]
            counter[0] += 1
            query = queries[(offset + seq) % len(queries)]
            body = json.dumps({"query": query, "context_key": f"{name}:{k}:{seq}"}).encode("utf-8")
            t0 = time.perf_counter()
            try:
                if writer is None:
                    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
                assert reader is not None and writer is not None
                writer.write(head % len(body) + body)
                status, headers, answer = await asyncio.wait_for(_read_response(reader), timeout)
            except (OSError, EOFError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                    _HttpError, TimeoutError) as err:
                kind = "timeout" if isinstance(err, TimeoutError) else type(err).__name__
                failures[k].append(f"{kind}: {str(err).splitlines()[0][:200] if str(err) else ''}")
                if writer is not None:
                    writer.close()
                reader = writer = None
                continue
            ms = (time.perf_counter() - t0) * 1000.0
            pid = headers.get("x-ragstream-worker", "?")
            workers[pid] = workers.get(pid, 0) + 1
            if status != 200:
                failures[k].append(f"HTTP {status}: {answer[:200].decode('utf-8', 'replace')}")
            else:
                latencies[k].append(ms)
                if b'"cached":true' in answer:
                    cached[k] += 1
            if headers.get("connection", "").lower() == "close" and writer is not None:
                writer.close()
                reader = writer = None
        if writer is not None:
            writer.close()

    tasks = [asyncio.create_task(client(k)) for k in range(clients)]
    cpu0 = _own_cpu_s()
    t0 = time.perf_counter()
    deadline[0] = t0 + float(spec["seconds"])
    started.set()
    await asyncio.gather(*tasks)
    wall = time.perf_counter() - t0
    cpu = _own_cpu_s() - cpu0
    per_client = [len(latencies[k]) + len(failures[k]) for k in range(clients)]
    ok = sum(len(x) for x in latencies)
    errors = [f for fs in failures for f in fs]
    kinds: dict[str, int] = {}
    for e in errors:
        kind = e.split(":", 1)[0]
        kinds[kind] = kinds.get(kind, 0) + 1
    return {
        "clients": clients, "seconds": spec["seconds"], "wall_s": round(wall, 2),
        "requests": sum(per_client), "per_client": per_client, "ok": ok, "errors": len(errors),
        "error_kinds": kinds, "error_samples": errors[:ERROR_SAMPLES], "cached": sum(cached),
        "rps": round(ok / wall, 2) if wall > 0 else None,
        "generator_cores": round(cpu / wall, 3) if wall > 0 else None,
        "by_worker": dict(sorted(workers.items())),
        **latency_summary([x for xs in latencies for x in xs]),
    }


def _own_cpu_s() -> float:
    """CPU seconds used so far by this process (user + system)."""
    t = os.times()
    return t.user + t.system


def generate(spec: dict[str, Any]) -> dict[str, Any]:
    """One phase of load, in this process: ``clients`` keep-alive connections to
    ``host:port`` sending ``POST /retrieve`` back to back for ``seconds``; queries are
    ``queries`` in turn from ``offset``, each with its own context key ``name:client:seq``;
    ``token``: the bearer token; ``timeout_s``: per request. Uses uvloop when installed."""
    try:
        import uvloop

        return uvloop.run(_generate(spec))
    except ImportError:
        return asyncio.run(_generate(spec))


def run_generator(spec: dict[str, Any], work_dir: Path) -> dict[str, Any]:
    """``generate(spec)`` in a separate process (``python -m ragstream.measure.load --generate``)."""
    path = work_dir / f"generate-{spec['name']}.json"
    path.write_text(json.dumps(spec), encoding="utf-8")
    out = subprocess.run([sys.executable, "-m", "ragstream.measure.load", "--generate", str(path)],
                         capture_output=True, text=True, cwd=ROOT,
                         timeout=float(spec["seconds"]) + float(spec["timeout_s"]) + 120)
    if out.returncode != 0:
        raise RuntimeError(f"the load generator failed ({out.returncode}): {out.stderr[-2000:]}")
    return json.loads(out.stdout)


# --------------------------------------------------------------------------- knowledge bases


def service_env(index_dir: Path, config_dir: Path | None = None, chroma_url: str | None = None,
                collection: str | None = None) -> dict[str, str]:
    """The environment of a service (and an ingest) over the store in ``index_dir``: this
    process's without its ``RAGSTREAM_*`` variables, every writable path in ``index_dir``,
    the configuration in ``config_dir`` (None: the shipped one), the Chroma server
    ``chroma_url`` (its collection ``collection``) if given."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGSTREAM_")}
    env.update(RAGSTREAM_INDEX_DIR=str(index_dir), RAGSTREAM_UPLOADS_DIR=str(index_dir / "uploads"),
               RAGSTREAM_KBS_DIR=str(index_dir / "kbs"), PYTHONUNBUFFERED="1")
    if config_dir is not None:
        env["RAGSTREAM_CONFIG_DIR"] = str(config_dir)
    if chroma_url:
        env.update(RAGSTREAM_CHROMA_URL=chroma_url, RAGSTREAM_COLLECTION=collection or "ragstream_load")
    return env


def load_config_dir(work_dir: Path) -> Path:
    """A copy of the shipped configuration with the query-vector cache off (see the module
    docstring), in ``work_dir``."""
    from ragstream.common.config import DEFAULT_CONFIG_DIR

    target = work_dir / "config"
    shutil.copytree(DEFAULT_CONFIG_DIR, target)
    settings = target / "settings.json"
    raw = json.loads(settings.read_text(encoding="utf-8"))
    raw.setdefault("embedding", {})["cache_size"] = 0
    settings.write_text(json.dumps(raw, indent=2), encoding="utf-8")
    return target


def ingest_folder(folder: Path, env: dict[str, str]) -> dict[str, Any]:
    """``python -m ragstream ingest FOLDER --json`` with ``env``: its report."""
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "ragstream", "ingest", str(folder), "--json"],
                         capture_output=True, text=True, cwd=ROOT, env=env, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"ragstream ingest {folder} failed: {out.stderr[-2000:]}")
    report = json.loads(out.stdout)
    return {"documents": report.get("processed"), "failed": report.get("failed"),
            "chunks": report.get("chunks_written", report.get("chunks")),
            "seconds": round(time.perf_counter() - t0, 1)}


def synthetic_store(n_chunks: int, data: Path, progress: Progress | None = None,
                    cache: Path | None = None) -> tuple[Path, dict[str, Any]]:
    """The ``n_chunks`` synthetic knowledge base of ``bench --scale`` (``scale.build_store``:
    SciFact abstracts, synthetic vectors, written through ``open_store`` →
    ``LocalEngine.replace_documents``), built once and reused from ``cache`` (default
    ``scale.cache_root()``): its index folder and its manifest."""
    from ragstream.measure import harness, scale

    folder = scale.size_folder(Path(cache) if cache else scale.cache_root(), n_chunks)
    docs = harness.load_scifact(0, Path(data)).docs
    manifest = scale.build_store(n_chunks, folder, docs, SYNTHETIC_DIM, progress, size_label(n_chunks))
    return folder / "index", manifest


# --------------------------------------------------------------------------- the service


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Service:
    """``python -m ragstream serve --workers N`` on a free loopback port, its output read in a
    thread (``lines``), its worker pids from uvicorn's "Started server process [pid]"."""

    def __init__(self, env: dict[str, str], workers: int, token: str | None = None,
                 port: int | None = None):
        self.workers = workers
        self.token = token
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.lines: list[str] = []
        env = dict(env)
        if token:
            env["RAGSTREAM_LOAD_TOKEN"] = token
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ragstream", "serve", "--port", str(self.port), "--workers",
             str(workers), "--token-env", "RAGSTREAM_LOAD_TOKEN"],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def worker_pids(self) -> list[int]:
        """The worker processes started so far (the supervisor itself with one worker)."""
        return [int(m.group(1)) for line in list(self.lines)
                if (m := re.search(r"Started server process \[(\d+)\]", line))]

    def output(self, last: int = 40) -> str:
        """The service's last ``last`` lines of output."""
        return "\n".join(self.lines[-last:])

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> float:
        """Wait until every worker has finished its startup (the app built and warmed up) and
        /health answers; the seconds it took. ``RuntimeError`` when the service exits first."""
        import httpx

        t0 = time.perf_counter()
        while True:
            if self.proc.poll() is not None:
                time.sleep(0.2)
                raise RuntimeError(f"the service exited ({self.proc.returncode}):\n{self.output()}")
            done = sum("Application startup complete" in line for line in list(self.lines))
            if done >= self.workers:
                try:
                    if httpx.get(f"{self.url}/health", timeout=5).status_code == 200:
                        return round(time.perf_counter() - t0, 2)
                except httpx.TransportError:
                    pass
            if time.perf_counter() - t0 > timeout:
                raise RuntimeError(f"the service did not start in {timeout:.0f} s:\n{self.output()}")
            time.sleep(0.2)

    def stop(self, timeout: float = 60.0) -> int | None:
        """SIGTERM (graceful: requests under way finish), then SIGKILL after ``timeout``; the
        exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        self._reader.join(timeout=5)
        return self.proc.returncode


def proc_status(pid: int) -> dict[str, int] | None:
    """``VmRSS`` and ``VmHWM`` (peak RSS) of ``pid`` in KiB, from ``/proc/<pid>/status``."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    out = {}
    for key in ("VmRSS", "VmHWM"):
        m = re.search(rf"^{key}:\s+(\d+) kB", text, re.M)
        if m:
            out[key] = int(m.group(1))
    return out


def cpu_seconds(pids: Sequence[int]) -> float:
    """CPU seconds (user + system) used so far by the processes ``pids`` (those still there)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
    return total / tick


@contextmanager
def running_service(env: dict[str, str], workers: int) -> Iterator[Service]:
    """A started, ready ``Service`` with a fresh bearer token, stopped on the way out."""
    service = Service(env, workers, token=secrets.token_urlsafe(16))
    try:
        service.wait_ready()
        yield service
    finally:
        service.stop()


# --------------------------------------------------------------------------- one configuration


def measure_service(env: dict[str, str], workers: int, queries: list[str], clients: int,
                    seconds: float, work_dir: Path, label: str, offset: int = 0,
                    progress: Progress | None = None) -> dict[str, Any]:
    """``serve --workers workers`` over the store ``env`` names: warm up, then one client and
    ``clients`` clients for ``seconds`` each (separate generator processes); figures, memory
    and the speed-up (see the module docstring)."""
    name = f"{label}-w{workers}"
    if progress:
        progress(f"{name}: start the service", 0, 1)
    t0 = time.perf_counter()
    with running_service(env, workers) as service:
        start_s = round(time.perf_counter() - t0, 2)
        pids = service.worker_pids
        base = {"host": "127.0.0.1", "port": service.port, "token": service.token,
                "queries": queries, "timeout_s": REQUEST_TIMEOUT_S}
        # a few requests per worker (their first calls pay for lazy loads), on as many
        # connections as the many-client phase opens, so that each worker gets some
        warm = run_generator({**base, "name": f"{name}-warm", "clients": max(clients, workers),
                              "seconds": WARM_SECONDS, "offset": offset}, work_dir)
        offset += warm["requests"]
        if progress:
            progress(f"{name}: start the service", 1, 1)
        phases = {}
        for phase, n in (("single", 1), ("many", clients)):
            if progress:
                progress(f"{name}: {n} client{'s' if n > 1 else ''}", 0, 1)
            cpu0 = cpu_seconds(pids)
            p = run_generator({**base, "name": f"{name}-{phase}", "clients": n, "seconds": seconds,
                               "offset": offset}, work_dir)
            p["service_cores"] = (round((cpu_seconds(pids) - cpu0) / p["wall_s"], 2)
                                  if p["wall_s"] else None)
            offset += p["requests"]
            phases[phase] = p
            if progress:
                progress(f"{name}: {n} client{'s' if n > 1 else ''}", 1, 1)
        memory = {str(pid): proc_status(pid) for pid in pids}
        supervisor = proc_status(service.proc.pid) if workers > 1 else None
    single, many = phases["single"], phases["many"]
    speedup = (round(many["rps"] / single["rps"], 2) if single["rps"] and many["rps"] else None)
    errors = single["errors"] + many["errors"]
    rss = [m["VmRSS"] for m in memory.values() if m and "VmRSS" in m]
    return {
        "workers": workers, "worker_pids": pids, "start_s": start_s, "warm": warm,
        "single": single, "many": many, "speedup": speedup, "target_speedup": TARGET_SPEEDUP,
        "errors": errors, "pass": bool(errors == 0 and speedup is not None
                                       and speedup >= TARGET_SPEEDUP),
        "memory_kib": memory, "supervisor_memory_kib": supervisor,
        "rss_per_worker_mib": round(sum(rss) / len(rss) / 1024, 1) if rss else None,
        "exit_code": service.proc.returncode,
        "queries_used_to": offset,
    }


# --------------------------------------------------------------------------- the run


def run_load(chunks: Sequence[int] = DEFAULT_CHUNKS, clients: int = DEFAULT_CLIENTS,
             seconds: float = DEFAULT_SECONDS, chroma_url: str | None = None,
             data: Path | None = None, progress: Progress | None = None, *,
             workers: Sequence[int] = DEFAULT_WORKERS, kb: Path | None = BUNDLED_KB) -> dict[str, Any]:
    """Measure the service (see the module docstring) over the knowledge base ``kb`` (a folder
    ingested; None: none) and a synthetic store per size in ``chunks``, with each count of
    ``workers``; ``data``: the SciFact folder (its claims are the queries; its abstracts the
    synthetic texts); ``chroma_url``: a Chroma server to keep the vectors in instead of the
    embedded store. A JSON-ready dict."""
    from ragstream.measure import harness

    data = Path(data) if data is not None else harness.SCIFACT_DIR
    chunks = tuple(chunks)
    workers = tuple(workers)
    if clients < 1 or seconds <= 0 or not workers or min(workers) < 1 or (chunks and min(chunks) < 1):
        raise ValueError("clients ≥ 1, seconds > 0, worker counts ≥ 1 and sizes ≥ 1 are needed")
    if kb is None and not chunks:
        raise ValueError("nothing to measure: give a knowledge base folder or a synthetic size")
    if chunks and chroma_url:
        raise ValueError("the synthetic stores are embedded (bench --scale's); measure them "
                         "without chroma_url")
    queries = read_queries(data)  # first: a missing data set fails before any work
    started = time.perf_counter()
    meter = harness.CpuMeter()
    result: dict[str, Any] = {
        "schema": SCHEMA,
        "started_at": dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat(),
        "machine": {**harness.machine_info(), "load_avg_start": harness.load_average()},
        "clients": clients, "seconds": seconds, "workers": list(workers),
        "store_mode": "http" if chroma_url else "persistent", "chroma_url": chroma_url,
        "queries_available": len(queries),
        "query_policy": ("SciFact claims in turn (one list for the whole run, each service "
                         "continues where the last stopped), each request with its own "
                         "context_key (the result cache never serves one); the service's "
                         "query-vector cache is off (embedding.cache_size = 0)"),
        "service": ("python -m ragstream serve --workers N on 127.0.0.1, bearer token on; the "
                    "load generator a separate process (asyncio, raw HTTP/1.1 keep-alive, one "
                    "connection per client)"),
        "target": f"{clients} clients ≥ {TARGET_SPEEDUP:g}× one client's requests/s, zero errors",
        "knowledge_bases": {},
    }
    work = Path(tempfile.mkdtemp(prefix="ragstream-load-"))
    offset = 0
    try:
        config_dir = load_config_dir(work)
        stores: list[tuple[str, dict[str, str], dict[str, Any]]] = []
        if kb is not None:
            env = service_env(work / "kb", config_dir, chroma_url, "ragstream_load_kb")
            if progress:
                progress("ingest the knowledge base", 0, 1)
            built = {"source": str(kb), **ingest_folder(Path(kb), env)}
            if progress:
                progress("ingest the knowledge base", 1, 1)
            stores.append(("kb", env, built))
        for n in chunks:
            index_dir, manifest = synthetic_store(n, data, progress)
            built = {"source": f"synthetic ({manifest['data']}; {manifest['folder']}"
                               + (", reused" if manifest.get("reused") else "") + ")",
                     "documents": manifest["documents"], "chunks": manifest["chunks"],
                     "seconds": manifest["build_s"]}
            stores.append((size_label(n), service_env(index_dir, config_dir), built))
        for label, env, built in stores:
            entry: dict[str, Any] = {"store": built, "by_workers": {}}
            for w in workers:
                m = measure_service(env, w, queries, clients, seconds, work, label, offset, progress)
                offset = m["queries_used_to"]
                entry["by_workers"][str(w)] = m
            entry["pass"] = entry["by_workers"][str(max(workers))]["pass"]
            result["knowledge_bases"][label] = entry
        result["query_rounds"] = offset // len(queries)
    finally:
        if chroma_url:
            _drop_collections(chroma_url, ["ragstream_load_kb"])
        shutil.rmtree(work, ignore_errors=True)
    busy = meter.others_cores()
    result["machine"].update(load_avg_end=harness.load_average(), other_processes_cpu_cores=busy)
    result["pass"] = all(e["pass"] for e in result["knowledge_bases"].values())
    result["wall_s"] = round(time.perf_counter() - started, 1)
    return result


def _drop_collections(chroma_url: str, names: list[str]) -> None:
    """Delete this run's collections from the Chroma server (best effort)."""
    try:
        import chromadb

        host, _, port = chroma_url.split("://", 1)[-1].rstrip("/").partition(":")
        client = chromadb.HttpClient(host=host, port=int(port or 8000))
        for name in names:
            try:
                client.delete_collection(name)
            except Exception:  # already gone
                pass
    except Exception:  # the server went away: nothing to clean
        pass


# --------------------------------------------------------------------------- the report


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.1f}"


def _fmt(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) \
        else f"{value:,.{digits}f}"


def format_report(result: dict[str, Any]) -> str:
    """The result as text: per knowledge base and worker count, both phases, the speed-up,
    memory per worker and pass / MISS."""
    m = result["machine"]
    lines = [
        f"RAGstream load — {result['started_at']}, {result['wall_s']:,.1f} s",
        f"machine: {m.get('cpu_model', '?')}, {m.get('cpus', '?')} CPUs, Python "
        f"{m.get('python', '?')}; load average start {m.get('load_avg_start')}, end "
        f"{m.get('load_avg_end')}; other processes kept "
        f"{_fmt(m.get('other_processes_cpu_cores'), 2)} cores busy on average",
        f"service: {result['service']}",
        f"store: {result['store_mode']}" + (f" ({result['chroma_url']})" if result["chroma_url"]
                                            else " (embedded Chroma + tantivy)"),
        f"queries: {result['query_policy']} ({result['queries_available']:,} claims, "
        f"{result.get('query_rounds', 0)} full round(s))",
        f"target: {result['target']}",
    ]
    for label, e in result["knowledge_bases"].items():
        st = e["store"]
        lines += ["", f"{label}: {st['source']}: {st.get('documents')} documents, "
                      f"{st.get('chunks')} chunks, built in {_fmt(st.get('seconds'))} s"]
        for w, c in e["by_workers"].items():
            rss = ", ".join(f"{pid}: {v['VmRSS'] / 1024:,.0f} MiB (peak {v['VmHWM'] / 1024:,.0f})"
                            for pid, v in c["memory_kib"].items() if v)
            lines.append(f"  --workers {w} (started in {_fmt(c['start_s'])} s; RSS {rss}"
                         + (f"; supervisor {c['supervisor_memory_kib']['VmRSS'] / 1024:,.0f} MiB"
                            if c.get("supervisor_memory_kib") else "") + ")")
            for phase in ("single", "many"):
                p = c[phase]
                lines.append(
                    f"    {p['clients']} client{'s' if p['clients'] != 1 else ''}: "
                    f"{p['requests']:,} requests in {p['wall_s']:.1f} s = {_fmt(p['rps'], 1)} "
                    f"requests/s; p50 {_ms(p['p50_ms'])} ms, p95 {_ms(p['p95_ms'])} ms, p99 "
                    f"{_ms(p['p99_ms'])} ms, max {_ms(p['max_ms'])} ms; errors {p['errors']}"
                    + (f" ({', '.join(f'{k} × {v}' for k, v in p['error_kinds'].items())})"
                       if p["errors"] else "")
                    + f"; cores busy: service {_fmt(p.get('service_cores'), 2)}, generator "
                      f"{_fmt(p['generator_cores'], 2)}; by worker "
                    + ", ".join(f"{pid} {n}" for pid, n in p["by_worker"].items())
                    + (f"; {p['cached']} served from cache" if p["cached"] else ""))
                for sample in p["error_samples"]:
                    lines.append(f"      error: {sample}")
            lines.append(f"    [{'pass' if c['pass'] else 'MISS'}] {result['clients']} clients / 1 "
                         f"client = {_fmt(c['speedup'], 2)}× (target ≥ {TARGET_SPEEDUP:g}×), "
                         f"errors {c['errors']}")
    lines += ["", f"[{'pass' if result['pass'] else 'MISS'}] with --workers "
                  f"{max(result['workers'])}" + "".join(
                      f"; {label}: {e['by_workers'][str(max(result['workers']))]['speedup']}×"
                      for label, e in result["knowledge_bases"].items())]
    return "\n".join(lines)


# --------------------------------------------------------------------------- command line


def _ints(text: str) -> tuple[int, ...]:
    out = []
    for part in text.split(","):
        part = part.strip().lower()
        if part:
            out.append(int(float(part[:-1]) * 1000) if part.endswith("k") else int(part))
    return tuple(out)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m ragstream.measure.load``: every option of ``run_load``; ``--generate SPEC``
    is one phase of the load generator (used by ``run_generator``)."""
    parser = argparse.ArgumentParser(prog="python -m ragstream.measure.load", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--generate", metavar="SPEC", help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=_ints, default=DEFAULT_WORKERS,
                        help="worker counts to compare, e.g. 1,2 (default 1,2)")
    parser.add_argument("--clients", type=int, default=DEFAULT_CLIENTS)
    parser.add_argument("--seconds", type=float, default=DEFAULT_SECONDS)
    parser.add_argument("--chunks", type=_ints, default=DEFAULT_CHUNKS,
                        help="synthetic store sizes, e.g. 10k,100k (default: none)")
    parser.add_argument("--kb", default=str(BUNDLED_KB),
                        help="the documents folder to ingest and serve; 'none' for none")
    parser.add_argument("--data", default=None, help="the SciFact folder (queries, texts)")
    parser.add_argument("--chroma-url", default=None)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--out", default=None, help="also write the JSON result here")
    args = parser.parse_args(argv)
    if args.generate:
        print(json.dumps(generate(json.loads(Path(args.generate).read_text(encoding="utf-8")))))
        return 0

    def progress(phase: str, done: int, total: int) -> None:
        if done >= total:
            print(f"  {phase}: done", file=sys.stderr, flush=True)

    result = run_load(args.chunks, args.clients, args.seconds, args.chroma_url,
                      Path(args.data) if args.data else None, progress, workers=args.workers,
                      kb=None if args.kb.lower() == "none" else Path(args.kb))
    text = json.dumps(result, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    print(text if args.json else format_report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
