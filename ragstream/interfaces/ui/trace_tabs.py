"""The result tabs that show how the pass got where it is: Evidence (each sentence of the
answer and of the condensed context beside the chunk it cites), History (the stages' wall
times, the edits, each agent's mode) and Agents (the model calls, and replaying one)."""

from __future__ import annotations

import streamlit as st

from ragstream.interfaces.ui import edit_actions, editing, evidence, inspector, views
from ragstream.interfaces.ui import state as S
from ragstream.interfaces.ui.answer_area import open_in_document_button
from ragstream.interfaces.ui.page import Page
from ragstream.interfaces.ui.widgets import table


def open_evidence(chunk_id: str, key: str | None) -> None:
    """Open ``chunk_id`` in the Evidence tab, from sentence ``key`` (None: picked by hand)."""
    st.session_state[S.EVIDENCE_CHUNK] = chunk_id
    st.session_state[S.EVIDENCE_SENTENCE] = key


def open_evidence_by_hand() -> None:
    """The chunk picker changed: no sentence is the opened one any more."""
    st.session_state[S.EVIDENCE_SENTENCE] = None


def sentence_rows(page: Page, links: list[evidence.Link], opened: str | None, current: str | None) -> None:
    """Each sentence with a button per chunk it cites ([n]); the sentences citing the opened
    chunk wear a badge, the button they opened it with is highlighted."""
    sp = page.sp
    labels = {c.id: c.citation_label for c in sp.base_context_chunks}
    for link in links:
        text_col, cite_col = st.columns([6, 1], vertical_alignment="top")
        key = f":orange-badge[{link.key}]" if opened in link.chunk_ids else f"**{link.key}**"
        text_col.markdown(f"{key} {link.text}")
        for n, chunk_id in zip(link.valid_numbers, link.chunk_ids):
            cite_col.button(f"[{n}]", key=f"ev_{link.key}_{n}", width="stretch",
                            type="primary" if (chunk_id, link.key) == (opened, current) else "secondary",
                            help=f"Open [{n}] {labels.get(chunk_id, chunk_id)}",
                            on_click=open_evidence, args=(chunk_id, link.key))
        for n in link.invalid:
            cite_col.button(f"[{n}] ✗", key=f"ev_{link.key}_{n}", width="stretch", disabled=True,
                            help=f"[{n}] is an invalid citation: it matches no source.")
        if not link.numbers:
            cite_col.caption("no source")


def draw_evidence(page: Page, links: list[evidence.Link]) -> None:
    """The Evidence tab: the sentences (left) and the chunk they cite, its used sentences marked."""
    state, sp = page.state, page.sp
    state[S.EVIDENCE_CHUNK] = evidence.default_chunk(sp, links, state[S.EVIDENCE_CHUNK])
    opened, current = state[S.EVIDENCE_CHUNK], state[S.EVIDENCE_SENTENCE]
    said = [link for link in links if link.origin == evidence.ANSWER]
    left, right = st.columns(2, gap="medium")
    with left.container(height=evidence.LIST_HEIGHT, key="evidence_sentences"):
        if said:
            st.markdown("**Answer** — each sentence and the source it cites")
            sentence_rows(page, said, opened, current)
        elif sp.answer is None:
            st.caption("No answer yet: auto-run (or the Answer button) adds its sentences here.")
        st.markdown("**Condensed context** (A4) — each statement and its source")
        sentence_rows(page, [link for link in links if link.origin == evidence.CONDENSED], opened, current)
    with right:
        names = evidence.chunk_labels(sp)
        st.selectbox("Open a chunk", list(names), key=S.EVIDENCE_CHUNK, format_func=names.__getitem__,
                     on_change=open_evidence_by_hand)
        found = evidence.chunk_evidence(sp, opened, links, current)
        chunk = sp.chunk_map()[opened]
        number = f"[{found.number}] " if found.number else ""
        st.markdown(f"**{number}{chunk.source}** § {chunk.heading_label or '(no heading)'}")
        open_in_document_button(page, opened, "ev_open_doc")
        st.markdown(found.summary())
        st.html(found.html)
        st.caption(evidence.LEGEND)


