"""Fit the answer's confidence (``answer.answerability`` in config/settings.json).

    .venv/bin/python -m benchmarks.calibrate_confidence [--json benchmarks/data/confidence_fit.json]

Labelled data: the project's two families of question sets, ``kb`` (benchmarks/answers/kb.json
over data/kb, and kb-pdf.json: the same questions over those documents printed to PDF) and
``npm-docs`` (over benchmarks/docsets/npm-docs); ``--sets`` adds others (e.g. the Node.js sets
of ``benchmarks/pdf_print/answers/``). Each family's questions asked of its own documents (in
any of their forms) are *answerable*; asked of another family's documents they are
*unanswerable* (none of the bundled knowledge base's questions is about npm, and the reverse).
For every question the pipeline runs offline (``Engine.run``), and the answer step's evidence
is weighed as ``ragstream.answering.answer`` weighs it (``answerability.weigh`` over the extractive
answer's statements); the extractive answer is graded as ``eval --answers`` grades it (its
first sentence cites a section that answers: ``leads``).

Two logistic regressions (scikit-learn) are fitted on the questions whose verdict is not
already forced (a missing name, or ``answer.min_dense_score``, makes them Low whatever the
model says): ``answerable`` (own documents vs the other set's) and ``leads``. The feature
subset and regularisation are chosen by leave-one-family-out log loss: fit on one family
(its answerable and unanswerable questions), score the other. The thresholds are then the
lowest that meet the targets on each set's documents: ``min_answerable`` so that at least
``--target-low`` (0.97: the target is 0.95, the rest a margin for unseen documents) of the
unanswerable questions are Low, ``high_min_leads`` so that
at least ``--target-precision`` (0.90) of the High answers lead with the answering section and
no unanswerable question is High. Reported: each family fitted alone and checked on the other
(models and thresholds), and the final fit on both, on both.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import log_loss

from ragstream.answering.answer import (
    answer,
    compose,
    composed_pieces,
    no_results_reason,
    question_terms,
    retrieval_signals,
)
from ragstream.answering.answerability import FEATURES, weigh
from ragstream.common.config import AppConfig, load_config
from ragstream.measure.answer_eval import grade, question_texts
from ragstream.measure.question_sets import QuestionSet, answers_config, load_questions
from ragstream.state.render import build_query
from ragstream.state.super_prompt import ConversationTurn
from ragstream.workbench.engine import Engine

SETS = ("benchmarks/answers/kb.json", "benchmarks/answers/npm-docs.json", "benchmarks/answers/kb-pdf.json")
SUBSETS = (("lead_match", "rerank", "covered"), ("lead_match", "best_match", "rerank", "covered"),
           ("lead_match", "rerank", "lead_rerank", "covered", "unseen"),
           ("lead_match", "best_match", "rerank", "lead_rerank", "covered", "unseen"),
           ("lead_match", "rerank", "lead_rerank", "dense", "covered", "unseen"),
           ("lead_match", "rerank", "rerank_margin", "covered"),
           ("lead_match", "best_match", "rerank", "rerank_margin", "covered", "unseen"),
           ("lead_match", "rerank", "rerank_margin", "covered", "lead_heading"),
           FEATURES)
STRENGTHS = (0.1, 0.3, 1.0, 3.0, 10.0)
FOLDS = 5
GRID = [round(t, 2) for t in np.arange(0.02, 0.99, 0.01)]


@dataclass(frozen=True)
class _Kb:
    """One set's documents as the rows are collected on them."""

    docs: QuestionSet
    cfg: AppConfig
    services: object
    terms: Callable[[str], set[str]]
    family: str


def _row(kb: _Kb, sp, asked: str, qid: str, own: bool, sections) -> dict:
    """One labelled row: the evidence the answer step weighs for ``sp`` (its composition, as
    ``ragstream.answering.answer`` makes it) and whether its answer leads with an answering section."""
    a = kb.cfg.settings.answer
    a5 = kb.cfg.agents.A5_Format_Enforcer
    floor = bool(no_results_reason(sp, retrieval_signals(sp), a))
    comp = compose(sp, kb.cfg, kb.services, a5)
    ev = weigh(sp, comp.statements, build_query(sp.body), kb.services, kb.terms, a.answerability)
    text = "".join(composed_pieces(sp, comp, a, a5))
    leads = own and grade(sp, text, sections, kb.docs.docs.name, kb.cfg).first
    return {"docs": kb.docs.name, "family": kb.family, "asked": asked, "id": qid,
            "answerable": own, "forced": floor or bool(ev.missing) or not ev.features,
            "missing": ev.missing, "x": [ev.features.get(k, 0.0) for k in FEATURES],
            "leads": bool(leads)}


