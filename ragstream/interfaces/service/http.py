"""The retrieval service over HTTP: ``python -m ragstream serve`` (FastAPI, served by uvicorn).

    from ragstream import RAGPipeline
    from ragstream.interfaces.service.http import create_app
    app = create_app(RAGPipeline(), token=None)     # any ASGI server can serve it

Endpoints (the schema is at ``/openapi.json``):

* ``GET /health`` — status, chunks in the index, store mode, version. Never needs the token;
  503 when the vector store cannot be reached.
* ``POST /retrieve`` — ``RetrieveRequest`` → ``RAGContext`` (``RAGPipeline.retrieve``).
* ``POST /ingest`` — a list of ``RuleDocument`` → ``IngestionResult`` (``RAGPipeline.ingest``).
* ``GET /v1/models``, ``POST /v1/chat/completions`` — the knowledge bases as OpenAI-compatible
  models (``ragstream.interfaces.service.openai_compat``), errors in OpenAI's shape.
* ``POST /answer`` — ``AnswerRequest`` → Server-Sent Events (seed 003, "Stream to Frontend"):
  ``token`` events as the answer streams, one ``citation`` event per valid citation, then
  ``done``; ``error`` if the answer fails once streaming has begun. The stages run before the
  stream starts, so their errors still get an HTTP status. A follow-up query ("and how do I do
  that in .htaccess instead?") is read with the conversation (``conversation_history``, else
  the named ``conversation``'s last turns) by A0: retrieval and the answer use the standalone
  reading, which ``done`` gives as ``read_as``.

Every error is JSON ``{"error": kind, "message": text}`` with the status of ``STATUS_BY_ERROR``
(422 for a bad query or request body, 503 store unreachable, 504 retrieval timeout, 500 for
any other RAGstream error), 401 for a missing or wrong bearer token, 403 for a token without
the scope or the knowledge base (``ragstream.interfaces.service.auth``), 413 for a body over the limit;
under ``/v1/`` every error (these, 404 and validation errors too) has OpenAI's shape instead.
With tokens, every path but ``/health`` needs ``Authorization: Bearer <token>``: ``WRITE``
routes the ``write`` scope, the others ``read``; a token limited to knowledge bases is refused
on any other (and lists only its own). Failed attempts are counted (``/health``'s
``failed_auth``) and slowed (``auth.Failures``).

No endpoint takes edits (pins, exclusions, fields, statements, rules): each request is a prompt
of its own and runs without any, so nothing one request decided acts on another. A person's
edits belong to the prompt they were made for; carrying them to another prompt is the explicit
choice of the page ("apply them here"), the CLI (``run --edits-from RUN_ID``) and Python
(``Engine.new(…, edits_from=…)``, ``Engine.carry_edits``).

When the client of ``/answer`` goes away mid-stream, the answer is stopped at its next piece
(the model's HTTP stream is closed with it) and the interaction is logged with
``incomplete = 1`` and the text streamed until then.

**Several worker processes** (``ragstream serve --workers N``, ``serve_workers``). The parent
spawns N processes; each binds its own socket on the port with ``SO_REUSEPORT`` (the kernel
spreads new connections over them; one shared socket let the first worker to wake accept
every pending connection: 8 of 8 keep-alive connections on one worker, measured) and calls
``app_factory``, which builds its own ``Engine`` and ``RAGPipeline`` and warms them up. The
workers share nothing in memory: the knowledge base is its engine's folder on disk
(``LocalEngine``: Chroma + tantivy), and each process sees another's writes at its next query,
so an ingest through one worker (or ``ragstream ingest``) is answered by all of them without a
restart. What a worker holds is its models and bounded caches, not a copy of the corpus.
Processes, not threads, because a retrieval is CPU work that holds the GIL for most of its
time. Settings reach the workers through the environment (spawned processes inherit it): the
configuration's ``RAGSTREAM_*`` variables, and ``WORKER_TOKEN_ENV``, the *name* of the
variable that holds the bearer token (never the token itself). SIGINT/SIGTERM to the parent
stop every worker gracefully (requests under way finish); a worker that dies is replaced.
Every response names the process that made it in ``X-RAGstream-Worker`` (its pid).

It stays whole: it is one FastAPI app (its routes, their request and event models, the token
guard and the worker processes that serve it); what the OpenAI-compatible route and the MCP
server share with it is in ``streaming``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any, Literal

from fastapi import FastAPI, Request, Security
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.security import HTTPBearer
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from ragstream.common.errors import (
    ConversationError,
    ConversationNotFoundError,
    EmptyPromptError,
    IngestLockedError,
    InvalidQueryError,
    KnowledgeBaseError,
    KnowledgeBaseNotFoundError,
    PromptTooLongError,
    RagstreamError,
    RetrievalTimeoutError,
    VectorDBUnavailableError,
)
from ragstream.interfaces.service.auth import (
    Failures,
    ForbiddenError,
    Grant,
    Tokens,
    client_address,
    require_token_off_loopback,
)
from ragstream.interfaces.service.streaming import GRANT_KEY, answer_stream, grant_of, read_as
from ragstream.state.super_prompt import Citation, ConversationTurn, Filters, SuperPrompt
from ragstream.workbench.contract import IngestionResult, RAGContext, RuleDocument

if TYPE_CHECKING:  # pragma: no cover
    from ragstream.workbench.api import RAGPipeline
    from ragstream.workbench.engine import Engine

log = logging.getLogger(__name__)

#: the largest request body of /retrieve and /answer (bytes); 413 above it
MAX_BODY_BYTES = 1024 * 1024
#: the largest request body of /ingest (bytes); 413 above it
MAX_INGEST_BODY_BYTES = 64 * 1024 * 1024
#: at most this many items in ``conversation_history`` (seed 003: "max 10")
MAX_CONVERSATION_ITEMS = 10
#: paths that never need the bearer token
OPEN_PATHS = frozenset({"/health"})
#: the HTTP status of each error kind; the first class that matches wins, others are 500
STATUS_BY_ERROR: tuple[tuple[type[RagstreamError], int], ...] = (
    (ForbiddenError, 403),
    (InvalidQueryError, 422),
    (EmptyPromptError, 422),
    (PromptTooLongError, 422),
    (VectorDBUnavailableError, 503),
    (RetrievalTimeoutError, 504),
    (IngestLockedError, 409),
    (KnowledgeBaseNotFoundError, 404),
    (ConversationNotFoundError, 404),
    (KnowledgeBaseError, 409),
    (ConversationError, 409),
)
SSE_MEDIA_TYPE = "text/event-stream"
#: (method, path or path prefix ending in '/') of the routes that need the write scope
WRITE: tuple[tuple[str, str], ...] = (("POST", "/ingest"), ("POST", "/kb"), ("PATCH", "/kb/"),
                                      ("DELETE", "/kb/"), ("PUT", "/kb/"), ("POST", "/kb/"))

#: the response header naming the worker process (its pid) that answered
WORKER_HEADER = "X-RAGstream-Worker"
#: set by ``serve_workers`` for its workers: the name of the variable holding the bearer token
WORKER_TOKEN_ENV = "RAGSTREAM_SERVE_TOKEN_ENV"

_Scope = MutableMapping[str, Any]
_Message = MutableMapping[str, Any]
_Receive = Callable[[], Awaitable[_Message]]
_Send = Callable[[_Message], Awaitable[None]]


# --------------------------------------------------------------------------- request / response models


class KnowledgeBaseRequest(BaseModel):
    """``POST /kb``: a new knowledge base's name and, optionally, its documents folder."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="1 to 40 characters: letters, digits, spaces, '.', '-', '_'")
    folder: str | None = Field(None, description=(
        "the folder of its documents on the server (made when missing); none: a folder of its own"))


