"""Two runs side by side: what differed going in, where each chunk moved, and why.

A run is one ``SuperPrompt`` as the stages left it, with the session's setting overrides
(dotted key -> value, ``{"limits.N2_RERANK_TOP_K": 20}``; a key that is absent means the
configuration file's value) — a ``Side``. ``compare(a, b)`` returns a ``Comparison`` of run B
against run A:

* **Inputs** (``Comparison.inputs``): every input that differs — the prompt text, each
  setting whose value differs (a side's override, else the file's value when ``Side.files``
  gives the configuration), the filters, the person's edits that only one run has, the
  knowledge base's fingerprint, the recent conversation, the stage reached, the agents' modes
  and the ReRanker's backend.
* **Chunks** (``chunk_rows``, ``moves``): for each chunk stage (``views.VIEW_STAGES``:
  Retrieval, ReRanker, A3, A4) each chunk's rank and status in A and in B, and the move of B
  relative to A as the page's stage diff writes it (``chunk_moves.move_label``): ``↑3`` (three
  places higher in B), ``↓7``, ``=``, ``new`` (only B has it), ``dropped`` (B dropped it though
  A had it kept, or B does not have it). A chunk both runs dropped moves by its rank. A stage
  only one run reached is ``not run in A`` / ``not run in B``: it is no chunk's move.
* The **final selection** (added, removed, kept), a unified diff of the two ``prompt_ready``
  texts and the two **answers**.

How causes are named. A chunk's cause is decided once, at the first chunk stage (run by both)
where its row differs — present in one run only, another rank or another status — from what
differs between the two runs there, in this order:

1. an edit of that chunk only one run has, made at or before that stage: ``your edit in B: pin
   kb/reranking.md#3``;
2. the filters, when the chunk passes only one run's: ``filter in B: doc_type=faq``;
3. the chunk's own text: ``changed document: kb/reranking.md``;
4. what the stage itself read differently (``StageInputs`` in ``computed_from``, and the
   overrides of the configuration paths it reads): ``setting limits.N2_RERANK_TOP_K 50 → 20``,
   ``A3 Gate mode deterministic → llm``, ``filters none → doc_type=faq``, ``knowledge base
   changed`` (its documents: Retrieval's fingerprint of the knowledge base), ``conversation
   memory changed`` (only the remembered turns Retrieval searches with it), another edit the
   stage applies (``edit in B: exclude kb/faq.md#2``);
5. when the stage read the same, what an earlier stage read differently: the prompt
   (``prompt changed``), the knowledge base, the conversation memory, the filters, the
   conversation as they are, the rest as ``follows ReRanker's change (setting
   limits.N2_RERANK_TOP_K 50 → 20)``.

Stages are named by their names on the page (``A3 Gate``, ``views.stage_label``).

All that apply at the first step that names anything are joined with ``; ``. When nothing
explains a move the cause is ``""``, or ``unexplained`` when no input differs at all.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from ragstream.common.config import AppConfig
from ragstream.interfaces.ui.charts import (
    BUMP_PLOT_HEIGHT,
    BUMP_TOP,
    CHART_PADDING,
    STATUS_SHAPES,
    bump_axes,
    status_shape,
)
from ragstream.interfaces.ui.chunk_moves import move_label
from ragstream.interfaces.ui.grids import EMPTY
from ragstream.interfaces.ui.views import VIEW_STAGES, reached_label, stage_label, stage_title
from ragstream.stages import STAGES, Stage, controller, staleness
from ragstream.state.records import CHUNK_KINDS, GATE_KINDS, Edit, StageInputs, short_text
from ragstream.state.super_prompt import Chunk, SuperPrompt, ViewRow

#: the chunk stages in pipeline order (their ``views_by_stage`` keys), and the stage of each
VIEW_KEYS: list[str] = [key for key, _ in VIEW_STAGES]
_STAGE_OF_VIEW: dict[str, Stage] = {st.view: st for st in STAGES if st.view}
_ORDER: dict[str, int] = {st.name: i for i, st in enumerate(STAGES)}
#: what a value reads as when it is the configuration file's and the file is not at hand
FILE_VALUE = "file value"
#: the most edits of one stage a cause names (the rest are counted)
CAUSE_EDITS = 2
#: how long an input's value may be in a table cell or the text lines
VALUE_CHARS = 60
#: the column titles of the chunk rows, in order
CHUNK_COLUMNS = ["stage", "chunk id", "rank A", "status A", "rank B", "status B", "move",
                 "Δ rank", "cause"]
#: the bump chart's width per run, in pixels
BUMP_RUN_WIDTH = 320


@dataclass(frozen=True)
class Side:
    """One run of a comparison: a label (``run 12``), its SuperPrompt, the session's setting
    overrides it ran with (dotted key -> value) and, optionally, the configuration, whose value
    a key has when the run did not override it (``AppConfig.get``)."""

    label: str
    sp: SuperPrompt
    settings: dict[str, Any]
    files: AppConfig | None = None


# --------------------------------------------------------------------------- words


def _words(value: Any) -> str:
    """A setting's value as a short line: a text as it is, the rest as JSON."""
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return short_text(text, VALUE_CHARS)


