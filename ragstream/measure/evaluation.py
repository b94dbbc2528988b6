"""``python -m ragstream eval``: retrieval quality and latency on a BEIR-format data set.

1. **Data.** ``corpus.jsonl`` (``_id``, ``title``, ``text``), ``queries.jsonl`` (``_id``,
   ``text``) and ``qrels/<split>.tsv`` (``query-id``, ``corpus-id``, ``score``). Queries
   without a relevant document are left out.
2. **Index.** One chunk per corpus document (id = the corpus ``_id``, heading path = its
   title), embedded and written by the app's own ingestion code (``encode_chunks``,
   ``ChromaStore.replace_documents``) into a collection of its own under
   ``<index_dir>/eval/<data set>/``. A manifest records a fingerprint of the corpus and of the
   embedding settings; while both match the stored index, it is reused as it is.
3. **Systems**, every query sent through the same code the app runs:
   ``bm25``    BM25 over the whole corpus (the Retrieval stage's keyword signal: LogAvgExp
               over the query pieces), top 100;
   ``dense``   dense search over the whole corpus (best-window cosine, LogAvgExp), top 100;
   ``hybrid``  the Retrieval stage (A0 → A2 → Retrieval through the ``Engine``);
   ``hybrid+rerank:<backend>``  then the ReRanker stage (its top N2, then the rest of the
               hybrid list), for each reranker backend that can run.
   The query-embedding cache is emptied before every timed call, so each system pays for its
   own query encoding.
4. **Metrics** (``ragstream.measure.metrics``, BEIR's definitions): nDCG@10, Recall@100, MRR@10, P@5,
   and the median and p95 latency per query; a paired bootstrap interval of the per-query
   nDCG@10 difference for rerank vs hybrid.
"""

from __future__ import annotations

import csv
import datetime as dt
import hashlib
import json
import os
import platform
import shutil
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ragstream.common.config import AppConfig
from ragstream.common.errors import EvalDataError
from ragstream.measure.metrics import NDCG_K, mean_metrics, paired_comparison, query_metrics
from ragstream.state.super_prompt import Chunk, View

Progress = Callable[[str, int, int], None]  # (phase, done, total)

MANIFEST = "eval_manifest.json"
TOP_K = 100  # rankings are cut here (Recall@100 is the deepest metric)
INDEX_BATCH_DOCS = 512
BOOTSTRAP_RESAMPLES = 2000
METRIC_KEYS = {"ndcg@10": "nDCG@10", "recall@100": "Recall@100", "mrr@10": "MRR@10", "p@5": "P@5"}


@dataclass(frozen=True)
class Doc:
    """One corpus document of a BEIR data set: id, title and text."""

    id: str
    title: str
    text: str

    @property
    def content_hash(self) -> str:
        """SHA-256 of the title and text."""
        return hashlib.sha256(f"{self.title}\0{self.text}".encode()).hexdigest()


@dataclass(frozen=True)
class Query:
    """One BEIR query: id and text."""

    id: str
    text: str


# --------------------------------------------------------------------------- data


def _jsonl(path: Path) -> list[dict[str, Any]]:
    out = []
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            if line.strip():
                try:
                    out.append(json.loads(line))
                except ValueError as err:
                    raise EvalDataError(f"{path}, line {n}: not JSON ({err}).") from err
    return out


def load_beir(folder: str | Path, split: str) -> tuple[list[Doc], list[Query], dict[str, dict[str, int]]]:
    """Read a BEIR folder: corpus, queries and ``qrels/<split>.tsv``; raise EvalDataError when malformed."""
    folder = Path(folder).expanduser()
    files = {"corpus": folder / "corpus.jsonl", "queries": folder / "queries.jsonl",
             "qrels": folder / "qrels" / f"{split}.tsv"}
    for name, path in files.items():
        if not path.is_file():
            hint = (f"; splits here: {', '.join(sorted(p.stem for p in (folder / 'qrels').glob('*.tsv')))}"
                    if name == "qrels" and (folder / "qrels").is_dir() else "")
            raise EvalDataError(f"{path} is missing: --data must be a BEIR-format folder with "
                                f"corpus.jsonl, queries.jsonl and qrels/<split>.tsv{hint}.")
    try:
        docs = [Doc(str(d["_id"]), d.get("title", "") or "", d.get("text", "") or "")
                for d in _jsonl(files["corpus"])]
        queries = [Query(str(q["_id"]), q["text"]) for q in _jsonl(files["queries"])]
    except KeyError as err:
        raise EvalDataError(f"a record in {folder} lacks the field {err}.") from err
    qrels: dict[str, dict[str, int]] = defaultdict(dict)
    with files["qrels"].open(encoding="utf-8", newline="") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            qrels[row["query-id"]][row["corpus-id"]] = int(row["score"])
    return docs, queries, dict(qrels)


