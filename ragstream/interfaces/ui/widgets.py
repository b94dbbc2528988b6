"""The pieces several parts of the page draw with: a table fitted to its columns (its cut
cells whole on hover), a chunk picker with its search box, a chunk's pin / exclude / undo
buttons, an editable list of statements or rules, the re-run button and the progress bar of a
run of stages."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from ragstream.interfaces.ui import actions, edit_actions, editing, grids, views
from ragstream.interfaces.ui import state as S
from ragstream.interfaces.ui.page import Page


def table(rows: list[dict], key: str, height: int | None = None,
          columns: dict | None = None, lines: int | None = None) -> grids.Grid | None:
    """Show ``rows`` as a table (an empty cell reads "—"), or a caption saying there is nothing
    to show yet. Its cells are fitted to their columns (``grids.grid``): rows as tall as the
    longest cell's lines (``lines`` exactly, if given), a longer cell cut with "…", no word
    broken, no sideways scrolling at 1280 px; ``height`` is the most it grows to."""
    if not rows:
        st.caption("Nothing to show yet.")
        return None
    if key in grids.SIDEBAR_TABLES:  # the sidebar's narrow tables: as Streamlit sizes them
        st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch", key=key,
                     height=height or "auto", column_config=columns, placeholder=grids.EMPTY)
        return None
    shown = grids.grid(rows, columns, lines=lines, most_height=height or grids.GRID_MAX_HEIGHT)
    st.dataframe(pd.DataFrame(shown.rows), hide_index=True, width="stretch", key=key,
                 height=shown.height, column_config=shown.columns, row_height=shown.row_height,
                 placeholder=grids.EMPTY)
    whole_on_hover(shown)
    return shown


def whole_on_hover(drawn: grids.Grid, note: str = grids.CUT_NOTE) -> None:
    """Under a grid with cells cut short: ``note``, and its cut cells' whole texts for the
    page's hover script (they must follow the grid directly)."""
    if drawn.whole:
        st.caption(note + grids.hover_data(drawn), unsafe_allow_html=True)


def edited_rows(key: str) -> dict:
    """The cells the person changed in the editable table ``key`` (row position → columns)."""
    return (st.session_state.get(key) or {}).get("edited_rows", {})


def chunk_picker(page: Page, src, label: str, key: str, search_key: str, help_text: str) -> str | None:
    """A chunk picker of the chunks Retrieval returned, with a box beside it that keeps the
    chunks whose text holds the words typed (any order; the picker itself also finds them by
    its labels: id, section, the text's first words, or the passage that holds the words).
    The chunk picked, or None when there is none (the box then says so)."""
    state = page.state
    every = views.chunk_choices(src)
    if not every:
        return None
    c1, c2 = st.columns([1, 2], vertical_alignment="bottom")
    query = c1.text_input("Find a chunk by its text", key=search_key,
                          placeholder="words from inside the chunk",
                          help="Keeps the chunks whose text (or id, or section) holds every word, "
                               "in any order, any case.")
    choices = views.matching_chunks(src, query)
    if not choices:
        c2.caption(f"No chunk Retrieval returned holds “{query.strip()}”.")
        return None
    if state.get(key) not in choices:
        state[key] = choices[0]
    labels = views.chunk_labels(src, query, views.PICKER_LABEL_CHARS)
    return c2.selectbox(label, choices, key=key, format_func=labels.__getitem__, help=help_text)


def chunk_buttons(page: Page, chunk_id: str, where: str) -> None:
    """Pin / exclude / undo buttons for one chunk, as the person's decision on it stands."""
    state = page.state
    decision = editing.chunk_decision(state[S.SP], chunk_id)
    c1, c2, c3 = st.columns(3)
    c1.button("Pin", icon=":material/push_pin:", key=f"{where}_pin", width="stretch",
              disabled=decision is not None and decision.kind in ("pin", "add"),
              help="Keep this chunk through A3 and A4, in the final selection (pinned ones first).",
              on_click=page.do, args=(edit_actions.chunk_action, chunk_id, "pin"))
    c2.button("Exclude", icon=":material/block:", key=f"{where}_exclude", width="stretch",
              disabled=decision is not None and decision.kind == "exclude",
              help="Drop this chunk from Retrieval on.",
              on_click=page.do, args=(edit_actions.chunk_action, chunk_id, "exclude"))
    c3.button("Undo my decision", icon=":material/undo:", key=f"{where}_undo", width="stretch",
              disabled=decision is None,
              help="Let the stages decide about this chunk by themselves again.",
              on_click=page.do, args=(edit_actions.chunk_action, chunk_id, "unpin"))


def item_list(page: Page, items: list[editing.Item], what: str, prefix: str) -> None:
    """A4's statements or A5's rules, each editable in place, with ↑ ↓ ✕ (every change is an
    edit of this prompt)."""
    state = page.state
    nonce = state[S.EDIT_NONCE]
    for i, item in enumerate(items, start=1):
        text_col, up, down, drop = st.columns([14, 1, 1, 1], vertical_alignment="center")
        key = f"{prefix}_{nonce}_{i}"
        # the label says whose it is: a source's citation, or "you" (your note, your rule)
        label = f"{prefix[0].upper()}{i}" + (f" · {item.label}" if item.label else "")
        text_col.text_area(label, value=item.text, key=key, height=68,
                           on_change=lambda k=key, it=item: page.do(
                               edit_actions.item_action, what, "text", it.key, st.session_state[k]))
        up.button("↑", key=f"{key}_up", disabled=i == 1, help=f"Move this {what} up",
                  on_click=page.do, args=(edit_actions.item_action, what, "move", item.key, i - 1))
        down.button("↓", key=f"{key}_down", disabled=i == len(items), help=f"Move this {what} down",
                    on_click=page.do, args=(edit_actions.item_action, what, "move", item.key, i + 1))
        drop.button("✕", key=f"{key}_remove", help=f"Remove this {what}",
                    on_click=page.do, args=(edit_actions.item_action, what, "remove", item.key))


def waiting_note(slot):
    """An ``on_wait`` callback that writes who waits for the model, and how long, in ``slot``."""
    return lambda agent, model, seconds: slot.info(views.waiting_line(agent, model, seconds),
                                                   icon=":material/hourglass_top:")


def progress_callbacks():
    """(on_stage, on_wait) that move a progress bar naming the running stage."""
    line = views.RunProgress()
    bar = st.progress(line.share, text=line.text)

    def on_stage(done: int, total: int, name: str) -> None:
        """Move the bar to the stage about to run, or to the end when ``name`` is empty."""
        share, text = line.stage(done, total, name)
        bar.progress(share, text=text)

    def on_wait(agent: str, model: str, seconds: float) -> None:
        """While an agent waits for the model: who, which model, how long."""
        share, text = line.waiting(agent, model, seconds)
        bar.progress(share, text=text)

    return on_stage, on_wait


def resume_button(page: Page, key: str) -> None:
    """"↻ Re-run X → Y" when a stage is out of date or an edit discarded results (one click
    re-runs from the first such stage to where the pass had got); nothing otherwise."""
    engine, state, plan = page.engine, page.state, page.plan
    if plan is None:
        return
    if st.button(views.resume_label(*plan), key=key, type="primary", width="stretch",
                 help=views.resume_help(*plan)):
        actions.resume(engine, state, *progress_callbacks())
        st.rerun()
