"""The sidebar's uploader and ingest report, driven in-process with AppTest (and the upload action
itself with real files): chosen files are ingested with no other click and only once; a refused
file is not kept in the knowledge base's folder and never costs the file it would replace; the
report is red when a file was refused, yellow when one was skipped, green only when all went in,
and names each refused or skipped file with its reason; the uploader states the real size limit
(``ingestion.max_file_mb``); creating a knowledge base with Enter and then clicking "Create and
select" on the emptied box says nothing red.

Each page test works in a knowledge base of its own (its folder is where uploads are kept), so
the session's shared default index is never changed."""

import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest
from streamlit.testing.v1 import AppTest

from ragstream.common.config import load_config
from ragstream.interfaces.ui import ingesting, knowledge
from ragstream.interfaces.ui import state as S
from tests.ingest.jobs_support import settled
from tests.ui.tabs import fresh

ROOT = Path(__file__).resolve().parents[2]
#: the first bytes of a PNG image (a picture saved with a .pdf name)
PNG = bytes.fromhex("89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489")
GOOD_MD = (b"# Capybara husbandry\n\nThe capybara named Doris Wheelbarrow soaks in the warm pool "
           b"every morning and eats water hyacinth.\n")
GOOD_TXT = (b"Tapir notes. The tapir named Gustav Ploughshare eats forty bananas a week and "
            b"sleeps in the east barn.\n")
#: the five files of issue 32: two good ones, an empty PDF, a PNG named .pdf, an empty text file
FIVE = [("capybara.md", GOOD_MD, "text/markdown"), ("tapir.txt", GOOD_TXT, "text/plain"),
        ("empty.pdf", b"", "application/pdf"), ("photo.pdf", PNG, "application/pdf"),
        ("blank.txt", b"", "text/plain")]
#: each refused file of FIVE and words of its reason, as the report says it
REFUSED = {"empty.pdf": "the file is empty, not a PDF",
           "photo.pdf": "it is an image, not a PDF",
           "blank.txt": "empty document: nothing stored"}


@pytest.fixture(scope="module", autouse=True)
def app_env(page_env):
    """Every test here drives the page over the session's temp index."""


@pytest.fixture
def own_kb(kb_engine):
    """A knowledge base with a folder of its own (empty); deleted afterwards."""
    kb = kb_engine.create_kb(f"uploads-{uuid.uuid4().hex[:6]}")
    yield kb
    if kb_engine.knowledge_bases().find(kb.name) is not None:
        kb_engine.delete_kb(kb.name)


def page_on(kb) -> AppTest:
    """A new session of the page with knowledge base ``kb`` selected."""
    at = fresh()
    at.selectbox(key=S.KB).set_value(kb.name).run()
    assert not at.exception, at.exception
    assert at.session_state[S.KB] == kb.name
    return at


def documents(at: AppTest) -> str:
    """The sidebar's document count."""
    metric = next(m for m in at.metric if m.label == "Documents")
    return metric.value


def sidebar_errors(at: AppTest) -> list[str]:
    return [e.value for e in at.sidebar.error]


def test_chosen_files_are_ingested_at_once_and_refused_ones_named_and_not_kept(own_kb, monkeypatch):
    calls = []
    real = ingesting.ingest_uploads
    monkeypatch.setattr(ingesting, "ingest_uploads",
                        lambda *a, **k: calls.append(len(a[2])) or real(*a, **k))
    at = page_on(own_kb)
    assert documents(at) == "0"
    settled(at.file_uploader[0].set_value(FIVE).run())  # choosing is all: no button
    assert not at.exception, at.exception
    assert calls == [5]
    assert documents(at) == "2"
    report = at.session_state[S.INGEST_REPORT]
    assert (report["processed"], report["skipped"], report["failed"]) == (2, 0, 3)
    # one red report, naming each refused file with its reason; no green box
    errors = sidebar_errors(at)
    assert len(errors) == 1 and not at.sidebar.success, errors
    assert "5 files chosen: 2 ingested" in errors[0] and "3 refused and not kept" in errors[0]
    for name, reason in REFUSED.items():
        assert f"`{name}` — {reason}" in errors[0], (name, errors[0])
    # what to do about the two PDFs is said once, not once per file
    assert errors[0].count("Ingestion reads Markdown") == 1, errors[0]
    # the refused files are not in the knowledge base's folder; the good ones are
    assert sorted(p.name for p in Path(own_kb.folder).iterdir()) == ["capybara.md", "tapir.txt"]
    # the uploader still lists what was chosen, and drawing the page again ingests nothing twice
    assert [f.name for f in at.file_uploader[0].value] == [n for n, _d, _m in FIVE]
    at.run()
    at.text_area(key=S.PROMPT).set_value("Doris Wheelbarrow").run()
    assert calls == [5] and at.session_state[S.INGEST_REPORT] == report
    # the new text is searchable in that knowledge base
    at.text_area(key=S.PROMPT).set_value("What does Doris Wheelbarrow eat?").run()
    at.button(key="run").click().run()
    assert at.session_state[S.SP].final_selection_ids[0].endswith("/capybara.md#0")
    assert calls == [5]
    # a folder ingest empties the uploader (its files were handled under the report it replaces)
    at.text_input(key="ingest_folder").set_value(own_kb.folder).run()
    settled(at.button(key="ingest").click().run())
    assert at.file_uploader[0].value in (None, []) and calls == [5]


