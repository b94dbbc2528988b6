"""ReRanker, A3 and A4 on the bundled knowledge base."""

import pytest

from ragstream.backends.tokens import count_tokens
from ragstream.stages import controller
from ragstream.stages.a4_condenser import EMPTY
from ragstream.state.super_prompt import Chunk

PROMPT = "How does the ReRanker choose its backend when no cross-encoder is available?"


@pytest.fixture(scope="module")
def sp_a4(kb_engine):
    return kb_engine.run(PROMPT, until="A4_Condenser")


def test_reranker_names_backend_and_caps_candidates(sp_a4, kb_engine):
    rows = sp_a4.view("reranked")
    assert 0 < len(rows) <= kb_engine.cfg.limits.N2_RERANK_TOP_K
    info = sp_a4.extras.reranker
    assert info.backend == "offline"  # no cross-encoder can be loaded on this machine
    assert "not available offline" in info.reason
    assert all(r.reason == "scored by the offline backend" for r in rows)
    scores = [r.score for r in rows]
    assert scores == sorted(scores, reverse=True)
    assert all(0.0 <= s <= 1.0 for s in scores)
    retrieval_ids = sp_a4.kept_ids("retrieval")[: len(rows)]
    assert {r.chunk_id for r in rows} == set(retrieval_ids)


def test_reranker_really_rescores(sp_a4):
    rows = sp_a4.view("reranked")
    # it is not a pass-through: the order differs from retrieval's
    assert [r.chunk_id for r in rows] != sp_a4.kept_ids("retrieval")[: len(rows)]
    assert any(r.scores["rank_change"] != 0 for r in rows)
    chunks = sp_a4.chunk_map()
    top = chunks[rows[0].chunk_id]
    # the reranking page, or the FAQ entry that says how the backend is chosen
    assert top.source == "kb/reranking.md" or "reranker ran" in top.section.lower()
    assert "kb/reranking.md" in {chunks[r.chunk_id].source for r in rows[:3]}


def test_offline_reranker_prefers_the_answering_passage(kb_engine):
    # chunks the index does not hold are encoded on the spot (a super-prompt older than the
    # last ingest); the evidence signals work the same
    choice = kb_engine.services.reranker
    chunks = [Chunk(id=f"tmp/b.md#{i}", doc_id="tmp/b.md", source="b.md", text=t) for i, t in
              enumerate(["Ripe bananas are yellow, sometimes with brown spots.",
                         "Bananas are grown in many tropical countries and exported worldwide."])]
    scores = choice.reranker.score("What colour are ripe bananas?", chunks)
    assert scores[0] > scores[1]


def test_offline_reranker_reads_stored_evidence_and_encodes_only_the_query(kb_engine, sp_a4):
    """Encode once, score fast: reranking chunks the index holds embeds the query, nothing
    else."""
    services = kb_engine.services
    chunks = [sp_a4.chunk_map()[r.chunk_id] for r in sp_a4.view("reranked")]
    index = services.index()
    assert all(index.holds(c) for c in chunks)
    seen: list[str] = []
    real_embed = services.embedder.embed

    def spy(texts):
        seen.extend(texts)
        return real_embed(texts)

    services.embedder.embed = spy
    try:
        scores = services.reranker.reranker.score("a question nobody asked before about chunks",
                                                  chunks)
    finally:
        del services.embedder.embed
    assert seen == ["a question nobody asked before about chunks"]
    assert len(scores) == len(chunks) and all(0.0 <= s <= 1.0 for s in scores)


def test_a3_keeps_and_drops_with_reasons(sp_a4, kb_engine):
    rows = sp_a4.view("a3")
    assert len(rows) == len(sp_a4.view("reranked"))
    kept = [r for r in rows if r.status == "kept"]
    dropped = [r for r in rows if r.status == "dropped"]
    assert kept and dropped
    assert all(r.reason for r in dropped) and not any(r.reason for r in kept)
    acfg = kb_engine.cfg.agents.A3_NLI_Gate
    best = max(r.score for r in rows)
    for r in kept:
        assert r.score >= acfg.min_relevance and r.score >= acfg.relative_min * best
    assert sp_a4.extras.agent_modes["A3_NLI_Gate"].mode == "deterministic"


def test_a3_drops_near_duplicates(kb_engine):
    from ragstream.stages import a3_nli_gate
    from ragstream.state.super_prompt import Chunk, SuperPrompt, ViewRow

    text = "The offline backend combines query similarity, sentence similarity and term coverage."
    chunks = [Chunk(id=f"d#{i}", doc_id="d", source="d.md", text=t, word_count=len(t.split()))
              for i, t in enumerate([text, text + " Indeed.",
                                     "Something else entirely about BM25 scoring here."])]
    sp = SuperPrompt(stage="reranked", base_context_chunks=chunks, views_by_stage={"reranked": [
        ViewRow(chunk_id="d#0", rank=1, score=0.9), ViewRow(chunk_id="d#1", rank=2, score=0.85),
        ViewRow(chunk_id="d#2", rank=3, score=0.2)]})
    out = a3_nli_gate.run(sp, kb_engine.cfg, kb_engine.services)
    status = {r.chunk_id: (r.status, r.reason) for r in out.view("a3")}
    assert status["d#0"] == ("kept", "")
    assert status["d#1"][0] == "dropped" and "duplicate of d#0" in status["d#1"][1]
    assert status["d#2"][0] == "dropped" and "off-topic" in status["d#2"][1]
    assert out.final_selection_ids == ["d#0"]


