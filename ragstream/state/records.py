"""What the stages record beside the body and the views: ``SuperPrompt.extras``, typed.

One model per entry, each written by one stage and read by later stages, the page and the
exports. The JSON keeps the key names and shapes the entries had as plain dicts: an entry
nobody wrote is left out (not ``null``), and so are the optional fields a record leaves unset
(``Record.OPTIONAL``), so exports and the byte-identical rerun stay as they were.

Who writes what:

* A0: ``a0_decisions``, ``normalized_map``, ``unknown_attributes``, ``a0_rules``,
  ``body_sources``, ``semantic_used``, ``a0_body``; every agent: its entry of ``agent_modes``
  and, when it called the LLM, of ``llm_usage`` (the figures) and ``llm_calls`` (what it sent
  and got back, for the agent inspector).
* A2: ``a2_decisions`` and its own entries of ``body_sources``.
* Every stage: how it applied each of the person's edits, ``edit_outcomes[stage]``.

Beside the extras, the typed records the state carries as inputs: the person's edits
(``Edit``, applied by ``ragstream.state.edits``) and what each stage's result was computed from
(``StageInputs``, compared by ``ragstream.stages.staleness``).
* Retrieval: ``retrieval``; ReRanker: ``reranker``; A3: ``a3``; A4: ``a4`` (with the
  condensed statements); A5: ``format_enforcer``; the answer's QA-log row: ``qa_log``.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from ragstream.common.config import FormatKind, LengthBound, LengthUnit


class Record(BaseModel):
    """A typed extras entry; fields named in ``OPTIONAL`` are left out of the JSON while None,
    those in ``OMIT_EMPTY`` while empty."""

    model_config = ConfigDict(extra="forbid")

    #: fields that are absent from the JSON (rather than ``null``) while unset
    OPTIONAL: ClassVar[frozenset[str]] = frozenset()
    #: collections that are absent from the JSON while empty
    OMIT_EMPTY: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _leave_out_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        return {k: v for k, v in data.items()
                if not ((v is None and k in self.OPTIONAL) or (not v and k in self.OMIT_EMPTY))}


# --------------------------------------------------------------------------- every agent


class AgentModeRecord(Record):
    """Which mode an agent ran in and why; ``fallback`` when LLM mode failed and rules ran."""

    OPTIONAL = frozenset({"fallback"})

    mode: str
    reason: str
    fallback: bool | None = None


class AgentUsage(Record):
    """An agent's LLM calls: tokens, time, the structured-output form asked for, whether the
    first reply was valid JSON for the schema, whether one was repaired or cut off."""

    OPTIONAL = frozenset({"form", "finish_reason"})

    model: str
    calls: int
    prompt_tokens: int
    completion_tokens: int
    repaired: bool
    seconds: float = 0.0
    first_try_valid: bool = False
    form: str | None = None
    finish_reason: str | None = None
    prompt_budget: int = 0
    reply_budget: int = 0


class SentMessage(Record):
    """One chat message of an agent's request, as sent; a text longer than
    ``llm.inspect_chars`` keeps its start and end, and ``cut`` says how many characters of its
    middle were left out (a marker in the text says where)."""

    OPTIONAL = frozenset({"cut"})

    role: str
    content: str
    cut: int | None = None


class AgentCall(Record):
    """One model call of an agent, for the agent inspector: the messages of its last request
    (after a repair round they include the first reply and the repair request), the model's
    last reply as it came, the validated result, or the error. Its figures (tokens, seconds,
    first-try validity, finish reason) are the agent's ``llm_usage`` entry; the mode and the
    fallback reason its ``agent_modes`` entry."""

    OPTIONAL = frozenset({"raw_cut", "parsed", "error", "items", "probabilities"})

    messages: list[SentMessage]
    raw: str = Field("", description="the reply's text as the model sent it")
    raw_cut: int | None = Field(None, description="characters cut from the reply's middle")
    parsed: dict[str, Any] | None = Field(None, description="the reply validated, as JSON")
    error: str | None = Field(None, description="why the call gave no valid reply")
    items: list[str] | None = Field(None, description=(
        "what the call's numbers stand for, in order (A3: chunk ids; A4: sentence keys): "
        "numbers 1..n of the payload are items[0..n-1]"))
    probabilities: dict[str, float] | None = Field(None, description=(
        "the probabilities read from the reply's token log-probabilities (A3: 'yes' for "
        "the passage judged; A2/A5: each field's chosen value)"))


class Judgment(Record):
    """One decision of an agent that asked the model, the rule's and the model's side by side:
    what the rule decided, what the model said (with its probability where the endpoint gives
    one), what stood and who decided it. An agent in LLM mode writes one per item it decided
    (``sp.extras.judgments[agent]``); ``changed`` is what ``eval --mode llm`` counts."""

    OPTIONAL = frozenset({"model", "probability", "why"})

    item: str = Field(description="what was decided: a chunk id (A3, A4) or a field (A2, A5)")
    rule: str = Field(description="the rule's verdict: kept / dropped, or the value it chose")
    model: str | None = Field(None, description="the model's verdict, when it judged the item")
    probability: float | None = Field(None, description=(
        "the model's probability: A3, that the chunk helps answer the prompt; A2/A5, of the "
        "value it chose"))
    final: str = Field(description="what stood")
    decided_by: Literal["rule", "llm", "you"]
    why: str | None = Field(None, description="why that one stood (the threshold it met or missed)")

    @property
    def changed(self) -> bool:
        """Whether the model's word changed the rule's decision."""
        return self.decided_by == "llm" and self.final != self.rule


# --------------------------------------------------------------------------- A0


class A0Decision(Record):
    """How A0 read one header candidate of the prompt."""

    OPTIONAL = frozenset({"confidence"})

    label: str
    normalized: str
    key: str | None
    rung: str
    detail: str
    style: str
    header: bool = Field(description="whether it opened a section")
    line: int = Field(description="1-based line of the prompt")
    confidence: float | None = Field(None, description="only for the semantic rung")


class A0Rule(Record):
    """A rule of A0's body building that fired, for which key, and why."""

    rule: str
    key: str
    detail: str


