"""Pure functions from a SuperPrompt to what the page shows: table rows, journeys, buttons."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ragstream import controller
from ragstream.staleness import Stale
from ragstream.super_prompt import SuperPrompt, View, ViewRow

#: stages that write a chunk view: (views_by_stage key, title)
VIEW_STAGES: list[tuple[str, str]] = [
    (View.RETRIEVAL, "Retrieval"),
    (View.RERANKED, "ReRanker"),
    (View.A3, "A3 NLI gate"),
    (View.A4, "A4 condenser"),
]


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
            help_text, enabled = f"Run {required} first.", False
        elif stale is not None and i > stale.index:
            help_text, enabled = f"Run {stale.stage} first: its result is out of date.", False
        elif outdated and stale is not None:
            help_text, enabled = (f"Out of date ({'; '.join(stale.reasons)}): run {st.name} "
                                  "again."), True
        elif done:
            help_text, enabled = f"Run {st.name} again (discards the results of the later stages).", True
        else:
            help_text, enabled = f"Run {st.name} now.", True
        out.append(ButtonState(st.name, st.label, enabled, help_text, done, outdated))
    return out


def resume_label(first: str, last: str) -> str:
    """The re-run button: ``↻ Re-run A3 Gate → Build`` (the stages' button labels; the
    tooltip names them whole)."""
    return f"↻ Re-run {controller.spec(first).label} → {controller.spec(last).label}"


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


#: the table column that joins a chunk's file and heading path
SOURCE_SECTION = "source § section"
#: the chunk tables' total column width in pixels: the grid's width at 1280x900 with the
#: sidebar open, so no table scrolls sideways there (Streamlit spreads the columns over a
#: wider grid); long sections and reasons are cut in their cells, the chunk's whole text is
#: under "Open a chunk" and the whole reason in the chunk journey
TABLE_WIDTH = 780
#: fixed column widths in pixels; the text columns share what is left
COLUMN_WIDTHS: dict[str, int] = {"rank": 40, "status": 62, "rule": 62, "by": 40}
#: the chunk tables' checkbox columns (the person's decisions): label and help
CHECK_COLUMNS: dict[str, tuple[str, str]] = {
    "pin": ("pin", "Pin: keep this chunk through A3 and A4, in the final selection (pinned ones "
                   "first). Untick to undo."),
    "exclude": ("excl", "Exclude: drop this chunk from Retrieval on. Untick to undo."),
}
#: wide enough for the label and the editable column's pencil mark
CHECK_COLUMN_WIDTH = 58
SCORE_COLUMN_WIDTH = 54
#: score columns whose name does not fit SCORE_COLUMN_WIDTH (the whole name shows on hover)
SHORT_LABELS: dict[str, str] = {"p_relevant": "P(rel)"}
#: how the text columns share the rest: (column, share, fewest pixels)
TEXT_COLUMNS: list[tuple[str, float, int]] = [("chunk id", 0.3, 110), (SOURCE_SECTION, 0.4, 120),
                                               ("reason", 0.3, 60)]
#: the journey table's fixed column widths; the reason takes the rest of ``TABLE_WIDTH``
JOURNEY_WIDTHS: dict[str, int] = {"stage": 110, "rank": 44, "score": 60, "status": 90}


def _is_count(key: str) -> bool:
    return key.endswith(("_rank", "rank_change", "sentences", "citation"))


#: scores the chunk tables leave to the journey
JOURNEY_ONLY = frozenset({"dense_rank", "keyword_rank"})


def view_rows(sp: SuperPrompt, stage: str) -> list[dict[str, Any]]:
    """A table row per chunk of ``stage``'s view: rank, chunk id, source § section, the stage's
    score and its other scores, status and reason. A named score that is the row's score on
    every row (``fused`` at Retrieval, ``rerank`` at the ReRanker) is shown once, as the score
    column's name: ``score (fused)``. Retrieval's rank in each list (``dense_rank``,
    ``keyword_rank``) is left to the chunk journey, which says it in words ("rank 7 of 200
    (dense 3, keyword 12)"), so the table keeps room for the person's pin / exclude boxes."""
    chunks = sp.chunk_map()
    view = sp.view(stage)
    keys = list(dict.fromkeys(k for r in view for k in r.scores))
    main = next((k for k in keys if all(r.scores.get(k) == r.score for r in view)), None)
    score_col = f"score ({main})" if main else "score"
    weighed = any(r.rule_status is not None for r in view)
    rows = []
    for r in view:
        c = chunks.get(r.chunk_id)
        row: dict[str, Any] = {
            "rank": r.rank,
            "chunk id": r.chunk_id,
            SOURCE_SECTION: c.citation_label if c else "",
            score_col: r.score,
        }
        for key, value in r.scores.items():
            if key != main and key not in JOURNEY_ONLY:
                row[key] = int(value) if _is_count(key) else value
        if weighed:  # LLM mode: the rules' verdict beside what stood, and who decided
            row["rule"] = r.rule_status or r.status
            row["by"] = r.decided_by
        row["status"] = r.status
        row["reason"] = r.reason
        rows.append(row)
    return rows


#: the grid's row height in pixels (header and rows), and the tallest a chunk table grows
ROW_HEIGHT = 35
TABLE_MAX_HEIGHT = 320


def table_height(rows: int) -> int:
    """A chunk table's height: its rows without blank space under them, at most
    ``TABLE_MAX_HEIGHT`` (it scrolls beyond)."""
    return min(TABLE_MAX_HEIGHT, ROW_HEIGHT * (rows + 1) + 3)


def table_columns(rows: list[dict[str, Any]], total: int = TABLE_WIDTH) -> dict[str, dict[str, Any]]:
    """Streamlit column configs (plain dicts) for a chunk table whose widths add up to
    ``total``: fixed widths for the pin / exclude checkboxes, rank, scores and status, the rest
    shared by chunk id, source §
    section and reason (a reason column with no text gets its fewest pixels); scores with three
    decimals, counts as whole numbers."""
    names = list(rows[0]) if rows else []
    text = {name: (share, least) for name, share, least in TEXT_COLUMNS if name in names}
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        if name in CHECK_COLUMNS:
            label, help_text = CHECK_COLUMNS[name]
            out[name] = {"width": CHECK_COLUMN_WIDTH, "label": label, "help": help_text,
                         "type_config": {"type": "checkbox"}}
        elif name in COLUMN_WIDTHS:
            out[name] = {"width": COLUMN_WIDTHS[name]}
        elif name not in text:  # a score: a short label, its whole name on hover
            fmt = "%d" if not name.startswith("score") and _is_count(name) else "%.3f"
            label = "score" if name.startswith("score") else \
                SHORT_LABELS.get(name, name.replace("_", " "))
            out[name] = {"width": SCORE_COLUMN_WIDTH, "label": label, "help": name,
                         "type_config": {"type": "number", "format": fmt}}
    if "reason" in text and not any(r.get("reason") for r in rows):
        out["reason"] = {"width": text.pop("reason")[1]}
    # each text column gets its fewest pixels, then its share of what is left over
    spare = max(0, total - sum(c["width"] for c in out.values()) - sum(least for _, least in text.values()))
    shares = sum(share for share, _ in text.values()) or 1.0
    for name, (share, least) in text.items():
        out[name] = {"width": least + int(spare * share / shares)}
    return {name: out[name] for name in names}


def journey_columns(total: int = TABLE_WIDTH) -> dict[str, dict[str, Any]]:
    """Column configs for the journey table: the reason gets what the other columns leave."""
    out: dict[str, dict[str, Any]] = {k: {"width": w} for k, w in JOURNEY_WIDTHS.items()}
    out["score"]["type_config"] = {"type": "number", "format": "%.4f"}
    out["reason"] = {"width": total - sum(JOURNEY_WIDTHS.values())}
    return out


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
    rank, score, status and why (cut at N1 or N2 with its rank, the gate's reason, why A4 did
    not use it, selected)."""
    out: list[dict[str, Any]] = []
    for stage, title in VIEW_STAGES:
        if stage not in sp.views_by_stage:
            out.append({"stage": title, "rank": None, "score": None, "status": "stage not run",
                        "reason": f"{title} has not run yet."})
            continue
        row = _row(sp, stage, chunk_id)
        if row is None:
            status = "cut" if stage in (View.RETRIEVAL, View.RERANKED) else "not reached"
            out.append({"stage": title, "rank": None, "score": None, "status": status,
                        "reason": _absent_reason(sp, stage, chunk_id)})
        else:
            out.append({"stage": title, "rank": row.rank, "score": row.score,
                        "status": row.status, "reason": _present_reason(sp, stage, row)})
    if View.A4 in sp.views_by_stage:
        out.append(_selection_row(sp, chunk_id))
    return out


def _row(sp: SuperPrompt, stage: str, chunk_id: str) -> ViewRow | None:
    return next((r for r in sp.view(stage) if r.chunk_id == chunk_id), None)


def _absent_reason(sp: SuperPrompt, stage: str, chunk_id: str) -> str:
    """Why ``chunk_id`` is not in ``stage``'s view: the cut or the drop where it left."""
    if stage == View.RETRIEVAL:
        return (f"cut at N1: not among the {len(sp.view(stage))} candidates Retrieval returned")
    order = [s for s, _ in VIEW_STAGES]
    before = order[order.index(stage) - 1]
    earlier = _row(sp, before, chunk_id)
    if stage == View.RERANKED and earlier is not None and earlier.status != "dropped":
        return (f"cut at N2: retrieval rank {earlier.rank}, and only the top "
                f"{len(sp.view(stage))} candidates are reranked")
    if earlier is None:
        return _absent_reason(sp, before, chunk_id)
    if earlier.status == "dropped":
        title = dict(VIEW_STAGES)[before]
        return f"dropped by {title.split()[0]}: {earlier.reason}" if earlier.reason \
            else f"dropped by {title}"
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
                             else f"cut at N2: only the top {n2} are reranked")
        return "; ".join(parts + ([row.reason] if row.reason else []))
    if stage == View.RERANKED:
        before = row.scores.get("retrieval_rank")
        moved = f"retrieval rank {int(before)} → rerank rank {row.rank}" if before else \
            f"rerank rank {row.rank} of {n}"
        return f"{moved}; {row.reason}" if row.reason else moved
    if stage == View.A3:
        if row.status == "dropped":
            return f"dropped by the A3 gate: {row.reason}" if row.reason else "dropped by the A3 gate"
        return row.reason or "passed the A3 gate"
    if row.status == "dropped":
        return f"not used by A4: {row.reason}" if row.reason else "not used by A4"
    used = row.scores.get("sentences")
    said = f"used by A4: {int(used)} sentence(s) in the condensed context" if used else "used by A4"
    return f"{said}; {row.reason}" if row.reason else said


