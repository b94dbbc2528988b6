"""What every part of the page draws from: the engines (made once per server), the session
state, and what the main area works out at each draw (``Page``); and the page's start
(``open_page``): the session's state, its latest run reopened, the selected knowledge base,
the conversation.

A ``Page`` is made at each script run of the whole page and handed to every drawing
function; the main area (a fragment, drawn again alone after a click in it) keeps the one of
the run that drew it, and fills in ``sp``, ``stale``, ``plan``, ``before`` and ``links`` as it
works them out, top to bottom, for the parts drawn after.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import streamlit as st

from ragstream.common.errors import RagstreamError
from ragstream.interfaces.ui import conversation, evidence, knowledge, runs_tab
from ragstream.interfaces.ui import state as S
from ragstream.stages.staleness import Stale
from ragstream.state.super_prompt import SuperPrompt
from ragstream.workbench.engine import Engine


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


@dataclass
class Page:
    """One draw of the page: the engines, the engine of the knowledge base the sidebar selects
    (every action's), the session state, the knowledge bases listed, and what the main area
    works out (the pass shown, what is out of date, the re-run plan, the state before the
    edits, the evidence links)."""

    engines: knowledge.Engines
    engine: Engine
    state: Any
    kb_names: list[str]
    sp: SuperPrompt
    stale: Stale | None = None
    plan: tuple[str, str] | None = None
    before: SuperPrompt | None = None
    links: list[evidence.Link] = field(default_factory=list)

    def do(self, action: Callable[..., object], *args: object) -> None:
        """Run a page action (``ragstream.interfaces.ui.actions``) as a widget's callback: it
        changes the session state, which the script run that follows draws."""
        action(self.engine, self.state, *args)


def open_page() -> Page:
    """The engines (or the error that stops the page), the session's state made, the session's
    latest run reopened on a reload (its knowledge base and conversation too), the selected
    knowledge base's engine, and the conversation the page is in."""
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
    return Page(engines, engine, state, kb_names, state[S.SP])
