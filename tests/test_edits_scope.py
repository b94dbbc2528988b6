"""Edits belong to the prompt they were made for, and a person's own text is their note: on
real pipeline runs over the bundled knowledge base (Python), and through the CLI."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ragstream.answering.answer import extractive_pieces, extractive_statements
from ragstream.interfaces.ui import editing, evidence
from ragstream.state.edits import statement_key
from ragstream.state.super_prompt import SuperPrompt

ROOT = Path(__file__).resolve().parent.parent
#: the gate drops kb/troubleshooting.md#8 for this question ("off-topic"); pinned, it leads
PROMPT = "Where can I see how many milliseconds each stage took?"
PINNED = "kb/troubleshooting.md#8"
OTHER = "How do I start a Chroma server?"
NOTE = "The stage timings are printed by a tool nobody documented."


@pytest.fixture(scope="module")
def edited(kb_engine) -> SuperPrompt:
    """PROMPT's pass with the person's pin and a field set by hand, run through."""
    sp = kb_engine.run(PROMPT)
    return kb_engine.resume(kb_engine.set_field(kb_engine.pin(sp, PINNED), "tone", "formal"))


def pinned_by_you(sp: SuperPrompt) -> set[str]:
    return {r.chunk_id for r in sp.view("a4") if r.decided_by == "you"}


def test_a_new_prompt_starts_without_the_edits_of_the_last_one(kb_engine, edited):
    assert edited.final_selection_ids[0] == PINNED and pinned_by_you(edited) == {PINNED}
    sp = kb_engine.run(OTHER)
    assert sp.edits == [] and not pinned_by_you(sp)
    assert sp.body["tone"] != "formal" or sp.extras.body_sources.get("tone") != "you"
    assert sp.extras.edit_outcomes == {}


def test_carrying_the_edits_over_is_an_explicit_choice_and_says_where_they_came_from(
        kb_engine, edited):
    sp = kb_engine.run(OTHER, edits_from=edited)
    assert [(e.kind, e.target, e.after) for e in sp.edits] == [
        (e.kind, e.target, e.after) for e in edited.edits]
    assert {e.carried_from for e in sp.edits} == {PROMPT}
    assert sp.final_selection_ids[0] == PINNED and pinned_by_you(sp) == {PINNED}
    assert sp.body["tone"] == "formal" and sp.extras.body_sources["tone"] == "you"

    # on a state of its own: this prompt's own decision on a slot stands, the rest are added
    own = kb_engine.set_field(kb_engine.new(OTHER), "tone", "friendly")
    both = kb_engine.carry_edits(own, edited)
    assert [(e.id, e.kind, e.target, e.after, e.carried_from) for e in both.edits] == [
        (1, "field", "tone", "friendly", None), (2, "pin", PINNED, "pin", PROMPT)]
    # carried twice, an edit keeps the prompt it was first made for
    again = kb_engine.carry_edits(kb_engine.new("A third prompt"), both)
    assert [e.carried_from for e in again.edits] == [OTHER, PROMPT]


def test_a_rewritten_statement_is_your_note_never_a_cited_source(kb_engine, edited):
    target = edited.extras.a4.condensed[0]
    sp = kb_engine.resume(kb_engine.edit_statement(edited, statement_key(target), NOTE))
    mine = next(s for s in sp.extras.a4.condensed if s.text == NOTE)
    assert mine.by_you
    assert f"- Your note: {NOTE}\n" in sp.prompt_ready
    assert not re.search(re.escape(NOTE) + r" *\[\d", sp.prompt_ready)  # no [n] after it
    # the extractive answer never states it, nor cites anything for it
    assert NOTE not in "".join(extractive_pieces(sp, kb_engine.cfg.settings.answer))
    assert all(not s.by_you for s in extractive_statements(sp, kb_engine.cfg.settings.answer))
    done, ans = kb_engine.answer(sp)
    assert NOTE not in ans.text and ans.sources
    # the page's lists say whose it is; the evidence links never tie it to a source
    item = next(i for i in editing.statement_items(sp) if i.text == NOTE)
    assert item.label.startswith("you: your note, not cited")
    assert NOTE not in [link.text for link in evidence.condensed_links(sp)]
    # a rule the person wrote is an instruction: A5 applies it, and the list says "you"
    ruled = kb_engine.resume(kb_engine.add_rule(sp, "Name the stage you mean."))
    assert "- Name the stage you mean." in ruled.prompt_ready.split("## Prompt")[0]
    rule = next(i for i in editing.rule_items(ruled) if i.text == "Name the stage you mean.")
    assert rule.label.startswith("you")
    assert {r["made for"] for r in editing.edit_rows(ruled)} == {"this prompt"}


def test_a_note_you_add_is_listed_as_yours_and_never_cited(kb_engine, edited):
    added = "Our staging cluster runs the ReRanker on CPU only."
    sp = kb_engine.resume(kb_engine.add_note(edited, added))
    assert sp.edits[-1].describe() == f"note added: {added!r}"
    note = sp.extras.a4.condensed[-1]
    assert (note.text, note.chunk_ids, note.by_you) == (added, [], True)
    assert f"- Your note: {added}\n" in sp.S_CTX_MD
    assert added not in "".join(extractive_pieces(sp, kb_engine.cfg.settings.answer))
    assert next(i for i in editing.statement_items(sp) if i.text == added).label == (
        "you: your note, not cited")
    # it can be removed like any statement, by its key
    gone = kb_engine.resume(kb_engine.remove_statement(sp, statement_key(note)))
    assert added not in gone.S_CTX_MD and "Your note" not in gone.S_CTX_MD


def cli(*args, index_dir: Path, check=True):
    env = {**os.environ, "RAGSTREAM_INDEX_DIR": str(index_dir)}
    return subprocess.run([sys.executable, "-m", "ragstream", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600, check=check)


def test_the_cli_carries_a_kept_runs_edits_only_when_asked(tmp_path):
    kb, idx = tmp_path / "kb", tmp_path / "idx"  # its own index: its run history is its own
    kb.mkdir()
    for name in ("troubleshooting.md", "chroma-server-mode.md"):
        (kb / name).write_text((ROOT / "data" / "kb" / name).read_text())
    cli("ingest", str(kb), index_dir=idx)
    first = cli("run", PROMPT, "--no-sync", "--pin", PINNED, "--until", "A4_Condenser",
                index_dir=idx)
    run_id = int(re.search(r"run (\d+) saved", first.stderr).group(1))

    plain = json.loads(cli("run", OTHER, "--json", "--no-sync", "--no-save",
                           index_dir=idx).stdout)
    assert plain["edits"] == []
    assert all(r["decided_by"] != "you" for r in plain["views_by_stage"]["a4"])

    carried = cli("run", OTHER, "--json", "--no-sync", "--no-save", "--edits-from", str(run_id),
                  index_dir=idx)
    sp = json.loads(carried.stdout)
    assert [(e["kind"], e["target"], e["carried_from"]) for e in sp["edits"]] == [
        ("pin", PINNED, PROMPT)]
    assert sp["final_selection_ids"][0] == PINNED
    said = cli("run", OTHER, "--no-sync", "--no-save", "--edits-from", str(run_id),
               "--until", "A0_PreProcessing", index_dir=idx).stderr
    assert f"edit 1: pin {PINNED} (made for “{PROMPT}”)" in said

    missing = cli("run", OTHER, "--no-sync", "--no-save", "--edits-from", "99999",
                  index_dir=idx, check=False)
    assert missing.returncode == 2 and "99999" in missing.stderr
