"""The page's ingestion: the uploader's types, limit and help, each uploaded file's name made
safe, saved in the knowledge base's folder (the one it replaces kept until the new one is in)
and ingested, a folder on this machine ingested, and the report of either summed up for the
sidebar (red, yellow or green, each refused or skipped file named with why). Each action
turns a ``RagstreamError`` into a message under ``ERROR``, as ``actions`` does."""


from __future__ import annotations

import math
import os
import re
import shutil
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragstream.common.errors import (
    FileTooLargeError,
    IngestError,
    RagstreamError,
    UploadNameError,
)
from ragstream.interfaces.ui import state as S
from ragstream.interfaces.ui.actions import fail
from ragstream.knowledge.formats import CONVERTED_SUFFIXES
from ragstream.knowledge.ingest.ingestor import decode_text, ingest_path, refused, stored_documents
from ragstream.workbench.engine import Engine

#: characters that separate folders in an uploaded name, from any system
_PATH_SEPARATORS = re.compile(r"[\\/]")
#: longest file name (in UTF-8 bytes) most file systems take
MAX_NAME_BYTES = 255


def upload_types(engine: Engine) -> list[str]:
    """The file types the page's uploader accepts: exactly the ones ingestion reads."""
    return sorted({e.lower().lstrip(".") for e in engine.cfg.settings.chunking.extensions})


def upload_limit_mb(engine: Engine, server_limit_mb: int) -> int:
    """The uploader's per-file limit in whole MB (its ``max_upload_size``, which it shows as
    "Limit N MB per file" and holds a larger file back with): ``ingestion.max_file_mb`` rounded
    up, never over the server's own limit (``server.maxUploadSize``, ``server_limit_mb``). A
    file between a fractional limit and the whole MB is refused by ingestion, named in the
    report."""
    limit = math.ceil(engine.cfg.settings.ingestion.max_file_mb)
    return max(1, min(limit, server_limit_mb)) if server_limit_mb > 0 else max(1, limit)


def upload_help(engine: Engine) -> str:
    """The uploader's help: what it takes, the real size limit, and what happens on choosing."""
    mb = engine.cfg.settings.ingestion.max_file_mb
    return (f"Markdown, text, PDF, Word (.docx), PowerPoint (.pptx), HTML and EPUB, up to {mb:g} MB "
            f"each (ingestion.max_file_mb). Chosen files are ingested at once; a refused file is "
            f"not kept in the knowledge base's folder, and the report below says why. The list "
            f"shows what was chosen: taking a file off it leaves the knowledge base as it is.")


def upload_name(name: str, allowed: set[str]) -> str:
    """The file name an upload is saved under: its last path part (``../``, absolute and
    Windows paths lose their folders), without control characters or leading dots (a hidden
    file would never be ingested). ``UploadNameError`` when nothing usable remains, the name is
    too long, or its type is not ingestible."""
    base = _PATH_SEPARATORS.split(name)[-1]
    base = "".join(ch for ch in base if ch.isprintable()).strip().lstrip(".").strip()
    if not base:
        raise UploadNameError(f"{name!r}: no file name is left once its folders are removed; "
                              f"upload a file with a plain name such as 'notes.md'.")
    if len(base.encode("utf-8")) > MAX_NAME_BYTES:
        raise UploadNameError(f"{base[:40]}…: the file name is longer than {MAX_NAME_BYTES} "
                              f"bytes; rename the file and upload it again.")
    if Path(base).suffix.lower() not in allowed:
        raise UploadNameError(f"{base} is not one of the ingestible types "
                              f"({', '.join(sorted(allowed))}).")
    return base


def _save_inside(folder: Path, name: str, data: bytes) -> None:
    """Write ``data`` as ``folder/name``, never outside ``folder``: the path is checked after
    resolving, and the file is written beside it and renamed over it (so a symbolic link of
    that name is replaced, never written through)."""
    root = folder.resolve()
    target = root / name
    if target.parent != root or target.name != name:
        raise UploadNameError(f"{name!r} would be saved outside {root}; upload it under a plain "
                              f"file name.")
    tmp = root / f".upload-{uuid.uuid4().hex}.part"  # hidden: an ingest never reads it
    try:
        tmp.write_bytes(data)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def _keep_previous(folder: Path, name: str) -> Path | None:
    """A hidden copy (a second link, or a copy where links are not possible) of the file an
    upload is about to replace, to put back if the upload is refused; None when there is none."""
    target = folder / name
    if not (target.exists() or target.is_symlink()):
        return None
    kept = folder / f".upload-kept-{uuid.uuid4().hex}"  # hidden: an ingest never reads it
    try:
        os.link(target, kept, follow_symlinks=False)
    except OSError:
        shutil.copy2(target, kept, follow_symlinks=False)
    return kept


