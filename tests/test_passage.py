"""The passage the offline answer leads with (``ragstream.answering.passage``, issue 45): one section's
own words in their order, the block a how-to question needs whole, never a sentence ending on a
colon without its block, each paragraph cited; and how the answer reads it."""

from __future__ import annotations

import re

import pytest

from ragstream.answering.answer import answer, answer_sentences, dangling_colons, said_back, with_terms
from ragstream.answering.passage import Passage, choose_span, lead_passage, render, trim, units
from ragstream.common.config import AnswerSettings
from ragstream.common.text import without_frame
from ragstream.state.records import Statement
from ragstream.state.super_prompt import Chunk, SuperPrompt

ACFG = AnswerSettings()

HOWTO = """You want all HTTP requests to be redirected to HTTPS. This is one of the most common \
uses of rewriting, but in most cases it is better accomplished without it.

Solution:

The preferred approach uses a `Redirect` directive in a dedicated virtual host:

```config
<VirtualHost *:80>
    Redirect permanent "/" "https://www.example.com/"
</VirtualHost>
```

If you must use a `.htaccess` file, rewriting is the appropriate tool:

```config
RewriteEngine On
RewriteCond "%{HTTPS}" !=on
```

The variable is set to `on` when the connection uses TLS.
"""

LONG = ("The cache keeps every fetched document for a day. " * 3
        + "Entries older than that are removed on the next start. " * 4
        + "A full cache is emptied oldest first: the next fetch waits.")

LIST = """The flags are:

* `D` disables a worker and retries it later.
* `S` stops a worker; it is not retried.
* `R` makes a worker a hot spare for its set.
* `H` makes it a hot standby, used when nothing else is left.
"""


def _chunk(text: str, cid: str = "docs/a.md#0", heading=("Guide", "Forcing HTTPS")) -> Chunk:
    return Chunk(id=cid, doc_id=cid.split("#")[0], text=text, source="a.md", title="Guide",
                 heading_path=heading, has_code="```" in text)


def _at(text: str, words: str) -> int:
    return text.index(words)


def test_a_paragraph_and_the_block_it_introduces_are_one_unit_and_lists_end_after_items():
    parts = units(HOWTO)
    intro = [u for u in parts if u.introduces]
    assert len(intro) == 2 and all(u.code_lines >= 3 for u in intro)
    assert all(HOWTO[u.start:u.end].rstrip().endswith("```") for u in intro)
    (items,) = units(LIST)  # the paragraph that introduces the list, and the list
    assert items.introduces and len(items.cuts) == 4
    assert LIST[items.start:items.cuts[0]].rstrip().endswith("retries it later.")


def test_a_how_to_question_leads_with_the_block_whose_introduction_states_it_best():
    chunk = _chunk(HOWTO)
    anchor = _at(HOWTO, "You want all")
    best_intro = _at(HOWTO, "The preferred approach")
    htaccess = _at(HOWTO, "If you must use")
    start, end = choose_span(chunk, anchor, ACFG, how=True,
                             scores=[(anchor, 0.6), (best_intro, 0.55), (htaccess, 0.4)])
    text = HOWTO[start:end]
    assert text.startswith("The preferred approach")  # not the question said back
    assert 'Redirect permanent "/"' in text and text.count("```") % 2 == 0  # the block whole
    # the .htaccess sentence states the question best: its block leads instead
    start, end = choose_span(chunk, anchor, ACFG, how=True,
                             scores=[(anchor, 0.5), (best_intro, 0.4), (htaccess, 0.7)])
    assert HOWTO[start:end].startswith("If you must use") and "RewriteCond" in HOWTO[start:end]


