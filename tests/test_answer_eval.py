"""The answer-quality benchmark (``eval --answers``): question sets, grading, the report, the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.pdf_print.make_pdfs import NODE_API, node_markdown
from ragstream.backends.services import build_services
from ragstream.common.errors import EvalDataError
from ragstream.knowledge.formats import CONVERTED_SUFFIXES, convert
from ragstream.measure.answer_eval import evaluate_answers, format_answers, grade, roc_auc
from ragstream.measure.question_sets import (
    Section,
    answers_config,
    check_sections,
    fold_key,
    heading_matches,
    holds_key,
    load_questions,
)
from ragstream.workbench.engine import Engine

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks" / "answers"


def _write(tmp: Path, questions: list[dict], docs: str = "docs", name: str = "tiny") -> Path:
    path = tmp / f"{name}.json"
    path.write_text(json.dumps({"name": name, "docs": docs, "questions": questions}))
    return path


@pytest.fixture(scope="module")
def tiny(tiny_answer_set) -> Path:
    return tiny_answer_set


def _markdown(path: Path, cache: dict[Path, str]) -> str:
    """The Markdown ingestion reads from ``path``: its text, or a PDF, DOCX… file converted,
    each PDF page marker line blanked as the chunker blanks it."""
    if path not in cache:
        text = (convert(path.name, path.read_bytes()).markdown
                if path.suffix in CONVERTED_SUFFIXES else path.read_text(encoding="utf-8"))
        cache[path] = "\n".join("" if line.strip().startswith("<!-- page: ") else line
                                for line in text.splitlines())
    return cache[path]


def _headings_and_body(markdown: str) -> list[tuple[int, str, str]]:
    """Each heading of ``markdown`` (outside code fences) as (level, text, body up to the next
    heading); the body holds no heading line, as a chunk's text holds none."""
    out: list[tuple[int, str, list[str]]] = []
    fence = ""
    for line in markdown.splitlines():
        mark = line.lstrip()[:3]
        if mark in ("```", "~~~") and (not fence or mark == fence):
            fence = "" if fence else mark
        level = len(line) - len(line.lstrip("#"))
        if not fence and 1 <= level <= 6 and line[level:level + 1] == " ":
            out.append((level, line.lstrip("#").strip(), []))
        elif out:
            out[-1][2].append(line)
    return [(level, text, "\n".join(body)) for level, text, body in out]


def _section_text(markdown: str, heading: str) -> str:
    """The text of every section of ``markdown`` titled ``heading``, its subsections included."""
    parts = _headings_and_body(markdown)
    text = []
    for i, (level, title, body) in enumerate(parts):
        if heading_matches(heading, title):
            text.append(body)
            for sub_level, _, sub_body in parts[i + 1:]:
                if sub_level <= level:
                    break
                text.append(sub_body)
    return "\n".join(text)


def test_the_bundled_question_sets_load_and_are_big_enough():
    """Every bundled set (issue 45): key strings on every question, each standing in the text
    of the question's sections; at least 10 follow-up dialogues, each turn's keys standing in
    its sections; at least 10 same-subject unanswerable questions whose ``absent`` strings
    stand in no document."""
    sets = [load_questions(p) for p in sorted(BENCH.glob("*.json"))]
    assert {s.name for s in sets} >= {"kb", "npm-docs"}
    assert sum(len(s.questions) for s in sets) >= 40
    texts: dict[Path, str] = {}
    ingested = {".md", ".markdown", ".txt", *CONVERTED_SUFFIXES}
    for qs in sets:
        assert qs.docs.is_dir() and len(qs.questions) >= 25
        # most are one-line questions; some ask for a list or detail
        kinds = [q.kind for q in qs.questions]
        assert kinds.count("short") >= 20 and {"list", "detail"} & set(kinds)
        assert all(q.keys for q in qs.questions), qs.name
        assert len(qs.followups) >= 10 and len(qs.unanswerable) >= 10, qs.name
        assert all(f.turns[-1].keys for f in qs.followups), qs.name
        for qid, secs in qs.sections.items():
            section_text = []
            for s in secs:  # every section names a heading of its file
                # a PDF, DOCX… set: the Markdown its file converts to
                markdown = _markdown(qs.docs / s.file, texts)
                assert any(line.lstrip("#").strip() == s.heading
                           for line in markdown.splitlines() if line.startswith("#")), (qs.name, qid, s)
                section_text.append(_section_text(markdown, s.heading))
            for key in qs.keys(qid):  # a correct answer quoting its section can hold the key
                assert holds_key("\n".join(section_text), [key]), (qs.name, qid, key)
        everything = fold_key("\n".join(_markdown(p, texts) for p in sorted(qs.docs.rglob("*"))
                                        if p.is_file() and p.suffix.lower() in ingested))
        for u in qs.unanswerable:
            assert u.absent and not [a for a in u.absent if fold_key(a) in everything], (qs.name, u.id)


