"""The state that flows through the eight stages: ``SuperPrompt``, ``Chunk`` and view rows.

Invariants (every stage keeps them):

* ``base_context_chunks`` holds each retrieved ``Chunk`` once, by id; no stage makes a
  second corpus.
* ``views_by_stage[stage]`` is the ordered list of rows a stage wrote: chunk id, rank, the
  stage's score(s), kept/dropped and, for a drop, the reason. Scores never live in a chunk.
* ``final_selection_ids`` is the current selection (set by A3, narrowed by A4).
* ``Chunk`` is frozen: no stage can change its text or metadata.
* ``edits`` are the person's decisions for this prompt (``ragstream.state.edits``): inputs, like the
  prompt text, that each stage applies every time it runs; ``computed_from`` records what
  each stage's result was computed from (``ragstream.stages.staleness``).
"""

from __future__ import annotations

import datetime as dt
import fnmatch
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from ragstream.state.records import Edit, Extras, StageInputs

StageValue = Literal["raw", "preprocessed", "a2", "retrieval", "reranked", "a3", "a4", "a5"]
RowStatus = Literal["kept", "dropped"]
#: who decided a row's place and status: the stage's rule, a model, or the person (an edit)
DecidedBy = Literal["rule", "llm", "you"]


class View(StrEnum):
    """The keys of ``views_by_stage``: one per stage that ranks chunks."""

    RETRIEVAL = "retrieval"
    RERANKED = "reranked"
    A3 = "a3"
    A4 = "a4"


#: how the id of a conversation's remembered turn starts (``ragstream.workbench.conversations``)
CONVERSATION_ID_PREFIX = "conversation:"

#: the value ``history_of_stages`` records for Prompt_Builder (it does not change ``stage``)
PROMPT_BUILT = "prompt_built"


class Chunk(BaseModel):
    """One retrievable piece of a document. Immutable once made."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    doc_id: str
    text: str
    source: str = Field(description="file path relative to the ingested folder")
    source_name: str = Field("", description="the source the document names in its front matter "
                                             "(e.g. 'Core Rules v3.1'); empty when it names none")
    title: str = ""
    heading_path: tuple[str, ...] = ()
    section: str = ""
    doc_type: str = "doc"
    last_update_date: str = ""
    chunk_index: int = 0
    start_line: int = 0
    end_line: int = 0
    word_count: int = 0
    token_count: int = 0
    has_code: bool = False
    has_equations: bool = False
    content_hash: str = ""
    page: int = Field(0, description="the page the chunk starts on in a paged document (PDF); 0: no pages")
    page_end: int = Field(0, description="the page it ends on (= page unless it runs over a page break)")

    @property
    def page_label(self) -> str:
        """``p. 12`` (``pp. 12–13`` for a chunk that runs over a page break); "" without pages."""
        if not self.page:
            return ""
        return f"pp. {self.page}–{self.page_end}" if self.page_end > self.page else f"p. {self.page}"

    @property
    def from_conversation(self) -> bool:
        """True for a remembered turn of a named conversation (``ragstream.workbench.conversations``:
        its id starts with ``conversation:``; no file path does), not a document's chunk."""
        return self.id.startswith(CONVERSATION_ID_PREFIX)

    @property
    def heading_label(self) -> str:
        """The heading path as one line, ``Heading > Sub`` ("" for a chunk before any heading)."""
        return " > ".join(self.heading_path)

    @property
    def citation_label(self) -> str:
        """``file.md § Heading > Sub`` (``manual.pdf p. 12 § Installing`` in a paged document) —
        how the chunk is named in prompts and tables."""
        path = self.heading_label
        where = f"{self.source} {self.page_label}" if self.page else self.source
        return f"{where} § {path}" if path else where


