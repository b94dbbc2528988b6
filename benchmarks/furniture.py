"""Page furniture in the chunks of real HTML manuals (issue 45): how many chunks hold text that is
not the page's content (navigation bars, breadcrumbs, language switchers, copyright footers),
and whether the page's headings and code blocks survive.

    .venv/bin/python -m benchmarks.furniture [--pages 12] [--manual apache ...] [--show] [--json]

A manual is one of Debian's HTML documentation packages: ``apache2-doc``, ``python3.11-doc`` and
``nodejs-doc`` by default (``scripts/setup.sh --browser`` installs them), ``debian-reference-en``
and ``git-doc`` on request. A deterministic sample of its pages (evenly spaced over the sorted
file list) is turned into chunks the way ``ragstream ingest`` does it
(``ingestor.converted_text`` → ``chunker.parse_document`` with the app's chunking settings), and
every chunk is checked against the page's *raw* HTML.

What counts as furniture is decided from the raw pages alone, never from the converter's rules
and never from text that one version of a package holds (a newer package, another year in the
copyright line, another list of languages change nothing):

- a page's **own headings** are its ``h1``–``h6`` whose text is not a heading on most of the
  manual's pages; its **main region** is the smallest element holding all of them;
- **recurring text**: of the blocks outside the main region, every run of four consecutive
  words (within one block) found on at least half of the manual's reference pages, and every
  whole block of one to three words found as often ("Modules | Directives | FAQ…", "Copyright
  2026 The Apache Software Foundation…", "Available Languages: en | fr", "Show Source");
- **marked text**: the text of the elements the page itself marks as navigation or footer: a
  ``nav``, a page-level ``header``/``footer``, the ARIA roles navigation, banner, contentinfo
  and search, an ``id``/``class`` word nav, navbar, navheader, navfooter, navigation,
  breadcrumb(s), footer, menu, sidebar, sphinxsidebar, toplang or bottomlang (never on
  ``body``: Apache's ``<body class="no-sidebar">``);
- text the page also holds as its own is never furniture: its own headings, the cells of its
  tables and its code blocks, and its other blocks outside marked elements that are mostly not
  recurring text (Node.js's sidebar says "URL", and so does the URL page's heading; a paragraph
  may name "The Python Standard Library"; a language list is all recurring text).

A chunk holds furniture when four consecutive words of one line of its text (or of a heading in
its heading path) are a furniture run, or when one line of its text outside code blocks, or one
of its headings, is a furniture block of fewer than four words.

Content kept, against the main region: every own heading of levels 1–3 that has text under it
(one without gives no chunk, by the chunker's rule) is a heading of some chunk, every ``<pre>``
is whole in one chunk (its words, in order), ``words kept`` is the share of the region's words
the chunks hold (as a bag of words), and ``first ok`` counts the pages whose first chunk sits
under the page's first own heading, holds no furniture and starts with the first words of the
region's first own block (one outside marked elements and not furniture itself). ``ms/page``
is the median time of ``converted_text``.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import re
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lxml.etree
import lxml.html

#: words: runs of word characters, case kept (``Modules`` the menu entry, ``modules`` a word)
_WORD = re.compile(r"\w+")
#: the length of a furniture run, in words (shorter furniture is matched as a whole line)
RUN = 4
#: text recurs when it is on at least this share of a manual's reference pages
RECUR_SHARE = 0.5
#: reference pages read to find what recurs (evenly spaced over the manual)
REFERENCE_PAGES = 40

_NOT_TEXT = frozenset({"script", "style", "noscript", "template", "svg", "head", "title", "button",
                       "select", "option", "optgroup", "textarea", "input", "math", "object",
                       "iframe", "canvas", "video", "audio"})
_BLOCKS = frozenset({"address", "article", "aside", "blockquote", "body", "caption", "dd", "details",
                     "div", "dl", "dt", "figcaption", "figure", "footer", "h1", "h2", "h3", "h4",
                     "h5", "h6", "header", "hgroup", "li", "main", "nav", "ol", "p", "pre",
                     "section", "summary", "table", "tbody", "td", "tfoot", "th", "thead", "tr",
                     "ul", "center", "menu", "dir", "html"})
_HEADINGS = ("h1", "h2", "h3", "h4", "h5", "h6")
_MARKED_ROLES = frozenset({"navigation", "banner", "contentinfo", "search"})
_MARKED_WORDS = frozenset({"nav", "navbar", "navheader", "navfooter", "navigation", "breadcrumb",
                           "breadcrumbs", "footer", "menu", "sidebar", "sphinxsidebar", "toplang",
                           "bottomlang"})
_SECTIONING = frozenset({"article", "aside", "main", "nav", "section"})

Words = tuple[str, ...]


@dataclass(frozen=True)
class Manual:
    """A Debian HTML manual: where its pages are and which package installs them."""

    name: str
    package: str
    root: Path
    pattern: str = "**/*.html"
    #: file names that are not pages of text (indexes of every name, a search form)
    skip: str = r"^$"

    def pages(self) -> list[Path]:
        """Every page of the manual, sorted by path (none when the package is not installed)."""
        if not self.root.is_dir():
            return []
        return sorted(p for p in self.root.glob(self.pattern)
                      if p.is_file() and not re.search(self.skip, p.name))


MANUALS: dict[str, Manual] = {m.name: m for m in (
    Manual("apache", "apache2-doc", Path("/usr/share/doc/apache2-doc/manual/en")),
    Manual("python", "python3.11-doc", Path("/usr/share/doc/python3.11/html"),
           skip=r"^(genindex.*|search|py-modindex)\.html$"),
    Manual("node", "nodejs-doc", Path("/usr/share/doc/nodejs/api"), pattern="*.html",
           skip=r"^all\.html$"),
    Manual("debian-reference", "debian-reference-en", Path("/usr/share/debian-reference"),
           pattern="*.en.html"),
    Manual("git", "git-doc", Path("/usr/share/doc/git-doc"), pattern="*.html"),
)}
#: the manuals measured by default
DEFAULT_MANUALS = ("apache", "python", "node")


def evenly(items: Sequence[Any], n: int) -> list[Any]:
    """``n`` items spread evenly over ``items`` (the middle of each of ``n`` equal stretches)."""
    if n >= len(items):
        return list(items)
    return [items[(2 * i + 1) * len(items) // (2 * n)] for i in range(n)]


def words(text: str) -> Words:
    """The words of ``text``, case kept."""
    return tuple(_WORD.findall(text))


def runs(ws: Sequence[str]) -> set[Words]:
    """Every ``RUN`` consecutive words of ``ws``."""
    return {tuple(ws[i:i + RUN]) for i in range(len(ws) - RUN + 1)}


# ----------------------------------------------------------------------------- a raw page


def _tag(el: Any) -> str:
    return el.tag.lower() if isinstance(el.tag, str) else ""


def _hidden(el: Any) -> bool:
    return (el.get("hidden") is not None or (el.get("aria-hidden") or "").lower() == "true"
            or bool(re.search(r"display\s*:\s*none", el.get("style") or "")))


def _text(el: Any) -> str:
    return " ".join("".join(el.itertext()).split())


def _own_text(block: Any) -> str:
    """A block's text without the text of the blocks it holds (their tails are its own)."""
    parts: list[str] = []
    walk = lxml.etree.iterwalk(block, events=("start", "end"))
    for event, el in walk:
        if event == "start":
            if el is not block and _tag(el) in _BLOCKS:
                walk.skip_subtree()
            elif el.text:
                parts.append(el.text)
        elif el is not block and el.tail:
            parts.append(el.tail)
    return " ".join("".join(parts).split())


