"""The Eval tab: the benchmark run with the files' and the session's settings, its table,
chart and question rows (on a real run over two articles), and the tab's controls (AppTest)."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from ragstream.backends.services import build_services
from ragstream.interfaces.ui import eval_tab
from ragstream.interfaces.ui import state as S
from tests.ui.tabs import open_tab

ROOT = Path(__file__).resolve().parents[2]
APP = str(ROOT / "ui_streamlit.py")


@pytest.fixture(scope="module")
def tiny(tiny_answer_set) -> Path:
    return tiny_answer_set


@pytest.fixture(scope="module")
def outcome(tiny, cfg, embedder) -> dict:
    def services_for(c):
        s = build_services(c)
        s.embedder = embedder
        return s

    overrides = {"limits.N2_RERANK_TOP_K": 3}
    return eval_tab.run(str(tiny), cfg, cfg.with_overrides(overrides), overrides, 2, services_for)


def test_a_run_compares_the_session_with_the_files(outcome, cfg):
    assert list(outcome["runs"]) == [eval_tab.FILES, eval_tab.SESSION]
    assert outcome["diff"] == ["limits.N2_RERANK_TOP_K: 50 → 3"]
    files, session = outcome["runs"].values()
    assert files["questions"] == session["questions"] == 2  # the limit
    # N2 = 3 keeps three reranked chunks: a section ranked lower is not found in the session run
    ranks = [r["rerank_rank"] for r in session["rows"]]
    assert all(r is None or r <= 3 for r in ranks)
    rows = eval_tab.table_rows(outcome)
    assert [r["settings"] for r in rows] == ["config files", "session"]
    assert rows[0]["first 3"] == files["first3"] and rows[1]["median ms"] == session["median_ms"]
    widths = eval_tab.table_columns()
    assert set(widths) == set(rows[0]) and sum(w["width"] for w in widths.values()) <= 780
    assert eval_tab.heading(outcome).startswith("**tiny.json** · session vs files: limits.N2")


def test_question_rows_put_misses_first_and_the_chart_has_a_point_per_measure(outcome):
    rows = eval_tab.question_rows(outcome)
    assert len(rows) == 4
    keys = [(r["first 3"], r["first"]) for r in rows]
    assert keys == sorted(keys)
    points = eval_tab.chart_points(outcome)
    assert {(p["settings"], p["measure"]) for p in points} == {
        (s, m) for s in ("config files", "session") for m in eval_tab.CHART_METRICS.values()}
    spec = eval_tab.quality_chart(outcome).to_dict()
    assert len(spec["datasets"][next(iter(spec["datasets"]))]) == 4
    assert spec["layer"][0]["encoding"]["y"]["scale"]["domain"] == [0, 1]


def test_no_overrides_means_one_run_and_the_estimate_says_so(tiny, cfg, embedder):
    def services_for(c):
        s = build_services(c)
        s.embedder = embedder
        return s

    out = eval_tab.run(str(tiny), cfg, cfg, {"limits.N2_RERANK_TOP_K": 50}, 1, services_for)
    assert list(out["runs"]) == [eval_tab.FILES] and out["diff"] == []  # same value: no diff
    assert eval_tab.estimate(10, 1) == "about 30 s" and eval_tab.estimate(100, 2) == "about 6 min"
    labels = eval_tab.bundled_sets()
    assert any(label.startswith("kb — 50 questions") for label in labels)
    assert any(label.startswith("npm-docs — 55 questions") for label in labels)


def test_the_tab_runs_a_set_shows_errors_and_compares_settings(page_env, tiny, tmp_path):
    at = AppTest.from_file(APP, default_timeout=600).run()
    assert not at.exception
    open_tab(at, "Eval")
    assert at.selectbox(key=S.EVAL_SET).value.startswith("kb — 50 questions")
    # a bad file: the error names the problem, the page goes on
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": "bad", "docs": "nowhere", "questions": '
                   '[{"id": "a", "question": "q", "sections": ["a.md § A"]}]}')
    at.text_input(key=S.EVAL_PATH).set_value(str(bad)).run()
    at.button(key="run_eval").click().run()
    assert not at.exception
    assert any("does not exist" in e.value for e in at.error)
    # the user's own set, two questions, files only
    at.text_input(key=S.EVAL_PATH).set_value(str(tiny)).run()
    at.number_input(key=S.EVAL_LIMIT).set_value(2).run()
    assert any("one run" in c.value for c in at.caption)
    at.button(key="run_eval").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    result = at.session_state[S.EVAL_RESULT]
    assert list(result["runs"]) == ["config files"] and result["runs"]["config files"]["questions"] == 2
    frames = [d.value for d in at.dataframe]
    table = next(f for f in frames if "MRR rerank" in f.columns)
    assert list(table["settings"]) == ["config files"]
    # with a session setting: two runs side by side
    at.number_input(key="set_limits.N2_RERANK_TOP_K").set_value(4)
    at.button(key="FormSubmitter:settings-Apply").click().run()
    assert any("Session settings differ: limits.N2_RERANK_TOP_K: 50 → 4" in c.value
               for c in at.caption)
    at.button(key="run_eval").click().run()
    assert not at.exception and not at.error
    table = next(d.value for d in at.dataframe if "MRR rerank" in d.value.columns)
    assert list(table["settings"]) == ["config files", "session"]
