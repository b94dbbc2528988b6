"""A0_PreProcessing: header detection, the mapping ladder, MUST rules, determinism."""

from __future__ import annotations

import json

import pytest

from ragstream.backends.services import Services
from ragstream.common.config import load_config
from ragstream.common.errors import ConfigError, EmptyPromptError, PromptTooLongError
from ragstream.common.prompt_schema import PromptSchema
from ragstream.stages import a0_preprocessing as a0
from ragstream.stages.a0.ladder import edit_distance, map_label
from ragstream.stages.a0.vocabulary import Vocabulary
from ragstream.state.records import UnknownAttribute
from ragstream.state.super_prompt import Chunk, SuperPrompt, ViewRow


@pytest.fixture(scope="module")
def cfg():
    return load_config()


@pytest.fixture(scope="module")
def vocab(cfg):
    return Vocabulary.from_schema(cfg.prompt_schema)


def run_a0(cfg, text: str) -> SuperPrompt:
    return a0.run(SuperPrompt(user_text=text), cfg, None)


def decision(sp: SuperPrompt, label: str) -> dict:
    found = [d for d in sp.extras.a0_decisions if d.label == label]
    assert len(found) == 1, f"expected one decision for {label!r}, got {found}"
    return found[0]


# --------------------------------------------------------------------------- plain prompts


def test_plain_prompt_is_the_task(cfg):
    sp = run_a0(cfg, "  How does the ReRanker choose its backend?\n")
    assert sp.body == {"task": "How does the ReRanker choose its backend?", "format": "Markdown"}
    assert sp.extras.body_sources == {"task": "user", "format": "default"}
    assert sp.extras.a0_decisions == []
    assert sp.extras.normalized_map == {}
    assert sp.extras.unknown_attributes == []
    assert [r.rule for r in sp.extras.a0_rules] == ["preamble_is_task", "default"]
    assert sp.prompt_ready == (
        "## System\n\n## Prompt\n\n### Task\nHow does the ReRanker choose its backend?"
        "\n\n### Format\nMarkdown\n"
    )


def test_sentences_with_colons_are_not_headers(cfg):
    text = ("The reason is simple: the index is stale.\n"
            "I tried the following approach yesterday: rebuilding it.\n"
            "Note: it took an hour.\n"
            "See http://example.org/x for details.")
    sp = run_a0(cfg, text)
    assert sp.body["task"] == text
    assert sp.extras.unknown_attributes == []
    assert sp.extras.normalized_map == {}
    # the short plain labels were considered, and kept as text
    assert decision(sp, "The reason is simple").header is False
    assert decision(sp, "Note").key is None
    assert "kept as text" in decision(sp, "Note").detail
    assert len(sp.extras.a0_decisions) == 2  # the 6-word label is not even a candidate


# --------------------------------------------------------------------------- the ladder


def test_exact_rung(cfg):
    sp = run_a0(cfg, "Task: Summarise the paper.\nContext: It is about RAG.\nFormat: JSON")
    assert sp.body == {"task": "Summarise the paper.", "context": "It is about RAG.",
                       "format": "JSON"}
    assert [(d.label, d.key, d.rung) for d in sp.extras.a0_decisions] == [
        ("Task", "task", "exact"), ("Context", "context", "exact"), ("Format", "format", "exact"),
    ]
    assert sp.extras.body_sources == {"task": "user", "context": "user", "format": "user"}
    assert sp.extras.normalized_map == {"Task": "task", "Context": "context",
                                           "Format": "format"}


def test_alias_rung(cfg):
    sp = run_a0(cfg, "Question: Which embedder is used?\nGoal: pick a model\n"
                     "Background: we run offline\nOutput format: a table\n"
                     "Target audience: engineers\nStyle: dry\nLevel of detail: high\n"
                     "Persona: a librarian\nRules: cite sources\nSource text: abc")
    assert sp.body == {
        "system": "a librarian",
        "task": "Which embedder is used?",
        "audience": "engineers",
        "tone": "dry",
        "depth": "high",
        "context": "we run offline",
        "purpose": "pick a model",
        "format": "a table",
        "constraints": "cite sources",
        "text": "abc",
    }
    rungs = {d.label: d.rung for d in sp.extras.a0_decisions}
    assert set(rungs.values()) == {"alias"}
    assert decision(sp, "Goal").detail == "alias 'goal' of 'purpose'"