def _selection_row(sp: SuperPrompt, chunk_id: str) -> dict[str, Any]:
    """The journey's last row: the chunk's place in the final selection, or why it is not there."""
    final = sp.final_selection_ids
    if chunk_id in final:
        i = final.index(chunk_id) + 1
        return {"stage": SELECTION, "rank": i, "score": None, "status": "selected",
                "reason": f"selected: source {i} of {len(final)} in prompt_ready"}
    a4 = _row(sp, View.A4, chunk_id)
    why = (_present_reason(sp, View.A4, a4) if a4 is not None
           else _absent_reason(sp, View.A4, chunk_id))
    return {"stage": SELECTION, "rank": None, "score": None, "status": "not selected",
            "reason": why}


def history_rows(sp: SuperPrompt) -> list[dict[str, Any]]:
    """A table row per stage run: its number, stage, wall time and mode."""
    return [{"#": i, "stage": r.stage, "wall ms": r.wall_ms, "mode": r.mode}
            for i, r in enumerate(sp.stage_runs, start=1)]


def mode_rows(sp: SuperPrompt) -> list[dict[str, str]]:
    """How each agent ran (mode and why; A4 in LLM mode with ``a4_note``), plus the
    ReRanker's backend."""
    rows = [{"component": agent, "ran as": info.mode, "why": info.reason}
            for agent, info in sp.extras.agent_modes.items()]
    a4 = a4_note(sp)
    for row in rows:
        if a4 and row["component"] == "A4_Condenser":
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
#: how the charts tell kept from dropped: colour, and fill (solid vs. pale) for those who
#: cannot tell the colours apart; the legend says which is which
STATUS_COLOURS = {"kept": "#1565c0", "dropped": "#e65100"}
STATUS_FILL_OPACITY = {"kept": 0.9, "dropped": 0.25}
#: the plot area's height in pixels (the title, axes and legend come on top of it)
CHART_PLOT_HEIGHT = 110
CHART_MAX_BINS = 30
CHART_PADDING = {"top": 10, "left": 5, "right": 5, "bottom": 5}


