"""The one LLM client: any OpenAI-compatible chat-completions endpoint through ``openai``.

OpenAI, Groq, Ollama (``/v1``) and a llama.cpp server all work by configuration alone
(``llm.base_url``, ``llm.model``, and the name of the variable that holds the key).

Retries are the openai client's own, ``llm.max_attempts`` tries in all: timeouts (every
request has ``llm.timeout_s``), network errors, 408, 409, 429 and 5xx are retried with
exponential backoff and jitter, or after the wait the server names in ``retry-after-ms`` /
``Retry-After`` (a wait over 2 minutes is not retried); other 4xx errors are not retried.
Failures surface as ``LLMError`` with the API key removed from the message.

``chat_json`` asks for a JSON object (JSON mode), validates it with a pydantic model and, if
the reply is not valid, asks once more with the validation error (one repair attempt) before
raising ``AgentOutputError``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from pydantic import BaseModel, ValidationError

from ragstream.config import LLMSettings
from ragstream.errors import RagstreamError

if TYPE_CHECKING:
    import openai
    from openai.types.chat import ChatCompletionMessageParam

T = TypeVar("T", bound=BaseModel)


class LLMError(RagstreamError):
    """The endpoint could not give an answer (after retries where they apply)."""

    kind = "LLM endpoint"


class AgentOutputError(RagstreamError):
    """The model answered, but not with the JSON the agent needs (even after a repair)."""

    kind = "LLM output"


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
class JSONResult(Generic[T]):
    """A reply validated as the model ``T``, with the usage of the calls it took."""

    value: T
    usage: Usage
    repaired: bool = False
    raw: str = ""


@dataclass
class StreamResult:
    """Filled in while a stream is consumed: the whole text and the usage at the end."""

    text: str = ""
    usage: Usage = field(default_factory=Usage)
    model: str = ""
    first_token_ms: float | None = None


class LLMClient:
    """Chat completions from one OpenAI-compatible endpoint; failures raise ``LLMError``."""

    def __init__(self, settings: LLMSettings, environ: dict[str, str] | None = None):
        import openai

        env = os.environ if environ is None else environ
        self.settings = settings
        self._key = env.get(settings.api_key_env, "") if settings.api_key_env else ""
        self._client = openai.OpenAI(
            base_url=settings.base_url,
            api_key=self._key or "not-needed",  # local servers (Ollama, llama.cpp) need none
            timeout=settings.timeout_s,
            max_retries=settings.max_attempts - 1,
        )

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

    def _redact(self, text: str) -> str:
        if self._key:
            text = text.replace(self._key, "***")
            if len(self._key) > 8:  # providers echo a prefix or suffix of a wrong key
                text = text.replace(self._key[:8], "***").replace(self._key[-4:], "***")
        return text

    @contextmanager
    def _errors(self) -> Iterator[None]:
        """Raise what the openai client gives up with (after its retries) as ``LLMError``."""
        import openai

        try:
            yield
        except openai.APIStatusError as err:
            tries = _tries(err)
            raise LLMError(self._redact(
                f"{self.describe()} answered HTTP {err.status_code}: {err.message}"
                + (f" (after {tries} tries)" if tries > 1 else "")
            )) from None
        except openai.APITimeoutError as err:
            raise LLMError(
                f"{self.describe()} did not answer within {self.settings.timeout_s:g} s "
                f"({_tries(err)} tries). Raise llm.timeout_s or check the server."
            ) from None
        except openai.APIConnectionError as err:
            raise LLMError(self._redact(
                f"Cannot reach {self.describe()}: {err} ({_tries(err)} tries). "
                f"Check llm.base_url / RAGSTREAM_LLM_BASE_URL."
            )) from None
        except openai.OpenAIError as err:
            raise LLMError(self._redact(f"{self.describe()}: {err}")) from None
        except ValueError as err:  # e.g. a 200 whose body is cut-off JSON
            raise LLMError(self._redact(
                f"{self.describe()} sent a response that is not valid JSON: {err}")) from None

    # -- public -------------------------------------------------------------------------

    def chat_json(self, messages: list[dict[str, str]], schema: type[T], *, model: str = "",
                  temperature: float = 0.0, max_tokens: int = 800) -> JSONResult[T]:
        """A JSON object validated as ``schema``; one repair round on an invalid reply."""
        usage = Usage()
        convo = list(messages)
        error = ""
        raw = ""
        for attempt in range(2):
            with self._errors():
                resp = self._client.chat.completions.create(
                    model=model or self.model, messages=_for_openai(convo),
                    temperature=temperature, max_tokens=max_tokens,
                    response_format={"type": "json_object"})
            if not hasattr(resp, "choices"):  # a 200 with a body that is no chat completion
                raise LLMError(f"{self.describe()} answered with something that is not a chat "
                               f"completion (is llm.base_url the API root, ending in /v1?)")
            usage.calls += 1
            usage.add(resp.usage)
            raw = (resp.choices[0].message.content or "") if resp.choices else ""
            try:
                value = schema.model_validate(json.loads(_strip_fences(raw)))
                return JSONResult(value, usage, repaired=attempt > 0, raw=raw)
            except (json.JSONDecodeError, ValidationError) as err:
                error = _short_error(err)
                convo = convo + [
                    {"role": "assistant", "content": raw},
                    {"role": "user", "content": (
                        f"That reply is not valid: {error}. Reply again with only one JSON "
                        f"object that matches this schema, no other text:\n"
                        f"{json.dumps(schema.model_json_schema(), ensure_ascii=False)}")},
                ]
        raise AgentOutputError(f"the model's reply was not valid JSON for {schema.__name__} "
                               f"after one repair attempt: {error}")

    def stream_chat(self, messages: list[dict[str, str]], result: StreamResult, *,
                    model: str = "", temperature: float = 0.0,
                    max_tokens: int = 1500) -> Iterator[str]:
        """Yield the answer's text pieces as they arrive; ``result`` holds the whole text and
        the usage once the iterator is exhausted. Only the request is retried, not a stream
        that breaks off. Closing the iterator early (``close()``, or leaving a ``with
        closing(...)`` block) closes the model's HTTP response at once."""
        started = time.perf_counter()
        result.model = model or self.answer_model
        with self._errors():
            stream = self._client.chat.completions.create(
                model=result.model, messages=_for_openai(messages), temperature=temperature,
                max_tokens=max_tokens, stream=True, stream_options={"include_usage": True})
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
            raise LLMError(self._redact(
                f"the answer stream from {self.describe()} broke off: {err}")) from None
        finally:
            stream.close()  # the client's Stream sits in a reference cycle: never wait for GC


def _for_openai(messages: list[dict[str, str]]) -> list[ChatCompletionMessageParam]:
    """Our ``{"role", "content"}`` messages, typed as the openai client's message params."""
    return cast("list[ChatCompletionMessageParam]", messages)


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


def build_llm(settings: LLMSettings) -> LLMClient | None:
    """The client when an endpoint is configured, else None (agents run deterministically)."""
    return LLMClient(settings) if settings.base_url else None
