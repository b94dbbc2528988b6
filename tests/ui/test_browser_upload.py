"""The sidebar's uploader in Debian's Chromium at 1280x900, driven by Playwright (issue 32): five
files chosen — a good Markdown file, a good text file, an empty PDF, a PNG named .pdf and an
empty text file — are ingested with no other click: the counts go up, one red report names each
refused file with its reason, the refused files are not in the knowledge base's folder, and the
uploader shows the real size limit (``ingestion.max_file_mb``). Files chosen next are ingested
alone, and one over the limit stays listed with the uploader's own reason. The upload goes into a knowledge
base of the test's own, so the session's shared default index is not changed.

The page server, Chromium's path and flags and the screenshot folder are test_browser.py's."""

import math
import uuid
from pathlib import Path

import pytest

from ragstream.common.config import load_config
from tests.ui.test_apptest_upload import FIVE, REFUSED
from tests.ui.test_browser import ARGS, CHROMIUM, SHOTS, app_url, open_sidebar, wait_idle  # noqa: F401 (a fixture)


@pytest.fixture
def own_kb(kb_engine):
    """A knowledge base with an empty folder of its own, made before the page opens (the page
    reads the list of knowledge bases on every draw); deleted afterwards."""
    kb = kb_engine.create_kb(f"browser-up-{uuid.uuid4().hex[:6]}")
    yield kb
    if kb_engine.knowledge_bases().find(kb.name) is not None:
        kb_engine.delete_kb(kb.name)


def test_five_chosen_files_are_ingested_with_no_click_and_the_refused_ones_named(
        app_url, own_kb, tmp_path):  # noqa: F811 (app_url is test_browser's fixture)
    from playwright.sync_api import expect, sync_playwright

    chosen = tmp_path / "chosen"
    chosen.mkdir()
    for name, data, _mime in FIVE:
        (chosen / name).write_bytes(data)
    shown = math.ceil(load_config().settings.ingestion.max_file_mb)  # the uploader's whole MB
    big = chosen / "huge.md"
    big.write_bytes(b"# Huge\n\n" + b"word " * (shown * 1024 * 1024 // 5 + 10))
    (chosen / "okapi.md").write_bytes(b"# Okapi\n\nThe okapi named Lulu Marmalade lives in the "
                                      b"rain forest and has striped legs.\n")
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser, page, sidebar, picker = open_sidebar(p, app_url)
        picker.click()
        page.get_by_role("option", name=own_kb.name, exact=True).click()
        wait_idle(page)
        documents = sidebar.get_by_test_id("stMetric").filter(has_text="Documents") \
            .get_by_test_id("stMetricValue")
        expect(documents).to_have_text("0")
        wait_idle(page)
        # the uploader says the real limit, not Streamlit's 200 MB
        uploader = sidebar.get_by_test_id("stFileUploader")
        expect(uploader).to_have_count(1)  # the default's (its key names the knowledge base) gone
        expect(uploader).to_contain_text(f"{shown}MB per file")
        expect(uploader).not_to_contain_text("200MB")

        uploader.scroll_into_view_if_needed()  # where a person is when they choose files
        uploader.locator("input[type=file]").set_input_files([chosen / n for n, _d, _m in FIVE])
        report = sidebar.get_by_test_id("stAlertContentError")
        expect(report).to_contain_text("5 files chosen: 2 ingested", timeout=120_000)
        wait_idle(page)
        expect(documents).to_have_text("2")
        expect(report).to_have_count(1)
        expect(report).to_contain_text("3 refused and not kept")
        for name, reason in REFUSED.items():
            expect(report).to_contain_text(f"{name} — {reason}")
        assert report.inner_text().count("Ingestion reads Markdown") == 1  # said once, for both PDFs
        expect(sidebar.get_by_test_id("stAlertContentSuccess")).to_have_count(0)
        # the uploader still lists what was chosen (nothing disappears unexplained)
        expect(uploader.get_by_test_id("stFileChip")).to_have_count(5)
        page.screenshot(path=str(SHOTS / "upload-1280-as-left.png"))
        # the sidebar scrolled to the report's end: the report whole, the uploader and as much
        # of the counts above as fits
        report.evaluate("e => (e.closest('[data-testid=stAlert]') || e).scrollIntoView({block: 'end'})")
        page.wait_for_timeout(300)
        page.screenshot(path=str(SHOTS / "upload-1280.png"))

        # more files chosen: only they are ingested; one over the limit is held back by the
        # uploader, which says so beside it and keeps it listed
        uploader.locator("input[type=file]").set_input_files([big, chosen / "okapi.md"])
        done = sidebar.get_by_test_id("stAlertContentSuccess")
        expect(done).to_contain_text("1 file chosen: 1 ingested (1 chunk).", timeout=120_000)
        wait_idle(page)
        expect(documents).to_have_text("3")
        expect(uploader.get_by_test_id("stFileChip")).to_have_count(7)
        expect(uploader).to_contain_text(f"File must be {shown:.1f}MB or smaller")
        browser.close()
    assert sorted(p.name for p in Path(own_kb.folder).iterdir()) == [
        "capybara.md", "okapi.md", "tapir.txt"]
