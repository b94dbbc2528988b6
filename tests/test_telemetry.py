"""Passes as OpenTelemetry traces (ragstream/backends/telemetry.py): off by default (no span is
recorded, nothing is sent); with the SDK's in-memory exporter, a pass is one trace of a
``ragstream.pass`` span, one child per stage with its counts and decisions, the answer, and
the LLM calls as children of the stage or answer that made them, in the GenAI semantic
conventions' names, with no prompt or answer text unless ``capture_content`` is on; and real
OTLP receivers on loopback, over HTTP (protobuf) and gRPC (the OTLP service definitions),
receive the spans of a pass."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ragstream.backends import telemetry
from ragstream.common.config import TelemetrySettings
from ragstream.stages.controller import STAGE_NAMES
from ragstream.workbench.engine import Engine
from tests.fake_openai import FakeOpenAI, Reply
from tests.llm_support import every_agent, llm_config, with_llm

PROMPT = "How does the ReRanker order the retrieved chunks?"
route = every_agent({"reply": Reply.text("The ReRanker orders the chunks by its score [1].")})


@pytest.fixture(autouse=True)
def tracing_off_after() -> Iterator[None]:
    yield
    telemetry.configure(TelemetrySettings())  # off again for every other test


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(models=["test-model"], responder=route) as server:
        yield server


def with_model(kb_engine: Engine, fake: FakeOpenAI) -> Engine:
    cfg = llm_config(kb_engine.cfg, fake).with_overrides({"settings.answer.check_citations": False})
    return Engine(cfg, services=with_llm(kb_engine.services, cfg))


def test_off_by_default_nothing_is_recorded(kb_engine):
    assert kb_engine.cfg.settings.telemetry.otlp_endpoint == ""
    assert not telemetry.enabled()
    with telemetry.span("ragstream.pass") as span:
        assert not span.is_recording()
    kb_engine.answer(kb_engine.run(PROMPT))  # runs as ever, with no provider behind it
    assert not telemetry.enabled()


def test_a_pass_is_one_trace_of_stages_answer_and_llm_calls(kb_engine, fake):
    exporter = InMemorySpanExporter()
    assert telemetry.configure(TelemetrySettings(), exporter=exporter)
    engine = with_model(kb_engine, fake)
    _sp, ans = engine.answer(engine.run(PROMPT))
    spans = exporter.get_finished_spans()
    by_name = {}
    for s in spans:
        by_name.setdefault(s.name, []).append(s)

    (root,) = by_name["ragstream.pass"]
    assert root.parent is None and root.attributes["ragstream.kb"] == "default"
    assert root.attributes["ragstream.stages_run"] == len(STAGE_NAMES)
    assert root.attributes["ragstream.final_selection"] > 0
    stages = {n.removeprefix("ragstream.stage "): s[0] for n, s in by_name.items()
              if n.startswith("ragstream.stage ")}
    assert set(stages) == set(STAGE_NAMES)
    for s in stages.values():
        assert s.parent.span_id == root.context.span_id and s.context.trace_id == root.context.trace_id
        assert s.attributes["ragstream.stage.wall_ms"] >= 0 and "ragstream.stage.mode" in s.attributes
    retrieval = stages["Retrieval"].attributes
    assert retrieval["ragstream.view.rows"] > 0 and retrieval["ragstream.view.kept"] > 0
    gate = stages["A3_NLI_Gate"].attributes
    assert gate["ragstream.view.rows"] == sum(v for k, v in gate.items()
                                              if k.startswith("ragstream.decided_by."))

    (answer,) = by_name["ragstream.answer"]
    assert answer.attributes["ragstream.answer.mode"] == ans.mode == "llm"
    # the answer joins the pass that made its state
    assert answer.context.trace_id == root.context.trace_id and answer.parent.span_id == root.context.span_id
    assert answer.attributes["ragstream.answer.sources"] == len(ans.sources)

    chats = [s for s in spans if s.name.startswith("chat ")]
    assert chats
    parents = {s.context.span_id: s for s in spans}
    for c in chats:
        assert c.attributes["gen_ai.operation.name"] == "chat"
        assert c.attributes["gen_ai.provider.name"] == "openai"
        assert c.attributes["gen_ai.request.model"] == "test-model" and c.attributes["ragstream.agent"]
        parent = parents[c.parent.span_id]
        assert parent.name.startswith("ragstream.stage ") or parent.name == "ragstream.answer"
    streamed = [c for c in chats if parents[c.parent.span_id].name == "ragstream.answer"]
    assert streamed and streamed[0].attributes["ragstream.llm.stream"] is True

    # no content unless asked for
    for s in spans:
        for key, value in s.attributes.items():
            assert PROMPT not in str(value), (s.name, key)
            assert not key.startswith(("gen_ai.input", "gen_ai.output")), (s.name, key)


def test_an_answer_over_http_joins_its_pass_trace_though_it_runs_in_another_thread(kb_engine):
    """``/answer`` and the OpenAI-compatible route run the pass in the server's thread pool and
    the answer in a thread of its own: one request is still one trace, the answer under its
    pass; a state read back (no pass behind it here) starts a trace of its own."""
    import httpx
    import openai

    from ragstream.interfaces.service.http import create_app
    from ragstream.workbench.api import RAGPipeline
    from tests.test_service import serving

    exporter = InMemorySpanExporter()
    assert telemetry.configure(TelemetrySettings(), exporter=exporter)
    with serving(create_app(RAGPipeline(kb_engine), token=None)) as url:
        body = {"query": PROMPT, "context_key": "c:u"}
        with httpx.stream("POST", f"{url}/answer", json=body, timeout=120) as r:
            assert r.status_code == 200 and "event: done" in "".join(r.iter_text())
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=120)
        client.chat.completions.create(model="ragstream/default",
                                       messages=[{"role": "user", "content": PROMPT}])
    spans = exporter.get_finished_spans()
    passes = {s.context.span_id: s for s in spans if s.name == "ragstream.pass"}
    answers = [s for s in spans if s.name == "ragstream.answer"]
    assert len(passes) == len(answers) == 2
    for a in answers:
        assert a.parent is not None and a.parent.span_id in passes
        assert a.context.trace_id == passes[a.parent.span_id].context.trace_id
    assert len({a.context.trace_id for a in answers}) == 2  # two requests, two traces

    exporter.clear()
    kb_engine.answer(kb_engine.run(PROMPT).model_copy(deep=True))  # a copy keeps its pass
    kb_engine.answer(type(kb_engine.run(PROMPT)).model_validate_json(
        kb_engine.run(PROMPT).model_dump_json()))  # read back: no pass behind it
    answers = [s for s in exporter.get_finished_spans() if s.name == "ragstream.answer"]
    assert answers[0].parent is not None and answers[1].parent is None


def test_content_goes_into_the_spans_only_when_asked_for(kb_engine, fake):
    exporter = InMemorySpanExporter()
    telemetry.configure(TelemetrySettings(capture_content=True), exporter=exporter)
    engine = with_model(kb_engine, fake)
    _sp, ans = engine.answer(engine.run(PROMPT))
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert spans["ragstream.pass"].attributes["ragstream.prompt"] == PROMPT
    assert spans["ragstream.answer"].attributes["ragstream.answer.text"] == ans.text
    assert any("gen_ai.input.messages" in s.attributes for s in spans.values())


class _Received(BaseHTTPRequestHandler):
    bodies: list[bytes] = []

    def do_POST(self) -> None:
        self.bodies.append(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()
        self.wfile.write(trace_service_pb2.ExportTraceServiceResponse().SerializeToString())

    def log_message(self, *args) -> None:
        pass


def span_names(request: trace_service_pb2.ExportTraceServiceRequest) -> tuple[set[str], set[str]]:
    names, services = set(), set()
    for rs in request.resource_spans:
        services |= {a.value.string_value for a in rs.resource.attributes if a.key == "service.name"}
        names |= {s.name for ss in rs.scope_spans for s in ss.spans}
    return names, services


def test_an_otlp_http_receiver_on_loopback_gets_the_pass(kb_engine):
    _Received.bodies = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Received)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
        assert telemetry.configure(TelemetrySettings(otlp_endpoint=url, service_name="ragstream-test"))
        kb_engine.run(PROMPT)
        assert telemetry.flush()
    finally:
        server.shutdown()
    names, services = set(), set()
    for body in _Received.bodies:
        n, s = span_names(trace_service_pb2.ExportTraceServiceRequest.FromString(body))
        names |= n
        services |= s
    assert {"ragstream.pass", *(f"ragstream.stage {n}" for n in STAGE_NAMES)} <= names
    assert services == {"ragstream-test"}


def test_an_otlp_grpc_receiver_on_loopback_gets_the_pass(kb_engine):
    got: list[trace_service_pb2.ExportTraceServiceRequest] = []

    class Collector(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request, context):
            got.append(request)
            return trace_service_pb2.ExportTraceServiceResponse()

    import grpc

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Collector(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        assert telemetry.configure(TelemetrySettings(otlp_endpoint=f"http://127.0.0.1:{port}",
                                                     otlp_protocol="grpc"))
        kb_engine.run(PROMPT)
        assert telemetry.flush()
    finally:
        server.stop(grace=1)
    names = set().union(*(span_names(r)[0] for r in got)) if got else set()
    assert {"ragstream.pass", "ragstream.stage Retrieval"} <= names


def test_the_endpoint_from_the_environment_turns_tracing_on(tmp_path):
    from tests.conftest import make_config

    cfg = make_config(tmp_path / "idx", RAGSTREAM_OTLP_ENDPOINT="http://127.0.0.1:9/v1/traces")
    assert cfg.settings.telemetry.otlp_endpoint == "http://127.0.0.1:9/v1/traces"
    Engine(cfg)
    assert telemetry.enabled()
