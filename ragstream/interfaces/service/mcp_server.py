"""The knowledge bases as an MCP server (the official ``mcp`` SDK's ``MCPServer``).

    python -m ragstream mcp                      # stdio: a desktop app or an editor starts it
    python -m ragstream mcp --http [--port 8765] # streamable HTTP on loopback, at /mcp,
                                                 # bearer token as the HTTP service's
    python -m ragstream mcp --allow-ingest       # also the ingest tool (off by default)

**Tools** (their descriptions are written for a model that has nothing else to go on):

* ``search`` — the retrieval contract (``RAGPipeline.retrieve``): the chunks most relevant to
  a question, each with its relevance (0-1), source, section, page, knowledge base, ids and an
  excerpt (``EXCERPT_CHARS``), most relevant first; ``found`` False with the reason when none
  reaches the relevance threshold.
* ``answer`` — the eight stages and the answer (as ``POST /answer``): the answer text, its
  numbered citations, confidence (in words and figures) and mode; kept as a run (origin
  ``api``). The conversation so far is ``history`` (earlier turns ``{"question", "answer"}``,
  oldest first; the last ``limits.N4_RECENT_CONV_MAX_PAIRS`` are kept) or a named
  ``conversation`` of the knowledge base (as ``run --conversation``: its last turns when no
  ``history`` is given, and the answer becomes its next turn); a follow-up is read with it,
  and ``read_as`` gives that standalone reading ("" when the question stands on its own).
* ``get_chunk`` — one chunk whole, by the ``chunk_ref`` (or ``chunk_id``) ``search`` gave.
* ``get_document`` — one document whole (its chunks' texts in order), by its path.
* ``list_knowledge_bases`` — the knowledge bases, with their chunk counts.
* ``ingest`` (only with ``allow_ingest``) — upsert Markdown or text documents.

**The question** is ``question`` for both ``search`` and ``answer``; ``query`` (``search``'s
older name) is accepted as the same, and a call with neither is a tool error saying what to
send (with an example from the knowledge base asked). **A chunk's id** is ``chunk_id``
(``kb/faq.md#3``), the same as ``/retrieve``, ``/answer`` and the ``/v1`` citations give;
``chunk_ref`` repeats it (its older name) and ``get_chunk`` takes either.

**Tokens** (``--http``): every request needs ``Authorization: Bearer <token>``
(``ragstream.interfaces.service.auth``: the HTTP service's tokens, failed attempts counted and slowed);
the tools that read need the ``read`` scope, ``ingest`` the ``write`` scope, and a token
limited to knowledge bases is refused on another (a tool error naming the token and what it
lacks) and lists only its own. Over stdio there is no token: the client started the process.

**Errors** are tool errors (``is_error``) whose text is the typed error's message (an unknown
knowledge base names the ones there are; an empty question says what to send; the engine
down names what to start); "nothing found" is a result that says so, never an error.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, ConfigDict, Field

from ragstream.common.errors import RagstreamError
from ragstream.interfaces.service.auth import (
    OPEN,
    Failures,
    ForbiddenError,
    Grant,
    Tokens,
    client_address,
    require_token_off_loopback,
)
from ragstream.state.super_prompt import Filters

if TYPE_CHECKING:  # pragma: no cover
    from ragstream.workbench.api import RAGPipeline

log = logging.getLogger(__name__)

#: characters of a chunk's text ``search`` returns (``get_chunk`` gives the whole chunk)
EXCERPT_CHARS = 600
#: the most characters ``get_document`` returns (a longer document is cut, and says so)
DOCUMENT_MAX_CHARS = 60_000
#: the path of the streamable HTTP endpoint
HTTP_PATH = "/mcp"
DEFAULT_HTTP_PORT = 8765

INSTRUCTIONS = (
    "RAGstream answers questions from the user's own documents (knowledge bases). Use `search` "
    "to find the passages that answer a question and cite them by their source and section; "
    "use `answer` for a finished answer with numbered citations and a confidence. A result "
    "with found=false means the documents do not cover the question: say so rather than "
    "guessing. `get_chunk` and `get_document` return whole texts by the ids `search` gives; "
    "`list_knowledge_bases` names the knowledge bases (the `kb` argument of the other tools). "
    "A follow-up question (\"and on Windows?\") goes to `answer` with the conversation so far "
    "as `history`; `read_as` says how it was read.")


#: the arguments the tools share, described for the model
KB = Annotated[str, Field(description="the knowledge base (list_knowledge_bases names them)")]
Question = Annotated[str | None, Field(description=(
    "the question, in plain words (at most 2,000 characters)"))]
QueryAlias = Annotated[str | None, Field(description=(
    "the same as `question` (an older name); give one of them"))]


class Turn(BaseModel):
    """One earlier turn of the conversation given to ``answer``: a question and its answer."""

    model_config = ConfigDict(extra="forbid")

    question: str = Field(description="what was asked")
    answer: str = Field("", description="the answer it got ('' when there was none)")


def _typed(err: RagstreamError) -> ToolError:
    return ToolError(f"{err.kind}: {err}")


def _filters(doc_type: list[str] | None, source: list[str] | None) -> Filters:
    return Filters(doc_type=tuple(doc_type or ()), source=tuple(source or ()))


def build_server(pipeline: RAGPipeline, allow_ingest: bool = False,
                 tokens: Tokens | None = None) -> MCPServer:
    """The MCP server over ``pipeline``'s knowledge bases; ``tokens``: what its tools allow the
    token of each HTTP request (none: everything, as over stdio)."""
    from ragstream import __version__
    from ragstream.workbench.api import example_topic

    engine = pipeline.engine
    mcp = MCPServer("ragstream", title="RAGstream", instructions=INSTRUCTIONS, version=__version__)

    def run(work):
        try:
            return work()
        except RagstreamError as err:
            raise _typed(err) from err

    def grant(ctx: Context | None) -> Grant:
        """The grant of the request's bearer token (``auth.OPEN`` without tokens or a request)."""
        if not tokens or ctx is None:
            return OPEN
        try:
            request = ctx.request_context.request
        except ValueError:
            request = None
        headers = getattr(request, "headers", None)
        if headers is None:  # not over HTTP: the process's own client
            return OPEN
        found = tokens.from_header(headers.get("authorization"))
        if found is None:  # the guard lets no such request through
            raise ToolError("unauthorized: send 'Authorization: Bearer <token>'.")
        return found

    def allowed(ctx: Context | None, scope: str, kb: str, tool: str) -> None:
        try:
            grant(ctx).check(scope, kb, f"(the {tool} tool)")  # type: ignore[arg-type]
        except ForbiddenError as err:
            raise _typed(err) from err

    def the_question(tool: str, question: str | None, query: str | None, kb: str) -> str:
        """``question``, or ``query`` (the same); a tool error saying what to send without."""
        if question is not None and query is not None and question.strip() != query.strip():
            raise ToolError(f"invalid query: {tool} got both `question` and `query` (the same "
                            "argument under its older name), with different texts. Send only "
                            "`question`.")
        text = question if question is not None else query
        if text is None:
            topic = run(lambda: example_topic(pipeline.engine_for(kb)))
            example = (f', e.g. {{"question": "What does it say about {topic}?"}}' if topic
                       else "")
            raise ToolError(f"invalid query: {tool} needs `question`, the question in plain "
                            f"words{example}. (`query` is accepted as the same.)")
        return text

    @mcp.tool(title="Search the documents")
    def search(question: Question = None, kb: KB = "default",
               max_chunks: Annotated[int, Field(ge=1, le=100, description="at most this many "
                                                "passages")] = 5,
               min_relevance: Annotated[float | None, Field(ge=0, le=1, description=(
                   "keep passages at least this relevant (default: the server's, 0.6)"))] = None,
               doc_type: Annotated[list[str] | None, Field(description=(
                   "only these document types"))] = None,
               source: Annotated[list[str] | None, Field(description=(
                   "only documents whose path or source name matches one of these shell "
                   "patterns, e.g. 'guides/*'"))] = None,
               query: QueryAlias = None, ctx: Context | None = None) -> dict[str, Any]:
        """Find the passages of a knowledge base that answer `question` (in plain words; `query`
        is accepted as the same). Returns `chunks`, most relevant first, each with `relevance`
        (0-1, the estimated probability that it answers), `source` (the document), `section`,
        `page` (PDFs), `chunk_id` (e.g. "kb/faq.md#3": pass it to get_chunk; `chunk_ref` is the
        same), `path` (pass it to get_document) and an `excerpt` of its text. `found` is
        false, with `reason`, when no passage is relevant enough: the documents do not cover
        the question. `kb` names the knowledge base
        (list_knowledge_bases); `max_chunks` 1-100; `doc_type` and `source` (shell patterns
        such as "guides/*") narrow the search."""
        allowed(ctx, "read", kb, "search")
        text = the_question("search", question, query, kb)
        found = run(lambda: pipeline.retrieve(text, "mcp", max_chunks=max_chunks,
                                              min_relevance=min_relevance,
                                              filters=_filters(doc_type, source), kb=kb))
        return {
            "kb": found.kb, "found": found.meets_threshold, "reason": found.no_documents_reason,
            "chunks": [{
                "chunk_id": c.chunk_id, "chunk_ref": c.chunk_id,
                "relevance": c.relevance_score, "source": c.metadata["source"],
                "path": c.metadata["path"], "section": c.metadata["section"],
                "title": c.metadata["title"], "page": c.metadata.get("page"),
                "kb": c.metadata["kb"],
                "excerpt": c.text if len(c.text) <= EXCERPT_CHARS
                else c.text[:EXCERPT_CHARS].rsplit(" ", 1)[0] + " …",
            } for c in found.document_chunks],
        }

    @mcp.tool(title="Answer from the documents")
    def answer(question: Question = None, kb: KB = "default",
               history: Annotated[list[Turn] | None, Field(description=(
                   "the conversation so far, oldest first: the earlier questions, each with the "
                   "answer it got; a follow-up question is read with them"))] = None,
               conversation: Annotated[str | None, Field(description=(
                   "a named conversation of this knowledge base to continue (started if new): "
                   "its last turns are the conversation so far when `history` is not given, "
                   "its remembered turns are searched, and this answer becomes its next turn"))
               ] = None,
               query: QueryAlias = None, ctx: Context | None = None) -> dict[str, Any]:
        """Answer `question` from a knowledge base (`query` is accepted as the same), with
        numbered citations. Returns `text` (the answer; [n] marks cite `citations` n),
        `citations` (n, source, section, page, chunk_id), `confidence` (High / Medium / Low)
        with `confidence_reason` (in words) and `confidence_detail` (the figures), and `mode`
        ("llm", "extractive": sentences quoted from the documents, or "no-results": the
        documents do not answer it). A follow-up
        that leans on what came before ("and how do I do that in .htaccess instead?") needs
        the conversation: pass the earlier turns as `history`, [{"question": "How do I
        redirect all http traffic to https?", "answer": "..."}], or name a `conversation` the
        server keeps; it is then read as a question of its own, given as `read_as` ("How do I
        redirect all http traffic to https in .htaccess instead?"; "" when the question stands
        on its own), and that reading is searched and answered. Slower than search: it runs
        the whole pipeline."""
        from ragstream.interfaces.service.openai_compat import keep_run
        from ragstream.interfaces.service.streaming import read_as
        from ragstream.state.super_prompt import ConversationTurn

        allowed(ctx, "read", kb, "answer")
        text = the_question("answer", question, query, kb)

        def work() -> dict[str, Any]:
            kb_engine = pipeline.engine_for(kb)
            pairs = kb_engine.cfg.limits.N4_RECENT_CONV_MAX_PAIRS
            turns = [ConversationTurn(user=t.question, assistant=t.answer)
                     for t in history or []][-pairs:] if pairs > 0 else []
            sp = kb_engine.run(kb_engine.new(pipeline.checked_query(text, kb), turns or None,
                                             conversation_name=conversation or ""))
            out_sp, ans = kb_engine.answer(sp)
            run_id = keep_run(kb_engine, out_sp)
            turn = out_sp.extras.turn
            return {"kb": kb_engine.kb, "text": ans.text, "mode": ans.mode,
                    "read_as": read_as(out_sp),
                    "confidence": ans.confidence, "confidence_reason": ans.confidence_reason,
                    "confidence_detail": ans.confidence_detail,
                    "unsupported": ans.unsupported, "run_id": run_id,
                    "conversation": out_sp.conversation_name,
                    "turn": turn.turn if turn is not None and turn.turn else None,
                    "citations": [{"n": c.n, "source": c.source, "section": c.section,
                                   "page": c.page, "title": c.title, "chunk_id": c.chunk_id,
                                   "chunk_ref": c.chunk_id,
                                   "label": c.label} for c in ans.sources]}
        return run(work)

    @mcp.tool(title="Get a chunk")
    def get_chunk(chunk_id: Annotated[str | None, Field(description=(
                      "a passage's chunk_id from search or answer, e.g. 'kb/faq.md#3'"))] = None,
                  kb: KB = "default",
                  chunk_ref: Annotated[str | None, Field(description=(
                      "the same as chunk_id (an older name)"))] = None,
                  ctx: Context | None = None) -> dict[str, Any]:
        """One passage whole, by the `chunk_id` a search result or an answer's citation gave
        (e.g. "kb/faq.md#3"; `chunk_ref` is the same): its full `text`, `source`, `section`,
        `page`, `path` and its place in the document."""
        allowed(ctx, "read", kb, "get_chunk")
        ref = chunk_id or chunk_ref
        if not ref:
            raise ToolError("invalid query: get_chunk needs `chunk_id`, a passage's id from search "
                            "(e.g. 'kb/faq.md#3').")

        def work() -> dict[str, Any]:
            corpus = pipeline.engine_for(kb).services.index()
            chunk = corpus.chunk(ref)
            if chunk is None:
                raise ToolError(f"There is no chunk {ref!r} in knowledge base {kb!r}. Pass "
                                "a chunk_id that search returned (the path, '#', its number).")
            return {"chunk_id": chunk.id, "chunk_ref": chunk.id, "kb": kb, "text": chunk.text,
                    "source": chunk.source_name or chunk.source, "path": chunk.source,
                    "section": chunk.section, "title": chunk.title, "page": chunk.page,
                    "position_in_doc": chunk.chunk_index}
        return run(work)

    @mcp.tool(title="Get a document")
    def get_document(path: Annotated[str, Field(description=(
                         "a document's path from search, e.g. 'kb/faq.md'"))],
                     kb: KB = "default", ctx: Context | None = None) -> dict[str, Any]:
        """One document whole, by the `path` a search result gave (e.g. "kb/faq.md"): its
        sections' texts in order, joined (`text`), with its `title`; a very long document is
        cut (`truncated`)."""
        allowed(ctx, "read", kb, "get_document")

        def work() -> dict[str, Any]:
            kb_engine = pipeline.engine_for(kb)
            ids = kb_engine.services.store.document_chunks(path)
            if not ids:
                raise ToolError(f"There is no document {path!r} in knowledge base {kb!r}. Pass a "
                                "path that search returned.")
            held = kb_engine.services.index().fetch(ids)
            chunks = sorted((s.chunk for s in held.values()), key=lambda c: c.chunk_index)
            text = "\n\n".join(c.text for c in chunks)
            return {"path": path, "kb": kb, "title": chunks[0].title if chunks else "",
                    "chunks": len(chunks), "text": text[:DOCUMENT_MAX_CHARS],
                    "truncated": len(text) > DOCUMENT_MAX_CHARS}
        return run(work)

    @mcp.tool(title="List the knowledge bases")
    def list_knowledge_bases(ctx: Context | None = None) -> dict[str, Any]:
        """The knowledge bases this server answers from: `name` (the `kb` argument of the
        other tools) and `chunks` (how many passages it holds)."""
        allowed(ctx, "read", None, "list_knowledge_bases")  # type: ignore[arg-type]
        own = grant(ctx)

        def work() -> dict[str, Any]:
            out = []
            for kb in engine.knowledge_bases().all():
                if not own.may_see(kb.name):
                    continue
                try:
                    chunks: int | None = pipeline.engine_for(kb.name).services.index().n_chunks
                except RagstreamError:
                    chunks = None
                out.append({"name": kb.name, "chunks": chunks})
            return {"knowledge_bases": out}
        return run(work)

    if allow_ingest:
        @mcp.tool(title="Add or replace documents")
        def ingest(filename: Annotated[str, Field(description="e.g. 'notes/meeting.md'")],
                   content: Annotated[str, Field(description="the document's Markdown or text")],
                   kb: KB = "default",
                   document_id: Annotated[str | None, Field(description=(
                       "replaces the document with this id (default: the file name)"))] = None,
                   ctx: Context | None = None) -> dict[str, Any]:
            """Add a Markdown or text document to a knowledge base (or replace the one with the
            same `document_id`, default the file name): `filename` such as "notes/meeting.md",
            `content` its text. Returns how many were written and any errors."""
            allowed(ctx, "write", kb, "ingest")
            result = run(lambda: pipeline.ingest(
                [{"document_id": document_id or filename, "filename": filename.rsplit("/", 1)[-1],
                  "content": content}], kb=kb))
            return {"processed": result.documents_processed, "failed": result.documents_failed,
                    "errors": result.errors, "warnings": result.warnings}

    return mcp


