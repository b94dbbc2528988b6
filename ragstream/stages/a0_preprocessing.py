"""A0_PreProcessing: turn the raw prompt into the canonical ``sp.body`` (known keys, values kept verbatim).

Deterministic and memoryless: the same prompt and schema always give the same body, extras
and ``prompt_ready``, byte for byte (with the optional semantic fallback: given the same
answer from the LLM). The vocabulary — canonical keys, aliases, words in other languages,
phrase templates, keyword cues, typo tolerance, MUST keys and their defaults — lives in
``config/prompt_schema.json`` (``ragstream.common.prompt_schema``). The algorithm, in
``ragstream/stages/a0/``:

1. **Parse** (``a0.parser``): the prompt's Markdown is read by ``ragstream.common.markdown``; its
   top-level headings (ATX and setext), bold labels (``**Audience:** x``) and plain labels
   (``Task: x``) outside code blocks are *header candidates*. A candidate's label climbs the
   ladder; a heading or bold candidate is always a header, a plain one only if it maps to a
   key. A header's value runs to the next header.
2. **Map** (``a0.ladder`` over ``a0.vocabulary``): normalise → exact → alias → typo →
   bilingual → template → keyword → unknown; the first rung that answers wins.
3. **Build the body** (``a0.body``): text before the first header is the task or more
   context; repeated keys are joined; an empty task takes the context's last question (or
   all of it); the other MUST keys get their defaults. Unknown headers become
   ``unknown_attributes``.
4. **Follow-up** (``a0.reading``): with earlier turns in ``sp.recent_conversation``, a task
   that only makes sense after them ("and how do I do that in .htaccess instead?") is read
   with the earlier questions into a standalone task ("How do I redirect all http traffic to
   https in .htaccess instead?"), body source ``derived``, recorded in ``extras.reading``;
   with an LLM endpoint (A0 in LLM mode) the model writes the reading and the rules' is the
   fallback. A self-contained task is left as it is. A task the person sets replaces it.
5. **Semantic fallback** (``a0.semantic``, off by default): with an LLM endpoint, the labels
   the ladder left unknown are sent to a tiny Chooser agent in one call, and its confident
   answers become the ladder's last rung. With no unknown label the LLM is not called; if the
   call fails or its reply stays invalid, A0 keeps the deterministic result and
   ``agent_modes`` says why (``fallback``).

Output
------
``sp.body``, ``sp.prompt_ready`` and, in ``sp.extras``: ``reading`` (a follow-up's),
``a0_decisions`` (one per candidate:
its rung, why, and whether it opened a section), ``normalized_map`` (header label → key or
null), ``unknown_attributes`` (``{"label", "value"}``), ``a0_rules`` (which rule fired and
why), ``body_sources`` (``user``, ``derived`` or ``default`` per body key),
``semantic_used``, ``agent_modes["A0_PreProcessing"]`` and ``a0_body`` (a snapshot of the
body that A2 restores on a re-run). A0 never sets ``stage`` or ``history_of_stages`` (the
controller does) and never touches the retrieval fields.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from ragstream.agents.base import resolve_mode
from ragstream.agents.factory import Agent, run_agent
from ragstream.backends.services import Services
from ragstream.common.config import AppConfig
from ragstream.common.errors import EmptyPromptError, PromptTooLongError
from ragstream.common.prompt_schema import TASK_KEY
from ragstream.stages import staleness
from ragstream.stages.a0.body import SOURCE_DERIVED, Canonical, canonicalize
from ragstream.stages.a0.reading import read
from ragstream.stages.a0.semantic import (
    SemanticOutput,
    ask_semantic,
    semantic_enabled,
    unknown_labels,
)
from ragstream.stages.a0.vocabulary import Vocabulary
from ragstream.stages.stage import Stage
from ragstream.state import edits
from ragstream.state.records import A0Rule, AgentModeRecord, Extras, ReadingRecord
from ragstream.state.render import compose_prompt_ready
from ragstream.state.super_prompt import SuperPrompt

AGENT_NAME = "A0_PreProcessing"


def checked_text(user_text: str, limit: int) -> str:
    """The prompt with line ends unified; raise if it is empty or too long."""
    if not user_text.strip():
        raise EmptyPromptError()
    if len(user_text) > limit:
        raise PromptTooLongError(len(user_text), limit)
    return user_text.replace("\r\n", "\n").replace("\r", "\n")


def resolve_canonical(sp: SuperPrompt, text: str, vocab: Vocabulary, cfg: AppConfig,
                      services: Services | None) -> tuple[Canonical, AgentModeRecord, bool]:
    """The body (with the semantic fallback when it applies), A0's ``agent_modes`` entry and
    whether the LLM's answer was used."""
    ladder = canonicalize(text, vocab, cfg.prompt_schema)
    if not semantic_enabled(cfg):
        reason = "prompt_schema.modes.semantic_enabled is false"
        return ladder, AgentModeRecord(mode="deterministic", reason=reason), False
    labels = unknown_labels(ladder, text, cfg)
    if not labels:
        reason = "no unknown headers: the deterministic ladder mapped every label"
        return ladder, AgentModeRecord(mode="deterministic", reason=reason), False
    used: list[bool] = []

    def llm_path(agent: Agent) -> Canonical:
        out = ask_semantic(agent, text, vocab, labels, cfg)
        used.append(True)
        return out

    result = run_agent(sp, AGENT_NAME, cfg, services, llm_path=llm_path,
                       deterministic_path=lambda: ladder, output=SemanticOutput)
    return result, sp.extras.agent_modes[AGENT_NAME], bool(used)


