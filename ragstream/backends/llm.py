"""The one LLM client: any OpenAI-compatible chat-completions endpoint through ``openai``.

OpenAI, Groq, Ollama (``/v1``) and a llama.cpp server all work by configuration alone
(``llm.base_url``, ``llm.model``, and the name of the variable that holds the key).

Retries are the openai client's own, ``llm.max_attempts`` tries in all: timeouts (every
request has ``llm.timeout_s``), network errors, 408, 409, 429 and 5xx are retried with
exponential backoff and jitter, or after the wait the server names in ``retry-after-ms`` /
``Retry-After`` (a wait over 2 minutes is not retried); other 4xx errors are not retried.
Failures surface as ``LLMError`` with the API key removed from the message.

``chat_json`` asks for a JSON object that matches the reply's JSON schema, in the form the
endpoint understands (``llm.structured_output``; ``auto`` detects it, see ``detect_form``):

* ``json_schema`` — OpenAI's ``{"type": "json_schema", "json_schema": {..., "strict": true}}``
  (also vLLM and newer llama.cpp servers);
* ``llama_cpp`` — ``{"type": "json_object", "schema": {...}}`` (llama.cpp and
  llama-cpp-python turn the schema into a grammar);
* ``ollama`` — Ollama's ``format`` field with the schema, through its OpenAI endpoint;
* ``json_object`` — plain JSON mode, no schema: the last resort.

In ``auto``, a form the server refuses (HTTP 400, 404, 422, 500 or 501 on the first structured
call) steps down to the next one (json_schema → llama_cpp → json_object) and the client
remembers it. The reply is validated with the pydantic model. A repair round (the validation
error sent back) is made only when it can succeed: in ``json_object`` mode, when the reply was
not cut off. A reply cut off at ``max_tokens`` is reported as such (``ReplyCutOffError``).

Token log-probabilities (``llm.logprobs``): ``judge`` asks for one generated token with its
``top_logprobs`` and reads them as probabilities over a few answers (a yes/no relevance
judgment costs one token and comes with ``P(yes)``); ``chat_json(..., logprobs=True)`` keeps
each generated token's alternatives (``CallLog.tokens``) so that an agent can read how sure the
model was of an enum value (``ragstream.agents.choices.value_probabilities``). llama.cpp's
``llama-server``, Ollama and OpenAI give them. In ``auto`` a server that refuses them (HTTP 400,
422, 500 or 501 on a request that asked) or answers without them is not asked again, and the
agents use their compact lists instead (``offers_logprobs``).

A failing endpoint is said once, in words that name the setting to change (``explain``): a
refused connection or another network error (``RAGSTREAM_LLM_BASE_URL``), a timeout
(``llm.timeout_s``), a refused key (the variable ``llm.api_key_env`` names), a model the server
does not have (``RAGSTREAM_LLM_MODEL``). Within one pass (``one_pass``: the controller's auto
run and its answer) the first such failure is remembered and every later call of the pass
raises ``EndpointDownError`` at once, without a request; the next pass tries again. The
client keeps the endpoint's last known state for the page (``status``, ``check``).

It stays whole: it is the one room where RAGstream meets a model's endpoint (the rule:
external systems behind small interfaces in one room), and its parts share one ``openai``
client, one error vocabulary and one pass state, so a failing endpoint is said once per pass
whoever calls it.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, cast
from urllib.parse import urlsplit

from pydantic import BaseModel, ValidationError

from ragstream.backends import telemetry
from ragstream.common.config import LLMSettings
from ragstream.common.errors import RagstreamError

if TYPE_CHECKING:
    import openai
    from openai.types.chat import ChatCompletionMessageParam

T = TypeVar("T", bound=BaseModel)


class LLMError(RagstreamError):
    """The endpoint could not give an answer (after retries where they apply). ``problem``
    names what failed when it is one of ``PROBLEMS`` (else "")."""

    kind = "LLM endpoint"

    def __init__(self, message: str, problem: str = ""):
        super().__init__(message)
        self.problem = problem


class EndpointDownError(LLMError):
    """Not sent: the endpoint failed earlier in this pass (``one_pass``)."""


class AgentOutputError(RagstreamError):
    """The model answered, but not with the JSON the agent needs (even after a repair)."""

    kind = "LLM output"


class ReplyCutOffError(AgentOutputError):
    """The reply reached ``max_tokens`` before its JSON was complete."""


class NoLogprobsError(LLMError):
    """The endpoint gives no token log-probabilities (it refused them, or sent none)."""


#: what can make an endpoint unusable for the rest of a pass: a refused connection, another
#: network error, no answer within ``llm.timeout_s``, a refused API key, an unknown model
PROBLEMS = ("refused", "unreachable", "timeout", "key", "model")

FORMS = ("json_schema", "llama_cpp", "ollama", "json_object")
#: the form to try next when an endpoint refuses one (``llm.structured_output = auto``)
STEP_DOWN = {"json_schema": "llama_cpp", "llama_cpp": "json_object", "ollama": "json_object"}
_REFUSED = {400, 404, 422, 500, 501}


@dataclass
class Usage:
    """Tokens and calls, summed over the calls of one reply or one agent."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls: int = 0

    def add(self, other: Any) -> None:
        """Add the prompt and completion tokens of another usage record (``None`` adds nothing)."""
        if other is None:
            return
        self.prompt_tokens += int(getattr(other, "prompt_tokens", 0) or 0)
        self.completion_tokens += int(getattr(other, "completion_tokens", 0) or 0)


