"""Tests for ragstream.common.markdown: the one Markdown reader (markdown-it-py with plugins)."""

from __future__ import annotations

import pytest

from ragstream.common import markdown
from ragstream.common.markdown import Block, FrontMatter, parse, spans_outside
from ragstream.common.text import clean_sentence, evidence_units


def kinds(text: str, **kwargs) -> list[tuple[str, int, int]]:
    """Every block as ``(kind, start, end)``, depth first."""
    return [(b.kind, b.start, b.end) for b in parse(text, **kwargs).walk()]


# ------------------------------------------------------------------------------ front matter


def test_front_matter_raw_text_and_lines():
    doc = parse("---\ntitle: T\ntags:\n  - a\n---\n# Head\n")
    assert doc.front_matter == FrontMatter(text="title: T\ntags:\n  - a", start=0, end=5)
    assert doc.front_matter.text_start == 1
    assert not doc.front_matter_unclosed
    assert [(h.text, h.start) for h in doc.headings] == [("Head", 5)]


def test_front_matter_closes_with_dots_and_can_be_empty():
    assert parse("---\na: 1\n...\nBody\n").front_matter == FrontMatter("a: 1", 0, 3)
    assert parse("---\n---\nBody\n").front_matter == FrontMatter("", 0, 2)


def test_document_that_is_only_front_matter():
    doc = parse("---\ntitle: Only\n---\n")
    assert doc.front_matter == FrontMatter("title: Only", 0, 3)
    assert doc.blocks == ()


@pytest.mark.parametrize("text", ["Intro\n---\ntitle: x\n---\n", "\n---\na: 1\n---\n", " ---\na: 1\n---\n"])
def test_front_matter_only_on_the_first_line(text):
    doc = parse(text)
    assert doc.front_matter is None
    assert not doc.front_matter_unclosed


def test_unclosed_front_matter_is_body():
    doc = parse("---\ntitle: x\nText.\n")
    assert doc.front_matter is None
    assert doc.front_matter_unclosed
    assert kinds("---\ntitle: x\nText.\n") == [("hr", 0, 1), ("paragraph", 1, 3)]


def test_without_front_matter_a_leading_block_is_markdown():
    text = "---\nA title\n---\nBody.\n"
    assert parse(text).front_matter == FrontMatter("A title", 0, 3)
    doc = parse(text, front_matter=False)
    assert doc.front_matter is None and not doc.front_matter_unclosed
    assert [(b.kind, b.start, b.end, b.level, b.text) for b in doc.blocks] == [
        ("hr", 0, 1, 0, ""),
        ("heading", 1, 3, 2, "A title"),
        ("paragraph", 3, 4, 0, "Body."),
    ]


def test_front_matter_only_mode_gives_no_blocks():
    doc = parse("---\ntitle: x\n---\n# Head\n\n```\ncode\n```\n", blocks=False)
    assert doc.front_matter == FrontMatter("title: x", 0, 3)
    assert doc.blocks == ()
    assert parse("---\ntitle: x\n", blocks=False).front_matter_unclosed


# ------------------------------------------------------------------------------ headings


def test_atx_and_setext_headings_with_levels_text_and_lines():
    text = (
        "Title\n=====\n\n"  # 0-1
        "## Closed heading ##\n\n"  # 3
        "Sub title\nover two lines\n---\n\n"  # 5-7
        "#hashtag is text\n\n"  # 9
        "###### Six `code` *em*\n"  # 11
    )
    assert [(h.level, h.text, h.start, h.end) for h in parse(text).headings] == [
        (1, "Title", 0, 2),
        (2, "Closed heading", 3, 4),
        (2, "Sub title over two lines", 5, 8),
        (6, "Six `code` *em*", 11, 12),
    ]


def test_a_rule_after_a_blank_line_is_no_heading():
    assert kinds("Text\n\n---\n") == [("paragraph", 0, 1), ("hr", 2, 3)]


