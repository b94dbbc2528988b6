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
