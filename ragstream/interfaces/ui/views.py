"""Pure functions from a SuperPrompt to what the page shows: table rows, journeys, buttons."""

from __future__ import annotations

import bisect
import html
import itertools
import json
import math
import re
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragstream.stages import controller
from ragstream.stages.staleness import Stale
from ragstream.state.super_prompt import Chunk, Citation, SuperPrompt, View, ViewRow
from ragstream.workbench.conversations import ID_PREFIX as CONVERSATION_PREFIX
from ragstream.workbench.conversations import SOURCE as CONVERSATION_SOURCE
from ragstream.workbench.conversations import is_conversation_chunk

# --------------------------------------------------------------------------- stage names

#: each stage's one name on the page and in the CLI's output, by its identifier: the stage's
#: ``label`` (``A3_NLI_Gate`` → ``A3 Gate``). The identifiers stay in the stored data (the
#: JSON, ``computed_from``, the configuration's ``agents.A3_NLI_Gate``) and the CLI's options
STAGE_LABELS: dict[str, str] = {st.name: st.label for st in controller.STAGES}


def stage_label(name: str) -> str:
    """A stage's name as the page says it (``A3_NLI_Gate`` → ``A3 Gate``); any other text as
    it is."""
    return STAGE_LABELS.get(name, name)


def reached_label(sp: SuperPrompt) -> str:
    """The last stage of ``sp``'s pass, by its name; ``nothing run`` before A0."""
    pos = controller.position(sp)
    return controller.STAGES[pos].label if pos >= 0 else "nothing run"


def value_label(value: str, answered: bool = False) -> str:
    """A kept run's ``stage`` (``sp.stage``: ``a3``) as the stage's name (``A3 Gate``). A5 and
    Prompt Builder leave the same value: an answered run got to Prompt Builder, any other
    reads ``A5 Format enforcer / Prompt Builder``."""
    if value == "raw":
        return "nothing run"
    named = [st.label for st in controller.STAGES if st.value == value]
    if len(named) > 1:
        return named[-1] if answered else " / ".join(named)
    return named[0] if named else value


#: a stage's identifier inside a message (``Run A3_NLI_Gate first``), or a configuration path
#: under an agent (``agents.A3_NLI_Gate.min_relevance``); not inside a word, a path or an id
_IDENTIFIER = re.compile(
    r"(?<![\w./#-])(agents\.)?(" + "|".join(sorted(
        (re.escape(name) for name, label in STAGE_LABELS.items() if name != label),
        key=len, reverse=True)) + r")(?:\.(\w+))?(?!\w)")


def plain_names(text: str) -> str:
    """``text`` (a message of the engine or the page: a notice, an error, an out-of-date
    reason) with every stage identifier in it said by the stage's name: ``Run A3_NLI_Gate
    first`` → ``Run A3 Gate first``, ``settings changed: agents.A3_NLI_Gate`` → ``settings
    changed: A3 Gate``, ``agents.A3_NLI_Gate.min_relevance`` → ``A3 Gate min_relevance``."""
    def name(match: re.Match[str]) -> str:
        said = STAGE_LABELS[match.group(2)]
        return f"{said} {match.group(3)}" if match.group(3) else said

    return _IDENTIFIER.sub(name, text) if text else text


#: stages that write a chunk view: (views_by_stage key, title: the stage's name)
VIEW_STAGES: list[tuple[str, str]] = [(st.view, st.label) for st in controller.STAGES if st.view]


@dataclass(frozen=True)
class ButtonState:
    """One stage's button: its label, whether it can be clicked, its help text, whether it
    has run, and whether its result is out of date."""

    name: str
    label: str
    enabled: bool
    help: str
    done: bool
    stale: bool = False

    @property
    def text(self) -> str:
        """The label as shown: ``✓`` once run, ``⚠`` when its result is out of date."""
        return f"⚠ {self.label}" if self.stale else f"✓ {self.label}" if self.done else self.label


def button_states(sp: SuperPrompt, stale: Stale | None = None) -> list[ButtonState]:
    """A button per stage: enabled unless an earlier stage must run first or is out of date
    (``stale``: the first stage whose inputs changed), with a help text."""
    pos = controller.position(sp)
    out = []
    for i, st in enumerate(controller.STAGES):
        required = controller.blocked_by(sp, st.name)
        done = i <= pos
        outdated = stale is not None and done and i >= stale.index
        if required:
            help_text, enabled = f"Run {stage_label(required)} first.", False
        elif stale is not None and i > stale.index:
            help_text, enabled = (f"Run {stage_label(stale.stage)} first: its result is out of "
                                  "date."), False
        elif outdated and stale is not None:
            help_text, enabled = (f"Out of date ({stale_cause(stale)}): run {st.label} "
                                  "again."), True
        elif done:
            help_text, enabled = f"Run {st.label} again (discards the results of the later stages).", True
        else:
            help_text, enabled = f"Run {st.label} now.", True
        out.append(ButtonState(st.name, st.label, enabled, help_text, done, outdated))
    return out


#: the class prefix of the containers holding an out-of-date pass's results (``st.container``
#: keys ``stale_…``), and the style that greys them
STALE_KEY = "stale_"
STALE_CSS = (f"<style>[class*='st-key-{STALE_KEY}'] {{ opacity: 0.55; filter: grayscale(1); }}"
             "</style>")
#: a table's toolbar (show columns, download, search, full screen) shows over the 44 px above
#: the table while the pointer is on it: a table keeps that much room above it (with the
#: 16 px between two elements), so that the toolbar covers no button, tab or expander title
TOOLBAR_ROOM = 30
GRID_CSS = ("<style>.stElementContainer:has(> [data-testid=stFullScreenFrame] > "
            f"[data-testid=stDataFrame]) {{ margin-top: {TOOLBAR_ROOM}px; }}</style>")
#: the class prefixes of an opened citation's pieces (``st.container`` keys): the cited text,
#: drawn with a bar beside it, and the text of the chunks around it, drawn paler
CITED_KEY = "rs_cited_"
AROUND_KEY = "rs_around_"
CITED_CSS = ("<style>"
             f"[class*='st-key-{CITED_KEY}'] {{ border-left: 4px solid #e6a700; "
             "padding: 0.25rem 0 0.25rem 0.85rem; background: rgba(255, 241, 168, 0.22); "
             "border-radius: 0 0.4rem 0.4rem 0; }"
             f"[class*='st-key-{AROUND_KEY}'] {{ opacity: 0.72; padding-left: calc(0.85rem + 4px); }}"
             "::highlight(ragstream-cite) { color: #1a5fb4; text-decoration: underline dotted; }"
             "</style>")
#: the page's own style: the out-of-date pass greyed, room for the tables' toolbars, an
#: opened citation's cited text beside a bar
PAGE_CSS = STALE_CSS + GRID_CSS + CITED_CSS
#: the page's script that shows a cut cell's whole text where the pointer rests on it
#: (Streamlit's grid has no cell tooltips); each grid's cut cells come in ``hover_data``
CELL_HOVER_JS = f"<script>{(Path(__file__).parent / 'cell_hover.js').read_text(encoding='utf-8')}</script>"
#: the page's script that makes the answer's [n] markers open their sources (the buttons under
#: the answer) without a page reload
CITE_CLICK_JS = f"<script>{(Path(__file__).parent / 'cite_click.js').read_text(encoding='utf-8')}</script>"


def stale_cause(stale: Stale) -> str:
    """Why a pass is out of date, in a few words: ``the prompt text changed``."""
    return plain_names("; ".join(stale.reasons))


def stale_line(stale: Stale) -> str:
    """``A3 Gate is out of date: settings changed: A3 Gate`` (``Stale.describe`` with the
    stages' names)."""
    return plain_names(stale.describe())


