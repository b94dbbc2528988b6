"""Ingestion: a folder (or one file) of Markdown / plain text into the knowledge base.

For each file, in path order:

* unchanged (same content hash as stored) → skipped;
* new or changed → parsed into chunks (``chunker.parse_document``), every chunk embedded in
  windows, and the document's windows swapped in all-or-nothing
  (``ChromaStore.replace_document`` rolls back on any write failure);
* unreadable (not UTF-8) or failing → counted as failed with the reason; the run goes on and
  the stored version, if any, stays.

With ``prune`` (the default for a folder), documents previously ingested from the same folder
whose files are gone are removed. The keyword index is rebuilt afterwards. Document ids are
``<folder name>/<path inside the folder>``.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import time
from pathlib import Path
from typing import Callable

import numpy as np
from pydantic import BaseModel, Field

from ragstream.backends.vector_store import WindowRecord
from ragstream.config import AppConfig
from ragstream.errors import IngestError, RagstreamError
from ragstream.ingest.chunker import parse_document

Progress = Callable[[int, int, str], None]


class IngestReport(BaseModel):
    root: str
    files_seen: int = 0
    processed: int = 0
    skipped: int = 0
    failed: int = 0
    deleted: int = 0
    chunks_written: int = 0
    windows_written: int = 0
    errors: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    duration_s: float = 0.0

    def summary(self) -> str:
        return (f"{self.processed} processed, {self.skipped} skipped (unchanged), "
                f"{self.failed} failed, {self.deleted} deleted; {self.chunks_written} chunks in "
                f"{self.windows_written} embedding windows written in {self.duration_s:.1f} s")


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def list_files(root: Path, extensions: list[str]) -> list[Path]:
    exts = {e.lower() for e in extensions}
    return sorted(
        p for p in root.rglob("*")
        if p.is_file() and p.suffix.lower() in exts
        and not any(part.startswith(".") for part in p.relative_to(root).parts)
    )


def embed_chunks(chunks, embedder) -> list[WindowRecord]:
    """Every chunk's windows, embedded with the chunk's heading path in front."""
    plan = []
    for chunk in chunks:
        spans = embedder.windows(chunk.text)
        context = " > ".join(chunk.heading_path)
        for w, (a, b) in enumerate(spans):
            window_text = chunk.text[a:b].strip()
            plan.append((chunk, w, len(spans), a, b,
                         f"{context}\n{window_text}" if context else window_text))
    vectors = embedder.embed([p[5] for p in plan]) if plan else np.zeros((0, 0))
    return [WindowRecord(chunk=c, window=w, n_windows=n, start=a, end=b, vector=v)
            for (c, w, n, a, b, _), v in zip(plan, vectors)]


def ingest_path(path: str | Path, cfg: AppConfig, services, prune: bool | None = None,
                progress: Progress | None = None) -> IngestReport:
    started = time.perf_counter()
    target = Path(path).expanduser().resolve()
    if not target.exists():
        raise IngestError(f"{target} does not exist. Give a folder of .md/.txt files or one file.")
    exts = cfg.settings.chunking.extensions
    if target.is_file():
        if target.suffix.lower() not in {e.lower() for e in exts}:
            raise IngestError(f"{target.name} is not one of the ingestible types ({', '.join(exts)}).")
        root, files = target.parent, [target]
        prune = False if prune is None else prune
    else:
        root, files = target, list_files(target, exts)
        prune = True if prune is None else prune
    report = IngestReport(root=str(root), files_seen=len(files))
    store = services.store
    stored = store.documents()
    seen: set[str] = set()
    now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat()

    for i, file in enumerate(files):
        doc_id = f"{root.name}/{file.relative_to(root).as_posix()}"
        seen.add(doc_id)
        if progress:
            progress(i, len(files), doc_id)
        try:
            text = file.read_bytes().decode("utf-8")
        except UnicodeDecodeError as err:
            report.failed += 1
            report.errors.append(f"{doc_id}: not UTF-8 text ({err.reason} at byte {err.start}); "
                                 f"save the file as UTF-8 and ingest again")
            continue
        except OSError as err:
            report.failed += 1
            report.errors.append(f"{doc_id}: cannot be read ({err.strerror})")
            continue
        digest = content_hash(text)
        if doc_id in stored and stored[doc_id].doc_hash == digest:
            report.skipped += 1
            continue
        try:
            mtime = dt.date.fromtimestamp(file.stat().st_mtime).isoformat()
            parsed = parse_document(text, doc_id, cfg.settings.chunking, mtime)
            report.warnings.extend(f"{doc_id}: {w}" for w in parsed.warnings)
            if not parsed.chunks:  # the chunker's warnings already say why
                if doc_id in stored:
                    store.delete_document(doc_id)
                    report.deleted += 1
                continue
            records = embed_chunks(parsed.chunks, services.embedder)
            store.replace_document(doc_id, records, digest, now, str(root))
        except RagstreamError as err:
            report.failed += 1
            report.errors.append(f"{doc_id}: {err}")
            continue
        except Exception as err:  # noqa: BLE001 - one bad file must not stop the run
            report.failed += 1
            report.errors.append(f"{doc_id}: {type(err).__name__}: {err}")
            continue
        report.processed += 1
        report.chunks_written += len(parsed.chunks)
        report.windows_written += len(records)

    if prune:
        for doc_id, doc in stored.items():
            if doc.root == str(root) and doc_id not in seen:
                store.delete_document(doc_id)
                report.deleted += 1
    if progress:
        progress(len(files), len(files), "")
    services.keyword()  # rebuild the BM25 index now, not on the first query
    report.duration_s = round(time.perf_counter() - started, 3)
    return report
