"""The final answer: extractive, no-results and LLM modes, citations, confidence, logging.

Real components throughout: the session's engine over the bundled knowledge base, and for
LLM mode the real ``LLMClient`` talking to ``FakeOpenAI`` on loopback.
"""

from __future__ import annotations

import json

import pytest

from ragstream.answering import answer as answer_mod
from ragstream.answering.answer import (
    ANSWER_CUE,
    CITATION_RULE,
    AnswerSentence,
    SentenceScanner,
    answer,
    answer_length,
    answer_sentences,
    citation_numbers,
    conversation_after,
    extractive_pieces,
    extractive_statements,
    kb_titles,
    mention_only,
    rate,
)
from ragstream.answering.passage import title_of
from ragstream.backends.tokens import count_tokens
from ragstream.common.config import AnswerSettings
from ragstream.common.errors import StageOrderError
from ragstream.interfaces.cli.passes import _print_answer_footer
from ragstream.state.records import QALogRecord
from ragstream.state.super_prompt import Answer, ConversationTurn, SuperPrompt
from ragstream.workbench.qa_log import QALog, answer_and_log
from tests.fake_openai import FakeOpenAI, Reply
from tests.llm_support import answer_only, llm_config, with_llm

ON_TOPIC = "Which command starts the Chroma server?"  # source 1 clearly the "chroma run" section
OFF_TOPIC = "How do I cook pasta?"


@pytest.fixture(scope="module")
def on_topic(kb_engine) -> SuperPrompt:
    return kb_engine.run(ON_TOPIC)


@pytest.fixture(scope="module")
def off_topic(kb_engine) -> SuperPrompt:
    return kb_engine.run(OFF_TOPIC)


@pytest.fixture
def llm_env(kb_engine, server):
    """(cfg, services) whose LLM is the real client pointed at the fake server."""
    cfg = answer_only(llm_config(kb_engine.cfg, server))
    return cfg, with_llm(kb_engine.services, cfg)


# --------------------------------------------------------------------------- preconditions


def test_answer_needs_the_whole_pipeline(kb_engine):
    sp = kb_engine.run(ON_TOPIC, until="A4_Condenser")
    with pytest.raises(StageOrderError) as err:
        answer(sp, kb_engine.cfg, kb_engine.services)
    assert err.value.required == "A5_Format_Enforcer" and "A5_Format_Enforcer" in str(err.value)


# --------------------------------------------------------------------------- extractive


