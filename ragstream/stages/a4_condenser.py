"""A4_Condenser: condense the gated chunks into ``S_CTX_MD`` within a token budget, every
statement citing its chunk.

Deterministic mode — extractive, budgeted sentence selection with provenance:

1. Take every A3-kept chunk's evidence sentences (``text.evidence_units``: code blocks, table
   rows and headings skipped), those of at least ``min_sentence_words`` words.
2. Score each sentence by its cosine similarity to the prompt (task, purpose, context,
   format), from the sentence vectors computed at ingestion (fetched from the engine: only the
   prompt is embedded), plus its chunk's rank prior ``rank_weight / rank`` (rank in A3's
   order, i.e. the ReRanker's): a sentence of the best chunk beats an equally close one of
   the tenth.
3. Take sentences best score first while their cosine is at least ``min_sentence_score``,
   from the N3 best-ranked chunks that have one, at most ``max_sentences_per_chunk`` per
   chunk, none a near-repeat (word Jaccard ≥ ``redundancy_jaccard``) of one already taken.
   Then fit ``budget_tokens`` (tiktoken): drop the weakest sentence, but a chunk's last
   sentence only when that chunk is the lowest-ranked one left — no chunk is dropped for the
   budget while a chunk ranked below it stays.
4. Each becomes a ``Statement`` (text, fact or constraint — a sentence with a constraint cue
   word such as "must" or "at most" —, its chunk, its span in the chunk and its score), in
   order of score in ``extras.a4.condensed``: facts come in order of relevance. An open issue
   names prompt terms that none of the selected sources mention. ``S_CTX_MD`` is rendered
   from them (``render.render_condensed``), each statement citing its source as ``[n]``, n
   being the chunk's position in the new ``final_selection_ids``; the extractive answer
   takes its few best statements from the same list (``answer.extractive_statements``).

``final_selection_ids`` becomes the chunks that contributed (≤ N3), in A3 order.

LLM mode (``_llm_condense``): the model's judgment is weighed against the rules', never
trusted blindly. It never writes text: it is offered the best sentences, numbered, and replies
with the numbers of those that help, most useful first (and at most two open issues), so every
statement is still a sentence of its source, with its span. The extractive selection above is
computed too, and the statements are, in order:

1. the best sentence of each chunk the person pinned;
2. the extractive statements, best score first (when they do not all fit the share, the best
   of each chunk they cite first: ``coverage_first``, so the model cannot lose a source the
   rules keep), while their
   tokens fit ``rule_share`` × ``budget_tokens`` (``rule_share`` 0.5 by default: "kept by
   rule"), and the best sentence of the top chunk (A3's best-ranked kept chunk), always;
3. the model's chosen sentences not in yet, in its order, within the rest of the budget,
   (1 − ``rule_share``) × ``budget_tokens``, and N3 chunks.

Over ``budget_tokens``, the model's open issues and then its statements give way from the end;
the rules' statements only when the budget cannot hold them otherwise; the top chunk's and the
pinned chunks' best sentences never. ``rule_share`` 0 is the model's choice with the top
chunk's best sentence; 1 the extractive statements alone. Each candidate chunk's decision is
recorded with the rule's verdict (in the extractive selection or not), the model's (one of its
sentences chosen or not; none when none was offered) and what stood, with who decided
(``extras.judgments["A4_Condenser"]``); the view rows say who decided ("rule" for a chunk in
through the rules' share or the top chunk, "llm" for one only the model brought in, "you") and
the reason names the share ("kept by rule: within rule_share 0.5 of the 900-token budget",
"chosen by the model"); ``extras.a4`` records ``rule_share`` and how many statements each
decided (``statements_by``), which the page says beside A4's mode (``ui.views.a4_note``).

The person's edits: chunks pinned or added (and kept by A3) come first among the candidates
and in ``final_selection_ids`` (within N3), each with at least its best sentence (whatever its
score; the budget never drops it) or, with no prose sentence, for its text alone; their rows
say "pinned by you". Then the statement edits (``edits.apply_list``): a statement rewritten,
removed or moved; ``S_CTX_MD`` says what was changed by hand. A rewritten statement's words
are the person's (``Statement.edited``): ``S_CTX_MD`` lists it under "Your notes" ("Your
note: …") without a ``[n]``, and the answer never cites it (its chunk and span stay in the
record only so that the edit finds its statement again on the next run). Once A4 has
run, ``prompt_ready`` shows the condensed context under the System and Prompt blocks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pydantic import BaseModel

from ragstream.agents.base import record_mode, resolve_mode
from ragstream.agents.factory import Agent, PromptBudgetError, run_agent
from ragstream.agents.replies import Items, Text, bound
from ragstream.backends.llm import inline_schema
from ragstream.backends.reranker import evidence_for
from ragstream.backends.tokens import count_tokens
from ragstream.common.config import AppConfig
from ragstream.common.text import jaccard, words
from ragstream.stages import staleness
from ragstream.stages.stage import Stage
from ragstream.state import edits
from ragstream.state.records import A4Record, Judgment, Statement, StatementKind
from ragstream.state.render import (
    CONDENSED_EMPTY,
    CONDENSED_HEADER,
    build_query,
    preview,
    render_condensed,
    rerank_query,
)
from ragstream.state.super_prompt import DecidedBy, RowStatus, SuperPrompt, View, ViewRow

NAME = "A4_Condenser"
DIGITS = 6
EMPTY = CONDENSED_EMPTY


@dataclass
class Condensation:
    """What either mode produces: the statements and open issues, the surviving ids (the
    numbering of the citations), the view rows and what the mode has to say about its run
    (``A4Record`` fields); ``picked``: the statements' sentences (indices in the
    ``SentencePool``), in the statements' order."""

    statements: list[Statement]
    open_issues: list[str]
    selected: list[str]
    rows: list[ViewRow]
    info: dict[str, Any] = field(default_factory=dict)
    picked: list[int] = field(default_factory=list)


