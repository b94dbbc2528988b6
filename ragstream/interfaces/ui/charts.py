"""The page's charts (Altair): the chunks' scores per stage as histograms, and the rank-movement
(bump) chart of the top chunks through the stages."""


from __future__ import annotations

from typing import Any

from ragstream.interfaces.ui.chunk_moves import present_reason
from ragstream.interfaces.ui.views import NOT_RERANKED, VIEW_STAGES, diff_stages, not_reranked, stage_title
from ragstream.state.super_prompt import SuperPrompt, View

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
                            "reason": present_reason(sp, stage, r)})
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
