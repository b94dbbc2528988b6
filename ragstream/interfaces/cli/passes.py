"""The pass: ``ragstream run "PROMPT"`` (the eight stages, edits, ``--answer``, ``--conversation
NAME``; the pass kept in the run history), ``find TEXT`` (chunk ids for ``--pin`` / ``--add``) and
``retrieve "QUERY"`` (the retrieval contract)."""

from __future__ import annotations

import json
import sqlite3
from typing import TYPE_CHECKING, Any

import click

from ragstream.common.errors import RagstreamError
from ragstream.interfaces import cli
from ragstream.interfaces.cli.common import fail, filter_option, kb_option

if TYPE_CHECKING:  # pragma: no cover
    from ragstream.state.super_prompt import Filters
    from ragstream.workbench.runs import StageSnapshot


class StageChoice(click.Choice):
    """``click.Choice`` of the stage names (``controller.STAGE_NAMES``), read from the stages when
    first needed (``run --help``, ``run --until``): listing the commands does not import them."""

    def __init__(self) -> None:
        self.case_sensitive = True

    @property
    def choices(self) -> tuple[Any, ...]:
        """The stage names, in the order they run."""
        from ragstream.stages.controller import STAGE_NAMES

        return tuple(STAGE_NAMES)

    @choices.setter
    def choices(self, value: tuple[Any, ...]) -> None:
        raise AttributeError("the stage names are the stages' own")


def _parse_sets(ctx: click.Context, param: click.Parameter,
                values: tuple[str, ...]) -> list[tuple[str, str]]:
    out = []
    for value in values:
        name, eq, text = value.partition("=")
        if not eq or not name.strip():
            raise click.BadParameter(f"{value!r}: write FIELD=VALUE, e.g. tone=formal.",
                                     param_hint="--set")
        out.append((name.strip(), text))
    return out


@click.command(help="Run the pipeline on PROMPT and print prompt_ready (or the SuperPrompt as JSON). "
                    "--pin, --exclude, --add and --set are your decisions for this prompt: the "
                    "stages apply them and the JSON records them under 'edits'. A new prompt "
                    "starts without another prompt's edits: --edits-from RUN_ID applies a kept "
                    "run's edits to this one too.")
@click.argument("prompt")
@click.option("--until", type=StageChoice(), default=None,
              help="Stop after this stage (default: run all eight).")
@click.option("--json", "as_json", is_flag=True, help="Print the whole SuperPrompt as JSON.")
@click.option("--no-sync", is_flag=True,
              help="Do not bring the configured knowledge-base folder up to date first.")
@click.option("--answer", "with_answer", is_flag=True,
              help="After the eight stages, answer (streamed), then list sources and confidence.")
@click.option("--pin", "pins", multiple=True, metavar="CHUNK_ID",
              help="Keep this chunk through A3 and A4, in the final selection (repeatable).")
@click.option("--exclude", "excludes", multiple=True, metavar="CHUNK_ID",
              help="Drop this chunk from Retrieval on (repeatable).")
@click.option("--add", "adds", multiple=True, metavar="CHUNK_ID",
              help="Bring this chunk in, pinned, though Retrieval does not return it (repeatable).")
@click.option("--set", "sets", multiple=True, metavar="FIELD=VALUE", callback=_parse_sets,
              help="Set a body field by hand, e.g. tone=formal or task='How …?' (repeatable).")
@click.option("--edits-from", "edits_from", type=int, default=None, metavar="RUN_ID",
              help="Apply the edits of kept run RUN_ID (`ragstream runs list`), made for its "
                   "prompt, to this prompt too; --pin, --exclude, --add and --set win over them.")
@filter_option
@click.option("--no-save", is_flag=True,
              help="Do not keep this pass in the run history (see `ragstream runs list`).")
@click.option("--conversation", "conversation", default=None, metavar="NAME",
              help="Continue the named conversation NAME of the knowledge base (--kb) (started "
                   "if new): its remembered turns are searched with that knowledge base, its last "
                   "turns go into the prompt, a follow-up PROMPT ('and on Windows?') is read with "
                   "them (said on stderr as 'read as: …'), and with --answer the answer becomes "
                   "its next turn. A conversation of another knowledge base is refused.")