@dataclass
class TokenChoice:
    """One generated token, its log-probability and the alternatives the server listed."""

    token: str
    logprob: float
    top: list[tuple[str, float]] = field(default_factory=list)


@dataclass
class CallLog:
    """What one ``chat_json`` call did, filled in as it goes (also when it fails): the form of
    the request, whether the first reply was valid, why the model stopped, the time taken; the
    messages of its last request (a repair round's include the first reply), the last raw reply
    and the validated result (for the agent inspector, ``sp.extras.llm_calls``)."""

    form: str = ""
    usage: Usage = field(default_factory=Usage)
    first_try_valid: bool = False
    repaired: bool = False
    finish_reason: str = ""
    seconds: float = 0.0
    raw: str = ""
    error: str = ""
    messages: list[dict[str, str]] = field(default_factory=list)
    parsed: dict[str, Any] | None = None
    #: the reply's tokens with their alternatives, when log-probabilities were asked for
    tokens: list[TokenChoice] = field(default_factory=list)
    #: what the agent read from them (``judge``: each answer's probability)
    probabilities: dict[str, float] | None = None
    #: what the payload's numbers stand for (chunk ids, sentence keys), set by the agent
    items: list[str] | None = None


@dataclass
class JSONResult(Generic[T]):
    """A reply validated as the model ``T``, with the log of the call that produced it."""

    value: T
    log: CallLog = field(default_factory=CallLog)

    @property
    def usage(self) -> Usage:
        """Tokens and requests of the call (a repair round included)."""
        return self.log.usage

    @property
    def repaired(self) -> bool:
        """Whether the valid reply came from the repair round."""
        return self.log.repaired

    @property
    def raw(self) -> str:
        """The reply's text as the model sent it."""
        return self.log.raw


@dataclass
class StreamResult:
    """Filled in while a stream is consumed: the whole text and the usage at the end."""

    text: str = ""
    usage: Usage = field(default_factory=Usage)
    model: str = ""
    first_token_ms: float | None = None
    form: str = ""  # the structured-output form asked for, "" for free text


class CallWatcher(Protocol):
    """Told when a model call starts and ends (the page shows which agent waits, how long)."""

    def call_started(self, agent: str, model: str) -> None:
        """``agent`` sends a request to ``model``."""

    def call_ended(self, agent: str) -> None:
        """``agent``'s request is answered, or failed."""


_WATCHER: ContextVar[CallWatcher | None] = ContextVar("ragstream_llm_watcher", default=None)


@contextmanager
def watching(watcher: CallWatcher) -> Iterator[None]:
    """Within this block (in this thread or task), ``watcher`` hears of every agent call."""
    token = _WATCHER.set(watcher)
    try:
        yield
    finally:
        _WATCHER.reset(token)


@dataclass
class PassState:
    """What one pass has learnt of the endpoint: its first failure that makes every later call
    of the pass pointless (one of ``PROBLEMS``)."""

    failure: LLMError | None = None

    @classmethod
    def after(cls, down: tuple[str, str] | None) -> PassState | None:
        """The pass that goes on after ``pass_down()``'s (problem, message), or None when
        nothing failed (a new pass, or the one open)."""
        return None if down is None else cls(LLMError(down[1], down[0]))


_PASS: ContextVar[PassState | None] = ContextVar("ragstream_llm_pass", default=None)


@contextmanager
def one_pass(state: PassState | None = None) -> Iterator[PassState]:
    """Within this block the model calls are one pass's: after the endpoint fails them (a
    refused connection, a timeout, a refused key, an unknown model) the pass's later calls
    raise ``EndpointDownError`` without a request. ``state``: a pass to go on with (its
    answer, after its stages); None opens a new pass, or joins the one already open."""
    current = _PASS.get()
    if state is None and current is not None:
        yield current
        return
    state = state if state is not None else PassState()
    token = _PASS.set(state)
    try:
        yield state
    finally:
        _PASS.reset(token)


def pass_open() -> bool:
    """Whether a pass is open (``one_pass``) in this thread or task."""
    return _PASS.get() is not None


def goes_on(down: tuple[str, str] | None, client: LLMClient | None) -> PassState | None:
    """The pass a stage run by itself goes on with: the one the state before it ran in
    (``down``: its ``pass_down()``), while ``client``'s endpoint is still failing as it was
    then; None (a new pass: the endpoint is asked again) when nothing failed, or when a call
    or "Test connection" got an answer since."""
    if down is None or client is None or client.status.state != "failing":
        return None
    return PassState.after(down)


