// The answer's [n] markers as links to their sources, without a page reload (a reload would
// lose the session's state). Installed once per page.
//
// The answer is drawn by Streamlit's Markdown (React), so its text is not rewritten here:
// the markers are found in its text nodes (outside code), painted with the CSS Custom
// Highlight API (``::highlight(ragstream-cite)``, styled in the page's CSS), and a click on
// one (found from the pointer with ``caretPositionFromPoint``) clicks the source's button
// under the answer (the button keyed ``cite_`` and the number), which opens the source in its document.
(() => {
  if (window.__ragstreamCiteClick) return;
  window.__ragstreamCiteClick = true;

  const BOX = '.st-key-answer_text';
  const MARKER = /\[(\d+(?:\s*[-–—,;]\s*\d+)*)\]/g;
  const NUMBER = /\d+/g;

  // the markers of one text node: [{start, end, numbers: [{start, end, n}]}]
  const markers = text => {
    const out = [];
    for (const m of text.matchAll(MARKER)) {
      const numbers = [];
      for (const d of m[1].matchAll(NUMBER)) {
        const at = m.index + 1 + d.index;
        numbers.push({start: at, end: at + d[0].length, n: d[0]});
      }
      out.push({start: m.index, end: m.index + m[0].length, numbers});
    }
    return out;
  };
  const inCode = node => !!node.parentElement?.closest('code, pre');
  const button = n => document.querySelector(`.st-key-cite_${n} button`);

  // every marker of the answer that names a source with a button, as Ranges
  const paint = () => {
    if (!window.CSS?.highlights || typeof Highlight === 'undefined') return;
    const ranges = [];
    for (const box of document.querySelectorAll(BOX)) {
      const walker = document.createTreeWalker(box, NodeFilter.SHOW_TEXT);
      for (let node = walker.nextNode(); node; node = walker.nextNode()) {
        if (inCode(node)) continue;
        for (const m of markers(node.data)) {
          if (!m.numbers.some(d => button(d.n))) continue;
          const range = new Range();
          range.setStart(node, m.start);
          range.setEnd(node, m.end);
          ranges.push(range);
        }
      }
    }
    CSS.highlights.set('ragstream-cite', new Highlight(...ranges));
  };
  let queued = false;
  const repaint = () => {
    if (queued) return;
    queued = true;
    requestAnimationFrame(() => { queued = false; paint(); });
  };
  new MutationObserver(repaint).observe(document.body,
    {childList: true, subtree: true, characterData: true});
  repaint();

  // the source number under the pointer (the number the pointer is on in "[1, 2]", else the
  // marker's first that has a button), or null
  const numberAt = (x, y) => {
    let node = null, offset = 0;
    if (document.caretPositionFromPoint) {
      const pos = document.caretPositionFromPoint(x, y);
      if (pos) { node = pos.offsetNode; offset = pos.offset; }
    } else if (document.caretRangeFromPoint) {
      const range = document.caretRangeFromPoint(x, y);
      if (range) { node = range.startContainer; offset = range.startOffset; }
    }
    if (!node || node.nodeType !== Node.TEXT_NODE || inCode(node)) return null;
    if (!node.parentElement?.closest(BOX)) return null;
    for (const m of markers(node.data)) {
      if (offset < m.start || offset > m.end) continue;
      // the caret is between characters: also check that the pointer is over the marker
      const range = new Range();
      range.setStart(node, m.start);
      range.setEnd(node, m.end);
      const over = [...range.getClientRects()].some(r =>
        x >= r.left - 1 && x <= r.right + 1 && y >= r.top - 1 && y <= r.bottom + 1);
      if (!over) continue;
      const on = m.numbers.find(d => offset >= d.start && offset <= d.end && button(d.n));
      return (on || m.numbers.find(d => button(d.n)))?.n ?? null;
    }
    return null;
  };

  document.addEventListener('click', event => {
    if (!event.target.closest?.(BOX)) return;
    const n = numberAt(event.clientX, event.clientY);
    const target = n && button(n);
    if (!target) return;
    event.preventDefault();
    target.click();
  }, true);
  document.addEventListener('mousemove', event => {
    const box = event.target.closest?.(BOX);
    if (!box) return;
    box.style.cursor = numberAt(event.clientX, event.clientY) ? 'pointer' : '';
  }, {passive: true});
})();
