"""RAGstream workbench — the Streamlit page. It draws and dispatches; the logic lives in
``ragstream`` (``ragstream.interfaces.ui`` for state, tables and actions).

Run: ``bash scripts/run_app.sh`` (or ``.venv/bin/python -m streamlit run ui_streamlit.py``).
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from contextlib import closing

import pandas as pd
import streamlit as st

from ragstream.common.errors import RagstreamError
from ragstream.interfaces.ui import (
    actions,
    answer_view,
    citations,
    conversation,
    editing,
    eval_tab,
    evidence,
    inspector,
    knowledge,
    llm_status,
    runs_tab,
    views,
)
from ragstream.interfaces.ui import state as S
from ragstream.stages import controller
from ragstream.stages.staleness import Stale
from ragstream.state.super_prompt import SuperPrompt
from ragstream.workbench.engine import Engine

st.set_page_config(page_title="RAGstream workbench", page_icon=":material/manage_search:", layout="wide")


@st.cache_resource(show_spinner=False)
def get_engine() -> Engine:
    """The page's engine, made once per server: knowledge base brought up to date, models loaded."""
    engine = Engine()
    engine.ensure_knowledge_base()
    engine.warm_up()
    gc.freeze()  # the models and indexes live as long as the server: no collector pass walks them
    return engine


@st.cache_resource(show_spinner=False)
def get_engines() -> knowledge.Engines:
    """The engine of each knowledge base, made once per server from the default's (the models
    are shared); the index of each one made is, like the default's, left out of the
    collector's passes."""
    return knowledge.Engines(get_engine(), on_made=lambda _engine: gc.freeze())


def table(rows: list[dict], key: str, height: int | None = None,
          columns: dict | None = None, lines: int | None = None) -> views.Grid | None:
    """Show ``rows`` as a table (an empty cell reads "—"), or a caption saying there is nothing
    to show yet. Its cells are fitted to their columns (``views.grid``): rows as tall as the
    longest cell's lines (``lines`` exactly, if given), a longer cell cut with "…", no word
    broken, no sideways scrolling at 1280 px; ``height`` is the most it grows to."""
    if not rows:
        st.caption("Nothing to show yet.")
        return None
    if key in views.SIDEBAR_TABLES:  # the sidebar's narrow tables: as Streamlit sizes them
        st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch", key=key,
                     height=height or "auto", column_config=columns, placeholder=views.EMPTY)
        return None
    shown = views.grid(rows, columns, lines=lines, most_height=height or views.GRID_MAX_HEIGHT)
    st.dataframe(pd.DataFrame(shown.rows), hide_index=True, width="stretch", key=key,
                 height=shown.height, column_config=shown.columns, row_height=shown.row_height,
                 placeholder=views.EMPTY)
    whole_on_hover(shown)
    return shown


def whole_on_hover(drawn: views.Grid, note: str = views.CUT_NOTE) -> None:
    """Under a grid with cells cut short: ``note``, and its cut cells' whole texts for the
    page's hover script (they must follow the grid directly)."""
    if drawn.whole:
        st.caption(note + views.hover_data(drawn), unsafe_allow_html=True)


def do(action: Callable[..., object], *args: object) -> None:
    """Run a page action (``ragstream.interfaces.ui.actions``) as a widget's callback: it changes the
    session state, which the script run that follows draws."""
    action(engine, state, *args)


def chunk_table(src, view: str, title: str, note: str | None, opened: bool, query: str,
                discarded: bool = False) -> None:
    """One stage's chunk table, with the pin / exclude checkboxes the person may tick (each
    tick is an edit of this prompt); ``note`` says when the table is out of date; ``query``
    keeps the rows whose chunk holds its words. Long cells wrap; a cell still too long for its
    three lines is shown whole under "Open a chunk" for the chunk picked there. Its grid is drawn only
    while its expander is open (``opened``: open unless the person closed it; one the person
    opened or closed stays so, though its title's counts change, until the next run). The
    table of an out-of-date pass is folded and greyed, its title saying why; one an edit
    discarded (``discarded``) is not: the person goes on editing there until they re-run."""
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
        drawn = views.chunk_grid(shown, columns)
        st.data_editor(pd.DataFrame(drawn.rows, columns=list(columns)), hide_index=True,
                       width="stretch", key=key, height=drawn.height,
                       row_height=drawn.row_height, placeholder=views.EMPTY,
                       column_config=columns,
                       disabled=[c for c in columns if c not in views.CHECK_COLUMNS])
        if changes := editing.table_changes(shown, edited_rows(key)):
            actions.change_chunks(engine, state, changes)
            st.rerun()
        whole_on_hover(drawn, views.CUT_NOTE + " Pick its chunk under **Open a chunk** below "
                                               "to read its row in every table whole.")


