"""The Python entry point: one object that owns the config and the services.

    from ragstream import Engine
    engine = Engine()                     # config/ (or $RAGSTREAM_CONFIG_DIR)
    engine.ingest("data/kb")              # skip unchanged, replace changed, prune deleted
    sp = engine.run("How does the ReRanker choose its backend?")
    print(sp.prompt_ready)

    sp = engine.pin(sp, "kb/reranking.md#2")   # the person's decision, recorded in sp.edits
    sp = engine.resume(sp)                     # re-run from the first affected stage
    other = engine.run("What does A3 keep?")   # a new prompt starts without sp's edits …
    other = engine.run("What does A3 keep?", edits_from=sp)   # … unless you carry them over

    # an agent's model call sent again with an edited message, and its decision applied
    rep = engine.replay(sp, "A3_NLI_Gate", 0, [system_text, edited_user_text])
    print(rep.call.raw, rep.call.probabilities, engine.replay_decision(sp, rep).lines)
    sp = engine.resume(engine.apply_replay(sp, rep))   # recorded as your edits of A3

    # several knowledge bases (ragstream.knowledge.bases); the bundled one is "default"
    engine.create_kb("support", folder="~/support-docs")
    support = engine.for_kb("support")    # its own store and index; the models are shared
    support.ingest()                      # its folder

    # a named conversation: its remembered turns are searched with the knowledge base
    sp = engine.new("How is the ReRanker chosen?", conversation_name="onboarding")
    sp, ans = engine.answer(engine.run(sp))   # the answer becomes turn 1 of "onboarding"

The CLI and the Streamlit page use the same object.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ragstream.backends import telemetry
from ragstream.backends.services import Services, build_services
from ragstream.common.config import AppConfig, load_config
from ragstream.knowledge.bases import DEFAULT, KnowledgeBase, KnowledgeBases
from ragstream.stages import controller, staleness
from ragstream.state import edits
from ragstream.state.super_prompt import Chunk, SuperPrompt

if TYPE_CHECKING:  # pragma: no cover
    from ragstream.knowledge.ingest.ingestor import IngestReport, Progress
    from ragstream.workbench import replay as replays
    from ragstream.workbench.conversations import Conversations
    from ragstream.workbench.runs import RunStore



def settle_memory() -> None:
    """Take every object alive now (the models, their tokenizers, the modules, the opened
    engines) out of the cyclic garbage collector's full passes (``gc.freeze``): they live as
    long as the process, and each full pass scanned all of them, ~120,000 objects, 65 ms at a
    time in a serving process (a query's p95 at 100k chunks). Called once a serving process
    is warm (``service.http.warm_pipeline``); what is made later is collected as before."""
    gc.collect()
    gc.freeze()

class Engine:
    """The app's entry point: config and services, with ingest, status, stage, run and answer calls."""

    def __init__(self, cfg: AppConfig | None = None, services: Services | None = None,
                 kb: str | None = None):
        """``cfg``: the configuration (of the default knowledge base); ``kb``: the knowledge
        base to work on (None: the default); ``KnowledgeBaseError`` when there is no such one."""
        self.base_cfg = cfg or load_config()
        self.cfg = self.base_cfg
        if self.cfg.settings.telemetry.otlp_endpoint:  # tracing is off unless one is named
            telemetry.configure(self.cfg.settings.telemetry)
        self.services = services or build_services(self.cfg)
        self.kb = DEFAULT
        #: the engines of the other knowledge bases, by collection, shared by all of them
        self._engines: dict[str, Engine] = {}
        self._engines_lock = threading.Lock()
        if kb and kb != DEFAULT:
            other = self.for_kb(kb)
            self.cfg, self.services, self.kb = other.cfg, other.services, other.kb

    # -- knowledge bases ----------------------------------------------------------------

    def knowledge_bases(self) -> KnowledgeBases:
        """The registry of named knowledge bases (``ragstream.knowledge.bases``)."""
        return KnowledgeBases(self.base_cfg)

    def for_kb(self, name: str | None) -> Engine:
        """The engine of knowledge base ``name`` (None: the default): its own folder, store
        and index; the models and the LLM client are this engine's. Made once and kept (by its
        collection, so a renamed one keeps its engine); the name is looked up every time, so a
        knowledge base renamed or deleted elsewhere is seen."""
        kb = self.knowledge_bases().get(name)
        if kb.name == self.kb:
            return self
        with self._engines_lock:
            engine = self._engines.get(kb.collection)
            if engine is None:
                root = self.services._models or self.services  # the default's services
                engine = Engine(self.base_cfg, root if kb.is_default else
                                root.for_knowledge_base(kb.config(self.base_cfg), kb.name))
                engine.cfg = kb.config(self.base_cfg)
                engine._engines, engine._engines_lock = self._engines, self._engines_lock
                self._engines[kb.collection] = engine
            engine.kb = engine.services.kb_name = kb.name  # renamed since: the same index
        return engine

    def create_kb(self, name: str, folder: str | Path | None = None) -> KnowledgeBase:
        """Make knowledge base ``name`` (``KnowledgeBases.create``)."""
        return self.knowledge_bases().create(name, folder)

    def rename_kb(self, name: str, new_name: str) -> KnowledgeBase:
        """Rename knowledge base ``name`` (``KnowledgeBases.rename``); its conversations follow."""
        old = self.knowledge_bases().get(name).name
        kb = self.knowledge_bases().rename(name, new_name)
        self.conversations().rename_kb(old, kb.name)
        return kb

    def example_topic(self) -> str:
        """A section heading of this knowledge base (its first document's second chunk's, else
        its first's; the first three documents are tried), for an example that belongs to it:
        an error message's, the page's prompt box; '' when it is empty or cannot be read."""
        try:
            store = self.services.store
            for doc_id in list(store.documents())[:3]:
                ids = store.document_chunks(doc_id)
                held = store.fetch(ids[:2]) if ids else {}
                for cid in reversed(ids[:2]):
                    chunk = held[cid].chunk if cid in held else None
                    if chunk is not None and (chunk.heading_path or chunk.title):
                        return (chunk.heading_path[-1] if chunk.heading_path
                                else chunk.title).strip()
        except Exception:  # only an example: never the reason something fails differently
            return ""
        return ""

    def delete_kb(self, name: str) -> KnowledgeBase:
        """Delete knowledge base ``name``: its collection, keyword index and own folder
        (``KnowledgeBases.delete``); never the default, never another one's files."""
        kbs = self.knowledge_bases()
        kb = kbs.get(name)
        if kb.is_default:
            return kbs.delete(kb.name)  # refused, with the reason
        gone = kbs.delete(kb.name, self.for_kb(kb.name).services)
        with self._engines_lock:
            self._engines.pop(gone.collection, None)
        return gone

    # -- knowledge base -----------------------------------------------------------------

    def ingest(self, path: str | Path | None = None, prune: bool | None = None,
               progress: Progress | None = None) -> IngestReport:
        """Ingest ``path`` (default: the configured KB folder) into the store and return the report."""
        from ragstream.knowledge.ingest.ingestor import ingest_path

        return ingest_path(path or self.cfg.kb_dir, self.cfg, self.services, prune, progress)

    def ensure_knowledge_base(self, progress: Progress | None = None) -> IngestReport:
        """Bring the bundled/configured knowledge base folder up to date (cheap when unchanged)."""
        return self.ingest(self.cfg.kb_dir, prune=True, progress=progress)

    def warm_up(self) -> None:
        """Load the embedding model, open the knowledge base's engines and load the reranker
        now, so that the first stage a person runs is not the one that pays for loading
        them."""
        self.services.embedder.embed(["warm up"])
        self.services.index()
        _ = self.services.reranker

    def status(self) -> dict:
        """The collection's name and location, document, chunk and window counts, and each document."""
        from ragstream.knowledge.ingest.ingestor import stored_documents

        store = self.services.store
        docs = stored_documents(store)  # a damaged store is named, with the repair command
        return {
            "kb": self.kb,
            "folder": str(self.cfg.kb_dir),
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

    def new(self, prompt: str, conversation: list | None = None,
            conversation_name: str = "", cfg: AppConfig | None = None,
            edits_from: SuperPrompt | None = None) -> SuperPrompt:
        """A fresh state for ``prompt``, with the conversation so far: ``conversation`` (the
        recent turns), or, for a named conversation without them, its last N4 turns. It has
        no edits: those of another prompt come only when asked for, ``edits_from`` (that
        prompt's state; ``carry_edits``)."""
        sp = controller.new_prompt(prompt, conversation)
        if edits_from is not None:
            sp = self.carry_edits(sp, edits_from)
        if conversation_name:
            from ragstream.workbench.conversations import check_name

            sp.conversation_name = check_name(conversation_name)
            convs = self.conversations()
            convs.check_kb(sp.conversation_name, self.kb)  # never another knowledge base's
            if conversation is None and convs.exists(sp.conversation_name):
                n4 = (cfg or self.cfg).limits.N4_RECENT_CONV_MAX_PAIRS
                sp.recent_conversation = convs.recent(sp.conversation_name, n4)
        return sp

    # -- conversations ----------------------------------------------------------------------

    def conversations(self) -> Conversations:
        """The named conversations, kept in the Q&A log file (``ragstream.workbench.conversations``)."""
        from ragstream.workbench.conversations import Conversations

        return Conversations.for_config(self.cfg)

    def services_for(self, sp: SuperPrompt) -> Services:
        """The services a stage of ``sp`` runs with: with ``sp``'s named conversation, its
        remembered turns are searched with the knowledge base (``Services.with_memory``); those
        before ``sp.own_turn`` once the prompt was answered in it (never its own answer)."""
        if not sp.conversation_name:
            return self.services
        return self.services.with_memory(self.conversations().memory(
            sp.conversation_name, self.services.embedder, before=sp.own_turn, kb=self.kb))

    def check_conversation(self, sp: SuperPrompt) -> None:
        """``ConversationKnowledgeBaseError`` when ``sp`` continues a conversation of another
        knowledge base than this engine's: no stage runs with another knowledge base's
        conversation (its memory would not be searched, and its next turn not recorded)."""
        if sp.conversation_name:
            self.conversations().check_kb(sp.conversation_name, self.kb)

    def forget_turn(self, name: str, turn: int):
        """Take turn ``turn`` of conversation ``name`` out of its memory (``Conversations.forget``)."""
        return self.conversations().forget(name, turn)

    def run_stage(self, sp: SuperPrompt, name: str, cfg: AppConfig | None = None) -> SuperPrompt:
        """Run one stage on a copy of ``sp`` (with ``cfg``, e.g. a session's, if given)."""
        self.check_conversation(sp)
        return controller.run_stage(sp, name, cfg or self.cfg, self.services_for(sp))

    @property
    def qa_log_path(self) -> Path:
        """The interaction log file from the config."""
        return self.cfg.qa_log_path

    def qa_log(self):
        """The interaction log at ``qa_log_path``, which also scrubs the LLM API key's value."""
        from ragstream.workbench.qa_log import QALog

        return QALog(self.qa_log_path, secret_env=[self.cfg.settings.llm.api_key_env])

    def runs(self) -> RunStore:
        """The run history at ``cfg.runs_path`` (``ragstream.workbench.runs``): every pass kept, at most
        ``runs.keep``; it also scrubs the LLM API key's value."""
        from ragstream.workbench.runs import RunStore

        return RunStore.for_config(self.cfg)

    def answer(self, sp: SuperPrompt, on_token: Callable[[str], None] | None = None,
               cfg: AppConfig | None = None):
        """Answer a finished super-prompt (LLM, extractive, or the no-results answer), log the
        interaction, and return ``(sp with .answer, answer)``."""
        from ragstream.backends.llm import PassState, one_pass
        from ragstream.workbench.qa_log import answer_and_log

        with telemetry.span("ragstream.answer", {"ragstream.kb": self.kb},
                            parent=sp._trace_link) as span, one_pass(PassState.after(sp._llm_down)):
            out, ans = answer_and_log(cfg or self.cfg, self.services_for(sp), sp, on_token=on_token)
            if sp.conversation_name:
                self._add_turn(out, ans)
            telemetry.set_attributes(span, {
                "ragstream.answer.mode": ans.mode, "ragstream.answer.confidence": ans.confidence,
                "ragstream.answer.sources": len(ans.sources),
                "ragstream.answer.invalid_citations": len(ans.invalid_citations),
                "ragstream.answer.unsupported": bool(ans.unsupported),
                "gen_ai.usage.input_tokens": ans.usage.prompt_tokens,
                "gen_ai.usage.output_tokens": ans.usage.completion_tokens,
                "ragstream.answer.text": ans.text if telemetry.capture_content() else None})
        return out, ans

    def _add_turn(self, sp: SuperPrompt, ans) -> None:
        """Record the answer as the next turn of ``sp``'s conversation (``sp.extras.turn``); a
        turn that cannot be recorded costs nothing but the note."""
        import sqlite3

        from ragstream.common.errors import RagstreamError
        from ragstream.state.records import TurnRecord
        from ragstream.workbench.conversations import used_turns, uses_note

        name = sp.conversation_name
        log_id = sp.extras.qa_log.id if sp.extras.qa_log is not None else None
        used = used_turns(sp, ans)
        said = {"used_turns": [t for t, _ in used], "uses": uses_note(name, used)}
        try:
            turn = self.conversations().add_turn(name, sp, ans, self.services.embedder,
                                                 kb=self.kb, interaction_id=log_id, cfg=self.cfg)
            sp.extras.turn = TurnRecord(conversation=name, turn=turn.turn,
                                        remembered=turn.remembered, why=turn.why, **said)
            if not sp.own_turn:  # the pass searched the turns before this one, and still does
                sp.own_turn = turn.turn
        except (sqlite3.Error, OSError, RagstreamError) as err:
            sp.extras.turn = TurnRecord(conversation=name, error=f"the turn was not recorded: {err}",
                                        **said)

    def conversation_after(self, sp: SuperPrompt, answer, cfg: AppConfig | None = None) -> list:
        """The recent conversation after ``answer``, at most N4 pairs."""
        from ragstream.answering.answer import conversation_after

        return conversation_after(sp, answer, (cfg or self.cfg).limits.N4_RECENT_CONV_MAX_PAIRS)

    def stale(self, sp: SuperPrompt, cfg: AppConfig | None = None) -> staleness.Stale | None:
        """The first stage of ``sp``'s pass whose result no longer matches its inputs (the
        prompt text, ``cfg``'s settings, the filters, the edits, the knowledge base), or None."""
        return controller.first_stale(sp, cfg or self.cfg,
                                      staleness.kb_fingerprint(self.services_for(sp)))

    def resume(self, sp: SuperPrompt, until: str | None = None, cfg: AppConfig | None = None,
               on_stage: Callable[[str, SuperPrompt], None] | None = None,
               before_stage: Callable[[str], None] | None = None) -> SuperPrompt:
        """Re-run from the first stage an edit discarded or whose result is out of date, to
        where the pass had got (``controller.resume_target``), or through ``until``."""
        target = until or controller.resume_target(sp)
        if target is None:
            return sp
        self.check_conversation(sp)
        return controller.run_all(sp, cfg or self.cfg, self.services_for(sp), until=target,
                                  on_stage=on_stage, before_stage=before_stage)

    def find_chunks(self, text: str, limit: int = 20) -> list[tuple[Chunk, str]]:
        """Chunks of the whole knowledge base whose text holds ``text`` (a phrase from inside
        a chunk finds it), then the best keyword matches: (chunk, "phrase" or "words")."""
        return self.services.index().find_text(text, limit)

    # -- edits: the person's decisions, kept in sp.edits and applied by the stages --------

    def edit(self, sp: SuperPrompt, kind: edits.EditKind, target: str,
             after: str | None = None, before: str | None = None) -> SuperPrompt:
        """Record one edit (see ``ragstream.state.edits``); the results of the stage it acts on and
        of the later stages are discarded. ``EditError`` when the chunk, field, statement or
        rule does not exist or the value is not one of the field's choices."""
        return controller.record_edit(sp, edits.new_edit(sp, kind, target, after, before))

    def set_field(self, sp: SuperPrompt, name: str, value: str,
                  cfg: AppConfig | None = None) -> SuperPrompt:
        """Set body field ``name`` by hand (its source then reads "set by you")."""
        value = edits.check_field(cfg or self.cfg, name, value)
        return self.edit(sp, "field", name, value, before=sp.body.get(name))

    def pin(self, sp: SuperPrompt, chunk_id: str,
            seen: SuperPrompt | None = None) -> SuperPrompt:
        """Keep ``chunk_id`` through A3 and A4 and in the final selection (pinned ones first)."""
        return self._chunk(sp, "pin", chunk_id, seen)

    def exclude(self, sp: SuperPrompt, chunk_id: str,
                seen: SuperPrompt | None = None) -> SuperPrompt:
        """Drop ``chunk_id`` from Retrieval on."""
        return self._chunk(sp, "exclude", chunk_id, seen)

    def add_chunk(self, sp: SuperPrompt, chunk_id: str,
                  seen: SuperPrompt | None = None) -> SuperPrompt:
        """Bring ``chunk_id`` in though Retrieval did not return it, pinned."""
        return self._chunk(sp, "add", chunk_id, seen)

    def drop(self, sp: SuperPrompt, chunk_id: str,
             seen: SuperPrompt | None = None) -> SuperPrompt:
        """Have the A3 gate drop ``chunk_id`` ("dropped by you"); it replaces a pin of it."""
        return self._chunk(sp, "drop", chunk_id, seen)

    def _chunk(self, sp: SuperPrompt, kind: edits.EditKind, chunk_id: str,
               seen: SuperPrompt | None = None) -> SuperPrompt:
        """One chunk decision; its ``before`` says where the chunk stood in ``seen`` (the state
        the person was looking at, whose views an earlier edit may have discarded from ``sp``),
        else in ``sp``."""
        edits.check_chunk(self.services_for(sp).index(), chunk_id)
        status = edits.chunk_status(sp, chunk_id)
        if status == edits.NOT_RETRIEVED and seen is not None:
            status = edits.chunk_status(seen, chunk_id)
        return self.edit(sp, kind, chunk_id, kind, before=status)

    # The statement and rule edits check their item against ``sp`` or, once an earlier edit
    # discarded A4's / A5's result, against ``seen`` (the state the person was looking at).

    def edit_statement(self, sp: SuperPrompt, key: str, text: str,
                       seen: SuperPrompt | None = None) -> SuperPrompt:
        """Rewrite statement ``key`` (``edits.statement_key``) of A4's condensed context."""
        return self._item(sp, "statement_text", key, " ".join(text.split()), seen)

    def remove_statement(self, sp: SuperPrompt, key: str,
                         seen: SuperPrompt | None = None) -> SuperPrompt:
        """Leave statement ``key`` out of A4's condensed context."""
        return self._item(sp, "statement_remove", key, None, seen)

    def move_statement(self, sp: SuperPrompt, key: str, place: int,
                       seen: SuperPrompt | None = None) -> SuperPrompt:
        """Put statement ``key`` at ``place`` (1-based) in A4's condensed context."""
        return self._item(sp, "statement_move", key, str(place), seen)

    def add_note(self, sp: SuperPrompt, text: str) -> SuperPrompt:
        """Add a statement of the person's own to A4's condensed context: their note, listed
        under "Your notes" without a citation, never cited by the answer."""
        text = " ".join(text.split())
        if not text:
            raise edits.EditError("A note cannot be empty: write its text.")
        return self.edit(sp, "statement_add", text, text)

    def edit_rule(self, sp: SuperPrompt, rule: str, text: str,
                  seen: SuperPrompt | None = None) -> SuperPrompt:
        """Rewrite A5's hard rule ``rule`` (its current text)."""
        return self._item(sp, "rule_text", rule, " ".join(text.split()), seen)

    def remove_rule(self, sp: SuperPrompt, rule: str, seen: SuperPrompt | None = None) -> SuperPrompt:
        """Leave A5's hard rule ``rule`` out."""
        return self._item(sp, "rule_remove", rule, None, seen)

    def move_rule(self, sp: SuperPrompt, rule: str, place: int,
                  seen: SuperPrompt | None = None) -> SuperPrompt:
        """Put A5's hard rule ``rule`` at ``place`` (1-based)."""
        return self._item(sp, "rule_move", rule, str(place), seen)

    def add_rule(self, sp: SuperPrompt, text: str) -> SuperPrompt:
        """Add a hard rule of the person's own after A5's."""
        text = " ".join(text.split())
        if not text:
            raise edits.EditError("A rule cannot be empty: write the rule's text.")
        return self.edit(sp, "rule_add", text, text)

    def _item(self, sp: SuperPrompt, kind: edits.EditKind, key: str, after: str | None,
              seen: SuperPrompt | None) -> SuperPrompt:
        before = edits.check_item(sp, kind, key, after, seen)
        return self.edit(sp, kind, key, after, before=before)

    # -- replay: an agent's model call sent again, its decision applied as your edits -----

    def replay(self, sp: SuperPrompt, agent: str, call_index: int,
               messages: list[str] | None = None, cfg: AppConfig | None = None) -> replays.Replayed:
        """Send call ``call_index`` (0-based, of ``sp.extras.llm_calls[agent]``) to the
        endpoint again as the agent would, its messages' texts replaced by ``messages`` (one
        per message; None: unchanged). The endpoint's error is in the result, not raised;
        ``ReplayError`` without an endpoint or such a call (``ragstream.workbench.replay``)."""
        from ragstream.workbench import replay as replays

        return replays.replay(sp, agent, call_index, messages, cfg or self.cfg, self.services_for(sp))

    def replay_decision(self, sp: SuperPrompt, replayed: replays.Replayed,
                        cfg: AppConfig | None = None) -> replays.Decision:
        """What ``replayed``'s stage would decide with its reply, as edits and lines."""
        return replayed.decision(sp, cfg or self.cfg, self.services_for(sp))

    def apply_replay(self, sp: SuperPrompt, replayed: replays.Replayed,
                     cfg: AppConfig | None = None) -> SuperPrompt:
        """Record the decision ``replayed`` would make as the person's edits of its stage
        (that stage and the later ones go out of date; ``resume`` runs them again).
        ``ReplayError`` when there is nothing to apply."""
        from ragstream.workbench import replay as replays

        decision = self.replay_decision(sp, replayed, cfg)
        return replays.apply(self, sp, decision, cfg)

    def carry_edits(self, sp: SuperPrompt, source: SuperPrompt) -> SuperPrompt:
        """Apply the edits ``source`` (another prompt's state) holds to ``sp`` too — the
        person's explicit choice: edits belong to the prompt they were made for, and a new
        prompt starts without them. Each carried edit says which prompt it was made for
        (``Edit.carried_from``); one whose slot ``sp`` already decides is left out; a chunk,
        statement or rule the new pass does not have is noted "not applied" by its stage.
        The results of the stages they act on are discarded, as for any edit."""
        for edit in edits.carried(sp.edits, source.edits, source.user_text):
            sp = controller.record_edit(sp, edit)
        return sp

    def undo_edits(self, sp: SuperPrompt, ids: list[int] | None = None) -> SuperPrompt:
        """Drop the edits numbered ``ids`` (every edit when None: "Clear edits"); the stages
        they acted on decide by themselves again when they run."""
        return controller.remove_edits(sp, ids)

    def run(self, prompt: str | SuperPrompt, until: str | None = None,
            on_stage: Callable[[str, SuperPrompt], None] | None = None,
            cfg: AppConfig | None = None,
            before_stage: Callable[[str], None] | None = None,
            edits_from: SuperPrompt | None = None) -> SuperPrompt:
        """Auto mode: every remaining stage of ``prompt`` (a text starts a new state, without
        edits unless ``edits_from`` — another prompt's state — is given: ``new``), through
        ``until`` if given; ``before_stage(name)`` as each starts, ``on_stage(name, sp)`` after."""
        sp = self.new(prompt, edits_from=edits_from) if isinstance(prompt, str) else prompt
        self.check_conversation(sp)
        attributes: dict[str, Any] = {"ragstream.kb": self.kb, "ragstream.until": until,
                                      "ragstream.prompt.chars": len(sp.user_text)}
        if telemetry.capture_content():
            attributes["ragstream.prompt"] = sp.user_text
        with telemetry.span("ragstream.pass", attributes) as span:
            out = controller.run_all(sp, cfg or self.cfg, self.services_for(sp), until=until,
                                     on_stage=on_stage, before_stage=before_stage)
            telemetry.set_attributes(span, {
                "ragstream.stages_run": len(out.stage_runs) - len(sp.stage_runs),
                "ragstream.stage": out.stage,
                "ragstream.final_selection": len(out.final_selection_ids),
                "ragstream.conversation_turns": len(out.recent_conversation)})
            out._trace_link = telemetry.link(span)  # its answer joins this trace
            return out