def draw_evidence_tab(page: Page) -> None:
    """Each sentence of the answer and the condensed context, and the chunk it cites."""
    links = page.links
    if links:
        draw_evidence(page, links)
    else:
        st.caption(f"Run {views.stage_label('A4_Condenser')} to link every sentence of the "
                   "condensed context (and then the answer) to the chunk it comes from.")


def draw_history(page: Page) -> None:
    """Stage history with wall times, the edits, and each agent's mode."""
    sp = page.sp
    table(views.history_rows(sp), key="history")
    st.markdown("**Edits**")
    table(editing.edit_rows(sp), key="history_edits", columns=editing.edit_columns())
    st.markdown("**Modes**")
    table(views.mode_rows(sp), key="modes")


def draw_reply(raw, error: str | None, parsed, parsed_title: str) -> None:
    """A model reply as the Agents tab shows it: the raw text, the error, the parsed result."""
    st.markdown(f"**{raw.title}**")
    st.code(raw.text, language=raw.language, wrap_lines=True)
    if error:
        st.markdown("**Error**")
        st.code(error, language="text", wrap_lines=True)
    if parsed is not None:
        st.markdown(f"**{parsed_title}**")
        st.json(parsed)


def draw_replay(page: Page, agent: str) -> None:
    """The Agents tab's replay of one of ``agent``'s calls: its messages to edit, "Send again",
    the new reply and the decision it would make, and "Apply to <stage>"."""
    engine, state, sp = page.engine, page.state, page.sp
    st.markdown("#### Replay a call")
    if engine.services.llm is None:
        st.info(inspector.REPLAY_NEEDS_ENDPOINT, icon=":material/link_off:")
        return
    choices = inspector.replay_calls(sp, agent)
    if not choices:
        return
    index = choices[0] if len(choices) == 1 else st.selectbox(
        "Call to replay", choices, key=f"replay_pick_{agent}",
        format_func=lambda i: inspector.call_label(sp, agent, i))
    for field in inspector.replay_fields(sp, agent, index):
        st.text_area(field.label, value=field.text, key=field.key, height=field.height)
    st.button("Send again", key="replay_send", icon=":material/replay:", help=inspector.SEND_HELP,
              on_click=page.do, args=(edit_actions.replay_send, agent, index))
    shown = edit_actions.shown_replay(state, agent, index)
    if shown is None:
        return
    view = inspector.replay_view(shown.replayed, shown.decision)
    draw_reply(view.raw, view.error, view.parsed, "Parsed reply")
    if view.probabilities:
        st.markdown(f"**Probabilities** · {view.probabilities}")
    st.markdown("**What the stage would decide**")
    if view.why_not:
        st.caption(view.why_not)
    if view.lines:
        st.markdown("\n".join(f"- {line}" for line in view.lines))
    st.button(view.apply_label, key="replay_apply", type="primary", disabled=not view.can_apply,
              help=view.apply_help, on_click=page.do, args=(edit_actions.replay_apply,))


def draw_agents(page: Page) -> None:
    """The agents' model calls, and replaying one."""
    engine, state, sp = page.engine, page.state, page.sp
    inspected = inspector.inspected_agents(sp)
    if inspected:
        table(inspector.overview_rows(sp), key="agents_overview",
              columns=inspector.overview_columns())
        state[S.INSPECT_AGENT] = inspector.pick(sp, state[S.INSPECT_AGENT])
        agent = st.selectbox("Agent stage", inspected, key=S.INSPECT_AGENT,
                             format_func=views.stage_label,
                             help="The agent stages that called the model in this pass.")
        st.markdown(inspector.summary_line(sp, agent))
        if fallback := inspector.fallback_reason(sp, agent):
            st.warning(f"Fell back to rules: {views.plain_names(fallback)}", icon=":material/rule:")
        for call in inspector.call_views(sp, agent):
            if call.title:
                st.markdown(f"**{call.title}**")
            for message in call.messages:
                with st.expander(message.title):
                    st.code(message.text, language=message.language, wrap_lines=True)
            draw_reply(call.raw, call.error, call.parsed, "Parsed result")
        draw_replay(page, agent)
    else:
        st.caption(inspector.empty_note(engine.services.llm is not None))