def pass_down() -> tuple[str, str] | None:
    """How the endpoint failed in the open pass, as (problem, message), or None: what a
    state keeps so that its pass's answer does not ask again (``PassState.after``)."""
    failure = pass_failure()
    return None if failure is None else (failure.problem, str(failure))


def pass_failure() -> LLMError | None:
    """The failure that stopped the endpoint earlier in the open pass, or None."""
    state = _PASS.get()
    return state.failure if state is not None else None


def offline_words(failure: LLMError) -> str:
    """Why a call was not sent: the pass's earlier failure, in words."""
    return f"the endpoint failed earlier in this pass, not tried again: {failure}"


@dataclass
class EndpointStatus:
    """The endpoint's last known state, for the page: ``state`` is "unknown" (no call yet),
    "reachable" (the last call or check got an answer) or "failing" (it failed with one of
    ``PROBLEMS``); ``message`` is the last error in words ("" after a success); ``at`` is
    when (``time.time()``); ``models`` what the server listed on the last check."""

    state: str = "unknown"
    message: str = ""
    problem: str = ""
    at: float = 0.0
    models: list[str] | None = None


@dataclass
class ConnectionCheck:
    """What ``LLMClient.check`` found: whether the model answered, in words, and how long."""

    ok: bool
    message: str
    seconds: float
    models: list[str] = field(default_factory=list)
    at: float = field(default_factory=time.time)


