"""Fit the retrieval API's relevance model (``retrieval.relevance`` in config/settings.json).

    .venv/bin/python -m benchmarks.calibrate_relevance \\
        --questions benchmarks/data/relevance_questions.json [--json out.json]

The judged questions are short questions of the kind the API answers: on-topic ones, each with
the sections that answer it, and off-topic ones. For every question the pipeline runs A0 →
ReRanker and the top ``--depth`` candidates get their relevance signals
(``ragstream.answering.relevance``). A pair is positive when the chunk is from a listed section of an
on-topic question and negative when the question is off-topic; candidates of on-topic
questions that are not listed are left out (they may well be relevant, only less so). So the
score estimates how likely a chunk is a real answer rather than the best an off-topic question
can find.

The 'fit' questions (bundled knowledge base) choose the signals and the regularisation by
leave-one-question-out log loss and fit the logistic regression (scikit-learn); the 'check'
questions (the rules fixture, never seen by the fit) report the result: per question the best
score, and whether ``min_relevance`` 0.6 separates on-topic from off-topic questions.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import log_loss

from ragstream.answering.relevance import SIGNALS, relevance_signals
from ragstream.state.render import rerank_query
from ragstream.state.super_prompt import View
from ragstream.workbench.engine import Engine
from tests.conftest import make_config

#: the signal subsets and regularisation strengths the fit chooses from
SUBSETS = (("window_cosine", "sentence_cosine", "coverage"), ("window_cosine", "coverage"),
           ("sentence_cosine", "coverage"), ("window_cosine", "coverage", "unseen"),
           ("window_cosine", "sentence_cosine", "coverage", "unseen"),
           ("sentence_cosine", "coverage", "unseen"))
STRENGTHS = (0.3, 1.0, 3.0, 10.0, 100.0)
THRESHOLD = 0.6


def collect(kb: Path, questions: list[dict], depth: int, work: Path) -> list[dict]:
    """One row per (question, candidate): question number, on-topic, positive, signals."""
    engine = Engine(make_config(work))
    report = engine.ingest(kb)
    if report.failed:
        raise SystemExit(f"ingesting {kb} failed: {report.errors}")
    rows = []
    for n, item in enumerate(questions):
        sp = engine.run(item["q"], until="ReRanker")
        head = sp.kept_ids(View.RERANKED)[:depth]
        chunks = sp.chunk_map()
        signals = relevance_signals(rerank_query(sp.body, sp.extras.body_sources),
                                    [chunks[c] for c in head], engine.services,
                                    engine.cfg.settings.retrieval.relevance)
        for cid, x in zip(head, signals):
            c = chunks[cid]
            marks = item["relevant"].get(Path(c.source).name, [])
            rows.append({"q": n, "on_topic": bool(item["relevant"]), "x": x,
                         "positive": any(m.casefold() in c.heading_label.casefold() for m in marks)})
    return rows


def training_pairs(rows: list[dict], cols: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Signals, labels and question numbers of the pairs the fit uses."""
    used = [r for r in rows if r["positive"] or not r["on_topic"]]
    return (np.asarray([r["x"][cols] for r in used]), np.asarray([int(r["positive"]) for r in used]),
            np.asarray([r["q"] for r in used]))


def choose(rows: list[dict]) -> tuple[tuple[str, ...], float, float]:
    """The signal subset and strength with the lowest leave-one-question-out log loss."""
    best: tuple[float, tuple[str, ...], float] | None = None
    for subset in SUBSETS:
        x, y, q = training_pairs(rows, [SIGNALS.index(s) for s in subset])
        for c in STRENGTHS:
            p = np.zeros(len(y))
            for held in np.unique(q):
                model = LogisticRegression(C=c).fit(x[q != held], y[q != held])
                p[q == held] = model.predict_proba(x[q == held])[:, 1]
            loss = float(log_loss(y, p))
            if best is None or loss < best[0]:
                best = (loss, subset, c)
    assert best is not None
    return best[1], best[2], best[0]


def separation(rows: list[dict], questions: list[dict], w: np.ndarray, bias: float) -> dict:
    """Per question its best score; whether the threshold separates on- from off-topic ones."""
    scores: dict[int, float] = {}
    for r in rows:
        s = float(1 / (1 + np.exp(-(r["x"] @ w + bias))))
        scores[r["q"]] = max(scores.get(r["q"], 0.0), s)
    table = [{"question": item["q"], "on_topic": bool(item["relevant"]),
              "best": round(scores.get(n, 0.0), 3)} for n, item in enumerate(questions)]
    on = [t["best"] for t in table if t["on_topic"]]
    off = [t["best"] for t in table if not t["on_topic"]]
    return {"lowest_on_topic": min(on), "highest_off_topic": max(off),
            "on_topic_at_or_above": f"{sum(b >= THRESHOLD for b in on)}/{len(on)}",
            "off_topic_below": f"{sum(b < THRESHOLD for b in off)}/{len(off)}",
            "questions": table}


def main() -> None:
    """Collect, choose, fit on the 'fit' questions, report on both sets, print the weights."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--questions", type=Path, default=Path("benchmarks/data/relevance_questions.json"))
    ap.add_argument("--depth", type=int, default=20, help="candidates per question")
    ap.add_argument("--json", type=Path, help="also write the result here")
    args = ap.parse_args()
    spec = json.loads(args.questions.read_text())
    with tempfile.TemporaryDirectory() as work:
        fit = collect(Path(spec["fit"]["kb"]), spec["fit"]["questions"], args.depth, Path(work) / "fit")
        check = collect(Path(spec["check"]["kb"]), spec["check"]["questions"], args.depth,
                        Path(work) / "check")
    subset, strength, cv_loss = choose(fit)
    cols = [SIGNALS.index(s) for s in subset]
    x, y, _ = training_pairs(fit, cols)
    model = LogisticRegression(C=strength).fit(x, y)
    w = np.zeros(len(SIGNALS))
    w[cols] = model.coef_[0]
    bias = float(model.intercept_[0])
    result = {
        "chosen": {"signals": list(subset), "C": strength,
                   "leave_one_question_out_log_loss": round(cv_loss, 4)},
        "weights": {**{k: round(float(v), 3) for k, v in zip(SIGNALS, w)}, "bias": round(bias, 3)},
        "fit": separation(fit, spec["fit"]["questions"], w, bias),
        "check": separation(check, spec["check"]["questions"], w, bias),
    }
    print(json.dumps(result, indent=2, ensure_ascii=False))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
