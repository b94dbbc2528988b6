"""The top of the main area: the prompt box, the Auto-run switch, the run and Answer buttons,
a button per stage, the re-run banner, the page's error and notice, the edits (offered from
another prompt, or this prompt's own) and the stage line."""

from __future__ import annotations

import streamlit as st

from ragstream.interfaces.ui import actions, edit_actions, editing, knowledge, views
from ragstream.interfaces.ui import state as S
from ragstream.interfaces.ui.answer_area import draw_reading, stream_answer
from ragstream.interfaces.ui.page import Page
from ragstream.interfaces.ui.widgets import progress_callbacks, resume_button, table, waiting_note
from ragstream.stages import controller


def prompt_box(page: Page) -> str | None:
    """The prompt, and what is wrong with its length (shown under it), if anything."""
    engine, state = page.engine, page.state
    prompt_limit = actions.session_config(engine, state).settings.prompt.max_prompt_chars
    st.text_area("Prompt", key=S.PROMPT, height=130,
                 help="Plain text becomes the task. Headers such as Task:, Context:, Purpose:, "
                      f"Audience:, Format:, Constraints: (or German Aufgabe:, Kontext:…) are mapped. "
                      f"At most {prompt_limit:,} characters.")
    too_long = views.prompt_length_problem(state[S.PROMPT], prompt_limit)
    if too_long:
        st.error(too_long, icon=":material/block:")
    return too_long


def run_buttons(page: Page, too_long: str | None) -> str | None:
    """Auto-run, the run button (the next stage, or every remaining one and the answer), the
    Answer button, a button per stage, and the re-run banner when a stage is out of date;
    works out what is out of date (``page.stale``) and the re-run plan (``page.plan``). The
    next stage to run, or None when every stage is current."""
    engine, state = page.engine, page.state
    page.stale = stale = actions.out_of_date(engine, state)
    pending = actions.pending_state(state)
    page.plan = plan = actions.resume_plan(engine, state, stale)
    start = controller.start_index(pending, stale)
    next_name = controller.STAGE_NAMES[start] if start < len(controller.STAGE_NAMES) else None
    left, right, answer_col = st.columns([1, 2, 1])
    left.toggle("Auto-run", key=S.AUTO,
                help="On: one click runs every remaining stage (from the first one out of date) "
                     "and then answers.")
    run_label, idle = views.run_button(next_name, state[S.AUTO], pending.answer is not None)
    if right.button(run_label, key="run", type="primary",
                    disabled=too_long is not None or idle is not None, help=too_long or idle):
        if state[S.AUTO]:
            if actions.run_remaining(engine, state, *progress_callbacks()):
                stream_answer(page)
        elif next_name is None:
            state[S.NOTICE] = "Nothing to run: every stage is current."
        else:
            actions.run_stage(engine, state, next_name, on_wait=waiting_note(st.empty()))
        st.rerun()
    refusal = actions.answer_refusal(engine, state, stale)
    if answer_col.button("Answer", key="answer", disabled=refusal is not None,
                         help=views.plain_names(refusal) if refusal else
                         "Answer the finished super-prompt (runs after Prompt Builder)."):
        stream_answer(page)
        st.rerun()
    for button_row in views.button_rows(pending, stale):
        for col, b in zip(st.columns(len(button_row)), button_row):
            refused = too_long if b.name == controller.STAGE_NAMES[0] else None
            col.button(b.text, key=f"stage_{b.name}", disabled=not b.enabled or refused is not None,
                       help=f"{b.label}: {refused or b.help}", width="stretch",
                       on_click=run_one_stage, args=(page, b.name))
    if plan is not None:
        note_col, button_col = st.columns([5, 2], vertical_alignment="center")
        note_col.warning(editing.out_of_date_banner(pending, stale), icon=":material/update:")
        with button_col:
            resume_button(page, "resume")
    return next_name


def run_one_stage(page: Page, name: str) -> None:
    """A stage button's callback: the stage runs before the page is drawn, so one script run
    draws its result (a button read in the script would need a second run). While an agent
    waits for the model, a note at the top of the page says who and how long."""
    engine, state = page.engine, page.state
    on_wait = waiting_note(st.empty()) if engine.services.llm is not None else None
    actions.run_stage(engine, state, name, on_wait=on_wait)


