"""The page's sidebar, top to bottom: the knowledge base (the switcher, its running
ingestions, managing knowledge bases, its documents, adding documents by upload or folder),
the conversation, the filters and the session's settings (the LLM block between them is
``llm_status.draw``). A change here draws the whole page again."""

from __future__ import annotations

import streamlit as st

from ragstream.interfaces.ui import actions, conversation, ingesting, knowledge
from ragstream.interfaces.ui import state as S
from ragstream.interfaces.ui.page import Page
from ragstream.interfaces.ui.widgets import table


def knowledge_base(page: Page) -> None:
    """The knowledge base the page works on, its running ingestions right under it, managing
    knowledge bases, its figures and documents, and adding documents to it."""
    engines, engine, state, kb_names = page.engines, page.engine, page.state, page.kb_names
    st.header("Knowledge base")
    st.selectbox("Knowledge base", kb_names, key=S.KB, label_visibility="collapsed",
                 on_change=knowledge.switched, args=(engines, state),
                 help="The knowledge base every stage, answer, ingest and search on this page "
                      "works on. Results computed on another one are marked out of date.")
    # the running ingestions right under it (a fragment that redraws itself while one runs)
    st.fragment(draw_ingest_jobs,
                run_every=knowledge.REFRESH_S if knowledge.any_running() else None)(page)
    with st.expander("Manage knowledge bases", expanded=False):
        draw_kb_manager(page)
    info = actions.kb_status(engine)
    c1, c2 = st.columns(2)
    c1.metric("Documents", info["documents"])
    c2.metric("Chunks", info["chunks"])
    st.caption(f"Folder `{info['folder']}`  \nCollection `{info['collection']}` at "
               f"`{info['location']}`  \nLast ingest: {info['last_ingest'] or 'never'}")
    with st.expander("Documents", expanded=False):
        table(info["document_list"], key="kb_docs")
    # chosen files are ingested at once (no button), each once; the limit shown is
    # ingestion.max_file_mb
    uploads = st.file_uploader("Add documents", type=ingesting.upload_types(engine),
                               accept_multiple_files=True,
                               key=f"uploader_{state[S.KB]}_{state[S.UPLOAD_NONCE]}",
                               max_upload_size=ingesting.upload_limit_mb(
                                   engine, st.get_option("server.maxUploadSize")),
                               help=ingesting.upload_help(engine))
    picked = knowledge.pending_uploads(engine, state, uploads)
    if picked:
        knowledge.start_upload(engine, state, [(f.name, f.getvalue()) for f in picked],
                               ids=tuple(f.file_id for f in picked))
        st.rerun()
    draw_ingest_report(page, "upload")
    folder = st.text_input("…or a folder on this machine", key="ingest_folder",
                           placeholder="/path/to/your/docs")
    if st.button("Ingest folder", key="ingest", width="stretch", icon=":material/folder_open:",
                 help="Ingest the documents in the folder typed above (unchanged ones are "
                      "skipped)."):
        knowledge.start_folder(engine, state, folder)
        st.rerun()
    draw_ingest_report(page, "folder")


def draw_ingest_report(page: Page, kind: str) -> None:
    """The last ingest's report, when it is of ``kind`` (``upload``: under the uploader;
    ``folder``: under the folder's button): red, yellow or green, each refused or skipped
    file named with why."""
    state = page.state
    summary = ingesting.ingest_summary(state[S.INGEST_REPORT])
    if summary is None or summary.kind != kind:
        return
    show, icon = {"error": (st.error, ":material/error:"),
                  "warning": (st.warning, ":material/warning:"),
                  "success": (st.success, ":material/download_done:")}[summary.level]
    show(summary.text, icon=icon)
    if summary.warnings:
        with st.expander(f"{len(summary.warnings)} warnings"):
            for line in summary.warnings:
                st.caption(line)


def draw_kb_manager(page: Page) -> None:
    """Create a knowledge base; rename or delete the selected one (the delete asks for a tick)."""
    engines, state = page.engines, page.state
    with st.form("kb_create", border=False, enter_to_submit=True):
        st.text_input("New knowledge base", key=S.KB_NEW_NAME, placeholder="name, e.g. support")
        st.text_input("Its documents folder (optional)", key=S.KB_NEW_FOLDER,
                      placeholder="/path/to/docs — empty: a folder of its own",
                      help="A folder on this machine whose documents it holds (made when "
                           "missing). Empty: RAGstream makes one, and deletes it with the "
                           "knowledge base.")
        st.form_submit_button("Create and select", width="stretch", icon=":material/add:",
                              on_click=knowledge.create, args=(engines, state))
    chosen = state[S.KB]
    if chosen == knowledge.DEFAULT:
        st.caption(f"**{chosen}** holds the bundled documents: it cannot be renamed or deleted.")
        return
    with st.form("kb_rename", border=False, enter_to_submit=True):
        st.text_input(f"Rename {chosen!r} to", key=S.KB_RENAME_TO, placeholder="new name")
        st.form_submit_button("Rename", width="stretch", icon=":material/edit:",
                              on_click=knowledge.rename, args=(engines, state))
    st.checkbox(knowledge.delete_label(engines, chosen), key=S.kb_delete_sure(chosen),
                help="Its index and, when RAGstream made its folder, the folder go; a folder "
                     "you named stays as it is. No other knowledge base is touched.")
    st.button(f"Delete {chosen!r}", key="kb_delete", width="stretch", icon=":material/delete:",
              type="primary" if state.get(S.kb_delete_sure(chosen)) else "secondary",
              on_click=knowledge.delete, args=(engines, state))


