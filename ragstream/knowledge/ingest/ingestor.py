"""Ingestion: a folder (or one file) of Markdown / plain text — and PDF, Word, PowerPoint,
HTML and EPUB files, converted to Markdown by ``ragstream.knowledge.formats`` — into the knowledge base.

For each file, in path order:

* unchanged (same content hash as stored) → skipped;
* new or changed → parsed into chunks (``chunker.parse_document``); documents are embedded
  in batches of about ``chunking.ingest_batch_chunks`` chunks (windows and evidence
  sentences, one length-sorted encoder pass) and each batch is swapped in all-or-nothing
  (``ChromaStore.replace_documents`` rolls back on any write failure; a failed batch is
  retried document by document, so one bad document fails alone);
* bad input → counted as failed with a typed reason (``<doc id>: <ErrorType>: what is wrong and
  what to do``); the run goes on and the stored version, if any, stays (it is not pruned):
  a file over ``ingestion.max_file_mb`` (``FileTooLargeError``, decided by ``stat`` before
  anything is read, so memory stays bounded), a binary file (``BinaryFileError``: NUL bytes or
  the signature of an image, PDF or archive), text that is not UTF-8 (``NotUTF8Error``);
* empty, front matter only, or only headings → a warning, nothing stored (an older stored
  version is removed: the document no longer has text).

A document id that was last written from another folder (two folders with the same name share
ids) or through the API is replaced with a warning; ids that differ only in letter case or
Unicode form are two documents, also with a warning.

With ``prune`` (the default for a folder), documents previously ingested from the same folder
whose files are gone are removed. The in-memory index (vectors, BM25) is rebuilt afterwards. Document ids are
``<folder name>/<path inside the folder>``.

Faults:

* One ingestion per index folder at a time: ``IngestLock`` (``fcntl.flock`` on
  ``<paths.index_dir>/ingest.lock``, which names the holder's PID) is held for the whole run.
  A second ingestion waits up to ``chunking.ingest_lock_wait_s`` (and says so in its report's warnings),
  then raises ``IngestLockedError``. The kernel drops the lock when its holder exits however it
  ends, SIGKILL included, so a killed ingestion never blocks the next one.
* An ingestion killed half-way (SIGKILL, power loss) leaves whole documents and at most some
  partial ones, which ``ChromaStore.documents`` lists without a hash: ingesting again rewrites
  those and skips the rest, and the result equals a clean ingest.
* A Chroma server that cannot be reached stops the run with ``VectorDBUnavailableError``
  (no file is counted as failed for it); ingesting again when it is back completes the run.

Watching and stopping: an ``IngestWatch`` (handed over, or made ambient for a thread with
``watching``, so an ingestion started through ``Engine.ingest`` or the page's upload is
watched too) shows how far the run is — files settled of the total, the file being read,
chunks written — and asks it to stop. A stop is obeyed between files: the documents already
read are written whole (each batch is all-or-nothing), nothing is pruned, the files not
reached are named in the warnings and the report says ``cancelled``. A watched run writes in
smaller batches (``WATCHED_BATCH_CHUNKS``) so that the count rises as the work is done.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import hashlib
import json
import os
import threading
import time
import unicodedata
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from pydantic import BaseModel, Field

from ragstream.backends.doc_index import WindowRecord, encode_chunks
from ragstream.backends.lock import (  # noqa: F401 (LOCK_FILE and IngestLock imported from here)
    LOCK_FILE,
    IngestLock,
    IngestStoppedWaitingError,
)
from ragstream.common.config import AppConfig, IngestionSettings
from ragstream.common.errors import (
    BinaryFileError,
    FileTooLargeError,
    IngestError,
    NotUTF8Error,
    RagstreamError,
    StoreUnreadableError,
    VectorDBUnavailableError,
    VectorStoreError,
    root_cause,
)
from ragstream.knowledge.formats import CONVERTED_SUFFIXES, CONVERTER, convert
from ragstream.knowledge.formats.markdown_out import signature_of
from ragstream.knowledge.ingest.chunker import NO_BODY_WARNING, content_hash, parse_document
from ragstream.state.super_prompt import Chunk

#: what is derived from a document's text at ingestion (its chunks, evidence sentences and
#: their spans):
#: part of the stored document hash, so a change here re-ingests every document once
ENCODING = "evidence-spans-3\0"

Progress = Callable[[int, int, str], None]

#: the batch size (chunks) of a watched ingestion: small enough that the files-done count
#: rises while the work is done and a stop waits for little, big enough for the encoder
WATCHED_BATCH_CHUNKS = 48

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
    #: stopped before every file was read (``IngestWatch.stop``); the files not reached are
    #: named in ``warnings``, and nothing was pruned
    cancelled: bool = False

    def summary(self) -> str:
        """The report's counts and duration as one line of text."""
        stopped = "cancelled: " if self.cancelled else ""
        return (f"{stopped}{self.processed} processed, {self.skipped} skipped (unchanged), "
                f"{self.failed} failed, {self.deleted} deleted; {self.chunks_written} chunks in "
                f"{self.windows_written} embedding windows written in {self.duration_s:.1f} s")


