"""The result tabs that edit the prompt in place: Fields (the body fields, who set each and
how) and Context & rules (A4's condensed context and A5's format rules)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from ragstream.interfaces.ui import actions, edit_actions, editing, grids, views
from ragstream.interfaces.ui import state as S
from ragstream.interfaces.ui.answer_area import draw_reading
from ragstream.interfaces.ui.page import Page
from ragstream.interfaces.ui.widgets import edited_rows, item_list, resume_button, whole_on_hover
from ragstream.stages import controller


def draw_fields(page: Page) -> None:
    """The prompt's body fields, who set each and how; editable."""
    engine, state, sp, stale, plan, before = (
        page.engine, page.state, page.sp, page.stale, page.plan, page.before)
    cfg_now = actions.session_config(engine, state)
    fields_src, fields_discarded = editing.source_for(sp, before, 1)
    st.caption("The prompt's body fields, who set each and how (header: the ladder's match; "
               "rule / default / LLM: A2's choice; you: your edit). Change a value to set it by "
               "hand for this prompt; fields with choices take one of them.")
    if note := editing.stage_note(1, fields_discarded, stale):
        st.warning(note, icon=":material/update:")
    draw_reading(page, "fields")
    if plan is not None:
        resume_button(page, "resume_fields")
    field_key = f"fields_{state[S.EDIT_NONCE]}"
    field_rows = editing.field_rows(fields_src, cfg_now)
    drawn = grids.grid(field_rows, editing.field_columns(), most_height=900, editable=["value"],
                       caps=editing.FIELD_CAPS)
    st.data_editor(pd.DataFrame(drawn.rows), hide_index=True, width="stretch", key=field_key,
                   height=drawn.height, row_height=drawn.row_height,
                   disabled=[c for c in editing.FIELD_COLUMNS if c != "value"],
                   column_config=drawn.columns)
    whole_on_hover(drawn)
    if notes := editing.field_notes(field_rows, drawn.rows):  # what the cells cut short, whole
        st.markdown("**Whole values and reasons** of the fields cut short above (…)  \n"
                    + "  \n".join(notes))
    st.caption(editing.choices_line(cfg_now))
    if typed := editing.field_changes_shown(field_rows, drawn.rows, edited_rows(field_key)):
        edit_actions.set_fields(engine, state, typed)  # a refused value is named at the top
        st.rerun()


def draw_context(page: Page) -> None:
    """A4's condensed context and A5's format rules, each editable in place."""
    state, sp, stale, plan, before = page.state, page.sp, page.stale, page.plan, page.before
    a4_src, a4_discarded = editing.source_for(sp, before, editing.stage_of_view("a4"))
    statements = editing.statement_items(a4_src)
    if plan is not None:
        resume_button(page, "resume_context")
    st.markdown("**Condensed context** (A4) — move a statement or remove it (its citation stays "
                "attached), or rewrite it: your words are then your note, never cited.")
    if statements is None:
        st.caption(f"Run {views.stage_label('A4_Condenser')} to edit its condensed context.")
    else:
        if note := editing.stage_note(editing.stage_of_view("a4"), a4_discarded, stale):
            st.warning(note, icon=":material/update:")
        if statements:
            item_list(page, statements, "statement", "context")
        else:
            st.caption("The condensed context has no statements.")
        c1, c2 = st.columns([5, 1], vertical_alignment="bottom")
        new_note = c1.text_input("Add a note of your own", key=f"new_note_{state[S.EDIT_NONCE]}",
                                 placeholder="e.g. We run the ReRanker on CPU only.",
                                 help="Your words, not a source's: listed under “Your notes” "
                                      "without a citation, and never cited by the answer.")
        c2.button("Add note", key="add_note", width="stretch", disabled=not new_note.strip(),
                  on_click=page.do, args=(edit_actions.item_action, "statement", "add", "", new_note))
    a5_index = controller.STAGE_NAMES.index("A5_Format_Enforcer")
    a5_src, a5_discarded = editing.source_for(sp, before, a5_index)
    rules = editing.rule_items(a5_src)
    st.markdown("**Format rules** (A5) — the hard rules the System block gives the answering model.")
    if rules is None:
        st.caption(f"Run {views.stage_label('A5_Format_Enforcer')} to edit its rules.")
    else:
        if note := editing.stage_note(a5_index, a5_discarded, stale):
            st.warning(note, icon=":material/update:")
        if chosen := editing.format_choices(a5_src):
            st.caption(chosen)
        item_list(page, rules, "rule", "rule")
        c1, c2 = st.columns([5, 1], vertical_alignment="bottom")
        new_rule = c1.text_input("Add a rule of your own", key=f"new_rule_{state[S.EDIT_NONCE]}",
                                 placeholder="e.g. Name the stage you mean.")
        c2.button("Add rule", key="add_rule", width="stretch", disabled=not new_rule.strip(),
                  on_click=page.do, args=(edit_actions.item_action, "rule", "add", "", new_rule))
