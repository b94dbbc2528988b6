// A cut cell's whole text on hover, for the page's grids (Streamlit draws a table on a canvas
// and has no per-cell tooltip: streamlit/streamlit#7564). Installed once per page.
//
// A grid with cells cut short (…) is followed on the page by a caption that carries a hidden
// span, ``data-ragstream-whole``: JSON ``{header, row, whole}``, the header's and the rows'
// heights in pixels and, by the text a cut cell shows, its whole text (``views.hover_data``).
// Over such a grid the pointer's cell is found from the grid's geometry (the column borders
// read from the canvas' pixels in the border colour, the rows from the heights and the grid's
// scroll); the text that cell shows is read from the grid's accessibility table, which holds
// the rows on screen as they are drawn (sorted or not); if it is a cut one, its whole text is
// shown in a tooltip beside the pointer.
(() => {
  if (window.__ragstreamCellHover) return;
  window.__ragstreamCellHover = true;

  const tip = document.createElement('div');
  tip.setAttribute('role', 'tooltip');
  tip.dataset.testid = 'ragstreamCellTip';
  Object.assign(tip.style, {
    position: 'fixed', zIndex: 1000100, display: 'none', pointerEvents: 'none',
    maxWidth: '560px', maxHeight: '70vh', overflow: 'hidden', padding: '0.5rem 0.75rem',
    whiteSpace: 'pre-wrap',
    overflowWrap: 'break-word', fontSize: '14px', lineHeight: '1.45',
    fontFamily: '"Source Sans", sans-serif', color: 'rgb(49, 51, 63)', background: 'white',
    border: '1px solid rgba(49, 51, 63, 0.2)', borderRadius: '0.5rem',
    boxShadow: '0 4px 16px rgba(0, 0, 0, 0.16)',
  });
  document.body.appendChild(tip);
  const hide = () => { tip.style.display = 'none'; };

  // the grid's cut cells (the span in the caption right after it), or null; parsed once
  // per text of the span, not at every move of the pointer
  const parsed = new WeakMap();
  const payload = grid => {
    const next = grid.closest('.stElementContainer')?.nextElementSibling;
    const span = next?.querySelector('[data-ragstream-whole]');
    if (!span) return null;
    const raw = span.dataset.ragstreamWhole;
    const seen = parsed.get(span);
    if (seen && seen.raw === raw) return seen.data;
    let data = null;
    try { data = JSON.parse(raw); } catch { data = null; }
    parsed.set(span, {raw, data});
    return data;
  };

  // the x of each column border, in CSS pixels from the canvas' left, read one pixel row
  // under the header; kept while the canvas keeps its size
  const borders = new WeakMap();
  const columnEdges = (grid, canvas, header) => {
    const seen = borders.get(canvas);
    if (seen && seen.w === canvas.width && seen.h === canvas.height) return seen.edges;
    const style = getComputedStyle(grid.querySelector('.stDataFrameGlideDataEditor') || grid);
    const hex = style.getPropertyValue('--gdg-border-color').trim().replace('#', '');
    const n = parseInt(hex.slice(0, 6), 16);
    const colour = [(n >> 16) & 255, (n >> 8) & 255, n & 255];
    const scale = canvas.width / canvas.getBoundingClientRect().width || 1;
    const y = Math.min(canvas.height - 1, Math.round((header + 2) * scale));
    let px;
    try { px = canvas.getContext('2d').getImageData(0, y, canvas.width, 1).data; }
    catch { return null; }
    const edges = [];
    for (let x = 1; x < canvas.width - 1; x++) {
      const i = x * 4;
      const on = Math.abs(px[i] - colour[0]) <= 8 && Math.abs(px[i + 1] - colour[1]) <= 8
        && Math.abs(px[i + 2] - colour[2]) <= 8;
      if (on && !(edges.length && x - edges[edges.length - 1] * scale <= 2)) edges.push(x / scale);
    }
    borders.set(canvas, {w: canvas.width, h: canvas.height, edges});
    return edges;
  };

  document.addEventListener('mousemove', event => {
    const grid = event.target instanceof Element
      ? event.target.closest('[data-testid=stDataFrame]') : null;
    const data = grid && payload(grid);
    const canvas = grid?.querySelector('canvas[data-testid=data-grid-canvas]');
    if (!data || !canvas) return hide();
    const box = canvas.getBoundingClientRect();
    const x = event.clientX - box.left, y = event.clientY - box.top;
    if (x < 0 || y < data.header || x > box.width || y > box.height) return hide();
    const edges = columnEdges(grid, canvas, data.header);
    const table = grid.querySelector('table[role=grid]');
    if (!edges || !table) return hide();
    const heads = table.querySelectorAll('th[role=columnheader]').length;
    const lead = Math.max(0, edges.length + 1 - heads);  // a row-selection column comes first
    const column = edges.filter(e => e <= x).length - lead;
    const scroller = grid.querySelector('.dvn-scroller');
    const row = Math.floor((y - data.header + (scroller ? scroller.scrollTop : 0)) / data.row);
    if (column < 0 || row < 0) return hide();
    const cell = table.querySelector(
      `tr[aria-rowindex="${row + 2}"] td[aria-colindex="${column + 1}"]`);
    const whole = cell && data.whole[cell.textContent];
    if (!whole) return hide();
    tip.textContent = whole;
    tip.style.display = 'block';
    const room = tip.getBoundingClientRect();
    const left = Math.min(event.clientX + 14, window.innerWidth - room.width - 8);
    const below = event.clientY + 18;
    const top = below + room.height > window.innerHeight - 8
      ? Math.max(8, event.clientY - room.height - 10) : below;
    tip.style.left = `${Math.max(8, left)}px`;
    tip.style.top = `${top}px`;
  }, {passive: true});
  document.addEventListener('wheel', hide, {passive: true, capture: true});
  document.addEventListener('mousedown', hide, {passive: true, capture: true});
})();
