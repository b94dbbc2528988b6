"""The page's knowledge bases: the engine of the one the sidebar selects (one per knowledge
base and server, its models shared with the default's), switching between them, creating,
renaming and deleting one, and the line that says which one the results came from.

Every action takes the session state and turns a ``RagstreamError`` into a message under
``ERROR``, as ``ragstream.ui.actions`` does; the page then goes on.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from ragstream.engine import Engine
from ragstream.errors import KnowledgeBaseError, RagstreamError
from ragstream.ingest.ingestor import IngestReport
from ragstream.knowledge_bases import DEFAULT
from ragstream.super_prompt import SuperPrompt
from ragstream.ui import state as S


class Engines:
    """The page's engine per knowledge base, made once per server from the default's engine
    (``Engine.for_kb``: its own store and index, the models and the LLM client shared). The
    page keeps one ``Engines`` as a resource (``st.cache_resource``)."""

    def __init__(self, default: Engine, on_made: Callable[[Engine], None] | None = None):
        """``on_made(engine)`` runs once a knowledge base's engine is made and its index built
        (the page freezes the collector's view of it, as it does the default's)."""
        self.default = default
        self._ready: set[str] = {DEFAULT}  # the knowledge bases brought up to date here
        #: what bringing a knowledge base's folder up to date did when its engine was made,
        #: until the page has said so (``made_report``)
        self._reports: dict[str, IngestReport] = {}
        self._lock = threading.Lock()
        self._making: dict[str, threading.Lock] = {}  # a lock per knowledge base being made
        self._on_made = on_made

    def get(self, name: str | None) -> Engine:
        """The engine of knowledge base ``name`` (None or "": the default; ``Engine.for_kb``),
        its folder brought up to date and its index loaded the first time. ``KnowledgeBaseError``
        when there is no such knowledge base (any more)."""
        engine = self.default.for_kb(name or DEFAULT)
        with self._lock:
            if engine.kb in self._ready:
                return engine
            making = self._making.setdefault(engine.kb, threading.Lock())
        with making:  # one session brings it up to date; the others wait for it, not for every one
            with self._lock:
                if engine.kb in self._ready:
                    return engine
            report = engine.ensure_knowledge_base()
            engine.services.index()
            with self._lock:
                self._reports[engine.kb] = report
                self._ready.add(engine.kb)
        if self._on_made is not None:
            self._on_made(engine)
        return engine

    def made_report(self, name: str) -> IngestReport | None:
        """What bringing ``name``'s folder up to date did when its engine was made (once)."""
        with self._lock:
            return self._reports.pop(name, None)

    def forget(self, name: str) -> None:
        """Forget that knowledge base ``name`` was brought up to date (it was renamed or
        deleted); never the default."""
        if name != DEFAULT:
            with self._lock:
                self._ready.discard(name)

    def names(self) -> list[str]:
        """Every knowledge base's name, the default first (the registry as it is now)."""
        return self.default.knowledge_bases().names()


def _fail(st_state: S.SessionState, err: RagstreamError) -> None:
    st_state[S.ERROR] = (err.kind, str(err))


def choices(engines: Engines, st_state: S.SessionState) -> list[str]:
    """The switcher's knowledge bases; the selected one falls back to the default (with a
    notice) when it is no longer there (another page or the CLI deleted or renamed it)."""
    try:
        names = engines.names()
    except RagstreamError as err:
        _fail(st_state, err)
        names = [DEFAULT]
    if st_state.get(S.KB) not in names:
        gone = st_state.get(S.KB)
        st_state[S.KB] = DEFAULT
        if gone:
            st_state[S.NOTICE] = (f"The knowledge base {gone!r} is no longer there (deleted or "
                                  f"renamed elsewhere): the page works on {DEFAULT!r} again.")
    return names


def selected(engines: Engines, st_state: S.SessionState) -> Engine:
    """The engine of the knowledge base the sidebar selects; the default's (and ``ERROR`` says
    why) when that one cannot be opened."""
    name = st_state.get(S.KB) or DEFAULT
    try:
        return engines.get(name)
    except RagstreamError as err:
        _fail(st_state, err)
        st_state[S.KB] = DEFAULT
        return engines.default


def switched(engines: Engines, st_state: S.SessionState) -> None:
    """The switcher's callback: the newly selected knowledge base's folder is brought up to
    date (cheap when unchanged; its engine is made on first use) and the page says what it
    holds. The results shown stay, marked out of date until the stages run again."""
    st_state[S.ERROR] = None
    st_state[S.INGEST_REPORT] = None  # the last ingest was into the other knowledge base
    name = st_state.get(S.KB) or DEFAULT
    S.forget(st_state, S.kb_delete_sure(name))  # its delete box is never found ticked
    try:
        engine = engines.get(name)
        report = engines.made_report(name) or engine.ensure_knowledge_base()
    except RagstreamError as err:
        _fail(st_state, err)
        st_state[S.KB] = DEFAULT
        return
    st_state[S.NOTICE] = f"Knowledge base {name!r} selected{_ingested(report)}: the next " \
                         f"Retrieval searches it."


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'s' if n != 1 else ''}"


