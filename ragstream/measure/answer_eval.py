"""``python -m ragstream eval --answers FILE``: does the answer lead with what answers the question?

A question set is a JSON file (``benchmarks/answers/*.json``)::

    {"name": "kb", "description": "…", "docs": "../../data/kb",
     "questions": [{"id": "kb-01", "question": "How are documents chunked?",
                    "sections": ["chunking-and-ingestion.md § From file to sections"],
                    "kind": "short"}]}

``docs`` is the documents' folder, relative to the file. Each question names the section(s)
that answer it as ``"<file inside docs> § <heading>"``: a chunk *answers* when it comes from
that file and the heading is in its heading path (the section or one of its subsections).
``kind`` is ``short`` (a one-line question), ``list`` ("list every …") or ``detail`` ("… in
detail"); only ``short`` answers are held to ``answer.max_sentences``.

1. **Index.** The documents are ingested by the app's own ingestion into an index of their
   own (``<index_dir>/eval/answers_<name>/``); unchanged files are skipped on the next run.
2. **Answers.** Every question runs through the whole pipeline (``Engine.run``) and the
   answer step (``ragstream.answering.answer.answer``; no QA log), once per mode: ``offline`` (no LLM:
   the extractive answer) and, when an endpoint is configured, ``llm``.
3. **Grading.** The answer's sentences are those the cited share counts
   (``answer.answer_sentences``); a sentence *cites the answer* when one of its ``[n]`` names a
   chunk that answers. Per mode: the share of questions whose first sentence cites the
   answer (``first``), whose first three sentences include one that does (``first3``), whose
   final selection holds an answering chunk at all (``in_sources``, the ceiling of the other
   two), the median answer length in sentences, and the median time of pipeline + answer;
   and, for retrieval, the MRR@10 of the first answering chunk in the Retrieval and the
   ReRanker stages (the section as the relevant item).
   ``conversation`` mode asks the whole set as one named conversation, twice over (``conv 1``,
   ``conv 2``: the second time every question's earlier turn is remembered), and adds
   ``cite_turn``: the share of answers that cite a remembered turn. A remembered turn must
   not crowd out the documents it answered from.
   **Confidence.** With ``against`` (``eval --answers A --against B``, or ``--against others``:
   every other given set that asks other questions — ``kb-pdf`` asks ``kb``'s, so they are
   one family), the other sets' questions are also asked of each set's documents: the
   *unanswerable* set. Per set and mode: the share of answerable questions not answered Low
   (``not_low``, target 0.90), of unanswerable ones answered Low (``unans_low``, target 0.95),
   how many unanswerable ones got High (``unans_high``, target 0), and the precision of High
   (``high_precision``: High answers whose first sentence cites an answering section, over all
   High answers, the unanswerable ones' included; target 0.90).
4. **Agents (LLM mode).** Each agent that asked the model records its decisions beside the
   rules' (``extras.judgments``). Per agent: how many decisions the model judged, how many it
   changed (``changed``), and of the changes on chunks (A3, A4) how many *helped* (an answering
   chunk kept that the rules would drop) or *hurt* (an answering chunk lost that the rules
   would keep); for A3 the ROC AUC of the model's P(relevant) against "this chunk answers the
   question" (0.5 = no better than chance), and how many passes the gate emptied while the
   rules would have kept something (``emptied``, which must stay 0).
"""

from __future__ import annotations

import datetime as dt
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ragstream.common.config import AppConfig
from ragstream.common.errors import EvalDataError
from ragstream.measure.question_sets import (
    QuestionSet,
    Section,
    answers_config,
    check_sections,
    holds_key,
    load_questions,
)
from ragstream.state.super_prompt import SuperPrompt, View

Progress = Callable[[str, int, int], None]  # (phase, done, total)

MODES = ("offline", "llm", "conversation")


# --------------------------------------------------------------------------- grading


@dataclass
class Graded:
    """One answer, graded: its sentences and, per sentence, whether it cites an answering chunk."""

    sentences: list[str]
    cites_answer: list[bool]
    in_sources: bool

    @property
    def first(self) -> bool:
        """The first sentence cites the answer."""
        return bool(self.cites_answer[:1]) and self.cites_answer[0]

    @property
    def first3(self) -> bool:
        """One of the first three sentences cites the answer."""
        return any(self.cites_answer[:3])


