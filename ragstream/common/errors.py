"""Every error RAGstream raises on purpose, written for the person who reads it.

Each message says what went wrong and what to do instead. Callers (CLI, GUI) show
``str(err)`` as is; they never need to add context of their own.
"""

from __future__ import annotations

from pathlib import Path


class RagstreamError(Exception):
    """Base class of all RAGstream errors."""

    #: a short, stable label that the GUI and the CLI show in front of the message
    kind = "error"


class ConfigError(RagstreamError):
    """A configuration file or override is missing, malformed or holds a bad value."""

    kind = "configuration error"


class StageOrderError(RagstreamError):
    """A stage was asked to run before the stage it depends on."""

    kind = "stage order"

    def __init__(self, stage: str, required: str):
        self.stage = stage
        self.required = required
        super().__init__(
            f"Stage {stage} cannot run yet: run {required} first "
            f"(or use auto mode to run every remaining stage in order)."
        )


class UnknownStageError(RagstreamError):
    """A stage name that is not one of the pipeline's stages."""

    kind = "unknown stage"

    def __init__(self, name: str, allowed: list[str]):
        self.name = name
        super().__init__(f"Unknown stage {name!r}. Allowed stages: {', '.join(allowed)}.")


class StageError(RagstreamError):
    """A stage failed; the SuperPrompt is left exactly as it was before the stage ran."""

    kind = "stage failed"

    def __init__(self, stage: str, message: str):
        self.stage = stage
        super().__init__(f"{stage} failed: {message}")


class EditError(RagstreamError):
    """An edit that cannot be made: an unknown chunk id, field, statement or rule, or a value
    outside a field's choices. Nothing is recorded and nothing runs."""

    kind = "edit refused"


class StaleResultError(RagstreamError):
    """A stage was asked to run on top of a result whose inputs have changed since it ran."""

    kind = "out of date"

    def __init__(self, stage: str, stale: str, reasons: list[str]):
        self.stage = stage
        self.stale = stale
        self.reasons = reasons
        super().__init__(
            f"Stage {stage} cannot run on out-of-date results: {stale}'s result no longer "
            f"matches its inputs ({'; '.join(reasons)}). Run {stale} again first (or run all "
            f"remaining stages)."
        )


class EmptyPromptError(RagstreamError):
    """The prompt is empty or has no task."""

    kind = "empty prompt"

    def __init__(self, problem: str = "The prompt is empty.") -> None:
        super().__init__(
            f"{problem} Type a question or task, for example "
            "'How does the ReRanker choose its backend?'."
        )


class PromptTooLongError(RagstreamError):
    """The prompt is longer than ``prompt.max_prompt_chars``."""

    kind = "prompt too long"

    def __init__(self, length: int, limit: int):
        super().__init__(
            f"The prompt has {length} characters; the limit is {limit}. "
            f"Shorten it or raise prompt.max_prompt_chars in config/settings.json."
        )


class InvalidQueryError(RagstreamError):
    """A retrieval query that is empty or longer than the limit (the retrieval API's check)."""

    kind = "invalid query"

    def __init__(self, problem: str):
        super().__init__(problem)


class RetrievalTimeoutError(RagstreamError):
    """A retrieval that did not finish within ``retrieval.timeout_s``."""

    kind = "retrieval timeout"

    def __init__(self, seconds: float):
        self.seconds = seconds
        super().__init__(
            f"Retrieval did not finish within {seconds:g} s and was abandoned. Try again; if it "
            f"keeps happening, check the vector store (is a Chroma server slow or unreachable?) "
            f"or raise retrieval.timeout_s in config/settings.json."
        )


class EmptyIndexError(RagstreamError):
    """The knowledge base collection holds no chunks."""

    kind = "empty knowledge base"

    def __init__(self, collection: str):
        super().__init__(
            f"The knowledge base collection {collection!r} holds no chunks. "
            f"Ingest documents first: python -m ragstream ingest data/kb"
        )


class SchemaVersionError(RagstreamError):
    """A database file has a newer schema version than this RAGstream knows."""

    kind = "database version"

    def __init__(self, path: str | Path, found: int, supported: int):
        self.path = str(path)
        self.found = found
        self.supported = supported
        super().__init__(
            f"{path} has schema version {found}, but this RAGstream knows versions up to "
            f"{supported}: a newer RAGstream wrote it. Use that newer RAGstream, or move the "
            f"file away (a new one is then created in its place).")


