"""A5_Format_Enforcer, deterministic mode: the requested format normalised into hard rules,
with every table in config/agents/A5_Format_Enforcer.json."""

from __future__ import annotations

import json
import shutil

import pytest
from pydantic import ValidationError

from ragstream.common.config import DEFAULT_CONFIG_DIR, A5Config, load_config
from ragstream.common.errors import ConfigError
from ragstream.stages import a5_format_enforcer as a5
from ragstream.stages.a5.llm import clamp_kind
from ragstream.state.render import preview
from ragstream.state.super_prompt import SuperPrompt

CITE = ("Cite the sources you use as [n], where n is the number of the source in the "
        "Sources block.")
ONLY_CONTEXT = ("Use only facts from the context; say so when the context does not contain "
                "the answer.")


@pytest.fixture(scope="module")
def cfg():
    return load_config()


def enforce(cfg, task: str = "Explain reciprocal rank fusion", **fields: str) -> dict:
    sp = SuperPrompt(user_text=task, stage="a4", body={"task": task, **fields})
    return a5.run(sp, cfg, None).extras.format_enforcer


def lengths(spec: dict) -> list[tuple[str, int, str]]:
    return [(lim.bound, lim.value, lim.unit) for lim in spec.length]


# --------------------------------------------------------------------------- config


def test_config_loads_with_all_kinds(cfg):
    agent = cfg.agents.A5_Format_Enforcer
    assert agent.default_format == "markdown"
    assert set(agent.kinds) == {"markdown", "json", "yaml", "bullet_list", "numbered_list",
                                "table", "checklist", "code", "plain_text", "email"}
    assert agent.always_rules == [CITE, ONLY_CONTEXT]


def test_default_format_is_normalised_and_checked():
    assert A5Config(agent_name="A5_Format_Enforcer", default_format="Plain Text").default_format \
        == "plain_text"
    with pytest.raises(ValidationError):
        A5Config(agent_name="A5_Format_Enforcer", default_format="haiku")


def test_a_bad_a5_file_is_a_config_error(tmp_path):
    cdir = tmp_path / "config"
    shutil.copytree(DEFAULT_CONFIG_DIR, cdir)
    path = cdir / "agents" / "A5_Format_Enforcer.json"
    raw = json.loads(path.read_text(encoding="utf-8"))
    raw["kinds"]["sonnet"] = {"label": "Sonnet"}
    path.write_text(json.dumps(raw), encoding="utf-8")
    with pytest.raises(ConfigError, match="kinds"):
        load_config(cdir, env={})
    del raw["kinds"]["sonnet"]
    raw["length_rules"].pop("about")
    path.write_text(json.dumps(raw), encoding="utf-8")
    with pytest.raises(ConfigError, match="length_rules"):
        load_config(cdir, env={})


# --------------------------------------------------------------------------- kinds


def test_json_kind_rule_and_shape(cfg):
    spec = enforce(cfg, format="JSON object")
    assert spec.kind == "json" and spec.kind_source == "format"
    assert spec.matched == ["json"]
    assert spec.hard_rules == [
        "Answer with one valid JSON object and no text outside it.", CITE, ONLY_CONTEXT]
    assert json.loads(spec.example_shape) == {"answer": "...", "sources": [1]}
    assert spec.normalized_format_spec == "JSON object"


def test_json_keys_from_the_task_become_the_shape(cfg):
    spec = enforce(cfg, "Give me the answer as a JSON object with keys name, year and summary")
    assert (spec.kind, spec.kind_source) == ("json", "task")
    assert spec.names == ["name", "year", "summary"]
    assert json.loads(spec.example_shape) == {"name": "...", "year": "...", "summary": "..."}
    assert "Use exactly these keys: name, year, summary." in spec.hard_rules


