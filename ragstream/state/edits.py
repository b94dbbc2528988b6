"""A person's edits: typed inputs a ``SuperPrompt`` carries, which the stages apply every run.

An edit is not a patch on a result. It says what a person decided for this prompt — a body
field's value, a chunk pinned, excluded or added, a statement of A4's condensed context
rewritten, removed or moved, a format rule of A5 rewritten, removed, moved or added — and the
stage it acts on applies it every time that stage runs, after (or instead of) its own rule:

========================  =================================  ===========================
kind                      what it says                       acts on (and every later stage)
========================  =================================  ===========================
``field``                 body field ``target`` = ``after``  A0 (task, context, purpose,
                                                             format, constraints, text) or
                                                             A2 (system, audience, tone,
                                                             depth, confidence)
``pin``                   keep chunk ``target``              Retrieval → ReRanker → A3 → A4
``exclude``               drop chunk ``target``              Retrieval
``add``                   bring chunk ``target`` in, pinned  Retrieval → … → A4
``drop``                  the gate drops chunk ``target``    A3 → A4 (a model's word the
                                                             person applied: the Agents
                                                             tab's replay, ``ragstream.workbench.replay``)
``statement_text``        statement ``target`` reads         A4
                          ``after``
``statement_remove``      leave statement ``target`` out     A4
``statement_move``        statement ``target`` at place      A4
                          ``after`` (1-based)
``statement_add``         a note ``after`` of the person's   A4 (under "Your notes",
                                                             never cited)
``rule_text`` / ``_remove`` / ``_move``  the same for A5's   A5
                          hard rule ``target``
``rule_add``              a rule ``after`` of the person's   A5
========================  =================================  ===========================

So the same prompt, configuration, knowledge base and edits give byte-identical results, and
re-running an earlier stage applies the edits again. Recording an edit (``controller.record_edit``)
discards the results of the stage it acts on and of every later stage, no others. Each stage
notes, per edit it read, whether it applied and how (``extras.edit_outcomes``): an edit whose
chunk is no longer a candidate, or no longer in the knowledge base, says so there and stays
in the list.

One edit per *slot*: pinning a chunk that was excluded (or dropped) replaces the exclusion (or
the drop), and the other way round; setting a field
twice keeps the latest value (and the first ``before``), removing a statement replaces its
rewrite and its move.

Who decided: a view row a person's edit decided says ``decided_by == "you"``, a body field
``body_sources[key] == "you"`` ("set by you"). A statement the person rewrote is their note
(``Statement.edited``): ``S_CTX_MD`` shows it under "Your notes" without a ``[n]`` and the
answer never cites it; a rule the person added is an instruction, applied by A5 like its own.

Edits belong to the prompt they were made for. A new prompt starts without them; applying
them to another prompt is the person's explicit choice (``carried``: ``Engine.carry_edits``,
``Engine.new(…, edits_from=…)``, ``ragstream run --edits-from RUN_ID``, the page's "apply
them here"), and each carried edit says which prompt it was made for (``Edit.carried_from``).
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ragstream.common.config import AppConfig
from ragstream.common.errors import EditError as EditError
from ragstream.common.text import fold
from ragstream.state.records import CHUNK_KINDS, GATE_KINDS, STATEMENT_KINDS, EditOutcome, Statement
from ragstream.state.records import Edit as Edit
from ragstream.state.records import EditKind as EditKind
from ragstream.state.records import edit_stage as stage_of
from ragstream.state.records import short_text as _short
from ragstream.state.super_prompt import SuperPrompt, View

#: what the person's source reads in ``body_sources`` and the decision logs
BY_YOU = "you"
#: the reasons a view row gives for a person's decision
PINNED, EXCLUDED, ADDED = "pinned by you", "excluded by you", "added by you"
#: the reason an A3 row gives for a chunk the person dropped there (a ``drop`` edit)
DROPPED = "dropped by you"


def now() -> str:
    """The time an edit is made, UTC, to the second."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def new_edit(sp: SuperPrompt, kind: EditKind, target: str, after: str | None = None,
             before: str | None = None, at: str | None = None) -> Edit:
    """An edit numbered after ``sp``'s, for the stage that applies ``kind``."""
    number = max((e.id for e in sp.edits), default=0) + 1
    return Edit(id=number, kind=kind, stage=stage_of(kind, target), target=target, before=before,
                after=after, at=at or now())


