"""The page's runs: every pass kept as it runs (``ragstream.workbench.runs``), the session's latest one
restored after a reload, a kept run opened again, a JSON file opened as a run, and the rows of
the Runs tab.

Which run a pass is. The page's ``RUN_ID`` names the run the page shows. A stage run that
continues exactly that state (the next stage, on the SuperPrompt last saved) updates the run
in place, and so does its answer; anything else starts a new run linked to the one the page
showed (``parent``): running a stage again, re-running after a change of prompt, setting,
filter or edit, or running on from a run opened from the list or from a file. So the list
holds one row per pass, each with the state after every stage it ran (``StageSnapshot``).

The session is named in the URL (``?session=…``): a reload keeps the URL, and the page then
opens the newest run that session saved. Saving never stops the work: a run that cannot be
saved (a full disk, a locked file) leaves the page as it was and says so under ``NOTICE``.
"""

from __future__ import annotations

import math
import sqlite3
import uuid
from collections.abc import MutableMapping
from typing import Any

from ragstream.common.errors import RagstreamError
from ragstream.interfaces.ui import grids, views
from ragstream.interfaces.ui import state as S
from ragstream.interfaces.ui.compare import Comparison, Side, compare
from ragstream.stages import controller
from ragstream.state.records import short_text
from ragstream.state.super_prompt import SuperPrompt
from ragstream.workbench.engine import Engine
from ragstream.workbench.runs import RunMeta, RunStore, StageSnapshot, StoredRun, export_json

#: the URL's query parameter that names the page's session
SESSION_PARAM = "session"


def _store(engine: Engine):
    return engine.runs()


def start_session(engine: Engine, st_state: S.SessionState,
                  query: MutableMapping[str, Any]) -> None:
    """Once per browser session: take the session's name from the URL (``query``, Streamlit's
    ``st.query_params``) or make one and put it there; when the URL named a session (a reload,
    or a link), open the newest run it saved."""
    if st_state.get(S.SESSION):
        return
    named = str(query.get(SESSION_PARAM) or "").strip()
    st_state[S.SESSION] = named or uuid.uuid4().hex[:12]
    if not named:
        query[SESSION_PARAM] = st_state[S.SESSION]
        return
    try:
        run = _store(engine).latest(named)
    except (RagstreamError, sqlite3.Error) as err:
        st_state[S.NOTICE] = f"The session's latest run could not be restored: {err}"
        return
    if run is not None:
        _show(engine, st_state, run, continues=True)
        st_state[S.NOTICE] = (f"Restored run {run.id} of this session "
                              f"({views.value_label(run.stage, bool(run.answer))}, saved "
                              f"{run.updated[:19].replace('T', ' ')} UTC).")
    _restore_draft(engine, st_state, named, run)


def _restore_draft(engine: Engine, st_state: S.SessionState, session: str,
                   run: StoredRun | None) -> None:
    """Bring back the session's edits that no pass ran yet (``RunStore.save_draft``), made on
    ``run`` (the session's latest run, or on a fresh page when it has none), and say which."""
    try:
        draft = _store(engine).draft(session)
    except (RagstreamError, sqlite3.Error) as err:
        st_state[S.NOTICE] = f"{st_state.get(S.NOTICE) or ''} {err}".strip()
        return
    if draft is None or draft.run_id != (run.id if run is not None else None):
        return  # none, or made on a run the session has since gone past
    st_state[S.SP] = draft.sp
    st_state[S.BEFORE_EDITS] = draft.seen
    st_state[S.PROMPT] = draft.sp.user_text
    st_state[S.EDIT_NONCE] = (st_state.get(S.EDIT_NONCE) or 0) + 1
    pending = [e for e in draft.sp.edits
               if run is None or e.id not in {k.id for k in run.sp.edits}]
    said = "; ".join(edits_summary(e) for e in pending[:6])
    more = f" and {len(pending) - 6} more" if len(pending) > 6 else ""
    again = " ↻ Re-run applies them." if controller.resume_target(draft.sp) else ""
    where = f"Restored run {run.id} of this session" if run is not None else "Restored this session"
    st_state[S.NOTICE] = (f"{where} with your {len(pending)} edit{'s' if len(pending) != 1 else ''} "
                          f"not yet run ({said}{more}).{again}")


