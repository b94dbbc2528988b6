"""Every table of the page at 1280x900 in Debian's Chromium, cell by cell: no word broken
inside itself, no wrapped cell with a line the row has no room for, no one-line cell cut at
its edge, no header cut, no table wider than its frame, and no table toolbar over a control.

Streamlit draws a table on a canvas (glide-data-grid): the cells' text is not in the page.
So the test reads what the page drew: the column borders and the row lines from the canvas'
pixels (a border is a column of pixels in the border colour from the header's line to the
bottom), the cells' text from the grid's accessibility table (the rows on screen), the font
from the grid's own style; and it lays each cell's text out as the grid does (glide-data-grid
0.x's ``splitMultilineText``: a line ends at its last space that fits, the next one is
measured with that space in front, a word wider than a line is broken; a row of ``n`` lines
needs ``f + 1.4·f·(n − 1) + 3`` pixels, ``f`` the font's ascent and descent, else the grid
clips it), measured with the page's canvas ``measureText``. A number cell is left out (the
accessibility table holds its unformatted value).

The pass: auto-run on a prompt over the bundled knowledge base, every chunk table opened, the
Fields, Chunk journey, Stage diff, History and Runs tabs; then a chunk excluded and the pass
re-run (a second run: the edit list and the Compare tab). Screenshots go to the screenshots
folder as ``cells-*.png``."""

from tests.ui.test_browser import SHOTS, app_url, open_workbench, shoot, wait_idle  # noqa: F401

PROMPT = "How are documents chunked?"
WIDTH, HEIGHT = 1280, 900