class LLMClient:
    """Chat completions from one OpenAI-compatible endpoint; failures raise ``LLMError``."""

    def __init__(self, settings: LLMSettings, environ: dict[str, str] | None = None):
        import openai

        env = os.environ if environ is None else environ
        self.settings = settings
        self._key = env.get(settings.api_key_env, "") if settings.api_key_env else ""
        #: HTTP requests sent to the endpoint (each try of each call, and checks)
        self.requests = 0
        self._client = openai.OpenAI(
            base_url=settings.base_url,
            api_key=self._key or "not-needed",  # local servers (Ollama, llama.cpp) need none
            timeout=settings.timeout_s,
            max_retries=settings.max_attempts - 1,
            http_client=openai.DefaultHttpxClient(event_hooks={"request": [self._count]}),
        )
        self.status = EndpointStatus()
        self._lock = threading.Lock()
        self._form: str | None = None  # the structured-output form, once known
        self._confirmed = False  # True once the endpoint accepted a structured request
        #: whether the endpoint gives token log-probabilities: None until a request asked
        self._logprobs: bool | None = None if settings.logprobs != "off" else False

    @property
    def model(self) -> str:
        """The configured model for agent calls."""
        return self.settings.model

    @property
    def answer_model(self) -> str:
        """The model for the final answer: ``answer_model`` if set, else the agent model."""
        return self.settings.answer_model or self.settings.model

    def describe(self) -> str:
        """The endpoint's base URL and model, for messages."""
        return f"{self.settings.base_url} (model {self.settings.model})"

    # -- plumbing -----------------------------------------------------------------------

    def _count(self, _request: Any) -> None:
        with self._lock:
            self.requests += 1

    def _note(self, err: LLMError | None, models: list[str] | None = None) -> None:
        """The endpoint's state after a call or check: answered (``err`` None), or failed; a
        failure that stops the endpoint (``PROBLEMS``) also stops the open pass."""
        with self._lock:
            if err is None:
                self.status = EndpointStatus("reachable", at=time.time(),
                                             models=models if models is not None
                                             else self.status.models)
                return
            failing = err.problem in PROBLEMS
            self.status = EndpointStatus("failing" if failing else "reachable", str(err),
                                         err.problem, time.time(), self.status.models)
        state = _PASS.get()
        if failing and state is not None and state.failure is None:
            state.failure = err

    def _fail(self, message: str, problem: str = "") -> LLMError:
        err = LLMError(self.redact(message), problem)
        self._note(err)
        return err

    def _not_again(self) -> None:
        """Raise ``EndpointDownError`` when the endpoint failed earlier in the open pass."""
        failure = pass_failure()
        if failure is not None:
            raise EndpointDownError(offline_words(failure), failure.problem)

    def _model_setting(self, model: str) -> str:
        """Where the model ``model`` is set, for a message."""
        if model == self.settings.model:
            return "RAGSTREAM_LLM_MODEL (llm.model in config/settings.json)"
        if model == self.settings.answer_model:
            return "llm.answer_model in config/settings.json"
        return "the agent's \"model\" in config/agents/ (empty: llm.model)"

    def _status_words(self, err: openai.APIStatusError, tries: int, model: str) -> tuple[str, str]:
        """An HTTP error in words that name the setting to change, and its problem."""
        said = f"HTTP {err.status_code}: {err.message}"
        after = f" (after {tries} tries)" if tries > 1 else ""
        url = self.settings.base_url
        if err.status_code in (401, 403):
            var = self.settings.api_key_env
            if not var:
                fix = ("no key is sent: set llm.api_key_env in config/settings.json to the name "
                       "of the variable that holds it")
            elif not self._key:
                fix = f"no key is sent: ${var} is not set; set it to this server's key"
            else:
                fix = (f"the key in ${var} (the variable llm.api_key_env names) is wrong or may "
                       f"not do this; put a valid key there")
            return f"{url} refused the API key ({said}){after}: {fix}.", "key"
        if _model_missing(err):
            return (f"{url} has no model {model!r} ({said}): set {self._model_setting(model)} "
                    f"to a model the server serves (\"Test connection\" lists them)."), "model"
        if err.status_code == 404:
            return (f"{self.describe()} answered {said}: is RAGSTREAM_LLM_BASE_URL "
                    f"(llm.base_url) the API root, usually ending in /v1?"), ""
        return f"{self.describe()} answered {said}{after}", ""

    def redact(self, text: str, parts: bool = True) -> str:
        """``text`` with the API key replaced by ``***``; with ``parts``, also its first 8 and
        last 4 characters (for error messages; a text to show whole keeps them)."""
        if self._key:
            text = text.replace(self._key, "***")
            if parts and len(self._key) > 8:  # providers echo a prefix or suffix of a wrong key
                text = text.replace(self._key[:8], "***").replace(self._key[-4:], "***")
        return text

    @contextmanager
    def _errors(self, timeout: float | None = None, model: str = "",
                before: int = 0) -> Iterator[None]:
        """Raise what the openai client gives up with (after its retries) as ``LLMError``, in
        words that name the setting to change (``PROBLEMS``); note the endpoint's state.
        ``before``: tries already made for this call by another request."""
        import openai

        try:
            yield
        except openai.APIStatusError as err:
            raise self._fail(*self._status_words(err, _tries(err) + before,
                                                 model or self.model)) from None
        except openai.APITimeoutError as err:
            waited = timeout or self.settings.timeout_s
            full = waited >= self.settings.timeout_s
            limit = "llm.timeout_s" if full else "what is left of llm.run_budget_s"
            fix = ("Raise llm.timeout_s in config/settings.json, or check the server"
                   if full else "Raise llm.run_budget_s in config/settings.json")
            raise self._fail(
                f"{self.describe()} did not answer within {waited:.3g} s "
                f"({_count_tries(_tries(err) + before)}; the limit was {limit}). {fix}.",
                "timeout" if full else "") from None
        except openai.APIConnectionError as err:
            refused = _refused(err)
            why = "connection refused, nothing listens there" if refused else _cause(err)
            raise self._fail(
                f"Cannot reach {self.describe()}: {why} ({_count_tries(_tries(err) + before)}). "
                f"Start the server, or set RAGSTREAM_LLM_BASE_URL (llm.base_url) to its "
                f"address.", "refused" if refused else "unreachable") from None
        except openai.OpenAIError as err:
            raise self._fail(f"{self.describe()}: {err}") from None
        except ValueError as err:  # e.g. a 200 whose body is cut-off JSON
            raise self._fail(
                f"{self.describe()} sent a response that is not valid JSON: {err}") from None
        self._note(None)

    # -- public -------------------------------------------------------------------------

    def check(self, limit: float = 30.0) -> ConnectionCheck:
        """Test the endpoint now, without retries: list its models (``GET /models``; a server
        that lists none is fine) and ask the model for one token. ``status`` follows what it
        found; the message names the setting to change when it failed."""
        import openai

        started = time.perf_counter()
        timeout = min(limit, self.settings.timeout_s)
        client = self._client.with_options(max_retries=0, timeout=timeout)
        models: list[str] = []
        try:
            with self._errors(timeout):
                try:
                    models = sorted(m.id for m in client.models.list())
                except openai.APIStatusError as err:
                    if err.status_code not in (404, 405, 501):  # some servers list no models
                        raise
            with self._errors(timeout, self.model):
                client.chat.completions.create(
                    model=self.model, messages=[{"role": "user", "content": "Say OK."}],
                    max_tokens=1, temperature=0.0)
        except LLMError as err:
            message = str(err)
            if err.problem == "model" and models:
                message += f" It serves: {', '.join(models[:12])}."
            return ConnectionCheck(False, message, round(time.perf_counter() - started, 2),
                                   models)
        seconds = round(time.perf_counter() - started, 2)
        self._note(None, models)
        listed = f"; it lists {len(models)} model{'s' * (len(models) != 1)}" if models else ""
        return ConnectionCheck(True, f"{self.settings.base_url} answered: model {self.model} "
                                     f"replied in {seconds:.2f} s{listed}.", seconds, models)

    def structured_form(self) -> str:
        """The form agent calls ask for their schema in (see the module docstring)."""
        with self._lock:
            if self._form is None:
                configured = self.settings.structured_output
                self._form = (detect_form(self.settings.base_url, self._key)
                              if configured == "auto" else configured)
            return self._form

    def offers_logprobs(self) -> bool | None:
        """Whether the endpoint gives token log-probabilities: True once it sent some, False
        when it refused or ignored them (or ``llm.logprobs`` is off), None before it was asked."""
        with self._lock:
            return self._logprobs

    def _logprob_args(self, wanted: bool) -> dict[str, Any]:
        if not wanted or self.offers_logprobs() is False:
            return {}
        return {"logprobs": True, "top_logprobs": self.settings.logprobs_top}

    def _note_logprobs(self, resp: Any, asked: bool) -> list[TokenChoice]:
        """The reply's tokens with their alternatives; a reply without them, though asked,
        tells the client not to ask again (``llm.logprobs`` auto)."""
        if not asked:
            return []
        choice = resp.choices[0] if getattr(resp, "choices", None) else None
        content = getattr(getattr(choice, "logprobs", None), "content", None) or []
        tokens = [TokenChoice(t.token, float(t.logprob),
                              [(a.token, float(a.logprob)) for a in (t.top_logprobs or [])])
                  for t in content]
        with self._lock:
            if self.settings.logprobs == "auto" or tokens:
                self._logprobs = bool(tokens)
        return tokens

    def _refused_logprobs(self, err: Any, kwargs: dict[str, Any]) -> bool:
        """Whether ``err`` answers a request that asked for log-probabilities, from a server
        that has never given them (``auto``): then they are not asked for again."""
        if ("logprobs" not in kwargs or self.settings.logprobs != "auto"
                or err.status_code not in _REFUSED):
            return False
        with self._lock:
            if self._logprobs:
                return False
            self._logprobs = False
        kwargs.pop("logprobs", None)
        kwargs.pop("top_logprobs", None)
        return True

    def _response_format(self, form: str, name: str, schema: dict[str, Any]) -> dict[str, Any]:
        """The request's extra arguments that ask for ``schema`` in ``form``."""
        if form == "json_schema":
            strict = strict_schema(schema, lengths=not _is_openai(self.settings.base_url))
            return {"response_format": {"type": "json_schema", "json_schema": {
                "name": name, "schema": strict, "strict": True}}}
        if form == "llama_cpp":
            return {"response_format": {"type": "json_object", "schema": schema}}
        if form == "ollama":
            return {"extra_body": {"format": schema}}
        return {"response_format": {"type": "json_object"}}

    def _create(self, form: str, name: str, schema: dict[str, Any], **kwargs: Any) -> Any:
        """One chat completion asking for ``schema``; in ``auto``, a refused form steps down."""
        import openai

        before = 0  # a probe that failed on the network counts as the call's first try
        while True:
            probing = (self.settings.structured_output == "auto" and not self._confirmed
                       and form in STEP_DOWN and not before)
            # no retries while probing, nor when the run budget leaves less than one try's time
            short = kwargs.get("timeout", self.settings.timeout_s) < self.settings.timeout_s
            retries = self.settings.max_attempts - 1 - before
            client = (self._client.with_options(max_retries=0) if probing or short else
                      self._client.with_options(max_retries=retries) if before else self._client)
            with self._errors(kwargs.get("timeout"), kwargs.get("model", ""), before):
                try:
                    resp = client.chat.completions.create(
                        **kwargs, **self._response_format(form, name, schema))
                except openai.APIStatusError as err:
                    if self._refused_logprobs(err, kwargs):
                        continue
                    if not (probing and err.status_code in _REFUSED) or _model_missing(err):
                        raise
                    with self._lock:
                        self._form = form = STEP_DOWN[form]
                    continue
                except openai.APIConnectionError:  # also a timeout
                    if not probing or retries < 1:
                        raise
                    before = 1
                    continue
            with self._lock:
                self._confirmed = True
            return form, resp

    def chat_json(self, messages: list[dict[str, str]], schema: type[T], *, model: str = "",
                  temperature: float = 0.0, max_tokens: int = 800,
                  json_schema: dict[str, Any] | None = None, timeout: float | None = None,
                  log: CallLog | None = None, agent: str = "",
                  logprobs: bool = False) -> JSONResult[T]:
        """A JSON object validated as ``schema``, the request constrained by ``json_schema``
        (default: the model's own schema). ``timeout`` (seconds) overrides ``llm.timeout_s``
        for this call; ``log`` is filled in as the call goes, also when it fails. With
        ``logprobs`` the reply's tokens and their alternatives go to ``log.tokens`` where the
        endpoint gives them."""
        log = log if log is not None else CallLog()
        spec = json_schema or inline_schema(schema.model_json_schema())
        convo = list(messages)
        with _watched(log, agent or schema.__name__, model or self.model):
            self._not_again()
            for attempt in range(2):
                form = self.structured_form()
                log.messages = convo
                extra = self._logprob_args(logprobs and attempt == 0)
                form, resp = self._create(
                    form, schema.__name__, spec, model=model or self.model,
                    messages=_for_openai(convo), temperature=temperature,
                    max_tokens=max_tokens, timeout=timeout or self.settings.timeout_s, **extra)
                log.form = form
                if not hasattr(resp, "choices"):  # a 200 whose body is no chat completion
                    raise LLMError(f"{self.describe()} answered with something that is not a "
                                   f"chat completion (is llm.base_url the API root, ending in /v1?)")
                log.usage.calls += 1
                log.usage.add(resp.usage)
                choice = resp.choices[0] if resp.choices else None
                log.raw = raw = (choice.message.content or "") if choice else ""
                log.finish_reason = str(getattr(choice, "finish_reason", "") or "")
                log.tokens = self._note_logprobs(resp, "logprobs" in extra)
                try:
                    value = schema.model_validate(json.loads(_strip_fences(raw)))
                    log.first_try_valid = attempt == 0
                    log.repaired = attempt > 0
                    log.parsed = value.model_dump(mode="json")
                    return JSONResult(value, log)
                except (json.JSONDecodeError, ValidationError) as err:
                    error = _short_error(err)
                if log.finish_reason == "length":
                    raise ReplyCutOffError(
                        f"the reply was cut off at max_tokens={max_tokens} before its JSON was "
                        f"complete ({error}); raise max_tokens in the agent's config")
                if form != "json_object" or attempt:
                    raise AgentOutputError(
                        f"the model's reply was not valid JSON for {schema.__name__}"
                        + (" after one repair attempt" if attempt else
                           f" although the request asked for its schema ({form})")
                        + f": {error}")
                convo = convo + [  # one repair round: only plain JSON mode can get it wrong
                    {"role": "assistant", "content": raw},
                    {"role": "user", "content": (
                        f"That reply is not valid: {error}. Reply again with only one JSON "
                        f"object that matches this schema, no other text:\n"
                        f"{json.dumps(spec, ensure_ascii=False)}")},
                ]
            raise AssertionError("unreachable")

    def judge(self, messages: list[dict[str, str]], answers: Sequence[str] = ("yes", "no"), *,
              model: str = "", timeout: float | None = None, log: CallLog | None = None,
              agent: str = "") -> dict[str, float]:
        """The model's probability of each of ``answers``, read from the top log-probabilities
        of the one token it generates (temperature 0), normalized over the answers it listed
        (``answer_probabilities``). Raises ``NoLogprobsError`` when the endpoint gives none
        and ``AgentOutputError`` when none of the listed tokens is one of the answers."""
        log = log if log is not None else CallLog()
        log.form = "logprobs"
        log.messages = list(messages)
        with _watched(log, agent or "judge", model or self.model):
            self._not_again()
            if self.offers_logprobs() is False:
                raise NoLogprobsError(f"{self.describe()} gives no token log-probabilities")
            kwargs: dict[str, Any] = {
                "model": model or self.model, "messages": _for_openai(log.messages),
                "temperature": 0.0, "max_tokens": 1,
                "timeout": timeout or self.settings.timeout_s, **self._logprob_args(True)}
            resp = self._complete(kwargs, timeout)
            log.usage.calls += 1
            log.usage.add(getattr(resp, "usage", None))
            choice = resp.choices[0] if getattr(resp, "choices", None) else None
            log.raw = (choice.message.content or "") if choice else ""
            log.finish_reason = str(getattr(choice, "finish_reason", "") or "")
            log.tokens = self._note_logprobs(resp, "logprobs" in kwargs)
            if not log.tokens:
                raise NoLogprobsError(f"{self.describe()} answered without token "
                                      f"log-probabilities")
            probs = answer_probabilities(log.tokens[0], answers)
            if probs is None:
                listed = ", ".join(repr(t) for t, _ in log.tokens[0].top[:5])
                raise AgentOutputError(f"none of the model's likeliest first tokens ({listed}) "
                                       f"is one of {', '.join(answers)}")
            log.probabilities = probs
            log.first_try_valid = True
            log.parsed = {"answer": max(probs, key=lambda a: probs[a]), "probabilities": probs}
            return probs

    def _complete(self, kwargs: dict[str, Any], timeout: float | None) -> Any:
        """One plain chat completion; a refusal of the log-probabilities is remembered and
        the request sent again without them."""
        import openai

        while True:
            short = kwargs.get("timeout", self.settings.timeout_s) < self.settings.timeout_s
            client = self._client.with_options(max_retries=0) if short else self._client
            with self._errors(timeout, kwargs.get("model", "")):
                try:
                    return client.chat.completions.create(**kwargs)
                except openai.APIStatusError as err:
                    if self._refused_logprobs(err, kwargs):
                        raise NoLogprobsError(self.redact(
                            f"{self.describe()} refused token log-probabilities (HTTP "
                            f"{err.status_code}: {err.message})")) from None
                    raise

    def stream_chat(self, messages: list[dict[str, str]], result: StreamResult, *,
                    model: str = "", temperature: float = 0.0, max_tokens: int = 1500,
                    json_schema: dict[str, Any] | None = None,
                    name: str = "Answer") -> Iterator[str]:
        """Yield the answer's text pieces as they arrive; ``result`` holds the whole text and
        the usage once the iterator is exhausted. Only the request is retried, not a stream
        that breaks off. Closing the iterator early (``close()``, or leaving a ``with
        closing(...)`` block) closes the model's HTTP response at once. With ``json_schema``
        the reply is asked for as JSON of that schema, in the endpoint's structured form
        (``structured_form``), and the pieces are the JSON text as it streams."""
        self._not_again()
        started = time.perf_counter()
        result.model = model or self.answer_model
        extra: dict[str, Any] = {}
        if json_schema is not None:
            result.form = self.structured_form()
            extra = self._response_format(result.form, name, json_schema)
        # a span that is not made current: a generator suspended at each piece must not leave
        # it current in its caller's context
        span = telemetry.start_span(f"chat {result.model}", chat_attributes(result.model, name))
        try:
            with self._errors(model=result.model):
                stream = self._client.chat.completions.create(
                    model=result.model, messages=_for_openai(messages),
                    temperature=temperature, max_tokens=max_tokens, stream=True,
                    stream_options={"include_usage": True}, **extra)
            result.usage.calls += 1
            try:
                for chunk in stream:
                    if getattr(chunk, "usage", None):
                        result.usage.add(chunk.usage)
                    if not chunk.choices:
                        continue
                    piece = chunk.choices[0].delta.content or ""
                    if piece:
                        if result.first_token_ms is None:
                            result.first_token_ms = (time.perf_counter() - started) * 1000
                        result.text += piece
                        yield piece
            except Exception as err:
                raise LLMError(self.redact(
                    f"the answer stream from {self.describe()} broke off: {err}")) from None
            finally:
                stream.close()  # the client's Stream sits in a reference cycle: never wait for it
        finally:
            if span.is_recording():
                telemetry.set_attributes(span, {
                    "gen_ai.usage.input_tokens": result.usage.prompt_tokens,
                    "gen_ai.usage.output_tokens": result.usage.completion_tokens,
                    "ragstream.llm.stream": True,
                    "ragstream.llm.first_token_ms": (round(result.first_token_ms, 1)
                                                     if result.first_token_ms else None),
                    **_content(messages, result.text)})
            span.end()


