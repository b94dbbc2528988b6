"""Tests for ragstream.knowledge.formats.web: saved web pages and EPUB books → Markdown for the chunker.

Every fixture is built here (HTML strings, EPUBs written with ``zipfile``). Hostile inputs run in
a forked child whose address space is capped (``run_bounded``), so a converter that expanded an
entity bomb or a zip bomb fails the test instead of eating the machine; the child reports its
time and peak memory (VmHWM, reset before the call).
"""

from __future__ import annotations

import functools
import io
import os
import pickle
import re
import resource
import select
import signal
import time
import zipfile
from pathlib import Path

import lxml.html
import pytest

from benchmarks import furniture
from ragstream.common import markdown as md_reader
from ragstream.common.config import ChunkingSettings
from ragstream.common.errors import (
    DamagedFileError,
    EncryptedFileError,
    UnsupportedFormatError,
)
from ragstream.knowledge.formats import Converted, Limits, web
from ragstream.knowledge.formats.web import EpubConverted, convert_epub, convert_html
from ragstream.knowledge.ingest.chunker import parse_document

LIMITS = Limits()
README = Path(__file__).resolve().parents[2] / "README.md"


def parsed(markdown: str):
    """The chunker's reading of converted Markdown, as the brief asks it to be called."""
    return parse_document(markdown, "site/x.html.md", ChunkingSettings(), "2026-01-01")


def heading_paths(markdown: str) -> list[tuple[str, ...]]:
    """The heading path of every chunk, in order, without repeats."""
    paths: list[tuple[str, ...]] = []
    for chunk in parsed(markdown).chunks:
        if not paths or paths[-1] != chunk.heading_path:
            paths.append(chunk.heading_path)
    return paths


def block_kinds(markdown: str) -> list[str]:
    """The top-level Markdown block kinds (heading, paragraph, table, fence, list, …)."""
    return [b.kind for b in md_reader.parse(markdown).blocks]


def html(text: str, name: str = "page.html") -> Converted:
    return convert_html(name, text.encode("utf-8"), LIMITS)


# ----------------------------------------------------------------------------- bounded runs


def _status(key: str) -> int:
    """A ``/proc/self/status`` value in kB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def run_bounded(fn, *args, seconds: float = 10.0, mem_mb: int = 512):
    """``fn(*args)`` in a forked child whose address space may grow by at most ``mem_mb``;
    returns ``(outcome, elapsed_s, peak_mb)``: outcome is ``("ok", markdown, warnings)`` or
    ``(exception class name, message)``. The child is killed after ``seconds``."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.close(read_end)
            rss = _status("VmRSS")
            try:
                Path("/proc/self/clear_refs").write_text("5")  # reset the peak (VmHWM)
            except OSError:
                pass
            _, hard = resource.getrlimit(resource.RLIMIT_AS)
            resource.setrlimit(resource.RLIMIT_AS, ((_status("VmSize") + mem_mb * 1024) * 1024, hard))
            start = time.perf_counter()
            try:
                result = fn(*args)
                outcome: tuple = ("ok", result.markdown, list(result.warnings))
            except BaseException as err:  # reported to the parent
                outcome = (type(err).__name__, str(err)[:2000])
            elapsed = time.perf_counter() - start
            peak_mb = max(_status("VmHWM") - rss, 0) / 1024
            payload = pickle.dumps((outcome, elapsed, peak_mb))
            with os.fdopen(write_end, "wb") as pipe:
                pipe.write(payload)
        finally:
            os._exit(0)
    os.close(write_end)
    chunks: list[bytes] = []
    deadline = time.monotonic() + seconds
    with os.fdopen(read_end, "rb", buffering=0) as pipe:
        while True:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([pipe], [], [], max(left, 0))
            if not ready:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                pytest.fail(f"{fn.__name__} took longer than {seconds} s")
            data = pipe.read(1 << 16)
            if not data:
                break
            chunks.append(data)
    os.waitpid(pid, 0)
    assert chunks, "the child died without a result (out of memory?)"
    return pickle.loads(b"".join(chunks))


# ----------------------------------------------------------------------------- a saved page

PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Chunking guide – ACME Docs</title>
<style>body { color: red } .STYLE-TEXT {}</style>
<script>var secret = "SCRIPT-TEXT-1"; document.write("<h1>SCRIPT-HEADING</h1>");</script>
</head><body>
<div id="cookie-banner" class="cookie-consent"><p>We use COOKIES-TEXT to improve your visit.</p>
<button>Accept</button></div>
<header class="site-header"><a href="/">SITE-HEADER-TEXT</a>
<nav><ul><li><a href="/a">NAV-HOME</a></li><li><a href="/b">NAV-BLOG</a></li></ul></nav></header>
<nav aria-label="breadcrumb"><ol><li>CRUMB-DOCS</li><li>CRUMB-GUIDES</li></ol></nav>
<div role="navigation">ROLE-NAV-TEXT</div>
<main>
<article>
<header><h1>Chunking <a href="#guide">guide</a></h1><p>By Ada</p></header>
<p>Chunking splits a <em>document</em> into pieces with <code>parse_document</code>.
<script>document.write("SCRIPT-TEXT-2")</script></p>
<h2>Lists</h2>
<ul><li>First item<ul><li>Nested one</li><li>Nested two</li></ul></li><li>Second item</li></ul>
<ol start="3"><li>Step three</li><li>Step four</li></ol>
<h3>Settings table</h3>
<table><thead><tr><th>Name</th><th>Value | unit</th></tr></thead>
<tbody><tr><td>max_tokens</td><td>320</td></tr><tr><td>min_tokens</td><td>48</td></tr></tbody></table>
<h2>Code</h2>
<pre><code class="language-python">def double(x):
    return x * 2  # twice
</code></pre>
<blockquote><p>A quoted remark.</p></blockquote>
<p hidden>HIDDEN-ATTR-TEXT</p>
<div style="color: blue; display: none">HIDDEN-STYLE-TEXT</div>
<span aria-hidden="true">ARIA-HIDDEN-TEXT</span>
<img src="diagram.png" alt="ALT-TEXT">
</article>
<aside class="sidebar"><h2>SIDEBAR-HEADING</h2><p>SIDEBAR-TEXT</p></aside>
</main>
<form><label>SEARCH-LABEL</label><input name="q"></form>
<footer class="site-footer"><p>FOOTER-TEXT © 2026 ACME.</p></footer>
<noscript>NOSCRIPT-TEXT</noscript>
<script>console.log("SCRIPT-TEXT-3")</script>
</body></html>
"""

EXPECTED_PAGE = """\
# Chunking guide

By Ada

Chunking splits a document into pieces with `parse_document`.

## Lists

- First item
  - Nested one
  - Nested two