def test_a_long_paragraph_is_cut_after_a_whole_sentence_and_a_list_after_an_item():
    chunk = _chunk(LONG)
    start, end = choose_span(chunk, 0, AnswerSettings(passage_words=30))
    text = LONG[start:end]
    assert start == 0 and text.endswith(".") and len(text) < len(LONG)
    assert not text.rstrip().endswith(":")
    chunk = _chunk(LIST)
    start, end = choose_span(chunk, _at(LIST, "The flags"), AnswerSettings(passage_words=25))
    text = LIST[start:end]
    assert text.startswith("The flags are:") and "* `D`" in text and "* `H`" not in text
    assert text.rstrip().endswith(".")  # a whole item, not half of one


def test_what_comes_before_the_best_sentence_leads_when_it_is_short():
    text = "Chunks are split at headings. Each section becomes one or more chunks.\n"
    chunk = _chunk(text)
    start, _ = choose_span(chunk, _at(text, "Each section"), ACFG)
    assert start == 0  # the section's opening names its topic
    long_before = " ".join(["Some preamble sentence about other things here."] * 12) + "\n\n"
    text2 = long_before + "The answer is here and it is clear. It goes on.\n"
    start, _ = choose_span(_chunk(text2), _at(text2, "The answer"), ACFG)
    assert text2[start:].startswith("The answer")


BALANCER = """As useful as the above is, it still has the deficiencies that should the backend \
node go down, proxying those requests provides no real advantage. What is needed is the ability \
to define a group of backend servers which can handle such requests and for the reverse proxy \
to load balance and failover among them. This group is sometimes called a cluster but Apache \
httpd's term is a balancer. One defines a balancer by leveraging the `<Proxy>` and \
`BalancerMember` directives as shown:

```config
<Proxy balancer://myset>
    BalancerMember http://www2.example.com:8080
</Proxy>
```
"""

MOVED = """The directives above tell httpd to get content from a place in the filesystem. \
Sometimes it is desirable to tell the client that the content is at a different URL and have \
it make a new request with the new URL. This is called redirection and is implemented by the \
`Redirect` directive. For example, if the contents of the directory `/foo/` are moved to the \
new directory `/bar/`, you can instruct clients to request the content there as follows:

```config
Redirect permanent "/foo/" "http://www.example.com/bar/"
```
"""


def test_a_how_to_answer_opens_on_the_sentence_that_introduces_its_block_standing_alone():
    # the prose before the block is long; the sentences nearest it lean on the one before
    # ("This group …"), except the one that says how, or opens an example: that one leads
    start, end = choose_span(_chunk(BALANCER), 0, ACFG, how=True)
    assert BALANCER[start:end].startswith("One defines a balancer")
    assert "BalancerMember http://www2" in BALANCER[start:end]
    start, end = choose_span(_chunk(MOVED), 0, ACFG, how=True)
    assert MOVED[start:end].startswith("For example, if the contents")
    assert 'Redirect permanent "/foo/"' in MOVED[start:end]
    # a question that does not ask how reads the section from its start
    start, _ = choose_span(_chunk(MOVED), 0, ACFG, how=False)
    assert start == 0


def test_a_passage_never_ends_on_a_colon_whose_block_is_in_the_next_chunk():
    text = ("Running these build tasks in the `prepare` script ensures they happen once, in a "
            "single place. Additionally, this means that:\n")  # the chunk ends there
    start, end = choose_span(_chunk(text), 0, ACFG)
    assert text[start:end].rstrip().endswith("single place.")
    alone = "The full list is:\n"  # nothing before it to end on: it stays
    assert choose_span(_chunk(alone), 0, ACFG) == (0, len(alone))


def test_a_sections_short_closing_paragraph_is_not_left_out_for_a_few_words():
    main = ("The main field is a module ID that is the primary entry point to your program. "
            "If your package is named foo and a user requires it, your main module's exports "
            "object will be returned.\n\nThis should be a module relative to the root of your "
            "package folder.\n\nFor most modules it makes the most sense to have a main script "
            "and often not much else.\n\nIf `main` is not set, it defaults to `index.js` in the "
            "package's root folder.\n")
    start, end = choose_span(_chunk(main), 0, AnswerSettings(passage_words=72))
    assert main[start:end].rstrip().endswith("root folder.")  # 11 words over the room: kept
    start, end = choose_span(_chunk(main), 0, AnswerSettings(passage_words=30))
    assert "index.js" not in main[start:end]  # more than a fifth over: left out


