"""Evidence: sentence → chunk links and the chunk's used sentences marked, over a real
SuperPrompt of the bundled KB (real embedding model, real Chroma, offline answer)."""

import re
from html.parser import HTMLParser

import pytest

from ragstream.common import markdown
from ragstream.interfaces.ui import evidence as ev
from ragstream.state.super_prompt import Answer

PROMPT = "How are documents chunked?"


@pytest.fixture(scope="module")
def answered(kb_engine):
    sp, _ = kb_engine.answer(kb_engine.run(PROMPT))
    return sp


@pytest.fixture(scope="module")
def max_range(kb_engine):
    return kb_engine.cfg.settings.answer.max_citation_range


class Marked(HTMLParser):
    """The text of an evidence box: all of it, each <mark>'s text, and the tags' text."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.text, self.marks, self.tags, self.outlined, self.tag_names = "", [], [], [], []
        self._in = None

    def handle_starttag(self, tag, attrs):
        self.tag_names.append(tag)
        attrs = dict(attrs)
        if tag == "mark":
            self._in = "mark"
            self.marks.append([attrs["data-keys"], len(self.text), len(self.text)])
            self.outlined.append("outline" in attrs["style"])
        elif tag == "sup":
            self._in = "sup"
            self.tags.append("")

    def handle_endtag(self, tag):
        self._in = None

    def handle_data(self, data):
        if self._in == "sup":
            self.tags[-1] += data
            return
        self.text += data
        if self._in == "mark":
            self.marks[-1][2] = len(self.text)


def parse(html_text):
    p = Marked()
    p.feed(html_text)
    return p


def flat(text):
    return " ".join(text.split())


def fence_lines(text):
    """The character ranges of ``text`` the box leaves out: a code block's fence lines and
    the blank lines before it, and a code span's backticks (they show as code instead)."""
    return sorted((a, b) for s, c, e, end in [*ev.code_blocks(text), *markdown.code_spans(text)]
                  for a, b in ((s, c), (e, end)) if b > a)


def as_shown(text, at=None):
    """``text`` as the box shows it (soft breaks, no fence lines), or where offset ``at`` of
    ``text`` stands in it."""
    gone = fence_lines(text)
    if at is not None:
        return at - sum(min(b, at) - a for a, b in gone if a < at)
    flowing = ev.soft_breaks(text)
    keep = [i for i in range(len(text)) if not any(a <= i < b for a, b in gone)]
    return "".join(flowing[i] for i in keep)


def test_condensed_statements_link_to_their_chunk_and_span(answered):
    links = ev.condensed_links(answered)
    record = answered.extras.a4
    assert len(links) == len(record.condensed) > 0
    assert [link.key for link in links] == [f"C{i}" for i in range(1, len(links) + 1)]
    # facts first, then constraints: the order S_CTX_MD lists them
    kinds = [link.kind for link in links]
    assert kinds == sorted(kinds, key=lambda k: k != "fact")
    chunks = answered.chunk_map()
    for link in links:
        statement = next(s for s in record.condensed if s.text == link.text)
        assert list(link.chunk_ids) == statement.chunk_ids
        assert list(link.numbers) == [answered.final_selection_ids.index(c) + 1 for c in link.chunk_ids]
        assert f"- {link.text} [{link.numbers[0]}]" in answered.S_CTX_MD
        a, b = link.span
        assert flat(chunks[link.chunk_ids[0]].text[a:b]) == flat(link.text)