def chunk_picker(src, label: str, key: str, search_key: str, help_text: str) -> str | None:
    """A chunk picker of the chunks Retrieval returned, with a box beside it that keeps the
    chunks whose text holds the words typed (any order; the picker itself also finds them by
    its labels: id, section, the text's first words, or the passage that holds the words).
    The chunk picked, or None when there is none (the box then says so)."""
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


def edited_rows(key: str) -> dict:
    """The cells the person changed in the editable table ``key`` (row position → columns)."""
    return (st.session_state.get(key) or {}).get("edited_rows", {})


def chunk_buttons(chunk_id: str, where: str) -> None:
    """Pin / exclude / undo buttons for one chunk, as the person's decision on it stands."""
    decision = editing.chunk_decision(state[S.SP], chunk_id)
    c1, c2, c3 = st.columns(3)
    c1.button("Pin", icon=":material/push_pin:", key=f"{where}_pin", width="stretch",
              disabled=decision is not None and decision.kind in ("pin", "add"),
              help="Keep this chunk through A3 and A4, in the final selection (pinned ones first).",
              on_click=do, args=(actions.chunk_action, chunk_id, "pin"))
    c2.button("Exclude", icon=":material/block:", key=f"{where}_exclude", width="stretch",
              disabled=decision is not None and decision.kind == "exclude",
              help="Drop this chunk from Retrieval on.",
              on_click=do, args=(actions.chunk_action, chunk_id, "exclude"))
    c3.button("Undo my decision", icon=":material/undo:", key=f"{where}_undo", width="stretch",
              disabled=decision is None,
              help="Let the stages decide about this chunk by themselves again.",
              on_click=do, args=(actions.chunk_action, chunk_id, "unpin"))


def item_list(items: list[editing.Item], what: str, prefix: str) -> None:
    """A4's statements or A5's rules, each editable in place, with ↑ ↓ ✕ (every change is an
    edit of this prompt)."""
    nonce = state[S.EDIT_NONCE]
    for i, item in enumerate(items, start=1):
        text_col, up, down, drop = st.columns([14, 1, 1, 1], vertical_alignment="center")
        key = f"{prefix}_{nonce}_{i}"
        # the label says whose it is: a source's citation, or "you" (your note, your rule)
        label = f"{prefix[0].upper()}{i}" + (f" · {item.label}" if item.label else "")
        text_col.text_area(label, value=item.text, key=key, height=68,
                           on_change=lambda k=key, it=item: do(
                               actions.item_action, what, "text", it.key, st.session_state[k]))
        up.button("↑", key=f"{key}_up", disabled=i == 1, help=f"Move this {what} up",
                  on_click=do, args=(actions.item_action, what, "move", item.key, i - 1))
        down.button("↓", key=f"{key}_down", disabled=i == len(items), help=f"Move this {what} down",
                    on_click=do, args=(actions.item_action, what, "move", item.key, i + 1))
        drop.button("✕", key=f"{key}_remove", help=f"Remove this {what}",
                    on_click=do, args=(actions.item_action, what, "remove", item.key))


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


def draw_replay(agent: str) -> None:
    """The Agents tab's replay of one of ``agent``'s calls: its messages to edit, "Send again",
    the new reply and the decision it would make, and "Apply to <stage>"."""
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
              on_click=do, args=(actions.replay_send, agent, index))
    shown = actions.shown_replay(state, agent, index)
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
              help=view.apply_help, on_click=do, args=(actions.replay_apply,))


# --------------------------------------------------------------------------- start
try:
    with st.spinner("Loading models and bringing the knowledge base up to date…"):
        engines = get_engines()
except RagstreamError as err:
    st.error(f"**{err.kind}** — {err}")
    st.stop()

S.init_state(st.session_state)
state = st.session_state
# a reload reopens the session's latest run (its knowledge base and conversation too)
runs_tab.start_session(engines.default, state, st.query_params)
kb_names = knowledge.choices(engines, state)
with st.spinner(f"Opening the knowledge base {state[S.KB]!r}…"):
    engine = knowledge.selected(engines, state)  # the one the sidebar selects: every action's
conversation.start(state)  # a session starts in a new conversation
conversation.follow(engine, state)  # the selected knowledge base's: another one's is left
state[S.REDRAW_ALL] = False  # this run draws the whole page
#: what the main area works out at each draw (``main_area``), which the drawing helpers read
sp: SuperPrompt = state[S.SP]
stale: Stale | None = None
plan: tuple[str, str] | None = None
before: SuperPrompt | None = None
links: list[evidence.Link] = []

