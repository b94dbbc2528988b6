"""What the command modules share: the error exit, the ``--kb`` and ``--filter`` options, the
JSON-or-text output, the progress bars and the table helpers. Light on purpose: it imports click
and the error types only, so listing the commands (``ragstream --help``) stays fast."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import click

from ragstream.common.errors import RagstreamError

if TYPE_CHECKING:  # pragma: no cover
    # what click.progressbar returns; click annotates with it but does not export it
    from click._termui_impl import ProgressBar

    from ragstream.state.super_prompt import Filters


def fail(err: RagstreamError) -> NoReturn:
    """Say ``err`` on stderr as ``Error (kind): message`` and exit 2."""
    click.echo(f"Error ({err.kind}): {err}", err=True)
    sys.exit(2)


def kb_option(command: Callable) -> Callable:
    """The ``--kb NAME`` option (also ``$RAGSTREAM_KB``) of the commands that work on one
    knowledge base."""
    return click.option("--kb", "kb", default=None, metavar="NAME", envvar="RAGSTREAM_KB",
                        help="The knowledge base to work on (default: the bundled one, 'default'; "
                             "`ragstream kb list` lists them; also $RAGSTREAM_KB).")(command)


def filter_keys() -> tuple[str, ...]:
    """The keys ``--filter`` takes: the fields of ``Filters``."""
    from ragstream.state.super_prompt import Filters

    return tuple(Filters.model_fields)


_LIST_KEYS = ("doc_type", "source")


FILTER_HELP = ("Only chunks whose document matches, KEY=VALUE, repeatable: doc_type=faq (several: "
               "doc_type=faq,ops), source=faq/* (a path pattern or a declared source name), "
               "updated_from=2025-01-01, updated_to=2025-12-31 (dates YYYY-MM-DD, inclusive).")


def parse_filters(values: tuple[str, ...] | list[str]) -> Filters:
    """``("doc_type=faq,ops", "updated_from=2025-01-01")`` → ``Filters``; ``click.BadParameter``
    names the allowed keys or the date format when a value is wrong."""
    from pydantic import ValidationError

    from ragstream.state.super_prompt import Filters

    keys = filter_keys()
    fields: dict[str, list[str] | str] = {}
    for value in values:
        key, eq, raw = value.partition("=")
        key, raw = key.strip(), raw.strip()
        if not eq or key not in keys:
            raise click.BadParameter(f"{value!r}: write KEY=VALUE with KEY one of "
                                     f"{', '.join(keys)}.", param_hint="--filter")
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


def filter_option(command: Callable) -> Callable:
    """The repeatable ``--filter KEY=VALUE`` option, parsed into ``Filters`` (``parse_filters``)."""
    return click.option("--filter", "filters", multiple=True, metavar="KEY=VALUE",
                        callback=_filters_option, help=FILTER_HELP)(command)


def emit(result: dict, as_json: bool, out: str | None, as_text) -> None:
    """Print ``result`` as JSON or as text (``as_text(result)``); with ``out``, also write the JSON."""
    text = json.dumps(result, indent=2)
    if out:
        Path(out).write_text(text + "\n", encoding="utf-8")
    click.echo(text if as_json else as_text(result))


def stderr_progress() -> Callable[[str, int, int], None]:
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


def when(iso: str) -> str:
    """``2025-06-01T12:34:56.789Z`` → ``2025-06-01 12:34:56`` (UTC), for tables."""
    return iso[:19].replace("T", " ")


def cut(text: str, width: int) -> str:
    """``text`` on one line, at most ``width`` characters (an ellipsis marks a cut)."""
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"
