"""The page's knowledge bases: the engine of the one the sidebar selects (one per knowledge
base and server, its models shared with the default's), switching between them, creating,
renaming and deleting one, and the line that says which one the results came from.

Every action takes the session state and turns a ``RagstreamError`` into a message under
``ERROR``, as ``ragstream.interfaces.ui.actions`` does; the page then goes on.

Creating a knowledge base from a folder, "Ingest folder" and an upload run as background jobs
(``ragstream.knowledge.ingest.jobs.REGISTRY``, one per process, so a reload finds them): the knowledge
base is listed and selectable at once, the sidebar follows each running job right under the
switcher ("Ingesting into ops — 4 of 12 files · now ops/logs.html", ``job_views``) with a
cancel button (``cancel``), the person may work on another knowledge base meanwhile, and when
a job ends each session that saw it running shows its report — each refused file with its
reason (``adopt``, from ``selected``). (The switcher's own labels stay the bare names: a label
that changes while its option is selected makes Streamlit drop the selection.)
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragstream.backends.lock import ingest_busy
from ragstream.common.errors import IngestError, KnowledgeBaseError, RagstreamError
from ragstream.interfaces.ui import ingesting
from ragstream.interfaces.ui import state as S
from ragstream.knowledge.bases import DEFAULT
from ragstream.knowledge.ingest.ingestor import IngestReport, ingest_path
from ragstream.knowledge.ingest.jobs import REGISTRY, IngestJob, JobProgress, clock
from ragstream.state.super_prompt import SuperPrompt
from ragstream.workbench.engine import Engine

#: the session's background jobs: those it saw running, those whose outcome it has shown, and
#: those its sidebar showed running at its last draw
JOBS_SEEN = "ingest_jobs_seen"
JOBS_SHOWN = "ingest_jobs_shown"
JOBS_LIVE = "ingest_jobs_live"
#: how often (seconds) the sidebar's job progress draws itself again while a job runs
REFRESH_S = 1.0


def collection_of(engine: Engine) -> str:
    """The collection of ``engine``'s knowledge base (a rename keeps it: jobs go by it)."""
    return engine.cfg.settings.vector_store.collection


def _cancelled_last(engine: Engine) -> bool:
    """True when the last background ingest into ``engine``'s knowledge base was cancelled:
    its folder is then not brought up to date behind the person's back (which would finish
    the cancelled work inside a page draw); "Ingest folder" does it when asked."""
    jobs = REGISTRY.jobs(collection_of(engine))
    return bool(jobs) and jobs[-1].state == "cancelled"


#: what the page says of a knowledge base whose last ingest was cancelled
CANCELLED_LAST = ("Its last ingest was cancelled: the documents written are whole, the rest of "
                  "its folder is not in yet. Type the folder ({folder}) under \"…or a folder on "
                  "this machine\" and press \"Ingest folder\" to finish it.")


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
        if (REGISTRY.running(collection_of(engine)) or ingest_busy(engine.cfg.index_dir)
                or _cancelled_last(engine)):
            # being ingested (by a job here, or another process): searched as written so far;
            # its folder is brought up to date on a draw after the ingestion ends (not after a
            # cancel: see ``_cancelled_last``)
            return engine
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

    def made(self, name: str, report: IngestReport | None = None) -> None:
        """Knowledge base ``name`` was brought up to date by a background job (``report``)."""
        with self._lock:
            self._ready.add(name)
            if report is not None:
                self._reports[name] = report

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
        engine = engines.get(name)
    except RagstreamError as err:
        _fail(st_state, err)
        st_state[S.KB] = DEFAULT
        return engines.default
    adopt(engine, st_state)
    return engine