class A4Output(BaseModel):
    """The reply: the numbers of the sentences that help answer the prompt, most useful
    first, and what the prompt asks that the sentences do not answer: numbers, never text."""

    facts: Items(int, 64, "sentence numbers, most useful first")  # type: ignore[valid-type]
    open_issues: Items(Text(160), 2, "what the sentences leave unanswered")  # type: ignore[valid-type]


def _kind(sentence: str, cues: list[str]) -> StatementKind:
    folded = " " + " ".join(words(sentence)) + " "
    return "constraint" if any(f" {c} " in folded for c in cues) else "fact"


def _span(text: str, chunk_text: str) -> tuple[int, int] | None:
    start = chunk_text.find(text)
    return (start, start + len(text)) if start >= 0 else None


def run(sp: SuperPrompt, cfg: AppConfig, services) -> SuperPrompt:
    """Condense the A3-kept chunks (LLM or extractive) into ``S_CTX_MD`` and the A4 view; keep ids used."""
    acfg = cfg.agents.A4_Condenser
    enc = cfg.settings.chunking.encoding
    chunk_edits = edits.chunk_edits(sp.edits)
    candidates, pinned = pinned_first(list(sp.final_selection_ids), chunk_edits,
                                      cfg.limits.N3_FINAL_SELECTION_MAX)
    if not candidates:
        llm = getattr(services, "llm", None)
        record_mode(sp, NAME, resolve_mode(acfg, cfg, llm_available=llm is not None))
        result = Condensation([], [], [], [])
    else:
        result = run_agent(
            sp, NAME, cfg, services,
            llm_path=lambda agent: _llm_condense(agent, sp, candidates, cfg, services, pinned),
            deterministic_path=lambda: _extractive(sp, candidates, cfg, services, pinned),
            output=A4Output,
        )
    statements, done = edits.apply_list(
        sp, NAME, result.statements, key=edits.statement_key,
        rewrite=lambda st, text: st.model_copy(update={"text": " ".join(text.split()),
                                                       "edited": True}),
        make=lambda text: Statement(text=text, kind="fact", chunk_ids=[], edited=True),
        noun="statement")
    changed = done.summary("statement")
    sp.S_CTX_MD = render_condensed(statements, result.open_issues, result.selected, changed)
    sp.views_by_stage[View.A4] = result.rows
    sp.final_selection_ids = result.selected
    sp.extras.a4 = A4Record(budget_tokens=acfg.budget_tokens,
                            used_tokens=count_tokens(sp.S_CTX_MD, enc),
                            statements=len(statements), condensed=statements,
                            open_issues=result.open_issues, edited=changed or None, **result.info)
    _note_pins(sp, chunk_edits, pinned, result.selected, cfg.limits.N3_FINAL_SELECTION_MAX)
    sp.prompt_ready = preview(sp)
    return sp


