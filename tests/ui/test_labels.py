"""What the page and the CLI call things: one name per stage (its button label) wherever the
page or the CLI's text output names a stage, never "NLI"; each score column saying which
score it is; the stage diff opening on the first two consecutive stages that differ; the run
button disabled when it has nothing to do; the Compare tab naming only causes that differ.
Unit tests of ``ragstream.interfaces.ui`` (``views``, ``compare``) over real passes of the bundled
knowledge base, and the page itself in AppTest."""

from __future__ import annotations

import itertools
import re

import pytest
from streamlit.testing.v1 import AppTest

from ragstream.interfaces.ui import chunk_moves, editing, grids, runs_tab, views
from ragstream.interfaces.ui import state as S
from ragstream.interfaces.ui.compare import Side, compare
from ragstream.stages import STAGES, controller, staleness
from ragstream.state.super_prompt import View
from tests.ui.tabs import APP, TIMEOUT, open_tab, open_tables

PROMPT = "How are documents chunked?"
#: every stage identifier that is not its name (what the page must not show)
IDENTIFIERS = [st.name for st in STAGES if st.name != st.label]
#: a stage's name or identifier anywhere in a text
NAMED = re.compile("|".join(re.escape(n) for n in sorted(
    [*IDENTIFIERS, *(st.label for st in STAGES)], key=len, reverse=True)))


@pytest.fixture(scope="module")
def sp(kb_engine):
    return kb_engine.run(PROMPT)


def stage_words(text: str) -> list[str]:
    """The stage names and identifiers in ``text``."""
    return NAMED.findall(text)


# --------------------------------------------------------------------------- one name per stage


def test_one_table_of_names_the_button_labels():
    labels = [st.label for st in STAGES]
    assert labels == ["A0 Pre-processing", "A2 Prompt shaper", "Retrieval", "ReRanker",
                      "A3 Gate", "A4 Condenser", "A5 Format enforcer", "Prompt Builder"]
    assert len(set(labels)) == len(labels)
    assert views.STAGE_LABELS == {st.name: st.label for st in STAGES}
    assert all("NLI" not in label for label in labels)
    # the chunk views' titles are their stages' names
    assert [title for _, title in views.VIEW_STAGES] == [st.label for st in STAGES if st.view]
    assert views.stage_title(View.A3) == "A3 Gate"


def test_messages_say_the_stages_by_their_names():
    assert views.plain_names("Run A3_NLI_Gate first.") == "Run A3 Gate first."
    assert views.plain_names("Re-run Retrieval → Prompt_Builder to apply it.") == \
        "Re-run Retrieval → Prompt Builder to apply it."
    assert views.plain_names("settings changed: agents.A3_NLI_Gate") == "settings changed: A3 Gate"
    assert views.plain_names("agents.A4_Condenser.budget_tokens") == "A4 Condenser budget_tokens"
    # a chunk id, a file name or a heading path is left as it is
    for text in ("kb/x.md#A3_NLI_Gate", "a3_nli_gate.py", "What each stage does > A3_NLI_Gatex"):
        assert views.plain_names(text) == text
    for name in IDENTIFIERS:
        assert views.plain_names(f"{name} is out of date") == f"{views.stage_label(name)} is out of date"


def test_the_page_functions_name_each_stage_once(sp):
    """Buttons, re-run button, progress, history, modes, journey, diff, edit list and the
    Agents overview all say a stage's name; none says an identifier or "NLI"."""
    said = [b.label for b in views.button_states(sp)] + [b.help for b in views.button_states(sp)]
    said += [views.resume_label("Retrieval", "Prompt_Builder"),
             views.resume_help("A3_NLI_Gate", "A4_Condenser")]
    said += [views.RunProgress().stage(i, 8, st.name)[1] for i, st in enumerate(STAGES)]
    said += [views.stage_line(sp, None), views.stage_line(controller.new_prompt("x"), "A0_PreProcessing")]
    said += [r["stage"] for r in views.history_rows(sp)] + [r["component"] for r in views.mode_rows(sp)]
    some = sp.view(View.RETRIEVAL)[-1].chunk_id
    said += [f"{r['stage']} {r['reason']}" for r in chunk_moves.journey_rows(sp, some)]
    for a, b in itertools.pairwise(views.diff_stages(sp)):
        said.append(chunk_moves.diff_summary(chunk_moves.diff_rows(sp, a, b), a, b))
    said += [views.value_label(st.value, True) for st in STAGES]
    for text in said:
        assert not any(name in text for name in IDENTIFIERS), text
        assert "NLI" not in text, text
    assert views.resume_label("Retrieval", "Prompt_Builder") == "↻ Re-run Retrieval → Prompt Builder"
    assert views.stage_line(sp, None) == "Last stage run: **Prompt Builder** · pipeline complete"
    assert [r["stage"] for r in views.history_rows(sp)] == [st.label for st in STAGES]


