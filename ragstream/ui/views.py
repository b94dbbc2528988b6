"""Pure functions from a SuperPrompt to what the page shows: table rows, journeys, buttons."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ragstream import controller
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
    """One stage's button: its label, whether it can be clicked, its help text and whether it has run."""

    name: str
    label: str
    enabled: bool
    help: str
    done: bool


def button_states(sp: SuperPrompt) -> list[ButtonState]:
    """A button per stage: enabled unless an earlier stage must run first, with a help text."""
    pos = controller.position(sp)
    out = []
    for i, st in enumerate(controller.STAGES):
        required = controller.blocked_by(sp, st.name)
        done = i <= pos
        if required:
            help_text = f"Run {required} first."
        elif done:
            help_text = f"Run {st.name} again (discards the results of the later stages)."
        else:
            help_text = f"Run {st.name} now."
        out.append(ButtonState(st.name, st.label, required is None, help_text, done))
    return out


#: stage buttons per row: eight in one row cut their labels at 1280 px ("A4 Co…"), four fit
STAGE_BUTTONS_PER_ROW = 4


def button_rows(sp: SuperPrompt, per_row: int = STAGE_BUTTONS_PER_ROW) -> list[list[ButtonState]]:
    """The stage buttons in pipeline order, ``per_row`` to a row."""
    buttons = button_states(sp)
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
COLUMN_WIDTHS: dict[str, int] = {"rank": 40, "status": 62}
SCORE_COLUMN_WIDTH = 56
#: how the text columns share the rest: (column, share, fewest pixels)
TEXT_COLUMNS: list[tuple[str, float, int]] = [("chunk id", 0.3, 120), (SOURCE_SECTION, 0.4, 140),
                                               ("reason", 0.3, 60)]
#: the journey table's fixed column widths; the reason takes the rest of ``TABLE_WIDTH``
JOURNEY_WIDTHS: dict[str, int] = {"stage": 110, "rank": 44, "score": 60, "status": 90}


def _is_count(key: str) -> bool:
    return key.endswith(("_rank", "rank_change", "sentences", "citation"))


def view_rows(sp: SuperPrompt, stage: str) -> list[dict[str, Any]]:
    """A table row per chunk of ``stage``'s view: rank, chunk id, source § section, the stage's
    score and its other scores, status and reason. A named score that is the row's score on
    every row (``fused`` at Retrieval, ``rerank`` at the ReRanker) is shown once, as the score
    column's name: ``score (fused)``."""
    chunks = sp.chunk_map()
    view = sp.view(stage)
    keys = list(dict.fromkeys(k for r in view for k in r.scores))
    main = next((k for k in keys if all(r.scores.get(k) == r.score for r in view)), None)
    score_col = f"score ({main})" if main else "score"
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
            if key != main:
                row[key] = int(value) if _is_count(key) else value
        row["status"] = r.status
        row["reason"] = r.reason
        rows.append(row)
    return rows


def table_columns(rows: list[dict[str, Any]], total: int = TABLE_WIDTH) -> dict[str, dict[str, Any]]:
    """Streamlit column configs (plain dicts) for a chunk table whose widths add up to
    ``total``: fixed widths for rank, scores and status, the rest shared by chunk id, source §
    section and reason (a reason column with no text gets its fewest pixels); scores with three
    decimals, counts as whole numbers."""
    names = list(rows[0]) if rows else []
    text = {name: (share, least) for name, share, least in TEXT_COLUMNS if name in names}
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        if name in COLUMN_WIDTHS:
            out[name] = {"width": COLUMN_WIDTHS[name]}
        elif name not in text:  # a score: a short label, its whole name on hover
            fmt = "%d" if not name.startswith("score") and _is_count(name) else "%.3f"
            label = "score" if name.startswith("score") else name.replace("_", " ")
            out[name] = {"width": SCORE_COLUMN_WIDTH, "label": label, "help": name,
                         "type_config": {"type": "number", "format": fmt}}
    if "reason" in text and not any(r.get("reason") for r in rows):
        out["reason"] = {"width": text.pop("reason")[1]}
    left = total - sum(c["width"] for c in out.values())
    shares = sum(share for share, _ in text.values()) or 1.0
    for name, (share, least) in text.items():
        out[name] = {"width": max(least, int(left * share / shares))}
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
    if stage == View.RERANKED and earlier is not None:
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
            n2 = len(sp.view(View.RERANKED))
            parts.append(f"in the top {n2} that are reranked (N2)" if row.rank <= n2
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
    """How each agent ran (mode and why), plus the ReRanker's backend."""
    rows = [{"component": agent, "ran as": info.mode, "why": info.reason}
            for agent, info in sp.extras.agent_modes.items()]
    rr = sp.extras.reranker
    if rr:
        rows.append({"component": "ReRanker backend", "ran as": rr.backend, "why": rr.reason})
    return rows


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