class RunNotFoundError(RagstreamError):
    """A run id that the run history (``ragstream.workbench.runs``) does not hold."""

    kind = "run not found"

    def __init__(self, run_id: int, path: str | Path):
        self.run_id = run_id
        self.path = str(path)
        super().__init__(
            f"There is no run {run_id} in {path}: it was never saved, was deleted, or was "
            f"pruned (only the newest runs.keep runs are kept). List the saved runs with "
            f"`python -m ragstream runs list` and use one of their ids.")


class RunFileError(RagstreamError):
    """A run file (a SuperPrompt's JSON) that cannot be imported or read back; the message
    says what is wrong with it and how to get a good one."""

    kind = "run file"


class VectorStoreError(RagstreamError):
    """The vector store could not be opened, read or written."""

    kind = "vector store"


class IngestError(RagstreamError):
    """A file or folder could not be ingested."""

    kind = "ingestion"


class ModelLoadError(RagstreamError):
    """A model (embedder, tokenizer or reranker) could not be loaded offline."""

    kind = "model"


class EvalDataError(RagstreamError):
    """An evaluation data set is missing a file or holds a malformed record."""

    kind = "eval data"


class VectorDBUnavailableError(VectorStoreError):
    """The Chroma server (vector_store.mode "http") cannot be reached: down, unreachable or not answering."""

    kind = "vector store unavailable"

    def __init__(self, url: str, detail: str = "", during: str = ""):
        self.url = url
        self.detail = detail
        self.during = during
        super().__init__(
            f"The Chroma server at {url} cannot be reached"
            + (f" while {during}" if during else "")
            + (f" ({detail})" if detail else "")
            + ". Start it (chroma run --path DIR --host HOST --port PORT, with the host and port of "
            f"{url}) and try again: no restart of RAGstream is needed. Or switch to the embedded "
            "store: set vector_store.mode to \"persistent\" in config/settings.json and unset "
            "RAGSTREAM_CHROMA_URL."
        )


class IngestLockedError(IngestError):
    """Another ingestion into the same index folder holds its lock."""

    kind = "ingestion locked"

    def __init__(self, index_dir: str | Path, pid: int | None, waited_s: float):
        self.index_dir = str(index_dir)
        self.pid = pid
        self.waited_s = waited_s
        holder = f"process {pid}" if pid else "another process"
        super().__init__(
            f"Another ingestion into {index_dir} is running ({holder} holds its lock; waited "
            f"{waited_s:.1f} s). Wait for it to finish and ingest again, or stop it"
            + (f" (kill {pid})" if pid else "")
            + ". Two ingestions into one index never run at once."
        )


def _megabytes(n_bytes: int) -> str:
    """A size in MB for messages: ``52428800`` → ``"50.0 MB"``."""
    return f"{n_bytes / (1024 * 1024):.1f} MB"


class BinaryFileError(IngestError):
    """A file (or a document's text) that is binary, not text: it holds NUL bytes or starts
    like a known binary format."""

    kind = "binary file"

    def __init__(self, what: str):
        self.what = what
        super().__init__(
            f"binary file, not text ({what}): only UTF-8 Markdown or plain text can be "
            f"ingested. Convert it to text (or remove it from the folder)."
        )


class NotUTF8Error(IngestError):
    """A text file that is not valid UTF-8 (e.g. Latin-1 or UTF-16)."""

    kind = "not UTF-8"

    def __init__(self, reason: str, position: int):
        self.reason = reason
        self.position = position
        super().__init__(
            f"not UTF-8 text ({reason} at byte {position}); save the file as UTF-8 and "
            f"ingest again"
        )


class FileTooLargeError(IngestError):
    """A file larger than ``ingestion.max_file_mb``; it is refused without being read."""

    kind = "file too large"

    def __init__(self, size_bytes: int, limit_mb: float):
        self.size_bytes = size_bytes
        self.limit_mb = limit_mb
        super().__init__(
            f"file too large: {_megabytes(size_bytes)}, the limit is {limit_mb:g} MB "
            f"(ingestion.max_file_mb in config/settings.json). Split it into smaller files, "
            f"or raise the limit."
        )


class UnsupportedFormatError(IngestError):
    """A file of a type ingestion does not read, or whose contents are not what its name says."""

    kind = "type not supported"

    def __init__(self, name: str, what: str):
        self.name = name
        self.what = what
        super().__init__(
            f"{name}: {what}. Ingestion reads Markdown, text, PDF, DOCX, PPTX, HTML and EPUB; "
            f"convert the file to one of those (or give it the right extension)."
        )