def _sp(chunks: list[Chunk], question: str = "How do I redirect http to https?") -> SuperPrompt:
    return SuperPrompt(user_text=question, base_context_chunks=chunks,
                       final_selection_ids=[c.id for c in chunks])


def test_the_passage_is_rendered_under_its_title_and_citation_each_paragraph_cited():
    chunk = _chunk(HOWTO)
    sp = _sp([_chunk("Another section about logs.", "docs/b.md#0", ("Logs",)), chunk])
    start, end = choose_span(chunk, 0, AnswerSettings(passage_words=200))
    p = Passage(chunk, start, end, [Statement(text="x", kind="fact", chunk_ids=[chunk.id],
                                              span=(0, 5))])
    text = "".join(render(p, {c: n for n, c in enumerate(sp.final_selection_ids, 1)}))
    assert text.startswith("#### Guide › Forcing HTTPS [2]\n")
    assert "**Solution:**" in text  # a label is no statement: bold, uncited
    fences = re.findall(r"```config\n.*?\n```", text, re.DOTALL)
    assert len(fences) == 2 and 'Redirect permanent "/"' in fences[0]  # code whole, uncited
    assert "[2]" not in "".join(fences)
    for para in ("it is better accomplished without it. [2]",
                 "in a dedicated virtual host: [2]", "uses TLS. [2]"):
        assert para in text
    # the sentences of a cited paragraph count as cited; the heading line is no sentence
    sents = answer_sentences(text, 3)
    assert sents[0].startswith("You want all HTTP requests") and sents[0].endswith("[2]")
    assert all(s.rstrip().endswith("[2]") for s in sents)
    assert not dangling_colons(text)


def test_a_dangling_colon_and_the_question_said_back_are_found():
    assert dangling_colons("Start it with: [1]\n\nThen it runs. [1]\n") == ["Start it with: [1]"]
    assert not dangling_colons("Start it with: [1]\n\n```\nrun\n```\n")
    assert said_back("How do I redirect http to https? [1] Use Redirect. [1]",
                     "How do I redirect http to https?")
    assert not said_back("Use a Redirect in the port-80 host. [1]", "How do I redirect http to https?")


def test_a_length_a5_asks_for_keeps_whole_sentences_of_the_passage():
    chunk = _chunk(LONG)
    sents = [Statement(text=s, kind="fact", chunk_ids=[chunk.id], span=(a, b))
             for s, a, b in _spans(LONG)]
    p = Passage(chunk, 0, len(LONG), sents, [sents[0]])
    short = trim(p, max_words=None, max_sentences=2)
    assert len(short.statements) == 2 and short.end == sents[1].span[1] and not short.additions
    assert trim(p, max_words=1000, max_sentences=None) is p


def _spans(text: str):
    from ragstream.common.text import split_sentences

    for a, b in split_sentences(text):
        piece = text[a:b]
        lead = len(piece) - len(piece.lstrip())
        yield piece.strip(), a + lead, b


def test_the_pinned_chunk_is_the_passage(cfg):
    from ragstream.state import edits

    first, pinned = _chunk("Logs rotate daily.", "docs/b.md#0", ("Logs",)), _chunk(HOWTO)
    sp = _sp([first, pinned])
    sp.edits = [edits.new_edit(sp, "pin", pinned.id)]
    p = lead_passage(sp, None, ACFG, [], None, None)
    assert p is not None and p.chunk.id == pinned.id and "the chunk you pinned" in p.why