def _is_marked(el: Any) -> bool:
    """Whether the page's markup says ``el`` is navigation, a banner or a footer."""
    tag = _tag(el)
    if tag in ("html", "body", "main"):  # ``<body class="no-sidebar">`` says nothing of its text
        return False
    if tag == "nav" or (el.get("role") or "").strip().lower() in _MARKED_ROLES:
        return True
    if tag in ("header", "footer") and not any(_tag(a) in _SECTIONING for a in el.iterancestors()):
        return True
    names = f"{el.get('class') or ''} {el.get('id') or ''}".lower()
    return any(part in _MARKED_WORDS for part in re.split(r"[\s_-]+", names))


class RawPage:
    """What the check reads of a page's raw HTML (``lxml.html``: no DTD, no network)."""

    def __init__(self, path: Path) -> None:
        parser = lxml.html.HTMLParser(remove_comments=True, remove_pis=True, no_network=True,
                                      huge_tree=True)
        root = lxml.html.document_fromstring(path.read_bytes(), parser=parser)
        for el in list(root.iter()):  # what is never visible text
            if el.getparent() is not None and isinstance(el.tag, str) and (
                    _tag(el) in _NOT_TEXT or _hidden(el)):
                el.drop_tree()
        body = root.find("body")
        self.path = path
        self.body = body if body is not None else root
        #: every block with its own words, in document order
        self.blocks: list[tuple[Any, Words]] = [
            (el, ws) for el in self.body.iter() if _tag(el) in _BLOCKS
            for ws in [words(_own_text(el))] if ws]
        self.headings: list[tuple[Any, Words]] = [
            (h, words(_text(h))) for h in self.body.iter(*_HEADINGS)]
        self.marked: list[Any] = []
        for el in self.body.iter():
            if isinstance(el.tag, str) and _is_marked(el) and not any(
                    a in self.marked for a in el.iterancestors()):
                self.marked.append(el)

    def main_region(self, recurring_headings: set[Words]) -> Any:
        """The smallest element holding all the page's own headings (the body without any)."""
        own = [h for h, ws in self.headings if ws and ws not in recurring_headings]
        if not own:
            return self.body
        chains = [list(reversed([h, *h.iterancestors()])) for h in own]
        common = self.body
        for level in zip(*chains):
            if any(el is not level[0] for el in level):
                break
            common = level[0]
        return common.getparent() if _tag(common) in _HEADINGS else common