def merged(edits: Sequence[Edit], edit: Edit) -> list[Edit]:
    """``edits`` with ``edit`` in its slot: the edit it replaces (same slot) leaves, and a
    removal also takes the rewrite and move of the same statement or rule. A field edit keeps
    the first ``before`` (the stage's own value), so clearing it restores that."""
    gone = {edit.slot}
    if edit.kind in ("statement_remove", "rule_remove"):
        base = edit.kind.split("_")[0]
        gone |= {(f"{base}_text", edit.target), (f"{base}_move", edit.target)}
    first = next((e for e in edits if e.slot == edit.slot), None)
    if first is not None and edit.kind == "field" and first.kind == "field":
        edit = edit.model_copy(update={"before": first.before})
    return [e for e in edits if e.slot not in gone] + [edit]


def carried(edits_now: Sequence[Edit], offered: Iterable[Edit], prompt: str) -> list[Edit]:
    """The ``offered`` edits (made for ``prompt``, another prompt) as edits of this one:
    numbered after ``edits_now``, in the order they were made, each saying which prompt it
    was made for. One whose slot ``edits_now`` already decides is left out: this prompt's own
    decision stands. An edit carried once already keeps the prompt it was first made for. What
    a field or a chunk was before (the other prompt's) is not carried: it says nothing of this
    one (a statement's or rule's ``before`` is its text, which stays)."""
    taken = {e.slot for e in edits_now}
    number = max((e.id for e in edits_now), default=0)
    out: list[Edit] = []
    for edit in sorted(offered, key=lambda e: e.id):
        if edit.slot in taken:
            continue
        taken.add(edit.slot)
        number += 1
        update: dict[str, Any] = {"id": number, "carried_from": edit.carried_from or prompt}
        if edit.kind == "field" or edit.kind in CHUNK_KINDS or edit.kind in GATE_KINDS:
            update["before"] = None
        out.append(edit.model_copy(update=update))
    return out


def of_stage(edits: Iterable[Edit], stage: str) -> list[Edit]:
    """The edits ``stage`` applies first, in the order they were made."""
    return sorted((e for e in edits if e.stage == stage), key=lambda e: e.id)


def fingerprint(edits: Iterable[Edit]) -> str:
    """A short hash of what ``edits`` decide (not when): equal for the same decisions."""
    text = "\n".join(f"{e.kind}\x1f{e.target}\x1f{e.after}" for e in sorted(edits, key=lambda e: e.id))
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:12] if text else ""


# --------------------------------------------------------------------------- checks


def check_field(cfg: AppConfig, name: str, value: str) -> str:
    """The value to store for body field ``name``: a field A2 chooses from a closed list must
    name one of its values (matched without case; stored as the list spells it); a field the
    prompt must have (task, format) must not be empty. ``EditError`` names the field's choices."""
    fields = field_names(cfg)
    if name not in fields:
        raise EditError(f"Unknown field {name!r}. Fields you can set: {', '.join(fields)}.")
    value = value.strip()
    choices = field_choices(cfg).get(name)
    if choices:
        for allowed in choices:
            if fold(allowed) == fold(value):
                return allowed
        raise EditError(f"{value!r} is not a value of {name}. Choose one of: {', '.join(choices)}.")
    if not value and name in cfg.prompt_schema.must_keys:
        raise EditError(f"{name} cannot be empty: the prompt must have one. Write a value, or "
                        f"undo the edit to go back to the prompt's own.")
    return value


def field_names(cfg: AppConfig) -> list[str]:
    """Every body field a person may set: the canonical keys and A2's confidence."""
    return list(dict.fromkeys([*cfg.prompt_schema.canonical_keys, "confidence"]))


def field_choices(cfg: AppConfig) -> dict[str, list[str]]:
    """The closed lists of the fields A2 chooses (system, audience, tone, depth, confidence)."""
    a2 = cfg.agents.A2_PromptShaper
    out: dict[str, list[str]] = {name: list(f.values) for name, f in a2.fields.items()}
    out["confidence"] = list(a2.confidence_values)
    return out


def check_chunk(index: Any, chunk_id: str) -> str:
    """``chunk_id`` if the knowledge base holds it; ``EditError`` names the closest ids and how
    to find one."""
    if index.chunk(chunk_id) is not None:
        return chunk_id
    near = index.near_ids(chunk_id)
    hint = f" Did you mean {', '.join(near)}?" if near else ""
    raise EditError(f"Unknown chunk id {chunk_id!r}: the knowledge base ({index.n_chunks} chunks) "
                    f"has no chunk of that id.{hint} Find chunks by their text with "
                    f"`ragstream find \"some words\"` or the page's chunk search.")


