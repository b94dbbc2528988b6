"""Serving the knowledge bases: ``ragstream serve`` (the retrieval contract over HTTP) and
``ragstream mcp`` (an MCP server over stdio or streamable HTTP)."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import click

from ragstream.common.errors import RagstreamError
from ragstream.interfaces import cli
from ragstream.interfaces.cli.common import fail


@click.command(help="Serve the retrieval contract over HTTP (FastAPI + uvicorn): GET /health, "
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
        engine = cli._engine()  # a bad configuration fails here, before any worker starts
    except RagstreamError as err:
        fail(err)
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
        fail(err)


def _say_if_empty(engine) -> None:
    """A start-up line when the served knowledge base has no chunk: how to fill it."""
    from ragstream.interfaces.service.http import empty_message

    try:
        chunks = engine.services.index().n_chunks
    except RagstreamError:
        return  # the store is down: the warning above and /health say so
    if not chunks:
        click.echo(f"Warning (empty knowledge base): {empty_message(engine.kb)}", err=True)


@click.command("mcp", help="Serve the knowledge bases as an MCP server (tools: search, answer, "
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
            fail(err)
    # on stdio, stdout is the protocol's from the first byte: whatever the start-up prints goes
    # to stderr (the SDK itself diverts stdout once it serves)
    quiet = contextlib.nullcontext() if over_http else contextlib.redirect_stdout(sys.stderr)
    try:
        with quiet:
            engine = cli._engine()
            engine.warm_up()
    except RagstreamError as err:
        fail(err)
    pipeline = RAGPipeline(engine)
    if not over_http:
        mcp_server.serve_stdio(pipeline, allow_ingest)
        return
    click.echo(f"RAGstream MCP server on http://{host}:{port}{mcp_server.HTTP_PATH}; "
               + tokens.describe() + ("" if tokens else f" (set ${token_env} to require one)")
               + "." + (" The ingest tool is on." if allow_ingest else ""), err=True)
    _say_if_empty(engine)
    mcp_server.serve_http(pipeline, host, port, allow_ingest=allow_ingest, tokens=tokens)