def test_extractive_answer_is_grounded_streamed_and_deterministic(kb_engine, on_topic):
    tokens: list[str] = []
    ans = answer(on_topic, kb_engine.cfg, kb_engine.services, on_token=tokens.append)
    assert ans.mode == "extractive" and "no LLM endpoint" in ans.mode_reason
    assert len(tokens) > 1 and "".join(tokens) == ans.text
    assert ans.model == "" and ans.usage.prompt_tokens == 0 and ans.error == ""
    assert ans.first_token_ms is not None and ans.latency_ms >= 0

    # A4's statements, best score first, each with the [n] of its chunk, at most
    # answer.max_sentences of them for a one-line question; S_CTX_MD keeps all of them
    acfg = kb_engine.cfg.settings.answer
    record = on_topic.extras.a4
    assert record is not None and record.condensed
    chosen = extractive_statements(on_topic, acfg)
    assert 0 < len(chosen) <= acfg.max_sentences
    assert len(record.condensed) > len(chosen)  # the answer is shorter than the context
    # the best sentence leads; the first distinct_sources_first come from different chunks,
    # each the best of its chunk
    lead = chosen[:acfg.distinct_sources_first]
    stating = [s for s in record.condensed if not mention_only(s.text)]
    best = max(stating, key=lambda s: s.score)
    # the opening sentence of the best chunk among those within lead_margin of its best —
    # or the best itself when it introduces the command that answers ("Start a server …:")
    assert chosen[0].chunk_ids == best.chunk_ids
    assert chosen[0].score >= best.score - acfg.lead_margin
    assert chosen[0] is best and best.text.endswith(":") or \
        chosen[0].span[0] == min(s.span[0] for s in stating if s.chunk_ids == best.chunk_ids
                                 and s.score >= best.score - acfg.lead_margin)
    assert len({s.chunk_ids[0] for s in lead}) == len(lead)
    # the rest best first, but the sentences of one chunk in the chunk's order
    by_chunk = {}
    for s in chosen:
        by_chunk.setdefault(s.chunk_ids[0], []).append(s.span[0])
    assert all(spans == sorted(spans) for spans in by_chunk.values())
    assert not any(mention_only(s.text) for s in chosen)
    # the answer leads with the passage that answers: the ReRanker's best source, under its
    # title and citation, quoted in its order (ragstream.answering.passage)
    assert ans.passage is not None
    lead = on_topic.chunk_map()[ans.passage.chunk_id]
    assert ans.passage.chunk_id == on_topic.final_selection_ids[ans.passage.n - 1]
    assert ans.passage.chunk_id == on_topic.final_selection_ids[0]
    assert ans.text.startswith(f"#### {title_of(lead)} [{ans.passage.n}]\n")
    quoted = lead.text[ans.passage.start:ans.passage.end]
    first_words = " ".join(quoted.split()[:6])
    assert first_words in " ".join(ans.text.split())
    sents = answer_sentences(ans.text, acfg.min_sentence_words)
    assert sents and all(citation_numbers(x, 50) for x in sents)  # each one cites
    for s in record.condensed:
        assert f"- {s.text} [" in on_topic.S_CTX_MD
    # each extracted statement points at the sentence of its chunk it was taken from
    chunks = on_topic.chunk_map()
    for s in record.condensed:
        assert s.span is not None
        start, end = s.span
        assert " ".join(chunks[s.chunk_ids[0]].text[start:end].split()).endswith(s.text[-12:])

    # every citation is valid and names the chunk at that position of final_selection_ids
    chunks = on_topic.chunk_map()
    assert ans.citations and not ans.invalid_citations
    for c in ans.citations:
        assert c.valid
        chunk = chunks[on_topic.final_selection_ids[c.n - 1]]
        assert (c.chunk_id, c.source, c.label) == (chunk.id, chunk.source, chunk.citation_label)
        assert c.section == " > ".join(chunk.heading_path)
    assert ans.sources == ans.citations

    # answered, and the reason names the evidence (High or Medium is the calibrated P(leads),
    # near its threshold for this question: not asserted exactly)
    assert ans.confidence in ("High", "Medium"), ans.confidence_detail
    assert ans.confidence_reason.startswith(f"{ans.confidence}: ")  # in words …
    assert "P(answerable)" in ans.confidence_detail  # … the figures beside them
    assert "sentences cite a source" in ans.confidence_detail

    again = answer(on_topic, kb_engine.cfg, kb_engine.services)
    assert (again.text, again.citations, again.confidence_reason) == \
        (ans.text, ans.citations, ans.confidence_reason)


def test_extractive_without_statements_says_so():
    sp = SuperPrompt(S_CTX_MD="## Condensed context\n\n### Facts\n- Looks like a fact. [1]\n",
                     extras={"a4": {"budget_tokens": 900, "used_tokens": 5, "statements": 0}})
    # the answer is made of A4's statements, never of Markdown read back from S_CTX_MD
    assert extractive_pieces(sp) == [answer_mod.NO_STATEMENTS]
    assert extractive_pieces(SuperPrompt()) == [answer_mod.NO_STATEMENTS]


def _statements_sp(texts_scores: list[tuple[str, float, str]], prompt: str = "What is B?",
                   kind: str = "markdown", length: list | None = None) -> SuperPrompt:
    return SuperPrompt(final_selection_ids=["a#0", "b#0"], body={"task": prompt}, extras={
        "a4": {"budget_tokens": 900, "used_tokens": 50, "statements": len(texts_scores),
               "condensed": [{"text": t, "kind": "fact", "chunk_ids": [c], "score": sc}
                             for t, sc, c in texts_scores],
               "open_issues": ["The selected sources do not mention: speed."]},
        "format_enforcer": {"kind": kind, "kind_source": "default", "length": length or []}})