#: what one grid shows, measured in the page: its columns (from the canvas' borders), its rows'
#: height, and each cell and header that does not show whole; a grid whose borders cannot be
#: told apart says so (the test then fails: it measures nothing silently)
GRID_JS = r"""(grid) => {
  const out = {problems: [], columns: 0, rowHeight: 0, cells: 0, wide: null, label: '',
               cutCell: null};
  const canvas = grid.querySelector('canvas[data-testid=data-grid-canvas]');
  const scroller = grid.querySelector('.dvn-scroller');
  const table = grid.querySelector('table[role=grid]');
  if (!canvas || !scroller || !table) { out.problems.push('the grid is not drawn'); return out; }
  out.wide = scroller.scrollWidth > scroller.clientWidth + 1
    ? {scroll: scroller.scrollWidth, client: scroller.clientWidth} : null;
  const theme = getComputedStyle(grid.querySelector('.stDataFrameGlideDataEditor'));
  const v = name => theme.getPropertyValue(name).trim();
  const rgb = h => { const n = parseInt(h.replace('#', '').slice(0, 6), 16);
                     return [(n >> 16) & 255, (n >> 8) & 255, n & 255]; };
  const border = rgb(v('--gdg-border-color'));
  const pad = parseFloat(v('--gdg-cell-horizontal-padding')) || 8;
  const vpad = parseFloat(v('--gdg-cell-vertical-padding')) || 3;
  const family = v('--gdg-font-family');
  const baseFont = `${v('--gdg-base-font-style')} ${family}`;
  const headerFont = `${v('--gdg-header-font-style')} ${family}`;
  const W = canvas.width, H = canvas.height;
  const px = canvas.getContext('2d').getImageData(0, 0, W, H).data;
  const isBorder = (x, y) => { const i = (y * W + x) * 4;
    return Math.abs(px[i] - border[0]) <= 8 && Math.abs(px[i + 1] - border[1]) <= 8
      && Math.abs(px[i + 2] - border[2]) <= 8; };
  const hlines = [];
  for (let y = 0; y < H; y++) {
    let n = 0; for (let x = 0; x < W; x++) if (isBorder(x, y)) n++;
    if (n >= W * 0.97) hlines.push(y);
  }
  if (hlines.length < 2) { out.problems.push(`no row lines found (${hlines})`); return out; }
  const header = hlines[0];
  const vlines = [];
  for (let x = 1; x < W - 2; x++) {
    let all = true; for (let y = header; y < H; y++) if (!isBorder(x, y)) { all = false; break; }
    if (all) vlines.push(x);
  }
  const edges = [0, ...vlines, W];
  const widths = edges.slice(1).map((e, i) => e - edges[i]);
  const gaps = hlines.slice(1).map((y, i) => y - hlines[i]).filter(d => d > 10);
  out.rowHeight = gaps.length ? Math.min(...gaps) : 0;
  const heads = [...table.querySelectorAll('th[role=columnheader]')];
  const count = heads.length;
  let first = widths.length - count;  // a row-selection column is drawn before the others
  out.columns = count;
  if (first < 0 || first > 1) {
    out.problems.push(`${widths.length} columns drawn for ${count} headers (borders ${vlines})`);
    return out;
  }
  const ctx = document.createElement('canvas').getContext('2d');
  ctx.font = baseFont;
  const glyph = ctx.measureText('ABCi09jgqpy');
  const f = glyph.actualBoundingBoxAscent + glyph.actualBoundingBoxDescent;
  const wraps = out.rowHeight > 64;
  const room = w => w - 2 * pad;
  const measure = t => ctx.measureText(t).width;
  // glide-data-grid's split: [lines, broke a word]
  const split = (text, avail) => {
    const lines = []; let broke = false;
    for (let t of text.split('\n')) {
      if (measure(t) <= avail) { lines.push(t); continue; }
      while (measure(t) > avail) {
        let c = t.length;
        while (c > 1 && measure(t.slice(0, c)) > avail) c--;
        if (t[c] !== ' ') {
          const s = t.lastIndexOf(' ', c);
          if (s > 0) c = s; else broke = true;
        }
        lines.push(t.slice(0, c)); t = t.slice(c);
      }
      if (t.length) lines.push(t);
    }
    return [lines.map((l, i) => i === 0 ? l.trimEnd() : l.trim()), broke];
  };
  // the cut cells' whole texts the page gave the hover script (``grids.hover_data``)
  const span = grid.closest('.stElementContainer')?.nextElementSibling
    ?.querySelector('[data-ragstream-whole]');
  const whole = span ? JSON.parse(span.dataset.ragstreamWhole).whole : {};
  const number = /^[-+]?\d+(\.\d+)?(e[-+]?\d+)?$/i;
  const editable = new Set([...table.querySelectorAll('td[aria-readonly=false]')]
    .map(td => td.getAttribute('aria-colindex')));
  ctx.font = headerFont;
  heads.forEach((th, i) => {
    const w = widths[first + i], label = th.textContent;
    const icon = editable.has(th.getAttribute('aria-colindex')) ? 24 : 0;
    if (pad + icon + measure(label) + 1 > w)
      out.problems.push(`header "${label}" cut: ${Math.ceil(measure(label))} px of text in a ${w} px column`);
  });
  ctx.font = baseFont;
  for (const td of table.querySelectorAll('td[role=gridcell]')) {
    const col = Number(td.getAttribute('aria-colindex')) - 1;
    const text = (td.textContent || '').replace(/\r?\n/g, ' ');
    if (!text || number.test(text) || text === 'true' || text === 'false') continue;
    const w = widths[first + col], name = heads[col] ? heads[col].textContent : col;
    out.cells++;
    if (text.endsWith('…') && !(text in whole))
      out.problems.push(`"${name}" cut with no whole text for the hover: "${text}"`);
    const row = Number(td.parentElement.getAttribute('aria-rowindex')) - 2;
    const mid = header + (row + 0.5) * out.rowHeight;
    if (!out.cutCell && text.endsWith('…') && mid < H - out.rowHeight / 2)
      out.cutCell = {x: edges[first + col] + w / 2, y: mid, text, name};
    const avail = room(w);
    if (!wraps) {
      if (measure(text) > avail)
        out.problems.push(`"${name}" cut at its edge: "${text}" `
                          + `(${Math.ceil(measure(text))} px in ${avail})`);
      continue;
    }
    const [lines, broke] = split(text, avail);
    if (broke) {
      const word = text.split(/\s+/).find(x => measure(x) > avail - 4) || text;
      out.problems.push(`"${name}" breaks a word: "${word}" in "${text}" (${avail} px a line)`);
    }
    const need = f + 1.4 * f * (lines.length - 1);
    if (need + vpad > out.rowHeight)
      out.problems.push(`"${name}" loses a line: ${lines.length} lines in a `
                        + `${out.rowHeight} px row: "${text}"`);
  }
  return out;
}"""

#: the tooltip the page shows over a cut cell (``ragstream/interfaces/ui/cell_hover.js``), if shown
TIP_JS = """() => { const t = document.querySelector('[data-testid=ragstreamCellTip]');
  return t && t.style.display !== 'none' ? t.textContent : null; }"""

#: every visible grid's frame and its toolbar (shown while the pointer is over the grid)
GRIDS_JS = """() => [...document.querySelectorAll('[data-testid=stDataFrame]')]
  .filter(g => g.checkVisibility())"""

