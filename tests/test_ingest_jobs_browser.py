"""The background ingest in Debian's Chromium at 1280x900, driven by Playwright (issue 46): a
knowledge base made with "Create and select" from a folder of twelve pages of the Apache HTTP
Server manual (as Debian's apache2-doc installs them, the issue's case) is selected at once,
and while its folder is ingested the sidebar shows the bar under the picker — the knowledge
base, files done of 12, the current file — with chunks written, elapsed and remaining time
and a Cancel button, redrawn by itself; the page then shows the twelve documents and what was
ingested, with no click. The screenshot taken during the ingest is docs/ingest-progress-1280.png
(copied there with RAGSTREAM_UPDATE_DOCS=1).

The page server, Chromium's path and flags and the screenshot folder are test_browser.py's."""

import re
import shutil
import uuid

import pytest

from benchmarks.apache_docs.make_docs import HTML, MANUAL
from tests.ui.test_browser import ARGS, CHROMIUM, SHOTS, app_url, open_sidebar, publish, wait_idle  # noqa: F401

SHOT = "ingest-progress-1280.png"


@pytest.fixture
def manual_pages(tmp_path):
    """Twelve pages of the Apache manual, copied as they are into a folder of their own."""
    if not all((MANUAL / page).is_file() for page in HTML.values()):
        pytest.skip("Debian's apache2-doc is not installed (scripts/setup.sh --browser installs it)")
    folder = tmp_path / "apache-manual"
    folder.mkdir()
    for name, page in HTML.items():
        shutil.copyfile(MANUAL / page, folder / name)
    return folder


def test_creating_a_knowledge_base_from_a_folder_shows_its_progress_and_the_page_stays_usable(
        app_url, manual_pages, kb_engine):  # noqa: F811 (app_url is test_browser's fixture)
    from playwright.sync_api import expect, sync_playwright

    name = f"ops-{uuid.uuid4().hex[:4]}"
    SHOTS.mkdir(parents=True, exist_ok=True)
    try:
        with sync_playwright() as p:
            browser, page, sidebar, picker = open_sidebar(p, app_url)
            sidebar.get_by_text("Manage knowledge bases").click()
            sidebar.get_by_role("textbox", name="New knowledge base").fill(name)
            sidebar.get_by_role("textbox", name="Its documents folder (optional)").fill(
                str(manual_pages))
            sidebar.get_by_role("button", name="Create and select").click()
            # the bar under the picker, redrawn by itself while the folder is ingested
            bar = sidebar.get_by_test_id("stProgress")
            expect(bar).to_contain_text(f"Ingesting into {name} — its folder apache-manual",
                                        timeout=60_000)
            expect(bar).to_contain_text(re.compile(r"\b([2-9]|1[01]) of 12 files · now "
                                                   r"apache-manual/\S+\.html"), timeout=120_000)
            times = sidebar.get_by_text(re.compile(r"^\d+ chunks? written · \d+:\d\d elapsed, "
                                                   r"about \d+:\d\d left$"))
            expect(times).to_be_visible()
            expect(sidebar.get_by_role("button", name="Cancel")).to_be_visible()
            # the new knowledge base is selected already
            expect(picker).to_have_value(name)
            page.screenshot(path=str(SHOTS / SHOT))
            # the end: no bar, the twelve documents counted, what was done said, no click
            expect(bar).to_have_count(0, timeout=300_000)
            documents = sidebar.get_by_test_id("stMetric").filter(has_text="Documents") \
                .get_by_test_id("stMetricValue")
            expect(documents).to_have_text("12", timeout=60_000)
            expect(page.get_by_text(f"Knowledge base '{name}': 12 documents ingested from "
                                    f"{manual_pages} in")).to_be_visible()
            browser.close()
    finally:
        if kb_engine.knowledge_bases().find(name) is not None:
            kb_engine.delete_kb(name)
    publish(SHOT)