class UnknownAttribute(Record):
    """A header that maps to no canonical key, and the text under it."""

    label: str
    value: str


# --------------------------------------------------------------------------- A2


A2Source = Literal["user", "rule", "default", "llm", "you"]


class A2Decision(Record):
    """How A2 filled one meta-field."""

    OPTIONAL = frozenset({"original"})

    field: str
    value: str
    source: A2Source
    matched: list[str] = Field(default_factory=list, description="keywords that chose the value")
    clamped: bool = False
    in_enum: bool = True
    original: str | None = Field(None, description="what the LLM answered, when it was clamped")


# --------------------------------------------------------------------------- Retrieval, ReRanker, A3


class RetrievalRecord(Record):
    """The query Retrieval searched with, its pieces and the candidate counts."""

    query: str
    pieces: list[str]
    candidates_considered: int
    returned: int
    tau: float
    rrf_k: int
    index_chunks: int
    kb: str = Field("default", description="the knowledge base searched")
    conversation: str = Field("", description=(
        "the named conversation the prompt continues, whose remembered turns were searched "
        "with it ('' for none)"))
    conversation_chunks: int = Field(0, description="how many of its turns were searched")


class RerankerRecord(Record):
    """The backend that scored, why it was chosen, the query and the number of candidates."""

    backend: str
    reason: str
    query: str
    candidates: int


class A3Clamp(Record):
    """An out-of-range value in the LLM's reply and what A3 used instead."""

    n: int
    field: str
    value: str
    clamped_to: str


class A3Record(Record):
    """The gate's counts; in LLM mode how the model judged (``judge``: probability or list),
    the thresholds its word was weighed with, how many decisions it changed, and what it
    could not judge (candidates it was not sent, numbers naming no candidate, clamped tags)."""

    OPTIONAL = frozenset({"clamped", "unjudged", "unknown_numbers", "judge", "judge_note", "sent",
                          "protect_top_k", "weak_relative", "llm_drop_max", "llm_rescue_min",
                          "changed"})

    kept: int
    dropped: int
    working_set: int
    judge: str | None = Field(None, description="LLM mode: 'probability' (yes/no with "
                                                "log-probabilities) or 'list'")
    judge_note: str | None = Field(None, description="why it judged by list where it could not "
                                                     "read probabilities")
    sent: int | None = Field(None, description="candidates the model was asked about")
    protect_top_k: int | None = None
    weak_relative: float | None = None
    llm_drop_max: float | None = None
    llm_rescue_min: float | None = None
    changed: int | None = Field(None, description="decisions the model's word changed")
    clamped: list[A3Clamp] | None = None
    unjudged: list[str] | None = Field(None, description="chunk ids sent whose judgment failed")
    unknown_numbers: list[int] | None = Field(None, description="numbers naming no candidate")


# --------------------------------------------------------------------------- A4


