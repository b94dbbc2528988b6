"""``python -m ragstream bench --page``: how long the page takes to answer a click, in Chromium.

    from ragstream.interfaces.ui.page_bench import run_page_bench, format_page_report
    result = run_page_bench(rounds=10)      # starts the page, drives it, stops it
    print(format_page_report(result))       # median and p95 per button

The page (``ui_streamlit.py``, or another copy of it with ``app=``: an older checkout, for a
before/after figure) is started with ``streamlit run`` on a free loopback port, on the
configured knowledge base (``RAGSTREAM_INDEX_DIR`` as the environment gives it), and driven by
Playwright in Debian's Chromium (``/usr/bin/chromium``, installed by ``scripts/setup.sh
--browser``) at 1280x900. Auto-run is switched off; each round types nothing and clicks the
eight stage buttons in order, A0 to Build (clicking A0 again discards the later stages, so
every round does the same work). A first round warms the page up and is not counted.

What one click costs is measured inside the page, from the button's ``click()`` to the end
of the redraw it causes: a ``MutationObserver`` on Streamlit's app root sees its
``data-test-script-state`` leave ``notRunning`` (the script runs; with ``st.rerun`` twice)
and come back to it, with no element left marked ``data-stale``; two animation frames later
(the browser has painted) the clock stops. The click's own stage run (1-75 ms on the bundled
knowledge base) is inside the figure: it is what a person waits for.
"""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from ragstream.common.config import PROJECT_ROOT
from ragstream.common.errors import RagstreamError
from ragstream.interfaces.ui.state import AUTO as AUTO_KEY
from ragstream.stages import controller

if TYPE_CHECKING:  # pragma: no cover
    from playwright.sync_api import ViewportSize

CHROMIUM = "/usr/bin/chromium"
BROWSER_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync"]
APP = PROJECT_ROOT / "ui_streamlit.py"
VIEWPORT: ViewportSize = {"width": 1280, "height": 900}
#: how long the page may take to start (models load, the knowledge base is checked)
START_TIMEOUT_S = 240.0
#: how long one click may take before the benchmark gives up on it
CLICK_TIMEOUT_MS = 60_000

#: how long a click may go without its script starting before it counts as lost (the button
#: was drawn again between being found and being clicked, as a page busy redrawing does on a
#: loaded machine) and the button, found again, is clicked again
LOST_CLICK_MS = 10_000

#: clicks the button ``arguments[0]`` (a CSS selector), then resolves with the milliseconds
#: until the page's script has run (at least once) and the redraw is painted, and how many
#: clicks were lost (the time counts from the click that ran)
_CLICK_AND_WAIT = """
async (selector) => {
  const root = document.querySelector("[data-testid='stApp']");
  if (!root || !document.querySelector(selector)) { throw new Error("not on the page: " + selector); }
  let ran = false;
  // a change away from notRunning, even one undone before this callback runs, shows in a
  // record's old value
  const seen = new MutationObserver(records => {
    if (root.getAttribute("data-test-script-state") !== "notRunning"
        || records.some(r => r.oldValue !== "notRunning")) { ran = true; }
  });
  seen.observe(root, {attributes: true, attributeOldValue: true,
                      attributeFilter: ["data-test-script-state"]});
  const frame = () => new Promise(r => requestAnimationFrame(() => r()));
  let t0 = performance.now();
  const start = t0;
  let lost = 0;
  document.querySelector(selector).click();
  try {
    while (true) {
      await frame();
      const idle = root.getAttribute("data-test-script-state") === "notRunning";
      if (ran && idle && !document.querySelector("[data-stale='true']")) {
        await frame(); await frame();
        if (root.getAttribute("data-test-script-state") === "notRunning") { break; }
      }
      if (!ran && idle && performance.now() - t0 > LOST_MS) {
        const again = document.querySelector(selector + ":not([disabled])");
        if (again) { lost += 1; t0 = performance.now(); again.click(); }
      }
      if (performance.now() - start > TIMEOUT_MS) { throw new Error("no redraw after " + selector); }
    }
  } finally { seen.disconnect(); }
  return {ms: performance.now() - t0, lost: lost};
}
""".replace("TIMEOUT_MS", str(CLICK_TIMEOUT_MS)).replace("LOST_MS", str(LOST_CLICK_MS))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_page(app: Path, env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    """``streamlit run app`` on a free loopback port; its URL once it answers its health check."""
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(app), "--server.headless", "true",
         "--server.address", "127.0.0.1", "--server.port", str(port),
         "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none"],
        cwd=app.parent, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                if r.read().strip() == b"ok":
                    return proc, url
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RagstreamError(f"the page ({app}) did not start within {START_TIMEOUT_S:.0f} s")
        time.sleep(0.5)


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(share * (len(ordered) - 1))))]