def test_typo_rung(cfg):
    sp = run_a0(cfg, "Taks: explain BM25\nContxt: for a blog post")
    assert sp.body["task"] == "explain BM25"
    assert sp.body["context"] == "for a blog post"
    contxt = decision(sp, "Contxt")
    assert (contxt.key, contxt.rung) == ("context", "typo")
    assert contxt.detail == "edit distance 1 to 'context'"
    taks = decision(sp, "Taks")
    assert (taks.key, taks.rung, taks.detail) == ("task", "typo",
                                                            "edit distance 1 to 'task'")


def test_typo_rung_spares_short_labels_and_real_words(vocab):
    assert map_label("Note", vocab).key is None     # two edits from "tone"; 1 allowed
    assert map_label("Next", vocab).key is None     # excluded real word ("text")
    assert map_label("Test", vocab).key is None
    assert map_label("Tsk", vocab).key is None      # shorter than min_typo_label_chars
    long_typo = map_label("Backgrund informaton", vocab)
    assert (long_typo.key, long_typo.rung) == ("context", "typo")
    assert long_typo.detail == "edit distance 2 to 'background information'"


def test_edit_distance_counts_a_swap_as_one_edit():
    assert edit_distance("taks", "task") == 1
    assert edit_distance("contxt", "context") == 1
    assert edit_distance("note", "tone") == 2
    assert edit_distance("", "abc") == 3
    assert edit_distance("same", "same") == 0


def test_edit_distance_past_its_limit_is_limit_plus_one():
    assert edit_distance("context", "constraints", limit=2) == 3
    assert edit_distance("contxt", "context", limit=2) == 1


def test_bilingual_rung(cfg):
    sp = run_a0(cfg, "Aufgabe: Fasse den Text zusammen.\nHintergrund: Es geht um RAG.\n"
                     "Zielgruppe: Studierende\nEinschränkungen: höchstens 100 Wörter")
    assert sp.body == {
        "task": "Fasse den Text zusammen.",
        "audience": "Studierende",
        "context": "Es geht um RAG.",
        "format": "Markdown",
        "constraints": "höchstens 100 Wörter",
    }
    aufgabe = decision(sp, "Aufgabe")
    assert (aufgabe.key, aufgabe.rung) == ("task", "bilingual")
    assert aufgabe.detail == "de word 'aufgabe' for 'task'"
    assert decision(sp, "Hintergrund").rung == "bilingual"
    assert decision(sp, "Einschränkungen").normalized == "einschrankungen"


def test_template_rung(cfg):
    sp = run_a0(cfg, "What I need: a one-page summary\nThe goal is: onboarding new staff\n"
                     "Please act as: a senior data engineer")
    assert sp.body["task"] == "a one-page summary"
    assert sp.body["purpose"] == "onboarding new staff"
    assert sp.body["system"] == "a senior data engineer"
    need = decision(sp, "What I need")
    assert (need.key, need.rung) == ("task", "template")
    assert need.detail == "phrase template 'what i need' for 'task'"


def test_keyword_rung(cfg):
    sp = run_a0(cfg, "Task: write the report\nHard deadline: Friday\nProject background: v2\n"
                     "Format requirements: no tables")
    assert sp.body["context"] == "v2"
    assert sp.body["constraints"] == "Friday\n\nno tables"
    deadline = decision(sp, "Hard deadline")
    assert (deadline.key, deadline.rung) == ("constraints", "keyword")
    assert deadline.detail == "keyword 'deadline' for 'constraints'"
    # two cues: the one ending last (the head noun) wins
    assert decision(sp, "Format requirements").key == "constraints"


