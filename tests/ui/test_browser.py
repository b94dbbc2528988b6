"""The real page in Debian's Chromium, driven by Playwright: auto-run on a sample question; the
charts draw their marks (the score histograms' bars, the rank-movement chart's lines and
points), the stage buttons show their whole labels, the chunk tables and the stage diff fit
without sideways scrolling, the Evidence tab shows the opened chunk's used sentences
highlighted, the Eval tab runs two questions and draws its chart, and a chunk the A3 gate
dropped is pinned by ticking its box in the A3 table and, after one re-run, leads the final
selection with its reason; at 1280x900 (and 1920x1080).

The runs: every pass is kept and listed in the Runs tab, a run picked there opens on the page,
the Compare tab sets the page's run beside the one before it (inputs, chunk table, the two
rank charts), a reload brings the session's latest run back; the tab bar and every table fit
without sideways scrolling.

The screenshots it checks go to a temporary folder (``RAGSTREAM_SHOTS_DIR``, else
``ragstream-screenshots`` in the system's temp folder), never into the working tree; with
``RAGSTREAM_UPDATE_DOCS=1`` they are also copied to ``docs/`` (for the README), so a test run
never rewrites tracked files unless asked to."""

import os
import re
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from tests.servers import page_server

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ARTIFACTS = Path(os.environ.get("RAGSTREAM_SHOTS_DIR")
                 or Path(tempfile.gettempdir()) / "ragstream-screenshots")
SHOTS = ARTIFACTS
DOCS = ROOT / "docs"


def publish(*names: str) -> None:
    """Copy the named screenshots to docs/ when RAGSTREAM_UPDATE_DOCS=1 (after checking them)."""
    if os.environ.get("RAGSTREAM_UPDATE_DOCS") == "1":
        for name in names:
            shutil.copyfile(SHOTS / name, DOCS / name)


@pytest.fixture(scope="module")
def app_url(kb_engine, tmp_path_factory):
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is not installed: run `bash scripts/setup.sh --browser` "
                    "(the README's test command does it).")
    env = {**os.environ, "RAGSTREAM_INDEX_DIR": str(kb_engine.cfg.index_dir),
           "RAGSTREAM_UPLOADS_DIR": str(tmp_path_factory.mktemp("browser") / "uploads")}
    with page_server(env, wait_s=120) as (url, _proc):
        yield url


PROMPT = "Task: What does A3 do with near-duplicate chunks?\nAudience: beginner"


def test_auto_run_in_a_real_browser(app_url, kb_engine):
    from playwright.sync_api import expect, sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1600, "height": 1300})
        page.goto(app_url)
        expect(page.get_by_role("heading", name="RAGstream workbench")).to_be_visible(timeout=180_000)
        # the first script run can take a while on a loaded machine: wait for the prompt box
        expect(page.get_by_role("textbox", name="Prompt")).to_be_visible(timeout=180_000)
        # before any stage runs, Retrieval's button is disabled
        expect(page.get_by_role("button", name="Retrieval", exact=True)).to_be_disabled(
            timeout=60_000)

        prompt = page.get_by_role("textbox", name="Prompt")
        prompt.fill(PROMPT)
        prompt.press("Control+Enter")
        page.get_by_role("button", name="Run all remaining stages").click()
        expect(page.get_by_text("pipeline complete")).to_be_visible(timeout=240_000)

        # auto-run also answered, with its confidence and numbered sources
        expect(page.get_by_text("confidence", exact=False).first).to_be_visible()
        # (the main area's: the sidebar's filter box is labelled "Sources" too)
        expect(page.get_by_test_id("stMain").get_by_text("Sources", exact=True).first).to_be_visible()
        # every stage ran: every button carries its check mark
        expect(page.get_by_role("button", name="✓ Prompt Builder")).to_be_visible()
        # prompt_ready on the page, with its blocks
        code = page.locator("[data-testid='stCode']").first
        expect(code).to_contain_text("## System")
        expect(code).to_contain_text("What does A3 do with near-duplicate chunks?")
        expect(code).to_contain_text("## Sources")
        # the chunk tables: one expander per stage view, the A4 one open with its grid
        for title in ("Retrieval —", "ReRanker —", "A3 Gate —", "A4 Condenser —"):
            expect(page.get_by_text(title)).to_be_visible()
        # the open table (A4's) shows the same rows as the engine computes for this prompt
        expected = kb_engine.run(PROMPT).view("a4")
        grid = page.locator("[data-testid='stDataFrame']:visible").first
        cells = grid.locator("[role='gridcell']")
        # after pin, exclude, rank: the chunk id, then § its section
        expect(cells.nth(3)).to_have_text(re.compile(f"^{re.escape(expected[0].chunk_id)}( §|$)"))
        expect(cells.nth(2)).to_have_text("1")
        page.screenshot(path=str(ARTIFACTS / "workbench-auto-run.png"), full_page=True)
        browser.close()
    assert (ARTIFACTS / "workbench-auto-run.png").stat().st_size > 10_000