def collect(paths: list[str], index_dir: Path | None = None) -> list[dict]:
    """One row per (documents, question): family, answerable, forced Low, features, leads."""
    from ragstream.backends.services import build_services
    from ragstream.knowledge.ingest.ingestor import ingest_path

    cfg = load_config()
    if index_dir is not None:
        cfg = cfg.with_overrides({"settings.paths.index_dir": str(index_dir)})
    sets = [load_questions(p) for p in paths]
    # a set that asks another's questions of the same documents in another form (kb-pdf asks
    # kb's) is of that set's family: its questions are answerable there, not unanswerable
    family = {s.name: next(o.name for o in sets if question_texts(o) & question_texts(s)) for s in sets}
    rows: list[dict] = []
    for docs in sets:
        acfg = answers_config(cfg, docs)
        services = build_services(acfg)
        ingest_path(docs.docs, acfg, services, prune=True)
        services = replace(services, llm=None)
        engine = Engine(acfg, services)
        kb = _Kb(docs, acfg, services, question_terms(acfg), family[docs.name])

        for asked in sets:
            own = family[asked.name] == family[docs.name]
            for q in asked.questions:
                rows.append(_row(kb, engine.run(q.question), asked.name, q.id, own,
                                 docs.sections[q.id] if own else []))
            if asked is not docs:
                continue
            # the set's own same-subject questions its documents leave out: unanswerable
            for u in docs.unanswerable:
                rows.append(_row(kb, engine.run(u.question), f"{asked.name}:same", u.id, False, []))
            # its follow-ups, read with the turns before them: answerable
            for f in docs.followups:
                turns: list[ConversationTurn] = []
                for t in f.turns[:-1]:
                    prior = engine.run(engine.new(t.question, conversation=list(turns)))
                    turns.append(ConversationTurn(user=t.question,
                                                  assistant=answer(prior, acfg, services).text))
                sp = engine.run(engine.new(f.turns[-1].question, conversation=turns))
                rows.append(_row(kb, sp, f"{asked.name}:follow-up", f.id, True,
                                 docs.sections[f"{f.id}/{len(f.turns)}"]))
    return rows


def _family(row: dict) -> str:
    """The question family a row's documents belong to (rows saved before families: its set)."""
    return row.get("family", row["docs"])


def _fit(rows: list[dict], cols: list[int], label: str, c: float) -> LogisticRegression:
    free = [r for r in rows if not r["forced"]]
    x = np.asarray([[r["x"][i] for i in cols] for r in free])
    return LogisticRegression(C=c, max_iter=1000).fit(x, [int(r[label]) for r in free])


def _proba(model: LogisticRegression, rows: list[dict], cols: list[int]) -> np.ndarray:
    return model.predict_proba(np.asarray([[r["x"][i] for i in cols] for r in rows]))[:, 1]


def choose(rows: list[dict], label: str) -> tuple[tuple[str, ...], float, float]:
    """The subset and strength with the lowest leave-one-family-out log loss (one family:
    ``FOLDS``-fold, the questions dealt round)."""
    families = sorted({_family(r) for r in rows})
    group = {id(r): _family(r) for r in rows} if len(families) > 1 else \
        {id(r): str(n % FOLDS) for n, r in enumerate(rows)}
    best: tuple[float, tuple[str, ...], float] | None = None
    for subset in SUBSETS:
        cols = [FEATURES.index(s) for s in subset]
        for c in STRENGTHS:
            ys, ps = [], []
            for held in sorted(set(group.values())):
                train = [r for r in rows if group[id(r)] != held]
                test = [r for r in rows if group[id(r)] == held and not r["forced"]]
                if not test:
                    continue
                model = _fit(train, cols, label, c)
                ys += [int(r[label]) for r in test]
                ps += list(_proba(model, test, cols))
            loss = float(log_loss(ys, ps, labels=[0, 1]))
            if best is None or loss < best[0]:
                best = (loss, subset, c)
    assert best is not None
    return best[1], best[2], best[0]


def weights(model: LogisticRegression, subset: tuple[str, ...]) -> dict[str, float]:
    """The model as config writes it: every feature's weight (0 when unused) and the bias."""
    w = dict.fromkeys(FEATURES, 0.0)
    w.update({k: round(float(v), 3) for k, v in zip(subset, model.coef_[0])})
    return {**w, "bias": round(float(model.intercept_[0]), 3)}


def _p(rows: list[dict], w: dict[str, float]) -> np.ndarray:
    z = np.asarray([r["x"] for r in rows]) @ np.asarray([w[k] for k in FEATURES]) + w["bias"]
    return 1.0 / (1.0 + np.exp(-z))


def levels(rows: list[dict], wa: dict, wl: dict, t_a: float, t_h: float) -> list[str]:
    """Each row's confidence as ``answer.rate`` gives it to the extractive answer."""
    pa, pl = _p(rows, wa), _p(rows, wl)
    return ["Low" if r["forced"] or a < t_a else "High" if lead >= t_h else "Medium"
            for r, a, lead in zip(rows, pa, pl)]