class IngestWatch:
    """A running ingestion as another thread sees it, and its stop button (see the module
    docstring). Written by the ingesting thread, read by any: plain counters, read whole."""

    def __init__(self) -> None:
        self.total = 0          # files in this run
        #: files settled without a write (unchanged, refused, empty), and files whose batch
        #: was written (or failed); each only grows, so their sum never goes back
        self.settled_unwritten = 0
        self.settled_written = 0
        self.current = ""       # the document id being read
        self.report: IngestReport | None = None  # the run's report, its counts rising
        #: how long a watched run waits for another ingestion (None: the configured wait)
        self.lock_wait_s: float | None = None
        self._stop = threading.Event()

    @property
    def done(self) -> int:
        """Files settled: written, skipped as unchanged, refused or found empty."""
        return self.settled_unwritten + self.settled_written

    @property
    def chunks_written(self) -> int:
        """Chunks written so far in this run."""
        return self.report.chunks_written if self.report is not None else 0

    def stop(self) -> None:
        """Ask the ingestion to stop before its next file."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        """True once ``stop`` was asked for."""
        return self._stop.is_set()


_WATCH: contextvars.ContextVar[IngestWatch | None] = contextvars.ContextVar("ingest_watch",
                                                                           default=None)


@contextlib.contextmanager
def watching(watch: IngestWatch) -> Iterator[IngestWatch]:
    """Within this block (in this thread) every ``ingest_path`` is watched by ``watch``."""
    token = _WATCH.set(watch)
    try:
        yield watch
    finally:
        _WATCH.reset(token)


def list_files(root: Path, extensions: list[str]) -> list[Path]:
    """Files under ``root`` with one of ``extensions`` (any case), skipping hidden paths and the
    asset folder a browser saves beside a web page (``page_files/`` next to ``page.html``: its
    frames and scripts are parts of that page, not documents); sorted."""
    exts = {e.lower() for e in extensions}
    return sorted(
        p for p in root.rglob("*")
        if p.is_file() and p.suffix.lower() in exts
        and not any(part.startswith(".") for part in p.relative_to(root).parts)
        and not _in_saved_page_assets(p, root)
    )


#: how browsers name the folder they save a page's assets in, beside ``X.html`` (by language)
SAVED_PAGE_FOLDERS = ("_files", "-files", "-dateien", "_fichiers", "_archivos")


def _in_saved_page_assets(path: Path, root: Path) -> bool:
    """``path`` lies in a folder ``X_files/`` (``X-Dateien/``…) beside ``X.html`` or ``X.htm``."""
    for folder in path.relative_to(root).parents:
        ending = next((e for e in SAVED_PAGE_FOLDERS if folder.name.lower().endswith(e)), None)
        if ending:
            stem = (root / folder).with_name(folder.name[: -len(ending)])
            if any(stem.with_name(stem.name + ext).is_file() for ext in (".html", ".htm")):
                return True
    return False


def embed_chunks(chunks, embedder) -> list[WindowRecord]:
    """Every chunk's windows and evidence sentences, embedded (see ``encode_chunks``)."""
    return encode_chunks(chunks, embedder)


@dataclass
class _Pending:
    doc_id: str
    chunks: tuple[Chunk, ...]
    digest: str
    stored: bool  # an older version is in the store


#: the metadata every document should declare (front matter, or ``RuleDocument.metadata``)
REQUIRED_METADATA = ("source", "doc_type", "last_update_date")
#: front matter keys that give the date (the chunker takes the first present)
DATE_KEYS = ("last_update_date", "date", "updated")
#: the ``root`` recorded for documents ingested through the API (not from a folder)
API_ROOT = "api"