def select_queries(queries: Sequence[Query], qrels: dict[str, dict[str, int]],
                   limit: int | None = None, subset: str = "all") -> list[Query]:
    """Queries with at least one relevant document, in file order; ``subset`` "even" or
    "odd" keeps those with an even or odd numeric id (a split for tuning and held-out
    reporting); then the first ``limit``."""
    judged = [q for q in queries if any(g > 0 for g in qrels.get(q.id, {}).values())]
    if subset in ("even", "odd"):
        judged = [q for q in judged if q.id.isdigit() and int(q.id) % 2 == (subset == "odd")]
    return judged if limit is None else judged[:limit]


# --------------------------------------------------------------------------- index


def eval_config(cfg: AppConfig, data_dir: Path) -> AppConfig:
    """The app's config, with its own index folder and collection for this data set."""
    name = "".join(ch if ch.isalnum() else "_" for ch in data_dir.resolve().name) or "beir"
    return cfg.with_overrides({
        "settings.paths.index_dir": str(cfg.index_dir / "eval" / name),
        "settings.vector_store.collection": f"eval_{name}"[:60],
    })


def corpus_fingerprint(docs: Sequence[Doc], cfg: AppConfig) -> str:
    """Hash of the embedding settings, index format and every doc's id and content: the eval index's key."""
    from ragstream.backends.embedder_choice import resolve_backend

    e = cfg.settings.embedding
    settings = {**e.model_dump(), "backend": resolve_backend(e)}  # "auto" as what it picks
    h = hashlib.sha256(json.dumps(settings, sort_keys=True).encode())
    from ragstream.backends.doc_index import FORMAT_VERSION

    h.update(f"format {FORMAT_VERSION}\n".encode())
    for d in sorted(docs, key=lambda d: d.id):
        h.update(f"{d.id}\0{d.content_hash}\n".encode())
    return h.hexdigest()


def make_chunk(doc: Doc) -> Chunk:
    """The chunk a corpus document is indexed as: the whole text, titled and headed by the doc title."""
    return Chunk(id=doc.id, doc_id=doc.id, source=f"corpus/{doc.id}", title=doc.title,
                 heading_path=(doc.title,) if doc.title else (), section=doc.title,
                 text=doc.text, word_count=len(doc.text.split()), content_hash=doc.content_hash)


def sync_index(docs: Sequence[Doc], cfg: AppConfig, services,
               progress: Progress | None = None) -> dict[str, Any]:
    """Make the eval collection hold exactly ``docs``: reuse it when nothing changed, else
    rebuild it whole. Returns the index facts (and the build time when it was built)."""
    from ragstream.backends.doc_index import encode_chunks

    store = services.store
    manifest_path = cfg.index_dir / MANIFEST
    fingerprint = corpus_fingerprint(docs, cfg)
    manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {}
    if (manifest.get("corpus_fingerprint") == fingerprint
            and manifest.get("store_fingerprint") == store.fingerprint()):
        services.index()
        return {**manifest, "reused": True}

    # anything else: start from an empty collection (a partial or outdated one is no base)
    store.close()
    shutil.rmtree(cfg.index_dir, ignore_errors=True)
    cfg.index_dir.mkdir(parents=True, exist_ok=True)
    services.embedder.embed(["warm up"])  # model loading is not indexing time
    started = time.perf_counter()
    now = dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat()
    windows = sentences = 0
    for i in range(0, len(docs), INDEX_BATCH_DOCS):
        batch = docs[i:i + INDEX_BATCH_DOCS]
        records = encode_chunks([make_chunk(d) for d in batch], services.embedder)
        by_doc: dict[str, list] = defaultdict(list)
        for rec in records:
            by_doc[rec.chunk.doc_id].append(rec)
            sentences += len(rec.sentence_spans)
        store.replace_documents([(d.id, by_doc[d.id], d.content_hash) for d in batch], now,
                                "eval")
        windows += len(records)
        if progress:
            progress("index", min(i + INDEX_BATCH_DOCS, len(docs)), len(docs))
    embed_s = time.perf_counter() - started
    services.index()  # the in-memory index and its snapshot, counted as indexing time
    manifest = {
        "corpus_fingerprint": fingerprint,
        "store_fingerprint": store.fingerprint(),
        "documents": len(docs),
        "words": sum(len(f"{d.title} {d.text}".split()) for d in docs),
        "windows": windows,
        "sentences": sentences,
        "index_s": round(time.perf_counter() - started, 2),
        "embed_and_write_s": round(embed_s, 2),
        "embedding": cfg.settings.embedding.model_dump(),
        "built_at": now,
    }
    manifest_path.write_text(json.dumps(manifest, indent=2))
    return {**manifest, "reused": False}


