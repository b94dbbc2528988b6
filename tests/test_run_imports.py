"""A pass imports only what it uses (issue 47: "a command imports and opens only what it
uses"): a fresh process that runs every stage on an ingested knowledge base, without syncing
it, imports no web framework, no page, no torch, no LLM client when no endpoint is
configured, no ingestion, and not chromadb's Python API (``backends.chroma_reader`` reads
the store through Chroma's Rust core). What is imported, not how long it takes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: never imported by a pass: (module, why it would be there)
NOT_IMPORTED = {
    "chromadb": "chromadb's Python API (~0.5 s): the pass reads through chromadb_rust_bindings",
    "torch": "a model runtime the default embedder and reranker do not use",
    "transformers": "Hugging Face models: the ONNX embedder needs only tokenizers",
    "sentence_transformers": "Hugging Face models",
    "streamlit": "the page",
    "fastapi": "the HTTP service",
    "starlette": "the HTTP service",
    "uvicorn": "the HTTP service",
    "mcp": "the MCP server",
    "openai": "the LLM client, with no endpoint configured",
    "httpx": "HTTP clients (the LLM client, a Chroma server)",
    "bm25s": "the in-memory BM25 (the tokenizer reads its stop words alone)",
    "scipy": "bm25s's sparse matrices",
    "pandas": "tables",
    "click": "the CLI",
    "ragstream.interfaces": "the ways in (CLI, service, page)",
    "ragstream.knowledge.ingest": "ingestion, with the knowledge base not synced",
    "ragstream.knowledge.formats": "the document formats, with the knowledge base not synced",
    "ragstream.measure": "the measuring commands",
    "ragstream.workbench.replay": "replaying an agent's call",
    "ragstream.workbench.runs": "the run history, not kept by the Python API's run",
}

PASS = """
import json, sys
from ragstream import Engine
sp = Engine().run("How are documents chunked?")
loaded = [m for m in json.loads(sys.argv[1])
          if any(k == m or k.startswith(m + ".") for k in sys.modules)]
print(json.dumps({"stage": sp.stage, "selected": len(sp.final_selection_ids), "loaded": loaded}))
"""


def test_a_pass_on_an_ingested_knowledge_base_imports_only_what_it_uses(kb_engine):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RAGSTREAM_LLM_", "OTEL_")) and k != "RAGSTREAM_OTLP_ENDPOINT"}
    env.update(RAGSTREAM_INDEX_DIR=str(kb_engine.cfg.index_dir), PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", PASS, json.dumps(sorted(NOT_IMPORTED))],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["stage"] == "a5" and result["selected"] > 0  # a whole pass ran, and found
    assert {m: NOT_IMPORTED[m] for m in result["loaded"]} == {}
