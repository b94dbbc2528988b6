"""A0's header vocabulary, loaded from ``config/prompt_schema.json`` (owned by the A0 stage)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class PromptSchema(BaseModel):
    model_config = ConfigDict(extra="forbid")

    canonical_keys: list[str] = Field(min_length=1)
    must_keys: list[str] = Field(default_factory=list)
    defaults: dict[str, str] = Field(default_factory=dict)
    aliases: dict[str, list[str]] = Field(default_factory=dict)
    bilingual: dict[str, dict[str, list[str]]] = Field(default_factory=dict)
    max_typo_edits: int = Field(2, ge=0, le=3)
    templates: dict[str, list[str]] = Field(default_factory=dict)
    keyword_cues: dict[str, list[str]] = Field(default_factory=dict)
    modes: dict[str, bool] = Field(default_factory=lambda: {"semantic_enabled": False})