LAYOUT_PROMPT = "How are documents chunked?"

#: every visible Vega chart: its size, its plot area (the root frame's background), its title's
#: and its marks' boxes (bars; lines and dots for the rank-movement chart), all in page pixels
CHARTS_JS = """() => [...document.querySelectorAll('[data-testid=stVegaLiteChart]')]
  .filter(c => c.checkVisibility()).map(c => {
    const box = e => { const r = e.getBoundingClientRect();
                       return {x: r.x, y: r.y, w: r.width, h: r.height}; };
    const svg = c.querySelector('svg');
    const plot = svg && svg.querySelector('g.role-frame.root > g > path.background');
    return {chart: box(c), svg: svg ? box(svg) : null, plot: plot ? box(plot) : null,
            canvas: c.querySelectorAll('canvas').length,
            titles: [...c.querySelectorAll('.role-title-text text')].map(box),
            marks: [...c.querySelectorAll('g.mark-rect.role-mark path')].map(box),
            lines: [...c.querySelectorAll('g.mark-line.role-mark path')].map(box),
            dots: [...c.querySelectorAll('g.mark-symbol.role-mark path')].map(box)};
  })"""

#: the text of every visible stage button: its label element's full and shown width
BUTTONS_JS = """() => [...document.querySelectorAll('[class*="st-key-stage_"] button')]
  .filter(b => b.checkVisibility()).map(b => {
    const t = b.querySelector('[data-testid=stMarkdownContainer]');
    return {text: b.innerText, scroll: t.scrollWidth, client: t.clientWidth};
  })"""

#: every visible table's grid scroller: its content width and its shown width
GRIDS_JS = """() => [...document.querySelectorAll('[data-testid=stDataFrame]')]
  .filter(g => g.checkVisibility()).map(g => {
    const s = g.querySelector('.dvn-scroller');
    return {scroll: s.scrollWidth, client: s.clientWidth};
  })"""


#: true once every visible table's grid has drawn its scroller (a grid mounts after its frame)
GRIDS_READY_JS = """() => [...document.querySelectorAll('[data-testid=stDataFrame]')]
  .filter(g => g.checkVisibility()).every(g => g.querySelector('.dvn-scroller'))"""


def grid_widths(page) -> list[dict]:
    """GRIDS_JS once every visible grid is drawn."""
    page.wait_for_function(GRIDS_READY_JS, timeout=60_000)
    return page.evaluate(GRIDS_JS)


#: the Evidence tab: the page's, the main area's, the panel's and the sentence list's widths
#: (content and shown), the chunk box and each visible <mark> in it, in page pixels
EVIDENCE_JS = """() => {
    const box = e => { const r = e.getBoundingClientRect();
                       return {x: r.x, y: r.y, w: r.width, h: r.height}; };
    const widths = e => ({scroll: e.scrollWidth, client: e.clientWidth});
    const panel = [...document.querySelectorAll('[role=tabpanel]')].find(p => p.checkVisibility());
    const chunk = panel.querySelector('.rs-evidence');
    return {page: widths(document.documentElement),
            main: widths(document.querySelector('[data-testid=stMain]')),
            panel: widths(panel),
            list: widths(panel.querySelector('.st-key-evidence_sentences')),
            box: {...box(chunk), ...widths(chunk)},
            marks: [...chunk.querySelectorAll('mark')].filter(m => m.checkVisibility())
              .map(m => ({...box(m), keys: m.dataset.keys, outlined: m.style.outline !== ''}))};
  }"""


