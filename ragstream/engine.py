"""The Python entry point: one object that owns the config and the services.

    from ragstream import Engine
    engine = Engine()                     # config/ (or $RAGSTREAM_CONFIG_DIR)
    engine.ingest("data/kb")              # skip unchanged, replace changed, prune deleted
    sp = engine.run("How does the ReRanker choose its backend?")
    print(sp.prompt_ready)

The CLI and the Streamlit page use the same object.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ragstream import controller
from ragstream.config import AppConfig, load_config
from ragstream.ingest.ingestor import IngestReport, Progress, ingest_path
from ragstream.services import Services, build_services
from ragstream.super_prompt import SuperPrompt


class Engine:
    """The app's entry point: config and services, with ingest, status, stage, run and answer calls."""

    def __init__(self, cfg: AppConfig | None = None, services: Services | None = None):
        self.cfg = cfg or load_config()
        self.services = services or build_services(self.cfg)

    # -- knowledge base -----------------------------------------------------------------

    def ingest(self, path: str | Path | None = None, prune: bool | None = None,
               progress: Progress | None = None) -> IngestReport:
        """Ingest ``path`` (default: the configured KB folder) into the store and return the report."""
        return ingest_path(path or self.cfg.kb_dir, self.cfg, self.services, prune, progress)

    def ensure_knowledge_base(self, progress: Progress | None = None) -> IngestReport:
        """Bring the bundled/configured knowledge base folder up to date (cheap when unchanged)."""
        return self.ingest(self.cfg.kb_dir, prune=True, progress=progress)

    def warm_up(self) -> None:
        """Load the embedding model, the in-memory index and the reranker now, so that the
        first stage a person runs is not the one that pays for loading them."""
        self.services.embedder.embed(["warm up"])
        self.services.index()
        _ = self.services.reranker

    def status(self) -> dict:
        """The collection's name and location, document, chunk and window counts, and each document."""
        from ragstream.ingest.ingestor import stored_documents

        store = self.services.store
        docs = stored_documents(store)  # a damaged store is named, with the repair command
        return {
            "collection": self.cfg.settings.vector_store.collection,
            "location": store.location,
            "documents": len(docs),
            "chunks": sum(d.chunks for d in docs.values()),
            "windows": store.count_windows(),
            "last_ingest": max((d.ingested_at for d in docs.values()), default=""),
            "document_list": [
                {"doc_id": d.doc_id, "chunks": d.chunks, "ingested_at": d.ingested_at}
                for d in docs.values()
            ],
        }

    # -- pipeline -----------------------------------------------------------------------

    def new(self, prompt: str, conversation: list | None = None) -> SuperPrompt:
        """A fresh state for ``prompt`` (and the conversation so far)."""
        return controller.new_prompt(prompt, conversation)

    def run_stage(self, sp: SuperPrompt, name: str, cfg: AppConfig | None = None) -> SuperPrompt:
        """Run one stage on a copy of ``sp`` (with ``cfg``, e.g. a session's, if given)."""
        return controller.run_stage(sp, name, cfg or self.cfg, self.services)

    @property
    def qa_log_path(self) -> Path:
        """The interaction log file from the config."""
        return self.cfg.qa_log_path

    def qa_log(self):
        """The interaction log at ``qa_log_path``, which also scrubs the LLM API key's value."""
        from ragstream.qa_log import QALog

        return QALog(self.qa_log_path, secret_env=[self.cfg.settings.llm.api_key_env])

    def answer(self, sp: SuperPrompt, on_token: Callable[[str], None] | None = None,
               cfg: AppConfig | None = None):
        """Answer a finished super-prompt (LLM, extractive, or the no-results answer), log the
        interaction, and return ``(sp with .answer, answer)``."""
        from ragstream.answer import answer_and_log

        return answer_and_log(cfg or self.cfg, self.services, sp, on_token=on_token)

    def conversation_after(self, sp: SuperPrompt, answer, cfg: AppConfig | None = None) -> list:
        """The recent conversation after ``answer``, at most N4 pairs."""
        from ragstream.answer import conversation_after

        return conversation_after(sp, answer, (cfg or self.cfg).limits.N4_RECENT_CONV_MAX_PAIRS)

    def run(self, prompt: str | SuperPrompt, until: str | None = None,
            on_stage: Callable[[str, SuperPrompt], None] | None = None,
            cfg: AppConfig | None = None,
            before_stage: Callable[[str], None] | None = None) -> SuperPrompt:
        """Auto mode: every remaining stage of ``prompt`` (a text starts a new state), through
        ``until`` if given; ``before_stage(name)`` as each starts, ``on_stage(name, sp)`` after."""
        sp = self.new(prompt) if isinstance(prompt, str) else prompt
        return controller.run_all(sp, cfg or self.cfg, self.services, until=until,
                                  on_stage=on_stage, before_stage=before_stage)
