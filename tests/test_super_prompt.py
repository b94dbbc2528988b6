import json

import pydantic
import pytest

from ragstream.state.super_prompt import Chunk, SuperPrompt, ViewRow


def chunk(i: int, text: str = "Some text.") -> Chunk:
    return Chunk(id=f"kb/a.md#{i}", doc_id="kb/a.md", text=text, source="kb/a.md",
                 heading_path=("A", "B"), chunk_index=i)


def test_chunk_is_frozen():
    c = chunk(0)
    with pytest.raises(pydantic.ValidationError):
        c.text = "changed"


def test_superprompt_round_trips_through_json():
    sp = SuperPrompt(
        user_text="Task: explain",
        stage="a3",
        history_of_stages=["preprocessed", "a2", "retrieval", "reranked", "a3"],
        body={"task": "explain"},
        extras={"body_sources": {"task": "user"}, "semantic_used": False,
                "a3": {"kept": 0, "dropped": 1, "working_set": 1}},
        base_context_chunks=[chunk(0), chunk(1, "Other.")],
        views_by_stage={"a3": [ViewRow(chunk_id="kb/a.md#1", rank=1, score=0.5,
                                       scores={"rerank": 0.5}, status="dropped",
                                       reason="off-topic")]},
        final_selection_ids=["kb/a.md#0"],
        S_CTX_MD="ctx",
    )
    again = SuperPrompt.from_json(sp.to_json())
    assert again == sp
    assert again.base_context_chunks[0].heading_path == ("A", "B")


def test_duplicate_chunk_ids_are_rejected():
    with pytest.raises(pydantic.ValidationError, match="twice"):
        SuperPrompt(base_context_chunks=[chunk(0), chunk(0)])


def test_unknown_field_is_rejected():
    with pytest.raises(pydantic.ValidationError):
        SuperPrompt(stage="raw", bogus=1)
    with pytest.raises(pydantic.ValidationError):
        SuperPrompt(stage="done")


def test_extras_json_keeps_the_entry_names_and_leaves_out_unwritten_ones():
    sp = SuperPrompt(extras={"body_sources": {"task": "user"},
                             "agent_modes": {"A3_NLI_Gate": {"mode": "deterministic", "reason": "r"}},
                             "a3": {"kept": 2, "dropped": 1, "working_set": 3}})
    data = json.loads(sp.to_json())["extras"]
    # declaration order, no null for entries nobody wrote, no null for unset optional fields
    assert data == {"body_sources": {"task": "user"},
                    "agent_modes": {"A3_NLI_Gate": {"mode": "deterministic", "reason": "r"}},
                    "a3": {"kept": 2, "dropped": 1, "working_set": 3}}
    assert json.loads(SuperPrompt().to_json())["extras"] == {}
    # the typed record is what a reader gets
    assert sp.extras.a3 is not None and sp.extras.a3.kept == 2
    assert sp.extras.mode_of("A3_NLI_Gate") == "deterministic" and sp.extras.mode_of("A4") == ""
    assert SuperPrompt.from_json(sp.to_json()) == sp


def test_extras_reject_unknown_entries_and_wrong_shapes():
    with pytest.raises(pydantic.ValidationError, match="other"):
        SuperPrompt(extras={"other": 1})
    with pytest.raises(pydantic.ValidationError, match="kept"):
        SuperPrompt(extras={"a3": {"dropped": 1, "working_set": 1}})