NODE_SETS = ROOT / "benchmarks" / "pdf_print" / "answers"


def _node_headings(page: str, form: str) -> set[str]:
    """The headings of a Node.js page as ingestion reads it: its HTML converted, or its
    Markdown source."""
    if form == "html":
        text = convert(f"{page}.html", (NODE_API / f"{page}.html").read_bytes()).markdown
    else:
        text = node_markdown(page)
    return {line.lstrip("#").strip() for line in text.splitlines() if line.startswith("#")}


def test_the_node_answer_sets_ask_the_same_of_every_form_and_name_real_headings():
    """benchmarks/pdf_print/answers: one set of questions, its sections named per form (the
    PDFs' outline has the HTML's heading texts; the Markdown may write them in backticks)."""
    if not (NODE_API / "path.html").is_file():
        pytest.skip("nodejs-doc is not installed (scripts/setup.sh --browser installs it)")
    sets = {form: json.loads((NODE_SETS / f"node-{form}.json").read_text(encoding="utf-8"))
            for form in ("html", "pdf", "md")}
    asked = {form: [(q["id"], q["question"], q["kind"]) for q in s["questions"]]
             for form, s in sets.items()}
    assert asked["html"] == asked["pdf"] == asked["md"] and len(asked["html"]) >= 30
    pages: dict[str, int] = {}
    for form, s in sets.items():
        for q in s["questions"]:
            for section in q["sections"]:
                file, _, heading = section.partition(" § ")
                page, _, suffix = file.rpartition(".")
                assert suffix == form, (q["id"], section)
                headings = _node_headings(page, "md" if form == "md" else "html")
                # a newer nodejs-doc may give a signature more arguments: the same name counts
                assert any(heading_matches(heading.strip("`"), h.strip("`")) for h in headings), \
                    (form, q["id"], section)
                if form == "html":
                    pages[page] = pages.get(page, 0) + 1
    assert len(pages) == 12 and min(pages.values()) >= 2  # every printed page is asked about


@pytest.mark.parametrize("content, words", [
    ("not json", "file"),
    ('{"name": "x", "docs": ".", "questions": []}', "questions"),
    ('{"name": "x y", "docs": ".", "questions": [{"id": "a", "question": "q", "sections": ["f.md § H"]}]}',
     "name"),
])
def test_a_malformed_question_file_is_refused_with_the_field(tmp_path, content, words):
    path = tmp_path / "q.json"
    path.write_text(content)
    with pytest.raises(EvalDataError) as err:
        load_questions(path)
    assert words in str(err.value) and "kb.json" in str(err.value)