def write_extras(sp: SuperPrompt, result: Canonical, mode: AgentModeRecord,
                 semantic_used: bool = False) -> None:
    """Replace A0's records; the other agents' modes and LLM usage stay."""
    normalized_map: dict[str, str | None] = {}
    for decision in result.decisions:
        if decision.header:
            normalized_map.setdefault(decision.label, decision.key)
    ex = sp.extras
    ex.a0_decisions = result.decisions
    ex.normalized_map = normalized_map
    ex.unknown_attributes = result.unknown
    ex.a0_rules = result.rules
    ex.body_sources = result.sources
    ex.semantic_used = semantic_used
    ex.agent_modes[AGENT_NAME] = mode
    ex.a0_body = dict(result.body)
    ex.a0_sources = dict(result.sources)


def run(sp: SuperPrompt, cfg: AppConfig, services: Services | None) -> SuperPrompt:
    """Canonicalise ``sp.user_text`` into ``sp.body`` and build ``sp.prompt_ready``.

    Raises ``EmptyPromptError`` or ``PromptTooLongError`` before changing anything. Leaves
    ``stage``, ``history_of_stages`` and the retrieval fields alone.
    """
    text = checked_text(sp.user_text, cfg.settings.prompt.max_prompt_chars)
    vocab = Vocabulary.from_schema(cfg.prompt_schema)
    sp.extras.llm_usage.pop(AGENT_NAME, None)  # an earlier run's usage is not this run's
    sp.extras.llm_calls.pop(AGENT_NAME, None)
    result, mode, semantic_used = resolve_canonical(sp, text, vocab, cfg, services)
    reading = read_follow_up(sp, result, cfg, services)
    apply_field_edits(sp, result, cfg)
    if reading is not None and result.sources.get(TASK_KEY) == edits.BY_YOU:
        reading = reading.model_copy(update={"note": "your task replaced this reading"})

    sp.body = result.body
    write_extras(sp, result, mode, semantic_used)
    sp.extras.reading = reading
    sp.prompt_ready = compose_prompt_ready(result.body)
    return sp


def read_follow_up(sp: SuperPrompt, result: Canonical, cfg: AppConfig | None = None,
                   services: Services | None = None) -> ReadingRecord | None:
    """Read the task with the conversation's earlier questions: a follow-up becomes its
    standalone reading in the body (source ``derived``, the rule logged); a self-contained
    task, or one with no conversation before it, is left as it is. With an LLM endpoint the
    model writes the reading (``model_reading``) and the rules' (``a0.reading``) is the
    fallback; the record says who read it and, for the model, what the rule read."""
    task = result.body.get(TASK_KEY, "")
    earlier = [t.user for t in sp.recent_conversation if t.user.strip()]
    if not task.strip() or not earlier:
        return None
    found = read(task, earlier)
    if found is None:  # self-contained: left as it is, by the rule and the model alike
        return None
    llm = getattr(services, "llm", None) if services is not None else None
    record: ReadingRecord | None = None
    if llm is not None and cfg is not None and resolve_mode(
            cfg.agents.A0_PreProcessing, cfg, llm_available=True).mode == "llm":
        record = model_reading(llm, task, earlier, found, cfg)
    if record is None and found is not None:
        record = ReadingRecord(text=found.text, typed=task, after=found.after, rule=found.rule)
    if record is None:
        return None
    result.body[TASK_KEY] = record.text
    result.sources[TASK_KEY] = SOURCE_DERIVED
    who = "the model" if record.by == "model" else f"rule {record.rule}"
    result.rules.append(A0Rule(rule="follow_up", key=TASK_KEY, detail=(
        f"read with the conversation ({who}): {task!r} after {record.after!r} reads "
        f"{record.text!r}")))
    return record


class ReadingReply(BaseModel):
    """The model's reading of the last question: the question as it stands on its own."""

    standalone: str = Field(description="the last question rewritten to stand on its own")


READING_PROMPT = (
    "You rewrite the last question of a conversation so that it can be understood without the "
    "conversation: replace words like 'that', 'it', 'them' and elliptic phrases ('and on "
    "Windows?') by what they stand for in the earlier questions. Keep the person's words "
    "otherwise; add nothing the earlier questions do not say; do not answer. If the last "
    "question already stands on its own, return it unchanged. Reply with JSON only: "
    '{"standalone": "..."}')


