"""The project's one Markdown reader: block structure with line ranges, over markdown-it-py.

Everything in RAGstream that needs to know what a Markdown text *is* — where its front matter
ends, which lines are headings, which are code, tables or prose — asks this module, so every
reader agrees with one CommonMark parser instead of keeping its own regexes.

``parse(text)`` reads ``text`` with markdown-it-py (the CommonMark rules plus GFM tables) and
the plugins of ``mdit-py-plugins`` for front matter (``---`` … ``---`` or ``...`` on the first
line), ``$$`` display math and amsmath environments (``\\begin{align}`` …). It returns a
``Document``: the front matter's raw text, and the blocks of the body as a tree.

Lines
    Every line number is a 0-based index into the text split at line breaks (``\\n``,
    ``\\r\\n`` or ``\\r`` only; ``str.splitlines`` also splits at form feeds and U+2028),
    and a range ``[start, end)`` is half-open, as markdown-it's ``Token.map``. Front matter
    lines count, so they are the lines of the file. A leading byte-order mark is the caller's
    to remove (the front matter must open on the very first character).

Blocks
    ``paragraph``, ``heading`` (ATX ``# …`` and setext ``Title`` over ``===``/``---``, with
    ``level`` and ``text``), ``fence`` (with its info string in ``text``; ``closed`` is False
    when no closing fence follows and it runs to the end of its container), ``code`` (indented
    code), ``table``, ``math``, ``html``, ``hr`` and the containers ``blockquote``, ``list`` and
    ``item`` (a list item), whose ``children`` are the blocks inside them. A block owns whole
    lines (a fence right after a list marker starts on the item's line); the range of a list,
    an item or a fence left open inside one may end with a blank line.

Only the block structure is read: inline Markdown (emphasis, links) is not parsed, except the
code spans of the prose, found by ``code_spans`` where the evidence box draws them; a heading's
``text`` is its source text (``Use `x` here``), whitespace-trimmed, the lines of a multi-line
setext heading joined by one space. Link reference definitions (``[id]: https://…``) belong to
no block. Lists nested up to about 50 deep keep their text.

A user's prompt is read the same way, without front matter: ``parse(prompt,
front_matter=False).headings`` are its headings with their lines, and
``spans_outside(prompt, {"fence", "code"})`` the parts of it that are not code.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from functools import cache
from typing import Literal

from markdown_it import MarkdownIt
from markdown_it.token import Token
from mdit_py_plugins.amsmath import amsmath_plugin
from mdit_py_plugins.dollarmath import dollarmath_plugin
from mdit_py_plugins.front_matter import front_matter_plugin

__all__ = ["Block", "BlockKind", "Document", "FrontMatter", "parse", "spans_outside"]

BlockKind = Literal[
    "paragraph", "heading", "fence", "code", "table", "math", "html", "hr",
    "blockquote", "list", "item",
]

#: markdown-it token types that open or are a block, and the kind of block they give
_KINDS: dict[str, BlockKind] = {
    "paragraph_open": "paragraph",
    "heading_open": "heading",
    "table_open": "table",
    "blockquote_open": "blockquote",
    "bullet_list_open": "list",
    "ordered_list_open": "list",
    "list_item_open": "item",
    "fence": "fence",
    "code_block": "code",
    "html_block": "html",
    "hr": "hr",
    "math_block": "math",
    "math_block_label": "math",  # $$ … $$ (label)
    "amsmath": "math",
}
#: opening tokens whose inner tokens (inline text, table rows and cells) are not blocks
_LEAVES = {"paragraph_open", "heading_open", "table_open"}
#: markdown-it's nesting limit, in token levels (two per list): past it, text is dropped, and
#: its default of 20 would drop the text of a list ten levels deep
_MAX_NESTING = 100
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True)
class Block:
    """One block of a Markdown text: its kind, its lines ``[start, end)`` and what it holds."""

    kind: BlockKind
    start: int  # 0-based first line
    end: int  # 0-based line after the last one
    children: tuple[Block, ...] = ()  # blocks inside a blockquote, list or item
    level: int = 0  # a heading's level, 1 to 6
    text: str = ""  # a heading's or paragraph's text; a fence's info string (``python``)
    closed: bool = True  # False for a fence without its closing line

    def walk(self) -> Iterator[Block]:
        """This block, then every block inside it, depth first, in text order."""
        yield self
        for child in self.children:
            yield from child.walk()


@dataclass(frozen=True)
class FrontMatter:
    """The front matter block: its raw text (between the fences) and its lines."""

    text: str  # the lines between the opening and closing fence, joined by "\n"
    start: int  # 0-based line of the opening ``---`` (always 0)
    end: int  # 0-based line after the closing ``---`` or ``...``: the body's first line

    @property
    def text_start(self) -> int:
        """0-based line of the first line of ``text``."""
        return self.start + 1


@dataclass(frozen=True)
class Document:
    """A parsed Markdown text: its front matter and its blocks, in text order."""

    front_matter: FrontMatter | None
    front_matter_unclosed: bool  # the text opens with ``---`` but no closing line follows
    blocks: tuple[Block, ...]  # the top-level blocks; containers hold the rest

    @property
    def headings(self) -> tuple[Block, ...]:
        """The top-level headings (not those inside a list or quote), in text order."""
        return tuple(b for b in self.blocks if b.kind == "heading")

    def walk(self) -> Iterator[Block]:
        """Every block at every depth, depth first, in text order."""
        for block in self.blocks:
            yield from block.walk()


def parse(text: str, *, front_matter: bool = True, blocks: bool = True) -> Document:
    """Read ``text`` as Markdown; see the module docstring for what a ``Document`` holds.

    ``front_matter=False`` reads a leading ``---`` block as body (a rule, a setext underline);
    ``blocks=False`` reads the front matter only, quickly, and gives no blocks (for plain text).
    """
    tokens = _parser(front_matter, blocks).parse(text)
    found = next((t for t in tokens if t.type == "front_matter"), None)
    matter = None
    if found is not None:
        start, end = _lines(found)
        matter = FrontMatter(text=found.content, start=start, end=end)
    unclosed = front_matter and matter is None and text.startswith("---")
    return Document(matter, unclosed, _blocks(tokens) if blocks else ())


def spans_outside(text: str, kinds: Collection[BlockKind]) -> list[tuple[int, int]]:
    """Character spans ``[start, end)`` of ``text`` that lie outside every block of ``kinds``.

    Blocks are found at any depth and ``text`` is read without front matter. A span is a run
    of whole lines with their line breaks (the last one may end without), in text order; a
    text without such blocks is one span, ``[(0, len(text))]`` (``[]`` when it is empty).
    """
    skipped = [
        (block.start, block.end)
        for block in parse(text, front_matter=False).walk()
        if block.kind in kinds
    ]
    starts = [0] + [m.end() for m in _LINE_BREAK.finditer(text)]  # offset of every line
    starts.append(len(text))  # one past the last line
    spans: list[tuple[int, int]] = []
    line = 0
    for first, end in sorted(skipped) + [(len(starts) - 1, len(starts) - 1)]:
        if first > line:
            spans.append((starts[line], starts[first]))
        line = max(line, end)
    return [(a, b) for a, b in spans if b > a]


#: a code span: a run of backticks, text without a blank line, the same run (CommonMark)
_CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)((?:(?!\n\s*\n).)+?)(?<!`)\1(?!`)", re.DOTALL)


def code_spans(text: str) -> list[tuple[int, int, int, int]]:
    """Each code span of ``text``'s prose (```` `AllowOverride` ````, outside code blocks,
    HTML and math), in characters: ``(start, code_start, code_end, end)``, its opening
    backticks ``[start, code_start)``, its code, its closing backticks ``[code_end, end)``."""
    out = []
    for a, b in spans_outside(text, {"fence", "code", "html", "math"}):
        for m in _CODE_SPAN.finditer(text, a, b):
            out.append((m.start(), m.start(2), m.end(2), m.end()))
    return out


@dataclass(frozen=True)
class FenceSpan:
    """Where a fenced code block lies in a text, in characters: its opening line
    ``[start, code_start)``, its code ``[code_start, code_end)`` and its closing line
    ``[code_end, end)`` (empty for a fence the text ends inside); ``info`` is its language."""

    start: int
    code_start: int
    code_end: int
    end: int
    info: str = ""


def fence_spans(text: str) -> list[FenceSpan]:
    """The fenced code blocks of ``text`` (at any depth, front matter not read), in text
    order: what a renderer shows as code, without the fence lines."""
    starts = [0] + [m.end() for m in _LINE_BREAK.finditer(text)]
    starts.append(len(text))
    out = []
    for block in parse(text, front_matter=False).walk():
        if block.kind != "fence" or block.end <= block.start:
            continue
        first, last = block.start, min(block.end, len(starts) - 1)
        code_end_line = last - 1 if block.closed else last
        out.append(FenceSpan(starts[first], starts[first + 1], starts[code_end_line],
                             starts[last], block.text))
    return sorted(out, key=lambda f: f.start)


@cache
def _parser(front_matter: bool, blocks: bool) -> MarkdownIt:
    """A markdown-it parser for block structure only (no inline parsing), built once."""
    if blocks:
        md = MarkdownIt("commonmark", {"maxNesting": _MAX_NESTING}).enable("table")
        md.use(dollarmath_plugin, allow_blank_lines=False).use(amsmath_plugin)
    else:
        md = MarkdownIt("zero")  # paragraphs only: front matter, then everything else
    if front_matter:
        md.use(front_matter_plugin)
    return md.disable("inline")  # the core rule that parses inline content


def _lines(token: Token) -> tuple[int, int]:
    if token.map is None:  # every block token of markdown-it has a map
        raise ValueError(f"markdown-it gave block token {token.type!r} no line range")
    return token.map[0], token.map[1]


def _blocks(tokens: list[Token]) -> tuple[Block, ...]:
    """The block tree of markdown-it's flat token stream."""
    root: list[Block] = []
    open_containers: list[tuple[Token, list[Block]]] = []  # container token, its children
    i = 0
    while i < len(tokens):
        token = tokens[i]
        siblings = open_containers[-1][1] if open_containers else root
        if token.type == "front_matter":
            pass
        elif token.nesting == -1:  # a container closes (leaves are skipped whole below)
            opening, children = open_containers.pop()
            parent = open_containers[-1][1] if open_containers else root
            parent.append(Block(_KINDS[opening.type], *_lines(opening), children=tuple(children)))
        elif token.type in _LEAVES:
            siblings.append(_leaf(token, tokens[i + 1]))
            close = token.type.replace("_open", "_close")
            while not (tokens[i].type == close and tokens[i].level == token.level):
                i += 1
        elif token.nesting == 1:
            open_containers.append((token, []))
        else:
            siblings.append(_single(token))
        i += 1
    return tuple(root)


def _leaf(token: Token, following: Token) -> Block:
    """A paragraph, heading or table from its opening token (and, for a heading or a
    paragraph, its text: without list markers, quote marks or indent; a paragraph keeps its
    line breaks)."""
    kind = _KINDS[token.type]
    if kind == "paragraph":
        return Block(kind, *_lines(token), text=following.content)
    if kind != "heading":
        return Block(kind, *_lines(token))
    text = " ".join(part.strip() for part in following.content.split("\n"))
    return Block(kind, *_lines(token), level=int(token.tag[1]), text=text)


def _single(token: Token) -> Block:
    """A block that is one token: fence, indented code, HTML, rule or math."""
    kind = _KINDS[token.type]
    start, end = _lines(token)
    if token.type == "amsmath":  # its map leaves out the \end{…} line: count the content's
        end = start + token.content.count("\n") + 1
    if kind != "fence":
        return Block(kind, start, end)
    # markdown-it leaves out the closing line from ``content`` and from nothing else; a last
    # line without its line break (the text ends there) is a line too
    content = token.content
    lines = content.count("\n") + (1 if content and not content.endswith("\n") else 0)
    closed = end - start - 1 - lines == 1
    return Block(kind, start, end, text=token.info.strip(), closed=closed)
