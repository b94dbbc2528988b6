"""Several knowledge bases (ragstream/knowledge/bases.py, Engine.for_kb, the CLI's --kb and kb
group, the API's kb field and /kb endpoints): a real Chroma in a temp dir per module, the real
embedding model. Isolation: what is ingested into one is never retrieved from another, and
deleting one leaves the others whole."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from ragstream.common.errors import KnowledgeBaseError, KnowledgeBaseNotFoundError
from ragstream.interfaces import cli
from ragstream.interfaces.service.http import create_app
from ragstream.knowledge.bases import DEFAULT, KnowledgeBases
from ragstream.state.super_prompt import View
from ragstream.workbench.api import RAGPipeline
from ragstream.workbench.engine import Engine
from tests.conftest import three_article_engine
from tests.test_service import serving

ZEBRA = ("# Zebra care\n\nThe zebra called Quagga Bob eats forty kilograms of hay every day and "
         "sleeps standing up in the north paddock of the Lindenfeld zoo.\n\n## Feeding times\n\n"
         "Quagga Bob is fed at seven in the morning and at five in the afternoon by the keeper "
         "Marisol.\n")
OTTER = ("# Otter pool\n\nThe otters of the Lindenfeld zoo swim in a pool of brackish water that "
         "is cleaned every Tuesday; the otter Pip prefers smelt to herring.\n")
ZEBRA_Q = "How much hay does Quagga Bob the zebra eat every day?"


@pytest.fixture(scope="module")
def base(tmp_path_factory, embedder) -> Engine:
    """An engine whose default knowledge base is three bundled articles, in its own index."""
    return three_article_engine(tmp_path_factory.mktemp("kbs"), embedder)


def _zoo(base: Engine, tmp_path: Path, name: str = "zoo", own: bool = False) -> Engine:
    folder = None if own else tmp_path / f"{name}-docs"
    kb = base.create_kb(name, folder)
    Path(kb.folder, "zebra.md").write_text(ZEBRA, encoding="utf-8")
    engine = base.for_kb(name)
    assert engine.ingest().processed == 1
    return engine


def _retrieved(engine: Engine, prompt: str) -> list[str]:
    sp = engine.run(prompt, until="Retrieval")
    return [r.chunk_id for r in sp.view(View.RETRIEVAL)]


@pytest.fixture
def clean(base):
    """No knowledge base but the default before and after a test."""
    def drop_all():
        for kb in base.knowledge_bases().all()[1:]:
            base.delete_kb(kb.name)
    drop_all()
    yield base
    drop_all()


# --------------------------------------------------------------------------- the registry


def test_the_default_is_the_bundled_folder_and_collection_and_cannot_go(clean):
    kbs = clean.knowledge_bases()
    default = kbs.get(None)
    assert kbs.names() == [DEFAULT] and default.is_default
    assert default.folder == str(clean.cfg.kb_dir)
    assert default.collection == clean.cfg.settings.vector_store.collection
    with pytest.raises(KnowledgeBaseError, match="cannot be deleted"):
        clean.delete_kb(DEFAULT)
    with pytest.raises(KnowledgeBaseError, match="keeps its name"):
        clean.rename_kb(DEFAULT, "other")


def test_names_are_checked_unique_in_any_case_and_unknown_ones_are_named(clean, tmp_path):
    clean.create_kb("Support docs", tmp_path / "a")
    with pytest.raises(KnowledgeBaseError, match="exists already"):
        clean.create_kb("support DOCS", tmp_path / "b")
    for bad in ("", " ", "-lead", "x" * 41, "a/b", "semi;colon"):
        with pytest.raises(KnowledgeBaseError, match="cannot be a knowledge base's name"):
            clean.create_kb(bad)
    with pytest.raises(KnowledgeBaseNotFoundError, match="There are: default, Support docs"):
        clean.for_kb("nope")
    with pytest.raises(KnowledgeBaseError, match="already the folder of knowledge base 'Support docs'"):
        clean.create_kb("again", tmp_path / "a")
    assert clean.knowledge_bases().get("support docs").name == "Support docs"


def test_a_damaged_registry_is_a_typed_error_naming_the_file(clean):
    path = KnowledgeBases(clean.cfg).path
    path.write_text("{not json", encoding="utf-8")
    try:
        with pytest.raises(KnowledgeBaseError, match="knowledge_bases.json cannot be read"):
            clean.knowledge_bases().names()
    finally:
        path.unlink()


# --------------------------------------------------------------------------- isolation


def test_what_is_ingested_into_one_is_never_retrieved_from_another(clean, tmp_path):
    zoo = _zoo(clean, tmp_path)
    assert zoo.kb == "zoo" and zoo.services.embedder is clean.services.embedder
    in_zoo = _retrieved(zoo, ZEBRA_Q)
    assert in_zoo and all(c.endswith("zebra.md#0") or "zebra.md#" in c for c in in_zoo)
    in_default = _retrieved(clean, ZEBRA_Q)
    assert in_default and not any("zebra" in c for c in in_default)
    assert not [c for c, _ in clean.find_chunks("Quagga Bob") if "zebra" in c.id]
    assert [c.id for c, how in zoo.find_chunks("Quagga Bob") if how == "phrase"]
    assert zoo.status()["kb"] == "zoo" and zoo.status()["documents"] == 1
    assert clean.status()["documents"] == 3
    sp = zoo.run(ZEBRA_Q, until="Retrieval")
    assert sp.extras.retrieval.kb == "zoo"
    stale = clean.stale(sp)  # the same pass seen with the default knowledge base chosen
    assert stale is not None and stale.stage == "Retrieval"
    assert stale.reasons == ["another knowledge base is chosen: zoo → default"]
    assert zoo.stale(sp) is None


def test_deleting_one_removes_its_index_and_own_folder_and_nothing_else(clean, tmp_path):
    own = _zoo(clean, tmp_path, "own", own=True)
    named = _zoo(clean, tmp_path, "named")
    before = _retrieved(clean, ZEBRA_Q)
    own_kb, named_kb = own.knowledge_bases().get("own"), named.knowledge_bases().get("named")
    snapshot = clean.cfg.index_dir / f"keyword-{own_kb.collection}"
    assert snapshot.is_dir() and Path(own_kb.folder).is_dir()
    assert Path(own_kb.folder).is_relative_to(clean.cfg.kbs_dir)

    clean.delete_kb("own")
    assert clean.knowledge_bases().names() == [DEFAULT, "named"]
    assert not snapshot.exists() and not Path(own_kb.folder).exists()
    collections = {c.name for c in clean.services.store.client.list_collections()}
    assert own_kb.collection not in collections and named_kb.collection in collections
    # the others are whole: the default retrieves as before, "named" still finds the zebra
    assert _retrieved(clean, ZEBRA_Q) == before and clean.status()["documents"] == 3
    assert "zebra.md" in _retrieved(clean.for_kb("named"), ZEBRA_Q)[0]

    clean.delete_kb("named")  # a folder the person named is left as it is
    assert Path(named_kb.folder, "zebra.md").read_text(encoding="utf-8") == ZEBRA
    assert named_kb.collection not in {c.name for c in clean.services.store.client.list_collections()}


def test_a_renamed_one_keeps_its_documents_and_index(clean, tmp_path):
    _zoo(clean, tmp_path)
    kb = clean.rename_kb("zoo", "Lindenfeld zoo")
    assert clean.knowledge_bases().names() == [DEFAULT, "Lindenfeld zoo"]
    with pytest.raises(KnowledgeBaseNotFoundError):
        clean.for_kb("zoo")
    renamed = clean.for_kb("lindenfeld ZOO")
    assert renamed.kb == "Lindenfeld zoo" and renamed.cfg.settings.vector_store.collection == kb.collection
    assert renamed.ingest().processed == 0  # unchanged: nothing to re-ingest
    assert "zebra.md" in _retrieved(renamed, ZEBRA_Q)[0]


# --------------------------------------------------------------------------- the CLI


@pytest.fixture
def cli_env(clean, monkeypatch):
    """The CLI's engines made from ``clean``'s configuration and models."""
    def make(kb=None):
        engine = Engine(clean.base_cfg, clean.services)
        return engine.for_kb(kb) if kb else engine
    monkeypatch.setattr(cli, "_engine", make)
    return clean


def test_cli_kb_create_ingest_run_retrieve_status_and_delete_with_confirmation(cli_env, tmp_path):
    runner = CliRunner()
    made = runner.invoke(cli.main, ["kb", "create", "zoo"])
    assert made.exit_code == 0, made.output
    folder = Path(cli_env.knowledge_bases().get("zoo").folder)
    assert f"its documents folder: {folder}" in made.output
    (folder / "otter.md").write_text(OTTER, encoding="utf-8")
    (folder / "zebra.md").write_text(ZEBRA, encoding="utf-8")
    ingested = runner.invoke(cli.main, ["ingest", "--kb", "zoo"])
    assert ingested.exit_code == 0 and "2 processed" in ingested.output, ingested.output

    listed = json.loads(runner.invoke(cli.main, ["kb", "list", "--json"]).output)
    assert [(r["name"], r["documents"]) for r in listed] == [("default", 3), ("zoo", 2)]
    status = json.loads(runner.invoke(cli.main, ["status", "--kb", "zoo"]).output)
    assert status["kb"] == "zoo" and status["documents"] == 2

    got = runner.invoke(cli.main, ["retrieve", ZEBRA_Q, "--kb", "zoo", "--json", "--no-sync",
                                   "--min-relevance", "0"])
    ctx = json.loads(got.output)
    assert ctx["kb"] == "zoo" and ctx["document_chunks"]
    assert {c["metadata"]["kb"] for c in ctx["document_chunks"]} == {"zoo"}
    assert all(c["metadata"]["path"].endswith(("zebra.md", "otter.md")) for c in ctx["document_chunks"])
    ran = runner.invoke(cli.main, ["run", ZEBRA_Q, "--kb", "zoo", "--answer", "--no-save"])
    assert ran.exit_code == 0 and "Knowledge base: zoo" in ran.output and "zebra.md" in ran.output
    elsewhere = runner.invoke(cli.main, ["run", ZEBRA_Q, "--json", "--until", "Retrieval",
                                         "--no-save", "--no-sync"])
    sp = json.loads(elsewhere.output)
    assert sp["extras"]["retrieval"]["kb"] == "default"
    assert not [c for c in sp["base_context_chunks"] if "zebra" in c["id"]]

    kept = runner.invoke(cli.main, ["kb", "delete", "zoo"], input="n\n")
    assert kept.exit_code == 1 and "Delete knowledge base 'zoo': its index (2 document(s)) and " \
                                   f"its folder {folder}?" in kept.output
    assert "zoo" in cli_env.knowledge_bases().names() and folder.is_dir()
    gone = runner.invoke(cli.main, ["kb", "delete", "zoo"], input="y\n")
    assert gone.exit_code == 0 and "deleted" in gone.output
    assert cli_env.knowledge_bases().names() == ["default"] and not folder.exists()
    unknown = runner.invoke(cli.main, ["status", "--kb", "zoo"])
    assert unknown.exit_code == 2 and "There is no knowledge base 'zoo'" in unknown.output


def test_cli_eval_answers_against_a_named_knowledge_base(cli_env, tiny_answer_set, tmp_path):
    """The tiny set's documents as knowledge base 'tiny': eval --kb asks it, nothing is
    ingested, and the sections are found in its folder."""
    docs = tiny_answer_set.parent / "docs"
    folder = tmp_path / "docs"
    shutil.copytree(docs, folder)
    cli_env.create_kb("tiny", folder)
    assert cli_env.for_kb("tiny").ingest().processed == 2
    got = CliRunner().invoke(cli.main, ["eval", "--answers", str(tiny_answer_set), "--kb", "tiny",
                                        "--json", "--limit", "2"])
    assert got.exit_code == 0, got.output
    result = json.loads(got.output[got.output.index("{"):])
    row = result["results"][0]
    assert row["kb"] == "tiny" and "nothing ingested" in row["ingest"] and row["chunks"] > 0
    assert row["in_sources"] > 0
    wrong = CliRunner().invoke(cli.main, ["eval", "--answers", str(tiny_answer_set), "--kb", "default",
                                          "--limit", "1"])
    assert wrong.exit_code == 2 and "no indexed chunk lies in these sections" in wrong.output


# --------------------------------------------------------------------------- the API


def test_the_api_takes_a_kb_and_manages_them_over_http(clean, tmp_path):
    pipeline = RAGPipeline(Engine(clean.base_cfg, clean.services))
    with serving(create_app(pipeline)) as url:
        made = httpx.post(f"{url}/kb", json={"name": "zoo", "folder": str(tmp_path / "zoo")})
        assert made.status_code == 201 and made.json()["name"] == "zoo"
        docs = [{"document_id": "zebra", "filename": "zebra.md", "content": ZEBRA}]
        ingested = httpx.post(f"{url}/ingest", params={"kb": "zoo"}, json=docs, timeout=60)
        assert ingested.status_code == 200 and ingested.json()["documents_processed"] == 1
        body = {"query": ZEBRA_Q, "context_key": "c:u", "min_relevance": 0}
        in_zoo = httpx.post(f"{url}/retrieve", json={**body, "kb": "zoo"}, timeout=60).json()
        assert in_zoo["kb"] == "zoo" and in_zoo["document_chunks"]
        assert all(c["metadata"]["kb"] == "zoo" for c in in_zoo["document_chunks"])
        in_default = httpx.post(f"{url}/retrieve", json=body, timeout=60).json()
        assert in_default["kb"] == "default"
        assert not [c for c in in_default["document_chunks"] if "Quagga" in c["text"]]
        missing = httpx.post(f"{url}/retrieve", json={**body, "kb": "nope"})
        assert missing.status_code == 404 and missing.json()["error"] == "no such knowledge base"
        assert [k["name"] for k in httpx.get(f"{url}/kb").json()] == ["default", "zoo"]
        renamed = httpx.patch(f"{url}/kb/zoo", json={"name": "zoo2"})
        assert renamed.status_code == 200 and renamed.json()["name"] == "zoo2"
        unconfirmed = httpx.delete(f"{url}/kb/zoo2")
        assert unconfirmed.status_code == 409 and "repeat its name" in unconfirmed.json()["message"]
        assert httpx.delete(f"{url}/kb/zoo2", params={"confirm": "zoo2"}).status_code == 200
        assert httpx.delete(f"{url}/kb/default", params={"confirm": "default"}).status_code == 409
        assert [k["name"] for k in httpx.get(f"{url}/kb").json()] == ["default"]
        gone = httpx.post(f"{url}/retrieve", json={**body, "kb": "zoo2"})
        assert gone.status_code == 404
    pipeline.close()