def draw_ingest_jobs(page: Page) -> None:
    """The background ingestions (a fragment that draws itself again while one runs): a bar
    with files done of total and the current file, chunks written, elapsed and remaining
    time, a Cancel button; the whole page is drawn again when one ends."""
    state = page.state
    views, ended = knowledge.job_views(state)
    if ended:
        st.rerun()
    for view in views:
        st.progress(view.fraction, text=view.bar_text)
        st.caption(view.line)
        st.button("Cancelling…" if view.stopping else "Cancel", key=f"ingest_cancel_{view.id}",
                  icon=":material/cancel:", disabled=view.stopping, on_click=knowledge.cancel,
                  args=(view.id,), help="Stop before the next file: each document written "
                                        "so far stays whole; the rest are listed.")


def chats(page: Page) -> None:
    """The conversation the page is in, the others to go back to, and a new one."""
    st.header("Conversation")
    draw_chats(page)


def draw_chats(page: Page) -> None:
    """The conversation the page is in, the others to go back to, and a new one."""
    engine, state = page.engine, page.state
    st.selectbox("Conversation", conversation.choices(engine, state), key=S.CHAT,
                 label_visibility="collapsed", on_change=page.do, args=(conversation.opened,),
                 help="The page's prompts search this conversation's remembered turns with the "
                      "knowledge base, carry its last turns, and each answer becomes its next "
                      "turn. Newest first.")
    c1, c2 = st.columns([3, 2], vertical_alignment="bottom")
    c1.text_input("New conversation's name", key=S.CHAT_NEW_NAME, label_visibility="collapsed",
                  placeholder="new one's name (optional)")
    c2.button("New", key="new_chat", width="stretch", icon=":material/add_comment:",
              help="Start a new conversation (named as typed, or chat-date-time); this one "
                   "stays in the list.", on_click=page.do, args=(conversation.start_new,))
    st.caption(conversation.memory_line(engine, state))


def filters(page: Page) -> None:
    """The metadata filters the next Retrieval run searches with."""
    engine, state = page.engine, page.state
    st.header("Filters")
    active_filters = state[S.FILTERS]
    filter_options = actions.filter_choices(engine)
    with st.form("filter_form"):
        known_types = filter_options["doc_type"]
        doc_types = st.multiselect("Document types", known_types, key=S.FILTER_TYPES_WIDGET,
                                   default=[t for t in active_filters.doc_type if t in known_types])
        sources = st.text_input("Sources", value=", ".join(active_filters.source),
                                help="Source names or file path patterns, comma-separated "
                                     f"(e.g. {', '.join(filter_options['source'][:2]) or 'faq/*'})")
        d1, d2 = st.columns(2)
        since = d1.date_input("Updated from", value=active_filters.updated_from, format="YYYY-MM-DD")
        until = d2.date_input("Updated to", value=active_filters.updated_to, format="YYYY-MM-DD")
        set_filters = st.form_submit_button("Apply filters", width="stretch")
    if set_filters:
        actions.set_filters(state, doc_types, sources, since or None, until or None)
        st.rerun()
    searched = "everything" if active_filters.empty else active_filters.describe()
    st.caption(f"Retrieval searches: {searched}. Applies from the next Retrieval run.")


def settings(page: Page) -> None:
    """The session's settings (validated like the configuration files), and going back to the
    files' values."""
    engine, state = page.engine, page.state
    st.header("Settings")
    st.caption("For this session only; validated like the configuration files.")
    with st.form("settings"):
        values: dict[str, int | float] = {}
        for key, label in actions.EDITABLE_SETTINGS.items():
            current = actions.session_config(engine, state).get(key)
            if isinstance(current, int):
                values[key] = st.number_input(label, value=current, step=1, key=S.setting_widget(key))
            else:
                values[key] = st.number_input(label, value=float(current), step=0.05,
                                              format="%.2f", key=S.setting_widget(key))
        applied = st.form_submit_button("Apply", width="stretch")
    if applied:
        actions.apply_settings(engine, state, values)
        st.rerun()
    if st.button("Reset to file values", key="reset_settings", width="stretch"):
        actions.reset_settings(state)
        for key in actions.EDITABLE_SETTINGS:
            state.pop(S.setting_widget(key), None)
        st.rerun()