def test_the_answer_leads_with_the_section_that_answers_in_its_own_words(kb_engine):
    """On the bundled knowledge base: the answer opens with one section's title and citation,
    quotes it in its order (every paragraph stands in the chunk), and the command whole."""
    sp = kb_engine.run("How do I start a Chroma server?")
    ans = answer(sp, kb_engine.cfg, kb_engine.services)
    assert ans.mode == "extractive" and ans.passage is not None
    first_line = ans.text.splitlines()[0]
    assert first_line.startswith("#### ") and first_line.endswith(f"[{ans.passage.n}]")
    chunk = sp.chunk_map()[ans.passage.chunk_id]
    quoted = chunk.text[ans.passage.start:ans.passage.end]
    body = ans.text.split("\n\n", 1)[1].split("\nAlso:")[0]
    for para in body.split("\n\n"):  # each paragraph is the chunk's own text, cited
        words = re.sub(r"\s*\[\d+\]$", "", para.strip()).replace("**", "")
        assert words.strip() in quoted or words.strip().rstrip(":") in quoted, para
    assert "chroma run" in ans.text and "```" in ans.text
    assert not dangling_colons(ans.text) and not said_back(ans.text, sp.question)
    assert ans.confidence_reason.startswith(f"{ans.confidence}: ") and ans.confidence_detail


def test_how_does_x_work_is_about_x_not_about_work(kb_engine):
    """"How does reranking work?" is led by the article on reranking, not by the section
    titled "nDCG@10 worked example" that only shares the word 'work' with the frame."""
    assert without_frame("How does reranking work?") == "How does reranking?"
    assert without_frame("how do pins work with filters") == "how do pins with filters"
    assert without_frame("What is the work folder?") == "What is the work folder?"
    sp = kb_engine.run("How does reranking work?")
    ans = answer(sp, kb_engine.cfg, kb_engine.services)
    assert ans.passage is not None
    assert ans.passage.chunk_id.startswith("kb/reranking.md#"), ans.passage.chunk_id


def test_the_sentence_naming_the_rare_word_asked_about_wins_a_near_tie():
    texts = ["Note that this only applies to the root of the project you run npm in.",
             "Additionally, this file is not read in global mode, such as with npm install -g."]
    scored = [(0, 70, 0.52), (71, 150, 0.49)]  # cosines: the first a little closer
    weights = {"global": 3.0, "npmrc": 1.0, "project": 0.5}

    def terms(text: str) -> list[str]:
        return re.findall(r"[a-z]+", text.lower())

    plain = max(scored, key=lambda x: x[2])
    assert plain[0] == 0
    blended = with_terms(scored, texts, weights, terms, 0.2)
    assert max(blended, key=lambda x: x[2])[0] == 71  # it holds "global", the rare one
    assert with_terms(scored, texts, weights, terms, 0.0) == scored
    assert AnswerSettings().passage_term_weight == 0.2


def test_a_hash_line_inside_a_code_block_stays_code():
    text = ("Run it:\n\n```\n# htpasswd -c passwords rbowen\nNew password: secret\n```\n\n"
            "## Next step\n\nThen configure the server.\n")
    rendered = "\n".join(render(Passage(_chunk(text), 0, len(text), []), {"docs/a.md#0": 1}))
    assert "# htpasswd -c passwords rbowen" in rendered and "**htpasswd" not in rendered
    assert "**Next step**" in rendered  # a heading of the section is still made bold