def score_points(sp: SuperPrompt) -> list[dict[str, Any]]:
    """Long-format (stage, score, status) points for the score-distribution chart."""
    return [{"stage": title, "score": r.score, "status": r.status}
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
    """A histogram per stage view, as (title, Altair chart): chunks per score bin, kept and
    dropped stacked and told apart by colour and fill, on the score kind's shared scale.

    The chart sizes its width to the page but its height to the plot alone (``fit-x``):
    Streamlit's theme fits the whole chart, title and axes included, into the given height,
    which left a 130 px chart no room for its bars."""
    import altair as alt
    import pandas as pd

    extents = score_extents(sp)
    statuses = list(STATUS_COLOURS)
    out = []
    for stage, title in VIEW_STAGES:
        rows = sp.view(stage)
        if not rows:
            continue
        kind = SCORE_KINDS[stage]
        lo, hi = extents[kind]
        kept = sum(r.status == "kept" for r in rows)
        frame = pd.DataFrame({"score": [r.score for r in rows],
                              "status": [r.status if r.status in statuses else "dropped"
                                         for r in rows]})
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
                                              symbolType="square", labelExpr=(
                                                  "datum.label == 'kept' ? 'kept (solid)'"
                                                  " : 'dropped (pale)'"))),
            fillOpacity=alt.FillOpacity("status:N", title=None, scale=alt.Scale(
                domain=statuses, range=[STATUS_FILL_OPACITY[k] for k in statuses])),
            stroke=alt.Stroke("status:N", title=None, scale=alt.Scale(
                domain=statuses, range=[STATUS_COLOURS[k] for k in statuses])),
            order=alt.Order("status:N", sort="descending"),
            tooltip=[alt.Tooltip("status:N"), alt.Tooltip("count():Q", title="chunks")],
        ).properties(
            title=alt.TitleParams(title, subtitle=f"{kept} kept, {len(rows) - kept} dropped",
                                  anchor="start", offset=8),
            height=CHART_PLOT_HEIGHT,
            autosize=alt.AutoSizeParams(type="fit-x", contains="padding"),
            # room above the title: the font's ascent reaches past Vega's estimate of its box
            padding=CHART_PADDING,
        )
        out.append((title, chart))
    return out