def edits_summary(edit) -> str:
    """One edit in a few words: ``pin kb/a.md#2``, ``note: …``."""
    target = short_text(edit.target, 60)
    return f"{edit.kind.replace('_', ' ')} {target}"


def keep_draft(engine: Engine, st_state: S.SessionState) -> None:
    """Keep the session's edits not yet run (the page's state after an edit), so that a reload
    brings them back; when the state has no edits beyond the run it shows, forget them."""
    session = st_state.get(S.SESSION)
    if not session:
        return
    sp = st_state[S.SP]
    saved = st_state.get(S.RUN_SAVED)
    store = _store(engine)
    try:
        if saved is not None and [e.id for e in sp.edits] == [e.id for e in saved.edits]:
            store.drop_draft(session)
        else:
            store.save_draft(session, sp, st_state.get(S.BEFORE_EDITS), st_state.get(S.RUN_ID))
    except (RagstreamError, sqlite3.Error, OSError) as err:
        st_state[S.NOTICE] = (f"{st_state.get(S.NOTICE) or ''} Your edits could not be kept for "
                              f"a reload: {err}").strip()


def _show(engine: Engine, st_state: S.SessionState, run: StoredRun, continues: bool) -> None:
    """Put ``run`` on the page: its state, prompt, filters, settings and conversation.
    ``continues``: the next stage run goes on in this run (the session's own latest run);
    otherwise it starts a new run linked to this one."""
    sp = run.sp
    st_state[S.SP] = sp
    st_state[S.PROMPT] = sp.user_text
    st_state[S.FILTERS] = sp.filters
    settings = _valid_settings(engine, st_state, run)
    # the sidebar's widgets forget their own values: they show the run's filters and settings
    for key in set(st_state.get(S.OVERRIDES) or {}) | set(settings):
        S.forget(st_state, S.setting_widget(key))
    S.forget(st_state, S.FILTER_TYPES_WIDGET)
    st_state[S.OVERRIDES] = settings
    st_state[S.CONVERSATION] = _conversation(engine, st_state, sp)
    retrieval = sp.extras.retrieval
    if retrieval is not None and retrieval.kb != st_state.get(S.KB):
        _select_kb(engine, st_state, retrieval.kb)
    st_state[S.BEFORE_EDITS] = None
    st_state[S.EDIT_NONCE] = st_state[S.EDIT_NONCE] + 1  # the editable tables start afresh
    st_state[S.RUN_ID] = run.id
    st_state[S.RUN_SAVED] = sp if continues else None
    st_state[S.RUN_STAGES] = dict(run.stages)
    for key in (S.JOURNEY_CHUNK, S.DIFF_A, S.DIFF_B, S.EVIDENCE_CHUNK, S.EVIDENCE_SENTENCE,
                S.REPLAY, S.COMPARE_A, S.COMPARE_B):
        st_state[key] = None
    st_state[S.REDRAW_ALL] = True  # the sidebar shows the run's settings and filters


def _conversation(engine: Engine, st_state: S.SessionState, sp: SuperPrompt) -> list:
    """The turns the next prompt carries after ``sp``: its named conversation's last N4 as
    kept (the page goes on in that conversation), else its own and its answered turn."""
    name = sp.conversation_name
    if name:
        st_state[S.CHAT] = name
        st_state[S.CHAT_LIST] = None
        try:
            convs = engine.conversations()
            if convs.exists(name):
                return convs.recent(name, engine.cfg.limits.N4_RECENT_CONV_MAX_PAIRS)
        except (RagstreamError, sqlite3.Error) as err:
            st_state[S.NOTICE] = f"The run's conversation {name!r} could not be read: {err}"
    conversation = list(sp.recent_conversation)
    if sp.answer is not None:  # the answered turn goes into the next prompt, as after answering
        conversation = engine.conversation_after(sp, sp.answer)
    return conversation