def test_of_two_sentences_that_state_it_about_as_well_the_first_one_leads():
    """npm's optionalDependencies: the sentence that says what happens comes first in the
    section and scores a hair below one that elaborates further on; within
    ``passage_anchor_margin`` of the best, the first in the chunk's order leads."""
    text = ("If a dependency can be used but npm should go on without it, put it in "
            "optionalDependencies. The difference is that build failures do not cause "
            "installation to fail.\n\n"
            + "Your program must handle the dependency being absent at run time. " * 6
            + "\n\nEntries in optionalDependencies override entries of the same name in "
            "dependencies, so it is best to put a package in only one place.\n")
    chunk = _chunk(text, heading=("package.json", "optionalDependencies"))
    sp = _sp([chunk], "What happens when a package in optionalDependencies fails to build?")
    said = _at(text, "The difference is")
    later = _at(text, "Entries in optionalDependencies")
    scores = [(a, b, 0.732 if a == said else 0.733 if a == later else 0.4)
              for _, a, b in _spans(text)]
    narrow = AnswerSettings(passage_words=40, passage_lead_words=0)

    def lead(acfg):
        p = lead_passage(sp, None, acfg, [], None, None, sentence_scores=lambda c: scores)
        assert p is not None
        return p.text

    assert "do not cause installation to fail" in lead(narrow)[:200]
    # with no margin the best alone leads, and the sentence that says it is not quoted
    alone = lead(narrow.model_copy(update={"passage_anchor_margin": 0.0}))
    assert alone.startswith("Entries in optionalDependencies") and "fail" not in alone
    # a sentence further below the best than the margin does not lead
    far = [(a, b, 0.60 if a == said else sc) for a, b, sc in scores]
    p = lead_passage(sp, None, narrow, [], None, None, sentence_scores=lambda c: far)
    assert p is not None and p.text.startswith("Entries in optionalDependencies")


def test_a_passage_never_ends_on_a_bare_label_whose_text_it_leaves_out():
    """Python's venv page (Sphinx): the section's prose, then an admonition titled "Warning"
    whose text does not fit: the passage ends before the title, not on it."""
    text = ("When a virtual environment has been activated, the VIRTUAL_ENV environment variable "
            "is set to the path of the environment.\n\nWarning\n\n"
            + "Because scripts installed in environments should not expect the environment to "
              "be activated, their shebang lines contain the absolute paths. " * 4)
    chunk = _chunk(text, heading=("venv", "How venvs work"))
    start, end = choose_span(chunk, 0, AnswerSettings(passage_words=25, passage_lead_words=0))
    assert text[start:end].rstrip().endswith("path of the environment.")
    # a label followed by its text within the room stays, with that text
    start, end = choose_span(chunk, 0, AnswerSettings(passage_words=200, passage_lead_words=0))
    assert "Warning" in text[start:end] and text[start:end].rstrip().endswith("absolute paths.")


def test_a_label_whose_text_the_passage_quotes_in_part_stays_with_it():
    """Python's json.dumps entry: the signature, one sentence, an admonition titled "Note" and
    its text, where the answer to "why do my int keys come back as strings?" stands. The room
    ends inside the note's text: the passage keeps the label and the note's first sentences,
    never stopping before the anchor it was chosen for."""
    text = ("Serialize obj to a JSON formatted str using this conversion table. The arguments "
            "have the same meaning as in dump().\n\nNote\n\n"
            "Keys in key/value pairs of JSON are always of the type str. When a dictionary is "
            "converted into JSON, all the keys of the dictionary are coerced to strings. "
            + "As a result of this, a dictionary may not equal the original one after a round "
              "trip through JSON and back again. " * 3)
    chunk = _chunk(text, heading=("Basic Usage", "json.dumps"))
    start, end = choose_span(chunk, text.index("Keys in"), AnswerSettings(passage_words=60))
    assert "coerced to strings." in text[start:end]
    assert text[start:end].startswith("Serialize obj")  # the short prose before leads


def test_a_block_before_the_statement_leads_only_when_the_statement_speaks_of_it():
    """Python's argparse "type": an example of user-defined converters, then "The bool()
    function is not recommended …", which answers "why not type=bool?". A question that does
    not ask how opens on the statement, not on the unrelated example above it. Apache's
    "Using multiple providers": the configuration, then "In this example the file provider …":
    the sentence explains the block, so the block leads."""
    code = "```python\n>>> parser.add_argument('short_title', type=hyphenated)\n```\n\n"
    text = ("User defined functions can be used as well:\n\n" + code
            + "The bool() function is not recommended as a type converter. All it does is "
              "convert empty strings to False and non-empty strings to True.\n")
    chunk = _chunk(text, heading=("add_argument()", "type"))
    start, _ = choose_span(chunk, text.index("The bool()"), AnswerSettings())
    assert text[start:].startswith("The bool()")
    config = "```config\n<Directory /private>\n    AuthBasicProvider file ldap\n</Directory>\n```\n\n"
    text = (config + "In this example the file provider will attempt to authenticate the user "
            "first. If it is unable to, the LDAP provider will be called.\n")
    start, _ = choose_span(_chunk(text), text.index("In this example"), AnswerSettings())
    assert text[start:].startswith("```config")
    # a how-question reaches the block either way
    start, end = choose_span(chunk, chunk.text.index("The bool()"), AnswerSettings(), how=True)
    assert "type=hyphenated" in chunk.text[start:end]


