"""A table's cells fitted to its columns: Streamlit's grid measured with its own font, each text
cell wrapped at spaces into the rows' lines or cut with "…", the columns' widths shared out so
no table scrolls sideways at 1280 px, the cut cells' whole texts for the hover script, and the
chunk tables' columns (their labels, widths and help)."""


from __future__ import annotations

import bisect
import html
import itertools
import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

#: what an empty text cell reads; number cells stay None and the page passes
#: ``placeholder=EMPTY`` to the grid (it would read "None")
EMPTY = "—"
#: the chunk tables' section column: the chunk's heading path under its document's title (the
#: file is in the chunk id beside it; the whole path is in ``row_detail`` and the pickers)
SECTION = "section"
#: the old name of the section column's key
SOURCE_SECTION = SECTION

# --------------------------------------------------------------------------- the grid's cells
#
# Streamlit draws a table (``st.dataframe``, ``st.data_editor``) on a canvas: glide-data-grid
# wraps a text cell's words only in rows taller than 64 px (4rem), breaks a word wider than
# the cell inside itself, clips the lines a row has no room for and cuts a one-line cell at
# its edge without a mark. So every text cell the page shows is fitted here first, with the
# grid's own font metrics: it wraps at spaces into at most the table's lines, and a cell that
# would need more (or a word wider than its column) ends with "…" where its whole text is
# elsewhere (the chunk tables' row under "Open a chunk", a picked run, the choices line).

#: the widths in pixels of the grid's font (Streamlit's "Source Sans", 400 14px), as Chromium's
#: canvas ``measureText`` gives them; a character not listed counts as a whole em (14 px). A
#: string's width is the sum of its characters' (kerning only narrows it)
_FONT_WIDTHS: tuple[tuple[float, str], ...] = (
    (2.8, " "), (3.38, "|"), (3.45, "ií"), (3.46, "j"), (3.49, "',.:;·‘’"), (3.57, "l"),
    (3.69, "I"), (4.05, "!"), (4.09, "f"), (4.25, "()[]{}"), (4.36, "-"), (4.64, "°"),
    (4.74, "t"), (4.86, "r"), (4.9, "/\\"), (5.86, "*"), (5.87, "s"), (5.95, "?z"),
    (5.97, "\"“”"), (6.01, "«»"), (6.25, "x"), (6.39, "cç"), (6.54, "vy"), (6.67, "Y"),
    (6.71, "J"), (6.72, "–"), (6.81, "L"), (6.92, "F"), (6.93, "k"), (6.95, "eéèêë"),
    (6.96, "0123456789#$+<=>^~§×≤≥−±€£"), (7.0, "_"), (7.06, "agáàâä"), (7.19, "X"),
    (7.21, "V"), (7.37, "✗"), (7.38, "E"), (7.48, "S"), (7.51, "T"), (7.55, "Z"),
    (7.59, "`oöó"), (7.61, "A"), (7.62, "huüÄú"), (7.66, "nñ"), (7.75, "b"), (7.77, "dpq"),
    (7.93, "P"), (7.97, "R"), (8.0, "C"), (8.07, "ß"), (8.11, "K"), (8.24, "BΔ"), (8.4, "▶"),
    (8.53, "&"), (8.57, "✓"), (8.61, "D"), (8.64, "G"), (8.67, "→←↑↓"), (9.03, "UÜ"),
    (9.06, "N"), (9.13, "H"), (9.3, "OQÖ"), (10.07, "w"), (10.18, "M"), (11.01, "W"),
    (11.2, "—"), (11.54, "%"), (11.61, "m"), (11.74, "↻✕"), (11.86, "@"), (12.56, "⚠"),
    (13.28, "…"),
)
FONT_PX: dict[str, float] = {ch: width for width, chars in _FONT_WIDTHS for ch in chars}
UNKNOWN_CHAR_PX = 14.0
#: a cell's padding on each side (the grid's ``cellHorizontalPadding``) and the pixels a line
#: keeps free besides (the grid may measure a kerned string a little differently)
CELL_PAD = 8
CELL_SLACK = 3
#: the old name of both paddings together
CELL_PADDING = 2 * CELL_PAD
#: the glyphs' height of the grid's font (ascent + descent: 13 px, rounded up), its line
#: height (1.4 times that) and a row's top padding: a row of ``n`` lines needs
#: ``GLYPH_PX + (n - 1) × LINE_HEIGHT × GLYPH_PX + ROW_PAD`` pixels, else the grid clips it
GLYPH_PX = 14
LINE_HEIGHT = 1.4
ROW_PAD = 3
#: the grid wraps text only in rows taller than this
WRAP_FROM = 64
#: the grid's header height, and a row's height in tables of one-line rows, in pixels
ROW_HEIGHT = 35