- Second item

3. Step three
4. Step four

### Settings table

| Name | Value \\| unit |
| --- | --- |
| max_tokens | 320 |
| min_tokens | 48 |

## Code

```python
def double(x):
    return x * 2  # twice
```

> A quoted remark.
"""


def test_a_saved_page_keeps_only_its_article():
    converted = html(PAGE)
    assert converted.markdown == EXPECTED_PAGE
    assert converted.kind == "html"
    assert converted.title == "Chunking guide – ACME Docs"
    assert converted.warnings == ["1 image left out"]
    for junk in ("SCRIPT", "STYLE", "COOKIES", "SITE-HEADER", "NAV-", "CRUMB", "ROLE-NAV", "HIDDEN",
                 "SIDEBAR", "SEARCH-LABEL", "FOOTER", "NOSCRIPT", "ALT-TEXT", "diagram.png"):
        assert junk not in converted.markdown


def test_the_page_s_headings_become_the_chunks_heading_paths():
    converted = html(PAGE)
    doc = parsed(converted.markdown)
    assert doc.title == "Chunking guide"
    assert heading_paths(converted.markdown) == [
        ("Chunking guide",),
        ("Chunking guide", "Lists"),
        ("Chunking guide", "Lists", "Settings table"),
        ("Chunking guide", "Code"),
    ]
    table_chunk = next(c for c in doc.chunks if "max_tokens" in c.text)
    assert "| min_tokens | 48 |" in table_chunk.text
    assert next(c for c in doc.chunks if "def double" in c.text).has_code


SPHINX = """<html><head><title>csv</title></head><body><div class="body" role="main">
<h1>csv — CSV File Reading and Writing</h1><p>The csv module reads and writes tabular data.</p>
<h2>Module Contents<a class="headerlink" href="#module-contents">¶</a></h2>
<p>The <code>csv</code> module defines the following classes:</p>
<dl class="py class"><dt class="sig sig-object py" id="csv.DictReader">
<em class="property">class </em><span class="sig-prename">csv.</span><span class="sig-name">\
DictReader</span>(<em>f</em>, <em>fieldnames=None</em>)<a class="headerlink" \
href="#csv.DictReader">¶</a></dt>
<dd><p>Create an object that maps the information in each row to a dict.</p></dd></dl>
<dl class="py class"><dt class="sig sig-object py" id="csv.Sniffer">
<em class="property">class </em><span class="sig-prename">csv.</span>\
<span class="sig-name">Sniffer</span></dt>
<dd><p>The Sniffer class is used to deduce the format of a CSV file.</p>
<dl class="py method"><dt class="sig sig-object py" id="csv.Sniffer.sniff">
<span class="sig-name">sniff</span>(<em>sample</em>, <em>delimiters=None</em>)</dt>
<dd><p>Analyze the given sample and return a Dialect subclass.</p></dd></dl></dd></dl>
<h2>Dialects</h2><p>The log format's fields:</p>
<dl><dt>%h</dt><dd><p>The remote host.</p></dd></dl>
</div></body></html>"""


def test_an_api_entry_is_a_section_of_its_own_under_its_name():
    """A Sphinx entry (a ``dt`` with an ``id``: what one can link to) is a heading one level
    below its section, named without its parameters, the whole signature first in it as code;
    a method is a level below its class; a ``dt`` without an ``id`` (a glossary, a list of log
    format fields) stays a paragraph."""
    converted = html(SPHINX)
    paths = heading_paths(converted.markdown)
    base = ("csv — CSV File Reading and Writing", "Module Contents")
    assert base + ("class csv.DictReader",) in paths
    assert base + ("class csv.Sniffer", "sniff") in paths
    assert ("csv — CSV File Reading and Writing", "Dialects") in paths
    doc = parsed(converted.markdown)
    reader = next(c for c in doc.chunks if c.heading_path[-1] == "class csv.DictReader")
    assert reader.text.lstrip().startswith("`class csv.DictReader(f, fieldnames=None)`")
    assert "maps the information in each row" in reader.text and "¶" not in reader.text
    fields = next(c for c in doc.chunks if "%h" in c.text)
    assert fields.heading_path[-1] == "Dialects" and "The remote host." in fields.text


@pytest.mark.skipif(not Path("/usr/share/doc/python3.11/html/library/csv.html").is_file(),
                    reason="python3.11-doc is not installed (scripts/setup.sh --browser "
                           "installs it)")
def test_python_s_own_reference_pages_give_each_function_its_section():
    """Debian's python3.11-doc, which nobody here wrote: csv's classes and functions, and a
    class's methods below it, are sections named by them; the signature is in the section."""
    data = Path("/usr/share/doc/python3.11/html/library/csv.html").read_bytes()
    converted = convert_html("csv.html", data, LIMITS)
    doc = parsed(converted.markdown)
    names = {c.heading_path[-1]: c for c in doc.chunks}
    assert "class csv.DictReader" in names and "csv.reader" in names
    assert "`class csv.DictReader(" in names["class csv.DictReader"].text
    sniff = next(c for c in doc.chunks if c.heading_path[-1].startswith("sniff"))
    assert sniff.heading_path[-2] == "class csv.Sniffer"


def test_script_text_never_appears_wherever_the_script_stands():
    page = """<html><head><script>HEAD_SCRIPT()</script></head><body>
    <h1>Title <script>IN_HEADING()</script></h1>
    <p>Text <script>IN_PARAGRAPH()</script> more.</p>
    <table><tr><th>a<script>IN_HEADER_CELL()</script></th><th>b</th></tr>
    <tr><td>1 <script>IN_CELL()</script></td><td>2</td></tr></table>
    <pre><code>code()<script>IN_PRE()</script></code></pre>
    <ul><li>item <script>IN_LIST()</script></li></ul>
    <script type="text/template"><h2>TEMPLATE_HEADING</h2></script>
    <script>document.write('</div><p>AFTER_CLOSE()</p>')</script>
    <template><p>TEMPLATE_TEXT</p></template>
    <p>End.</p></body></html>"""
    out = html(page).markdown
    for leaked in ("HEAD_SCRIPT", "IN_HEADING", "IN_PARAGRAPH", "IN_HEADER_CELL", "IN_CELL", "IN_PRE",
                   "IN_LIST", "TEMPLATE_HEADING", "AFTER_CLOSE", "TEMPLATE_TEXT", "document.write"):
        assert leaked not in out
    assert out.startswith("# Title\n\nText more.\n\n| a | b |")
    assert "code()" in out and out.endswith("End.\n")


