"""The knowledge bases as OpenAI-compatible models (ragstream/interfaces/service/openai_compat.py), driven
by the real ``openai`` client against the real service (uvicorn on loopback): one model per
knowledge base; a chat completion is the pass and its answer with the numbered sources
appended and the citations in their own field, kept as a run, the same selection as the
engine's own pass; streamed, its pieces join to the same message; earlier messages are the
conversation; errors have OpenAI's shape and the typed error's message; with an LLM, the
model's answer streams token by token; with a token, the key is the bearer token."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from ragstream.interfaces.service.http import create_app
from ragstream.interfaces.service.openai_compat import SOURCES_HEADER
from ragstream.workbench.api import RAGPipeline
from ragstream.workbench.engine import Engine
from tests.conftest import make_config, rules_and_notes_engine
from tests.fake_openai import FakeOpenAI, Reply
from tests.llm_support import every_agent, llm_config, with_llm
from tests.test_service import serving

QUERY = "What can I do during movement?"
TOKEN = "openai-compat-token-3c9e71"
LLM_ANSWER = ("During the Movement phase an operative makes one move action [1]. Crossing a "
              "barricade costs one extra inch [2].")
route = every_agent({"reply": Reply.text(LLM_ANSWER)})


@pytest.fixture(scope="module")
def rules(tmp_path_factory, embedder) -> Engine:
    """The rules knowledge base as the default, and a second one, "notes", beside it."""
    root = tmp_path_factory.mktemp("openai-compat")
    engine = rules_and_notes_engine(root, embedder)
    return engine


@pytest.fixture(scope="module")
def plain(rules) -> Iterator[openai.OpenAI]:
    """The service without a token or an LLM (extractive answers), and a client of it."""
    with serving(create_app(RAGPipeline(rules), token=None)) as url:
        yield openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=60)


def ask(client: openai.OpenAI, question: str = QUERY, **kw):
    return client.chat.completions.create(
        model=kw.pop("model", "ragstream/default"),
        messages=kw.pop("messages", [{"role": "user", "content": question}]), **kw)


def test_one_model_per_knowledge_base(plain):
    ids = {m.id for m in plain.models.list()}
    assert ids == {"ragstream/default", "ragstream/notes"}


def test_a_completion_is_the_answer_with_its_sources_kept_as_a_run(plain, rules):
    reply = ask(plain)
    message = reply.choices[0].message.content
    extra = reply.model_extra
    cites, info = extra["citations"], extra["ragstream"]
    assert reply.object == "chat.completion" and reply.model == "ragstream/default"
    assert reply.choices[0].finish_reason == "stop"
    assert info["kb"] == "default" and info["mode"] == "extractive"
    assert info["confidence"] in ("High", "Medium", "Low") and info["confidence_reason"]

    # the answer, then its numbered sources, each as the citations field names it
    answer, sources = message.split("\n\n" + SOURCES_HEADER)
    assert answer.strip() and cites
    assert [c["n"] for c in cites] == list(range(1, len(cites) + 1))
    assert sources.splitlines() == [f"- [{c['n']}] {c['label']}" for c in cites]
    assert all(f"[{c['n']}]" in answer for c in cites)
    assert all(c["source"].startswith("rules_kb/") and c["chunk_id"] for c in cites)

    # the same selection and answer as the engine's own pass on the same question
    sp, ans = rules.answer(rules.run(QUERY))
    assert [c.chunk_id for c in ans.sources] == [c["chunk_id"] for c in cites]
    assert ans.text.rstrip("\n") == answer

    # kept as a run, origin "api"
    run = rules.runs().get(info["run_id"])
    assert run.origin == "api" and run.prompt == QUERY
    assert run.sp.answer is not None and run.sp.answer.text.rstrip("\n") == answer


def test_streamed_pieces_join_to_the_same_message(plain):
    whole = ask(plain).choices[0].message.content
    chunks = list(ask(plain, stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    pieces = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert pieces == whole
    last = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(last) == 1 and last[0].choices[0].finish_reason == "stop"
    assert last[0].model_extra["citations"] and last[0].model_extra["ragstream"]["run_id"]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None  # include_usage


def test_the_model_picks_the_knowledge_base(plain):
    reply = ask(plain, "How does the ReRanker order the chunks?", model="ragstream/notes")
    extra = reply.model_extra
    assert extra["ragstream"]["kb"] == "notes"
    assert extra["citations"] and all(c["source"].endswith("reranking.md") for c in extra["citations"])
    bare = ask(plain, "How does the ReRanker order the chunks?", model="notes")
    assert bare.model == "ragstream/notes"


def test_earlier_messages_are_the_conversation_and_system_messages_are_not_read(plain, rules):
    reply = ask(plain, messages=[
        {"role": "system", "content": "Answer in French."},
        {"role": "user", "content": "What is a barricade?"},
        {"role": "assistant", "content": "A barricade is terrain an operative can cross."},
        {"role": "user", "content": [{"type": "text", "text": QUERY}]},
    ])
    run = rules.runs().get(reply.model_extra["ragstream"]["run_id"])
    assert run.prompt == QUERY
    assert [(t.user, t.assistant) for t in run.sp.recent_conversation] == [
        ("What is a barricade?", "A barricade is terrain an operative can cross.")]
    assert "French" not in run.sp.prompt_ready


@pytest.mark.parametrize("kw, error, says", [
    ({"model": "ragstream/nowhere"}, openai.NotFoundError, "nowhere"),
    ({"messages": [{"role": "system", "content": "Be brief."}]}, openai.BadRequestError,
     "no user message"),
    ({"messages": [{"role": "user", "content": "   "}]}, openai.BadRequestError, "The query is empty"),
    ({"messages": [{"role": "user", "content": "x" * 2001}]}, openai.BadRequestError, "the limit is"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
     openai.BadRequestError, "reads text only"),
    ({"n": 2}, openai.BadRequestError, "n"),
])
def test_errors_have_openais_shape_and_say_what_to_do(plain, kw, error, says):
    with pytest.raises(error) as caught:
        ask(plain, **kw)
    body = caught.value.body
    assert isinstance(body, dict) and body["type"] == "invalid_request_error"  # the client unwraps "error"
    assert says in body["message"]


@pytest.fixture(scope="module")
def with_model(rules) -> Iterator[tuple[openai.OpenAI, str]]:
    """The service with a bearer token and an LLM (the scripted OpenAI-compatible server)."""
    with FakeOpenAI(models=["test-model"], responder=route) as fake:
        cfg = llm_config(rules.cfg, fake).with_overrides({"settings.answer.check_citations": False})
        engine = Engine(cfg, services=with_llm(rules.services, cfg))
        with serving(create_app(RAGPipeline(engine), token=TOKEN)) as url:
            yield openai.OpenAI(base_url=f"{url}/v1", api_key=TOKEN, max_retries=0, timeout=60), url


def test_with_an_llm_the_answer_streams_token_by_token_behind_the_token(with_model):
    client, url = with_model
    chunks = list(ask(client, stream=True))
    contents = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(contents) > 3  # the model's pieces, then the sources
    message = "".join(contents)
    assert message.startswith(LLM_ANSWER) and SOURCES_HEADER in message
    last = next(c for c in chunks if c.choices and c.choices[0].finish_reason)
    assert last.model_extra["ragstream"]["mode"] == "llm"
    assert [c["n"] for c in last.model_extra["citations"]] == [1, 2]

    whole = ask(client)
    assert whole.usage.total_tokens > 0 and whole.choices[0].message.content == message

    wrong = openai.OpenAI(base_url=f"{url}/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        wrong.models.list()


def test_the_engine_down_is_a_503_in_openais_shape(tmp_path, embedder):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"  # nothing listens there
    engine = Engine(make_config(tmp_path / "index", RAGSTREAM_CHROMA_URL=url))
    engine.services.embedder = embedder
    with serving(create_app(RAGPipeline(engine), token=None)) as base:
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0, timeout=60)
        with pytest.raises(openai.InternalServerError) as caught:
            ask(client)
    assert caught.value.status_code == 503
    assert f"The Chroma server at {url} cannot be reached" in caught.value.body["message"]
    assert caught.value.body["type"] == "server_error"