def row_height(lines: int) -> int:
    """The row height in pixels that shows ``lines`` lines of wrapped text whole (one line:
    ``ROW_HEIGHT``, which does not wrap)."""
    if lines <= 1:
        return ROW_HEIGHT
    need = GLYPH_PX + (lines - 1) * LINE_HEIGHT * GLYPH_PX + ROW_PAD
    return max(WRAP_FROM + 4, math.ceil(need) + 1)


#: the chunk tables' total column width in pixels: the grid's width at 1280x900 with the
#: sidebar open, so no table scrolls sideways there (Streamlit spreads the columns over a
#: wider grid)
TABLE_WIDTH = 780
#: the lines a chunk table's cells wrap into, and its row height (passed as ``row_height``)
TABLE_LINES = 4
TABLE_ROW_HEIGHT = row_height(TABLE_LINES)
#: the most lines a cell of the page's other tables wraps into
GRID_LINES = 4
#: the tallest a chunk table grows: the header and six rows (it scrolls beyond)
TABLE_MAX_HEIGHT = ROW_HEIGHT + 6 * TABLE_ROW_HEIGHT + 3
#: the tallest the page's other tables grow
GRID_MAX_HEIGHT = 420
#: the tables drawn in the sidebar (by their keys): left as Streamlit sizes them (its ~200 px
#: hold no column of document paths whole)
SIDEBAR_TABLES = frozenset({"kb_docs"})
#: fixed column widths in pixels
COLUMN_WIDTHS: dict[str, int] = {"rank": 40, "by": 46}
#: columns as wide as the widest of their label and their values in two lines
STATUS_COLUMNS = ("rule", "status")
#: the chunk tables' checkbox columns (the person's decisions): label and help
CHECK_COLUMNS: dict[str, tuple[str, str]] = {
    "pin": ("pin", "Pin: keep this chunk through A3 and A4, in the final selection (pinned ones "
                   "first). Untick to undo."),
    "exclude": ("excl", "Exclude: drop this chunk from Retrieval on. Untick to undo."),
}
#: wide enough for the label and the editable column's pencil mark
CHECK_COLUMN_WIDTH = 58
#: the pixels an editable column's header gives its pencil mark (18 px and a gap); a header's
#: text runs from its left padding to the column's edge, and keeps this many pixels free there
EDIT_MARK_PX = 24
HEADER_SLACK = 4
#: a score column (three decimals) and a count column (a whole number); a longer label widens it
SCORE_COLUMN_WIDTH = 54
COUNT_COLUMN_WIDTH = 40
#: the score columns' labels and their help: what each score is, the whole name first. The
#: score that orders a table (``score (fused)``: Retrieval's, ``score (rerank)``: the
#: ReRanker's and A3's, ``score (best_sentence)``: A4's) is labelled by its kind
SCORE_LABELS: dict[str, tuple[str, str]] = {
    "fused": ("fused", "fused: Retrieval's score, the reciprocal-rank fusion (RRF) of the chunk's "
                       "dense and keyword ranks; it orders the table. A small number on another "
                       "scale than dense or keyword"),
    "rerank": ("rerank", "rerank: the ReRanker's relevance score of the chunk for the prompt "
                         "(cross-encoder, or the offline backend's); it orders the table"),
    "best_sentence": ("best", "best_sentence: the similarity to the prompt of the chunk's best "
                              "sentence (A4 Condenser); it orders the table"),
    "dense": ("dense", "dense: the chunk's embedding (cosine) similarity to the prompt"),
    "keyword": ("keyword", "keyword: the chunk's BM25 keyword score for the prompt"),
    "retrieval_rank": ("retr", "retrieval_rank: the chunk's rank at Retrieval"),
    "rank_change": ("Δrank", "rank_change: retrieval rank − rerank rank (+3: three places up)"),
    "sentences": ("sent", "sentences: how many of its sentences are in the condensed context"),
    "citation": ("cite", "citation: its source number [n] in the condensed context"),
    "p_relevant": ("P rel", "p_relevant: the model's probability that the chunk is relevant"),
}
#: the short labels alone (the old name)
SHORT_LABELS: dict[str, str] = {name: label for name, (label, _) in SCORE_LABELS.items()}
#: the chunk tables' chunk column: the chunk id, then its section (``§ …``); as wide as the
#: longest id, between these pixels
CHUNK = "chunk"
CHUNK_LEAST, CHUNK_MOST = 170, 280
#: the reason column's fewest pixels (the chunk column gives way to it)
REASON_LEAST = 96