def _select_kb(engine: Engine, st_state: S.SessionState, name: str) -> None:
    """Select knowledge base ``name`` in the sidebar, the one the run searched, when it is
    still there; else say that the run's results are out of date for another one."""
    try:
        kb = engine.knowledge_bases().find(name)
    except RagstreamError:
        kb = None
    if kb is None:
        st_state[S.NOTICE] = (f"The run searched knowledge base {name!r}, which is no longer "
                              f"there: its results are shown as out of date.")
        return
    st_state[S.KB] = kb.name
    st_state[S.INGEST_REPORT] = None


def _valid_settings(engine: Engine, st_state: S.SessionState, run: StoredRun) -> dict[str, Any]:
    """The run's setting overrides if this configuration still takes them, else none (and a
    notice naming why): a setting may have been renamed or bounded since the run was saved."""
    if not run.settings:
        return {}
    try:
        engine.cfg.with_overrides(run.settings)
    except RagstreamError as err:
        st_state[S.NOTICE] = (f"Run {run.id}'s settings do not apply to this configuration "
                              f"({err}); it opened with the configuration files' settings.")
        return {}
    return dict(run.settings)


def open_run(engine: Engine, st_state: S.SessionState, run_id: int) -> bool:
    """Open kept run ``run_id`` on the page (a stage run then starts a new run linked to it);
    on failure set ``ERROR`` and leave the page as it was."""
    st_state[S.ERROR] = None
    try:
        run = _store(engine).get(run_id)
    except RagstreamError as err:
        st_state[S.ERROR] = (err.kind, str(err))
        return False
    _show(engine, st_state, run, continues=False)
    st_state[S.NOTICE] = (f"Opened run {run.id}: run a stage, edit or answer to go on from it "
                          "(a new run, linked to this one).")
    return True


def open_file(engine: Engine, st_state: S.SessionState, name: str, data: bytes) -> bool:
    """Keep the JSON file ``name`` as a new run (validated: a file that is not a run is
    refused under ``ERROR`` with what is wrong) and open it."""
    st_state[S.ERROR] = None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        st_state[S.ERROR] = ("run file", f"{name} is not UTF-8 text (byte {err.start}): open "
                                         "a run exported as JSON.")
        return False
    try:
        run_id = _store(engine).import_json(text, name=name)
    except RagstreamError as err:
        st_state[S.ERROR] = (err.kind, str(err))
        return False
    return open_run(engine, st_state, run_id)


def record(engine: Engine, st_state: S.SessionState, started: SuperPrompt,
           finished: list[str], overrides: dict[str, Any] | None = None) -> None:
    """Keep the page's state after ``finished`` stages ran (and/or an answer) from the state
    ``started``: in the page's run when it continues it, else as a new run linked to it."""
    sp = st_state[S.SP]
    if sp is started and not finished:
        return  # nothing ran
    ran_from = controller.STAGE_NAMES.index(finished[0]) if finished else None
    continues = (st_state.get(S.RUN_ID) is not None and started is st_state.get(S.RUN_SAVED)
                 and (ran_from is None or ran_from == controller.position(started) + 1))
    stages: dict[str, StageSnapshot] = dict(st_state.get(S.RUN_STAGES) or {})
    if not continues and ran_from is not None:  # the stages before the first one that ran carry over
        kept = controller.STAGE_NAMES[:ran_from]
        stages = {name: snap for name, snap in stages.items() if name in kept}
    for name in finished:
        stages[name] = StageSnapshot.of(name, sp)
    store = _store(engine)
    settings = overrides if overrides is not None else dict(st_state.get(S.OVERRIDES) or {})
    try:
        if continues:
            run_id = store.save(sp, run_id=st_state[S.RUN_ID], settings=settings, stages=stages)
        else:
            run_id = store.save(sp, session=st_state.get(S.SESSION) or "", settings=settings,
                                origin="page", parent=st_state.get(S.RUN_ID), stages=stages)
    except (RagstreamError, sqlite3.Error, OSError) as err:
        st_state[S.NOTICE] = f"This run was not kept in the run history: {err}"
        return
    st_state[S.RUN_ID] = run_id
    st_state[S.RUN_SAVED] = sp
    st_state[S.RUN_STAGES] = stages
    if st_state.get(S.SESSION):  # the run holds the session's edits now
        try:
            store.drop_draft(st_state[S.SESSION])
        except (RagstreamError, sqlite3.Error, OSError):
            pass  # a draft left behind names a run the session has gone past: never restored