@kb_option
def run(prompt: str, until: str | None, as_json: bool, no_sync: bool, with_answer: bool,
        pins: tuple[str, ...], excludes: tuple[str, ...], adds: tuple[str, ...],
        sets: list[tuple[str, str]], edits_from: int | None, filters: Filters, no_save: bool,
        conversation: str | None, kb: str | None) -> None:
    """Run the stages on ``prompt`` (syncing the KB first unless told not to) and print the
    result; every edit is checked before anything runs. Unless ``--no-save``, the pass (with
    its answer) is then kept as one run of the history, and ``run N saved`` said on stderr."""
    from ragstream.workbench.runs import StageSnapshot

    if with_answer and until:
        raise click.UsageError("--answer needs every stage to run; drop --until.")
    try:
        engine = cli._engine(kb)
        if not no_sync:
            engine.ensure_knowledge_base()
        source = engine.runs().get(edits_from).sp if edits_from is not None else None
        sp = engine.new(prompt, conversation_name=conversation or "", edits_from=source)
        sp.filters = filters
        for name, value in sets:
            sp = engine.set_field(sp, name, value)
        for chunk_ids, make in ((adds, engine.add_chunk), (pins, engine.pin),
                                (excludes, engine.exclude)):
            for chunk_id in chunk_ids:
                sp = make(sp, chunk_id)
        snapshots: dict[str, StageSnapshot] = {}
        sp = engine.run(sp, until=until,
                        on_stage=lambda name, state: snapshots.update(
                            {name: StageSnapshot.of(name, state)}))
        _print_reading(sp)
        if with_answer:
            stream = None if as_json else (lambda piece: click.echo(piece, nl=False))
            sp, ans = engine.answer(sp, on_token=stream)
    except RagstreamError as err:
        fail(err)
    if as_json:
        click.echo(sp.to_json())
    else:
        _print_edit_outcomes(sp)
        if with_answer:
            _print_answer_footer(ans, engine.kb)
            _print_turn(sp)
        else:
            click.echo(sp.prompt_ready)
    if not no_save:
        _save_run(engine, sp, snapshots)


def _save_run(engine, sp, stages: dict[str, StageSnapshot]) -> None:
    """Keep the pass ``ragstream run`` made as a run (origin "cli", no setting overrides) and
    say ``run N saved`` on stderr. A history that cannot be written is a warning, not a
    failure: the pass itself succeeded and its output is already printed."""
    try:
        run_id = engine.runs().save(sp, origin="cli", settings={}, stages=stages)
    except RagstreamError as err:
        click.echo(f"Warning ({err.kind}): {err} The run was not saved.", err=True)
    except (sqlite3.Error, OSError) as err:
        click.echo(f"Warning (run history): {engine.cfg.runs_path} could not be written ({err}). "
                   f"The run was not saved.", err=True)
    else:
        click.echo(f"run {run_id} saved", err=True)


def _print_edit_outcomes(sp) -> None:
    """Each edit and what became of it (the last stage that applied it), on stderr."""
    from ragstream.interfaces.ui.views import plain_names, stage_label
    from ragstream.state.edits import outcome
    from ragstream.state.records import short_text

    for edit in sp.edits:
        stage, note = outcome(sp, edit)
        said = (f"{stage_label(stage)}: {plain_names(note.note)}" if note
                else "not reached (its stage did not run)")
        made = f" (made for “{short_text(edit.carried_from)}”)" if edit.carried_from else ""
        click.echo(f"edit {edit.id}: {edit.describe()}{made} — {said}", err=True)


def _print_reading(sp) -> None:
    """How A0 read a follow-up with the conversation (``extras.reading``), on stderr before the
    answer: ``read as: <the standalone question>``; nothing when the prompt stands on its own."""
    reading = sp.extras.reading
    if reading is not None:
        click.echo(f"read as: {reading.text}" + (f" ({reading.note})" if reading.note else ""),
                   err=True)


def _print_turn(sp) -> None:
    """Which turn of its conversation the answer became, and whether it is remembered (stderr)."""
    turn = sp.extras.turn
    if turn is None:
        return
    if turn.error:
        click.echo(f"Warning (conversation): {turn.error}", err=True)
    elif turn.remembered:
        click.echo(f"turn {turn.turn} of conversation {turn.conversation!r} remembered", err=True)
    else:
        click.echo(f"turn {turn.turn} of conversation {turn.conversation!r} not remembered: "
                   f"{turn.why}", err=True)
    if turn.uses:
        click.echo(turn.uses, err=True)


def _print_answer_footer(ans, kb: str = "default") -> None:
    """After the streamed text: sources, invalid citations, confidence, mode, knowledge base."""
    click.echo("" if ans.text.endswith("\n") else "\n")
    if ans.unsupported:
        click.echo(f"UNSUPPORTED ANSWER — {ans.unsupported}.")
        if ans.extractive_text:
            click.echo("\nExtractive answer from the sources instead:\n")
            click.echo(ans.extractive_text)
    sources = ans.sources
    click.echo("Sources:" if sources else "Sources: none cited")
    for c in sources:
        click.echo(f"  [{c.n}] {c.where} § {c.section}" if c.section else f"  [{c.n}] {c.where}")
    if ans.invalid_citations:
        nums = ", ".join(f"[{n}]" for n in ans.invalid_citations)
        click.echo(f"Invalid citations (no source has this number): {nums}")
    why = ans.confidence_reason.removeprefix(f"{ans.confidence}: ")
    click.echo(f"Confidence: {ans.confidence}" + (f" — {why}" if why else ""))
    if ans.confidence_detail:
        click.echo(f"  figures: {ans.confidence_detail}")
    click.echo(f"Mode: {ans.mode} — {ans.mode_reason}")
    click.echo(f"Knowledge base: {kb}")