def test_answer_sentences_link_through_their_citation_numbers(answered, max_range):
    links = ev.answer_links(answered, max_range)
    assert links and [link.key for link in links] == [f"A{i}" for i in range(1, len(links) + 1)]
    ids = answered.final_selection_ids
    cited = {c.n: c.chunk_id for c in answered.answer.sources}
    for link in links:
        assert link.numbers and not link.invalid  # the extractive answer cites every sentence
        assert link.chunk_ids == tuple(ids[n - 1] for n in link.numbers)
        assert all(cited[n] == ids[n - 1] for n in link.numbers)
        # the marks are shown as the links, not in the text (a bracket of the text's own,
        # as in `["Reranking", …]`, stays)
        assert not re.search(r"\[\d+(?:[,–-]\s*\d+)*\]", link.text), link.text
        # the answer quotes its passage with the document's own line breaks: a sentence's
        # text is the same words, on one line
        assert " ".join(link.text.split()) in " ".join(ev.display_text(answered.answer.text).split())
    # the answer's first sentence is the panel's default chunk
    assert ev.default_chunk(answered, ev.sentence_links(answered, max_range), None) == \
        links[0].chunk_ids[0]


def test_the_used_sentences_are_marked_at_their_spans(answered, max_range):
    links = ev.sentence_links(answered, max_range)
    chunks = answered.chunk_map()
    marked = set()
    for chunk_id in answered.final_selection_ids:
        found = ev.chunk_evidence(answered, chunk_id, links)
        text = chunks[chunk_id].text
        # every statement of this chunk is marked at its own span, with its key
        expected = {}
        for link in links:
            if link.chunk_ids and link.chunk_ids[0] == chunk_id:
                span = link.span if link.origin == ev.CONDENSED else ev.find_sentence(link.text, text)
                assert span is not None, f"{link.key} is this chunk's sentence: it must be found"
                expected.setdefault(span, set()).add(link.key)
        assert {(m.start, m.end): set(m.keys) for m in found.marks} == expected
        assert found.passages == len(expected) > 0
        n = found.passages
        assert found.summary().startswith(f"{n} sentence{'s' if n != 1 else ''} of this chunk")
        assert found.number == answered.final_selection_ids.index(chunk_id) + 1
        # the HTML holds the whole text (line breaks inside paragraphs made spaces), and each
        # <mark> holds exactly its passage
        # (a code block's fence lines left out: it shows as code)
        shown = parse(found.html)
        assert shown.text == as_shown(text)
        pieces: dict[tuple[int, int], str] = {}
        for keys, a, b in shown.marks:  # a passage running into a code block is cut there
            span = next(s for s in sorted(expected) if as_shown(text, s[0]) <= a
                        and b <= as_shown(text, s[1]))
            assert set(keys.split()) == expected[span]
            pieces[span] = pieces.get(span, "") + shown.text[a:b]
        assert sorted(pieces) == sorted(expected)
        for (a, b), piece in pieces.items():
            assert flat(piece) == flat(as_shown(text[a:b]))
        assert shown.tags == [" ".join(m.keys) for m in found.marks]
        marked |= {(chunk_id, m.start, m.end) for m in found.marks}
    # every sentence of the condensed context is marked in its chunk (the answer's passage may
    # quote more of a chunk: those sentences are marked too, with their A-keys)
    assert {(link.chunk_ids[0], *link.span) for link in ev.condensed_links(answered)} <= marked


def test_an_answer_sentence_is_found_where_the_chunk_wraps_its_lines(answered, max_range):
    chunks = answered.chunk_map()
    wrapped = [link for link in ev.condensed_links(answered)
               if "\n" in chunks[link.chunk_ids[0]].text[link.span[0]:link.span[1]]]
    assert wrapped, "the bundled KB wraps its lines: some used sentence spans a line break"
    link = wrapped[0]
    text = chunks[link.chunk_ids[0]].text
    assert ev.find_sentence(link.text + " [1]", text) == link.span
    assert ev.find_sentence(link.text.rstrip(".").upper(), text)[0] == link.span[0]
    assert ev.find_sentence("A sentence the chunk never says.", text) is None


def test_the_opened_sentence_is_outlined(answered, max_range):
    links = ev.sentence_links(answered, max_range)
    c2 = next(link for link in links if link.key == "C2")
    shown = parse(ev.chunk_evidence(answered, c2.chunk_ids[0], links, current="C2").html)
    assert [("C2" in keys.split()) for keys, _, _ in shown.marks] == shown.outlined
    assert any(shown.outlined)