def _short_stage(name: str) -> str:
    """A stage by its name on the page: ``A3_NLI_Gate`` → ``A3 Gate``."""
    return stage_label(name)


def _view_short(key: str) -> str:
    """A chunk stage by its name: ``Retrieval``, ``ReRanker``, ``A3 Gate``, ``A4 Condenser``."""
    return stage_title(key)


def _searched(fingerprint: str | None) -> tuple[str, str]:
    """What Retrieval searched (``staleness.kb_fingerprint``), in its two parts: the knowledge
    base's fingerprint and the conversation memory's ("" when none was searched)."""
    kb, _, memory = (fingerprint or "").partition(staleness.MEMORY_JOIN)
    return kb, memory


def _edit_key(edit: Edit) -> tuple[str, str, str | None]:
    """What an edit decides, whenever and with whatever number it was made."""
    return edit.kind, edit.target, edit.after


def _edit_words(edit: Edit) -> str:
    """An edit in a table cell: ``pin kb/faq.md#3`` (a chunk edit without where the chunk
    stood when it was made), the rest as ``Edit.describe`` says them."""
    if edit.kind in CHUNK_KINDS or edit.kind in GATE_KINDS:
        return f"{edit.kind} {edit.target}"
    return edit.describe()


def _reached(sp: SuperPrompt) -> str:
    """The last stage of the run's pass, by its name; ``nothing run`` before A0."""
    return reached_label(sp)


def _turns(sp: SuperPrompt) -> str:
    n = len(sp.recent_conversation)
    return f"{n} turn{'s' if n != 1 else ''}"


def _covers(key: str, path: str) -> bool:
    """Whether overriding ``key`` changes configuration path ``path`` (one holds the other)."""
    return key == path or key.startswith(path + ".") or path.startswith(key + ".")



# --------------------------------------------------------------------------- what differs


@dataclass(frozen=True)
class _Change:
    """One input a stage read differently in the two runs: its kind (prompt, setting, mode,
    filters, kb, conversation, edit), in words, and for a chunk edit the chunk."""

    kind: str
    text: str
    chunk: str | None = None


#: changes an earlier stage passes on named as they are (the rest: "follows X's change (…)")
_PLAIN = ("prompt", "filters", "kb", "memory", "conversation")