def test_page_level_header_and_footer_go_but_an_article_s_own_stay():
    page = """<body><header><h1>SITE NAME</h1></header>
    <section><header><h2>Section head</h2></header><p>Section text.</p>
    <footer><p>Section footer.</p></footer></section>
    <div class="page-sidebar with-sidebar"><p>Kept: a class that only mentions a sidebar.</p></div>
    <aside><p>PAGE-ASIDE</p></aside>
    <footer><p>PAGE FOOTER</p></footer></body>"""
    out = html(page).markdown
    assert out == ("## Section head\n\nSection text.\n\nSection footer.\n\n"
                   "Kept: a class that only mentions a sidebar.\n")


def test_main_is_read_when_there_is_one_and_several_articles_are_all_kept():
    with_main = html("<body><p>OUTSIDE</p><main><h1>Inside</h1><p>Main text.</p></main></body>")
    assert with_main.markdown == "# Inside\n\nMain text.\n"
    single = html("<body><p>OUTSIDE</p><article><h1>Post</h1><p>Body.</p>"
                  "<article><p>A comment.</p></article></article></body>")
    assert single.markdown == "# Post\n\nBody.\n\nA comment.\n"
    two = html("<body><p>Intro.</p><article><h2>One</h2><p>1st.</p></article>"
               "<article><h2>Two</h2><p>2nd.</p></article></body>")
    assert two.markdown == "Intro.\n\n## One\n\n1st.\n\n## Two\n\n2nd.\n"
    hidden_main = html("<body><main hidden><p>HIDDEN MAIN</p></main><p>Visible.</p></body>")
    assert hidden_main.markdown == "Visible.\n"
    template_main = html("<body><template><main><p>TEMPLATE</p></main></template><p>Visible.</p></body>")
    assert template_main.markdown == "Visible.\n"
    empty_main = html("<body><p>Static text.</p><main id='app'></main></body>")
    assert empty_main.markdown == "Static text.\n"


def test_cookie_banners_and_dialogs_go_but_a_heading_keeps_its_wrapper():
    page = """<body>
    <div id="CybotCookiebotDialog"><p>COOKIEBOT</p></div>
    <div class="gdpr-notice"><p>GDPR-TEXT</p></div>
    <div role="dialog" aria-label="Consent"><p>DIALOG-TEXT</p></div>
    <dialog open><p>DIALOG-ELEMENT</p></dialog>
    <div class="cookie-wrapper"><h1>Cookies: a recipe</h1><p>Flour and sugar.</p></div>
    </body>"""
    assert html(page).markdown == "# Cookies: a recipe\n\nFlour and sugar.\n"


def test_headings_are_text_only_and_links_images_and_emphasis_are_plain_text():
    out = html("""<body><h2><a href="https://example.com/x">Linked</a> <code>code()</code>
    <img src="i.png" alt="ICON"> heading #</h2>
    <p>See <a href="https://example.com/doc">the docs</a>, <strong>bold</strong> and <i>it</i>.<br>
    Second line<br/>- not a list</p></body>""").markdown
    assert out == ("## Linked code() heading \\#\n\n"
                   "See the docs, bold and it.\nSecond line\n\\- not a list\n")
    assert "example.com" not in out and "ICON" not in out


def test_permalinks_and_back_links_are_left_out():
    out = html("""<body><h2 id="x">Setup<a class="headerlink" href="#x" title="Permalink">\u00b6</a></h2>
    <h3 id="y"><a class="doc-anchor" href="#y">\u00a7</a>Details</h3>
    <p>Text<a href="#fnref1" role="doc-backlink">\u21a9\ufe0e</a>, see <a href="#sec">section 2</a>.</p>
    </body>""").markdown
    assert out == "## Setup\n\n### Details\n\nText, see section 2.\n"


def test_a_title_that_only_repeats_the_file_name_gives_way_to_the_h1():
    page = b"<title>faq</title><h1>Questions people ask</h1><p>Answers.</p>"
    assert convert_html("site/faq.html", page, LIMITS).title == "Questions people ask"
    assert convert_html("site/other.html", page, LIMITS).title == "faq"
    assert convert_html("x.html", b"<h1>Only a heading</h1><p>t</p>", LIMITS).title == "Only a heading"


def test_text_that_looks_like_markdown_structure_stays_text():
    page = """<body><h1>Real</h1>
    <p># not a heading</p><p>1986. A fine year.</p><p>- dash</p><p>&lt;div&gt; a tag</p>
    <p>[ref]: http://example.com</p><p>===</p><p>```not a fence</p><p>&gt; not a quote</p>
    <p>$$ not math</p></body>"""
    converted = html(page)
    blocks = md_reader.parse(converted.markdown).blocks
    assert [b.kind for b in blocks] == ["heading"] + ["paragraph"] * 9
    assert heading_paths(converted.markdown) == [("Real",)]
    for text in ("# not a heading", "1986\\. A fine year.", "<div> a tag", "[ref]: http://example.com"):
        assert text in converted.markdown


def test_code_blocks_keep_their_text_and_language():
    page = """<body>
    <pre class="language-rust">fn main() {}</pre>
    <div class="highlight-bash notranslate"><div class="highlight"><pre><span>echo</span> "a  b"
  indented</pre></div></div>
    <pre><code>has ``` fences<br>and a break</code></pre>
    <pre><code class="lang-js"><div class="line">let a = 1;</div><div class="line">let b = 2;</div>
    </code></pre>
    <p>Inline <code>a`b</code>.</p></body>"""
    out = html(page).markdown
    assert "```rust\nfn main() {}\n```" in out
    assert '```bash\necho "a  b"\n  indented\n```' in out
    assert "````\nhas ``` fences\nand a break\n````" in out
    assert "```js\nlet a = 1;\nlet b = 2;\n```" in out
    assert "Inline ``a`b``." in out
    assert block_kinds(out) == ["fence", "fence", "fence", "fence", "paragraph"]


def test_tables_spans_nested_tables_and_pipes():
    page = """<body><table>
    <caption>Results</caption>
    <tr><th rowspan="2">Model</th><th colspan="2">Score</th></tr>
    <tr><th>dev</th><th>test</th></tr>
    <tr><td>a|b</td><td colspan="2">both</td></tr>
    <tr><td rowspan="2">tall</td><td>1</td><td>2</td></tr>
    <tr><td>3</td><td><table><tr><td>inner</td><td>cell</td></tr><tr><td>row 2</td></tr></table></td></tr>
    </table></body>"""
    out = html(page).markdown
    assert out == (
        "Results\n\n"
        "| Model | Score | Score |\n"
        "| --- | --- | --- |\n"
        "|  | dev | test |\n"
        "| a\\|b | both |  |\n"
        "| tall | 1 | 2 |\n"
        "|  | 3 | inner cell row 2 |\n")
    assert block_kinds(out) == ["paragraph", "table"]


