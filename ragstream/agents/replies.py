"""Bounded types for agents' reply models, and the schema edits made per call.

A reply must not be able to run away: every string has a ``maxLength`` and every list a
``maxItems`` in the schema sent to the endpoint, which a schema-constrained server (llama.cpp,
Ollama, vLLM, OpenAI) enforces while it generates. Validation is lenient on the same bounds
(a longer string or list is cut, not refused), because a plain JSON-mode server is not held
to them and a cut value is still useful.

Closed lists that come from the config (A2's values, A3's tags, how many candidates were sent)
are written into the schema per call with ``bound``: the model sees them as ``enum``,
``maximum`` or ``maxItems`` and a constrained server can produce nothing else.
"""

from __future__ import annotations

import copy
import json
from typing import Annotated, Any

from pydantic import AfterValidator, Field


def Text(max_chars: int, description: str = "") -> Any:
    """A string of at most ``max_chars`` characters (cut on validation)."""
    return Annotated[str, AfterValidator(lambda s: s[:max_chars]),
                     Field(description=description or None,
                           json_schema_extra={"maxLength": max_chars})]


def Items(item: Any, max_items: int, description: str = "") -> Any:
    """A list of at most ``max_items`` items (cut on validation)."""
    return Annotated[list[item], AfterValidator(lambda v: v[:max_items]),
                     Field(description=description or None, json_schema_extra={"maxItems": max_items})]


def bound(schema: dict[str, Any], edits: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A copy of ``schema`` (inlined, see ``llm.inline_schema``) with keywords set at paths:
    ``"drop"`` is the property ``drop``, ``"drop[]"`` its items, ``"drop[].tag"`` their
    ``tag``. An ``enum`` replaces a string's ``maxLength`` (the list is the bound)."""
    out = copy.deepcopy(schema)
    for path, keywords in edits.items():
        node = out
        for part in path.split("."):
            name, items = (part[:-2], True) if part.endswith("[]") else (part, False)
            node = node["properties"][name]
            if items:
                node = node["items"]
        node.update(keywords)
        if "enum" in keywords:
            node.pop("maxLength", None)
    return out


def outline(schema: dict[str, Any]) -> str:
    """A short, readable shape of an inlined schema for the model's instructions, e.g.
    ``{"drop": [{"n": integer 1..12, "tag": "duplicate"|"off-topic"}] (at most 12)}``:
    the same keys, enums and bounds as the schema, at a fraction of its tokens."""
    if "enum" in schema:
        return "|".join(json.dumps(v, ensure_ascii=False) for v in schema["enum"])
    kind = schema.get("type")
    if kind == "object":
        fields = ", ".join(f"{json.dumps(k)}: {outline(v)}"
                           for k, v in schema.get("properties", {}).items())
        return "{" + fields + "}"
    if kind == "array":
        most = schema.get("maxItems")
        return f"[{outline(schema.get('items', {}))}, …]" + (f" (at most {most})" if most else "")
    if kind == "integer" or kind == "number":
        lo, hi = schema.get("minimum"), schema.get("maximum")
        return kind + (f" {lo:g}..{hi:g}" if lo is not None and hi is not None else "")
    if kind == "string":
        most = schema.get("maxLength")
        return "string" + (f" (at most {most} characters)" if most else "")
    return str(kind or "any")
