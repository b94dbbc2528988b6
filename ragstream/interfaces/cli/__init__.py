"""Command line: ``python -m ragstream ingest PATH``, ``python -m ragstream run "PROMPT"``,
``python -m ragstream retrieve "QUERY"``, ``python -m ragstream serve``, the run history
(``runs list|show|export|import``), the knowledge bases (``kb list|create|rename|delete`` and
``--kb NAME`` on ingest, run, retrieve, find, eval, status) and the named conversations
(``run --answer --conversation NAME``, ``conversation list|show|forget|delete``)."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import click
from pydantic import ValidationError

from ragstream.common.errors import RagstreamError
from ragstream.knowledge.bases import DEFAULT as DEFAULT_KB
from ragstream.stages.controller import STAGE_NAMES
from ragstream.state.super_prompt import Filters
from ragstream.workbench.runs import RunStore, StageSnapshot

if TYPE_CHECKING:  # pragma: no cover
    # what click.progressbar returns; click annotates with it but does not export it
    from click._termui_impl import ProgressBar


def _engine(kb: str | None = None):
    from ragstream.workbench.engine import Engine

    return Engine(kb=kb)


def _kb_option(command: Callable) -> Callable:
    return click.option("--kb", "kb", default=None, metavar="NAME", envvar="RAGSTREAM_KB",
                        help="The knowledge base to work on (default: the bundled one, 'default'; "
                             "`ragstream kb list` lists them; also $RAGSTREAM_KB).")(command)


def _fail(err: RagstreamError) -> NoReturn:
    click.echo(f"Error ({err.kind}): {err}", err=True)
    sys.exit(2)


#: the keys ``--filter`` takes: the fields of ``Filters``
FILTER_KEYS = tuple(Filters.model_fields)
_LIST_KEYS = ("doc_type", "source")
FILTER_HELP = ("Only chunks whose document matches, KEY=VALUE, repeatable: doc_type=faq (several: "
               "doc_type=faq,ops), source=faq/* (a path pattern or a declared source name), "
               "updated_from=2025-01-01, updated_to=2025-12-31 (dates YYYY-MM-DD, inclusive).")


def parse_filters(values: tuple[str, ...] | list[str]) -> Filters:
    """``("doc_type=faq,ops", "updated_from=2025-01-01")`` → ``Filters``; ``click.BadParameter``
    names the allowed keys or the date format when a value is wrong."""
    fields: dict[str, list[str] | str] = {}
    for value in values:
        key, eq, raw = value.partition("=")
        key, raw = key.strip(), raw.strip()
        if not eq or key not in FILTER_KEYS:
            raise click.BadParameter(f"{value!r}: write KEY=VALUE with KEY one of "
                                     f"{', '.join(FILTER_KEYS)}.", param_hint="--filter")
        if key in _LIST_KEYS:
            items = [v.strip() for v in raw.split(",") if v.strip()]
            if not items:
                raise click.BadParameter(f"{value!r}: give at least one value, e.g. {key}=faq or "
                                         f"{key}=faq,ops.", param_hint="--filter")
            listed = fields.setdefault(key, [])
            assert isinstance(listed, list)
            listed.extend(v for v in items if v not in listed)
        elif key in fields:
            raise click.BadParameter(f"{key} is given twice; give it once.", param_hint="--filter")
        else:
            fields[key] = raw
    try:
        return Filters.model_validate(fields)
    except ValidationError as err:  # a bad date, or updated_from after updated_to
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'dates'}: {e['msg']}"
                             for e in err.errors())
        raise click.BadParameter(f"{problems}. Dates are YYYY-MM-DD (e.g. "
                                 f"updated_from=2025-01-01), updated_from not after updated_to.",
                                 param_hint="--filter") from None


def _filters_option(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> Filters:
    return parse_filters(values)


def _filter_option(command: Callable) -> Callable:
    return click.option("--filter", "filters", multiple=True, metavar="KEY=VALUE",
                        callback=_filters_option, help=FILTER_HELP)(command)


@click.group(help="RAGstream: turn a prompt into a grounded super-prompt, stage by stage.")
def main() -> None:
    """The ``ragstream`` command group; the subcommands do the work."""
    pass


@main.command(help="Ingest a folder (or one file) of Markdown, text, PDF, DOCX, PPTX, HTML or EPUB "
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
@_kb_option
def ingest(path: str | None, prune: bool | None, as_json: bool, kb: str | None,
           quiet: bool) -> None:
    """Ingest ``path`` and print the report (text or JSON); exit 1 when any file failed, 130
    when it was cancelled (Ctrl-C during the progress bar)."""
    try:
        engine = _engine(kb)
        if quiet or not sys.stderr.isatty():
            report = engine.ingest(path, prune=prune)
        else:
            report = _ingest_with_bar(engine, path, prune)
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


@main.command(help="Run the pipeline on PROMPT and print prompt_ready (or the SuperPrompt as JSON). "
                   "--pin, --exclude, --add and --set are your decisions for this prompt: the "
                   "stages apply them and the JSON records them under 'edits'. A new prompt "
                   "starts without another prompt's edits: --edits-from RUN_ID applies a kept "
                   "run's edits to this one too.")
@click.argument("prompt")
@click.option("--until", type=click.Choice(STAGE_NAMES), default=None,
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
@_filter_option
@click.option("--no-save", is_flag=True,
              help="Do not keep this pass in the run history (see `ragstream runs list`).")
@click.option("--conversation", "conversation", default=None, metavar="NAME",
              help="Continue the named conversation NAME of the knowledge base (--kb) (started "
                   "if new): its remembered turns are searched with that knowledge base, its last "
                   "turns go into the prompt, a follow-up PROMPT ('and on Windows?') is read with "
                   "them (said on stderr as 'read as: …'), and with --answer the answer becomes "
                   "its next turn. A conversation of another knowledge base is refused.")
@_kb_option
def run(prompt: str, until: str | None, as_json: bool, no_sync: bool, with_answer: bool,
        pins: tuple[str, ...], excludes: tuple[str, ...], adds: tuple[str, ...],
        sets: list[tuple[str, str]], edits_from: int | None, filters: Filters, no_save: bool,
        conversation: str | None, kb: str | None) -> None:
    """Run the stages on ``prompt`` (syncing the KB first unless told not to) and print the
    result; every edit is checked before anything runs. Unless ``--no-save``, the pass (with
    its answer) is then kept as one run of the history, and ``run N saved`` said on stderr."""
    if with_answer and until:
        raise click.UsageError("--answer needs every stage to run; drop --until.")
    try:
        engine = _engine(kb)
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
        _fail(err)
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


@main.group(help="The run history: every pass of the page and of `ragstream run`, kept in "
                 "<index_dir>/runs.sqlite3 (runs.file and runs.keep in config/settings.json).")
def runs() -> None:
    """The ``ragstream runs`` commands: list, show, export and import saved runs."""


def _open_runs() -> RunStore:
    """The configured run history (nothing is read yet); exits 2 on a configuration error."""
    from ragstream.common.config import load_config

    try:
        return RunStore.for_config(load_config())
    except RagstreamError as err:
        _fail(err)


def _fail_history(err: Exception, path: Path) -> NoReturn:
    """Exit 2 with ``err``: a RAGstream error as ``_fail`` says it, an SQLite one naming the file."""
    if isinstance(err, RagstreamError):
        _fail(err)
    click.echo(f"Error (run history): {path} cannot be read or written ({err}). If it is not a "
               f"RAGstream run history, move it away (a new one is created in its place).",
               err=True)
    sys.exit(2)


def _when(iso: str) -> str:
    """``2025-06-01T12:34:56.789Z`` → ``2025-06-01 12:34:56`` (UTC), for tables."""
    return iso[:19].replace("T", " ")


def _cut(text: str, width: int) -> str:
    """``text`` on one line, at most ``width`` characters (an ellipsis marks a cut)."""
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"


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
        click.echo(f"{m.id:>5}  {_when(m.created):<19}  {stage:<35}  {_cut(m.prompt, 40):<40}  "
                   f"{_cut(m.answer, 40) or '-':<40}  {'; '.join(m.differences()) or '-'}")


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
    updated = f", updated {_when(run.updated)}" if run.updated != run.created else ""
    click.echo(f"Run {run.id}: saved {_when(run.created)} UTC{updated}, from {run.origin}"
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

    try:
        cfg = load_config()
    except RagstreamError as err:
        _fail(err)
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


@main.command(help="Find chunks of the knowledge base by their text: every chunk that holds TEXT "
                   "(case and spacing aside), then the best keyword matches. Prints chunk ids for "
                   "run --pin / --add.")
@click.argument("text")
@click.option("--limit", type=click.IntRange(1, 200), default=10, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the matches as JSON.")
@click.option("--no-sync", is_flag=True,
              help="Do not bring the configured knowledge-base folder up to date first.")
@_kb_option
def find(text: str, limit: int, as_json: bool, no_sync: bool, kb: str | None) -> None:
    """Search the whole knowledge base's text and print the chunks found."""
    try:
        engine = _engine(kb)
        if not no_sync:
            engine.ensure_knowledge_base()
        found = engine.find_chunks(text, limit)
    except RagstreamError as err:
        _fail(err)
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


