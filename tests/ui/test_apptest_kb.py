"""The page's knowledge bases, driven in-process with AppTest over the session's temp index:
the sidebar's switcher (every result from the selected one, and said so), creating, renaming
and deleting one (only with the box ticked, never touching another)."""

import uuid
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from ragstream.interfaces.ui import state as S
from tests.ingest.jobs_support import settled
from tests.ui.tabs import APP, TIMEOUT, fresh, open_box, sp

ROOT = Path(__file__).resolve().parents[2]
ZEBRA = ("# Zebra care\n\nThe zebra named Quagga Bob eats forty kilograms of hay daily and "
         "sleeps standing up in the north paddock.\n\n## Water\n\nQuagga Bob drinks from the "
         "trough by the gate twice a day.\n")


@pytest.fixture(scope="module", autouse=True)
def app_env(page_env):
    """Every test here drives the page over the session's temp index."""




def unique(stem: str) -> str:
    return f"{stem}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def zoo(kb_engine, tmp_path):
    """A knowledge base of one distinctive document in a folder of the test's (not ingested:
    the page brings it up to date when it is selected); deleted afterwards."""
    folder = tmp_path / unique("zoo")
    folder.mkdir()
    (folder / "zebra.md").write_text(ZEBRA, encoding="utf-8")
    kb = kb_engine.create_kb(unique("zoo"), folder)
    yield kb
    if kb_engine.knowledge_bases().find(kb.name) is not None:
        kb_engine.delete_kb(kb.name)


def select(at: AppTest, name: str) -> AppTest:
    at.selectbox(key=S.KB).set_value(name).run()
    assert not at.exception, at.exception
    return at


def test_the_selected_knowledge_base_is_the_only_one_retrieval_searches(zoo):
    at = fresh()
    assert at.selectbox(key=S.KB).value == "default"
    assert zoo.name in at.selectbox(key=S.KB).options
    select(at, zoo.name)
    assert not at.error, [e.value for e in at.error]
    # its folder was ingested when it was selected, and the sidebar counts its documents
    assert any("(1 document ingested)" in i.value for i in at.info), [i.value for i in at.info]
    assert at.metric[0].label == "Documents" and at.metric[0].value == "1"
    at.text_area(key=S.PROMPT).set_value("How much hay does Quagga Bob eat?").run()
    at.button(key="run").click().run()
    assert not at.error, [e.value for e in at.error]
    folder = Path(zoo.folder).name
    ids = [r.chunk_id for r in sp(at).view("retrieval")]
    assert ids and all(i.startswith(f"{folder}/") for i in ids), ids
    assert sp(at).extras.retrieval.kb == zoo.name
    assert sp(at).answer is not None and sp(at).answer.sources[0].chunk_id.startswith(folder)
    assert any(c.value.startswith(f"Knowledge base: **{zoo.name}**") for c in at.caption)
    # back on the default: the pass (and its answer) is out of date, and says why
    select(at, "default")
    banner = " ".join(w.value for w in at.warning)
    assert f"another knowledge base is chosen: {zoo.name} → default" in banner, banner
    assert any(e.label.startswith("Out of date: another knowledge base is chosen")
               and e.label.endswith("— the answer of the earlier pass") for e in at.expander)
    at.button(key="run").click().run()
    ids = [r.chunk_id for r in sp(at).view("retrieval")]
    assert ids and not any(i.startswith(f"{folder}/") for i in ids)
    assert sp(at).extras.retrieval.kb == "default"
    assert any(c.value.startswith("Knowledge base: **default**") for c in at.caption)


