"""The answer in a real browser (Debian's Chromium, driven by Playwright) at 1280x900: auto mode
answers with its confidence in words and its figures folded under it; the [n] in the answer's
text opens the source in its document in a dialog — the section's title, the quoted passage
marked, its code block drawn as code, nothing scrolling sideways — as does the source's button
under the answer; a follow-up in the same conversation says what it was read as.

The screenshots go to a temporary folder (``RAGSTREAM_SHOTS_DIR``, else
``ragstream-screenshots`` in the system's temp folder); with ``RAGSTREAM_UPDATE_DOCS=1`` they
are also copied to ``docs/`` (``answer-1280.png``, ``citation-1280.png``)."""

import re

from tests.ui.test_browser import ARGS, CHROMIUM, SHOTS, app_url, publish  # noqa: F401

START = "How do I start a Chroma server?"
FOLLOW_UP = "And how do I stop it?"

#: where the first [1] of the answer's text stands on the screen (outside code), or null
MARKER_JS = """() => {
  const box = document.querySelector('.st-key-answer_text');
  const walker = document.createTreeWalker(box, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const i = n.data.indexOf('[1]');
    if (i < 0 || n.parentElement.closest('code, pre')) continue;
    const r = new Range(); r.setStart(n, i); r.setEnd(n, i + 3);
    const q = r.getBoundingClientRect();
    return {x: q.x + q.width / 2, y: q.y + q.height / 2};
  }
  return null;
}"""

#: the open dialog: its marks (and whether any lies in code), its code blocks' text, and
#: whether it scrolls sideways
DIALOG_JS = """() => {
  const d = document.querySelector('[role=dialog]');
  const marks = [...d.querySelectorAll('mark')].filter(m => m.checkVisibility());
  return {
    marks: marks.map(m => m.textContent),
    marksInCode: marks.filter(m => m.closest('pre, code')).length,
    code: [...d.querySelectorAll('pre code')].filter(c => c.checkVisibility()).map(c => c.textContent),
    wide: [...d.querySelectorAll('*')].filter(e => e.scrollWidth > e.clientWidth + 1
             && getComputedStyle(e).overflowX !== 'visible' && !e.closest('pre')).length,
    dialogWidth: d.getBoundingClientRect().width,
  };
}"""


def shoot_around(page, locator, path, margin: int = 24) -> None:
    """A screenshot of ``locator`` with ``margin`` pixels of the page around it (the window
    made as tall as the page first, as ``shoot`` does)."""
    size = page.viewport_size
    tall = page.evaluate("() => document.querySelector('[data-testid=stMain]').scrollHeight")
    page.set_viewport_size({"width": size["width"], "height": max(size["height"], tall + 100)})
    page.wait_for_timeout(800)
    box = locator.bounding_box()
    top = margin // 4  # the line above the block is not part of it
    page.screenshot(path=str(path), clip={"x": max(0, box["x"] - margin),
                                          "y": max(0, box["y"] - top),
                                          "width": box["width"] + 2 * margin,
                                          "height": box["height"] + top + margin})
    page.set_viewport_size(size)


def ask(page, prompt_text: str, turn: int) -> None:
    """Type ``prompt_text`` and auto-run it; wait for its answer, turn ``turn`` of the
    page's conversation."""
    from playwright.sync_api import expect

    prompt = page.get_by_role("textbox", name="Prompt")
    prompt.fill(prompt_text)
    prompt.press("Control+Enter")
    page.get_by_role("button", name="Run all remaining stages").click()
    expect(page.get_by_text(re.compile(f"^Turn {turn} of conversation"))).to_be_visible(
        timeout=240_000)
    expect(page.get_by_text("pipeline complete")).to_be_visible(timeout=60_000)
    expect(page.locator(".st-key-cite_1 button").first).to_be_visible(timeout=60_000)
    page.wait_for_timeout(1500)  # the run's last redraw


def check_dialog(page, expect) -> dict:
    """The dialog shows the section of the chunk, the passage marked, its command as code."""
    dialog = page.get_by_role("dialog")
    expect(dialog).to_be_visible(timeout=60_000)
    expect(dialog.get_by_role("heading", name=re.compile("Starting a Chroma server"))).to_be_visible()
    expect(dialog.locator("mark").first).to_be_visible()
    page.wait_for_timeout(800)
    found = page.evaluate(DIALOG_JS)
    assert found["marks"] and found["marksInCode"] == 0, found
    assert any(text.startswith("chroma run --path") for text in found["code"]), found
    assert found["wide"] == 0, f"something in the dialog scrolls sideways: {found}"
    return found


def test_the_answer_and_its_sources_in_a_real_browser(app_url):  # noqa: F811
    from playwright.sync_api import expect, sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(app_url)
        expect(page.get_by_role("textbox", name="Prompt")).to_be_visible(timeout=180_000)
        ask(page, START, 1)
        block = page.locator(".st-key-answer_block")
        # the confidence: the level's badge and why, in words; the figures folded under it
        line = block.locator("[data-testid=stMarkdownContainer]", has_text=" confidence").first
        expect(line).to_have_text(re.compile(r"^(High|Medium|Low) confidence\s*\S"))
        assert not re.search(r"\d\.\d\d", line.inner_text()), line.inner_text()
        figures = block.get_by_text("The figures behind the confidence")
        expect(figures).to_be_visible()
        expect(block.get_by_text("P(answerable)", exact=False)).to_be_hidden()
        figures.click()
        expect(block.get_by_text("P(answerable)", exact=False)).to_be_visible()
        figures.click()  # folded again
        expect(block.get_by_text("P(answerable)", exact=False)).to_be_hidden()
        # the [1] in the answer's text opens its source, without reloading the page
        page.evaluate("() => { window.__notReloaded = true; }")
        marker = page.evaluate(MARKER_JS)
        assert marker, "no [1] in the answer's text"
        page.mouse.click(marker["x"], marker["y"])
        check_dialog(page, expect)
        assert page.evaluate("() => window.__notReloaded === true"), "the page reloaded"
        page.screenshot(path=str(SHOTS / "citation-1280.png"))
        page.get_by_role("dialog").get_by_role("button", name="Close").click()
        expect(page.get_by_role("dialog")).to_be_hidden(timeout=30_000)
        # the source's button under the answer opens the same view
        page.locator(".st-key-cite_1 button").first.click()
        check_dialog(page, expect)
        page.get_by_role("dialog").get_by_role("button", name="Close").click()
        expect(page.get_by_role("dialog")).to_be_hidden(timeout=30_000)

        # the cited chunk under "Sources" shows its command as code, without the fence lines
        box = block.locator(".rs-evidence").first
        box.scroll_into_view_if_needed()
        expect(box.locator(".rs-code").first).to_be_visible()
        assert "```" not in box.inner_text(), box.inner_text()
        assert box.locator(".rs-code").first.evaluate(
            "e => getComputedStyle(e).fontFamily").lower().count("mono") >= 1
        shoot_around(page, box, SHOTS / "cited-chunk-1280.png")

        # a follow-up: what it was read as, above its answer
        ask(page, FOLLOW_UP, 2)
        expect(block.get_by_text("Read as:")).to_be_visible()
        expect(block.get_by_text(f"You typed “{FOLLOW_UP}”", exact=False)).to_be_visible()
        expect(block.locator(".st-key-cited_sources button").first).to_be_visible()
        shoot_around(page, block, SHOTS / "answer-1280.png")
        browser.close()
    names = ["answer-1280.png", "citation-1280.png", "cited-chunk-1280.png"]
    assert all((SHOTS / n).stat().st_size > 10_000 for n in names)
    publish(*names)