def pinned_first(candidates: list[str], chunk_edits: edits.ChunkEdits,
                 n3: int) -> tuple[list[str], int]:
    """The candidates with the ones the person pinned or added first (in A3's order; at most
    N3 of them), and how many those are."""
    kept_by_you = set(chunk_edits.kept)
    pinned = [c for c in candidates if c in kept_by_you][:n3]
    return pinned + [c for c in candidates if c not in pinned], len(pinned)


def _note_pins(sp: SuperPrompt, chunk_edits: edits.ChunkEdits, pinned: int,
               selected: list[str], n3: int) -> None:
    for cid in chunk_edits.kept:
        edit = chunk_edits.by_id[cid]
        if cid in selected:
            edits.note(sp, NAME, edit, True, f"in the final selection as source "
                                             f"[{selected.index(cid) + 1}]")
        elif cid in sp.kept_ids(View.A3):
            edits.note(sp, NAME, edit, False, f"not applied: {pinned} pinned chunks fill "
                                              f"N3_FINAL_SELECTION_MAX={n3}")


@dataclass
class SentencePool:
    """Every evidence sentence of the candidate chunks, scored against the prompt: the
    sentences, their spans, cosines and scores (cosine plus the chunk's rank prior), in the
    order they are taken (best score first; ties: chunk order, then sentence order)."""

    flat: list[tuple[int, int, str]]  # (chunk index, sentence index, sentence)
    spans: list[tuple[int, int]]
    sims: np.ndarray
    scores: np.ndarray
    order: list[int]
    units: dict[str, list[str]]

    def best_of(self, chunk: int) -> int | None:
        """The best-scoring sentence of candidate ``chunk`` (its index in ``flat``), or None
        when the chunk has no sentence in the pool."""
        return next((i for i in self.order if self.flat[i][0] == chunk), None)


def rank_prior(chunk_index: np.ndarray, weight: float) -> np.ndarray:
    """What a sentence's chunk rank adds to its score: ``weight / rank`` (rank 1 = the
    ReRanker's best chunk that A3 kept), so the best chunks' sentences come first among
    sentences about as close to the prompt."""
    return weight / (np.asarray(chunk_index, dtype=np.float64) + 1.0)


def sentence_pool(sp: SuperPrompt, candidates: list[str], cfg: AppConfig, services) -> SentencePool:
    """The candidates' sentences of at least ``min_sentence_words`` words, scored by cosine to
    the prompt from the vectors computed at ingestion (only the prompt is embedded, and
    usually found in the embedder's cache after the ReRanker) plus their chunk's rank prior."""
    acfg = cfg.agents.A4_Condenser
    chunks = sp.chunk_map()
    query = rerank_query(sp.body, sp.extras.body_sources)
    evidence = evidence_for([chunks[c] for c in candidates], services.index(), services.embedder)
    units: dict[str, list[str]] = {}
    flat: list[tuple[int, int, str]] = []
    spans: list[tuple[int, int]] = []
    vecs: list[np.ndarray] = []
    for ci, (cid, ev) in enumerate(zip(candidates, evidence)):
        keep = [k for k, s in enumerate(ev.sentences) if len(s.split()) >= acfg.min_sentence_words]
        units[cid] = [ev.sentences[k] for k in keep]
        flat.extend((ci, si, ev.sentences[k]) for si, k in enumerate(keep))
        spans.extend(ev.spans[k] for k in keep)
        vecs.extend(ev.sentence_vectors[k] for k in keep)
    q = services.embedder.embed([query])[0]
    sims = np.round(np.vstack(vecs) @ q, DIGITS) if flat else np.zeros(0)
    scores = np.round(sims + rank_prior(np.array([f[0] for f in flat]), acfg.rank_weight), DIGITS)
    order = sorted(range(len(flat)), key=lambda i: (-float(scores[i]), flat[i][0], flat[i][1]))
    return SentencePool(flat, spans, sims, scores, order, units)


