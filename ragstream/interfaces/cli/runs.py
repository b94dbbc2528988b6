"""The run history: ``ragstream runs list|show|diff|export|import`` (every pass of the page
and of ``ragstream run``, kept in <index_dir>/runs.sqlite3)."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import click

from ragstream.common.errors import RagstreamError
from ragstream.interfaces.cli.common import cut, fail, when

if TYPE_CHECKING:  # pragma: no cover
    from ragstream.workbench.runs import RunStore


@click.group(help="The run history: every pass of the page and of `ragstream run`, kept in "
                  "<index_dir>/runs.sqlite3 (runs.file and runs.keep in config/settings.json).")
def runs() -> None:
    """The ``ragstream runs`` commands: list, show, export and import saved runs."""


def _open_runs() -> RunStore:
    """The configured run history (nothing is read yet); exits 2 on a configuration error."""
    from ragstream.common.config import load_config
    from ragstream.workbench.runs import RunStore

    try:
        return RunStore.for_config(load_config())
    except RagstreamError as err:
        fail(err)


def _fail_history(err: Exception, path: Path) -> NoReturn:
    """Exit 2 with ``err``: a RAGstream error as ``_fail`` says it, an SQLite one naming the file."""
    if isinstance(err, RagstreamError):
        fail(err)
    click.echo(f"Error (run history): {path} cannot be read or written ({err}). If it is not a "
               f"RAGstream run history, move it away (a new one is created in its place).",
               err=True)
    sys.exit(2)


@runs.command(name="list", help="List the saved runs, newest first: id, time (UTC), stage "
                                "reached, prompt, the answer's first line, and what differed "
                                "from the configuration files (settings, filters, edits).")
@click.option("--json", "as_json", is_flag=True,
              help="Print a JSON list of the runs' meta (each with its id), newest first.")
@click.option("--search", default="", metavar="TEXT",
              help="Only runs whose prompt holds TEXT (any case).")
@click.option("--limit", type=click.IntRange(1, 100_000), default=50, show_default=True,
              help="At most this many runs.")
def runs_list(as_json: bool, search: str, limit: int) -> None:
    """Print the newest runs as a table or as JSON."""
    store = _open_runs()
    try:
        found = store.list(limit=limit, search=search)
    except (RagstreamError, sqlite3.Error) as err:
        _fail_history(err, store.path)
    if as_json:
        click.echo(json.dumps([m.model_dump(mode="json") for m in found], indent=2,
                              ensure_ascii=False))
        return
    if not found:
        click.echo(f"No run's prompt holds {search!r}." if search else
                   f"No runs saved yet in {store.path}: `ragstream run PROMPT` or the page saves one.")
        return
    from ragstream.interfaces.ui.views import value_label

    click.echo(f"{'id':>5}  {'time (UTC)':<19}  {'stage':<35}  {'prompt':<40}  {'answer':<40}  differs")
    for m in found:
        stage = value_label(m.stage, bool(m.answer))  # "A5 Format enforcer / Prompt Builder": both leave "a5"
        click.echo(f"{m.id:>5}  {when(m.created):<19}  {stage:<35}  {cut(m.prompt, 40):<40}  "
                   f"{cut(m.answer, 40) or '-':<40}  {'; '.join(m.differences()) or '-'}")


@runs.command(name="show", help="Show run ID: when and where it was saved, the prompt, what "
                                "differed from the configuration files, each stage's wall time, "
                                "the final selection's chunk ids and the answer.")
@click.argument("run_id", metavar="ID", type=int)
@click.option("--json", "as_json", is_flag=True,
              help="Print the run as JSON: its meta, 'sp' (the SuperPrompt) and 'stages'.")
def runs_show(run_id: int, as_json: bool) -> None:
    """Print one run as text or as JSON."""
    store = _open_runs()
    try:
        run = store.get(run_id)
    except (RagstreamError, sqlite3.Error) as err:
        _fail_history(err, store.path)
    if as_json:
        click.echo(json.dumps(run.model_dump(mode="json"), indent=2, ensure_ascii=False))
        return
    from ragstream.interfaces.ui.views import reached_label, stage_label

    sp = run.sp
    updated = f", updated {when(run.updated)}" if run.updated != run.created else ""
    click.echo(f"Run {run.id}: saved {when(run.created)} UTC{updated}, from {run.origin}"
               + (f", session {run.session}" if run.session else "")
               + (f", made from run {run.parent}" if run.parent is not None else ""))
    click.echo(f"Prompt: {run.prompt}")
    if sp.extras.reading is not None:
        click.echo(f"Read as: {sp.extras.reading.text}")
    click.echo(f"Stage reached: {reached_label(sp)}" + (f"   knowledge base: {run.kb}" if run.kb else ""))
    click.echo(f"Differs from the files: {'; '.join(run.differences()) or 'nothing'}")
    click.echo("Stage wall times (ms):" if sp.stage_runs else "Stage wall times: no stage ran")
    for stage_run in sp.stage_runs:
        click.echo(f"  {stage_label(stage_run.stage):<20} {stage_run.wall_ms:>10.1f}")
    if sp.answer is not None:
        click.echo(f"  {'answer':<20} {sp.answer.latency_ms:>10.1f}")
    click.echo(f"  {'total':<20} {run.wall_ms:>10.1f}")
    ids = sp.final_selection_ids
    click.echo(f"Final selection ({len(ids)} chunk{'s' if len(ids) != 1 else ''}):"
               + ("" if ids else " none"))
    for chunk_id in ids:
        click.echo(f"  {chunk_id}")
    if sp.answer is None:
        click.echo("Answer: none (not answered)")
    else:
        ans = sp.answer
        click.echo(f"Answer ({ans.mode}, confidence {ans.confidence}):")
        click.echo(ans.text)


@runs.command(name="diff", help="Compare run A with run B: the inputs that differ (prompt, "
                                "settings, filters, edits, knowledge base), every chunk that "
                                "moved, was added or was removed at each stage, by chunk id, "
                                "with its cause, the final selections and prompt_ready as a "
                                "unified diff.")
@click.argument("run_a", metavar="A", type=int)
@click.argument("run_b", metavar="B", type=int)
@click.option("--json", "as_json", is_flag=True,
              help="Print the comparison as JSON (inputs, chunks per stage, moves, selection, "
                   "prompt diff, answers).")
def runs_diff(run_a: int, run_b: int, as_json: bool) -> None:
    """Print what differs between two kept runs, and why each chunk moved."""
    from ragstream.common.config import load_config
    from ragstream.interfaces.ui.compare import Side, compare
    from ragstream.workbench.runs import RunStore

    try:
        cfg = load_config()
    except RagstreamError as err:
        fail(err)
    store = RunStore.for_config(cfg)
    try:
        a, b = store.get(run_a), store.get(run_b)
    except (RagstreamError, sqlite3.Error) as err:
        _fail_history(err, store.path)
    result = compare(Side(f"run {a.id}", a.sp, a.settings, cfg),
                     Side(f"run {b.id}", b.sp, b.settings, cfg))
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2, ensure_ascii=False))
        return
    for line in result.text_lines():
        click.echo(line)


@runs.command(name="export", help="Export run ID's SuperPrompt as JSON: the same file as the "
                                  "page's \"Download SuperPrompt (JSON)\"; `runs import` reads it.")
@click.argument("run_id", metavar="ID", type=int)
@click.option("--out", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Write the JSON to this file instead of printing it.")
def runs_export(run_id: int, out: str | None) -> None:
    """Print run ``run_id``'s SuperPrompt JSON, or write it to ``out``."""
    from ragstream.workbench.runs import export_json

    store = _open_runs()
    try:
        text = export_json(store.get(run_id))
    except (RagstreamError, sqlite3.Error) as err:
        _fail_history(err, store.path)
    if out:
        Path(out).write_text(text, encoding="utf-8")
        click.echo(f"run {run_id} exported to {out}", err=True)
    else:
        click.echo(text)


@runs.command(name="import", help="Import a SuperPrompt JSON file (from `runs export` or the "
                                  "page's download) as a new run, after checking it; prints the "
                                  "new run's id.")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
def runs_import(file: str) -> None:
    """Validate ``file`` and save it as a new run (origin "import"); print its id."""
    from ragstream.common.errors import RunFileError

    store = _open_runs()
    try:
        try:
            text = Path(file).read_text(encoding="utf-8-sig")
        except UnicodeDecodeError as err:
            raise RunFileError(f"{file} is not UTF-8 text ({err.reason} at byte {err.start}): "
                               f"a run file is the JSON `ragstream runs export` or the page's "
                               f"\"Download SuperPrompt (JSON)\" writes.") from None
        except OSError as err:
            raise RunFileError(f"{file} cannot be read ({err.strerror or err}): check that it "
                               f"is a readable file.") from None
        run_id = store.import_json(text, name=file)
    except (RagstreamError, sqlite3.Error) as err:
        _fail_history(err, store.path)
    click.echo(run_id)
