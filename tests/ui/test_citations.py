"""A cited source opened in its document (``ragstream.interfaces.ui.citations``): which text is marked,
how Markdown is marked without breaking code, the chunks around it in its section, a paged
document's page — over hand-made states, and over a real answer of the bundled KB."""

import re

import pytest

from ragstream.common.errors import RagstreamError
from ragstream.interfaces.ui import citations as C
from ragstream.state.super_prompt import Answer, Chunk, Citation, PassageRef, SuperPrompt

MARK = C.MARK_OPEN


def unmarked(text: str) -> str:
    return text.replace(C.MARK_OPEN, "").replace(C.MARK_CLOSE, "")


def shown(markdown_text: str) -> str:
    """A label's Markdown as the page shows it (its escapes undone)."""
    return re.sub(r"\\(.)", r"\1", markdown_text)


def test_a_label_keeps_a_headings_markdown_characters_as_written():
    cited = Citation(n=3, chunk_id="py/object.md#2", source="object.md",
                     section="Data model > object.__init__(self[, ...])")
    assert shown(C.md_text(C.leaf_label(cited))) == "[3] object.md § object.__init__(self[, ...])"
    assert "\\_\\_init\\_\\_" in C.md_text(C.leaf_label(cited))


def marked_texts(text: str) -> list[str]:
    return re.findall(re.escape(C.MARK_OPEN) + r"(.*?)" + re.escape(C.MARK_CLOSE), text, re.S)


# --------------------------------------------------------------------------- marking Markdown

CODE_DOC = ("Start a server on the loopback interface:\n\n"
            "```bash\nchroma run --path /srv/x --port 8000\n```\n\n"
            "The server starts in about one second.\n")


def test_a_passage_over_prose_and_code_marks_the_prose_and_leaves_the_fence_whole():
    end = CODE_DOC.index("```\n\n") + 3
    drawn = C.pieces(CODE_DOC, [(0, end)])
    assert [p.cited for p in drawn] == [True, False]
    cited = drawn[0].markdown
    assert marked_texts(cited) == ["Start a server on the loopback interface:"]
    assert "```bash\nchroma run --path /srv/x --port 8000\n```" in cited
    assert drawn[1].markdown == "The server starts in about one second."


def test_a_sentence_in_a_paragraph_is_marked_alone():
    text = "First sentence here. Second sentence there. Third one."
    a = text.index("Second")
    drawn = C.pieces(text, [(a, a + len("Second sentence there."))])
    assert len(drawn) == 1 and drawn[0].cited
    assert marked_texts(drawn[0].markdown) == ["Second sentence there."]
    assert unmarked(drawn[0].markdown) == text


def test_the_documents_html_and_math_are_text_and_inline_code_is_left_alone():
    text = "Never run <script>alert(1)</script> here; it costs $5 or $6. Use `a<b>` instead."
    drawn = C.pieces(text, [(0, len(text))])[0].markdown
    assert "<script>" not in drawn and "&lt;script>" in drawn
    assert "\\$5" in drawn and "\\$6" in drawn
    assert "`a<b>`" in drawn  # code stays as written: the page shows it as code


def test_a_mark_never_cuts_an_inline_code_span():
    text = "Set `vector_store.mode to http` and restart."
    inside = text.index("mode")
    drawn = C.pieces(text, [(inside, len(text))])[0].markdown
    assert marked_texts(drawn) == ["`vector_store.mode to http` and restart."]


def test_list_items_keep_their_markers_outside_the_mark():
    text = "Steps:\n\n- Install the package.\n- Start the server.\n"
    a = text.index("Start")
    drawn = C.pieces(text, [(a, a + len("Start the server."))])
    cited = next(p for p in drawn if p.cited).markdown
    assert "- " + MARK + "Start the server." + C.MARK_CLOSE in cited
    assert "- Install the package." in cited  # the list stays one list


def test_a_heading_inside_a_chunk_is_bold_and_a_whole_chunk_is_cited_without_marks():
    text = "### Options\n\nUse `--port` to choose the port.\n"
    drawn = C.pieces(text, cited_whole=True)
    assert all(p.cited for p in drawn)
    joined = "\n".join(p.markdown for p in drawn)
    assert joined.startswith("**Options**") and MARK not in joined


# --------------------------------------------------------------------------- hand-made states


def chunk(doc: str, i: int, path: tuple[str, ...], text: str, **kw) -> Chunk:
    return Chunk(id=f"{doc}#{i}", doc_id=doc, text=text, source=doc, title=path[0],
                 heading_path=path, chunk_index=i, **kw)


DOC = "kb/guide.md"
SECTION = ("Guide", "Servers")
CHUNKS = [
    chunk(DOC, 0, ("Guide",), "The guide's introduction."),
    chunk(DOC, 1, SECTION + ("Installing",), "Install it with pip. It needs Python 3.11."),
    chunk(DOC, 2, SECTION + ("Starting",), "Start it with one command:\n\n```bash\nguide serve\n```"),
    chunk(DOC, 3, SECTION + ("Stopping",), "Stop it by its process id."),
    chunk(DOC, 4, ("Guide", "Other"), "Something else entirely."),
]