def _extractive(sp: SuperPrompt, candidates: list[str], cfg: AppConfig, services,
                pinned: int = 0, pool: SentencePool | None = None) -> Condensation:
    """Deterministic mode: the best sentences by score, then trimmed to the token budget with
    the lowest-ranked chunks giving way first; statements in order of score. The first
    ``pinned`` candidates are the person's: each keeps its best sentence and its place.
    ``pool``: the candidates' sentences when already scored (LLM mode)."""
    acfg = cfg.agents.A4_Condenser
    enc = cfg.settings.chunking.encoding
    chunks = sp.chunk_map()
    pool = pool if pool is not None else sentence_pool(sp, candidates, cfg, services)
    flat, sims, scores = pool.flat, pool.sims, pool.scores
    chunk_edits = edits.chunk_edits(sp.edits)

    # 1. best score first: enough cosine, at most max_sentences_per_chunk per chunk and N3
    #    chunks, no near-repeat of a sentence already taken
    #    (the N3 chunks ranked highest among those with a sentence close enough; the pinned
    #    ones first, each with its best sentence whatever it scores)
    eligible = sorted({flat[i][0] for i in pool.order if sims[i] >= acfg.min_sentence_score})
    n3 = cfg.limits.N3_FINAL_SELECTION_MAX
    allowed = set(range(pinned)) | set([ci for ci in eligible if ci >= pinned][:n3 - pinned])
    taken: list[int] = []
    per_chunk: dict[int, int] = {}
    taken_words: list[set[str]] = []
    protected: set[int] = set()
    for ci in range(pinned):
        best_i = pool.best_of(ci)
        if best_i is not None:
            taken.append(best_i)
            taken_words.append(set(words(flat[best_i][2])))
            per_chunk[ci] = 1
            protected.add(best_i)
    for i in pool.order:
        ci, _si, s = flat[i]
        if i in protected:
            continue
        if sims[i] < acfg.min_sentence_score or ci not in allowed:
            continue
        if per_chunk.get(ci, 0) >= acfg.max_sentences_per_chunk:
            continue
        ws = set(words(s))
        if any(jaccard(ws, o) >= acfg.redundancy_jaccard for o in taken_words):
            continue
        taken.append(i)
        taken_words.append(ws)
        per_chunk[ci] = per_chunk.get(ci, 0) + 1

    # 2. over the budget: drop the weakest sentence, but a chunk's last sentence only when the
    #    chunk is the lowest-ranked one left, so no chunk is dropped for the budget while a
    #    chunk ranked below it stays
    def weakest() -> int | None:
        """The sentence the budget drops next; None when only the person's are left."""
        lowest = max(per_chunk)
        return min((i for i in taken if i not in protected
                    and (per_chunk[flat[i][0]] > 1 or flat[i][0] == lowest)),
                   key=lambda i: (float(scores[i]), -i), default=None)

    budget_dropped: set[int] = set()

    def remove(i: int) -> None:
        taken.remove(i)
        ci = flat[i][0]
        per_chunk[ci] -= 1
        if not per_chunk[ci]:
            del per_chunk[ci]
            budget_dropped.add(ci)

    def by_score(picked: list[int]) -> list[int]:
        return sorted(picked, key=lambda i: (-float(scores[i]), flat[i][0], flat[i][1]))

    def statements_of(picked: list[int]) -> list[Statement]:
        return [_statement(pool, i, candidates, acfg.constraint_cues) for i in by_score(picked)]

    head = count_tokens(CONDENSED_HEADER + "\n### Facts\n\n### Constraints\n", enc)
    cost = {i: count_tokens(f"- {flat[i][2]} [{len(candidates)}]\n", enc) for i in taken}
    while taken and head + sum(cost[i] for i in taken) > acfg.budget_tokens:
        if (drop := weakest()) is None:
            break
        remove(drop)

    missing: list[str] = []
    while True:
        selected = [cid for ci, cid in enumerate(candidates) if ci in per_chunk or ci < pinned]
        missing = _uncovered_terms(build_query(sp.body), [chunks[c].text for c in selected], services,
                                   set(acfg.uncovered_ignore))
        statements = statements_of(taken)
        # the open issue is said only beside statements, and when it fits in the budget
        issues = ([f"The selected sources do not mention: {', '.join(missing)}."]
                  if missing and statements else [])
        used = count_tokens(render_condensed(statements, issues, selected), enc)
        if issues and used > acfg.budget_tokens:
            issues = []
            used = count_tokens(render_condensed(statements, issues, selected), enc)
        if used <= acfg.budget_tokens or not taken or (drop := weakest()) is None:
            break
        # token counts of parts and of the whole can differ by a few
        remove(drop)
    number = {cid: n for n, cid in enumerate(selected, start=1)}

    best: dict[int, float] = {}
    for i in taken:
        ci = flat[i][0]
        best[ci] = max(best.get(ci, -1.0), float(sims[i]))
    rows: list[ViewRow] = []
    for ci, cid in enumerate(candidates):
        top = max((float(sims[i]) for i in range(len(flat)) if flat[i][0] == ci), default=0.0)
        if ci < pinned:
            said = "" if ci in per_chunk else " (no prose sentence: in the selection for its text)"
            row = ViewRow(chunk_id=cid, rank=len(rows) + 1, score=round(best.get(ci, top), DIGITS),
                          scores={"best_sentence": round(best.get(ci, top), DIGITS),
                                  "sentences": float(per_chunk.get(ci, 0)),
                                  "citation": float(number[cid])},
                          reason=chunk_edits.reason(cid) + said, decided_by="you")
        elif ci in per_chunk:
            row = ViewRow(chunk_id=cid, rank=len(rows) + 1, score=round(best[ci], DIGITS),
                          scores={"best_sentence": round(best[ci], DIGITS),
                                  "sentences": float(per_chunk[ci]), "citation": float(number[cid])})
        else:
            if not pool.units[cid]:
                reason = "no prose sentence to extract (code, table or fragments only)"
            elif top < acfg.min_sentence_score:
                reason = (f"no sentence scored ≥ min_sentence_score {acfg.min_sentence_score:g} "
                          f"(best {top:.3f})")
            elif ci in budget_dropped:
                reason = (f"token budget of {acfg.budget_tokens} used up: the lowest-ranked "
                          "chunks give way first")
            elif ci not in allowed:
                reason = f"over N3_FINAL_SELECTION_MAX={cfg.limits.N3_FINAL_SELECTION_MAX}"
            else:
                reason = "its sentences repeat ones already selected"
            row = ViewRow(chunk_id=cid, rank=len(rows) + 1, score=round(top, DIGITS),
                          scores={"best_sentence": round(top, DIGITS)}, status="dropped", reason=reason)
        rows.append(row)
    return Condensation(statements, issues, selected, rows, {"uncovered_terms": missing},
                        by_score(taken))


