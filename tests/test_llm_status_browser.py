"""The sidebar's LLM block in Debian's Chromium at 1280x900 (Playwright), the endpoint a
loopback port where nothing listens: after an auto run the block says the endpoint is not
reachable and why answers are offline; "Test connection" adds its own finding.

The screenshot goes to the screenshots folder (``RAGSTREAM_SHOTS_DIR``, as in
``tests/ui/test_browser.py``), and with ``RAGSTREAM_UPDATE_DOCS=1`` also to
``docs/llm-status-1280.png`` (never otherwise: a test run does not rewrite tracked files)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from tests.servers import free_port

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SHOTS = Path(os.environ.get("RAGSTREAM_SHOTS_DIR")
             or Path(tempfile.gettempdir()) / "ragstream-screenshots")
NAME = "llm-status-1280.png"


@pytest.fixture
def down_page(kb_engine, tmp_path):
    """The page served by Streamlit on loopback, its LLM endpoint a port where nothing
    listens; yields (page URL, endpoint URL)."""
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is not installed: run `bash scripts/setup.sh --browser`.")
    port, endpoint = free_port(), f"http://127.0.0.1:{free_port()}/v1"
    env = {**os.environ, "RAGSTREAM_INDEX_DIR": str(kb_engine.cfg.index_dir),
           "RAGSTREAM_UPLOADS_DIR": str(tmp_path / "uploads"),
           "RAGSTREAM_LLM_BASE_URL": endpoint, "RAGSTREAM_LLM_MODEL": "gpt-4o-mini"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(ROOT / "ui_streamlit.py"),
         "--server.headless", "true", "--server.address", "127.0.0.1", "--server.port", str(port),
         "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    try:
        while True:
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                    if r.read().strip() == b"ok":
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail("streamlit did not start")
            time.sleep(0.5)
        yield url, endpoint
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_the_sidebar_says_the_endpoint_is_down_and_why(down_page):
    from playwright.sync_api import expect, sync_playwright

    url, endpoint = down_page
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(url)
            prompt = page.get_by_role("textbox", name="Prompt")
            expect(prompt).to_be_visible(timeout=180_000)
            prompt.fill("How does reranking work?")
            prompt.press("Control+Enter")
            page.get_by_role("button", name="Run all remaining stages").click()
            expect(page.get_by_text("pipeline complete")).to_be_visible(timeout=240_000)

            sidebar = page.locator("[data-testid=stSidebar]")
            expect(sidebar.get_by_text("Not reachable")).to_be_visible(timeout=60_000)
            sidebar.get_by_role("button", name="Test connection").click()
            tested = sidebar.get_by_text("Test connection (")
            expect(tested).to_be_visible(timeout=60_000)
            expect(tested).to_contain_text("connection refused")
            expect(tested).to_contain_text("RAGSTREAM_LLM_BASE_URL")
            because = sidebar.get_by_text("Answering offline because")
            expect(because).to_contain_text(f"nothing listens at {endpoint}")
            # the block from its heading down, at the top of the sidebar
            sidebar.get_by_role("heading", name="LLM").evaluate(
                "h => h.scrollIntoView({block: 'start'})")
            expect(tested).to_be_in_viewport()
            page.wait_for_timeout(500)
            box = sidebar.bounding_box()
            assert box is not None and box["width"] >= 250  # the sidebar is open, not folded
            page.screenshot(path=str(SHOTS / NAME))
        finally:
            browser.close()
    if os.environ.get("RAGSTREAM_UPDATE_DOCS") == "1":
        shutil.copyfile(SHOTS / NAME, ROOT / "docs" / NAME)