#: the controls a toolbar must not cover, and the toolbar's box once shown
CONTROLS_JS = """(grid) => {
  const box = e => { const r = e.getBoundingClientRect();
                     return {x: r.x, y: r.y, w: r.width, h: r.height}; };
  const bar = grid.querySelector('[data-testid=stElementToolbar]');
  const shown = bar && getComputedStyle(bar).opacity !== '0' ? box(bar) : null;
  const controls = [...document.querySelectorAll(
      'button, input, textarea, summary, [role=combobox], [role=tab], [role=checkbox], [role=switch]')]
    .filter(e => e.checkVisibility() && !grid.contains(e))
    .map(e => ({...box(e), what: (e.getAttribute('aria-label') || e.innerText || e.tagName)
                                   .trim().slice(0, 60)}))
    .filter(c => c.w > 0 && c.h > 0);
  return {bar: shown, controls};
}"""


def overlap(a: dict, b: dict) -> float:
    """The area two boxes share, in square pixels."""
    w = min(a["x"] + a["w"], b["x"] + b["w"]) - max(a["x"], b["x"])
    h = min(a["y"] + a["h"], b["y"] + b["h"]) - max(a["y"], b["y"])
    return max(0.0, w) * max(0.0, h)


def check_grids(page, where: str, found: list[str], measured: list[int]) -> None:
    """Measure every visible grid on the page (``GRID_JS``) and hover it to check its toolbar
    covers no control; add what is wrong to ``found``, the grids' cells counted to
    ``measured``."""
    page.wait_for_function(
        "() => [...document.querySelectorAll('[data-testid=stDataFrame]')]"
        ".filter(g => g.checkVisibility()).every(g => g.querySelector('canvas'))",
        timeout=60_000)
    grids = page.locator("[data-testid=stDataFrame]:visible")
    for i in range(grids.count()):
        grid = grids.nth(i)
        grid.scroll_into_view_if_needed()
        page.wait_for_timeout(400)
        result = grid.evaluate(GRID_JS)
        name = f"{where}, table {i + 1} ({result['columns']} columns)"
        measured.append(result["cells"])
        found += [f"{name}: {p}" for p in result["problems"]]
        if result["wide"]:
            found.append(f"{name}: scrolls sideways {result['wide']}")
        box = grid.bounding_box()
        page.mouse.move(box["x"] + box["width"] / 2, box["y"] + min(60, box["height"] / 2))
        page.wait_for_timeout(500)
        shown = grid.evaluate(CONTROLS_JS)
        if shown["bar"]:
            covered = [c["what"] for c in shown["controls"] if overlap(shown["bar"], c) > 2]
            if covered:
                found.append(f"{name}: its toolbar covers {covered}")
        page.mouse.move(5, 5)
        if cut := result["cutCell"]:
            hover_whole(page, grid, cut, name, found)


def hover_whole(page, grid, cut: dict, name: str, found: list[str]) -> None:
    """Rest the pointer on a cut cell (``cut``: where ``GRID_JS`` found it) and check that the
    tooltip shows its whole text: longer than the cell's, starting with what the cell shows."""
    box = grid.locator("canvas[data-testid=data-grid-canvas]").bounding_box()
    page.mouse.move(box["x"] + cut["x"], box["y"] + cut["y"])
    page.wait_for_timeout(300)
    whole = page.evaluate(TIP_JS)
    if whole and not hovered:
        page.screenshot(path=str(SHOTS / "cells-hover.png"))
    page.mouse.move(5, 5)
    shown = " ".join(cut["text"].removesuffix("…").split())
    if whole is None:
        found.append(f"{name}: no whole text on hover over the cut \"{cut['name']}\" cell "
                     f"\"{cut['text']}\"")
    elif not (" ".join(whole.split()).startswith(shown) and len(whole) > len(shown) + 1):
        found.append(f"{name}: the hover over \"{cut['text']}\" shows \"{whole[:200]}\"")
    else:
        hovered.append(name)


#: the grids whose cut cell showed its whole text on hover (the test checks some did)
hovered: list[str] = []


def open_tab(page, name: str) -> None:
    page.get_by_role("tab", name=name, exact=True).click()
    wait_idle(page)