class Filters(BaseModel):
    """Which chunks a search may return, by their document's metadata; empty = all.

    ``doc_type``: any of these types. ``source``: any of these, each matched against the
    chunk's file path (``*`` and ``?`` as in shell patterns, e.g. ``faq/*``) and its
    declared source name. ``updated_from`` / ``updated_to``: the document's
    ``last_update_date`` within these dates (inclusive); a document without a date is left out
    when either is set. All given conditions must hold.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    doc_type: tuple[str, ...] = ()
    source: tuple[str, ...] = ()
    updated_from: dt.date | None = None
    updated_to: dt.date | None = None

    @model_validator(mode="after")
    def _dates_in_order(self) -> Filters:
        if self.updated_from and self.updated_to and self.updated_from > self.updated_to:
            raise ValueError(f"updated_from {self.updated_from} is after updated_to {self.updated_to}")
        return self

    @property
    def empty(self) -> bool:
        """True when no condition is set (every chunk passes)."""
        return not (self.doc_type or self.source or self.updated_from or self.updated_to)

    def matches(self, chunk: Chunk) -> bool:
        """Whether ``chunk`` passes every condition that is set."""
        if self.doc_type and chunk.doc_type not in self.doc_type:
            return False
        if self.source and not any(fnmatch.fnmatchcase(chunk.source, s) or s == chunk.source_name
                                   for s in self.source):
            return False
        if self.updated_from or self.updated_to:
            try:
                day = dt.date.fromisoformat(chunk.last_update_date[:10])
            except ValueError:
                return False
            if (self.updated_from and day < self.updated_from) or (self.updated_to and day > self.updated_to):
                return False
        return True

    def describe(self) -> str:
        """The conditions as one line, ``doc_type=faq, updated_from=2025-01-01``."""
        parts = [f"doc_type={'|'.join(self.doc_type)}"] if self.doc_type else []
        parts += [f"source={'|'.join(self.source)}"] if self.source else []
        parts += [f"updated_from={self.updated_from}"] if self.updated_from else []
        parts += [f"updated_to={self.updated_to}"] if self.updated_to else []
        return ", ".join(parts) or "none"


class ViewRow(BaseModel):
    """One chunk as one stage saw it. Frozen: a stage writes new rows, never edits old ones."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    chunk_id: str
    rank: int
    score: float = Field(description="the stage's main score; the one its order follows")
    scores: dict[str, float] = Field(default_factory=dict)
    status: RowStatus = "kept"
    reason: str = ""
    decided_by: DecidedBy = "rule"
    rule_status: RowStatus | None = Field(None, description=(
        "what the rules alone decided, where a model or a person could decide otherwise "
        "(A3, A4 in LLM mode)"))


class ConversationTurn(BaseModel):
    """One past exchange: the user's prompt and the assistant's answer."""

    model_config = ConfigDict(extra="forbid")

    user: str
    assistant: str
    turn: int = Field(0, description="its number in a named conversation (0: not kept in one)")


class StageRun(BaseModel):
    """One completed stage run, for the stage history and its wall time."""

    model_config = ConfigDict(extra="forbid")

    stage: str
    wall_ms: float
    mode: str = ""


class Citation(BaseModel):
    """One ``[n]`` the answer uses. ``valid`` is False when n names no selected source; such a
    number is never shown as a source (``Answer.sources`` holds the valid ones only)."""

    model_config = ConfigDict(extra="forbid")

    n: int
    valid: bool = True
    chunk_id: str = ""
    source: str = ""
    section: str = Field("", description="the chunk's heading path, 'A > B'")
    title: str = ""
    label: str = Field("", description="the chunk's citation label, 'file.md § A > B' "
                                       "('manual.pdf p. 20 § A > B' in a paged document)")
    page: str = Field("", description="where in a paged document (PDF): 'p. 20', or 'pp. 20–21' "
                                      "for a chunk that runs over a page break; '' otherwise")

    @property
    def where(self) -> str:
        """The source with its page: ``manual.pdf p. 20`` (``faq.md`` without pages)."""
        return f"{self.source} {self.page}" if self.page else self.source