def chunk_detail(sp: SuperPrompt, chunk_id: str) -> tuple[str, dict[str, Any]]:
    """A chunk's text, and its other fields with the heading path as a list."""
    chunk = sp.chunk_map()[chunk_id]
    meta = chunk.model_dump(exclude={"text"})
    meta["heading_path"] = list(chunk.heading_path)
    return chunk.text, meta


def chunk_choices(sp: SuperPrompt) -> list[str]:
    """Ids of the chunks Retrieval returned, best first."""
    return [c.id for c in sp.base_context_chunks]


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
    return f"{agent} is calling the model {model}: {seconds:.0f} s so far."


@dataclass
class RunProgress:
    """The auto-run progress bar's value and text: the stage running (and the agent waiting
    for the model, if one is), 100% with "All N stages done." at the end."""

    share: float = 0.0
    text: str = "Starting…"

    def stage(self, done: int, total: int, name: str) -> tuple[float, str]:
        """The stage about to run (``name``), or the end when ``name`` is empty."""
        self.share = done / max(total, 1)
        self.text = f"Running {name} ({done + 1}/{total})…" if name else f"All {total} stages done."
        return self.share, self.text

    def waiting(self, agent: str, model: str, seconds: float) -> tuple[float, str]:
        """The running stage's line with who waits for the model, and how long."""
        return self.share, f"{self.text} {waiting_line(agent, model, seconds)}"


