"""The retrieval service contract: what ``RAGPipeline.retrieve`` and ``RAGPipeline.ingest``
take and give, with the field names consumers (a chat bot, CLI tools) rely on.

``relevance_score`` is ``ragstream.answering.relevance``'s calibrated score: the estimated probability
that a reader would judge the chunk relevant to the query (0–1).

**Ids.** A chunk has one id on every route (``/retrieve``, ``/answer``, the ``/v1`` citations,
MCP, the CLI, the page): its RAGstream id, the document's path, ``#`` and the chunk's number
(``kb/faq.md#3``), readable and stable while the document is unchanged.
``metadata["chunk_ref"]`` repeats it (its older name). A document's id is the UUID it was
ingested under, or one derived from its path (``stable_uuid``).
"""

from __future__ import annotations

import base64
import binascii
import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

#: the namespace of the UUIDs derived from RAGstream ids (uuid5)
ID_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://ragstream.local/ids")


def stable_uuid(ref: str) -> uuid.UUID:
    """``ref`` itself when it is a UUID, else the UUID derived from it (the same every time)."""
    try:
        return uuid.UUID(ref)
    except ValueError:
        return uuid.uuid5(ID_NAMESPACE, ref)


class DocumentChunk(BaseModel):
    """One retrieved chunk: ids, text, metadata for citation, its relevance and its place."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    chunk_id: str = Field(description="the chunk's id, its document's path '#' its number "
                                      "('kb/faq.md#3'), the same on every route")
    document_id: uuid.UUID
    text: str
    metadata: dict[str, Any] = Field(
        description="source, doc_type, last_update_date, section; also path, heading_path, "
                    "title, chunk_ref (the same as chunk_id, its older name) and embedding_model; page and "
                    "page_end (1-based) for a chunk of a paged document (PDF)")
    relevance_score: float = Field(ge=0, le=1)
    position_in_doc: int = Field(ge=0, description="the chunk's number in its document, from 0")


class RAGContext(BaseModel):
    """What ``retrieve`` returns: the chunks (most relevant first) and whether they are enough."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    context_id: uuid.UUID
    query_id: uuid.UUID
    context_key: str
    document_chunks: list[DocumentChunk]
    relevance_scores: list[float]
    total_chunks: int
    avg_relevance: float
    meets_threshold: bool
    min_relevance: float
    cached: bool = Field(False, description="served from the cache (same query and context key)")
    no_documents_reason: str = Field(
        "", description="NoDocumentsFoundError: why no chunk is returned (empty when some are)")
    kb: str = Field("default", description="the knowledge base the chunks come from")


class RuleDocument(BaseModel):
    """A document handed to ``ingest``: its id, file name, Markdown text (``content``) or a PDF,
    DOCX, PPTX, HTML or EPUB file's bytes in base64 (``content_base64``, converted like a file
    of that name), and metadata."""

    model_config = ConfigDict(extra="forbid")

    document_id: uuid.UUID | str
    filename: str = Field(min_length=1)
    content: str | None = Field(None, description="Markdown or plain text")
    content_base64: str | None = Field(
        None, description="a PDF, DOCX, PPTX, HTML or EPUB file, base64-encoded; its filename "
                          "names the format (e.g. manual.pdf)")
    metadata: dict[str, Any] = Field(default_factory=dict)
    _data: bytes | None = PrivateAttr(None)

    @model_validator(mode="after")
    def _one_content(self) -> RuleDocument:
        if (self.content is None) == (self.content_base64 is None):
            raise ValueError("give either content (Markdown or text) or content_base64 (a PDF, "
                             "DOCX, PPTX, HTML or EPUB file in base64), not both or neither")
        if self.content_base64 is not None:
            try:
                self._data = base64.b64decode(self.content_base64, validate=True)
            except (binascii.Error, ValueError) as err:
                raise ValueError(f"content_base64 is not base64 ({err})") from None
        return self

    def data(self) -> bytes | None:
        """The file's bytes when it was sent as ``content_base64`` (decoded once, when checked)."""
        return self._data


class IngestionResult(BaseModel):
    """What ``ingest`` did: documents written and failed, embeddings made, problems, time."""

    model_config = ConfigDict(extra="forbid")

    job_id: uuid.UUID
    documents_processed: int
    documents_failed: int
    embedding_count: int
    errors: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    duration_seconds: float