class EncryptedFileError(IngestError):
    """A password-protected file (an encrypted PDF, a protected Office file)."""

    kind = "encrypted file"

    def __init__(self, name: str):
        self.name = name
        super().__init__(f"{name} is encrypted (password-protected): save a copy without the "
                         f"password and ingest that.")


class DamagedFileError(IngestError):
    """A file of a known type that cannot be read: truncated, corrupt, or without any pages."""

    kind = "damaged file"

    def __init__(self, name: str, reason: str):
        self.name = name
        self.reason = reason
        super().__init__(f"{name} cannot be read: {reason}. Open it in its program and save it "
                         f"again, or export it to PDF or Markdown.")


class NoTextLayerError(IngestError):
    """A PDF whose pages are images only (a scan): there is no text to ingest."""

    kind = "no text layer"

    def __init__(self, name: str, pages: int):
        self.name = name
        self.pages = pages
        super().__init__(f"{name}: no text layer on its {pages} page(s) (a scan?): OCR is not "
                         f"supported. Run it through an OCR tool (e.g. ocrmypdf) first.")


class UnsafeFileError(IngestError):
    """A file that would take more than the converters' bounds (``formats.Limits``) to read: a
    zip bomb, entity expansion, a PDF claiming millions of pages. Refused before it is read."""

    kind = "unsafe file"

    def __init__(self, name: str, reason: str):
        self.name = name
        self.reason = reason
        super().__init__(f"{name} is refused: {reason}. If the file is genuine, split it into "
                         f"smaller files.")


class UploadNameError(IngestError):
    """An uploaded file's name that cannot be used as a file name in the uploads folder."""

    kind = "upload name"


class KnowledgeBaseError(RagstreamError):
    """A knowledge base that does not exist, a name that cannot be used, or an operation a
    knowledge base does not allow (the default one cannot be deleted or renamed)."""

    kind = "knowledge base"


class KnowledgeBaseNotFoundError(KnowledgeBaseError):
    """A knowledge base name that the registry does not hold."""

    kind = "no such knowledge base"


class ConversationError(RagstreamError):
    """A conversation or turn that does not exist, or a name that cannot be used."""

    kind = "conversation"


class ConversationNotFoundError(ConversationError):
    """A conversation, or a turn of one, that does not exist."""

    kind = "no such conversation"


class ConversationKnowledgeBaseError(ConversationError):
    """A conversation continued with another knowledge base than the one it belongs to: its
    turns are remembered and searched only with that one."""

    kind = "conversation of another knowledge base"


class KeywordIndexUnreadableError(VectorStoreError):
    """The keyword index beside the store (tantivy) cannot be opened: damaged or unreadable."""

    kind = "keyword index unreadable"

    def __init__(self, location: str | Path, detail: str):
        self.location = str(location)
        self.detail = detail
        super().__init__(
            f"The keyword index at {location} cannot be read ({detail}). Run `python -m "
            f"ragstream repair`: it moves it aside to a timestamped backup and makes it again "
            f"from the store (nothing is encoded again; your documents are not touched)."
        )


class StoreUnreadableError(VectorStoreError):
    """The vector store's files cannot be read: damaged, or not readable by this user."""

    kind = "vector store unreadable"

    def __init__(self, location: str | Path, detail: str):
        self.location = str(location)
        self.detail = detail
        super().__init__(
            f"The knowledge base store at {location} cannot be read ({detail}). If its files "
            f"are damaged, run `python -m ragstream repair`: it moves them aside to a "
            f"timestamped backup and ingests the configured knowledge-base folder again (your "
            f"source documents are not touched). If the folder is not readable or writable, "
            f"fix its permissions (paths.index_dir in config/settings.json)."
        )


def root_cause(err: BaseException) -> BaseException:
    """The error behind a chain of RAGstream errors (``raise … from``): what really went wrong."""
    cause = err
    while isinstance(cause, RagstreamError) and cause.__cause__ is not None:
        cause = cause.__cause__
    return cause


# --------------------------------------------------------------------------- the service's tokens


class ForbiddenError(RagstreamError):
    """A valid token that may not do this: the scope is missing or the knowledge base is not
    one of the token's (HTTP 403)."""

    kind = "forbidden"


class TokenSettingError(RagstreamError):
    """The token variable is set but empty."""

    kind = "token"


class TokensFileError(TokenSettingError):
    """The tokens file cannot be read or holds a bad entry."""

    kind = "tokens file"


class ExposedWithoutTokenError(RagstreamError):
    """A server asked to listen on an address other than loopback without any token."""

    kind = "no token"