def check_evidence(found: dict, size: str, opened: str) -> None:
    """No sideways scrolling anywhere on the tab; every mark has a size and lies inside the
    chunk's box; the sentence opened (``opened``) is the one outlined."""
    for part in ("page", "main", "panel", "list", "box"):
        assert found[part]["scroll"] <= found[part]["client"], \
            f"{size}: the Evidence tab's {part} scrolls sideways: {found[part]}"
    box, marks = found["box"], found["marks"]
    assert marks, f"{size}: no <mark> in the chunk's text"
    for m in marks:
        assert m["w"] > 0 and m["h"] > 0, f"{size}: a mark without a size: {m}"
        assert inside(m, box), f"{size}: mark {m} outside the chunk's box {box}"
    outlined = [m for m in marks if m["outlined"]]
    assert outlined and all(opened in m["keys"].split() for m in outlined), \
        f"{size}: {opened} is not the outlined passage: {marks}"


def inside(m: dict, plot: dict) -> bool:
    return (m["x"] >= plot["x"] - 1 and m["x"] + m["w"] <= plot["x"] + plot["w"] + 1
            and m["y"] >= plot["y"] - 1 and m["y"] + m["h"] <= plot["y"] + plot["h"] + 1)


def check_bump(charts: list[dict], size: str) -> None:
    """One rank-movement chart: an SVG with a roomy plot area, a visible line per chunk (20)
    and a dot or cross per chunk and stage, all inside the plot area, and a whole title."""
    assert len(charts) == 1, f"{size}: {len(charts)} charts on the Stage diff tab"
    c = charts[0]
    assert c["svg"] and not c["canvas"], f"{size}: the bump chart is not drawn as SVG"
    plot = c["plot"]
    assert plot and plot["w"] > 300 and plot["h"] > 300, f"{size}: bump plot area {plot}"
    lines = [m for m in c["lines"] if m["w"] >= 1 or m["h"] >= 1]
    assert len(lines) == 20, f"{size}: {len(lines)} visible lines of {len(c['lines'])}"
    dots = [m for m in c["dots"] if m["w"] >= 3 and m["h"] >= 3]
    assert len(dots) >= 40, f"{size}: {len(dots)} visible points of {len(c['dots'])}"
    for m in lines + dots:
        assert inside(m, plot), f"{size}: bump mark {m} outside the plot area {plot}"
    assert c["titles"], f"{size}: the bump chart has no title"
    for t in c["titles"]:
        assert t["y"] >= c["svg"]["y"] - 0.5 and t["h"] > 0, f"{size}: bump title {t} clipped"


def check_eval(charts: list[dict], size: str) -> None:
    """The quality-against-latency chart: one SVG, a point per measure (two), visible and
    inside the plot area (or the picture, if Vega draws no frame for the layers), a whole title."""
    assert len(charts) == 1, f"{size}: {len(charts)} charts on the Eval tab"
    c = charts[0]
    assert c["svg"] and not c["canvas"], f"{size}: the eval chart is not drawn as SVG"
    area = c["plot"] or c["svg"]
    dots = [m for m in c["dots"] if m["w"] >= 3 and m["h"] >= 3]
    assert len(dots) == 2, f"{size}: {len(dots)} visible points of {len(c['dots'])}"
    for m in dots:
        assert inside(m, area), f"{size}: eval point {m} outside {area}"
    assert c["titles"] and all(t["y"] >= c["svg"]["y"] - 0.5 for t in c["titles"]), \
        f"{size}: eval chart title clipped: {c['titles']}"


def shoot(page, locator, path: Path) -> None:
    """A screenshot of ``locator`` whole: the window is made as tall as the page first (same
    width, so the same layout), since Streamlit scrolls inside the page and a screenshot of an
    element taller than the window comes out half drawn; the window's size is restored after."""
    size = page.viewport_size
    tall = page.evaluate("() => document.querySelector('[data-testid=stMain]').scrollHeight")
    page.set_viewport_size({"width": size["width"], "height": max(size["height"], tall + 100)})
    page.wait_for_timeout(800)
    locator.screenshot(path=str(path))
    page.set_viewport_size(size)