class RenameRequest(BaseModel):
    """``PATCH /kb/{name}``: the knowledge base's new name."""

    model_config = ConfigDict(extra="forbid")

    name: str


class ErrorBody(BaseModel):
    """Every error response: the error's kind and a message that says what to do."""

    error: str = Field(description="the kind, e.g. 'invalid query', 'vector store unavailable'")
    message: str = Field(description="what went wrong and what to do instead")


class Health(BaseModel):
    """``GET /health``: whether the service can answer, and what it serves."""

    status: Literal["ok", "empty", "unavailable"] = Field(description=(
        "'ok'; 'empty' when the served knowledge base has no chunk yet (message: how to fill "
        "it); 'unavailable' when the store cannot be reached (503)"))
    chunks: int | None = Field(description="chunks in the index (None when the store is unreachable)")
    store_mode: str = Field(description="'persistent' (embedded Chroma) or 'http' (a Chroma server)")
    version: str = Field(description="the RAGstream version")
    message: str = Field("", description="why the status is 'empty' or 'unavailable', and what to do")
    kb: str = Field("default", description="the knowledge base served by default")
    failed_auth: int = Field(0, description=(
        "requests refused for a missing or wrong token since this process started"))


class RetrieveRequest(BaseModel):
    """``POST /retrieve``: the arguments of ``RAGPipeline.retrieve``."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(description="the question: not empty, at most prompt.max_prompt_chars (2,000) "
                                   "characters, else 422 'invalid query'")
    context_key: str = Field(description="'{channel_id}:{user_id}'; with the query, the cache key")
    max_chunks: int | None = Field(None, description="at most this many chunks, 1 to 100 "
                                                     "(default: retrieval.max_chunks)")
    min_relevance: float | None = Field(None, description="keep chunks at or above this relevance, "
                                                          "0 to 1 (default: retrieval.min_relevance)")
    filters: Filters = Field(default_factory=Filters,
                             description="doc_type, source (shell patterns), updated_from/updated_to")
    kb: str | None = Field(None, description="the knowledge base to search (default: the bundled "
                                             "one; GET /kb lists them; unknown: 404)")


class Message(BaseModel):
    """One earlier message in seed 003's shape: its role and its text."""

    model_config = ConfigDict(extra="forbid")

    role: Literal["user", "assistant"]
    content: str