def test_edit_list_and_banner_say_the_names(kb_engine, sp):
    dropped = next(r.chunk_id for r in sp.view(View.A3) if r.status == "dropped")
    pinned = kb_engine.resume(kb_engine.pin(sp, dropped))
    rows = editing.edit_rows(pinned)
    assert rows and all(r["stage"] in views.STAGE_LABELS.values() for r in rows)
    assert not any(name in r["note"] for r in rows for name in IDENTIFIERS)
    waiting = kb_engine.pin(sp, dropped)  # not re-run: the banner says where the edits apply
    banner = editing.out_of_date_banner(waiting, None)
    assert "from Retrieval on" in banner or any(st.label in banner for st in STAGES)
    assert not any(name in banner for name in IDENTIFIERS)


def test_the_cli_says_the_stages_by_their_names(tmp_path, kb_engine):
    from click.testing import CliRunner

    from ragstream.interfaces import cli
    from ragstream.interfaces.cli import runs as runs_commands
    from ragstream.workbench.runs import RunStore

    store = RunStore(tmp_path / "runs.sqlite3")
    run_id = store.save(kb_engine.run(PROMPT), origin="cli")
    runner = CliRunner()
    env = {"RAGSTREAM_INDEX_DIR": str(kb_engine.cfg.index_dir)}
    monkey = pytest.MonkeyPatch()
    monkey.setattr(runs_commands, "_open_runs", lambda: store)
    try:
        shown = runner.invoke(cli.main, ["runs", "show", str(run_id)], env=env)
        listed = runner.invoke(cli.main, ["runs", "list"], env=env)
    finally:
        monkey.undo()
    assert shown.exit_code == 0 and listed.exit_code == 0, (shown.output, listed.output)
    assert "Stage reached: Prompt Builder" in shown.output
    for st in STAGES:
        assert re.search(rf"^  {re.escape(st.label)}\s+\d", shown.output, re.M), st.label
    assert "Prompt Builder" in listed.output
    for text in (shown.output, listed.output):
        assert not any(name in text for name in IDENTIFIERS) and "NLI" not in text


# --------------------------------------------------------------------------- scores


def test_each_score_column_says_which_score_it_is(sp):
    labels = {}
    for stage, _ in views.VIEW_STAGES:
        columns = grids.table_columns(editing.with_marks(views.view_rows(sp, stage), sp))
        labels[stage] = {c["label"]: c["help"] for c in columns.values()
                         if c.get("type_config", {}).get("type") == "number"}
    retrieval = labels[View.RETRIEVAL]
    assert {"fused", "dense", "keyword"} <= set(retrieval) and "score" not in retrieval
    assert retrieval["fused"].startswith("fused:") and "fusion" in retrieval["fused"]
    assert retrieval["dense"].startswith("dense:") and retrieval["keyword"].startswith("keyword:")
    assert "rerank" in labels[View.RERANKED] and "rerank" in labels[View.A3]
    assert labels[View.RERANKED]["rerank"].startswith("rerank:")
    for stage, helps in labels.items():
        assert all(helps.values()), stage  # each says what it is on hover
    # the journey names each stage's score beside the number
    journey = chunk_moves.journey_rows(sp, sp.view(View.A4)[0].chunk_id)
    kinds = [row["score"].rsplit(" ", 1)[0] for row in journey if row["score"] != grids.EMPTY]
    assert kinds == ["fused", "rerank", "rerank", "best sentence"]
    assert chunk_moves.journey_columns()["score"]["help"].startswith("The score the stage ranks by")


# --------------------------------------------------------------------------- stage diff


