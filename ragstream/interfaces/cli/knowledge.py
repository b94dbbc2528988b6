"""The knowledge bases: ``ragstream ingest [PATH]`` (with a progress bar on a terminal),
``kb list|create|rename|delete``, ``status`` and ``repair``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from ragstream.common.errors import RagstreamError
from ragstream.interfaces import cli
from ragstream.interfaces.cli.common import fail, kb_option


@click.command(help="Ingest a folder (or one file) of Markdown, text, PDF, DOCX, PPTX, HTML or EPUB "
                    "into the knowledge base (without PATH: the knowledge base's own folder). On a "
                    "terminal a progress bar shows files done of total, chunks written, elapsed and "
                    "remaining time and the current file; Ctrl-C stops after the current file, "
                    "leaving every document written whole.")
@click.argument("path", required=False, type=click.Path(exists=True, file_okay=True, dir_okay=True))
@click.option("--prune/--no-prune", default=None,
              help="Remove documents of this folder whose files are gone (default: on for folders).")
@click.option("--json", "as_json", is_flag=True, help="Print the ingestion report as JSON.")
@click.option("--quiet", "-q", is_flag=True,
              help="No progress bar (there is none either when stderr is not a terminal).")
@kb_option
def ingest(path: str | None, prune: bool | None, as_json: bool, kb: str | None,
           quiet: bool) -> None:
    """Ingest ``path`` and print the report (text or JSON); exit 1 when any file failed, 130
    when it was cancelled (Ctrl-C during the progress bar)."""
    from ragstream.knowledge.bases import DEFAULT as DEFAULT_KB

    try:
        engine = cli._engine(kb)
        if quiet or not sys.stderr.isatty():
            report = engine.ingest(path, prune=prune)
        else:
            report = _ingest_with_bar(engine, path, prune)
    except RagstreamError as err:
        fail(err)
    if as_json:
        click.echo(report.model_dump_json(indent=2))
    else:
        click.echo(report.summary())
        for e in report.errors:
            click.echo(f"error: {e}", err=True)
        for w in report.warnings:
            click.echo(f"warning: {w}", err=True)
    if path and kb is None and engine.kb == DEFAULT_KB:
        click.echo(mixed_note(engine, path), err=True)
    if report.cancelled:
        sys.exit(130)
    if report.failed:
        sys.exit(1)


def mixed_note(engine, path: str) -> str:
    """What an ``ingest PATH`` without ``--kb`` must say: the documents went into the default
    knowledge base, which also holds (and every ``run`` and the page keep in sync) the bundled
    example documents; how to keep a person's own documents apart."""
    bundled = sum(1 for f in Path(engine.cfg.kb_dir).rglob("*") if f.is_file())
    name = Path(path).resolve().name or "docs"
    return (f"note: {path} went into knowledge base {engine.kb!r}, which also holds the "
            f"{bundled} bundled example documents of {engine.cfg.kb_dir} (RAGstream's own "
            f"manual: `run` and the page keep them in sync), so answers may cite them too. To "
            f"keep your documents apart: `ragstream kb create {name} --folder {path}`, then "
            f"`ragstream ingest --kb {name}` and `ragstream run --kb {name} \"…\"`.")


def _ingest_with_bar(engine, path: str | None, prune: bool | None):
    """``engine.ingest(path)`` as a background job (``ragstream.knowledge.ingest.jobs``) followed by a
    progress bar on stderr (tqdm): files done of total, chunks written, elapsed and remaining
    time, the current file. Ctrl-C cancels it between files; the report then says so."""
    from tqdm import tqdm

    from ragstream.knowledge.ingest.jobs import REGISTRY

    source = str(Path(path).resolve()) if path else str(engine.cfg.kb_dir)
    job = REGISTRY.start(engine.kb, engine.cfg.settings.vector_store.collection, "folder",
                         source, lambda: engine.ingest(path, prune=prune))
    bar = tqdm(total=0, file=sys.stderr, unit="file", dynamic_ncols=True, leave=True,
               desc=f"ingesting into {engine.kb} ",
               bar_format="{desc}{percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} files{postfix}")

    def draw() -> None:
        p = job.progress()
        bar.total, bar.n = max(p.total, 1), p.done
        now = "cancelling after this file" if p.stopping else p.current
        bar.set_postfix_str(f"{p.so_far()}{' · ' + now if now else ''}", refresh=False)
        bar.refresh()

    try:
        while True:
            try:
                if job.wait(0.25):
                    break
                draw()
            except KeyboardInterrupt:
                if job.watch.stopping:  # a second Ctrl-C: stop now (the store stays readable)
                    raise
                job.cancel()
        draw()
    finally:
        bar.close()
    if job.error:
        kind, message = job.error
        click.echo(f"Error ({kind}): {message}", err=True)
        sys.exit(2)
    return job.result