def test_a4_condenses_within_budget_with_citations(sp_a4, kb_engine):
    acfg = kb_engine.cfg.agents.A4_Condenser
    ids = sp_a4.final_selection_ids
    assert 0 < len(ids) <= kb_engine.cfg.limits.N3_FINAL_SELECTION_MAX
    assert set(ids) <= set(sp_a4.kept_ids("a3"))
    ctx = sp_a4.S_CTX_MD
    assert count_tokens(ctx) <= acfg.budget_tokens
    assert ctx.startswith("## Condensed context")
    chunks = sp_a4.chunk_map()
    bullets = [ln for ln in ctx.splitlines() if ln.startswith("- ") and "[" in ln]
    assert bullets
    for line in bullets:
        if "do not mention" in line:
            continue
        n = int(line.rsplit("[", 1)[1].rstrip("]"))
        sentence = line[2:].rsplit(" [", 1)[0]
        source = chunks[ids[n - 1]]
        # extractive: every statement's words come from the cited chunk
        source_words = set(source.text.replace("`", "").replace("*", "").split()) | {"-"}
        assert set(sentence.replace("`", "").split()) <= source_words, line
    assert sp_a4.view("a4")
    assert [r.chunk_id for r in sp_a4.view("a4") if r.status == "kept"] == ids


def test_a4_small_budget_and_n3(kb_engine):
    cfg = kb_engine.cfg.with_limits(N3_FINAL_SELECTION_MAX=2)
    agents = cfg.agents.model_copy(update={"A4_Condenser": cfg.agents.A4_Condenser.model_copy(
        update={"budget_tokens": 120})})
    cfg = cfg.model_copy(update={"agents": agents})
    sp = controller.run_all(controller.new_prompt(PROMPT), cfg, kb_engine.services, until="A4_Condenser")
    assert len(sp.final_selection_ids) <= 2
    assert count_tokens(sp.S_CTX_MD) <= 120
    dropped = [r for r in sp.view("a4") if r.status == "dropped"]
    assert dropped and all(r.reason for r in dropped)


def test_a4_with_nothing_selected_says_so(kb_engine):
    from ragstream.stages import a4_condenser
    from ragstream.state.super_prompt import SuperPrompt

    out = a4_condenser.run(SuperPrompt(stage="a3"), kb_engine.cfg, kb_engine.services)
    assert out.S_CTX_MD == EMPTY and out.final_selection_ids == []


def _a4_cfg(kb_engine, **update):
    cfg = kb_engine.cfg
    agents = cfg.agents.model_copy(update={"A4_Condenser": cfg.agents.A4_Condenser.model_copy(
        update=update)})
    return cfg.model_copy(update={"agents": agents})


def test_a4_orders_facts_by_score_and_counts_the_chunk_rank(sp_a4, kb_engine):
    """Statements come best first; each score is the sentence's cosine plus rank_weight / rank
    of its chunk in A3's order."""
    acfg = kb_engine.cfg.agents.A4_Condenser
    statements = sp_a4.extras.a4.condensed
    scores = [s.score for s in statements]
    assert None not in scores and scores == sorted(scores, reverse=True)
    kept = sp_a4.kept_ids("a3")
    best = {r.chunk_id: r.scores["best_sentence"] for r in sp_a4.view("a4") if r.status == "kept"}
    for s in statements:
        rank = kept.index(s.chunk_ids[0]) + 1
        cosine = s.score - acfg.rank_weight / rank
        assert cosine <= best[s.chunk_ids[0]] + 1e-6
    # the Facts block of S_CTX_MD lists them in the same order
    facts = [s.text for s in statements if s.kind == "fact"]
    at = [sp_a4.S_CTX_MD.index(f"- {t} [") for t in facts]
    assert at == sorted(at)


def test_a4_rank_weight_changes_the_order(kb_engine):
    """With a large rank weight, the sentences of the best-ranked chunk come first."""
    cfg = _a4_cfg(kb_engine, rank_weight=1.0)
    sp = controller.run_all(controller.new_prompt(PROMPT), cfg, kb_engine.services, until="A4_Condenser")
    top = sp.kept_ids("a3")[0]
    first = sp.extras.a4.condensed[0]
    assert first.chunk_ids == [top]
    flat = controller.run_all(controller.new_prompt(PROMPT), _a4_cfg(kb_engine, rank_weight=0.0),
                              kb_engine.services, until="A4_Condenser")
    assert [s.text for s in flat.extras.a4.condensed] != [s.text for s in sp.extras.a4.condensed]


def test_a4_budget_never_drops_a_chunk_above_a_kept_one(kb_engine):
    """A tight budget drops whole chunks from the bottom of A3's ranking: no chunk dropped for
    the budget is ranked above a chunk that stayed."""
    for budget in (150, 250, 400):
        cfg = _a4_cfg(kb_engine, budget_tokens=budget)
        sp = controller.run_all(controller.new_prompt(PROMPT), cfg, kb_engine.services,
                                until="A4_Condenser")
        assert count_tokens(sp.S_CTX_MD) <= budget
        rows = sp.view("a4")
        budget_dropped = [r.rank for r in rows if r.status == "dropped" and "budget" in r.reason]
        kept = [r.rank for r in rows if r.status == "kept"]
        assert budget_dropped, budget  # the budget did bind
        assert min(budget_dropped) > max(kept), (budget, kept, budget_dropped)
        # the best-ranked chunk with a sentence close enough keeps its best sentence
        assert kept[0] == 1