# --------------------------------------------------------------------------- systems


def run_queries(queries: Sequence[Query], cfg: AppConfig, services, backends: Sequence[str],
                progress: Progress | None = None) -> tuple[dict[str, dict[str, list[str]]],
                                                           dict[str, list[float]]]:
    """Rankings (system -> query id -> doc ids) and latencies (system -> ms per query)."""
    from ragstream.stages.retrieval import single_ranking, split_query
    from ragstream.state.render import build_query
    from ragstream.workbench.engine import Engine

    rankings: dict[str, dict[str, list[str]]] = defaultdict(dict)
    latency: dict[str, list[float]] = defaultdict(list)
    rs, limits = cfg.settings.retrieval, cfg.limits
    engine = Engine(cfg, services)
    rerankers = {b: Engine(cfg, _reranker_services(services, cfg, b)) for b in backends}
    for n, q in enumerate(queries, start=1):
        sp = engine.run(q.text, until="A2_PromptShaper")
        pieces = split_query(build_query(sp.body), limits.N0_QUERY_PIECES, rs.min_piece_tokens)
        for system in ("dense", "bm25"):
            services.embedder.clear_cache()
            t = time.perf_counter()
            rankings[system][q.id] = single_ranking(services, pieces, system, TOP_K, rs.tau)
            latency[system].append((time.perf_counter() - t) * 1000)

        services.embedder.clear_cache()
        t = time.perf_counter()
        sp = engine.run_stage(sp, "Retrieval")
        hybrid_ms = (time.perf_counter() - t) * 1000
        hybrid = sp.kept_ids(View.RETRIEVAL)
        rankings["hybrid"][q.id] = hybrid[:TOP_K]
        latency["hybrid"].append(hybrid_ms)
        for backend, rr_engine in rerankers.items():
            services.embedder.clear_cache()
            t = time.perf_counter()
            out = rr_engine.run_stage(sp, "ReRanker")
            ms = (time.perf_counter() - t) * 1000
            head = [r.chunk_id for r in out.view(View.RERANKED)]
            rest = [c for c in hybrid if c not in set(head)]
            name = f"hybrid+rerank:{backend}"
            rankings[name][q.id] = (head + rest)[:TOP_K]
            latency[name].append(hybrid_ms + ms)
        if progress:
            progress("queries", n, len(queries))
    return dict(rankings), dict(latency)


def _reranker_services(services, cfg: AppConfig, backend: str):
    """``services`` with the reranker of ``backend`` (the configured one when it matches)."""
    from dataclasses import replace

    from ragstream.backends.reranker import load_reranker

    if services.reranker.backend == backend:
        return services
    settings = cfg.settings.reranker.model_copy(update={"backend": backend})
    other = replace(services)
    other._reranker = load_reranker(settings, other)
    return other


def available_backends(cfg: AppConfig, services) -> list[str]:
    """The reranker backends that can run here: offline always, the cross-encoder when its
    model loads."""
    backends = ["offline"]
    if services.reranker.backend == "cross-encoder":
        backends.insert(0, "cross-encoder")
    return backends


# --------------------------------------------------------------------------- the report


def _pct(values: Sequence[float], p: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=np.float64), p)) if values else 0.0


def summarize(rankings, latency, qrels, cfg: AppConfig, default: str) -> dict[str, Any]:
    """Per-system metrics and latency percentiles, plus bootstrap nDCG@10 comparisons against hybrid."""
    systems = []
    per_query_ndcg: dict[str, list[float]] = {}
    for name, by_query in rankings.items():
        per_query = [query_metrics(by_query[q], qrels[q]) for q in by_query]
        m = mean_metrics(per_query)
        per_query_ndcg[name] = [pq[f"nDCG@{NDCG_K}"] for pq in per_query]
        systems.append({
            "name": name,
            **{key: round(m[label], 4) for key, label in METRIC_KEYS.items()},
            "p50_ms": round(_pct(latency[name], 50), 2),
            "p95_ms": round(_pct(latency[name], 95), 2),
            "queries": len(by_query),
        })
    comparisons = []
    for name in per_query_ndcg:
        if name.startswith("hybrid+rerank"):
            c = paired_comparison(per_query_ndcg["hybrid"], per_query_ndcg[name],
                                  BOOTSTRAP_RESAMPLES, 0, 0.95)
            comparisons.append({"baseline": "hybrid", "system": name, "metric": "ndcg@10",
                                **{k: (round(v, 4) if isinstance(v, float) else v)
                                   for k, v in c.items()}})
    return {"systems": systems, "default": default, "comparisons": comparisons}