class BearerGuard:
    """ASGI middleware: every request needs ``Authorization: Bearer <token>`` with one of
    ``tokens`` (401 without; failed attempts counted and slowed by ``failures``). What the
    token may do is checked by the tools."""

    def __init__(self, app: Any, tokens: Tokens, failures: Failures | None = None):
        self.app, self.tokens = app, tokens
        self.failures = failures or Failures()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Refuse an HTTP request without a valid token; pass everything else on (the lifespan)."""
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            given = headers.get(b"authorization")
            address = client_address(scope)
            if self.tokens.from_header(given) is None:
                count, delay = self.failures.record(address)
                log.warning("refused %s %s from %s: %s (failed attempt %d from that address; "
                            "answered after %.2f s)", scope.get("method"), scope.get("path"),
                            address, "no bearer token" if given is None else "a wrong token",
                            count, delay)
                if delay:
                    await asyncio.sleep(delay)
                body = (b'{"error": "unauthorized", "message": "This MCP server needs '
                        b'Authorization: Bearer <token> with a token it was started with '
                        b'($RAGSTREAM_API_TOKEN or its tokens file)."}')
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body", "body": body})
                return
            self.failures.clear(address)
        await self.app(scope, receive, send)


def http_app(pipeline: RAGPipeline, token: str | None = None, allow_ingest: bool = False, *,
             tokens: Tokens | None = None, failures: Failures | None = None) -> Any:
    """The streamable HTTP app (at ``HTTP_PATH``), behind the bearer tokens when there are
    any (``token``: one full token; ``tokens``: ``auth.Tokens.load``)."""
    from ragstream.interfaces.service.http import tokens_of

    accepted = tokens_of(token, tokens)
    server = build_server(pipeline, allow_ingest, accepted)
    app = server.streamable_http_app(streamable_http_path=HTTP_PATH)
    return BearerGuard(app, accepted, failures) if accepted else app


def serve_stdio(pipeline: RAGPipeline, allow_ingest: bool = False) -> None:
    """Serve over stdin/stdout until the client closes them."""
    build_server(pipeline, allow_ingest).run("stdio")


def serve_http(pipeline: RAGPipeline, host: str, port: int, token: str | None = None,
               allow_ingest: bool = False, *, tokens: Tokens | None = None) -> None:
    """Serve streamable HTTP on ``host:port`` with uvicorn (its lifespan runs the SDK's
    session manager); off loopback only with a token (``auth.require_token_off_loopback``)."""
    import uvicorn

    from ragstream.interfaces.service.http import tokens_of

    accepted = tokens_of(token, tokens)
    require_token_off_loopback(host, accepted, "mcp --http")
    uvicorn.run(http_app(pipeline, allow_ingest=allow_ingest, tokens=accepted), host=host,
                port=port, log_level="info")