def check_charts(charts: list[dict], size: str) -> None:
    """Each chart is an SVG whose plot area has room, whose bars are visible and inside the plot
    area, and whose titles lie inside the picture (not clipped at its top)."""
    assert len(charts) == 4, f"{size}: {len(charts)} charts on the Scores tab"
    for i, c in enumerate(charts):
        where = f"{size}, chart {i + 1}"
        assert c["svg"] and not c["canvas"], f"{where}: not drawn as SVG"
        plot = c["plot"]
        assert plot and plot["w"] > 100 and plot["h"] > 40, f"{where}: plot area {plot}"
        visible = [m for m in c["marks"] if m["w"] >= 1 and m["h"] >= 1]
        assert visible, f"{where}: {len(c['marks'])} bars, none with a visible size: {c['marks'][:3]}"
        for m in visible:
            assert (m["x"] >= plot["x"] - 1 and m["x"] + m["w"] <= plot["x"] + plot["w"] + 1
                    and m["y"] >= plot["y"] - 1 and m["y"] + m["h"] <= plot["y"] + plot["h"] + 1), \
                f"{where}: bar {m} outside the plot area {plot}"
        assert c["titles"], f"{where}: no title"
        for t in c["titles"]:
            assert t["y"] >= c["svg"]["y"] - 0.5 and t["h"] > 0, \
                f"{where}: title {t} clipped (the picture starts at y={c['svg']['y']})"


@pytest.mark.parametrize("width,height", [(1280, 900), (1920, 1080)])
def test_charts_buttons_and_tables_fit(app_url, kb_engine, width, height):
    from playwright.sync_api import expect, sync_playwright

    size = f"{width}x{height}"
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": width, "height": height})
        page.goto(app_url)
        expect(page.get_by_role("heading", name="RAGstream workbench")).to_be_visible(timeout=180_000)
        prompt = page.get_by_role("textbox", name="Prompt")
        prompt.fill(LAYOUT_PROMPT)
        prompt.press("Control+Enter")
        page.get_by_role("button", name="Run all remaining stages").click()
        expect(page.get_by_text("pipeline complete")).to_be_visible(timeout=240_000)
        expect(page.get_by_role("button", name="✓ Prompt Builder")).to_be_visible()
        page.wait_for_timeout(500)

        # every stage button shows its whole label
        buttons = page.evaluate(BUTTONS_JS)
        assert len(buttons) == 8, buttons
        cut = [b for b in buttons if b["scroll"] > b["client"] or b["client"] == 0]
        assert not cut, f"{size}: stage button labels cut: {cut}"

        # the open chunk table (A4's) shows every column without sideways scrolling
        grids = grid_widths(page)
        assert grids, f"{size}: no chunk table on the Chunk views tab"
        wide = [g for g in grids if g["scroll"] > g["client"]]
        assert not wide, f"{size}: tables scroll sideways: {wide}"
        page.screenshot(path=str(SHOTS / f"workbench-{width}.png"))
        shoot(page, page.locator("[role=tabpanel]:visible"), SHOTS / f"tables-{width}.png")

        # the journey opens on the top chunk of the latest stage (A4)
        top = kb_engine.run(LAYOUT_PROMPT).view("a4")[0].chunk_id
        page.get_by_role("tab", name="Chunk journey").click()
        journey = page.locator("[role=tabpanel]:visible")
        expect(journey.get_by_role("combobox", name="Chunk", exact=True)).to_have_value(
            re.compile(f"^{re.escape(top)} · "))  # the id, the section, the text's first words
        wide = [g for g in grid_widths(page) if g["scroll"] > g["client"]]
        assert not wide, f"{size}: the journey table scrolls sideways: {wide}"

        # the stage diff: the first two stages that differ (Retrieval vs the ReRanker), a table
        # without sideways scrolling, the bump chart
        page.get_by_role("tab", name="Stage diff").click()
        diff = page.locator("[role=tabpanel]:visible")
        expect(diff.get_by_role("combobox", name="Stage A")).to_have_value("Retrieval")
        expect(diff.get_by_role("combobox", name="Stage B")).to_have_value("ReRanker")
        expect(diff.locator("[data-testid=stDataFrame]")).to_have_count(1)
        expect(diff.locator("[data-testid=stVegaLiteChart]")).to_have_count(1)
        page.wait_for_timeout(1000)
        wide = [g for g in grid_widths(page) if g["scroll"] > g["client"]]
        assert not wide, f"{size}: the stage diff table scrolls sideways: {wide}"
        check_bump(page.evaluate(CHARTS_JS), size)
        shoot(page, diff, SHOTS / f"stage-diff-{width}.png")

        # the Evidence tab: the answer's and the condensed context's sentences beside the chunk
        # they cite, its used sentences marked; a statement's [n] opens its chunk, outlined
        from ragstream.interfaces.ui.evidence import condensed_links

        page.get_by_role("tab", name="Evidence").click()
        panel = page.locator("[role=tabpanel]:visible")
        expect(panel.locator(".rs-evidence mark").first).to_be_visible(timeout=60_000)
        statement = condensed_links(kb_engine.run(LAYOUT_PROMPT))[1]  # C2
        n = statement.numbers[0]
        panel.locator(f".st-key-ev_C2_{n} button:visible").first.click()
        expect(panel.locator(".rs-evidence mark[style*=outline]").first).to_be_visible(
            timeout=60_000)
        expect(panel.get_by_role("combobox", name="Open a chunk")).to_have_value(
            re.compile(re.escape(statement.chunk_ids[0])))
        page.wait_for_timeout(800)
        check_evidence(page.evaluate(EVIDENCE_JS), size, "C2")
        shoot(page, panel, SHOTS / f"evidence-{width}.png")

        # the Scores tab: four histograms with visible bars inside their plot areas
        page.get_by_role("tab", name="Scores").click()
        panel = page.locator("[role=tabpanel]:visible")
        expect(panel.locator("[data-testid=stVegaLiteChart]")).to_have_count(4)
        page.wait_for_timeout(1000)
        check_charts(page.evaluate(CHARTS_JS), size)
        shoot(page, panel, SHOTS / f"scores-{width}.png")

        # the Eval tab: two questions of the bundled KB's set, the table without sideways
        # scrolling, the quality-against-latency chart with its points inside the plot
        page.get_by_role("tab", name="Eval").click()
        panel = page.locator("[role=tabpanel]:visible")
        questions = panel.get_by_role("spinbutton", name="Questions")
        questions.fill("2")
        questions.press("Enter")
        page.wait_for_timeout(800)
        panel.get_by_role("button", name="Run eval").click()
        expect(panel.locator("[data-testid=stVegaLiteChart]")).to_have_count(1, timeout=300_000)
        page.wait_for_timeout(1000)
        wide = [g for g in grid_widths(page) if g["scroll"] > g["client"]]
        assert not wide, f"{size}: the eval table scrolls sideways: {wide}"
        check_eval(page.evaluate(CHARTS_JS), size)
        shoot(page, panel, SHOTS / f"eval-{width}.png")
        browser.close()
    names = [f"{n}-{width}.png" for n in ("workbench", "tables", "stage-diff", "evidence",
                                           "scores", "eval")]
    assert all((SHOTS / n).stat().st_size > 10_000 for n in names)
    publish(*names)