def test_a_layout_table_is_read_as_its_blocks():
    page = """<body><table role="presentation"><tr><td><h1>Old site</h1><p>Intro.</p></td>
    <td><h2>Part</h2><ul><li>x</li></ul></td></tr></table></body>"""
    assert html(page).markdown == "# Old site\n\nIntro.\n\n## Part\n\n- x\n"


def test_lists_nest_with_paragraphs_and_code_inside_items():
    page = """<body><ol><li><p>First para.</p><p>Second para.</p>
    <pre>code line</pre><ul><li>sub <ol><li>deep</li></ol></li></ul></li><li>Two</li></ol></body>"""
    out = html(page).markdown
    assert out == ("1. First para.\n\n   Second para.\n\n   ```\n   code line\n   ```\n"
                   "   - sub\n     1. deep\n2. Two\n")
    items = md_reader.parse(out).blocks[0].children
    assert [b.kind for b in items] == ["item", "item"]


# ----------------------------------------------------------------------------- page furniture

PROSE = ("Chunking splits a document into pieces that are small enough to embed, and every "
         "piece keeps the heading path of the section it comes from, so that an answer can cite it.")

UNMARKED_PAGE = f"""<!DOCTYPE html><html><head><title>Chunking - ACME Docs</title></head><body>
<div id="top"><p class="site">ACME Docs SITE-NAME</p>
<p><a href="/">Home</a> | <a href="/blog">Blog</a> | <a href="/about">MENU-ABOUT</a></p></div>
<div id="trail"><a href="/">ACME</a> &gt; <a href="/docs">Docs</a> &gt; TRAIL-HERE</div>
<div id="wrap"><div id="widgets"><h3>Recent posts</h3>
<ul><li><a href="/p1">WIDGET-POST one</a></li><li><a href="/p2">WIDGET-POST two</a></li></ul></div>
<div id="text"><h1>Chunking</h1>
<div class="toplang"><p><span>Available Languages: </span><a href="chunking.html">en</a> |
<a href="../fr/chunking.html" hreflang="fr">fr</a></p></div>
<p>{PROSE}</p>
<h2>Settings</h2><p>{PROSE} The settings below are read once, when the index is opened.</p>
<table><tr><th>Name</th><th>Value</th></tr><tr><td>max_tokens</td><td>320</td></tr></table>
<h2>Code</h2><pre>parse_document(text)</pre>
<p>See <a href="api.html">the API</a>.</p></div></div>
<div id="footer"><p>Copyright 2026 ACME. COPYRIGHT-LINE</p></div>
</body></html>"""


def test_a_page_without_main_is_read_where_jusText_finds_its_prose():
    out = html(UNMARKED_PAGE).markdown
    assert out == (f"# Chunking\n\n{PROSE}\n\n## Settings\n\n{PROSE} The settings below are read "
                   "once, when the index is opened.\n\n| Name | Value |\n| --- | --- |\n"
                   "| max_tokens | 320 |\n\n## Code\n\n```\nparse_document(text)\n```\n\n"
                   "See the API.\n")
    for junk in ("SITE-NAME", "MENU-ABOUT", "TRAIL-HERE", "WIDGET-POST", "Recent posts",
                 "Available Languages", "COPYRIGHT-LINE"):
        assert junk not in out


def test_a_page_without_prose_or_with_one_heading_is_read_whole():
    short = html("""<body><div class="top"><h1>Title</h1></div>
    <div><p>Short line.</p><ul><li>one</li><li>two</li></ul></div></body>""").markdown
    assert short == "# Title\n\nShort line.\n\n- one\n- two\n"
    headings_only = html(f"""<body><div><p>{PROSE}</p></div><div><h1>Later title</h1></div>
    <p>Closing words of the page.</p></body>""").markdown
    assert headings_only == f"{PROSE}\n\n# Later title\n\nClosing words of the page.\n"


def test_language_lists_go_by_their_name_or_their_translation_links():
    out = html("""<body><main><h1>Guide</h1>
    <div class="toplang"><p>Available Languages: <a href="g.html">en</a></p></div>
    <ul class="switcher"><li><a hreflang="de" href="/de/">Deutsch</a></li>
    <li><a hreflang="fr" href="/fr/">Français</a></li></ul>
    <p>Language: <a href="/ja/" hreflang="ja">日本語</a></p>
    <p>This guide is also available in <a hreflang="fr" href="/fr/">French</a>, translated by
    volunteers.</p>
    <pre class="lang-config">Listen 80</pre></main></body>""").markdown
    assert out == ("# Guide\n\nThis guide is also available in French, translated by volunteers."
                   "\n\n```config\nListen 80\n```\n")


def test_footers_and_comment_sections_go_but_a_section_titled_so_stays():
    out = html("""<body><main><h1>Page</h1><p>Text.</p>
    <div class="comments-area"><h2>3 comments</h2><p>COMMENT-TEXT</p></div>
    <div id="disqus_thread">DISQUS</div>
    <section id="footer"><h2>Footer</h2><p>The page footer holds the licence.</p></section>
    <section id="comments"><h3>Comments</h3><p>A comment starts with #.</p></section>
    <div class="footer">Copyright 2026 FOOTER-TEXT</div></main></body>""").markdown
    assert out == ("# Page\n\nText.\n\n## Footer\n\nThe page footer holds the licence.\n\n"
                   "### Comments\n\nA comment starts with #.\n")


def test_a_heading_or_section_whose_id_names_a_cookie_keeps_its_text():
    out = html("""<body><main>
    <h2 id="proxypassreversecookiedomain"><span id="ProxyPassReverseCookieDomain">
    ProxyPassReverseCookieDomain</span> Directive</h2><p>Rewrites the domain.</p>
    <section id="cookie-management"><h3>Cookie management</h3><pre>Cookie: a=1</pre></section>
    <div id="cookie-banner"><p>We use COOKIES.</p></div></main></body>""").markdown
    assert out == ("## ProxyPassReverseCookieDomain Directive\n\nRewrites the domain.\n\n"
                   "### Cookie management\n\n```\nCookie: a=1\n```\n")


# ----------------------------------------------------------------------------- Debian's manuals

DEBIAN_PAGES = [
    ("apache", "howto/reverse_proxy.html"),
    ("apache", "vhosts/name-based.html"),
    ("python", "library/json.html"),
    ("node", "url.html"),
]


@functools.cache
def _template(manual: str) -> furniture.Template:
    """What recurs on ten pages spread over the manual (the furniture check's reference)."""
    return furniture.template_of(furniture.MANUALS[manual], pages=10)


def _all_text(name: str, data: bytes) -> str:
    """Every text of the page's body, one paragraph each: what a converter that keeps all of the
    page writes (furniture and all)."""
    body = lxml.html.document_fromstring(data).find("body")
    for el in body.xpath(".//script|.//style"):
        el.drop_tree()
    return "\n\n".join(" ".join(t.split()) for t in body.itertext() if t.strip())