def _answer_key(token: str) -> str:
    return token.strip().strip(".,:;!\"'").lower()


def answer_probabilities(token: TokenChoice, answers: Sequence[str]) -> dict[str, float] | None:
    """Each answer's probability from one generated token's alternatives: the probabilities
    of the listed tokens that spell it (any case, spaces and punctuation aside; a token that
    is the start of exactly one answer counts for it), normalized over the answers. None when
    no listed token spells one."""
    import math

    keys = [a.lower() for a in answers]
    mass = dict.fromkeys(keys, 0.0)
    seen: set[str] = set()
    for text, logprob in token.top or [(token.token, token.logprob)]:
        key = _answer_key(text)
        if not key or text in seen:  # "Yes" and " yes" are two tokens: both count
            continue
        seen.add(text)
        hits = [a for a in keys if a == key] or [a for a in keys if a.startswith(key)]
        if len(hits) == 1:
            mass[hits[0]] += math.exp(logprob)
    total = sum(mass.values())
    if total <= 0:
        return None
    return {a: round(mass[k] / total, 6) for a, k in zip(answers, keys)}


@contextmanager
def _watched(log: CallLog, agent: str, model: str) -> Iterator[None]:
    """One agent call's bookkeeping: the watcher hears it start and end, ``log`` gets its
    seconds and, when it fails, the error."""
    started = time.perf_counter()
    watcher = _WATCHER.get()
    if watcher is not None:
        watcher.call_started(agent, model)
    with telemetry.span(f"chat {model}", chat_attributes(model, agent)) as span:
        try:
            yield
        except (LLMError, AgentOutputError) as err:
            log.error = str(err)
            raise
        finally:
            log.seconds = round(time.perf_counter() - started, 3)
            if watcher is not None:
                watcher.call_ended(agent)
            if span.is_recording():
                telemetry.set_attributes(span, {
                    "gen_ai.usage.input_tokens": log.usage.prompt_tokens,
                    "gen_ai.usage.output_tokens": log.usage.completion_tokens,
                    "gen_ai.response.finish_reasons": [log.finish_reason] if log.finish_reason else None,
                    "ragstream.llm.form": log.form or None,
                    "ragstream.llm.repaired": log.repaired,
                    **_content(log.messages, log.raw)})


