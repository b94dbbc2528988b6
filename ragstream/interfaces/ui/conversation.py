"""The page's named conversations (``ragstream.workbench.conversations``): the one the page is in, the
sidebar's list, starting a new one, opening an earlier one, forgetting a turn, and what the
conversation expander shows of each turn.

The page is always in a conversation (``S.CHAT``): a session starts in a new one, named
``chat-YYYYMMDD-HHMMSS`` (kept once its first answer is). Its prompts search its remembered
turns with the knowledge base (Retrieval) and carry its last N4 turns (``S.CONVERSATION``,
the Recent conversation block); each answer becomes its next turn (``Engine.answer``).

A conversation belongs to one knowledge base (``ragstream.workbench.conversations``): the sidebar lists
the selected knowledge base's conversations only, and when another knowledge base is selected
(the switcher, creating, deleting, a reopened run) the page goes on in that one's latest
conversation, or a new one (``follow``); the one it was in stays with its own knowledge base.

The list of conversations is read once per action that changes it (``S.CHAT_LIST``), not at
every draw; the turns are read while the conversation expander is open.
"""

from __future__ import annotations

from dataclasses import dataclass

from ragstream.common.errors import RagstreamError
from ragstream.interfaces.ui import actions
from ragstream.interfaces.ui import state as S
from ragstream.state.render import strip_citations
from ragstream.state.super_prompt import ConversationTurn
from ragstream.workbench.conversations import ConversationInfo, Turn, check_name, new_name
from ragstream.workbench.engine import Engine


def start(st_state: S.SessionState) -> None:
    """Put the session in a new conversation when it is in none yet."""
    if not st_state.get(S.CHAT):
        st_state[S.CHAT] = new_name()  # its random end keeps it apart from every other


def follow(engine: Engine, st_state: S.SessionState) -> None:
    """Keep the page's conversation one of the selected knowledge base's (``engine.kb``): when
    it belongs to another, the page goes on in the selected one's latest conversation (a new
    one when it has none), and the notice says so; the page's own new conversation, without
    turns yet, simply becomes the selected one's. Run at every draw, once the knowledge base is
    chosen; it reads the log only when the knowledge base or the conversation changed."""
    kb, name = engine.kb, st_state.get(S.CHAT) or ""
    if st_state.get(S.CHAT_KB) == (kb, name):
        return
    try:
        convs = engine.conversations()
        owner = convs.kb_of(name) if name else None
        if owner in (None, kb):  # kept in this one, or new (no turn yet): it is this one's
            st_state[S.CHAT_KB] = (kb, name)
            return
        latest = convs.all(kb)
        target = latest[0].name if latest else new_name()
        _enter(engine, st_state, target)
    except RagstreamError as err:
        st_state[S.ERROR] = (err.kind, str(err))
        return
    said = (f"Knowledge base {kb!r} has its own conversations: the page goes on in "
            + (f"its latest, {target!r}" if latest else f"a new one, {target!r}")
            + f". Conversation {name!r} stays with knowledge base {owner!r}.")
    notice = st_state.get(S.NOTICE)
    st_state[S.NOTICE] = f"{notice} {said}" if notice else said


def listed(engine: Engine, st_state: S.SessionState) -> list[ConversationInfo]:
    """The selected knowledge base's conversations, the one answered last first, as read at the
    last action that changed them (read now when none did yet)."""
    kept = st_state.get(S.CHAT_LIST)
    if kept is None:
        try:
            kept = engine.conversations().all(engine.kb)
        except RagstreamError as err:
            st_state[S.ERROR] = (err.kind, str(err))
            kept = []
        st_state[S.CHAT_LIST] = kept
    return kept


def current(engine: Engine, st_state: S.SessionState) -> ConversationInfo | None:
    """The page's conversation in the list, or None while none of its turns is kept."""
    name = st_state.get(S.CHAT)
    return next((c for c in listed(engine, st_state) if c.name == name), None)


def choices(engine: Engine, st_state: S.SessionState) -> list[str]:
    """The sidebar's conversations by name, the one answered last first; the page's own first
    while it is new. (Names only: a picker's option is kept by its label, so a label that
    counted the turns would lose the pick when an answer changes the count.)"""
    chat = st_state.get(S.CHAT) or ""
    names = [c.name for c in listed(engine, st_state)]
    return ([chat] if chat and chat not in names else []) + names