def test_extractive_answer_leads_with_the_best_sentence_and_cites_each():
    sp = _statements_sp([("B is a letter of the alphabet.", 0.5, "b#0"),
                         ("A vague prompt: 'what is B'.", 0.9, "a#0"),
                         ("B comes after A in the alphabet.", 0.7, "a#0"),
                         ("B is also a blood type.", 0.6, "a#0")])
    # best score first, then the best sentence of the next source, then the rest; the quoted
    # prompt only mentions the words and is left out; the open issue stays in S_CTX_MD
    assert "".join(extractive_pieces(sp)) == (
        "B comes after A in the alphabet. [1] B is a letter of the alphabet. [2] "
        "B is also a blood type. [1]\n")
    one_source = AnswerSettings(distinct_sources_first=1)
    assert "".join(extractive_pieces(sp, one_source)) == (
        "B comes after A in the alphabet. [1] B is also a blood type. [1] "
        "B is a letter of the alphabet. [2]\n")
    assert mention_only("A vague prompt: 'what is B'.")
    assert mention_only("For example: ```text\nTask: what is B\n``` [1]")
    assert mention_only("`a.md`, `b.md` and `c.md`.")
    assert not mention_only("B comes after A in the alphabet, as `abc` shows.")
    # when only mentions are left, they are the answer rather than nothing
    only = _statements_sp([("A vague prompt: 'what is B'.", 0.9, "a#0")])
    assert "".join(extractive_pieces(only)) == "A vague prompt: 'what is B'. [1]\n"


def test_extractive_answer_opens_each_source_with_its_topic_sentence():
    sp = _statements_sp([("A detail that scores best about B.", 0.9, "a#0"),
                         ("B is what this section is about.", 0.85, "a#0"),
                         ("Far less close but first of all.", 0.5, "a#0"),
                         ("Another source on B here.", 0.7, "b#0")])
    for st, span in zip(sp.extras.a4.condensed, [(50, 80), (10, 40), (0, 9), (0, 20)]):
        st.span = span
    # within lead_margin (0.1) of the best, the sentence that comes first in the chunk leads;
    # the one scoring 0.4 less does not, and — coming before the lead in its chunk — is left
    # out: a chunk's sentences keep the chunk's order
    assert "".join(extractive_pieces(sp)) == (
        "B is what this section is about. [1] Another source on B here. [2] "
        "A detail that scores best about B. [1]\n")
    strict = AnswerSettings(lead_margin=0.0)
    assert "".join(extractive_pieces(sp, strict)).startswith("A detail that scores best")


def test_extractive_answer_length_follows_the_prompt():
    acfg = AnswerSettings()
    many = [(f"Fact number {i} about the letter B here.", 1.0 - i / 100, "ab"[i % 2] + "#0")
            for i in range(30)]
    short = _statements_sp(many)
    assert answer_length(short, acfg)[0] == acfg.max_sentences
    assert len(extractive_pieces(short, acfg)) == acfg.max_sentences
    # "list every ..." and "in detail" ask for more, as a list
    for prompt in ("List every fact about B.", "Explain B in detail."):
        long = _statements_sp(many, prompt=prompt)
        n, why = answer_length(long, acfg)
        assert n == acfg.max_sentences_long and "asks for more" in why
        pieces = extractive_pieces(long, acfg)
        assert len(pieces) == acfg.max_sentences_long and all(p.startswith("- ") for p in pieces)
    # a length the prompt names wins; A5's list kind gives a list
    limited = _statements_sp(many, kind="numbered_list",
                             length=[{"unit": "items", "bound": "max", "value": 3}])
    assert extractive_pieces(limited, acfg) == [
        "1. Fact number 0 about the letter B here. [1]\n",
        "2. Fact number 1 about the letter B here. [2]\n",
        "3. Fact number 2 about the letter B here. [1]\n"]  # sources a, b, then the best
    # statements without scores (LLM-mode A4) keep A4's order
    unscored = _statements_sp([("B is second.", 0.0, "b#0"), ("A is first.", 0.0, "a#0")])
    for s in unscored.extras.a4.condensed:
        s.score = None
    assert "".join(extractive_pieces(unscored)) == "B is second. [2] A is first. [1]\n"


# --------------------------------------------------------------------------- no results


def test_off_topic_question_gets_no_results_and_the_kb_titles(kb_engine, off_topic, llm_env,
                                                              server):
    cfg, services = llm_env
    tokens: list[str] = []
    ans = answer(off_topic, cfg, services, on_token=tokens.append)
    assert server.calls == 0  # the LLM is not asked
    assert ans.mode == "no-results" and ans.confidence == "Low"
    assert ans.text.startswith("I couldn't find this in the knowledge base. It covers:")
    assert "".join(tokens) == ans.text
    assert not ans.citations and not ans.invalid_citations
    assert "nothing to answer from" in ans.confidence_detail

    titles = sorted({c.title for c in kb_engine.services.store.all_chunks()}, key=str.casefold)
    assert [ln[2:] for ln in ans.text.splitlines() if ln.startswith("- ")] == titles
    assert "Getting started with RAGstream" in titles


