import pydantic
import pytest

from ragstream.super_prompt import Chunk, SuperPrompt, ViewRow


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
        extras={"nested": {"x": [1, 2]}},
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