def machine() -> dict[str, Any]:
    """Core count, Python version, platform and the 1-minute load average."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return {"cores": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform(), "load_avg_1m": round(load[0], 2)}


def evaluate(data: str | Path, split: str, cfg: AppConfig, services=None,
             limit: int | None = None, subset: str = "all",
             progress: Progress | None = None) -> dict[str, Any]:
    """The whole evaluation: index (or reuse), run every system, summarise."""
    from ragstream.backends.services import build_services
    from ragstream.workbench.engine import settle_memory

    data = Path(data).expanduser()
    docs, queries, qrels = load_beir(data, split)
    ecfg = eval_config(cfg, data)
    services = services or build_services(ecfg)
    load_start = machine()["load_avg_1m"]
    index_info = sync_index(docs, ecfg, services, progress)
    chosen = select_queries(queries, qrels, limit, subset)
    if not chosen:
        raise EvalDataError(f"no query of split {split!r} ({subset}) has a relevant document.")
    backends = available_backends(ecfg, services)
    services.embedder.embed(["warm up"])
    settle_memory()  # as a warm service does
    rankings, latency = run_queries(chosen, ecfg, services, backends, progress)
    default = f"hybrid+rerank:{services.reranker.backend}"
    result = summarize(rankings, latency, qrels, ecfg, default)
    return {
        "data": str(data), "split": split, "subset": subset, "queries": len(chosen),
        "documents": len(docs),
        "index": {k: index_info.get(k) for k in ("documents", "words", "windows", "sentences",
                                                 "index_s", "reused", "built_at")},
        "embedding": {"model": ecfg.settings.embedding.model,
                      "backend": getattr(services.embedder, "backend", "")},
        "config": {"N0": ecfg.limits.N0_QUERY_PIECES, "N1": ecfg.limits.N1_RETR_MAX_CANDIDATES,
                   "N2": ecfg.limits.N2_RERANK_TOP_K, "tau": ecfg.settings.retrieval.tau,
                   "rrf_k": ecfg.settings.retrieval.rrf_k},
        **result,
        "machine": {**machine(), "load_avg_1m_start": load_start},
        "measured_at": dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat(),
    }


def format_table(result: dict[str, Any]) -> str:
    """The evaluation result as a plain-text table with comparisons and machine facts."""
    head = (f"{result['data']} · split {result['split']} ({result['subset']}) · "
            f"{result['queries']} queries · {result['documents']} documents")
    idx = result["index"]
    built = ("reused" if idx.get("reused") else
             f"built in {idx.get('index_s')} s") + f", {idx.get('windows')} windows"
    lines = [head, f"index: {built} · embedding {result['embedding']['model']} "
                   f"({result['embedding']['backend']})", ""]
    lines.append(f"{'system':<28} {'nDCG@10':>8} {'R@100':>7} {'MRR@10':>7} {'P@5':>6} "
                 f"{'p50 ms':>8} {'p95 ms':>8}")
    for s in result["systems"]:
        mark = " *" if s["name"] == result["default"] else ""
        lines.append(f"{s['name'] + mark:<28} {s['ndcg@10']:>8.4f} {s['recall@100']:>7.4f} "
                     f"{s['mrr@10']:>7.4f} {s['p@5']:>6.4f} {s['p50_ms']:>8.1f} {s['p95_ms']:>8.1f}")
    lines.append("* the app's default system")
    for c in result["comparisons"]:
        lines.append(f"{c['system']} vs {c['baseline']}: nDCG@10 {c['mean_diff']:+.4f} "
                     f"[95% CI {c['ci_low']:+.4f}, {c['ci_high']:+.4f}], better/equal/worse "
                     f"{c['better']}/{c['equal']}/{c['worse']}")
    m = result["machine"]
    lines.append(f"machine: {m['cores']} cores, Python {m['python']}, load {m['load_avg_1m_start']}"
                 f" → {m['load_avg_1m']}")
    return "\n".join(lines)