def test_the_report_is_green_only_when_all_went_in_and_yellow_when_one_was_skipped(own_kb):
    at = page_on(own_kb)
    settled(at.file_uploader[0].set_value([FIVE[0]]).run())
    assert [s.value for s in at.sidebar.success] == ["1 file chosen: 1 ingested (1 chunk)."]
    assert not at.sidebar.error and not at.sidebar.warning
    # the same file again: nothing to do, said in yellow with the file's name
    settled(at.file_uploader[0].set_value([FIVE[0], FIVE[1]]).run())
    warnings = [w.value for w in at.sidebar.warning]
    assert len(warnings) == 1 and not at.sidebar.success and not at.sidebar.error, warnings
    assert warnings[0].startswith("2 files chosen: 1 ingested (1 chunk), 1 skipped (unchanged).")
    assert f"`capybara.md` — {ingesting.UNCHANGED_REASON}" in warnings[0]
    assert documents(at) == "2"


def test_a_refused_upload_never_costs_the_file_it_would_replace(own_kb, kb_engine):
    """An empty file and a picture under the names of two good documents: both refused, and the
    good files stay in the folder and in the index exactly as they were."""
    at = page_on(own_kb)
    good_pdf = (ROOT / "benchmarks" / "formats" / "kb-pdf" / "faq.pdf").read_bytes()
    settled(at.file_uploader[0].set_value([FIVE[0], ("faq.pdf", good_pdf, "application/pdf")]).run())
    assert at.session_state[S.INGEST_REPORT]["processed"] == 2, at.session_state[S.INGEST_REPORT]
    folder = Path(own_kb.folder)
    engine = kb_engine.for_kb(own_kb.name)
    stored = {i: d.doc_hash for i, d in engine.services.store.documents().items()}
    at.file_uploader[0].set_value([("capybara.md", b"", "text/markdown"),
                                   ("faq.pdf", PNG, "application/pdf")]).run()
    settled(at)
    assert not at.exception, at.exception
    report = at.session_state[S.INGEST_REPORT]
    assert (report["processed"], report["failed"], report["deleted"]) == (0, 2, 0), report
    errors = sidebar_errors(at)
    assert "`capybara.md` — empty document: nothing stored" in errors[0], errors
    assert "`faq.pdf` — it is an image, not a PDF" in errors[0], errors
    assert (folder / "capybara.md").read_bytes() == GOOD_MD
    assert (folder / "faq.pdf").read_bytes() == good_pdf
    assert sorted(p.name for p in folder.iterdir()) == ["capybara.md", "faq.pdf"]  # nothing hidden left
    assert {i: d.doc_hash for i, d in engine.services.store.documents().items()} == stored
    assert documents(at) == "2"


def test_the_uploader_states_the_real_limit():
    at = fresh()
    limit = load_config().settings.ingestion.max_file_mb
    uploader = at.file_uploader[0]
    assert uploader.proto.max_upload_size_mb == int(limit)  # shown as "Limit 10MB per file"
    assert f"up to {limit:g} MB each (ingestion.max_file_mb)" in uploader.help


def test_the_uploaders_limit_rounds_a_fraction_up_and_never_passes_the_servers():
    def engine(mb: float):
        return SimpleNamespace(cfg=SimpleNamespace(settings=SimpleNamespace(
            ingestion=SimpleNamespace(max_file_mb=mb))))
    assert ingesting.upload_limit_mb(engine(10.0), 200) == 10
    assert ingesting.upload_limit_mb(engine(0.5), 200) == 1
    assert ingesting.upload_limit_mb(engine(2.5), 200) == 3
    assert ingesting.upload_limit_mb(engine(500.0), 200) == 200


def test_a_file_over_the_limit_is_refused_with_the_limit_named(fresh_engine):
    st_state: dict = {}
    S.init_state(st_state)
    limits = fresh_engine.cfg.settings.ingestion
    ok = ingesting.ingest_uploads(fresh_engine, st_state, [("big.md", b"x" * (limits.max_file_bytes + 1)),
                                                         ("fine.md", GOOD_MD)])
    assert ok, st_state[S.ERROR]
    summary = ingesting.ingest_summary(st_state[S.INGEST_REPORT])
    assert summary is not None and summary.level == "error"
    assert summary.lines == [f"`big.md` — file too large: {limits.max_file_mb:.1f} MB, the limit "
                             f"is {limits.max_file_mb:g} MB (ingestion.max_file_mb in "
                             f"config/settings.json)."]
    assert summary.advice == ["Split it into smaller files, or raise the limit."]
    assert sorted(p.name for p in fresh_engine.cfg.uploads_dir.iterdir()) == ["fine.md"]