def _statement(pool: SentencePool, i: int, candidates: list[str], cues: list[str],
               scored: bool = True) -> Statement:
    """Sentence ``i`` of the pool as a statement: its text, kind, chunk, span and (when
    ``scored``) its score; LLM mode leaves the score out, so that the order it chose stands
    (``answer.extractive_statements`` sorts scored statements)."""
    ci, _si, text = pool.flat[i]
    return Statement(text=text, kind=_kind(text, cues), chunk_ids=[candidates[ci]],
                     span=pool.spans[i],
                     score=round(float(pool.scores[i]), DIGITS) if scored else None)


def _uncovered_terms(query: str, texts: list[str], services, ignore: set[str]) -> list[str]:
    """Prompt words (as typed) whose stem appears in none of ``texts`` (``ignore``d words and
    stop words aside)."""
    kw = services.keyword_index
    covered = set().union(*(kw.terms(t) for t in texts)) if texts else set()
    out: list[str] = []
    seen: set[str] = set()
    for w in re.findall(r"\w[\w-]*", query):
        stems = kw.terms(w)
        if w.lower() in ignore:
            continue
        if stems and not (stems & covered) and w.lower() not in seen:
            seen.add(w.lower())
            out.append(w)
    return out


# --------------------------------------------------------------------------- LLM mode


def _offered(pool: SentencePool, cfg: AppConfig) -> list[int]:
    """The sentences offered to the model, best score first: those the extractive mode would
    consider (score at least ``min_sentence_score``, not a near-repeat, at most
    ``max_sentences_per_chunk`` per chunk and N3 chunks), at most ``llm_max_sentences``."""
    acfg = cfg.agents.A4_Condenser
    offered: list[int] = []
    per_chunk: dict[int, int] = {}
    taken_words: list[set[str]] = []
    for i in pool.order:
        ci, _si, s = pool.flat[i]
        if len(offered) >= acfg.llm_max_sentences:
            break
        if pool.sims[i] < acfg.min_sentence_score:
            continue
        if per_chunk.get(ci, 0) >= acfg.max_sentences_per_chunk:
            continue
        if ci not in per_chunk and len(per_chunk) >= cfg.limits.N3_FINAL_SELECTION_MAX:
            continue
        ws = set(words(s))
        if any(jaccard(ws, o) >= acfg.redundancy_jaccard for o in taken_words):
            continue
        offered.append(i)
        taken_words.append(ws)
        per_chunk[ci] = per_chunk.get(ci, 0) + 1
    return offered