def chat_attributes(model: str, agent: str) -> dict[str, Any]:
    """An LLM call's span attributes at its start, in the GenAI semantic conventions' names
    (the endpoint speaks OpenAI's API, whatever serves it)."""
    return {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
            "gen_ai.request.model": model, "ragstream.agent": agent}


def _content(messages: list[dict[str, str]], reply: str) -> dict[str, Any]:
    """The messages and the reply, for a span, only with ``telemetry.capture_content``."""
    if not telemetry.capture_content():
        return {}
    return {"gen_ai.input.messages": json.dumps(messages, ensure_ascii=False),
            "gen_ai.output.messages": json.dumps([{"role": "assistant", "content": reply}],
                                                 ensure_ascii=False)}


def _for_openai(messages: list[dict[str, str]]) -> list[ChatCompletionMessageParam]:
    """Our ``{"role", "content"}`` messages, typed as the openai client's message params."""
    return cast("list[ChatCompletionMessageParam]", messages)


def _refused(err: BaseException) -> bool:
    """Whether a connection error is a refused connection (nothing listens at the address)."""
    seen: BaseException | None = err
    for _ in range(8):
        if seen is None:
            return False
        if isinstance(seen, ConnectionRefusedError) or "refused" in str(seen).lower():
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _cause(err: BaseException) -> str:
    """The innermost reason of a connection error (the openai client only says "Connection
    error.")."""
    words = str(err)
    seen: BaseException | None = err.__cause__ or err.__context__
    for _ in range(8):
        if seen is None:
            break
        words = str(seen) or words
        seen = seen.__cause__ or seen.__context__
    return words.rstrip(".")