@pytest.mark.parametrize("manual, page", DEBIAN_PAGES, ids=[f"{m}:{p}" for m, p in DEBIAN_PAGES])
def test_debian_manual_pages_keep_their_content_and_no_furniture(manual, page):
    """Real pages nobody here wrote (issue 45): no chunk holds text the manual repeats around
    its pages or marks as navigation (``benchmarks/furniture.py`` finds it in the raw HTML, not
    by text of one package version), every heading of levels 1-3 and every code block of the
    page's main region is in the chunks, and the first chunk starts with the page's content."""
    info = furniture.MANUALS[manual]
    path = info.root / page
    if not path.is_file():
        pytest.skip(f"{info.package} is not installed: apt-get install {info.package} "
                    f"(scripts/setup.sh --browser installs it)")
    template = _template(manual)
    whole = furniture.check_page(path, template, convert=_all_text, settings=ChunkingSettings())
    assert whole.furniture_chunks, "the check finds no furniture in the whole page: it proves nothing"
    check = furniture.check_page(path, template, settings=ChunkingSettings())
    assert check.furniture == [], f"chunks holding page furniture: {check.furniture}"
    assert check.headings_checked >= 2 and check.pre_checked >= 1
    assert check.headings_missing == [] and check.pre_missing == []
    assert check.first_chunk_ok, "the first chunk does not start with the page's own content"


# ----------------------------------------------------------------------------- decoding


def test_a_cp1252_page_with_a_meta_charset():
    text = "<html><head><meta charset=\"windows-1252\"><title>Caf\u00e9</title></head>" \
           "<body><p>\u201cQuoted\u201d \u2013 5 \u20ac, na\u00efve.</p></body></html>"
    converted = convert_html("old.html", text.encode("cp1252"), LIMITS)
    assert converted.markdown == "\u201cQuoted\u201d \u2013 5 \u20ac, na\u00efve.\n"
    assert converted.title == "Caf\u00e9"
    assert converted.warnings == []


def test_an_http_equiv_latin1_label_is_read_as_windows_1252():
    data = ('<meta http-equiv="Content-Type" content="text/html; charset=ISO-8859-1">'
            "<p>5 \u20ac caf\u00e9</p>").encode("cp1252")
    assert convert_html("x.html", data, LIMITS).markdown == "5 \u20ac caf\u00e9\n"


def test_an_undeclared_non_utf8_page_falls_back_to_cp1252_with_a_warning():
    converted = convert_html("x.html", "<p>na\u00efve \u2014 ok</p>".encode("cp1252"), LIMITS)
    assert converted.markdown == "na\u00efve \u2014 ok\n"
    assert converted.warnings == ["read as Windows-1252: it declares no charset and is not UTF-8 (byte 5)"]


def test_a_byte_order_mark_wins_over_the_meta_charset():
    text = '<meta charset="windows-1252"><p>\u00fcber \u4e2d\u6587</p>'
    assert convert_html("x.html", b"\xef\xbb\xbf" + text.encode("utf-8"), LIMITS).markdown == \
        "\u00fcber \u4e2d\u6587\n"
    assert convert_html("x.html", text.encode("utf-16"), LIMITS).markdown == "\u00fcber \u4e2d\u6587\n"
    assert convert_html("x.html", text.encode("utf-16-le"), LIMITS).markdown == "\u00fcber \u4e2d\u6587\n"


# ----------------------------------------------------------------------------- refusals