@click.group(name="kb", help="The knowledge bases: each with its own documents folder and index. "
                             "The bundled documents are 'default'; --kb NAME on ingest, run, "
                             "retrieve, find, eval and status picks another.")
def kb_group() -> None:
    """The ``ragstream kb`` command group."""
    pass


@kb_group.command(name="list", help="List the knowledge bases: name, documents, chunks, folder.")
@click.option("--json", "as_json", is_flag=True, help="Print them as JSON.")
def kb_list(as_json: bool) -> None:
    """Print every knowledge base with its counts (read from its store)."""
    try:
        engine = cli._engine()
        rows = []
        for kb in engine.knowledge_bases().all():
            info = engine.for_kb(kb.name).status()
            rows.append({**kb.model_dump(), "documents": info["documents"], "chunks": info["chunks"],
                         "last_ingest": info["last_ingest"]})
    except RagstreamError as err:
        fail(err)
    if as_json:
        click.echo(json.dumps(rows, indent=2, ensure_ascii=False))
        return
    click.echo(f"{'name':<20}  {'documents':>9}  {'chunks':>7}  folder")
    for r in rows:
        click.echo(f"{r['name']:<20}  {r['documents']:>9}  {r['chunks']:>7}  {r['folder']}")


@kb_group.command(name="create", help="Create knowledge base NAME with its own index; its documents "
                                      "folder is --folder (made when missing) or a new folder of its "
                                      "own. Then: ragstream ingest --kb NAME [PATH].")
@click.argument("name")
@click.option("--folder", default=None, type=click.Path(file_okay=False),
              help="The folder of its documents (default: one made under paths.kbs_dir).")
def kb_create(name: str, folder: str | None) -> None:
    """Register a new knowledge base and say where its documents go."""
    try:
        kb = cli._engine().create_kb(name, folder)
    except RagstreamError as err:
        fail(err)
    click.echo(f"knowledge base {kb.name!r} created; its documents folder: {kb.folder}\n"
               f"ingest into it: python -m ragstream ingest --kb {_quote(kb.name)}")


@kb_group.command(name="rename", help="Rename knowledge base NAME to NEW_NAME (its documents and "
                                      "index stay where they are).")
@click.argument("name")
@click.argument("new_name")
def kb_rename(name: str, new_name: str) -> None:
    """Rename a knowledge base."""
    try:
        kb = cli._engine().rename_kb(name, new_name)
    except RagstreamError as err:
        fail(err)
    click.echo(f"knowledge base {name!r} is now {kb.name!r}")


@kb_group.command(name="delete", help="Delete knowledge base NAME: its index, and its folder when "
                                      "RAGstream made it (a folder you named is left as it is). "
                                      "Asks first; never touches another knowledge base.")
@click.argument("name")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def kb_delete(name: str, yes: bool) -> None:
    """Delete a knowledge base after confirmation."""
    try:
        engine = cli._engine()
        kb = engine.knowledge_bases().get(name)
        if not yes and not kb.is_default:
            docs = engine.for_kb(kb.name).status()["documents"]
            what = (f"its index ({docs} document(s))"
                    + (f" and its folder {kb.folder}" if kb.own_folder else
                       f"; its folder {kb.folder} is left as it is"))
            click.confirm(f"Delete knowledge base {kb.name!r}: {what}?", abort=True, err=True)
        gone = engine.delete_kb(kb.name)
    except RagstreamError as err:
        fail(err)
    click.echo(f"knowledge base {gone.name!r} deleted")


def _quote(name: str) -> str:
    return f"'{name}'" if " " in name else name


@click.command(help="Show the knowledge base: its name, folder, collection, documents, chunks, "
                    "last ingest.")
@kb_option
def status(kb: str | None) -> None:
    """Print the engine's knowledge-base status as JSON."""
    try:
        info = cli._engine(kb).status()
    except RagstreamError as err:
        fail(err)
    click.echo(json.dumps(info, indent=2))


@click.command(help="Check the knowledge base's files and rebuild what can be rebuilt: the index "
                    "snapshot from the store; a store that cannot be read is moved to "
                    "<index_dir>/backup-<timestamp>/ and the knowledge-base folder ingested again. "
                    "Source documents are never changed or deleted.")
@click.option("--check", "check_only", is_flag=True,
              help="Only say what is wrong; change nothing (exit 1 when something is).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def repair(check_only: bool, as_json: bool) -> None:
    """Print what ``doctor.repair`` found and did; exit 1 when a problem is left."""
    from ragstream.common.config import load_config
    from ragstream.interfaces.doctor import repair as run_repair

    try:
        report = run_repair(load_config(), check_only=check_only)
    except RagstreamError as err:
        fail(err)
    click.echo(report.model_dump_json(indent=2) if as_json else "\n".join(report.lines()))
    if not report.healthy:
        sys.exit(1)