def test_bad_sections_docs_and_ids_are_named(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n\n## Install\n\nRun it.\n")
    ok = {"id": "q1", "question": "How?", "sections": ["a.md § Install"]}
    with pytest.raises(EvalDataError, match="does not exist"):
        load_questions(_write(tmp_path, [ok], docs="nowhere"))
    with pytest.raises(EvalDataError, match="not '<file> § <heading>'"):
        load_questions(_write(tmp_path, [{**ok, "sections": ["a.md: Install"]}]))
    with pytest.raises(EvalDataError, match="no file 'b.md'"):
        load_questions(_write(tmp_path, [{**ok, "sections": ["b.md § Install"]}]))
    with pytest.raises(EvalDataError, match="repeated: q1"):
        load_questions(_write(tmp_path, [ok, ok]))
    qs = load_questions(_write(tmp_path, [ok]))
    assert qs.sections["q1"] == [Section("a.md", "Install")]
    with pytest.raises(EvalDataError, match="No question set"):
        load_questions(tmp_path / "nothing.json")


@pytest.fixture(scope="module")
def tiny_engine(tiny, cfg, tmp_path_factory, embedder) -> tuple:
    qs = load_questions(tiny)
    acfg = answers_config(cfg.with_overrides({"settings.paths.index_dir":
                                              str(tmp_path_factory.mktemp("idx"))}), qs)
    services = build_services(acfg)
    services.embedder = embedder
    engine = Engine(acfg, services)
    engine.ingest(qs.docs, prune=True)
    return qs, engine


def test_sections_are_matched_by_file_and_heading_path(tiny_engine):
    qs, engine = tiny_engine
    chunks = engine.services.index().all_chunks()
    check_sections(qs, chunks)  # every section holds a chunk
    sec = qs.sections["t2"][0]
    inside = [c for c in chunks if sec.holds(c, qs.docs.name)]
    assert inside and all(c.source.endswith("chroma-server-mode.md")
                          and sec.heading in c.heading_path for c in inside)
    assert not any(Section("hybrid-retrieval.md", sec.heading).holds(c, qs.docs.name)
                   for c in chunks)
    wrong = Section("chroma-server-mode.md", "No such heading")
    broken = type(qs)(qs.name, qs.description, qs.path, qs.docs, qs.questions[:1],
                      {"t1": [wrong]})
    with pytest.raises(EvalDataError, match="No such heading"):
        check_sections(broken, chunks)


def test_grading_reads_the_citations_of_each_sentence(tiny_engine):
    qs, engine = tiny_engine
    sp = engine.run("How do I start a Chroma server?")
    secs = qs.sections["t2"]
    ids = sp.final_selection_ids
    chunks = sp.chunk_map()
    good = [n for n, c in enumerate(ids, 1) if any(s.holds(chunks[c], qs.docs.name) for s in secs)]
    bad = [n for n, c in enumerate(ids, 1) if n not in good]
    assert good and bad
    text = (f"Something unrelated is said here. [{bad[0]}] The server starts like this. "
            f"[{good[0]}] A third sentence without a source.\n")
    g = grade(sp, text, secs, qs.docs.name, engine.cfg)
    assert g.cites_answer == [False, True, False]
    assert (g.first, g.first3, g.in_sources) == (False, True, True)
    g = grade(sp, f"The server starts like this. [{good[0]}]\n", secs, qs.docs.name, engine.cfg)
    assert (g.first, g.first3) == (True, True)
    # a number naming no source counts for nothing
    g = grade(sp, f"The server starts like this. [{len(ids) + 5}]\n", secs, qs.docs.name, engine.cfg)
    assert (g.first, g.first3) == (False, False)


def test_evaluate_answers_reports_shares_lengths_and_misses(tiny, tiny_engine, cfg):
    qs, engine = tiny_engine
    base = engine.cfg.with_overrides({
        "settings.paths.index_dir": str(engine.cfg.index_dir.parent.parent)})
    result = evaluate_answers([tiny], base, services_for=lambda c: engine.services)
    (res,) = result["results"]
    assert res["set"] == "tiny" and res["mode"] == "offline" and res["questions"] == 3
    rows = {r["id"]: r for r in res["rows"]}
    assert [r["mode"] for r in rows.values()] == ["extractive"] * 3, rows
    # the short answers are at most answer.max_sentences; the list request is longer
    max_sent = cfg.settings.answer.max_sentences
    assert rows["t1"]["sentences"] <= max_sent and rows["t2"]["sentences"] <= max_sent
    # every answer leads with its passage, under its section's title and citation
    assert all(r["answer_text"].startswith("#### ") for r in rows.values()), rows
    assert res["first3"] == round(sum(r["first3"] for r in rows.values()) / 3, 4)
    assert res["first"] <= res["first3"] <= res["in_sources"]
    # retrieval: the rank of the first answering chunk per stage, as MRR@10
    ranks = [r["rerank_rank"] for r in rows.values()]
    assert all(r is None or r >= 1 for r in ranks) and any(r is not None for r in ranks)
    assert res["mrr10_rerank"] == round(sum(1 / r for r in ranks if r and r <= 10) / 3, 4)
    assert 0 < res["mrr10_retrieval"] <= 1
    assert rows["t2"]["in_sources"] and rows["t2"]["first_sentence"]
    table = format_answers(result)
    assert table.splitlines()[0].split()[:4] == ["set", "mode", "n", "first"]
    assert f"tiny         offline     3 {res['first']:>6.2f}" in table
    with pytest.raises(EvalDataError, match="needs an LLM endpoint"):
        evaluate_answers([tiny], base, modes=["llm"], services_for=lambda c: engine.services)


def test_cli_eval_answers_and_its_usage_errors(tiny, tmp_path):
    env = {**os.environ, "RAGSTREAM_INDEX_DIR": str(tmp_path / "idx")}

    def run(*args):
        return subprocess.run([sys.executable, "-m", "ragstream", "eval", *args], cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=900)

    out = run("--answers", str(tiny), "--json", "--out", str(tmp_path / "r.json"))
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["results"][0]["questions"] == 3
    assert json.loads((tmp_path / "r.json").read_text()) == result
    assert (tmp_path / "idx" / "eval" / "answers_tiny").is_dir()  # an index of its own
    out = run()
    assert out.returncode == 2 and "either --data" in out.stderr
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": "bad", "docs": "nowhere", "questions": '
                   '[{"id": "a", "question": "q", "sections": ["a.md § A"]}]}')
    out = run("--answers", str(bad))
    assert out.returncode != 0 and "does not exist" in out.stderr and "Traceback" not in out.stderr


