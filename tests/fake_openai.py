"""A scripted, OpenAI-compatible HTTP server for tests (standard library only).

``FakeOpenAI`` is a real HTTP/1.1 server on ``127.0.0.1`` (a free port, loopback only) that
speaks enough of the OpenAI API for the real ``openai`` client to talk to it unchanged:

* ``POST /v1/chat/completions`` -- a full ``chat.completion`` object, or with ``"stream": true``
  Server-Sent Events in OpenAI's format (``data: {chat.completion.chunk}\\n\\n`` lines, a final
  chunk with ``finish_reason``, a usage chunk when ``stream_options.include_usage`` is true,
  then ``data: [DONE]\\n\\n``). ``response_format`` (JSON mode, with or without a schema) is
  accepted and recorded.
* ``GET /v1/models`` -- the configured model names, ``owned_by`` as configured (``llamacpp``
  looks like a llama.cpp server), and ``GET /api/version`` when ``ollama_version`` is set
  (an Ollama server).

What each chat request gets is scripted. Replies queued with ``server.script(...)`` are used
one per request, in order; when the queue is empty the *responder* callable (if any) is asked
with the request's JSON body. ``Reply`` builds the possible outcomes: ``text``, ``json``,
``error`` (status + OpenAI error body + optional ``Retry-After``), ``delay`` (for client
timeouts), ``raw`` (any body, e.g. malformed) and ``drop`` (close without answering).

Every HTTP request is recorded (``server.requests``: method, path, headers -- including
``Authorization`` --, the parsed JSON body and ``received_at``, a ``time.monotonic()``
timestamp for measuring the waits between retries); ``server.calls`` counts chat-completion
requests. The server never logs headers or bodies itself.

Usage::

    import openai
    from tests.fake_openai import FakeOpenAI, Reply

    def test_answer():
        with FakeOpenAI(models=["gpt-4o-mini"]) as server:
            server.script(Reply.error(429, "slow down", retry_after=0.01),
                          Reply.text("Hello world"))
            client = openai.OpenAI(base_url=server.base_url, api_key="sk-test",
                                   max_retries=1, timeout=1.0)
            resp = client.chat.completions.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
            assert resp.choices[0].message.content == "Hello world"
            assert server.calls == 2
            assert server.requests[-1].authorization == "Bearer sk-test"

    # Answer by looking at the request instead of a fixed script:
    def route(body):
        system = body["messages"][0]["content"]
        return Reply.json({"agent": "A2"}) if "A2" in system else Reply.text("answer")

    with FakeOpenAI(responder=route) as server:
        ...

As a pytest fixture, import ``fake_openai`` into a test module (or a conftest) and take it as
an argument: ``from tests.fake_openai import fake_openai  # noqa: F401``.
"""

from __future__ import annotations

import json
import logging
import re
import socket
import socketserver
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["FakeOpenAI", "Reply", "RecordedRequest", "Responder", "fake_openai"]

log = logging.getLogger(__name__)

#: Errors that only mean "the client went away"; the server shrugs them off.
_DISCONNECTS = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError)

_DEFAULT_ERROR_TYPES = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("permission_error", None),
    404: ("invalid_request_error", "not_found"),
    409: ("conflict_error", None),
    422: ("invalid_request_error", None),
    429: ("rate_limit_error", "rate_limit_exceeded"),
}


