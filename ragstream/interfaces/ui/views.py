"""Pure functions from a SuperPrompt to what the page shows: the stages' names and labels, the
run and stage buttons, what is out of date, the chunk tables' rows, a chunk's row whole, the
pickers' chunk labels, the history and modes, the run's progress line.

The rest of what the page shows is in modules of its own: ``grids`` (a table's cells fitted to
its columns), ``chunk_moves`` (a chunk's journey through the stages, two stages compared) and
``charts`` (the score histograms, the rank chart)."""


from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragstream.interfaces.ui.grids import EMPTY, SECTION, is_count, table_columns
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
#: a Retrieval candidate's status once the ReRanker has run without it (beyond N2)
NOT_RERANKED = "not reranked"


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
            row[key] = None if value is None else int(value) if is_count(key) else value
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


def _number(key: str, value: float) -> str:
    if key == "rank_change":
        return f"{int(value):+d}"
    return str(int(value)) if is_count(key) else f"{value:.4g}"


def row_detail(sp: SuperPrompt, stage: str, chunk_id: str) -> str:
    """One line on a chunk table's row, whole: chunk id, its full heading path, rank, status,
    every score by its whole name, and the reason as the table gives it, e.g. ``kb/faq.md#9 §
    Frequently asked questions > Why did A3 drop my chunk? · rank 12 · dropped · rerank 0.321,
    retrieval_rank 30 · reason: off-topic: score 0.321 < 0.5 × best 0.772 = 0.386``."""
    row = view_row(sp, stage, chunk_id)
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


def view_row(sp: SuperPrompt, stage: str, chunk_id: str) -> ViewRow | None:
    """``chunk_id``'s row in ``stage``'s view, or None when the view does not hold it."""
    return next((r for r in sp.view(stage) if r.chunk_id == chunk_id), None)


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


def diff_stages(sp: SuperPrompt) -> list[str]:
    """The chunk stages that have a view, in pipeline order: what the diff can compare."""
    return [stage for stage, _ in VIEW_STAGES if stage in sp.views_by_stage]


def stage_title(stage: str) -> str:
    """A chunk stage's title (``reranked`` → ``ReRanker``)."""
    return dict(VIEW_STAGES).get(stage, stage)


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