@main.command(help="Retrieve the chunks most relevant to QUERY (the retrieval contract: relevance "
                   "0-1, most relevant first) and print them as a table or as RAGContext JSON.")
@click.argument("query")
@click.option("--context-key", default="cli", show_default=True,
              help="'{channel_id}:{user_id}'; with the query, the cache key.")
@click.option("--max-chunks", type=int, default=None,
              help="At most this many chunks, 1-100 (default: retrieval.max_chunks).")
@click.option("--min-relevance", type=float, default=None,
              help="Keep chunks at or above this relevance, 0-1 (default: retrieval.min_relevance).")
@_filter_option
@click.option("--json", "as_json", is_flag=True, help="Print the RAGContext as JSON.")
@click.option("--no-sync", is_flag=True,
              help="Do not bring the configured knowledge-base folder up to date first.")
@_kb_option
def retrieve(query: str, context_key: str, max_chunks: int | None, min_relevance: float | None,
             filters: Filters, as_json: bool, no_sync: bool, kb: str | None) -> None:
    """Retrieve for ``query`` with ``RAGPipeline`` and print a table or the JSON."""
    from ragstream.workbench.api import RAGPipeline

    try:
        engine = _engine(kb)
        if not no_sync:
            engine.ensure_knowledge_base()
        pipeline = RAGPipeline(engine)
        try:
            ctx = pipeline.retrieve(query, context_key, max_chunks=max_chunks,
                                    min_relevance=min_relevance, filters=filters)
        finally:
            pipeline.close()
    except RagstreamError as err:
        _fail(err)
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