class AnswerRequest(BaseModel):
    """``POST /answer``: the question, the conversation so far and the filters."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(description="the question (the same rules as /retrieve)")
    context_key: str = Field(description="'{channel_id}:{user_id}', echoed in the done event")
    conversation_history: list[ConversationTurn | Message] = Field(
        default_factory=list, max_length=MAX_CONVERSATION_ITEMS,
        description="at most 10 items, oldest first: turns {user, assistant} or messages "
                    "{role, content} (a user message and the assistant message after it make a "
                    "turn); a follow-up query ('and on Windows?') is read with their questions "
                    "(the done event's read_as)")
    filters: Filters = Field(default_factory=Filters, description="what Retrieval may return")
    kb: str | None = Field(None, description="the knowledge base to answer from (default: the "
                                             "bundled one; unknown: 404)")
    conversation: str | None = Field(None, description=(
        "a named conversation of the knowledge base `kb` to continue: its remembered turns are "
        "searched with that knowledge base, its last turns go into the prompt when "
        "conversation_history is empty, and this answer becomes its next turn (started if new; "
        "a conversation of another knowledge base: 409)"))

    def turns(self) -> list[ConversationTurn]:
        """The history as turns: a user message opens one, the assistant message after it closes it."""
        turns: list[ConversationTurn] = []
        open_user: str | None = None
        for item in self.conversation_history:
            if isinstance(item, ConversationTurn):
                if open_user is not None:
                    turns.append(ConversationTurn(user=open_user, assistant=""))
                    open_user = None
                turns.append(item)
            elif item.role == "user":
                if open_user is not None:
                    turns.append(ConversationTurn(user=open_user, assistant=""))
                open_user = item.content
            else:
                turns.append(ConversationTurn(user=open_user or "", assistant=item.content))
                open_user = None
        if open_user is not None:
            turns.append(ConversationTurn(user=open_user, assistant=""))
        return turns


class CitationEvent(BaseModel):
    """The data of a ``citation`` event: one valid citation of the answer."""

    n: int = Field(description="the number the answer cites, [n]")
    chunk_id: str = Field(description="the chunk's id ('kb/faq.md#3'), as /retrieve and /v1 give it")
    chunk_ref: str = Field(description="the same as chunk_id (its older name)")
    source: str = Field(description="the document's declared source name, else its path")
    path: str = Field(description="the document's file path")
    section: str = Field(description="the chunk's heading path, 'A > B'")
    title: str
    label: str = Field(description="'file.md § A > B' ('manual.pdf p. 20 § A > B' in a paged document)")
    page: str = Field("", description="'p. 20' or 'pp. 20–21' in a paged document (PDF); '' otherwise")


class DoneEvent(BaseModel):
    """The data of the ``done`` event: how the answer went."""

    context_key: str
    mode: str = Field(description="'llm', 'extractive' or 'no-results'")
    confidence: str
    confidence_reason: str = Field(description=(
        "why, in a reader's words: 'Medium: the best passage answers only part of the question "
        "(it does not mention “certbot”)'"))
    confidence_detail: str = Field("", description=(
        "the figures behind the confidence (similarities, rerank scores, P(answerable), the "
        "settings they were held to)"))
    read_as: str = Field("", description=(
        "the follow-up read with the conversation, the standalone question retrieval and the "
        "answer used ('How do I redirect all HTTP traffic to HTTPS in .htaccess?'); '' when "
        "the query stands on its own"))
    invalid_citations: list[int]
    unsupported: str = Field("", description=(
        "why the LLM answer is unsupported (no sentence cites a valid source); '' otherwise"))
    extractive_text: str = Field("", description=(
        "the extractive answer offered beside an unsupported LLM answer"))
    set_aside_reason: str = Field("", description=(
        "why the model's answer was set aside by the citation checks (the streamed text ends "
        "with the extractive answer given instead); '' when it was kept"))
    total_tokens: int = Field(description="prompt + completion tokens of the answer's LLM call "
                                          "(0 when no LLM answered)")
    token_events: int = Field(description="how many token events were sent")
    latency_ms: int = Field(description="from the request to this event")
    qa_log_id: int | None = Field(description="the interaction's row in the Q&A log")
    kb: str = Field("default", description="the knowledge base the answer came from")
    conversation: str = Field("", description="the named conversation the answer continues")
    turn: int | None = Field(None, description="its turn number in that conversation")
    remembered: bool | None = Field(None, description=(
        "whether the turn is remembered (searchable later): not when the answer asserted "
        "nothing with a source"))
    uses: str = Field("", description=(
        "the conversation's remembered turns the answer cites, in words ('' when it cites none)"))


def empty_message(kb: str) -> str:
    """What ``/health`` and ``serve`` say of an empty knowledge base."""
    from ragstream.workbench.api import fill_hint

    return (f"The knowledge base {kb!r} is empty (0 chunks): every question will find nothing. "
            f"{fill_hint(kb)[0].upper()}{fill_hint(kb)[1:]}; the service answers from it at once.")


def status_for(err: RagstreamError) -> int:
    """The HTTP status for ``err`` (``STATUS_BY_ERROR``; 500 for any other RAGstream error)."""
    return next((status for cls, status in STATUS_BY_ERROR if isinstance(err, cls)), 500)


def _error(status: int, kind: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(ErrorBody(error=kind, message=message).model_dump(), status_code=status,
                        headers=headers)


# --------------------------------------------------------------------------- token and body size


def needed_scope(method: str, path: str) -> str:
    """The scope a request needs: ``write`` for the ``WRITE`` routes, else ``read``."""
    for m, p in WRITE:
        if method == m and (path == p or (p.endswith("/") and path.startswith(p))):
            return "write"
    return "read"


def _refusal(status: int, kind: str, message: str, openai_shape: bool,
             headers: dict[str, str] | None = None) -> JSONResponse:
    if openai_shape:
        from ragstream.interfaces.service import openai_compat

        response = openai_compat.error_response(status, message, kind)
        response.headers.update(headers or {})
        return response
    return _error(status, kind, message, headers)


class _Guard:
    """ASGI middleware: the bearer token (all paths but ``OPEN_PATHS``) and its scope, then
    the body limit (``Content-Length`` first, then the bytes as they arrive); the body read is
    replayed. A refusal under ``/v1/`` has OpenAI's error shape."""

    def __init__(self, app: Callable[[_Scope, _Receive, _Send], Awaitable[None]],
                 tokens: Tokens, failures: Failures, limits: dict[str, int], default_limit: int):
        self.app = app
        self.tokens = tokens
        self.failures = failures
        self.limits = limits
        self.default_limit = default_limit

    async def __call__(self, scope: _Scope, receive: _Receive, send: _Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v for k, v in scope.get("headers", [])}
        path = scope["path"]
        openai_shape = path.startswith("/v1/")
        if self.tokens and path not in OPEN_PATHS:
            grant = self.tokens.from_header(headers.get("authorization"))
            address = client_address(scope)
            if grant is None:
                given = headers.get("authorization")
                count, delay = self.failures.record(address)
                log.warning("refused %s %s from %s: %s (failed attempt %d from that address; "
                            "answered after %.2f s)", scope["method"], path, address,
                            "no bearer token" if given is None else "a wrong token", count, delay)
                if delay:
                    await asyncio.sleep(delay)
                why = ("This endpoint needs the header 'Authorization: Bearer <token>'."
                       if given is None else "The bearer token is not one this service accepts.")
                await _refusal(401, "unauthorized", why + " Send a token the service was "
                               "started with ($RAGSTREAM_API_TOKEN or one of its tokens file; an "
                               "OpenAI client sends its api_key).", openai_shape,
                               {"WWW-Authenticate": "Bearer"})(scope, receive, send)
                return
            self.failures.clear(address)
            scope.setdefault("state", {})[GRANT_KEY] = grant
            try:
                grant.check(needed_scope(scope["method"], path),  # type: ignore[arg-type]
                            what=f"({scope['method']} {path})")
            except ForbiddenError as err:
                log.warning("refused %s %s from %s: the token %r lacks the scope", scope["method"],
                            path, address, grant.name)
                await _refusal(403, err.kind, str(err), openai_shape)(scope, receive, send)
                return
        limit = self.limits.get(path, self.default_limit)
        too_large = _refusal(413, "request too large",
                             f"The request body is larger than {limit:,} bytes, the limit of "
                             f"{path}. Send less (split an ingest into several requests).",
                             openai_shape)
        declared = headers.get("content-length")
        if declared is not None:
            try:
                if int(declared) > limit:
                    await too_large(scope, receive, send)
                    return
            except ValueError:
                await _refusal(400, "bad request", "The Content-Length header is not a number.",
                               openai_shape)(scope, receive, send)
                return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if len(body) > limit:
                await too_large(scope, receive, send)
                return
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> _Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()  # then what the server says next: http.disconnect

        await self.app(scope, replay, send)


