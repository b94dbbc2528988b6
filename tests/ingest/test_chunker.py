"""Tests for ragstream.knowledge.ingest.chunker: document text → metadata and chunks (real tiktoken)."""

from __future__ import annotations

import hashlib

import pytest

from ragstream.backends.tokens import count_tokens
from ragstream.common.config import ChunkingSettings
from ragstream.common.errors import IngestError
from ragstream.common.text import sentences, words
from ragstream.knowledge.ingest.chunker import ParsedDocument, parse_document

FALLBACK = "2000-01-01"
SMALL = ChunkingSettings(max_tokens=40, min_tokens=8)


def parse(text: str, path: str = "guides/setup.md", settings: ChunkingSettings = SMALL):
    return parse_document(text, path, settings, FALLBACK)


def prose(n: int, topic: str = "retrieval") -> str:
    """``n`` distinct, full-stop-terminated sentences of roughly ten tokens each."""
    return " ".join(
        f"Sentence number {i} explains how {topic} step {i} works in practice." for i in range(n)
    )


NESTED = """\
# Setup

Setup intro sentence.

## Install

### Offline models

Download the model first.

#### Cache

The cache lives under data.

## Run

Run the app.

# Appendix

### Deep

Skipped a level.
"""


# ------------------------------------------------------------------------------ front matter


def test_front_matter_fields_are_read_and_quotes_stripped():
    doc = parse(
        "---\n"
        'title: "Setup Guide"\n'
        "doc_type: 'faq'\n"
        "last_update_date: 2024-03-05\n"
        "author: Somebody\n"
        "tags:\n"
        "  - one\n"
        "  - two\n"
        "---\n"
        "# Ignored H1\n\nBody text here.\n"
    )
    assert doc.title == "Setup Guide"
    assert doc.doc_type == "faq"
    assert doc.last_update_date == "2024-03-05"
    assert doc.warnings == ()
    assert all(c.doc_type == "faq" and c.last_update_date == "2024-03-05" for c in doc.chunks)
    assert all(c.title == "Setup Guide" for c in doc.chunks)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("date: 2023-07-09", "2023-07-09"),
        ("updated: '2023-07-09T10:30:00Z'", "2023-07-09"),
        ("Last-Update-Date: 2023-07-09 10:30", "2023-07-09"),
    ],
)
def test_date_keys_and_iso_datetimes(line, expected):
    doc = parse(f"---\n{line}\n---\nText.\n")
    assert doc.last_update_date == expected
    assert not any("date" in w for w in doc.warnings)


@pytest.mark.parametrize("value", ["2024-13-01", "yesterday", "05/03/2024", ""])
def test_bad_date_gives_warning_and_fallback(value):
    doc = parse(f"---\ntitle: T\nlast_update_date: {value}\n---\nText.\n")
    assert doc.last_update_date == FALLBACK
    assert any("line 3" in w and "last_update_date" in w and FALLBACK in w for w in doc.warnings)
    assert doc.chunks[0].last_update_date == FALLBACK


def test_malformed_front_matter_line_is_a_warning_not_an_error():
    doc = parse("---\ntitle: Ok\nthis line is not a pair\n---\nText.\n")
    assert doc.title == "Ok"
    assert "front matter line 3 is not key: value" in doc.warnings
    assert [c.text for c in doc.chunks] == ["Text."]


def test_defaults_without_front_matter():
    doc = parse("Just text.\n", path="notes/plain-notes.md")
    assert doc.title == "plain-notes"
    assert doc.doc_type == "doc"
    assert doc.last_update_date == FALLBACK


def test_unclosed_front_matter_and_horizontal_rule_are_body_text():
    unclosed = parse("---\ntitle: X\nText.\n")
    assert unclosed.title == "setup"
    assert any("never closed" in w for w in unclosed.warnings)
    assert "title: X" in unclosed.chunks[0].text

    rule = parse("---\nSome prose here.\n\n---\nMore prose.\n")
    assert any("not front matter" in w for w in rule.warnings)
    assert [c.text for c in rule.chunks] == ["Some prose here.\n\n---\nMore prose."]

    # CommonMark without front matter: a rule, then "Some prose here." underlined by "---",
    # a setext heading
    setext = parse("---\nSome prose here.\n---\nMore prose.\n")
    assert any("not front matter" in w for w in setext.warnings)
    assert [(c.heading_path, c.text, c.start_line) for c in setext.chunks] == [
        (("Some prose here.",), "More prose.", 4)
    ]