def follow_example(engine: Engine, st_state: S.SessionState, name: str) -> None:
    """The prompt box's example follows the selected knowledge base ``name`` (``engine``'s):
    while the box holds the example it was given (or nothing), it gets one about a section of
    ``name``."""
    shown = str(st_state.get(S.PROMPT) or "")
    if shown.strip() and shown != st_state.get(S.PROMPT_EXAMPLE):
        return  # the person's own prompt stays
    topic = "" if name == DEFAULT else engine.example_topic()
    example = S.example_prompt(name, topic)
    st_state[S.PROMPT] = example
    st_state[S.PROMPT_EXAMPLE] = example


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
        follow_example(engine, st_state, name)
        job = next(iter(REGISTRY.running(collection_of(engine))), None)
        if job is not None:
            done = job.progress()
            st_state[S.NOTICE] = (f"Knowledge base {name!r} selected; it is being ingested "
                                  f"({done.done} of {done.total} files): Retrieval searches what "
                                  f"is written so far.")
            return
        if _cancelled_last(engine):
            st_state[S.NOTICE] = (f"Knowledge base {name!r} selected. " +
                                  CANCELLED_LAST.format(folder=engine.cfg.kb_dir))
            return
        if ingest_busy(engine.cfg.index_dir):  # another knowledge base's ingestion: no waiting
            st_state[S.NOTICE] = (f"Knowledge base {name!r} selected: the next Retrieval "
                                  f"searches it. (Its folder is checked for changes once the "
                                  f"running ingestion ends.)")
            return
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
    as its documents folder (empty: one of its own), select it, and ingest what the folder
    holds in the background (a job: the sidebar follows it). An empty name box changes nothing
    and is not an error (it is empty right after a knowledge base was created with Enter): a
    folder typed without a name gets a hint."""
    st_state[S.ERROR] = None
    name = str(st_state.get(S.KB_NEW_NAME) or "")
    folder = str(st_state.get(S.KB_NEW_FOLDER) or "").strip()
    if not name.strip():
        if folder:
            st_state[S.NOTICE] = NAME_FIRST
        return
    try:
        kb = engines.default.create_kb(name, folder or None)
        engine = engines.default.for_kb(kb.name)
    except RagstreamError as err:
        _fail(st_state, err)
        return
    st_state[S.KB] = kb.name
    st_state[S.INGEST_REPORT] = None
    follow_example(engine, st_state, kb.name)
    for key in (S.KB_NEW_NAME, S.KB_NEW_FOLDER):
        st_state[key] = ""
    if not any(Path(kb.folder).iterdir()):
        engines.made(kb.name)
        st_state[S.NOTICE] = (f"Knowledge base {kb.name!r} created and selected; its folder "
                              f"{kb.folder} holds no documents yet: add some below.")
        return

    def work() -> dict[str, Any]:
        report = engine.ensure_knowledge_base()
        engines.made(engine.kb)
        return {"report": {"kind": "folder", **report.model_dump()}, "error": None}

    if _start(st_state, engine, "create", kb.folder, work) is not None:
        st_state[S.NOTICE] = (f"Knowledge base {kb.name!r} created and selected; its folder "
                              f"{kb.folder} is being ingested in the background (progress "
                              f"below). You can keep working, here or on another knowledge base.")


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
        if REGISTRY.running(collection_of(engines.default.for_kb(name))):
            raise KnowledgeBaseError(f"{name!r} is being ingested: cancel the ingest (or wait "
                                     f"for it to end), then delete it.")
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


def delete_label(engines: Engines, name: str) -> str:
    """The box to tick before the selected knowledge base is deleted: what goes and what stays
    (a folder RAGstream made goes with it; a folder the person named stays, files and all)."""
    registry = engines.default.knowledge_bases()
    kb = registry.find(name)
    if kb is None:
        return f"Delete {name!r}"
    if registry.removes_folder(kb):
        return f"Delete {kb.name!r}: its index and the folder RAGstream made for it ({kb.folder})"
    return f"Delete {kb.name!r}: its index only; your folder {kb.folder} and its files stay"


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


# --------------------------------------------------------------------------- background jobs
def _seen(st_state: S.SessionState, key: str) -> list[str]:
    return list(st_state.get(key) or [])


def _start(st_state: S.SessionState, engine: Engine, kind: str, source: str,
           work: Callable[[], dict[str, Any]], upload_ids: tuple[str, ...] = ()) -> IngestJob | None:
    """Start ``work`` as a background job into ``engine``'s knowledge base; ``ERROR`` says why
    when it cannot start (one is running there already)."""
    try:
        job = REGISTRY.start(engine.kb, collection_of(engine), kind, source, work, upload_ids)
    except RagstreamError as err:
        _fail(st_state, err)
        return None
    st_state[JOBS_SEEN] = [*_seen(st_state, JOBS_SEEN), job.id]
    return job


def start_folder(engine: Engine, st_state: S.SessionState, folder: str) -> IngestJob | None:
    """"Ingest folder": ingest ``folder`` into the selected knowledge base in the background;
    its report replaces the last one when it ends. The uploader starts afresh (as
    ``ingesting.ingest_folder``). A missing folder is said at once."""
    st_state[S.ERROR] = None
    st_state[S.UPLOAD_NONCE] = (st_state.get(S.UPLOAD_NONCE) or 0) + 1
    folder = folder.strip()
    target = Path(folder).expanduser()
    if not folder or not target.exists():
        _fail(st_state, IngestError(
            f"{target} does not exist. Give a folder of .md/.txt files or one file." if folder else
            "No folder given: type the path of a folder on this machine in the box above the "
            "button. (Files chosen in \"Add documents\" are ingested as soon as they are chosen.)"))
        return None

    def work() -> dict[str, Any]:
        report = ingest_path(target, engine.cfg, engine.services)
        return {"report": {"kind": "folder", **report.model_dump()}, "error": None}

    return _start(st_state, engine, "folder", str(target.resolve()), work)


def start_upload(engine: Engine, st_state: S.SessionState, files: list[tuple[str, bytes]],
                 ids: tuple[str, ...]) -> IngestJob | None:
    """Ingest the uploaded (name, bytes) pairs in the background (``ingesting.ingest_uploads``:
    each saved, ingested or refused with its reason, and a refused one not kept)."""
    st_state[S.ERROR] = None
    sub: dict[str, Any] = {S.INGEST_REPORT: st_state.get(S.INGEST_REPORT), S.ERROR: None}

    def work() -> dict[str, Any]:
        ingesting.ingest_uploads(engine, sub, files, ids=ids)
        return {"report": sub[S.INGEST_REPORT], "error": sub[S.ERROR]}

    what = files[0][0] if len(files) == 1 else f"{len(files)} uploaded files"
    return _start(st_state, engine, "upload", what, work, ids)


def pending_uploads(engine: Engine, st_state: S.SessionState, uploads: list[Any] | None) -> list[Any]:
    """The uploader's files not ingested yet and not in a running job (``ingesting.new_uploads``):
    those chosen while a job runs on this knowledge base wait for it to end."""
    if REGISTRY.running(collection_of(engine)):
        return []
    return ingesting.new_uploads(st_state, uploads)


def adopt(engine: Engine, st_state: S.SessionState) -> None:
    """Show what the finished jobs into ``engine``'s knowledge base did, once each, in a session
    that saw them running (the one that started them, or one reloaded meanwhile): the report
    under the uploader or the folder's button (each refused file named with its reason), a
    failure under ``ERROR``, and a notice when one was cancelled or made a new knowledge base."""
    seen, shown = _seen(st_state, JOBS_SEEN), _seen(st_state, JOBS_SHOWN)
    for job in REGISTRY.jobs(collection_of(engine)):
        if job.running:
            if job.id not in seen:
                seen.append(job.id)
            continue
        if job.id not in seen or job.id in shown:
            continue
        shown.append(job.id)
        result = job.result or {}
        error = job.error or result.get("error")
        if result.get("report") is not None:
            st_state[S.INGEST_REPORT] = result["report"]
        if error:
            st_state[S.ERROR] = tuple(error)
        st_state[S.NOTICE] = _ended(job)
        if st_state.get(S.KB) == engine.kb:  # its documents are in: an example about them
            follow_example(engine, st_state, engine.kb)
    st_state[JOBS_SEEN], st_state[JOBS_SHOWN] = seen, shown


def _ended(job: IngestJob) -> str | None:
    """What the page says when ``job`` has ended (the report says the rest)."""
    p = job.progress()
    if job.state == "cancelled" and not p.total:
        return (f"The ingest into {job.kb!r} was cancelled before it began (it was waiting for "
                f"another ingestion to finish): nothing was read or written.")
    if job.state == "cancelled":
        return (f"The ingest into {job.kb!r} was cancelled after {p.done} of {p.total} files: "
                f"those are in the knowledge base, each whole; the {p.total - p.done} not reached "
                f"are named in the report's warnings. Ingest the folder again to finish "
                f"(unchanged files are skipped).")
    if job.kind == "create" and job.state == "done":
        report = (job.result or {}).get("report") or {}
        refused = report.get("failed", 0)
        return (f"Knowledge base {job.kb!r}: {_count(report.get('processed', 0), 'document')} "
                f"ingested from {job.source} in {clock(p.elapsed_s)} ({_count(p.chunks, 'chunk')})"
                + (f"; {refused} refused, named in the report below." if refused else "."))
    return None




@dataclass(frozen=True)
class JobView:
    """One running job as the sidebar shows it: a bar, its text, a line of counts and times."""

    id: str
    kb: str
    fraction: float
    bar_text: str
    line: str
    stopping: bool


def any_running() -> bool:
    """True while a background ingestion runs in this process (the sidebar then refreshes)."""
    return bool(REGISTRY.running())


def job_views(st_state: S.SessionState) -> tuple[list[JobView], bool]:
    """The running jobs, every knowledge base's (the selected one's first), and whether one the
    session showed running last time has ended since (then the whole page is drawn again:
    counts, labels and its report change)."""
    running = REGISTRY.running()
    selected_kb = st_state.get(S.KB) or DEFAULT
    running.sort(key=lambda j: j.kb != selected_kb)
    live = [j.id for j in running]
    ended = bool(set(_seen(st_state, JOBS_LIVE)) - set(live))
    st_state[JOBS_LIVE] = live
    seen = _seen(st_state, JOBS_SEEN)
    st_state[JOBS_SEEN] = seen + [i for i in live if i not in seen]
    return [_view(j) for j in running], ended


def _view(job: IngestJob) -> JobView:
    p: JobProgress = job.progress()
    source = Path(job.source).name if job.kind != "upload" else job.source
    head = f"Ingesting into **{job.kb}** — " + {"create": f"its folder {source}",
                                                "folder": f"folder {source}",
                                                "upload": source}[job.kind]
    if p.stopping:
        now = "cancelling after the file being read…"
    elif p.started and p.current:
        now = f"now {p.current}"
    else:
        now = ""
    files = f"{p.done} of {p.total} files" if p.started else ""
    bar = f"{head}  \n" + " · ".join(x for x in (files, now) if x) if files or now else head
    return JobView(job.id, job.kb, p.fraction, bar, p.so_far(), p.stopping)


def cancel(job_id: str) -> None:
    """The job's Cancel button: stop before its next file (what was read is written whole)."""
    job = REGISTRY.get(job_id)
    if job is not None:
        job.cancel()