class _WorkerHeader:
    """ASGI middleware: every HTTP response names the process that made it (``WORKER_HEADER``)."""

    def __init__(self, app: Callable[[_Scope, _Receive, _Send], Awaitable[None]]):
        self.app = app
        self._header = (WORKER_HEADER.lower().encode("latin-1"), str(os.getpid()).encode("latin-1"))

    async def __call__(self, scope: _Scope, receive: _Receive, send: _Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def named(message: _Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), self._header]
            await send(message)

        await self.app(scope, receive, named)


# --------------------------------------------------------------------------- the answer stream


def _sse(event: str, data: BaseModel | dict[str, Any]) -> str:
    payload = data.model_dump_json() if isinstance(data, BaseModel) else json.dumps(data, ensure_ascii=False)
    return f"event: {event}\ndata: {payload}\n\n"


def _citation(c: Citation, sp: SuperPrompt) -> CitationEvent:
    chunk = sp.chunk_map().get(c.chunk_id)
    return CitationEvent(n=c.n, chunk_id=c.chunk_id, chunk_ref=c.chunk_id,
                         source=(chunk.source_name if chunk else "") or c.source, path=c.source,
                         section=c.section, title=c.title, label=c.label, page=c.page)


async def _answer_events(engine: Engine, sp: SuperPrompt, context_key: str,
                         started: float) -> AsyncIterator[str]:
    """The SSE stream of one answer (``answer_stream``) in ``/answer``'s events."""
    tokens = 0
    async for kind, value in answer_stream(engine, sp, started):
        if kind == "token":
            tokens += 1
            yield _sse("token", {"token": value})
            continue
        if kind == "error":
            if isinstance(value, RagstreamError):
                log.error("answer failed (%s): %s", value.kind, value)
                yield _sse("error", ErrorBody(error=value.kind, message=str(value)))
            else:
                log.error("answer failed", exc_info=value)
                yield _sse("error", ErrorBody(error="internal error",
                                              message="The answer failed unexpectedly; see the "
                                                      "service's log."))
            return
        out_sp, ans = value
        for c in ans.sources:
            yield _sse("citation", _citation(c, out_sp))
        qa = out_sp.extras.qa_log
        turn = out_sp.extras.turn
        yield _sse("done", DoneEvent(
            context_key=context_key, mode=ans.mode, confidence=ans.confidence,
            confidence_reason=ans.confidence_reason, confidence_detail=ans.confidence_detail,
            read_as=read_as(out_sp), invalid_citations=ans.invalid_citations,
            unsupported=ans.unsupported, extractive_text=ans.extractive_text,
            set_aside_reason=ans.set_aside_reason,
            total_tokens=ans.usage.prompt_tokens + ans.usage.completion_tokens,
            token_events=tokens, latency_ms=round((time.perf_counter() - started) * 1000.0),
            qa_log_id=qa.id if qa else None, kb=engine.kb,
            conversation=out_sp.conversation_name,
            turn=turn.turn if turn is not None and turn.turn else None,
            remembered=turn.remembered if turn is not None else None,
            uses=(turn.uses or "") if turn is not None else ""))
        return