def test_unknown_formatted_headers_are_kept_in_extras(cfg):
    sp = run_a0(cfg, "Task: plan the migration\n## Remarks\nowner is Ana\n"
                     "**Owner:** finance\n**Misc:**\nnothing")
    assert sp.body == {"task": "plan the migration", "format": "Markdown"}
    assert [u.model_dump() for u in sp.extras.unknown_attributes] == [
        {"label": "Remarks", "value": "owner is Ana"},
        {"label": "Owner", "value": "finance"},
        {"label": "Misc", "value": "nothing"},
    ]
    remarks = decision(sp, "Remarks")
    assert (remarks.key, remarks.rung, remarks.header) == (None, "unknown", True)
    assert sp.extras.normalized_map == {"Task": "task", "Remarks": None, "Owner": None,
                                           "Misc": None}
    assert "finance" not in sp.prompt_ready  # unknown attributes stay out of the body


def test_every_schema_term_maps_to_its_own_key(cfg, vocab):
    schema = cfg.prompt_schema
    tables = [schema.aliases, schema.templates, schema.keyword_cues, *schema.bilingual.values()]
    wrong = [(term, key, map_label(term, vocab).key)
             for table in tables for key, terms in table.items() for term in terms
             if map_label(term, vocab).key != key]
    assert wrong == []


# --------------------------------------------------------------------------- header styles


def test_markdown_heading_and_bold_headers(cfg):
    text = ("# Thesis helper\n"
            "## 1. Task\nCompare BM25 and dense retrieval.\n\nKeep it fair.\n"
            "### Audience ###\nstudents\n"
            "**Tone:** neutral\n"
            "**Purpose**: a lecture\n"
            "__Depth__\nintroductory\n"
            "CONSTRAINTS - under 300 words\n"
            "## Format: bullet list")
    sp = run_a0(cfg, text)
    assert sp.body == {
        "task": "Compare BM25 and dense retrieval.\n\nKeep it fair.",
        "audience": "students",
        "tone": "neutral",
        "depth": "introductory",
        "purpose": "a lecture",
        "format": "bullet list",
        "constraints": "under 300 words",
    }
    styles = {d.label: d.style for d in sp.extras.a0_decisions}
    assert styles == {"Thesis helper": "heading", "Task": "heading", "Audience": "heading",
                      "Tone": "bold", "Purpose": "bold", "Depth": "bold",
                      "CONSTRAINTS": "plain", "Format": "heading"}
    assert sp.extras.unknown_attributes == [UnknownAttribute(label="Thesis helper", value="")]


def test_bold_emphasis_and_long_headings_are_text(cfg):
    text = "**Important** remember the index.\n## How the ReRanker picks its backend\nexplain"
    sp = run_a0(cfg, text)
    assert sp.body["task"] == text
    assert sp.extras.a0_decisions == []


def test_fenced_code_is_never_parsed(cfg):
    text = "Task: fix this config\nText:\n```\nContext: not a header\n## Format\n```\n"
    sp = run_a0(cfg, text)
    assert sp.body["text"] == "```\nContext: not a header\n## Format\n```"
    assert "context" not in sp.body
    assert [d.label for d in sp.extras.a0_decisions] == ["Task", "Text"]


def test_fenced_code_with_a_longer_fence_is_never_parsed(cfg):
    # a ```` fence holds ``` lines; the ## Task inside it is code, not a header
    text = "Task: explain this\n````md\n```\n## Task\nContext: no\n```\n````\nAudience: devs"
    sp = run_a0(cfg, text)
    assert sp.body["task"] == "explain this\n````md\n```\n## Task\nContext: no\n```\n````"
    assert sp.body["audience"] == "devs"
    assert [(d.label, d.line) for d in sp.extras.a0_decisions] == [("Task", 1), ("Audience", 8)]


