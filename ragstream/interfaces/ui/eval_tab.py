"""The page's Eval tab: run the answer-quality benchmark (``eval --answers``: answer quality
and, from the same questions, retrieval MRR@10) with the configuration files' settings and
with the session's, and shape what the tab shows. The page only draws what these return.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ragstream.common.config import PROJECT_ROOT, AppConfig
from ragstream.interfaces.ui.grids import TABLE_WIDTH
from ragstream.measure.answer_eval import evaluate_answers
from ragstream.measure.question_sets import load_questions

#: the question sets that ship with RAGstream
BUNDLED = PROJECT_ROOT / "benchmarks" / "answers"
FILES, SESSION = "config files", "session"
#: the table's columns: (key in a result, title, what it means)
COLUMNS: list[tuple[str, str, str]] = [
    ("questions", "questions", "questions run"),
    ("first", "first", "share whose first answer sentence cites the answering section"),
    ("first3", "first 3", "share with one of the first three sentences citing it (target 0.85)"),
    ("in_sources", "in sources", "share whose sources hold the answering section at all"),
    ("mrr10_retrieval", "MRR ret.", "MRR@10 of the answering section after Retrieval"),
    ("mrr10_rerank", "MRR rerank", "MRR@10 of the answering section after the ReRanker"),
    ("median_sentences", "sentences", "median answer length in sentences"),
    ("median_ms", "median ms", "median pipeline + answer time per question")]
#: the quality measures the chart plots against latency
CHART_METRICS = {"first3": "first 3 cite", "mrr10_rerank": "MRR@10 rerank"}
#: seconds per question measured offline on the bundled KB (2 cores): the estimate's base
SECONDS_PER_QUESTION = 1.5
#: pixels the chart's scales leave around the data, so a point at 1.0 or at the slowest time
#: is drawn whole inside the plot
POINT_PAD = 14
Progress = Callable[[str, int, int], None]


def bundled_sets(folder: Path = BUNDLED) -> dict[str, str]:
    """The bundled question sets: label -> path, by name (``kb`` before its formats' ``kb-pdf``…)."""
    out = {}
    for path in sorted(folder.glob("*.json"), key=lambda p: p.stem):
        try:
            qs = load_questions(path)
        except Exception:  # a broken bundled file is not offered
            continue
        out[f"{qs.name} — {len(qs.questions)} questions ({qs.description[:60]})"] = str(path)
    return out


def default_set(bundled: dict[str, str], current: str | None) -> str | None:
    """The set the selector shows: the current one while it is offered, else the first."""
    return current if current in bundled else next(iter(bundled), None)


def settings_diff(files: AppConfig, overrides: dict[str, Any]) -> list[str]:
    """The session's settings that differ from the files', as 'key: file value → session value'."""
    return [f"{key}: {files.get(key)!r} → {value!r}" for key, value in sorted(overrides.items())
            if files.get(key) != value]


def estimate(questions: int, configs: int) -> str:
    """A rough duration of a run, from the offline time per question on this kind of machine."""
    seconds = questions * configs * SECONDS_PER_QUESTION + 15 * configs
    return f"about {seconds / 60:.0f} min" if seconds >= 90 else f"about {seconds:.0f} s"


def run(path: str, files: AppConfig, session: AppConfig, overrides: dict[str, Any],
        limit: int | None, services_for: Callable[[AppConfig], Any],
        progress: Progress | None = None) -> dict[str, Any]:
    """Run the question set (its first ``limit`` questions) offline with the files' settings,
    and with the session's when it has overrides: ``{"set", "diff", "runs": {label: result}}``."""
    configs = [(FILES, files)] + ([(SESSION, session)] if settings_diff(files, overrides) else [])
    runs = {}
    for label, cfg in configs:
        def tell(phase: str, done: int, total: int, label: str = label) -> None:
            if progress:
                progress(f"{label}: {phase}", done, total)

        result = evaluate_answers([path], cfg, modes=["offline"], progress=tell,
                                  services_for=services_for, limit=limit)
        runs[label] = result["results"][0]
    return {"set": path, "diff": settings_diff(files, overrides), "runs": runs}


def heading(outcome: dict[str, Any]) -> str:
    """The results' heading: the question set's file and what was compared."""
    what = ("session vs files: " + "; ".join(outcome["diff"]) if outcome["diff"]
            else "the configuration files' settings")
    return f"**{Path(outcome['set']).name}** · {what}"


def table_rows(outcome: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per configuration with the benchmark's figures."""
    return [{"settings": label, **{title: res[key] for key, title, _ in COLUMNS}}
            for label, res in outcome["runs"].items()]


def table_columns(total: int = TABLE_WIDTH) -> dict[str, dict[str, Any]]:
    """Fixed widths that fit the page at 1280 px: the settings' label, then the figures."""
    each = (total - 110) // len(COLUMNS)
    return {"settings": {"width": 110},
            **{t: {"width": each, "help": why} for _, t, why in COLUMNS}}


def question_rows(outcome: dict[str, Any]) -> list[dict[str, Any]]:
    """Every question of every configuration, those whose first three sentences miss the
    answering section first."""
    rows = []
    for label, res in outcome["runs"].items():
        for r in res["rows"]:
            rows.append({"settings": label, "id": r["id"], "question": r["question"],
                         "first": r["first"], "first 3": r["first3"],
                         "rank in Retrieval": r["retrieval_rank"],
                         "rank in ReRanker": r["rerank_rank"],
                         "sentences": r["sentences"], "ms": r["ms"],
                         "first sentence": r["first_sentence"]})
    return sorted(rows, key=lambda r: (r["first 3"], r["first"]))


def chart_points(outcome: dict[str, Any]) -> list[dict[str, Any]]:
    """Quality against latency: per configuration and measure, its value at its median ms."""
    return [{"settings": label, "measure": name, "value": res[key], "median ms": res["median_ms"]}
            for label, res in outcome["runs"].items() for key, name in CHART_METRICS.items()]


def quality_chart(outcome: dict[str, Any]):
    """The points of ``chart_points`` (Altair): x median ms per question, y the measure on a
    shared 0–1 scale, colour the measure, shape the settings, each point labelled."""
    import altair as alt
    import pandas as pd

    frame = pd.DataFrame(chart_points(outcome))
    frame["label"] = frame["settings"] + " " + frame["value"].map("{:.2f}".format)
    slowest = float(frame["median ms"].max()) or 1.0
    base = alt.Chart(frame).encode(
        x=alt.X("median ms:Q", title="median ms per question (pipeline + answer)",
                scale=alt.Scale(domain=[0, slowest * 1.25], nice=False)),
        y=alt.Y("value:Q", title="share / MRR",
                scale=alt.Scale(domain=[0, 1], padding=POINT_PAD)),
        color=alt.Color("measure:N", title=None, legend=alt.Legend(orient="top")),
    )
    points = base.mark_point(size=120, filled=True, opacity=0.85).encode(
        shape=alt.Shape("settings:N", title=None, legend=alt.Legend(orient="top")),
        tooltip=["settings", "measure", alt.Tooltip("value:Q", format=".3f"), "median ms"])
    # one label row per measure (above, below), so two measures at one point stay readable
    labels = [base.transform_filter(alt.datum.measure == name)
              .mark_text(align="left", dx=9, dy=dy, fontSize=12).encode(text="label:N")
              for name, dy in zip(CHART_METRICS.values(), (-8, 10))]
    return alt.layer(points, *labels).properties(
        title=alt.TitleParams("Quality against latency", anchor="start", offset=8), height=260,
        autosize=alt.AutoSizeParams(type="fit-x", contains="padding"), padding={"top": 12})
