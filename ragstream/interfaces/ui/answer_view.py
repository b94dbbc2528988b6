"""What the page shows around the answer: its confidence in words with the figures one click
away, and how A0 read a follow-up question ("Read as").

Pure functions from an ``Answer`` or a ``SuperPrompt``:

* ``confidence_line``: the level's badge and ``Answer.confidence_reason`` in a reader's words
  ("Medium: the best passage answers only part of the question (…)" shows as the orange
  badge and "The best passage answers only part of the question (…)").
* ``figures``: what the confidence was weighed on (``Answer.confidence_detail``, one line per
  figure), why the answer's mode ran and the model: the expander under the line;
  ``mode_note``: the model and the error an extractive answer replaced, under the line.
* ``reading_view``: "Read as: <the standalone question>" for a follow-up that A0 read with the
  conversation (``extras.reading``), with what the person typed, the earlier question it was
  read with and who read it (the rule, by name, or the model); the task the person set
  instead, when they did. None for a prompt that stands on its own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ragstream.common.prompt_schema import TASK_KEY
from ragstream.state import edits
from ragstream.state.super_prompt import Answer, SuperPrompt

#: the badge colour of each confidence level
COLOURS = {"High": "green", "Medium": "orange", "Low": "red"}
#: the expander that holds the figures behind the confidence
FIGURES_TITLE = "The figures behind the confidence"

_LEVEL_PREFIX = re.compile(r"^\s*(High|Medium|Low)\s*[:—–-]\s*", re.IGNORECASE)
_MD_SPECIAL = re.compile(r"([\\`*_\[\]$<>#|~])")


def md_text(text: str) -> str:
    """``text`` shown as written in the page's Markdown: its Markdown and math characters
    escaped (a ``$`` would open math, a ``[`` a directive)."""
    return _MD_SPECIAL.sub(r"\\\1", text)


def quoted(text: str) -> str:
    """``text`` in quotation marks, for a line of Markdown."""
    return f"“{md_text(' '.join(text.split()))}”"


def reason_words(ans: Answer) -> str:
    """The confidence's reason without its level ("Medium: the best passage …" → "The best
    passage …"), the first letter capitalised; "" when there is none."""
    words = _LEVEL_PREFIX.sub("", ans.confidence_reason or "", count=1).strip()
    return words[:1].upper() + words[1:] if words else ""


def confidence_line(ans: Answer) -> str:
    """The confidence as the page's main line says it: the level's badge, then why in words."""
    colour = COLOURS.get(ans.confidence, "gray")
    badge = f":{colour}-badge[{ans.confidence} confidence]"
    words = reason_words(ans)
    return f"{badge} {md_text(words)}" if words else badge


def clauses(detail: str) -> list[str]:
    """``detail``'s clauses: its parts between semicolons that stand outside brackets
    ("best 0.48 (first 0.48; its section 0.87); P 0.9" is two)."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(detail):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(0, depth - 1)
        elif ch == ";" and depth == 0:
            out.append(detail[start:i])
            start = i + 1
    out.append(detail[start:])
    return [part.strip() for part in out if part.strip()]


def mode_note(ans: Answer) -> str:
    """What the person must know beside the confidence, on the main line: the model that
    answered, and the error an extractive answer replaced ("" when there is neither)."""
    parts = []
    if ans.model:
        parts.append(f"model: {ans.model}")
    if ans.error:
        parts.append(ans.error)
    return " · ".join(parts)


def figures(ans: Answer) -> list[str]:
    """The figures behind the confidence, one Markdown line each: every clause of
    ``confidence_detail``, then the mode and why it ran, the model, any error."""
    lines = [md_text(part) for part in clauses(ans.confidence_detail or "")]
    if not lines:
        lines.append("No figures were recorded for this answer.")
    mode = f"Mode: **{ans.mode}**" + (f" — {md_text(ans.mode_reason)}" if ans.mode_reason else "")
    lines.append(mode)
    if ans.model:
        lines.append(f"Model: `{ans.model}`")
    if ans.latency_ms:
        lines.append(f"Answered in {ans.latency_ms:,.0f} ms")
    return lines


def figures_markdown(ans: Answer) -> str:
    """``figures`` as a Markdown list."""
    return "\n".join(f"- {line}" for line in figures(ans))


# --------------------------------------------------------------------------- "Read as"

#: what each of A0's reading rules does (``stages.a0.reading``), in a reader's words
RULES = {
    "action": "“do that” stands for what the earlier question asks to do",
    "condition": "its condition closes the earlier question",
    "continuation": "it goes on with what the earlier question asks to do",
    "phrase": "its phrase takes the place of the earlier question's",
    "pronoun": "its pronoun stands for what the earlier question asks to do, or what that acts on",
    "topic": "its pronoun stands for the earlier question's topic",
    "context": "the earlier question is added as its context",
}


@dataclass(frozen=True)
class ReadingView:
    """How the page says what a follow-up was read as: the line (Markdown), the detail under
    it (what was typed, with which question, by whom) and whether the person's task replaced
    the reading."""

    line: str
    detail: str
    yours: bool = False


def read_by(rule: str, by: str, probability: float | None) -> str:
    """Who read it: ``the rule “pronoun” (its pronoun stands for …)``, ``the model (P 0.91)``."""
    if by == "model" or rule == "model":
        return "the model" + (f" (P {probability:.2f})" if probability is not None else "")
    if by == "you":
        return "you"
    what = RULES.get(rule)
    return f"the rule “{md_text(rule)}”" + (f" ({what})" if what else "")


def reading_view(sp: SuperPrompt) -> ReadingView | None:
    """"Read as" for a follow-up A0 read with the conversation; None for a prompt that stands
    on its own (or before A0)."""
    reading = sp.extras.reading
    if reading is None:
        return None
    typed = f"You typed {quoted(reading.typed)}"
    after = f"read with the earlier question {quoted(reading.after)}" if reading.after else \
        "read with the conversation"
    who = read_by(reading.rule, reading.by, reading.probability)
    yours = (sp.extras.body_sources or {}).get(TASK_KEY) == edits.BY_YOU
    if yours:
        task = sp.body.get(TASK_KEY) or sp.question
        return ReadingView(
            line=f"**Read as:** {quoted(task)} — the task you set",
            detail=(f"Your task (the Fields tab) replaced A0's reading {quoted(reading.text)}: "
                    f"{typed[0].lower()}{typed[1:]}, {after} by {who}. Retrieval and the answer "
                    "use your task; clear your edit to use the reading again."),
            yours=True)
    note = f" ({md_text(reading.note)})" if reading.note else ""
    return ReadingView(
        line=f"**Read as:** {quoted(reading.text)}",
        detail=(f"{typed}, {after} by {who}{note}. Retrieval and the answer use this reading; "
                "set the task in the Fields tab to search something else."))