def messages(page: Page) -> None:
    """The last action's error, and its notice (shown once)."""
    state = page.state
    if state[S.ERROR]:
        kind, message = state[S.ERROR]
        st.error(f"**{kind}** — {views.plain_names(message)}", icon=":material/error:")
    if state[S.NOTICE]:
        st.info(views.plain_names(state[S.NOTICE]))
        state[S.NOTICE] = None


def your_edits(page: Page) -> None:
    """Edits made for another prompt, offered to this one; this prompt's own edits, to undo."""
    state, sp = page.state, page.sp
    draw_edits_offer(page)
    if sp.edits and state[S.PROMPT] == sp.user_text:  # a new prompt in the box starts without them
        with st.expander(f"Your edits ({len(sp.edits)}) — applied by the stages every run", expanded=True):
            table(editing.edit_rows(sp), key=f"edits_{state[S.EDIT_NONCE]}", columns=editing.edit_columns())
            c1, c2, c3 = st.columns([2, 1, 1], vertical_alignment="bottom")
            undo = c1.selectbox("Edit", [e.id for e in sp.edits], key=f"undo_pick_{state[S.EDIT_NONCE]}",
                                format_func=lambda i: next(f"{e.id}. {e.describe()}" for e in sp.edits
                                                           if e.id == i))
            c2.button("Undo this edit", key="undo_edit", width="stretch",
                      on_click=page.do, args=(edit_actions.undo_edit, undo))
            c3.button("Clear edits", key="clear_edits", width="stretch",
                      help="Forget every edit: the stages decide by themselves again.",
                      on_click=page.do, args=(edit_actions.undo_edit, None))


def draw_edits_offer(page: Page) -> None:
    """Edits made for another prompt: offered to the prompt in the box, listed (kind, target,
    value), applied only with "Apply them here"; or, once chosen before the prompt ran, the
    ones that will apply when it runs."""
    state = page.state
    if chosen := actions.carried_edits(state):
        with st.container(border=True, key="edits_carried"):
            n = len(chosen.edits)
            st.markdown(f"**{n} edit{'s' if n != 1 else ''} of “{chosen.prompt[:80]}” will apply "
                        f"to this prompt** when it runs (your choice).")
            table(editing.offer_rows(chosen.edits), key="edits_carried_rows")
            st.button("Don't apply them", key="edits_carry_undo",
                      on_click=actions.dismiss_offered_edits, args=(state,))
        return
    offer = actions.edits_offer(state)
    if offer is None:
        return
    with st.container(border=True, key="edits_offer"):
        st.markdown(f"**{offer.title(state[S.PROMPT])}**")
        st.caption(f"Made for “{offer.prompt[:120]}”. Edits belong to the prompt they were made "
                   f"for: this prompt runs without them unless you apply them here.")
        table(editing.offer_rows(offer.edits), key="edits_offer_rows")
        c1, c2, _ = st.columns([2, 1, 2])
        c1.button("Apply them here", key="edits_offer_apply", type="secondary", width="stretch",
                  icon=":material/input:", on_click=page.do, args=(actions.apply_offered_edits,))
        c2.button("Dismiss", key="edits_offer_dismiss", width="stretch",
                  on_click=actions.dismiss_offered_edits, args=(state,))


def stage_line(page: Page, next_name: str | None) -> None:
    """Where the pass is and what runs next, the session's changed settings, the knowledge base
    the results came from, and how A0 read a follow-up (above the answer when there is one)."""
    engine, state, sp, stale = page.engine, page.state, page.sp, page.stale
    stage_line = views.stage_line(sp, next_name)
    if state[S.OVERRIDES]:
        stage_line += f" · session settings: {len(state[S.OVERRIDES])} changed"
    st.markdown(stage_line)
    st.caption(knowledge.results_line(sp, engine.kb))
    if sp.answer is None or stale is not None:  # an answer shows it above its own text
        draw_reading(page, "stages")