def test_indented_code_is_never_parsed(cfg):
    text = "Task: fix the snippet\n\n    ## Task\n    Context: inside code\n\nAudience: devs"
    sp = run_a0(cfg, text)
    assert sp.body["task"] == "fix the snippet\n\n    ## Task\n    Context: inside code"
    assert "context" not in sp.body
    assert [(d.label, d.line) for d in sp.extras.a0_decisions] == [("Task", 1), ("Audience", 6)]


def test_setext_headings_are_headers(cfg):
    text = ("Task\n====\nExplain RRF.\n\n"
            "Context\n-------\nWe run SciFact.\n\n"
            "Format: a table\n---\n"
            "Audience: students")
    sp = run_a0(cfg, text)
    assert sp.body == {"task": "Explain RRF.", "audience": "students",
                       "context": "We run SciFact.", "format": "a table"}
    assert [(d.label, d.key, d.style, d.line) for d in sp.extras.a0_decisions] == [
        ("Task", "task", "heading", 1),        # level 1: ====
        ("Context", "context", "heading", 5),  # level 2: ----
        ("Format", "format", "heading", 9),    # "Label: value" over ---, as "## Format: ..."
        ("Audience", "audience", "plain", 11),
    ]


def test_setext_heading_over_several_lines_keeps_their_breaks(cfg):
    # CommonMark reads the whole paragraph above --- as the heading; its value keeps its lines
    sp = run_a0(cfg, "Context: We run Chroma.\nIt is slow.\n---\nTask: fix it")
    assert sp.body["context"] == "We run Chroma.\nIt is slow."
    assert (decision(sp, "Context").style, decision(sp, "Context").line) == ("heading", 1)


def test_long_setext_heading_stays_text(cfg):
    text = "We back up the Chroma folder every night.\n---\nTask: check the backups"
    sp = run_a0(cfg, text)
    assert sp.body["context"] == "We back up the Chroma folder every night.\n---"
    assert [d.label for d in sp.extras.a0_decisions] == ["Task"]


def test_titled_prompt_with_a_setext_title_is_the_task(cfg):
    text = "Chroma backups\n==============\nHow do I back up the Chroma folder?"
    sp = run_a0(cfg, text)
    assert sp.body["task"] == text
    assert sp.extras.a0_rules[0].rule == "unknown_headers_as_text"
    assert (decision(sp, "Chroma backups").header, decision(sp, "Chroma backups").line) == (
        False, 1)


def test_heading_inside_a_list_item_or_quote_is_text(cfg):
    # A heading in a list item (or a quote) structures that item, e.g. pasted notes or an
    # outline; A0's sections are the prompt's top-level parts, so it stays the item's text.
    text = ("Task: summarise the notes\n\n"
            "- ## Context\n  notes from the meeting\n- second item\n\n"
            "1. Intro\n\n   ## Audience\n   managers\n\n"
            "> ## Tone\n> upset")
    sp = run_a0(cfg, text)
    assert sp.body["task"] == text.removeprefix("Task: ")
    assert set(sp.body) == {"task", "format"}
    assert [d.label for d in sp.extras.a0_decisions] == ["Task"]


def test_repeated_headers_join_with_a_blank_line(cfg):
    sp = run_a0(cfg, "Task: first\nContext: a\nTask: second\nBackground: b")
    assert sp.body["task"] == "first\n\nsecond"
    assert sp.body["context"] == "a\n\nb"


def test_text_before_the_first_header(cfg):
    no_task = run_a0(cfg, "Explain RRF to me.\nAudience: managers")
    assert no_task.body["task"] == "Explain RRF to me."
    assert no_task.extras.a0_rules[0].rule == "preamble_is_task"

    with_task = run_a0(cfg, "We index 5,000 abstracts.\nTask: choose k for RRF\nContext: SciFact")
    assert with_task.body["task"] == "choose k for RRF"
    assert with_task.body["context"] == "We index 5,000 abstracts.\n\nSciFact"
    assert with_task.extras.body_sources["context"] == "user"

    only_preamble = run_a0(cfg, "We index 5,000 abstracts.\nTask: choose k")
    assert only_preamble.body["context"] == "We index 5,000 abstracts."
    assert only_preamble.extras.body_sources["context"] == "derived"