class AnswerUsage(BaseModel):
    """Prompt and completion tokens the answer's LLM calls used."""

    model_config = ConfigDict(extra="forbid")

    prompt_tokens: int = 0
    completion_tokens: int = 0


AnswerMode = Literal["llm", "extractive", "no-results"]
ConfidenceLevel = Literal["High", "Medium", "Low"]


class PassageRef(BaseModel):
    """Where the passage an answer leads with stands: its chunk, its number in the Sources
    block and its characters in the chunk's text."""

    model_config = ConfigDict(extra="forbid")

    chunk_id: str
    n: int
    start: int
    end: int


class Answer(BaseModel):
    """The final answer of auto mode (``ragstream.answering.answer``), with its grounding."""

    model_config = ConfigDict(extra="forbid")

    text: str = ""
    mode: AnswerMode = "extractive"
    mode_reason: str = Field("", description="why this mode ran (no endpoint, LLM failed, ...)")
    citations: list[Citation] = Field(default_factory=list,
                                      description="every cited number, by n; invalid ones too")
    invalid_citations: list[int] = Field(default_factory=list)
    confidence: ConfidenceLevel = "Low"
    confidence_reason: str = Field("", description=(
        "why, in a reader's words: 'Medium: the best passage answers only part of the question "
        "(it does not mention certbot)'"))
    confidence_detail: str = Field("", description=(
        "the figures behind it: the evidence weighed (similarities, rerank scores, the share of "
        "the question's terms, P(answerable), P(leads)) and the settings they were held to"))
    passage: PassageRef | None = Field(None, description=(
        "the passage the extractive answer leads with (ragstream.answering.passage); None otherwise"))
    model: str = ""
    usage: AnswerUsage = Field(default_factory=AnswerUsage)
    latency_ms: float = 0.0
    first_token_ms: float | None = None
    error: str = Field("", description="the LLM error an extractive fallback replaced")
    unsupported: str = Field("", description=(
        "why an LLM answer kept as the answer counts as unsupported (it cites no valid "
        "source; only with answer.check_citations off, which otherwise sets it aside); empty "
        "otherwise"))
    extractive_text: str = Field("", description=(
        "the extractive answer offered beside an unsupported LLM answer"))
    set_aside: str = Field("", description=(
        "the LLM's answer when it failed the citation checks (answer.check_citations) and the "
        "extractive answer replaced it as ``text``; empty otherwise"))
    set_aside_reason: str = Field("", description=(
        "why it was set aside: the checks it failed, each with its setting and value"))
    checks: str = Field("", description=(
        "the citation checks an LLM answer passed, with their settings; empty when none ran"))
    form: str = Field("", description=(
        "how the LLM wrote it (answer.form): 'text' or 'sentences' — the set-aside answer's "
        "too; empty when the LLM gave none"))
    raw: str = Field("", description="the sentence form's JSON reply, as the model sent it")

    @property
    def sources(self) -> list[Citation]:
        """The valid citations: what a reader may be shown as sources."""
        return [c for c in self.citations if c.valid]