def test_every_table_cell_shows_whole_at_1280(app_url):  # noqa: F811
    from playwright.sync_api import expect, sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    found: list[str] = []
    measured: list[int] = []
    with sync_playwright() as p:
        browser, page, prompt = open_workbench(p, app_url, WIDTH, HEIGHT)
        page.evaluate("async () => { await document.fonts.ready; }")
        prompt.fill(PROMPT)
        prompt.press("Control+Enter")
        page.get_by_role("button", name="Run all remaining stages").click()
        expect(page.get_by_text("pipeline complete")).to_be_visible(timeout=240_000)
        wait_idle(page)

        # the Chunk views tab: every chunk table open
        panel = page.locator("[role=tabpanel]:visible")
        for title in ("Retrieval —", "ReRanker —", "A3 Gate —"):
            panel.locator("[data-testid=stExpander] summary").filter(has_text=title).click()
            wait_idle(page)
        expect(panel.locator("[data-testid=stDataFrame]")).to_have_count(4, timeout=60_000)
        check_grids(page, "Chunk views", found, measured)
        shoot(page, panel, SHOTS / "cells-chunk-views.png")

        for tab in ("Fields", "Chunk journey", "Stage diff", "History"):
            open_tab(page, tab)
            panel = page.locator("[role=tabpanel]:visible")
            check_grids(page, tab, found, measured)
            shoot(page, panel, SHOTS / f"cells-{tab.lower().replace(' ', '-')}.png")

        # a second run: exclude the journey's chunk and re-run; the edit list, Runs, Compare
        open_tab(page, "Chunk journey")
        page.locator(".st-key-journey_exclude button:visible").first.click()
        wait_idle(page)
        page.locator(".st-key-resume button").first.click()
        expect(page.get_by_text("pipeline complete")).to_be_visible(timeout=240_000)
        wait_idle(page)
        edits = page.locator("[data-testid=stExpander]").filter(has_text="Your edits (1)")
        expect(edits).to_have_count(1)
        edits.scroll_into_view_if_needed()
        check_grids(page, "Your edits", found, measured)
        shoot(page, edits, SHOTS / "cells-your-edits.png")
        for tab in ("Runs", "Compare"):
            open_tab(page, tab)
            panel = page.locator("[role=tabpanel]:visible")
            expect(panel.locator("[data-testid=stDataFrame]").first).to_be_visible(timeout=60_000)
            check_grids(page, tab, found, measured)
            shoot(page, panel, SHOTS / f"cells-{tab.lower()}.png")
        browser.close()
    assert len(measured) >= 10 and sum(measured) > 200, f"too little measured: {measured}"
    assert hovered, "no grid had a cut cell to hover: the hover check measured nothing"
    assert not found, "cells that do not show whole:\n" + "\n".join(found)


def unique_phrase(sp, skip: int = 5) -> tuple[str, str]:
    """A chunk Retrieval returned (not among the first ``skip``) and three words from the
    middle of its text that no other returned chunk holds, as the picker's search reads them
    (every word, any order, in the text, id or section: ``views.matching_chunks``): (chunk id,
    phrase)."""
    from ragstream.interfaces.ui import views

    for chunk in sp.base_context_chunks[skip:]:
        words = chunk.text.split()
        for start in range(len(words) // 3, len(words) - 3):
            phrase = " ".join(words[start:start + 3])
            if len(phrase) > 12 and views.matching_chunks(sp, phrase) == [chunk.id]:
                return chunk.id, phrase
    raise AssertionError("no chunk has a phrase of its own")


def test_the_chunk_pickers_find_a_chunk_by_a_phrase_of_its_text(app_url, kb_engine):  # noqa: F811
    """A phrase from inside a chunk's text (not its first words) typed in the picker's search
    box leaves that chunk in the picker, picked, in "Open a chunk" and in the journey."""
    import re

    from playwright.sync_api import expect, sync_playwright

    chunk_id, phrase = unique_phrase(kb_engine.run(PROMPT))
    with sync_playwright() as p:
        browser, page, prompt = open_workbench(p, app_url, WIDTH, HEIGHT)
        prompt.fill(PROMPT)
        prompt.press("Control+Enter")
        page.get_by_role("button", name="Run all remaining stages").click()
        expect(page.get_by_text("pipeline complete")).to_be_visible(timeout=240_000)
        wait_idle(page)
        for tab, picker in (("Chunk views", "Open a chunk"), ("Chunk journey", "Chunk")):
            open_tab(page, tab)
            panel = page.locator("[role=tabpanel]:visible")
            box = panel.get_by_role("combobox", name=picker, exact=True)
            expect(box).not_to_have_value(re.compile("^" + re.escape(chunk_id) + " "))
            search = panel.get_by_role("textbox", name="Find a chunk by its text")
            search.fill(phrase)
            search.press("Enter")
            wait_idle(page)
            expect(box).to_have_value(re.compile("^" + re.escape(chunk_id) + " "), timeout=30_000)
            page.screenshot(path=str(SHOTS / f"cells-picker-{tab.lower().replace(' ', '-')}.png"))
        browser.close()