PIN_PROMPT = "Where can I see how many milliseconds each stage took?"


def test_pin_a_chunk_from_a_table_and_rerun(app_url, kb_engine):
    """Tick the pin box of a chunk the A3 gate dropped, in the A3 table, at 1280x900: the edit
    is listed and the later results are marked out of date; one re-run puts the chunk first in
    A4's table and the final selection, with its reason, and the table still fits the page.
    Then a new prompt: the earlier pass's prompt_ready and answer are folded, greyed and
    labelled out of date, with no copy button, and the pin is offered, not applied."""
    from playwright.sync_api import expect, sync_playwright

    full = kb_engine.run(PIN_PROMPT)
    a3 = full.view("a3")
    row = next(r for r in a3 if r.status == "dropped")
    # the tables' filter finds it by words of its text; where it is among the rows left
    words = " ".join(full.chunk_map()[row.chunk_id].text.split()[:6])
    from ragstream.interfaces.ui import grids, views

    left = [r["chunk id"] for r in views.filter_rows(views.view_rows(full, "a3"), full, words)]
    place = left.index(row.chunk_id)
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(app_url)
        prompt = page.get_by_role("textbox", name="Prompt")
        expect(prompt).to_be_visible(timeout=180_000)
        prompt.fill(PIN_PROMPT)
        prompt.press("Control+Enter")
        page.get_by_role("button", name="Run all remaining stages").click()
        expect(page.get_by_text("pipeline complete")).to_be_visible(timeout=240_000)

        search = page.get_by_role("textbox", name="Filter the tables' rows")
        search.fill(words)
        search.press("Enter")
        expect(page.get_by_text(f"{len(left)} hold").first).to_be_visible(timeout=60_000)
        page.get_by_text("A3 Gate —").click()
        grid = page.locator("[data-testid=stExpander]").filter(
            has_text="A3 Gate —").locator("[data-testid=stDataFrame]")
        expect(grid).to_be_visible()
        grid.scroll_into_view_if_needed()
        page.wait_for_timeout(500)
        box = grid.bounding_box()
        # the pin column is the first; the header is 35 px high, each row TABLE_ROW_HEIGHT
        page.mouse.click(box["x"] + 28, box["y"] + grids.ROW_HEIGHT
                         + grids.TABLE_ROW_HEIGHT * place + grids.TABLE_ROW_HEIGHT / 2)
        expect(page.get_by_text("Your edits discarded the results from Retrieval on")).to_be_visible(
            timeout=60_000)
        expect(page.get_by_text(f"pin {row.chunk_id}").first).to_be_visible()
        page.wait_for_timeout(800)
        page.get_by_role("button", name="↻ Re-run Retrieval → Prompt Builder").first.click()
        expect(page.get_by_text("pipeline complete")).to_be_visible(timeout=240_000)
        a4 = page.locator("[data-testid=stExpander]").filter(has_text="A4 Condenser —")
        cells = a4.locator("[role=gridcell]")
        expect(cells.nth(3)).to_have_text(  # first row: the chunk id, § its section
            re.compile(f"^{re.escape(row.chunk_id)}( §|$)"), timeout=60_000)
        expect(cells.nth(0)).to_have_text("true")  # its pin box ticked
        expect(cells.nth(8)).to_have_text("pinned by you")  # its reason
        expect(page.get_by_text("out of date")).to_have_count(0)
        page.wait_for_timeout(800)
        wide = [g for g in grid_widths(page) if g["scroll"] > g["client"]]
        assert not wide, f"the tables scroll sideways after the re-run: {wide}"
        a4.scroll_into_view_if_needed()
        page.screenshot(path=str(SHOTS / "edit-pin-1280.png"))
        search.fill("")
        search.press("Enter")
        page.wait_for_timeout(800)

        # a new prompt over the finished pass: every stage marked, Answer waits, the earlier
        # answer and prompt_ready folded (closed), greyed and labelled with the cause; no copy
        # button for the old prompt_ready; the pin is offered to the new prompt, not applied
        prompt.fill("How do I start a Chroma server?")
        prompt.press("Control+Enter")
        expect(page.get_by_text("A0 Pre-processing is out of date: the prompt text changed").first
               ).to_be_visible(timeout=60_000)
        expect(page.get_by_role("button", name="Answer", exact=True)).to_be_disabled()
        expect(page.get_by_role("button", name="⚠ Retrieval")).to_be_disabled()
        expect(page.get_by_role("button", name="↻ Re-run A0 Pre-processing → Prompt Builder").first
               ).to_be_visible()
        expect(page.get_by_text("1 edit of the previous prompt — apply it here")).to_be_visible()
        expect(page.get_by_role("button", name="Apply them here")).to_be_visible()
        folded = page.locator("[data-testid=stExpander]").filter(
            has_text="Out of date: the prompt text changed — prompt_ready of the earlier pass")
        expect(folded).to_have_count(1)
        expect(folded.locator("details")).not_to_have_attribute("open", re.compile(".*"))
        assert float(folded.evaluate("e => getComputedStyle(e.closest("
                                     "'[class*=st-key-stale_]')).opacity")) < 1  # greyed
        expect(page.locator("[data-testid=stCode]").filter(has_text="## System")).to_have_count(0)
        expect(page.locator("[data-testid=stText]:visible").filter(has_text="## System")
               ).to_have_count(0)  # folded: not shown until opened
        page.locator("[data-testid=stExpander]").filter(
            has_text="prompt_ready of the earlier pass").scroll_into_view_if_needed()
        page.wait_for_timeout(800)
        page.screenshot(path=str(SHOTS / "stale-1280.png"))

        page.get_by_role("tab", name="Fields").click()
        panel = page.locator("[role=tabpanel]:visible")
        expect(panel.locator("[data-testid=stDataFrame]")).to_have_count(1)
        page.wait_for_timeout(800)
        shoot(page, panel, SHOTS / "fields-1280.png")
        page.get_by_role("tab", name="Context & rules").click()
        panel = page.locator("[role=tabpanel]:visible")
        expect(panel.get_by_text("Format rules")).to_be_visible()
        shoot(page, panel, SHOTS / "context-1280.png")
        browser.close()
    names = ["edit-pin-1280.png", "stale-1280.png", "fields-1280.png", "context-1280.png"]
    assert all((SHOTS / n).stat().st_size > 10_000 for n in names)
    publish(*names)