def test_table_in_german_with_a_word_limit(cfg):
    spec = enforce(cfg, "Compare BM25 and dense retrieval",
                   format="Markdown table in German", constraints="under 200 words")
    assert spec.kind == "table"
    assert spec.language == "de"
    assert lengths(spec) == [("max", 200, "words")]
    assert spec.hard_rules == [
        "Present the answer as a Markdown table with a header row; keep each cell short.",
        "Write the answer in German.",
        "Use at most 200 words.",
        CITE, ONLY_CONTEXT,
    ]
    assert spec.normalized_format_spec == "Markdown table, in German, at most 200 words"
    assert spec.example_shape.splitlines()[1] == "| --- | --- | --- |"


def test_table_columns(cfg):
    spec = enforce(cfg, format="Tabelle mit Spalten: Methode, Stärke und Schwäche, auf Deutsch")
    assert spec.kind == "table" and spec.language == "de"
    assert spec.names == ["Methode", "Stärke", "Schwäche"]
    assert spec.example_shape == ("| Methode | Stärke | Schwäche |\n| --- | --- | --- |\n"
                                     "| ... | ... | ... |")
    assert "Use these table columns, in this order: Methode, Stärke, Schwäche." in \
        spec.hard_rules
    assert spec.normalized_format_spec == \
        "Markdown table (Methode | Stärke | Schwäche), in German"


def test_numbered_steps(cfg):
    spec = enforce(cfg, "How do I ingest my notes?", format="numbered steps, max 5 steps")
    assert spec.kind == "numbered_list" and spec.matched == ["numbered", "steps"]
    assert lengths(spec) == [("max", 5, "items")]
    assert spec.hard_rules[:2] == [
        "Format the answer as a numbered list, one step or point per item, in order.",
        "Use at most 5 list items.",
    ]
    assert spec.example_shape == ""
    german = enforce(cfg, "Wie installiere ich das? Schritt für Schritt bitte")
    assert (german.kind, german.kind_source) == ("numbered_list", "task")


@pytest.mark.parametrize("fields, kind", [
    ({"format": "bullet points"}, "bullet_list"),
    ({"format": "Stichpunkte"}, "bullet_list"),
    ({"format": "checklist"}, "checklist"),
    ({"format": "YAML"}, "yaml"),
    ({"format": "no markdown, just prose"}, "plain_text"),
    ({"format": "Markdown with headings and a small table"}, "markdown"),
    ({"task": "Draft an email to the team about the outage"}, "email"),
    ({"constraints": "Answer as a checklist."}, "checklist"),
])
def test_kind_keywords(cfg, fields, kind):
    body = {"task": "Explain reciprocal rank fusion", **fields}
    assert enforce(cfg, **body).kind == kind


def test_code_records_the_fence_language(cfg):
    spec = enforce(cfg, "Write a function that parses dates", format="Python code")
    assert spec.kind == "code" and spec.code_language == "python"
    assert "Mark every code block with the language tag `python`." in spec.hard_rules
    assert spec.normalized_format_spec == "Code (python)"
    spec = enforce(cfg, "Write a SQL query that counts chunks per document")
    assert (spec.kind, spec.kind_source, spec.code_language) == ("code", "task", "sql")


def test_task_needs_a_stricter_cue_than_the_format_field(cfg):
    assert enforce(cfg, "Explain the schema of the users table").kind == "markdown"
    assert enforce(cfg, "List the settings as a table").kind == "table"


def test_a_default_format_from_a0_is_not_a_request(cfg):
    body = {"task": "Give the answer as a JSON object", "format": "Markdown"}
    sp = SuperPrompt(user_text=body["task"], stage="a4", body=dict(body),
                     extras={"body_sources": {"task": "user", "format": "default"}})
    spec = a5.run(sp, cfg, None).extras.format_enforcer
    assert (spec.kind, spec.kind_source) == ("json", "task")
    sp.extras.body_sources["format"] = "user"
    spec = a5.run(sp, cfg, None).extras.format_enforcer
    assert (spec.kind, spec.kind_source) == ("markdown", "format")


def test_format_field_wins_over_task(cfg):
    spec = enforce(cfg, "Show the results as a table", format="bullet list")
    assert (spec.kind, spec.kind_source) == ("bullet_list", "format")