@pytest.mark.parametrize("data, what", [
    (b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4, "PNG image"),
    (b"PK\x03\x04" + b"\x14\x00" * 200, "zip archive"),
    (b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n", "PDF document"),
    (b"<html>" + b"\x00\x01\x02\x03" * 100, "NUL bytes"),
    (b"just some words, no markup at all", "no HTML markup"),
])
def test_a_file_that_is_not_html_is_refused_with_what_it_is(data, what):
    with pytest.raises(UnsupportedFormatError, match=what):
        convert_html("page.html", data, LIMITS)


@pytest.mark.parametrize("page", [
    b"", b"   \n", b"<html><head><title>Loading</title><script>app()</script></head><body>"
    b"<div id='root'></div><noscript>Enable JavaScript</noscript></body></html>",
    b"<!-- only a comment -->",
])
def test_a_page_without_text_is_a_damaged_file(page):
    with pytest.raises(DamagedFileError, match="empty|no text"):
        convert_html("spa.html", page, LIMITS)


def test_a_library_error_is_a_typed_error(monkeypatch):
    def boom(text, warnings):
        raise ValueError("parser exploded")
    monkeypatch.setattr(web, "_parse_html", boom)
    with pytest.raises(DamagedFileError, match="ValueError: parser exploded"):
        html("<p>x</p>")


# ----------------------------------------------------------------------------- hostile HTML

LAUGHS = "".join(f'<!ENTITY lol{i} "{f"&lol{i - 1};" * 10}">' for i in range(1, 10))
BILLION_LAUGHS = f'<!ENTITY lol0 "lol">{LAUGHS}'


def test_an_html_billion_laughs_stays_small():
    page = f"<!DOCTYPE html [{BILLION_LAUGHS}]><html><body><h1>T</h1><p>&lol9; end</p></body></html>"
    (outcome, elapsed, peak_mb) = run_bounded(html, page, seconds=5, mem_mb=256)
    assert outcome[0] == "ok"
    assert outcome[1] == "# T\n\n&lol9; end\n"
    assert any("entities" in w for w in outcome[2])
    assert elapsed < 1.0 and peak_mb < 64


def test_deep_nesting_is_read_in_bounded_time_and_stack():
    deep_divs = "<body><p>top</p>" + "<div>" * 100_000 + "deep" + "</div>" * 100_000 + "</body>"
    (outcome, elapsed, peak_mb) = run_bounded(html, deep_divs, seconds=10, mem_mb=512)
    assert outcome[0] == "ok" and outcome[1] == "top\n"
    assert outcome[2] == ["its elements nest deeper than the parser reads (2,048 levels): the text "
                          "after that point is missing"]
    assert elapsed < 3 and peak_mb < 200
    within = ("<body><h1>T</h1>" + "<div><span>a</span>" * 1_500 + "<h2>Deep</h2><p>deep text</p>"
              + "</div>" * 1_500 + "<p>after</p></body>")
    (outcome, elapsed, peak_mb) = run_bounded(html, within, seconds=10, mem_mb=512)
    assert outcome[0] == "ok" and outcome[2] == []
    assert outcome[1].startswith("# T\n\na") and outcome[1].endswith(" Deep deep text\n\nafter\n")
    assert elapsed < 3 and peak_mb < 200
    deep_lists = "<body>" + "<ul><li>x" * 5_000 + "</li></ul>" * 5_000 + "</body>"
    (outcome, elapsed, peak_mb) = run_bounded(html, deep_lists, seconds=10, mem_mb=512)
    assert outcome[0] == "ok" and outcome[1].startswith("- x")
    assert elapsed < 3 and peak_mb < 200


def test_a_table_whose_spans_would_explode_becomes_lines_of_text():
    rows = "".join(f'<tr><td colspan="1000">r{i}</td><td rowspan="0">s</td></tr>' for i in range(3_000))
    (outcome, elapsed, peak_mb) = run_bounded(html, f"<body><table>{rows}</table></body>",
                                              seconds=10, mem_mb=512)
    assert outcome[0] == "ok"
    assert outcome[1].startswith("r0 | s\n\nr1 | s\n\n")
    assert any("too large for a pipe table" in w for w in outcome[2])
    assert elapsed < 3 and peak_mb < 200


# ----------------------------------------------------------------------------- EPUB fixtures


def xhtml(body: str, title: str = "Chapter", prolog: str = "") -> str:
    return ('<?xml version="1.0" encoding="utf-8"?>\n' + prolog +
            '<html xmlns="http://www.w3.org/1999/xhtml" xmlns:epub="http://www.idpf.org/2007/ops">'
            f"<head><title>{title}</title></head><body>{body}</body></html>")


def make_epub(chapters: dict[str, str], *, spine: list[str] | None = None,
              nav: dict[str, str] | None = None, ncx: dict[str, str] | None = None,
              title: str = "The Book", author: str = "Ada Writer", opf_prolog: str = "",
              container_prolog: str = "", ncx_prolog: str = "", mimetype: bytes = b"application/epub+zip",
              extra: dict[str, bytes] | None = None) -> bytes:
    """An EPUB: chapters ``{file under OEBPS/Text/: xhtml}``, the OPF at ``OEBPS/content.opf``,
    a navigation document (``nav``: file → title) and/or an NCX (``ncx``)."""
    buf = io.BytesIO()
    extra = extra or {}
    with zipfile.ZipFile(buf, "w") as z:

        def put(path: str, text: str | bytes, compress_type: int = zipfile.ZIP_DEFLATED) -> None:
            z.writestr(path, extra.pop(path, text), compress_type=compress_type)

        if mimetype is not None:
            z.writestr("mimetype", mimetype, compress_type=zipfile.ZIP_STORED)
        z.writestr("META-INF/container.xml", (
            '<?xml version="1.0"?>' + container_prolog +
            '<container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">'
            '<rootfiles><rootfile full-path="OEBPS/content.opf" '
            'media-type="application/oebps-package+xml"/></rootfiles></container>'),
            compress_type=zipfile.ZIP_DEFLATED)
        items = [f'<item id="c{i}" href="Text/{f}" media-type="application/xhtml+xml"/>'
                 for i, f in enumerate(chapters)]
        ids = {f: f"c{i}" for i, f in enumerate(chapters)}
        if nav is not None:
            items.append('<item id="nav" href="nav.xhtml" media-type="application/xhtml+xml" '
                         'properties="nav"/>')
            links = "".join(f'<li><a href="Text/{f}">{t}</a></li>' for f, t in nav.items())
            first = next(iter(chapters))
            z.writestr("OEBPS/nav.xhtml", xhtml(  # landmarks first: the toc nav must be chosen
                f'<nav epub:type="landmarks"><ol><li><a href="Text/{first}">LANDMARK</a></li></ol></nav>'
                f'<nav epub:type="toc"><h1>Contents</h1><ol>{links}</ol></nav>', "Contents"))
        if ncx is not None:
            items.append('<item id="ncx" href="toc.ncx" media-type="application/x-dtbncx+xml"/>')
            points = "".join(f'<navPoint id="p{i}" playOrder="{i}"><navLabel><text>{t}</text></navLabel>'
                             f'<content src="Text/{f}"/></navPoint>' for i, (f, t) in enumerate(ncx.items()))
            z.writestr("OEBPS/toc.ncx", (
                '<?xml version="1.0" encoding="UTF-8"?>' + (ncx_prolog or
                '<!DOCTYPE ncx PUBLIC "-//NISO//DTD ncx 2005-1//EN" '
                '"http://www.daisy.org/z3986/2005/ncx-2005-1.dtd">') +
                '<ncx xmlns="http://www.daisy.org/z3986/2005/ncx/" version="2005-1">'
                f"<docTitle><text>{title}</text></docTitle><navMap>{points}</navMap></ncx>"))
        order = spine if spine is not None else list(chapters)
        itemrefs = "".join(f'<itemref idref="{ids[f]}"/>' for f in order)
        if nav is not None:
            itemrefs = '<itemref idref="nav" linear="no"/>' + itemrefs
        put("OEBPS/content.opf", (
            '<?xml version="1.0" encoding="UTF-8"?>' + opf_prolog +
            '<package xmlns="http://www.idpf.org/2007/opf" version="3.0" unique-identifier="uid">'
            '<metadata xmlns:dc="http://purl.org/dc/elements/1.1/">'
            f'<dc:identifier id="uid">urn:uuid:1</dc:identifier><dc:title>{title}</dc:title>'
            f"<dc:creator>{author}</dc:creator><dc:language>en</dc:language></metadata>"
            f"<manifest>{''.join(items)}</manifest>"
            f'<spine{" toc=" + chr(34) + "ncx" + chr(34) if ncx is not None else ""}>{itemrefs}</spine>'
            "</package>"), compress_type=zipfile.ZIP_DEFLATED)
        for f, text in chapters.items():
            z.writestr(f"OEBPS/Text/{f}", text, compress_type=zipfile.ZIP_DEFLATED)
        for path, data in extra.items():
            z.writestr(path, data, compress_type=zipfile.ZIP_DEFLATED)
    return buf.getvalue()


TWO_CHAPTERS = {
    "ch1.xhtml": xhtml("<section><header><h1>The Start</h1></header><p>It began.</p>"
                       "<h2>Morning</h2><p>Sun rose.</p></section>", "The Start"),
    "ch2.xhtml": xhtml('<h1>The End</h1><p>It ended.<span epub:type="pagebreak" title="7">7</span></p>'
                       '<aside epub:type="footnote"><p>A footnote.</p></aside>', "The End"),
}


def test_an_epub_becomes_its_chapters_in_spine_order_with_title_and_author():
    data = make_epub(TWO_CHAPTERS, spine=["ch1.xhtml", "ch2.xhtml"],
                     nav={"ch1.xhtml": "One", "ch2.xhtml": "Two"})
    converted = convert_epub("book.epub", data, LIMITS)
    assert isinstance(converted, EpubConverted) and isinstance(converted, Converted)
    assert converted.kind == "epub"
    assert converted.title == "The Book"
    assert converted.author == "Ada Writer"
    assert converted.chapters == ["OEBPS/Text/ch1.xhtml", "OEBPS/Text/ch2.xhtml"]
    assert converted.markdown == ("# The Start\n\nIt began.\n\n## Morning\n\nSun rose.\n\n"
                                  "# The End\n\nIt ended.\n\nA footnote.\n")
    assert "Contents" not in converted.markdown and "LANDMARK" not in converted.markdown
    assert heading_paths(converted.markdown) == [("The Start",), ("The Start", "Morning"), ("The End",)]
    reordered = convert_epub("book.epub", make_epub(TWO_CHAPTERS, spine=["ch2.xhtml", "ch1.xhtml"]), LIMITS)
    assert reordered.markdown.startswith("# The End\n")


def test_a_chapter_without_a_heading_gets_its_toc_title():
    chapters = {"a.xhtml": xhtml("<p>Prologue text.</p>", "The Book"),
                "b.xhtml": xhtml("<p>Epigraph.</p><h2>Real heading</h2><p>Body.</p>", "The Book"),
                "b_split.xhtml": xhtml("<p>Continued.</p>", "The Book"),
                "c.xhtml": xhtml("<p>Untitled in the TOC.</p>", "Own Title")}
    toc = {"a.xhtml": "Prologue", "b.xhtml": "Chapter One"}
    nav_book = convert_epub("b.epub", make_epub(chapters, nav=toc), LIMITS)
    assert nav_book.markdown == ("# Prologue\n\nPrologue text.\n\n# Chapter One\n\nEpigraph.\n\n"
                                 "## Real heading\n\nBody.\n\nContinued.\n\n# Own Title\n\n"
                                 "Untitled in the TOC.\n")
    ncx_book = convert_epub("b.epub", make_epub(chapters, ncx=toc), LIMITS)
    assert ncx_book.markdown == nav_book.markdown
    assert heading_paths(ncx_book.markdown) == [
        ("Prologue",), ("Chapter One",), ("Chapter One", "Real heading"), ("Own Title",)]


def test_epub2_chapters_with_html_entities_and_self_closed_tags():
    chapter = ('<?xml version="1.0" encoding="utf-8"?>\n<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.1//EN" '
               '"http://www.w3.org/TR/xhtml11/DTD/xhtml11.dtd">\n<html xmlns="http://www.w3.org/1999/xhtml">'
               '<head><title/><script type="text/javascript" src="x.js"/></head>'
               "<body><h1>Caf&eacute;&nbsp;Noir</h1><p>One&mdash;two &amp; &hellip;<br/>three</p>"
               "<div/><p>Last.</p></body></html>")
    converted = convert_epub("e2.epub", make_epub({"c.xhtml": chapter}, ncx={"c.xhtml": "X"}), LIMITS)
    assert converted.markdown == "# Caf\u00e9 Noir\n\nOne\u2014two & \u2026\nthree\n\nLast.\n"
    broken = chapter.replace("<div/>", "<div>&undefined;<p>unclosed")
    assert convert_epub("e2.epub", make_epub({"c.xhtml": broken}), LIMITS).markdown.startswith(
        "# Caf\u00e9 Noir\n\nOne\u2014two & \u2026\nthree\n\n&undefined;")


def test_a_zip_bomb_disguised_as_an_epub_is_refused_fast():
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        z.writestr("OEBPS/Text/bomb.xhtml", b"\0" * (64 * 1024 * 1024))
    data = buf.getvalue()
    assert len(data) < 200_000
    (outcome, elapsed, peak_mb) = run_bounded(convert_epub, "bomb.epub", data, LIMITS,
                                              seconds=5, mem_mb=256)
    assert outcome[0] == "UnsafeFileError" and "zip bomb" in outcome[1]
    assert elapsed < 0.5 and peak_mb < 32


@pytest.mark.parametrize("where", ["opf", "container", "ncx"])
def test_a_billion_laughs_in_an_epub_package_file_is_refused_fast(where):
    doctype = f"<!DOCTYPE x [{BILLION_LAUGHS}]>"
    data = make_epub({"c.xhtml": xhtml("<h1>C</h1><p>t</p>")}, ncx={"c.xhtml": "C"},
                     opf_prolog=doctype if where == "opf" else "",
                     container_prolog=doctype if where == "container" else "",
                     ncx_prolog=doctype if where == "ncx" else "")
    if where == "opf":
        data = data.replace(b"<dc:title>The Book</dc:title>", b"<dc:title>&lol9;</dc:title>")
    (outcome, elapsed, peak_mb) = run_bounded(convert_epub, "laughs.epub", data, LIMITS,
                                              seconds=5, mem_mb=256)
    assert outcome[0] == "UnsafeFileError" and "entities" in outcome[1]
    assert elapsed < 1.0 and peak_mb < 32


def test_a_billion_laughs_in_an_epub_chapter_is_neutralised():
    chapter = xhtml("<h1>Laughs</h1><p>&lol9;&lol9;</p>", prolog=f"<!DOCTYPE html [{BILLION_LAUGHS}]>")
    data = make_epub({"c.xhtml": chapter})
    (outcome, elapsed, peak_mb) = run_bounded(convert_epub, "laughs.epub", data, LIMITS,
                                              seconds=5, mem_mb=256)
    assert outcome[0] == "ok"
    assert outcome[1] == "# Laughs\n\n&lol9;&lol9;\n"
    assert any("entities" in w and "c.xhtml" in w for w in outcome[2])
    assert elapsed < 1.0 and peak_mb < 32


def test_a_truncated_or_corrupt_epub_is_damaged():
    data = make_epub(TWO_CHAPTERS, nav={"ch1.xhtml": "One"})
    for cut in (len(data) // 2, len(data) - 10, 100):
        with pytest.raises(DamagedFileError):
            convert_epub("cut.epub", data[:cut], LIMITS)
    offset = data.index(b"OEBPS/Text/ch1.xhtml") + len("OEBPS/Text/ch1.xhtml") + 5
    corrupt = data[:offset] + bytes(b ^ 0xFF for b in data[offset:offset + 20]) + data[offset + 20:]
    with pytest.raises(DamagedFileError, match="ch1.xhtml"):
        convert_epub("corrupt.epub", corrupt, LIMITS)


def test_a_drm_encrypted_epub_is_refused_but_obfuscated_fonts_are_not():
    def encryption(algorithm: str, uri: str) -> bytes:
        return (f'<encryption xmlns="urn:oasis:names:tc:opendocument:xmlns:container" '
                f'xmlns:enc="http://www.w3.org/2001/04/xmlenc#"><enc:EncryptedData>'
                f'<enc:EncryptionMethod Algorithm="{algorithm}"/><enc:CipherData>'
                f'<enc:CipherReference URI="{uri}"/></enc:CipherData></enc:EncryptedData>'
                f"</encryption>").encode()
    drm = make_epub(TWO_CHAPTERS, extra={"META-INF/encryption.xml": encryption(
        "http://www.w3.org/2001/04/xmlenc#aes128-cbc", "OEBPS/Text/ch2.xhtml")})
    with pytest.raises(EncryptedFileError):
        convert_epub("drm.epub", drm, LIMITS)
    fonts = make_epub(TWO_CHAPTERS, extra={"META-INF/encryption.xml": encryption(
        "http://www.idpf.org/2008/embedding", "OEBPS/Fonts/serif.otf")})
    assert convert_epub("fonts.epub", fonts, LIMITS).markdown.startswith("# The Start")


def test_files_that_are_not_epubs_are_refused_with_what_they_are():
    docx = io.BytesIO()
    with zipfile.ZipFile(docx, "w") as z:
        z.writestr("[Content_Types].xml", "<Types/>")
        z.writestr("word/document.xml", "<w:document/>")
    with pytest.raises(UnsupportedFormatError, match="Word document"):
        convert_epub("x.epub", docx.getvalue(), LIMITS)
    odt = make_epub(TWO_CHAPTERS, mimetype=b"application/vnd.oasis.opendocument.text")
    with pytest.raises(UnsupportedFormatError, match="opendocument"):
        convert_epub("x.epub", odt, LIMITS)
    with pytest.raises(UnsupportedFormatError, match="not an EPUB.*PNG"):
        convert_epub("x.epub", b"\x89PNG\r\n\x1a\n" + b"\0" * 64, LIMITS)
    with pytest.raises(UnsupportedFormatError, match="not an EPUB"):
        convert_epub("x.epub", b"<html><p>a web page</p></html>", LIMITS)
    with pytest.raises(DamagedFileError, match="empty"):
        convert_epub("x.epub", b"", LIMITS)


def test_an_epub_with_a_broken_package_file_or_no_text_is_damaged():
    bad_opf = make_epub(TWO_CHAPTERS, extra={"OEBPS/content.opf": b"<package><spine></package>"})
    with pytest.raises(DamagedFileError, match="not well-formed"):
        convert_epub("x.epub", bad_opf, LIMITS)
    images_only = make_epub({"cover.xhtml": xhtml('<img src="cover.jpg" alt="Cover"/>')})
    with pytest.raises(DamagedFileError, match="no text"):
        convert_epub("x.epub", images_only, LIMITS)
    scrambled = make_epub({"c.xhtml": bytes(range(256)).decode("latin-1") * 8})
    with pytest.raises(DamagedFileError, match="chapter OEBPS/Text/c.xhtml is not text"):
        convert_epub("x.epub", scrambled, LIMITS)


# ----------------------------------------------------------------------------- speed


def _readme_page(copies: int) -> str:
    from markdown_it import MarkdownIt

    text = "\n\n".join(p.read_text(encoding="utf-8")
                         for p in [README, *sorted((README.parent / "docs").glob("*.md"))])
    article = MarkdownIt("commonmark").enable("table").render(text)
    nav = "<nav><ul>" + "".join(f"<li><a href='/p{i}'>Page {i}</a></li>" for i in range(40)) + "</ul></nav>"
    return ("<!DOCTYPE html><html><head><title>RAGstream's documentation</title>"
            "<script>var x = 1;</script></head><body>"
            f"<header><h1>Site</h1>{nav}</header><main>{article * copies}</main>"
            "<footer><p>Footer</p></footer></body></html>")


def test_a_large_page_converts_at_a_useful_speed():
    page = _readme_page(5)  # ~50k words
    start = time.perf_counter()
    converted = html(page)
    elapsed = time.perf_counter() - start
    words = len(converted.markdown.split())
    assert words > 40_000
    assert "Page 39" not in converted.markdown
    assert words / elapsed > 20_000, f"{words / elapsed:,.0f} words/s"
    assert parsed(converted.markdown).chunks


def test_a_large_page_without_main_is_located_by_justext_at_a_useful_speed():
    page = _readme_page(5).replace("<main>", '<div id="text">').replace("</main>", "</div>")
    start = time.perf_counter()
    converted = html(page)
    elapsed = time.perf_counter() - start
    words = len(converted.markdown.split())
    assert words > 40_000
    assert "Page 39" not in converted.markdown
    assert words / elapsed > 20_000, f"{words / elapsed:,.0f} words/s"


# ----------------------------------------------------------------------------- code paragraphs


def test_a_paragraph_that_is_one_code_element_is_a_code_block():
    page = """<html><body><h1>Auth</h1>
    <p>To create the file, type:</p>
    <div class="example"><p><code>
      htpasswd -c /usr/local/apache/passwd/passwords rbowen
    </code></p></div>
    <p>It asks for the password twice:</p>
    <div class="example"><p><code>
      # htpasswd -c passwords rbowen<br>
      New password: <em>mypassword</em><br>
      Adding password for user rbowen
    </code></p></div>
    <p><code>mod_speling</code></p>
    <p>Use <code>AuthUserFile</code> to name the file.</p>
    </body></html>"""
    md = html(page).markdown
    assert "To create the file, type:\n\n```\nhtpasswd -c /usr/local/apache/passwd/passwords " \
           "rbowen\n```" in md
    # each <br> a line, the source's own line breaks and indentation not
    assert "```\n# htpasswd -c passwords rbowen\nNew password: mypassword\nAdding password " \
           "for user rbowen\n```" in md
    assert "`mod_speling`" in md and "```\nmod_speling" not in md  # one word: inline code
    assert "Use `AuthUserFile` to name the file." in md  # code inside prose stays inline
    assert block_kinds(md).count("fence") == 2


@pytest.mark.skipif(not furniture.MANUALS["apache"].root.is_dir(),
                    reason="Debian's apache2-doc is not installed (scripts/setup.sh --browser)")
def test_the_apache_manuals_commands_are_code_blocks():
    page = furniture.MANUALS["apache"].root / "howto" / "auth.html"
    md = convert_html(page.name, page.read_bytes(), LIMITS).markdown
    fences = [b for b in md_reader.parse(md).blocks if b.kind == "fence"]
    texts = [md.splitlines()[b.start:b.end] for b in fences]
    assert any(any(line.startswith("htpasswd -c ") for line in t) for t in texts), texts
    assert not re.search(r"^`htpasswd -c [^`]*`$", md, re.MULTILINE)