def _llm_condense(agent: Agent, sp: SuperPrompt, candidates: list[str], cfg: AppConfig,
                  services, pinned: int = 0) -> Condensation:
    """LLM mode (a compact contract): the model chooses, by number, which of the best
    sentences answer the prompt, most useful first, and names open issues; its choice is
    weighed against the rules' (``_extractive``), which keep their share of the budget.

    Sent: the prompt and the sentences the extractive mode would consider first (``_offered``),
    as many as fit the prompt budget, each as ``"n [source]: sentence"``. The reply holds
    numbers and at most two short open issues: the model never writes a statement, so every
    statement is a sentence of its source, with its span (and no score: the order below
    stands).

    The statements, in this order:

    1. the best sentence of each chunk the person pinned (the first ``pinned`` candidates),
       whatever the model chose;
    2. the deterministic selection's statements, best score first (when they do not all fit
       the share, the best of each chunk it selected first, so that the model cannot lose a
       source the rules keep), while their tokens fit ``rule_share`` × ``budget_tokens``
       ("kept by rule"), and the best sentence of the top chunk (A3's best-ranked kept
       chunk) always: where the rules put it within their share, else where the model put
       it, else first of this part;
    3. the sentences the model chose that are not in yet, in the model's order, while they
       fit the rest of the budget, (1 − ``rule_share``) × ``budget_tokens``, and N3 chunks.

    Then ``S_CTX_MD`` is held to ``budget_tokens``: the model's open issues give way first,
    then its statements from the end, then (only in the rare case that is not enough) the
    rules' from the end; the top chunk's and the pinned chunks' best sentences never.
    ``rule_share`` 0 is the model's choice (with the top chunk's best sentence); 1 the rules'.
    Every candidate chunk's decision is recorded with the rule's and the model's verdicts
    beside it (``extras.judgments["A4_Condenser"]``), and its view row says who decided.
    """
    acfg = cfg.agents.A4_Condenser
    enc = cfg.settings.chunking.encoding
    n3 = cfg.limits.N3_FINAL_SELECTION_MAX
    budget, share = acfg.budget_tokens, acfg.rule_share
    pool = sentence_pool(sp, candidates, cfg, services)
    flat = pool.flat
    offered = _offered(pool, cfg)
    if not offered:
        raise PromptBudgetError("no sentence of the kept chunks scores min_sentence_score "
                                f"{acfg.min_sentence_score:g}: nothing to choose from")
    used_chunks = {pool.flat[i][0] for i in offered}
    source_no = {ci: n for n, ci in enumerate(sorted(used_chunks), start=1)}
    lines = [f"{k}: [{source_no[flat[i][0]]}] {flat[i][2]}" for k, i in enumerate(offered, start=1)]
    query = rerank_query(sp.body, sp.extras.body_sources)

    def payload(k: int) -> dict:
        return {"prompt": query[:600], "sentences": lines[:k]}

    def schema(k: int) -> dict:
        return bound(inline_schema(A4Output.model_json_schema()), {
            "facts": {"maxItems": min(k, acfg.llm_max_facts)},
            "facts[]": {"minimum": 1, "maximum": k},
        })

    body, sent = agent.fit(payload, len(offered), schema=schema)
    if not sent:
        raise PromptBudgetError(f"not one sentence fits A4's prompt budget of "
                                f"{agent.prompt_budget} tokens")
    keys = [f"{candidates[flat[i][0]]}#{pool.spans[i][0]}-{pool.spans[i][1]}" for i in offered[:sent]]
    out: A4Output = agent.ask(body, schema(sent), items=keys).value
    invalid = sorted({n for n in out.facts if not 1 <= n <= sent})
    chosen = list(dict.fromkeys(offered[n - 1] for n in out.facts if 1 <= n <= sent))
    rules = _extractive(sp, candidates, cfg, services, pinned, pool)
    cost = {i: count_tokens(f"- {flat[i][2]} [{len(candidates)}]\n", enc)
            for i in set(rules.picked) | set(chosen)}

    # 1. the person's: each pinned chunk's best sentence
    person = [b for ci in range(pinned) if (b := pool.best_of(ci)) is not None]
    in_chunks = set(range(pinned))
    # 2. the rules' share, and the top chunk's best sentence (when N3 leaves it room)
    top = candidates.index(sp.final_selection_ids[0]) if sp.final_selection_ids else 0
    top_best = pool.best_of(top) if top < pinned or pinned < n3 else None
    if top_best is not None:
        in_chunks.add(flat[top_best][0])
    by_rule: list[int] = []
    by_share: set[int] = set()
    used, full = 0, False
    fits = sum(cost[i] for i in rules.picked if i not in person) <= share * budget
    for i in rules.picked if fits else coverage_first(rules.picked, flat):
        if i in person:
            continue
        ci = flat[i][0]
        full = full or used + cost[i] > share * budget
        if not full and (ci in in_chunks or len(in_chunks) < n3):
            by_rule.append(i)
            by_share.add(i)
            used += cost[i]
            in_chunks.add(ci)
    if top_best is not None and top_best not in person + by_rule + chosen:
        by_rule.insert(0, top_best)
    # 3. the model's choice, in its order, within its share of the budget and N3 (the top
    #    chunk's best sentence, when the model chose it, keeps its place and is never cut)
    by_model: list[int] = []
    cut_n3: set[int] = set()
    for i in chosen:
        ci = flat[i][0]
        if i in person or i in by_rule:
            continue
        if ci not in in_chunks and len(in_chunks) >= n3:
            cut_n3.add(ci)
            continue
        by_model.append(i)
        in_chunks.add(ci)
    cut: list[int] = []
    cut_rule: list[int] = []

    def cut_model() -> bool:
        """Cut the model's last statement (not the top chunk's best sentence), if any."""
        spare = [i for i in by_model if i != top_best]
        if spare:
            by_model.remove(spare[-1])
            cut.append(spare[-1])
        return bool(spare)

    while sum(cost[i] for i in by_model if i != top_best) > (1 - share) * budget:
        cut_model()
    issues = [" ".join(t.split()) for t in out.open_issues if t.strip()]
    trimmed = len(cut)
    while True:
        picked = person + by_rule + by_model
        statements = [_statement(pool, i, candidates, acfg.constraint_cues, scored=False)
                      for i in picked]
        selected = [c for ci, c in enumerate(candidates)
                    if ci < pinned or any(flat[i][0] == ci for i in picked)]
        if count_tokens(render_condensed(statements, issues, selected), enc) <= budget:
            break
        spare = [i for i in by_rule if i != top_best]
        if issues:
            issues.pop()
        elif cut_model():
            pass
        elif spare:
            by_rule.remove(spare[-1])
            cut_rule.append(spare[-1])
        else:  # only the top chunk's and the person's best sentences are left
            break
        trimmed += 1

    rows, judgments = _llm_decisions(sp, candidates, pool, rules, cfg, pinned=pinned,
                                     offered=offered[:sent], chosen=chosen, picked=picked,
                                     selected=selected, by_share=by_share, top_best=top_best,
                                     cut=set(cut), cut_rule=set(cut_rule), cut_n3=cut_n3)
    sp.extras.judgments[NAME] = judgments
    return Condensation(statements, issues if statements else [], selected, rows, {
        "invalid_citations": invalid,
        "trimmed_for_budget": trimmed,
        "rule_share": share,
        "statements_by": {"rule": len(by_rule) + (top_best in by_model),
                          "llm": len(by_model) - (top_best in by_model),
                          **({"you": len(person)} if pinned else {})},
    }, picked)