class SuperPrompt(BaseModel):
    """The state one prompt carries through the stages: body, chunks, views, Markdown blocks, answer."""

    model_config = ConfigDict(extra="forbid", validate_assignment=False)

    user_text: str = ""
    stage: StageValue = "raw"
    history_of_stages: list[str] = Field(default_factory=list)
    body: dict[str, str] = Field(default_factory=dict)
    extras: Extras = Field(default_factory=Extras)
    base_context_chunks: list[Chunk] = Field(default_factory=list)
    views_by_stage: dict[str, list[ViewRow]] = Field(default_factory=dict)
    final_selection_ids: list[str] = Field(default_factory=list)
    recent_conversation: list[ConversationTurn] = Field(default_factory=list)
    conversation_name: str = Field("", description=(
        "the named conversation this prompt continues (ragstream.workbench.conversations): Retrieval "
        "searches its remembered turns with the knowledge base, and the answer becomes its next "
        "turn; empty: none"))
    own_turn: int = Field(0, description=(
        "the turn this prompt's first answer became in that conversation (0: not answered in "
        "one yet); Retrieval searches the turns before it, so the pass never finds its own answer "
        "and stays current after it"))
    filters: Filters = Field(default_factory=Filters, description="what Retrieval may return")
    System_MD: str = ""
    Prompt_MD: str = ""
    S_CTX_MD: str = ""
    Attachments_MD: str = ""
    prompt_ready: str = ""
    stage_runs: list[StageRun] = Field(default_factory=list)
    answer: Answer | None = Field(None, description="the final answer (auto mode), once given")
    #: the traced pass that made this state (``telemetry.link``), so that its answer joins
    #: that trace; never saved (a state read back from a run starts a trace of its own)
    _trace_link: tuple[int, int, int] | None = PrivateAttr(default=None)
    #: how the LLM endpoint failed in the pass its last stage ran in, as (problem, message)
    #: (``llm.one_pass``): its answer does not ask again; never saved
    _llm_down: tuple[str, str] | None = PrivateAttr(default=None)
    edits: list[Edit] = Field(default_factory=list, description=(
        "the person's decisions for this prompt, which the stages apply every run"))
    computed_from: dict[str, StageInputs] = Field(default_factory=dict, description=(
        "per stage of the current pass: the inputs its result was computed from"))
    resume_to: str | None = Field(None, description=(
        "the stage the pass had reached before an edit discarded its later results: where "
        "re-running takes it back to"))

    @model_validator(mode="after")
    def _unique_chunks(self) -> SuperPrompt:
        seen: set[str] = set()
        for chunk in self.base_context_chunks:
            if chunk.id in seen:
                raise ValueError(f"base_context_chunks holds chunk {chunk.id!r} twice")
            seen.add(chunk.id)
        ids = [e.id for e in self.edits]
        if len(ids) != len(set(ids)):
            raise ValueError(f"edits has an id twice: {sorted(i for i in ids if ids.count(i) > 1)}")
        return self

    # -- lookups ---------------------------------------------------------------------------

    def working_copy(self) -> SuperPrompt:
        """A deep copy for a stage to change freely, sharing only the frozen parts (chunks, view
        rows, edits, recorded inputs): copying them was most of the cost of a stage run."""
        import copy

        memo: dict[int, Any] = {id(c): c for c in self.base_context_chunks}
        for rows in self.views_by_stage.values():
            memo.update((id(r), r) for r in rows)
        memo.update((id(e), e) for e in self.edits)  # frozen too, like what they were computed from
        memo.update((id(i), i) for i in self.computed_from.values())
        return copy.deepcopy(self, memo)

    @property
    def question(self) -> str:
        """What the answer answers: A0's standalone reading of a follow-up (``extras.reading``)
        — or the task the person set in its place —, else the prompt as typed."""
        reading = self.extras.reading
        if reading is None:
            return self.user_text
        return self.body.get("task") or reading.text

    def chunk_map(self) -> dict[str, Chunk]:
        """The base context chunks by id."""
        return {c.id: c for c in self.base_context_chunks}

    def view(self, stage: str) -> list[ViewRow]:
        """The view rows ``stage`` recorded, or an empty list."""
        return self.views_by_stage.get(stage, [])

    def kept_ids(self, stage: str) -> list[str]:
        """Chunk ids of the rows ``stage`` kept, in view order."""
        return [r.chunk_id for r in self.view(stage) if r.status == "kept"]

    # -- JSON --------------------------------------------------------------------------------

    def to_json(self, indent: int | None = 2) -> str:
        """The whole state as JSON text."""
        return self.model_dump_json(indent=indent)

    @classmethod
    def from_json(cls, text: str) -> SuperPrompt:
        """Rebuild a state from its JSON text, validating it."""
        return cls.model_validate_json(text)
