"""What every measuring command shares: where SciFact and the bundled knowledge base are,
reading SciFact, a knowledge base copied or written for a run, the config and environment a
bench's engine runs in, percentiles and their format, and the machine's figures (CPU time,
resident memory, load). ``bench``, ``bench --scale`` and ``load`` import it; it imports none
of them."""

from __future__ import annotations

import json
import math
import os
import platform
import resource
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ragstream.common.config import PROJECT_ROOT, AppConfig, load_config

Progress = Callable[[str, int, int], None]  # (phase, done, total), like the eval command's

SCIFACT_DIR = Path(os.environ.get("RAGSTREAM_BENCH_SCIFACT",
                                  Path(__file__).resolve().parents[3] / "shared" / "data" / "scifact"))
KB_DIR = PROJECT_ROOT / "data" / "kb"


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100), linear interpolation between closest ranks."""
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if values else math.nan


def summary(values_ms: list[float]) -> dict[str, Any]:
    """Count, p50, p95 and max of a list of millisecond timings, rounded to 0.01 ms."""
    return {"n": len(values_ms), "p50_ms": round(percentile(values_ms, 50), 2),
            "p95_ms": round(percentile(values_ms, 95), 2),
            "max_ms": round(max(values_ms), 2) if values_ms else math.nan}


def fmt(value: Any, digits: int = 1) -> str:
    """How the report prints a number (the tests look figures up with the same function)."""
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if math.isnan(value):
            return "n/a"
        return f"{value:,.{digits}f}"
    return str(value)


def peak_rss_mb() -> float:
    """This process's peak resident memory: ``VmHWM`` (the high-water mark of its own address
    space), else ``ru_maxrss``, which on Linux a process started by ``exec`` inherits from its
    parent, so a small child would report its parent's peak."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    except (OSError, ValueError, IndexError):  # pragma: no cover - not Linux
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def current_rss_mb() -> float:
    """This process's current resident memory in MB, from /proc/self/statm (NaN elsewhere)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):  # pragma: no cover - not Linux
        return math.nan


class CpuMeter:
    """Busy CPU time of the whole machine (/proc/stat) minus this process's and its
    children's: how many cores other processes kept busy while the bench ran."""

    def __init__(self):
        self.hz = os.sysconf("SC_CLK_TCK")
        self.start = self._sample()

    def _sample(self) -> tuple[float, float, float]:
        try:
            fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
            busy = (sum(fields[:8]) - fields[3] - fields[4]) / self.hz  # minus idle, iowait
        except (OSError, ValueError, IndexError):  # pragma: no cover - not Linux
            busy = math.nan
        own = sum(getattr(resource.getrusage(who), a) for who in
                  (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN) for a in ("ru_utime", "ru_stime"))
        return time.perf_counter(), busy, own

    def others_cores(self) -> float:
        """Cores other processes kept busy on average since the meter started."""
        t1, busy1, own1 = self._sample()
        t0, busy0, own0 = self.start
        wall = t1 - t0
        return round(max(0.0, (busy1 - busy0) - (own1 - own0)) / wall, 2) if wall > 0 else math.nan


def machine_info() -> dict[str, Any]:
    """CPU count, Python, platform, NumPy version, and (on Linux) CPU model and memory."""
    info: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "numpy": np.__version__,
    }
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu_model"] = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                info["memory_gb"] = round(int(line.split()[1]) / 2**20, 1)
                break
    except OSError:  # pragma: no cover - not Linux
        pass
    return info


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages, rounded (NaN when unavailable)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # pragma: no cover
        return [math.nan] * 3


# --------------------------------------------------------------------------- data


@dataclass
class Abstract:
    """One SciFact abstract: id, title and text."""

    id: str
    title: str
    text: str


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSON-lines file, skipping blank lines."""
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@dataclass
class SciFact:
    """The SciFact corpus, the chosen claims and the doc ids judged relevant to them."""

    docs: list[Abstract]
    claims: list[str]  # judged claims, file order
    relevant: list[str] = field(default_factory=list)  # doc ids relevant to those claims


def load_scifact(n_claims: int, folder: Path = SCIFACT_DIR) -> SciFact:
    """Load the BEIR SciFact corpus and the first ``n_claims`` judged claims with their relevant doc ids."""
    from ragstream.common.errors import EvalDataError

    if not (folder / "corpus.jsonl").is_file() or not (folder / "queries.jsonl").is_file():
        raise EvalDataError(f"{folder} has no corpus.jsonl / queries.jsonl (BEIR SciFact); set "
                            f"RAGSTREAM_BENCH_SCIFACT to the folder.")
    docs = [Abstract(str(d["_id"]), d.get("title", "") or "", d.get("text", "") or "")
            for d in read_jsonl(folder / "corpus.jsonl")]
    queries = read_jsonl(folder / "queries.jsonl")
    qrels: dict[str, list[str]] = {}
    for path in sorted((folder / "qrels").glob("*.tsv")):
        for line in path.read_text(encoding="utf-8").splitlines()[1:]:
            parts = line.split("\t")
            if len(parts) >= 3 and parts[2].strip() not in ("", "0"):
                qrels.setdefault(parts[0], []).append(parts[1])
    judged = [q for q in queries if str(q["_id"]) in qrels] or queries
    chosen = judged[:n_claims]
    relevant = [d for q in chosen for d in qrels.get(str(q["_id"]), [])]
    return SciFact(docs=docs, claims=[q["text"] for q in chosen], relevant=relevant)


def copy_kb(target: Path, files: tuple[str, ...] = ()) -> Path:
    """The bundled KB (or only ``files`` of it) copied to ``target``."""
    if files:
        target.mkdir(parents=True)
        for name in files:
            shutil.copy2(KB_DIR / name, target / name)
    else:
        shutil.copytree(KB_DIR, target)
    return target


def write_corpus(target: Path, scifact: SciFact, n_docs: int, kb_files: tuple[str, ...] = ()) -> int:
    """The bundled KB (copied to ``target/kb``) and ``n_docs`` SciFact abstracts as Markdown
    (``target/scifact/<id>.md``): the judged claims' abstracts first, then file order."""
    copy_kb(target / "kb", kb_files)
    by_id = {d.id: d for d in scifact.docs}
    picked: list[Abstract] = []
    seen: set[str] = set()
    for doc_id in [*scifact.relevant, *by_id]:
        if len(picked) >= n_docs:
            break
        if doc_id in by_id and doc_id not in seen:
            seen.add(doc_id)
            picked.append(by_id[doc_id])
    (target / "scifact").mkdir()
    for d in picked:
        (target / "scifact" / f"{d.id}.md").write_text(f"# {d.title}\n\n{d.text}\n",
                                                       encoding="utf-8")
    return len(picked)


def bench_config(index_dir: Path) -> AppConfig:
    """The shipped config (no LLM, no environment overrides) with every writable path in
    ``index_dir``."""
    return load_config(env={"RAGSTREAM_INDEX_DIR": str(index_dir),
                            "RAGSTREAM_UPLOADS_DIR": str(index_dir / "uploads")})


# --------------------------------------------------------------------------- 1. ingestion


def bench_env(index_dir: Path) -> dict[str, str]:
    """This process's environment without RAGSTREAM_* overrides, on ``index_dir``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGSTREAM_")}
    env.update(RAGSTREAM_INDEX_DIR=str(index_dir), RAGSTREAM_UPLOADS_DIR=str(index_dir / "uploads"))
    return env