def test_titled_prompt_without_known_headers_is_the_task(cfg):
    text = "# Chroma backups\nHow do I back up the Chroma folder?"
    sp = run_a0(cfg, text)
    assert sp.body["task"] == text
    assert sp.extras.unknown_attributes == []
    assert sp.extras.a0_rules[0].rule == "unknown_headers_as_text"
    assert decision(sp, "Chroma backups").header is False


# --------------------------------------------------------------------------- MUST rules


def test_task_from_the_last_question_of_the_context(cfg):
    sp = run_a0(cfg, "Context: We run Chroma. Is it safe? How do I back it up? Thanks.")
    assert sp.body["task"] == "How do I back it up?"
    assert sp.body["context"] == "We run Chroma. Is it safe? Thanks."
    assert sp.extras.body_sources["task"] == "derived"
    assert sp.extras.body_sources["context"] == "user"
    assert sp.extras.a0_rules[0].rule == "task_from_context_question"


def test_task_from_the_whole_context_without_a_question(cfg):
    sp = run_a0(cfg, "Hintergrund: Wir nutzen Chroma.\nFormat: Tabelle")
    assert sp.body == {"task": "Wir nutzen Chroma.", "format": "Tabelle"}
    assert sp.extras.body_sources == {"task": "derived", "format": "user"}
    assert sp.extras.a0_rules[0].rule == "task_from_context"


@pytest.mark.parametrize("text", ["", "   \n\t", "Format: JSON", "Task:\nContext:\n"])
def test_no_task_and_no_context_is_an_empty_prompt(cfg, text):
    with pytest.raises(EmptyPromptError):
        run_a0(cfg, text)


def test_too_long_prompt(cfg):
    limit = cfg.settings.prompt.max_prompt_chars
    with pytest.raises(PromptTooLongError) as err:
        run_a0(cfg, "x" * (limit + 1))
    assert f"{limit + 1} characters" in str(err.value)
    assert run_a0(cfg, "y" * limit).body["task"] == "y" * limit


def test_defaults_fill_must_keys_only(cfg):
    sp = run_a0(cfg, "Task: list the stages")
    assert sp.body["format"] == cfg.prompt_schema.defaults["format"] == "Markdown"
    assert sp.extras.body_sources == {"task": "user", "format": "default"}
    assert [r.model_dump() for r in sp.extras.a0_rules or []] == [{
        "rule": "default", "key": "format",
        "detail": "MUST key 'format' was empty: default 'Markdown'",
    }]
    assert set(sp.body) == {"task", "format"}  # no other keys invented


# --------------------------------------------------------------------------- state


def test_snapshot_mode_and_semantic_flag(cfg):
    sp = run_a0(cfg, "Task: a\nTone: b")
    assert sp.extras.a0_body == sp.body
    assert sp.extras.a0_body is not sp.body
    assert sp.extras.semantic_used is False
    assert sp.extras.agent_modes["A0_PreProcessing"].model_dump() == {
        "mode": "deterministic", "reason": "prompt_schema.modes.semantic_enabled is false",
    }


def test_semantic_mode_without_an_llm_or_unknown_labels_stays_deterministic(cfg):
    # The LLM path itself is tested against a real HTTP server in
    # tests/stages/test_agents_llm_a0_a2_a5.py.
    schema = cfg.prompt_schema.model_copy(update={"modes": {"semantic_enabled": True}})
    semantic_cfg = cfg.model_copy(update={"prompt_schema": schema})
    offline = a0.run(SuperPrompt(user_text="## Remarks\nx\nTask: y"), semantic_cfg, None)
    assert offline.extras.agent_modes["A0_PreProcessing"].model_dump() == {
        "mode": "deterministic", "reason": "no LLM endpoint configured",
    }
    assert offline.extras.semantic_used is False
    assert offline.extras.unknown_attributes == [UnknownAttribute(label="Remarks", value="x")]
    # every label mapped by the ladder: the LLM is not asked (this client would crash if it were)
    known = a0.run(SuperPrompt(user_text="Task: y\nTone: calm"), semantic_cfg,
                   Services(llm=object()))
    mode = known.extras.agent_modes["A0_PreProcessing"]
    assert mode.mode == "deterministic"
    assert mode.reason.startswith("no unknown headers")
    assert known.extras.semantic_used is False
    assert not known.extras.llm_usage
    assert known.body == run_a0(cfg, "Task: y\nTone: calm").body