def stale_label(stale: Stale, what: str) -> str:
    """The title of a folded, out-of-date result: ``Out of date: the prompt text changed —
    prompt_ready of the earlier pass``."""
    return f"Out of date: {stale_cause(stale)} — {what}"


#: what a folded, out-of-date prompt_ready says in place of a copy button
STALE_PROMPT_NOTE = ("Not the prompt_ready of what is asked now, so there is no copy button: "
                     "run the stages again for the current one.")


def resume_label(first: str, last: str) -> str:
    """The re-run button: ``↻ Re-run A3 Gate → Prompt Builder`` (the stages' names)."""
    return f"↻ Re-run {stage_label(first)} → {stage_label(last)}"


def resume_help(first: str, last: str) -> str:
    """The re-run button's tooltip."""
    return (f"Re-run from {stage_label(first)} (the first stage out of date) to "
            f"{stage_label(last)}, where the pass had got.")


def run_button(next_name: str | None, auto: bool, answered: bool) -> tuple[str, str | None]:
    """The main run button's label and, when it has nothing to do (it is then disabled), why:
    with Auto-run, ``▶ Run all remaining stages`` (nothing to do once every stage is current
    and the pass answered); without, ``▶ Run next stage (A3 Gate)`` (nothing to do once every
    stage is current)."""
    if auto:
        idle = next_name is None and answered
        return "▶ Run all remaining stages", (NOTHING_LEFT_ANSWERED if idle else None)
    if next_name is None:
        return "▶ Run next stage (none left)", NOTHING_LEFT
    return f"▶ Run next stage ({stage_label(next_name)})", None


#: why the run button is disabled: every stage is current (and the pass answered)
NOTHING_LEFT = ("Nothing to run: every stage is current. Answer answers this pass; change the "
                "prompt, a setting, a filter or an edit to run again.")
NOTHING_LEFT_ANSWERED = ("Nothing to run: every stage is current and this pass is answered. "
                         "Change the prompt, a setting, a filter or an edit to run again.")


def stage_line(sp: SuperPrompt, next_name: str | None) -> str:
    """The line under the stage buttons: ``Last stage run: **A3 Gate** · next: **A4
    Condenser**`` or ``… · pipeline complete``."""
    said = (f"Last stage run: **{reached_label(sp)}**" if controller.position(sp) >= 0
            else "No stage run yet")
    return said + (f" · next: **{stage_label(next_name)}**" if next_name else " · pipeline complete")


#: stage buttons per row: eight in one row cut their labels at 1280 px ("A4 Co…"), four fit
STAGE_BUTTONS_PER_ROW = 4


def button_rows(sp: SuperPrompt, stale: Stale | None = None,
                per_row: int = STAGE_BUTTONS_PER_ROW) -> list[list[ButtonState]]:
    """The stage buttons in pipeline order, ``per_row`` to a row."""
    buttons = button_states(sp, stale)
    return [buttons[i:i + per_row] for i in range(0, len(buttons), per_row)]


def prompt_length_problem(text: str, limit: int) -> str | None:
    """What the prompt box says when ``text`` is longer than ``limit`` characters, else None."""
    if len(text) <= limit:
        return None
    return (f"The prompt is {len(text):,} / {limit:,} characters: shorten it by "
            f"{len(text) - limit:,} to run it.")


