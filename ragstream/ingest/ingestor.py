"""Ingestion: a folder (or one file) of Markdown / plain text into the knowledge base.

For each file, in path order:

* unchanged (same content hash as stored) → skipped;
* new or changed → parsed into chunks (``chunker.parse_document``); documents are embedded
  in batches of about ``chunking.ingest_batch_chunks`` chunks (windows and evidence
  sentences, one length-sorted encoder pass) and each batch is swapped in all-or-nothing
  (``ChromaStore.replace_documents`` rolls back on any write failure; a failed batch is
  retried document by document, so one bad document fails alone);
* unreadable (not UTF-8) or failing → counted as failed with the reason; the run goes on and
  the stored version, if any, stays.

With ``prune`` (the default for a folder), documents previously ingested from the same folder
whose files are gone are removed. The in-memory index (vectors, BM25) is rebuilt afterwards. Document ids are
``<folder name>/<path inside the folder>``.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, Field

from ragstream.backends.doc_index import WindowRecord, encode_chunks
from ragstream.config import AppConfig
from ragstream.errors import IngestError, RagstreamError
from ragstream.ingest.chunker import parse_document
from ragstream.super_prompt import Chunk

Progress = Callable[[int, int, str], None]


class IngestReport(BaseModel):
    """What one ingest did: file counts by outcome, chunks and windows written, errors, warnings, time."""

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
        """The report's counts and duration as one line of text."""
        return (f"{self.processed} processed, {self.skipped} skipped (unchanged), "
                f"{self.failed} failed, {self.deleted} deleted; {self.chunks_written} chunks in "
                f"{self.windows_written} embedding windows written in {self.duration_s:.1f} s")


def content_hash(text: str) -> str:
    """SHA-256 hex digest of ``text`` encoded as UTF-8."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def list_files(root: Path, extensions: list[str]) -> list[Path]:
    """Files under ``root`` with one of ``extensions`` (any case), skipping hidden paths; sorted."""
    exts = {e.lower() for e in extensions}
    return sorted(
        p for p in root.rglob("*")
        if p.is_file() and p.suffix.lower() in exts
        and not any(part.startswith(".") for part in p.relative_to(root).parts)
    )


def embed_chunks(chunks, embedder) -> list[WindowRecord]:
    """Every chunk's windows and evidence sentences, embedded (see ``encode_chunks``)."""
    return encode_chunks(chunks, embedder)


@dataclass
class _Pending:
    doc_id: str
    chunks: tuple[Chunk, ...]
    digest: str
    stored: bool  # an older version is in the store


def ingest_path(path: str | Path, cfg: AppConfig, services, prune: bool | None = None,
                progress: Progress | None = None) -> IngestReport:
    """Ingest a file or folder: skip unchanged files, chunk, embed and write the rest, optionally prune."""
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
    now = dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat()
    batch_chunks = cfg.settings.chunking.ingest_batch_chunks
    pending: list[_Pending] = []

    def write(batch: list[_Pending]) -> None:
        """Embed a batch of documents together (the encoder is fastest on big, length-sorted
        batches) and write them in one store call; if that fails, write them one by one so
        that one bad document fails alone."""
        try:
            records = embed_chunks([c for p in batch for c in p.chunks], services.embedder)
            by_doc: dict[str, list] = {p.doc_id: [] for p in batch}
            for rec in records:
                by_doc[rec.chunk.doc_id].append(rec)
            store.replace_documents([(p.doc_id, by_doc[p.doc_id], p.digest) for p in batch],
                                    now, str(root))
        except Exception as err:
            if len(batch) > 1:
                for p in batch:
                    write([p])
                return
            report.failed += 1
            msg = str(err) if isinstance(err, RagstreamError) else f"{type(err).__name__}: {err}"
            report.errors.append(f"{batch[0].doc_id}: {msg}")
            return
        for p in batch:
            report.processed += 1
            report.chunks_written += len(p.chunks)
            report.windows_written += len(by_doc[p.doc_id])

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
        except Exception as err:
            report.failed += 1
            msg = str(err) if isinstance(err, RagstreamError) else f"{type(err).__name__}: {err}"
            report.errors.append(f"{doc_id}: {msg}")
            continue
        report.warnings.extend(f"{doc_id}: {w}" for w in parsed.warnings)
        if not parsed.chunks:  # the chunker's warnings already say why
            if doc_id in stored:
                store.delete_document(doc_id)
                report.deleted += 1
            continue
        pending.append(_Pending(doc_id, parsed.chunks, digest, doc_id in stored))
        if sum(len(p.chunks) for p in pending) >= batch_chunks:
            write(pending)
            pending = []
    if pending:
        write(pending)

    if prune:
        for doc_id, doc in stored.items():
            if doc.root == str(root) and doc_id not in seen:
                store.delete_document(doc_id)
                report.deleted += 1
    if progress:
        progress(len(files), len(files), "")
    services.index()  # bring the in-memory index up to date now, not on the first query
    report.duration_s = round(time.perf_counter() - started, 3)
    return report
