import json
import shutil
from pathlib import Path

import pytest

from ragstream.common.config import DEFAULT_CONFIG_DIR, load_config
from ragstream.common.errors import ConfigError


@pytest.fixture
def cdir(tmp_path) -> Path:
    target = tmp_path / "config"
    shutil.copytree(DEFAULT_CONFIG_DIR, target)
    return target


def edit(path: Path, fn) -> None:
    data = json.loads(path.read_text())
    fn(data)
    path.write_text(json.dumps(data))


def test_shipped_config_loads_with_seed_defaults():
    cfg = load_config(env={})
    assert cfg.limits.N0_QUERY_PIECES == 5
    assert cfg.limits.N1_RETR_MAX_CANDIDATES == 200
    assert cfg.limits.N2_RERANK_TOP_K == 50
    assert cfg.limits.N3_FINAL_SELECTION_MAX == 24
    assert cfg.settings.retrieval.tau == 9.0


def test_unknown_key_names_key_and_allowed_keys(cdir):
    edit(cdir / "pipeline_limits.json", lambda d: d.update(N9_BOGUS=1))
    with pytest.raises(ConfigError) as err:
        load_config(cdir, env={})
    msg = str(err.value)
    assert "N9_BOGUS" in msg and "unknown key" in msg and "N0_QUERY_PIECES" in msg


def test_unknown_nested_key_lists_allowed_keys(cdir):
    edit(cdir / "settings.json", lambda d: d["retrieval"].update(tua=9))
    with pytest.raises(ConfigError) as err:
        load_config(cdir, env={})
    assert "retrieval.tua" in str(err.value) and "tau" in str(err.value)


def test_bad_enum_value_names_allowed_values(cdir):
    edit(cdir / "settings.json", lambda d: d["reranker"].update(backend="gpu"))
    with pytest.raises(ConfigError) as err:
        load_config(cdir, env={})
    msg = str(err.value)
    assert "reranker.backend" in msg and "'auto'" in msg and "'offline'" in msg and "'gpu'" in msg


def test_bad_number_is_rejected(cdir):
    edit(cdir / "pipeline_limits.json", lambda d: d.update(N3_FINAL_SELECTION_MAX=0))
    with pytest.raises(ConfigError, match="N3_FINAL_SELECTION_MAX"):
        load_config(cdir, env={})


def test_rerank_cap_cannot_exceed_retrieval_cap(cdir):
    edit(cdir / "pipeline_limits.json", lambda d: d.update(N1_RETR_MAX_CANDIDATES=10, N2_RERANK_TOP_K=50))
    with pytest.raises(ConfigError, match="N2_RERANK_TOP_K"):
        load_config(cdir, env={})


def test_invalid_json_names_line(cdir):
    (cdir / "settings.json").write_text('{"paths": {,}}')
    with pytest.raises(ConfigError, match="line 1"):
        load_config(cdir, env={})


def test_missing_file(cdir):
    (cdir / "agents" / "A3_NLI_Gate.json").unlink()
    with pytest.raises(ConfigError, match="A3_NLI_Gate.json is missing"):
        load_config(cdir, env={})


def test_environment_overrides_paths_store_and_llm(tmp_path):
    cfg = load_config(env={
        "RAGSTREAM_INDEX_DIR": str(tmp_path / "idx"),
        "RAGSTREAM_KB_DIR": str(tmp_path / "kb"),
        "RAGSTREAM_CHROMA_URL": "http://127.0.0.1:8123",
        "RAGSTREAM_LLM_BASE_URL": "http://127.0.0.1:9999/v1",
        "RAGSTREAM_LLM_MODEL": "qwen2.5-0.5b",
        "RAGSTREAM_RERANKER_BACKEND": "offline",
    })
    assert cfg.index_dir == tmp_path / "idx"
    assert cfg.kb_dir == tmp_path / "kb"
    assert cfg.settings.vector_store.mode == "http"
    assert cfg.settings.vector_store.url == "http://127.0.0.1:8123"
    assert cfg.settings.llm.base_url == "http://127.0.0.1:9999/v1"
    assert cfg.settings.llm.model == "qwen2.5-0.5b"
    assert cfg.settings.reranker.backend == "offline"


def test_milvus_url_from_the_environment_picks_the_milvus_engine():
    cfg = load_config(env={"RAGSTREAM_MILVUS_URL": "http://127.0.0.1:19530"})
    assert (cfg.settings.vector_store.mode, cfg.settings.vector_store.url) == (
        "milvus", "http://127.0.0.1:19530")
    with pytest.raises(ConfigError, match="RAGSTREAM_CHROMA_URL and RAGSTREAM_MILVUS_URL are both set"):
        load_config(env={"RAGSTREAM_MILVUS_URL": "http://127.0.0.1:19530",
                         "RAGSTREAM_CHROMA_URL": "http://127.0.0.1:8000"})


def test_bad_environment_value_is_a_config_error_naming_the_variable():
    with pytest.raises(ConfigError) as err:
        load_config(env={"RAGSTREAM_RERANKER_BACKEND": "fast"})
    msg = str(err.value)
    assert "reranker.backend" in msg and "'fast'" in msg and "'offline'" in msg
    assert "set by the environment variable RAGSTREAM_RERANKER_BACKEND" in msg


def test_config_dir_from_environment(cdir):
    edit(cdir / "pipeline_limits.json", lambda d: d.update(N0_QUERY_PIECES=3))
    assert load_config(env={"RAGSTREAM_CONFIG_DIR": str(cdir)}).limits.N0_QUERY_PIECES == 3


def test_with_limits_validates():
    cfg = load_config(env={})
    assert cfg.with_limits(N3_FINAL_SELECTION_MAX=5).limits.N3_FINAL_SELECTION_MAX == 5
    with pytest.raises(ConfigError):
        cfg.with_limits(N3_FINAL_SELECTION_MAX=-1)


def test_llm_url_without_model_is_an_error():
    with pytest.raises(ConfigError, match="llm.model is required"):
        load_config(env={"RAGSTREAM_LLM_BASE_URL": "http://127.0.0.1:9999/v1"})
