"""The answer as the page shows it (issue 45), driven in-process with AppTest over the session's
temp index: the confidence in words with its figures one click away, each cited source opened
in its document (its section, the quoted passage marked, code as code), and a follow-up's
"Read as" line (none for a prompt that stands on its own)."""

import re

import pytest
from streamlit.testing.v1 import AppTest

from ragstream.interfaces.ui import answer_view, citations
from ragstream.interfaces.ui import state as S
from tests.ui.tabs import fresh, open_tab, sp

START = "How do I start a Chroma server?"
#: a follow-up of START that means nothing on its own
FOLLOW_UP = "And how do I stop it?"
#: a question that stands on its own, asked in the same conversation
SELF_CONTAINED = "How are documents split into chunks?"


@pytest.fixture(scope="module", autouse=True)
def app_env(page_env):
    """Every test here drives the page over the session's temp index."""


def ask(at: AppTest, prompt: str) -> AppTest:
    """Type ``prompt`` and auto-run it (every stage, then the answer)."""
    at.text_area(key=S.PROMPT).set_value(prompt).run()
    at.button(key="run").click().run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    assert sp(at).answer is not None
    return at


def dialog(at: AppTest):
    """The page's open dialog (Streamlit draws it in the event container), or None."""
    def find(block):
        for child in getattr(block, "children", {}).values():
            if getattr(child, "type", None) == "dialog":
                return child
            found = find(child)
            if found is not None:
                return found
        return None
    return find(at._tree)


def markdown_in(block) -> list:
    """Every Markdown element inside ``block``, at any depth, in order."""
    out = []
    for child in getattr(block, "children", {}).values():
        if getattr(child, "type", None) == "markdown":
            out.append(child)
        out.extend(markdown_in(child))
    return out


def shown(at: AppTest) -> str:
    """Every Markdown and caption text of the page, one per line."""
    return "\n".join([m.value for m in at.markdown] + [c.value for c in at.caption])


#: a figure as the confidence's detail writes it: a similarity, a score, a probability
FIGURE = re.compile(r"\b\d\.\d{2}\b")


def test_the_confidence_says_why_in_words_and_its_figures_are_one_click_away():
    at = ask(fresh(), START)
    ans = sp(at).answer
    assert ans.confidence_detail, "the answer has no figures to show"
    words = answer_view.reason_words(ans)
    assert words and not FIGURE.search(words), words
    badge = f"-badge[{ans.confidence} confidence]"
    lines = [m.value for m in at.markdown if badge in m.value]
    assert len(lines) == 1, [m.value for m in at.markdown]
    line = lines[0]
    # the level's badge, then the reason in words; no figure on the line
    assert line.startswith(f":{answer_view.COLOURS[ans.confidence]}{badge} ")
    assert answer_view.md_text(words) in line
    assert not FIGURE.search(line), line
    # the figures: in the expander under the line, folded, and nowhere else
    box = next(e for e in at.expander if e.label == answer_view.FIGURES_TITLE)
    assert box.proto.expanded is False
    inside = "\n".join(m.value for m in box.markdown)
    outside = [t for t in shown(at).split("\n") if t not in inside]
    assert not [t for t in outside if "P(answerable)" in t or "rerank score" in t], outside
    for clause in answer_view.clauses(ans.confidence_detail):
        assert answer_view.md_text(clause) in inside, clause
    assert FIGURE.search(inside)
    assert f"Mode: **{ans.mode}**" in inside and answer_view.md_text(ans.mode_reason) in inside


