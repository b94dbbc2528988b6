"""RAGstream workbench — the Streamlit page: its layout only, what goes where. The drawing
lives in ``ragstream.interfaces.ui``: ``page`` (the engines, the session, what the main area
works out), ``sidebar``, ``prompt_area`` (the prompt and the run buttons), ``answer_area``
(the answer, the conversation, prompt_ready) and the result tabs (``chunk_tabs``,
``edit_tabs``, ``trace_tabs``, ``comparison_tabs``); what they draw is worked out by that
package's pure modules (``views``, ``editing``, ``evidence``…) and done by ``actions``.

Run: ``bash scripts/run_app.sh`` (or ``.venv/bin/python -m streamlit run ui_streamlit.py``).
"""

from __future__ import annotations

from collections.abc import Callable

import streamlit as st

from ragstream.interfaces.ui import (
    answer_area,
    chunk_tabs,
    comparison_tabs,
    edit_tabs,
    llm_status,
    prompt_area,
    runs_tab,
    sidebar,
    trace_tabs,
    views,
)
from ragstream.interfaces.ui import state as S
from ragstream.interfaces.ui.page import Page, open_page

st.set_page_config(page_title="RAGstream workbench", page_icon=":material/manage_search:", layout="wide")

# the engines, the session's state, its latest run on a reload, the selected knowledge base
page = open_page()

# --------------------------------------------------------------------------- sidebar
with st.sidebar:
    sidebar.knowledge_base(page)  # the switcher, its ingestions, managing them, adding documents
    sidebar.chats(page)
    sidebar.filters(page)
    llm_status.draw(page.engine)
    sidebar.settings(page)

# --------------------------------------------------------------------------- main area
#: the result tabs, in order: label -> what draws it. Only the open tab is drawn (``st.tabs``
#: with state tracking): a stage button's click redraws one tab, not twelve; the open tab is
#: kept in the URL (``?view=…``), so a reload comes back to it
RESULT_TABS: dict[str, Callable[[Page], None]] = {
    "Chunk views": chunk_tabs.draw_chunk_views, "Fields": edit_tabs.draw_fields,
    "Context & rules": edit_tabs.draw_context, "Chunk journey": chunk_tabs.draw_journey,
    "Stage diff": chunk_tabs.draw_stage_diff, "Evidence": trace_tabs.draw_evidence_tab,
    "History": trace_tabs.draw_history, "Scores": chunk_tabs.draw_scores,
    "Agents": trace_tabs.draw_agents, "Runs": comparison_tabs.draw_runs,
    runs_tab.COMPARE_TAB: comparison_tabs.draw_compare, "Eval": comparison_tabs.draw_eval,
}


@st.fragment
def main_area(page: Page) -> None:
    """The prompt, the run buttons, the answer, prompt_ready and the result tabs: a fragment, so
    that a click here (a stage button, an edit, a picker) redraws this area and not the
    sidebar, whose knowledge base, filters and settings a stage run does not change (a
    sidebar change redraws everything). Each part reads what the parts above it worked out
    into ``page`` (the pass shown, what is out of date, the evidence links)."""
    if page.state[S.REDRAW_ALL]:  # a callback here changed what the sidebar shows too
        st.rerun(scope="app")
    page.sp = page.state[S.SP]
    st.html(views.PAGE_CSS)  # an out-of-date pass's results are greyed; room for table toolbars
    st.html(views.CELL_HOVER_JS, unsafe_allow_javascript=True)  # a cut cell whole on hover
    st.html(views.CITE_CLICK_JS, unsafe_allow_javascript=True)  # the answer's [n] open sources
    st.title("RAGstream workbench")
    too_long = prompt_area.prompt_box(page)
    next_name = prompt_area.run_buttons(page, too_long)  # and the stage buttons, the re-run banner
    prompt_area.messages(page)
    prompt_area.your_edits(page)
    prompt_area.stage_line(page, next_name)
    answer_area.answer(page)
    answer_area.conversation_box(page)
    answer_area.prompt_ready(page)
    page.before = page.state[S.BEFORE_EDITS]
    for tab, draw in zip(st.tabs(list(RESULT_TABS), key=S.VIEW, bind="query-params"),
                         RESULT_TABS.values()):
        if tab.open:
            with tab:
                draw(page)


main_area(page)