def test_a_table_is_measured_in_rows_and_kept_whole_but_is_no_code_block():
    """Python's venv page: "The invocation of the activation script is platform-specific:"
    and a table of shells and commands. Read as prose, its cells ran over the room and the
    passage stopped before it; as rows it is kept whole with its introduction. A how-question
    still leads with a code block, not with a table (Apache's "Related Modules" sidebar)."""
    rows = "".join(f"| POSIX | shell{i} | `$ source <venv>/bin/activate.sh{i}` |\n" for i in range(7))
    text = ("A virtual environment may be activated using a script in its binary directory. "
            "This will prepend that directory to your PATH, so that running python will invoke "
            "the environment's Python interpreter and you can run installed scripts without "
            "having to use their full path. The invocation of the activation script is "
            "platform-specific:\n\n| Platform | Shell | Command |\n| --- | --- | --- |\n" + rows)
    chunk = _chunk(text, heading=("venv", "How venvs work"))
    unit = units(text)[0]
    assert unit.introduces and unit.code_lines >= 9 and not unit.shows_code
    start, end = choose_span(chunk, 0, AnswerSettings(passage_words=60))
    assert text[start:end].rstrip().endswith("activate.sh6` |")
    table = "| Related Modules | Related Directives |\n| --- | --- |\n| `mod_so` | `LoadModule` |\n\n"
    how = (table + "You can see the modules loaded with the -M option. Start it with:\n\n"
           "```bash\nhttpd -M\n```\n")
    start, _ = choose_span(_chunk(how), how.index("You can"), AnswerSettings(), how=True)
    assert how[start:].startswith("You can see")


def test_a_passage_never_closes_on_a_copyright_notice():
    """The Apache manual's "When not to use mod_rewrite" printed to PDF by Chromium ends on the
    page's footer, "Copyright … Licensed under …", as the last paragraph of its last section:
    the passage stops before it. A notice that is what the question asks about stays."""
    text = ("However, mod_proxy_balancer is far more flexible and featureful than anything you "
            "can cobble together using mod_rewrite, and is the recommended approach.\n\n"
            "Copyright 2026 The Apache Software Foundation.\nLicensed under the Apache License, "
            "Version 2.0.\n")
    chunk = _chunk(text, heading=("When not to use mod_rewrite", "Load Balancing"))
    start, end = choose_span(chunk, 0, AnswerSettings())
    assert text[start:end].rstrip().endswith("the recommended approach.")
    assert "Copyright" not in text[start:end]
    at = text.index("Copyright")
    start, end = choose_span(chunk, at, AnswerSettings(passage_lead_words=0))
    assert "Copyright 2026" in text[start:end]
    for notice in ("© 2024 Example Corp.", "All rights reserved.", "(c) 2019 Someone."):
        other = text.replace("Copyright 2026 The Apache Software Foundation.", notice)
        start, end = choose_span(_chunk(other), 0, AnswerSettings())
        assert notice not in other[start:end]


@pytest.mark.parametrize("signature", [
    "class csv.DictReader(f, fieldnames=None, restkey=None, dialect='excel', *args, **kwds)",
    "`class csv.DictReader(f, fieldnames=None, restkey=None, dialect='excel', *args, **kwds)`"])