def test_negated_keywords_do_not_count(cfg):
    spec = enforce(cfg, format="Use a table, not bullet points")
    assert spec.kind == "table"
    assert "Follow the requested format: Use a table, not bullet points." in spec.hard_rules
    spec = enforce(cfg, format="bullet points", constraints="Not in German. Do not use tables")
    assert spec.kind == "bullet_list" and spec.language == ""
    assert spec.hard_rules[1:3] == ["Not in German.", "Do not use tables."]
    assert enforce(cfg, constraints="Keine Tabelle").kind == "markdown"


def test_default_is_markdown(cfg):
    spec = enforce(cfg, "What is a chunk?")
    assert (spec.kind, spec.kind_source, spec.matched) == ("markdown", "default", [])
    assert spec.hard_rules == [
        "Format the answer in Markdown; use headings and lists only where they help.",
        CITE, ONLY_CONTEXT]
    assert spec.normalized_format_spec == "Markdown"
    assert (spec.language, spec.length, spec.example_shape) == ("", [], "")


# --------------------------------------------------------------------------- language, length


@pytest.mark.parametrize("task, language", [
    ("Summarize the paper in German", "de"),
    ("Fasse das Paper auf Deutsch zusammen", "de"),
    ("Fasse das Paper in English zusammen", "en"),
    ("Translate the abstract into French", "fr"),
    ("Summarize the paper", ""),
])
def test_answer_language(cfg, task, language):
    assert enforce(cfg, task).language == language


@pytest.mark.parametrize("text, expected", [
    ("under 200 words", [("max", 200, "words")]),
    ("max 5 bullets", [("max", 5, "items")]),
    ("at most 3 paragraphs", [("max", 3, "paragraphs")]),
    ("höchstens 100 Wörter", [("max", 100, "words")]),
    ("in 3 sentences", [("exact", 3, "sentences")]),
    ("in drei Sätzen", [("exact", 3, "sentences")]),
    ("in one sentence", [("exact", 1, "sentences")]),
    ("200 words or less", [("max", 200, "words")]),
    ("1,000 words max", [("max", 1000, "words")]),
    ("at least 2 short paragraphs", [("min", 2, "paragraphs")]),
    ("about 150 words", [("about", 150, "words")]),
    ("3 to 5 paragraphs", [("min", 3, "paragraphs"), ("max", 5, "paragraphs")]),
    ("a 300-word summary", [("max", 300, "words")]),
    ("no more than 280 characters", [("max", 280, "characters")]),
    ("one sentence per bullet", []),
    ("keep each cell under 12 words", []),
    ("released in 2024", []),
])
def test_length_limits(cfg, text, expected):
    assert lengths(enforce(cfg, constraints=text)) == expected


def test_length_rules_read_well(cfg):
    spec = enforce(cfg, "Summarize the paper in one sentence")
    assert "Use exactly 1 sentence." in spec.hard_rules
    assert spec.normalized_format_spec == "Markdown, exactly 1 sentence"


def test_repeated_limits_keep_the_tightest(cfg):
    spec = enforce(cfg, "Summarize in under 300 words", format="bullets, under 200 words",
                   constraints="max 150 words, at least 3 bullets")
    assert lengths(spec) == [("max", 150, "words"), ("min", 3, "items")]


# --------------------------------------------------------------------------- constraints


def test_constraints_are_restated_as_rules(cfg):
    spec = enforce(cfg, format="bullet points",
                   constraints="- no jargon\n- mention the constant k = 60. Keep it friendly\n"
                               "* höchstens 100 Wörter\n2) one sentence per bullet")
    assert spec.hard_rules == [
        "Format the answer as a bulleted Markdown list, one point per bullet.",
        "Use at most 100 words.",
        "No jargon.",
        "Mention the constant k = 60.",
        "Keep it friendly.",
        "One sentence per bullet.",
        CITE, ONLY_CONTEXT,
    ]


def test_semicolons_split_constraints(cfg):
    spec = enforce(cfg, constraints="under 200 words; no jargon; name the stages")
    assert spec.hard_rules[1:4] == ["Use at most 200 words.", "No jargon.", "Name the stages."]


