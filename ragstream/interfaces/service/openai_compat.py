"""The knowledge bases as OpenAI-compatible models, on the HTTP service (``ragstream serve``).

    GET  /v1/models             one model per knowledge base: "ragstream/<name>"
    POST /v1/chat/completions   an answer with citations, streamed (SSE) or not

Any client of OpenAI's chat API reaches RAGstream this way: the ``openai`` package
(``base_url="http://127.0.0.1:8000/v1"``, ``api_key`` the service's bearer token, or any
text when it has none), Open WebUI, LibreChat.

**A request** names the knowledge base as its model (``ragstream/default``, or the bare name).
The last ``user`` message is the prompt; the ``user`` and ``assistant`` messages before it are
the conversation (turns: a user message and the assistant's reply after it; the last
``limits.N4_RECENT_CONV_MAX_PAIRS`` are kept, as the page keeps them): a follow-up ("and on
Windows?") is read with their questions, and retrieval and the answer use that standalone
reading (``read_as`` below). ``system`` and
``developer`` messages are not read: RAGstream's own prompt says how to answer, from the
sources. A message's content is its text, or the ``text`` parts of a list of parts; any
other part (an image) is refused. Other fields a client sends (``temperature``, ``top_p``,
``max_tokens``, ``tools``, ``user``, …) are accepted and not used: the configured model and
settings answer. ``n`` must be 1.

**The pass** is the eight stages and the answer, as ``POST /answer`` runs them, on the
knowledge base's own engine, and it is kept as a run (origin ``api``; the page's Runs tab and
``ragstream runs`` show it).

**The reply** is a ``chat.completion`` whose message is the answer, then its numbered sources
(``SOURCES_HEADER``, one line ``- [n] label`` each, the citation labels the page shows), and
two fields beside OpenAI's own:

* ``citations``: one per source: ``n``, ``chunk_id``, ``source`` (the document), ``section``,
  ``title``, ``page``, ``label``;
* ``ragstream``: ``kb``, ``mode`` (``llm`` / ``extractive`` / ``no-results``), ``confidence``
  (High / Medium / Low) with ``confidence_reason`` (in words) and ``confidence_detail`` (the
  figures), ``read_as`` (the last user message read with the earlier ones, the question
  answered: "How do I redirect all HTTP traffic to HTTPS in .htaccess?"; "" when it stands on
  its own), ``unsupported`` (why a model's answer was set aside, when it was),
  ``invalid_citations``, ``run_id``, ``qa_log_id``.

``usage`` is the LLM's tokens (zero for an extractive answer). Streamed (``stream: true``), the
chunks carry the role, the answer's pieces as they come, the sources as one last piece, then a
chunk with ``finish_reason`` ``stop`` and the two extra fields, an optional ``usage`` chunk
(``stream_options.include_usage``), and ``data: [DONE]``; joined, the pieces are the
non-streamed message. An error after the stream has begun is one chunk with an ``error``
object, then ``[DONE]``.

**Errors** have OpenAI's shape, ``{"error": {"message", "type", "param", "code"}}``, every one
under ``/v1/`` (so the ``openai`` client's exception carries the message): a missing or wrong
token 401 (code ``unauthorized``), a token without the read scope or for another knowledge
base 403 (code ``forbidden``), an unknown model or path 404, a request without a user
message, with an empty or too long prompt or a body that does not validate 400 (``param``
names the field), the engine down 503 (the typed error's message, which names what to start),
anything else 500.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Literal

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from ragstream.common.errors import InvalidQueryError, RagstreamError
from ragstream.state.super_prompt import Answer, Citation, ConversationTurn, SuperPrompt

if TYPE_CHECKING:  # pragma: no cover
    from ragstream.workbench.api import RAGPipeline
    from ragstream.workbench.engine import Engine

#: a model id is this and the knowledge base's name
MODEL_PREFIX = "ragstream/"
#: the paths whose errors have OpenAI's shape
PATH_PREFIX = "/v1/"
#: the line before the sources, after a blank line
SOURCES_HEADER = "Sources:\n"
#: the run history's origin of a pass made here
ORIGIN = "api"


# --------------------------------------------------------------------------- the request


class ChatMessage(BaseModel):
    """One message of the chat: its role and its content (text, or a list of parts)."""

    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any]] | None = None

    def text(self) -> str:
        """The message's text: its content, or its ``text`` parts joined by blank lines."""
        if self.content is None or isinstance(self.content, str):
            return self.content or ""
        parts = []
        for part in self.content:
            if part.get("type") != "text":
                raise InvalidQueryError(
                    f"A {self.role} message has a {part.get('type')!r} part: RAGstream reads "
                    "text only. Send the message's text.")
            parts.append(str(part.get("text", "")))
        return "\n\n".join(parts)