# --------------------------------------------------------------------------- the app


_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "missing or wrong bearer token (when the service has one)"},
    403: {"model": ErrorBody, "description": "the token lacks the scope or the knowledge base"},
    413: {"model": ErrorBody, "description": "the request body is over the limit"},
    422: {"model": ErrorBody, "description": "invalid query or request body"},
    500: {"model": ErrorBody, "description": "another RAGstream error"},
    503: {"model": ErrorBody, "description": "the vector store (Chroma server) cannot be reached"},
}

_ANSWER_DOC = """Answer the query as Server-Sent Events (seed 003, "Stream to Frontend"):

* `event: token`, `data: {"token": str}`: the answer's pieces, in order; joined they are the answer.
* `event: citation`, `data: CitationEvent`: one per valid citation, after the last token.
* `event: done`, `data: DoneEvent`: total_tokens, latency_ms, mode, confidence (its reason in
  words, its figures in confidence_detail), read_as (a follow-up read with the conversation:
  the standalone question answered; "" when the query stands on its own), qa_log_id.
* `event: error`, `data: ErrorBody`: the answer failed after the stream began (nothing follows).

The stages (retrieval, reranking, gate, condenser, format) run before the stream starts, so
their errors are HTTP errors. A client that disconnects stops the answer; the Q&A log keeps
the text it was sent, marked incomplete."""


