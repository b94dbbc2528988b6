"""A3_NLI_Gate: keep or drop each reranked candidate, with the reason.

Pre-filter (always, deterministic), in reranked order:

1. Working set: the first ``max_candidates``; the rest are dropped ("beyond working set").
2. Trivial: fewer than ``min_words`` words.

The rules (always run: they are the backbone, and what the model's word is weighed against):

3. Relevance: a rerank score below ``min_relevance``, or below ``relative_min`` × the best
   score in the working set, is dropped as off-topic. The best is the best *document's*
   (``bar``): a remembered conversation turn is measured against it, never sets it.
4. Near-duplicates: a chunk whose word 3-shingle Jaccard similarity with an already kept
   chunk is ≥ ``duplicate_jaccard`` is dropped as a duplicate of that chunk; a remembered
   conversation turn whose every sentence a kept document holds (``sources.covering``)
   is dropped as their duplicate (the documents say it, and are current).

LLM mode asks the model about the first candidates in reranked order (at most
``llm_max_candidates``), each shown by its ``llm_sentences`` sentences closest to the prompt
(from the sentence vectors computed at ingestion; only the prompt is embedded), and reads its
word as evidence (``judge``):

* ``probability`` — one call per candidate, one generated token, Yes or No, read as
  P(relevant) from the token's log-probabilities (``LLMClient.judge``: llama.cpp, Ollama,
  OpenAI). The calls share their prefix (instructions, then the prompt), so a server that
  reuses it reads each passage only.
* ``list`` — one call; the model lists the numbers to drop with a tag (duplicate, off-topic,
  conflicting). A tag outside the list is clamped and logged; so is a number naming no
  candidate. No probability: it can agree a candidate is weak, never rescue one.
* ``auto`` — probability where the endpoint gives log-probabilities, else list.

How the two are weighed (``combine``), per candidate the model judged:

* The rules keep it: it stays, unless its score is weak (below ``weak_relative`` × the best),
  the model agrees (P(relevant) ≤ ``llm_drop_max``, or listed to drop) and it is not among
  the first ``protect_top_k``: then it is dropped, decided by the model.
* The rules drop it as off-topic: it stays dropped unless the model is confident it is
  relevant (P(relevant) ≥ ``llm_rescue_min``): then it is rescued, decided by the model.
* Duplicates and trivial chunks keep the rules' verdict.

A candidate the model did not see keeps the rules' verdict against the rules' own floor. The
best candidate is never weak, so the gate cannot empty a selection the rules would fill (and
it checks). Each row keeps the rules' verdict (``rule_status``), the model's probability
(``p_relevant``) and who decided (``decided_by``: the rule, the LLM, or you); each judged
candidate is a ``Judgment`` in ``extras.judgments``; ``extras.a3`` names the thresholds.

A chunk the person pinned or added is kept whatever the gate decided: its reason says so and
what the gate would have done ("pinned by you (the gate would drop it: off-topic: …)"). A
chunk the person dropped here (a ``drop`` edit, e.g. a replayed model reply applied from the
Agents tab, ``ragstream.workbench.replay``) is dropped the same way ("dropped by you (the gate would
keep it)").

Kept ids, in reranked order, become ``final_selection_ids``. Chunks are never modified.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, Field

from ragstream.agents.factory import Agent, PromptBudgetError, RunBudgetError, run_agent
from ragstream.agents.replies import Items, Text, bound
from ragstream.backends.llm import AgentOutputError, NoLogprobsError, inline_schema
from ragstream.backends.reranker import evidence_for
from ragstream.common.config import A3Config, AppConfig
from ragstream.common.errors import StageError
from ragstream.common.text import jaccard, shingles
from ragstream.stages import staleness
from ragstream.stages.sources import covering
from ragstream.stages.stage import Stage
from ragstream.state import edits
from ragstream.state.records import A3Clamp, A3Record, Judgment
from ragstream.state.render import rerank_query
from ragstream.state.super_prompt import Chunk, DecidedBy, RowStatus, SuperPrompt, View, ViewRow

NAME = "A3_NLI_Gate"
TAGS = ("duplicate", "off-topic", "conflicting")

#: (status, reason, extra scores) for one candidate
Verdict = tuple[RowStatus, str, dict[str, float]]


class A3Drop(BaseModel):
    """A candidate to drop: its number and why, as a tag."""

    n: int = Field(description="the candidate's number")
    tag: Text(12, "duplicate, off-topic or conflicting")  # type: ignore[valid-type]


class A3Output(BaseModel):
    """The reply: the candidates to drop; every candidate not listed is kept."""

    drop: Items(A3Drop, 64, "the candidates to drop, by number")  # type: ignore[valid-type]


def reply_schema(sent: int) -> dict:
    """A3Output's schema for ``sent`` candidates: numbers 1..sent, the tags as an enum."""
    return bound(inline_schema(A3Output.model_json_schema()), {
        "drop": {"maxItems": sent},
        "drop[].n": {"minimum": 1, "maximum": sent},
        "drop[].tag": {"enum": list(TAGS)},
    })