def test_constraints_already_said_are_not_repeated(cfg):
    spec = enforce(cfg, constraints="Under 200 words. In German.")
    assert spec.hard_rules == [
        "Format the answer in Markdown; use headings and lists only where they help.",
        "Write the answer in German.",
        "Use at most 200 words.",
        CITE, ONLY_CONTEXT,
    ]


def test_format_text_with_more_detail_is_restated(cfg):
    spec = enforce(cfg, format="Markdown table, one row per stage, sorted by order")
    assert spec.hard_rules[1] == \
        "Follow the requested format: Markdown table, one row per stage, sorted by order."


@pytest.mark.parametrize("fields", [
    {},
    {"format": "JSON"},
    {"format": "table", "constraints": "no jargon"},
    {"constraints": "Do not cite anything."},
    {"format": "Python code", "constraints": "in 3 sentences"},
])
def test_citation_and_context_rules_always_close_the_list(cfg, fields):
    assert enforce(cfg, **fields).hard_rules[-2:] == [CITE, ONLY_CONTEXT]


# --------------------------------------------------------------------------- stage contract


def test_only_extras_change(cfg):
    body = {"task": "Explain RRF", "format": "JSON", "constraints": "under 100 words",
            "system": "teacher"}
    sp = SuperPrompt(user_text="Explain RRF", stage="a4", history_of_stages=["a4"],
                     body=dict(body), final_selection_ids=["c2", "c1"], S_CTX_MD="ctx [1]",
                     prompt_ready="ready", extras={"qa_log": {"path": "qa.sqlite3", "id": 7}})
    before = sp.model_copy(deep=True)
    out = a5.run(sp, cfg, None)
    assert out.body == body
    assert out.final_selection_ids == ["c2", "c1"] and out.S_CTX_MD == "ctx [1]"
    # prompt_ready is re-rendered after A5: System (role and the new rules), Prompt, context
    assert out.prompt_ready == preview(out)
    assert out.prompt_ready.startswith("## System\nYou are a teacher.\n")
    assert "- Answer with one valid JSON object" in out.prompt_ready
    assert out.prompt_ready.endswith("\nctx [1]")
    assert (out.stage, out.history_of_stages) == ("a4", ["a4"])
    assert set(out.extras.model_dump()) == {"qa_log", "format_enforcer", "agent_modes"}
    assert out.extras.agent_modes["A5_Format_Enforcer"].mode == "deterministic"
    after = out.model_dump(exclude={"extras", "prompt_ready"})
    assert after == before.model_dump(exclude={"extras", "prompt_ready"})


def test_output_validates_and_is_deterministic(cfg):
    fields = {"format": "Markdown table with columns Stage, Effect in German",
              "constraints": "under 200 words\n- no jargon"}
    first, second = enforce(cfg, **fields), enforce(cfg, **fields)
    assert first.model_dump_json() == second.model_dump_json()
    assert a5.FormatSpec.model_validate_json(first.model_dump_json()) == first
    assert list(first.model_dump()) == ["kind", "kind_source", "matched", "clamped", "code_language",
                           "language", "length", "names", "hard_rules", "example_shape",
                           "normalized_format_spec"]


def test_rerun_gives_the_same_spec(cfg):
    sp = SuperPrompt(user_text="x", stage="a4", body={"task": "x", "format": "checklist"})
    once = a5.run(sp, cfg, None)
    twice = a5.run(once.model_copy(deep=True), cfg, None)
    assert twice.extras == once.extras
    assert once.extras.format_enforcer.example_shape.startswith("- [ ] ")


def test_clamp_kind(cfg):
    agent = cfg.agents.A5_Format_Enforcer
    assert clamp_kind(agent, "JSON") == ("json", False)
    assert clamp_kind(agent, "bullet list") == ("bullet_list", False)
    assert clamp_kind(agent, "plain-text") == ("plain_text", False)
    assert clamp_kind(agent, "haiku") == ("markdown", True)
    assert clamp_kind(agent, "") == ("markdown", True)