#: the tab bar: its tabs' full and shown width, and whether any tab lies beyond its right edge
TABS_JS = """() => {
    const bar = document.querySelector('[data-testid=stTabs] [role=tablist]');
    const right = bar.getBoundingClientRect().right;
    return {scroll: bar.scrollWidth, client: bar.clientWidth,
            beyond: [...bar.querySelectorAll('[role=tab]')]
              .filter(t => t.getBoundingClientRect().right > right + 1).map(t => t.innerText)};
  }"""


def open_workbench(p, app_url: str, width: int, height: int):
    """Chromium at ``width``x``height`` on the page, its prompt box shown and the page idle:
    ``(browser, page, prompt box)``."""
    from playwright.sync_api import expect

    browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
    page = browser.new_page(viewport={"width": width, "height": height})
    page.goto(app_url)
    prompt = page.get_by_role("textbox", name="Prompt")
    expect(prompt).to_be_visible(timeout=180_000)
    wait_idle(page)
    return browser, page, prompt


def open_sidebar(p, app_url: str):
    """Chromium at 1280x900 on the page, its knowledge-base picker shown and the page idle:
    ``(browser, page, sidebar, picker)``."""
    from playwright.sync_api import expect

    browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(app_url)
    sidebar = page.get_by_test_id("stSidebar")
    picker = sidebar.get_by_role("combobox", name="Knowledge base")
    expect(picker).to_be_visible(timeout=180_000)
    wait_idle(page)
    return browser, page, sidebar, picker