def test_low_similarity_is_no_results_even_with_a_selection(kb_engine, on_topic):
    cfg = kb_engine.cfg.with_overrides({"settings.answer.min_dense_score": 0.99})
    ans = answer(on_topic, cfg, kb_engine.services)
    assert on_topic.final_selection_ids
    assert ans.mode == "no-results"
    assert "below answer.min_dense_score 0.99" in ans.mode_reason


def test_threshold_separates_on_and_off_topic(kb_engine, on_topic, off_topic):
    floor = kb_engine.cfg.settings.answer.min_dense_score
    on = answer_mod.retrieval_signals(on_topic).best_dense
    off = answer_mod.retrieval_signals(off_topic).best_dense
    assert off < floor < on


def test_kb_titles_limit_names_the_largest_documents(kb_engine):
    store = kb_engine.services.store
    titles, total = kb_titles(store, 3)
    assert len(titles) == 3 and total == len(store.documents())
    assert titles == sorted(titles, key=lambda t: (t.casefold(), t))
    assert kb_titles(store, 3) == (titles, total)
    cfg = kb_engine.cfg.with_overrides({"settings.answer.no_results_max_titles": 3})
    text = answer_mod.no_results_text(store, cfg.settings.answer)
    assert f"and {total - 3} more documents" in text


# --------------------------------------------------------------------------- citations


@pytest.mark.parametrize("text, expected", [
    ("A [1]. B [2].", [1, 2]),
    ("A [1, 3] and [2][4].", [1, 3, 2, 4]),
    ("See [2-4] and [6–7].", [2, 3, 4, 6, 7]),
    ("As [Citation 5] says; also [source 1].", [5, 1]),
    ("Index `arr[0]`, a list x[3], a link [7](http://x) and [ 8 ].", [8]),
    ("```\nfoo [9]\n```\nBar [1].", [1]),
    ("Too wide [1-1000].", [1, 1000]),
    ("Repeated [2] [2] [1].", [2, 1]),
])
def test_citation_numbers(text, expected):
    assert citation_numbers(text, max_range=50) == expected


def test_answer_sentences_attach_trailing_citations_and_skip_labels():
    text = ("## Heading here\n\n**In short**\n\nChroma starts fast. [1] It listens on "
            "loopback [2].\n\nSteps are:\n- run the server now [3]\n- check the heartbeat URL\n"
            "\n| Step | Source |\n|---|---|\n| start the server | [1] |\n\nOk.")
    sents = answer_sentences(text, min_words=3)
    assert sents == ["Chroma starts fast. [1]", "It listens on loopback [2].",
                     "run the server now [3]", "check the heartbeat URL",
                     "start the server [1]"]


def test_answer_sentences_skip_code_and_setext_headings():
    text = ("Setup notes\n===========\n\nRun the server first [1].\n\n```bash\n# start it [9]\n"
            "chroma run --path data\n```\n\n    indented code line here [8]\n\n> Quoted advice "
            "counts too [2].\n")
    assert answer_sentences(text, min_words=3) == ["Run the server first [1].",
                                                   "Quoted advice counts too [2]."]
    assert citation_numbers(text, max_range=50) == [1, 2]


