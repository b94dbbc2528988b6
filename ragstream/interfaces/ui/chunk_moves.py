"""Where a chunk went between the stages: its journey (rank, score, status and why at every
stage, and whether it was selected) and two stages of a pass compared (each chunk's rank in
both, its move and why), as table rows and columns."""


from __future__ import annotations

import math
from typing import Any

from ragstream.interfaces.ui.grids import (
    CELL_PADDING,
    CELL_SLACK,
    CHUNK_LEAST,
    CHUNK_MOST,
    EMPTY,
    REASON_LEAST,
    TABLE_WIDTH,
    label_width,
    text_px,
)
from ragstream.interfaces.ui.views import (
    NOT_RERANKED,
    VIEW_STAGES,
    beyond_n2_reason,
    chunk_choices,
    diff_stages,
    not_reranked,
    stage_title,
    view_row,
)
from ragstream.state.super_prompt import SuperPrompt, View, ViewRow

#: the journey table's fixed column widths; the reason takes the rest of ``TABLE_WIDTH``
JOURNEY_WIDTHS: dict[str, int] = {"stage": 118, "rank": 46, "status": 96}


def _n2_note(sp: SuperPrompt, rank: int) -> str:
    """The journey's and diff's words for a candidate beyond N2, with how many were reranked."""
    n2 = sum(r.decided_by != "you" for r in sp.view(View.RERANKED))
    return f"{beyond_n2_reason(rank)}, only the top {n2} are reranked"


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
        row = view_row(sp, stage, chunk_id)
        if row is None:
            out.append({"stage": title, "rank": None, "score": EMPTY,
                        "status": _absent_status(sp, stage, chunk_id),
                        "reason": _absent_reason(sp, stage, chunk_id)})
        else:
            out.append({"stage": title, "rank": row.rank, "score": score_words(stage, row.score),
                        "status": _status(sp, stage, row),
                        "reason": present_reason(sp, stage, row)})
    if View.A4 in sp.views_by_stage:
        out.append(_selection_row(sp, chunk_id))
    return out


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
    earlier = view_row(sp, before, chunk_id)
    if stage == View.RERANKED and earlier is not None and earlier.status != "dropped":
        return _n2_note(sp, earlier.rank)
    if earlier is None:
        return _absent_reason(sp, before, chunk_id)
    if earlier.status == "dropped":
        title = dict(VIEW_STAGES)[before]
        return f"dropped by {title}: {earlier.reason}" if earlier.reason else f"dropped by {title}"
    return "did not reach this stage"


def present_reason(sp: SuperPrompt, stage: str, row: ViewRow) -> str:
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
    a4 = view_row(sp, View.A4, chunk_id)
    why = (present_reason(sp, View.A4, a4) if a4 is not None
           else _absent_reason(sp, View.A4, chunk_id))
    return {"stage": SELECTION, "rank": None, "score": EMPTY, "status": "not selected",
            "reason": why}


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
            status, reason = _status(sp, b, rb), present_reason(sp, b, rb)
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