#: what became of one upload (the report's ``files``: name, outcome, reason)
INGESTED, UNCHANGED, REFUSED = "ingested", "unchanged", "refused"
#: what the report's line for an unchanged upload says
UNCHANGED_REASON = "already in the knowledge base, unchanged: nothing to do"
#: an error class's name at the start of a report line (``UnsupportedFormatError: …``)
_ERROR_TYPE = re.compile(r"^([A-Z]\w*Error): ")


def _reason(line: str, name: str) -> str:
    """The reason in a report line about ``name``, for a person: without the error's class name
    and without ``name`` repeated at its start (``photo.pdf: it is an image, not a PDF…`` →
    ``it is an image, not a PDF…``)."""
    def unnamed(text: str) -> str:
        for prefix in (f"{name}: ", f"{name!r}: "):
            if text.startswith(prefix):
                return text[len(prefix):]
        return text

    return unnamed(_ERROR_TYPE.sub("", unnamed(line), count=1))


def _file_row(name: str, outcome: str, reason: str = "") -> dict[str, str]:
    return {"name": name, "outcome": outcome, "reason": reason}


def _handled_uploads(st_state: S.SessionState) -> list[str]:
    """The uploader's file ids already ingested (or refused): those of the last upload report."""
    report = st_state.get(S.INGEST_REPORT)
    return list(report.get("upload_ids", ())) if report and report.get("kind") == "upload" else []


def new_uploads(st_state: S.SessionState, uploads: list[Any] | None) -> list[Any]:
    """The uploader's files (Streamlit's ``UploadedFile``: ``file_id``, ``name``,
    ``getvalue()``) not ingested yet. The uploader keeps what was chosen, beside any file the
    browser held back itself (over the size limit, said beside the file), so that nothing
    chosen disappears unexplained; a page draw ingests only what was added since. (Its key
    names the knowledge base, and a folder ingest empties it: the ids are those of the last
    upload report.)"""
    handled = set(_handled_uploads(st_state))
    return [f for f in uploads or [] if f.file_id not in handled]