# ----------------------------------------------------------------------------- a manual's template


@dataclass
class Template:
    """What recurs on a manual's pages outside their main regions."""

    pages: int
    headings: set[Words]
    runs: set[Words]
    blocks: set[Words]

    @classmethod
    def of(cls, pages: Sequence[RawPage]) -> Template:
        """The template of ``pages`` (a manual's reference pages)."""
        least = max(2, math.ceil(RECUR_SHARE * len(pages)))
        heading_count: Counter[Words] = Counter()
        for page in pages:
            heading_count.update({ws for _, ws in page.headings if ws})
        headings = {ws for ws, n in heading_count.items() if n >= least}
        run_count: Counter[Words] = Counter()
        block_count: Counter[Words] = Counter()
        for page in pages:
            inner = set(page.main_region(headings).iter())
            outside = [ws for el, ws in page.blocks if el not in inner]
            run_count.update(set().union(*map(runs, outside)) if outside else set())
            block_count.update({ws for ws in outside if len(ws) < RUN})
        return cls(pages=len(pages), headings=headings,
                   runs={r for r, n in run_count.items() if n >= least},
                   blocks={b for b, n in block_count.items() if n >= least})


def template_of(manual: Manual, pages: int = REFERENCE_PAGES) -> Template:
    """The template of ``manual`` from ``pages`` reference pages."""
    return Template.of([RawPage(p) for p in evenly(manual.pages(), pages)])


# ----------------------------------------------------------------------------- furniture


def _covered(ws: Sequence[str], found: set[Words]) -> int:
    """How many of ``ws`` lie in a run of ``found``."""
    covered = [False] * len(ws)
    for i in range(len(ws) - RUN + 1):
        if tuple(ws[i:i + RUN]) in found:
            covered[i:i + RUN] = [True] * RUN
    return sum(covered)


