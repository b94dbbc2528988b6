"""The sidebar's LLM block in Debian's Chromium at 1280x900 (Playwright), the endpoint a
loopback port where nothing listens: after an auto run the block says the endpoint is not
reachable and why answers are offline; "Test connection" adds its own finding.

The screenshot goes to the screenshots folder (``RAGSTREAM_SHOTS_DIR``, as in
``tests/ui/test_browser.py``), and with ``RAGSTREAM_UPDATE_DOCS=1`` also to
``docs/llm-status-1280.png`` (never otherwise: a test run does not rewrite tracked files)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.servers import free_port, page_server
from tests.ui.test_browser import ARGS, CHROMIUM, SHOTS

ROOT = Path(__file__).resolve().parents[1]
NAME = "llm-status-1280.png"


@pytest.fixture
def down_page(kb_engine, tmp_path):
    """The page served by Streamlit on loopback, its LLM endpoint a port where nothing
    listens; yields (page URL, endpoint URL)."""
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is not installed: run `bash scripts/setup.sh --browser`.")
    endpoint = f"http://127.0.0.1:{free_port()}/v1"
    env = {**os.environ, "RAGSTREAM_INDEX_DIR": str(kb_engine.cfg.index_dir),
           "RAGSTREAM_UPLOADS_DIR": str(tmp_path / "uploads"),
           "RAGSTREAM_LLM_BASE_URL": endpoint, "RAGSTREAM_LLM_MODEL": "gpt-4o-mini"}
    with page_server(env, wait_s=120) as (url, _proc):
        yield url, endpoint


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