def tokens_of(token: str | None, tokens: Tokens | None) -> Tokens:
    """``tokens``, or the one full token ``token`` (read and write, every knowledge base)."""
    if tokens is not None:
        return tokens
    return Tokens([(token.strip(), Grant("$RAGSTREAM_API_TOKEN"))]) if token and token.strip() else Tokens()


def create_app(pipeline: RAGPipeline, token: str | None = None, *,
               tokens: Tokens | None = None, failures: Failures | None = None,
               max_body_bytes: int = MAX_BODY_BYTES,
               max_ingest_body_bytes: int = MAX_INGEST_BODY_BYTES) -> FastAPI:
    """The HTTP face of ``pipeline`` (and its engine). ``token``: one full bearer token, or
    ``tokens`` (``auth.Tokens.load``: scopes and knowledge bases); none: no token needed.
    ``failures``: where failed attempts are counted (a new ``auth.Failures`` by default)."""
    from ragstream import __version__
    from ragstream.interfaces.service import openai_compat

    engine = pipeline.engine
    accepted = tokens_of(token, tokens)
    failures = failures or Failures()
    app = FastAPI(title="RAGstream retrieval service", version=__version__,
                  description="The retrieval contract (seed 000) and the streamed answer (seed 003) "
                              "of RAGstream over HTTP.")
    app.add_middleware(_Guard, tokens=accepted, failures=failures,
                       limits={"/ingest": max_ingest_body_bytes}, default_limit=max_body_bytes)
    app.add_middleware(_WorkerHeader)  # outermost: a 401 or 413 names its worker too
    app.state.failures = failures
    # documents the bearer scheme in the schema; _Guard enforces it (on every path but /health)
    secured = [Security(HTTPBearer(auto_error=False))] if accepted else []

    def kb_name(kb: str | None) -> str:
        return kb or engine.kb

    def openai_path(request: Request) -> bool:  # the OpenAI-compatible routes' errors
        return request.url.path.startswith(openai_compat.PATH_PREFIX)

    @app.exception_handler(RagstreamError)
    async def ragstream_error(request: Request, err: Exception) -> JSONResponse:
        assert isinstance(err, RagstreamError)
        status = status_for(err)
        if status >= 500:
            log.error("%s %s failed (%s): %s", request.method, request.url.path, err.kind, err)
        if openai_path(request):  # OpenAI's clients read 400 as a bad request
            return openai_compat.error_response(400 if status == 422 else status, str(err), err.kind)
        return _error(status, err.kind, str(err))

    @app.exception_handler(Exception)
    async def unexpected(request: Request, err: Exception) -> JSONResponse:
        log.error("%s %s failed", request.method, request.url.path, exc_info=err)
        message = "The request failed unexpectedly; see the service's log."
        if openai_path(request):
            return openai_compat.error_response(500, message, "internal error")
        return _error(500, "internal error", message)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, err: Exception) -> JSONResponse:
        assert isinstance(err, StarletteHTTPException)
        kind = {404: "not found", 405: "method not allowed"}.get(err.status_code, "bad request")
        message = (f"There is no {request.method} {request.url.path}"
                   + (": the OpenAI-compatible routes are GET /v1/models and POST "
                      "/v1/chat/completions." if openai_path(request) else
                      " (the routes are listed at /docs and /openapi.json)."))
        if err.status_code not in (404, 405):
            message = str(err.detail)
        headers = dict(err.headers) if err.headers else None
        if openai_path(request):
            response = openai_compat.error_response(err.status_code, message, kind)
            response.headers.update(headers or {})
            return response
        return _error(err.status_code, kind, message, headers)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, err: Exception) -> JSONResponse:
        assert isinstance(err, RequestValidationError)
        problems = "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', '')}"
                             for e in err.errors())
        message = f"The request body is not valid: {problems}"
        if openai_path(request):
            first = err.errors()[0] if err.errors() else {}
            loc = [str(p) for p in first.get("loc", ())[1:]]
            return openai_compat.error_response(400, message, "invalid request",
                                                param=".".join(loc) or None)
        body = ErrorBody(error="invalid request", message=message)
        return JSONResponse({**body.model_dump(), "detail": jsonable_encoder(err.errors())},
                            status_code=422)

    @app.get("/health", response_model=Health, responses={503: {"model": Health}},
             summary="Status, chunks in the index, store mode, version (never needs the token)")
    def health() -> Health | JSONResponse:
        mode = engine.cfg.settings.vector_store.mode
        try:
            chunks = engine.services.index().n_chunks
        except RagstreamError as err:
            down = Health(status="unavailable", chunks=None, store_mode=mode, version=__version__,
                          message=str(err), kb=engine.kb, failed_auth=failures.total)
            return JSONResponse(down.model_dump(), status_code=503)
        if not chunks:
            return Health(status="empty", chunks=0, store_mode=mode, version=__version__,
                          kb=engine.kb, failed_auth=failures.total,
                          message=empty_message(engine.kb))
        return Health(status="ok", chunks=chunks, store_mode=mode, version=__version__,
                      kb=engine.kb, failed_auth=failures.total)

    @app.post("/retrieve", response_model=RAGContext, dependencies=secured,
              responses={**_ERRORS, 504: {"model": ErrorBody, "description": "retrieval timed out"}},
              summary="The chunks most relevant to the query (RAGPipeline.retrieve)")
    def retrieve(body: RetrieveRequest, request: Request) -> RAGContext:
        grant_of(request).check("read", kb_name(body.kb))
        return pipeline.retrieve(body.query, body.context_key, max_chunks=body.max_chunks,
                                 min_relevance=body.min_relevance, filters=body.filters, kb=body.kb)

    @app.post("/ingest", response_model=IngestionResult, dependencies=secured,
              responses={**_ERRORS, 409: {"model": ErrorBody, "description": "another ingestion runs"}},
              summary="Ingest (upsert) rule documents (RAGPipeline.ingest)")
    def ingest(documents: list[RuleDocument], request: Request, kb: str | None = None) -> IngestionResult:
        grant_of(request).check("write", kb_name(kb))
        return pipeline.ingest(documents, kb=kb)

    @app.get("/kb", dependencies=secured, summary="The knowledge bases: name, folder, collection")
    def kb_list(request: Request) -> list[dict[str, Any]]:
        grant = grant_of(request)
        return [kb.model_dump() for kb in engine.knowledge_bases().all() if grant.may_see(kb.name)]

    @app.post("/kb", dependencies=secured, status_code=201, responses=_ERRORS,
              summary="Create a knowledge base (ingest into it with POST /ingest?kb=NAME)")
    def kb_create(body: KnowledgeBaseRequest, request: Request) -> dict[str, Any]:
        grant_of(request).check("write", body.name)
        return engine.create_kb(body.name, body.folder).model_dump()

    @app.patch("/kb/{name}", dependencies=secured, responses=_ERRORS,
               summary="Rename a knowledge base (its documents and index stay)")
    def kb_rename(name: str, body: RenameRequest, request: Request) -> dict[str, Any]:
        grant_of(request).check("write", name)
        grant_of(request).check("write", body.name)
        renamed = engine.rename_kb(name, body.name).model_dump()
        pipeline.clear_cache()
        return renamed

    @app.delete("/kb/{name}", dependencies=secured, responses=_ERRORS,
                summary="Delete a knowledge base: its index and its own folder (never another's); "
                        "?confirm=NAME must repeat its name")
    def kb_delete(name: str, request: Request, confirm: str = "") -> dict[str, Any]:
        grant_of(request).check("write", name)
        kb = engine.knowledge_bases().get(name)
        if confirm != kb.name:
            raise KnowledgeBaseError(f"Deleting knowledge base {kb.name!r} removes its index"
                                     + (" and its folder" if kb.own_folder else "") + ": repeat "
                                     f"its name to confirm (DELETE /kb/{kb.name}?confirm={kb.name}).")
        gone = engine.delete_kb(kb.name)
        pipeline.clear_cache()
        return gone.model_dump()

    @app.post("/answer", response_class=StreamingResponse, dependencies=secured,
              responses={200: {"content": {SSE_MEDIA_TYPE: {}}, "description": "the SSE stream"},
                         **_ERRORS},
              summary="Answer with citations, streamed as Server-Sent Events", description=_ANSWER_DOC)
    async def answer(body: AnswerRequest, request: Request) -> StreamingResponse:
        started = time.perf_counter()
        grant_of(request).check("read", kb_name(body.kb))

        kb_engine = pipeline.engine_for(body.kb)

        def stages() -> SuperPrompt:
            sp = kb_engine.new(pipeline.checked_query(body.query, body.kb), body.turns() or None,
                               conversation_name=body.conversation or "")
            sp.filters = body.filters
            return kb_engine.run(sp)

        sp = await run_in_threadpool(stages)
        return StreamingResponse(_answer_events(kb_engine, sp, body.context_key, started),
                                 media_type=SSE_MEDIA_TYPE,
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    openai_compat.add_routes(app, pipeline, secured)
    return app


def warm_pipeline(pipeline: RAGPipeline) -> None:
    """One retrieval through ``pipeline`` before the first request (a store that cannot be
    reached is a warning). ``Engine.warm_up`` loads the models, but the store's client, its
    HNSW and the keyword searcher open at the first query; opened here, the first requests do
    not pay for them, nor open them at once from several threads (the embedded Chroma client
    is not safe to open concurrently: requests failed with a KeyError inside chromadb)."""
    try:
        pipeline.retrieve("warm up", f"warm-up:{os.getpid()}")
    except Exception as err:  # never keeps the service from starting: /health says what is wrong
        log.warning("process %d: the warm-up retrieval failed (%s): %s", os.getpid(),
                    getattr(err, "kind", type(err).__name__), err)
    pipeline.clear_cache()
    from ragstream.workbench.engine import settle_memory

    settle_memory()  # what the first retrieval opened lives as long as the worker


def serve(pipeline: RAGPipeline, host: str, port: int, token: str | None = None, *,
          tokens: Tokens | None = None) -> None:
    """Serve ``create_app(pipeline, token, tokens=tokens)`` with uvicorn in this process until
    interrupted (``warm_pipeline`` first); off loopback only with a token
    (``auth.require_token_off_loopback``)."""
    import uvicorn

    accepted = tokens_of(token, tokens)
    require_token_off_loopback(host, accepted)
    warm_pipeline(pipeline)
    uvicorn.run(create_app(pipeline, tokens=accepted), host=host, port=port, log_level="info")


def worker_tokens() -> Tokens:
    """The tokens of a worker: the full token in the variable ``$RAGSTREAM_SERVE_TOKEN_ENV``
    names (when set), and the tokens file of ``$RAGSTREAM_API_TOKENS_FILE``."""
    name = os.environ.get(WORKER_TOKEN_ENV, "")
    return Tokens.load(name or None)


def app_factory() -> FastAPI:
    """The app of one worker process (``serve_workers``): its own ``Engine`` (the configuration
    from the environment, the default knowledge base), warmed up, its own ``RAGPipeline``
    (``warm_pipeline``). A store that cannot be
    reached now is a warning: /health says so and the worker answers once it is back. The
    tokens come from ``worker_tokens``."""
    from ragstream.workbench.api import RAGPipeline
    from ragstream.workbench.engine import Engine

    engine = Engine()
    try:
        engine.warm_up()
    except RagstreamError as err:
        log.warning("worker %d: warm-up failed (%s): %s", os.getpid(), err.kind, err)
    pipeline = RAGPipeline(engine)
    warm_pipeline(pipeline)
    return create_app(pipeline, tokens=worker_tokens())


def _listening_socket(host: str, port: int):
    """A socket bound to ``host:port`` with ``SO_REUSEPORT``: each worker binds its own, and the
    kernel spreads new connections over them (one shared socket lets the first worker to
    wake accept every pending connection)."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def _worker_main(host: str, port: int) -> None:
    """One worker process: its own socket on the shared port, its own app (``app_factory``)."""
    import uvicorn

    sock = _listening_socket(host, port)
    server = uvicorn.Server(uvicorn.Config(app_factory(), log_level="info"))
    server.run(sockets=[sock])


def serve_workers(host: str, port: int, workers: int, token_env: str | None) -> None:
    """Serve ``app_factory`` in ``workers`` processes until interrupted, each with its own
    ``SO_REUSEPORT`` socket on ``host:port`` (the kernel balances connections over them). A
    worker that dies is replaced; SIGINT/SIGTERM stop them all gracefully (requests under way
    finish). ``token_env``: the name of the variable holding the bearer token, passed to the
    workers as ``$RAGSTREAM_SERVE_TOKEN_ENV`` (the tokens file's path, in
    ``$RAGSTREAM_API_TOKENS_FILE``, they inherit). Off loopback only with a token."""
    import multiprocessing
    import signal

    require_token_off_loopback(host, Tokens.load(token_env))
    if token_env:
        os.environ[WORKER_TOKEN_ENV] = token_env
    else:
        os.environ.pop(WORKER_TOKEN_ENV, None)
    _listening_socket(host, port).close()  # the port is free (a clear error now, not N later)
    spawn = multiprocessing.get_context("spawn")
    stopping = threading.Event()

    def start() -> multiprocessing.process.BaseProcess:
        proc = spawn.Process(target=_worker_main, args=(host, port), daemon=False)
        proc.start()
        return proc

    def stop(signum, _frame) -> None:
        stopping.set()

    previous = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    procs = [start() for _ in range(workers)]
    try:
        while not stopping.wait(0.5):
            for i, proc in enumerate(procs):
                if not proc.is_alive():
                    log.warning("worker %s ended (exit code %s): starting another", proc.pid,
                                proc.exitcode)
                    procs[i] = start()
    finally:
        for proc in procs:
            if proc.is_alive() and proc.pid:
                os.kill(proc.pid, signal.SIGTERM)
        for proc in procs:
            proc.join(30)
            if proc.is_alive():
                proc.kill()
        for s, handler in previous.items():
            signal.signal(s, handler)
        print(f"RAGstream: {len(procs)} workers stopped", file=sys.stderr, flush=True)