class StreamOptions(BaseModel):
    """``stream_options``: whether a last chunk carries the usage."""

    model_config = ConfigDict(extra="allow")

    include_usage: bool = False


class ChatRequest(BaseModel):
    """``POST /v1/chat/completions``: the model (a knowledge base) and the messages. Fields
    a client adds that RAGstream does not use are accepted (see the module docstring)."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(description="'ragstream/<knowledge base>' (GET /v1/models lists them)")
    messages: list[ChatMessage] = Field(min_length=1, description="the chat, oldest first; the "
                                        "last user message is the prompt")
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = Field(1, ge=1, le=1, description="one answer per request")

    def kb(self) -> str:
        """The knowledge base the model names."""
        return self.model[len(MODEL_PREFIX):] if self.model.startswith(MODEL_PREFIX) else self.model

    def prompt_and_turns(self, max_pairs: int) -> tuple[str, list[ConversationTurn]]:
        """The last user message's text, and the user and assistant messages before it as
        turns (the last ``max_pairs``)."""
        last = next((i for i in range(len(self.messages) - 1, -1, -1)
                     if self.messages[i].role == "user"), None)
        if last is None:
            raise InvalidQueryError("The request has no user message: the last user message is "
                                    "the question. Add one.")
        turns: list[ConversationTurn] = []
        open_user: str | None = None
        for m in self.messages[:last]:
            if m.role == "user":
                if open_user is not None:
                    turns.append(ConversationTurn(user=open_user, assistant=""))
                open_user = m.text()
            elif m.role == "assistant":
                turns.append(ConversationTurn(user=open_user or "", assistant=m.text()))
                open_user = None
        if open_user is not None:
            turns.append(ConversationTurn(user=open_user, assistant=""))
        return self.messages[last].text(), turns[-max_pairs:] if max_pairs > 0 else []


# --------------------------------------------------------------------------- the reply


def sources_text(ans: Answer) -> str:
    """What follows the answer: a blank line, then its numbered sources, one line each
    (``- [n] label``)."""
    text = ans.text
    gap = "" if text.endswith("\n\n") or not text else "\n" if text.endswith("\n") else "\n\n"
    lines = [f"- [{c.n}] {_label(c)}" for c in ans.sources]
    return gap + SOURCES_HEADER + ("\n".join(lines) if lines else "none cited")


def _label(c: Citation) -> str:
    return c.label or (f"{c.where} § {c.section}" if c.section else c.where)


def citations(ans: Answer) -> list[dict[str, Any]]:
    """The ``citations`` field: one object per source."""
    return [{"n": c.n, "chunk_id": c.chunk_id, "source": c.source, "section": c.section,
             "title": c.title, "page": c.page, "label": _label(c)} for c in ans.sources]


def details(engine: Engine, sp: SuperPrompt, ans: Answer, run_id: int | None) -> dict[str, Any]:
    """The ``ragstream`` field: the knowledge base, the answer's mode and confidence, the run."""
    qa = sp.extras.qa_log
    from ragstream.interfaces.service.streaming import read_as

    return {"kb": engine.kb, "mode": ans.mode, "confidence": ans.confidence,
            "confidence_reason": ans.confidence_reason,
            "confidence_detail": ans.confidence_detail, "read_as": read_as(sp),
            "unsupported": ans.unsupported, "invalid_citations": list(ans.invalid_citations),
            "run_id": run_id, "qa_log_id": qa.id if qa else None}


def _usage(ans: Answer) -> dict[str, int]:
    p, c = ans.usage.prompt_tokens, ans.usage.completion_tokens
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}