def test_title_falls_back_to_first_h1_then_stem():
    assert parse("Intro.\n\n## Sub\n\nx.\n\n# Real Title\n\ny.\n").title == "Real Title"
    assert parse("## Only H2\n\ntext.\n", path="a/b/my-doc.md").title == "my-doc"


def test_front_matter_is_found_by_the_parser_and_closes_with_dots():
    text = "---\ntitle: Dotted\nbogus line\n...\n# Head\n\nBody text.\n"
    doc = parse(text)
    assert doc.title == "Dotted"
    assert doc.warnings == ("front matter line 3 is not key: value",)
    assert [(c.heading_path, c.text, c.start_line) for c in doc.chunks] == [
        (("Head",), "Body text.", 7)
    ]


def test_document_of_front_matter_only_gives_metadata_and_no_chunks():
    doc = parse("---\ntitle: Only meta\ndoc_type: note\ndate: 2024-02-03\n---\n")
    assert (doc.title, doc.doc_type, doc.last_update_date) == ("Only meta", "note", "2024-02-03")
    assert doc.chunks == ()
    assert doc.warnings == ("no body text: the document gives no chunks",)


def test_front_matter_of_a_plain_text_file_is_read():
    doc = parse("---\ntitle: Notes\n---\n# not a heading here.\n", path="notes/n.txt")
    assert doc.title == "Notes"
    assert [(c.heading_path, c.text, c.start_line) for c in doc.chunks] == [
        ((), "# not a heading here.", 4)
    ]


# ------------------------------------------------------------------------------ sections


def test_heading_paths_follow_nesting():
    doc = parse(NESTED)
    got = [(c.heading_path, c.section, c.text) for c in doc.chunks]
    assert got == [
        (("Setup",), "Setup", "Setup intro sentence."),
        (("Setup", "Install", "Offline models"), "Offline models", "Download the model first."),
        (("Setup", "Install", "Offline models", "Cache"), "Cache", "The cache lives under data."),
        (("Setup", "Run"), "Run", "Run the app."),
        (("Appendix", "Deep"), "Deep", "Skipped a level."),
    ]
    # "## Install" has no body of its own: no chunk for it
    assert ("Setup", "Install") not in [c.heading_path for c in doc.chunks]


def test_text_before_first_heading_has_empty_path_and_title_as_section():
    doc = parse("---\ntitle: Guide\n---\nPreamble text.\n\n# Part\n\nBody.\n")
    first = doc.chunks[0]
    assert first.heading_path == ()
    assert first.section == "Guide"
    assert first.citation_label == "guides/setup.md"
    assert doc.chunks[1].heading_path == ("Part",)


def test_heading_syntax_details():
    doc = parse("## Closed heading ##\n\nA.\n\n#hashtag is text.\n\n    # indented is code\n")
    assert doc.chunks[0].heading_path == ("Closed heading",)
    assert "#hashtag is text." in doc.chunks[0].text
    assert len(doc.chunks) == 1


@pytest.mark.parametrize("fence", ["```", "~~~"])
def test_hash_lines_inside_code_fences_are_not_headings(fence):
    text = (
        "# Real\n\nBefore the code.\n\n"
        f"{fence}python\n# not a heading\n## nor this\nx = 1\n{fence}\n\n"
        "After the code.\n"
    )
    doc = parse(text, settings=ChunkingSettings(max_tokens=200, min_tokens=8))
    assert {c.heading_path for c in doc.chunks} == {("Real",)}
    assert "# not a heading" in doc.chunks[0].text
    assert doc.chunks[0].has_code


def test_setext_headings_of_both_levels_start_sections():
    text = (
        "Guide\n=====\n\n"  # lines 1-2: level 1
        "Intro sentence.\n\n"  # 4
        "Install\n-------\n\n"  # 6-7: level 2
        "Run the installer.\nThen restart.\n\n"  # 9-10
        "Usage\n---\n"  # 12-13: level 2
        "Open the app.\n\n"  # 14
        "### Details\n\n"  # 16: ATX under a setext heading
        "Fine print.\n"  # 18
    )
    doc = parse(text, settings=ChunkingSettings(max_tokens=200))
    assert doc.title == "Guide"
    assert [(c.heading_path, c.text, c.start_line, c.end_line) for c in doc.chunks] == [
        (("Guide",), "Intro sentence.", 4, 4),
        (("Guide", "Install"), "Run the installer.\nThen restart.", 9, 10),
        (("Guide", "Usage"), "Open the app.", 14, 14),
        (("Guide", "Usage", "Details"), "Fine print.", 18, 18),
    ]
    assert "no headings: chunked as one section" not in doc.warnings
    _assert_lines_match(text, doc)