def missing_metadata(declared: set[str] | frozenset[str]) -> list[str]:
    """The required metadata keys a document does not declare (any date key gives the date)."""
    has = set(declared) | ({"last_update_date"} if set(declared) & set(DATE_KEYS) else set())
    return [k for k in REQUIRED_METADATA if k not in has]


def invalid_document(doc_id: str, missing: list[str]) -> str:
    """The error line for a document skipped for missing metadata."""
    return (f"{doc_id}: InvalidDocumentError: missing required metadata {', '.join(missing)}; "
            f"add it to the document's front matter (or its metadata), or turn "
            f"ingestion.require_metadata off to derive defaults")


def derived_note(doc_ids: list[str]) -> str:
    """The warning that names the documents whose metadata was derived, not declared."""
    shown = ", ".join(doc_ids[:5]) + (f" and {len(doc_ids) - 5} more" if len(doc_ids) > 5 else "")
    return (f"{len(doc_ids)} document(s) do not declare source, doc_type and last_update_date "
            f"({shown}): derived instead (source = the file path, doc_type 'doc', the date from "
            f"the file's modification time). Set ingestion.require_metadata to refuse them.")


#: the first bytes of binary formats that end up renamed, or dropped, in a documents folder
#: byte-order marks of UTF-16 text (its ASCII letters come with NUL bytes)
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