def _preview(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


#: what an empty text cell reads; number cells stay None and the page passes
#: ``placeholder=EMPTY`` to the grid (it would read "None")
EMPTY = "—"
#: the chunk tables' section column: the chunk's heading path under its document's title (the
#: file is in the chunk id beside it; the whole path is in ``row_detail`` and the pickers)
SECTION = "section"
#: the old name of the section column's key
SOURCE_SECTION = SECTION
#: a Retrieval candidate's status once the ReRanker has run without it (beyond N2)
NOT_RERANKED = "not reranked"

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
#: the journey table's fixed column widths; the reason takes the rest of ``TABLE_WIDTH``
JOURNEY_WIDTHS: dict[str, int] = {"stage": 118, "rank": 46, "status": 96}


def _is_count(key: str) -> bool:
    return key.endswith(("_rank", "rank_change", "sentences", "citation"))


#: scores the chunk tables leave to the journey
JOURNEY_ONLY = frozenset({"dense_rank", "keyword_rank"})


def section_label(chunk: Chunk, top: str = "") -> str:
    """A chunk's section as the tables show it: its heading path without the document's top
    heading (``What each stage does > A3_NLI_Gate``, not ``The eight pipeline stages > What
    each stage does > A3_NLI_Gate``), which is the document's title (``chunk.title``) or
    ``top`` (see ``top_headings``); the top heading alone for a chunk under no other heading,
    "" for a chunk before any heading. A turn of a conversation reads ``conversation · Turn 3
    · 2026-11-24 14:02`` (its chunk id names the conversation)."""
    if is_conversation_chunk(chunk):
        return f"{CONVERSATION_SOURCE} · {chunk.heading_label}"
    path = list(chunk.heading_path)
    if len(path) > 1 and path[0] in (chunk.title, top):
        path = path[1:]
    return " > ".join(path)


def top_headings(chunks: Iterable[Chunk]) -> dict[str, str]:
    """Each document's top heading (its H1), by ``doc_id``, as far as ``chunks`` tell: the
    first heading that every one of its chunks with a heading path starts with, when there are
    two or more of them (a front matter ``title`` may differ from the H1)."""
    firsts: dict[str, set[str]] = {}
    counts: dict[str, int] = {}
    for chunk in chunks:
        if chunk.heading_path:
            firsts.setdefault(chunk.doc_id, set()).add(chunk.heading_path[0])
            counts[chunk.doc_id] = counts.get(chunk.doc_id, 0) + 1
    return {doc: next(iter(heads)) for doc, heads in firsts.items()
            if len(heads) == 1 and counts[doc] > 1}


def _sections(sp: SuperPrompt) -> dict[str, str]:
    """``section_label`` of every chunk Retrieval returned, by id."""
    tops = top_headings(sp.base_context_chunks)
    return {c.id: section_label(c, tops.get(c.doc_id, "")) for c in sp.base_context_chunks}


def not_reranked(sp: SuperPrompt) -> set[str]:
    """The Retrieval candidates the ReRanker did not rerank: kept by Retrieval, beyond N2 and
    absent from the ReRanker's view. Empty until the ReRanker has run."""
    if View.RERANKED not in sp.views_by_stage:
        return set()
    reranked = {r.chunk_id for r in sp.view(View.RERANKED)}
    return {r.chunk_id for r in sp.view(View.RETRIEVAL)
            if r.status == "kept" and r.chunk_id not in reranked}


def beyond_n2_reason(rank: int) -> str:
    """Why a Retrieval candidate was not reranked: ``not reranked: beyond N2 (rank 191)``."""
    return f"not reranked: beyond N2 (rank {rank})"


def _n2_note(sp: SuperPrompt, rank: int) -> str:
    """The journey's and diff's words for a candidate beyond N2, with how many were reranked."""
    n2 = sum(r.decided_by != "you" for r in sp.view(View.RERANKED))
    return f"{beyond_n2_reason(rank)}, only the top {n2} are reranked"


def view_rows(sp: SuperPrompt, stage: str) -> list[dict[str, Any]]:
    """A table row per chunk of ``stage``'s view: rank, chunk id (it names the file), section
    (``section_label``), the stage's score and its other scores, status and reason. A named
    score that is the row's score on every row (``fused`` at Retrieval, ``rerank`` at the
    ReRanker) is shown once, as the score column's name: ``score (fused)``. Retrieval's rank in
    each list (``dense_rank``, ``keyword_rank``) is left to the chunk journey, which says it in
    words ("rank 7 of 200 (dense 3, keyword 12)"), so the table keeps room for the person's
    pin / exclude boxes.

    Once the ReRanker has run, a Retrieval candidate it did not rerank (beyond N2) reads
    status ``not reranked``, reason ``not reranked: beyond N2 (rank 191)``. An empty text cell
    reads ``EMPTY``; a score a row lacks (A4's ``sentences`` of a chunk it did not use) stays
    None, and the page passes ``placeholder=EMPTY`` to the grid."""
    sections = _sections(sp)
    view = sp.view(stage)
    keys = list(dict.fromkeys(k for r in view for k in r.scores))
    main = next((k for k in keys if all(r.scores.get(k) == r.score for r in view)), None)
    score_col = f"score ({main})" if main else "score"
    extra = [k for k in keys if k != main and k not in JOURNEY_ONLY]
    weighed = any(r.rule_status is not None for r in view)
    beyond = not_reranked(sp) if stage == View.RETRIEVAL else set()
    rows = []
    for r in view:
        row: dict[str, Any] = {
            "rank": r.rank,
            "chunk id": r.chunk_id,
            SECTION: sections.get(r.chunk_id) or EMPTY,
            score_col: r.score,
        }
        for key in extra:  # every row has every column; a score a row lacks is None
            value = r.scores.get(key)
            row[key] = None if value is None else int(value) if _is_count(key) else value
        if weighed:  # LLM mode: the rules' verdict beside what stood, and who decided
            row["rule"] = r.rule_status or r.status
            row["by"] = r.decided_by
        row["status"], row["reason"] = _shown(r, beyond)
        rows.append(row)
    return rows


def _shown(row: ViewRow, beyond: set[str]) -> tuple[str, str]:
    """A view row's status and reason as the chunk table shows them."""
    if row.chunk_id in beyond:
        said = beyond_n2_reason(row.rank)
        return NOT_RERANKED, f"{said}; {row.reason}" if row.reason else said
    return row.status, row.reason or EMPTY


def table_summary(rows: list[dict[str, Any]]) -> str:
    """A chunk table's count for its title: ``200 rows, 50 kept, 150 not reranked``."""
    statuses = [r.get("status") for r in rows]
    said = f"{len(rows)} rows, {statuses.count('kept')} kept"
    beyond = statuses.count(NOT_RERANKED)
    return said + (f", {beyond} {NOT_RERANKED}" if beyond else "")


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
            count = not name.startswith("score") and _is_count(name)
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


def _number(key: str, value: float) -> str:
    if key == "rank_change":
        return f"{int(value):+d}"
    return str(int(value)) if _is_count(key) else f"{value:.4g}"


def row_detail(sp: SuperPrompt, stage: str, chunk_id: str) -> str:
    """One line on a chunk table's row, whole: chunk id, its full heading path, rank, status,
    every score by its whole name, and the reason as the table gives it, e.g. ``kb/faq.md#9 §
    Frequently asked questions > Why did A3 drop my chunk? · rank 12 · dropped · rerank 0.321,
    retrieval_rank 30 · reason: off-topic: score 0.321 < 0.5 × best 0.772 = 0.386``."""
    row = _row(sp, stage, chunk_id)
    if row is None:
        return f"{chunk_id} is not in {stage_title(stage)}'s view."
    chunk = sp.chunk_map().get(chunk_id)
    status, reason = _shown(row, not_reranked(sp) if stage == View.RETRIEVAL else set())
    head = f"{chunk_id} § {chunk.heading_label}" if chunk and chunk.heading_label else chunk_id
    scores = ", ".join(f"{k} {_number(k, v)}" for k, v in row.scores.items()) or \
        f"score {row.score:.4g}"
    parts = [head, f"rank {row.rank}", status, scores]
    if row.decided_by != "rule" or row.rule_status is not None:
        parts.append(f"decided by {row.decided_by}" + (
            f" (the rules: {row.rule_status})" if row.rule_status is not None else ""))
    return " · ".join(parts + ([f"reason: {reason}"] if reason != EMPTY else []))


def filter_rows(rows: list[dict[str, Any]], sp: SuperPrompt, query: str) -> list[dict[str, Any]]:
    """The rows whose chunk holds every word of ``query`` (case-insensitive, in any order) in
    its text, id, heading path or the row's reason; all rows for an empty query. Works on any
    table with a ``chunk id`` column (chunk tables, stage diff)."""
    words = query.casefold().split()
    if not words:
        return list(rows)
    chunks = sp.chunk_map()

    def holds(row: dict[str, Any]) -> bool:
        chunk = chunks.get(row.get("chunk id", ""))
        said = [str(row.get(k, "")) for k in ("chunk id", SECTION, "reason")]
        said += [chunk.text, chunk.heading_label] if chunk else []
        hay = " ".join(" ".join(said).split()).casefold()
        return all(word in hay for word in words)

    return [row for row in rows if holds(row)]


def journey_columns(total: int = TABLE_WIDTH) -> dict[str, dict[str, Any]]:
    """Column configs for the journey table: the stage, rank and status fixed, the score as
    text that says which score it is (``fused 0.0320``), the reason gets what they leave."""
    out: dict[str, dict[str, Any]] = {k: {"width": w} for k, w in JOURNEY_WIDTHS.items()}
    out["score"] = {"width": JOURNEY_SCORE_WIDTH, "help": JOURNEY_SCORE_HELP}
    out["reason"] = {"width": total - sum(c["width"] for c in out.values())}
    return {name: out[name] for name in ("stage", "rank", "score", "status", "reason")}


#: the journey's score column: its width, and what its scores are
JOURNEY_SCORE_WIDTH = 128
JOURNEY_SCORE_HELP = ("The score the stage ranks by, named: fused (Retrieval's reciprocal-rank "
                      "fusion of the dense and keyword ranks), rerank (the ReRanker's, which A3 "
                      "weighs), best sentence (A4's best sentence similarity)")
#: the word for each chunk stage's score in the journey
SCORE_WORDS: dict[str, str] = {
    View.RETRIEVAL: "fused", View.RERANKED: "rerank", View.A3: "rerank", View.A4: "best sentence"}


def score_words(stage: str, score: float | None) -> str:
    """A journey row's score, named: ``fused 0.0320``; ``—`` for none."""
    return EMPTY if score is None else f"{SCORE_WORDS.get(stage, 'score')} {score:.4f}"


def journey_default(sp: SuperPrompt, current: str | None) -> str | None:
    """The chunk the journey shows: ``current`` if Retrieval returned it, else the top chunk of
    the latest stage that has a view (None before Retrieval)."""
    if current in chunk_choices(sp):
        return current
    latest = [stage for stage, _ in VIEW_STAGES if sp.view(stage)]
    return sp.view(latest[-1])[0].chunk_id if latest else None


#: the journey's last row: the final selection that goes into the prompt
SELECTION = "Final selection"


def journey_rows(sp: SuperPrompt, chunk_id: str) -> list[dict[str, Any]]:
    """Where one chunk stood at every stage that has a view, and whether it was selected: its
    rank, score, status and why (cut at N1, not reranked beyond N2 with its rank, the gate's
    reason, why A4 did not use it, selected). A candidate beyond N2 reads ``not reranked`` at
    Retrieval and at the ReRanker, in the chunk tables' words."""
    out: list[dict[str, Any]] = []
    for stage, title in VIEW_STAGES:
        if stage not in sp.views_by_stage:
            out.append({"stage": title, "rank": None, "score": EMPTY, "status": "stage not run",
                        "reason": f"{title} has not run yet."})
            continue
        row = _row(sp, stage, chunk_id)
        if row is None:
            out.append({"stage": title, "rank": None, "score": EMPTY,
                        "status": _absent_status(sp, stage, chunk_id),
                        "reason": _absent_reason(sp, stage, chunk_id)})
        else:
            out.append({"stage": title, "rank": row.rank, "score": score_words(stage, row.score),
                        "status": _status(sp, stage, row),
                        "reason": _present_reason(sp, stage, row)})
    if View.A4 in sp.views_by_stage:
        out.append(_selection_row(sp, chunk_id))
    return out


def _row(sp: SuperPrompt, stage: str, chunk_id: str) -> ViewRow | None:
    return next((r for r in sp.view(stage) if r.chunk_id == chunk_id), None)


def _status(sp: SuperPrompt, stage: str, row: ViewRow) -> str:
    """A view row's status as the tables say it: ``not reranked`` for a Retrieval candidate
    beyond N2 once the ReRanker has run, else the row's own."""
    if stage == View.RETRIEVAL and row.chunk_id in not_reranked(sp):
        return NOT_RERANKED
    return row.status


def _absent_status(sp: SuperPrompt, stage: str, chunk_id: str) -> str:
    """The status of a chunk ``stage``'s view does not have: ``cut`` (at N1), ``not
    reranked`` (beyond N2), ``not reached`` (dropped before)."""
    if stage == View.RERANKED and chunk_id in not_reranked(sp):
        return NOT_RERANKED
    return "cut" if stage in (View.RETRIEVAL, View.RERANKED) else "not reached"


def _absent_reason(sp: SuperPrompt, stage: str, chunk_id: str) -> str:
    """Why ``chunk_id`` is not in ``stage``'s view: the cut or the drop where it left."""
    if stage == View.RETRIEVAL:
        return (f"cut at N1: not among the {len(sp.view(stage))} candidates Retrieval returned")
    order = [s for s, _ in VIEW_STAGES]
    before = order[order.index(stage) - 1]
    earlier = _row(sp, before, chunk_id)
    if stage == View.RERANKED and earlier is not None and earlier.status != "dropped":
        return _n2_note(sp, earlier.rank)
    if earlier is None:
        return _absent_reason(sp, before, chunk_id)
    if earlier.status == "dropped":
        title = dict(VIEW_STAGES)[before]
        return f"dropped by {title}: {earlier.reason}" if earlier.reason else f"dropped by {title}"
    return "did not reach this stage"


def _present_reason(sp: SuperPrompt, stage: str, row: ViewRow) -> str:
    """What ``stage`` did with a chunk in its view, in words."""
    n = len(sp.view(stage))
    if stage == View.RETRIEVAL:
        parts = [f"rank {row.rank} of {n}"]
        ranks = [f"{k.removesuffix('_rank')} {int(v)}" for k, v in row.scores.items()
                 if k.endswith("_rank") and v]
        if ranks:
            parts[0] += f" ({', '.join(ranks)})"
        if View.RERANKED in sp.views_by_stage:
            reranked = {r.chunk_id for r in sp.view(View.RERANKED)}
            n2 = sum(r.decided_by != "you" for r in sp.view(View.RERANKED))
            if row.chunk_id in reranked and row.rank > n2:
                parts.append("reranked though beyond N2")
            elif row.status == "kept":
                parts.append(f"in the top {n2} that are reranked (N2)" if row.chunk_id in reranked
                             else _n2_note(sp, row.rank))
        return "; ".join(parts + ([row.reason] if row.reason else []))
    if stage == View.RERANKED:
        before = row.scores.get("retrieval_rank")
        moved = f"retrieval rank {int(before)} → rerank rank {row.rank}" if before else \
            f"rerank rank {row.rank} of {n}"
        return f"{moved}; {row.reason}" if row.reason else moved
    if stage == View.A3:
        if row.status == "dropped":
            return f"dropped by the A3 Gate: {row.reason}" if row.reason else "dropped by the A3 Gate"
        return row.reason or "passed the A3 Gate"
    if row.status == "dropped":
        return f"not used by A4 Condenser: {row.reason}" if row.reason else "not used by A4 Condenser"
    used = row.scores.get("sentences")
    said = (f"used by A4 Condenser: {int(used)} sentence(s) in the condensed context" if used
            else "used by A4 Condenser")
    return f"{said}; {row.reason}" if row.reason else said


def _selection_row(sp: SuperPrompt, chunk_id: str) -> dict[str, Any]:
    """The journey's last row: the chunk's place in the final selection, or why it is not there."""
    final = sp.final_selection_ids
    if chunk_id in final:
        i = final.index(chunk_id) + 1
        return {"stage": SELECTION, "rank": i, "score": EMPTY, "status": "selected",
                "reason": f"selected: source {i} of {len(final)} in prompt_ready"}
    a4 = _row(sp, View.A4, chunk_id)
    why = (_present_reason(sp, View.A4, a4) if a4 is not None
           else _absent_reason(sp, View.A4, chunk_id))
    return {"stage": SELECTION, "rank": None, "score": EMPTY, "status": "not selected",
            "reason": why}


def history_rows(sp: SuperPrompt) -> list[dict[str, Any]]:
    """A table row per stage run: its number, stage (by its name), wall time and mode."""
    return [{"#": i, "stage": stage_label(r.stage), "wall ms": r.wall_ms, "mode": r.mode}
            for i, r in enumerate(sp.stage_runs, start=1)]


def mode_rows(sp: SuperPrompt) -> list[dict[str, str]]:
    """How each agent ran (mode and why; A4 in LLM mode with ``a4_note``), plus the
    ReRanker's backend; each stage by its name."""
    rows = [{"component": stage_label(agent), "ran as": info.mode, "why": plain_names(info.reason)}
            for agent, info in sp.extras.agent_modes.items()]
    a4 = a4_note(sp)
    for row in rows:
        if a4 and row["component"] == stage_label("A4_Condenser"):
            row["why"] = f"{row['why']}; {a4}" if row["why"] else a4
    rr = sp.extras.reranker
    if rr:
        rows.append({"component": "ReRanker backend", "ran as": rr.backend, "why": rr.reason})
    return rows


def a3_note(sp: SuperPrompt) -> str | None:
    """How A3 weighed the model's word, with its thresholds: "LLM mode, P(relevant) for the
    first 10: a candidate is dropped only when its score is weak (< 0.7 × best) and the model
    agrees (P ≤ 0.15), never among the first 3; P ≥ 0.9 rescues one the rules drop. The model
    changed 1 decision."; None when the model did not judge."""
    a3 = sp.extras.a3
    if a3 is None or a3.judge is None:
        return None
    how = ("P(relevant) from a yes/no token" if a3.judge == "probability"
           else "the list of candidates to drop")
    agrees = f"P ≤ {a3.llm_drop_max:g}" if a3.judge == "probability" else "it lists it to drop"
    rescue = (f"; P ≥ {a3.llm_rescue_min:g} rescues one the rules drop"
              if a3.judge == "probability" else "; a list cannot rescue")
    changed = a3.changed or 0
    return (f"LLM mode ({how}, {a3.sent} candidates asked): a candidate is dropped only when "
            f"its score is weak (< {a3.weak_relative:g} × best) and the model agrees ({agrees}), "
            f"never among the first {a3.protect_top_k}{rescue}. The model changed {changed} "
            f"decision{'' if changed == 1 else 's'}." + (f" ({a3.judge_note})" if a3.judge_note else ""))


def decision_note(sp: SuperPrompt, view: str) -> str | None:
    """The line above a chunk table that says how its stage weighed the model's word, with
    the thresholds (A3, A4 in LLM mode); None otherwise."""
    if view == View.A3:
        return a3_note(sp)
    return a4_note(sp) if view == View.A4 else None


def a4_note(sp: SuperPrompt) -> str | None:
    """What A4 decided in LLM mode, beside its threshold: "LLM mode: 3 statements kept by rule
    (rule_share 0.5 of 900 tokens), 2 chosen by the model"; None in deterministic mode."""
    a4 = sp.extras.a4
    if a4 is None or a4.statements_by is None or a4.rule_share is None:
        return None
    by = a4.statements_by
    note = (f"LLM mode: {by.get('rule', 0)} statements kept by rule (rule_share "
            f"{a4.rule_share:g} of {a4.budget_tokens} tokens), {by.get('llm', 0)} chosen by "
            "the model")
    return note + (f", {by['you']} from chunks you pinned" if by.get("you") else "")


#: what each view's score is, for the chart's x axis; stages with the same kind share a scale
SCORE_KINDS: dict[str, str] = {
    View.RETRIEVAL: "fused RRF score",
    View.RERANKED: "rerank score",
    View.A3: "rerank score",
    View.A4: "best sentence similarity",
}
#: how the charts tell kept, dropped and not reranked (Retrieval beyond N2) apart: colour, and
#: fill (solid, pale, half) for those who cannot tell the colours apart; the legend says which
#: is which (``STATUS_LEGEND``), and the bars stack in this order from the axis up
STATUS_COLOURS = {"kept": "#1565c0", "dropped": "#e65100", NOT_RERANKED: "#757575"}
STATUS_FILL_OPACITY = {"kept": 0.9, "dropped": 0.25, NOT_RERANKED: 0.55}
STATUS_LEGEND = {"kept": "kept (solid)", "dropped": "dropped (pale)",
                 NOT_RERANKED: "not reranked (grey)"}
#: the plot area's height in pixels (the title, axes and legend come on top of it)
CHART_PLOT_HEIGHT = 110
CHART_MAX_BINS = 30
CHART_PADDING = {"top": 10, "left": 5, "right": 5, "bottom": 5}


def score_points(sp: SuperPrompt) -> list[dict[str, Any]]:
    """Long-format (stage, score, status) points for the score-distribution chart, with the
    chunk tables' statuses: a Retrieval candidate beyond N2 is ``not reranked`` once the
    ReRanker has run."""
    beyond = not_reranked(sp)
    return [{"stage": title, "score": r.score,
             "status": NOT_RERANKED if stage == View.RETRIEVAL and r.chunk_id in beyond else r.status}
            for stage, title in VIEW_STAGES for r in sp.view(stage)]


def score_extents(sp: SuperPrompt) -> dict[str, tuple[float, float]]:
    """Each score kind's (lowest, highest) over every view that has it: the shared x scale."""
    out: dict[str, tuple[float, float]] = {}
    for stage, _ in VIEW_STAGES:
        scores = [r.score for r in sp.view(stage)]
        if not scores:
            continue
        kind = SCORE_KINDS[stage]
        lo, hi = out.get(kind, (min(scores), max(scores)))
        out[kind] = (min(lo, *scores), max(hi, *scores))
    return {k: (lo, hi) if hi > lo else (lo - 0.5, hi + 0.5) for k, (lo, hi) in out.items()}


def score_charts(sp: SuperPrompt) -> list[tuple[str, Any]]:
    """A histogram per stage view, as (title, Altair chart): chunks per score bin, kept,
    dropped and (at Retrieval, once the ReRanker has run) not reranked stacked and told apart by
    colour and fill (``score_points``' statuses), on the score kind's shared scale; the
    subtitle counts each.

    The chart sizes its width to the page but its height to the plot alone (``fit-x``):
    Streamlit's theme fits the whole chart, title and axes included, into the given height,
    which left a 130 px chart no room for its bars."""
    import altair as alt
    import pandas as pd

    extents = score_extents(sp)
    points = score_points(sp)
    out = []
    for stage, title in VIEW_STAGES:
        rows = [p for p in points if p["stage"] == title]
        if not rows:
            continue
        kind = SCORE_KINDS[stage]
        lo, hi = extents[kind]
        shown = [p["status"] if p["status"] in STATUS_COLOURS else "dropped" for p in rows]
        statuses = [k for k in STATUS_COLOURS if k != NOT_RERANKED or k in shown]
        counts = ", ".join(f"{shown.count(k)} {k}" for k in statuses)
        legend = " : ".join(f"datum.label == '{k}' ? '{STATUS_LEGEND[k]}'" for k in statuses[:-1])
        frame = pd.DataFrame({"score": [p["score"] for p in rows], "status": shown,
                              "place": [statuses.index(k) for k in shown]})
        chart = alt.Chart(frame).mark_bar(strokeWidth=1.2).encode(
            # the same bins over the shared extent; the axis follows the bins (a scale domain
            # of exactly [lo, hi] would cut the outer bins and draw them outside the plot)
            x=alt.X("score:Q", bin=alt.Bin(maxbins=CHART_MAX_BINS, extent=[lo, hi]), title=kind,
                    axis=alt.Axis(format=".3~f", labelOverlap=True)),
            y=alt.Y("count():Q", title="chunks", stack=True,
                    axis=alt.Axis(tickMinStep=1, format="d")),
            color=alt.Color("status:N", title=None,
                            scale=alt.Scale(domain=statuses,
                                            range=[STATUS_COLOURS[k] for k in statuses]),
                            legend=alt.Legend(orient="top", direction="horizontal",
                                              symbolType="square",
                                              labelExpr=f"{legend} : '{STATUS_LEGEND[statuses[-1]]}'")),
            fillOpacity=alt.FillOpacity("status:N", title=None, scale=alt.Scale(
                domain=statuses, range=[STATUS_FILL_OPACITY[k] for k in statuses])),
            stroke=alt.Stroke("status:N", title=None, scale=alt.Scale(
                domain=statuses, range=[STATUS_COLOURS[k] for k in statuses])),
            order=alt.Order("place:Q"),
            tooltip=[alt.Tooltip("status:N"), alt.Tooltip("count():Q", title="chunks")],
        ).properties(
            title=alt.TitleParams(title, subtitle=counts,
                                  anchor="start", offset=8),
            height=CHART_PLOT_HEIGHT,
            autosize=alt.AutoSizeParams(type="fit-x", contains="padding"),
            # room above the title: the font's ascent reaches past Vega's estimate of its box
            padding=CHART_PADDING,
        )
        out.append((title, chart))
    return out


def citation_line(citation: Citation, bold: bool = False) -> str:
    """An answer's source as the Sources list names it: ``[2] reranking.md § Backends``
    (``[1] manual.pdf p. 20 § Install`` in a paged document); a turn of a conversation
    ``[3] conversation chat-… § Turn 2 · 2026-11-24 14:02``."""
    source = citation.where
    if citation.chunk_id.startswith(CONVERSATION_PREFIX):
        name = citation.chunk_id.removeprefix(CONVERSATION_PREFIX).rpartition("#")[0]
        source = f"{CONVERSATION_SOURCE} {name}"
    number = f"**[{citation.n}]**" if bold else f"[{citation.n}]"
    return f"{number} {source} § {citation.section}" if citation.section else f"{number} {source}"


def chunk_detail(sp: SuperPrompt, chunk_id: str) -> tuple[str, dict[str, Any]]:
    """A chunk's text, and its other fields with the heading path as a list."""
    chunk = sp.chunk_map()[chunk_id]
    meta = chunk.model_dump(exclude={"text"})
    meta["heading_path"] = list(chunk.heading_path)
    return chunk.text, meta


def chunk_choices(sp: SuperPrompt) -> list[str]:
    """Ids of the chunks Retrieval returned, best first."""
    return [c.id for c in sp.base_context_chunks]


#: how long a chunk picker's label is, the fewest characters of the chunk's text it shows, and
#: how far past its limit the text may run to end on a whole word
CHOICE_LABEL_CHARS = 100
CHOICE_TEXT_LEAST = 30
WORD_SLACK = 12


def _words(text: str, limit: int) -> str:
    """``text`` on one line, cut at a word about ``limit`` characters long, with ``…``: after
    its last whole word within the limit, or, when that would lose a third of it, after the
    word that crosses the limit if it ends within ``WORD_SLACK`` characters."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    cut = flat.rfind(" ", 0, limit)
    if cut < limit * 2 // 3:
        end = flat.find(" ", limit)
        end = len(flat) if end < 0 else end
        if end - limit <= WORD_SLACK:
            if end == len(flat):
                return flat
            cut = end
    return flat[: cut if cut > 0 else limit - 1].rstrip(" ,;:>·") + "…"


def _last_headings(section: str, limit: int) -> str:
    """A heading path shortened to about ``limit`` characters from the front, the most
    specific heading kept: ``… > Empty knowledge base`` (cut at a word if that alone is too
    long)."""
    parts = section.split(" > ")
    while len(parts) > 1 and len(" > ".join(parts)) + 4 > limit:
        parts = parts[1:]
    shown = " > ".join(parts)
    shown = shown if shown == section else f"… > {shown}"
    return shown if len(shown) <= limit else _words(shown, limit)


def choice_label(chunk: Chunk, section: str | None = None, limit: int = CHOICE_LABEL_CHARS,
                 query: str = "") -> str:
    """A chunk picker's label, about ``limit`` characters: ``kb/reranking.md#3 · Backends >
    Cross-encoder · first words of the text…``, so that the picker's type-to-search finds a
    chunk by words of its section or text. ``section`` is ``section_label(chunk)`` unless
    given; it loses its first headings to leave the text at least ``CHOICE_TEXT_LEAST``
    characters (``… > Cross-encoder``); the text is cut at a word (``_words``). With a
    ``query`` (the picker's search box), the text shown is the passage where its first word
    is found (``…the offline backend scores by…``)."""
    section = section_label(chunk) if section is None else section
    room = limit - len(chunk.id) - 6  # the two " · "
    if section and room - len(section) < CHOICE_TEXT_LEAST:
        section = _last_headings(section, max(12, room - CHOICE_TEXT_LEAST))
    head = f"{chunk.id} · {section}" if section else chunk.id
    room = max(CHOICE_TEXT_LEAST, limit - len(head) - 3)
    return f"{head} · {_around(chunk.text, query, room) if query.strip() else _words(chunk.text, room)}"


def _around(text: str, query: str, limit: int) -> str:
    """About ``limit`` characters of ``text`` (on one line) from a little before where
    ``query``'s words are first found (the whole query if it is there, else its first word
    that is), cut at words, with "…" where it is cut."""
    flat = " ".join(text.split())
    low = flat.casefold()
    words = query.casefold().split()
    spots = [low.find(" ".join(words))] + [low.find(w) for w in words]
    at = next((i for i in spots if i >= 0), -1)
    if at <= 0:
        return _words(flat, limit)
    start = flat.rfind(" ", 0, max(0, at - 12)) + 1
    said = _words(flat[start:], limit - 1 if start else limit)
    return f"…{said}" if start else said


def matching_chunks(sp: SuperPrompt, query: str) -> list[str]:
    """The ids of the chunks Retrieval returned, best first, whose text, id or section holds
    every word of ``query`` (any order, any case); all of them for an empty query."""
    words = query.casefold().split()
    if not words:
        return chunk_choices(sp)
    sections = _sections(sp)

    def holds(chunk: Chunk) -> bool:
        hay = " ".join([chunk.id, sections.get(chunk.id, ""), chunk.heading_label,
                        " ".join(chunk.text.split())]).casefold()
        return all(word in hay for word in words)

    return [c.id for c in sp.base_context_chunks if holds(c)]


def chunk_choice_label(sp: SuperPrompt, chunk_id: str) -> str:
    """The picker label of ``chunk_id`` (``choice_label``); the id alone for a chunk Retrieval
    did not return."""
    chunk = sp.chunk_map().get(chunk_id)
    return choice_label(chunk, _sections(sp)[chunk_id]) if chunk else chunk_id


def chunk_labels(sp: SuperPrompt, query: str = "", limit: int = CHOICE_LABEL_CHARS) -> dict[str, str]:
    """The picker label of every chunk in ``chunk_choices``, by id, best first: the page's
    ``st.selectbox(..., chunk_choices(sp), format_func=labels.__getitem__)``; with a
    ``query``, each label shows where its text holds it; about ``limit`` characters."""
    sections = _sections(sp)
    return {c.id: choice_label(c, sections[c.id], limit, query) for c in sp.base_context_chunks}


#: how long a label is in a chunk picker beside its search box (two thirds of the page's
#: width at 1280 px): it shows whole there
PICKER_LABEL_CHARS = 66


def log_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The Q&A log as a table: newest first, the long fields shortened."""
    return [{
        "time": r.get("ts", ""),
        "question": _preview(r.get("question", ""), 80),
        "answer": _preview(r.get("answer", ""), 120),
        "mode": r.get("mode", "") + (" (incomplete)" if r.get("incomplete") else ""),
        "confidence": r.get("confidence", ""),
        "model": r.get("model", ""),
        "tokens": (r.get("prompt_tokens") or 0) + (r.get("completion_tokens") or 0),
        "latency ms": r.get("latency_ms"),
    } for r in records]


def waiting_line(agent: str, model: str, seconds: float) -> str:
    """What the page says while an agent waits for the model."""
    return f"{stage_label(agent)} is calling the model {model}: {seconds:.0f} s so far."


@dataclass
class RunProgress:
    """The auto-run progress bar's value and text: the stage running (and the agent waiting
    for the model, if one is), 100% with "All N stages done." at the end."""

    share: float = 0.0
    text: str = "Starting…"

    def stage(self, done: int, total: int, name: str) -> tuple[float, str]:
        """The stage about to run (``name``), or the end when ``name`` is empty."""
        self.share = done / max(total, 1)
        self.text = (f"Running {stage_label(name)} ({done + 1}/{total})…" if name
                     else f"All {total} stages done.")
        return self.share, self.text

    def waiting(self, agent: str, model: str, seconds: float) -> tuple[float, str]:
        """The running stage's line with who waits for the model, and how long."""
        return self.share, f"{self.text} {waiting_line(agent, model, seconds)}"


# --------------------------------------------------------------------------- stage diff
#: the stage diff table's fixed column widths: the ranks in A and B, the move in words, the move
#: as a number (to sort by) and the status in B; the chunk id (it names the file) and B's
#: reason share the rest of ``TABLE_WIDTH`` (the section is in the chunk tables and journey)
DIFF_WIDTHS: dict[str, int] = {"rank in A": 62, "rank in B": 62, "move": 72, "Δ rank": 44,
                               "status in B": 84}
#: the diff's column labels that fit their widths (the whole name and stage in ``help``)
DIFF_LABELS: dict[str, str] = {"rank in A": "A rank", "rank in B": "B rank", "Δ rank": "Δ",
                               "status in B": "B status"}
#: how the diff's text columns share what is left of ``TABLE_WIDTH``: the chunk id in two
#: lines, the reason in three
DIFF_TEXT: list[tuple[str, float, int]] = [("chunk id", 0.4, 120), ("reason", 0.6, 120)]
#: the diff table's columns, in order
DIFF_ORDER = ["rank in A", "rank in B", "move", "Δ rank", "chunk id", "status in B", "reason"]
#: the diff's orders: (name, what it sorts by)
DIFF_SORTS = ("rank in B", "rank in A", "biggest rise", "biggest fall")
NEW, DROPPED = "new", "dropped"


def diff_stages(sp: SuperPrompt) -> list[str]:
    """The chunk stages that have a view, in pipeline order: what the diff can compare."""
    return [stage for stage, _ in VIEW_STAGES if stage in sp.views_by_stage]


def stage_title(stage: str) -> str:
    """A chunk stage's title (``reranked`` → ``ReRanker``)."""
    return dict(VIEW_STAGES).get(stage, stage)


def diff_default(sp: SuperPrompt, a: str | None = None, b: str | None = None) -> tuple[str, str] | None:
    """The two stages the diff compares: ``a`` and ``b`` if both have run, else the first two
    consecutive chunk stages whose views differ (a chunk moved, came or went), else the two
    latest chunk stages that have run (None with fewer than two)."""
    ran = diff_stages(sp)
    if a in ran and b in ran:
        return a, b
    if len(ran) < 2:
        return None
    for first, second in zip(ran, ran[1:]):
        if stages_differ(sp, first, second):
            return first, second
    return ran[-2], ran[-1]


def stages_differ(sp: SuperPrompt, a: str, b: str) -> bool:
    """Whether chunk stage ``b``'s view differs from ``a``'s: a chunk in one and not the
    other, at another rank, or dropped in one only."""
    view_a = {r.chunk_id: (r.rank, r.status == "dropped") for r in sp.view(a)}
    view_b = {r.chunk_id: (r.rank, r.status == "dropped") for r in sp.view(b)}
    return view_a != view_b


def move_label(rank_a: int | None, rank_b: int | None, dropped: bool) -> tuple[str, int | None]:
    """The move from stage A to stage B, in words and as a number: ``rank_a - rank_b`` (``↑3``
    moved up three places, ``↓7`` down seven, ``=`` stayed), ``dropped`` when B dropped the
    chunk or does not have it, ``new`` when A does not have it. The number is None for new and
    dropped chunks."""
    if dropped or rank_b is None:
        return DROPPED, None
    if rank_a is None:
        return NEW, None
    delta = rank_a - rank_b
    return ("=" if delta == 0 else f"↑{delta}" if delta > 0 else f"↓{-delta}"), delta


def diff_rows(sp: SuperPrompt, a: str, b: str, sort: str = DIFF_SORTS[0]) -> list[dict[str, Any]]:
    """A row per chunk in stage ``a``'s or stage ``b``'s view: its rank in both, the move
    (see ``move_label``) in words and as a number, its status in B and B's reason for it (for
    a chunk B does not have, why: cut at N1, not reranked beyond N2 with its rank, or dropped
    earlier with that stage's reason).

    ``sort``: ``rank in B`` (the default: B's rows by rank, then the chunks B does not have by
    their rank in A), ``rank in A`` (A's rows by rank, then the new ones by rank in B),
    ``biggest rise`` / ``biggest fall`` (the chunks in both by their move, then new, then
    dropped). Ties break by chunk id."""
    if sort not in DIFF_SORTS:
        raise ValueError(f"Unknown diff order {sort!r}: use one of {', '.join(DIFF_SORTS)}.")
    view_a = {r.chunk_id: r for r in sp.view(a)}
    view_b = {r.chunk_id: r for r in sp.view(b)}
    rows: list[dict[str, Any]] = []
    for chunk_id in dict.fromkeys([*view_a, *view_b]):
        ra, rb = view_a.get(chunk_id), view_b.get(chunk_id)
        dropped = rb is None or rb.status == "dropped"
        move, delta = move_label(ra.rank if ra else None, rb.rank if rb else None, dropped)
        status: str
        if rb is not None:
            status, reason = _status(sp, b, rb), _present_reason(sp, b, rb)
        else:
            status, reason = _absent_status(sp, b, chunk_id), _absent_reason(sp, b, chunk_id)
        rows.append({"rank in A": ra.rank if ra else None, "rank in B": rb.rank if rb else None,
                     "move": move, "Δ rank": delta, "chunk id": chunk_id,
                     "status in B": status, "reason": reason})
    big = 10 ** 9

    def key(row: dict[str, Any]) -> tuple:
        ra, rb, delta = row["rank in A"], row["rank in B"], row["Δ rank"]
        if sort == "rank in B":
            return (rb is None, rb or 0, ra or 0, row["chunk id"])
        if sort == "rank in A":
            return (ra is None, ra or 0, rb or 0, row["chunk id"])
        group = 0 if delta is not None else 1 if row["move"] == NEW else 2
        sign = -1 if sort == "biggest rise" else 1
        return (group, sign * delta if delta is not None else 0, rb or ra or big,
                row["chunk id"])

    return sorted(rows, key=key)


def diff_summary(rows: list[dict[str, Any]], a: str, b: str) -> str:
    """One line over the diff: how many chunks moved up, down, stayed, are new and dropped."""
    moves = [r["move"] for r in rows]
    up = sum(m.startswith("↑") for m in moves)
    down = sum(m.startswith("↓") for m in moves)
    return (f"{stage_title(a)} → {stage_title(b)}: {len(rows)} chunks · {up} moved up · "
            f"{down} moved down · {moves.count('=')} same place · {moves.count(NEW)} new · "
            f"{moves.count(DROPPED)} dropped")


def diff_columns(stage_a: str, stage_b: str, total: int = TABLE_WIDTH,
                 rows: list[dict[str, Any]] | None = None) -> dict[str, dict[str, Any]]:
    """Column configs for the stage diff: short labels that fit (``DIFF_LABELS``; the stages
    in ``help``), fixed widths for ranks, move and status, the rest shared by chunk id and
    reason: the chunk id as wide as the longest of ``rows``' (between ``CHUNK_LEAST`` and
    ``CHUNK_MOST``, leaving the reason ``REASON_LEAST``), else ``DIFF_TEXT``'s share. The page
    draws it with ``grid`` (the reason wraps) and ``placeholder=EMPTY``."""
    a, b = stage_title(stage_a), stage_title(stage_b)
    out: dict[str, dict[str, Any]] = {name: {"width": w} for name, w in DIFF_WIDTHS.items()}
    for name, label in DIFF_LABELS.items():
        out[name]["label"] = label
        out[name]["width"] = max(out[name]["width"], label_width(label))
    out["rank in A"]["help"] = f"rank in A ({a})"
    out["rank in B"]["help"] = f"rank in B ({b})"
    out["move"]["help"] = ("A → B: ↑ moved up, ↓ moved down (rank in A − rank in B); new: not "
                           "in A; dropped: dropped by B or not in B")
    out["Δ rank"].update(help="rank in A − rank in B (sort by this)",
                         type_config={"type": "number", "format": "%+d"})
    out["status in B"]["help"] = f"status in B ({b})"
    left = total - sum(c["width"] for c in out.values())
    if rows:
        longest = max(text_px(str(r.get("chunk id", ""))) for r in rows)
        chunk = min(CHUNK_MOST, max(CHUNK_LEAST, math.ceil(longest) + CELL_PADDING + CELL_SLACK + 1))
        out["chunk id"] = {"width": max(CHUNK_LEAST, min(chunk, left - REASON_LEAST))}
    else:
        for name, share, least in DIFF_TEXT[:-1]:
            out[name] = {"width": max(least, int(left * share))}
    name, _, least = DIFF_TEXT[-1]  # the last takes what is left: the widths add up to total
    out[name] = {"width": max(least, total - sum(c["width"] for c in out.values()))}
    return {name: out[name] for name in DIFF_ORDER}


#: the bump chart: how many chunks it follows, its plot height, kept and dropped by shape
BUMP_TOP = 20
BUMP_PLOT_HEIGHT = 420
STATUS_SHAPES = {"kept": "circle", "dropped": "cross"}


def bump_points(sp: SuperPrompt, top: int = BUMP_TOP) -> list[dict[str, Any]]:
    """Long-format points for the rank-movement chart: for the ``top`` chunks of the latest
    chunk stage, one point per stage whose view has the chunk (stage, its place in the
    pipeline, rank, status, reason in words); the legend label carries the latest rank."""
    ran = diff_stages(sp)
    if not ran:
        return []
    latest = sorted(sp.view(ran[-1]), key=lambda r: (r.rank, r.chunk_id))[:top]
    label = {r.chunk_id: f"{r.rank:>2}. {r.chunk_id}" for r in latest}
    out = []
    for i, stage in enumerate(ran):
        for r in sp.view(stage):
            if r.chunk_id in label:
                out.append({"stage": stage_title(stage), "step": i, "chunk": label[r.chunk_id],
                            "chunk id": r.chunk_id, "rank": r.rank,
                            "status": r.status if r.status in STATUS_SHAPES else "dropped",
                            "reason": _present_reason(sp, stage, r)})
    return out


def bump_chart(sp: SuperPrompt, top: int = BUMP_TOP) -> Any | None:
    """The rank-movement (bump) chart: x the chunk stages in pipeline order, y the rank (1 at
    the top), a line per chunk for the latest stage's ``top`` chunks; a dropped point is a
    cross, a kept one a dot (shape, not colour alone); tooltips with chunk, rank and reason.
    None before Retrieval."""
    import altair as alt
    import pandas as pd

    points = bump_points(sp, top)
    if not points:
        return None
    frame = pd.DataFrame(points)
    stages = [stage_title(s) for s in diff_stages(sp)]
    chunks = sorted(frame["chunk"].unique(), key=lambda c: (int(c.split(".")[0]), c))
    deepest = int(frame["rank"].max())
    x, y = bump_axes(stages, deepest)
    colour = alt.Color("chunk:N", title=f"top {len(chunks)} at {stages[-1]}",
                       scale=alt.Scale(domain=chunks, scheme="tableau20"),
                       legend=alt.Legend(orient="right", labelLimit=280, symbolType="stroke",
                                         symbolStrokeWidth=3))
    tooltip = [alt.Tooltip("chunk id:N", title="chunk"), alt.Tooltip("stage:N"),
               alt.Tooltip("rank:Q"), alt.Tooltip("status:N"), alt.Tooltip("reason:N")]
    base = alt.Chart(frame)
    lines = base.mark_line(strokeWidth=2, opacity=0.85).encode(
        x=x, y=y, color=colour, detail="chunk:N", order=alt.Order("step:Q"), tooltip=tooltip)
    dots = base.mark_point(size=70, filled=True, opacity=1, strokeWidth=2.5).encode(
        x=x, y=y, color=alt.Color("chunk:N", scale=alt.Scale(domain=chunks, scheme="tableau20"),
                                  legend=None),
        shape=status_shape(), tooltip=tooltip)
    return alt.layer(lines, dots).properties(
        title=alt.TitleParams(f"Rank movement of the top {len(chunks)} chunks at {stages[-1]}",
                              subtitle="a line per chunk across the stages; a cross where a "
                                       "stage dropped it, the line ends where it left",
                              anchor="start", offset=8),
        height=BUMP_PLOT_HEIGHT,
        autosize=alt.AutoSizeParams(type="fit-x", contains="padding"),
        padding=CHART_PADDING,
    ).resolve_scale(color="shared")


def status_shape() -> Any:
    """The rank-movement charts' point shape: a dot where the stage kept the chunk, a cross
    where it dropped it, with its legend on top."""
    import altair as alt

    statuses = list(STATUS_SHAPES)
    return alt.Shape("status:N", title=None,
                     scale=alt.Scale(domain=statuses, range=[STATUS_SHAPES[k] for k in statuses]),
                     legend=alt.Legend(orient="top", direction="horizontal", labelExpr=(
                         "datum.label == 'kept' ? 'kept (dot)' : 'dropped (cross)'")))


def bump_axes(stages: list[str], deepest: int) -> tuple[Any, Any]:
    """The rank-movement charts' axes (this run's and the Compare tab's): x the stages in
    order, labelled on top; y the rank, 1 at the top, to ``deepest``, with whole-number ticks."""
    import altair as alt

    x = alt.X("stage:N", sort=stages, title=None, scale=alt.Scale(domain=stages, padding=0.3),
              axis=alt.Axis(labelAngle=0, orient="top", labelFontWeight="bold"))
    y = alt.Y("rank:Q", title="rank (1 = best)",
              scale=alt.Scale(domain=[0.5, deepest + 0.5], reverse=True, nice=False, zero=False),
              axis=alt.Axis(tickMinStep=1, format="d", values=_rank_ticks(deepest)))
    return x, y


def _rank_ticks(deepest: int) -> list[int]:
    """Rank axis ticks: 1, then every 5 (or 10, 25 for deep views) down to ``deepest``."""
    step = 5 if deepest <= 60 else 10 if deepest <= 150 else 25
    return [1, *range(step, deepest + 1, step)]


# --------------------------------------------------------------------------- made once per state

#: the chunk tables' derived parts, by what they are made of (``_made_of``): (a state that holds
#: those objects, rows, column configs). A stage run copies the state but shares its frozen
#: chunks and view rows (``SuperPrompt.working_copy``), so a table whose rows did not change
#: is not worked out again; the entry keeps a state alive, so the ids are not reused meanwhile
_TABLES: OrderedDict[tuple, tuple[SuperPrompt, list[dict[str, Any]], dict[str, Any]]] = OrderedDict()
#: the chunk pickers' labels, likewise, by the chunks' ids
_LABELS: OrderedDict[tuple, tuple[SuperPrompt, dict[str, str]]] = OrderedDict()
_KEPT = 16


def _made_of(sp: SuperPrompt, stage: str) -> tuple:
    """What ``view_rows(sp, stage)`` is made of, by object: the stage's view rows, the
    ReRanker's (for Retrieval's "not reranked") and the chunks (their sections)."""
    reranked = tuple(map(id, sp.view(View.RERANKED))) if stage == View.RETRIEVAL else ()
    return (stage, tuple(map(id, sp.view(stage))), reranked,
            tuple(map(id, sp.base_context_chunks)))


def _remember(memo: OrderedDict, key: tuple, make: Any) -> Any:
    if key in memo:
        memo.move_to_end(key)
    else:
        memo[key] = make()
        while len(memo) > _KEPT:
            memo.popitem(last=False)
    return memo[key]


def table_parts(sp: SuperPrompt, stage: str) -> tuple[list[dict[str, Any]], dict[str, Any],
                                                      dict[str, str]]:
    """``stage``'s chunk table for ``sp``: its rows (``view_rows``, without the person's
    pin / exclude marks, which the page adds from the current edits), their column configs
    (``table_columns``, with the two checkbox columns) and the picker labels
    (``chunk_labels``), each worked out once for the same rows: a click that runs one stage
    works out that stage's table only (the four took ~35 ms of each draw)."""
    def make_table() -> tuple[SuperPrompt, list[dict[str, Any]], dict[str, Any]]:
        rows = view_rows(sp, stage)
        return sp, rows, table_columns([{"pin": False, "exclude": False, **r} for r in rows])

    _, rows, columns = _remember(_TABLES, _made_of(sp, stage), make_table)
    _, labels = _remember(_LABELS, tuple(map(id, sp.base_context_chunks)),
                          lambda: (sp, chunk_labels(sp)))
    return rows, columns, labels