def grade(sp: SuperPrompt, text: str, sections: Sequence[Section], folder: str,
          cfg: AppConfig) -> Graded:
    """Split ``text`` into the answer's sentences and mark those whose ``[n]`` names a chunk
    in ``sections``."""
    from ragstream.answering.answer import answer_sentences, citation_numbers

    acfg = cfg.settings.answer
    chunks = sp.chunk_map()
    selection = sp.final_selection_ids
    answering = {cid for cid in selection
                 if cid in chunks and any(s.holds(chunks[cid], folder) for s in sections)}
    sentences = answer_sentences(text, acfg.min_sentence_words)
    marks = [any(1 <= n <= len(selection) and selection[n - 1] in answering
                 for n in citation_numbers(s, acfg.max_citation_range))
             for s in sentences]
    return Graded(sentences, marks, bool(answering))


def first_answering_rank(sp: SuperPrompt, stage: str, sections: Sequence[Section],
                         folder: str) -> int | None:
    """The rank (1-based) of the first chunk in ``sections`` among ``stage``'s kept chunks."""
    chunks = sp.chunk_map()
    for rank, cid in enumerate(sp.kept_ids(stage), start=1):
        if cid in chunks and any(s.holds(chunks[cid], folder) for s in sections):
            return rank
    return None


CHUNK_AGENTS = ("A3_NLI_Gate", "A4_Condenser")


def agent_figures(sp: SuperPrompt, sections: Sequence[Section], folder: str) -> dict[str, Any]:
    """What each agent's model did to the rules' decisions in one pass: per agent the
    decisions judged and changed, and for chunk agents the changes that kept (helped) or lost
    (hurt) an answering chunk; A3's (P(relevant), answers) pairs; whether A3 emptied a
    selection the rules would fill."""
    chunks = sp.chunk_map()

    def answers(cid: str) -> bool:
        return cid in chunks and any(s.holds(chunks[cid], folder) for s in sections)

    out: dict[str, Any] = {}
    for agent, judgments in sp.extras.judgments.items():
        changed = [j for j in judgments if j.changed]
        figures = {"judged": len(judgments), "changed": len(changed)}
        if agent in CHUNK_AGENTS:
            figures["helped"] = sum(j.final == "kept" and answers(j.item) for j in changed)
            figures["hurt"] = sum(j.final == "dropped" and answers(j.item) for j in changed)
        out[agent] = figures
    a3 = sp.extras.judgments.get("A3_NLI_Gate", [])
    out["a3_pairs"] = [(j.probability, answers(j.item)) for j in a3 if j.probability is not None]
    rows = sp.view(View.A3)
    out["a3_emptied"] = bool(rows) and not sp.kept_ids(View.A3) and any(
        r.rule_status == "kept" for r in rows)
    return out


def roc_auc(pairs: Sequence[tuple[float, bool]]) -> float | None:
    """The ROC AUC of scores against labels (Mann–Whitney U, ties counted half); None when
    one class is missing."""
    pos = [p for p, y in pairs if y]
    neg = [p for p, y in pairs if not y]
    if not pos or not neg:
        return None
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return round(wins / (len(pos) * len(neg)), 4)


def agents_summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The per-agent figures summed over a mode's questions (see ``agent_figures``)."""
    total: dict[str, dict[str, int]] = {}
    pairs: list[tuple[float, bool]] = []
    emptied = 0
    for r in rows:
        figures = r.get("agents") or {}
        pairs.extend((float(p), bool(y)) for p, y in figures.get("a3_pairs", []))
        emptied += bool(figures.get("a3_emptied"))
        for agent, f in figures.items():
            if isinstance(f, dict):
                into = total.setdefault(agent, {})
                for k, v in f.items():
                    into[k] = into.get(k, 0) + v
    return {"per_agent": total, "a3_auc": roc_auc(pairs), "a3_pairs": len(pairs),
            "a3_emptied": emptied}


def _mrr10(ranks: Sequence[int | None]) -> float:
    return round(sum(1.0 / r for r in ranks if r is not None and r <= 10) / len(ranks), 4) \
        if ranks else 0.0


# --------------------------------------------------------------------------- running


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else 0.0


def _share(flags: Sequence[bool]) -> float:
    return round(sum(flags) / len(flags), 4) if flags else 0.0


