"""PDF, Word, PowerPoint, HTML and EPUB files through ingestion: a folder, the uploads, the
report. The documents are the bundled knowledge base made by real tools
(benchmarks/make_formats.py: pandoc, Chromium's print to PDF), committed beside the answer sets."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

FORMATS = Path(__file__).resolve().parents[2] / "benchmarks" / "formats"


def copy(fmt: str, stem: str, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy(FORMATS / f"kb-{fmt}" / f"{stem}.{fmt}", folder))


def test_a_folder_of_every_format_is_ingested_with_headings_and_pdf_pages(fresh_engine, tmp_path):
    kb = tmp_path / "kb"
    for fmt in ("pdf", "docx", "pptx", "html", "epub"):
        copy(fmt, "faq", kb)
    (kb / "notes.md").write_text("# Notes\n\nPlain Markdown beside them.\n", encoding="utf-8")
    report = fresh_engine.ingest(kb)
    assert report.failed == 0, report.errors
    assert report.processed == 6
    chunks = fresh_engine.services.store.all_chunks()
    by_doc: dict[str, list] = {}
    for c in chunks:
        by_doc.setdefault(c.doc_id, []).append(c)
    assert set(by_doc) == {f"kb/faq.{f}" for f in ("pdf", "docx", "pptx", "html", "epub")} | {"kb/notes.md"}
    for doc_id, found in by_doc.items():
        sections = {c.section for c in found}
        if doc_id == "kb/faq.pptx":  # one slide per second-level section
            assert {"General questions", "Questions about the pipeline"} <= sections, sections
        elif doc_id != "kb/notes.md":  # the FAQ's questions are its headings
            assert "Does RAGstream need an internet connection or an API key?" in sections, doc_id
    pdf = sorted(by_doc["kb/faq.pdf"], key=lambda c: c.chunk_index)
    assert pdf[0].page == 1 and pdf[-1].page_end >= 2  # the FAQ prints on several pages
    assert all(c.page >= 1 and c.page_end >= c.page for c in pdf)
    assert all(" p. " in c.citation_label or " pp. " in c.citation_label for c in pdf)
    assert all(c.page == 0 for c in by_doc["kb/faq.docx"])
    # ingesting again converts nothing: unchanged files are decided on their bytes
    again = fresh_engine.ingest(kb)
    assert again.skipped == 6 and again.processed == 0


def test_refused_files_are_in_the_report_with_their_reason_and_the_rest_is_ingested(fresh_engine, tmp_path):
    kb = tmp_path / "kb"
    copy("html", "faq", kb)
    good = (FORMATS / "kb-pdf" / "faq.pdf").read_bytes()
    (kb / "truncated.pdf").write_bytes(good[: len(good) // 3])
    (kb / "lies.docx").write_bytes(b"%PDF-1.7\n" + good[9:2000])
    (kb / "page.html").write_text("<html><body><main><h1>Saved</h1><p>A saved page.</p></main></body></html>",
                                  encoding="utf-8")
    (kb / "page_files").mkdir()
    (kb / "page_files" / "frame.html").write_text("<html><body><p>an ad frame</p></body></html>",
                                                  encoding="utf-8")
    report = fresh_engine.ingest(kb)
    assert report.processed == 2  # faq.html and page.html; the page's asset folder is not read
    assert report.failed == 2
    errors = "\n".join(report.errors)
    assert "kb/truncated.pdf: DamagedFileError" in errors
    assert "kb/lies.docx: UnsupportedFormatError" in errors and "it is a PDF" in errors
    assert "frame.html" not in errors and not any("frame" in c.doc_id
                                                  for c in fresh_engine.services.store.all_chunks())


@pytest.mark.parametrize("fmt", ["pdf", "docx", "pptx", "html", "epub"])
def test_the_uploader_takes_each_format(fresh_engine, fmt):
    from ragstream.interfaces.ui import ingesting
    from ragstream.interfaces.ui import state as S

    st_state: dict = {}
    S.init_state(st_state)
    assert fmt in ingesting.upload_types(fresh_engine)
    data = (FORMATS / f"kb-{fmt}" / f"faq.{fmt}").read_bytes()
    assert ingesting.ingest_uploads(fresh_engine, st_state, [(f"faq.{fmt}", data)]), st_state[S.ERROR]
    report = st_state[S.INGEST_REPORT]
    assert report["processed"] == 1 and report["failed"] == 0, report["errors"]
    assert f"uploads/faq.{fmt}" in fresh_engine.services.store.documents()


def test_bench_formats_reports_words_per_second_for_every_format():
    from ragstream.measure.format_bench import FORMATS as BENCHED
    from ragstream.measure.format_bench import format_formats_report, run_format_bench

    result = run_format_bench(rounds=1)
    assert set(result["formats"]) == set(BENCHED)
    for fmt, figures in result["formats"].items():
        assert figures["files"] == 15 and figures["words"] > 10_000, fmt
        assert figures["words_per_s"] > 0 and 0 < figures["share_of_ingestion"] < 1
    report = format_formats_report(result)
    assert all(f"\n{fmt} " in report for fmt in BENCHED)


def test_an_aes_pdf_that_opens_without_a_password_is_read_and_a_locked_one_refused():
    import io

    import pypdf

    from ragstream.common.errors import EncryptedFileError
    from ragstream.knowledge.formats import convert

    source = pypdf.PdfReader(io.BytesIO((FORMATS / "kb-pdf" / "faq.pdf").read_bytes()))

    def encrypted(user_password: str) -> bytes:
        writer = pypdf.PdfWriter(clone_from=source)
        writer.encrypt(user_password=user_password, owner_password="owner", algorithm="AES-256")
        out = io.BytesIO()
        writer.write(out)
        return out.getvalue()

    opened = convert("restricted.pdf", encrypted(""))
    assert "Does RAGstream need an internet connection or an API key?" in opened.markdown
    assert any("empty password" in w for w in opened.warnings)
    with pytest.raises(EncryptedFileError, match="locked.pdf is encrypted"):
        convert("locked.pdf", encrypted("secret"))


def test_every_citation_of_a_pdf_chunk_carries_its_page(fresh_engine, tmp_path):
    """The answer's Sources list (page, CLI, HTTP) names a PDF chunk's page, as prompt_ready
    does: ``faq.pdf p. 1 § …``, never just ``faq.pdf § …``."""
    from ragstream.interfaces.service.http import _citation
    from ragstream.interfaces.ui.views import citation_line

    kb = tmp_path / "kb"
    copy("pdf", "faq", kb)
    fresh_engine.ingest(kb)
    sp = fresh_engine.run("Does RAGstream need an internet connection or an API key?")
    sp, ans = fresh_engine.answer(sp)
    assert ans.sources, ans.text
    for c in ans.sources:
        assert c.page.startswith(("p. ", "pp. ")), c
        assert f"faq.pdf {c.page}" in c.label
        assert citation_line(c).startswith(f"[{c.n}] kb/faq.pdf {c.page} § ")
        assert _citation(c, sp).page == c.page
