"""The result tabs that look beyond the page's pass: Runs (the kept runs to open, compare or
download; a file opened as a run; the Q&A log), Compare (two kept runs side by side) and Eval
(answer and retrieval quality on a question set, with the file's settings and the
session's)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from ragstream.common.errors import RagstreamError
from ragstream.interfaces.ui import actions, eval_tab, grids, runs_tab, views
from ragstream.interfaces.ui import state as S
from ragstream.interfaces.ui.page import Page
from ragstream.interfaces.ui.widgets import table, whole_on_hover


def draw_runs(page: Page) -> None:
    """The kept runs, newest first, searchable by prompt: open one, compare it with the page's
    run, download it; the page's run downloaded; a JSON file opened as a run; the Q&A log."""
    engine, state = page.engine, page.state
    store = engine.runs()
    c1, c2 = st.columns([2, 1], vertical_alignment="bottom")
    query = c1.text_input("Search the runs by their prompt", key=S.RUNS_SEARCH,
                          placeholder="e.g. near-duplicate")
    mine = c2.toggle("This session's runs only", key=S.RUNS_MINE,
                     help="The runs made on this page since it was opened (a reload keeps them).")
    try:
        listed = store.list(runs_tab.LISTED, search=query,
                            session=state[S.SESSION] if mine else None)
        total = store.count()
    except RagstreamError as err:
        st.error(f"The run history cannot be shown ({err.kind}): {err}")
        return
    st.caption(f"{total} runs kept in `{store.path}` (the newest {store.keep}; older ones are "
               f"pruned). Every pass is kept as it runs; pick a row to open or compare it.")
    if not listed:
        st.caption("No run holds that text in its prompt." if query.strip() else
                   "No runs yet: run a stage and it is kept here.")
    else:
        drawn = grids.grid(runs_tab.run_rows(listed, state[S.RUN_ID]), runs_tab.run_columns(),
                           total=runs_tab.RUNS_TABLE_WIDTH, lines=grids.TABLE_LINES,
                           most_height=runs_tab.RUNS_TABLE_MAX_HEIGHT)
        shown = st.dataframe(pd.DataFrame(drawn.rows),
                             key=f"runs_table_{query}_{mine}", on_select="rerun",
                             selection_mode="single-row", hide_index=True, width="stretch",
                             column_config=drawn.columns, row_height=drawn.row_height,
                             height=drawn.height)
        whole_on_hover(drawn)
        picked = shown.selection.rows
        if picked:
            chosen = listed[picked[0]]
            st.markdown(runs_tab.run_summary(chosen))
            b1, b2, b3 = st.columns(3)
            b1.button(f"Open run {chosen.id}", key="open_run", type="primary", width="stretch",
                      icon=":material/open_in_browser:",
                      help="Show this run on the page: its prompt, settings, filters, edits, "
                           "stages and answer. Running on from it makes a new run, linked to it.",
                      on_click=page.do, args=(runs_tab.open_run, chosen.id))
            b2.button(f"Compare run {chosen.id} with the page's", key="compare_run",
                      width="stretch", icon=":material/compare_arrows:",
                      disabled=state[S.RUN_ID] in (None, chosen.id),
                      help="Open the Compare tab with this run as A and the page's run as B.",
                      on_click=runs_tab.compare_with, args=(state, chosen.id))
            b3.download_button("Download as JSON", runs_tab.export_text(engine, chosen.id),
                               file_name=f"run-{chosen.id}.json", mime="application/json",
                               key="download_run", width="stretch", icon=":material/download:")
    draw_export(page)
    upload = st.file_uploader("Open a run from a JSON file (a SuperPrompt downloaded here, or "
                              "`ragstream runs export ID`)", type=["json"],
                              key=f"run_file_{state[S.EDIT_NONCE]}")
    if upload is not None:
        st.button(f"Open {upload.name} as a run", key="open_run_file",
                  on_click=page.do, args=(runs_tab.open_file, upload.name, upload.getvalue()))
    draw_log(page)


def draw_export(page: Page) -> None:
    """Downloads of the page's run: the SuperPrompt (the file a run opens from) and
    prompt_ready."""
    sp, stale = page.sp, page.stale
    c1, c2 = st.columns(2)
    c1.download_button("Download this run's SuperPrompt (JSON)", sp.to_json(),
                       file_name="superprompt.json", mime="application/json", key="export_json",
                       width="stretch", icon=":material/download:")
    old = stale is not None and bool(sp.prompt_ready)  # never offered as the current one
    c2.download_button("Download the out-of-date prompt_ready (Markdown)" if old else
                       "Download prompt_ready (Markdown)", sp.prompt_ready or "",
                       file_name="prompt_ready-out-of-date.md" if old else "prompt_ready.md",
                       mime="text/markdown", key="export_md", disabled=not sp.prompt_ready,
                       width="stretch", icon=":material/history:" if old else ":material/download:",
                       help=views.stale_label(stale, "run the stages again for the current one")
                       if stale is not None and old else None)


def draw_log(page: Page) -> None:
    """The Q&A log's latest interactions, folded under the runs."""
    engine = page.engine
    try:
        log = engine.qa_log()
        with st.expander(f"Q&A log — {log.count()} interactions logged in `{engine.qa_log_path}`"):
            table(views.log_rows(log.recent(50)), key="qa_log")
    except RagstreamError as err:
        st.error(f"The Q&A log cannot be shown ({err.kind}): {err}")