def ingest_uploads(engine: Engine, st_state: S.SessionState, files: list[tuple[str, bytes]],
                   progress: Callable[[int, int, str], None] | None = None,
                   ids: Sequence[str] = ()) -> bool:
    """Save uploaded (name, bytes) pairs in the uploads folder (the selected knowledge base's
    folder) and ingest them, and only them; keep the report under ``INGEST_REPORT`` with what
    became of each file (``files``: ingested, unchanged or refused, with the reason) and the
    uploader's ids of the files handled so far (``upload_ids``: ``ids`` are these files').

    Each name is reduced to a plain file name (``upload_name``; a changed name is reported in
    the warnings). An upload that is refused — a name that cannot be used, a type that is not
    ingested, two uploads with one name, over ``ingestion.max_file_mb``, binary or not UTF-8 —
    is not saved; one refused by ingestion (empty, damaged, not what its name says, no text…)
    is removed again. Either way nothing of the person's is lost: a file of that name the
    folder held before is put back as it was (and its ingested version kept). Returns False
    when nothing went in: every upload refused, or the ingestion itself failed (the folder is
    then left as it was); ``ERROR`` says why too."""
    st_state[S.ERROR] = None
    if not files:
        fail(st_state, IngestError("No files were uploaded. Choose files first (Markdown, text, PDF, "
                                    "Word, PowerPoint, HTML or EPUB)."))
        return False
    handled = _handled_uploads(st_state) + [i for i in ids if i]
    folder = engine.cfg.uploads_dir
    allowed = {e.lower() for e in engine.cfg.settings.chunking.extensions}
    limits = engine.cfg.settings.ingestion
    accepted: dict[str, bytes] = {}
    rows: list[dict[str, str]] = []  # one per upload, in the order given
    errors: list[str] = []
    warnings: list[str] = []
    for name, data in files:
        safe = name
        try:
            safe = upload_name(name, allowed)
            if safe in accepted:
                raise UploadNameError(f"{safe}: another upload in this batch has the same file "
                                      f"name; rename one of them and upload it again.")
            if len(data) > limits.max_file_bytes:
                raise FileTooLargeError(len(data), limits.max_file_mb)
            if Path(safe).suffix.lower() not in CONVERTED_SUFFIXES:  # converted ones: at ingestion
                decode_text(data)
        except IngestError as err:
            line = err.args[0] if isinstance(err, UploadNameError) else refused(safe, err)
            errors.append(line)
            rows.append(_file_row(safe, REFUSED, _reason(line, safe)))
            continue
        if safe != name:
            warnings.append(f"{name!r} was saved as {safe!r}: an upload keeps only its file name")
        accepted[safe] = data
        rows.append(_file_row(safe, INGESTED))
    report = None
    root = folder.resolve().name  # the uploads' ids: "<folder name>/<file name>"
    try:
        if accepted:
            folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        failure: RagstreamError | None = IngestError(
            f"The uploads folder {folder} cannot be made ({err.strerror}); check "
            f"paths.uploads_dir in config/settings.json.")
    else:
        failure = None
        kept: dict[str, Path | None] = {}  # saved upload -> the file of its name, kept aside
        for safe, data in list(accepted.items()):
            try:
                kept[safe] = _keep_previous(folder, safe)
                _save_inside(folder, safe, data)
            except (OSError, UploadNameError) as err:
                line = (f"{safe}: could not be saved in {folder} ({err}); check the folder "
                        f"(paths.uploads_dir) and upload it again")
                errors.append(line)
                _put_back(folder, safe, kept.pop(safe, None), saved=False)
                del accepted[safe]
                _set_row(rows, safe, REFUSED, _reason(line, safe))
        store = engine.services.store
        try:
            if accepted:
                ids = [f"{root}/{safe}" for safe in accepted]
                before = {i: d.doc_hash for i, d in stored_documents(store, ids=ids).items()}
                report = ingest_path(folder, engine.cfg, engine.services, prune=False,
                                     progress=progress, only=list(accepted))
                after = {i: d.doc_hash for i, d in stored_documents(store, ids=ids).items()}
        except RagstreamError as err:
            for safe in accepted:
                _put_back(folder, safe, kept.get(safe))
            failure = err
    if failure is not None:  # nothing went in: every file chosen is named with why
        for safe in accepted:
            _set_row(rows, safe, REFUSED, f"not ingested: {failure}")
        errors.append(str(failure))
    elif report is not None:
        ingest_errors: list[str] = []
        put_back: list[str] = []
        for safe in accepted:
            doc_id = f"{root}/{safe}"
            said = [e for e in report.errors if e.startswith(f"{doc_id}: ")]
            if said or doc_id not in after:
                note = next((w for w in report.warnings if w.startswith(f"{doc_id}: ")), "")
                line = said[0] if said else (note or f"{doc_id}: nothing was stored")
                ingest_errors.append(line)
                _set_row(rows, safe, REFUSED, _reason(line[len(doc_id) + 2:], safe))
                if _put_back(folder, safe, kept.get(safe)):
                    put_back.append(safe)
            else:
                unchanged = before.get(doc_id) == after[doc_id]
                _set_row(rows, safe, UNCHANGED if unchanged else INGESTED,
                         UNCHANGED_REASON if unchanged else "")
                previous = kept.get(safe)
                if previous is not None:  # the upload replaced it for good
                    previous.unlink(missing_ok=True)
        gone = [s for s in put_back if f"{root}/{s}" not in after]
        if gone:  # a refused upload took its predecessor's chunks (an empty one): bring them back
            try:
                ingest_path(folder, engine.cfg, engine.services, prune=False, only=gone)
            except RagstreamError as err:
                warnings.append(f"{', '.join(gone)}: put back in the folder, but not ingested "
                                f"again ({err}); ingest the folder to bring them back")
        refused_ids = {e.split(": ", 1)[0] for e in ingest_errors}
        errors += ingest_errors
        warnings += [w for w in report.warnings if w.split(": ", 1)[0] not in refused_ids]
    outcomes = [r["outcome"] for r in rows]
    summary: dict[str, Any] = {
        "kind": "upload",
        "root": str(folder),
        "files_seen": len(rows),
        "processed": outcomes.count(INGESTED),
        "skipped": outcomes.count(UNCHANGED),
        "failed": outcomes.count(REFUSED),
        "deleted": 0,  # an upload never deletes: a refused one puts back what it replaced
        "chunks_written": report.chunks_written if report else 0,
        "windows_written": report.windows_written if report else 0,
        "errors": errors,
        "warnings": warnings,
        "duration_s": report.duration_s if report else 0.0,
        "files": rows,
        "upload_ids": handled,
    }
    st_state[S.INGEST_REPORT] = summary
    if failure is not None:
        fail(st_state, failure)
        return False
    if summary["processed"] + summary["skipped"] == 0:
        fail(st_state, IngestError(" ".join(errors)))
        return False
    return True


def _set_row(rows: list[dict[str, str]], name: str, outcome: str, reason: str) -> None:
    """Record what became of the upload saved as ``name``."""
    for row in rows:
        if row["name"] == name and row["outcome"] != REFUSED:
            row.update(outcome=outcome, reason=reason)
            return


