"""Session-state keys of the page, created in one place.

The pipeline state is one ``SuperPrompt`` under ``SP``; nothing else holds pipeline results.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

from ragstream.controller import new_prompt

SP = "sp"                      # the SuperPrompt
PROMPT = "prompt_text"         # the prompt box's text
AUTO = "auto_run"              # the auto-run toggle
ERROR = "last_error"           # (kind, message) of the last failed action, or None
NOTICE = "last_notice"         # a success message from the last action, or None
OVERRIDES = "settings_overrides"  # dotted config key -> value for this session
INGEST_REPORT = "ingest_report"   # the last IngestReport as a dict, or None
JOURNEY_CHUNK = "journey_chunk"   # the chunk picked in the chunk journey
UPLOAD_NONCE = "upload_nonce"     # bumped to clear the file uploader after an ingest
CONVERSATION = "conversation"     # recent (question, answer) turns that the next prompt carries

EXAMPLE_PROMPT = (
    "Task: Explain how the ReRanker chooses its backend when no cross-encoder is installed.\n"
    "Audience: beginner\n"
    "Format: bullet points"
)


def init_state(state: MutableMapping[str, Any]) -> None:
    defaults = {
        SP: new_prompt(""),
        PROMPT: EXAMPLE_PROMPT,
        AUTO: True,
        ERROR: None,
        NOTICE: None,
        OVERRIDES: {},
        INGEST_REPORT: None,
        JOURNEY_CHUNK: None,
        UPLOAD_NONCE: 0,
        CONVERSATION: [],
    }
    for key, value in defaults.items():
        if key not in state:
            state[key] = value
