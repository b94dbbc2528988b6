"""`python -m ragstream ingest` as a person runs it in a terminal (a real pseudo-terminal, 120
columns) and as a script runs it (a pipe): on a terminal a progress bar shows files done of
total, chunks written, elapsed time and the current file, ending at every file done; a pipe or
--quiet gets no bar, only the report; the refused file is named with its reason either way.
Documents: a copy of the bundled data/kb with a picture saved under a Markdown name."""

import fcntl
import os
import pty
import re
import select
import shutil
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from tests.conftest import KB

ROOT = Path(__file__).resolve().parent.parent
PNG = bytes.fromhex("89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489")
FILES = len(list(KB.glob("*.md"))) + 1


@pytest.fixture
def docs(tmp_path) -> Path:
    folder = tmp_path / "docs"
    shutil.copytree(KB, folder)
    (folder / "photo.md").write_bytes(PNG)
    return folder


def env_for(index: Path) -> dict[str, str]:
    return {**os.environ, "RAGSTREAM_INDEX_DIR": str(index),
            "RAGSTREAM_UPLOADS_DIR": str(index.parent / "uploads")}


def in_terminal(args: list[str], env: dict[str, str]) -> tuple[str, int]:
    """Run the CLI with stdin, stdout and stderr on a pseudo-terminal of 120 columns; what
    the terminal received, and the exit code."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "ragstream", *args], cwd=ROOT, env=env,
                            stdin=follower, stdout=follower, stderr=follower)
    os.close(follower)
    out = b""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 1.0)
        if ready:
            try:
                data = os.read(leader, 65536)
            except OSError:  # the other end closed
                break
            if not data:
                break
            out += data
        elif proc.poll() is not None:
            break
    os.close(leader)
    return out.decode("utf-8", errors="replace"), proc.wait(timeout=60)


def test_a_terminal_shows_the_progress_bar_and_the_refused_file(docs, tmp_path):
    out, code = in_terminal(["ingest", str(docs)], env_for(tmp_path / "index"))
    assert code == 1, out  # a file was refused
    frames = [f for f in re.split(r"[\r\n]+", out) if "files" in f and "%|" in f]
    assert frames, out
    # the bar: files done of total, chunks written, elapsed time, the current file
    assert all(re.search(rf"ingesting into default +\d+%\|.*\| \d+/{FILES} files", f)
               for f in frames if f"/{FILES} files" in f), frames
    assert any(re.search(r"\d+ chunks? written · \d+:\d\d elapsed", f) for f in frames), frames
    assert any(re.search(r"· docs/[\w.-]+\.md", f) for f in frames), frames
    dones = [int(m.group(1)) for f in frames if (m := re.search(rf"(\d+)/{FILES} files", f))]
    assert dones == sorted(dones) and dones[-1] == FILES, dones
    last = next(f for f in reversed(frames) if f"{FILES}/{FILES} files" in f)
    assert "100%" in last and re.search(r"[1-9]\d* chunks written", last), last
    # then the report, the refused file with its reason
    assert f"{FILES - 1} processed, 0 skipped (unchanged), 1 failed" in out
    assert re.search(r"error: docs/photo\.md: BinaryFileError: .*PNG", out), out


def test_quiet_and_a_pipe_get_the_report_without_a_bar(docs, tmp_path):
    out, code = in_terminal(["ingest", str(docs), "--quiet"], env_for(tmp_path / "index"))
    assert code == 1
    assert "%|" not in out and " files" not in out.split("processed")[0], out
    assert f"{FILES - 1} processed" in out and "error: docs/photo.md: BinaryFileError" in out
    # a pipe (a script, a log file): no bar either; the files are unchanged now
    piped = subprocess.run([sys.executable, "-m", "ragstream", "ingest", str(docs)], cwd=ROOT,
                           env=env_for(tmp_path / "index"), capture_output=True, text=True,
                           timeout=600)
    assert piped.returncode == 1
    assert "%|" not in piped.stderr and "%|" not in piped.stdout, piped.stderr
    assert f"0 processed, {FILES - 1} skipped (unchanged), 1 failed" in piped.stdout


def test_ctrl_c_cancels_cleanly_and_exits_130(docs, tmp_path):
    """Ctrl-C while the ingest waits for another one (this test holds the index's lock, so the
    moment does not depend on the machine's speed): the job stops, nothing is written, the
    report says so, and the exit code is 130."""
    import signal

    from ragstream.backends.lock import IngestLock

    index = tmp_path / "index"
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    with IngestLock(index, 0):
        # PYTHONFAULTHANDLER: should it not exit, SIGABRT makes it print where each thread is.
        # Ctrl-C acts as in a person's terminal even when these tests run where SIGINT is
        # ignored (a background job of a script, nohup), which the ingest would inherit
        proc = subprocess.Popen([sys.executable, "-m", "ragstream", "ingest", str(docs)],
                                cwd=ROOT, env={**env_for(index), "PYTHONFAULTHANDLER": "1"},
                                stdin=follower, stdout=follower, stderr=follower,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        os.close(follower)
        out = b""
        deadline = time.monotonic() + 300
        while b"starting (waiting for another ingestion" not in out:
            assert time.monotonic() < deadline and proc.poll() is None, out
            if select.select([leader], [], [], 1.0)[0]:
                out += os.read(leader, 65536)
        proc.send_signal(signal.SIGINT)
        # the terminal is read while the ingest winds down, as a terminal is: a progress bar
        # written into a full pseudo-terminal would block the process that draws it
        deadline, aborted = time.monotonic() + 120, False
        while proc.poll() is None:
            if time.monotonic() > deadline and not aborted:
                proc.send_signal(signal.SIGABRT)  # the threads' stacks, then the failure below
                deadline, aborted = time.monotonic() + 10, True
            elif time.monotonic() > deadline:
                proc.kill()
            if select.select([leader], [], [], 0.25)[0]:
                try:
                    out += os.read(leader, 65536)
                except OSError:
                    pass
        code = proc.wait()
        assert not aborted, "no exit 120 s after Ctrl-C:\n" + out.decode("utf-8", "replace")
    while select.select([leader], [], [], 0.5)[0]:
        try:
            data = os.read(leader, 65536)
        except OSError:
            break
        if not data:
            break
        out += data
    os.close(leader)
    text = out.decode("utf-8", errors="replace")
    assert code == 130, text
    assert "cancelled: 0 processed" in text and "cancelled while waiting" in text, text