@dataclass(frozen=True)
class ModelWord:
    """What the model said of one candidate: kept or dropped, P(relevant) when the endpoint
    gave log-probabilities, the tag when it listed the candidate to drop."""

    verdict: RowStatus
    probability: float | None = None
    tag: str = ""

    def said(self) -> str:
        """The model's word in a few words, for a reason."""
        if self.probability is not None:
            return f"P(relevant) {self.probability:.2f}"
        return f"listed it to drop ({self.tag or 'no tag'})" if self.verdict == "dropped" \
            else "did not list it"


def run(sp: SuperPrompt, cfg: AppConfig, services) -> SuperPrompt:
    """Keep or drop each reranked chunk (the rules, weighed with the model's word in LLM
    mode); write the A3 view, the judgments and ``final_selection_ids``."""
    acfg = cfg.agents.A3_NLI_Gate
    ranked = sp.view(View.RERANKED)
    if not ranked:
        raise StageError(NAME, "the ReRanker view is empty; run ReRanker first.")
    chunks = sp.chunk_map()

    verdicts: dict[str, Verdict] = {}
    candidates = []
    for row in ranked:
        chunk = chunks[row.chunk_id]
        if row.rank > acfg.max_candidates:
            verdicts[row.chunk_id] = ("dropped", f"beyond working set (max_candidates="
                                                 f"{acfg.max_candidates})", {})
        elif chunk.word_count < acfg.min_words:
            verdicts[row.chunk_id] = ("dropped", f"trivial: {chunk.word_count} words < min_words "
                                                 f"{acfg.min_words}", {})
        else:
            candidates.append(row)

    rules = _rule_gate(candidates, chunks, cfg)
    log: dict = {}
    words: dict[str, ModelWord] | None = run_agent(
        sp, NAME, cfg, services,
        llm_path=lambda agent: _ask_model(agent, sp, candidates, chunks, cfg, services, log),
        deterministic_path=lambda: None,
        output=A3Output,
    )
    decided: dict[str, DecidedBy] = {}
    rule_of: dict[str, RowStatus] = {}
    if words is None:
        verdicts.update(rules)
    else:
        gate, decided, judgments = combine(candidates, rules, words, acfg, chunks)
        verdicts.update(gate)
        rule_of = {r.chunk_id: rules[r.chunk_id][0] for r in candidates}
        sp.extras.judgments[NAME] = judgments
        log.update(protect_top_k=acfg.protect_top_k, weak_relative=acfg.weak_relative,
                   llm_drop_max=acfg.llm_drop_max, llm_rescue_min=acfg.llm_rescue_min,
                   changed=sum(j.changed for j in judgments))
    chunk_edits = edits.chunk_edits(sp.edits)
    for cid in chunk_edits.kept:
        if cid not in verdicts:
            continue
        status, reason, extra = verdicts[cid]
        overruled = f" (the gate would drop it: {reason})" if status == "dropped" else ""
        verdicts[cid] = ("kept", chunk_edits.reason(cid) + overruled, extra)
        decided[cid] = "you"
        edits.note(sp, NAME, chunk_edits.by_id[cid], True, "kept by the gate" + (
            f", which would have dropped it ({reason})" if status == "dropped" else ""))
    for cid, edit in chunk_edits.drops.items():  # the person's drops (one slot with a pin)
        if cid not in verdicts:
            edits.note(sp, NAME, edit, False, f"not applied: {cid} is not among the "
                                              f"ReRanker's candidates any more")
            continue
        status, reason, extra = verdicts[cid]
        kept_by = f": {reason}" if reason else ""
        verdicts[cid] = ("dropped", edits.DROPPED + (f" (the gate would keep it{kept_by})"
                                                     if status == "kept" else ""), extra)
        decided[cid] = "you"
        edits.note(sp, NAME, edit, True, "dropped by the gate" + (
            ", which would have kept it" if status == "kept" else ", as the gate would"))

    rows: list[ViewRow] = []
    for row in ranked:
        status, reason, extra = verdicts[row.chunk_id]
        rows.append(ViewRow(chunk_id=row.chunk_id, rank=len(rows) + 1, score=row.score,
                            scores={"rerank": row.score, **extra}, status=status, reason=reason,
                            decided_by=decided.get(row.chunk_id, "rule"),
                            rule_status=rule_of.get(row.chunk_id)))
    sp.views_by_stage[View.A3] = rows
    sp.final_selection_ids = [r.chunk_id for r in rows if r.status == "kept"]
    sp.extras.a3 = A3Record(kept=len(sp.final_selection_ids),
                            dropped=len(rows) - len(sp.final_selection_ids),
                            working_set=len(candidates), **log)
    return sp


