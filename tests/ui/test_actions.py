"""The upload action itself (AppTest cannot drive st.file_uploader)."""

from ragstream.ui import actions
from ragstream.ui import state as S


def test_ingest_uploads_saves_and_ingests(fresh_engine, tmp_path):
    st_state = {}
    S.init_state(st_state)
    ok = actions.ingest_uploads(fresh_engine, st_state,
                                [("notes.md", b"# Notes\n\nOwls hunt at night. They fly silently.\n")])
    assert ok, st_state[S.ERROR]
    assert (fresh_engine.cfg.uploads_dir / "notes.md").is_file()
    assert st_state[S.INGEST_REPORT]["processed"] == 1
    assert "uploads/notes.md" in fresh_engine.services.store.documents()


def test_ingest_uploads_rejects_other_types(fresh_engine):
    st_state = {}
    S.init_state(st_state)
    assert not actions.ingest_uploads(fresh_engine, st_state, [("x.pdf", b"%PDF")])
    kind, message = st_state[S.ERROR]
    assert kind == "ingestion" and "x.pdf" in message