def _llm_decisions(sp: SuperPrompt, candidates: list[str], pool: SentencePool,
                   rules: Condensation, cfg: AppConfig, *, pinned: int, offered: list[int],
                   chosen: list[int], picked: list[int], selected: list[str], by_share: set[int],
                   top_best: int | None, cut: set[int], cut_rule: set[int],
                   cut_n3: set[int]) -> tuple[list[ViewRow], list[Judgment]]:
    """LLM mode's view rows and judgments, one per candidate chunk: the rules' verdict (in the
    extractive selection or not), the model's (it chose one of the chunk's sentences, or
    none; None when none was offered to it), what stood and who decided. A row says
    ``rule`` when the chunk is in through the rules' share (or is the top chunk), ``llm`` when
    only the model brought it in, ``you`` when pinned; a judgment ``rule`` when what stood is
    the rules' verdict."""
    acfg = cfg.agents.A4_Condenser
    n3 = cfg.limits.N3_FINAL_SELECTION_MAX
    budget, share = acfg.budget_tokens, acfg.rule_share
    flat = pool.flat
    chunk_edits = edits.chunk_edits(sp.edits)
    number = {c: n for n, c in enumerate(selected, start=1)}
    ruled = {r.chunk_id: r.reason for r in rules.rows}
    sent_to_model = {flat[i][0] for i in offered}
    model_chose = {flat[i][0] for i in chosen}
    rule_kept = set(rules.selected)
    in_share = f"rule_share {share:g} of the {budget}-token budget"
    rows: list[ViewRow] = []
    judgments: list[Judgment] = []
    for ci, cid in enumerate(candidates):
        mine = [i for i in picked if flat[i][0] == ci]
        rule: RowStatus = "kept" if cid in rule_kept else "dropped"
        model = None if ci not in sent_to_model else "kept" if ci in model_chose else "dropped"
        final: RowStatus = "kept" if cid in number else "dropped"
        why_model = ("the model chose it too" if model == "kept" else
                     "the model did not choose it" if model == "dropped" else
                     "none of its sentences was sent to the model")
        row_by: DecidedBy
        judged_by: DecidedBy
        if ci < pinned:
            row_by = judged_by = "you"
            reason = chunk_edits.reason(cid) + ("" if mine else
                                                " (no prose sentence: in the selection for its text)")
        elif final == "kept":
            if any(i in by_share for i in mine):
                row_by, reason = "rule", f"kept by rule: within {in_share}; {why_model}"
            elif top_best in mine:
                row_by, reason = "rule", f"the top chunk: its best sentence is always in; {why_model}"
            else:
                row_by, reason = "llm", "chosen by the model" + (
                    f" (the rules kept it too, beyond {in_share})" if rule == "kept" else "")
            judged_by = "rule" if rule == final or row_by == "rule" else "llm"
        else:
            if ci in cut_n3:
                reason = f"chosen by the model, but over N3_FINAL_SELECTION_MAX={n3}"
            elif any(flat[i][0] == ci for i in cut):
                reason = (f"chosen by the model, but cut to fit the {budget}-token budget "
                          f"(the model's choice gets {1 - share:g} of it)")
            elif any(flat[i][0] == ci for i in cut_rule):
                reason = f"kept by rule, but cut to fit the {budget}-token budget"
            elif rule == "kept":
                reason = f"kept by the rules, but beyond {in_share}; {why_model}"
            else:
                reason = f"by rule: {ruled.get(cid) or 'not selected'}; {why_model}"
            row_by = judged_by = "rule" if rule == final else "llm"
        sims = [float(pool.sims[i]) for i in (mine or range(len(flat))) if flat[i][0] == ci]
        best = round(max(sims, default=0.0), DIGITS)
        scores = {"best_sentence": best}
        if final == "kept":
            scores |= {"sentences": float(len(mine)), "citation": float(number[cid])}
        rows.append(ViewRow(chunk_id=cid, rank=len(rows) + 1, score=best, scores=scores,
                            status=final, reason=reason, decided_by=row_by))
        judgments.append(Judgment(item=cid, rule=rule, model=model, final=final,
                                  decided_by=judged_by, why=reason))
    return rows, judgments


def coverage_first(picked: list[int], flat: list[tuple[int, int, str]]) -> list[int]:
    """The rules' statements (best score first) reordered so that each chunk's best comes
    before any chunk's second: within the rules' share of the budget every chunk the rules
    selected keeps a sentence, and with it its place in the final selection."""
    best: dict[int, int] = {}  # chunk → its first (best) statement
    for i in picked:
        best.setdefault(flat[i][0], i)
    firsts = list(best.values())
    return firsts + [i for i in picked if i not in firsts]


def discard(sp: SuperPrompt) -> None:
    """Forget the condensed context and its view; the selection goes back to what A3 kept."""
    sp.views_by_stage.pop(View.A4, None)
    sp.extras.a4 = None
    sp.final_selection_ids = sp.kept_ids(View.A3)
    sp.S_CTX_MD = ""
    sp.prompt_ready = preview(sp)


STAGE = Stage(name=NAME, value="a4", label="A4 Condenser", run=run, discard=discard,
              view=View.A4,
              reads=(staleness.AGENT, "limits.N3_FINAL_SELECTION_MAX",
                     "settings.chunking.encoding"))
