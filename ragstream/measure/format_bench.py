"""``python -m ragstream bench --formats``: how fast each format converts, against ingestion.

    from ragstream.measure.format_bench import run_format_bench, format_formats_report
    print(format_formats_report(run_format_bench(rounds=5)))

The documents are the bundled knowledge base in every format ingestion converts
(``benchmarks/formats/kb-<format>/``, made by ``benchmarks/make_formats.py`` with pandoc and
Chromium). Per format: each file converted (``ragstream.knowledge.formats.convert``) ``rounds`` times, the
median of each round's total; ``words`` are the words of the Markdown written. Against it, the
same knowledge base as Markdown ingested whole (chunked, embedded, written to a real Chroma
in a temp folder; the encoder loaded before the clock starts): ``share`` is the part of a
format's ingestion that converting would take (convert / (convert + ingest)).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ragstream.common.config import PROJECT_ROOT
from ragstream.common.errors import RagstreamError
from ragstream.common.text import words
from ragstream.knowledge.formats import convert

FORMATS_DIR = PROJECT_ROOT / "benchmarks" / "formats"
FORMATS = ("pdf", "docx", "pptx", "html", "epub")


def _convert_all(files: list[tuple[str, bytes]]) -> tuple[float, int]:
    """Seconds to convert every (name, bytes) once, and the words of their Markdown."""
    started = time.perf_counter()
    converted = [convert(name, data) for name, data in files]
    elapsed = time.perf_counter() - started
    return elapsed, sum(len(words(c.markdown)) for c in converted)


def _ingest_markdown_s() -> tuple[float, int]:
    """Seconds to ingest the bundled Markdown knowledge base into a fresh temp index, encoder
    loaded first; and the words of its chunks."""
    from ragstream.measure.harness import bench_config
    from ragstream.workbench.engine import Engine

    with tempfile.TemporaryDirectory(prefix="ragstream-formats-") as tmp:
        engine = Engine(bench_config(Path(tmp)))
        engine.services.embedder.embed(["warm up the encoder"])
        started = time.perf_counter()
        report = engine.ingest(PROJECT_ROOT / "data" / "kb")
        elapsed = time.perf_counter() - started
        chunks = engine.services.store.all_chunks()
        if report.failed:
            raise RagstreamError(f"the bundled knowledge base did not ingest: {report.errors[:2]}")
        return elapsed, sum(c.word_count for c in chunks)


def run_format_bench(rounds: int = 5, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Words per second converting each format, and its share of that format's ingestion."""
    ingest_s, ingest_words = _ingest_markdown_s()
    result: dict[str, Any] = {"rounds": rounds, "ingest_markdown": {
        "seconds": round(ingest_s, 3), "words": ingest_words,
        "words_per_s": round(ingest_words / ingest_s)}, "formats": {}}
    for fmt in FORMATS:
        files = [(f.name, f.read_bytes()) for f in sorted((FORMATS_DIR / f"kb-{fmt}").glob(f"*.{fmt}"))]
        if not files:
            raise RagstreamError(f"no {fmt} files in {FORMATS_DIR}/kb-{fmt}: run "
                                 "`python benchmarks/make_formats.py`.")
        times, count = [], 0
        for _ in range(rounds):
            seconds, count = _convert_all(files)
            times.append(seconds)
        median = statistics.median(times)
        result["formats"][fmt] = {
            "files": len(files), "words": count, "seconds": round(median, 4),
            "words_per_s": round(count / median), "min_s": round(min(times), 4),
            "max_s": round(max(times), 4), "share_of_ingestion": round(median / (median + ingest_s), 3)}
        if progress:
            progress(f"{fmt}: {count / median:,.0f} words/s")
    return result


def format_formats_report(result: dict[str, Any]) -> str:
    """One line per format: files, words, median seconds, words/s, share of ingestion."""
    md = result["ingest_markdown"]
    lines = [f"Converting the bundled knowledge base per format ({result['rounds']} rounds, median); "
             f"ingesting it as Markdown: {md['seconds']:.2f} s, {md['words_per_s']:,} words/s",
             f"{'format':<8}{'files':>6}{'words':>9}{'median s':>10}{'words/s':>11}{'share':>8}"]
    for fmt, f in result["formats"].items():
        lines.append(f"{fmt:<8}{f['files']:>6}{f['words']:>9,}{f['seconds']:>10.3f}"
                     f"{f['words_per_s']:>11,}{f['share_of_ingestion']:>8.0%}")
    lines.append("share: converting / (converting + ingesting the same documents as Markdown)")
    return "\n".join(lines)