def test_rate_levels_and_invalid_citations_lower_confidence(kb_engine):
    """Confidence reads the evidence weighed before answering (``ragstream.answering.answerability``)."""
    from ragstream.answering.answerability import FEATURES, Evidence

    acfg = kb_engine.cfg.settings.answer
    high = acfg.answerability.high_min_leads
    seen = dict.fromkeys(FEATURES, 0.6)
    strong = Evidence(features=seen, p_answerable=0.99, p_leads=min(1.0, high + 0.05),
                      answerable=True)
    level, reason = rate(strong, 5, 6, [], acfg)
    assert level == "High" and "5 of 6 sentences cite a source" in reason
    assert "P(answerable) 0.99" in reason and "best rerank score 0.60" in reason
    level, reason = rate(strong, 5, 6, [99], acfg)
    assert level == "Medium" and "[99]" in reason and "lowered to Medium" in reason
    unsure = Evidence(features=seen, p_answerable=0.9, p_leads=high - 0.1, answerable=True)
    level, reason = rate(unsure, 4, 4, [], acfg)
    assert level == "Medium" and "not High: P(leads with the answer)" in reason
    level, reason = rate(strong, 1, 4, [], acfg)
    assert level == "Low" and "cited share 25% below 50%" in reason
    assert rate(strong, 0, 0, [], acfg)[0] == "Low"
    refused = Evidence(names=["path.join"], missing=["path.join"], features=seen,
                       why_not="the question names path.join; no sentence used mentions it")
    level, reason = rate(refused, 5, 5, [], acfg)
    assert level == "Low" and "not answerable: the question names path.join" in reason


# --------------------------------------------------------------------------- LLM mode


def test_llm_answer_streams_maps_citations_and_flags_invalid_ones(on_topic, llm_env, server):
    cfg, services = llm_env
    cfg = cfg.with_overrides({"settings.llm.context_window": 128_000})  # room for every source
    good = ("Start it with the chroma run command [1]. It listens on the loopback "
            "interface [1]. RAGstream can talk to a Chroma server over HTTP [1][2].")
    server.script(Reply.text(good), Reply.text(good.replace("[1][2]", "[1][99]")))
    tokens: list[str] = []
    ans = answer(on_topic, cfg, services, on_token=tokens.append)

    assert server.calls == 1
    req = server.requests[-1]
    assert req.stream and req.model == "test-model"
    system, user = req.messages
    assert system["role"] == "system"
    assert system["content"] == on_topic.System_MD.rstrip() + "\n\n" + CITATION_RULE + "\n"
    assert user["role"] == "user"
    for block in (on_topic.Prompt_MD, on_topic.S_CTX_MD, on_topic.Attachments_MD):
        assert block.strip() in user["content"]
    assert "### [1] " in user["content"]
    assert user["content"].endswith(ANSWER_CUE + "\n")
    # the passage that answers, first and whole, between the prompt and the condensed context
    lead = answer_mod.passage_block(on_topic, answer_mod.compose(
        on_topic, cfg, services).passage)
    assert lead.startswith("## The passage that answers [") and lead in user["content"]
    assert user["content"].index(lead) < user["content"].index(on_topic.S_CTX_MD.strip())
    as_built = user["content"][:-len(ANSWER_CUE) - 2].replace(lead + "\n", "")
    assert on_topic.System_MD.rstrip() + "\n\n" + as_built == on_topic.prompt_ready

    assert ans.mode == "llm" and ans.model == "test-model" and ans.error == ""
    assert len(tokens) > 3 and "".join(tokens) == ans.text == good
    assert ans.usage.prompt_tokens > 0 and ans.usage.completion_tokens > 0
    assert ans.first_token_ms is not None
    ids = on_topic.final_selection_ids
    assert [(c.n, c.chunk_id, c.valid) for c in ans.citations] == [(1, ids[0], True),
                                                                    (2, ids[1], True)]
    assert ans.confidence != "Low" and "3 of 3 sentences" in ans.confidence_detail

    unchecked = cfg.with_overrides({"settings.answer.check_citations": False})
    bad = answer(on_topic, unchecked, services)  # checked, [99] would set it aside
    assert bad.mode == "llm" and bad.invalid_citations == [99]
    assert [c.n for c in bad.sources] == [1]
    assert Answer.model_validate(bad.model_dump()).citations[-1].valid is False
    lowered = {"High": "Medium", "Medium": "Low"}[ans.confidence]  # an invalid citation: one level
    assert bad.confidence == lowered and "[99]" in bad.confidence_detail


