"""Command line: ``python -m ragstream ingest PATH`` and ``python -m ragstream run "PROMPT"``."""

from __future__ import annotations

import json
import sys

import click

from ragstream.controller import STAGE_NAMES
from ragstream.errors import RagstreamError


def _engine():
    from ragstream.engine import Engine

    return Engine()


def _fail(err: RagstreamError) -> None:
    click.echo(f"Error ({err.kind}): {err}", err=True)
    sys.exit(2)


@click.group(help="RAGstream: turn a prompt into a grounded super-prompt, stage by stage.")
def main() -> None:
    pass


@main.command(help="Ingest a folder (or one file) of .md/.txt into the knowledge base.")
@click.argument("path", type=click.Path(exists=True, file_okay=True, dir_okay=True))
@click.option("--prune/--no-prune", default=None,
              help="Remove documents of this folder whose files are gone (default: on for folders).")
@click.option("--json", "as_json", is_flag=True, help="Print the ingestion report as JSON.")
def ingest(path: str, prune: bool | None, as_json: bool) -> None:
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
    if with_answer and until:
        raise click.UsageError("--answer needs every stage to run; drop --until.")
    try:
        engine = _engine()
        if not no_sync:
            engine.ensure_knowledge_base()
        sp = engine.run(prompt, until=until)
        if with_answer:
            from ragstream.answer import answer_and_log

            stream = None if as_json else (lambda piece: click.echo(piece, nl=False))
            sp, ans = answer_and_log(engine.cfg, engine.services, sp, on_token=stream)
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


@main.command(help="Show the knowledge base: collection, documents, chunks, last ingest.")
def status() -> None:
    try:
        info = _engine().status()
    except RagstreamError as err:
        _fail(err)
    click.echo(json.dumps(info, indent=2))
