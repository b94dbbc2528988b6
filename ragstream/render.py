"""Markdown rendering of the prompt blocks, shared by A0 (preview), the ReRanker (query) and
Prompt_Builder (final assembly). Pure functions of the SuperPrompt's fields: same input, same
bytes out."""

from __future__ import annotations

from typing import Iterable

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
    lines = ["## System"]
    role = body.get("system", "").strip()
    if role:
        article = "an" if role[:1].lower() in "aeiou" else "a"
        lines.append(role if role.lower().startswith("you ") else f"You are {article} {role}.")
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


def render_prompt_md(body: dict[str, str]) -> str:
    parts = ["## Prompt"]
    for key, label in PROMPT_KEYS:
        value = body.get(key, "").strip()
        if value:
            parts.append(f"### {label}\n{value}")
    return "\n\n".join(parts).rstrip() + "\n"


def rerank_query(body: dict[str, str], sources: dict[str, str] | None = None) -> str:
    """The single query string the ReRanker scores against: task, purpose, context, format —
    without System_MD or attachments (seed 001 §5.4), as plain text. Values A0 filled in as
    defaults (``sources[key] == "default"``, e.g. format "Markdown") say nothing about the
    subject and are left out."""
    sources = sources or {}
    return "\n".join(body[k].strip() for k in ("task", "purpose", "context", "format")
                     if body.get(k, "").strip() and sources.get(k) != "default")


def compose_prompt_ready(body: dict[str, str], hard_rules: Iterable[str] = ()) -> str:
    """The preview shown after A0/A2: the System and Prompt blocks of the current body."""
    return render_system_md(body, hard_rules) + "\n" + render_prompt_md(body)
