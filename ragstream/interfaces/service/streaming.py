"""What the HTTP routes, the OpenAI-compatible route and the MCP server share, apart from
all three so that none imports another for it: one answer as it is made (``answer_stream``,
``Engine.answer`` in a worker thread, its pieces through an asyncio queue; an answer the
client walks away from is logged incomplete), the grant the token guard found for a request
(``grant_of``) and a follow-up's standalone reading (``read_as``)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, Literal

from fastapi import Request

from ragstream.interfaces.service.auth import OPEN, Grant
from ragstream.state.super_prompt import Answer, SuperPrompt

if TYPE_CHECKING:  # pragma: no cover
    from ragstream.workbench.engine import Engine

log = logging.getLogger("ragstream.interfaces.service.http")

#: where the guard keeps a request's grant in the ASGI scope's state
GRANT_KEY = "ragstream_grant"


def read_as(sp: SuperPrompt) -> str:
    """The follow-up's standalone reading A0 made with the conversation (``extras.reading``),
    the question retrieval and the answer used; "" when the prompt stands on its own."""
    reading = sp.extras.reading
    return reading.text if reading is not None else ""


def grant_of(request: Request) -> Grant:
    """The grant the guard found for ``request`` (``auth.OPEN`` when the service has no token)."""
    state = request.scope.get("state") or {}
    grant = state.get(GRANT_KEY) if isinstance(state, dict) else None
    return grant if isinstance(grant, Grant) else OPEN


class _Abandoned(Exception):
    """Raised in ``on_token`` once the client has gone: it stops the answer."""


def _log_incomplete(engine: Engine, sp: SuperPrompt, text: str, pieces: int, started: float) -> None:
    """Record an answer the client walked away from: the text it was sent, marked incomplete."""
    mode: Literal["llm", "extractive"] = "llm" if engine.services.llm is not None else "extractive"
    partial = Answer(text=text, mode=mode,
                     mode_reason=f"stopped after {pieces} streamed pieces: the client disconnected",
                     error="the client disconnected before the answer ended",
                     latency_ms=round((time.perf_counter() - started) * 1000.0, 1))
    try:
        row = engine.qa_log().record(sp, partial, incomplete=True)
        log.info("answer stopped: the client disconnected after %d pieces (Q&A log row %d)", pieces, row)
    except Exception as err:  # the log is a record, not a reason to fail
        log.warning("answer stopped: the client disconnected; the Q&A log could not be written: %s", err)


async def answer_stream(engine: Engine, sp: SuperPrompt, started: float,
                        after: Callable[[SuperPrompt, Answer], None] | None = None
                        ) -> AsyncIterator[tuple[str, Any]]:
    """One answer as it is made: ``("token", piece)`` for each piece, then ``("done", (sp,
    answer))`` or ``("error", exception)``. ``Engine.answer`` runs in a worker thread whose
    pieces reach this coroutine through an asyncio queue; leaving early makes its next piece
    raise (the answer stops, and is logged incomplete). ``after(sp, answer)`` runs in that
    thread once the answer is made (keeping the run)."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
    gone = threading.Event()
    sent: list[str] = []

    def put(item: tuple[str, Any]) -> None:
        try:
            loop.call_soon_threadsafe(queue.put_nowait, item)
        except RuntimeError:  # the event loop is closed: the server stopped
            gone.set()

    def on_token(piece: str) -> None:
        if gone.is_set():
            raise _Abandoned
        sent.append(piece)
        put(("token", piece))

    def work() -> None:
        try:
            out_sp, ans = engine.answer(sp, on_token=on_token)
            if after is not None:
                after(out_sp, ans)
            put(("done", (out_sp, ans)))
        except _Abandoned:  # the answer closed the model's stream on its way out
            _log_incomplete(engine, sp, "".join(sent), len(sent), started)
        except BaseException as exc:  # handed to the stream
            put(("error", exc))

    worker = threading.Thread(target=work, name="ragstream-answer", daemon=True)
    finished = False
    try:
        worker.start()
        while True:
            kind, value = await queue.get()
            finished = kind != "token"
            yield kind, value
            if finished:
                return
    finally:
        if not finished:
            gone.set()  # the client left (or the server stops): the worker stops at its next piece