def test_fence_with_heading_and_underline_lines_is_one_code_unit():
    code = "```text\nnot a title\n---\n# not a heading\n===\n```"
    text = f"# Real\n\nBefore.\n\n{code}\n\nAfter.\n"
    doc = parse(text, settings=ChunkingSettings(max_tokens=40, min_tokens=0))
    assert {c.heading_path for c in doc.chunks} == {("Real",)}
    assert [c.text for c in doc.chunks] == [f"Before.\n\n{code}\n\nAfter."]
    assert doc.chunks[0].has_code
    assert (doc.chunks[0].start_line, doc.chunks[0].end_line) == (3, 12)


def test_gfm_table_is_one_unit_with_its_line_range():
    rows = "\n".join(f"| k{i} | meaning {i}. Then more |" for i in range(4))
    table = f"| key | meaning |\n| --- | --- |\n{rows}\nlast | row without a leading pipe |"
    text = f"# T\n\n{prose(3)}\n\n{table}\n\n{prose(3, 'ranking')}\n"  # table: lines 5-11
    doc = parse(text)
    holders = [c for c in doc.chunks if "| key |" in c.text]
    assert len(holders) == 1
    assert [(c.text, c.start_line, c.end_line) for c in holders] == [(table, 5, 11)]
    assert any("lines 5-11: a table" in w for w in doc.warnings)  # 43 tokens, kept whole


def test_blocks_inside_list_items_stay_whole():
    code = "```bash\n" + "\n".join(f"  make step_{i}. make check_{i}" for i in range(6)) + "\n  ```"
    text = f"# L\n\n- Step one runs this:\n\n  {code}\n- Step two.\n"  # code: lines 5-12
    doc = parse(text)
    assert [(c.text, c.start_line, c.end_line) for c in doc.chunks if c.has_code] == [
        (code, 5, 12)
    ]
    assert any("lines 5-12: a code block" in w for w in doc.warnings)
    assert [c.text for c in doc.chunks if not c.has_code] == [
        "- Step one runs this:", "- Step two."
    ]


def test_heading_inside_a_quote_or_list_is_prose_not_a_section():
    doc = parse("# Top\n\n> # Quoted heading\n> quoted text.\n\n- # item heading\n")
    assert {c.heading_path for c in doc.chunks} == {("Top",)}
    assert "> # Quoted heading" in doc.chunks[0].text
    assert "- # item heading" in doc.chunks[-1].text


def test_unclosed_fence_runs_to_end_with_warning():
    doc = parse("# A\n\nText.\n\n```\ncode\n# still code\n")
    assert any("never closed" in w for w in doc.warnings)
    assert {c.heading_path for c in doc.chunks} == {("A",)}


def test_small_sections_are_not_merged_across_headings():
    doc = parse("# A\n\nOne.\n\n# B\n\nTwo.\n", settings=ChunkingSettings(max_tokens=200))
    assert [(c.heading_path, c.text) for c in doc.chunks] == [(("A",), "One."), (("B",), "Two.")]


def test_markdown_without_headings_warns():
    doc = parse("Para one.\n\nPara two.\n")
    assert "no headings: chunked as one section" in doc.warnings
    assert {c.heading_path for c in doc.chunks} == {()}


def test_txt_without_headings_is_one_plain_section():
    text = (
        "# this is not a heading in a text file.\n\n"
        + prose(6, "paragraph one")
        + "\n\n"
        + prose(6, "paragraph two")
        + "\n"
    )
    doc = parse(text, path="notes/readme.txt")
    assert doc.title == "readme"
    assert len(doc.chunks) > 1
    assert all(c.heading_path == () and c.section == "readme" for c in doc.chunks)
    assert doc.chunks[0].text.startswith("# this is not a heading")
    assert not any("no headings" in w for w in doc.warnings)
    assert all(c.token_count <= 40 for c in doc.chunks)


# ------------------------------------------------------------------------------ budgets