def _put_back(folder: Path, name: str, kept: Path | None, saved: bool = True) -> bool:
    """Undo the upload saved as ``folder/name``: the file it replaced (kept aside as ``kept``)
    goes back, or, when there was none, the upload is removed. True when a file was put back."""
    target = folder / name
    if kept is not None:
        os.replace(kept, target)
        return True
    if saved:
        target.unlink(missing_ok=True)
    return False


def ingest_folder(engine: Engine, st_state: S.SessionState, folder: str | Path,
                  prune: bool | None = None,
                  progress: Callable[[int, int, str], None] | None = None) -> bool:
    """Ingest the files in ``folder`` and keep the report; on failure set ``ERROR`` and return
    False. The uploader starts afresh either way (its files were handled under the upload
    report this one replaces)."""
    st_state[S.ERROR] = None
    st_state[S.UPLOAD_NONCE] = (st_state.get(S.UPLOAD_NONCE) or 0) + 1
    if isinstance(folder, str) and not folder.strip():
        fail(st_state, IngestError("No folder given: type the path of a folder on this machine in "
                                    "the box above the button. (Files chosen in \"Add documents\" "
                                    "are ingested as soon as they are chosen.)"))
        return False
    try:
        report = engine.ingest(folder, prune=prune, progress=progress)
    except RagstreamError as err:
        fail(st_state, err)
        return False
    st_state[S.INGEST_REPORT] = {"kind": "folder", **report.model_dump()}
    return True


@dataclass(frozen=True)
class IngestSummary:
    """How the sidebar shows the last ingest: ``kind`` (``upload``, shown under the uploader, or
    ``folder``, under the folder's button), ``level`` (``error`` when a file failed, ``warning``
    when one was skipped or gave nothing to store, else ``success``), a headline, one line per
    refused or skipped file with what is wrong with it, what to do about them (each piece of
    advice once, however many files it concerns), and the warnings."""

    kind: str
    level: str
    headline: str
    lines: list[str]
    advice: list[str]
    warnings: list[str]

    @property
    def text(self) -> str:
        """The headline, the files' lines and the advice, as Markdown for one message box."""
        parts = [self.headline]
        if self.lines:
            parts.append("\n".join(f"- {line}" for line in self.lines))
        return "\n\n".join(parts + self.advice)


def _plural(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


#: a reason's first sentence (what is wrong) and the rest (what to do about it)
_WHAT_THEN_TODO = re.compile(r"^(.+?\.)\s+([A-Z].*)$", re.S)


def _file_lines(named: list[tuple[str, str]]) -> tuple[list[str], list[str]]:
    """``(name, reason)`` pairs as the report's lines (`` `name` — what is wrong``) and the
    advice their reasons give, each once, in order (the narrow sidebar would repeat the same
    paragraph for every refused file otherwise)."""
    lines: list[str] = []
    advice: list[str] = []
    for name, reason in named:
        split = _WHAT_THEN_TODO.match(reason)
        what, todo = (split[1], split[2]) if split else (reason, "")
        lines.append(f"`{name}` — {what}")
        if todo and todo not in advice:
            advice.append(todo)
    return lines, advice


def ingest_summary(report: dict[str, Any] | None) -> IngestSummary | None:
    """What the sidebar says about ``report`` (``INGEST_REPORT``), or None when there is none."""
    if not report:
        return None
    if report.get("kind") == "upload":
        rows = report["files"]
        bad = [r for r in rows if r["outcome"] == REFUSED]
        same = [r for r in rows if r["outcome"] == UNCHANGED]
        said = [f"{report['processed']} ingested ({_plural(report['chunks_written'], 'chunk')})"]
        said += [f"{len(same)} skipped (unchanged)"] if same else []
        said += [f"{len(bad)} refused and not kept"] if bad else []
        headline = f"{_plural(len(rows), 'file')} chosen: {', '.join(said)}."
        lines, advice = _file_lines([(r["name"], r["reason"]) for r in bad + same])
        level = "error" if bad else "warning" if same else "success"
        return IngestSummary("upload", level, headline, lines, advice, list(report["warnings"]))
    not_stored = [w for w in report["warnings"] if "nothing stored" in w]
    headline = (f"Ingested: {report['processed']} processed, {report['skipped']} skipped "
                f"(unchanged), {report['failed']} failed, {report['deleted']} deleted, "
                f"{report['chunks_written']} chunks.")
    level = ("error" if report["failed"] else
             "warning" if report["skipped"] or not_stored else "success")
    named = []
    for line in list(report["errors"]) + not_stored:
        doc_id, _, rest = line.partition(": ")
        named.append((doc_id, _reason(rest, doc_id.rsplit("/", 1)[-1])))
    lines, advice = _file_lines(named)
    others = [w for w in report["warnings"] if w not in not_stored]
    return IngestSummary("folder", level, headline, lines, advice, others)
