"""The main area under the stage buttons: the answer (its confidence, its text with the
sources it cites, each opened in its document in a dialog), the conversation with its turns,
and prompt_ready; and how A0 read a follow-up ("Read as"), shown above the answer and in the
Fields tab."""

from __future__ import annotations

from contextlib import closing

import streamlit as st

from ragstream.common.errors import RagstreamError
from ragstream.interfaces.ui import actions, answer_view, citations, conversation, evidence, views
from ragstream.interfaces.ui import state as S
from ragstream.interfaces.ui.page import Page


def stream_answer(page: Page) -> None:
    """Answer the finished super-prompt, showing the text as it streams in."""
    engine, state = page.engine, page.state
    st.markdown("#### Answer")
    with closing(actions.answer_stream(engine, state)) as pieces:
        st.write_stream(pieces, cursor=" ▌")


def draw_reading(page: Page, where: str) -> None:
    """"Read as: …" for a follow-up A0 read with the conversation (what was typed, the earlier
    question, who read it), under the stage line, in the Fields tab and above the answer;
    nothing for a prompt that stands on its own. ``where`` keys its container."""
    sp, stale = page.sp, page.stale
    view = answer_view.reading_view(sp)
    if view is None:
        return
    old = stale is not None and where != "answer"
    with st.container(key=f"{views.STALE_KEY}reading_{where}" if old else f"reading_{where}"):
        st.markdown(view.line + (" · :gray-badge[out of date]" if old else ""))
        st.caption(view.detail)


def draw_source_buttons(page: Page) -> None:
    """One button per source the answer cites, under it: each opens the source in its
    document (``open_citation``)."""
    sp = page.sp
    buttons = citations.source_buttons(sp)
    if not buttons:
        return
    with st.container(horizontal=True, key="cited_sources", gap="small",
                      vertical_alignment="center"):
        st.caption("Open a source in its document:", width="content")
        for b in buttons:
            if st.button(b.label, key=f"cite_{b.n}", help=b.help, icon=":material/menu_book:"):
                open_citation(page, b.n)


def open_in_document_button(page: Page, chunk_id: str, key: str) -> None:
    """"Open [n] in its document" for a chunk the answer cites (as its button under the
    answer does); nothing for a chunk it does not cite."""
    sp = page.sp
    n = citations.source_number(sp, chunk_id)
    if n is not None and st.button(f"Open [{n}] in its document", key=key,
                                   icon=":material/menu_book:",
                                   help="The answer's source in its document: the section "
                                        "around it, the cited text marked, code as code"):
        open_citation(page, n)


def open_citation(page: Page, n: int) -> None:
    """Source ``[n]`` of the answer in a dialog: the section around the cited chunk, its cited
    text marked, code as code, a paged document's page."""
    engine, state, sp = page.engine, page.state, page.sp
    view = citations.citation_view(sp, n, citations.fetch_for(engine, sp),
                                   actions.session_config(engine, state).settings.answer.max_citation_range)
    if view is None:
        st.warning(f"[{n}] names no source of this answer.")
        return
    st.dialog(view.title, width="large", icon=":material/menu_book:")(draw_citation)(page, view)


def draw_citation(page: Page, view: citations.CitationView) -> None:
    """An opened source: its section's title, the document and page, what is marked, then the
    section around the cited chunk (the cited text beside a bar, its quoted words marked)."""
    state = page.state
    st.markdown(f"### {answer_view.md_text(view.section)}")
    on_page = f" · **{view.page}**" if view.page else ""
    st.caption(f"{answer_view.md_text(view.document)} · `{view.source}`{on_page} · chunk `{view.chunk_id}`")
    st.caption(view.note)
    for i, piece in enumerate(view.pieces):
        if piece.heading:
            st.markdown(f"**{answer_view.md_text(piece.heading)}**")
        key = (views.CITED_KEY if piece.cited else views.AROUND_KEY if piece.around else "rs_text_")
        with st.container(key=f"{key}{view.n}_{i}"):
            st.markdown(piece.markdown, unsafe_allow_html=True)
    st.caption(view.around_note)
    if st.button("Follow this chunk through the stages", key="cite_follow",
                 icon=":material/route:"):
        state[S.JOURNEY_CHUNK] = view.chunk_id
        state[S.VIEW] = "Chunk journey"
        st.rerun()


def draw_turns(page: Page) -> None:
    """The conversation's turns, newest first: which go into the next prompt, which Retrieval
    searches (or why not), which were forgotten; "Forget" for each one that is not."""
    engine, state = page.engine, page.state
    try:
        turns = conversation.turn_views(engine, state)
    except RagstreamError as err:
        st.error(f"The conversation cannot be read ({err.kind}): {err}")
        return
    if not turns:  # turns not kept in a conversation (a run from before conversations had names)
        going, _ = actions.conversation_block(engine, state)
        st.markdown(going or "_None: `limits.N4_RECENT_CONV_MAX_PAIRS` is 0._")
    for view in turns:
        head, button = st.columns([5, 1], vertical_alignment="center")
        head.markdown(f"**{view.heading}**  \n:gray[{view.marks}]")
        button.button("Forget", key=f"forget_turn_{view.turn}", width="stretch",
                      icon=":material/delete_sweep:", disabled=not view.can_forget,
                      help="Take this turn out of the conversation's memory (Retrieval no longer "
                           "finds it) and out of the next prompt.",
                      on_click=page.do, args=(conversation.forget, view.turn))
        st.markdown(view.text)
    st.caption("The earlier answers' [n] markers are left out: they pointed at those answers' "
               "sources.")