def figures(rows: list[dict], lv: list[str]) -> dict:
    """Answerable not Low, unanswerable Low, High on unanswerable, precision of High."""
    ans = [(r, v) for r, v in zip(rows, lv) if r["answerable"]]
    una = [(r, v) for r, v in zip(rows, lv) if not r["answerable"]]
    high = [(r, v) for r, v in zip(rows, lv) if v == "High"]
    return {
        "answerable": len(ans), "unanswerable": len(una),
        "answerable_not_low": round(sum(v != "Low" for _, v in ans) / max(1, len(ans)), 3),
        "unanswerable_low": round(sum(v == "Low" for _, v in una) / max(1, len(una)), 3),
        "unanswerable_high": sum(v == "High" for _, v in una),
        "high": len(high),
        "high_precision": round(sum(r["answerable"] and r["leads"] for r, _ in high)
                                / len(high), 3) if high else None,
    }


def _worst(rows: list[dict], wa: dict, wl: dict, t_a: float, t_h: float) -> dict:
    """Per figure, the worst over the families (each family's documents must meet it)."""
    per = [figures(sub, levels(sub, wa, wl, t_a, t_h)) for fam in sorted({r["docs"] for r in rows})
           for sub in [[r for r in rows if r["docs"] == fam]]]
    return {"unanswerable_low": min(f["unanswerable_low"] for f in per),
            "unanswerable_high": sum(f["unanswerable_high"] for f in per),
            "high_precision": min(1.0 if f["high_precision"] is None else f["high_precision"]
                                  for f in per)}


def thresholds(rows: list[dict], wa: dict, wl: dict, low: float, precision: float) -> tuple[float, float]:
    """The lowest ``min_answerable`` reaching ``low`` unanswerable Low on every family's
    documents, then the lowest ``high_min_leads`` reaching ``precision`` on each with no
    unanswerable High."""
    t_a = next((t for t in GRID if _worst(rows, wa, wl, t, 1.01)["unanswerable_low"] >= low),
               GRID[-1])
    for t_h in GRID:
        f = _worst(rows, wa, wl, t_a, t_h)
        if f["unanswerable_high"] == 0 and f["high_precision"] >= precision:
            return t_a, t_h
    return t_a, 1.0


def fit(rows: list[dict], low: float, precision: float) -> dict:
    """Both models (subset and strength by leave-one-family-out) and both thresholds."""
    out: dict = {}
    for label in ("answerable", "leads"):
        subset, c, loss = choose(rows, label)
        model = _fit(rows, [FEATURES.index(s) for s in subset], label, c)
        out[label] = weights(model, subset)
        out[f"{label}_chosen"] = {"features": list(subset), "C": c,
                                  "leave_one_family_out_log_loss": round(loss, 4)}
    out["min_answerable"], out["high_min_leads"] = thresholds(rows, out["answerable"], out["leads"],
                                                              low, precision)
    return out


def report(rows: list[dict], model: dict) -> dict:
    """The figures per family (documents) under ``model``."""
    return {fam: figures(sub, levels(sub, model["answerable"], model["leads"],
                                     model["min_answerable"], model["high_min_leads"]))
            for fam in sorted({r["docs"] for r in rows})
            for sub in [[r for r in rows if r["docs"] == fam]]}


def main() -> None:
    """Collect, fit per family and on both, report, print the config block."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", nargs="+", default=list(SETS))
    ap.add_argument("--target-low", type=float, default=0.97,
                    help="unanswerable questions answered Low, at least (the issue's target is "
                         "0.95; 0.97 leaves a margin for documents the fit has not seen)")
    ap.add_argument("--target-precision", type=float, default=0.90)
    ap.add_argument("--index-dir", type=Path, help="index the sets here (default: the app's)")
    ap.add_argument("--rows", type=Path, help="read the collected rows here instead of collecting")
    ap.add_argument("--save-rows", type=Path, help="write the collected rows here")
    ap.add_argument("--json", type=Path, help="also write the result here")
    args = ap.parse_args()
    rows = json.loads(args.rows.read_text()) if args.rows else collect(args.sets, args.index_dir)
    if args.save_rows:
        args.save_rows.write_text(json.dumps(rows) + "\n")
    families = sorted({_family(r) for r in rows})
    cross = {}
    for fam in families:
        own = fit([r for r in rows if _family(r) == fam], args.target_low, args.target_precision)
        cross[f"fit on {fam}"] = {"thresholds": {"min_answerable": own["min_answerable"],
                                                 "high_min_leads": own["high_min_leads"]},
                                  "figures": report(rows, own)}
    final = fit(rows, args.target_low, args.target_precision)
    result = {
        "rows": len(rows), "forced_low": sum(r["forced"] for r in rows),
        "answerable_forced_low": [f"{r['docs']}/{r['id']}: {', '.join(r['missing'])}"
                                  for r in rows if r["answerable"] and r["forced"]],
        "each_family_checked_on_the_other": cross,
        "final": {k: v for k, v in final.items()},
        "final_figures": report(rows, final),
        "config": {"answerable": final["answerable"], "leads": final["leads"],
                   "min_answerable": final["min_answerable"],
                   "high_min_leads": final["high_min_leads"]},
    }
    print(json.dumps(result, indent=2, ensure_ascii=False))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