def error_body(message: str, kind: str, code: str | None = None,
               param: str | None = None) -> dict[str, Any]:
    """An error in OpenAI's shape."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code or kind}}


def error_response(status: int, message: str, kind: str, code: str | None = None,
                   param: str | None = None) -> JSONResponse:
    """An error response in OpenAI's shape, ``{"error": {"message", "type", "param", "code"}}``
    (``invalid_request_error`` for 4xx, as OpenAI's own 401 and 404 have it, else
    ``server_error``; ``code`` the RAGstream error's kind)."""
    openai_kind = "invalid_request_error" if 400 <= status < 500 else "server_error"
    return JSONResponse(error_body(message, openai_kind, code or kind.replace(" ", "_"), param),
                        status_code=status)


# --------------------------------------------------------------------------- the routes


def add_routes(app: FastAPI, pipeline: RAGPipeline, secured: list) -> None:
    """``GET /v1/models`` and ``POST /v1/chat/completions`` on ``app``."""
    from ragstream.interfaces.service.streaming import answer_stream, grant_of

    engine = pipeline.engine

    @app.get("/v1/models", dependencies=secured, tags=["OpenAI-compatible"],
             summary="The knowledge bases, one model each ('ragstream/<name>')")
    def models(request: Request) -> dict[str, Any]:
        grant = grant_of(request)
        return {"object": "list", "data": [
            {"id": f"{MODEL_PREFIX}{kb.name}", "object": "model", "created": 0,
             "owned_by": "ragstream"} for kb in engine.knowledge_bases().all()
            if grant.may_see(kb.name)]}

    @app.post("/v1/chat/completions", dependencies=secured, tags=["OpenAI-compatible"],
              response_model=None,
              summary="Answer the last user message from the model's knowledge base, with its "
                      "sources (OpenAI's chat completions; stream or not)",
              description=__doc__.split("**The reply**", 1)[1].split("**Errors**", 1)[0]
              if __doc__ else "")
    async def chat(body: ChatRequest, request: Request) -> Any:
        started = time.perf_counter()
        grant_of(request).check("read", body.kb() or engine.kb)
        kb_engine = pipeline.engine_for(body.kb())
        model = f"{MODEL_PREFIX}{kb_engine.kb}"
        pairs = kb_engine.cfg.limits.N4_RECENT_CONV_MAX_PAIRS

        def stages() -> SuperPrompt:
            prompt, turns = body.prompt_and_turns(pairs)
            sp = kb_engine.new(pipeline.checked_query(prompt, kb_engine.kb), turns or None)
            return kb_engine.run(sp)

        sp = await run_in_threadpool(stages)
        kept: dict[str, int | None] = {}

        def keep(out_sp: SuperPrompt, _ans: Answer) -> None:
            kept["run_id"] = keep_run(kb_engine, out_sp)

        reply_id = f"chatcmpl-{uuid.uuid4().hex}"
        created = int(time.time())
        if body.stream:
            include_usage = bool(body.stream_options and body.stream_options.include_usage)
            return StreamingResponse(
                _chunks(answer_stream(kb_engine, sp, started, keep), kb_engine, reply_id, created,
                        model, include_usage, kept),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        out_sp, ans = sp, None
        async for kind, value in answer_stream(kb_engine, sp, started, keep):
            if kind == "token":
                continue
            if kind == "error":
                raise value
            out_sp, ans = value
        assert ans is not None
        return {
            "id": reply_id, "object": "chat.completion", "created": created, "model": model,
            "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                         "message": {"role": "assistant", "content": ans.text + sources_text(ans)}}],
            "usage": _usage(ans),
            "citations": citations(ans),
            "ragstream": details(kb_engine, out_sp, ans, kept.get("run_id")),
        }


def keep_run(engine: Engine, sp: SuperPrompt) -> int | None:
    """Keep the pass as a run (origin ``api``); a history that cannot be written is logged,
    not a failure of the answer."""
    import logging
    import sqlite3

    try:
        return engine.runs().save(sp, origin=ORIGIN, settings={})
    except (RagstreamError, sqlite3.Error, OSError) as err:
        logging.getLogger(__name__).warning("the run was not kept: %s", err)
        return None


def _chunk(reply_id: str, created: int, model: str, delta: dict[str, Any],
           finish: str | None = None, **extra: Any) -> str:
    body = {"id": reply_id, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
            **extra}
    return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"


async def _chunks(stream: AsyncIterator[tuple[str, Any]], engine: Engine, reply_id: str,
                  created: int, model: str, include_usage: bool,
                  kept: dict[str, int | None]) -> AsyncIterator[str]:
    """The streamed reply (see the module docstring)."""
    yield _chunk(reply_id, created, model, {"role": "assistant", "content": ""})
    async for kind, value in stream:
        if kind == "token":
            yield _chunk(reply_id, created, model, {"content": value})
            continue
        if kind == "error":
            message, code = ((str(value), value.kind.replace(" ", "_"))
                             if isinstance(value, RagstreamError)
                             else ("The answer failed unexpectedly; see the service's log.",
                                   "internal_error"))
            yield f"data: {json.dumps(error_body(message, 'server_error', code))}\n\n"
            break
        out_sp, ans = value
        yield _chunk(reply_id, created, model, {"content": sources_text(ans)})
        yield _chunk(reply_id, created, model, {}, "stop", citations=citations(ans),
                     ragstream=details(engine, out_sp, ans, kept.get("run_id")))
        if include_usage:
            body = {"id": reply_id, "object": "chat.completion.chunk", "created": created,
                    "model": model, "choices": [], "usage": _usage(ans)}
            yield f"data: {json.dumps(body)}\n\n"
    yield "data: [DONE]\n\n"