#: what confidence must achieve (issue 31): answerable not Low, unanswerable Low, High precision
CONFIDENCE_TARGETS = {"not_low": 0.90, "unans_low": 0.95, "high_precision": 0.90}
#: what the answer must achieve (issue 45): a key string in its first 400 characters, the
#: answering section in the reranked top 3 and in the final selection, follow-ups led by their
#: section and holding its key string, same- and other-subject unanswerable questions Low
ANSWER_TARGETS = {"key_lead": 0.80, "rerank_top3": 0.90, "in_sources": 0.95, "fu_first": 0.80,
                  "fu_key": 0.70, "same_low": 0.90, "other_low": 0.95, "not_low": 0.90,
                  "high_precision": 0.90}


def confidence_figures(rows: Sequence[dict[str, Any]],
                       foreign: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Confidence against the labels: answerable ``rows`` not Low, unanswerable ``foreign``
    rows Low, High among the unanswerable, and the precision of High (High answers whose
    first sentence cites an answering section, over all High answers); None where a share
    has no question to count."""
    high = [r for r in [*rows, *foreign] if r.get("confidence") == "High"]
    return {
        "unanswerable": len(foreign),
        "not_low": _share([r.get("confidence") != "Low" for r in rows]) if rows else None,
        "unans_low": _share([r.get("confidence") == "Low" for r in foreign]) if foreign else None,
        "unans_high": sum(r.get("confidence") == "High" for r in foreign),
        "high": len(high),
        "high_precision": _share([r["first"] and r.get("answerable", True) for r in high])
        if high else None,
        "levels": {lv: sum(r.get("confidence") == lv for r in rows) for lv in ("High", "Medium", "Low")},
        "unans_levels": {lv: sum(r.get("confidence") == lv for r in foreign)
                         for lv in ("High", "Medium", "Low")},
    }


def _keyed(rows: Sequence[dict[str, Any]], field_name: str) -> float | None:
    """The share of ``rows`` with key strings whose ``field_name`` holds (None: none has keys)."""
    keyed = [r for r in rows if r.get("has_keys")]
    return _share([r[field_name] for r in keyed]) if keyed else None


def summarize(rows: Sequence[dict[str, Any]],
              foreign: Sequence[dict[str, Any]] = (),
              followups: Sequence[dict[str, Any]] = (),
              same: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """The figures of one mode over its graded rows (and over the ``short`` questions alone),
    with the confidence figures over them, the ``foreign`` (other-subject unanswerable) and
    ``same`` (same-subject unanswerable) rows, and the follow-up dialogues' last turns."""
    short = [r for r in rows if r["kind"] == "short"]
    return {
        **confidence_figures(rows, [*foreign, *same]),
        "questions": len(rows),
        "first": _share([r["first"] for r in rows]),
        "first3": _share([r["first3"] for r in rows]),
        "in_sources": _share([r["in_sources"] for r in rows]),
        "key_lead": _keyed(rows, "key_lead"),
        "key_any": _keyed(rows, "key_any"),
        "rerank_top3": _share([r["rerank_rank"] is not None and r["rerank_rank"] <= 3
                               for r in rows]),
        "median_sentences": _median([r["sentences"] for r in rows]),
        "median_sentences_short": _median([r["sentences"] for r in short]),
        "max_sentences_short": max((r["sentences"] for r in short), default=0),
        "median_ms": round(_median([r["ms"] for r in rows]), 1),
        "cite_turn": _share([r.get("cites_turn", False) for r in rows]),
        "mrr10_retrieval": _mrr10([r["retrieval_rank"] for r in rows]),
        "mrr10_rerank": _mrr10([r["rerank_rank"] for r in rows]),
        "followups": len(followups),
        "fu_first": _share([r["first"] for r in followups]) if followups else None,
        "fu_key": _keyed(followups, "key_any"),
        "fu_key_lead": _keyed(followups, "key_lead"),
        "same_subject": len(same),
        "same_low": _share([r.get("confidence") == "Low" for r in same]) if same else None,
        "same_high": sum(r.get("confidence") == "High" for r in same),
        "other_low": _share([r.get("confidence") == "Low" for r in foreign]) if foreign else None,
        "agents": agents_summary(rows),
    }


@dataclass(frozen=True)
class Ask:
    """One question to ask and grade: its id, text, kind, answering sections (none: it is
    unanswerable), key strings, and the questions asked before it in the same conversation."""

    id: str
    question: str
    kind: str
    sections: list[Section]
    keys: list[str]
    before: tuple[str, ...] = ()


def asks(qs: QuestionSet) -> list[Ask]:
    """The set's answerable questions as ``Ask``s."""
    return [Ask(q.id, q.question, q.kind, qs.sections[q.id], q.keys) for q in qs.questions]


def followup_asks(qs: QuestionSet) -> list[Ask]:
    """Each follow-up dialogue's last turn, asked after the turns before it."""
    out = []
    for f in qs.followups:
        n = len(f.turns)
        out.append(Ask(f.id, f.turns[-1].question, "short", qs.sections[f"{f.id}/{n}"],
                       f.turns[-1].keys, tuple(t.question for t in f.turns[:-1])))
    return out


def same_subject_asks(qs: QuestionSet) -> list[Ask]:
    """The set's same-subject unanswerable questions: no section answers them."""
    return [Ask(u.id, u.question, "short", [], []) for u in qs.unanswerable]


#: how many characters of an answer count as its lead (a key string there: it leads)
LEAD_CHARS = 400


def run_mode(qs: QuestionSet, cfg: AppConfig, services, mode: str,
             progress: Progress | None = None, conversation: str = "",
             items: Sequence[Ask] | None = None, label: str = "") -> list[dict[str, Any]]:
    """Ask every question (``items``; default the set's answerable ones) in ``mode`` and grade
    the answers: one row per question. An item with questions ``before`` it is asked after
    them, their answers its recent conversation (a follow-up). With ``conversation``, each
    question continues that named conversation (its remembered turns are searched with the
    knowledge base) and its answer becomes the next turn."""
    from ragstream.answering.answer import answer
    from ragstream.state.super_prompt import ConversationTurn
    from ragstream.workbench.engine import Engine

    engine = Engine(cfg, services)
    rows: list[dict[str, Any]] = []
    items = asks(qs) if items is None else items
    folder = qs.docs.name
    for n, q in enumerate(items, start=1):
        started = time.perf_counter()
        if conversation:
            sp, ans = engine.answer(engine.run(engine.new(q.question, conversation_name=conversation)))
        else:
            turns: list[ConversationTurn] = []
            for earlier in q.before:
                prior = engine.run(engine.new(earlier, conversation=list(turns)))
                turns.append(ConversationTurn(user=earlier, assistant=answer(prior, cfg, services).text))
            sp = engine.run(engine.new(q.question, conversation=turns) if turns else q.question)
            ans = answer(sp, cfg, services)
        ms = (time.perf_counter() - started) * 1000.0
        g = grade(sp, ans.text, q.sections, folder, cfg)
        answered = ans.mode != "no-results"
        rows.append({
            "id": q.id, "kind": q.kind, "question": q.question, "mode": ans.mode,
            "first": g.first, "first3": g.first3, "in_sources": g.in_sources,
            "sentences": len(g.sentences), "ms": round(ms, 1),
            "has_keys": bool(q.keys),
            "key_lead": answered and holds_key(ans.text[:LEAD_CHARS], q.keys),
            "key_any": answered and holds_key(ans.text, q.keys),
            "retrieval_rank": first_answering_rank(sp, View.RETRIEVAL, q.sections, folder),
            "rerank_rank": first_answering_rank(sp, View.RERANKED, q.sections, folder),
            "first_sentence": g.sentences[0] if g.sentences else "",
            "answer_text": ans.text,
            "reads_as": getattr(sp.extras, "reading", None) and sp.extras.reading.text or "",
            "agents": agent_figures(sp, q.sections, folder),
            "agent_modes": {a: m.mode for a, m in sp.extras.agent_modes.items()},
            "sections": [f"{s.file} § {s.heading}" for s in q.sections],
            "cites_turn": any(c.chunk_id.startswith("conversation:") for c in ans.sources),
            "confidence": ans.confidence, "confidence_reason": ans.confidence_reason,
            "answered": answered, "answerable": bool(q.sections),
        })
        if progress:
            progress(f"answers {qs.name} ({label or mode})", n, len(items))
    return rows


#: how many times ``conversation`` mode asks the whole set in one conversation
CONVERSATION_PASSES = 2


def _mode_rows(qs: QuestionSet, cfg: AppConfig, services, mode: str,
               progress: Progress | None) -> list[tuple[str, list[dict[str, Any]]]]:
    """The graded rows of ``mode``; ``conversation`` (offline answers) asks the set as one
    new named conversation ``CONVERSATION_PASSES`` times over — the first pass with each
    earlier question's turn remembered, the second with every question's — then deletes it."""
    if mode != "conversation":
        return [(mode, run_mode(qs, cfg, services, mode, progress))]
    from ragstream.workbench.conversations import Conversations, new_name

    name = f"eval-{qs.name}-{new_name()}"[:60]
    try:
        return [(f"conv {n}", run_mode(qs, cfg, services, mode, progress, conversation=name))
                for n in range(1, CONVERSATION_PASSES + 1)]
    finally:
        convs = Conversations.for_config(cfg)
        if convs.exists(name):
            convs.delete(name)


def question_texts(qset: QuestionSet) -> set[str]:
    """A set's questions, case and spacing folded: two sets that share one are one family
    (``kb-pdf`` asks ``kb``'s questions over the same text in PDF)."""
    return {" ".join(q.question.casefold().split()) for q in qset.questions}


def foreign_sets(qs: QuestionSet, given: Sequence[QuestionSet],
                 named: Sequence[QuestionSet]) -> list[QuestionSet]:
    """The sets whose questions are unanswerable on ``qs``'s documents: those ``named``
    (``--against FILE``), else the other ``given`` sets (``--against others``) — except any that
    asks one of ``qs``'s questions (``kb-pdf`` asks ``kb``'s over the same text in PDF), and
    the same questions once (``kb`` and ``kb-pdf`` asked of npm's documents: ``kb``'s alone)."""
    own = question_texts(qs)
    seen: set[str] = set()
    out: list[QuestionSet] = []
    for other in (named or given):
        theirs = question_texts(other)
        if other.name == qs.name or theirs & own or theirs <= seen:
            continue
        seen |= theirs
        out.append(other)
    return out


def unanswerable(other: QuestionSet, qs: QuestionSet) -> QuestionSet:
    """``other``'s questions asked of ``qs``'s documents: no section answers them there."""
    return replace(other, name=f"{other.name}@{qs.name}", docs=qs.docs,
                   questions=[q.model_copy(update={"keys": []}) for q in other.questions],
                   sections={q.id: [] for q in other.questions}, followups=[], unanswerable=[])


def evaluate_answers(paths: Sequence[str | Path], cfg: AppConfig, modes: Sequence[str] | None = None,
                     progress: Progress | None = None,
                     services_for: Callable[[AppConfig], Any] | None = None,
                     limit: int | None = None, engine: Any = None,
                     against: Sequence[str | Path] = ()) -> dict[str, Any]:
    """Index each question set's documents (or reuse the index), answer every question (the
    first ``limit`` of each set, if given) in each mode (default: ``offline``, and ``llm`` when
    an endpoint is configured) and grade it. With ``engine`` (an ``Engine`` for a named
    knowledge base, ``eval --kb``), the questions are asked of that knowledge base as it is:
    nothing is ingested, and the sections are looked for in its folder. ``against``: question
    sets whose questions are asked of each set's documents as its unanswerable set, or
    ``["others"]``: the other sets given (``foreign_sets``)."""
    from ragstream.backends.services import build_services
    from ragstream.knowledge.ingest.ingestor import ingest_path
    from ragstream.measure.evaluation import machine

    sets = [load_questions(p) for p in paths]
    named = [] if list(against) == ["others"] else [load_questions(p) for p in against]
    if limit is not None:
        sets = [replace(qs, questions=qs.questions[:limit], followups=qs.followups[:limit],
                        unanswerable=qs.unanswerable[:limit]) for qs in sets]
        named = [replace(qs, questions=qs.questions[:limit]) for qs in named]
    if modes is None:
        modes = ["offline"] + (["llm"] if cfg.settings.llm.base_url else [])
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise EvalDataError(f"unknown answer mode(s) {unknown}; choose from {list(MODES)}.")
    load_start = machine()["load_avg_1m"]
    results = []
    for qs in sets:
        t = time.perf_counter()
        if engine is not None:
            qs = replace(qs, docs=engine.cfg.kb_dir)
            acfg, services = engine.cfg, engine.services
            ingested = f"knowledge base {engine.kb!r} as it is (nothing ingested)"
        else:
            acfg = answers_config(cfg, qs)
            services = (services_for or build_services)(acfg)
            ingested = ingest_path(qs.docs, acfg, services, prune=True).summary()
        index_s = time.perf_counter() - t
        chunks = services.index().all_chunks()
        label_notes = check_sections(qs, chunks)
        services.embedder.embed(["warm up"])
        for mode in modes:
            if mode == "llm" and services.llm is None:
                raise EvalDataError("answer mode 'llm' needs an LLM endpoint: set llm.base_url "
                                    "in config/settings.json.")
            run_services = services if mode == "llm" else replace(services, llm=None)
            others = foreign_sets(qs, sets if against else [], named) \
                if mode != "conversation" else []
            for label, rows in _mode_rows(qs, acfg, run_services, mode, progress):
                foreign = [row | {"from": f.name} for f in others
                           for row in run_mode(unanswerable(f, qs), acfg, run_services, mode,
                                               progress)]
                plain = mode != "conversation"
                followups = run_mode(qs, acfg, run_services, mode, progress,
                                     items=followup_asks(qs), label=f"{mode}, follow-ups") \
                    if plain and qs.followups else []
                same = [row | {"from": qs.name} for row in run_mode(
                    qs, acfg, run_services, mode, progress, items=same_subject_asks(qs),
                    label=f"{mode}, same-subject unanswerable")] \
                    if plain and qs.unanswerable else []
                results.append({"set": qs.name, "description": qs.description, "mode": label,
                                "documents": len({c.doc_id for c in chunks}),
                                "ingest": ingested, "kb": engine.kb if engine is not None else "",
                                "chunks": len(chunks), "index_s": round(index_s, 2),
                                "against": [f.name for f in others],
                                "label_notes": label_notes,
                                **summarize(rows, foreign, followups, same), "rows": rows,
                                "unanswerable_rows": foreign, "followup_rows": followups,
                                "same_subject_rows": same})
    return {
        "sets": [str(Path(p)) for p in paths],
        "results": results,
        "targets": {"first3": 0.85, "median_sentences": float(cfg.settings.answer.max_sentences),
                    **CONFIDENCE_TARGETS, **ANSWER_TARGETS},
        "config": {"N1": cfg.limits.N1_RETR_MAX_CANDIDATES, "N2": cfg.limits.N2_RERANK_TOP_K,
                   "N3": cfg.limits.N3_FINAL_SELECTION_MAX,
                   "max_sentences": cfg.settings.answer.max_sentences},
        "machine": {**machine(), "load_avg_1m_start": load_start},
        "measured_at": dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat(),
    }


def format_answers(result: dict[str, Any]) -> str:
    """The answer-quality result as a plain-text table, then the questions whose first three
    sentences missed the answering section."""
    lines = [f"{'set':<12} {'mode':<9} {'n':>3} {'first':>6} {'first3':>7} {'in src':>7} "
             f"{'med sent':>9} {'med short':>10} {'max short':>10} {'MRR@10 ret':>11} "
             f"{'MRR@10 rr':>10} {'med ms':>8}"]
    for r in result["results"]:
        lines.append(f"{r['set']:<12} {r['mode']:<9} {r['questions']:>3} {r['first']:>6.2f} "
                     f"{r['first3']:>7.2f} {r['in_sources']:>7.2f} {r['median_sentences']:>9.1f} "
                     f"{r['median_sentences_short']:>10.1f} {r['max_sentences_short']:>10} "
                     f"{r['mrr10_retrieval']:>11.3f} {r['mrr10_rerank']:>10.3f} "
                     f"{r['median_ms']:>8.0f}")
    lines.append(f"\n{'set':<12} {'mode':<9} {'n':>3} {'not Low':>8} {'H/M/L':>10} {'unans':>6} "
                 f"{'unans Low':>10} {'unans H/M/L':>12} {'High prec':>10}   against")

    def share(v: float | None) -> str:
        return "—" if v is None else f"{v:.2f}"

    for r in result["results"]:
        lv, ul = r.get("levels", {}), r.get("unans_levels", {})
        hml = "/".join(str(lv.get(k, 0)) for k in ("High", "Medium", "Low"))
        uhml = "/".join(str(ul.get(k, 0)) for k in ("High", "Medium", "Low")) \
            if r.get("unanswerable") else "—"
        lines.append(f"{r['set']:<12} {r['mode']:<9} {r['questions']:>3} "
                     f"{share(r.get('not_low')):>8} {hml:>10} {r.get('unanswerable', 0):>6} "
                     f"{share(r.get('unans_low')):>10} {uhml:>12} "
                     f"{share(r.get('high_precision')):>10}   {', '.join(r.get('against', [])) or '—'}")
    judged = [r for r in result["results"] if r["agents"]["per_agent"]]
    if judged:
        lines.append(f"\n{'set':<12} {'mode':<9} {'agent':<19} {'judged':>7} {'changed':>8} "
                     f"{'helped':>7} {'hurt':>5}")
        for r in judged:
            for agent, f in sorted(r["agents"]["per_agent"].items()):
                lines.append(f"{r['set']:<12} {r['mode']:<9} {agent:<19} {f['judged']:>7} "
                             f"{f['changed']:>8} {f.get('helped', '—'):>7} {f.get('hurt', '—'):>5}")
            a = r["agents"]
            auc = "—" if a["a3_auc"] is None else f"{a['a3_auc']:.3f}"
            lines.append(f"{r['set']:<12} {r['mode']:<9} A3 ROC AUC of P(relevant) vs answers: "
                         f"{auc} over {a['a3_pairs']} judged chunks; selections emptied by the "
                         f"gate: {a['a3_emptied']}")
    lines.append(f"\n{'set':<12} {'mode':<9} {'key@400':>8} {'key':>6} {'rr top3':>8} "
                 f"{'in sel':>7} {'fu n':>5} {'fu lead':>8} {'fu key':>7} {'same n':>7} "
                 f"{'same Low':>9} {'same H':>7} {'other Low':>10}")
    for r in result["results"]:
        lines.append(f"{r['set']:<12} {r['mode']:<9} {share(r.get('key_lead')):>8} "
                     f"{share(r.get('key_any')):>6} {share(r.get('rerank_top3')):>8} "
                     f"{share(r.get('in_sources')):>7} {r.get('followups', 0):>5} "
                     f"{share(r.get('fu_first')):>8} {share(r.get('fu_key')):>7} "
                     f"{r.get('same_subject', 0):>7} {share(r.get('same_low')):>9} "
                     f"{r.get('same_high', 0):>7} {share(r.get('other_low')):>10}")
    t = result["targets"]
    lines.append("targets: " + ", ".join(f"{k} ≥ {v:.2f}" for k, v in ANSWER_TARGETS.items())
                 + ", same-subject never High")
    lines.append(f"targets (offline): first3 ≥ {t['first3']:.2f}, median sentences ≤ "
                 f"{t['median_sentences']:g}; confidence: answerable not Low ≥ "
                 f"{t.get('not_low', 0.9):.2f}, unanswerable Low ≥ {t.get('unans_low', 0.95):.2f} "
                 f"and never High, High precision ≥ {t.get('high_precision', 0.9):.2f}")
    for r in result["results"]:
        missed = [row for row in r["rows"] if row.get("has_keys") and not row.get("key_lead")]
        if missed:
            lines.append(f"\n{r['set']} ({r['mode']}): no key string in the first {LEAD_CHARS} "
                         f"characters:")
            for row in missed:
                where = "" if row["in_sources"] else " (not in the sources)"
                lines.append(f"  {row['id']}: {row['question']}{where}")
        fu = [row for row in r.get("followup_rows", []) if not (row["first"] and row["key_any"])]
        if fu:
            lines.append(f"\n{r['set']} ({r['mode']}): follow-ups not led by their section or "
                         f"without its key string:")
            for row in fu:
                read = f" (read as: {row['reads_as']})" if row.get("reads_as") else ""
                lines.append(f"  {row['id']}: {row['question']}{read}")
        same = [row for row in r.get("same_subject_rows", []) if row.get("confidence") != "Low"]
        if same:
            lines.append(f"\n{r['set']} ({r['mode']}): same-subject unanswerable questions not "
                         f"answered Low:")
            for row in same:
                lines.append(f"  {row['id']} ({row['confidence']}): {row['question']}")
        if r.get("label_notes"):
            lines.append(f"\n{r['set']}: key strings these pages no longer hold (graded on the "
                         f"question's other keys): {'; '.join(r['label_notes'])}")
    m = result["machine"]
    lines.append(f"\nmachine: {m['cores']} cores, Python {m['python']}, load "
                 f"{m['load_avg_1m_start']} → {m['load_avg_1m']}")
    return "\n".join(lines)