def test_a_source_button_opens_the_passage_in_its_document():
    at = ask(fresh(), START)
    ans = sp(at).answer
    ref = ans.passage
    assert ref is not None and ref.n == 1, ans.passage
    chunk = sp(at).chunk_map()[ref.chunk_id]
    # one button per cited source, named by its file and section
    buttons = {b.key: b for b in at.button if (b.key or "").startswith("cite_")
               and b.key != "cite_follow"}
    assert set(buttons) == {f"cite_{c.n}" for c in ans.sources}
    label = re.sub(r"\\(.)", r"\1", buttons["cite_1"].label)  # as the page shows it
    assert label.startswith("[1] ") and label.endswith(f"§ {chunk.heading_path[-1]}"), label
    assert dialog(at) is None
    buttons["cite_1"].click().run()
    assert not at.exception, at.exception
    opened = dialog(at)
    assert opened is not None, "the button opened no dialog"
    texts = [m.value for m in markdown_in(opened)]
    # the section's title, its document and file
    assert any(t.startswith("### ") and "Starting a Chroma server" in t for t in texts), texts
    said = "\n".join(c.value for c in opened.caption)
    assert chunk.source in said and "passage the answer quotes" in said
    # the passage marked where it stands, its code block whole and shown as code (a fence,
    # never cut by a mark)
    cited = [m.value for m in markdown_in(opened) if m.allow_html and citations.MARK_OPEN in m.value]
    assert cited, texts
    body = "\n".join(cited)
    first_words = " ".join(chunk.text[ref.start:ref.end].split()[:4]).replace("`", "")
    assert first_words in re.sub(r"<[^>]+>|`", "", body), body
    fence = re.search(r"```bash\n(.*?)\n```", body, re.S)
    assert fence and fence.group(1).startswith("chroma run --path"), body
    assert "<mark" not in fence.group(0) and "</mark>" not in fence.group(0)
    assert body.count(citations.MARK_OPEN) == body.count(citations.MARK_CLOSE)
    # the section around it: the next chunk of the section, under its own heading, unmarked
    assert "**Checking that the server is ready**" in texts, texts
    around = next(m.value for m in markdown_in(opened) if "heartbeat" in m.value)
    assert "<mark" not in around
    # the dialog can follow the chunk through the stages
    assert any(b.key == "cite_follow" for b in opened.button)


def test_the_other_views_of_a_cited_chunk_open_the_same_document_view():
    at = ask(fresh(), START)
    lead = sp(at).answer.passage.chunk_id
    # the Sources list under the answer
    at.button(key="open_cited").click().run()
    opened = dialog(at)
    assert opened is not None
    assert any("Starting a Chroma server" in m.value for m in markdown_in(opened))
    # the Evidence tab's chunk, and the Chunk views tab's "Open a chunk", when the answer cites it
    open_tab(at, "Evidence")
    assert at.session_state[S.EVIDENCE_CHUNK] == lead
    at.button(key="ev_open_doc").click().run()
    assert any("Starting a Chroma server" in m.value for m in markdown_in(dialog(at)))
    open_tab(at, "Chunk views")
    at.session_state["detail_chunk"] = lead
    at.run()
    at.button(key="detail_open_doc").click().run()
    assert any("Starting a Chroma server" in m.value for m in markdown_in(dialog(at)))
    uncited = next(c.id for c in sp(at).base_context_chunks
                   if c.id not in {s.chunk_id for s in sp(at).answer.sources})
    at.session_state["detail_chunk"] = uncited
    at.run()
    assert not [b for b in at.button if b.key == "detail_open_doc"]


def test_a_follow_up_shows_what_it_was_read_as_and_the_persons_task_overrides_it():
    at = ask(fresh(), START)
    assert "Read as" not in shown(at)  # the conversation's first question stands on its own
    ask(at, FOLLOW_UP)
    reading = sp(at).extras.reading
    assert reading is not None and reading.typed == FOLLOW_UP
    assert reading.text != FOLLOW_UP and sp(at).question == reading.text
    page = shown(at)
    line = f"**Read as:** {answer_view.quoted(reading.text)}"
    assert line in page, page
    # what was typed, the question it was read with and who read it
    detail = next(c.value for c in at.caption if c.value.startswith("You typed"))
    assert answer_view.quoted(FOLLOW_UP) in detail and answer_view.quoted(START) in detail
    assert f"the rule “{reading.rule}”" in detail or "the model" in detail
    # the Fields tab says it too
    open_tab(at, "Fields")
    assert any(m.value.startswith(line) for m in at.markdown)
    # the person sets the task: the page says the task replaced the reading
    key = f"fields_{at.session_state[S.EDIT_NONCE]}"
    fields = next(d.value for d in at.data_editor if d.key == key)
    task_row = list(fields["field"]).index("task")
    mine = "How do I stop a running Chroma server?"
    at.session_state[key] = {"edited_rows": {task_row: {"value": mine}}, "added_rows": [],
                             "deleted_rows": []}
    at.run()
    at.button(key="run").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert sp(at).question == mine
    page = shown(at)
    assert f"**Read as:** {answer_view.quoted(mine)} — the task you set" in page, page
    assert "replaced A0's reading" in page


def test_a_prompt_that_stands_on_its_own_shows_no_reading():
    at = ask(fresh(), START)
    ask(at, SELF_CONTAINED)  # in the same conversation, but it needs none of it
    assert sp(at).extras.reading is None
    assert "Read as" not in shown(at)
    open_tab(at, "Fields")
    assert "Read as" not in shown(at)