def test_an_api_description_keeps_its_signature_line(signature):
    """Python's csv reference: the description "Create an object …" stands under the line
    naming what it describes. The passage opening on the description takes that line in, also
    for a question that asks how (which otherwise opens on its best sentence)."""
    text = ("The `csv` module defines the following classes:\n\n" + signature + "\n\n"
            "Create an object that operates like a regular reader but maps the information in "
            "each row to a `dict` whose keys are given by the optional fieldnames parameter.\n\n"
            "The fieldnames parameter is a sequence.\n")
    chunk = _chunk(text, heading=("csv", "Module Contents"))
    at = text.index("Create an object")
    for how in (False, True):
        start, end = choose_span(chunk, at, AnswerSettings(passage_lead_words=0), how=how)
        assert text[start:end].startswith(signature), how
        assert "defines the following classes" not in text[start:end]
    # a sentence before the anchor is not a signature: it is not taken in for a how question
    prose = text.replace(signature, "It reads rows of a file one at a time.")
    start, _ = choose_span(_chunk(prose), prose.index("Create an object"),
                           AnswerSettings(passage_lead_words=0), how=True)
    assert prose[start:].startswith("Create an object")


@pytest.mark.parametrize("question, how", [
    ("Can you show me code that sets up a logger with a console handler?", True),
    ("Show me how to write rows to a CSV file.", True),
    ("Give me an example of writing a list of dicts to a CSV file.", True),
    ("Why does a dict with integer keys come back with string keys?", False),
    ("Which exception do I get when the command times out?", False)])
def test_a_question_asking_for_code_asks_how(question, how):
    """A person asking to be shown code asks how (``reranker.how_cues``): the passage
    reaches its code block (Python's logging HOWTO: the console handler example)."""
    from ragstream.common.config import RerankerSettings
    from ragstream.common.text import asks_how
    assert asks_how(question, RerankerSettings().how_cues) is how


@pytest.mark.parametrize("question, yes_no", [
    ("If I use the sqlite3 connection in a with block, is it closed at the end?", True),
    ("Does npm install peer dependencies for me automatically?", True),
    ("My rows vanish. Do I have to commit?", True),
    ("How do I make it start empty?", False), ("Why does a dict come back?", False),
    ("When should I use prepare rather than prepublishOnly?", False)])
def test_a_yes_no_question_is_told_from_one_that_asks_how_or_why(question, yes_no):
    from ragstream.common.text import asks_yes_no
    assert asks_yes_no(question) is yes_no


def test_a_yes_no_question_opens_on_the_sentence_that_says_yes_or_no():
    """sqlite3's "How to use the connection context manager": four sentences on commits, then
    "The context manager neither implicitly opens a new transaction nor closes the
    connection." For "is it closed at the end?" that sentence, scored best by a little, is
    the anchor: not the first sentence within the near-tie margin."""
    text = ("A Connection object can be used as a context manager that commits or rolls back "
            "open transactions when leaving the body of the context manager. If the body "
            "finishes without exceptions, the transaction is committed. If this commit fails, "
            "the transaction is rolled back.\n\nIf there is no open transaction upon leaving "
            "the body, the context manager is a no-op.\n\nNote\n\nThe context manager neither "
            "implicitly opens a new transaction nor closes the connection.\n")
    chunk = _chunk(text, "docs/sqlite3.md#108", ("How-to guides", "Context manager"))
    first, best = text.index("A Connection"), text.index("The context manager neither")
    sp = _sp([chunk], "If I use the connection in a with block, is it closed at the end?")

    def scores(_chunk):
        return [(first, text.index(" If the body"), 0.59), (best, len(text) - 1, 0.63)]

    acfg = AnswerSettings(passage_words=20, passage_lead_words=0)
    p = lead_passage(sp, None, acfg, [], None, None, sentence_scores=scores, yes_no=True)
    assert p is not None and "nor closes the connection" in p.text[:200]
    p = lead_passage(sp, None, acfg, [], None, None, sentence_scores=scores)
    assert p is not None and p.text.startswith("A Connection")