def test_no_chunk_exceeds_max_tokens_except_an_oversized_code_block():
    code = "```python\n" + "\n".join(f"value_{i} = compute({i}) + 1" for i in range(40)) + "\n```"
    text = f"# Long\n\n{prose(30)}\n\n{code}\n\n{prose(10, 'ranking')}\n"
    doc = parse(text)
    over = [c for c in doc.chunks if c.token_count > SMALL.max_tokens]
    assert len(over) == 1
    assert over[0].text == code  # kept whole, alone
    assert over[0].has_code
    assert any("code block" in w and "kept whole" in w for w in doc.warnings)
    for c in doc.chunks:
        assert c.token_count == count_tokens(c.text, SMALL.encoding)
    assert len(doc.chunks) > 5


def test_table_is_never_split():
    table = "| key | meaning |\n|-----|---------|\n" + "\n".join(
        f"| k{i} | the meaning of key {i} |" for i in range(12)
    )
    doc = parse(f"# T\n\n{prose(3)}\n\n{table}\n\n{prose(3)}\n")
    holders = [c for c in doc.chunks if "| k0 |" in c.text]
    assert len(holders) == 1 and table in holders[0].text
    assert any("table" in w and "kept whole" in w for w in doc.warnings)


def test_no_chunk_ends_mid_sentence_in_prose():
    paragraphs = [prose(7, f"topic {p}") for p in range(5)]
    text = "# Prose\n\n" + "\n\n".join(paragraphs) + "\n"
    doc = parse(text)
    assert len(doc.chunks) > 3
    for c in doc.chunks:
        assert c.text[-1] in ".!?", c.text
        assert c.token_count <= SMALL.max_tokens
    # every sentence appears whole in exactly one chunk
    source_sentences = [s for p in paragraphs for s in sentences(p)]
    chunk_sentences = [s for c in doc.chunks for s in sentences(c.text)]
    assert chunk_sentences == source_sentences


def test_a_sentence_ending_in_a_colon_moves_on_with_the_block_it_introduces():
    # the Apache manual's htaccess page: "…use the `AllowOverrideList` directive. This lets you
    # name … alone:" then its configuration block, where the budget ran out between the two
    block = "```config\nAllowOverride None\nAllowOverrideList Redirect RewriteRule\n```"
    intro = ("If you need to limit it, use the AllowOverrideList directive. "
             "This lets you name the directives that are allowed:")
    text = f"# Overrides\n\n{prose(5)}\n\n{intro}\n\n{block}\n\n{prose(2, 'errors')}\n"
    doc = parse(text)
    holder = next(c for c in doc.chunks if "AllowOverride None" in c.text)
    assert intro in holder.text and holder.text.index(intro) < holder.text.index(block)
    assert not any(c.text.rstrip().endswith(":") for c in doc.chunks)
    # the same text without the colon is cut where the budget runs out: the rule is the colon's
    plain = parse(text.replace("allowed:", "allowed."))
    assert any(c.text.rstrip().endswith("allowed.") for c in plain.chunks)
    for c in doc.chunks + plain.chunks:
        assert c.token_count <= SMALL.max_tokens


def test_a_colon_sentence_stays_when_its_paragraph_cannot_move():
    # one long paragraph ending in ':' that cannot join its block in one chunk stays where it
    # is: the chunk is never left empty and nothing is lost
    intro = prose(6) + " Run this:"
    text = f"# Long intro\n\n{intro}\n\n```sh\nmake all\n```\n"
    doc = parse(text)
    joined = "".join(c.text for c in doc.chunks)
    assert "Run this:" in joined and "make all" in joined
    assert all(c.text.strip() for c in doc.chunks)


def test_list_items_are_units_and_never_cut():
    items = "\n".join(f"- item {i} names option {i} and what it changes" for i in range(12))
    doc = parse(f"# Options\n\n{items}\n")
    lines = items.split("\n")
    for c in doc.chunks:
        assert c.token_count <= SMALL.max_tokens
        assert all(line in lines for line in c.text.split("\n"))


def test_overlong_sentence_is_split_at_word_boundaries_with_warning():
    sentence = " ".join(f"word{i}" for i in range(120)) + "."
    doc = parse(f"# W\n\n{sentence}\n")
    assert any("split at word boundaries" in w for w in doc.warnings)
    assert len(doc.chunks) > 1
    assert all(c.token_count <= SMALL.max_tokens for c in doc.chunks)
    assert " ".join(c.text for c in doc.chunks) == sentence


def test_giant_word_is_cut_between_characters():
    word = "x" * 3000
    doc = parse(f"# W\n\n{word}\n")
    assert all(c.token_count <= SMALL.max_tokens for c in doc.chunks)
    assert "".join(c.text for c in doc.chunks) == word