def test_an_answer_citing_nothing_is_unsupported_and_gets_the_extractive_one_beside(
        kb_engine, on_topic, llm_env, server, capsys):
    cfg, services = llm_env
    cfg = cfg.with_overrides({"settings.answer.check_citations": False})  # checked: set aside
    server.script(Reply.text("Chroma is a database. It is good."), Reply.text("Fine [42]."),
                  Reply.text("Also uncited."))
    ans = answer(on_topic, cfg, services)
    plain = answer(on_topic, kb_engine.cfg, kb_engine.services)
    assert ans.mode == "llm" and ans.unsupported.startswith("no sentence of it cites a valid")
    assert ans.extractive_text == plain.text and ans.confidence == "Low"
    _print_answer_footer(ans)
    out = capsys.readouterr().out
    assert "UNSUPPORTED ANSWER — no sentence of it cites" in out and plain.text.strip() in out

    invalid_only = answer(on_topic, cfg, services)
    assert "[42]" in invalid_only.unsupported and invalid_only.extractive_text
    quiet = cfg.with_overrides({"settings.answer.offer_extractive": False})
    assert answer(on_topic, quiet, services).extractive_text == ""

    server.script(Reply.text("[1] [2, 3]\n[4]"))  # numbers without a sentence check nothing
    assert answer(on_topic, cfg, services).unsupported
    server.script(Reply.text("Start it with chroma run [1]."))
    assert answer(on_topic, cfg, services).unsupported == ""


def test_the_answer_prompt_leaves_whole_sources_out_to_fit_its_budget(on_topic, llm_env, server):
    cfg, services = llm_env
    full = count_tokens(on_topic.prompt_ready) + count_tokens(CITATION_RULE)
    small = cfg.with_overrides({"settings.answer.max_prompt_tokens": full - 50})
    server.script(Reply.text("Start it with chroma run [1]."))
    ans = answer(on_topic, small, services)
    system, user = server.requests[-1].messages
    assert on_topic.Attachments_MD.strip() not in user["content"]
    assert on_topic.S_CTX_MD.strip() in user["content"]
    assert "The whole source texts are left out" in user["content"]
    assert count_tokens(system["content"]) + count_tokens(user["content"]) <= full - 50
    assert "the whole source texts left out to fit the answer's prompt budget" in ans.mode_reason
    assert [c.n for c in ans.sources] == [1]


def test_llm_failure_falls_back_to_the_extractive_answer(kb_engine, on_topic, llm_env, server):
    cfg, services = llm_env
    server.script(*[Reply.error(500, "boom")] * cfg.settings.llm.max_attempts)
    ans = answer(on_topic, cfg, services)
    plain = answer(on_topic, kb_engine.cfg, kb_engine.services)
    assert server.calls == cfg.settings.llm.max_attempts
    assert ans.mode == "extractive" and "LLM failed" in ans.mode_reason
    assert "500" in ans.error
    assert ans.text == plain.text and ans.citations == plain.citations
    assert ans.confidence == plain.confidence


def test_stream_broken_midway_falls_back_with_a_notice(on_topic, llm_env, server):
    cfg, services = llm_env
    server.script(Reply.text("Start it with the chroma run command [1] and then", cut_after=3))
    tokens: list[str] = []
    ans = answer(on_topic, cfg, services, on_token=tokens.append)
    assert ans.mode == "extractive" and ans.error
    streamed = "".join(tokens)
    assert answer_mod.FALLBACK_NOTICE in streamed and streamed.endswith(ans.text)


# --------------------------------------------------------------------------- the sentence form


@pytest.fixture
def llama_server():
    """The scripted server, looking like a llama.cpp server (``owned_by: llamacpp``)."""
    with FakeOpenAI(models=["test-model"], owned_by="llamacpp") as s:
        yield s


def test_scanner_gives_each_sentence_when_its_object_closes():
    reply = ('{"sentences": [{"text": "A {brace} and a \\"quote\\" [x].", "sources": [1, 2]}, '
             '{"text": "Second}]", "sources": [3]}]}')
    scanner, seen = SentenceScanner(), []
    for i, ch in enumerate(reply):  # one character at a time: the worst a stream can do
        for sentence in scanner.feed(ch):
            seen.append((i, sentence))
    assert [s.text for _, s in seen] == ['A {brace} and a "quote" [x].', "Second}]"]
    assert [s.sources for _, s in seen] == [[1, 2], [3]]
    first_close = reply.index('2]}') + 2
    assert seen[0][0] == first_close  # given the moment its object closed, not at the end