def test_the_stage_diff_opens_on_the_first_pair_that_differs(sp):
    ran = views.diff_stages(sp)
    pair = chunk_moves.diff_default(sp)
    assert pair is not None and ran.index(pair[1]) == ran.index(pair[0]) + 1
    assert chunk_moves.stages_differ(sp, *pair)
    for a, b in itertools.pairwise(ran[: ran.index(pair[0]) + 1]):
        assert not chunk_moves.stages_differ(sp, a, b)
    moved = [r for r in chunk_moves.diff_rows(sp, *pair) if r["move"] != "="]
    assert moved  # it shows something that moved, came or went
    # a pair the person picked stays
    assert chunk_moves.diff_default(sp, View.RERANKED, View.A4) == (View.RERANKED, View.A4)


def test_the_diff_skips_pairs_that_are_the_same(sp):
    """With Retrieval and the ReRanker made to agree, the diff opens on a later pair."""
    same = sp.model_copy(deep=True)
    same.views_by_stage[View.RETRIEVAL] = [r.model_copy() for r in sp.view(View.RERANKED)]
    pair = chunk_moves.diff_default(same)
    assert pair is not None and pair[0] != View.RETRIEVAL
    assert chunk_moves.stages_differ(same, *pair)


# --------------------------------------------------------------------------- compare causes


def memory_run(base, memory: str):
    """``base`` as if Retrieval had also searched a conversation memory ``memory`` (its
    fingerprint joined to the knowledge base's), two of its candidates swapped."""
    run = base.model_copy(deep=True)
    first, second = sorted(base.view(View.RETRIEVAL), key=lambda r: r.rank)[:2]
    run.views_by_stage[View.RETRIEVAL] = [
        r.model_copy(update={"rank": second.rank}) if r.chunk_id == first.chunk_id else
        r.model_copy(update={"rank": first.rank}) if r.chunk_id == second.chunk_id else r
        for r in base.view(View.RETRIEVAL)]
    retrieval = base.computed_from["Retrieval"]
    run.computed_from["Retrieval"] = retrieval.model_copy(
        update={"kb": f"{retrieval.kb}{staleness.MEMORY_JOIN}{memory}"})
    return run


def test_compare_names_the_memory_not_the_knowledge_base(kb_engine, sp):
    a = memory_run(sp, "conversation chat-1: aaaa")
    b = memory_run(sp, "conversation chat-1: bbbb")
    b.views_by_stage[View.RETRIEVAL] = sp.view(View.RETRIEVAL)  # A swapped two, B did not
    cmp = compare(Side("run 1", a, {}, kb_engine.cfg), Side("run 2", b, {}, kb_engine.cfg))
    inputs = [r["input"] for r in cmp.inputs]
    assert inputs == ["conversation memory"]
    causes = {m["cause"] for m in cmp.moves()}
    assert causes == {"conversation memory changed"}
    assert not any("knowledge base" in c for c in causes)
    rows = runs_tab.compare_rows(cmp, View.RETRIEVAL, moved_only=True)
    assert rows and all(r["cause"] == "conversation memory changed" for r in rows)


def test_compare_names_the_knowledge_base_when_its_documents_differ(kb_engine, sp):
    a = memory_run(sp, "conversation chat-1: aaaa")
    b = memory_run(sp, "conversation chat-1: aaaa")
    b.views_by_stage[View.RETRIEVAL] = sp.view(View.RETRIEVAL)
    kb = b.computed_from["Retrieval"].kb
    b.computed_from["Retrieval"] = b.computed_from["Retrieval"].model_copy(
        update={"kb": kb.replace("@", "@other-", 1) if "@" in kb else "other " + kb})
    cmp = compare(Side("run 1", a, {}, kb_engine.cfg), Side("run 2", b, {}, kb_engine.cfg))
    assert [r["input"] for r in cmp.inputs] == ["knowledge base"]
    assert {m["cause"] for m in cmp.moves()} == {"knowledge base changed"}


def test_compare_says_the_stages_by_their_names(kb_engine, sp):
    short = kb_engine.run(PROMPT, until="ReRanker")
    cmp = compare(Side("run 1", sp, {}, kb_engine.cfg), Side("run 2", short, {}, kb_engine.cfg))
    assert {"input": "stage reached", "A": "Prompt Builder", "B": "ReRanker"} in cmp.inputs
    assert not any(name in str(r) for r in cmp.inputs for name in IDENTIFIERS)
    assert not any(name in cmp.summary() for name in IDENTIFIERS)
    setting = {"input": "setting agents.A3_NLI_Gate.min_relevance", "A": "0.2", "B": "0.3"}
    shown = runs_tab.input_rows(type("C", (), {"inputs": [setting]})())
    assert shown == [{"input": "setting A3 Gate min_relevance", "A": "0.2", "B": "0.3"}]