def combine(candidates: list[ViewRow], rules: dict[str, Verdict], words: dict[str, ModelWord],
            acfg: A3Config, chunks: dict[str, Chunk],
            ) -> tuple[dict[str, Verdict], dict[str, DecidedBy], list[Judgment]]:
    """The gate's verdicts when the model spoke (see the module docstring): the rules' verdict
    stands unless the model agrees a weak candidate should go, or is confident enough to
    rescue one the rules drop as off-topic. Returns the verdicts, who decided each, and a
    ``Judgment`` per candidate the model judged."""
    best = bar(candidates, chunks)
    weak_floor = acfg.weak_relative * best
    out: dict[str, Verdict] = {}
    decided: dict[str, DecidedBy] = {}
    judgments: list[Judgment] = []
    for place, row in enumerate(candidates, start=1):
        cid = row.chunk_id
        status, reason, extra = rules[cid]
        word = words.get(cid)
        if word is None:
            out[cid] = (status, reason, extra)
            decided[cid] = "rule"
            continue
        p = word.probability
        extra = {**extra, **({"p_relevant": round(p, 4)} if p is not None else {})}
        model_weak = p <= acfg.llm_drop_max if p is not None else word.verdict == "dropped"
        why = ""
        final: RowStatus = status
        by: DecidedBy = "rule"
        if status == "kept":
            weak = row.score < weak_floor
            if weak and model_weak and place > acfg.protect_top_k:
                final, by = "dropped", "llm"
                reason = (f"off-topic: the model agrees it is weak: {word.said()}"
                          + (f" ≤ llm_drop_max {acfg.llm_drop_max:g}" if p is not None else "")
                          + f", score {row.score:.3f} < weak_relative {acfg.weak_relative:g} × "
                            f"best {best:.3f}")
                why = reason
            elif model_weak:
                held = (f"protected: among the first {acfg.protect_top_k} (protect_top_k)"
                        if place <= acfg.protect_top_k else
                        f"score {row.score:.3f} ≥ weak_relative {acfg.weak_relative:g} × best")
                reason = why = f"kept by rule, though the model doubts it ({word.said()}): {held}"
        elif reason.startswith("off-topic") and p is not None and p >= acfg.llm_rescue_min:
            final, by = "kept", "llm"
            reason = why = (f"rescued by the model: {word.said()} ≥ llm_rescue_min "
                            f"{acfg.llm_rescue_min:g} (the rules would drop it: {reason})")
        elif reason.startswith("off-topic"):
            why = (f"the model agrees ({word.said()})" if model_weak else
                   f"the model is not sure enough to rescue it ({word.said()}"
                   + (f" < llm_rescue_min {acfg.llm_rescue_min:g})" if p is not None else ")"))
            reason = f"{reason}; {why}"
        out[cid] = (final, reason, extra)
        decided[cid] = by
        judgments.append(Judgment(
            item=cid, rule=status, model=word.verdict, probability=p, final=final,
            decided_by=by, why=why or None))
    if rules and not any(v[0] == "kept" for v in out.values()) \
            and any(v[0] == "kept" for v in rules.values()):
        return rules, dict.fromkeys(rules, "rule"), judgments  # never empty what the rules fill
    return out, decided, judgments


