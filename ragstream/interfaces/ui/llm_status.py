"""The sidebar's LLM block: the endpoint's state, in words, and a button that tests it.

It shows whether the endpoint answered its last call (``LLMClient.status``: reachable, failing
or not tried yet), the model, the last error in the words that name the setting to change,
and, while the endpoint fails, "Answering offline because …". "Test connection" asks the
endpoint at once (``LLMClient.check``: its models, then one token from the model) and shows
what it found; the state follows. The client is the server's, shared by every session: the
state is the endpoint's, whoever's pass found it.

``lines`` (the words, by kind) holds the logic; ``draw`` puts them in the sidebar.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ragstream.backends.llm import ConnectionCheck, EndpointStatus, LLMClient

#: the session-state key of the last "Test connection" result (a ``ConnectionCheck``)
CHECK = "llm_check"
#: the button's key
TEST = "llm_test"

NONE = ("No endpoint configured: every agent runs its deterministic mode and answers are "
        "extractive. See the README to connect one.")


@dataclass(frozen=True)
class Line:
    """One line of the block: ``kind`` is how it is drawn (caption, success, warning, error)."""

    kind: str
    text: str


def offline_because(status: EndpointStatus, model: str, base_url: str) -> str:
    """Why answers are offline now, in a few words (the whole message follows it)."""
    return {
        "refused": f"nothing listens at {base_url}",
        "unreachable": f"{base_url} cannot be reached",
        "timeout": "the endpoint did not answer within llm.timeout_s",
        "key": "the endpoint refused the API key",
        "model": f"the endpoint has no model {model!r}",
    }.get(status.problem, "the endpoint fails")


def _when(at: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at)) if at else ""


def lines(llm: LLMClient | None, shown: str = "") -> list[Line]:
    """The block's lines for the endpoint ``llm`` (None: none configured); the last error is
    left out when it is ``shown`` already (the last "Test connection" found it)."""
    if llm is None:
        return [Line("caption", NONE)]
    settings = llm.settings
    status = llm.status
    where = f"Endpoint `{settings.base_url}`, model `{settings.model}`"
    if settings.answer_model and settings.answer_model != settings.model:
        where += f" (answers: `{settings.answer_model}`)"
    if status.state == "failing":
        return [Line("error", f"**Not reachable** (since {_when(status.at)})."),
                Line("warning", "Answering offline because "
                     f"{offline_because(status, settings.model, settings.base_url)}: the agents "
                     "run their rules and answers are extractive until it answers again."),
                Line("caption", f"{where}.")] + (
                    [Line("caption", f"Last error: {status.message}")]
                    if status.message != shown else [])
    if status.state == "reachable":
        out = [Line("success", f"**Reachable** (answered at {_when(status.at)})."),
               Line("caption", f"{where}.")]
        if status.message and status.message != shown:
            out.append(Line("caption", f"Last error: {status.message}"))
        return out
    return [Line("caption", f"{where}. Not asked yet: the first pass or \"Test connection\" "
                            "will tell whether it answers.")]


def check_line(check: ConnectionCheck) -> Line:
    """The last "Test connection" result, with its time."""
    return Line("success" if check.ok else "error",
                f"Test connection ({_when(check.at)}): {check.message}")


def test_connection(llm: LLMClient, state: Any) -> ConnectionCheck:
    """Ask the endpoint now and keep the result for the block (``state[CHECK]``)."""
    result = llm.check()
    state[CHECK] = result
    return result


def draw(engine: Any) -> None:
    """The sidebar's LLM block for ``engine``'s endpoint (call it inside ``st.sidebar``)."""
    import streamlit as st

    st.header("LLM")
    llm = getattr(engine.services, "llm", None)
    state_box = st.container()  # filled after the button, which may change the state
    if llm is not None:
        if st.button("Test connection", key=TEST, width="stretch",
                     icon=":material/network_check:",
                     help="Ask the endpoint now: list its models and have the model answer "
                          "one token."):
            with st.spinner("Asking the endpoint…"):
                test_connection(llm, st.session_state)
    check = st.session_state.get(CHECK) if llm is not None else None
    if check is not None:
        line = check_line(check)
        getattr(st, line.kind)(line.text)
    with state_box:
        for line in lines(llm, check.message if check is not None else ""):
            getattr(st, line.kind)(line.text)