def test_nested_headings_are_not_top_level():
    doc = parse("> # Quoted\n\n- # In a list\n")
    assert doc.headings == ()
    assert [(b.kind, b.text) for b in doc.walk() if b.kind == "heading"] == [
        ("heading", "Quoted"),
        ("heading", "In a list"),
    ]


# ------------------------------------------------------------------------------ blocks


def test_fence_hides_heading_and_underline_lines():
    text = "Before.\n\n~~~python\nnot a title\n---\n# not a heading\n===\n~~~\nAfter.\n"
    doc = parse(text)
    assert doc.headings == ()
    assert [(b.kind, b.start, b.end, b.text, b.closed) for b in doc.blocks] == [
        ("paragraph", 0, 1, "Before.", True),
        ("fence", 2, 8, "python", True),
        ("paragraph", 8, 9, "After.", True),
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("```\ncode\n# still code\n", ("fence", 0, 3, False)),
        ("```\ncode\n```\n", ("fence", 0, 3, True)),
        ("````\n```\n", ("fence", 0, 2, False)),  # a shorter fence does not close
        ("```\n```", ("fence", 0, 2, True)),
    ],
)
def test_fence_closed_flag(text, expected):
    (block,) = parse(text).blocks
    assert (block.kind, block.start, block.end, block.closed) == expected


def test_unclosed_fence_in_a_list_item_ends_with_the_item():
    doc = parse("- item\n\n  ```\n  code\n\nAfter the list.\n")
    fence = next(b for b in doc.walk() if b.kind == "fence")
    assert (fence.start, fence.end, fence.closed) == (2, 5, False)  # blank line 4 included
    assert doc.blocks[-1] == Block("paragraph", 5, 6, text="After the list.")


def test_table_lines_including_a_row_without_pipes():
    text = "Lead.\n\n| a | b |\n|---|:-:|\n| 1 | 2 |\n3 | 4\n\nAfter.\n"
    assert kinds(text) == [("paragraph", 0, 1), ("table", 2, 6), ("paragraph", 7, 8)]


def test_pipes_without_a_delimiter_row_are_a_paragraph():
    assert kinds("| a | b |\n| c | d |\n") == [("paragraph", 0, 2)]


def test_lists_items_and_quotes_hold_their_blocks():
    text = (
        "- one\n"  # 0
        "  - nested\n"  # 1
        "- two\n\n"  # 2
        "  ```sh\n  run\n  ```\n\n"  # 4-6
        "> quoted\n> text\n\n"  # 8-9
        "1. first\n"  # 11
    )
    assert kinds(text) == [
        ("list", 0, 8),  # a list's and an item's range keep a trailing blank line
        ("item", 0, 2),
        ("paragraph", 0, 1),
        ("list", 1, 2),
        ("item", 1, 2),
        ("paragraph", 1, 2),
        ("item", 2, 8),
        ("paragraph", 2, 3),
        ("fence", 4, 7),
        ("blockquote", 8, 10),
        ("paragraph", 8, 10),
        ("list", 11, 12),
        ("item", 11, 12),
        ("paragraph", 11, 12),
    ]


def test_deeply_nested_lists_keep_their_text():
    text = "".join("  " * i + f"- level {i}\n" for i in range(12))
    paragraphs = [b for b in parse(text).walk() if b.kind == "paragraph"]
    assert [(b.start, b.end) for b in paragraphs] == [(i, i + 1) for i in range(12)]


def test_code_math_html_and_rules():
    text = (
        "Text.\n\n"  # 0
        "    indented code\n\n"  # 2
        "$$\nx^2\n$$\n\n"  # 4-6
        "\\begin{align}\na &= b\n\\end{align}\n\n"  # 8-10
        "$$ y $$\n\n"  # 12
        "<div>\nhtml\n</div>\n\n"  # 14-16
        "***\n"  # 18
    )
    assert kinds(text) == [
        ("paragraph", 0, 1),
        ("code", 2, 3),
        ("math", 4, 7),
        ("math", 8, 11),
        ("math", 12, 13),
        ("html", 14, 17),
        ("hr", 18, 19),
    ]