# ------------------------------------------------------------------------------ min_tokens


TAIL = "# Tail\n\n" + " ".join(f"Step {i} is done now." for i in range(11)) + "\n"


def test_small_tail_exists_without_min_tokens():
    # 11 sentences of ~7 tokens with a 40-token budget: greedy packs 5 + 5 + 1
    doc = parse(TAIL, settings=ChunkingSettings(max_tokens=40, min_tokens=0))
    assert [len(sentences(c.text)) for c in doc.chunks] == [5, 5, 1]
    assert doc.chunks[-1].token_count < 15


def test_small_tail_takes_sentences_from_previous_chunk_of_the_section():
    relaxed = parse(TAIL, settings=ChunkingSettings(max_tokens=40, min_tokens=0))
    doc = parse(TAIL, settings=ChunkingSettings(max_tokens=40, min_tokens=15))
    assert [len(sentences(c.text)) for c in doc.chunks] == [5, 3, 3]
    assert all(15 <= c.token_count <= 40 for c in doc.chunks)
    # same sentences, same order, only the last boundary moved
    assert [s for c in doc.chunks for s in sentences(c.text)] == [
        s for c in relaxed.chunks for s in sentences(c.text)
    ]
    assert doc.chunks[0].text == relaxed.chunks[0].text


def test_tail_stays_small_when_the_previous_chunk_cannot_give_or_take():
    code = "```\n" + "\n".join(f"step_{i}(value={i})" for i in range(20)) + "\n```"
    settings = ChunkingSettings(max_tokens=40, min_tokens=20)
    doc = parse(f"# S\n\n{code}\n\nDone.\n", settings=settings)
    assert [c.text for c in doc.chunks] == [code, "Done."]


# ------------------------------------------------------------------------------ line numbers


def _assert_lines_match(text: str, doc: ParsedDocument) -> None:
    lines = text.replace("\r\n", "\n").split("\n")
    for c in doc.chunks:
        first, *_, last = c.text.split("\n") if "\n" in c.text else (c.text, c.text)
        assert first.strip() in lines[c.start_line - 1], (c.id, c.start_line)
        assert last.strip() in lines[c.end_line - 1], (c.id, c.end_line)
        window = "\n".join(lines[c.start_line - 1:c.end_line])
        assert c.text.strip() in window


def test_line_numbers_point_at_the_original_lines():
    text = (
        "---\ntitle: Lines\n---\n"  # lines 1-3
        "Intro line.\n\n"  # 4
        "# Head\n\n"  # 6
        + prose(8)  # 8
        + "\n\n```\ncode here\n```\n\n"  # 10-12
        + "Last words.\n"  # 14
    )
    doc = parse(text)
    _assert_lines_match(text, doc)
    assert (doc.chunks[0].start_line, doc.chunks[0].end_line) == (4, 4)
    assert text.split("\n")[10] == "code here"
    code_chunk = next(c for c in doc.chunks if c.has_code)
    assert code_chunk.start_line <= 11 <= code_chunk.end_line
    assert doc.chunks[-1].end_line == 14


def test_line_numbers_for_nested_fixture_and_crlf():
    lf = parse(NESTED)
    _assert_lines_match(NESTED, lf)
    assert [c.start_line for c in lf.chunks] == [3, 9, 13, 17, 23]
    crlf_text = NESTED.replace("\n", "\r\n")
    crlf = parse(crlf_text)
    assert [(c.text, c.start_line, c.end_line) for c in crlf.chunks] == [
        (c.text, c.start_line, c.end_line) for c in lf.chunks
    ]
    assert crlf.content_hash != lf.content_hash  # hash of the raw text


# ------------------------------------------------------------------------------ flags


@pytest.mark.parametrize(
    ("body", "has_code"),
    [
        ("Text.\n\n```\nx = 1\n```\n", True),
        ("Text.\n\n~~~\nx = 1\n~~~\n", True),
        ("Text.\n\n    x = 1\n    y = 2\n", True),
        ("Text with `inline code` only.\n", False),
        ("- item\n\n    continuation of the item, not code.\n", False),
        ("Plain text.\n", False),
    ],
)
def test_has_code(body, has_code):
    doc = parse(f"# C\n\n{body}", settings=ChunkingSettings(max_tokens=200))
    assert len(doc.chunks) == 1
    assert doc.chunks[0].has_code is has_code


