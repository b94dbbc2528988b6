"""Session-state keys of the page, created in one place, and the session state's type.

The pipeline state is one ``SuperPrompt`` under ``SP``; nothing else holds pipeline results.
"""

from __future__ import annotations

from typing import Any, Protocol

from ragstream.knowledge.bases import DEFAULT as DEFAULT_KB
from ragstream.stages.controller import new_prompt
from ragstream.state.super_prompt import Filters

SP = "sp"                      # the SuperPrompt
PROMPT = "prompt_text"         # the prompt box's text
PROMPT_EXAMPLE = "prompt_example"  # the example the prompt box was given for the selected
                                   # knowledge base (switching replaces it while it is untouched)
AUTO = "auto_run"              # the auto-run toggle
ERROR = "last_error"           # (kind, message) of the last failed action, or None
NOTICE = "last_notice"         # a success message from the last action, or None
OVERRIDES = "settings_overrides"  # dotted config key -> value for this session
INGEST_REPORT = "ingest_report"   # the last IngestReport as a dict, or None
JOURNEY_CHUNK = "journey_chunk"   # the chunk picked in the chunk journey
UPLOAD_NONCE = "upload_nonce"     # bumped to clear the file uploader after an ingest
CONVERSATION = "conversation"     # recent (question, answer) turns that the next prompt carries
CONVERSATION_OPEN = "conversation_open"  # the expander showing the turns the next prompt carries
CONVERSATION_SHOWN = "conversation_shown"  # the person opened it: it stays open while its title's
                                           # counts change (a new title is a new expander)
FILTERS = "filters"               # the Filters the next Retrieval applies
DIFF_A = "diff_a"                 # the stage diff's stage A (a views_by_stage key), or None
DIFF_B = "diff_b"                 # the stage diff's stage B, or None
DIFF_SORT = "diff_sort"           # the stage diff's order (one of chunk_moves.DIFF_SORTS)
INSPECT_AGENT = "inspect_agent"   # the agent stage the Agents tab shows, or None
EVAL_SET = "eval_set"             # the Eval tab's bundled question set (a label of bundled_sets)
EVAL_PATH = "eval_path"           # the path of the user's own question set, or ""
EVAL_LIMIT = "eval_limit"         # how many questions of the set the Eval tab runs
EVAL_RESULT = "eval_result"       # the last Eval run (eval_tab.run's outcome), or None
EVIDENCE_CHUNK = "evidence_chunk"        # the chunk the Evidence tab has open, or None
EVIDENCE_SENTENCE = "evidence_sentence"  # the sentence (A1, C3) it was opened from, or None
BEFORE_EDITS = "before_edits"     # the SuperPrompt before an edit discarded results, shown (marked
                                  # out of date) for the discarded stages until they run again
EDIT_NONCE = "edit_nonce"         # bumped after each edit: the editable tables start afresh
EDITS_OFFER = "edits_offer"       # the edits of a prompt the page left (actions.EditsOffer), offered
                                  # to the prompt now, never applied unless the person says so; or None
EDITS_CARRY = "edits_carry"       # (prompt text, EditsOffer): the person chose to apply those edits
                                  # to that prompt when it runs (before it ran); or None
CHUNK_SEARCH = "chunk_search"     # the text of the knowledge-base chunk search box
TABLE_FILTER = "table_filter"     # the chunk tables' row filter (words inside the chunks)
DETAIL_SEARCH = "detail_search"   # words the "Open a chunk" picker's chunks must hold in their text
JOURNEY_SEARCH = "journey_search"  # words the chunk journey's picker's chunks must hold
OPEN_TABLES = "open_tables"       # stage view -> open: the chunk tables the person opened or closed
DETAIL_TEXT = "detail_text"       # the opened chunk's text and metadata are shown (an expander)
SEARCH_OPEN = "search_open"       # the knowledge-base chunk search is open (an expander)
REPLAY = "agent_replay"           # the Agents tab's last replayed call (edit_actions.ShownReplay), or None
SESSION = "session"               # the session's name (the URL's ?session=…): its runs are restored
RUN_ID = "run_id"                 # the kept run (ragstream.workbench.runs) the page shows, or None
RUN_SAVED = "run_saved"           # the SuperPrompt last saved as RUN_ID (a stage run that goes on
                                  # from it updates that run), or None: the next run is a new one
RUN_STAGES = "run_stages"         # RUN_ID's snapshot after each stage it ran, by stage name
RUNS_SEARCH = "runs_search"       # the Runs tab's search text
RUNS_MINE = "runs_mine"           # the Runs tab lists this session's runs only
COMPARE_A = "compare_a"           # the Compare tab's run A (an id), or None: the run before B
COMPARE_B = "compare_b"           # the Compare tab's run B (an id), or None: the page's run
COMPARE_STAGE = "compare_stage"   # the chunk stage the Compare tab's table shows
REDRAW_ALL = "redraw_all"         # set by a callback in the main area whose change the sidebar
                                  # shows too (an opened run's settings): the page redraws whole
