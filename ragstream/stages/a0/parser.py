"""A0's prompt parser: header candidates, then sections and a decision for every candidate.

Markdown structure comes from the project's one Markdown reader (``ragstream.common.markdown``,
CommonMark): the prompt's top-level headings, ATX (``## Task``) and setext (``Task`` over a
line of ``===`` or ``---``), and its code blocks, fenced (``` or ~~~) and indented. Lines
inside a code block are never header candidates. A heading inside a list item or a quote is
part of that item's text, not a header: A0's sections are the prompt's top-level parts, as
the chunker's sections are a document's. Bold and plain labels are A0's own conventions, not
Markdown structure, and are read line by line.

A *header candidate* has a label of at most ``max_label_words`` words, in one of three styles:

* **heading** — a Markdown heading: ``## Task``, ``## Task: value`` or ``Task`` over
  ``====`` (a leading number such as ``## 1. Task`` is ignored);
* **bold** — a bold label that ends the line or is followed by ``:`` or a dash:
  ``**Task:** value``, ``**Task**: value``, ``__Task__``;
* **plain** — a label at the start of a line followed by ``:`` and a space (or the line's
  end), or by a spaced dash: ``Task: value``, ``TASK - value``, ``Aufgabe:``.

A heading or bold candidate is always a header (its formatting says so): if the ladder maps it
to no key it opens an *unknown* section. A plain candidate is a header only if the ladder maps
it to a key; otherwise (``Note: bring the slides``, ``The reason is simple: ...``) the line
stays part of the text it stands in. Every candidate's decision is logged, with its 1-based
line (a setext heading's first line) and ``header`` saying whether it opened a section.

A header's value is the rest of its line (of a setext heading: its text after the label, line
breaks kept) plus every following line up to the next header. Text before the first header
is the first section, the preamble. A heading that is not a candidate (``## How the ReRanker
picks its backend``: too many words) stays text, all its lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ragstream.common import markdown
from ragstream.common.markdown import Block
from ragstream.stages.a0.ladder import LabelMapping, map_label
from ragstream.stages.a0.vocabulary import Vocabulary
from ragstream.state.records import A0Decision

STYLE_HEADING, STYLE_BOLD, STYLE_PLAIN = "heading", "bold", "plain"

#: the blocks whose lines are never header candidates: fenced and indented code
_CODE_KINDS = frozenset({"fence", "code"})
_BOLD = re.compile(
    r"^\s*(?P<mark>\*\*|__)(?P<label>[^*_:：\n]+)(?P<inner>[:：])?(?P=mark)"
    r"\s*(?P<outer>[:：\-–—])?\s*(?P<value>.*)$"
)
_DASHES = "-–—"
_PLAIN_SEPARATOR = re.compile(r"[:：](?=\s|$)|\s[-–—](?=\s|$)")
_PLAIN_LABEL = re.compile(r"^[^\W\d_][\w'’()/&\- ]*$")
_ENUMERATOR = re.compile(r"^\(?\d+[.)]\s*")
#: ``Label: value`` in a heading's text; the label is on its first line, the value may go on
_HEADING_VALUE = re.compile(r"^(?P<label>[^:：\n]+)[:：]\s*(?P<value>.*)$", re.DOTALL)
_HAS_LETTER = re.compile(r"[^\W\d_]")


@dataclass(frozen=True)
class Candidate:
    """A line (or a setext heading's lines) that looks like a header."""

    label: str
    value: str  # the text after the label in the header itself
    style: str


@dataclass
class Section:
    """A header (or the text before the first header) and the lines that belong to it."""

    label: str | None
    key: str | None
    lines: list[str] = field(default_factory=list)

    @property
    def value(self) -> str:
        """The section's lines joined, without leading and trailing whitespace."""
        return "\n".join(self.lines).strip()


def heading_candidate(heading: Block, lines: list[str], max_words: int) -> Candidate | None:
    """The header candidate of a Markdown heading, if its text is a short label."""
    if heading.end - heading.start == 1:  # ATX: the reader's text, without the closing #s
        text = heading.text
    else:  # setext: the lines above the underline, their line breaks kept for the value
        text = "\n".join(lines[heading.start:heading.end - 1])
    text = _ENUMERATOR.sub("", text.strip().strip("*_").strip())
    inline = _HEADING_VALUE.match(text)
    if inline:
        found = _short(inline.group("label"), inline.group("value"), STYLE_HEADING, max_words)
        if found:
            return found
    label = " ".join(part.strip() for part in text.split("\n"))
    return _short(label.rstrip(":： "), "", STYLE_HEADING, max_words)


def label_candidate(line: str, max_words: int) -> Candidate | None:
    """The bold or plain header candidate on a line that is neither heading nor code."""
    bold = _BOLD.match(line)
    if bold:
        return _bold_candidate(bold, max_words)
    return _plain_candidate(line, max_words)


def _bold_candidate(match: re.Match[str], max_words: int) -> Candidate | None:
    """``**Label:**``, ``**Label**: value``, ``**Label -**``; a bold word followed by more
    text without a separator is emphasis, not a header."""
    raw = match.group("label").rstrip()
    inner_dash = raw.endswith(tuple(_DASHES))
    separated = bool(match.group("inner") or match.group("outer") or inner_dash)
    if not separated and match.group("value"):
        return None
    label = _ENUMERATOR.sub("", raw.rstrip(_DASHES).strip())
    return _short(label, match.group("value"), STYLE_BOLD, max_words)


def _plain_candidate(line: str, max_words: int) -> Candidate | None:
    """``Label: value`` or ``LABEL - value`` at the start of the line."""
    separator = _PLAIN_SEPARATOR.search(line)
    if not separator:
        return None
    label = line[:separator.start()].strip()
    if not _PLAIN_LABEL.match(label):
        return None
    return _short(label, line[separator.end():], STYLE_PLAIN, max_words)


def _short(label: str, value: str, style: str, max_words: int) -> Candidate | None:
    label = label.strip().strip("*_").strip()
    if not _HAS_LETTER.search(label) or len(label.split()) > max_words:
        return None
    return Candidate(label=label, value=value.strip(), style=style)


def parse_prompt(text: str, vocab: Vocabulary, unknown_headers: bool = True
                 ) -> tuple[list[Section], list[A0Decision]]:
    """Split the prompt (line ends ``\\n``) into sections at its headers; log a decision for
    every candidate.

    With ``unknown_headers=False`` a heading or bold label that maps to no key is read as
    text, like a plain one (the fallback when no header gives a task or context).
    """
    document = markdown.parse(text, front_matter=False)
    headings = {block.start: block for block in document.headings}
    code = {line for block in document.walk() if block.kind in _CODE_KINDS
            for line in range(block.start, block.end)}
    lines = text.split("\n")
    sections = [Section(label=None, key=None)]
    decisions: list[A0Decision] = []
    start = 0
    while start < len(lines):
        heading = headings.get(start)
        end = heading.end if heading else start + 1
        if heading:
            candidate = heading_candidate(heading, lines, vocab.max_label_words)
        elif start in code:
            candidate = None
        else:
            candidate = label_candidate(lines[start], vocab.max_label_words)
        if candidate is None:
            sections[-1].lines.extend(lines[start:end])
            start = end
            continue
        mapping = map_label(candidate.label, vocab)
        formatted = candidate.style != STYLE_PLAIN
        is_header = mapping.key is not None or (formatted and unknown_headers)
        decisions.append(_decision(candidate, mapping, start + 1, is_header))
        if is_header:
            opening = [candidate.value] if candidate.value else []
            sections.append(Section(label=candidate.label, key=mapping.key, lines=opening))
        else:
            sections[-1].lines.extend(lines[start:end])
        start = end
    return sections, decisions


def _decision(candidate: Candidate, mapping: LabelMapping, line: int,
              is_header: bool) -> A0Decision:
    detail = mapping.detail
    if mapping.key is None:
        if is_header:
            detail += "; kept in unknown_attributes"
        elif candidate.style == STYLE_PLAIN:
            detail += "; a plain label that maps to no key is not a header, kept as text"
        else:
            detail += "; read as text because no header gives a task or context"
    return A0Decision(label=candidate.label, normalized=mapping.normalized, key=mapping.key,
                      rung=mapping.rung, detail=detail, style=candidate.style, header=is_header,
                      line=line, confidence=mapping.confidence)
