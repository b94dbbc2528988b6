"""Measuring: ``ragstream bench`` (speed and size; ``--page``, ``--formats``, ``--scale``),
``eval`` (retrieval on a BEIR set, or answers on question sets) and ``load`` (the service under
load)."""

from __future__ import annotations

from pathlib import Path

import click

from ragstream.common.errors import RagstreamError
from ragstream.interfaces import cli
from ragstream.interfaces.cli.common import emit, fail, stderr_progress


@click.command(help="Measure speed and size on this machine: ingestion against raw encoding, "
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
            result = run_scale(chosen, quick=quick, progress=stderr_progress())
        except RagstreamError as err:
            fail(err)
        emit(result, as_json, out, format_scale_report)
        return
    if formats:
        from ragstream.measure.format_bench import format_formats_report, run_format_bench

        try:
            result = run_format_bench(min(rounds, 20), progress=lambda line: click.echo(line, err=True))
        except RagstreamError as err:
            fail(err)
        emit(result, as_json, out, format_formats_report)
        return
    if page:
        from ragstream.interfaces.ui.page_bench import format_page_report, run_page_bench

        try:
            result = run_page_bench(rounds, app, tab, progress=lambda line: click.echo(line, err=True))
        except RagstreamError as err:
            fail(err)
        emit(result, as_json, out, format_page_report)
        return
    from ragstream.measure.bench import format_report, run_bench

    try:
        result = run_bench(quick=quick, progress=stderr_progress())
    except RagstreamError as err:
        fail(err)
    emit(result, as_json, out, format_report)


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


@click.command(help="Load test of the real service: `ragstream serve --workers N` on loopback over "
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
                          Path(data_dir) if data_dir else SCIFACT_DIR, progress=stderr_progress(),
                          workers=counts)
    except RagstreamError as err:
        fail(err)
    emit(result, as_json, out, format_report)


@click.command(name="eval", help="Measure retrieval quality and latency on a BEIR-format data set "
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
            engine = cli._engine(kb) if kb else None
            if engine is not None and profile == "local":
                engine.cfg = engine.cfg.with_overrides(LOCAL_MODEL_PROFILE)
            result = evaluate_answers(answer_sets, cfg, modes=list(modes) or None,
                                      progress=stderr_progress(), limit=limit, engine=engine,
                                      against=list(against))
            as_text = format_answers
        else:
            from ragstream.measure.evaluation import evaluate, format_table

            result = evaluate(data_dir or "", split, load_config(), limit=limit, subset=subset,
                              progress=stderr_progress())
            as_text = format_table
    except RagstreamError as err:
        fail(err)
    emit(result, as_json, out, as_text)