def answer(page: Page) -> None:
    """The answer: its confidence and the figures behind it, its text with the sources it
    cites, the model's answer set aside or the extractive one, the sources; folded and marked
    when the pass is out of date. Works out the evidence links (``page.links``)."""
    engine, state, sp, stale = page.engine, page.state, page.sp, page.stale
    page.links = links = evidence.sentence_links(
        sp, actions.session_config(engine, state).settings.answer.max_citation_range)
    answer_box = st.container(key="answer_block")
    if sp.answer is not None and stale is not None:  # never shown as the answer to what is asked now
        answer_box = st.container(key=f"{views.STALE_KEY}answer").expander(
            views.stale_label(stale, "the answer of the earlier pass"), expanded=False,
            icon=":material/history:")
    if sp.answer is not None:
        with answer_box:
            ans = sp.answer
            st.markdown("#### Answer")
            draw_reading(page, "answer")
            st.markdown(answer_view.confidence_line(ans))
            if note := answer_view.mode_note(ans):
                st.caption(note)
            with st.expander(answer_view.FIGURES_TITLE, expanded=False, icon=":material/calculate:"):
                st.markdown(answer_view.figures_markdown(ans))
            if turn_note := conversation.turn_note(sp):
                st.caption(turn_note)
            if ans.unsupported:
                st.warning(f"**Unsupported answer** — {ans.unsupported}.", icon=":material/report:")
            if ans.set_aside:
                st.warning(f"**The model's answer was set aside** — {ans.set_aside_reason}. Below is "
                           "the extractive answer from the sources instead.", icon=":material/report:")
            elif ans.checks:
                st.caption(f"Citation checks passed: {ans.checks}.")
            with st.container(key="answer_text"):  # its [n] markers open their sources
                st.markdown(ans.text)
            draw_source_buttons(page)
            if ans.set_aside:
                with st.expander("The model's answer (set aside)", expanded=False):
                    st.markdown(ans.set_aside)
            if ans.extractive_text:
                with st.expander("Extractive answer from the sources (every sentence cited)",
                                 expanded=True):
                    st.markdown(ans.extractive_text)
            valid = ans.sources
            if valid:
                with st.expander(f"Sources ({len(valid)})", expanded=len(valid) <= 5):
                    st.markdown("\n".join(f"- {views.citation_line(c, bold=True)}" for c in valid))
                    by_label = {views.citation_line(c): c for c in valid}
                    picked = st.selectbox("Open a cited chunk", list(by_label), key="cited_chunk")
                    cited = by_label[picked]
                    st.html(evidence.chunk_evidence(sp, cited.chunk_id, links).html)
                    c1, c2 = st.columns(2)
                    if c1.button(f"Open [{cited.n}] in its document", key="open_cited",
                                 icon=":material/menu_book:", width="stretch",
                                 help="The section around it, the cited text marked, code as code"):
                        open_citation(page, cited.n)
                    if c2.button("Follow this chunk through the stages", key="follow_cited",
                                 icon=":material/route:", width="stretch"):
                        state[S.JOURNEY_CHUNK] = cited.chunk_id
                        state[S.VIEW] = "Chunk journey"  # the tabs are drawn below: not yet in this run
                        st.rerun()
            for n in ans.invalid_citations:
                st.warning(f"[{n}] is an invalid citation: it matches no source in the prompt.")


def conversation_box(page: Page) -> None:
    """The conversation the page is in, its turns while open, and clearing it."""
    engine, state = page.engine, page.state
    if chat_title := conversation.title(engine, state):
        c1, c2 = st.columns([4, 1], vertical_alignment="top")
        box = c1.expander(chat_title, expanded=state[S.CONVERSATION_SHOWN], key=S.CONVERSATION_OPEN,
                          on_change=conversation.remember_open, args=(state,))
        if box.open:  # its turns are read while it is open
            with box:
                draw_turns(page)
        c2.button("Clear conversation", key="clear_conversation", width="stretch",
                  help="Start a new conversation: the next prompt carries no earlier turn and "
                       "searches no memory. This one stays in the sidebar's list.",
                  on_click=page.do, args=(conversation.start_new, ""))


def prompt_ready(page: Page) -> None:
    """prompt_ready: the finished super-prompt, or the earlier pass's folded and greyed."""
    sp, stale = page.sp, page.stale
    st.subheader("prompt_ready")
    if stale is not None and sp.prompt_ready:  # folded, greyed, and never offered for copying
        with st.container(key=f"{views.STALE_KEY}prompt_ready"):
            with st.expander(views.stale_label(stale, "prompt_ready of the earlier pass"),
                             expanded=False, icon=":material/history:"):
                st.caption(views.STALE_PROMPT_NOTE)
                st.text(sp.prompt_ready)
    elif sp.prompt_ready:
        st.code(sp.prompt_ready, language="markdown", wrap_lines=True, height=420)
    else:
        st.caption("Run A0 to see the prompt take shape.")