#: ``chunk_status`` of a chunk no chunk view holds
NOT_RETRIEVED = "not retrieved"


def chunk_status(sp: SuperPrompt, chunk_id: str) -> str:
    """Where ``chunk_id`` stood in the latest chunk view that has it: ``A3: dropped (off-topic
    …)``, ``ReRanker: rank 4``; ``not retrieved`` when no view has it."""
    for key, title in ((View.A4, "A4"), (View.A3, "A3"), (View.RERANKED, "ReRanker"),
                       (View.RETRIEVAL, "Retrieval")):
        row = next((r for r in sp.view(key) if r.chunk_id == chunk_id), None)
        if row is not None:
            said = f"{row.status} ({row.reason})" if row.status == "dropped" and row.reason else row.status
            return f"{title}: rank {row.rank}, {said}"
    return NOT_RETRIEVED


def check_item(sp: SuperPrompt, kind: EditKind, key: str, after: str | None,
               seen: SuperPrompt | None = None) -> str | None:
    """For a statement or rule edit: the item's text now (its ``before``), or for a move its
    place now. The items are ``sp``'s, or, when its A4/A5 result was discarded by an earlier
    edit, those of ``seen`` (the state the person was looking at); with neither, the edit is
    taken as it is and its stage says whether it applied. ``EditError`` when the item is not
    in the list, the new text is empty, or the place is not a whole number from 1 on."""
    what = "statement" if kind in STATEMENT_KINDS else "rule"
    if kind.endswith("_text") and not (after or "").strip():
        raise EditError(f"The {what}'s new text is empty: write it, or remove the {what}.")
    if kind.endswith("_move") and (not (after or "").isdigit() or int(after or 0) < 1):
        raise EditError(f"A {what} moves to a place 1, 2, …; {after!r} is not one.")
    items = _items(sp, kind)
    if items is None and seen is not None:
        items = _items(seen, kind)
    if items is None:
        return None
    keys = [k for k, _ in items]
    if key not in keys:
        shown = ", ".join(repr(_short(k, 40)) for k in keys[:6]) + (" …" if len(keys) > 6 else "")
        raise EditError(f"No {what} {_short(key)!r} in the current "
                        f"{'condensed context' if what == 'statement' else 'rules'}; "
                        f"there are: {shown or 'none'}.")
    if kind.endswith("_move"):
        return str(keys.index(key) + 1)
    return dict(items)[key]


def _items(sp: SuperPrompt, kind: EditKind) -> list[tuple[str, str]] | None:
    """(key, text) of the statements or rules as they are now, or None before their stage ran."""
    if kind in STATEMENT_KINDS:
        a4 = sp.extras.a4
        return None if a4 is None else [(statement_key(s), s.text) for s in a4.condensed]
    spec = sp.extras.format_enforcer
    return None if spec is None else [(r, r) for r in spec.hard_rules]


# --------------------------------------------------------------------------- what the stages apply


@dataclass(frozen=True)
class ChunkEdits:
    """The person's chunk decisions: pinned and added ids (in the order made) and excluded ids
    (``by_id``: Retrieval's kinds, by chunk), and the chunks the A3 gate is to drop
    (``drops``: ``drop`` edits by chunk, in the order made)."""

    pinned: tuple[str, ...] = ()
    added: tuple[str, ...] = ()
    excluded: frozenset[str] = frozenset()
    by_id: dict[str, Edit] = field(default_factory=dict)
    drops: dict[str, Edit] = field(default_factory=dict)

    @property
    def kept(self) -> tuple[str, ...]:
        """Every chunk the person wants kept: the pinned and the added ones, in the order made."""
        return tuple(c for c, e in self.by_id.items() if e.kind != "exclude")

    def reason(self, chunk_id: str) -> str:
        """``pinned by you`` / ``added by you`` / ``excluded by you``, or '' for no decision."""
        edit = self.by_id.get(chunk_id)
        return {"pin": PINNED, "add": ADDED, "exclude": EXCLUDED}[edit.kind] if edit else ""

    def __bool__(self) -> bool:
        return bool(self.by_id)