def bar(candidates: list[ViewRow], chunks: dict[str, Chunk]) -> float:
    """The best score the relative thresholds measure against: the best document's. A
    remembered conversation turn holds the question it answered, so it can score far above
    every document for the same question again; it is weighed against the documents' bar and
    never sets it (the best turn's score counts only when no document is a candidate)."""
    documents = [r.score for r in candidates if not chunks[r.chunk_id].from_conversation]
    return max(documents or [r.score for r in candidates] or [0.0])


def _rule_gate(candidates: list[ViewRow], chunks: dict[str, Chunk], cfg: AppConfig) -> dict[str, Verdict]:
    acfg = cfg.agents.A3_NLI_Gate
    best = bar(candidates, chunks)
    floor = acfg.relative_min * best
    out: dict[str, Verdict] = {}
    kept_shingles: list[tuple[str, set]] = []
    cover = covering([chunks[r.chunk_id] for r in candidates],
                     cfg.settings.conversations.covered_share)
    for row in candidates:
        chunk = chunks[row.chunk_id]
        docs = cover.get(row.chunk_id, [])
        if docs and all(out.get(d, ("",))[0] == "kept" for d in docs):
            out[row.chunk_id] = ("dropped", f"duplicate of {', '.join(docs)}: a remembered turn "
                                            f"saying what the document{'s' if len(docs) > 1 else ''}"
                                            f" kept here say{'' if len(docs) > 1 else 's'}", {})
            continue
        if row.score < acfg.min_relevance:
            out[row.chunk_id] = ("dropped", f"off-topic: score {row.score:.3f} < min_relevance "
                                            f"{acfg.min_relevance:.3f}", {})
            continue
        if row.score < floor:
            out[row.chunk_id] = ("dropped", f"off-topic: score {row.score:.3f} < "
                                            f"{acfg.relative_min:g} × best {best:.3f} = {floor:.3f}", {})
            continue
        sh = shingles(chunk.text)
        duplicate = None
        for other_id, other in kept_shingles:
            sim = jaccard(sh, other)
            if sim >= acfg.duplicate_jaccard:
                duplicate = (other_id, sim)
                break
        if duplicate:
            other_id, sim = duplicate
            out[row.chunk_id] = ("dropped", f"duplicate of {other_id} (Jaccard {sim:.2f} ≥ "
                                            f"{acfg.duplicate_jaccard:.2f})",
                                 {"duplicate_jaccard": round(sim, 6)})
        else:
            kept_shingles.append((chunk.id, sh))
            out[row.chunk_id] = ("kept", "", {})
    return out


def _ask_model(agent: Agent, sp: SuperPrompt, candidates: list[ViewRow], chunks: dict[str, Chunk],
               cfg: AppConfig, services, log: dict) -> dict[str, ModelWord]:
    """The model's word on the first candidates: P(relevant) per candidate where the endpoint
    gives log-probabilities (and ``judge`` allows), else the compact drop list."""
    acfg = cfg.agents.A3_NLI_Gate
    if not candidates:
        return {}
    query = rerank_query(sp.body, sp.extras.body_sources)
    most = min(len(candidates), acfg.llm_max_candidates)
    lines = _evidence_lines(query, [chunks[r.chunk_id] for r in candidates[:most]], services,
                            acfg.llm_sentences, acfg.llm_chars)
    if acfg.judge != "list" and agent.llm.offers_logprobs() is not False:
        try:
            return _probabilities(agent, query, candidates[:most], lines, acfg, log)
        except NoLogprobsError as err:
            if acfg.judge == "probability":
                raise
            log["judge_note"] = f"list: {err}"
    return _drop_list(agent, query, candidates, lines, chunks, cfg, log)