def _model_missing(err: openai.APIStatusError) -> bool:
    """Whether an HTTP error says the model asked for does not exist (OpenAI's
    ``model_not_found``; Ollama's and vLLM's 404 that names the model)."""
    code = str(getattr(err, "code", "") or "")
    return code == "model_not_found" or (err.status_code == 404 and "model" in err.message.lower()
                                         and "url" not in err.message.lower())


def _count_tries(n: int) -> str:
    return "1 try" if n == 1 else f"{n} tries"


def _tries(err: openai.APIError) -> int:
    """How many requests the openai client sent: it numbers its retries in a request header."""
    return int(err.request.headers.get("x-stainless-retry-count", "0")) + 1


def _strip_fences(text: str) -> str:
    """Models sometimes wrap JSON in ```json fences even in JSON mode."""
    t = text.strip()
    if t.startswith("```"):
        t = t.split("\n", 1)[1] if "\n" in t else ""
        t = t.rsplit("```", 1)[0]
    return t.strip()


def _short_error(err: json.JSONDecodeError | ValidationError) -> str:
    if isinstance(err, json.JSONDecodeError):
        return f"not JSON ({err.msg} at position {err.pos})"
    parts = []
    for e in err.errors()[:5]:
        loc = ".".join(str(p) for p in e["loc"]) or "(root)"
        parts.append(f"{loc}: {e['msg']}")
    return "; ".join(parts)


