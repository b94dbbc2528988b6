"""The result tabs about the pass's chunks: Chunk views (a table per stage with the pin /
exclude boxes, one chunk opened whole, any chunk of the knowledge base found by its words),
Chunk journey, Stage diff and Scores."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from ragstream.interfaces.ui import (
    actions,
    charts,
    chunk_moves,
    edit_actions,
    editing,
    evidence,
    grids,
    views,
)
from ragstream.interfaces.ui import state as S
from ragstream.interfaces.ui.answer_area import open_in_document_button
from ragstream.interfaces.ui.page import Page
from ragstream.interfaces.ui.widgets import (
    chunk_buttons,
    chunk_picker,
    edited_rows,
    resume_button,
    table,
    whole_on_hover,
)


def chunk_table(page: Page, src, view: str, title: str, note: str | None, opened: bool, query: str,
                discarded: bool = False) -> None:
    """One stage's chunk table, with the pin / exclude checkboxes the person may tick (each
    tick is an edit of this prompt); ``note`` says when the table is out of date; ``query``
    keeps the rows whose chunk holds its words. Long cells wrap; a cell still too long for its
    three lines is shown whole under "Open a chunk" for the chunk picked there. Its grid is drawn only
    while its expander is open (``opened``: open unless the person closed it; one the person
    opened or closed stays so, though its title's counts change, until the next run). The
    table of an out-of-date pass is folded and greyed, its title saying why; one an edit
    discarded (``discarded``) is not: the person goes on editing there until they re-run."""
    engine, state, stale = page.engine, page.state, page.stale
    base, columns, _ = views.table_parts(src, view)  # columns from every row: widths stay put
    rows = editing.with_marks(base, state[S.SP])
    shown = views.filter_rows(rows, src, query)
    old = stale is not None and not discarded and editing.stage_of_view(view) >= stale.index
    flag = f" · out of date: {views.stale_cause(stale)}" if old and stale else \
        " · out of date" if note else ""
    found = f" · {len(shown)} hold “{query.strip()}”" if query.strip() else ""
    # an out-of-date pass's table is folded and greyed (one an edit discarded stays open to edit)
    where = st.container(key=f"{views.STALE_KEY}table_{view}") if old else st.container()
    box = where.expander(f"{title} — {views.table_summary(rows)}{found}{flag}",
                         expanded=state[S.OPEN_TABLES].get(view, opened and not old),
                         key=S.table_open(view), on_change=actions.remember_table,
                         args=(state, view))
    if not box.open:
        return
    with box:
        if note:
            st.warning(note, icon=":material/update:")
        if weighed := views.decision_note(src, view):
            st.caption(weighed)
        key = f"view_{view}_{state[S.EDIT_NONCE]}" + (f"_{query.strip()}" if query.strip() else "")
        drawn = grids.chunk_grid(shown, columns)
        st.data_editor(pd.DataFrame(drawn.rows, columns=list(columns)), hide_index=True,
                       width="stretch", key=key, height=drawn.height,
                       row_height=drawn.row_height, placeholder=grids.EMPTY,
                       column_config=columns,
                       disabled=[c for c in columns if c not in grids.CHECK_COLUMNS])
        if changes := editing.table_changes(shown, edited_rows(key)):
            edit_actions.change_chunks(engine, state, changes)
            st.rerun()
        whole_on_hover(drawn, grids.CUT_NOTE + " Pick its chunk under **Open a chunk** below "
                                               "to read its row in every table whole.")


def draw_chunk_views(page: Page) -> None:
    """The chunk tables, one per stage view, with the person's pin / exclude boxes; one
    chunk opened whole; any chunk of the knowledge base found by its words."""
    engine, state, sp, stale, before, links = (
        page.engine, page.state, page.sp, page.stale, page.before, page.links)
    shown_views = []
    for key, title in views.VIEW_STAGES:
        index = editing.stage_of_view(key)
        src, discarded = editing.source_for(sp, before, index)
        if key in src.views_by_stage:
            shown_views.append((key, title, src, editing.stage_note(index, discarded, stale),
                                discarded))
    if not shown_views:
        st.caption("Chunk tables appear after Retrieval.")
    else:
        st.caption("Tick **pin** to keep a chunk (A3 and A4 keep it; it leads the final selection) "
                   "or **excl** to drop it, for this prompt; untick to undo. Then re-run.")
    if any(note for *_, note, _ in shown_views):
        resume_button(page, "resume_views")
    query = st.text_input("Filter the tables' rows", key=S.TABLE_FILTER,
                          placeholder="words from inside a chunk, its id, section or reason",
                          help="Keeps the rows whose chunk holds every word, in any order.") \
        if shown_views else ""
    for key, title, src, note, discarded in shown_views:
        chunk_table(page, src, key, title, note, opened=key == shown_views[-1][0], query=query,
                    discarded=discarded)
    view_src, _ = editing.source_for(sp, before, editing.stage_of_view("retrieval"))
    picked = chunk_picker(page, view_src, "Open a chunk", "detail_chunk", S.DETAIL_SEARCH,
                          "Type words from the chunk's text, id or section to find it.")
    if picked is not None:
        text, meta = views.chunk_detail(view_src, picked)
        st.markdown(f"**{meta['source']}** § {' > '.join(meta['heading_path'])}")
        for key, title, src, *_ in shown_views:  # its row in each table, whole
            if any(r.chunk_id == picked for r in src.view(key)):
                st.caption(f"**{title}** · {views.row_detail(src, key, picked)}")
        chunk_buttons(page, picked, "detail")
        open_in_document_button(page, picked, "detail_open_doc")
        detail = evidence.chunk_evidence(view_src, picked, links)
        if detail.used_by:
            st.caption(detail.summary())
        # the chunk's text (its used sentences marked) and metadata are drawn while open only:
        # they were a third of the time a stage button's click took to redraw the page
        box = st.expander("Its text, the sentences in use marked, and its metadata",
                          key=S.DETAIL_TEXT, on_change="rerun")
        if box.open:
            with box:
                st.html(detail.html)
                st.json(meta, expanded=False)
    search = st.expander("Find any chunk of the knowledge base", expanded=bool(state[S.CHUNK_SEARCH]),
                         key=S.SEARCH_OPEN, on_change="rerun")
    if not search.open:
        return
    with search:
        query = st.text_input("Words or a phrase from inside a chunk", key=S.CHUNK_SEARCH,
                              placeholder="e.g. fall between sentences")
        found = edit_actions.find_chunks(engine, query)
        if query.strip() and not found:
            st.caption("No chunk holds that text or its words.")
        retrieved = {c.id for c in view_src.base_context_chunks}
        for i, (chunk, how) in enumerate(found):
            c1, c2 = st.columns([5, 1], vertical_alignment="center")
            where = "retrieved" if chunk.id in retrieved else "not retrieved"
            preview = " ".join(chunk.text.split())
            c1.markdown(f"**{chunk.id}** · {chunk.heading_label or chunk.source} · _{how}, {where}_  \n"
                        f"{preview[:160]}{'…' if len(preview) > 160 else ''}")
            decision = editing.chunk_decision(sp, chunk.id)
            c2.button(editing.DECIDED.get(decision.kind, "") if decision else "Add",
                      icon=None if decision else ":material/add:", key=f"add_{i}",
                      disabled=decision is not None, width="stretch",
                      help="Bring this chunk into the views, pinned (reason 'added by you').",
                      on_click=page.do, args=(edit_actions.chunk_action, chunk.id, "add"))


def draw_journey(page: Page) -> None:
    """One chunk followed through the stages."""
    state, sp = page.state, page.sp
    if views.chunk_choices(sp):
        state[S.JOURNEY_CHUNK] = chunk_moves.journey_default(sp, state[S.JOURNEY_CHUNK])
        picked = chunk_picker(page, sp, "Chunk", S.JOURNEY_CHUNK, S.JOURNEY_SEARCH,
                              "Opens on the top chunk of the latest stage. Type words from the "
                              "chunk's text, id or section to find it.")
        if picked is not None:
            table(chunk_moves.journey_rows(sp, picked), key="journey", columns=chunk_moves.journey_columns())
            chunk_buttons(page, picked, "journey")
    else:
        st.caption("Run Retrieval to follow a chunk through the stages.")


def draw_stage_diff(page: Page) -> None:
    """Two chunk stages of this run compared, and the rank-movement chart."""
    state, sp = page.state, page.sp
    pair = chunk_moves.diff_default(sp, state[S.DIFF_A], state[S.DIFF_B])
    if pair:
        state[S.DIFF_A], state[S.DIFF_B] = pair
        ran = views.diff_stages(sp)
        c1, c2, c3 = st.columns(3)
        stage_a = c1.selectbox("Stage A", ran, key=S.DIFF_A, format_func=views.stage_title,
                               help="Compare from this stage…")
        stage_b = c2.selectbox("Stage B", ran, key=S.DIFF_B, format_func=views.stage_title,
                               help="…to this one. Move = rank in A − rank in B.")
        order = c3.selectbox("Order", chunk_moves.DIFF_SORTS, key=S.DIFF_SORT,
                             help="Or click a column header to sort by it.")
        diff = chunk_moves.diff_rows(sp, stage_a, stage_b, order)
        st.caption(chunk_moves.diff_summary(diff, stage_a, stage_b) + ". ↑3: three places higher in "
                   "B; new: not in A; dropped: B dropped it or does not have it (the reason "
                   "says where it left).")
        table(diff, key="stage_diff", height=grids.TABLE_MAX_HEIGHT,
              columns=chunk_moves.diff_columns(stage_a, stage_b, rows=diff))
    else:
        st.caption("Run Retrieval and the ReRanker to compare two stages.")
    bump = charts.bump_chart(sp)
    if bump is not None and len(views.diff_stages(sp)) > 1:
        st.altair_chart(bump, width="stretch", key="bump_chart")


def draw_scores(page: Page) -> None:
    """Score histograms per stage."""
    sp = page.sp
    drawn = charts.score_charts(sp)
    if drawn:
        st.caption("Chunks per score, per stage. Stages that share a score (ReRanker and A3: "
                   "the rerank score) share its scale.")
        for title, chart in drawn:
            st.altair_chart(chart, width="stretch", key=f"chart_{title}")
    else:
        st.caption("The chart appears after Retrieval.")