@main.command(help="Serve the retrieval contract over HTTP (FastAPI + uvicorn): GET /health, "
                   "POST /retrieve, /ingest, /answer (Server-Sent Events); schema at /openapi.json.")
@click.option("--host", default="127.0.0.1", show_default=True, help="The address to listen on.")
@click.option("--port", type=click.IntRange(1, 65535), default=8700, show_default=True,
              help="The port to listen on.")
@click.option("--token-env", default="RAGSTREAM_API_TOKEN", show_default=True,
              help="The environment variable holding a full (read and write) bearer token; when "
                   "it is set, every endpoint but /health needs 'Authorization: Bearer <token>'.")
@click.option("--tokens-file", type=click.Path(dir_okay=False), default=None,
              help="A JSON file of tokens with scopes (read, write) and knowledge bases "
                   "(default: $RAGSTREAM_API_TOKENS_FILE); see docs/service.md.")
@click.option("--workers", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Worker processes over one listening socket, each with its own engine over the "
                   "knowledge base's folder (no corpus copy; each loads the models). 1 serves in "
                   "this process; on a machine with C cores, C workers serve the most requests/s.")
def serve(host: str, port: int, token_env: str, tokens_file: str | None, workers: int) -> None:
    """Build the pipeline, warm its models up and serve it until interrupted (with
    ``--workers N`` > 1, every worker process builds its own: ``http.serve_workers``). Off
    loopback only with a token; an empty knowledge base is named with the command that fills it."""
    import os

    from ragstream.interfaces.service.auth import TOKENS_FILE_ENV, require_token_off_loopback
    from ragstream.interfaces.service.http import serve as run_service
    from ragstream.interfaces.service.http import serve_workers
    from ragstream.workbench.api import RAGPipeline

    tokens = _tokens(token_env, tokens_file)
    try:
        require_token_off_loopback(host, tokens, "serve", token_env)
        engine = _engine()  # a bad configuration fails here, before any worker starts
    except RagstreamError as err:
        _fail(err)
    if workers == 1:
        try:
            engine.warm_up()
        except RagstreamError as err:  # e.g. the Chroma server is down: /health says so
            click.echo(f"Warning ({err.kind}): {err}", err=True)
    click.echo(f"RAGstream service on http://{host}:{port} (schema: /openapi.json)"
               + (f", {workers} worker processes" if workers > 1 else "") + "; "
               + tokens.describe()
               + ("" if tokens else f" (set ${token_env} to require one)") + ".", err=True)
    _say_if_empty(engine)
    if workers > 1:
        del engine  # each worker builds and warms up its own
        if tokens_file:
            os.environ[TOKENS_FILE_ENV] = str(Path(tokens_file).resolve())
        serve_workers(host, port, workers, token_env if os.environ.get(token_env) else None)
        return
    run_service(RAGPipeline(engine), host, port, tokens=tokens)


