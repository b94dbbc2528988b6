"""``ragstream eval`` on a small BEIR-format set cut from SciFact (real index, real model)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from ragstream.common.errors import EvalDataError
from ragstream.measure.evaluation import Query, evaluate, load_beir, select_queries
from tests.conftest import make_config

SCIFACT = Path(__file__).resolve().parents[2] / "shared" / "data" / "scifact"
N_QUERIES, N_OTHER_DOCS = 8, 40


def make_beir(target: Path, n_queries: int = N_QUERIES, n_other: int = N_OTHER_DOCS) -> Path:
    """The first judged train queries, their relevant abstracts and some others."""
    if not SCIFACT.is_dir():
        pytest.skip(f"the SciFact data set is not at {SCIFACT} (shared/ beside the checkout)")
    docs, queries, qrels = load_beir(SCIFACT, "train")
    chosen = select_queries(queries, qrels, n_queries)
    needed = {d for q in chosen for d in qrels[q.id]}
    keep = [d for d in docs if d.id in needed] + [d for d in docs if d.id not in needed][:n_other]
    (target / "qrels").mkdir(parents=True)
    (target / "corpus.jsonl").write_text("".join(
        json.dumps({"_id": d.id, "title": d.title, "text": d.text}) + "\n" for d in keep))
    (target / "queries.jsonl").write_text("".join(
        json.dumps({"_id": q.id, "text": q.text}) + "\n" for q in chosen))
    rows = [f"{q.id}\t{d}\t{g}" for q in chosen for d, g in qrels[q.id].items()]
    (target / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\n" + "\n".join(rows) + "\n")
    return target


@pytest.fixture(scope="module")
def beir(tmp_path_factory) -> Path:
    return make_beir(tmp_path_factory.mktemp("beir") / "mini")


@pytest.fixture(scope="module")
def eval_cfg(tmp_path_factory):
    # N1 = 5: the hybrid list is cut at 5, the BM25-only and dense-only lists are not
    return make_config(tmp_path_factory.mktemp("eval-index")).with_limits(
        N1_RETR_MAX_CANDIDATES=5, N2_RERANK_TOP_K=5)


@pytest.fixture(scope="module")
def result(beir, eval_cfg, embedder):
    from ragstream.backends.services import build_services
    from ragstream.measure.evaluation import eval_config

    services = build_services(eval_config(eval_cfg, beir))
    services.embedder = embedder  # the session's model: it loads once
    return evaluate(beir, "train", eval_cfg, services=services)


def test_every_system_is_reported_with_its_metrics(result):
    names = [s["name"] for s in result["systems"]]
    assert names == ["dense", "bm25", "hybrid", "hybrid+rerank:offline"]
    assert result["default"] == "hybrid+rerank:offline"
    for s in result["systems"]:
        assert set(s) >= {"name", "ndcg@10", "recall@100", "mrr@10", "p@5", "p50_ms", "p95_ms"}
        assert all(0.0 <= s[k] <= 1.0 for k in ("ndcg@10", "recall@100", "mrr@10", "p@5"))
        assert 0 < s["p50_ms"] <= s["p95_ms"]
        assert s["queries"] == N_QUERIES
    # the judged abstracts are in a 50-document corpus: every system finds most of them
    assert all(s["ndcg@10"] > 0.3 for s in result["systems"])
    assert result["index"]["documents"] == result["documents"] > N_OTHER_DOCS
    assert result["index"]["reused"] is False
    c = result["comparisons"][0]
    assert c["system"] == "hybrid+rerank:offline" and c["baseline"] == "hybrid"
    assert c["ci_low"] <= c["mean_diff"] <= c["ci_high"]


def test_bm25_and_dense_search_the_whole_corpus(result):
    by = {s["name"]: s for s in result["systems"]}
    # hybrid only has N1 = 5 candidates; the single-signal systems rank the whole corpus, so
    # their recall@100 reaches every judged abstract
    assert by["dense"]["recall@100"] == 1.0
    assert by["hybrid"]["recall@100"] < by["dense"]["recall@100"]


def test_the_index_is_reused_until_the_corpus_changes(beir, eval_cfg, embedder, tmp_path):
    from ragstream.backends.services import build_services
    from ragstream.measure.evaluation import eval_config

    services = build_services(eval_config(eval_cfg, beir))
    services.embedder = embedder
    again = evaluate(beir, "train", eval_cfg, services=services, limit=2)
    assert again["index"]["reused"] is True and again["queries"] == 2

    changed = tmp_path / "mini"
    shutil.copytree(beir, changed)
    with (changed / "corpus.jsonl").open("a") as f:
        f.write(json.dumps({"_id": "extra-1", "title": "Extra", "text": "A new abstract."}) + "\n")
    other = build_services(eval_config(eval_cfg, changed))
    other.embedder = embedder
    rebuilt = evaluate(changed, "train", eval_cfg, services=other, limit=1)
    assert rebuilt["index"]["reused"] is False
    assert rebuilt["documents"] == again["documents"] + 1


def test_bad_folders_and_splits_say_what_is_wrong(tmp_path, beir):
    with pytest.raises(EvalDataError, match="corpus.jsonl is missing"):
        load_beir(tmp_path, "train")
    with pytest.raises(EvalDataError, match="splits here: train"):
        load_beir(beir, "test")


def test_query_subsets_split_by_id_parity():
    queries = [Query(str(i), f"q{i}") for i in range(1, 7)]
    qrels = {str(i): {"d": 1} for i in range(1, 7)} | {"6": {"d": 0}}
    assert [q.id for q in select_queries(queries, qrels)] == ["1", "2", "3", "4", "5"]
    assert [q.id for q in select_queries(queries, qrels, subset="even")] == ["2", "4"]
    assert [q.id for q in select_queries(queries, qrels, subset="odd", limit=2)] == ["1", "3"]


def test_cli_eval_prints_the_table_and_json(beir, eval_cfg, monkeypatch, tmp_path):
    from ragstream.interfaces.cli import main

    monkeypatch.setenv("RAGSTREAM_INDEX_DIR", str(eval_cfg.index_dir))
    out = tmp_path / "result.json"
    res = CliRunner().invoke(main, ["eval", "--data", str(beir), "--split", "train",
                                    "--limit", "2", "--json", "--out", str(out)])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert {s["name"] for s in data["systems"]} >= {"bm25", "dense", "hybrid"}
    assert json.loads(out.read_text())["queries"] == 2
    table = CliRunner().invoke(main, ["eval", "--data", str(beir), "--split", "train", "--limit", "1"])
    assert table.exit_code == 0 and "nDCG@10" in table.stdout and "hybrid+rerank:offline *" in table.stdout
    bad = CliRunner().invoke(main, ["eval", "--data", str(beir), "--split", "dev"])
    assert bad.exit_code == 2 and "qrels/dev.tsv is missing" in bad.output