KB = "kb"                         # the knowledge base the page works on (the sidebar's switcher)
KB_NEW_NAME = "kb_new_name"       # the name typed for a new knowledge base
KB_NEW_FOLDER = "kb_new_folder"   # the folder typed for a new knowledge base ("" : one of its own)
KB_RENAME_TO = "kb_rename_to"     # the new name typed for the selected knowledge base
CHAT = "chat"                     # the named conversation the page is in (its prompts search its memory,
                                  # its answers are its next turns); not kept until its first answer
CHAT_LIST = "chat_list"           # the conversations (ConversationInfo, newest first) as last read, or
                                  # None: read again at the next draw
CHAT_NEW_NAME = "chat_new_name"   # the name typed for a new conversation ("": one is made up)
CHAT_KB = "chat_kb"               # (knowledge base, conversation) as last checked to belong together
                                  # (None: not yet); another pair is checked again (conversation.follow)
VIEW = "view"                     # the open result tab (its label; st.tabs keeps it, and the URL's
                                  # ?view=… query parameter); not set here: the tabs own it



class SessionState(Protocol):
    """What the page's code needs of its session state: string keys, any values. Streamlit's
    ``st.session_state`` is one (its keys may also be ints, so it is not a
    ``MutableMapping[str, Any]``), and so is a plain ``dict[str, Any]``, as in the tests."""

    def __contains__(self, key: object, /) -> bool: ...

    def __getitem__(self, key: str, /) -> Any: ...

    def __setitem__(self, key: str, value: Any, /) -> None: ...

    def get(self, key: str, /) -> Any:
        """The value under ``key``, or None if there is none."""
        ...

    def __delitem__(self, key: str, /) -> None: ...


#: the sidebar's widgets that keep a value of their own: the document-type filter and, per
#: editable setting, its number input (``setting_widget``)
FILTER_TYPES_WIDGET = "filter_doc_type"


def forget(state: SessionState, key: str) -> None:
    """Remove ``key`` from the session state, if it is there (a widget then starts afresh).
    Streamlit may list a widget's key that it cannot delete outside a script run: then the
    widget keeps its value."""
    if key in state:
        try:
            del state[key]
        except KeyError:
            pass


def table_open(view: str) -> str:
    """The key of the Chunk views tab's expander for stage view ``view`` (True while open);
    forgotten after each run, so that the latest stage's table opens."""
    return f"table_open_{view}"


def kb_delete_sure(name: str) -> str:
    """The key of the box that must be ticked before "Delete" deletes knowledge base ``name``
    (one per knowledge base: a tick never carries over to another one)."""
    return f"kb_delete_sure_{name}"


def setting_widget(key: str) -> str:
    """The key of the sidebar's number input for setting ``key`` (a dotted config path)."""
    return f"set_{key}"


EXAMPLE_PROMPT = (
    "Task: Explain how the ReRanker chooses its backend when no cross-encoder is installed.\n"
    "Audience: beginner\n"
    "Format: bullet points"
)


def example_prompt(kb: str, topic: str) -> str:
    """The prompt box's example for knowledge base ``kb``: the bundled one's question for the
    default, else one about ``topic`` (a section heading of it); "" when it has none yet."""
    if kb == DEFAULT_KB:
        return EXAMPLE_PROMPT
    return f"Task: Explain {topic}.\nAudience: beginner" if topic else ""


def init_state(state: SessionState) -> None:
    """Give the session state each key's default, keeping the keys it already has."""
    defaults = {
        SP: new_prompt(""),
        PROMPT: EXAMPLE_PROMPT,
        PROMPT_EXAMPLE: EXAMPLE_PROMPT,
        AUTO: True,
        ERROR: None,
        NOTICE: None,
        OVERRIDES: {},
        INGEST_REPORT: None,
        JOURNEY_CHUNK: None,
        UPLOAD_NONCE: 0,
        CONVERSATION: [],
        CONVERSATION_SHOWN: False,
        FILTERS: Filters(),
        DIFF_A: None,
        DIFF_B: None,
        DIFF_SORT: "rank in B",
        INSPECT_AGENT: None,
        EVAL_SET: None,
        EVAL_PATH: "",
        EVAL_LIMIT: 10,
        EVAL_RESULT: None,
        EVIDENCE_CHUNK: None,
        EVIDENCE_SENTENCE: None,
        BEFORE_EDITS: None,
        EDITS_OFFER: None,
        EDITS_CARRY: None,
        EDIT_NONCE: 0,
        CHUNK_SEARCH: "",
        TABLE_FILTER: "",
        DETAIL_SEARCH: "",
        JOURNEY_SEARCH: "",
        OPEN_TABLES: {},
        REPLAY: None,
        SESSION: None,
        RUN_ID: None,
        RUN_SAVED: None,
        RUN_STAGES: {},
        RUNS_SEARCH: "",
        RUNS_MINE: False,
        COMPARE_A: None,
        COMPARE_B: None,
        COMPARE_STAGE: None,
        REDRAW_ALL: False,
        KB: DEFAULT_KB,
        CHAT: "",
        CHAT_LIST: None,
        CHAT_KB: None,
    }
    for key, value in defaults.items():
        if key not in state:
            state[key] = value