def chunk_edits(edits: Iterable[Edit]) -> ChunkEdits:
    """The chunk decisions among ``edits``."""
    mine = sorted((e for e in edits if e.kind in CHUNK_KINDS), key=lambda e: e.id)
    gate = sorted((e for e in edits if e.kind in GATE_KINDS), key=lambda e: e.id)
    return ChunkEdits(pinned=tuple(e.target for e in mine if e.kind == "pin"),
                      added=tuple(e.target for e in mine if e.kind == "add"),
                      excluded=frozenset(e.target for e in mine if e.kind == "exclude"),
                      by_id={e.target: e for e in mine},
                      drops={e.target: e for e in gate})


def field_edits(edits: Iterable[Edit], stage: str) -> dict[str, Edit]:
    """The field edits ``stage`` applies, by field."""
    return {e.target: e for e in of_stage(edits, stage) if e.kind == "field"}


def note(sp: SuperPrompt, stage: str, edit: Edit, applied: bool, text: str) -> None:
    """Record how ``stage`` applied ``edit`` (or why it could not), in ``extras.edit_outcomes``;
    a later note of the same stage for the same edit replaces the earlier one."""
    outcomes = sp.extras.edit_outcomes.setdefault(stage, [])
    outcomes[:] = [o for o in outcomes if o.edit != edit.id]
    outcomes.append(EditOutcome(edit=edit.id, applied=applied, note=text))
    outcomes.sort(key=lambda o: o.edit)


def outcome(sp: SuperPrompt, edit: Edit) -> tuple[str, EditOutcome | None]:
    """The latest stage that noted ``edit`` and its note, or ('', None) before any did."""
    latest: tuple[str, EditOutcome | None] = ("", None)
    for stage, outcomes in sp.extras.edit_outcomes.items():
        for o in outcomes:
            if o.edit == edit.id:
                latest = (stage, o)
    return latest


def statement_key(statement: Statement) -> str:
    """A statement's lasting name: its chunk and where in the chunk it was taken from
    (``kb/faq.md#3@120``), or its text's hash when it has no span."""
    chunk = statement.chunk_ids[0] if statement.chunk_ids else ""
    if statement.span is not None:
        return f"{chunk}@{statement.span[0]}"
    return f"{chunk}#{hashlib.sha1(statement.text.encode('utf-8')).hexdigest()[:8]}"


T = TypeVar("T")


@dataclass
class ListEdits:
    """What applying edits to a list did: the counts of rewritten, removed, moved and added items."""

    rewritten: int = 0
    removed: int = 0
    moved: int = 0
    added: int = 0

    def summary(self, noun: str) -> str:
        """``1 statement rewritten, 2 removed`` (empty when nothing changed)."""
        parts = [f"{n} {what}" for n, what in ((self.rewritten, "rewritten"), (self.removed, "removed"),
                                              (self.moved, "moved"), (self.added, "added")) if n]
        if not parts:
            return ""
        total = self.rewritten + self.removed + self.moved + self.added
        return f"{total} {noun}{'s' if total != 1 else ''} changed by hand: " + ", ".join(parts)


def apply_list(sp: SuperPrompt, stage: str, items: list[T], key: Callable[[T], str],
               rewrite: Callable[[T, str], T], make: Callable[[str], T] | None = None,
               noun: str = "item") -> tuple[list[T], ListEdits]:
    """Apply ``stage``'s list edits (statements or rules) to ``items``, in the order they were
    made: rewrite, remove, move (to a 1-based place, clamped to the list) and add (at the end).
    Each edit's outcome is noted; one whose item is not in the list any more says so."""
    out = list(items)
    done = ListEdits()
    for edit in of_stage(sp.edits, stage):
        action = edit.kind.split("_", 1)[1]
        if action == "add":
            if make is None:
                continue
            out.append(make(edit.after or ""))
            done.added += 1
            note(sp, stage, edit, True, f"added as {noun} {len(out)}")
            continue
        at = next((i for i, item in enumerate(out) if key(item) == edit.target), None)
        if at is None:
            note(sp, stage, edit, False, f"not applied: {_short(edit.before or edit.target)!r} "
                                         f"is not in the list any more")
            continue
        if action == "text":
            out[at] = rewrite(out[at], edit.after or "")
            done.rewritten += 1
            note(sp, stage, edit, True, f"{noun} {at + 1} rewritten")
        elif action == "remove":
            del out[at]
            done.removed += 1
            note(sp, stage, edit, True, f"{noun} {at + 1} removed")
        elif action == "move":
            place = min(max(int(edit.after or 1), 1), len(out))
            out.insert(place - 1, out.pop(at))
            done.moved += 1
            note(sp, stage, edit, True, f"moved from place {at + 1} to {place}")
    return out, done
