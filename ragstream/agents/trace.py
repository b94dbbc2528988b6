"""What an agent sent to the model and got back, kept for the agent inspector.

``call_record`` turns one ``CallLog`` (filled in by ``LLMClient.chat_json``) into the
``AgentCall`` that ``run_agent`` stores in ``sp.extras.llm_calls[agent]``: the messages of the
call's last request, the raw reply, the validated result (as small as the agent's
``max_tokens`` lets a reply be) and the error. Every message and the reply are bounded by
``llm.inspect_chars`` so that a SuperPrompt stays small: a longer one keeps its start and its
end, and says how many characters of its middle were cut. The API key never reaches a message
by construction; a server that echoes it into a reply has it replaced by ``***``.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from ragstream.backends.llm import CallLog
from ragstream.state.records import AgentCall, SentMessage

#: the share of a cut text kept from its start (the rest is its end)
HEAD_SHARE = 0.75


def cut_marker(cut: int) -> str:
    """The line that stands where ``cut`` characters of a long text were left out."""
    return f"\n… [{cut:,} characters cut here] …\n"


def clip(text: str, limit: int) -> tuple[str, int]:
    """``text`` bounded by ``limit`` characters (its start and end, a marker between them)
    and how many characters were cut (0: it is whole)."""
    if len(text) <= limit:
        return text, 0
    head = int(limit * HEAD_SHARE)
    tail = limit - head
    cut = len(text) - limit
    return text[:head] + cut_marker(cut) + text[len(text) - tail:], cut


def call_record(log: CallLog, limit: int, redact: Callable[[str], str] = lambda t: t) -> AgentCall:
    """The inspector's record of one call: each text redacted, then clipped to ``limit``."""
    messages = []
    for m in log.messages:
        content, cut = clip(redact(m.get("content", "")), limit)
        messages.append(SentMessage(role=m.get("role", ""), content=content, cut=cut or None))
    raw, raw_cut = clip(redact(log.raw), limit)
    parsed = None if log.parsed is None else json.loads(redact(json.dumps(log.parsed)))
    return AgentCall(messages=messages, raw=raw, raw_cut=raw_cut or None,
                     parsed=parsed, error=redact(log.error) or None, items=log.items,
                     probabilities=log.probabilities)