# --------------------------------------------------------------------------- sidebar
def draw_kb_manager() -> None:
    """Create a knowledge base; rename or delete the selected one (the delete asks for a tick)."""
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


def draw_chats() -> None:
    """The conversation the page is in, the others to go back to, and a new one."""
    st.selectbox("Conversation", conversation.choices(engine, state), key=S.CHAT,
                 label_visibility="collapsed", on_change=do, args=(conversation.opened,),
                 help="The page's prompts search this conversation's remembered turns with the "
                      "knowledge base, carry its last turns, and each answer becomes its next "
                      "turn. Newest first.")
    c1, c2 = st.columns([3, 2], vertical_alignment="bottom")
    c1.text_input("New conversation's name", key=S.CHAT_NEW_NAME, label_visibility="collapsed",
                  placeholder="new one's name (optional)")
    c2.button("New", key="new_chat", width="stretch", icon=":material/add_comment:",
              help="Start a new conversation (named as typed, or chat-date-time); this one "
                   "stays in the list.", on_click=do, args=(conversation.start_new,))
    st.caption(conversation.memory_line(engine, state))


def draw_ingest_jobs() -> None:
    """The background ingestions (a fragment that draws itself again while one runs): a bar
    with files done of total and the current file, chunks written, elapsed and remaining
    time, a Cancel button; the whole page is drawn again when one ends."""
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


with st.sidebar:
    st.header("Knowledge base")
    st.selectbox("Knowledge base", kb_names, key=S.KB, label_visibility="collapsed",
                 on_change=knowledge.switched, args=(engines, state),
                 help="The knowledge base every stage, answer, ingest and search on this page "
                      "works on. Results computed on another one are marked out of date.")
    # the running ingestions right under it (a fragment that redraws itself while one runs)
    st.fragment(draw_ingest_jobs, run_every=knowledge.REFRESH_S if knowledge.any_running() else None)()
    with st.expander("Manage knowledge bases", expanded=False):
        draw_kb_manager()
    info = actions.kb_status(engine)
    c1, c2 = st.columns(2)
    c1.metric("Documents", info["documents"])
    c2.metric("Chunks", info["chunks"])
    st.caption(f"Folder `{info['folder']}`  \nCollection `{info['collection']}` at "
               f"`{info['location']}`  \nLast ingest: {info['last_ingest'] or 'never'}")
    with st.expander("Documents", expanded=False):
        table(info["document_list"], key="kb_docs")

    def draw_ingest_report(kind: str) -> None:
        """The last ingest's report, when it is of ``kind`` (``upload``: under the uploader;
        ``folder``: under the folder's button): red, yellow or green, each refused or skipped
        file named with why."""
        summary = actions.ingest_summary(state[S.INGEST_REPORT])
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

    # chosen files are ingested at once (no button), each once; the limit shown is
    # ingestion.max_file_mb
    uploads = st.file_uploader("Add documents", type=actions.upload_types(engine),
                               accept_multiple_files=True,
                               key=f"uploader_{state[S.KB]}_{state[S.UPLOAD_NONCE]}",
                               max_upload_size=actions.upload_limit_mb(
                                   engine, st.get_option("server.maxUploadSize")),
                               help=actions.upload_help(engine))
    picked = knowledge.pending_uploads(engine, state, uploads)
    if picked:
        knowledge.start_upload(engine, state, [(f.name, f.getvalue()) for f in picked],
                               ids=tuple(f.file_id for f in picked))
        st.rerun()
    draw_ingest_report("upload")
    folder = st.text_input("…or a folder on this machine", key="ingest_folder",
                           placeholder="/path/to/your/docs")
    if st.button("Ingest folder", key="ingest", width="stretch", icon=":material/folder_open:",
                 help="Ingest the documents in the folder typed above (unchanged ones are "
                      "skipped)."):
        knowledge.start_folder(engine, state, folder)
        st.rerun()
    draw_ingest_report("folder")

    st.header("Conversation")
    draw_chats()

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

    llm_status.draw(engine)

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

# --------------------------------------------------------------------------- prompt + buttons
def waiting_note(slot):
    """An ``on_wait`` callback that writes who waits for the model, and how long, in ``slot``."""
    return lambda agent, model, seconds: slot.info(views.waiting_line(agent, model, seconds),
                                                   icon=":material/hourglass_top:")


def stream_answer() -> None:
    """Answer the finished super-prompt, showing the text as it streams in."""
    st.markdown("#### Answer")
    with closing(actions.answer_stream(engine, state)) as pieces:
        st.write_stream(pieces, cursor=" ▌")


def open_evidence(chunk_id: str, key: str | None) -> None:
    """Open ``chunk_id`` in the Evidence tab, from sentence ``key`` (None: picked by hand)."""
    st.session_state[S.EVIDENCE_CHUNK] = chunk_id
    st.session_state[S.EVIDENCE_SENTENCE] = key


