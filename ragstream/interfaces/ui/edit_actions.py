"""What the page's edit controls do: pin, exclude or add a chunk, set a field, move, rewrite,
remove or add a statement or rule, undo an edit; any chunk of the knowledge base found by its
words (to add it); and the Agents tab's replay of a model call (sent again, and applied as an
edit). Each edit is recorded on the pass, and the stages apply it every run; a refused one is
a message under ``ERROR`` and the SuperPrompt stays as it was."""


from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ragstream.common.errors import (
    RagstreamError,
)
from ragstream.interfaces.ui import state as S
from ragstream.interfaces.ui.actions import edit, fail, session_config
from ragstream.state.super_prompt import SuperPrompt
from ragstream.workbench.engine import Engine
from ragstream.workbench.replay import Decision, Replayed, ReplayError, call_digest

# --------------------------------------------------------------------------- edits


def seen_state(st_state: S.SessionState) -> SuperPrompt:
    """The state the person is looking at: the one before the edits that discarded results,
    while those results are shown."""
    return st_state.get(S.BEFORE_EDITS) or st_state[S.SP]


def change_chunks(engine: Engine, st_state: S.SessionState, changes: list) -> bool:
    """Apply the chunk tables' changes (``editing.ChunkChange``: pin, unpin, exclude, include)."""
    if not changes:
        return False

    seen = seen_state(st_state)  # where each chunk stood, though an earlier edit discarded it

    def change(sp: SuperPrompt) -> SuperPrompt:
        for c in changes:
            if c.action in ("pin", "exclude"):
                sp = (engine.pin if c.action == "pin" else engine.exclude)(sp, c.chunk_id,
                                                                           seen=seen)
            else:
                gone = [e.id for e in sp.edits if e.kind in ("pin", "add", "exclude", "drop")
                        and e.target == c.chunk_id]
                sp = engine.undo_edits(sp, gone) if gone else sp
        return sp

    said = ", ".join(f"{c.action} {c.chunk_id}" for c in changes)
    return edit(engine, st_state, change, f"Recorded: {said}.")


def chunk_action(engine: Engine, st_state: S.SessionState, chunk_id: str, action: str) -> bool:
    """Pin, exclude, add (pinned) or clear the person's decision on one chunk."""
    if action == "add":
        seen = seen_state(st_state)
        return edit(engine, st_state, lambda sp: engine.add_chunk(sp, chunk_id, seen=seen),
                     f"Added {chunk_id}, pinned.")
    from ragstream.interfaces.ui.editing import ChunkChange

    return change_chunks(engine, st_state, [ChunkChange(chunk_id, action)])


def set_fields(engine: Engine, st_state: S.SessionState, values: dict[str, str]) -> bool:
    """Set the body fields whose value differs from the state's (the fields table)."""
    sp = st_state[S.SP]
    changed = {k: v for k, v in values.items() if (v or "") != sp.body.get(k, "")}
    if not changed:
        st_state[S.EDIT_NONCE] = (st_state.get(S.EDIT_NONCE) or 0) + 1
        return False
    cfg = session_config(engine, st_state)

    def change(state: SuperPrompt) -> SuperPrompt:
        for name, value in changed.items():
            state = engine.set_field(state, name, value, cfg)
        return state

    said = ", ".join(f"{k} = {v!r}" for k, v in changed.items())
    return edit(engine, st_state, change, f"Set by you: {said}.")


def item_action(engine: Engine, st_state: S.SessionState, what: str, action: str, key: str,
                value: str | int | None = None) -> bool:
    """Edit a statement of A4's context or a rule of A5 (``what``: "statement" / "rule";
    ``action``: "text", "remove", "move" to place ``value``, or "add": a rule, or a note of
    the person's own in A4's context)."""
    seen = seen_state(st_state)
    if what == "rule" and action == "add":
        return edit(engine, st_state, lambda sp: engine.add_rule(sp, str(value or "")),
                     "Rule added.")
    if what == "statement" and action == "add":  # the person's note: theirs, never cited
        return edit(engine, st_state, lambda sp: engine.add_note(sp, str(value or "")),
                     "Note added (yours: listed under “Your notes”, never cited).")
    calls: dict[str, Callable[..., SuperPrompt]] = {
        "statement text": engine.edit_statement, "statement remove": engine.remove_statement,
        "statement move": engine.move_statement, "rule text": engine.edit_rule,
        "rule remove": engine.remove_rule, "rule move": engine.move_rule}
    call = calls[f"{what} {action}"]
    args = (key,) if action == "remove" else (key, value)
    word = {"text": "rewritten", "remove": "removed", "move": f"moved to place {value}"}[action]
    return edit(engine, st_state, lambda sp: call(sp, *args, seen=seen),
                 f"{what.capitalize()} {word}.")