StatementKind = Literal["fact", "constraint"]


class Statement(Record):
    """One statement of the condensed context, the chunks it cites and where it comes from."""

    OPTIONAL = frozenset({"span", "score", "edited"})

    text: str
    kind: StatementKind
    chunk_ids: list[str] = Field(description="the chunks it cites, at least one")
    span: tuple[int, int] | None = Field(
        None, description="the characters of the first cited chunk's text it was taken from, "
                          "when known (always for extracted sentences)")
    score: float | None = Field(
        None, description="how well it answers the prompt: its cosine to the prompt plus its "
                          "chunk's rank prior (A4's order of relevance)")
    edited: bool | None = Field(None, description=(
        "True when a person rewrote its text: it is then the person's note, no longer a "
        "source's words — S_CTX_MD shows it under \"Your notes\" without a [n], the extractive "
        "answer never cites it, a remembered turn never holds it (chunk_ids and span stay, so "
        "the edit can find its statement again on the next run)"))

    @property
    def by_you(self) -> bool:
        """True for a statement whose words are the person's (``edited``), not a source's."""
        return bool(self.edited)


class A4Record(Record):
    """A4's budget, what it used, and the statements both S_CTX_MD and the answer are made of."""

    OPTIONAL = frozenset({"uncovered_terms", "invalid_citations", "uncited_dropped",
                          "trimmed_for_budget", "edited", "rule_share", "statements_by"})

    budget_tokens: int
    used_tokens: int
    statements: int = Field(description="how many statements the condensed context holds")
    condensed: list[Statement] = Field(default_factory=list)
    open_issues: list[str] = Field(default_factory=list,
                                   description="what the prompt asks that the sources do not answer")
    uncovered_terms: list[str] | None = Field(None, description="deterministic mode: prompt terms "
                                                                "no selected source mentions")
    invalid_citations: list[int] | None = Field(None, description="LLM mode: numbers naming no source")
    uncited_dropped: list[str] | None = Field(None, description="LLM mode: statements without a source")
    trimmed_for_budget: int | None = Field(None, description="LLM mode: statements cut to fit")
    rule_share: float | None = Field(None, description="LLM mode: the share of the budget the "
                                                       "deterministic selection kept")
    statements_by: dict[str, int] | None = Field(None, description=(
        "LLM mode: how many statements each decided: rule (within rule_share, or the top "
        "chunk's best sentence), llm (the model's choice beyond them), you (pinned chunks)"))
    edited: str | None = Field(None, description="what a person's edits changed in the "
                                                 "statements, e.g. '2 statements changed by hand: "
                                                 "1 rewritten, 1 moved'")


# --------------------------------------------------------------------------- A5


KindSource = Literal["format", "constraints", "task", "default", "llm"]


class LengthLimit(Record):
    """One length limit: ``bound`` (max/min/exact/about) ``value`` ``unit``."""

    unit: LengthUnit
    bound: LengthBound
    value: int = Field(ge=1)


class FormatClamp(Record):
    """A value of the LLM's format reply that A5 changed or dropped, and why."""

    field: str
    value: Any
    clamped_to: Any
    why: str


class FormatSpec(Record):
    """What A5 decides about the answer's format; Prompt_Builder renders its hard rules."""

    OPTIONAL = frozenset({"mode", "clamps", "edited"})

    kind: FormatKind
    kind_source: KindSource
    matched: list[str] = Field(default_factory=list, description="keywords that chose the kind")
    clamped: bool = False
    code_language: str = ""
    language: str = ""
    length: list[LengthLimit] = Field(default_factory=list)
    names: list[str] = Field(default_factory=list, description="table columns or JSON/YAML keys")
    hard_rules: list[str] = Field(default_factory=list)
    example_shape: str = ""
    normalized_format_spec: str = ""
    mode: str | None = Field(None, description="'llm' when the LLM's reply was used")
    clamps: list[FormatClamp] | None = Field(None, description="LLM mode: values changed or dropped")
    edited: str | None = Field(None, description="what a person's edits changed in hard_rules")


# --------------------------------------------------------------------------- the answer


class ReadingRecord(Record):
    """How A0 read a follow-up with its conversation (``stages.a0.reading``): the standalone
    question Retrieval and the answer use, what the person typed, and who read it."""

    OPTIONAL = frozenset({"probability", "note"})

    text: str = Field(description="the standalone reading: the task Retrieval and the answer use")
    typed: str = Field(description="the task as the person typed it")
    after: str = Field(description="the earlier question it was read with (its own reading)")
    rule: str = Field(description="the rule that read it (action, phrase, pronoun, context), "
                                  "or 'model'")
    by: Literal["rule", "model", "you"] = "rule"
    probability: float | None = Field(None, description="the model's, when it has one")
    note: str | None = Field(None, description="why the model's reading was not used, or "
                                               "that the person's task replaced it")