# --------------------------------------------------------------------------- the Runs tab

#: how many runs the Runs tab lists (the newest; the search reaches every kept run)
LISTED = 200
#: the most of a run's prompt or answer its Runs row holds (the grid cuts it to its lines and
#: shows the whole cell on hover; "Open run" shows all of it)
CELL_TEXT_MOST = 1500
#: the Runs table's fixed column widths in pixels; prompt, stage, answer and what differed
#: share the rest of ``RUNS_TABLE_WIDTH`` (with the row picker's 32 the grid's 818 at
#: 1280x900, less its border), wrapped in ``grids.TABLE_LINES`` lines (a picked run shows them
#: whole)
RUN_COLUMN_WIDTHS = {"run": 50, "time (UTC)": 96, "from": 50, "by": 54}
RUNS_TABLE_WIDTH = 780


#: the Runs table's tallest (it scrolls beyond); its rows are the chunk tables' (they wrap)
RUNS_TABLE_MAX_HEIGHT = 420


def runs_table_height(rows: int) -> int:
    """A runs or compare table's height: ``grids.table_height`` up to ``RUNS_TABLE_MAX_HEIGHT``."""
    return grids.table_height(rows, most=RUNS_TABLE_MAX_HEIGHT)


def run_columns() -> dict[str, Any]:
    """Column configs for the Runs table: its widths, and what each short header means."""
    out: dict[str, Any] = {name: {} for name in ("run", "time (UTC)", "prompt", "stage",
                                                 "answer", "differs", "from", "by")}
    for name, width in RUN_COLUMN_WIDTHS.items():
        out[name]["width"] = width
    out["run"]["help"] = "The run's id (▶: the run the page shows)"
    out["stage"]["help"] = "The last stage the run reached"
    out["differs"]["help"] = "What the run did differently from the configuration files: " \
                             "settings, filters, edits"
    out["from"]["help"] = "The run it was made from (re-run, or run on from an opened run)"
    out["by"]["help"] = "Where it was made: page, cli, import"
    return out


def run_summary(run: RunMeta) -> str:
    """The picked run in a few lines of Markdown: prompt, stage, answer, what differed."""
    differs = "; ".join(run.differences()) or "the configuration files' settings, no filters, no edits"
    came = f" · from run {run.parent}" if run.parent is not None else ""
    return (f"**Run {run.id}** · {run.created[:19].replace('T', ' ')} UTC · {run.origin}{came} · "
            f"reached **{views.value_label(run.stage, bool(run.answer))}** · "
            f"{run.wall_ms:,.0f} ms  \n"
            f"**Prompt:** {short_text(' '.join(run.prompt.split()), 300)}  \n"
            f"**Answer:** {short_text(run.answer, 300) if run.answer else '—'}  \n"
            f"**Differs from the files:** {differs}")


def export_text(engine: Engine, run_id: int) -> str:
    """Run ``run_id`` as the page's export writes it (the SuperPrompt's JSON), or "" when it is
    gone (pruned meanwhile)."""
    try:
        return export_json(_store(engine).get(run_id))
    except RagstreamError:
        return ""


