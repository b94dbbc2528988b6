"""Pure functions from a SuperPrompt to what the page shows: table rows, journeys, buttons."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ragstream import controller
from ragstream.super_prompt import SuperPrompt, View

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


def _preview(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def view_rows(sp: SuperPrompt, stage: str, snippet_chars: int = 240) -> list[dict[str, Any]]:
    """A table row per chunk of ``stage``'s view: rank, source, section, scores, status, reason, preview."""
    chunks = sp.chunk_map()
    rows = []
    for r in sp.view(stage):
        c = chunks.get(r.chunk_id)
        row: dict[str, Any] = {
            "rank": r.rank,
            "chunk id": r.chunk_id,
            "source": c.source if c else "",
            "section": c.heading_label if c else "",
            "score": r.score,
        }
        for key, value in r.scores.items():
            counts = key.endswith(("_rank", "rank_change", "sentences", "citation"))
            row[key] = int(value) if counts else value
        row["status"] = r.status
        row["reason"] = r.reason
        row["preview"] = _preview(c.text, snippet_chars) if c else ""
        rows.append(row)
    return rows


def journey_rows(sp: SuperPrompt, chunk_id: str) -> list[dict[str, Any]]:
    """Where one chunk stood at every stage that has a view."""
    out: list[dict[str, Any]] = []
    for stage, title in VIEW_STAGES:
        if stage not in sp.views_by_stage:
            out.append({"stage": title, "rank": None, "score": None, "status": "stage not run",
                        "reason": ""})
            continue
        row = next((r for r in sp.view(stage) if r.chunk_id == chunk_id), None)
        if row is None:
            out.append({"stage": title, "rank": None, "score": None, "status": "not present",
                        "reason": _absent_reason(sp, stage)})
        else:
            out.append({"stage": title, "rank": row.rank, "score": row.score,
                        "status": row.status, "reason": row.reason})
    return out


def _absent_reason(sp: SuperPrompt, stage: str) -> str:
    if stage == View.RERANKED:
        return "below the N2 cut: only the top retrieval candidates are reranked"
    if stage in (View.A3, View.A4):
        return "did not reach this stage"
    return ""


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


def score_points(sp: SuperPrompt) -> list[dict[str, Any]]:
    """Long-format (stage, score, status) points for the score-distribution chart."""
    return [{"stage": title, "score": r.score, "status": r.status}
            for stage, title in VIEW_STAGES for r in sp.view(stage)]


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
