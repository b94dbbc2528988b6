"""Pure functions from a SuperPrompt to what the page shows for editing it: the body fields
with who set each and how, the list of edits with what became of each, the chunk tables'
pin / exclude columns, and A4's statements and A5's rules as lists to edit.

Which state a view is drawn from: ``shown`` is the state the person sees; after an edit
discarded stages' results, those stages are drawn from the state before the edit, marked out
of date, so that the person can go on editing there until they re-run."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ragstream.common.config import AppConfig
from ragstream.interfaces.ui.views import plain_names, stage_label, stale_line
from ragstream.stages import controller
from ragstream.stages.staleness import Stale
from ragstream.state import edits
from ragstream.state.records import CHUNK_KINDS, GATE_KINDS, Edit, Judgment, short_text
from ragstream.state.super_prompt import SuperPrompt, View

#: the fields table's columns, in order, and the fixed widths of some (the others share what is
#: left of the chunk tables' width, each cell whole or cut with "…": the choices are listed
#: whole under the table, a value or a why cut short too, ``field_notes``)
FIELD_COLUMNS = ["field", "value", "source", "match", "why", "choices"]
FIELD_WIDTHS = {"field": 88, "value": 176, "source": 86, "match": 72, "choices": 180}
#: the most lines the choices take in their cells (they are listed whole under the table)
FIELD_CAPS = {"choices": 2}
#: the match a header's rung reads as in the fields table
RUNGS = {"exact": "exact", "alias": "alias", "typo": "typo", "bilingual": "bilingual",
         "template": "template", "keyword": "keyword", "semantic": "LLM"}
#: the name of A0's rule that reads a follow-up with the conversation (``stages.a0_preprocessing``)
FOLLOW_UP_RULE = "follow_up"
#: the checkbox columns of the chunk tables
PIN, EXCLUDE = "pin", "exclude"


def field_rows(sp: SuperPrompt, cfg: AppConfig) -> list[dict[str, Any]]:
    """A row per body field a person may set: its value, who set it (header, prompt text,
    derived, default, rule, LLM, you), the match (the ladder's rung for a header), why, and
    the values it may take ("free text" for the open fields)."""
    choices = edits.field_choices(cfg)
    rows = []
    for name in edits.field_names(cfg):
        source, match, why = field_source(sp, name)
        rows.append({"field": name, "value": sp.body.get(name, ""), "source": source,
                     "match": match, "why": why,
                     "choices": " · ".join(choices[name]) if name in choices else "free text"})
    return rows


def field_columns() -> dict[str, Any]:
    """Column configs for the fields table: the fixed widths, and what each column says."""
    out: dict[str, Any] = {name: {} for name in FIELD_COLUMNS}
    for name, width in FIELD_WIDTHS.items():
        out[name]["width"] = width
    out["value"]["help"] = ("The field's value: type a new one to set it for this prompt (a "
                            "field with choices takes one of them). A value cut short (…) is "
                            "set whole by typing it whole.")
    out["source"]["help"] = "Who set it: header, prompt text, derived, default, rule, LLM or you"
    out["match"]["help"] = "How a header was matched: exact, alias, typo, bilingual, template, keyword"
    out["why"]["help"] = "Why the field has its value"
    out["choices"]["help"] = "The values a field with choices takes (all of them under the table)"
    return out


def field_notes(rows: list[dict[str, Any]], shown: list[dict[str, Any]]) -> list[str]:
    """For each field whose value or why the fields table cut short (``shown``: the rows as
    drawn), a Markdown line with them whole: ``**system** — assistant: A2: no keyword
    matched…``."""
    out = []
    for row, drawn in zip(rows, shown):
        if any(drawn.get(k) != " ".join(str(row.get(k, "")).split()) for k in ("value", "why")):
            out.append(f"**{row['field']}** — {row['value'] or '(empty)'}: {row['why']}")
    return out


def field_changes_shown(rows: list[dict[str, Any]], shown: list[dict[str, Any]],
                        edited: dict[int, dict[str, Any]]) -> dict[str, str]:
    """The values the person typed in the fields table (``field_changes``), less a value left
    as the table showed it cut short (``shown``: the rows as drawn): the field keeps its whole
    value."""
    typed = field_changes(rows, edited)
    by_field = {r["field"]: r for r in shown}
    return {name: value for name, value in typed.items()
            if not (value.endswith("…") and value == by_field.get(name, {}).get("value"))}


def choices_line(cfg: AppConfig) -> str:
    """Every closed field's values, whole: ``Choices — system: assistant, …; tone: …``."""
    return "Choices — " + "; ".join(f"**{name}**: {', '.join(values)}"
                                    for name, values in edits.field_choices(cfg).items()) + "."


def field_source(sp: SuperPrompt, name: str) -> tuple[str, str, str]:
    """(source, match, why) of body field ``name``: "you" for an edit, "header" with the
    ladder's rung for a header of the prompt, "prompt text" for text without a header,
    "derived" / "default" for A0's rules, "rule" / "default" / "LLM" for A2's choice (in LLM
    mode with what the model said beside it: its value, probability and margin against
    ``choice_margin``)."""
    ex = sp.extras
    source = (ex.body_sources or {}).get(name)
    if source == edits.BY_YOU:
        edit = next((e for e in reversed(sp.edits) if e.kind == "field" and e.target == name), None)
        was = f" (was {edit.before!r})" if edit and edit.before else ""
        return "you", "—", f"set by you{was}"
    decision = next((d for d in ex.a2_decisions or [] if d.field == name), None)
    judged = next((j for j in ex.judgments.get("A2_PromptShaper", []) if j.item == name), None)
    weighed = f"; {judgment_note(judged)}" if judged is not None else ""
    if decision is not None and decision.source == "llm":
        return "LLM", "—", (f"A2's model chose it over the rule's {judged.rule!r}: {judged.why}"
                            if judged is not None and judged.why else "A2's model chose it")
    if name == "confidence" and source == "a2":
        return "rule", "—", "A2: how many fields the prompt or a rule decided" + weighed
    if decision is not None and decision.source in ("rule", "default"):
        if decision.source == "rule":
            return "rule", "keywords", ("A2 matched " + ", ".join(repr(m) for m in decision.matched)
                                        + weighed)
        return "default", "—", "A2: no keyword matched, the field's default" + weighed
    header = next((d for d in ex.a0_decisions or [] if d.key == name and d.header), None)
    if header is not None and source == "user":
        return ("header", RUNGS.get(header.rung, header.rung),
                f"'{header.label}:' on line {header.line}: {header.detail}")
    rules = [r for r in ex.a0_rules or [] if r.key == name]
    # a follow-up's task is A0's reading of it with the conversation: that rule says why
    rule = next((r for r in rules if r.rule == FOLLOW_UP_RULE), rules[0] if rules else None)
    if source in ("derived", "default") and rule is not None:
        return source, "—", rule.detail
    if source == "user":
        return "prompt text", "—", "the prompt's text without a header"
    if name in sp.body:
        return source or "—", "—", ""
    return "—", "—", "not set" if sp.stage != "raw" else "A0 has not run"


def judgment_note(judgment: Judgment) -> str:
    """What the model said beside a rule's choice that stood, with the threshold, e.g.
    "model: analyst — P 0.54, researcher 0.46, margin 0.08 < choice_margin 0.2: the rule's
    choice stands"; the reason alone where the model agreed or decided."""
    why = judgment.why or ""
    if (judgment.decided_by == "rule" and judgment.model not in (None, judgment.rule)
            and not why.startswith("the model's")):  # that reason names the answer itself
        return f"model: {judgment.model} — {why}"
    return why


def format_choices(sp: SuperPrompt) -> str | None:
    """A5's weighed choices (kind, answer language, code language), one line for under its
    rules: each value, who decided and why, with the threshold; None unless A5 weighed the
    model's choices (LLM mode)."""
    judged = sp.extras.judgments.get("A5_Format_Enforcer")
    if not judged:
        return None
    who = {"rule": "the rules", "llm": "the model", "you": "you"}
    parts = [f"{j.item} **{j.final or 'none'}** — {who[j.decided_by]}"
             + (f" over the rules' {j.rule or 'none'}" if j.decided_by == "llm" else "")
             + f" ({judgment_note(j)})" for j in judged]
    return "A5's choices: " + "; ".join(parts) + "."


def field_changes(rows: list[dict[str, Any]], edited: dict[int, dict[str, Any]]) -> dict[str, str]:
    """The values the person typed in the fields table (Streamlit's ``edited_rows``), by field."""
    return {rows[int(i)]["field"]: change["value"] or "" for i, change in edited.items()
            if "value" in change and 0 <= int(i) < len(rows)}


#: the edit list's fixed column widths; the others share what is left of the chunk tables'
#: width (no sideways scrolling at 1280 px), their cells wrapped (an edit is whole in the undo
#: picker too)
EDIT_WIDTHS = {"#": 36, "when": 72}


def edit_columns() -> dict[str, dict[str, Any]]:
    """Column configs for the edit list."""
    return {name: {"width": width} for name, width in EDIT_WIDTHS.items()}


def edit_rows(sp: SuperPrompt) -> list[dict[str, Any]]:
    """A row per edit: its number, what it says, the stage it acts on, whether it applied
    (applied / not applied / waiting for its stage) with the latest stage's note, and when."""
    rows = []
    for edit in sp.edits:
        stage, outcome = edits.outcome(sp, edit)
        status = ("applied" if outcome.applied else "not applied") if outcome else "waiting"
        note = (f"{stage_label(stage)}: {plain_names(outcome.note)}" if outcome
                else f"applies when {stage_label(edit.stage)} runs")
        made_for = (f"carried from “{short_text(edit.carried_from, 40)}”"
                    if edit.carried_from is not None else "this prompt")
        rows.append({"#": edit.id, "edit": edit.describe(), "stage": stage_label(edit.stage),
                     "status": status, "note": note, "made for": made_for, "when": edit.at[11:19]})
    return rows


def offer_rows(offered: Iterable[Edit]) -> list[dict[str, Any]]:
    """A row per edit offered from another prompt: its kind, what it targets and its value
    (a field's value, a statement's or rule's text, a place), by you."""
    return [{"kind": e.kind, "target": short_text(e.target, 60),
             "value": short_text(e.after or "", 60) if e.kind not in CHUNK_KINDS + GATE_KINDS
             else "", "by": edits.BY_YOU} for e in offered]


def chunk_marks(sp: SuperPrompt, chunk_ids: list[str]) -> dict[str, tuple[bool, bool]]:
    """(pinned, excluded) per chunk id: the chunk tables' checkbox columns."""
    mine = edits.chunk_edits(sp.edits)
    kept = set(mine.kept)
    return {c: (c in kept, c in mine.excluded) for c in chunk_ids}


def with_marks(rows: list[dict[str, Any]], sp: SuperPrompt) -> list[dict[str, Any]]:
    """The chunk table's rows with the pin and exclude columns first (from ``sp``'s edits)."""
    marks = chunk_marks(sp, [r["chunk id"] for r in rows])
    return [{PIN: marks[r["chunk id"]][0], EXCLUDE: marks[r["chunk id"]][1], **r} for r in rows]


@dataclass(frozen=True)
class ChunkChange:
    """A change the person made in a chunk table: pin, unpin, exclude or include ``chunk_id``."""

    chunk_id: str
    action: str  # "pin", "unpin", "exclude", "include"


def table_changes(rows: list[dict[str, Any]], edited: dict[int, dict[str, Any]]) -> list[ChunkChange]:
    """What the person changed in a chunk table (Streamlit's ``edited_rows``: row position →
    changed columns), as pin / unpin / exclude / include per chunk, in row order."""
    out: list[ChunkChange] = []
    for position in sorted(edited):
        if not 0 <= position < len(rows):
            continue
        chunk_id = rows[position]["chunk id"]
        change = edited[position]
        if PIN in change:
            out.append(ChunkChange(chunk_id, "pin" if change[PIN] else "unpin"))
        if EXCLUDE in change:
            out.append(ChunkChange(chunk_id, "exclude" if change[EXCLUDE] else "include"))
    return out


#: how a chunk the person decided on is labelled where it could be added
DECIDED = {"pin": "Pinned", "add": "Added", "exclude": "Excluded"}


def chunk_decision(sp: SuperPrompt, chunk_id: str) -> edits.Edit | None:
    """The person's pin, exclusion, addition or drop (an applied replay) of ``chunk_id``, if
    any: what "Undo my decision" undoes."""
    mine = edits.chunk_edits(sp.edits)
    return mine.by_id.get(chunk_id) or mine.drops.get(chunk_id)


@dataclass(frozen=True)
class Item:
    """One statement of A4's context or one rule of A5, as the page lists it for editing."""

    key: str
    text: str
    label: str  # the statement's citation ("[2] faq.md § Setup"), or "" for a rule
    edited: bool


def statement_items(sp: SuperPrompt) -> list[Item] | None:
    """A4's statements, in the context's order, with their citation; None before A4 ran."""
    a4 = sp.extras.a4
    if a4 is None:
        return None
    chunks = sp.chunk_map()
    number = {c: n for n, c in enumerate(sp.final_selection_ids, start=1)}
    out = []
    for s in a4.condensed:
        cites = [f"[{number[c]}] {chunks[c].citation_label}" for c in s.chunk_ids
                 if c in number and c in chunks]
        label = "; ".join(cites)
        if s.by_you:  # the person's words: their note, never cited as a source
            label = "you: your note, not cited" + (f" (in place of a statement of {label})"
                                                    if label else "")
        out.append(Item(edits.statement_key(s), s.text, label, bool(s.edited)))
    return out


def rule_items(sp: SuperPrompt) -> list[Item] | None:
    """A5's hard rules, in order; None before A5 ran. A rule a person wrote or rewrote says so."""
    spec = sp.extras.format_enforcer
    if spec is None:
        return None
    own = {e.after for e in sp.edits if e.kind in ("rule_text", "rule_add")}
    return [Item(rule, rule, "you: a rule you wrote (an instruction, applied by A5)"
                 if rule in own else "", rule in own) for rule in spec.hard_rules]


def source_for(sp: SuperPrompt, before: SuperPrompt | None, stage: int) -> tuple[SuperPrompt, bool]:
    """The state to draw stage number ``stage``'s result from, and whether it is a result an
    edit discarded: ``sp`` while it has that result; else ``before`` (the state before the
    edits) with ``sp``'s edits, when it has it — shown marked out of date, so the person can go
    on editing there until the stage runs again."""
    if stage <= controller.position(sp) or before is None or stage > controller.position(before):
        return sp, False
    return before.model_copy(update={"edits": sp.edits}), True


def out_of_date_banner(sp: SuperPrompt, stale: Stale | None) -> str:
    """The page's banner over an out-of-date pass: the first stage whose inputs changed and
    why, and where the person's edits discarded results (Markdown lines)."""
    said = [f"**Out of date** — {stale_line(stale)}."] if stale else []
    if sp.resume_to is not None:
        first = controller.STAGES[controller.position(sp) + 1].label
        said.append(f"Your edits discarded the results from {first} on: they apply when it runs again.")
    return "  \n".join(said)


def stage_note(stage: int, discarded: bool, stale: Stale | None) -> str | None:
    """What the page says above stage number ``stage``'s result when it is out of date."""
    if discarded:
        return ("Out of date: your edits change what this stage decides (shown as it was). "
                "Re-run to apply them.")
    if stale is not None and stage >= stale.index:
        return f"Out of date: {stale_line(stale)}."
    return None


def stage_of_view(view: str) -> int:
    """The pipeline index of the stage that writes chunk view ``view``."""
    return next(i for i, s in enumerate(controller.STAGES) if s.view == view)


VIEW_KEYS = [View.RETRIEVAL, View.RERANKED, View.A3, View.A4]