def compare_with(st_state: S.SessionState, run_id: int) -> None:
    """Open the Compare tab with run ``run_id`` as A and the page's run as B."""
    st_state[S.COMPARE_A] = run_id
    st_state[S.COMPARE_B] = st_state.get(S.RUN_ID)
    st_state[S.VIEW] = COMPARE_TAB


#: the result tab that compares two runs
COMPARE_TAB = "Compare"


def run_rows(runs: list[RunMeta], current: int | None) -> list[dict[str, Any]]:
    """The Runs tab's table: a row per run, newest first — id (``▶`` marks the one the page
    shows), time (month-day hour:minute, UTC), the prompt, the stage reached, the answer's
    first line, what differed from the configuration files, the run it came from and where it
    was made. The prompt and the answer are given whole up to ``CELL_TEXT_MOST`` characters:
    the grid shows their first lines, the rest on hover (a picked run shows them whole)."""
    return [{
        "run": f"▶ {r.id}" if r.id == current else str(r.id),
        "time (UTC)": r.created[5:16].replace("T", " "),
        "prompt": short_text(r.prompt, CELL_TEXT_MOST),
        "stage": views.value_label(r.stage, bool(r.answer)),
        "answer": short_text(r.answer, CELL_TEXT_MOST) if r.answer else "—",
        "differs": "; ".join(r.differences()) or "—",
        "from": str(r.parent) if r.parent is not None else "—",
        "by": r.origin,
    } for r in runs]


def run_label(run: RunMeta) -> str:
    """A run as a picker lists it: ``#12 · 10:31 · a3 · How does A3 …``."""
    return (f"#{run.id} · {run.created[11:16]} · {views.value_label(run.stage, bool(run.answer))} · "
            f"{short_text(' '.join(run.prompt.split()), 70)}")


# --------------------------------------------------------------------------- the Compare tab


def compare_default(store: RunStore, current: int | None, a: int | None, b: int | None,
                    listed: list[RunMeta]) -> tuple[int, int] | None:
    """The two runs the Compare tab shows: the ones picked, else B = the page's run (or the
    newest) and A = the run before B (its parent, else the next older); None with fewer than
    two runs."""
    ids = {r.id for r in listed}
    b = b if b is not None else current if current is not None else (listed[0].id if listed else None)
    if b is None:
        return None
    if a is None or a == b:
        before = store.previous(b) if b in ids or current == b else None
        a = before.id if before is not None else next((r.id for r in listed if r.id != b), None)
    return (a, b) if a is not None else None


def picker_labels(listed: list[RunMeta], pair: tuple[int, int]) -> dict[int, str]:
    """Each listed run's picker label by id; the two compared runs are always among them."""
    labels = {r.id: run_label(r) for r in listed}
    for run_id in pair:
        labels.setdefault(run_id, f"#{run_id}")
    return labels


#: the last comparison made, by (A id, A updated, B id, B updated): picking a stage or
#: redrawing the tab does not compare the runs again
_COMPARED: dict[tuple, Comparison] = {}


def comparison(engine: Engine, a_id: int, b_id: int) -> Comparison:
    """Runs ``a_id`` and ``b_id`` compared (``ragstream.interfaces.ui.compare``), with the configuration's
    values for the settings only one of them overrode; made once per pair of saved states."""
    store = _store(engine)
    a, b = store.get(a_id), store.get(b_id)
    key = (a.id, a.updated, b.id, b.updated)
    if key not in _COMPARED:
        _COMPARED.clear()
        _COMPARED[key] = compare(Side(f"run {a.id}", a.sp, a.settings, engine.cfg),
                                 Side(f"run {b.id}", b.sp, b.settings, engine.cfg))
    return _COMPARED[key]