@dataclass
class Furniture:
    """One page's furniture: the runs and the short blocks no chunk may hold."""

    runs: set[Words]
    blocks: set[Words]
    #: the page's own blocks in document order: outside marked elements and headings, not
    #: furniture themselves (what a chunk of the page may hold)
    own_blocks: list[tuple[Any, Words]]

    @classmethod
    def of(cls, page: RawPage, template: Template) -> Furniture:
        """The page's recurring and marked text, less the text it holds as its own."""
        marked_inner = {d for el in page.marked for d in el.iter()}
        marked = [ws for el, ws in page.blocks if el in marked_inner]
        tabular = {d for t in page.body.iter("table", "pre") for d in t.iter()}
        own_blocks = [(el, ws) for el, ws in page.blocks if el not in marked_inner
                      and (el in tabular or _covered(ws, template.runs) * 2 < len(ws))]
        own = [ws for _, ws in own_blocks]
        own += [ws for _, ws in page.headings if ws and ws not in template.headings]
        own_runs = set().union(*map(runs, own)) if own else set()
        marked_runs = set().union(*map(runs, marked)) if marked else set()
        in_headings = {d for h, _ in page.headings for d in h.iter()}
        return cls(runs=(template.runs | marked_runs) - own_runs,
                   blocks=(template.blocks | {ws for ws in marked if len(ws) < RUN}) - set(own),
                   own_blocks=[(el, ws) for el, ws in own_blocks if el not in in_headings])

    def first_words(self, region: Any) -> Words:
        """The words of the first own block of ``region`` (the page's real content begins so)."""
        inner = set(region.iter())
        return next((ws for el, ws in self.own_blocks if el in inner), ())

    def in_chunk(self, heading_path: Sequence[str], text: str) -> list[str]:
        """The furniture a chunk holds (its text, then its headings), each once."""
        hits: list[str] = []
        for piece in (*text.splitlines(), *heading_path):  # a block is one line, or a run in one
            ws = words(piece)
            starts = [i for i in range(len(ws) - RUN + 1) if tuple(ws[i:i + RUN]) in self.runs]
            hits.extend(_spans(ws, starts))
        for ws in (*(words(h) for h in heading_path), *_prose_lines(text)):
            if ws in self.blocks:
                hits.append(" ".join(ws))
        return list(dict.fromkeys(hits))


def _spans(ws: Sequence[str], starts: list[int]) -> list[str]:
    """The words covered by runs starting at ``starts``, overlapping runs merged."""
    spans: list[list[int]] = []
    for i in starts:
        if spans and i < spans[-1][1]:
            spans[-1][1] = i + RUN
        else:
            spans.append([i, i + RUN])
    return [" ".join(ws[a:b]) for a, b in spans]


_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def _prose_lines(text: str) -> list[Words]:
    """The words of each line of Markdown ``text`` outside fenced code blocks."""
    found: list[Words] = []
    fence = ""
    for line in text.splitlines():
        m = _FENCE.match(line)
        if fence:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = ""
        elif m:
            fence = m.group(1)
        else:
            found.append(words(line))
    return found


# ----------------------------------------------------------------------------- one page


@dataclass
class PageCheck:
    """One page's chunks checked against its raw HTML."""

    name: str
    chunks: int
    furniture: list[tuple[int, str]]  # (chunk index, the furniture it holds)
    #: the own headings (levels 1–3, with text under them) and code blocks checked
    headings_checked: int
    pre_checked: int
    headings_missing: list[str]
    pre_missing: list[str]
    words_main: int
    words_kept: int
    first_chunk_ok: bool
    convert_ms: float

    @property
    def furniture_chunks(self) -> int:
        """How many chunks hold furniture."""
        return len({i for i, _ in self.furniture})