# --------------------------------------------------------------------------- schemas


def inline_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with every ``$ref`` to ``#/$defs/…`` replaced by its definition and titles
    removed: one self-contained tree that every server's grammar converter reads."""
    defs = schema.get("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            if "$ref" in node:
                name = node["$ref"].rsplit("/", 1)[-1]
                return walk(defs[name])
            return {k: walk(v) for k, v in node.items() if k not in ("$defs", "title")}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    return walk(schema)


def strict_schema(schema: dict[str, Any], *, lengths: bool = True) -> dict[str, Any]:
    """``schema`` as OpenAI's strict mode wants it: every object closed
    (``additionalProperties: false``) with all its properties required, no defaults; string
    lengths left out when ``lengths`` is False (OpenAI's strict mode does not take them)."""

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(v) for v in node]
        if not isinstance(node, dict):
            return node
        out = {k: walk(v) for k, v in node.items()
               if k != "default" and (lengths or k not in ("maxLength", "minLength"))}
        if out.get("type") == "object" and "properties" in out:
            out["additionalProperties"] = False
            out["required"] = list(out["properties"])
        return out

    return walk(schema)


def _is_openai(base_url: str) -> bool:
    return (urlsplit(base_url).hostname or "").endswith("openai.com")


def detect_form(base_url: str, key: str = "", timeout: float = 2.0) -> str:
    """The structured-output form an endpoint understands, found by asking it (``auto``).

    OpenAI's own API: ``json_schema``. An Ollama server (it answers ``/api/version``):
    ``ollama``. A llama.cpp server (``owned_by: llamacpp`` in ``/models``, or a ``Server:
    llama.cpp`` header) or llama-cpp-python (``owned_by: me``): ``llama_cpp``. Anything else
    starts with ``json_schema`` and steps down if the server refuses it."""
    import httpx

    if _is_openai(base_url):
        return "json_schema"
    root = base_url.rstrip("/")
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        with httpx.Client(timeout=timeout, headers=headers) as http:
            try:
                version = http.get(root.removesuffix("/v1") + "/api/version")
                if version.status_code == 200 and "version" in version.json():
                    return "ollama"
            except (httpx.HTTPError, ValueError):
                pass
            models = http.get(root + "/models")
            owners = {str(m.get("owned_by", "")) for m in models.json().get("data", [])
                      if isinstance(m, dict)}
            server = models.headers.get("server", "").lower()
    except (httpx.HTTPError, ValueError, AttributeError):
        return "json_schema"
    if "llamacpp" in owners or "llama.cpp" in server or owners == {"me"}:
        return "llama_cpp"
    return "json_schema"


def build_llm(settings: LLMSettings) -> LLMClient | None:
    """The client when an endpoint is configured, else None (agents run deterministically)."""
    return LLMClient(settings) if settings.base_url else None