class TurnRecord(Record):
    """The answer's turn in its named conversation (``ragstream.workbench.conversations``), and the
    earlier turns of it the answer cites."""

    OPTIONAL = frozenset({"error", "uses"})
    OMIT_EMPTY = frozenset({"used_turns"})

    conversation: str
    turn: int = 0
    remembered: bool = False
    why: str = Field("", description="why the turn is not remembered, or not recorded")
    error: str | None = None
    used_turns: list[int] = Field(default_factory=list, description=(
        "the conversation's remembered turns the answer cites as sources"))
    uses: str | None = Field(None, description=(
        "the same in words: 'The answer uses remembered turn 3 of conversation 'x' (source "
        "[2]): what an earlier answer said, not a document.'"))


class QALogRecord(Record):
    """Where the answer was logged: the database and its row, or why it could not be."""

    OPTIONAL = frozenset({"id", "error"})

    path: str
    id: int | None = None
    error: str | None = None


# --------------------------------------------------------------------------- edits


EditKind = Literal["field", "pin", "exclude", "add", "drop",
                   "statement_text", "statement_remove", "statement_move", "statement_add",
                   "rule_text", "rule_remove", "rule_move", "rule_add"]
CHUNK_KINDS = ("pin", "exclude", "add")
#: chunk decisions the A3 gate applies (not Retrieval): ``drop`` — the gate drops the chunk.
#: They share a chunk's slot with ``CHUNK_KINDS`` (one decision per chunk).
GATE_KINDS = ("drop",)
STATEMENT_KINDS = ("statement_text", "statement_remove", "statement_move", "statement_add")
RULE_KINDS = ("rule_text", "rule_remove", "rule_move", "rule_add")
#: the body fields A2 decides (an edit of one acts on A2); every other field acts on A0
A2_FIELDS = ("system", "audience", "tone", "depth", "confidence")


def edit_stage(kind: EditKind, target: str = "") -> str:
    """The stage that applies an edit of ``kind`` first (a field: A2's at A2, the rest at A0;
    chunks at Retrieval, a drop at A3; statements at A4; rules at A5)."""
    if kind == "field":
        return "A2_PromptShaper" if target in A2_FIELDS else "A0_PreProcessing"
    if kind in GATE_KINDS:
        return "A3_NLI_Gate"
    if kind in CHUNK_KINDS:
        return "Retrieval"
    return "A4_Condenser" if kind in STATEMENT_KINDS else "A5_Format_Enforcer"


def short_text(text: str, limit: int = 60) -> str:
    """``text`` on one line, cut to ``limit`` characters with an ellipsis."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit - 1] + "…"


class Edit(BaseModel):
    """One decision a person made for this prompt (``ragstream.state.edits``): what (``kind`` and
    ``target``), which stage applies it, the value the stage had decided before and the
    person's value, and when."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: int = Field(ge=1, description="its number, in the order edits were made")
    kind: EditKind
    stage: str = Field(description="the stage that applies it first")
    target: str = Field(description="a body field, a chunk id, a statement key or a rule's text")
    before: str | None = Field(None, description="what the stage had decided when it was made")
    after: str | None = Field(None, description="the person's value (text, or place for a move)")
    at: str = Field("", description="when it was made (UTC, ISO 8601)")
    carried_from: str | None = Field(None, description=(
        "the prompt it was made for, when the person chose to apply it to another prompt "
        "(``edits.carried``); None for an edit made for this prompt"))

    @model_validator(mode="after")
    def _acts_where_its_kind_does(self) -> Edit:
        if self.stage != edit_stage(self.kind, self.target):
            raise ValueError(f"a {self.kind} edit of {self.target!r} acts on "
                             f"{edit_stage(self.kind, self.target)}, not {self.stage}")
        return self

    @property
    def slot(self) -> tuple[str, str]:
        """What a later edit of the same slot replaces: one decision per chunk, per field, per
        statement (text, place) and per rule (a pin and a drop of one chunk share its slot)."""
        if self.kind in CHUNK_KINDS or self.kind in GATE_KINDS:
            return "chunk", self.target
        if self.kind in ("rule_add", "statement_add"):
            return self.kind, self.after or ""
        return self.kind, self.target

    def describe(self) -> str:
        """The edit in words: ``pin kb/faq.md#3``, ``tone = formal (was neutral)`` …"""
        was = f" (was {self.before})" if self.before not in (None, "") else ""
        if self.kind == "field":
            return f"{self.target} = {self.after!r}{was}"
        if self.kind in CHUNK_KINDS or self.kind in GATE_KINDS:
            return f"{self.kind} {self.target}{was}"
        what = "statement" if self.kind in STATEMENT_KINDS else "rule"
        action = self.kind.split("_", 1)[1]
        if action == "text":
            old, new = short_text(self.before or self.target), short_text(self.after or "")
            return f"{what} rewritten: {old!r} → {new!r}"
        if action == "move":
            return f"{what} moved to place {self.after}{was}: {short_text(self.target)!r}"
        if action == "add":
            what = "note" if what == "statement" else what
            return f"{what} added: {short_text(self.after or '')!r}"
        return f"{what} removed: {short_text(self.before or self.target)!r}"