def open_evidence_by_hand() -> None:
    """The chunk picker changed: no sentence is the opened one any more."""
    st.session_state[S.EVIDENCE_SENTENCE] = None


def sentence_rows(links: list[evidence.Link], opened: str | None, current: str | None) -> None:
    """Each sentence with a button per chunk it cites ([n]); the sentences citing the opened
    chunk wear a badge, the button they opened it with is highlighted."""
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


def draw_reading(where: str) -> None:
    """"Read as: …" for a follow-up A0 read with the conversation (what was typed, the earlier
    question, who read it), under the stage line, in the Fields tab and above the answer;
    nothing for a prompt that stands on its own. ``where`` keys its container."""
    view = answer_view.reading_view(sp)
    if view is None:
        return
    old = stale is not None and where != "answer"
    with st.container(key=f"{views.STALE_KEY}reading_{where}" if old else f"reading_{where}"):
        st.markdown(view.line + (" · :gray-badge[out of date]" if old else ""))
        st.caption(view.detail)


def draw_source_buttons() -> None:
    """One button per source the answer cites, under it: each opens the source in its
    document (``open_citation``)."""
    buttons = citations.source_buttons(sp)
    if not buttons:
        return
    with st.container(horizontal=True, key="cited_sources", gap="small",
                      vertical_alignment="center"):
        st.caption("Open a source in its document:", width="content")
        for b in buttons:
            if st.button(b.label, key=f"cite_{b.n}", help=b.help, icon=":material/menu_book:"):
                open_citation(b.n)


def open_in_document_button(chunk_id: str, key: str) -> None:
    """"Open [n] in its document" for a chunk the answer cites (as its button under the
    answer does); nothing for a chunk it does not cite."""
    n = citations.source_number(sp, chunk_id)
    if n is not None and st.button(f"Open [{n}] in its document", key=key,
                                   icon=":material/menu_book:",
                                   help="The answer's source in its document: the section "
                                        "around it, the cited text marked, code as code"):
        open_citation(n)


def open_citation(n: int) -> None:
    """Source ``[n]`` of the answer in a dialog: the section around the cited chunk, its cited
    text marked, code as code, a paged document's page."""
    view = citations.citation_view(sp, n, citations.fetch_for(engine, sp),
                                   actions.session_config(engine, state).settings.answer.max_citation_range)
    if view is None:
        st.warning(f"[{n}] names no source of this answer.")
        return
    st.dialog(view.title, width="large", icon=":material/menu_book:")(draw_citation)(view)


def draw_citation(view: citations.CitationView) -> None:
    """An opened source: its section's title, the document and page, what is marked, then the
    section around the cited chunk (the cited text beside a bar, its quoted words marked)."""
    st.markdown(f"### {answer_view.md_text(view.section)}")
    page = f" · **{view.page}**" if view.page else ""
    st.caption(f"{answer_view.md_text(view.document)} · `{view.source}`{page} · chunk `{view.chunk_id}`")
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


def draw_evidence(links: list[evidence.Link]) -> None:
    """The Evidence tab: the sentences (left) and the chunk they cite, its used sentences marked."""
    state[S.EVIDENCE_CHUNK] = evidence.default_chunk(sp, links, state[S.EVIDENCE_CHUNK])
    opened, current = state[S.EVIDENCE_CHUNK], state[S.EVIDENCE_SENTENCE]
    said = [link for link in links if link.origin == evidence.ANSWER]
    left, right = st.columns(2, gap="medium")
    with left.container(height=evidence.LIST_HEIGHT, key="evidence_sentences"):
        if said:
            st.markdown("**Answer** — each sentence and the source it cites")
            sentence_rows(said, opened, current)
        elif sp.answer is None:
            st.caption("No answer yet: auto-run (or the Answer button) adds its sentences here.")
        st.markdown("**Condensed context** (A4) — each statement and its source")
        sentence_rows([link for link in links if link.origin == evidence.CONDENSED], opened, current)
    with right:
        names = evidence.chunk_labels(sp)
        st.selectbox("Open a chunk", list(names), key=S.EVIDENCE_CHUNK, format_func=names.__getitem__,
                     on_change=open_evidence_by_hand)
        found = evidence.chunk_evidence(sp, opened, links, current)
        chunk = sp.chunk_map()[opened]
        number = f"[{found.number}] " if found.number else ""
        st.markdown(f"**{number}{chunk.source}** § {chunk.heading_label or '(no heading)'}")
        open_in_document_button(opened, "ev_open_doc")
        st.markdown(found.summary())
        st.html(found.html)
        st.caption(evidence.LEGEND)