def _tokens(token_env: str, tokens_file: str | None):
    """The tokens of ``$token_env`` and the tokens file (``auth.Tokens.load``); exit 2 when
    the variable is set but empty or the file is bad."""
    from ragstream.interfaces.service.auth import Tokens

    try:
        return Tokens.load(token_env, tokens_file)
    except RagstreamError as err:
        _fail(err)


def _say_if_empty(engine) -> None:
    """A start-up line when the served knowledge base has no chunk: how to fill it."""
    from ragstream.interfaces.service.http import empty_message

    try:
        chunks = engine.services.index().n_chunks
    except RagstreamError:
        return  # the store is down: the warning above and /health say so
    if not chunks:
        click.echo(f"Warning (empty knowledge base): {empty_message(engine.kb)}", err=True)


@main.command("mcp", help="Serve the knowledge bases as an MCP server (tools: search, answer, "
                          "get_chunk, get_document, list_knowledge_bases): over stdin/stdout for a "
                          "desktop app or an editor, or with --http as streamable HTTP at /mcp.")
@click.option("--http", "over_http", is_flag=True,
              help="Serve streamable HTTP on --host:--port (at /mcp) instead of stdio.")
@click.option("--host", default="127.0.0.1", show_default=True, help="--http: the address.")
@click.option("--port", type=click.IntRange(1, 65535), default=8765, show_default=True,
              help="--http: the port.")
@click.option("--token-env", default="RAGSTREAM_API_TOKEN", show_default=True,
              help="--http: the environment variable holding a full (read and write) bearer "
                   "token; when it is set, every request needs 'Authorization: Bearer <token>'.")
@click.option("--tokens-file", type=click.Path(dir_okay=False), default=None,
              help="--http: a JSON file of tokens with scopes and knowledge bases (default: "
                   "$RAGSTREAM_API_TOKENS_FILE); see docs/service.md.")
@click.option("--allow-ingest", is_flag=True,
              help="Also offer the ingest tool (writing documents); off by default.")
def mcp(over_http: bool, host: str, port: int, token_env: str, tokens_file: str | None,
        allow_ingest: bool) -> None:
    """Build the pipeline and serve it over MCP until the client leaves (stdio) or until
    interrupted (--http; off loopback only with a token). On stdio, stdout is the protocol's:
    everything else goes to stderr."""
    from ragstream.interfaces.service import mcp_server
    from ragstream.interfaces.service.auth import Tokens, require_token_off_loopback
    from ragstream.workbench.api import RAGPipeline

    tokens = _tokens(token_env, tokens_file) if over_http else Tokens()
    if over_http:
        try:
            require_token_off_loopback(host, tokens, "mcp --http", token_env)
        except RagstreamError as err:
            _fail(err)
    # on stdio, stdout is the protocol's from the first byte: whatever the start-up prints goes
    # to stderr (the SDK itself diverts stdout once it serves)
    quiet = contextlib.nullcontext() if over_http else contextlib.redirect_stdout(sys.stderr)
    try:
        with quiet:
            engine = _engine()
            engine.warm_up()
    except RagstreamError as err:
        _fail(err)
    pipeline = RAGPipeline(engine)
    if not over_http:
        mcp_server.serve_stdio(pipeline, allow_ingest)
        return
    click.echo(f"RAGstream MCP server on http://{host}:{port}{mcp_server.HTTP_PATH}; "
               + tokens.describe() + ("" if tokens else f" (set ${token_env} to require one)")
               + "." + (" The ingest tool is on." if allow_ingest else ""), err=True)
    _say_if_empty(engine)
    mcp_server.serve_http(pipeline, host, port, allow_ingest=allow_ingest, tokens=tokens)


def _emit(result: dict, as_json: bool, out: str | None, as_text) -> None:
    """Print ``result`` as JSON or as text (``as_text(result)``); with ``out``, also write the JSON."""
    text = json.dumps(result, indent=2)
    if out:
        from pathlib import Path

        Path(out).write_text(text + "\n", encoding="utf-8")
    click.echo(text if as_json else as_text(result))


@main.command(help="Show the knowledge base: its name, folder, collection, documents, chunks, "
                   "last ingest.")
@_kb_option
def status(kb: str | None) -> None:
    """Print the engine's knowledge-base status as JSON."""
    try:
        info = _engine(kb).status()
    except RagstreamError as err:
        _fail(err)
    click.echo(json.dumps(info, indent=2))


