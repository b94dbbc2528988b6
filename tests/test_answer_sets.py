"""Question sets' key strings, follow-up dialogues and same-subject unanswerable questions
(``ragstream.measure.answer_eval``): loaded, checked against the indexed chunks, graded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragstream.common.errors import EvalDataError
from ragstream.measure.answer_eval import followup_asks, same_subject_asks, summarize
from ragstream.measure.question_sets import (
    check_sections,
    fold_key,
    heading_matches,
    holds_key,
    load_questions,
)
from ragstream.state.super_prompt import Chunk


def test_a_signature_heading_matches_the_same_name_with_other_arguments():
    assert heading_matches("Install", "Install")
    assert heading_matches("url.fileURLToPath(url)", "url.fileURLToPath(url[, options])")
    assert heading_matches("`f(a)`", "`f(a, b)`")
    assert not heading_matches("url.fileURLToPath(url)", "url.fileURLToPathname(url)")
    assert not heading_matches("Install", "Installing")  # only a signature's arguments may differ
    assert not heading_matches("(x)", "(y)")


def test_key_strings_are_found_whatever_the_case_spacing_and_code_marks():
    assert fold_key("Use `ProxyPass`  and\n**ProxyPassReverse**") == "use proxypass and proxypassreverse"
    assert holds_key("Set ``AllowOverride All`` in the block.", ["allowoverride   all"])
    assert holds_key("RewriteCond \\%{HTTPS} !=on", ["RewriteCond %{HTTPS}"])
    assert not holds_key("Set AllowOverride None.", ["AllowOverride All", "Require"])
    assert not holds_key("", ["x"])


def _set(tmp: Path, **extra) -> Path:
    (tmp / "docs").mkdir(exist_ok=True)
    (tmp / "docs" / "a.md").write_text("# A\n\n## Proxy\n\nUse ProxyPass.\n\n## Logs\n\nUse %D.\n")
    path = tmp / "s.json"
    path.write_text(json.dumps({"name": "s", "docs": "docs", "questions": [
        {"id": "q1", "question": "How do I proxy?", "sections": ["a.md § Proxy"],
         "keys": ["ProxyPass"]}], **extra}))
    return path


def _chunks() -> list[Chunk]:
    return [Chunk(id="docs/a.md#0", doc_id="docs/a.md", source="a.md", title="A",
                  heading_path=("A", "Proxy"), text="Use ProxyPass."),
            Chunk(id="docs/a.md#1", doc_id="docs/a.md", source="a.md", title="A",
                  heading_path=("A", "Logs"), text="Use %D.")]


FOLLOWUP = {"id": "f1", "turns": [
    {"question": "How do I proxy?", "sections": ["a.md § Proxy"], "keys": ["ProxyPass"]},
    {"question": "and log how long it took?", "sections": ["a.md § Logs"], "keys": ["%D"]}]}


def test_follow_ups_and_unanswerable_questions_load_and_are_checked(tmp_path):
    path = _set(tmp_path, followups=[FOLLOWUP],
                unanswerable=[{"id": "u1", "question": "How do I use certbot?",
                               "absent": ["certbot"]}])
    qs = load_questions(path)
    check_sections(qs, _chunks())  # every key stands in its section, no absent string anywhere
    assert qs.keys("q1") == ["ProxyPass"] and qs.keys("f1/2") == ["%D"]
    (fu,) = followup_asks(qs)
    assert fu.before == ("How do I proxy?",) and fu.question == "and log how long it took?"
    assert [s.heading for s in fu.sections] == ["Logs"] and fu.keys == ["%D"]
    (un,) = same_subject_asks(qs)
    assert un.sections == [] and un.keys == []


def test_a_key_outside_its_section_or_an_absent_string_present_is_refused(tmp_path):
    wrong_key = {**FOLLOWUP, "turns": [FOLLOWUP["turns"][0],
                                       {**FOLLOWUP["turns"][1], "keys": ["ProxyPass"]}]}
    qs = load_questions(_set(tmp_path, followups=[wrong_key]))
    with pytest.raises(EvalDataError, match=r"f1/2: 'ProxyPass'"):
        check_sections(qs, _chunks())
    qs = load_questions(_set(tmp_path, unanswerable=[
        {"id": "u1", "question": "What does proxypass do?", "absent": ["proxyPASS"]}]))
    with pytest.raises(EvalDataError, match="stand in the documents"):
        check_sections(qs, _chunks())


def test_a_key_a_newer_page_no_longer_holds_is_noted_while_another_key_grades(tmp_path):
    """A package update rewords a page (Apache 2.4.71's "Piped Logs" no longer says "the same
    technique"): the question is graded on its other keys, and the eval names the one gone."""
    reworded = {**FOLLOWUP, "turns": [FOLLOWUP["turns"][0],
                                      {**FOLLOWUP["turns"][1], "keys": ["%D", "same technique"]}]}
    qs = load_questions(_set(tmp_path, followups=[reworded]))
    assert check_sections(qs, _chunks()) == ["f1/2: 'same technique'"]


@pytest.mark.parametrize("term, named", [
    ("QUIC", False), ("%D", False), ("websocket", True), ("certbot --apache", True),
    ("HTTP/3", False), ("rotatelogs", True), ("%Y", True)])
def test_an_absent_string_is_looked_for_as_a_term(term, named):
    """Apache 2.4.71's logs page says "log files grow quickly" and shows
    "access_log.%Y-%m-%d": neither names QUIC nor the %D format (time taken), so the
    unanswerable questions about them stay unanswerable."""
    from ragstream.measure.question_sets import names_in
    text = ("On even a moderately busy server, log files grow quickly. Use `rotatelogs` with "
            "access_log.%Y-%m-%d. Proxy WebSockets; run certbot --apache. HTTP/2 only.")
    assert names_in(text, term) is named


@pytest.mark.parametrize("extra, words", [
    ({"followups": [{"id": "f1", "turns": [FOLLOWUP["turns"][0]]}]}, "turns"),
    ({"unanswerable": [{"id": "q1", "question": "x?", "absent": ["y"]}]}, "repeated: q1"),
    ({"unanswerable": [{"id": "u1", "question": "x?", "absent": []}]}, "absent"),
    ({"followups": [{**FOLLOWUP, "turns": [FOLLOWUP["turns"][0],
                                           {**FOLLOWUP["turns"][1], "keys": [" "]}]}]},
     "empty key"),
])
def test_malformed_follow_ups_and_unanswerables_are_named(tmp_path, extra, words):
    with pytest.raises(EvalDataError, match=words):
        load_questions(_set(tmp_path, **extra))


def _row(**kw) -> dict:
    base = {"kind": "short", "first": False, "first3": False, "in_sources": True, "sentences": 3,
            "ms": 1.0, "retrieval_rank": 1, "rerank_rank": 1, "has_keys": True,
            "key_lead": False, "key_any": False, "confidence": "Medium", "answerable": True}
    return base | kw


def test_the_summary_counts_keys_follow_ups_and_same_subject_questions():
    rows = [_row(key_lead=True, key_any=True, rerank_rank=2), _row(key_any=True, rerank_rank=4),
            _row(has_keys=False, rerank_rank=None)]
    followups = [_row(first=True, key_any=True), _row(first=True), _row()]
    same = [_row(confidence="Low", answerable=False), _row(confidence="High", answerable=False)]
    other = [_row(confidence="Low", answerable=False)]
    f = summarize(rows, other, followups, same)
    assert (f["key_lead"], f["key_any"]) == (0.5, 1.0)  # of the two questions with keys
    assert f["rerank_top3"] == round(1 / 3, 4)
    assert (f["followups"], f["fu_first"], f["fu_key"]) == (3, round(2 / 3, 4), round(1 / 3, 4))
    assert (f["same_low"], f["same_high"], f["other_low"]) == (0.5, 1, 1.0)
    assert f["unans_high"] == 1 and f["high_precision"] == 0.0  # a same-subject High counts