def test_folder_ingest_keeps_its_own_button_and_an_empty_box_says_what_to_do(tmp_path):
    at = fresh()
    button = at.button(key="ingest")
    assert button.label == "Ingest folder"
    button.click().run()
    assert any("No folder given" in e.value for e in at.error), [e.value for e in at.error]
    # a folder with a file that gives nothing to store: yellow, naming it
    docs = tmp_path / "notes"
    docs.mkdir()
    (docs / "heading.md").write_text("# Only a heading\n", encoding="utf-8")
    at.text_input(key="ingest_folder").set_value(str(docs)).run()
    settled(at.button(key="ingest").click().run())
    warnings = [w.value for w in at.sidebar.warning]
    assert any("`notes/heading.md` — only headings, no text under them" in w for w in warnings), warnings
    assert not at.sidebar.success


def test_create_with_enter_then_a_click_on_the_emptied_box_says_nothing_red(kb_engine):
    name = f"enter-{uuid.uuid4().hex[:6]}"
    at = fresh()
    try:
        at.text_input(key=S.KB_NEW_NAME).set_value(name)
        # Enter submits the form as the button does: created, selected, the box emptied
        at.button(key="FormSubmitter:kb_create-Create and select").click().run()
        assert at.session_state[S.KB] == name
        assert at.text_input(key=S.KB_NEW_NAME).value == ""
        at.button(key="FormSubmitter:kb_create-Create and select").click().run()
        assert not at.exception and not at.error, [e.value for e in at.error]
        assert at.session_state[S.KB] == name and kb_engine.knowledge_bases().names().count(name) == 1
        # a folder typed without a name: a hint, not an error
        at.text_input(key=S.KB_NEW_FOLDER).set_value("/tmp/somewhere")
        at.button(key="FormSubmitter:kb_create-Create and select").click().run()
        assert not at.error and any(knowledge.NAME_FIRST in i.value for i in at.info)
        # the rename box, emptied after a rename made with Enter, is the same
        at.button(key="FormSubmitter:kb_rename-Rename").click().run()
        assert not at.error and at.session_state[S.KB] == name
    finally:
        if kb_engine.knowledge_bases().find(name) is not None:
            kb_engine.delete_kb(name)


def uploaded(file_id: str, name: str, data: bytes) -> SimpleNamespace:
    """What the uploader hands over for one file (Streamlit's ``UploadedFile``'s parts used)."""
    return SimpleNamespace(file_id=file_id, name=name, getvalue=lambda: data)


def test_only_files_added_since_the_last_upload_report_are_new(fresh_engine):
    st_state: dict = {}
    S.init_state(st_state)
    first = [uploaded("a", "capybara.md", GOOD_MD), uploaded("b", "blank.txt", b"")]
    assert ingesting.new_uploads(st_state, first) == first
    ingesting.ingest_uploads(fresh_engine, st_state, [(f.name, f.getvalue()) for f in first],
                           ids=[f.file_id for f in first])
    assert ingesting.new_uploads(st_state, first) == []  # refused or not, each is handled once
    more = first + [uploaded("c", "tapir.txt", GOOD_TXT)]
    assert ingesting.new_uploads(st_state, more) == more[2:]
    ingesting.ingest_uploads(fresh_engine, st_state, [("tapir.txt", GOOD_TXT)], ids=["c"])
    assert ingesting.new_uploads(st_state, more) == []
    assert [r["name"] for r in st_state[S.INGEST_REPORT]["files"]] == ["tapir.txt"]
    # a folder ingest replaces the report: the uploader is emptied (a new key), not read again
    nonce = st_state[S.UPLOAD_NONCE]
    assert ingesting.ingest_folder(fresh_engine, st_state, str(fresh_engine.cfg.uploads_dir))
    assert st_state[S.UPLOAD_NONCE] == nonce + 1


def test_an_ingest_that_cannot_run_leaves_the_folder_as_it_was_and_names_each_file(fresh_engine):
    from ragstream.knowledge.ingest.ingestor import IngestLock
    from ragstream.workbench.engine import Engine

    engine = Engine(fresh_engine.cfg.with_overrides({"settings.chunking.ingest_lock_wait_s": 0.2}))
    engine.services.embedder = fresh_engine.services.embedder
    folder = engine.cfg.uploads_dir
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "capybara.md").write_bytes(GOOD_MD)
    st_state: dict = {}
    S.init_state(st_state)
    with IngestLock(engine.cfg.index_dir, 5):  # another ingestion holds the index
        ok = ingesting.ingest_uploads(engine, st_state, [("capybara.md", b"# New\n\nOther text.\n"),
                                                       ("tapir.txt", GOOD_TXT)], ids=["a", "b"])
    assert not ok
    assert st_state[S.ERROR][0] == "ingestion locked"
    assert sorted(p.name for p in folder.iterdir()) == ["capybara.md"]
    assert (folder / "capybara.md").read_bytes() == GOOD_MD
    report = st_state[S.INGEST_REPORT]
    assert report["upload_ids"] == ["a", "b"] and report["failed"] == 2
    summary = ingesting.ingest_summary(report)
    assert summary is not None and summary.level == "error"
    assert [line.split(" — ")[0] for line in summary.lines] == ["`capybara.md`", "`tapir.txt`"]
    assert all("not ingested: Another ingestion into" in line for line in summary.lines)