@pytest.mark.parametrize(
    ("body", "has_equations"),
    [
        ("Energy is $E = mc^2$ here.", True),
        ("Display:\n\n$$\n\\int_0^1 x\\,dx\n$$", True),
        ("Inline \\(a + b\\) form.", True),
        ("Display \\[a^2 + b^2\\] form.", True),
        ("\\begin{equation}\ny = ax + b\n\\end{equation}", True),
        ("It costs $5 and $10 in total.", False),
        ("Use `$x$` in code.", False),
        ("```\necho $HOME$\n```", False),
        ("No maths here.", False),
    ],
)
def test_has_equations(body, has_equations):
    doc = parse(f"# E\n\n{body}\n", settings=ChunkingSettings(max_tokens=200))
    assert doc.chunks[0].has_equations is has_equations


# ------------------------------------------------------------------------------ fields, ids


def test_chunk_fields():
    doc = parse(NESTED, path="guides\\setup.md")
    assert doc.doc_id == doc.source == "guides/setup.md"
    for c in doc.chunks:
        assert c.doc_id == c.source == "guides/setup.md"
        assert c.word_count == len(words(c.text))
        assert c.token_count == count_tokens(c.text)
        assert c.content_hash == hashlib.sha256(c.text.encode()).hexdigest()
        assert c.text == c.text.strip()
    assert doc.content_hash == hashlib.sha256(NESTED.encode()).hexdigest()


def test_ids_unique_and_ordered():
    text = NESTED + "\n# More\n\n" + prose(20) + "\n"
    doc = parse(text)
    ids = [c.id for c in doc.chunks]
    assert len(ids) == len(set(ids))
    assert ids == [f"guides/setup.md#{i}" for i in range(len(ids))]
    assert [c.chunk_index for c in doc.chunks] == list(range(len(ids)))
    starts = [c.start_line for c in doc.chunks]
    assert starts == sorted(starts)


def test_deterministic():
    text = NESTED + "\n# More\n\n" + prose(20) + "\n\n```\ncode\n```\n"
    first, second = parse(text), parse(text)
    assert first == second
    assert [c.model_dump_json() for c in first.chunks] == [
        c.model_dump_json() for c in second.chunks
    ]


def test_empty_and_heading_only_documents_give_no_chunks():
    for text in ("", "\n\n", "# Only\n\n## Headings\n"):
        doc = parse(text)
        assert doc.chunks == ()
        assert any("no chunks" in w for w in doc.warnings)


@pytest.mark.parametrize("bad", ["", "/abs/path.md", "C:/x.md"])
def test_bad_paths_raise(bad):
    with pytest.raises(IngestError):
        parse("Text.", path=bad)


# --------------------------------------------------------------------------- paged documents


def test_page_markers_give_each_chunk_its_pages_and_never_reach_its_text():
    """A converted PDF's page markers: every chunk knows the page it starts and ends on, its
    citation label names them, and the marker lines are not in any chunk's text."""
    body = " ".join(f"Word{i}" for i in range(30))
    text = (f"<!-- page: 1 -->\n# Manual\n\n{body}\n\n<!-- page: 2 -->\n## Installing\n\n{body}\n"
            f"{body}\n\n<!-- page: 3 -->\n{body}\n\n<!-- page: 4 -->\n## Using\n\n{body}\n")
    doc = parse_document(text, "docs/manual.pdf", ChunkingSettings(max_tokens=120, min_tokens=8),
                         "2026-01-01")
    assert all("<!--" not in c.text for c in doc.chunks)
    by_section = {}
    for c in doc.chunks:
        by_section.setdefault(c.heading_path, []).append(c)
    assert [(c.page, c.page_end) for c in by_section[("Manual",)]] == [(1, 1)]
    installing = by_section[("Manual", "Installing")]
    assert installing[0].page == 2 and installing[-1].page_end == 3  # runs over the page break
    spanning = [c for c in installing if c.page_end > c.page]
    assert spanning and all(c.citation_label.startswith(f"docs/manual.pdf pp. {c.page}–{c.page_end} § ")
               for c in spanning)
    using = by_section[("Manual", "Using")][0]
    assert (using.page, using.page_end) == (4, 4)
    assert using.citation_label == "docs/manual.pdf p. 4 § Manual > Using"


def test_a_document_without_page_markers_has_no_pages():
    doc = parse("# Title\n\nSome text here, enough of it to be a chunk of its own.\n")
    assert all(c.page == 0 and c.page_end == 0 for c in doc.chunks)
    assert " p. " not in doc.chunks[0].citation_label