def decode_text(data: bytes) -> str:
    """``data`` as UTF-8 text; ``BinaryFileError`` (NUL bytes, a binary format's signature) or
    ``NotUTF8Error`` (UTF-16, Latin-1 …) naming what is wrong and where."""
    if data.startswith(_UTF16_BOMS):
        raise NotUTF8Error("a UTF-16 byte-order mark", 0)
    if what := signature_of(data):
        raise BinaryFileError(f"it starts like {what}")
    nul = data.find(b"\0")
    if nul >= 0:
        raise BinaryFileError(f"a NUL byte at byte {nul}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise NotUTF8Error(err.reason, err.start) from None


def read_bytes(path: Path, settings: IngestionSettings) -> bytes:
    """The bytes of ``path``. Its size is checked with ``stat`` before anything is read, and the
    read never goes past the limit (a file that grows meanwhile stops one byte after it), so
    memory stays bounded whatever the file's size: ``FileTooLargeError`` over
    ``ingestion.max_file_mb``. (``read(n)`` reserves ``n`` bytes up front, so the file's own
    size is asked for, not the limit.)"""
    limit = settings.max_file_bytes
    size = path.stat().st_size
    if size > limit:
        raise FileTooLargeError(size, settings.max_file_mb)
    with path.open("rb") as f:
        data = f.read(size + 1)
        if len(data) > size:  # it grew since stat
            data += f.read(limit + 1 - len(data))
            if len(data) > limit:
                raise FileTooLargeError(os.fstat(f.fileno()).st_size, settings.max_file_mb)
    return data


def converted_digest(data: bytes) -> str:
    """What a converted file's "unchanged" is decided on: its bytes (and the converters'
    version), so an unchanged file is not converted again."""
    return content_hash(ENCODING + CONVERTER + hashlib.sha256(data).hexdigest())


def converted_text(name: str, data: bytes) -> tuple[str, list[str]]:
    """A PDF, Word, PowerPoint, HTML or EPUB file as Markdown (``ragstream.knowledge.formats``; the title
    the file names, if any, as front matter) and what the conversion left out or guessed."""
    converted = convert(name, data)
    text = converted.markdown
    if converted.title:
        text = f"---\ntitle: {json.dumps(converted.title, ensure_ascii=False)}\n---\n\n{text}"
    return text, converted.warnings


def read_text_file(path: Path, settings: IngestionSettings) -> str:
    """The text of ``path`` (``read_bytes``'s bounds), decoded as UTF-8 (``decode_text``)."""
    return decode_text(read_bytes(path, settings))


def check_text(text: str, settings: IngestionSettings) -> None:
    """Refuse a document handed over as text the way a file is refused: over
    ``ingestion.max_file_mb`` (``FileTooLargeError``) or holding NUL characters (``BinaryFileError``)."""
    limit = settings.max_file_bytes
    size = len(text) if len(text) > limit or 4 * len(text) <= limit else len(text.encode("utf-8"))
    if size > limit:
        raise FileTooLargeError(size, settings.max_file_mb)
    nul = text.find("\0")
    if nul >= 0:
        raise BinaryFileError(f"a NUL character at position {nul}")


def refused(doc_id: str, err: RagstreamError) -> str:
    """The report's error line for a document refused with ``err``: id, error type, message."""
    return f"{doc_id}: {type(err).__name__}: {err}"


def _takeover_warning(doc_id: str, previous_root: str, root: str) -> str | None:
    """The warning for a document id last written from another folder (or through the API)."""
    if previous_root in ("", root):
        return None
    where = "through the API" if previous_root == API_ROOT else f"from {previous_root}"
    return (f"{doc_id}: replaces the document of the same id ingested {where} (ids are "
            f"'<folder name>/<path in the folder>', so two folders with the same name share "
            f"them); if both are wanted, rename one of the folders")


def _no_body(text: str, name: str) -> str:
    """Why a document gives no chunks, and what to do: empty, front matter only, or headings only."""
    from ragstream.common import markdown

    if not text.strip():
        return "empty document: nothing stored; write some text in it, or remove it"
    if not name.lower().endswith(".txt"):
        doc = markdown.parse(text.replace("\r\n", "\n").replace("\r", "\n").removeprefix("\ufeff"))
        if doc.headings:
            return ("only headings, no text under them: nothing stored; add text under the "
                    "headings, or remove the document")
        if doc.front_matter is not None:
            return "front matter only, no body text: nothing stored; add text below the front matter"
    return f"{NO_BODY_WARNING}: nothing stored; add some text to it"


def _lookalike_warnings(doc_ids: list[str]) -> list[str]:
    """One warning per group of ids that differ only in letter case or Unicode form."""
    groups: dict[str, list[str]] = {}
    for doc_id in doc_ids:
        groups.setdefault(unicodedata.normalize("NFC", doc_id).casefold(), []).append(doc_id)
    return [f"{' and '.join(repr(i) for i in ids)} differ only in letter case or Unicode form: "
            f"they are stored as {len(ids)} separate documents; rename or remove one if they "
            f"are the same document" for ids in groups.values() if len(ids) > 1]


def stored_documents(store, prefix: str = "", ids: Collection[str] | None = None) -> dict:
    """``store.documents(prefix, ids)``: the stored documents whose id starts with ``prefix``
    and, given ``ids``, is one of them (all by default); a store that cannot be read is a
    ``StoreUnreadableError`` that names the repair command (a server that cannot be reached
    stays ``VectorDBUnavailableError``)."""
    try:
        return store.documents(prefix, ids)
    except VectorDBUnavailableError:
        raise
    except VectorStoreError as err:
        cause = root_cause(err)
        detail = str(cause)
        raise StoreUnreadableError(store.location, f"{type(cause).__name__}: {detail}") from err


def in_step(store, report: IngestReport) -> None:
    """Before writing: a search index found out of step with the store (a write cut short
    between the two) is repaired first, and the report says so."""
    repair = getattr(store, "repair", None)
    if repair is None or store.in_step():
        return
    redone = repair()
    if redone:
        report.warnings.append(f"the search index was out of step with the store (a write cut "
                               f"short): {len(redone)} document(s) rewritten in it from the store")


class _BatchWriter:
    """Embeds pending documents in batches of about ``batch_chunks`` chunks (the encoder is
    fastest on big, length-sorted batches) and writes each batch in one all-or-nothing store
    call; a batch that fails is written again one document at a time, so that one bad document
    fails alone. Counts go to ``report``."""

    def __init__(self, services, report: IngestReport, root: str, batch_chunks: int,
                 watch: IngestWatch | None = None):
        self.services, self.report, self.root = services, report, root
        self.batch_chunks = batch_chunks
        self.now = dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat()
        self.pending: list[_Pending] = []
        self.added = 0  # documents handed to the writer
        self.watch = watch

    def add(self, doc: _Pending) -> None:
        """Queue a document; write the queue once it holds a batch."""
        self.pending.append(doc)
        self.added += 1
        if sum(len(p.chunks) for p in self.pending) >= self.batch_chunks:
            self.flush()

    def flush(self) -> None:
        """Write whatever is queued."""
        if self.pending:
            batch, self.pending = self.pending, []
            self._write(batch)

    def _write(self, batch: list[_Pending]) -> None:
        report = self.report
        try:
            records = embed_chunks([c for p in batch for c in p.chunks], self.services.embedder)
            by_doc: dict[str, list] = {p.doc_id: [] for p in batch}
            for rec in records:
                by_doc[rec.chunk.doc_id].append(rec)
            self.services.store.replace_documents(
                [(p.doc_id, by_doc[p.doc_id], p.digest) for p in batch], self.now, self.root)
        except VectorDBUnavailableError:
            raise  # the server is gone: no later write could succeed either
        except Exception as err:
            if len(batch) > 1:
                for p in batch:
                    self._write([p])
                return
            report.failed += 1
            msg = str(err) if isinstance(err, RagstreamError) else f"{type(err).__name__}: {err}"
            report.errors.append(f"{batch[0].doc_id}: {msg}")
            if self.watch is not None:
                self.watch.settled_written += 1
            return
        for p in batch:
            report.processed += 1
            report.chunks_written += len(p.chunks)
            report.windows_written += len(by_doc[p.doc_id])
        if self.watch is not None:
            self.watch.settled_written += len(batch)


@dataclass(frozen=True)
class TextDocument:
    """A document handed over (the retrieval API's ``ingest``), not read from a file: as text, or
    as a PDF, DOCX, PPTX, HTML or EPUB file's bytes (``data``), converted like a file."""

    doc_id: str
    filename: str
    text: str
    metadata: dict[str, str]
    data: bytes | None = None


def ingest_documents(documents: list[TextDocument], cfg: AppConfig, services,
                     lock_wait_s: float | None = None) -> IngestReport:
    """Upsert documents given as text, by ``doc_id``: an unchanged one (same text and metadata)
    is skipped, a changed one replaces all of its old chunks at once. Metadata comes from the
    document's front matter, overridden by ``metadata`` (``source``, ``doc_type``,
    ``last_update_date``, ``title``). A document is refused (listed in ``errors``) when its id
    repeats one earlier in the call, its file name is a path, its date is not ``yyyy-mm-dd``,
    or, with ``ingestion.require_metadata`` on, it lacks required metadata."""
    started = time.perf_counter()
    wait = cfg.settings.chunking.ingest_lock_wait_s if lock_wait_s is None else lock_wait_s
    with IngestLock(cfg.index_dir, wait):
        report = IngestReport(root=API_ROOT, files_seen=len(documents))
        in_step(services.store, report)
        stored = stored_documents(services.store, ids=[d.doc_id for d in documents])
        writer = _BatchWriter(services, report, API_ROOT, cfg.settings.chunking.ingest_batch_chunks)
        today = dt.date.today().isoformat()
        seen: set[str] = set()
        derived: list[str] = []
        for doc in documents:
            problem = _document_problem(doc, seen)
            seen.add(doc.doc_id)
            if problem:
                report.failed += 1
                report.errors.append(f"{doc.doc_id}: {problem}")
                continue
            meta = {k: str(v).strip() for k, v in doc.metadata.items() if k in _OVERRIDES and str(v).strip()}
            ignored = sorted(set(doc.metadata) - set(_OVERRIDES))
            if ignored:
                report.warnings.append(f"{doc.doc_id}: metadata keys ignored: {', '.join(ignored)}")
            text = doc.text
            content = text if doc.data is None else converted_digest(doc.data)
            digest = content_hash(ENCODING + content + "\0" + json.dumps(meta, sort_keys=True))
            if doc.doc_id in stored and stored[doc.doc_id].doc_hash == digest:
                report.skipped += 1
                continue
            try:
                if doc.data is None:
                    check_text(text, cfg.settings.ingestion)
                else:
                    if len(doc.data) > cfg.settings.ingestion.max_file_bytes:
                        raise FileTooLargeError(len(doc.data), cfg.settings.ingestion.max_file_mb)
                    text, notes = converted_text(doc.filename, doc.data)
                    report.warnings.extend(f"{doc.doc_id}: {w}" for w in notes)
            except IngestError as err:
                report.failed += 1
                report.errors.append(refused(doc.doc_id, err))
                continue
            parsed = parse_document(text, doc.filename, cfg.settings.chunking, today)
            report.warnings.extend(f"{doc.doc_id}: {w}" for w in parsed.warnings
                                   if w != NO_BODY_WARNING)
            missing = missing_metadata(parsed.declared | set(meta))
            if missing and cfg.settings.ingestion.require_metadata:
                report.failed += 1
                report.errors.append(invalid_document(doc.doc_id, missing))
                continue
            if missing:
                derived.append(doc.doc_id)
            update: dict[str, str] = {"doc_id": doc.doc_id}
            if "source" in meta:
                update["source_name"] = meta["source"]
            for key in ("doc_type", "last_update_date", "title"):
                if key in meta:
                    update[key] = meta[key]
            chunks = tuple(c.model_copy(update={**update, "id": f"{doc.doc_id}#{c.chunk_index}"})
                           for c in parsed.chunks)
            if not chunks:
                report.failed += 1
                report.errors.append(f"{doc.doc_id}: {_no_body(text, doc.filename)}")
                continue
            if doc.doc_id in stored:
                note = _takeover_warning(doc.doc_id, stored[doc.doc_id].root, API_ROOT)
                if note:
                    report.warnings.append(note)
            writer.add(_Pending(doc.doc_id, chunks, digest, doc.doc_id in stored))
        writer.flush()
        if derived:
            report.warnings.append(derived_note(derived))
        services.index()
    report.duration_s = round(time.perf_counter() - started, 3)
    return report


#: the metadata keys ``ingest_documents`` takes from ``TextDocument.metadata``
_OVERRIDES = ("source", "doc_type", "last_update_date", "title")


def _document_problem(doc: TextDocument, seen: set[str]) -> str:
    """Why a handed-over document cannot be ingested, or ""."""
    if not doc.doc_id.strip():
        return "the document id is empty"
    if doc.doc_id in seen:
        return "the same document id appears twice in one ingest; send each document once"
    name = PurePosixPath(doc.filename.replace("\\", "/"))
    if name.is_absolute() or ".." in name.parts or len(name.parts) != 1:
        return (f"the file name {doc.filename!r} is a path; give a plain file name such as "
                f"'rules.md'")
    date = str(doc.metadata.get("last_update_date", "")).strip()
    if date:
        try:
            dt.date.fromisoformat(date)
        except ValueError:
            return f"last_update_date {date!r} is not a date; write it as yyyy-mm-dd"
    return ""


def ingest_path(path: str | Path, cfg: AppConfig, services, prune: bool | None = None,
                progress: Progress | None = None, lock_wait_s: float | None = None,
                only: Collection[str] | None = None,
                watch: IngestWatch | None = None) -> IngestReport:
    """Ingest a file or folder: skip unchanged files, chunk, embed and write the rest, optionally
    prune; holding the index folder's ``IngestLock`` (waiting up to ``lock_wait_s``, default
    ``chunking.ingest_lock_wait_s``, for another ingestion to finish). ``only``: of the folder
    ``path``, just the files at these paths in it (``a.md``, ``sub/b.pdf``; the page's uploads),
    nothing else read and nothing pruned, so the report is about them alone. ``watch`` (default:
    the one ``watching`` set for this thread, if any) follows the run and may stop it."""
    watch = watch or _WATCH.get()
    if lock_wait_s is None and watch is not None:
        lock_wait_s = watch.lock_wait_s
    if lock_wait_s is None:
        lock_wait_s = cfg.settings.chunking.ingest_lock_wait_s
    stop = (lambda: watch.stopping) if watch is not None else None
    try:
        lock = IngestLock(cfg.index_dir, lock_wait_s, stop)
        lock.acquire()
    except IngestStoppedWaitingError as err:  # cancelled before it began: nothing to undo
        stopped = IngestReport(root=str(Path(path).expanduser().resolve()), cancelled=True,
                               warnings=[str(err)])
        if watch is not None:
            watch.report = stopped
        return stopped
    try:
        report = _ingest_path(path, cfg, services, prune, progress, only, watch)
    finally:
        lock.release()
    if lock.contended:
        holder = f"process {lock.waited_for}" if lock.waited_for else "another process"
        report.warnings.append(f"waited {lock.waited_s:.1f} s for another ingestion into "
                               f"{cfg.index_dir} ({holder}) to finish")
    return report


def _ingest_path(path: str | Path, cfg: AppConfig, services, prune: bool | None,
                 progress: Progress | None, only: Collection[str] | None = None,
                 watch: IngestWatch | None = None) -> IngestReport:
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
        if only is not None:
            wanted = set(only)
            files = [f for f in files if f.relative_to(root).as_posix() in wanted]
            prune = False
    report = IngestReport(root=str(root), files_seen=len(files))
    if watch is not None:
        watch.report, watch.total = report, len(files)
        watch.settled_unwritten = watch.settled_written = 0
    store = services.store
    in_step(store, report)
    # this folder's documents only: their ids start with its name, and the prune removes
    # only documents ingested from it (``root``), whose ids do too
    stored = stored_documents(store, prefix=f"{root.name}/")
    seen: set[str] = set()
    batch = cfg.settings.chunking.ingest_batch_chunks
    if watch is not None:
        batch = min(batch, WATCHED_BATCH_CHUNKS)
    writer = _BatchWriter(services, report, str(root), batch, watch)
    derived: list[str] = []
    doc_ids = [f"{root.name}/{file.relative_to(root).as_posix()}" for file in files]
    report.warnings.extend(_lookalike_warnings(doc_ids))

    for i, (file, doc_id) in enumerate(zip(files, doc_ids)):
        if watch is not None:
            watch.settled_unwritten = i - writer.added  # files before this one not queued
            if watch.stopping:  # between files: what was read is written whole below
                report.cancelled = True
                report.warnings.extend(f"{d}: not read: the ingest was cancelled before it; "
                                       f"ingest again to add it" for d in doc_ids[i:])
                break
            watch.current = doc_id
        seen.add(doc_id)  # from here on a failure keeps the stored version: it is never pruned
        if progress:
            progress(i, len(files), doc_id)
        notes: list[str] = []
        try:
            data = (read_bytes(file, cfg.settings.ingestion)
                    if file.suffix.lower() in CONVERTED_SUFFIXES else None)
            text = read_text_file(file, cfg.settings.ingestion) if data is None else ""
            digest = content_hash(ENCODING + text) if data is None else converted_digest(data)
            if doc_id in stored and stored[doc_id].doc_hash == digest:
                report.skipped += 1
                continue
            if data is not None:
                text, notes = converted_text(file.name, data)
        except IngestError as err:
            report.failed += 1
            report.errors.append(refused(doc_id, err))
            continue
        except OSError as err:
            report.failed += 1
            report.errors.append(f"{doc_id}: cannot be read ({err.strerror}); check that the "
                                 f"file is readable by this user")
            continue
        report.warnings.extend(f"{doc_id}: {w}" for w in notes)
        try:
            mtime = dt.date.fromtimestamp(file.stat().st_mtime).isoformat()
            parsed = parse_document(text, doc_id, cfg.settings.chunking, mtime)
        except Exception as err:
            report.failed += 1
            msg = str(err) if isinstance(err, RagstreamError) else f"{type(err).__name__}: {err}"
            report.errors.append(f"{doc_id}: {msg}")
            continue
        report.warnings.extend(f"{doc_id}: {w}" for w in parsed.warnings if w != NO_BODY_WARNING)
        if not parsed.chunks:
            report.warnings.append(f"{doc_id}: {_no_body(text, doc_id)}")
            if doc_id in stored:
                store.delete_document(doc_id)
                report.deleted += 1
            continue
        missing = missing_metadata(parsed.declared)
        if missing and cfg.settings.ingestion.require_metadata:
            report.failed += 1
            report.errors.append(invalid_document(doc_id, missing))
            continue
        if missing:
            derived.append(doc_id)
        if doc_id in stored:
            note = _takeover_warning(doc_id, stored[doc_id].root, str(root))
            if note:
                report.warnings.append(note)
        writer.add(_Pending(doc_id, parsed.chunks, digest, doc_id in stored))
    if watch is not None and not report.cancelled:
        watch.settled_unwritten = len(files) - writer.added
    writer.flush()
    if derived:
        report.warnings.append(derived_note(derived))

    if prune and not report.cancelled:  # a file not reached is not gone
        for doc_id, doc in stored.items():
            if doc.root == str(root) and doc_id not in seen:
                store.delete_document(doc_id)
                report.deleted += 1
    if progress and not report.cancelled:
        progress(len(files), len(files), "")
    services.index()  # bring the in-memory index up to date now, not on the first query
    report.duration_s = round(time.perf_counter() - started, 3)
    return report
