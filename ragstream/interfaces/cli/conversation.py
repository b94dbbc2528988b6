"""The named conversations: ``ragstream conversation list|show|forget|delete`` (the turns
``run PROMPT --answer --conversation NAME`` remembers)."""

from __future__ import annotations

import json
import sqlite3
import sys
from typing import NoReturn

import click

from ragstream.common.errors import RagstreamError
from ragstream.interfaces import cli
from ragstream.interfaces.cli.common import cut, fail, when


@click.group(name="conversation", help="The named conversations (`run PROMPT --answer --conversation "
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
        found = cli._engine().conversations().all(kb)
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
        click.echo(f"{c.name:<30}  {c.kb:<16}  {c.turns:>5}  {c.in_memory:>10}  {when(c.last_ts)}")


@conversation_group.command(name="show", help="Show conversation NAME's turns: question, answer, "
                                              "sources, and whether each is remembered.")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print the turns as JSON.")
def conversation_show(name: str, as_json: bool) -> None:
    """Print every turn of a conversation."""
    try:
        turns = cli._engine().conversations().turns(name)
    except (RagstreamError, sqlite3.Error) as err:
        _fail_conversations(err)
    if as_json:
        click.echo(json.dumps([vars(t) for t in turns], indent=2, ensure_ascii=False))
        return
    for t in turns:
        state = ("forgotten" if t.removed else "remembered" if t.remembered
                 else f"not remembered: {t.why}")
        click.echo(f"turn {t.turn} · {t.when} · knowledge base {t.kb or 'default'} · {state}")
        click.echo(f"  Q: {cut(t.question, 200)}")
        click.echo(f"  A: {cut(t.answer, 200)}")
        for label in t.sources:
            click.echo(f"     source: {label}")
        for line in t.memory_text.splitlines() if t.in_memory else []:
            click.echo(f"     remembers: {cut(line, 200)}")


@conversation_group.command(name="forget", help="Take turn TURN of conversation NAME out of its "
                                                "memory: it is no longer retrieved nor carried in "
                                                "the recent conversation (its row stays, marked).")
@click.argument("name")
@click.argument("turn", type=click.IntRange(min=1))
def conversation_forget(name: str, turn: int) -> None:
    """Forget one turn."""
    try:
        cli._engine().forget_turn(name, turn)
    except (RagstreamError, sqlite3.Error) as err:
        _fail_conversations(err)
    click.echo(f"turn {turn} of conversation {name!r} forgotten")


@conversation_group.command(name="delete", help="Delete conversation NAME and all its turns (asks first).")
@click.argument("name")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def conversation_delete(name: str, yes: bool) -> None:
    """Delete a conversation after confirmation."""
    try:
        convs = cli._engine().conversations()
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
        fail(err)
    click.echo(f"Error (conversations): the Q&A log file cannot be read or written ({err}). If it "
               f"is not a RAGstream Q&A log, move it away (paths.index_dir/answer.log_file).",
               err=True)
    sys.exit(2)