def test_llm_mode_is_run_beside_offline_when_an_endpoint_is_configured(tiny, tiny_engine):
    """With llm.base_url set, the set runs offline and then through the model (a scripted
    OpenAI server on loopback): the LLM's answers are graded the same way."""
    from tests.fake_openai import FakeOpenAI, Reply
    from tests.llm_support import every_agent, llm_config, with_llm

    qs, engine = tiny_engine
    stream = {"reply": Reply.text("The first source says this [1]. The second adds that [2].")}
    with FakeOpenAI(models=["test-model"], responder=every_agent(stream)) as server:
        base = llm_config(engine.cfg.with_overrides({  # a canned answer: its words are no source's
            "settings.paths.index_dir": str(engine.cfg.index_dir.parent.parent),
            "settings.answer.check_citations": False}), server)
        services = with_llm(engine.services, base)
        result = evaluate_answers([tiny], base, services_for=lambda c: services)
        assert server.chat_requests  # the model was asked
    offline, llm = result["results"]
    assert (offline["mode"], llm["mode"]) == ("offline", "llm")
    assert {r["mode"] for r in offline["rows"]} == {"extractive"}
    assert {r["mode"] for r in llm["rows"]} == {"llm"}
    assert all(r["sentences"] == 2 for r in llm["rows"])
    for row in llm["rows"]:
        assert row["first_sentence"] == "The first source says this [1]."
        assert row["first"] <= row["first3"] <= row["in_sources"]
    # sources 1 and 2 are the ReRanker's best: the answering section is among them for some
    assert any(r["first3"] for r in llm["rows"])
    assert llm["first3"] == round(sum(r["first3"] for r in llm["rows"]) / 3, 4)
    # per agent: what the model's word changed, beside the rules' decisions
    agents = llm["agents"]
    a3 = agents["per_agent"]["A3_NLI_Gate"]
    assert a3["judged"] == agents["a3_pairs"] > 0 and a3["changed"] == 0  # P 0.8: no change
    assert (a3["helped"], a3["hurt"], agents["a3_emptied"]) == (0, 0, 0)
    assert {"A2_PromptShaper", "A4_Condenser"} <= set(agents["per_agent"])
    assert offline["agents"]["per_agent"] == {} and offline["agents"]["a3_auc"] is None
    text = format_answers(result)
    assert "A3 ROC AUC of P(relevant) vs answers" in text and "A3_NLI_Gate" in text


def test_roc_auc_of_the_models_probability():
    assert roc_auc([(0.9, True), (0.1, False)]) == 1.0
    assert roc_auc([(0.1, True), (0.9, False)]) == 0.0
    assert roc_auc([(0.5, True), (0.5, False), (0.7, True), (0.2, False)]) == 0.875
    assert roc_auc([(0.5, True)]) is None  # one class only: no AUC


