"""Command line: the ``ragstream`` command group (also ``python -m ragstream``), one module per
group of commands:

- ``passes``: the pass, ``run "PROMPT"`` (``--answer``, edits, ``--conversation NAME``),
  ``find TEXT``, ``retrieve "QUERY"``;
- ``knowledge``: ``ingest [PATH]``, the knowledge bases (``kb list|create|rename|delete``; ``--kb
  NAME`` on ingest, run, retrieve, find, eval, status), ``status``, ``repair``;
- ``runs``: the run history, ``runs list|show|diff|export|import``;
- ``conversation``: the named conversations, ``conversation list|show|forget|delete``;
- ``serving``: ``serve`` (HTTP) and ``mcp``;
- ``measuring``: ``bench``, ``eval``, ``load``;
- ``common``: what they share (the error exit, ``--kb``, ``--filter``, output helpers).

A command's module is imported when that command runs (``main`` is a lazy group), and each
module imports at its top only click and the light helpers: what a command needs is imported
inside it. So ``ragstream --help`` reads the command modules and nothing heavy, and ``ragstream
runs list`` never imports the stages or the vector store."""

from __future__ import annotations

import importlib

import click

#: each command of ``ragstream``: "module:attribute" in this package
COMMANDS = {
    "run": "passes:run",
    "find": "passes:find",
    "retrieve": "passes:retrieve",
    "ingest": "knowledge:ingest",
    "kb": "knowledge:kb_group",
    "status": "knowledge:status",
    "repair": "knowledge:repair",
    "runs": "runs:runs",
    "conversation": "conversation:conversation_group",
    "serve": "serving:serve",
    "mcp": "serving:mcp",
    "bench": "measuring:bench",
    "eval": "measuring:eval_command",
    "load": "measuring:load",
}


class LazyGroup(click.Group):
    """A click group whose commands (``COMMANDS``) are imported from their modules when first
    looked up: running one command imports its module only."""

    def __init__(self, *args, lazy: dict[str, str], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Every command's name, sorted (as ``click.Group`` lists them)."""
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """The command ``cmd_name``, its module imported the first time it is asked for."""
        if cmd_name in self.lazy and cmd_name not in self.commands:
            module, _, attribute = self.lazy[cmd_name].partition(":")
            self.add_command(getattr(importlib.import_module(f"{__name__}.{module}"), attribute),
                             cmd_name)
        return super().get_command(ctx, cmd_name)


@click.group(cls=LazyGroup, lazy=COMMANDS,
             help="RAGstream: turn a prompt into a grounded super-prompt, stage by stage.")
def main() -> None:
    """The ``ragstream`` command group; the subcommands do the work."""
    pass


def _engine(kb: str | None = None):
    """The engine of knowledge base ``kb`` that every command works through. The command modules
    call it as ``cli._engine`` so a test can put its own engine in its place."""
    from ragstream.workbench.engine import Engine

    return Engine(kb=kb)