# --------------------------------------------------------------------------------------
# Replies
# --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Reply:
    """One scripted outcome for one chat-completion request. Build it with the class methods."""

    kind: str  # "text" | "error" | "delay" | "raw" | "drop"
    content: str = ""
    finish_reason: str = "stop"
    chunk_delay: float = 0.0            # text, streaming: pause before each content chunk
    cut_after: int | None = None     # text, streaming: drop the connection after N chunks
    status: int = 200
    message: str = ""
    error_type: str | None = None
    code: str | None = None
    retry_after: float | None = None
    body: bytes = b""
    content_type: str = "application/json"
    seconds: float = 0.0
    then: Reply | None = None
    headers: tuple = ()                 # extra response headers: ((name, value), ...)
    logprobs: tuple = ()                # per token: (token, logprob, ((alt, logprob), ...))

    @classmethod
    def text(cls, content: str, *, finish_reason: str = "stop", chunk_delay: float = 0.0,
             cut_after: int | None = None, headers: Mapping[str, str] | None = None) -> Reply:
        """A normal answer. Streamed word by word (spaces kept) when the request streams.

        ``chunk_delay`` paces the stream; ``cut_after=N`` sends N content chunks and then
        closes the connection mid-stream (no final chunk, no ``[DONE]``).
        """
        return cls("text", content=str(content), finish_reason=finish_reason,
                   chunk_delay=chunk_delay, cut_after=cut_after,
                   headers=tuple((headers or {}).items()))

    @classmethod
    def judgment(cls, p_yes: float, *, yes: str = "Yes", no: str = "No",
                 others: Mapping[str, float] | None = None) -> Reply:
        """A one-token yes/no answer with OpenAI-shaped log-probabilities: the token is
        ``yes`` when ``p_yes`` ≥ 0.5, the alternatives ``yes`` at ``p_yes`` and ``no`` at
        ``1 - p_yes`` (and ``others``), as a llama.cpp or OpenAI server sends them when the
        request asks for ``logprobs``; a request that does not ask gets none."""
        import math

        alts = {yes: p_yes, no: 1.0 - p_yes, **(others or {})}
        top = tuple((t, math.log(max(p, 1e-12))) for t, p in
                    sorted(alts.items(), key=lambda kv: -kv[1]))
        token = yes if p_yes >= 0.5 else no
        return cls("text", content=token, finish_reason="length",
                   logprobs=((token, math.log(max(alts[token], 1e-12)), top),))

    @classmethod
    def json(cls, obj: Any, **kwargs: Any) -> Reply:
        """A normal answer whose content is ``json.dumps(obj)`` (for JSON-mode requests)."""
        return cls.text(json.dumps(obj), **kwargs)

    @classmethod
    def error(cls, status: int, message: str = "", *, type_: str | None = None,
              code: str | None = None, retry_after: float | None = None,
              headers: Mapping[str, str] | None = None) -> Reply:
        """An HTTP error with an OpenAI error body ``{"error": {message, type, param, code}}``.

        ``type_``/``code`` default by status (429 -> ``rate_limit_error``/``rate_limit_exceeded``,
        5xx -> ``server_error``, ...). ``retry_after`` (seconds) sets the ``Retry-After`` header;
        the openai client honours it (up to 2 minutes) when it retries.
        """
        if not 400 <= status <= 599:
            raise ValueError(f"an error status must be 4xx or 5xx, not {status}")
        default_type, default_code = _DEFAULT_ERROR_TYPES.get(
            status, ("server_error", None) if status >= 500 else ("invalid_request_error", None))
        return cls("error", status=status, message=message or f"fake error {status}",
                   error_type=type_ or default_type, code=code if code is not None else default_code,
                   retry_after=retry_after, headers=tuple((headers or {}).items()))

    @classmethod
    def delay(cls, seconds: float, then: Reply | None = None) -> Reply:
        """Wait ``seconds`` before answering with ``then`` (default: an empty text answer).

        If the client has given up meanwhile, the late answer is discarded silently.
        """
        return cls("delay", seconds=float(seconds), then=then if then is not None else cls.text(""))

    @classmethod
    def raw(cls, status: int, body: bytes | str, content_type: str = "application/json",
            *, headers: Mapping[str, str] | None = None) -> Reply:
        """Exactly this status and body (e.g. a non-JSON body in a 200)."""
        data = body.encode("utf-8") if isinstance(body, str) else bytes(body)
        return cls("raw", status=status, body=data, content_type=content_type,
                   headers=tuple((headers or {}).items()))

    @classmethod
    def drop(cls) -> Reply:
        """Close the connection without sending any response (a network error)."""
        return cls("drop")


#: A responder gets the request's JSON body and returns a Reply (a ``str`` is taken as
#: ``Reply.text``, a ``dict`` as ``Reply.json``).
Responder = Callable[[dict], Reply | str | dict]


def _as_reply(value: Any) -> Reply:
    if isinstance(value, Reply):
        return value
    if isinstance(value, str):
        return Reply.text(value)
    if isinstance(value, dict):
        return Reply.json(value)
    raise TypeError(f"expected a Reply (or str / dict), got {type(value).__name__}")


# --------------------------------------------------------------------------------------
# Recording
# --------------------------------------------------------------------------------------