#: the inputs table's column widths: the input's name fixed, A's and B's values share the
#: rest (a long one, such as the prompt, cut with "…": whole in the prompt_ready diff)
INPUT_COLUMNS = {"input": {"width": 150}}
#: the Compare tab's chunk table: fixed widths; the chunk id (as wide as its longest) and the
#: cause share the rest (a cause cut short is listed whole under the table, ``cause_lines``).
#: Its Δ rank is left out: the move says it (the Stage diff sorts by it)
COMPARE_WIDTHS = {"rank A": 54, "status A": 70, "rank B": 54, "status B": 70, "move": 68}


def compare_rows(cmp: Comparison, stage: str, moved_only: bool) -> list[dict[str, Any]]:
    """The Compare tab's chunk rows at ``stage`` (without the stage column: it is picked above
    the table); ``moved_only``: just the chunks that moved, came or went."""
    rows = [{k: v for k, v in row.items() if k not in ("stage", "Δ rank")}
            for row in cmp.chunk_rows(stage)]
    for row in rows:  # the causes name the stages (and their settings) by their names
        if row["cause"]:
            row["cause"] = views.plain_names(row["cause"])
    return [r for r in rows if r["move"] not in ("=", None)] if moved_only else rows


def input_rows(cmp: Comparison) -> list[dict[str, Any]]:
    """The Compare tab's inputs that differ, the stages (and their settings) by their names."""
    return [{k: views.plain_names(str(v)) for k, v in row.items()} for row in cmp.inputs]


def chunk_columns(rows: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Column configs for the Compare tab's chunk table: widths that add up to the grid's
    width at 1280x900: the chunk id as wide as the longest of ``rows``' (whole), the cause
    the rest (it wraps in its rows; cut short, it is whole under the table)."""
    out: dict[str, Any] = {name: {} for name in ("chunk id", *COMPARE_WIDTHS, "cause")}
    for name, width in COMPARE_WIDTHS.items():
        out[name]["width"] = width
    if rows:
        longest = max(grids.text_px(str(r.get("chunk id", ""))) for r in rows)
        out["chunk id"]["width"] = min(grids.CHUNK_MOST, math.ceil(longest) + grids.CELL_PADDING
                                       + grids.CELL_SLACK + 1)
    out["move"]["help"] = "↑3: three places higher in B; new: only B has it; dropped: B dropped it"
    out["cause"]["help"] = ("Why the chunk's row differs: the first input that differs where it "
                            "moved (a cause cut short is whole under the table)")
    return out


def cause_lines(rows: list[dict[str, Any]]) -> str:
    """The causes of ``rows`` (``compare_rows``), each once and whole, with how many chunks it
    moved, as Markdown lines: what the table's cells cut short."""
    counts: dict[str, int] = {}
    for row in rows:
        if row.get("cause"):
            counts[row["cause"]] = counts.get(row["cause"], 0) + 1
    return "\n".join(f"- {cause} ({n} chunk{'s' if n != 1 else ''})" for cause, n in counts.items())


def selection_line(cmp: Comparison) -> str:
    """The final selections compared, in one Markdown line."""
    parts = [f"added in B: {', '.join(f'`{c}`' for c in cmp.selection_added)}"
             if cmp.selection_added else "nothing added in B",
             f"removed in B: {', '.join(f'`{c}`' for c in cmp.selection_removed)}"
             if cmp.selection_removed else "nothing removed",
             f"{len(cmp.selection_kept)} in both"]
    return " · ".join(parts)


def answer_block(side: str, answer: dict[str, Any]) -> str:
    """One run's answer as the Compare tab shows it: confidence, mode, text, sources."""
    if not answer.get("text"):
        return f"**{side}** — not answered."
    sources = "\n".join(f"- {s}" for s in answer.get("sources") or []) or "- (none)"
    return (f"**{side}** · {answer.get('confidence', '')} confidence · {answer.get('mode', '')}"
            f"\n\n{answer['text']}\n\n**Sources**\n{sources}")