def _ingested(report: IngestReport) -> str:
    """`` (3 documents ingested, 1 deleted from its folder)``; "" when nothing changed."""
    said = [f"{_count(report.processed, 'document')} ingested"] if report.processed else []
    said += [f"{report.deleted} deleted from its folder"] if report.deleted else []
    said += [f"{report.failed} refused"] if report.failed else []
    return f" ({', '.join(said)})" if said else ""


#: what "Create and select" says when its name box is empty (it was just used, with Enter)
NAME_FIRST = "Type the new knowledge base's name in the box first, then create it."


def create(engines: Engines, st_state: S.SessionState) -> None:
    """Create the knowledge base named in ``KB_NEW_NAME`` with the folder in ``KB_NEW_FOLDER``
    as its documents folder (empty: one of its own), ingest what the folder holds, and select
    it. An empty name box changes nothing and is not an error (it is empty right after a
    knowledge base was created with Enter): a folder typed without a name gets a hint."""
    st_state[S.ERROR] = None
    name = str(st_state.get(S.KB_NEW_NAME) or "")
    folder = str(st_state.get(S.KB_NEW_FOLDER) or "").strip()
    if not name.strip():
        if folder:
            st_state[S.NOTICE] = NAME_FIRST
        return
    try:
        kb = engines.default.create_kb(name, folder or None)
        engine = engines.get(kb.name)
        report = engines.made_report(kb.name) or engine.ensure_knowledge_base()
    except RagstreamError as err:
        _fail(st_state, err)
        return
    st_state[S.KB] = kb.name
    st_state[S.INGEST_REPORT] = None
    for key in (S.KB_NEW_NAME, S.KB_NEW_FOLDER):
        st_state[key] = ""
    held = (f"{_count(report.processed, 'document')} ingested from {kb.folder}" if report.processed
            else f"its folder {kb.folder} holds no documents yet: add some below")
    st_state[S.NOTICE] = f"Knowledge base {kb.name!r} created and selected; {held}."


def rename(engines: Engines, st_state: S.SessionState) -> None:
    """Rename the selected knowledge base (not the default) to the name in ``KB_RENAME_TO``;
    it stays selected. An empty box changes nothing and is not an error."""
    st_state[S.ERROR] = None
    old = st_state.get(S.KB) or DEFAULT
    new_name = str(st_state.get(S.KB_RENAME_TO) or "")
    if not new_name.strip():  # empty, as right after a rename made with Enter: nothing to do
        return
    try:
        kb = engines.default.rename_kb(old, new_name)
    except RagstreamError as err:
        _fail(st_state, err)
        return
    engines.forget(old)
    st_state[S.KB] = kb.name
    st_state[S.KB_RENAME_TO] = ""
    st_state[S.NOTICE] = f"Knowledge base {old!r} is now called {kb.name!r}."


#: what the Delete button says when its box is not ticked
DELETE_UNCONFIRMED = ("Nothing was deleted: tick the box above the button to confirm that "
                      "{name!r} is to be deleted.")


def delete(engines: Engines, st_state: S.SessionState) -> None:
    """Delete the selected knowledge base once its box (``kb_delete_sure``) is ticked: its
    index and, when RAGstream made it, its folder; no other knowledge base is touched. The
    page then works on the default. The default cannot be deleted."""
    st_state[S.ERROR] = None
    name = st_state.get(S.KB) or DEFAULT
    if name == DEFAULT:
        _fail(st_state, KnowledgeBaseError("The default knowledge base (the bundled documents) "
                                           "cannot be deleted."))
        return
    if not st_state.get(S.kb_delete_sure(name)):
        st_state[S.NOTICE] = DELETE_UNCONFIRMED.format(name=name)
        return
    try:
        kb = engines.default.delete_kb(name)
    except RagstreamError as err:
        _fail(st_state, err)
        return
    engines.forget(kb.name)
    st_state[S.KB] = DEFAULT
    S.forget(st_state, S.kb_delete_sure(kb.name))
    st_state[S.INGEST_REPORT] = None
    kept = "" if kb.own_folder else f"; its folder {kb.folder} was left as it is"
    st_state[S.NOTICE] = f"Knowledge base {kb.name!r} deleted{kept}. The page works on {DEFAULT!r}."


def delete_label(name: str) -> str:
    """The box to tick before the selected knowledge base is deleted."""
    return f"Delete {name!r}: its index and its own folder"


def results_line(sp: SuperPrompt, selected_kb: str) -> str:
    """Which knowledge base (and conversation) the shown results came from: ``Knowledge base:
    **zoo** and conversation **chat-…** (2 turns searched)``; before Retrieval, which one the
    next Retrieval searches."""
    record = sp.extras.retrieval
    if record is None:
        return f"Knowledge base: **{selected_kb}** — Retrieval has not run yet."
    line = f"Knowledge base: **{record.kb}**"
    n = record.conversation_chunks
    if record.conversation and n:
        line += (f" and conversation **{record.conversation}** ({n} remembered "
                 f"turn{'s' if n != 1 else ''} searched)")
    elif record.conversation:
        line += f" · conversation **{record.conversation}** had no remembered turns to search"
    if record.kb != selected_kb:
        line += f" · not the selected one, **{selected_kb}**"
    return line