def _headings_with_body(region: Any) -> list[tuple[str, Words, bool]]:
    """``(tag, words, has body)`` of every heading in ``region``: a heading has a body when text
    follows it before the next heading."""
    found: list[list[Any]] = []
    inside = 0
    for event, el in lxml.etree.iterwalk(region, events=("start", "end")):
        if _tag(el) in _HEADINGS:
            if event == "start":
                inside += 1
                if words(_text(el)):
                    found.append([_tag(el), words(_text(el)), False])
            else:
                inside -= 1
                if el.tail and words(el.tail) and found:
                    found[-1][2] = True
            continue
        if inside or not found:
            continue
        text = el.text if event == "start" else (el.tail if el is not region else None)
        if text and words(text):
            found[-1][2] = True
    return [(t, ws, body) for t, ws, body in found]


def _contains(haystack: Sequence[str], needle: Sequence[str]) -> bool:
    n, first = len(needle), needle[0]
    return any(haystack[i] == first and tuple(haystack[i:i + n]) == tuple(needle)
               for i in range(len(haystack) - n + 1))


@functools.cache
def app_chunking() -> Any:
    """The app's chunking settings (``config/settings.json``)."""
    from ragstream.common.config import load_config

    return load_config().settings.chunking


def chunk_page(path: Path, convert: Callable[[str, bytes], str] | None = None,
               settings: Any = None) -> tuple[Sequence[Any], float]:
    """The chunks ``ragstream ingest`` makes of ``path``, and the milliseconds converting it took
    (``convert``: another converter, for comparisons, from a file's name and bytes to Markdown;
    ``settings``: chunking settings other than the app's)."""
    from ragstream.knowledge.ingest import ingestor
    from ragstream.knowledge.ingest.chunker import parse_document

    data = path.read_bytes()
    started = time.perf_counter()
    text = convert(path.name, data) if convert else ingestor.converted_text(path.name, data)[0]
    convert_ms = (time.perf_counter() - started) * 1000
    chunks = parse_document(text, path.name, settings or app_chunking(), "2026-01-01").chunks
    return chunks, convert_ms


def check_page(path: Path, template: Template, convert: Callable[[str, bytes], str] | None = None,
               settings: Any = None) -> PageCheck:
    """Convert and chunk ``path`` the way ingestion does and check its chunks against its raw
    HTML (see the module docstring)."""
    chunks, convert_ms = chunk_page(path, convert, settings)
    page = RawPage(path)
    furniture = Furniture.of(page, template)
    found = [(i, hit) for i, c in enumerate(chunks) for hit in furniture.in_chunk(c.heading_path, c.text)]

    region = page.main_region(template.headings)
    own_headings = [h for h in _headings_with_body(region) if h[1] not in template.headings]
    chunk_headings = {words(h) for c in chunks for h in c.heading_path}
    checked = [ws for tag, ws, body in own_headings if tag in ("h1", "h2", "h3") and body]
    headings_missing = [" ".join(ws) for ws in checked if ws not in chunk_headings]
    chunk_words = [words(c.text) for c in chunks]
    pres = [ws for pre in region.iter("pre") for ws in [words(_text(pre))] if ws]
    pre_missing = [" ".join(ws[:12]) for ws in pres if not any(_contains(cw, ws) for cw in chunk_words)]
    main = Counter(words(_text(region)))
    kept = Counter(w for c in chunks for piece in (c.text, *c.heading_path) for w in words(piece))
    first = furniture.first_words(region)[:8]
    first_ok = bool(chunks and own_headings and chunks[0].heading_path) and (
        words(chunks[0].heading_path[0]) == own_headings[0][1]) and all(i for i, _ in found) and (
        words(chunks[0].text)[:len(first)] == first)
    return PageCheck(name=path.name if path.parent.name in ("html", "api", "en") else
                     f"{path.parent.name}/{path.name}", chunks=len(chunks), furniture=found,
                     headings_checked=len(checked), pre_checked=len(pres),
                     headings_missing=headings_missing, pre_missing=pre_missing,
                     words_main=sum(main.values()), words_kept=sum((main & kept).values()),
                     first_chunk_ok=first_ok, convert_ms=convert_ms)


