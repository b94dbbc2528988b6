"""A real Milvus server process on loopback for the tests: Milvus Lite's own gRPC server
(``python -m milvus_lite server``), which speaks the protocol a Milvus standalone server or
cluster speaks, so the app reaches it with the same client code (``vector_store.mode`` milvus,
``vector_store.url`` http://127.0.0.1:PORT). A test may kill it, pause it and start it again
on the same port and data folder."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MilvusServer:
    """``python -m milvus_lite server`` on ``127.0.0.1``: started, killed (SIGKILL: no clean
    shutdown), paused (SIGSTOP: connections are accepted but never answered) and resumed."""

    def __init__(self, data: Path, port: int | None = None):
        self.data, self.port = Path(data), port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.log = self.data.parent / f"milvus-{self.port}.log"

    def start(self, timeout: float = 60.0) -> MilvusServer:
        with self.log.open("a") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "milvus_lite", "server", "--data-dir", str(self.data),
                 "--host", "127.0.0.1", "--port", str(self.port)],
                stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.proc.kill()
                    pytest.fail(f"the Milvus Lite server did not start on port {self.port}: "
                                + self.log.read_text(errors="replace")[-2000:])
                time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL, as a crash or an OOM kill would: nothing is flushed or closed."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(timeout=20)
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # in case it was paused
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=20)
        self.proc = None

    def pause(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)