def test_sentence_pieces_put_the_sources_before_the_stop_and_follow_a5_lists():
    one = AnswerSentence(text="Chunks follow headings [7].", sources=[2, 2, 1])
    assert answer_mod.sentence_piece(one, 0, "") == "Chunks follow headings [2, 1]."
    assert answer_mod.sentence_piece(one, 1, "markdown") == " Chunks follow headings [2, 1]."
    assert answer_mod.sentence_piece(one, 2, "numbered_list") == "3. Chunks follow headings [2, 1].\n"
    assert answer_mod.sentence_piece(one, 0, "bullet_list").startswith("- Chunks")
    bare = AnswerSentence(text="No stop here", sources=[3])
    assert answer_mod.sentence_piece(bare, 0, "") == "No stop here [3]."
    dangling = AnswerSentence(text="It combines three parts, each between 0 and 1:", sources=[4])
    assert answer_mod.sentence_piece(dangling, 0, "") == "It combines three parts, each between 0 and 1 [4]."


def test_a_llama_cpp_endpoint_gets_the_sentence_form_and_every_sentence_cites(
        kb_engine, on_topic, llama_server):
    cfg = answer_only(llm_config(kb_engine.cfg, llama_server))
    services = with_llm(kb_engine.services, cfg)
    reply = {"sentences": [
        {"text": "Start the server with chroma run.", "sources": [1]},
        {"text": "It listens on the loopback interface [9].", "sources": [2, 1]},
    ]}
    llama_server.script(Reply.text(json.dumps(reply)))
    tokens: list[str] = []
    ans = answer(on_topic, cfg, services, on_token=tokens.append)

    req = llama_server.requests[-1]
    assert req.stream
    schema = req["response_format"]["schema"]
    assert req["response_format"]["type"] == "json_object"
    sentences = schema["properties"]["sentences"]
    assert sentences["maxItems"] == cfg.settings.answer.max_sentences == 6
    assert sentences["minItems"] == 1
    sources = sentences["items"]["properties"]["sources"]
    assert sources["minItems"] == 1
    assert sources["items"]["enum"] == list(range(1, len(on_topic.final_selection_ids) + 1))
    system, user = req.messages
    assert "Reply with one JSON object" in system["content"] and '"sources"' in system["content"]
    assert user["content"].rstrip().endswith("give each sentence the [number]s of the facts it uses.")
    assert "at most 6 sentences" in user["content"]

    # one piece per sentence, as each JSON object closed; the model's own [9] gave way
    assert tokens == ["Start the server with chroma run [1].",
                      " It listens on the loopback interface [2, 1].", "\n"]
    assert ans.text == "".join(tokens)
    assert ans.mode == "llm" and "sentence by sentence in JSON" in ans.mode_reason
    assert ans.form == "sentences" and json.loads(ans.raw) == reply
    assert "llama_cpp endpoint" in ans.mode_reason
    assert [c.n for c in ans.citations] == [1, 2] and all(c.valid for c in ans.citations)
    assert ans.unsupported == "" and "2 of 2 sentences cite" in ans.confidence_detail


def test_auto_writes_free_text_for_other_endpoints_and_for_tables(kb_engine, on_topic,
                                                                  llm_env, server, llama_server):
    cfg, services = llm_env  # owned_by fake-openai: json_schema endpoint, free text
    server.script(Reply.text("Start it with chroma run [1]."))
    assert answer(on_topic, cfg, services).form == "text"
    assert "response_format" not in server.requests[-1]

    forced = cfg.with_overrides({"settings.answer.form": "sentences"})
    server.script(Reply.text(json.dumps({"sentences": [{"text": "Run it with chroma run.",
                                                         "sources": [1]}]})))
    ans = answer(on_topic, forced, services)
    assert server.requests[-1]["response_format"]["type"] == "json_schema"
    assert ans.text == "Run it with chroma run [1].\n" and "answer.form is sentences" in ans.mode_reason

    table = kb_engine.run(ON_TOPIC + " Answer as a table with columns step and command.")
    assert table.extras.format_enforcer.kind == "table"
    lcfg = answer_only(llm_config(kb_engine.cfg, llama_server))
    llama_server.script(Reply.text("| step | command |\n|---|---|\n| start | chroma run [1] |"))
    ans = answer(table, lcfg, with_llm(kb_engine.services, lcfg))
    assert "response_format" not in llama_server.requests[-1] and ans.text.startswith("| step")