@dataclass
class RecordedRequest:
    """One HTTP request as received. Indexing (``req["messages"]``) reads the JSON body."""

    method: str
    path: str
    headers: dict[str, str]              # names lower-cased
    body: Any = None                     # parsed JSON body (None when absent or not JSON)
    raw: bytes = b""
    received_at: float = field(default_factory=time.monotonic)  # once the body was read

    @property
    def authorization(self) -> str | None:
        return self.headers.get("authorization")

    @property
    def messages(self) -> list:
        return (self.body or {}).get("messages", []) if isinstance(self.body, dict) else []

    @property
    def model(self) -> str | None:
        return self.body.get("model") if isinstance(self.body, dict) else None

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream")) if isinstance(self.body, dict) else False

    def __getitem__(self, key: str) -> Any:
        if not isinstance(self.body, dict):
            raise KeyError(key)
        return self.body[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.body.get(key, default) if isinstance(self.body, dict) else default

    def __contains__(self, key: object) -> bool:
        return isinstance(self.body, dict) and key in self.body


# --------------------------------------------------------------------------------------
# Helpers for bodies
# --------------------------------------------------------------------------------------

_WORDS = re.compile(r"\S+\s*|\s+")


def split_tokens(text: str) -> list[str]:
    """Stream pieces: words with their trailing spaces (``"".join`` gives ``text`` back)."""
    return _WORDS.findall(text)


def count_tokens(value: Any) -> int:
    """A crude token count: whitespace-separated words in a string or message content."""
    if value is None:
        return 0
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, list):  # content parts: [{"type": "text", "text": ...}, ...]
        return sum(count_tokens(p.get("text") if isinstance(p, dict) else p) for p in value)
    return len(str(value).split())


def _prompt_tokens(body: dict) -> int:
    messages = body.get("messages") or []
    return sum(count_tokens(m.get("content")) for m in messages if isinstance(m, dict))


def _logprobs(body: dict, reply: Reply) -> dict | None:
    """OpenAI's ``choices[0].logprobs`` for a request that asked (``logprobs: true``): the
    reply's scripted ones, else each word of its content at probability 1 (a real server
    always sends them when asked); ``top_logprobs`` bounds the alternatives."""
    if not body.get("logprobs"):
        return None
    top_n = int(body.get("top_logprobs") or 0)
    scripted = reply.logprobs or tuple((t, 0.0, ((t, 0.0),)) for t in split_tokens(reply.content))

    def entry(token: str, logprob: float) -> dict:
        return {"token": token, "logprob": logprob, "bytes": list(token.encode())}

    return {"content": [{**entry(t, lp), "top_logprobs": [entry(a, alp) for a, alp in top[:top_n]]}
                        for t, lp, top in scripted], "refusal": None}


def _error_body(message: str, type_: str, code: str | None = None,
                param: str | None = None) -> bytes:
    return json.dumps({"error": {"message": message, "type": type_, "param": param,
                                 "code": code}}).encode("utf-8")


# --------------------------------------------------------------------------------------
# HTTP plumbing
# --------------------------------------------------------------------------------------

