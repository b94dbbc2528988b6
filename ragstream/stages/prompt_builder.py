"""Prompt_Builder: the final, deterministic assembly of the super-prompt (no model, no LLM).

Blocks, in order: System_MD (role, tone, depth + A5's hard rules), Prompt_MD (task, purpose,
context, audience, format, constraints), S_CTX_MD (A4's condensed context, unedited),
Attachments_MD (the raw text of every ``final_selection_ids`` chunk, numbered like the
citations, fenced with SOURCE and SPAN lines), and, when there is one, the recent
conversation (at most N4 pairs). The attachments stay within
``prompt.attachments_max_tokens``: a chunk that no longer fits is cut at a sentence boundary
and marked as truncated. ``sp.stage`` stays ``a5``.
"""

from __future__ import annotations

import re

from ragstream.backends.tokens import count_tokens
from ragstream.common.config import AppConfig
from ragstream.common.text import split_sentences
from ragstream.stages import staleness
from ragstream.stages.stage import Stage
from ragstream.state.render import (
    preview,
    render_conversation,
    render_prompt_md,
    render_system_md,
)
from ragstream.state.super_prompt import PROMPT_BUILT, Chunk, SuperPrompt

NAME = "Prompt_Builder"


def _fence(text: str) -> str:
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def attachment(n: int, chunk: Chunk, text: str, truncated: bool) -> str:
    """One numbered source: its citation heading, then its text fenced with SOURCE, SECTION and SPAN lines."""
    heading = chunk.heading_label or chunk.title or chunk.source
    fence = _fence(text)
    note = " (truncated to fit the attachment budget)" if truncated else ""
    return (
        f"### [{n}] {chunk.citation_label}{note}\n"
        f"{fence}text\n"
        f"SOURCE: {chunk.source}\n"
        f"SECTION: {heading}\n"
        f"SPAN: lines {chunk.start_line}-{chunk.end_line} (chunk {chunk.id})\n"
        f"---\n"
        f"{text}\n"
        f"{fence}\n"
    )


def render_attachments(ids: list[str], chunks: dict[str, Chunk], budget: int, enc: str) -> str:
    """The Sources block: the selected chunks in order, cut at a sentence or omitted past the token budget."""
    if not ids:
        return "## Sources\n\n_No sources were selected._\n"
    parts = ["## Sources\n"]
    used = count_tokens(parts[0], enc)
    for n, cid in enumerate(ids, start=1):
        chunk = chunks[cid]
        block = attachment(n, chunk, chunk.text, False)
        cost = count_tokens(block, enc)
        if used + cost > budget:
            # keep as many whole sentences as fit
            spans = split_sentences(chunk.text)
            text = ""
            for _s, e in spans:
                trial = chunk.text[:e].rstrip()
                if used + count_tokens(attachment(n, chunk, trial, True), enc) > budget:
                    break
                text = trial
            if not text:
                parts.append(f"### [{n}] {chunk.citation_label}\n_Omitted: the attachment budget "
                             f"({budget} tokens) is used up._\n")
                continue
            block = attachment(n, chunk, text, True)
            cost = count_tokens(block, enc)
        parts.append(block)
        used += cost
    return "\n".join(parts)


def run(sp: SuperPrompt, cfg: AppConfig, services) -> SuperPrompt:
    """Assemble the system, prompt, context, sources and conversation blocks into ``prompt_ready``."""
    rules = sp.extras.format_enforcer.hard_rules if sp.extras.format_enforcer else []
    sp.System_MD = render_system_md(sp.body, rules)
    sp.Prompt_MD = render_prompt_md(sp.body)
    chunks = sp.chunk_map()
    sp.Attachments_MD = render_attachments(
        sp.final_selection_ids, chunks, cfg.settings.prompt.attachments_max_tokens,
        cfg.settings.chunking.encoding)
    ctx = sp.S_CTX_MD or "## Condensed context\n\n_A4_Condenser has not produced a context._\n"
    blocks = [sp.System_MD, sp.Prompt_MD, ctx, sp.Attachments_MD,
              render_conversation(sp.recent_conversation, cfg.limits.N4_RECENT_CONV_MAX_PAIRS)]
    sp.prompt_ready = "\n".join(b.rstrip() + "\n" for b in blocks if b.strip())
    return sp


def discard(sp: SuperPrompt) -> None:
    """Forget the built blocks; ``prompt_ready`` goes back to the preview of the stages before."""
    sp.System_MD = sp.Prompt_MD = sp.Attachments_MD = ""
    if sp.body:
        sp.prompt_ready = preview(sp)


STAGE = Stage(name=NAME, value="a5", label="Prompt Builder", run=run, discard=discard,
              history_value=PROMPT_BUILT,
              reads=(staleness.CONVERSATION, "limits.N4_RECENT_CONV_MAX_PAIRS",
                     "settings.prompt.attachments_max_tokens", "settings.chunking.encoding"))
