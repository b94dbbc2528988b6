"""A4_Condenser: condense the gated chunks into ``S_CTX_MD`` within a token budget
(seed 001 §5.6).

Deterministic mode — extractive, budgeted sentence selection with provenance:

1. Split every A3-kept chunk into sentences (code blocks, table rows and fragments shorter
   than ``min_sentence_words`` are skipped).
2. Score each sentence by cosine similarity to the prompt (task, purpose, context, format).
3. Take sentences best-first (ties: chunk order, then sentence order) while they score at
   least ``min_sentence_score``, a chunk gives at most ``max_sentences_per_chunk``, at most
   N3 chunks contribute, a sentence is not a near-repeat (word Jaccard ≥
   ``redundancy_jaccard``) of one already taken, and the whole ``S_CTX_MD`` stays within
   ``budget_tokens`` (tiktoken).
4. Render them in reading order under Facts / Constraints (a sentence with a constraint cue
   word such as "must" or "at most"), each citing its source as ``[n]``; n is the chunk's
   position in the new ``final_selection_ids``. An "Open issues" list names prompt terms
   that none of the selected sources mention.

``final_selection_ids`` becomes the chunks that contributed (≤ N3), in A3 order.
"""

from __future__ import annotations

import re

import numpy as np

from ragstream.agents.base import record_mode, resolve_mode
from ragstream.backends.tokens import count_tokens
from ragstream.config import AppConfig
from ragstream.render import rerank_query
from ragstream.stages.retrieval import build_query
from ragstream.super_prompt import SuperPrompt, ViewRow
from ragstream.text import sentences, words

NAME = "A4_Condenser"
NAME_VIEW = "a4"
DIGITS = 6
HEADER = "## Condensed context\n"
EMPTY = HEADER + "\n_No retrieved chunk passed the A3 gate, so no context can ground the answer._\n"
_LIST_MARK = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
_FENCED = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.S | re.M)  # code is quoted, not condensed


def _clean(sentence: str) -> str:
    """One line of prose: list markers and Markdown emphasis removed, whitespace collapsed."""
    lines = [_LIST_MARK.sub("", ln).strip() for ln in sentence.splitlines()]
    return re.sub(r"\s+", " ", " ".join(ln for ln in lines if ln)).replace("**", "").strip()


def _units(text: str, min_words: int) -> list[str]:
    out = []
    for s in sentences(_FENCED.sub("\n\n", text)):
        if s.startswith(("```", "~~~", "|", "#")) or "```" in s:
            continue
        s = _clean(s)
        if len(s.split()) >= min_words:
            out.append(s)
    return out


def _is_constraint(sentence: str, cues: list[str]) -> bool:
    folded = " " + " ".join(words(sentence)) + " "
    return any(f" {c} " in folded for c in cues)