class _Differ:
    """What differs between two sides, stage by stage; computes once, read by ``compare``."""

    def __init__(self, a: Side, b: Side):
        self.a, self.b = a, b
        self.settings = self._setting_changes()
        in_a = {_edit_key(e) for e in a.sp.edits}
        in_b = {_edit_key(e) for e in b.sp.edits}
        #: (side, edit) for every edit only one run has, A's first, each in the order made
        self.lone_edits: list[tuple[str, Edit]] = (
            [("A", e) for e in sorted(a.sp.edits, key=lambda e: e.id) if _edit_key(e) not in in_b]
            + [("B", e) for e in sorted(b.sp.edits, key=lambda e: e.id) if _edit_key(e) not in in_a])
        self.chunks_a, self.chunks_b = a.sp.chunk_map(), b.sp.chunk_map()
        self.stage_changes: dict[str, list[_Change]] = {st.name: self._stage(st) for st in STAGES}

    # -- settings ------------------------------------------------------------------------

    def _value(self, side: Side, other: Side, key: str) -> tuple[bool, Any]:
        """(known, value) of ``key`` in ``side``'s run: its override, else the file's value
        (from its configuration, or the other side's when it has none)."""
        if key in side.settings:
            return True, side.settings[key]
        for files in (side.files, other.files):
            if files is not None:
                try:
                    return True, files.get(key)
                except (AttributeError, KeyError, TypeError):
                    return False, None
        return False, None

    def _setting_changes(self) -> dict[str, tuple[str, str]]:
        """Each overridden key whose value differs between the runs: (A's, B's) in words."""
        out: dict[str, tuple[str, str]] = {}
        for key in sorted(set(self.a.settings) | set(self.b.settings)):
            known_a, value_a = self._value(self.a, self.b, key)
            known_b, value_b = self._value(self.b, self.a, key)
            if known_a and known_b and value_a == value_b:
                continue
            if not known_a and not known_b:
                continue  # both the file's, which is not at hand: nothing to tell
            out[key] = (_words(value_a) if known_a else FILE_VALUE,
                        _words(value_b) if known_b else FILE_VALUE)
        return out

    # -- per stage -----------------------------------------------------------------------

    def _stage(self, st: Stage) -> list[_Change]:
        """What ``st`` read differently in B than in A: its recorded inputs
        (``computed_from``) where both runs have them, else what the states say."""
        sa, sb = self.a.sp, self.b.sp
        ia: StageInputs | None = sa.computed_from.get(st.name)
        ib: StageInputs | None = sb.computed_from.get(st.name)
        out: list[_Change] = []
        reads = st.reads
        if staleness.PROMPT in reads:
            differs = (ia.prompt != ib.prompt) if ia is not None and ib is not None \
                else sa.user_text != sb.user_text
            if differs:
                out.append(_Change("prompt", "prompt changed"))
        paths = [f"agents.{st.name}" if r == staleness.AGENT else r for r in reads
                 if r not in (staleness.PROMPT, staleness.FILTERS, staleness.KB,
                              staleness.CONVERSATION)]
        named = [k for k in self.settings if any(_covers(k, p) for p in paths)]
        if ia is not None and ib is not None:  # only what changed what the stage read
            named = [k for k in named if any(_covers(k, p) and ia.settings.get(p) != ib.settings.get(p)
                                             for p in paths)]
        out += [_Change("setting", f"setting {k} {self.settings[k][0]} → {self.settings[k][1]}")
                for k in named]
        if ia is not None and ib is not None:  # what no override explains: the files differ
            for path in sorted(set(ia.settings) | set(ib.settings)):
                if (path != staleness.LLM_MODE and ia.settings.get(path) != ib.settings.get(path)
                        and not any(_covers(k, path) for k in named)):
                    out.append(_Change("setting", f"setting {path} changed"))
        mode_a, mode_b = st.mode_of(sa), st.mode_of(sb)
        if mode_a and mode_b and mode_a != mode_b:
            out.append(_Change("mode", f"{_short_stage(st.name)} mode {mode_a} → {mode_b}"))
        elif ia is not None and ib is not None and \
                ia.settings.get(staleness.LLM_MODE) != ib.settings.get(staleness.LLM_MODE):
            out.append(_Change("mode", f"{_short_stage(st.name)}: LLM endpoint or model changed"))
        if staleness.FILTERS in reads:
            fa, fb = ((ia.filters, ib.filters) if ia is not None and ib is not None
                      else (sa.filters.describe(), sb.filters.describe()))
            if fa != fb:
                out.append(_Change("filters", f"filters {fa or 'none'} → {fb or 'none'}"))
        if staleness.KB in reads and ia is not None and ib is not None \
                and ia.kb and ib.kb and ia.kb != ib.kb:
            (kb_a, memory_a), (kb_b, memory_b) = _searched(ia.kb), _searched(ib.kb)
            if kb_a != kb_b:
                out.append(_Change("kb", "knowledge base changed"))
            if memory_a != memory_b:
                out.append(_Change("memory", "conversation memory changed"))
        if staleness.CONVERSATION in reads and (
                [t.model_dump() for t in sa.recent_conversation]
                != [t.model_dump() for t in sb.recent_conversation]):
            out.append(_Change("conversation", "conversation changed"))
        for side, edit in self.lone_edits:
            if edit.stage == st.name:
                chunk = edit.target if edit.kind in CHUNK_KINDS or edit.kind in GATE_KINDS else None
                out.append(_Change("edit", f"edit in {side}: {_edit_words(edit)}", chunk))
        return out

    # -- per chunk -----------------------------------------------------------------------

    def chunk(self, chunk_id: str) -> Chunk | None:
        """The chunk as B has it, else as A has it."""
        return self.chunks_b.get(chunk_id) or self.chunks_a.get(chunk_id)

    def cause(self, chunk_id: str, view_key: str, inputs_differ: bool) -> str:
        """Why ``chunk_id``'s row at chunk stage ``view_key`` differs (see the module's
        docstring for the order); ``""`` when nothing explains it, ``unexplained`` when no
        input differs."""
        st = _STAGE_OF_VIEW[view_key]
        at = _ORDER[st.name]
        parts = [f"your edit in {side}: {_edit_words(e)}" for side, e in self.lone_edits
                 if e.target == chunk_id and (e.kind in CHUNK_KINDS or e.kind in GATE_KINDS)
                 and _ORDER.get(e.stage, len(_ORDER)) <= at]
        filters_named = False
        fa, fb = self.a.sp.filters, self.b.sp.filters
        chunk = self.chunk(chunk_id)
        if chunk is not None and at >= _ORDER["Retrieval"] and fa.describe() != fb.describe():
            in_a, in_b = fa.matches(chunk), fb.matches(chunk)
            if in_a != in_b:
                parts.append(f"filter in {'B' if in_a else 'A'}: {(fb if in_a else fa).describe()}")
                filters_named = True
        ca, cb = self.chunks_a.get(chunk_id), self.chunks_b.get(chunk_id)
        if ca is not None and cb is not None and (ca.text != cb.text or ca.doc_id != cb.doc_id):
            parts.append(f"changed document: {cb.source}")
        for change in self.stage_changes[st.name]:
            if change.kind == "edit" and change.chunk == chunk_id:
                continue  # named above, as the person's edit of this chunk
            if change.kind == "filters" and filters_named:
                continue
            parts.append(change.text)
        if not parts:
            for earlier in STAGES[:at]:
                for change in self.stage_changes[earlier.name]:
                    parts.append(change.text if change.kind in _PLAIN else
                                 f"follows {_short_stage(earlier.name)}'s change ({change.text})")
        parts = list(dict.fromkeys(parts))
        edits = [p for p in parts if "edit in " in p and not p.startswith("your edit")]
        if len(edits) > CAUSE_EDITS:  # many edits of one stage: name a few, count the rest
            keep = set(edits[:CAUSE_EDITS])
            parts = [p for p in parts if p not in edits or p in keep]
            parts.append(f"{len(edits) - CAUSE_EDITS} more edits")
        if not parts:
            return "" if inputs_differ else "unexplained"
        return "; ".join(parts)

    # -- inputs --------------------------------------------------------------------------

    def inputs(self) -> list[dict[str, Any]]:
        """A row {"input", "A", "B"} per input that differs (see ``Comparison.inputs``)."""
        sa, sb = self.a.sp, self.b.sp
        rows: list[dict[str, Any]] = []
        if sa.user_text != sb.user_text:
            rows.append({"input": "prompt", "A": sa.user_text, "B": sb.user_text})
        rows += [{"input": f"setting {k}", "A": va, "B": vb} for k, (va, vb) in self.settings.items()]
        if sa.filters.describe() != sb.filters.describe():
            rows.append({"input": "filters", "A": sa.filters.describe(), "B": sb.filters.describe()})
        if self.lone_edits:
            rows.append({"input": "edits",
                         "A": "; ".join(e.describe() for s, e in self.lone_edits if s == "A") or "none",
                         "B": "; ".join(e.describe() for s, e in self.lone_edits if s == "B") or "none"})
        ka, kb = sa.computed_from.get("Retrieval"), sb.computed_from.get("Retrieval")
        if ka is not None and kb is not None and ka.kb != kb.kb:
            (kb_a, memory_a), (kb_b, memory_b) = _searched(ka.kb), _searched(kb.kb)
            if kb_a != kb_b:
                rows.append({"input": "knowledge base", "A": kb_a or "unknown", "B": kb_b or "unknown"})
            if memory_a != memory_b:
                rows.append({"input": "conversation memory", "A": memory_a or "none searched",
                             "B": memory_b or "none searched"})
        conv_a = [t.model_dump() for t in sa.recent_conversation]
        conv_b = [t.model_dump() for t in sb.recent_conversation]
        if conv_a != conv_b:
            same_count = len(conv_a) == len(conv_b)
            rows.append({"input": "conversation", "A": _turns(sa),
                         "B": _turns(sb) + (" (other text)" if same_count else "")})
        if _reached(sa) != _reached(sb):
            rows.append({"input": "stage reached", "A": _reached(sa), "B": _reached(sb)})
        for agent in controller.STAGE_NAMES:
            ma, mb = sa.extras.mode_of(agent), sb.extras.mode_of(agent)
            if ma and mb and ma != mb:
                rows.append({"input": f"mode of {stage_label(agent)}", "A": ma, "B": mb})
        ra, rb = sa.extras.reranker, sb.extras.reranker
        if ra is not None and rb is not None and ra.backend != rb.backend:
            rows.append({"input": "ReRanker backend", "A": ra.backend, "B": rb.backend})
        return rows


