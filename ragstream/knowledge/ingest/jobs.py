"""Ingestions in the background: a job is a thread owned by the process-wide ``REGISTRY``, not by
whoever started it, so a page that is reloaded (a new Streamlit session) or a second browser
tab finds it still running, follows its progress and can cancel it.

    job = REGISTRY.start(kb="ops", collection="kb-ops-1a2b3c", kind="folder",
                         source="/srv/docs", work=lambda: engine.ingest("/srv/docs"))
    job.progress().line()   # '4 of 12 files · 57 chunks written · 0:06 elapsed, about 0:12 left'
    job.cancel()            # stops between files; what was read is written whole
    job.wait()

``work`` runs in the job's thread inside ``ingestor.watching(job.watch)``, so the ingestion it
starts (``Engine.ingest``, ``ingest_path``, the page's upload) reports to the job's
``IngestWatch``. What ``work`` returns is kept as ``job.result``; a ``RagstreamError`` it raises
becomes ``job.error`` (its kind and message), any other exception too (its type and message).
One job per knowledge base (by collection, which a rename keeps) runs at a time: starting a
second one is a ``JobBusyError``. Two jobs on different knowledge bases of one index folder
take turns (the ingest lock); the second waits up to ``JOB_LOCK_WAIT_S``.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from ragstream.common.errors import IngestError, RagstreamError
from ragstream.knowledge.ingest.ingestor import IngestReport, IngestWatch, watching

#: how long a job waits for another ingestion into the same index folder to finish
JOB_LOCK_WAIT_S = 3600.0
#: finished jobs kept for the pages that have not seen their outcome yet
KEEP_FINISHED = 50

JobState = Literal["running", "done", "cancelled", "failed"]


class JobBusyError(IngestError):
    """A knowledge base already has an ingestion running in the background."""


def clock(seconds: float | None) -> str:
    """``75.2`` → ``'1:15'``; ``3725`` → ``'1:02:05'``."""
    s = int(round(seconds or 0))
    h, m = divmod(s, 3600)
    m, s = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


@dataclass(frozen=True)
class JobProgress:
    """Where a job is: files settled of the total, the file being read, chunks written, time
    spent and (once a file is done) the time left at the pace so far."""

    state: JobState
    done: int
    total: int
    current: str
    chunks: int
    elapsed_s: float
    remaining_s: float | None
    started: bool  # False while it waits for the ingest lock or lists the folder
    stopping: bool

    @property
    def fraction(self) -> float:
        """``done / total`` for a progress bar (0 before the files are counted)."""
        return min(1.0, self.done / self.total) if self.total else 0.0

    def so_far(self) -> str:
        """``57 chunks written · 0:06 elapsed, about 0:12 left`` (before the files are counted:
        that it is starting, and the time)."""
        if not self.started:
            return (f"starting (waiting for another ingestion to finish, or listing the "
                    f"files) · {clock(self.elapsed_s)} elapsed")
        left = ("" if self.remaining_s is None or self.state != "running"
                else f", about {clock(self.remaining_s)} left")
        return (f"{self.chunks} chunk{'s' if self.chunks != 1 else ''} written · "
                f"{clock(self.elapsed_s)} elapsed{left}")

    def line(self) -> str:
        """``4 of 12 files · 57 chunks written · 0:06 elapsed, about 0:12 left``."""
        if not self.started:
            return self.so_far()
        return f"{self.done} of {self.total} file{'s' if self.total != 1 else ''} · {self.so_far()}"


class IngestJob:
    """One background ingestion (see the module docstring)."""

    def __init__(self, kb: str, collection: str, kind: str, source: str,
                 work: Callable[[], Any], upload_ids: tuple[str, ...] = ()):
        self.id = uuid.uuid4().hex[:12]
        self.kb, self.collection, self.kind, self.source = kb, collection, kind, source
        self.upload_ids = upload_ids  # the page's uploader ids this job handles
        self.watch = IngestWatch()
        self.watch.lock_wait_s = JOB_LOCK_WAIT_S
        self.state: JobState = "running"
        self.result: Any = None
        self.error: tuple[str, str] | None = None  # (kind, message) when it failed
        self.started_at = time.monotonic()
        self.finished_at: float | None = None
        self._work = work
        self._finished = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"ingest-{kb}", daemon=True)

    def _run(self) -> None:
        try:
            with watching(self.watch):
                self.result = self._work()
        except RagstreamError as err:
            self.error = (err.kind, str(err))
        except Exception as err:  # a bug or an OS error: said, not lost with the thread
            self.error = (type(err).__name__, str(err) or repr(err))
        finally:
            report = self.report
            self.state = ("failed" if self.error else
                          "cancelled" if report is not None and report.cancelled else "done")
            self.finished_at = time.monotonic()
            self._finished.set()

    @property
    def running(self) -> bool:
        """True until the job has finished, however it ended."""
        return not self._finished.is_set()

    @property
    def report(self) -> IngestReport | None:
        """The (last) ingestion report of the job: its counts rise while it runs."""
        return self.watch.report

    def cancel(self) -> None:
        """Stop before the next file (what was read is written whole); no-op once finished."""
        self.watch.stop()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the job to finish; True when it has."""
        return self._finished.wait(timeout)

    def progress(self) -> JobProgress:
        """Where the job is now."""
        w = self.watch
        end = self.finished_at if self.finished_at is not None else time.monotonic()
        elapsed = end - self.started_at
        done, total = w.done, w.total
        remaining = elapsed / done * (total - done) if done and total >= done else None
        return JobProgress(self.state, done, total, w.current, w.chunks_written, elapsed,
                           remaining, w.report is not None, w.stopping)


class JobRegistry:
    """The process's background ingestions (``REGISTRY``), running and recently finished."""

    def __init__(self) -> None:
        self._jobs: list[IngestJob] = []
        self._lock = threading.Lock()

    def start(self, kb: str, collection: str, kind: str, source: str,
              work: Callable[[], Any], upload_ids: tuple[str, ...] = ()) -> IngestJob:
        """Start ``work`` as a job ingesting into knowledge base ``kb`` (``collection``);
        ``JobBusyError`` when one is running there already."""
        with self._lock:
            busy = next((j for j in self._jobs if j.collection == collection and j.running), None)
            if busy is not None:
                done = busy.progress()
                raise JobBusyError(
                    f"Knowledge base {busy.kb!r} is being ingested already ({done.done} of "
                    f"{done.total} files of {busy.source}): wait for it to finish, or cancel it, "
                    f"then start this one again.")
            job = IngestJob(kb, collection, kind, source, work, upload_ids)
            finished = [j for j in self._jobs if not j.running]
            for old in finished[:max(0, len(finished) - KEEP_FINISHED + 1)]:
                self._jobs.remove(old)
            self._jobs.append(job)
            job.thread.start()
            return job

    def jobs(self, collection: str | None = None) -> list[IngestJob]:
        """The jobs (of knowledge base ``collection``, or all), oldest first."""
        with self._lock:
            return [j for j in self._jobs if collection is None or j.collection == collection]

    def running(self, collection: str | None = None) -> list[IngestJob]:
        """The jobs still running (into ``collection``, or any)."""
        return [j for j in self.jobs(collection) if j.running]

    def get(self, job_id: str) -> IngestJob | None:
        """The job ``job_id``, or None (unknown, or long finished and forgotten)."""
        return next((j for j in self.jobs() if j.id == job_id), None)


#: the process's jobs: every Streamlit session, the CLI and the service share it
REGISTRY = JobRegistry()
