"""What the page's in-process tests share."""

import pytest


@pytest.fixture(scope="module")
def page_env(tmp_path_factory, kb_engine):
    """Point the page at the session's already-ingested temp index (shared with kb_engine),
    with a fresh uploads folder and Streamlit's resource cache emptied before and after."""
    mp = pytest.MonkeyPatch()
    mp.setenv("RAGSTREAM_INDEX_DIR", str(kb_engine.cfg.index_dir))
    mp.setenv("RAGSTREAM_UPLOADS_DIR", str(tmp_path_factory.mktemp("page") / "uploads"))
    import streamlit as st

    st.cache_resource.clear()
    yield
    st.cache_resource.clear()
    mp.undo()


@pytest.fixture
def llm_page_env(kb_engine, tmp_path_factory):
    """The page over the session's index, without an LLM endpoint until a test sets one (the
    returned MonkeyPatch sets ``RAGSTREAM_LLM_BASE_URL`` and ``RAGSTREAM_LLM_MODEL``); a fresh
    uploads folder, Streamlit's resource cache emptied before and after."""
    import streamlit as st

    mp = pytest.MonkeyPatch()
    mp.setenv("RAGSTREAM_INDEX_DIR", str(kb_engine.cfg.index_dir))
    mp.setenv("RAGSTREAM_UPLOADS_DIR", str(tmp_path_factory.mktemp("llm-page") / "uploads"))
    for name in ("RAGSTREAM_LLM_BASE_URL", "RAGSTREAM_LLM_MODEL"):
        mp.delenv(name, raising=False)
    st.cache_resource.clear()
    yield mp
    st.cache_resource.clear()
    mp.undo()