def test_a_chunk_no_sentence_uses(answered, max_range):
    links = ev.sentence_links(answered, max_range)
    unused = next(c.id for c in answered.base_context_chunks
                  if c.id not in answered.final_selection_ids)
    found = ev.chunk_evidence(answered, unused, links)
    assert found.marks == [] and found.used_by == [] and found.number is None
    assert found.summary() == "No sentence of the answer or of the condensed context cites this chunk."
    assert "<mark" not in found.html
    assert parse(found.html).text == ev.soft_breaks(answered.chunk_map()[unused].text)


def test_paraphrases_and_invalid_numbers(answered, max_range):
    sp = answered.model_copy(deep=True)
    first = sp.final_selection_ids[0]
    sp.answer = Answer(mode="llm", text=(
        "Documents are cut into pieces along their headings [1]. "
        "This number names no source [99]. A sentence without a source."))
    links = ev.answer_links(sp, max_range)
    assert [(link.numbers, link.chunk_ids, link.invalid) for link in links] == [
        ((1,), (first,), ()), ((99,), (), (99,)), ((), (), ())]
    found = ev.chunk_evidence(sp, first, links)
    # the paraphrase cites the chunk but is none of its sentences: listed, never marked
    assert [link.key for link in found.cited_only] == ["A1"] and found.marks == []
    assert "A1 cites it without quoting it" in found.summary()
    # no answer yet: the condensed context still links, and opens the panel
    sp.answer = None
    assert ev.answer_links(sp, max_range) == []
    links = ev.sentence_links(sp, max_range)
    assert links and ev.default_chunk(sp, links, None) == links[0].chunk_ids[0]
    assert ev.default_chunk(sp, links, sp.base_context_chunks[-1].id) == sp.base_context_chunks[-1].id


def test_chunk_text_is_escaped_before_it_is_marked(fresh_engine, tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "widgets.md").write_text(
        "# Widget safety\n\n"
        "The widget parser escapes <script>alert('boom')</script> tags & angle brackets before\n"
        "it renders a page. A widget title such as <b onmouseover=\"x()\">Sale</b> is shown as "
        "plain text.\n", encoding="utf-8")
    report = fresh_engine.ingest(docs)
    assert report.failed == 0, report.errors
    sp, _ = fresh_engine.answer(fresh_engine.run("How does the widget parser handle script tags?"))
    links = ev.sentence_links(sp, fresh_engine.cfg.settings.answer.max_citation_range)
    chunk_id = "docs/widgets.md#0"
    used = [link for link in links if chunk_id in link.chunk_ids]
    assert any("<script>" in link.text for link in used), [link.text for link in links]
    found = ev.chunk_evidence(sp, chunk_id, links)
    assert found.marks
    # no tag from the document survives as a tag: only the box, the tags and the marks
    assert "<script" not in found.html and "<b " not in found.html
    shown = parse(found.html)
    assert set(shown.tag_names) <= {"div", "sup", "mark"}
    assert "&lt;script&gt;alert(&#x27;boom&#x27;)&lt;/script&gt; tags &amp; angle" in found.html
    marked = [shown.text[a:b] for _, a, b in shown.marks]
    assert any("<script>alert('boom')</script>" in m for m in marked), marked
    assert shown.text == as_shown(sp.chunk_map()[chunk_id].text)


def test_render_html_splits_overlapping_passages():
    text = "One two three. Four five six."
    marks = [ev.Mark(0, 14, ("C1",)), ev.Mark(4, 29, ("A1",))]
    shown = parse(ev.render_html(text, marks, current="A1"))
    assert shown.text == text
    # three pieces: C1 alone, C1 and A1 together, A1 alone; a tag where each passage starts
    assert [(k, shown.text[a:b]) for k, a, b in shown.marks] == [
        ("C1", "One "), ("C1 A1", "two three."), ("A1", " Four five six.")]
    assert shown.tags == ["C1", "A1"]
    assert shown.outlined == [False, True, True]