def draw_turns() -> None:
    """The conversation's turns, newest first: which go into the next prompt, which Retrieval
    searches (or why not), which were forgotten; "Forget" for each one that is not."""
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
                      on_click=do, args=(conversation.forget, view.turn))
        st.markdown(view.text)
    st.caption("The earlier answers' [n] markers are left out: they pointed at those answers' "
               "sources.")


def resume_button(key: str) -> None:
    """"↻ Re-run X → Y" when a stage is out of date or an edit discarded results (one click
    re-runs from the first such stage to where the pass had got); nothing otherwise."""
    if plan is None:
        return
    if st.button(views.resume_label(*plan), key=key, type="primary", width="stretch",
                 help=views.resume_help(*plan)):
        actions.resume(engine, state, *progress_callbacks())
        st.rerun()


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


def draw_edits_offer() -> None:
    """Edits made for another prompt: offered to the prompt in the box, listed (kind, target,
    value), applied only with "Apply them here"; or, once chosen before the prompt ran, the
    ones that will apply when it runs."""
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
                  icon=":material/input:", on_click=do, args=(actions.apply_offered_edits,))
        c2.button("Dismiss", key="edits_offer_dismiss", width="stretch",
                  on_click=actions.dismiss_offered_edits, args=(state,))


def run_one_stage(name: str) -> None:
    """A stage button's callback: the stage runs before the page is drawn, so one script run
    draws its result (a button read in the script would need a second run). While an agent
    waits for the model, a note at the top of the page says who and how long."""
    on_wait = waiting_note(st.empty()) if engine.services.llm is not None else None
    actions.run_stage(engine, state, name, on_wait=on_wait)


def draw_chunk_views() -> None:
    """The chunk tables, one per stage view, with the person's pin / exclude boxes; one
    chunk opened whole; any chunk of the knowledge base found by its words."""
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
        resume_button("resume_views")
    query = st.text_input("Filter the tables' rows", key=S.TABLE_FILTER,
                          placeholder="words from inside a chunk, its id, section or reason",
                          help="Keeps the rows whose chunk holds every word, in any order.") \
        if shown_views else ""
    for key, title, src, note, discarded in shown_views:
        chunk_table(src, key, title, note, opened=key == shown_views[-1][0], query=query,
                    discarded=discarded)
    view_src, _ = editing.source_for(sp, before, editing.stage_of_view("retrieval"))
    picked = chunk_picker(view_src, "Open a chunk", "detail_chunk", S.DETAIL_SEARCH,
                          "Type words from the chunk's text, id or section to find it.")
    if picked is not None:
        text, meta = views.chunk_detail(view_src, picked)
        st.markdown(f"**{meta['source']}** § {' > '.join(meta['heading_path'])}")
        for key, title, src, *_ in shown_views:  # its row in each table, whole
            if any(r.chunk_id == picked for r in src.view(key)):
                st.caption(f"**{title}** · {views.row_detail(src, key, picked)}")
        chunk_buttons(picked, "detail")
        open_in_document_button(picked, "detail_open_doc")
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
        found = actions.find_chunks(engine, query)
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
                      on_click=do, args=(actions.chunk_action, chunk.id, "add"))