def label(info: ConversationInfo) -> str:
    """``3 turns, 2 remembered``."""
    if not info.turns:
        return "no turns yet"
    return f"{info.turns} turn{'s' if info.turns != 1 else ''}, {info.in_memory} remembered"


def _recent(engine: Engine, st_state: S.SessionState, name: str) -> list[ConversationTurn]:
    """The last N4 turns of ``name`` not forgotten (none while it is not kept)."""
    convs = engine.conversations()
    if not convs.exists(name):
        return []
    n4 = actions.session_config(engine, st_state).limits.N4_RECENT_CONV_MAX_PAIRS
    return convs.recent(name, n4)


def _enter(engine: Engine, st_state: S.SessionState, name: str) -> None:
    """Make ``name`` the page's conversation: its last N4 turns go into the next prompt, and
    the page's pass is this conversation's from now (a pass that searched another
    conversation's memory, or carried other turns, is out of date)."""
    st_state[S.CHAT] = name
    st_state[S.CHAT_KB] = (engine.kb, name)  # the selected knowledge base's (``follow``)
    st_state[S.CONVERSATION] = _recent(engine, st_state, name)
    st_state[S.CHAT_LIST] = None
    sp = st_state[S.SP]
    if sp.conversation_name != name:
        st_state[S.SP] = sp.model_copy(update={"conversation_name": name,
                                               "recent_conversation": list(st_state[S.CONVERSATION])})
    st_state[S.REDRAW_ALL] = True  # the sidebar's list shows the conversation the page is in


def opened(engine: Engine, st_state: S.SessionState) -> bool:
    """The sidebar's conversation list changed (``S.CHAT`` holds the one picked): the page goes
    on in that conversation."""
    st_state[S.ERROR] = None
    name = st_state.get(S.CHAT) or ""
    try:
        _enter(engine, st_state, name)
    except RagstreamError as err:
        st_state[S.ERROR] = (err.kind, str(err))
        return False
    n = len(st_state[S.CONVERSATION])
    st_state[S.NOTICE] = (f"Conversation {name!r}: the next prompt searches its remembered turns "
                          f"and carries its last {n} turn{'s' if n != 1 else ''}.")
    return True


def start_new(engine: Engine, st_state: S.SessionState, name: str | None = None) -> bool:
    """Start a new conversation, named ``name`` (None: the name typed in ``CHAT_NEW_NAME``),
    kept now, or, without a name, a made-up one (kept with its first answer); a name that
    exists already opens that conversation. The conversation the page was in stays listed."""
    st_state[S.ERROR] = None
    if name is None:
        name = str(st_state.get(S.CHAT_NEW_NAME) or "")
    try:
        if name.strip():
            name = check_name(name)
            convs = engine.conversations()
            if convs.exists(name):
                convs.check_kb(name, engine.kb)  # another knowledge base's: refused, with why
                _enter(engine, st_state, name)
                st_state[S.NOTICE] = f"Conversation {name!r} exists already: the page goes on in it."
                st_state[S.CHAT_NEW_NAME] = ""
                return True
            convs.create(name, kb=engine.kb)
        else:
            name = new_name()
        _enter(engine, st_state, name)
    except RagstreamError as err:
        st_state[S.ERROR] = (err.kind, str(err))
        return False
    st_state[S.CHAT_NEW_NAME] = ""
    st_state[S.NOTICE] = (f"New conversation {name!r}: the next prompt starts without earlier "
                          f"turns. The earlier conversation stays in the list.")
    return True


def forget(engine: Engine, st_state: S.SessionState, turn: int) -> bool:
    """Take turn ``turn`` of the page's conversation out of its memory and out of the next
    prompt's Recent conversation block (a pass that searched it is then out of date)."""
    st_state[S.ERROR] = None
    name = st_state.get(S.CHAT) or ""
    try:
        engine.forget_turn(name, turn)
        st_state[S.CONVERSATION] = _recent(engine, st_state, name)
    except RagstreamError as err:
        st_state[S.ERROR] = (err.kind, str(err))
        return False
    st_state[S.CHAT_LIST] = None
    st_state[S.REDRAW_ALL] = True  # the sidebar's list counts the remembered turns
    st_state[S.NOTICE] = (f"Turn {turn} of {name!r} forgotten: Retrieval no longer finds it and "
                          f"the next prompt does not carry it.")
    return True