def run_page_bench(rounds: int = 10, app: str | Path | None = None, tab: str | None = None,
                   progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Click every stage button ``rounds`` times (after a warm-up round) and return, per
    button, the median / p95 / min / max milliseconds from click to painted redraw; ``tab``:
    the result tab open meanwhile (default: the page's first, the chunk tables)."""
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        raise RagstreamError("Debian's chromium is not installed: run "
                             "`bash scripts/setup.sh --browser`.")
    app_path = Path(app).resolve() if app else APP
    proc, url = _start_page(app_path, dict(os.environ))
    times: dict[str, list[float]] = {name: [] for name in controller.STAGE_NAMES}
    lost: dict[str, int] = dict.fromkeys(controller.STAGE_NAMES, 0)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
            page = browser.new_page(viewport=VIEWPORT)
            page.goto(url + (f"/?view={quote(tab)}" if tab else ""))
            page.get_by_role("textbox", name="Prompt").wait_for(timeout=START_TIMEOUT_S * 1000)
            toggle = page.locator(f".st-key-{AUTO_KEY} input")
            if toggle.is_checked():
                page.locator(f".st-key-{AUTO_KEY} label").click()
                page.wait_for_function("document.querySelector(\"[data-testid='stApp']\")"
                                       ".getAttribute('data-test-script-state') === 'notRunning'")
            for r in range(rounds + 1):
                for name in controller.STAGE_NAMES:
                    selector = f".st-key-stage_{name} button"
                    page.wait_for_selector(f"{selector}:not([disabled])", timeout=CLICK_TIMEOUT_MS)
                    got = page.evaluate(_CLICK_AND_WAIT, selector)
                    lost[name] += int(got["lost"])
                    if r:  # round 0 warms up
                        times[name].append(float(got["ms"]))
                if progress:
                    progress(f"round {r}/{rounds}" + (" (warm-up)" if not r else ""))
            browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    buttons = {name: {"median_ms": round(statistics.median(v), 1),
                      "p95_ms": round(_percentile(v, 0.95), 1),
                      "min_ms": round(min(v), 1), "max_ms": round(max(v), 1), "clicks": len(v),
                      "lost_clicks": lost[name]}
               for name, v in times.items()}
    every = [t for v in times.values() for t in v]
    return {"app": str(app_path), "tab": tab or "(the first)",
            "viewport": f"{VIEWPORT['width']}x{VIEWPORT['height']}",
            "rounds": rounds, "buttons": buttons,
            "all": {"median_ms": round(statistics.median(every), 1),
                    "p95_ms": round(_percentile(every, 0.95), 1), "clicks": len(every)},
            "target_median_ms": 200}


def format_page_report(result: dict[str, Any]) -> str:
    """The figures as a table: one line per button, then every click together."""
    lines = [f"Page click -> painted redraw, Chromium {result['viewport']}, {result['rounds']} "
             f"rounds, tab {result['tab']} ({result['app']})", f"{'button':<22}{'median ms':>11}{'p95 ms':>9}"
             f"{'min':>8}{'max':>8}"]
    for name, b in result["buttons"].items():
        lines.append(f"{name:<22}{b['median_ms']:>11.1f}{b['p95_ms']:>9.1f}{b['min_ms']:>8.1f}"
                     f"{b['max_ms']:>8.1f}")
    every = result["all"]
    gone = sum(b.get("lost_clicks", 0) for b in result["buttons"].values())
    if gone:
        lines.append(f"({gone} clicks were lost, the button drawn again as it was clicked; each "
                     f"was clicked again after {LOST_CLICK_MS / 1000:g} s, timed from then)")
    lines.append(f"{'every click':<22}{every['median_ms']:>11.1f}{every['p95_ms']:>9.1f}"
                 f"   (target: median <= {result['target_median_ms']} ms)")
    return "\n".join(lines)


if __name__ == "__main__":  # python -m ragstream.interfaces.ui.page_bench [ROUNDS] [APP] [TAB]
    args = sys.argv[1:]
    outcome = run_page_bench(int(args[0]) if args else 10, args[1] if len(args) > 1 else None,
                             args[2] if len(args) > 2 else None,
                             progress=lambda line: print(line, file=sys.stderr))
    print(format_page_report(outcome))