# --------------------------------------------------------------------------- the comparison


def _differs(ra: ViewRow | None, rb: ViewRow | None) -> bool:
    if ra is None or rb is None:
        return (ra is None) != (rb is None)
    return ra.rank != rb.rank or ra.status != rb.status


def _what(ra: ViewRow | None, rb: ViewRow | None) -> str:
    """What happened to a chunk from A to B at one stage: ``added``, ``removed``,
    ``kept→dropped`` (with its move when its rank changed too) or ``moved ↑3``."""
    if ra is None:
        return "added"
    if rb is None:
        return "removed"
    move, delta = move_label(ra.rank, rb.rank, dropped=False)
    if ra.status != rb.status:
        return f"{ra.status}→{rb.status}" + (f" ({move})" if delta else "")
    return f"moved {move}"


@dataclass
class Comparison:
    """Run B against run A (see the module's docstring): the inputs that differ, every
    chunk's rank and status per chunk stage with its move and cause, the final selection's
    changes, the ``prompt_ready`` diff and the answers."""

    a: Side
    b: Side
    #: a row {"input", "A", "B"} per input that differs; empty when the inputs are the same
    inputs: list[dict[str, Any]]
    #: chunk ids of B's final selection that A's does not have, in B's order
    selection_added: list[str]
    #: chunk ids of A's final selection that B's does not have, in A's order
    selection_removed: list[str]
    #: chunk ids in both final selections, in B's order
    selection_kept: list[str]
    #: (view key, row) for every chunk of every chunk stage either run has, in table order
    _rows: list[tuple[str, dict[str, Any]]] = field(default_factory=list, repr=False)
    #: one row per chunk whose row differs at some stage, at the first such stage
    _moves: list[dict[str, Any]] = field(default_factory=list, repr=False)
    #: each differing chunk's cause
    _causes: dict[str, str] = field(default_factory=dict, repr=False)

    # -- chunks --------------------------------------------------------------------------

    def stages(self) -> list[str]:
        """The chunk stages either run has a view of (``views_by_stage`` keys), in pipeline
        order: what ``chunk_rows`` can be asked for."""
        return list(dict.fromkeys(key for key, _ in self._rows)) or [
            k for k in VIEW_KEYS if k in self.a.sp.views_by_stage or k in self.b.sp.views_by_stage]

    def chunk_rows(self, stage: str | None = None) -> list[dict[str, Any]]:
        """A row per chunk in either run's view of each chunk stage either run has (only
        ``stage``'s when given: its ``views_by_stage`` key or its title): stage, chunk id,
        rank and status in A and in B (None where a run does not have it), the move of B
        relative to A (``chunk_moves.move_label``), Δ rank (rank in A − rank in B; None when not
        comparable) and the chunk's cause where its row differs (None where it does not).
        By stage, then rank in B; the chunks B does not have after, by rank in A."""
        return [dict(row) for key, row in self._rows
                if stage is None or stage in (key, row["stage"])]

    def moves(self) -> list[dict[str, Any]]:
        """The chunks whose rank or status differs at some stage, once each, at the first
        stage where they differ: chunk id, stage, what happened (``moved ↑3``, ``added``,
        ``removed``, ``kept→dropped``, ``dropped→kept``), ranks and statuses, and the cause."""
        return [dict(row) for row in self._moves]

    # -- the rest ------------------------------------------------------------------------

    def prompt_diff(self) -> list[str]:
        """A unified diff of A's ``prompt_ready`` to B's, headed by the runs' labels; empty
        when they are the same."""
        return list(difflib.unified_diff(
            self.a.sp.prompt_ready.splitlines(), self.b.sp.prompt_ready.splitlines(),
            fromfile=f"{self.a.label} (A) prompt_ready", tofile=f"{self.b.label} (B) prompt_ready",
            lineterm=""))

    def answers(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """Each run's answer: text, confidence, mode and sources (``[n] file § section``);
        None values and no sources for a run that has no answer."""
        return _answer(self.a.sp), _answer(self.b.sp)

    def _latest_common(self) -> str | None:
        """The latest chunk stage both runs reached."""
        both = [k for k in VIEW_KEYS if k in self.a.sp.views_by_stage and k in self.b.sp.views_by_stage]
        return both[-1] if both else None

    def stage_counts(self, stage: str) -> dict[str, int]:
        """At chunk stage ``stage`` (a view key): how many chunks moved (same status, another
        rank), were added, removed, went from kept to dropped and from dropped to kept."""
        out = {"moved": 0, "added": 0, "removed": 0, "kept→dropped": 0, "dropped→kept": 0}
        for key, row in self._rows:
            if key != stage or row["cause"] is None:
                continue
            if row["rank A"] is None:
                out["added"] += 1
            elif row["rank B"] is None:
                out["removed"] += 1
            elif row["status A"] != row["status B"]:
                out[f"{row['status A']}→{row['status B']}"] += 1
            else:
                out["moved"] += 1
        return out

    def summary(self) -> str:
        """One line: ``3 inputs differ (settings: limits.N2_RERANK_TOP_K 50 → 20; edits); A4:
        4 chunks moved, 2 added, 1 removed; final selection: +2 −1``."""
        if self.inputs:
            settings = [f"{r['input'].removeprefix('setting ')} {r['A']} → {r['B']}"
                        for r in self.inputs if r["input"].startswith("setting ")]
            named = ([f"settings: {', '.join(settings)}"] if settings else []) + [
                r["input"] for r in self.inputs if not r["input"].startswith("setting ")]
            n = len(self.inputs)
            head = f"{n} input{'s' if n != 1 else ''} differ{'s' if n == 1 else ''} ({'; '.join(named)})"
        else:
            head = "inputs the same"
        latest = self._latest_common()
        if latest is None:
            chunks = "no chunk stage ran in both"
        else:
            counts = self.stage_counts(latest)
            chunks = (f"{_view_short(latest)}: {counts['moved']} chunk"
                      f"{'s' if counts['moved'] != 1 else ''} moved, {counts['added']} added, "
                      f"{counts['removed']} removed")
            chunks += "".join(f", {counts[k]} {k}" for k in ("kept→dropped", "dropped→kept") if counts[k])
        selection = f"final selection: +{len(self.selection_added)} −{len(self.selection_removed)}"
        return f"{head}; {chunks}; {selection}"

    def to_dict(self) -> dict[str, Any]:
        """Everything as JSON-ready data (``ragstream runs diff A B --json``)."""
        answer_a, answer_b = self.answers()
        return {
            "a": {"label": self.a.label, "settings": _jsonable(self.a.settings)},
            "b": {"label": self.b.label, "settings": _jsonable(self.b.settings)},
            "summary": self.summary(),
            "inputs": self.inputs,
            "chunks": self.chunk_rows(),
            "moves": self.moves(),
            "selection": {"added": self.selection_added, "removed": self.selection_removed,
                          "kept": self.selection_kept},
            "prompt_diff": self.prompt_diff(),
            "answers": {"A": answer_a, "B": answer_b},
        }

    def text_lines(self) -> list[str]:
        """The comparison for a terminal: the summary, the inputs that differ, every chunk that
        moved, was added or removed (chunk id, stage, what, ranks, cause), the final
        selection's changes and the ``prompt_ready`` diff."""
        out = [f"A: {self.a.label}   B: {self.b.label}", self.summary(), ""]
        if self.inputs:
            out.append("Inputs that differ (A → B):")
            out += [f"  {r['input']}: {short_text(str(r['A']), VALUE_CHARS)} → "
                    f"{short_text(str(r['B']), VALUE_CHARS)}" for r in self.inputs]
        else:
            out.append("Inputs: the same.")
        out.append("")
        if self._moves:
            out.append("Chunks that moved, were added or removed (at the first stage where each "
                       "differs):")
            for m in self._moves:
                ranks = f"rank {_dash(m['rank A'])} → {_dash(m['rank B'])}"
                out.append(f"  {m['chunk id']}  {m['stage']}: {m['what']} ({ranks})"
                           + (f"; cause: {m['cause']}" if m["cause"] else ""))
        else:
            out.append("Chunks: no chunk moved.")
        out.append("")
        if self.selection_added or self.selection_removed:
            out.append(f"Final selection: {len(self.selection_kept)} in both; "
                       f"added in B: {', '.join(self.selection_added) or 'none'}; "
                       f"removed in B: {', '.join(self.selection_removed) or 'none'}")
        else:
            out.append(f"Final selection: the same chunks ({len(self.selection_kept)}).")
        diff = self.prompt_diff()
        out.append("")
        out += ["prompt_ready diff:", *diff] if diff else ["prompt_ready: the same."]
        return out

    # -- chart ---------------------------------------------------------------------------

    def bump_points(self, top: int = BUMP_TOP) -> list[dict[str, Any]]:
        """Long-format points for ``bump_chart``: the ``top`` chunks by their best rank at
        either run's latest chunk stage, one point per run and stage whose view has the chunk
        (run, stage, its place, chunk id, rank, status, the stage's reason, the cause)."""
        best: dict[str, int] = {}
        for side in (self.a, self.b):
            ran = [k for k in VIEW_KEYS if k in side.sp.views_by_stage]
            if ran:
                for r in side.sp.view(ran[-1]):
                    best[r.chunk_id] = min(best.get(r.chunk_id, r.rank), r.rank)
        chosen = set(sorted(best, key=lambda c: (best[c], c))[:top])
        stages = [k for k in VIEW_KEYS if k in self.a.sp.views_by_stage or k in self.b.sp.views_by_stage]
        out: list[dict[str, Any]] = []
        for letter, side in (("A", self.a), ("B", self.b)):
            for step, key in enumerate(stages):
                for r in side.sp.view(key):
                    if r.chunk_id in chosen:
                        out.append({"run": _run_name(letter, side), "side": letter,
                                    "stage": stage_title(key), "step": step, "chunk id": r.chunk_id,
                                    "best": best[r.chunk_id], "rank": r.rank,
                                    "status": r.status if r.status in STATUS_SHAPES else "dropped",
                                    "reason": r.reason or r.status,
                                    "cause": self._causes.get(r.chunk_id, "")})
        return out

    def bump_chart(self, top: int = BUMP_TOP) -> Any | None:
        """The two runs' rank-movement (bump) charts side by side, in the look of the page's
        (``charts.bump_chart``): a column per run, x the chunk stages, y the rank (1 at the top,
        the same scale in both), a line per chunk in the same colour in both runs, a cross
        where a stage dropped it; tooltips with the reason and the cause. None when neither run
        has a chunk stage."""
        import altair as alt
        import pandas as pd

        points = self.bump_points(top)
        if not points:
            return None
        frame = pd.DataFrame(points)
        runs = [_run_name("A", self.a), _run_name("B", self.b)]
        stages = [stage_title(k) for k in VIEW_KEYS
                  if k in self.a.sp.views_by_stage or k in self.b.sp.views_by_stage]
        order = frame.drop_duplicates("chunk id").sort_values(["best", "chunk id"])
        chunks = list(order["chunk id"])
        deepest = int(frame["rank"].max())
        x, y = bump_axes(stages, deepest)
        scale = alt.Scale(domain=chunks, scheme="tableau20")
        colour = alt.Color("chunk id:N", title=f"top {len(chunks)} chunks", scale=scale,
                           legend=alt.Legend(orient="bottom", columns=3, labelLimit=230,
                                             symbolType="stroke", symbolStrokeWidth=3))
        tooltip = [alt.Tooltip("run:N"), alt.Tooltip("chunk id:N", title="chunk"),
                   alt.Tooltip("stage:N"), alt.Tooltip("rank:Q"), alt.Tooltip("status:N"),
                   alt.Tooltip("reason:N"), alt.Tooltip("cause:N")]
        lines = alt.Chart().mark_line(strokeWidth=2, opacity=0.85).encode(
            x=x, y=y, color=colour, detail="chunk id:N", order=alt.Order("step:Q"), tooltip=tooltip)
        dots = alt.Chart().mark_point(size=70, filled=True, opacity=1, strokeWidth=2.5).encode(
            x=x, y=y, color=alt.Color("chunk id:N", scale=scale, legend=None),
            shape=status_shape(), tooltip=tooltip)
        return alt.layer(lines, dots, data=frame).properties(
            width=BUMP_RUN_WIDTH, height=BUMP_PLOT_HEIGHT,
        ).facet(
            column=alt.Column("run:N", sort=runs, title=None,
                              header=alt.Header(labelFontWeight="bold", labelFontSize=13,
                                                labelOrient="top")),
        ).properties(
            title=alt.TitleParams(f"Rank movement of the top {len(chunks)} chunks, {runs[0]} "
                                  f"and {runs[1]}",
                                  subtitle="a line per chunk across the stages, the same colour "
                                           "in both runs; a cross where a stage dropped it",
                                  anchor="start", offset=8),
            padding=CHART_PADDING,
        ).resolve_scale(y="shared", x="shared", color="shared")


def _run_name(letter: str, side: Side) -> str:
    """A run's name in the chart: ``A: run 12``."""
    return f"{letter}: {side.label}"


def _dash(value: Any) -> str:
    return EMPTY if value is None else str(value)


def _jsonable(value: Any) -> Any:
    """``value`` as JSON-ready data (a model dumped, anything else JSON cannot hold as text)."""
    return json.loads(json.dumps(value, default=lambda v: v.model_dump(mode="json")
                                 if isinstance(v, BaseModel) else str(v)))


def _answer(sp: SuperPrompt) -> dict[str, Any]:
    """A run's answer for ``Comparison.answers``."""
    ans = sp.answer
    if ans is None:
        return {"text": None, "confidence": None, "mode": None, "sources": []}
    sources = []
    for c in ans.sources:
        label = c.label or (f"{c.where} § {c.section}" if c.section else c.where)
        sources.append(f"[{c.n}] {label}")
    return {"text": ans.text, "confidence": ans.confidence, "mode": ans.mode, "sources": sources}


def compare(a: Side, b: Side) -> Comparison:
    """Run B against run A: the inputs that differ, each chunk's rank and status at each chunk
    stage with the move of B relative to A and its cause, the final selection's changes."""
    differ = _Differ(a, b)
    inputs = differ.inputs()
    sa, sb = a.sp, b.sp
    stages = [k for k in VIEW_KEYS if k in sa.views_by_stage or k in sb.views_by_stage]
    views_a = {k: {r.chunk_id: r for r in sa.view(k)} for k in stages if k in sa.views_by_stage}
    views_b = {k: {r.chunk_id: r for r in sb.view(k)} for k in stages if k in sb.views_by_stage}

    # each chunk's first stage (run by both) where its row differs, and its cause there
    first: dict[str, str] = {}
    for key in stages:
        if key in views_a and key in views_b:
            for chunk_id in dict.fromkeys([*views_a[key], *views_b[key]]):
                if chunk_id not in first and _differs(views_a[key].get(chunk_id),
                                                      views_b[key].get(chunk_id)):
                    first[chunk_id] = key
    causes = {c: differ.cause(c, key, bool(inputs)) for c, key in first.items()}

    rows: list[tuple[str, dict[str, Any]]] = []
    for key in stages:
        va, vb = views_a.get(key), views_b.get(key)
        stage_rows = []
        for chunk_id in dict.fromkeys([*(va or {}), *(vb or {})]):
            ra = va.get(chunk_id) if va is not None else None
            rb = vb.get(chunk_id) if vb is not None else None
            cause: str | None = None
            if va is None or vb is None:
                move, delta = f"not run in {'A' if va is None else 'B'}", None
            else:
                dropped = rb is None or (rb.status == "dropped" and ra is not None
                                         and ra.status != "dropped")
                move, delta = move_label(ra.rank if ra else None, rb.rank if rb else None, dropped)
                if _differs(ra, rb):
                    cause = causes.get(chunk_id, "")
            stage_rows.append({
                "stage": stage_title(key), "chunk id": chunk_id,
                "rank A": ra.rank if ra else None, "status A": ra.status if ra else None,
                "rank B": rb.rank if rb else None, "status B": rb.status if rb else None,
                "move": move, "Δ rank": delta, "cause": cause})
        stage_rows.sort(key=lambda r: (r["rank B"] is None, r["rank B"] or 0, r["rank A"] or 0,
                                       r["chunk id"]))
        rows += [(key, r) for r in stage_rows]

    moves: list[dict[str, Any]] = []
    for key in stages:
        here = []
        for chunk_id in (c for c, at in first.items() if at == key):
            ra, rb = views_a[key].get(chunk_id), views_b[key].get(chunk_id)
            here.append({"chunk id": chunk_id, "stage": stage_title(key), "what": _what(ra, rb),
                         "rank A": ra.rank if ra else None, "rank B": rb.rank if rb else None,
                         "status A": ra.status if ra else None,
                         "status B": rb.status if rb else None, "cause": causes[chunk_id]})
        here.sort(key=lambda m: (m["rank B"] is None, m["rank B"] or 0, m["rank A"] or 0,
                                 m["chunk id"]))
        moves += here

    final_a, final_b = sa.final_selection_ids, sb.final_selection_ids
    in_a, in_b = set(final_a), set(final_b)
    return Comparison(
        a=a, b=b, inputs=inputs,
        selection_added=[c for c in final_b if c not in in_a],
        selection_removed=[c for c in final_a if c not in in_b],
        selection_kept=[c for c in final_b if c in in_a],
        _rows=rows, _moves=moves, _causes=causes)


__all__ = ["CHUNK_COLUMNS", "VIEW_KEYS", "Comparison", "Side", "compare"]
