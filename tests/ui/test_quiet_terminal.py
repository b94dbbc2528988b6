"""The page's start command keeps its terminal quiet: it watches none of the repository's
files (issue 46: Streamlit watched the whole checkout, `.venv` and the index included, and
flooded the terminal with "Inotify queue overflowed" lines while the index was written)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.servers import page_server

ROOT = Path(__file__).resolve().parents[2]


def inotify_watches(pid: int) -> int:
    """The number of inotify watches the process holds (one ``inotify wd:`` line each in
    the fdinfo of its inotify descriptors)."""
    count = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            if os.readlink(fd) != "anon_inode:inotify":
                continue
            info = (Path(f"/proc/{pid}/fdinfo") / fd.name).read_text()
        except OSError:
            continue
        count += sum(1 for line in info.splitlines() if line.startswith("inotify wd:"))
    return count


@pytest.mark.skipif(not Path("/proc/self/fdinfo").exists(), reason="needs Linux's /proc")
def test_the_start_command_watches_no_files_and_stays_quiet(kb_engine, tmp_path):
    env = {**os.environ, "RAGSTREAM_INDEX_DIR": str(kb_engine.cfg.index_dir),
           "RAGSTREAM_UPLOADS_DIR": str(tmp_path / "uploads")}
    log = tmp_path / "terminal.txt"
    with log.open("w") as out, page_server(
            env, command=["bash", str(ROOT / "scripts" / "run_app.sh")], out=out) as (url, proc):
        # run_app.sh execs streamlit, so the process started is the page's server. A session
        # in a real browser makes Streamlit run the script and register the files it watches
        # (the app's modules, the folders they lie in)
        from playwright.sync_api import sync_playwright

        from tests.ui.test_browser import ARGS, CHROMIUM, wait_idle
        burst = ROOT / "test-artifacts" / f"burst-{os.getpid()}"
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                page.goto(url)
                page.get_by_role("textbox", name="Prompt").wait_for(timeout=180_000)
                wait_idle(page)
                watching = inotify_watches(proc.pid)
                # a burst of writes below the checkout, as an ingest into data/index makes
                burst.mkdir(parents=True, exist_ok=True)
                for i in range(3000):
                    (burst / f"f{i % 50}.txt").write_text(str(i))
                time.sleep(1)
                browser.close()
        finally:
            for f in burst.glob("*"):
                f.unlink()
    assert watching == 0, f"the page's server watches {watching} folders"
    said = log.read_text()
    assert "Inotify" not in said and "overflow" not in said.lower(), said[-2000:]