def draw_compare(page: Page) -> None:
    """Two kept runs side by side (by default the page's run and the one before it): the
    inputs that differ, every chunk's rank and status in both at each stage with the cause of
    each move, the rank chart of both, the final selections, prompt_ready as a diff and the
    two answers with their sources."""
    engine, state = page.engine, page.state
    store = engine.runs()
    try:
        listed = store.list(runs_tab.LISTED)
        pair = runs_tab.compare_default(store, state[S.RUN_ID], state[S.COMPARE_A],
                                        state[S.COMPARE_B], listed)
    except RagstreamError as err:
        st.error(f"The run history cannot be read ({err.kind}): {err}")
        return
    if pair is None:
        st.caption("Two runs are needed: run a stage, change the prompt, a setting, a filter or "
                   "an edit, and run again. Each pass is kept in the Runs tab.")
        return
    state[S.COMPARE_A], state[S.COMPARE_B] = pair
    labels = runs_tab.picker_labels(listed, pair)
    c1, c2 = st.columns(2)
    a_id = c1.selectbox("Run A", list(labels), key=S.COMPARE_A, format_func=labels.__getitem__,
                        help="Compare from this run… (type to search by prompt)")
    b_id = c2.selectbox("Run B", list(labels), key=S.COMPARE_B, format_func=labels.__getitem__,
                        help="…to this one. ↑3: three places higher in B.")
    try:
        cmp = runs_tab.comparison(engine, a_id, b_id)
    except RagstreamError as err:
        st.error(f"**{err.kind}** — {err}")
        return
    st.markdown(f"**{views.plain_names(cmp.summary())}**")
    st.markdown("**Inputs that differ**")
    if cmp.inputs:
        table(runs_tab.input_rows(cmp), key="compare_inputs", columns=runs_tab.INPUT_COLUMNS,
              height=runs_tab.RUNS_TABLE_MAX_HEIGHT)
    else:
        st.caption("None: the same prompt, settings, filters, edits and knowledge base.")
    st.markdown("**Chunks** — each chunk's rank and status in A and B, the move and its cause")
    stages = cmp.stages()
    if stages:
        if state[S.COMPARE_STAGE] not in stages:  # the latest stage both runs show
            state[S.COMPARE_STAGE] = stages[-1]
        c3, c4 = st.columns([1, 2], vertical_alignment="bottom")
        stage = c3.selectbox("Stage", stages, key=S.COMPARE_STAGE, format_func=views.stage_title)
        moved_only = c4.toggle("Only chunks that moved, came or went", value=True,
                               key="compare_moved_only")
        rows = runs_tab.compare_rows(cmp, stage, moved_only)
        drawn = table(rows, key="compare_chunks", columns=runs_tab.chunk_columns(rows),
                      height=runs_tab.RUNS_TABLE_MAX_HEIGHT)
        if drawn is not None and "cause" in drawn.cut:
            st.markdown("**Causes** (whole)\n" + runs_tab.cause_lines(rows))
        chart = cmp.bump_chart()
        if chart is not None:
            st.altair_chart(chart, width="stretch", key="compare_bump")
    else:
        st.caption("Neither run has reached Retrieval.")
    st.markdown("**Final selection**")
    st.markdown(runs_tab.selection_line(cmp))
    st.markdown("**prompt_ready** — A → B")
    diff = cmp.prompt_diff()
    if diff:
        st.code("\n".join(diff), language="diff", wrap_lines=True, height=360)
    else:
        st.caption("The same text.")
    st.markdown("**Answers**")
    for col, side, answer in zip(st.columns(2), ("A", "B"), cmp.answers()):
        with col:
            st.markdown(runs_tab.answer_block(side, answer))


def draw_eval(page: Page) -> None:
    """Answer and retrieval quality on a question set."""
    engine, state = page.engine, page.state
    st.caption("Answer quality and retrieval on a question set: does the answer's first sentence "
               "(first three) cite the section that answers the question; MRR@10 of that section "
               "after Retrieval and the ReRanker. Runs offline with the configuration files' "
               "settings, and with this session's when they differ (sidebar settings).")
    bundled = eval_tab.bundled_sets()
    state[S.EVAL_SET] = eval_tab.default_set(bundled, state[S.EVAL_SET])
    c1, c2 = st.columns([3, 2])
    picked = c1.selectbox("Question set", list(bundled), key=S.EVAL_SET)
    own = c2.text_input("…or your own question set (JSON path)", key=S.EVAL_PATH,
                        placeholder="benchmarks/answers/kb.json",
                        help="The format of benchmarks/answers/kb.json: questions with the "
                             "section that answers each, and the docs folder.")
    changed = eval_tab.settings_diff(engine.cfg, state[S.OVERRIDES] or {})
    c3, c4 = st.columns([1, 4], vertical_alignment="bottom")
    limit = c3.number_input("Questions", min_value=1, max_value=500, step=5, key=S.EVAL_LIMIT)
    c4.caption(("Session settings differ: " + "; ".join(changed) if changed else
                "The session uses the configuration files' settings: one run.") + " Takes "
               + eval_tab.estimate(int(limit), 2 if changed else 1) + " on this machine.")
    if st.button("Run eval", key="run_eval"):
        bar = st.progress(0.0, text="Starting…")

        def on_question(phase: str, done: int, total: int) -> None:
            """Move the bar: which run, which question."""
            bar.progress(done / max(total, 1), text=f"{phase}: {done}/{total}")

        actions.run_eval(engine, state, own.strip() or bundled.get(picked or "", ""), int(limit),
                         on_question)
        bar.empty()
    outcome = state[S.EVAL_RESULT]
    if outcome and "error" in outcome:
        kind, message = outcome["error"]
        st.error(f"**{kind}** — {message}")
    elif outcome:
        st.markdown(eval_tab.heading(outcome))
        table(eval_tab.table_rows(outcome), key="eval_table", columns=eval_tab.table_columns())
        st.altair_chart(eval_tab.quality_chart(outcome), width="stretch")
        with st.expander("Every question (misses first)"):
            table(eval_tab.question_rows(outcome), key="eval_questions", height=320)