def judge_messages(acfg: A3Config, query: str, passage: str) -> list[dict[str, str]]:
    """One yes/no call: the instructions and the prompt first (the same for every candidate,
    so the server reuses them), the passage last."""
    system = "\n\n".join(
        [f"You are {acfg.agent_name} ({acfg.version}), one stage of the RAGstream prompt "
         f"pipeline."] + [f"## {title}\n{text.strip()}" for title, text in acfg.judge_sections.items()])
    return [{"role": "system", "content": system},
            {"role": "user", "content": f"Question: {query[:acfg.llm_chars * 2]}\n\n"
                                        f"Passage: {passage}\n\n"
                                        "Is this passage relevant to the question (does it "
                                        "contain information a person asking the question "
                                        "needs)? Answer Yes or No."}]


def _probabilities(agent: Agent, query: str, sent: list[ViewRow], lines: list[str],
                   acfg: A3Config, log: dict) -> dict[str, ModelWord]:
    words: dict[str, ModelWord] = {}
    unjudged: list[str] = []
    for row, line in zip(sent, lines):
        passage = line.split(": ", 1)[1] if ": " in line else line
        try:
            p = agent.judge(judge_messages(acfg, query, passage), ("yes", "no"),
                            item=row.chunk_id)["yes"]
        except RunBudgetError:
            if not words:
                raise
            unjudged.append(row.chunk_id)
            continue
        except AgentOutputError:  # no Yes or No among the likeliest first tokens
            unjudged.append(row.chunk_id)
            continue
        words[row.chunk_id] = ModelWord("kept" if p >= 0.5 else "dropped", p)
    log.update(judge="probability", sent=len(sent), unjudged=unjudged or None)
    return words


def _drop_list(agent: Agent, query: str, candidates: list[ViewRow], lines: list[str],
               chunks: dict[str, Chunk], cfg: AppConfig, log: dict) -> dict[str, ModelWord]:
    acfg = cfg.agents.A3_NLI_Gate

    def payload(k: int) -> dict:
        return {"prompt": query[:acfg.llm_chars * 2], "candidates": lines[:k]}

    most = len(lines)
    body, sent = agent.fit(payload, most, schema=reply_schema)
    if not sent:
        raise PromptBudgetError(f"not one candidate fits A3's prompt budget of "
                                f"{agent.prompt_budget} tokens")
    answer: A3Output = agent.ask(body, reply_schema(sent),
                                 items=[r.chunk_id for r in candidates[:sent]]).value
    clamped: list[A3Clamp] = []
    unknown: list[int] = []
    words: dict[str, ModelWord] = {r.chunk_id: ModelWord("kept") for r in candidates[:sent]}
    for d in answer.drop:
        if not 1 <= d.n <= sent:
            unknown.append(d.n)
            continue
        tag = d.tag.strip().lower()
        if tag and tag not in TAGS:
            clamped.append(A3Clamp(n=d.n, field="tag", value=d.tag, clamped_to=""))
            tag = ""
        words[candidates[d.n - 1].chunk_id] = ModelWord("dropped", None, tag)
    log.update(judge="list", sent=sent, clamped=clamped, unknown_numbers=unknown)
    return words


def _evidence_lines(query: str, chunks: list[Chunk], services, per_chunk: int,
                    max_chars: int) -> list[str]:
    """``"n: sentence … sentence"`` for each chunk: its ``per_chunk`` sentences closest to
    the query, in reading order, cut at ``max_chars``."""
    evidence = evidence_for(chunks, services.index(), services.embedder)
    q = services.embedder.embed([query])[0]
    lines = []
    for n, ev in enumerate(evidence, start=1):
        if ev.sentences:
            sims = np.asarray(ev.sentence_vectors) @ q
            best = sorted(np.argsort(-sims, kind="stable")[:per_chunk].tolist())
            text = " … ".join(ev.sentences[i] for i in best)
        else:
            text = " ".join(chunks[n - 1].text.split())
        text = " ".join(text.split())
        lines.append(f"{n}: {text[:max_chars]}")
    return lines


def discard(sp: SuperPrompt) -> None:
    """Forget the gate's view, its facts and the selection it made."""
    sp.views_by_stage.pop(View.A3, None)
    sp.extras.a3 = None
    sp.final_selection_ids = []


STAGE = Stage(name=NAME, value="a3", label="A3 Gate", run=run, discard=discard, view=View.A3,
              reads=(staleness.AGENT,))