def reading_doubt(text: str, task: str, earlier: list[str]) -> str:
    """Why a model's reading of ``task`` cannot stand ("" when it can): it answers instead of
    asking (no question mark where the person asked one), it is the earlier question again, or
    it leaves out a word the follow-up asked about (".htaccess" in "and how do I do that in
    .htaccess instead?")."""
    from ragstream.common.text import fold
    from ragstream.stages.a0.reading import content_words

    if task.rstrip().endswith("?") and not text.rstrip().endswith("?"):
        return "it answers instead of asking"
    if earlier and fold(text) == fold(earlier[-1]):
        return "it is the earlier question again"
    said = fold(text)
    lost = [w for w in content_words(task) if len(w) > 2 and fold(w) not in said]
    return f"it leaves out {', '.join(repr(w) for w in lost[:3])}" if lost else ""


def model_reading(llm, task: str, earlier: list[str], found, cfg: AppConfig) -> ReadingRecord | None:
    """The model's standalone reading of ``task`` after ``earlier`` (None when it leaves the
    question as it is and the rule sees no follow-up either); on an endpoint error or a reply
    that is no reading, the rule's reading (``found``) with a note saying why."""
    from ragstream.backends.llm import AgentOutputError, LLMError
    from ragstream.common.text import fold

    asked = "\n".join(f"{i}. {q}" for i, q in enumerate(earlier[-4:], start=1))
    messages = [{"role": "system", "content": READING_PROMPT},
                {"role": "user", "content": f"Earlier questions:\n{asked}\n\nLast question: {task}"}]
    after = found.after if found is not None else earlier[-1]
    try:
        reply = llm.chat_json(messages, ReadingReply, max_tokens=160,
                              timeout=cfg.settings.llm.timeout_s, agent=AGENT_NAME).value
        text = " ".join(reply.standalone.split())
    except (LLMError, AgentOutputError) as err:
        if found is None:
            return None
        return ReadingRecord(text=found.text, typed=task, after=found.after, rule=found.rule,
                             note=f"the model's reading failed, read by rule: {err}")
    if not text or len(text) > 4 * max(len(task), 60):
        if found is None:
            return None
        return ReadingRecord(text=found.text, typed=task, after=found.after, rule=found.rule,
                             note="the model's reading was empty or too long, read by rule")
    if fold(text) == fold(task):  # the model reads it as self-contained
        if found is None:
            return None
        return ReadingRecord(text=found.text, typed=task, after=found.after, rule=found.rule,
                             note="the model left the question as it is; read by rule")
    doubt = reading_doubt(text, task, earlier)
    if doubt and found is not None:  # the model's word weighed against what was asked
        return ReadingRecord(text=found.text, typed=task, after=found.after, rule=found.rule,
                             note=f"the model's reading was set aside ({doubt}): {text!r}; "
                                  f"read by rule")
    rule_said = f"; the rule read {found.text!r}" if found is not None else ""
    return ReadingRecord(text=text, typed=task, after=after, rule="model", by="model",
                         note=None if not rule_said else f"model {llm.model}{rule_said}")


def apply_field_edits(sp: SuperPrompt, result: Canonical, cfg: AppConfig) -> None:
    """Set the fields the person set (``edits`` of kind ``field`` for A0's fields) in the
    body, their source "you"; an empty value removes the field. The body keeps the canonical
    order."""
    mine = edits.field_edits(sp.edits, AGENT_NAME)
    if not mine:
        return
    body, sources = dict(result.body), dict(result.sources)
    for name, edit in mine.items():
        was = body.get(name, "")
        if edit.after:
            body[name] = edit.after
            sources[name] = edits.BY_YOU
        else:
            body.pop(name, None)
            sources.pop(name, None)
        said = f" (the prompt gave {was!r})" if was and was != edit.after else ""
        edits.note(sp, AGENT_NAME, edit, True, f"{name} set by you{said}")
    order = cfg.prompt_schema.canonical_keys
    result.body = {**{k: body[k] for k in order if k in body},
                   **{k: v for k, v in body.items() if k not in order}}
    result.sources = sources


def discard(sp: SuperPrompt) -> None:
    """Forget A0's work: the body, every extra (all later stages build on them), the prompt."""
    sp.body, sp.extras, sp.prompt_ready = {}, Extras(), ""


STAGE = Stage(name=AGENT_NAME, value="preprocessed", label="A0 Pre-processing", run=run, discard=discard,
              reads=(staleness.PROMPT, staleness.FOLLOW_UP, "prompt_schema",
                     "settings.prompt.max_prompt_chars", staleness.AGENT),
              uses_llm=semantic_enabled)  # a follow-up's model: staleness.FOLLOW_UP