@main.command(help="Check the knowledge base's files and rebuild what can be rebuilt: the index "
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
        _fail(err)
    click.echo(report.model_dump_json(indent=2) if as_json else "\n".join(report.lines()))
    if not report.healthy:
        sys.exit(1)


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


def _parse_chunks(ctx: click.Context, param: click.Parameter, value: str) -> tuple[int, ...]:
    """``"10000,100000"`` (or ``"10k,100k"``) → ``(10000, 100000)``."""
    sizes = []
    for part in value.split(",") if value.strip() else []:
        part = part.strip().lower()
        try:
            n = int(float(part[:-1]) * 1000) if part.endswith("k") else int(part)
        except ValueError:
            raise click.BadParameter(f"{part!r} is not a number of chunks; write e.g. 10000,100000.",
                                     param_hint="--chunks") from None
        if n < 1:
            raise click.BadParameter(f"{part!r}: give at least 1 chunk.", param_hint="--chunks")
        sizes.append(n)
    return tuple(sizes)


@main.command(help="Load test of the real service: `ragstream serve --workers N` on loopback over "
                   "the bundled knowledge base (and synthetic stores of --chunks), a load "
                   "generator in another process sending varied SciFact claims (no cache hits), "
                   "one client then --clients; requests/s, p50/p95/p99, errors, requests per "
                   "worker, and N clients' throughput against one client's, in the same run.")
@click.option("--clients", type=click.IntRange(min=1), default=8, show_default=True,
              help="Concurrent clients (keep-alive connections) of the second phase.")
@click.option("--seconds", type=click.FloatRange(min=0, min_open=True), default=20.0,
              show_default=True, help="How long each phase (1 client, then N clients) runs.")
@click.option("--workers", default="1,2", show_default=True,
              help="Worker counts to serve with, comma-separated (each measured in turn).")
@click.option("--chunks", default="", callback=_parse_chunks,
              help="Synthetic store sizes to measure besides the bundled knowledge base, "
                   "comma-separated (e.g. 10k,100k; built once through the real store and cached).")
@click.option("--chroma-url", default=None,
              help="A Chroma server (chroma run ...) to use instead of the embedded store; the run "
                   "uses its own collection there, ragstream_load, and deletes it at the end.")
@click.option("--data", "data_dir", default=None,
              type=click.Path(exists=True, file_okay=False, dir_okay=True),
              help="The SciFact folder (default: ../shared/data/scifact or $RAGSTREAM_BENCH_SCIFACT).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--out", type=click.Path(dir_okay=False), default=None,
              help="Also write the JSON result to this file.")
def load(clients: int, seconds: float, workers: str, chunks: tuple[int, ...], chroma_url: str | None,
         data_dir: str | None, as_json: bool, out: str | None) -> None:
    """Run the load test and print the report or JSON (optionally also to a file)."""
    from pathlib import Path

    from ragstream.measure.harness import SCIFACT_DIR
    from ragstream.measure.load import format_report, run_load

    try:
        counts = tuple(int(w) for w in workers.split(",") if w.strip())
        if not counts or min(counts) < 1:
            raise ValueError
    except ValueError:
        raise click.BadParameter(f"{workers!r}: give worker counts like 1,2.",
                                 param_hint="--workers") from None
    try:
        result = run_load(chunks, clients, seconds, chroma_url,
                          Path(data_dir) if data_dir else SCIFACT_DIR, progress=_stderr_progress(),
                          workers=counts)
    except RagstreamError as err:
        _fail(err)
    _emit(result, as_json, out, format_report)


@main.command(name="eval", help="Measure retrieval quality and latency on a BEIR-format data set "
                                "(--data: corpus.jsonl, queries.jsonl, qrels/SPLIT.tsv): BM25 "
                                "only, dense only, hybrid, and hybrid + rerank per backend; or "
                                "answer quality on question sets (--answers FILE.json).")
@click.option("--data", "data_dir", default=None,
              type=click.Path(exists=True, file_okay=False, dir_okay=True),
              help="The BEIR folder, e.g. ../shared/data/scifact.")
@click.option("--answers", "answer_sets", multiple=True,
              type=click.Path(exists=True, file_okay=True, dir_okay=False),
              help="A question set (repeatable), e.g. benchmarks/answers/kb.json: answer quality "
                   "instead of retrieval (does the answer's first sentence cite the section that "
                   "answers the question?).")
@click.option("--against", "against", multiple=True, metavar="FILE.json|others",
              help="With --answers: also ask this question set's questions (repeatable) of each "
                   "set's documents, as its unanswerable set, and report confidence (answerable "
                   "not Low, unanswerable Low, High on unanswerable, High precision). 'others': "
                   "the other --answers sets (a set asking the same questions, e.g. kb-pdf for "
                   "kb, is skipped).")
@click.option("--mode", "modes", multiple=True, type=click.Choice(["offline", "llm", "conversation"]),
              help="With --answers: the answer modes to run (repeatable); default offline, and "
                   "llm when an endpoint is configured. 'conversation': the set asked twice as "
                   "one named conversation (offline answers; remembered turns searched).")
@click.option("--profile", type=click.Choice(["files", "local"]), default="files", show_default=True,
              help="With --answers: 'local' applies the small-local-model settings "
                   "(config.LOCAL_MODEL_PROFILE: a 1,500-token answer prompt, 400-token answer) "
                   "over config/, as the real-model tier does.")
@click.option("--split", default="test", show_default=True, help="The qrels file: qrels/SPLIT.tsv.")
@click.option("--limit", type=click.IntRange(min=1), default=None,
              help="Only the first N judged queries (with --answers: the first N questions of each set).")
@click.option("--subset", type=click.Choice(["all", "even", "odd"]), default="all",
              show_default=True,
              help="Queries with even or odd numeric ids (a tuning / held-out split).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--out", type=click.Path(dir_okay=False), default=None,
              help="Also write the JSON result to this file.")
@click.option("--kb", "kb", default=None, metavar="NAME",
              help="With --answers: ask the questions of knowledge base NAME as it is (nothing "
                   "ingested; the sets' sections are looked for in its folder) instead of an "
                   "index made from each set's own documents.")
def eval_command(data_dir: str | None, answer_sets: tuple[str, ...], modes: tuple[str, ...],
                 profile: str, split: str, limit: int | None, subset: str, as_json: bool,
                 out: str | None, kb: str | None, against: tuple[str, ...]) -> None:
    """Evaluate retrieval on a BEIR data set, or answers on question sets, and print a table
    or JSON (optionally also to a file)."""
    from ragstream.common.config import load_config

    if bool(data_dir) == bool(answer_sets):
        raise click.UsageError("give either --data (a BEIR folder: retrieval) or --answers (one "
                               "or more question sets: answer quality).")
    if against and not answer_sets:
        raise click.UsageError("--against goes with --answers: it names the questions asked of "
                               "each set's documents as the unanswerable set.")
    if "others" in against and len(against) > 1:
        raise click.UsageError("--against others uses the other --answers sets; give it alone.")
    missing = [a for a in against if a != "others" and not Path(a).is_file()]
    if missing:
        raise click.UsageError(f"--against: no question set at {', '.join(missing)}.")
    if kb and data_dir:
        raise click.UsageError("--kb goes with --answers: a BEIR set (--data) is always indexed "
                               "on its own.")
    try:
        if answer_sets:
            from ragstream.common.config import LOCAL_MODEL_PROFILE
            from ragstream.measure.answer_eval import evaluate_answers, format_answers

            cfg = load_config()
            if profile == "local":
                cfg = cfg.with_overrides(LOCAL_MODEL_PROFILE)
            engine = _engine(kb) if kb else None
            if engine is not None and profile == "local":
                engine.cfg = engine.cfg.with_overrides(LOCAL_MODEL_PROFILE)
            result = evaluate_answers(answer_sets, cfg, modes=list(modes) or None,
                                      progress=_stderr_progress(), limit=limit, engine=engine,
                                      against=list(against))
            as_text = format_answers
        else:
            from ragstream.measure.evaluation import evaluate, format_table

            result = evaluate(data_dir or "", split, load_config(), limit=limit, subset=subset,
                              progress=_stderr_progress())
            as_text = format_table
    except RagstreamError as err:
        _fail(err)
    _emit(result, as_json, out, as_text)


@main.command(help="Measure speed and size on this machine: ingestion against raw encoding, "
                   "retrieval at 10k chunks on the real store (--scale: 10k, 100k, 1M), rerank, "
                   "the whole pipeline, a fresh CLI run, peak memory; each figure next to its "
                   "target. --page: the page's click to redraw in Chromium instead.")
@click.option("--quick", is_flag=True, help="Everything small: a smoke run of well under a minute.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--out", type=click.Path(dir_okay=False), default=None,
              help="Also write the JSON result to this file.")
@click.option("--page", is_flag=True,
              help="Instead: the page in Chromium at 1280x900, each stage button's click to the "
                   "end of the page's redraw, median and p95 per button (needs `bash "
                   "scripts/setup.sh --browser`).")
@click.option("--rounds", type=click.IntRange(1, 200), default=10, show_default=True,
              help="With --page: clicks of each button (after a warm-up round).")
@click.option("--app", type=click.Path(exists=True, dir_okay=False), default=None,
              help="With --page: another copy of ui_streamlit.py (an older checkout, for a "
                   "before/after figure).")
@click.option("--tab", default=None, help="With --page: the result tab open meanwhile.")
@click.option("--formats", "formats", is_flag=True,
              help="Instead: words/s converting PDF, DOCX, PPTX, HTML and EPUB (the bundled "
                   "knowledge base made in each, benchmarks/formats/) against ingesting it.")
@click.option("--scale", "scale", is_flag=True,
              help="Instead: retrieval p50/p95, serving memory, update-to-queryable, the first "
                   "query after another process's change, ingestion throughput and one-file "
                   "ingests on the real store at --sizes chunks (synthetic vectors; each size "
                   "built once and cached in ~/.cache/ragstream/bench-scale).")
@click.option("--sizes", default="10k,100k", show_default=True,
              help="With --scale: the sizes, comma-separated (10k, 100k, 1M or a number of "
                   "chunks); 1M is opt-in (building it takes hours).")
def bench(quick: bool, as_json: bool, out: str | None, page: bool, rounds: int,
          app: str | None, tab: str | None, formats: bool, scale: bool, sizes: str) -> None:
    """Run the benchmark and print the report or JSON (optionally also to a file)."""
    if scale:
        from ragstream.measure.scale import format_scale_report, parse_sizes, run_scale

        try:
            chosen = parse_sizes(sizes)
        except ValueError as err:
            raise click.BadParameter(str(err), param_hint="--sizes") from err
        try:
            result = run_scale(chosen, quick=quick, progress=_stderr_progress())
        except RagstreamError as err:
            _fail(err)
        _emit(result, as_json, out, format_scale_report)
        return
    if formats:
        from ragstream.measure.format_bench import format_formats_report, run_format_bench

        try:
            result = run_format_bench(min(rounds, 20), progress=lambda line: click.echo(line, err=True))
        except RagstreamError as err:
            _fail(err)
        _emit(result, as_json, out, format_formats_report)
        return
    if page:
        from ragstream.interfaces.ui.page_bench import format_page_report, run_page_bench

        try:
            result = run_page_bench(rounds, app, tab, progress=lambda line: click.echo(line, err=True))
        except RagstreamError as err:
            _fail(err)
        _emit(result, as_json, out, format_page_report)
        return
    from ragstream.measure.bench import format_report, run_bench

    try:
        result = run_bench(quick=quick, progress=_stderr_progress())
    except RagstreamError as err:
        _fail(err)
    _emit(result, as_json, out, format_report)


# --------------------------------------------------------------------------- knowledge bases


@main.group(name="kb", help="The knowledge bases: each with its own documents folder and index. "
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
        engine = _engine()
        rows = []
        for kb in engine.knowledge_bases().all():
            info = engine.for_kb(kb.name).status()
            rows.append({**kb.model_dump(), "documents": info["documents"], "chunks": info["chunks"],
                         "last_ingest": info["last_ingest"]})
    except RagstreamError as err:
        _fail(err)
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
        kb = _engine().create_kb(name, folder)
    except RagstreamError as err:
        _fail(err)
    click.echo(f"knowledge base {kb.name!r} created; its documents folder: {kb.folder}\n"
               f"ingest into it: python -m ragstream ingest --kb {_quote(kb.name)}")


@kb_group.command(name="rename", help="Rename knowledge base NAME to NEW_NAME (its documents and "
                                      "index stay where they are).")
@click.argument("name")
@click.argument("new_name")
def kb_rename(name: str, new_name: str) -> None:
    """Rename a knowledge base."""
    try:
        kb = _engine().rename_kb(name, new_name)
    except RagstreamError as err:
        _fail(err)
    click.echo(f"knowledge base {name!r} is now {kb.name!r}")


@kb_group.command(name="delete", help="Delete knowledge base NAME: its index, and its folder when "
                                      "RAGstream made it (a folder you named is left as it is). "
                                      "Asks first; never touches another knowledge base.")
@click.argument("name")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def kb_delete(name: str, yes: bool) -> None:
    """Delete a knowledge base after confirmation."""
    try:
        engine = _engine()
        kb = engine.knowledge_bases().get(name)
        if not yes and not kb.is_default:
            docs = engine.for_kb(kb.name).status()["documents"]
            what = (f"its index ({docs} document(s))"
                    + (f" and its folder {kb.folder}" if kb.own_folder else
                       f"; its folder {kb.folder} is left as it is"))
            click.confirm(f"Delete knowledge base {kb.name!r}: {what}?", abort=True, err=True)
        gone = engine.delete_kb(kb.name)
    except RagstreamError as err:
        _fail(err)
    click.echo(f"knowledge base {gone.name!r} deleted")


def _quote(name: str) -> str:
    return f"'{name}'" if " " in name else name


# --------------------------------------------------------------------------- conversations


@main.group(name="conversation", help="The named conversations (`run PROMPT --answer --conversation "
                                      "NAME`): each answered turn that found something is "
                                      "remembered and searched with the knowledge base later.")
def conversation_group() -> None:
    """The ``ragstream conversation`` command group."""
    pass


@conversation_group.command(name="list", help="List the conversations, the one answered last "
                                              "first, with the knowledge base each belongs to.")
@click.option("--json", "as_json", is_flag=True, help="Print them as JSON.")
@click.option("--kb", "kb", default=None, metavar="NAME",
              help="Only the conversations of this knowledge base (default: every one).")
def conversation_list(as_json: bool, kb: str | None) -> None:
    """Print every conversation (of one knowledge base) with its turn counts."""
    try:
        found = _engine().conversations().all(kb)
    except (RagstreamError, sqlite3.Error) as err:
        _fail_conversations(err)
    if as_json:
        click.echo(json.dumps([vars(c) for c in found], indent=2, ensure_ascii=False))
        return
    if not found:
        click.echo(f"No conversations{f' of knowledge base {kb!r}' if kb else ''} yet: python -m "
                   f"ragstream run PROMPT --answer --conversation NAME" + (f" --kb {kb}" if kb else ""))
        return
    click.echo(f"{'name':<30}  {'knowledge base':<16}  {'turns':>5}  {'remembered':>10}  last turn (UTC)")
    for c in found:
        click.echo(f"{c.name:<30}  {c.kb:<16}  {c.turns:>5}  {c.in_memory:>10}  {_when(c.last_ts)}")


@conversation_group.command(name="show", help="Show conversation NAME's turns: question, answer, "
                                              "sources, and whether each is remembered.")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print the turns as JSON.")
def conversation_show(name: str, as_json: bool) -> None:
    """Print every turn of a conversation."""
    try:
        turns = _engine().conversations().turns(name)
    except (RagstreamError, sqlite3.Error) as err:
        _fail_conversations(err)
    if as_json:
        click.echo(json.dumps([vars(t) for t in turns], indent=2, ensure_ascii=False))
        return
    for t in turns:
        state = ("forgotten" if t.removed else "remembered" if t.remembered
                 else f"not remembered: {t.why}")
        click.echo(f"turn {t.turn} · {t.when} · knowledge base {t.kb or 'default'} · {state}")
        click.echo(f"  Q: {_cut(t.question, 200)}")
        click.echo(f"  A: {_cut(t.answer, 200)}")
        for label in t.sources:
            click.echo(f"     source: {label}")
        for line in t.memory_text.splitlines() if t.in_memory else []:
            click.echo(f"     remembers: {_cut(line, 200)}")


@conversation_group.command(name="forget", help="Take turn TURN of conversation NAME out of its "
                                                "memory: it is no longer retrieved nor carried in "
                                                "the recent conversation (its row stays, marked).")
@click.argument("name")
@click.argument("turn", type=click.IntRange(min=1))
def conversation_forget(name: str, turn: int) -> None:
    """Forget one turn."""
    try:
        _engine().forget_turn(name, turn)
    except (RagstreamError, sqlite3.Error) as err:
        _fail_conversations(err)
    click.echo(f"turn {turn} of conversation {name!r} forgotten")


@conversation_group.command(name="delete", help="Delete conversation NAME and all its turns (asks first).")
@click.argument("name")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def conversation_delete(name: str, yes: bool) -> None:
    """Delete a conversation after confirmation."""
    try:
        convs = _engine().conversations()
        n = len(convs.turns(name))
        if not yes:
            click.confirm(f"Delete conversation {name!r} and its {n} turn(s)?", abort=True, err=True)
        convs.delete(name)
    except (RagstreamError, sqlite3.Error) as err:
        _fail_conversations(err)
    click.echo(f"conversation {name!r} deleted")


def _fail_conversations(err: RagstreamError | sqlite3.Error) -> NoReturn:
    """Exit 2 with ``err``: a RAGstream error as ``_fail`` says it, an SQLite one naming the file."""
    if isinstance(err, RagstreamError):
        _fail(err)
    click.echo(f"Error (conversations): the Q&A log file cannot be read or written ({err}). If it "
               f"is not a RAGstream Q&A log, move it away (paths.index_dir/answer.log_file).",
               err=True)
    sys.exit(2)
