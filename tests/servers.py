"""Real engine servers on loopback for the tests, each a process a test may stop, kill, pause
and start again on the same port and data folder:

* ``ChromaServer``: ``chroma run`` (``vector_store.mode`` http, ``RAGSTREAM_CHROMA_URL``);
* ``MilvusServer``: Milvus Lite's own gRPC server (``python -m milvus_lite server``), which
  speaks the protocol a Milvus standalone server or cluster speaks, so the app reaches it
  with the same client code (``vector_store.mode`` milvus, ``RAGSTREAM_MILVUS_URL``).

Pausing is SIGSTOP: the kernel still accepts connections, but nothing answers them."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest


def free_port() -> int:
    """A TCP port on loopback that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def page_server(env: dict[str, str], *, command: list[str] | None = None,
                out: Any = subprocess.DEVNULL, port: int | None = None,
                wait_s: float = 180.0) -> Iterator[tuple[str, subprocess.Popen]]:
    """The Streamlit page served on loopback from the checkout (``streamlit run
    ui_streamlit.py`` headless, or ``command`` given the port as ``--server.port``), with
    ``env``; yields ``(url, process)`` once ``/_stcore/health`` says ok, and stops it after.
    ``out``: where its output goes (a file to read the terminal back)."""
    port = port or free_port()
    root = Path(__file__).resolve().parent.parent
    argv = (command or [sys.executable, "-m", "streamlit", "run", str(root / "ui_streamlit.py"),
                        "--server.headless", "true", "--server.address", "127.0.0.1",
                        "--browser.gatherUsageStats", "false"]) + ["--server.port", str(port)]
    proc = subprocess.Popen(argv, cwd=root, env=env, stdout=out,
                            stderr=subprocess.STDOUT if out is not subprocess.DEVNULL else out)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                    if r.read().strip() == b"ok":
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the page did not start within {wait_s:.0f} s")
            time.sleep(0.5)
        yield url, proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


class ServerProcess:
    """A server process on ``127.0.0.1:port`` with its data in ``data`` and its output in a
    log beside it. Subclasses give the command (``command``) and the readiness check
    (``ready``)."""

    #: the name a failure to start gives
    name = "the server"

    def __init__(self, data: Path, port: int | None = None):
        self.data, self.port = Path(data), port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.log = self.data.parent / f"{type(self).__name__.lower()}-{self.port}.log"

    def command(self) -> list[str]:
        raise NotImplementedError

    def ready(self) -> bool:
        """True once the server answers (an OSError means: not yet)."""
        raise NotImplementedError

    def start(self, timeout: float = 60.0):
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("a") as out:
            self.proc = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self.ready():
                    return self
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                pytest.fail(f"{self.name} did not start on port {self.port}: "
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
        """SIGTERM (a paused server is resumed first), SIGKILL if it does not end in 20 s."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
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


class ChromaServer(ServerProcess):
    """``chroma run`` (this venv's)."""

    name = "chroma run"

    def command(self) -> list[str]:
        return [str(Path(sys.executable).parent / "chroma"), "run", "--path", str(self.data),
                "--host", "127.0.0.1", "--port", str(self.port)]

    def ready(self) -> bool:
        with urllib.request.urlopen(f"{self.url}/api/v2/heartbeat", timeout=2) as r:
            json.loads(r.read())
        return True


class MilvusServer(ServerProcess):
    """``python -m milvus_lite server``."""

    name = "the Milvus Lite server"

    def command(self) -> list[str]:
        return [sys.executable, "-m", "milvus_lite", "server", "--data-dir", str(self.data),
                "--host", "127.0.0.1", "--port", str(self.port)]

    def ready(self) -> bool:
        socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
        return True
