"""The real page in Debian's Chromium, driven by Playwright: auto-run on a sample question."""

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ARTIFACTS = ROOT / "test-artifacts"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def app_url(kb_engine, tmp_path_factory):
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is not installed: run `bash scripts/setup.sh --browser` "
                    "(the README's test command does it).")
    port = free_port()
    env = {**os.environ, "RAGSTREAM_INDEX_DIR": str(kb_engine.cfg.index_dir),
           "RAGSTREAM_UPLOADS_DIR": str(tmp_path_factory.mktemp("browser") / "uploads")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(ROOT / "ui_streamlit.py"),
         "--server.headless", "true", "--server.address", "127.0.0.1", "--server.port", str(port),
         "--browser.gatherUsageStats", "false"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                if r.read().strip() == b"ok":
                    break
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail("streamlit did not start")
        time.sleep(0.5)
    yield url
    proc.terminate()
    proc.wait(timeout=30)


PROMPT = "Task: What does A3 do with near-duplicate chunks?\nAudience: beginner"


def test_auto_run_in_a_real_browser(app_url, kb_engine):
    from playwright.sync_api import expect, sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1600, "height": 1300})
        page.goto(app_url)
        expect(page.get_by_role("heading", name="RAGstream workbench")).to_be_visible(timeout=180_000)
        # before any stage runs, Retrieval's button is disabled
        expect(page.get_by_role("button", name="Retrieve", exact=True)).to_be_disabled()

        prompt = page.get_by_role("textbox", name="Prompt")
        prompt.fill(PROMPT)
        prompt.press("Control+Enter")
        page.get_by_role("button", name="Run all remaining stages").click()
        expect(page.get_by_text("pipeline complete")).to_be_visible(timeout=240_000)

        # auto-run also answered, with its confidence and numbered sources
        expect(page.get_by_text("confidence", exact=False).first).to_be_visible()
        expect(page.get_by_text("Sources", exact=True)).to_be_visible()
        # every stage ran: every button carries its check mark
        expect(page.get_by_role("button", name="✓ Build")).to_be_visible()
        # prompt_ready on the page, with its blocks
        code = page.locator("[data-testid='stCode']").first
        expect(code).to_contain_text("## System")
        expect(code).to_contain_text("What does A3 do with near-duplicate chunks?")
        expect(code).to_contain_text("## Sources")
        # the chunk tables: one expander per stage view, the A4 one open with its grid
        for title in ("Retrieval —", "ReRanker —", "A3 NLI gate —", "A4 condenser —"):
            expect(page.get_by_text(title)).to_be_visible()
        # the open table (A4's) shows the same rows as the engine computes for this prompt
        expected = kb_engine.run(PROMPT).view("a4")
        grid = page.locator("[data-testid='stDataFrame']:visible").first
        cells = grid.locator("[role='gridcell']")
        expect(cells.nth(1)).to_have_text(expected[0].chunk_id)
        expect(cells.nth(0)).to_have_text("1")
        page.screenshot(path=str(ARTIFACTS / "workbench-auto-run.png"), full_page=True)
        browser.close()
    assert (ARTIFACTS / "workbench-auto-run.png").stat().st_size > 10_000