def is_count(key: str) -> bool:
    """Whether a score column holds a whole number (a rank, a count, a citation)."""
    return key.endswith(("_rank", "rank_change", "sentences", "citation"))


def table_height(rows: int, row_height: int = TABLE_ROW_HEIGHT, most: int = TABLE_MAX_HEIGHT) -> int:
    """A table's height in pixels: the header (``ROW_HEIGHT``) and ``rows`` rows of
    ``row_height`` without blank space under them; at most ``most``, as many whole rows as fit
    in it (it scrolls beyond), so that its last row shown is not half a row."""
    shown = min(rows, max(1, (most - ROW_HEIGHT - 3) // row_height))
    return ROW_HEIGHT + row_height * shown + 3


def text_px(text: str) -> float:
    """``text``'s width in pixels in the grid's font (``FONT_PX``)."""
    return sum(FONT_PX.get(ch, UNKNOWN_CHAR_PX) for ch in text)


def _room(width: float) -> float:
    """The pixels a line of text has in a cell ``width`` pixels wide."""
    return width - CELL_PADDING - CELL_SLACK


def _wrap(text: str, width: float) -> tuple[list[str], bool]:
    """The lines the grid draws ``text`` in, in a wrapping cell ``width`` pixels wide, and
    whether it breaks a word to do so. As glide-data-grid wraps: each paragraph (a line
    break; the page's cells have none, ``_flat``) on its own; a line ends at its last space that fits,
    the next one is measured with that space in front; a word wider than a line is broken
    where the line ends."""
    room, space = _room(width), FONT_PX[" "]
    lines: list[str] = []
    broken = False
    for para in str(text).split("\n"):
        line, used, lead, started = "", 0.0, 0.0, False
        for word in para.split(" "):
            px = text_px(word)
            if started:
                if lead + used + space + px <= room:
                    line, used = f"{line} {word}", used + space + px
                    continue
                lines.append(line)
                lead = space
            while lead + px > room and len(word) > 1:  # the grid breaks the word
                broken = True
                # the longest start of the word that fits (at least one character)
                widths = itertools.accumulate(FONT_PX.get(ch, UNKNOWN_CHAR_PX) for ch in word)
                cut = max(1, bisect.bisect_right(list(widths), room - lead))
                lines.append(word[:cut])
                word, px, lead = word[cut:], text_px(word[cut:]), 0.0
            line, used, started = word, px, True
        lines.append(line)
    return lines, broken


def wrap(text: str, width: float) -> list[str]:
    """The lines the grid draws ``text`` in, in a wrapping cell ``width`` pixels wide."""
    return _wrap(text, width)[0]


def text_lines(text: str, width: float) -> int:
    """How many lines ``text`` takes in a wrapping cell ``width`` pixels wide (``wrap``)."""
    return len(_wrap(text, width)[0])


def breaks_a_word(text: str, width: float) -> bool:
    """Whether a word of ``text`` is wider than a line of a cell ``width`` pixels wide (the
    grid would break it inside itself)."""
    return _wrap(text, width)[1]


def fits(text: str, width: float, lines: int) -> bool:
    """Whether ``text`` shows whole in a cell ``width`` pixels wide of ``lines`` lines: no
    word broken, no line more than the row holds (one line: no wrapping at all)."""
    found, broken = _wrap(text, width)
    return not broken and len(found) <= lines


def _flat(text: str) -> str:
    """``text`` on one line, its white space made single spaces (the grid shows a cell's line
    breaks as spaces)."""
    return " ".join(str(text).split())


#: what a cell cut short ends with, and what it may not end with before that
CUT_MARK = "…"
_CUT_STRIP = " ,;:>·§-–—(/"


def fit_text(text: str, width: float, lines: int = 1) -> str:
    """``text`` as a cell ``width`` pixels wide of ``lines`` lines shows it whole: as it is
    when it fits (``fits``), else cut after its last whole word that leaves room for "…" (a
    first word wider than the cell is cut inside, with "…")."""
    text = _flat(text)
    if fits(text, width, lines):
        return text
    parts = re.split(r"( )", text)  # words at even places, the spaces between

    def upto(k: int) -> str:  # the first k words, cut
        return "".join(parts[: 2 * k - 1]).rstrip(_CUT_STRIP) + CUT_MARK

    lo, hi = 0, len(parts[::2])
    while lo < hi:  # the most words that fit with the mark
        mid = (lo + hi + 1) // 2
        if fits(upto(mid), width, lines):
            lo = mid
        else:
            hi = mid - 1
    if lo and upto(lo) != CUT_MARK:
        return upto(lo)
    word = parts[0]
    lo, hi = 0, len(word)
    while lo < hi:  # the longest start of the first word that fits with the mark
        mid = (lo + hi + 1) // 2
        if fits(word[:mid] + CUT_MARK, width, lines):
            lo = mid
        else:
            hi = mid - 1
    return word[:lo] + CUT_MARK


def fit_width(texts: Iterable[str], lines: int = TABLE_LINES, whole_words: bool = False) -> int:
    """The narrowest cell width in whole pixels in which every one of ``texts`` takes at most
    ``lines`` lines (``text_lines``); with ``whole_words``, no word is broken either."""
    distinct = {_flat(t) for t in texts}
    if not distinct:
        return CELL_PADDING + CELL_SLACK + 1

    def ok(width: int) -> bool:
        return all((fits(t, width, lines) if whole_words else text_lines(t, width) <= lines)
                   for t in distinct)

    lo = math.floor(max(text_px(t) for t in distinct) / lines) + CELL_PADDING
    hi = math.ceil(max(text_px(t) for t in distinct)) + CELL_PADDING + CELL_SLACK + 1
    while not ok(hi):  # a paragraph per line may need more than the longest line
        hi += 20
    lo = min(lo, hi)
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid + 1
    return hi


def label_width(label: str, editable: bool = False) -> int:
    """The fewest pixels a column needs to show header ``label`` whole: the left padding, an
    editable column's pencil mark, the label and ``HEADER_SLACK``."""
    return math.ceil(CELL_PAD + (EDIT_MARK_PX if editable else 0) + text_px(label) + HEADER_SLACK)


def _shown_value(value: Any, config: dict[str, Any]) -> str:
    """A cell's value as the grid shows it (numbers in the column's format), for widths."""
    if value is None:
        return EMPTY
    if isinstance(value, bool):
        return ""
    fmt = (config.get("type_config") or {}).get("format")
    if isinstance(value, int | float) and fmt:
        try:
            return fmt % value
        except (TypeError, ValueError):
            return str(value)
    if isinstance(value, float):
        return f"{value:.4f}".rstrip("0").rstrip(".")
    return str(value)


def _is_text(rows: list[dict[str, Any]], name: str, config: dict[str, Any]) -> bool:
    """Whether column ``name`` holds text (wraps and may be cut), not numbers or ticks."""
    if (config.get("type_config") or {}).get("type") in ("number", "checkbox"):
        return False
    return any(isinstance(r.get(name), str) for r in rows)


@dataclass(frozen=True)
class Grid:
    """A table as the page draws it: ``rows`` with every text cell fitted to its column
    (``fit_text``), the column configs with every width, the row height that shows the
    cells' lines whole, the table's height, the columns with a cell cut short (ending
    with "…"), and each cut cell's whole text by the text it shows (``hover_data``)."""

    rows: list[dict[str, Any]]
    columns: dict[str, Any]  # by column: its config (a plain dict Streamlit takes)
    row_height: int
    height: int
    cut: list[str]
    whole: dict[str, str] = field(default_factory=dict)


def _auto_widths(rows: list[dict[str, Any]], columns: dict[str, dict[str, Any]], total: int,
                 editable: Iterable[str] = (), most_lines: int = GRID_LINES) -> None:
    """Give every column of ``columns`` without a width one, in place, so that the widths add
    up to ``total`` (if they can). A column with a width keeps it (widened to its label); a
    number column is as wide as its label and its longest number; the text columns get the
    widths that show every cell in the fewest lines (at most ``most_lines``) that fit
    together, each at least its label and its longest word, and share what is left towards
    each showing its longest cell on one line. When even ``most_lines`` lines do not fit,
    the text columns give way alike, and ``fit_text`` cuts what does not fit."""
    editable = set(editable)
    head = {n: label_width(str(c.get("label", n)), n in editable) for n, c in columns.items()}
    for name, config in columns.items():
        if "width" in config:
            config["width"] = max(int(config["width"]), head[name])
    auto = [n for n, c in columns.items() if "width" not in c]
    if not auto:
        return
    space = total - sum(c["width"] for c in columns.values() if "width" in c)
    # the longest cells decide the lines a column needs
    texts = {n: sorted({_flat(_shown_value(r.get(n), columns[n])) for r in rows}, key=text_px,
                       reverse=True)[:60] for n in auto}
    wrapping = [n for n in auto if _is_text(rows, n, columns[n])]
    pad = CELL_PADDING + CELL_SLACK + 1
    natural = {n: max(head[n], math.ceil(max((text_px(t) for t in texts[n]), default=0.0)) + pad)
               for n in auto}
    widths = {n: natural[n] for n in auto if n not in wrapping}
    room = space - sum(widths.values())

    def need(n: str, lines: int) -> int:
        return min(natural[n], max(head[n], fit_width(texts[n], lines, whole_words=True)))

    for lines in range(1, max(1, most_lines) + 1):
        wanted = {n: need(n, lines) for n in wrapping}
        if sum(wanted.values()) <= room:
            break
    else:  # not even in most_lines lines: the widest text columns give way, to a common width
        wanted = _level(wanted, room, {n: max(head[n], 60) for n in wanted})
    widths.update(wanted)
    extra = room - sum(wanted.values())
    short = {n: natural[n] - widths[n] for n in wrapping if natural[n] > widths[n]}
    if extra > 0 and short:  # towards each one's longest cell on one line, alike
        want = sum(short.values())
        for n, gap in short.items():
            give = min(gap, extra * gap // want)
            widths[n] += give
        extra = room - sum(widths[n] for n in wrapping)
    share = wrapping or auto
    for i, n in enumerate(share):  # what is left: to the text columns alike
        give = max(0, extra) // (len(share) - i)
        widths[n] += give
        extra -= give
    while extra < 0:  # over (labels, the 60 px floor): the widest text column gives way
        n = max(share, key=lambda k: (widths[k] - head[k], k))
        give = min(-extra, widths[n] - head[n])
        if give <= 0:
            break  # every column at its label: nothing narrower is readable
        widths[n] -= give
        extra += give
    for n in auto:
        columns[n]["width"] = int(widths[n])


def _level(wanted: dict[str, int], room: int, least: dict[str, int]) -> dict[str, int]:
    """Widths for columns that want ``wanted`` and cannot all have it in ``room``: a column
    that wants less than a common width keeps what it wants, the others get that width (the
    widest that fits; each at least ``least``), so one long column does not squeeze the short
    ones."""
    out: dict[str, int] = {}
    left, todo = room, sorted(wanted, key=lambda n: wanted[n])
    for i, n in enumerate(todo):
        level = left // (len(todo) - i)
        out[n] = max(least[n], min(wanted[n], level))
        left -= out[n]
    return out


def grid(rows: list[dict[str, Any]], columns: dict[str, dict[str, Any]] | None = None,
         total: int = TABLE_WIDTH, most_lines: int = GRID_LINES, lines: int | None = None,
         most_height: int = GRID_MAX_HEIGHT, editable: Iterable[str] = (),
         caps: dict[str, int] | None = None) -> Grid:
    """``rows`` as the page's grid shows them without a word broken or a line lost: column
    widths for the columns ``columns`` gives none (``_auto_widths``, adding up to ``total``),
    a row height for as many lines as the longest cell needs (at most ``most_lines``; or
    ``lines`` exactly), and every text cell fitted to its column in that many lines
    (``fit_text``: a longer one ends with "…"). ``editable``: the columns the person may edit
    (their headers carry a pencil mark); ``caps``: columns cut at fewer lines (their whole
    text is shown elsewhere)."""
    names = list(dict.fromkeys(name for row in rows for name in row))
    configs = {n: dict((columns or {}).get(n) or {}) for n in names}
    _auto_widths(rows, configs, total, editable, lines or most_lines)
    wrapping = [n for n in names if _is_text(rows, n, configs[n])]
    caps = caps or {}
    fixed = lines is not None
    if lines is None:
        need = max((min(text_lines(_flat(r[n]), configs[n]["width"]), caps.get(n, most_lines))
                    for r in rows for n in wrapping if isinstance(r.get(n), str)), default=1)
        lines = max(1, min(most_lines, need))
    shown: list[dict[str, Any]] = []
    cut: set[str] = set()
    whole: dict[str, str] = {}
    used = 1
    for row in rows:
        out = dict(row)
        for n in wrapping:
            if isinstance(row.get(n), str):
                out[n] = fit_text(row[n], configs[n]["width"], min(lines, caps.get(n, lines)))
                used = max(used, text_lines(out[n], configs[n]["width"]))
                if out[n] != _flat(row[n]):
                    cut.add(n)
                    _add_whole(whole, out[n], row[n])
        shown.append(out)
    height = row_height(lines if fixed else min(lines, used))  # as tall as the cells drawn
    return Grid(shown, configs, height, table_height(len(rows), height, most_height),
                [n for n in names if n in cut], whole)


#: the note under a grid with cells cut short
CUT_NOTE = "A cell cut short (…) shows its whole text where the pointer rests on it."
#: what separates the whole texts of cells cut to the same text
WHOLE_SEPARATOR = "\n\n— or —\n\n"


def _add_whole(whole: dict[str, str], shown: str, text: str) -> None:
    """Record that a cell showing ``shown`` (cut with "…") holds ``text``; two cells cut to the
    same text show both whole texts."""
    text = text.strip()
    have = whole.get(shown)
    if have is None:
        whole[shown] = text
    elif text not in have.split(WHOLE_SEPARATOR):
        whole[shown] = have + WHOLE_SEPARATOR + text


def hover_data(drawn: Grid) -> str:
    """The hidden HTML the page puts right after a grid with cells cut short, for its hover
    script (``cell_hover.js``): the header's and the rows' heights and each cut cell's whole
    text by the text it shows. Empty when no cell is cut."""
    if not drawn.whole:
        return ""
    data = json.dumps({"header": ROW_HEIGHT, "row": drawn.row_height, "whole": drawn.whole},
                      ensure_ascii=False, separators=(",", ":"))
    return f'<span hidden data-ragstream-whole="{html.escape(data, quote=True)}"></span>'


def chunk_cell(chunk_id: str, section: str) -> str:
    """A chunk table's chunk cell: the chunk id, then ``§`` and its section (the grid shows a
    cell's text as one paragraph)."""
    return f"{chunk_id} § {section}" if section and section != EMPTY else chunk_id


#: a limit's constant with its value in a reason (``N3_FINAL_SELECTION_MAX=24``)
_LIMIT = re.compile(r"\b(N\d)_([A-Z0-9_]+?)(?:_MAX)?=(\d+)\b")


def plain_limits(text: str) -> str:
    """A reason with each limit's constant in words that wrap: ``over
    N3_FINAL_SELECTION_MAX=24`` → ``over N3 final selection (24)`` (one word too wide for
    a table's reason column; the row detail keeps the reason as the stage gave it)."""
    return _LIMIT.sub(lambda m: f"{m.group(1)} {m.group(2).lower().replace('_', ' ')} "
                                f"({m.group(3)})", text)


def chunk_table_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A chunk table's rows as the grid shows them: the chunk id and the section in one
    ``chunk`` column (``chunk_cell``), where the chunk id stood; a reason's limits in words
    (``plain_limits``)."""
    out = []
    for row in rows:
        shown: dict[str, Any] = {}
        for name, value in row.items():
            if name == "chunk id":
                shown[CHUNK] = chunk_cell(value, str(row.get(SECTION, "")))
            elif name == "reason" and isinstance(value, str):
                shown[name] = plain_limits(value)
            elif name != SECTION:
                shown[name] = value
        out.append(shown)
    return out


def _score_label(name: str) -> tuple[str, str]:
    """A score column's label and help: ``score (fused)`` → ``fused`` and what it is."""
    kind = name[name.find("(") + 1: -1] if name.startswith("score (") else name
    if kind in SCORE_LABELS:
        return SCORE_LABELS[kind]
    if name.startswith("score"):
        return "score", f"{name}: the stage's score, which orders the table"
    return name.replace("_", " "), name


def table_columns(rows: list[dict[str, Any]], total: int = TABLE_WIDTH) -> dict[str, dict[str, Any]]:
    """Streamlit column configs (plain dicts) for a chunk table of ``rows`` (``view_rows``,
    with the pin / exclude marks), by the columns the grid shows (``chunk_table_rows``), whose
    widths add up to ``total``: fixed widths for the pin / exclude checkboxes, rank and
    ``by``; status (and ``rule``) as wide as their values in two lines; each score labelled by
    what it is (``fused``, ``dense``, ``keyword``, ``rerank``…; the whole name in ``help``),
    three decimals, counts as whole numbers; the chunk column as wide as the longest chunk id
    (``CHUNK_LEAST`` to ``CHUNK_MOST``, leaving the reason ``REASON_LEAST``), and the rest to
    the reason. Every label fits its width (``label_width``).

    The page draws it with ``chunk_grid`` (``TABLE_LINES`` lines a row) and
    ``placeholder=EMPTY``."""
    shown = chunk_table_rows(rows)
    names = list(dict.fromkeys(name for row in shown for name in row))
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        if name in CHECK_COLUMNS:
            label, help_text = CHECK_COLUMNS[name]
            out[name] = {"width": max(CHECK_COLUMN_WIDTH, label_width(label, editable=True)),
                         "label": label, "help": help_text, "type_config": {"type": "checkbox"}}
        elif name in COLUMN_WIDTHS:
            out[name] = {"width": max(COLUMN_WIDTHS[name], label_width(name))}
        elif name in STATUS_COLUMNS:
            out[name] = {"width": max(label_width(name),
                                      fit_width((str(r.get(name, "")) for r in shown), lines=2,
                                                whole_words=True))}
        elif name not in (CHUNK, "reason"):  # a score: what it is in its label, and on hover
            count = not name.startswith("score") and is_count(name)
            label, help_text = _score_label(name)
            fmt = "%+d" if name == "rank_change" else "%d" if count else "%.3f"
            width = COUNT_COLUMN_WIDTH if count else SCORE_COLUMN_WIDTH
            out[name] = {"width": max(width, label_width(label)), "label": label, "help": help_text,
                         "type_config": {"type": "number", "format": fmt}}
    space = total - sum(c["width"] for c in out.values())
    if CHUNK in names:
        longest = max((text_px(str(r.get("chunk id", ""))) for r in rows), default=0.0)
        chunk = min(CHUNK_MOST, max(CHUNK_LEAST, math.ceil(longest) + CELL_PADDING + CELL_SLACK + 1))
        if "reason" in names:
            chunk = max(CHUNK_LEAST, min(chunk, space - REASON_LEAST))
        out[CHUNK] = {"width": chunk if "reason" in names else space,
                      "help": "The chunk id (it names the file), then § its section: the heading "
                              "path under the document's title. A cell cut short (…) is whole "
                              "under “Open a chunk”."}
        space -= out[CHUNK]["width"]
    if "reason" in names:
        out["reason"] = {"width": space}
    return {name: out[name] for name in names}


def chunk_grid(rows: list[dict[str, Any]], columns: dict[str, dict[str, Any]],
               most_height: int = TABLE_MAX_HEIGHT) -> Grid:
    """A chunk table's ``rows`` (``view_rows`` with the pin / exclude marks) as the grid shows
    them, in the columns of ``table_columns``: ``TABLE_LINES`` lines a row, every text cell
    whole or cut with "…" (whole in ``row_detail``)."""
    return grid(chunk_table_rows(rows), columns, lines=TABLE_LINES, most_height=most_height,
                editable=list(CHECK_COLUMNS))


def text_widths(rows: list[dict[str, Any]], space: int) -> dict[str, int]:
    """The widths of a chunk table's text columns (the chunk column and the reason) within
    ``space`` pixels, as ``table_columns`` gives them."""
    columns = table_columns(rows, total=space)
    return {n: columns[n]["width"] for n in (CHUNK, "reason") if n in columns}


def cut_columns(rows: list[dict[str, Any]], columns: dict[str, dict[str, Any]],
                lines: int = TABLE_LINES) -> list[str]:
    """The text columns of a chunk table (``rows``: ``view_rows``; ``columns``:
    ``table_columns``) with a cell that does not show whole in ``lines`` lines: cut with "…",
    whole in ``row_detail`` for a picked row."""
    return chunk_grid(rows, columns).cut if lines == TABLE_LINES else grid(
        chunk_table_rows(rows), columns, lines=lines).cut