class _HTTPServer(ThreadingHTTPServer):
    """Loopback only; keeps track of handler threads and open connections for shutdown."""

    daemon_threads = True
    block_on_close = False  # we join our own threads (with a timeout) in FakeOpenAI.close

    def __init__(self, fake: FakeOpenAI):
        self.fake = fake
        super().__init__(("127.0.0.1", 0), _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind would resolve the host name (getfqdn), which can be slow.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = "127.0.0.1", self.server_address[1]

    def verify_request(self, request, client_address) -> bool:
        return client_address[0] in ("127.0.0.1", "::1")

    def process_request(self, request, client_address) -> None:
        thread = threading.Thread(target=self.process_request_thread,
                                  args=(request, client_address),
                                  name=f"fake-openai-conn-{client_address[1]}", daemon=True)
        self.fake._track(thread, request)
        thread.start()

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.fake._untrack(threading.current_thread(), request)

    def handle_error(self, request, client_address) -> None:
        import sys

        err = sys.exc_info()[1]
        if isinstance(err, _DISCONNECTS) or self.fake._stopping.is_set():
            return  # the client hung up (timeout, drop) or we are shutting down
        self.fake._note_error(f"unhandled {type(err).__name__}: {err}")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive + chunked streaming, as the real API
    server_version = "FakeOpenAI/1.0"
    sys_version = ""
    timeout = 30  # an idle keep-alive connection is closed after this many seconds

    server: _HTTPServer

    # -- logging: never print anything (and never headers) ---------------------------------

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("fake-openai %s - %s", self.address_string(), format % args)

    # -- entry points --------------------------------------------------------------------

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def _dispatch(self, method: str) -> None:
        fake = self.server.fake
        try:
            raw = self._read_body()
        except (ValueError, OSError):
            self.close_connection = True
            return
        body: Any = None
        if raw:
            try:
                body = json.loads(raw)
            except (ValueError, UnicodeDecodeError):
                body = None
        path = self.path.split("?", 1)[0].rstrip("/") or "/"
        headers = {k.lower(): v for k, v in self.headers.items()}
        fake._record(RecordedRequest(method, path, headers, body, raw))

        try:
            if method == "POST" and path == "/v1/chat/completions":
                self._chat(body, raw)
            elif method == "GET" and path == "/v1/models":
                self._send_json(200, fake._models_body())
            elif method == "GET" and path == "/api/version" and fake.ollama_version:
                self._send_json(200, {"version": fake.ollama_version})
            elif method == "GET" and path.startswith("/v1/models/"):
                name = path[len("/v1/models/"):]
                if name in fake.models:
                    self._send_json(200, fake._model_obj(name))
                else:
                    self._send_error_reply(Reply.error(
                        404, f"The model '{name}' does not exist", code="model_not_found"))
            else:
                self._send_error_reply(Reply.error(404, f"Unknown request URL: {method} {path}",
                                                   code="unknown_url"))
        except _DISCONNECTS:
            self.close_connection = True  # the client left (e.g. it timed out): fine

    def _read_body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            parts = []
            while True:
                size_line = self.rfile.readline(65537)
                size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline(65537)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    # -- chat completions ----------------------------------------------------------------

    def _chat(self, body: Any, raw: bytes) -> None:
        fake = self.server.fake
        if not isinstance(body, dict):
            fake._count_call()
            self._send_error_reply(Reply.error(
                400, "We could not parse the JSON body of your request." if raw
                else "The request body is empty."))
            return
        if fake.refuse_logprobs and body.get("logprobs"):
            fake._count_call()
            self._send_error_reply(Reply.error(400, "logprobs is not supported by this server"))
            return
        reply = fake._next_reply(body)
        while reply.kind == "delay":
            if fake._stopping.wait(reply.seconds):
                self.close_connection = True
                return
            reply = reply.then or Reply.text("")
        if reply.kind == "drop":
            self._drop()
        elif reply.kind == "error":
            self._send_error_reply(reply)
        elif reply.kind == "raw":
            self._send(reply.status, reply.body, reply.content_type, reply.headers)
        elif body.get("stream"):
            self._stream_text(body, reply)
        else:
            self._send_json(200, fake._completion(body, reply), reply.headers)

    def _stream_text(self, body: dict, reply: Reply) -> None:
        fake = self.server.fake
        options = body.get("stream_options") or {}
        include_usage = bool(isinstance(options, dict) and options.get("include_usage"))
        ident, created, model = fake._new_id(), int(time.time()), body.get("model") or fake.models[0]

        def chunk(delta: dict, finish: str | None = None) -> dict:
            obj = {"id": ident, "object": "chat.completion.chunk", "created": created,
                   "model": model, "system_fingerprint": "fp_fake",
                   "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                "finish_reason": finish}]}
            if include_usage:
                obj["usage"] = None
            return obj

        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("x-request-id", f"req_{ident}")
        for name, value in reply.headers:
            self.send_header(name, value)
        self.end_headers()

        self._event(chunk({"role": "assistant", "content": "", "refusal": None}))
        for n, piece in enumerate(split_tokens(reply.content)):
            if reply.cut_after is not None and n >= reply.cut_after:
                self._drop()
                return
            if reply.chunk_delay and fake._stopping.wait(reply.chunk_delay):
                self._drop()
                return
            self._event(chunk({"content": piece}))
        if reply.cut_after is not None:
            self._drop()  # asked to cut, but the text had fewer pieces: cut before the end
            return
        self._event(chunk({}, reply.finish_reason))
        if include_usage:
            self._event({"id": ident, "object": "chat.completion.chunk", "created": created,
                         "model": model, "system_fingerprint": "fp_fake", "choices": [],
                         "usage": fake._usage(body, reply.content)})
        self._write_chunk(b"data: [DONE]\n\n")
        self._write_chunk(b"")  # the terminating zero-length chunk

    def _event(self, obj: dict) -> None:
        self._write_chunk(b"data: " + json.dumps(obj).encode("utf-8") + b"\n\n")

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    # -- low-level responses -------------------------------------------------------------

    def _send_json(self, status: int, obj: Any, headers: Iterable = ()) -> None:
        self._send(status, json.dumps(obj).encode("utf-8"), "application/json", headers)

    def _send_error_reply(self, reply: Reply) -> None:
        headers = list(reply.headers)
        if reply.retry_after is not None:
            headers.append(("Retry-After", f"{reply.retry_after:g}"))
        self._send(reply.status, _error_body(reply.message, reply.error_type or "server_error",
                                             reply.code), "application/json", headers)

    def _send(self, status: int, data: bytes, content_type: str, headers: Iterable = ()) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("x-request-id", f"req_{self.server.fake._new_id()}")
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _drop(self) -> None:
        """Close the connection at once, without (the rest of) a response."""
        self.close_connection = True
        try:
            self.wfile.flush()
        except OSError:
            pass
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


# --------------------------------------------------------------------------------------
# The server
# --------------------------------------------------------------------------------------

class FakeOpenAI:
    """A scripted OpenAI-compatible server on 127.0.0.1 (see the module docstring).

    ``models``: the names ``GET /v1/models`` lists (the first is also the model reported when
    a request names none). ``responder``: called with the JSON body when the script is empty.
    Without a responder, an unscripted request gets an HTTP 500 marked not-retryable and is
    noted in ``server.errors``.
    """

    def __init__(self, *, models: Iterable[str] = ("gpt-4o-mini",),
                 responder: Responder | None = None, start: bool = False,
                 owned_by: str = "fake-openai", ollama_version: str | None = None,
                 refuse_logprobs: bool = False, ignore_logprobs: bool = False):
        self.models: list[str] = list(models) or ["gpt-4o-mini"]
        #: answer a request that asks for ``logprobs`` with HTTP 400, as some servers do
        self.refuse_logprobs = refuse_logprobs
        #: never send ``logprobs``, even when asked (as servers that do not implement them)
        self.ignore_logprobs = ignore_logprobs
        self.owned_by = owned_by  # "llamacpp" looks like a llama.cpp server, "me" like llama-cpp-python
        self.ollama_version = ollama_version  # set: GET /api/version answers like Ollama
        self._initial_responder = responder
        self.responder: Responder | None = responder
        self._lock = threading.Lock()
        self._queue: deque[Reply] = deque()
        self._requests: list[RecordedRequest] = []
        self._calls = 0
        self._errors: list[str] = []
        self._ids = 0
        self._stopping = threading.Event()
        self._threads: set[threading.Thread] = set()
        self._sockets: set[socket.socket] = set()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._closed = False
        if start:
            self.start()

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> FakeOpenAI:
        """Bind a free loopback port and serve in a daemon thread (idempotent)."""
        with self._lock:
            if self._closed:
                raise RuntimeError("this FakeOpenAI was closed; make a new one")
            if self._httpd is not None:
                return self
            self._httpd = _HTTPServer(self)
        self._thread = threading.Thread(target=self._httpd.serve_forever,
                                        kwargs={"poll_interval": 0.05},
                                        name=f"fake-openai-{self.port}", daemon=True)
        self._thread.start()
        return self

    def close(self, timeout: float = 5.0) -> None:
        """Stop serving, close every open connection and wait for the handler threads."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            httpd = self._httpd
        self._stopping.set()  # wakes delayed replies
        if httpd is None:
            return
        httpd.shutdown()
        if self._thread is not None:
            self._thread.join(timeout)
        httpd.server_close()
        with self._lock:
            sockets, threads = list(self._sockets), list(self._threads)
        for sock in sockets:  # wakes handlers idling on keep-alive connections
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        deadline = time.monotonic() + timeout
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    shutdown = close  # familiar name

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("the server is not started")
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (no ``/v1``)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """What to give ``openai.OpenAI(base_url=...)``: ``http://127.0.0.1:PORT/v1``."""
        return f"{self.url}/v1"

    @property
    def active_threads(self) -> int:
        """Connection-handler threads still alive (0 after ``close``)."""
        with self._lock:
            return sum(t.is_alive() for t in self._threads)

    # -- scripting -----------------------------------------------------------------------

    def script(self, *replies: Reply | str | dict) -> FakeOpenAI:
        """Append replies to the queue; each chat request takes the next one."""
        converted = [_as_reply(r) for r in replies]
        with self._lock:
            self._queue.extend(converted)
        return self

    @property
    def pending(self) -> int:
        """Scripted replies not used yet."""
        with self._lock:
            return len(self._queue)

    def reset(self) -> None:
        """Back to the state after construction: empty script and records, the original
        responder."""
        with self._lock:
            self._queue.clear()
            self._requests.clear()
            self._errors.clear()
            self._calls = 0
            self.responder = self._initial_responder

    # -- records -------------------------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every HTTP request received so far (a snapshot, oldest first)."""
        with self._lock:
            return list(self._requests)

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        """Only the ``POST /v1/chat/completions`` requests."""
        return [r for r in self.requests
                if r.method == "POST" and r.path == "/v1/chat/completions"]

    @property
    def last_request(self) -> RecordedRequest | None:
        with self._lock:
            return self._requests[-1] if self._requests else None

    @property
    def calls(self) -> int:
        """How many chat-completion requests arrived (retries included)."""
        with self._lock:
            return self._calls

    @property
    def errors(self) -> list[str]:
        """Problems of the test set-up itself: unscripted requests, responder exceptions."""
        with self._lock:
            return list(self._errors)

    # -- internals (called from handler threads) -----------------------------------------

    def _track(self, thread: threading.Thread, sock: socket.socket) -> None:
        with self._lock:
            self._threads = {t for t in self._threads if t.is_alive()}
            self._threads.add(thread)
            self._sockets.add(sock)

    def _untrack(self, thread: threading.Thread, sock: socket.socket) -> None:
        with self._lock:
            self._threads.discard(thread)
            self._sockets.discard(sock)

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def _count_call(self) -> None:
        with self._lock:
            self._calls += 1

    def _note_error(self, message: str) -> None:
        log.warning("fake-openai: %s", message)
        with self._lock:
            self._errors.append(message)

    def _new_id(self) -> str:
        with self._lock:
            self._ids += 1
            return f"chatcmpl-fake{self._ids:06d}"

    def _next_reply(self, body: dict) -> Reply:
        with self._lock:
            self._calls += 1
            if self._queue:
                return self._queue.popleft()
            responder = self.responder
        if responder is None:
            self._note_error("a chat request arrived but no reply was scripted "
                             "(and there is no responder)")
            return Reply.error(500, "FakeOpenAI: no scripted reply left and no responder",
                               type_="fake_openai_unscripted",
                               headers={"x-should-retry": "false"})
        try:
            return _as_reply(responder(body))
        except Exception as err:
            self._note_error(f"the responder raised {type(err).__name__}: {err}")
            return Reply.error(500, f"FakeOpenAI responder failed: {type(err).__name__}: {err}",
                               type_="fake_openai_responder_error",
                               headers={"x-should-retry": "false"})

    def _usage(self, body: dict, content: str) -> dict:
        prompt, completion = _prompt_tokens(body), count_tokens(content)
        return {"prompt_tokens": prompt, "completion_tokens": completion,
                "total_tokens": prompt + completion}

    def _completion(self, body: dict, reply: Reply) -> dict:
        return {
            "id": self._new_id(),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or self.models[0],
            "system_fingerprint": "fp_fake",
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": reply.content, "refusal": None},
                "logprobs": None if self.ignore_logprobs else _logprobs(body, reply),
                "finish_reason": reply.finish_reason,
            }],
            "usage": self._usage(body, reply.content),
        }

    def _model_obj(self, name: str) -> dict:
        return {"id": name, "object": "model", "created": 1700000000, "owned_by": self.owned_by}

    def _models_body(self) -> dict:
        return {"object": "list", "data": [self._model_obj(m) for m in self.models]}


# --------------------------------------------------------------------------------------
# pytest fixture helper
# --------------------------------------------------------------------------------------

try:  # the server itself needs only the standard library; the fixture needs pytest
    import pytest as _pytest
except ImportError:  # pragma: no cover - used outside a test run
    _pytest = None

if _pytest is not None:
    @_pytest.fixture
    def fake_openai():
        """A started ``FakeOpenAI`` for one test, closed afterwards."""
        with FakeOpenAI() as server:
            yield server
else:  # pragma: no cover
    fake_openai = None  # type: ignore[assignment]
