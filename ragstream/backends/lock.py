"""One ingestion per index folder at a time: ``IngestLock`` (``fcntl.flock`` on
``<paths.index_dir>/ingest.lock``, naming the holder's PID). ``ingest_busy`` asks, without
waiting, whether an ingestion holds it now (a reader that finds the search indexes out of step
leaves a running ingestion to finish them)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from ragstream.common.errors import IngestError, IngestLockedError

#: the lock file's name in ``paths.index_dir``
LOCK_FILE = "ingest.lock"
#: seconds between two tries of a held lock
LOCK_POLL_S = 0.2


class IngestStoppedWaitingError(IngestError):
    """An ingestion was cancelled while it waited for another one to release the lock."""


class IngestLock:
    """An exclusive lock on one index folder for the length of an ingestion (``with`` block).

    ``fcntl.flock`` on ``<index_dir>/ingest.lock``; the holder writes its PID into the file so
    that a waiter can name it. Each ``IngestLock`` opens the file itself, so two threads of one
    process exclude each other as two processes do. The file stays after release (removing it
    would let a waiter lock a file that is no longer the lock's)."""

    def __init__(self, index_dir: str | Path, wait_s: float,
                 stop: Callable[[], bool] | None = None):
        """``stop``: asked between two tries; True gives up waiting
        (``IngestStoppedWaitingError``): a cancel of a job that has not started yet."""
        self.stop = stop
        self.index_dir = Path(index_dir)
        self.path = self.index_dir / LOCK_FILE
        self.wait_s = max(0.0, float(wait_s))
        self.waited_s = 0.0
        self.waited_for: int | None = None  # the holder's PID, when this lock had to wait
        self.contended = False
        self._fd: int | None = None

    def holder(self) -> int | None:
        """The PID written by the process that holds (or last held) the lock, if readable."""
        try:
            text = self.path.read_text(encoding="utf-8").strip()
        except OSError:
            return None
        return int(text) if text.isdigit() else None

    def acquire(self) -> None:
        """Take the lock, waiting up to ``wait_s``; then ``IngestLockedError`` names its holder."""
        import fcntl

        self.index_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        started = time.monotonic()
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    self.contended = True
                    self.waited_for = self.holder() or self.waited_for
                    waited = time.monotonic() - started
                    if waited >= self.wait_s:
                        raise IngestLockedError(self.index_dir, self.waited_for, waited) from None
                    if self.stop is not None and self.stop():
                        raise IngestStoppedWaitingError(
                            f"cancelled while waiting {waited:.1f} s for another ingestion into "
                            f"{self.index_dir} to finish: nothing was read or written") from None
                    time.sleep(min(LOCK_POLL_S, self.wait_s - waited))
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except BaseException:
            os.close(fd)
            raise
        self.waited_s = time.monotonic() - started
        self._fd = fd

    def release(self) -> None:
        """Give the lock up (its file keeps no PID)."""
        import fcntl

        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def __enter__(self) -> IngestLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def ingest_busy(index_dir: str | Path) -> bool:
    """True when an ingestion (of any process, this one's included) holds ``index_dir``'s lock now."""
    import fcntl

    path = Path(index_dir) / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops a lock taken here
    return False