def test_conversation_mode_asks_the_set_twice_as_one_conversation_and_deletes_it(tiny, tiny_engine):
    from ragstream.workbench.conversations import Conversations

    qs, engine = tiny_engine
    base = engine.cfg.with_overrides({
        "settings.paths.index_dir": str(engine.cfg.index_dir.parent.parent)})
    result = evaluate_answers([tiny], base, modes=["conversation"],
                              services_for=lambda c: engine.services)
    first, second = result["results"]
    assert (first["mode"], second["mode"]) == ("conv 1", "conv 2")
    assert first["questions"] == second["questions"] == 3
    # asked again, the documents still lead: the earlier turns do not crowd them out
    assert second["first3"] >= first["first3"] - 1 / 3 and second["in_sources"] == first["in_sources"]
    assert 0 <= second["cite_turn"] <= 1 and "cite_turn" in first
    assert Conversations.for_config(engine.cfg).names() == []  # the eval's conversation is gone


KNOTS = ("# Sailing knots\n\n## The bowline\n\nA bowline makes a fixed loop at the end of a rope. "
         "Sailors tie it to moor a boat to a ring or a post, because it does not slip.\n\n"
         "## The clove hitch\n\nA clove hitch fastens a rope to a post quickly. It can slip "
         "under a changing load, so sailors back it up with two half hitches.\n")


def test_other_sets_questions_are_the_unanswerable_set(tiny, tiny_engine, tmp_path, embedder):
    """``against=["others"]``: each set's documents are also asked the other set's questions;
    the report counts how many of those are Low (and never High) beside answerable not-Low and
    the precision of High."""
    from ragstream.measure.answer_eval import foreign_sets

    qs, engine = tiny_engine
    (tmp_path / "knots").mkdir()
    (tmp_path / "knots" / "knots.md").write_text(KNOTS)
    knots = _write(tmp_path, [
        {"id": "k1", "question": "How do I tie a bowline to moor a boat?",
         "sections": ["knots.md § The bowline"]},
        {"id": "k2", "question": "Why does a clove hitch need two half hitches?",
         "sections": ["knots.md § The clove hitch"]}], docs="knots", name="knots")
    base = engine.cfg.with_overrides({"settings.paths.index_dir": str(tmp_path / "idx")})

    def services_for(c):
        if c.kb_dir == qs.docs:
            return engine.services
        services = build_services(c)
        services.embedder = embedder
        return services

    result = evaluate_answers([tiny, knots], base, services_for=services_for, against=["others"],
                              limit=2)
    by_set = {r["set"]: r for r in result["results"]}
    assert by_set["tiny"]["against"] == ["knots"] and by_set["knots"]["against"] == ["tiny"]
    for name, other in (("tiny", "knots"), ("knots", "tiny")):
        r = by_set[name]
        foreign = r["unanswerable_rows"]
        assert r["unanswerable"] == len(foreign) == 2
        assert {row["from"] for row in foreign} == {other}
        assert not any(row["first"] or row["in_sources"] or row["answerable"] for row in foreign)
        assert all(row["confidence"] == "Low" and not row["answered"] for row in foreign), foreign
        assert r["unans_low"] == 1.0 and r["unans_high"] == 0
        assert r["not_low"] == round(sum(row["confidence"] != "Low" for row in r["rows"]) / 2, 4)
        highs = [row for row in r["rows"] if row["confidence"] == "High"]
        assert r["high"] == len(highs)
        assert r["high_precision"] == (round(sum(row["first"] for row in highs) / len(highs), 4)
                                       if highs else None)
    table = format_answers(result)
    assert "unans Low" in table and "High prec" in table and "never High" in table
    # a set asking the same questions (another format of the same documents) is no foreign set
    same = load_questions(tiny)
    assert foreign_sets(same, [same, load_questions(knots)], []) == [load_questions(knots)]
    twin = type(same)("tiny-pdf", "", same.path, same.docs, same.questions, same.sections)
    assert foreign_sets(same, [twin], []) == []
    assert [s.name for s in foreign_sets(load_questions(knots), [same, twin], [])] == ["tiny"]


def test_cli_against_usage_errors(tiny):
    from click.testing import CliRunner

    from ragstream.interfaces.cli import main

    runner = CliRunner()
    out = runner.invoke(main, ["eval", "--against", "others", "--data", str(ROOT)])
    assert out.exit_code == 2 and "--against goes with --answers" in out.output
    out = runner.invoke(main, ["eval", "--answers", str(tiny), "--against", "others",
                               "--against", str(tiny)])
    assert out.exit_code == 2 and "give it alone" in out.output
    out = runner.invoke(main, ["eval", "--answers", str(tiny), "--against", "nowhere.json"])
    assert out.exit_code == 2 and "no question set at nowhere.json" in out.output
