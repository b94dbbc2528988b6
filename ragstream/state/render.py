"""The texts made from a SuperPrompt's fields, shared by the stages and the answer: the
Markdown prompt blocks (A0's preview, A4's condensed context, Prompt_Builder's assembly, the
conversation) and the query strings (Retrieval's, the ReRanker's). Pure functions: same input,
same bytes out. Markdown is only written here, never read back: what a later step needs comes
from the typed records the Markdown was rendered from."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ragstream.state.records import Statement
    from ragstream.state.super_prompt import ConversationTurn, SuperPrompt

#: the body fields Retrieval searches for, in this order
QUERY_KEYS = ("task", "context", "purpose")

#: body keys shown in the Prompt block, in this order, with their headings
PROMPT_KEYS: list[tuple[str, str]] = [
    ("task", "Task"),
    ("purpose", "Purpose"),
    ("context", "Context"),
    ("audience", "Audience"),
    ("format", "Format"),
    ("constraints", "Constraints"),
    ("text", "Text"),
]


def render_system_md(body: dict[str, str], hard_rules: Iterable[str] = ()) -> str:
    """The ``## System`` Markdown block: the role sentence, tone/depth/audience line and any hard rules."""
    lines = ["## System"]
    role = body.get("system", "").strip()
    if role:
        lines.append(role_sentence(role))
    style = [f"{label}: {body[key].strip()}" for key, label in
             (("tone", "Tone"), ("depth", "Depth"), ("audience", "Audience"))
             if body.get(key, "").strip()]
    if style:
        lines.append(" · ".join(style))
    rules = [r for r in hard_rules if r.strip()]
    if rules:
        lines.append("")
        lines.append("### Rules")
        lines.extend(f"- {r.strip()}" for r in rules)
    return "\n".join(lines).rstrip() + "\n"


#: words a role may start with that already say "a"/"the": "a senior support engineer"
_DETERMINERS = ("a", "an", "the", "my", "our", "your", "one")


def role_sentence(role: str) -> str:
    """The System block's first line for ``role``: "You are a teacher.", "You are an analyst.";
    a role that is already a sentence ("You are …", "Act as …") stays as written, and one that
    starts with its own article keeps it ("a senior support engineer" → "You are a senior
    support engineer.")."""
    role = " ".join(role.split())
    first = role.split(" ", 1)[0].lower()
    if first in ("you", "act", "acting", "be"):
        return role if role[-1:] in ".!?" else role + "."
    role = role.rstrip(".")
    if first in _DETERMINERS:
        return f"You are {role}."
    article = "an" if role[:1].lower() in "aeiou" else "a"
    return f"You are {article} {role}."


def render_prompt_md(body: dict[str, str]) -> str:
    """The ``## Prompt`` Markdown block: one ``###`` section per non-empty body key, in fixed order."""
    parts = ["## Prompt"]
    for key, label in PROMPT_KEYS:
        value = body.get(key, "").strip()
        if value:
            parts.append(f"### {label}\n{value}")
    return "\n\n".join(parts).rstrip() + "\n"


def build_query(body: dict[str, str]) -> str:
    """Retrieval's query: task, context and purpose, whitespace-normalised."""
    parts = [body.get(k, "").strip() for k in QUERY_KEYS]
    return re.sub(r"\s+", " ", " ".join(p for p in parts if p)).strip()


#: an earlier answer's citation marker: ``[3]``, ``[1, 2]``, ``[2-4]`` (not a link's ``[text](…)``)
_CITATION_MARKER = re.compile(r"[ \t]*\[\d+(?:[ \t]*[,–-][ \t]*\d+)*\](?!\()")


def strip_citations(text: str) -> str:
    """``text`` without its ``[n]`` citation markers: in an earlier answer they point at that
    answer's Sources list, which the next prompt does not have (its own [n] are other chunks)."""
    return _CITATION_MARKER.sub("", text)


CONVERSATION_HEADING = "## Recent conversation"


