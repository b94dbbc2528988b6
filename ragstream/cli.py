"""Command line: ``python -m ragstream ingest PATH`` and ``python -m ragstream run "PROMPT"``."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from ragstream.controller import STAGE_NAMES
from ragstream.errors import RagstreamError

if TYPE_CHECKING:  # pragma: no cover
    # what click.progressbar returns; click annotates with it but does not export it
    from click._termui_impl import ProgressBar


def _engine():
    from ragstream.engine import Engine

    return Engine()


def _fail(err: RagstreamError) -> None:
    click.echo(f"Error ({err.kind}): {err}", err=True)
    sys.exit(2)


@click.group(help="RAGstream: turn a prompt into a grounded super-prompt, stage by stage.")
def main() -> None:
    """The ``ragstream`` command group; the subcommands do the work."""
    pass


@main.command(help="Ingest a folder (or one file) of .md/.txt into the knowledge base.")
@click.argument("path", type=click.Path(exists=True, file_okay=True, dir_okay=True))
@click.option("--prune/--no-prune", default=None,
              help="Remove documents of this folder whose files are gone (default: on for folders).")
@click.option("--json", "as_json", is_flag=True, help="Print the ingestion report as JSON.")
def ingest(path: str, prune: bool | None, as_json: bool) -> None:
    """Ingest ``path`` and print the report (text or JSON); exit 1 when any file failed."""
    try:
        report = _engine().ingest(path, prune=prune)
    except RagstreamError as err:
        _fail(err)
    if as_json:
        click.echo(report.model_dump_json(indent=2))
    else:
        click.echo(report.summary())
        for e in report.errors:
            click.echo(f"error: {e}", err=True)
        for w in report.warnings:
            click.echo(f"warning: {w}", err=True)
    if report.failed:
        sys.exit(1)


@main.command(help="Run the pipeline on PROMPT and print prompt_ready (or the SuperPrompt as JSON).")
@click.argument("prompt")
@click.option("--until", type=click.Choice(STAGE_NAMES), default=None,
              help="Stop after this stage (default: run all eight).")
@click.option("--json", "as_json", is_flag=True, help="Print the whole SuperPrompt as JSON.")
@click.option("--no-sync", is_flag=True,
              help="Do not bring the configured knowledge-base folder up to date first.")
@click.option("--answer", "with_answer", is_flag=True,
              help="After the eight stages, answer (streamed), then list sources and confidence.")
def run(prompt: str, until: str | None, as_json: bool, no_sync: bool, with_answer: bool) -> None:
    """Run the stages on ``prompt`` (syncing the KB first unless told not to) and print the result."""
    if with_answer and until:
        raise click.UsageError("--answer needs every stage to run; drop --until.")
    try:
        engine = _engine()
        if not no_sync:
            engine.ensure_knowledge_base()
        sp = engine.run(prompt, until=until)
        if with_answer:
            stream = None if as_json else (lambda piece: click.echo(piece, nl=False))
            sp, ans = engine.answer(sp, on_token=stream)
    except RagstreamError as err:
        _fail(err)
    if as_json:
        click.echo(sp.to_json())
    elif with_answer:
        _print_answer_footer(ans)
    else:
        click.echo(sp.prompt_ready)


def _print_answer_footer(ans) -> None:
    """After the streamed text: sources, invalid citations, confidence, mode."""
    click.echo("" if ans.text.endswith("\n") else "\n")
    sources = ans.sources
    click.echo("Sources:" if sources else "Sources: none cited")
    for c in sources:
        click.echo(f"  [{c.n}] {c.source} § {c.section}" if c.section else f"  [{c.n}] {c.source}")
    if ans.invalid_citations:
        nums = ", ".join(f"[{n}]" for n in ans.invalid_citations)
        click.echo(f"Invalid citations (no source has this number): {nums}")
    click.echo(f"Confidence: {ans.confidence} — {ans.confidence_reason}")
    click.echo(f"Mode: {ans.mode} — {ans.mode_reason}")


def _emit(result: dict, as_json: bool, out: str | None, as_text) -> None:
    """Print ``result`` as JSON or as text (``as_text(result)``); with ``out``, also write the JSON."""
    text = json.dumps(result, indent=2)
    if out:
        from pathlib import Path

        Path(out).write_text(text + "\n", encoding="utf-8")
    click.echo(text if as_json else as_text(result))


@main.command(help="Show the knowledge base: collection, documents, chunks, last ingest.")
def status() -> None:
    """Print the engine's knowledge-base status as JSON."""
    try:
        info = _engine().status()
    except RagstreamError as err:
        _fail(err)
    click.echo(json.dumps(info, indent=2))


def _stderr_progress() -> Callable[[str, int, int], None]:
    """A progress bar on stderr, one per phase ("index", "queries")."""
    bars: dict[str, ProgressBar[int]] = {}

    def progress(phase: str, done: int, total: int) -> None:
        bar = bars.get(phase)
        if bar is None:
            bar = click.progressbar(length=total, label=phase, file=sys.stderr, show_pos=True,
                                    show_eta=True)
            bar.__enter__()
            bars[phase] = bar
        if done > bar.pos:
            bar.update(done - bar.pos)
        if done >= total and phase in bars:
            bar.__exit__(None, None, None)
            del bars[phase]

    return progress


@main.command(name="eval", help="Measure retrieval quality and latency on a BEIR-format data set "
                                "(corpus.jsonl, queries.jsonl, qrels/SPLIT.tsv): BM25 only, "
                                "dense only, hybrid, and hybrid + rerank per backend.")
@click.option("--data", "data_dir", required=True,
              type=click.Path(exists=True, file_okay=False, dir_okay=True),
              help="The BEIR folder, e.g. ../shared/data/scifact.")
@click.option("--split", default="test", show_default=True, help="The qrels file: qrels/SPLIT.tsv.")
@click.option("--limit", type=click.IntRange(min=1), default=None,
              help="Only the first N judged queries.")
@click.option("--subset", type=click.Choice(["all", "even", "odd"]), default="all",
              show_default=True,
              help="Queries with even or odd numeric ids (a tuning / held-out split).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--out", type=click.Path(dir_okay=False), default=None,
              help="Also write the JSON result to this file.")
def eval_command(data_dir: str, split: str, limit: int | None, subset: str, as_json: bool,
                 out: str | None) -> None:
    """Evaluate retrieval on a BEIR data set and print a table or JSON (optionally also to a file)."""
    from ragstream.config import load_config
    from ragstream.evaluation import evaluate, format_table

    try:
        result = evaluate(data_dir, split, load_config(), limit=limit, subset=subset,
                          progress=_stderr_progress())
    except RagstreamError as err:
        _fail(err)
    _emit(result, as_json, out, format_table)


@main.command(help="Measure speed and size on this machine: ingestion against raw encoding, "
                   "retrieval at 10k and 100k chunks, rerank, the whole pipeline, a fresh CLI "
                   "run, peak memory; each figure next to its target.")
@click.option("--quick", is_flag=True, help="Everything small: a smoke run of well under a minute.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--out", type=click.Path(dir_okay=False), default=None,
              help="Also write the JSON result to this file.")
def bench(quick: bool, as_json: bool, out: str | None) -> None:
    """Run the benchmark and print the report or JSON (optionally also to a file)."""
    from ragstream.bench import format_report, run_bench

    try:
        result = run_bench(quick=quick, progress=_stderr_progress())
    except RagstreamError as err:
        _fail(err)
    _emit(result, as_json, out, format_report)