def test_delete_needs_the_box_ticked_and_touches_no_other_knowledge_base(kb_engine, zoo):
    scratch = kb_engine.create_kb(unique("scratch"))  # a folder of its own
    (Path(scratch.folder) / "note.md").write_text("# Note\n\nA scratch note about otters.\n")
    zoo_chunks = kb_engine.for_kb(zoo.name)
    zoo_chunks.ingest()
    before = zoo_chunks.status()["chunks"]
    at = fresh()
    select(at, scratch.name)
    # without the box the button deletes nothing, and says so
    sure = S.kb_delete_sure(scratch.name)
    label = at.checkbox(key=sure).label
    assert label.startswith(f"Delete '{scratch.name}': its index and the folder RAGstream made")
    assert scratch.folder in label
    at.button(key="kb_delete").click().run()
    assert scratch.name in kb_engine.knowledge_bases().names()
    assert any("Nothing was deleted: tick the box" in i.value for i in at.info)
    assert at.session_state[S.KB] == scratch.name
    # a tick on another knowledge base's box does not carry over to this one
    select(at, zoo.name)
    zoo_label = at.checkbox(key=S.kb_delete_sure(zoo.name)).label  # a folder the test named
    assert zoo_label == f"Delete '{zoo.name}': its index only; your folder {zoo.folder} and its files stay"
    at.checkbox(key=S.kb_delete_sure(zoo.name)).check().run()
    select(at, scratch.name)
    at.button(key="kb_delete").click().run()
    assert scratch.name in kb_engine.knowledge_bases().names()
    at.checkbox(key=sure).check().run()
    at.button(key="kb_delete").click().run()
    assert not at.error, [e.value for e in at.error]
    assert scratch.name not in kb_engine.knowledge_bases().names()
    assert not Path(scratch.folder).exists()  # its own folder went with it
    assert at.session_state[S.KB] == "default" and at.selectbox(key=S.KB).value == "default"
    assert any(f"Knowledge base '{scratch.name}' deleted" in i.value for i in at.info)
    # the other one is untouched
    assert zoo.name in kb_engine.knowledge_bases().names()
    assert (Path(zoo.folder) / "zebra.md").exists()
    assert kb_engine.for_kb(zoo.name).status()["chunks"] == before
    # the default offers no delete at all, and says why
    assert not [b for b in at.button if b.key == "kb_delete"]
    assert any("cannot be renamed or deleted" in c.value for c in at.caption)


def test_create_and_rename_from_the_sidebar_and_a_bad_name_is_named(kb_engine, tmp_path):
    name, folder = unique("notes"), tmp_path / "notes"
    folder.mkdir()
    (folder / "owls.md").write_text("# Owls\n\nOwls hunt at night and swallow mice whole.\n")
    at = fresh()
    at.text_input(key=S.KB_NEW_NAME).set_value(name)
    at.text_input(key=S.KB_NEW_FOLDER).set_value(str(folder))
    at.button(key="FormSubmitter:kb_create-Create and select").click().run()
    assert not at.error, [e.value for e in at.error]
    assert at.session_state[S.KB] == name and name in at.selectbox(key=S.KB).options
    assert any(f"Knowledge base '{name}' created and selected; its folder" in i.value
               for i in at.info)
    settled(at)  # its folder is ingested in the background
    assert any(f"Knowledge base '{name}': 1 document ingested from {folder}" in i.value
               for i in at.info), [i.value for i in at.info]
    assert at.text_input(key=S.KB_NEW_NAME).value == ""
    renamed = unique("owls")
    at.text_input(key=S.KB_RENAME_TO).set_value(renamed)
    at.button(key="FormSubmitter:kb_rename-Rename").click().run()
    assert not at.error, [e.value for e in at.error]
    assert at.session_state[S.KB] == renamed
    assert renamed in kb_engine.knowledge_bases().names() and name not in kb_engine.knowledge_bases().names()
    at.text_area(key=S.PROMPT).set_value("What do owls swallow?").run()
    at.button(key="run").click().run()
    assert sp(at).extras.retrieval.kb == renamed
    assert all(r.chunk_id.startswith("notes/") for r in sp(at).view("retrieval"))
    # a name that cannot be used is named like any other error; the page goes on
    at.text_input(key=S.KB_NEW_NAME).set_value("../etc")
    at.button(key="FormSubmitter:kb_create-Create and select").click().run()
    assert not at.exception
    assert any("cannot be a knowledge base's name" in e.value for e in at.error)
    assert at.session_state[S.KB] == renamed
    kb_engine.delete_kb(renamed)
    assert (folder / "owls.md").exists()  # a folder the person named stays


def test_a_knowledge_base_deleted_elsewhere_falls_back_to_the_default(kb_engine, zoo):
    at = fresh()
    select(at, zoo.name)
    kb_engine.delete_kb(zoo.name)  # as the CLI or another page would
    at.run()
    assert not at.exception, at.exception
    assert at.session_state[S.KB] == "default"
    assert any(f"The knowledge base '{zoo.name}' is no longer there" in i.value for i in at.info)