@click.command(help="Find chunks of the knowledge base by their text: every chunk that holds TEXT "
                    "(case and spacing aside), then the best keyword matches. Prints chunk ids for "
                    "run --pin / --add.")
@click.argument("text")
@click.option("--limit", type=click.IntRange(1, 200), default=10, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the matches as JSON.")
@click.option("--no-sync", is_flag=True,
              help="Do not bring the configured knowledge-base folder up to date first.")
@kb_option
def find(text: str, limit: int, as_json: bool, no_sync: bool, kb: str | None) -> None:
    """Search the whole knowledge base's text and print the chunks found."""
    try:
        engine = cli._engine(kb)
        if not no_sync:
            engine.ensure_knowledge_base()
        found = engine.find_chunks(text, limit)
    except RagstreamError as err:
        fail(err)
    if as_json:
        click.echo(json.dumps([{"chunk_id": c.id, "match": how, "label": c.citation_label,
                                "text": c.text} for c, how in found], indent=2))
        return
    if not found:
        click.echo("No chunk holds that text or its words.")
    for chunk, how in found:
        preview = " ".join(chunk.text.split())
        click.echo(f"{chunk.id}  [{how}]  {chunk.citation_label}\n    "
                   f"{preview[:150]}{'…' if len(preview) > 150 else ''}")


@click.command(help="Retrieve the chunks most relevant to QUERY (the retrieval contract: relevance "
                    "0-1, most relevant first) and print them as a table or as RAGContext JSON.")
@click.argument("query")
@click.option("--context-key", default="cli", show_default=True,
              help="'{channel_id}:{user_id}'; with the query, the cache key.")
@click.option("--max-chunks", type=int, default=None,
              help="At most this many chunks, 1-100 (default: retrieval.max_chunks).")
@click.option("--min-relevance", type=float, default=None,
              help="Keep chunks at or above this relevance, 0-1 (default: retrieval.min_relevance).")
@filter_option
@click.option("--json", "as_json", is_flag=True, help="Print the RAGContext as JSON.")
@click.option("--no-sync", is_flag=True,
              help="Do not bring the configured knowledge-base folder up to date first.")
@kb_option
def retrieve(query: str, context_key: str, max_chunks: int | None, min_relevance: float | None,
             filters: Filters, as_json: bool, no_sync: bool, kb: str | None) -> None:
    """Retrieve for ``query`` with ``RAGPipeline`` and print a table or the JSON."""
    from ragstream.workbench.api import RAGPipeline

    try:
        engine = cli._engine(kb)
        if not no_sync:
            engine.ensure_knowledge_base()
        pipeline = RAGPipeline(engine)
        try:
            ctx = pipeline.retrieve(query, context_key, max_chunks=max_chunks,
                                    min_relevance=min_relevance, filters=filters)
        finally:
            pipeline.close()
    except RagstreamError as err:
        fail(err)
    if as_json:
        click.echo(ctx.model_dump_json(indent=2))
        return
    if not ctx.document_chunks:
        click.echo(f"No chunks in knowledge base {ctx.kb!r}: {ctx.no_documents_reason}")
        return
    click.echo(f"{'#':>2}  {'relevance':>9}  {'type':<10}  {'updated':<10}  source § section")
    for i, c in enumerate(ctx.document_chunks, 1):
        m = c.metadata
        where = f"{m.get('source', '')} § {m['section']}" if m.get("section") else m.get("source", "")
        click.echo(f"{i:>2}  {c.relevance_score:>9.3f}  {m.get('doc_type', ''):<10}  "
                   f"{m.get('last_update_date', ''):<10}  {where}")
        text = " ".join(c.text.split())
        click.echo(f"{'':>4}{text[:100]}{'…' if len(text) > 100 else ''}")
    click.echo(f"{ctx.total_chunks} chunk{'s' if ctx.total_chunks != 1 else ''}, average relevance "
               f"{ctx.avg_relevance:.3f} (min {ctx.min_relevance:g})" + (" (cached)" if ctx.cached else "")
               + f", from knowledge base {ctx.kb!r}")