def undo_edit(engine: Engine, st_state: S.SessionState, edit_id: int | None = None) -> bool:
    """Undo one edit, or every edit ("Clear edits"): the stages they acted on decide by
    themselves again when they run."""
    sp = st_state[S.SP]
    if not sp.edits:
        return False
    ids = None if edit_id is None else [edit_id]
    said = "Edits cleared: the stages decide by themselves again." if ids is None else \
        f"Edit {edit_id} undone."
    return edit(engine, st_state, lambda state: engine.undo_edits(state, ids), said)


def find_chunks(engine: Engine, text: str, limit: int = 12) -> list[tuple[Any, str]]:
    """The knowledge base's chunks that hold ``text`` (then its best keyword matches)."""
    return engine.find_chunks(text, limit) if text.strip() else []


# --------------------------------------------------------------------------- replay (the Agents tab)


@dataclass(frozen=True)
class ShownReplay:
    """The Agents tab's last replay: which call (agent, index, and its digest, so that a call
    the stage made anew does not show another's replay), the replayed call and its decision."""

    agent: str
    index: int
    digest: str
    replayed: Replayed
    decision: Decision


def replay_send(engine: Engine, st_state: S.SessionState, agent: str, index: int) -> bool:
    """Send call ``index`` of ``agent`` again with the messages as the tab's text boxes hold
    them, and keep the reply and the decision it would make (``REPLAY``). No endpoint, or a
    call the stage would not make now, sets ``ERROR``; the endpoint's own failure is shown as
    the reply's error."""
    from ragstream.interfaces.ui import inspector

    st_state[S.ERROR] = None
    sp = st_state[S.SP]
    calls = sp.extras.llm_calls.get(agent, [])
    try:
        cfg = session_config(engine, st_state)
        if not 0 <= index < len(calls):
            raise ReplayError(f"{agent} has no call {index + 1} in this pass any more: pick one "
                              f"of its calls.")
        call = calls[index]
        texts = [st_state.get(f.key) if st_state.get(f.key) is not None else f.text
                 for f in inspector.replay_fields(sp, agent, index)]
        replayed = engine.replay(sp, agent, index, texts, cfg)
        decision = engine.replay_decision(sp, replayed, cfg)
    except RagstreamError as err:
        fail(st_state, err)
        return False
    st_state[S.REPLAY] = ShownReplay(agent, index, call_digest(call), replayed, decision)
    return True


def shown_replay(st_state: S.SessionState, agent: str, index: int) -> ShownReplay | None:
    """The kept replay of call ``index`` of ``agent``, while that call is the one in the state."""
    shown = st_state.get(S.REPLAY)
    if not isinstance(shown, ShownReplay) or (shown.agent, shown.index) != (agent, index):
        return None
    calls = st_state[S.SP].extras.llm_calls.get(agent, [])
    if index >= len(calls) or call_digest(calls[index]) != shown.digest:
        return None
    return shown


def replay_apply(engine: Engine, st_state: S.SessionState) -> bool:
    """Record the kept replay's decision as the person's edits of its stage (weighed again
    against the state as it is now); its stage and the later ones go out of date, and the
    page's banner and ↻ Re-run take over. The replay is then forgotten."""
    shown = st_state.get(S.REPLAY)
    if not isinstance(shown, ShownReplay):
        st_state[S.NOTICE] = "Nothing to apply: send a call again first."
        return False
    cfg = session_config(engine, st_state)
    n = len(shown.decision.proposals)
    done = edit(engine, st_state, lambda sp: engine.apply_replay(sp, shown.replayed, cfg),
                 f"Applied to {shown.agent}: {n} edit{'s' if n != 1 else ''} recorded as yours.")
    if done:
        st_state[S.REPLAY] = None
    return done
