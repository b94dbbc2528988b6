from ragstream.stages import prompt_builder
from ragstream.state.super_prompt import Chunk, ConversationTurn, SuperPrompt


def make_sp(texts, **kw):
    chunks = [Chunk(id=f"kb/a.md#{i}", doc_id="kb/a.md", source="kb/a.md", text=t,
                    heading_path=("Guide", f"Part {i}"), start_line=10 * i + 1, end_line=10 * i + 5)
              for i, t in enumerate(texts)]
    return SuperPrompt(stage="a5", body={"task": "Explain X.", "system": "teacher", "tone": "friendly",
                                         "format": "Markdown"},
                       base_context_chunks=chunks, final_selection_ids=[c.id for c in chunks],
                       S_CTX_MD="## Condensed context\n\n### Facts\n- X is Y. [1]\n",
                       extras={"format_enforcer": {"kind": "markdown", "kind_source": "default",
                                                   "hard_rules": ["Use at most 100 words."]}}, **kw)


def test_blocks_in_order_with_fenced_sources(cfg):
    sp = prompt_builder.run(make_sp(["First text.", "Code: ```py\nx=1\n```"]), cfg, None)
    text = sp.prompt_ready
    assert text.index("## System") < text.index("## Prompt") < text.index("## Condensed context") \
        < text.index("## Sources")
    assert "You are a teacher." in sp.System_MD and "- Use at most 100 words." in sp.System_MD
    assert "### Task\nExplain X." in sp.Prompt_MD
    assert sp.S_CTX_MD in text  # unedited
    assert "### [1] kb/a.md § Guide > Part 0" in sp.Attachments_MD
    expected = "SOURCE: kb/a.md\nSECTION: Guide > Part 1\nSPAN: lines 11-15 (chunk kb/a.md#1)"
    assert expected in sp.Attachments_MD
    # a chunk containing ``` is fenced with a longer fence, so it cannot break out
    assert "````text" in sp.Attachments_MD
    assert sp.stage == "a5"


def test_attachment_budget_truncates_at_sentences(cfg):
    long = " ".join(f"Sentence {i} is about the budget." for i in range(400))
    small = cfg.model_copy(update={"settings": cfg.settings.model_copy(update={
        "prompt": cfg.settings.prompt.model_copy(update={"attachments_max_tokens": 300})})})
    sp = prompt_builder.run(make_sp([long, "Second."]), small, None)
    assert "(truncated to fit the attachment budget)" in sp.Attachments_MD
    assert "_Omitted: the attachment budget (300 tokens) is used up._" in sp.Attachments_MD
    body = sp.Attachments_MD.split("---\n", 1)[1].split("\n```", 1)[0]
    assert body.endswith("budget.")  # whole sentences only


def test_recent_conversation_block_keeps_last_n4_pairs(cfg):
    turns = [ConversationTurn(user=f"q{i}", assistant=f"a{i}") for i in range(15)]
    sp = prompt_builder.run(make_sp(["T."], recent_conversation=turns), cfg, None)
    n4 = cfg.limits.N4_RECENT_CONV_MAX_PAIRS
    assert sp.prompt_ready.rstrip().endswith("**Assistant:** a14")
    assert "## Recent conversation" in sp.prompt_ready
    assert f"**User:** q{15 - n4}" in sp.prompt_ready and f"**User:** q{14 - n4}\n" not in sp.prompt_ready


def test_no_selection_says_so(cfg):
    sp = make_sp([])
    sp.S_CTX_MD = ""
    out = prompt_builder.run(sp, cfg, None)
    assert "_No sources were selected._" in out.Attachments_MD
    assert "A4_Condenser has not produced a context" in out.prompt_ready


def test_earlier_answers_lose_their_citation_markers_in_the_conversation_block(cfg):
    """An earlier answer's [n] point at its own Sources list, not at this prompt's sources."""
    turns = [ConversationTurn(user="How do I start a server?",
                              assistant="Run `chroma run` [1]. Set the URL [2, 3] and the port [4-5].\n"
                                        "See [the guide](docs/x.md) and list item [a].")]
    sp = prompt_builder.run(make_sp(["T."], recent_conversation=turns), cfg, None)
    block = sp.prompt_ready.split("## Recent conversation", 1)[1]
    assert "Run `chroma run`. Set the URL and the port." in block
    assert "[1]" not in block and "[2, 3]" not in block and "[4-5]" not in block
    assert "[the guide](docs/x.md)" in block and "[a]" in block  # links and other brackets stay