class StageInputs(BaseModel):
    """What one stage's result was computed from (``ragstream.stages.staleness``): hashes, except the
    filters, in words."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    prompt: str | None = Field(None, description="a hash of the prompt text (A0)")
    settings: dict[str, str] = Field(default_factory=dict,
                                     description="each configuration path it reads: a hash")
    filters: str | None = Field(None, description="the filters, in words (Retrieval)")
    kb: str | None = Field(None, description="the knowledge base's fingerprint (Retrieval)")
    conversation: str | None = Field(None, description="a hash of the recent conversation")
    edits: str = Field("", description="a hash of the person's edits this stage applies")


class EditOutcome(Record):
    """How a stage applied one of the person's edits (``SuperPrompt.edits``), or why not."""

    edit: int = Field(description="the edit's id")
    applied: bool
    note: str


# --------------------------------------------------------------------------- all of them


class Extras(Record):
    """Every stage's record. An entry no stage has written is None and absent from the JSON."""

    OPTIONAL = frozenset({
        "a0_decisions", "normalized_map", "unknown_attributes", "a0_rules", "body_sources",
        "semantic_used", "a0_body", "a0_sources", "a2_decisions", "retrieval", "reranker", "a3", "a4",
        "format_enforcer", "qa_log", "turn", "reading",
    })
    OMIT_EMPTY = frozenset({"agent_modes", "llm_usage", "llm_calls", "edit_outcomes", "judgments"})

    a0_decisions: list[A0Decision] | None = None
    normalized_map: dict[str, str | None] | None = Field(
        None, description="each header label and the key it mapped to (None: unknown)")
    unknown_attributes: list[UnknownAttribute] | None = None
    a0_rules: list[A0Rule] | None = None
    body_sources: dict[str, str] | None = Field(
        None, description="where each body field came from: user, derived, default or a2")
    semantic_used: bool | None = None
    agent_modes: dict[str, AgentModeRecord] = Field(default_factory=dict)
    a0_body: dict[str, str] | None = Field(None, description="the body as A0 left it, for A2 reruns")
    a0_sources: dict[str, str] | None = Field(None, description="body_sources as A0 left them")
    llm_usage: dict[str, AgentUsage] = Field(default_factory=dict)
    llm_calls: dict[str, list[AgentCall]] = Field(
        default_factory=dict, description="each agent's model calls: messages, reply, result")
    judgments: dict[str, list[Judgment]] = Field(default_factory=dict, description=(
        "per agent that asked the model: each decision, the rule's and the model's side by side"))
    a2_decisions: list[A2Decision] | None = None
    retrieval: RetrievalRecord | None = None
    reranker: RerankerRecord | None = None
    a3: A3Record | None = None
    a4: A4Record | None = None
    format_enforcer: FormatSpec | None = None
    qa_log: QALogRecord | None = None
    reading: ReadingRecord | None = Field(None, description=(
        "A0's standalone reading of a follow-up (read with the conversation); None when the "
        "prompt stands on its own"))
    turn: TurnRecord | None = Field(None, description=(
        "the answer's turn in the named conversation the prompt continues"))
    edit_outcomes: dict[str, list[EditOutcome]] = Field(
        default_factory=dict, description="per stage, how it applied each of the person's edits")

    def mode_of(self, agent: str) -> str:
        """The mode the agent ran in ("llm" / "deterministic"), or "" before it ran."""
        entry = self.agent_modes.get(agent)
        return entry.mode if entry else ""