def newest_run(store, session: str, after: int, seconds: float = 30.0):
    """The session's newest run, once it is newer than run ``after`` (the page saves a pass as
    its script run ends, which a loaded machine can leave for after the page looks idle), or
    the newest there is when none came within ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        newest = store.list(1, session=session)[0]
        if newest.id != after or time.monotonic() > deadline:
            return newest
        time.sleep(0.2)


def wait_idle(page) -> None:
    """Until the page's script has run and nothing on it is stale."""
    page.wait_for_function(
        "() => document.querySelector('[data-testid=stApp]').getAttribute("
        "'data-test-script-state') === 'notRunning' && !document.querySelector("
        "'[data-stale=true]')", timeout=120_000)
    page.wait_for_timeout(300)


def pick_row(page, grid, row: int) -> None:
    """Tick row ``row`` (1: the first under the header) of the Runs table: its picker box."""
    from ragstream.interfaces.ui.grids import ROW_HEIGHT as HEADER
    from ragstream.interfaces.ui.grids import TABLE_ROW_HEIGHT as ROW

    grid.scroll_into_view_if_needed()
    box = grid.bounding_box()
    page.mouse.click(box["x"] + 16,
                     box["y"] + HEADER + ROW * (row - 1) + ROW / 2)
    wait_idle(page)


def no_sideways(page, size: str, where: str) -> None:
    wide = [g for g in grid_widths(page) if g["scroll"] > g["client"]]
    assert not wide, f"{size}: tables on {where} scroll sideways: {wide}"


