"""Opening one of the page's result tabs in an AppTest: only the open tab is drawn (``st.tabs``
with state tracking), so a test opens the tab whose content it checks."""

from pathlib import Path

from streamlit.testing.v1 import AppTest

from ragstream.interfaces.ui import state as S

#: the page under test, and how long one of its runs may take in an AppTest
APP = str(Path(__file__).resolve().parents[2] / "ui_streamlit.py")
TIMEOUT = 300

#: the tab open when the URL names none
DEFAULT_TAB = "Chunk views"


def open_tab(at: AppTest, label: str) -> AppTest:
    """Open the result tab ``label`` and draw the page again. AppTest has no tab to click; the
    tabs follow the URL's ``?view=`` (which they leave out for the default tab, whose value
    then comes from the session state)."""
    if label == DEFAULT_TAB:
        at.query_params.pop(S.VIEW, None)
        at.session_state[S.VIEW] = label
    else:
        at.query_params[S.VIEW] = label
    at.run()
    assert not at.exception, at.exception
    assert at.session_state[S.VIEW] == label, f"{label!r} did not open: {at.session_state[S.VIEW]!r}"
    return at


def open_box(at: AppTest, key: str) -> AppTest:
    """Open the expander ``key`` (one the page draws only while it is open) and draw again."""
    at.session_state[key] = True
    at.run()
    assert not at.exception, at.exception
    return at


def open_tables(at: AppTest) -> AppTest:
    """Open every chunk table of the Chunk views tab (each draws its grid while open only)."""
    views = ("retrieval", "reranked", "a3", "a4")
    for view in views:
        at.session_state[S.table_open(view)] = True
    at.session_state[S.OPEN_TABLES] = dict.fromkeys(views, True)  # as opening them by hand
    at.run()
    assert not at.exception, at.exception
    return at


def fresh() -> AppTest:
    """A new session of the page, drawn once, without an exception."""
    at = AppTest.from_file(APP, default_timeout=TIMEOUT).run()
    assert not at.exception, at.exception
    return at


def sp(at: AppTest):
    """The session's SuperPrompt."""
    return at.session_state[S.SP]