def test_lines_count_crlf_and_lone_cr_as_breaks():
    assert kinds("# A\r\n\r\nText\rmore\n") == [("heading", 0, 1), ("paragraph", 2, 4)]


def test_empty_text():
    doc = parse("")
    assert (doc.front_matter, doc.front_matter_unclosed, doc.blocks) == (None, False, ())


# ------------------------------------------------------------------------------ spans_outside


def test_spans_outside_skip_whole_lines_and_keep_offsets():
    text = "# Head\nIntro:\n\n```\ncode\n```\n| a |\n|---|\n| 1 |\n\nEnd."
    spans = spans_outside(text, {"fence", "heading", "table"})
    assert [text[a:b] for a, b in spans] == ["Intro:\n\n", "\nEnd."]
    assert spans_outside(text, ()) == [(0, len(text))]
    assert spans_outside("", {"fence"}) == []
    assert spans_outside("```\nx\n```\n", {"fence"}) == []


def test_spans_outside_with_crlf_and_nested_fence():
    text = "- item:\r\n\r\n  ```\r\n  x\r\n  ```\r\n- next"
    assert [text[a:b] for a, b in spans_outside(text, {"fence"})] == ["- item:\r\n\r\n", "- next"]


# ------------------------------------------------------------------------------ evidence units


def test_evidence_units_read_prose_only_and_spans_stop_before_blocks():
    text = (
        "Run the server with this command:\n\n"
        "```bash\nchroma run --path data. Then wait here\n```\n\n"
        "| option | meaning |\n| --- | --- |\n| path | the data folder. It must exist first |\n\n"
        "    indented code. Is not evidence either\n\n"
        "- The list item is a sentence too.\n"
    )
    units = evidence_units(text)
    assert [t for _, _, t in units] == [
        "Run the server with this command:",
        "The list item is a sentence too.",
    ]
    for s, e, t in units:
        assert clean_sentence(text[s:e]) == t  # no span runs over the code below it
    assert units[0][:2] == (0, len("Run the server with this command:\n\n"))


def test_a_paragraph_holds_its_text_without_list_markers_or_quote_marks():
    doc = parse("- first item\n  goes on\n\n> quoted\n> text\n\n1. numbered\n")
    paragraphs = [b.text for b in doc.walk() if b.kind == "paragraph"]
    assert paragraphs == ["first item\ngoes on", "quoted\ntext", "numbered"]


def test_fence_spans_give_each_code_block_without_its_fence_lines():
    text = ("Intro:\n\n```bash\nnpm i\nls\n```\n\nAfter.\n\n- item\n\n  ~~~~\n  nested\n  ~~~~\n\n"
            "```x\nopen")
    found = markdown.fence_spans(text)
    assert [text[f.code_start:f.code_end] for f in found] == ["npm i\nls\n", "  nested\n", "open"]
    assert [text[f.start:f.code_start].strip() for f in found] == ["```bash", "~~~~", "```x"]
    assert [text[f.code_end:f.end].strip() for f in found] == ["```", "~~~~", ""]  # the last is open
    assert [f.info for f in found] == ["bash", "", "x"]
    assert markdown.fence_spans("No code here.\n") == []


def test_a_fence_the_text_ends_inside_is_not_closed_with_or_without_a_last_line_break():
    for text in ("Intro.\n\n```x\nopen", "Intro.\n\n```x\nopen\n", "```"):
        assert [b.closed for b in parse(text, front_matter=False).walk()
                if b.kind == "fence"] == [False], text
    for text in ("```\ncode\n```", "```\ncode\n```\n", "```\n```", "~~~~\ncode\n~~~~"):
        assert [b.closed for b in parse(text, front_matter=False).walk()
                if b.kind == "fence"] == [True], text