# --------------------------------------------------------------------------- the page


@pytest.fixture(scope="module")
def page(page_env):
    """The page after auto-run on ``PROMPT`` (answered), every chunk table open."""
    at = AppTest.from_file(APP, default_timeout=TIMEOUT).run()
    at.text_area(key=S.PROMPT).set_value(PROMPT).run()
    at.button(key="run").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert at.session_state[S.SP].answer is not None
    return at


def page_labels(at: AppTest) -> list[str]:
    """What the page says as labels: buttons (label and help), expanders' titles, tabs,
    selectboxes' labels and their options as shown, toggles, the stage line and the messages;
    not the chunks' own text (a heading may name a stage's identifier)."""
    said = [b.label for b in at.button] + [b.help or "" for b in at.button]
    said += [e.label for e in at.expander] + [t.label for t in at.tabs]
    for box in at.selectbox:
        said.append(box.label)
        if box.key in (S.DIFF_A, S.DIFF_B, S.COMPARE_STAGE, S.INSPECT_AGENT):
            said += [str(o) for o in box.options]  # as shown
    said += [t.label for t in at.toggle]
    said += [m.value for m in at.markdown if m.value.startswith(("Last stage run", "No stage run"))]
    said += [m.value for m in [*at.info, *at.warning, *at.error]]
    return said


def test_the_page_says_one_name_per_stage(page):
    at = page
    open_tables(at)
    said = page_labels(at)
    titles = [e.label for e in at.expander if " — " in e.label]
    for label in ("Retrieval", "ReRanker", "A3 Gate", "A4 Condenser"):
        assert any(t.startswith(f"{label} — ") for t in titles), titles
    for tab in ("Chunk journey", "Stage diff", "History"):
        open_tab(at, tab)
        said += page_labels(at)
        for frame in at.dataframe:
            for column in ("stage", "component"):
                if column in frame.value.columns:
                    said += [str(v) for v in frame.value[column]]
    buttons = {b.key: b.label for b in at.button if (b.key or "").startswith("stage_")}
    assert buttons == {f"stage_{st.name}": f"✓ {st.label}" for st in STAGES}
    for text in said:
        assert not any(name in text for name in IDENTIFIERS), text
        assert "NLI" not in text, text


def test_the_run_button_is_disabled_with_nothing_to_run(page):
    at = page
    run = at.button(key="run")
    assert run.disabled and run.label == "▶ Run all remaining stages"
    assert run.help.startswith("Nothing to run: every stage is current and this pass is answered")
    at.toggle(key=S.AUTO).set_value(False).run()
    run = at.button(key="run")
    assert run.disabled and run.label == "▶ Run next stage (none left)"
    assert run.help.startswith("Nothing to run: every stage is current")
    # a new prompt gives it something to do again
    at.text_area(key=S.PROMPT).set_value("How do I start a Chroma server?").run()
    run = at.button(key="run")
    assert not run.disabled and run.label == "▶ Run next stage (A0 Pre-processing)"
    at.text_area(key=S.PROMPT).set_value(PROMPT).run()
    at.toggle(key=S.AUTO).set_value(True).run()


def test_the_pickers_find_a_chunk_by_words_of_its_text(page, sp):
    at = page
    open_tab(at, "Chunk journey")
    chunk = sp.base_context_chunks[-1]
    words = chunk.text.split()
    phrase = " ".join(words[len(words) // 2: len(words) // 2 + 2])
    at.text_input(key=S.JOURNEY_SEARCH).set_value(phrase).run()
    options = at.selectbox(key=S.JOURNEY_CHUNK).options
    assert options and all(phrase.casefold() in views.chunk_labels(sp, phrase)[c].casefold()
                           or phrase.casefold() in " ".join(sp.chunk_map()[c].text.split()).casefold()
                           for c in views.matching_chunks(sp, phrase))
    assert chunk.id in views.matching_chunks(sp, phrase)
    assert any(o.startswith(chunk.id + " ") for o in options)
    at.text_input(key=S.JOURNEY_SEARCH).set_value("").run()