def remember_open(st_state: S.SessionState) -> None:
    """The person opened or closed the conversation expander: it stays so while its title's
    counts change (an answer, a forgotten turn)."""
    st_state[S.CONVERSATION_SHOWN] = bool(st_state.get(S.CONVERSATION_OPEN))


@dataclass(frozen=True)
class TurnView:
    """One turn as the conversation expander shows it."""

    turn: int
    heading: str   # ``Turn 3 · 2026-11-24 14:02 UTC · knowledge base default``
    marks: str     # in the next prompt / remembered / not remembered: why / forgotten
    text: str      # the question and the answer (without its [n] markers), as the block has them
    can_forget: bool


def turn_views(engine: Engine, st_state: S.SessionState) -> list[TurnView]:
    """Every turn of the page's conversation, newest first, with what becomes of it: whether
    the next prompt carries it (its last N4 turns not forgotten), whether Retrieval searches it
    (remembered: its answer cited a source) or why not, or that it was forgotten."""
    name = st_state.get(S.CHAT) or ""
    convs = engine.conversations()
    turns: list[Turn] = convs.turns(name) if name and convs.exists(name) else []
    n4 = actions.session_config(engine, st_state).limits.N4_RECENT_CONV_MAX_PAIRS
    block = list(st_state.get(S.CONVERSATION) or [])
    carried = {t.turn for t in block[-n4:]} if n4 > 0 else set()
    out = []
    for t in reversed(turns):
        marks = []
        if t.removed:
            marks.append("forgotten: neither searched nor carried")
        else:
            if t.turn in carried:
                marks.append("goes into the next prompt")
            marks.append("remembered: Retrieval searches it" if t.remembered
                         else f"not remembered: {t.why}")
        text = (f"**User:** {t.question.strip()}\n\n"
                f"**Assistant:** {strip_citations(t.answer).strip()}")
        if t.in_memory:  # what Retrieval finds of it: the sentences it asserted, each with its source
            text += "\n\n**Remembered:**\n" + "\n".join(f"- {line}" for line in
                                                         t.memory_text.splitlines())
        out.append(TurnView(turn=t.turn, heading=f"Turn {t.turn} · {t.when} UTC · knowledge base {t.kb}",
                            marks=" · ".join(marks), text=text, can_forget=not t.removed))
    return out


def title(engine: Engine, st_state: S.SessionState) -> str | None:
    """The conversation expander's title: ``Conversation — 3 earlier turn(s); 2 go into the
    next prompt``; None while the conversation has no turn."""
    info = current(engine, st_state)
    carried_turns = st_state.get(S.CONVERSATION) or []
    n4 = actions.session_config(engine, st_state).limits.N4_RECENT_CONV_MAX_PAIRS
    carried = min(len(carried_turns), max(n4, 0))
    earlier = info.turns if info is not None else len(carried_turns)
    if not earlier:
        return None
    return f"Conversation — {earlier} earlier turn(s); {carried} go into the next prompt"


def turn_note(sp) -> str | None:
    """What became of the answer's turn: ``Turn 2 of chat-… remembered: …``, or why not."""
    rec = sp.extras.turn
    if rec is None:
        return None
    uses = f" {rec.uses}" if rec.uses else ""
    if rec.error:
        return f"Not kept in conversation {rec.conversation!r}: {rec.error}.{uses}"
    if rec.remembered:
        return (f"Turn {rec.turn} of conversation {rec.conversation!r} remembered: the next "
                f"prompts' Retrieval searches it.{uses}")
    return (f"Turn {rec.turn} of conversation {rec.conversation!r} kept, not remembered: "
            f"{rec.why}.{uses}")


def memory_line(engine: Engine, st_state: S.SessionState) -> str:
    """The sidebar's line under the conversation: its turns and what the next prompt takes
    from it."""
    info = current(engine, st_state)
    if info is None or not info.turns:
        return (f"New, of knowledge base {engine.kb!r}: no turns yet. Each answer becomes a "
                f"turn; Retrieval searches, with {engine.kb!r} only, what the answers asserted "
                f"with their sources.")
    n4 = actions.session_config(engine, st_state).limits.N4_RECENT_CONV_MAX_PAIRS
    carried = min(len(st_state.get(S.CONVERSATION) or []), max(n4, 0))
    return (f"{label(info)}: Retrieval searches the remembered ones with knowledge base "
            f"{engine.kb!r} only; the next prompt carries the last {carried}.")