def render_conversation(conversation: Sequence[ConversationTurn], max_pairs: int) -> str:
    """The last ``max_pairs`` turns of ``conversation`` as a Markdown block (or nothing); the
    answers without their ``[n]`` markers (``strip_citations``)."""
    turns = conversation[-max_pairs:] if max_pairs else []
    if not turns:
        return ""
    lines = [CONVERSATION_HEADING]
    for t in turns:
        lines.append(f"**User:** {t.user.strip()}\n\n**Assistant:** {strip_citations(t.assistant).strip()}")
    return "\n\n".join(lines) + "\n"


def stated(body: dict[str, str], sources: dict[str, str] | None, key: str) -> str:
    """The body's value for ``key`` as the user gave it (or A0 derived it); "" for a value A0
    only filled in as a default (``sources[key] == "default"``, e.g. format "Markdown"), which
    says nothing about the request."""
    return "" if (sources or {}).get(key) == "default" else (body.get(key, "") or "")


def rerank_query(body: dict[str, str], sources: dict[str, str] | None = None) -> str:
    """The single query string the ReRanker scores against: task, purpose, context, format —
    without System_MD or attachments (the role and the raw excerpts are not the question), as
    plain text. A0's defaults are left out (``stated``)."""
    values = (stated(body, sources, k).strip() for k in ("task", "purpose", "context", "format"))
    return "\n".join(v for v in values if v)


def compose_prompt_ready(body: dict[str, str], hard_rules: Iterable[str] = ()) -> str:
    """The preview shown after A0/A2: the System and Prompt blocks of the current body."""
    return render_system_md(body, hard_rules) + "\n" + render_prompt_md(body)


def preview(sp: SuperPrompt) -> str:
    """``prompt_ready`` before Prompt_Builder, as far as the pass has got: the System block
    (with A5's hard rules once A5 ran) and the Prompt block, then A4's condensed context once
    A4 ran. Empty before A0."""
    if not sp.body:
        return ""
    spec = sp.extras.format_enforcer
    text = compose_prompt_ready(sp.body, spec.hard_rules if spec else ())
    return text + "\n" + sp.S_CTX_MD if sp.S_CTX_MD else text


#: the heading of A4's condensed context, and the block when no chunk passed the gate
CONDENSED_HEADER = "## Condensed context\n"
CONDENSED_EMPTY = (CONDENSED_HEADER + "\n_No retrieved chunk passed the A3 gate, so no context "
                   "can ground the answer._\n")


def citation_marks(chunk_ids: Iterable[str], selection: list[str]) -> str:
    """``[n]`` for each cited chunk, n being its 1-based place in ``selection`` (the Sources block)."""
    number = {c: n for n, c in enumerate(selection, start=1)}
    return "".join(f"[{number[c]}]" for c in chunk_ids if c in number)


#: the block of a person's own statements in ``S_CTX_MD``: theirs, not a source's, never cited
NOTES_HEADER = ("### Your notes\n_Written by you, not taken from a source: no [n] cites them, "
                "and the answer does not either._\n")


def render_condensed(statements: list[Statement], open_issues: list[str], selection: list[str],
                     edited: str = "") -> str:
    """A4's ``S_CTX_MD``: the facts, the constraints (each citing its sources), the person's
    notes (statements they rewrote: "Your note: …", without a citation) and the open issues;
    ``edited`` (what a person changed, in words) is said under the heading."""
    facts = [s for s in statements if s.kind == "fact" and not s.by_you]
    constraints = [s for s in statements if s.kind == "constraint" and not s.by_you]
    notes = [s for s in statements if s.by_you]
    if not (facts or constraints or notes):
        return CONDENSED_EMPTY if not edited else CONDENSED_HEADER + f"\n_Edited: {edited}._\n"

    def items(group: list[Statement]) -> str:
        return "\n".join(f"- {s.text} {citation_marks(s.chunk_ids, selection)}" for s in group) + "\n"

    parts = [CONDENSED_HEADER + (f"_Edited: {edited}._\n" if edited else "")]
    if facts:
        parts.append("### Facts\n" + items(facts))
    if constraints:
        parts.append("### Constraints\n" + items(constraints))
    if notes:
        parts.append(NOTES_HEADER + "\n".join(f"- Your note: {s.text}" for s in notes) + "\n")
    if open_issues:
        parts.append("### Open issues\n" + "\n".join(f"- {t}" for t in open_issues) + "\n")
    return "\n".join(parts)