# --------------------------------------------------------------------------- stage diff
#: the stage diff table's fixed column widths: the ranks in A and B, the move in words, the move
#: as a number (to sort by) and the status in B; the chunk id (it names the file) and B's
#: reason share the rest of ``TABLE_WIDTH`` (the section is in the chunk tables and journey)
DIFF_WIDTHS: dict[str, int] = {"rank in A": 76, "rank in B": 76, "move": 64, "Δ rank": 44,
                               "status in B": 80}
#: how the diff's text columns share what is left of ``TABLE_WIDTH``
DIFF_TEXT: list[tuple[str, float, int]] = [("chunk id", 0.52, 120), ("reason", 0.48, 120)]
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
    """The two stages the diff compares: ``a`` and ``b`` if both have run, else ReRanker vs
    A4 when both have run, else the two latest chunk stages that have run (None with fewer
    than two)."""
    ran = diff_stages(sp)
    if a in ran and b in ran:
        return a, b
    if len(ran) < 2:
        return None
    if View.RERANKED in ran and View.A4 in ran:
        return View.RERANKED, View.A4
    return ran[-2], ran[-1]


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
    a chunk B does not have, why: cut at N1 or N2 with its rank, or dropped earlier with that
    stage's reason).

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
            status, reason = rb.status, _present_reason(sp, b, rb)
        else:
            status = "cut" if b in (View.RETRIEVAL, View.RERANKED) else "not reached"
            reason = _absent_reason(sp, b, chunk_id)
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


def diff_columns(stage_a: str, stage_b: str, total: int = TABLE_WIDTH) -> dict[str, dict[str, Any]]:
    """Column configs for the stage diff: the ranks labelled with their stages, fixed widths
    for ranks, move and status, the rest shared by chunk id and reason."""
    a, b = stage_title(stage_a), stage_title(stage_b)
    out: dict[str, dict[str, Any]] = {name: {"width": w} for name, w in DIFF_WIDTHS.items()}
    out["rank in A"].update(label=f"A: {a.split()[0]}", help=f"rank in A ({a})")
    out["rank in B"].update(label=f"B: {b.split()[0]}", help=f"rank in B ({b})")
    out["move"]["help"] = ("A → B: ↑ moved up, ↓ moved down (rank in A − rank in B); new: not "
                           "in A; dropped: dropped by B or not in B")
    out["Δ rank"].update(label="Δ", help="rank in A − rank in B (sort by this)",
                         type_config={"type": "number", "format": "%+d"})
    left = total - sum(c["width"] for c in out.values())
    for name, share, least in DIFF_TEXT:
        out[name] = {"width": max(least, int(left * share))}
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
    statuses = list(STATUS_SHAPES)
    x = alt.X("stage:N", sort=stages, title=None, scale=alt.Scale(domain=stages, padding=0.3),
              axis=alt.Axis(labelAngle=0, orient="top", labelFontWeight="bold"))
    y = alt.Y("rank:Q", title="rank (1 = best)",
              scale=alt.Scale(domain=[0.5, deepest + 0.5], reverse=True, nice=False, zero=False),
              axis=alt.Axis(tickMinStep=1, format="d", values=_rank_ticks(deepest)))
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
        shape=alt.Shape("status:N", title=None,
                        scale=alt.Scale(domain=statuses,
                                        range=[STATUS_SHAPES[k] for k in statuses]),
                        legend=alt.Legend(orient="top", direction="horizontal", labelExpr=(
                            "datum.label == 'kept' ? 'kept (dot)' : 'dropped (cross)'"))),
        tooltip=tooltip)
    return alt.layer(lines, dots).properties(
        title=alt.TitleParams(f"Rank movement of the top {len(chunks)} chunks at {stages[-1]}",
                              subtitle="a line per chunk across the stages; a cross where a "
                                       "stage dropped it, the line ends where it left",
                              anchor="start", offset=8),
        height=BUMP_PLOT_HEIGHT,
        autosize=alt.AutoSizeParams(type="fit-x", contains="padding"),
        padding=CHART_PADDING,
    ).resolve_scale(color="shared")


def _rank_ticks(deepest: int) -> list[int]:
    """Rank axis ticks: 1, then every 5 (or 10, 25 for deep views) down to ``deepest``."""
    step = 5 if deepest <= 60 else 10 if deepest <= 150 else 25
    return [1, *range(step, deepest + 1, step)]