def test_a_reload_comes_back_to_the_runs_knowledge_base_and_conversation(zoo):
    at = fresh()
    select(at, zoo.name)
    at.text_area(key=S.PROMPT).set_value("How much hay does Quagga Bob eat?").run()
    at.button(key="run").click().run()
    assert sp(at).answer is not None and sp(at).extras.turn.turn == 1
    # a reload: a fresh session state, the same URL
    again = AppTest.from_file(APP, default_timeout=TIMEOUT)
    again.query_params[S.SESSION] = at.session_state[S.SESSION]
    again.run()
    assert not again.exception, again.exception
    assert again.session_state[S.KB] == zoo.name and again.selectbox(key=S.KB).value == zoo.name
    assert again.session_state[S.CHAT] == at.session_state[S.CHAT]
    assert [t.turn for t in again.session_state[S.CONVERSATION]] == [1]
    # the restored pass is current on it: its answer is not out of date
    assert again.button(key="answer").disabled
    assert not any("out of date" in e.label for e in again.expander)


def test_switching_knowledge_base_switches_the_conversation_and_never_mixes_turns(zoo, kb_engine):
    """The issue's scenario on the page: a turn remembered in one knowledge base is never a
    candidate in another; the conversation follows the switcher and lists that one's turns."""
    at = fresh()
    select(at, zoo.name)
    zoo_chat = at.session_state[S.CHAT]
    question = "How much hay does Quagga Bob eat?"
    at.text_area(key=S.PROMPT).set_value(question).run()
    at.button(key="run").click().run()
    assert not at.error, [e.value for e in at.error]
    turn = sp(at).extras.turn
    assert (turn.conversation, turn.turn, turn.remembered) == (zoo_chat, 1, True), turn
    assert at.selectbox(key=S.CHAT).options[0] == zoo_chat

    # to the default: the page goes on in one of the default's conversations, and says so
    select(at, "default")
    default_chat = at.session_state[S.CHAT]
    assert default_chat != zoo_chat
    assert zoo_chat not in at.selectbox(key=S.CHAT).options
    said = " ".join(i.value for i in at.info)
    assert f"Conversation '{zoo_chat}' stays with knowledge base '{zoo.name}'" in said, said
    # its latest conversation (or a new one): only its own turns go into the next prompt
    convs = kb_engine.conversations()
    assert convs.kb_of(default_chat) in (None, "default")
    carried = at.session_state[S.CONVERSATION]
    assert carried == (convs.recent(default_chat, kb_engine.cfg.limits.N4_RECENT_CONV_MAX_PAIRS)
                       if convs.exists(default_chat) else [])
    at.button(key="run").click().run()  # the same question, asked of the default
    assert not at.error, [e.value for e in at.error]
    for view in ("retrieval", "reranked", "a3", "a4"):
        assert not [r.chunk_id for r in sp(at).view(view) if r.chunk_id.startswith(
            f"conversation:{zoo_chat}#")], view
    assert sp(at).extras.retrieval.kb == "default"
    assert sp(at).extras.retrieval.conversation == default_chat
    assert "hay" not in (sp(at).answer.text if sp(at).answer else "")
    assert sp(at).extras.turn.conversation == default_chat
    at.session_state[S.CONVERSATION_SHOWN] = True
    open_box(at, S.CONVERSATION_OPEN)
    heads = [m.value for m in at.markdown if m.value.startswith("**Turn ")]
    assert heads and all("knowledge base default" in h for h in heads), heads

    # back to the zoo: its conversation comes back, with its turn
    select(at, zoo.name)
    assert at.session_state[S.CHAT] == zoo_chat
    assert [t.turn for t in at.session_state[S.CONVERSATION]] == [1]
    open_box(at, S.CONVERSATION_OPEN)
    heads = [m.value for m in at.markdown if m.value.startswith("**Turn ")]
    assert heads and all(f"knowledge base {zoo.name}" in h for h in heads), heads


def test_the_prompt_boxs_example_belongs_to_the_selected_knowledge_base(kb_engine, zoo):
    at = fresh()
    assert at.text_area(key=S.PROMPT).value == S.EXAMPLE_PROMPT  # the bundled one's
    select(at, zoo.name)
    example = at.text_area(key=S.PROMPT).value
    assert example.startswith("Task: Explain ") and ("Zebra care" in example or "Water" in example)
    assert "ReRanker" not in example
    select(at, "default")
    assert at.text_area(key=S.PROMPT).value == S.EXAMPLE_PROMPT
    # the person's own prompt is never replaced
    at.text_area(key=S.PROMPT).set_value("How much hay does Quagga Bob eat?").run()
    select(at, zoo.name)
    assert at.text_area(key=S.PROMPT).value == "How much hay does Quagga Bob eat?"