def draw_fields() -> None:
    """The prompt's body fields, who set each and how; editable."""
    cfg_now = actions.session_config(engine, state)
    fields_src, fields_discarded = editing.source_for(sp, before, 1)
    st.caption("The prompt's body fields, who set each and how (header: the ladder's match; "
               "rule / default / LLM: A2's choice; you: your edit). Change a value to set it by "
               "hand for this prompt; fields with choices take one of them.")
    if note := editing.stage_note(1, fields_discarded, stale):
        st.warning(note, icon=":material/update:")
    draw_reading("fields")
    if plan is not None:
        resume_button("resume_fields")
    field_key = f"fields_{state[S.EDIT_NONCE]}"
    field_rows = editing.field_rows(fields_src, cfg_now)
    drawn = views.grid(field_rows, editing.field_columns(), most_height=900, editable=["value"],
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
        actions.set_fields(engine, state, typed)  # a refused value is named at the top
        st.rerun()

def draw_context() -> None:
    """A4's condensed context and A5's format rules, each editable in place."""
    a4_src, a4_discarded = editing.source_for(sp, before, editing.stage_of_view("a4"))
    statements = editing.statement_items(a4_src)
    if plan is not None:
        resume_button("resume_context")
    st.markdown("**Condensed context** (A4) — move a statement or remove it (its citation stays "
                "attached), or rewrite it: your words are then your note, never cited.")
    if statements is None:
        st.caption(f"Run {views.stage_label('A4_Condenser')} to edit its condensed context.")
    else:
        if note := editing.stage_note(editing.stage_of_view("a4"), a4_discarded, stale):
            st.warning(note, icon=":material/update:")
        if statements:
            item_list(statements, "statement", "context")
        else:
            st.caption("The condensed context has no statements.")
        c1, c2 = st.columns([5, 1], vertical_alignment="bottom")
        new_note = c1.text_input("Add a note of your own", key=f"new_note_{state[S.EDIT_NONCE]}",
                                 placeholder="e.g. We run the ReRanker on CPU only.",
                                 help="Your words, not a source's: listed under “Your notes” "
                                      "without a citation, and never cited by the answer.")
        c2.button("Add note", key="add_note", width="stretch", disabled=not new_note.strip(),
                  on_click=do, args=(actions.item_action, "statement", "add", "", new_note))
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
        item_list(rules, "rule", "rule")
        c1, c2 = st.columns([5, 1], vertical_alignment="bottom")
        new_rule = c1.text_input("Add a rule of your own", key=f"new_rule_{state[S.EDIT_NONCE]}",
                                 placeholder="e.g. Name the stage you mean.")
        c2.button("Add rule", key="add_rule", width="stretch", disabled=not new_rule.strip(),
                  on_click=do, args=(actions.item_action, "rule", "add", "", new_rule))

def draw_journey() -> None:
    """One chunk followed through the stages."""
    if views.chunk_choices(sp):
        state[S.JOURNEY_CHUNK] = views.journey_default(sp, state[S.JOURNEY_CHUNK])
        picked = chunk_picker(sp, "Chunk", S.JOURNEY_CHUNK, S.JOURNEY_SEARCH,
                              "Opens on the top chunk of the latest stage. Type words from the "
                              "chunk's text, id or section to find it.")
        if picked is not None:
            table(views.journey_rows(sp, picked), key="journey", columns=views.journey_columns())
            chunk_buttons(picked, "journey")
    else:
        st.caption("Run Retrieval to follow a chunk through the stages.")

def draw_stage_diff() -> None:
    """Two chunk stages of this run compared, and the rank-movement chart."""
    pair = views.diff_default(sp, state[S.DIFF_A], state[S.DIFF_B])
    if pair:
        state[S.DIFF_A], state[S.DIFF_B] = pair
        ran = views.diff_stages(sp)
        c1, c2, c3 = st.columns(3)
        stage_a = c1.selectbox("Stage A", ran, key=S.DIFF_A, format_func=views.stage_title,
                               help="Compare from this stage…")
        stage_b = c2.selectbox("Stage B", ran, key=S.DIFF_B, format_func=views.stage_title,
                               help="…to this one. Move = rank in A − rank in B.")
        order = c3.selectbox("Order", views.DIFF_SORTS, key=S.DIFF_SORT,
                             help="Or click a column header to sort by it.")
        diff = views.diff_rows(sp, stage_a, stage_b, order)
        st.caption(views.diff_summary(diff, stage_a, stage_b) + ". ↑3: three places higher in "
                   "B; new: not in A; dropped: B dropped it or does not have it (the reason "
                   "says where it left).")
        table(diff, key="stage_diff", height=views.TABLE_MAX_HEIGHT,
              columns=views.diff_columns(stage_a, stage_b, rows=diff))
    else:
        st.caption("Run Retrieval and the ReRanker to compare two stages.")
    bump = views.bump_chart(sp)
    if bump is not None and len(views.diff_stages(sp)) > 1:
        st.altair_chart(bump, width="stretch", key="bump_chart")


def draw_evidence_tab() -> None:
    """Each sentence of the answer and the condensed context, and the chunk it cites."""
    if links:
        draw_evidence(links)
    else:
        st.caption(f"Run {views.stage_label('A4_Condenser')} to link every sentence of the "
                   "condensed context (and then the answer) to the chunk it comes from.")


def draw_history() -> None:
    """Stage history with wall times, the edits, and each agent's mode."""
    table(views.history_rows(sp), key="history")
    st.markdown("**Edits**")
    table(editing.edit_rows(sp), key="history_edits", columns=editing.edit_columns())
    st.markdown("**Modes**")
    table(views.mode_rows(sp), key="modes")

def draw_scores() -> None:
    """Score histograms per stage."""
    charts = views.score_charts(sp)
    if charts:
        st.caption("Chunks per score, per stage. Stages that share a score (ReRanker and A3: "
                   "the rerank score) share its scale.")
        for title, chart in charts:
            st.altair_chart(chart, width="stretch", key=f"chart_{title}")
    else:
        st.caption("The chart appears after Retrieval.")

def draw_agents() -> None:
    """The agents' model calls, and replaying one."""
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
        draw_replay(agent)
    else:
        st.caption(inspector.empty_note(engine.services.llm is not None))

def draw_eval() -> None:
    """Answer and retrieval quality on a question set."""
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

def draw_runs() -> None:
    """The kept runs, newest first, searchable by prompt: open one, compare it with the page's
    run, download it; the page's run downloaded; a JSON file opened as a run; the Q&A log."""
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
        drawn = views.grid(runs_tab.run_rows(listed, state[S.RUN_ID]), runs_tab.run_columns(),
                           total=runs_tab.RUNS_TABLE_WIDTH, lines=views.TABLE_LINES,
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
                      on_click=do, args=(runs_tab.open_run, chosen.id))
            b2.button(f"Compare run {chosen.id} with the page's", key="compare_run",
                      width="stretch", icon=":material/compare_arrows:",
                      disabled=state[S.RUN_ID] in (None, chosen.id),
                      help="Open the Compare tab with this run as A and the page's run as B.",
                      on_click=runs_tab.compare_with, args=(state, chosen.id))
            b3.download_button("Download as JSON", runs_tab.export_text(engine, chosen.id),
                               file_name=f"run-{chosen.id}.json", mime="application/json",
                               key="download_run", width="stretch", icon=":material/download:")
    draw_export()
    upload = st.file_uploader("Open a run from a JSON file (a SuperPrompt downloaded here, or "
                              "`ragstream runs export ID`)", type=["json"],
                              key=f"run_file_{state[S.EDIT_NONCE]}")
    if upload is not None:
        st.button(f"Open {upload.name} as a run", key="open_run_file",
                  on_click=do, args=(runs_tab.open_file, upload.name, upload.getvalue()))
    draw_log()


def draw_compare() -> None:
    """Two kept runs side by side (by default the page's run and the one before it): the
    inputs that differ, every chunk's rank and status in both at each stage with the cause of
    each move, the rank chart of both, the final selections, prompt_ready as a diff and the
    two answers with their sources."""
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


def draw_log() -> None:
    """The Q&A log's latest interactions, folded under the runs."""
    try:
        log = engine.qa_log()
        with st.expander(f"Q&A log — {log.count()} interactions logged in `{engine.qa_log_path}`"):
            table(views.log_rows(log.recent(50)), key="qa_log")
    except RagstreamError as err:
        st.error(f"The Q&A log cannot be shown ({err.kind}): {err}")


def draw_export() -> None:
    """Downloads of the page's run: the SuperPrompt (the file a run opens from) and
    prompt_ready."""
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


#: the result tabs, in order: label -> what draws it. Only the open tab is drawn (``st.tabs``
#: with state tracking): a stage button's click redraws one tab, not twelve; the open tab is
#: kept in the URL (``?view=…``), so a reload comes back to it
RESULT_TABS: dict[str, Callable[[], None]] = {
    "Chunk views": draw_chunk_views, "Fields": draw_fields, "Context & rules": draw_context,
    "Chunk journey": draw_journey, "Stage diff": draw_stage_diff, "Evidence": draw_evidence_tab,
    "History": draw_history, "Scores": draw_scores, "Agents": draw_agents,
    "Runs": draw_runs, runs_tab.COMPARE_TAB: draw_compare, "Eval": draw_eval,
}


@st.fragment
def main_area() -> None:
    """The prompt, the run buttons, the answer, prompt_ready and the result tabs: a fragment, so
    that a click here (a stage button, an edit, a picker) redraws this area and not the
    sidebar, whose knowledge base, filters and settings a stage run does not change (a
    sidebar change redraws everything). The module's drawing helpers read what this area
    works out first (the state, what is out of date, the evidence links)."""
    global before, links, plan, sp, stale
    if state[S.REDRAW_ALL]:  # a callback here changed what the sidebar shows too
        st.rerun(scope="app")
    sp = state[S.SP]
    st.html(views.PAGE_CSS)  # an out-of-date pass's results are greyed; room for table toolbars
    st.html(views.CELL_HOVER_JS, unsafe_allow_javascript=True)  # a cut cell whole on hover
    st.html(views.CITE_CLICK_JS, unsafe_allow_javascript=True)  # the answer's [n] open sources
    st.title("RAGstream workbench")
    prompt_limit = actions.session_config(engine, state).settings.prompt.max_prompt_chars
    st.text_area("Prompt", key=S.PROMPT, height=130,
                 help="Plain text becomes the task. Headers such as Task:, Context:, Purpose:, "
                      f"Audience:, Format:, Constraints: (or German Aufgabe:, Kontext:…) are mapped. "
                      f"At most {prompt_limit:,} characters.")
    too_long = views.prompt_length_problem(state[S.PROMPT], prompt_limit)
    if too_long:
        st.error(too_long, icon=":material/block:")
    stale = actions.out_of_date(engine, state)
    pending = actions.pending_state(state)
    plan = actions.resume_plan(engine, state, stale)
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
                stream_answer()
        elif next_name is None:
            state[S.NOTICE] = "Nothing to run: every stage is current."
        else:
            actions.run_stage(engine, state, next_name, on_wait=waiting_note(st.empty()))
        st.rerun()
    refusal = actions.answer_refusal(engine, state, stale)
    if answer_col.button("Answer", key="answer", disabled=refusal is not None,
                         help=views.plain_names(refusal) if refusal else
                         "Answer the finished super-prompt (runs after Prompt Builder)."):
        stream_answer()
        st.rerun()
    for button_row in views.button_rows(pending, stale):
        for col, b in zip(st.columns(len(button_row)), button_row):
            refused = too_long if b.name == controller.STAGE_NAMES[0] else None
            col.button(b.text, key=f"stage_{b.name}", disabled=not b.enabled or refused is not None,
                       help=f"{b.label}: {refused or b.help}", width="stretch",
                       on_click=run_one_stage, args=(b.name,))
    if plan is not None:
        note_col, button_col = st.columns([5, 2], vertical_alignment="center")
        note_col.warning(editing.out_of_date_banner(pending, stale), icon=":material/update:")
        with button_col:
            resume_button("resume")
    if state[S.ERROR]:
        kind, message = state[S.ERROR]
        st.error(f"**{kind}** — {views.plain_names(message)}", icon=":material/error:")
    if state[S.NOTICE]:
        st.info(views.plain_names(state[S.NOTICE]))
        state[S.NOTICE] = None
    draw_edits_offer()
    if sp.edits and state[S.PROMPT] == sp.user_text:  # a new prompt in the box starts without them
        with st.expander(f"Your edits ({len(sp.edits)}) — applied by the stages every run", expanded=True):
            table(editing.edit_rows(sp), key=f"edits_{state[S.EDIT_NONCE]}", columns=editing.edit_columns())
            c1, c2, c3 = st.columns([2, 1, 1], vertical_alignment="bottom")
            undo = c1.selectbox("Edit", [e.id for e in sp.edits], key=f"undo_pick_{state[S.EDIT_NONCE]}",
                                format_func=lambda i: next(f"{e.id}. {e.describe()}" for e in sp.edits
                                                           if e.id == i))
            c2.button("Undo this edit", key="undo_edit", width="stretch",
                      on_click=do, args=(actions.undo_edit, undo))
            c3.button("Clear edits", key="clear_edits", width="stretch",
                      help="Forget every edit: the stages decide by themselves again.",
                      on_click=do, args=(actions.undo_edit, None))
    stage_line = views.stage_line(sp, next_name)
    if state[S.OVERRIDES]:
        stage_line += f" · session settings: {len(state[S.OVERRIDES])} changed"
    st.markdown(stage_line)
    st.caption(knowledge.results_line(sp, engine.kb))
    if sp.answer is None or stale is not None:  # an answer shows it above its own text
        draw_reading("stages")
    # --------------------------------------------------------------------------- answer
    links = evidence.sentence_links(
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
            draw_reading("answer")
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
            draw_source_buttons()
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
                        open_citation(cited.n)
                    if c2.button("Follow this chunk through the stages", key="follow_cited",
                                 icon=":material/route:", width="stretch"):
                        state[S.JOURNEY_CHUNK] = cited.chunk_id
                        state[S.VIEW] = "Chunk journey"  # the tabs are drawn below: not yet in this run
                        st.rerun()
            for n in ans.invalid_citations:
                st.warning(f"[{n}] is an invalid citation: it matches no source in the prompt.")
    if chat_title := conversation.title(engine, state):
        c1, c2 = st.columns([4, 1], vertical_alignment="top")
        box = c1.expander(chat_title, expanded=state[S.CONVERSATION_SHOWN], key=S.CONVERSATION_OPEN,
                          on_change=conversation.remember_open, args=(state,))
        if box.open:  # its turns are read while it is open
            with box:
                draw_turns()
        c2.button("Clear conversation", key="clear_conversation", width="stretch",
                  help="Start a new conversation: the next prompt carries no earlier turn and "
                       "searches no memory. This one stays in the sidebar's list.",
                  on_click=do, args=(conversation.start_new, ""))
    # --------------------------------------------------------------------------- results
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
    before = state[S.BEFORE_EDITS]
    for tab, draw in zip(st.tabs(list(RESULT_TABS), key=S.VIEW, bind="query-params"),
                         RESULT_TABS.values()):
        if tab.open:
            with tab:
                draw()


main_area()