# ----------------------------------------------------------------------------- a manual


def measure(manual: Manual, sample: int, convert: Callable[[str, bytes], str] | None = None,
            template: Template | None = None) -> dict[str, Any]:
    """Check ``sample`` pages of ``manual``: the figures of the report."""
    template = template or template_of(manual)
    checks = [check_page(p, template, convert) for p in evenly(manual.pages(), sample)]
    words_main = sum(c.words_main for c in checks)
    return {
        "manual": manual.name, "package": manual.package, "pages": len(checks),
        "chunks": sum(c.chunks for c in checks),
        "furniture_chunks": sum(c.furniture_chunks for c in checks),
        "furniture": sorted(Counter(text for c in checks for _, text in c.furniture).items(),
                            key=lambda kv: (-kv[1], kv[0])),
        "headings_missing": [(c.name, h) for c in checks for h in c.headings_missing],
        "pre_missing": [(c.name, p) for c in checks for p in c.pre_missing],
        "words_kept": sum(c.words_kept for c in checks) / words_main if words_main else 1.0,
        "first_chunk_ok": sum(c.first_chunk_ok for c in checks),
        "ms_per_page": statistics.median(c.convert_ms for c in checks) if checks else 0.0,
        "per_page": [(c.name, c.chunks, c.furniture_chunks) for c in checks],
    }


def format_report(results: Iterable[dict[str, Any]], show: bool = False) -> str:
    """The figures as a table, with the furniture found under it."""
    lines = [f"{'manual':<17} {'pages':>5} {'chunks':>6} {'with furniture':>14} {'headings lost':>13} "
             f"{'pre lost':>8} {'words kept':>10} {'first ok':>8} {'ms/page':>8}"]
    notes: list[str] = []
    for r in results:
        lines.append(f"{r['manual']:<17} {r['pages']:>5} {r['chunks']:>6} {r['furniture_chunks']:>14} "
                     f"{len(r['headings_missing']):>13} {len(r['pre_missing']):>8} "
                     f"{r['words_kept']:>10.3f} {r['first_chunk_ok']:>5}/{r['pages']:<2} "
                     f"{r['ms_per_page']:>8.1f}")
        if r["furniture"]:
            notes.append(f"{r['manual']}: furniture in chunks (chunks holding it):")
            notes.extend(f"  {n:>3} × {text[:100]!r}" for text, n in r["furniture"][:25])
        notes.extend(f"{r['manual']}: heading lost in {name}: {h!r}"
                     for name, h in r["headings_missing"][:10])
        notes.extend(f"{r['manual']}: code block lost in {name}: {p!r}…"
                     for name, p in r["pre_missing"][:10])
        if show:
            notes.append(f"{r['manual']}: " + ", ".join(
                f"{n} ({c} chunks, {f} with furniture)" for n, c, f in r["per_page"]))
    return "\n".join(lines + ([""] + notes if notes else []))


def main(argv: Sequence[str] | None = None) -> int:
    """Measure the manuals asked for and print the figures."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks.furniture",
                                 description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--pages", type=int, default=12, help="pages checked per manual (default 12)")
    ap.add_argument("--manual", action="append", choices=sorted(MANUALS),
                    help="a manual to check, repeatable (default: apache, python, node)")
    ap.add_argument("--show", action="store_true", help="also list the pages checked")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args(argv)
    results = []
    for name in args.manual or DEFAULT_MANUALS:
        manual = MANUALS[name]
        if not manual.pages():
            print(f"{name}: not installed (apt-get install {manual.package})", file=sys.stderr)
            continue
        results.append(measure(manual, args.pages))
    print(json.dumps(results, indent=1) if args.json else format_report(results, args.show))
    return 0 if results else 1


if __name__ == "__main__":
    raise SystemExit(main())