def test_a_sentence_reply_that_breaks_off_keeps_its_whole_sentences(kb_engine, on_topic,
                                                                    llama_server):
    cfg = answer_only(llm_config(kb_engine.cfg, llama_server))
    services = with_llm(kb_engine.services, cfg)
    llama_server.script(Reply.text('{"sentences": [{"text": "Run chroma run.", "sources": [1]}, '
                                   '{"text": "Then che', finish_reason="length"))
    ans = answer(on_topic, cfg, services)
    assert ans.mode == "llm" and ans.text == "Run chroma run [1].\n"
    assert "broke off after 1 sentences" in ans.mode_reason

    llama_server.script(Reply.text('{"sentences": []}'))
    empty = answer(on_topic, cfg, services)
    assert empty.mode == "extractive" and "holds no sentence" in empty.error


# --------------------------------------------------------------------------- after the answer


def test_conversation_after_caps_at_n4(kb_engine):
    sp = SuperPrompt(user_text="q3", recent_conversation=[
        ConversationTurn(user="q1", assistant="a1"), ConversationTurn(user="q2", assistant="a2")])
    ans = Answer(text="a3")
    assert [t.user for t in conversation_after(sp, ans, 10)] == ["q1", "q2", "q3"]
    assert [(t.user, t.assistant) for t in conversation_after(sp, ans, 2)] == [("q2", "a2"),
                                                                               ("q3", "a3")]
    assert conversation_after(sp, ans, 0) == []
    assert len(sp.recent_conversation) == 2


def test_answer_and_log_stores_the_answer_on_a_copy_and_logs_it(kb_engine, on_topic, tmp_path):
    path = tmp_path / "log.sqlite3"
    out, ans = answer_and_log(kb_engine.cfg, kb_engine.services, on_topic, log_path=path)
    assert on_topic.answer is None
    assert out.answer == ans and out.extras.qa_log == QALogRecord(path=str(path), id=1)
    assert SuperPrompt.from_json(out.to_json()).answer == ans
    rows = QALog(path).recent()
    assert len(rows) == 1 and rows[0]["answer"] == ans.text and rows[0]["question"] == ON_TOPIC


def test_answer_and_log_keeps_the_answer_when_the_log_cannot_be_written(kb_engine, on_topic,
                                                                       tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    out, ans = answer_and_log(kb_engine.cfg, kb_engine.services, on_topic,
                              log_path=blocker / "log.sqlite3")
    assert out.answer == ans and "could not be logged" in out.extras.qa_log.error


def test_extractive_answer_shows_the_command_a_sentence_introduces():
    from ragstream.state.super_prompt import Chunk

    text = ("The tool is installed with pip. Start the tool on its port with:\n\n"
            "```bash\ntool run --port 8\n```\n\nIt listens on port 8.")
    chunk = Chunk(id="a#0", doc_id="a", source="kb/a.md", text=text)
    lead = "Start the tool on its port with:"
    start = text.index(lead)
    sp = _statements_sp([(lead, 0.9, "a#0"), ("It listens on port 8.", 0.8, "a#0")])
    sp.base_context_chunks = [chunk]
    sp.extras.a4.condensed[0].span = (start, start + len(lead))
    out = "".join(extractive_pieces(sp))
    assert out == ("Start the tool on its port with: [1]\n\n```bash\ntool run --port 8\n```\n\n"
                   "It listens on port 8. [1]\n")
    # the cited lead-in counts as a sentence, the code does not
    assert answer_sentences(out, 3) == ["Start the tool on its port with: [1]",
                                        "It listens on port 8. [1]"]
    assert answer_sentences("**Steps:**\n\nThen these:\n\n- One thing here. [1]\n", 3) == [
        "One thing here. [1]"]  # labels that cite nothing do not
    # in a list the block is indented under its item
    listed = _statements_sp([(lead, 0.9, "a#0")], kind="bullet_list")
    listed.base_context_chunks = [chunk]
    listed.extras.a4.condensed[0].span = (start, start + len(lead))
    assert "".join(extractive_pieces(listed)) == (
        "- Start the tool on its port with: [1]\n\n  ```bash\n  tool run --port 8\n  ```\n\n")
    # a sentence not ending in ':' or not followed by a code block gets none
    sp.extras.a4.condensed[0].span = (0, len("The tool is installed with pip."))
    sp.extras.a4.condensed[0].text = "The tool is installed with pip."
    assert "```" not in "".join(extractive_pieces(sp))