def run(sp: SuperPrompt, cfg: AppConfig, services) -> SuperPrompt:
    acfg = cfg.agents.A4_Condenser
    enc = cfg.settings.chunking.encoding
    decision = resolve_mode(acfg, cfg, llm_available=bool(services and services.llm_available))
    record_mode(sp, NAME, decision)
    candidates = list(sp.final_selection_ids)
    if not candidates:
        sp.S_CTX_MD = EMPTY
        sp.views_by_stage[NAME_VIEW] = []
        sp.extras["a4"] = {"budget_tokens": acfg.budget_tokens,
                           "used_tokens": count_tokens(EMPTY, enc), "sentences": 0}
        return sp

    chunks = sp.chunk_map()
    query = rerank_query(sp.body, sp.extras.get("body_sources"))
    units = {cid: _units(chunks[cid].text, acfg.min_sentence_words) for cid in candidates}
    flat = [(ci, si, s) for ci, cid in enumerate(candidates) for si, s in enumerate(units[cid])]
    vecs = services.embedder.embed([query] + [s for _, _, s in flat])
    sims = (vecs[1:] @ vecs[0]) if flat else np.zeros(0)
    pool = sorted(range(len(flat)), key=lambda i: (-round(float(sims[i]), DIGITS), flat[i][0], flat[i][1]))

    used = count_tokens(HEADER + "\n### Facts\n\n### Constraints\n", enc)
    taken: list[int] = []
    per_chunk: dict[int, int] = {}
    taken_words: list[set[str]] = []
    budget_hit = False
    for i in pool:
        ci, _si, s = flat[i]
        if sims[i] < acfg.min_sentence_score:
            break
        if per_chunk.get(ci, 0) >= acfg.max_sentences_per_chunk:
            continue
        if ci not in per_chunk and len(per_chunk) >= cfg.limits.N3_FINAL_SELECTION_MAX:
            continue
        ws = set(words(s))
        if any(len(ws & o) / max(1, len(ws | o)) >= acfg.redundancy_jaccard for o in taken_words):
            continue
        cost = count_tokens(f"- {s} [{len(candidates)}]\n", enc)
        if used + cost > acfg.budget_tokens:
            budget_hit = True
            continue
        used += cost
        taken.append(i)
        taken_words.append(ws)
        per_chunk[ci] = per_chunk.get(ci, 0) + 1

    missing: list[str] = []
    while True:
        selected = [cid for ci, cid in enumerate(candidates) if ci in per_chunk]
        missing = _uncovered_terms(build_query(sp.body), [chunks[c].text for c in selected], services)
        sp.S_CTX_MD = _render(taken, flat, candidates, selected, missing, acfg, enc)
        if count_tokens(sp.S_CTX_MD, enc) <= acfg.budget_tokens or not taken:
            break
        # token counts of parts and of the whole can differ by a few: drop the weakest sentence
        weakest = min(taken, key=lambda i: (round(float(sims[i]), DIGITS), -i))
        taken.remove(weakest)
        ci = flat[weakest][0]
        per_chunk[ci] -= 1
        if not per_chunk[ci]:
            del per_chunk[ci]
        budget_hit = True
    number = {cid: n for n, cid in enumerate(selected, start=1)}

    best = {}
    for i in taken:
        ci = flat[i][0]
        best[ci] = max(best.get(ci, -1.0), float(sims[i]))
    rows = []
    for ci, cid in enumerate(candidates):
        top = max((float(sims[i]) for i in range(len(flat)) if flat[i][0] == ci), default=0.0)
        if ci in per_chunk:
            row = ViewRow(chunk_id=cid, rank=len(rows) + 1, score=round(best[ci], DIGITS),
                          scores={"best_sentence": round(best[ci], DIGITS),
                                  "sentences": float(per_chunk[ci]), "citation": float(number[cid])})
        else:
            if not units[cid]:
                reason = "no prose sentence to extract (code, table or fragments only)"
            elif top < acfg.min_sentence_score:
                reason = f"no sentence scored ≥ min_sentence_score {acfg.min_sentence_score:g} (best {top:.3f})"
            elif len(per_chunk) >= cfg.limits.N3_FINAL_SELECTION_MAX:
                reason = f"over N3_FINAL_SELECTION_MAX={cfg.limits.N3_FINAL_SELECTION_MAX}"
            elif budget_hit:
                reason = f"token budget of {acfg.budget_tokens} used up by better sentences"
            else:
                reason = "its sentences repeat ones already selected"
            row = ViewRow(chunk_id=cid, rank=len(rows) + 1, score=round(top, DIGITS),
                          scores={"best_sentence": round(top, DIGITS)}, status="dropped", reason=reason)
        rows.append(row)
    sp.views_by_stage[NAME_VIEW] = rows
    sp.final_selection_ids = selected
    sp.extras["a4"] = {
        "budget_tokens": acfg.budget_tokens,
        "used_tokens": count_tokens(sp.S_CTX_MD, enc),
        "sentences": len(taken),
        "uncovered_terms": missing,
    }
    return sp


def _uncovered_terms(query: str, texts: list[str], services) -> list[str]:
    """Prompt words (as typed) whose stem appears in none of ``texts``."""
    kw = services.keyword_index
    covered = set().union(*(kw.terms(t) for t in texts)) if texts else set()
    out: list[str] = []
    seen: set[str] = set()
    for w in re.findall(r"\w[\w-]*", query):
        stems = kw.terms(w)
        if stems and not (stems & covered) and w.lower() not in seen:
            seen.add(w.lower())
            out.append(w)
    return out


def _render(taken, flat, candidates, selected, missing, acfg, enc) -> str:
    if not taken:
        return EMPTY
    number = {cid: n for n, cid in enumerate(selected, start=1)}
    facts, constraints = [], []
    for i in sorted(taken, key=lambda i: (flat[i][0], flat[i][1])):
        ci, _si, s = flat[i]
        line = f"- {s} [{number[candidates[ci]]}]"
        (constraints if _is_constraint(s, acfg.constraint_cues) else facts).append(line)
    parts = [HEADER]
    if facts:
        parts.append("### Facts\n" + "\n".join(facts) + "\n")
    if constraints:
        parts.append("### Constraints\n" + "\n".join(constraints) + "\n")
    body = "\n".join(parts)
    if missing:
        issues = f"### Open issues\n- The selected sources do not mention: {', '.join(missing)}.\n"
        if count_tokens(body + "\n" + issues, enc) <= acfg.budget_tokens:
            body += "\n" + issues
    return body