def test_a_code_block_shows_as_code_without_its_fences():
    text = ("Start the page with:\n\n```bash\nstreamlit run ui_streamlit.py\n--server.port 8501\n```\n\n"
            "Then open it.\n")
    intro = text.index("Start")
    block = (text.index("```bash"), text.index("```\n\nThen") + 3)
    shown = parse(ev.render_html(text, [ev.Mark(intro, block[1], ("A1",))]))
    # the fence lines are gone, the command is there line by line, inside a code box
    assert "```" not in shown.text
    assert "streamlit run ui_streamlit.py\n--server.port 8501" in shown.text
    assert shown.text.endswith("Then open it.\n")
    html_text = ev.render_html(text, [ev.Mark(intro, block[1], ("A1",))])
    code = re.search(r'<div class="rs-code"[^>]*>(.*?)</div>', html_text, re.S)
    assert code and "monospace" in html_text and "streamlit run" in code.group(1)
    assert "```" not in code.group(1) and "Start the page" not in code.group(1)
    # the passage that runs from the introduction into the block is marked on both sides
    # of the cut, tagged once
    assert shown.tags == ["A1"]
    assert "".join(shown.text[a:b] for _, a, b in shown.marks).startswith("Start the page with:")
    assert any("streamlit run" in shown.text[a:b] for _, a, b in shown.marks)
    # a fence the chunk ends inside (the rest is in the next chunk) still shows as code
    cut = "Run:\n\n```\nnpm ci\n"
    cut_html = ev.render_html(cut, [])
    assert 'class="rs-code"' in cut_html and "```" not in parse(cut_html).text
    assert "npm ci" in parse(cut_html).text


def test_inline_code_shows_as_code_without_its_backticks():
    text = ("Set `AllowOverride None` to switch ``.htaccess` files`` off.\n\n"
            "```\nRewriteRule `x` y\n```\n")
    html_text = ev.render_html(text, [ev.Mark(0, 24, ("A1",))])
    shown = parse(html_text)
    # the spans' text in <code> (monospace), their backticks gone; a backtick inside a
    # double-backtick span and the backticks of a fenced block's line are the code's own
    codes = re.findall(r"<code [^>]*>(.*?)</code>", html_text)
    assert codes == ["AllowOverride None", ".htaccess` files"]
    assert "monospace" in re.search(r"<code ([^>]*)>", html_text).group(1)
    assert shown.text.startswith("Set AllowOverride None to switch .htaccess` files off.")
    assert "RewriteRule `x` y" in shown.text
    # the mark still covers the code span: its text is inside it, tagged once
    assert shown.marks[0][0] == "A1" and shown.tags == ["A1"]
    assert "".join(shown.text[a:b] for _, a, b in shown.marks) == "Set AllowOverride None"
    # an unmatched backtick is text
    assert parse(ev.render_html("a ` b", [])).text == "a ` b"


def test_soft_breaks_keep_lists_code_and_paragraphs():
    text = ("A wrapped\nline.\n\n- item one\n- item\n  two\n\n```\ncode\nmore\n```\n"
            "| a | b |\n|---|---|\n| 1 | 2 |\n")
    out = ev.soft_breaks(text)
    assert len(out) == len(text)
    assert out.startswith("A wrapped line.\n\n- item one\n- item   two\n\n```\ncode\nmore\n```\n")
    assert out.endswith("| a | b |\n|---|---|\n| 1 | 2 |\n")


def test_chunk_labels_number_the_selected_chunks(answered):
    names = ev.chunk_labels(answered)
    assert list(names) == [c.id for c in answered.base_context_chunks]
    first = answered.final_selection_ids[0]
    assert names[first].startswith(f"[1] {answered.chunk_map()[first].citation_label}")
    assert names[first].endswith(f"·  {first}")
    unused = next(c for c in names if c not in answered.final_selection_ids)
    assert not names[unused].startswith("[")