@pytest.mark.parametrize("width,height", [(1280, 900), (1920, 1080)])
def test_runs_are_kept_opened_compared_and_restored(app_url, kb_engine, width, height):
    from playwright.sync_api import expect, sync_playwright

    from ragstream.common.config import load_config
    from ragstream.workbench.runs import RunStore

    size = f"{width}x{height}"
    store = RunStore(kb_engine.cfg.index_dir / load_config().settings.runs.file)
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser, page, prompt = open_workbench(p, app_url, width, height)
        session = page.evaluate("() => new URL(location.href).searchParams.get('session')")
        assert session, f"{size}: the URL names no session: {page.url}"
        prompt.fill(PROMPT)
        prompt.press("Control+Enter")
        page.get_by_role("button", name="Run all remaining stages").click()
        expect(page.get_by_text("pipeline complete")).to_be_visible(timeout=240_000)
        wait_idle(page)
        first = store.list(1, session=session)[0]
        assert first.answer and first.stage == "a5"
        # exclude the top chunk and re-run: a second run, made from the first
        page.locator(".st-key-detail_exclude button").first.click()
        wait_idle(page)
        page.locator(".st-key-resume button").first.click()
        wait_idle(page)
        second = newest_run(store, session, after=first.id)
        assert second.id != first.id and second.parent == first.id and second.edits == 1

        tabs = page.evaluate(TABS_JS)
        assert not tabs["beyond"], f"{size}: tabs beyond the tab bar's edge: {tabs}"

        # the Runs tab lists both, the page's run marked; picking the first opens it
        page.get_by_role("tab", name="Runs", exact=True).click()
        wait_idle(page)
        runs_grid = page.locator("[class*='st-key-runs_table'] [data-testid=stDataFrame]")
        expect(runs_grid).to_be_visible()
        expect(runs_grid.locator("[role=gridcell]").filter(has_text=f"▶ {second.id}")).to_have_count(1)
        no_sideways(page, size, "the Runs tab")
        rows = runs_grid.locator("[role=row]")
        row_of_first = next(i for i in range(1, rows.count())
                            if rows.nth(i).locator("[role=gridcell]").first.inner_text()
                            .strip("▶ ") == str(first.id))
        pick_row(page, runs_grid, row_of_first)
        expect(page.get_by_role("button", name=f"Open run {first.id}")).to_be_visible()
        shoot(page, page.locator("[role=tabpanel]:visible"), SHOTS / f"runs-{width}.png")

        # the Compare tab: run A the first, run B the page's run, the cause of the move named
        page.get_by_role("tab", name="Compare", exact=True).click()
        wait_idle(page)
        panel = page.locator("[role=tabpanel]:visible")
        expect(panel.get_by_text("Inputs that differ")).to_be_visible()
        expect(page.get_by_role("combobox", name="Run A")).to_have_value(
            re.compile(f"^#{first.id} · "))
        expect(page.get_by_role("combobox", name="Run B")).to_have_value(
            re.compile(f"^#{second.id} · "))
        causes = panel.locator("[role=gridcell]").filter(has_text=re.compile("edit in B: exclude"))
        expect(causes).not_to_have_count(0)  # the cause of the moves: the edit
        no_sideways(page, size, "the Compare tab")
        chart = page.locator("[data-testid=stVegaLiteChart]").first
        chart.scroll_into_view_if_needed()
        chart.locator("g.mark-line.role-mark path").first.wait_for(state="attached", timeout=60_000)
        charts = page.evaluate(CHARTS_JS)
        assert len(charts) == 1 and charts[0]["svg"], f"{size}: the compare chart: {charts}"
        assert len([m for m in charts[0]["lines"] if m["w"] >= 1 or m["h"] >= 1]) >= 20, \
            f"{size}: the compare chart draws too few lines"
        assert charts[0]["chart"]["x"] + charts[0]["chart"]["w"] <= width, \
            f"{size}: the compare chart runs off the page: {charts[0]['chart']}"
        shoot(page, panel, SHOTS / f"compare-{width}.png")

        # open the first run from the Runs tab: the page shows it
        page.get_by_role("tab", name="Runs", exact=True).click()
        wait_idle(page)
        pick_row(page, runs_grid, row_of_first)
        page.get_by_role("button", name=f"Open run {first.id}").click()
        wait_idle(page)
        expect(page.get_by_text(f"Opened run {first.id}", exact=False)).to_be_visible()
        expect(page.get_by_text("Your edits", exact=False)).to_have_count(0)  # the first had none

        # a reload brings back the session's latest run (the second, with its edit)
        page.reload()
        expect(page.get_by_text(f"Restored run {second.id}", exact=False)).to_be_visible(
            timeout=120_000)
        expect(page.get_by_text("Your edits (1)", exact=False)).to_be_visible()
        expect(page.get_by_text("pipeline complete")).to_be_visible()
        browser.close()
    names = [f"runs-{width}.png", f"compare-{width}.png"]
    assert all((SHOTS / n).stat().st_size > 10_000 for n in names)
    publish(*names)


def test_the_page_benchmark_times_every_stage_button(kb_engine, monkeypatch, tmp_path):
    """``ragstream bench --page`` on one round: a figure per stage button, each from a click
    that ran its stage (the button then carries its check mark) to the painted redraw."""
    from ragstream.interfaces.ui.page_bench import format_page_report, run_page_bench
    from ragstream.stages import controller

    monkeypatch.setenv("RAGSTREAM_INDEX_DIR", str(kb_engine.cfg.index_dir))
    monkeypatch.setenv("RAGSTREAM_UPLOADS_DIR", str(tmp_path / "uploads"))
    result = run_page_bench(rounds=1)
    assert list(result["buttons"]) == controller.STAGE_NAMES
    for name, figures in result["buttons"].items():
        assert figures["clicks"] == 1, name
        # a click waits for the page to run its script: a stage's run and a redraw take time
        assert 20 < figures["median_ms"] < 60_000, (name, figures)
    report = format_page_report(result)
    assert all(name in report for name in controller.STAGE_NAMES) and "every click" in report