def test_deterministic_and_rerun_identical(cfg):
    text = ("Intro line.\n## Task\nCompare two rerankers?\n**Audiance:** analysts\n"
            "Hard deadline: Monday\n## Remarks\nnone\nZiel: Entscheidung")
    first = run_a0(cfg, text).model_dump_json()
    second = run_a0(cfg, text).model_dump_json()
    assert first == second
    rerun = a0.run(SuperPrompt.model_validate_json(first), cfg, None).model_dump_json()
    assert rerun == first
    extras = json.loads(first)["extras"]
    assert list(extras) == ["a0_decisions", "normalized_map", "unknown_attributes", "a0_rules",
                            "body_sources", "semantic_used", "agent_modes", "a0_body",
                            "a0_sources"]


def test_stage_fields_and_retrieval_fields_untouched(cfg):
    chunk = Chunk(id="c1", doc_id="d1", text="BM25 is a ranking function.", source="a.md")
    sp = SuperPrompt(
        user_text="Task: explain BM25",
        stage="raw",
        history_of_stages=["x"],
        base_context_chunks=[chunk],
        views_by_stage={"retrieval": [ViewRow(chunk_id="c1", rank=1, score=0.5)]},
        final_selection_ids=["c1"],
        extras={"qa_log": {"path": "qa.sqlite3", "id": 7}},
    )
    before = sp.model_dump(include={"stage", "history_of_stages", "base_context_chunks",
                                    "views_by_stage", "final_selection_ids", "user_text"})
    out = a0.run(sp, cfg, None)
    after = out.model_dump(include=set(before))
    assert after == before
    assert out.extras.qa_log is not None and out.extras.qa_log.id == 7


# --------------------------------------------------------------------------- the schema


def _schema_data(cfg) -> dict:
    return json.loads((cfg.config_dir / "prompt_schema.json").read_text(encoding="utf-8"))


def test_shipped_schema_validates(cfg):
    schema = PromptSchema.model_validate(_schema_data(cfg))
    assert schema.canonical_keys == ["system", "task", "audience", "tone", "depth", "context",
                                     "purpose", "format", "constraints", "text"]
    assert schema.max_typo_edits == 2


@pytest.mark.parametrize("change, message", [
    ({"must_keys": ["task", "tone"]}, "need a non-empty value in defaults"),
    ({"must_keys": ["format"]}, "must_keys must include 'task'"),
    ({"aliases": {"task": ["goal"], "purpose": ["Goal"]}}, "maps to both"),
    ({"aliases": {"task": ["context"]}}, "maps to both"),
    ({"keyword_cues": {"mood": ["x"]}}, "not canonical keys"),
    ({"templates": {"task": ["one two three four five"]}}, "could never match"),
    ({"colour": "blue"}, "Extra inputs"),
])
def test_schema_rejects_inconsistent_vocabulary(cfg, change, message):
    data = {**_schema_data(cfg), **change}
    with pytest.raises(ValueError, match=message):
        PromptSchema.model_validate(data)


def test_bad_schema_file_is_a_config_error(cfg, tmp_path):
    import shutil

    shutil.copytree(cfg.config_dir, tmp_path / "config")
    path = tmp_path / "config" / "prompt_schema.json"
    path.write_text(json.dumps({**_schema_data(cfg), "defaults": {"nope": "x"}}), "utf-8")
    with pytest.raises(ConfigError, match="prompt_schema.json"):
        load_config(tmp_path / "config", env={})