def state(cited: Chunk, text: str, passage: PassageRef | None = None) -> SuperPrompt:
    sp = SuperPrompt(user_text="How do I start it?", stage="a5")
    sp.base_context_chunks = [cited]
    sp.final_selection_ids = [cited.id]
    where = f"{cited.source} {cited.page_label}".strip()
    sp.answer = Answer(text=text, mode="extractive", passage=passage, citations=[
        Citation(n=1, chunk_id=cited.id, source=cited.source, section=cited.heading_label,
                 title=cited.title, label=cited.citation_label, page=cited.page_label)])
    assert where
    return sp


def fetch_from(chunks):
    held = {c.id: c for c in chunks}
    asked = []

    def fetch(ids):
        asked.append(list(ids))
        return {i: held[i] for i in ids if i in held}
    fetch.asked = asked
    return fetch


def test_the_section_around_the_cited_chunk_is_bounded_and_stays_in_its_section():
    cited = CHUNKS[2]
    fetch = fetch_from(CHUNKS)
    before, after, note = C.around(cited, fetch)
    assert [c.id for c in before] == [CHUNKS[1].id] and [c.id for c in after] == [CHUNKS[3].id]
    assert not note
    assert fetch.asked == [[f"{DOC}#1", f"{DOC}#2", f"{DOC}#3"]]  # bounded: one each way
    # a chunk of another section is not "around" it
    before, after, _ = C.around(CHUNKS[3], fetch_from(CHUNKS))
    assert [c.id for c in before] == [CHUNKS[2].id] and after == []
    # a top-level chunk's section is its own heading path
    before, after, note = C.around(CHUNKS[0], fetch_from(CHUNKS))
    assert before == [] and after == []


def test_nothing_around_a_chunk_the_knowledge_base_no_longer_holds_as_cited():
    changed = CHUNKS[2].model_copy(update={"text": "Start it differently now."})
    before, after, note = C.around(CHUNKS[2], fetch_from([CHUNKS[1], changed, CHUNKS[3]]))
    assert before == after == [] and "no longer holds" in note

    def broken(ids):
        raise RagstreamError("the store cannot be reached")
    _, _, note = C.around(CHUNKS[2], broken)
    assert "cannot be read" in note


def test_the_lead_passage_is_marked_under_its_heading_with_the_section_around_it():
    cited = CHUNKS[2]
    end = cited.text.index("```bash")
    sp = state(cited, "#### Servers › Starting [1]\n\nStart it with one command: [1]",
               PassageRef(chunk_id=cited.id, n=1, start=0, end=len(cited.text)))
    view = C.citation_view(sp, 1, fetch_from(CHUNKS), 5)
    assert view is not None and view.marked == "passage"
    assert view.section == "Guide › Servers" and shown(view.title) == "[1] kb/guide.md § Starting"
    headings = [p.heading for p in view.pieces if p.heading]
    assert headings == ["Installing", "Starting", "Stopping"]
    cited_pieces = [p for p in view.pieces if p.cited]
    assert len(cited_pieces) == 1 and not cited_pieces[0].around
    assert marked_texts(cited_pieces[0].markdown) == [cited.text[:end].strip()]
    assert "```bash\nguide serve\n```" in cited_pieces[0].markdown
    assert all(MARK not in p.markdown for p in view.pieces if p.around)
    assert "the text before and after it in the same section" in view.around_note
    assert C.citation_view(sp, 2, fetch_from(CHUNKS), 5) is None  # [2] names no source


def test_another_source_marks_the_sentences_citing_it_else_it_is_cited_whole():
    cited = CHUNKS[1]
    sp = state(cited, "It needs Python 3.11. [1]")
    view = C.citation_view(sp, 1, None, 5)
    assert view.marked == "sentences"
    assert marked_texts(view.pieces[-1].markdown) == ["It needs Python 3.11."]
    assert "another knowledge base" in view.around_note  # no fetch: not the one searched
    paraphrased = state(cited, "You install it through pip. [1]")
    view = C.citation_view(paraphrased, 1, None, 5)
    assert view.marked == "whole" and all(p.cited for p in view.pieces if not p.around)
    assert all(MARK not in p.markdown for p in view.pieces)


def test_a_paged_documents_page_is_named():
    pdf = chunk("kb/manual.pdf", 7, ("Manual", "Install"), "Run the installer.", page=12,
                page_end=12)
    sp = state(pdf, "Run the installer. [1]")
    view = C.citation_view(sp, 1, fetch_from([pdf]), 5)
    assert view.page == "p. 12"
    assert shown(view.title) == "[1] kb/manual.pdf p. 12 § Install"
    assert C.source_buttons(sp)[0].label == view.title


# --------------------------------------------------------------------------- a real answer


@pytest.fixture(scope="module")
def answered(kb_engine):
    sp, _ = kb_engine.answer(kb_engine.run("How do I start a Chroma server?"))
    return sp


def test_a_real_answers_passage_opens_in_its_document(answered, kb_engine):
    ref = answered.answer.passage
    assert ref is not None
    view = C.citation_view(answered, ref.n, C.fetch_for(kb_engine, answered),
                           kb_engine.cfg.settings.answer.max_citation_range)
    assert view.marked == "passage" and view.chunk_id == ref.chunk_id
    cited = "\n".join(p.markdown for p in view.pieces if p.cited)
    assert "```bash" in cited and "chroma run" in cited and MARK in cited
    # the marked text is the chunk's own words, in their order
    text = answered.chunk_map()[ref.chunk_id].text
    for piece in marked_texts(cited):
        assert " ".join(piece.split()) in " ".join(text.split())
