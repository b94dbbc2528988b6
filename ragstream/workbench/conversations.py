"""Named conversations, kept in the Q&A log's SQLite file, and their memory.

    convs = Conversations.for_config(cfg)
    convs.create("onboarding", kb="default")             # a conversation of one knowledge base
    convs.add_turn("onboarding", sp, answer, embedder, kb="default")   # Engine.answer does it
    convs.recent("onboarding", 10)      # the last N4 turns, for the next prompt's block
    convs.forget("onboarding", 3)       # turn 3 leaves the memory (and the recent block)
    memory = convs.memory("onboarding", embedder, kb="default")  # searched with that KB only

A conversation belongs to one knowledge base (``conversations.kb``, set when it starts): its
turns are asked, remembered, listed and searched only with that one. Continuing it with another
knowledge base is refused (``ConversationKnowledgeBaseError``, ``check_kb``); its memory is
never handed to another knowledge base's stages (``memory(..., kb=)``). Schema version 4 made
every older conversation one knowledge base's: the turns of a conversation asked in several
went to ``<name>@<kb>`` (``qa_log._conversations_per_kb``).

Every answered turn of a named conversation is a row of ``turns`` (question, answer, its
citations, the knowledge base, when). A turn whose answer asserted something with its source is
*remembered*: it becomes a chunk of the conversation (``Turn.chunk``: source "conversation",
doc type "conversation", the turn and its time as the heading), encoded once when the turn is
added (its window and sentence vectors are kept in the row) and searched by Retrieval together
with the knowledge base (``backends.search.memory``).

The chunk holds what the answer asserted (``memory_text``): one line per answer sentence that
cites a valid source, without its ``[n]`` and followed by that source, ``Chunks are split at
headings. (from kb/chunking.md § Sections)``. Never the question (nor a sentence of it: what
the person said is not what a document said), never a list of source labels, never a statement
or rule the person wrote (``own_texts``: their edits' values, A4's statements marked as theirs,
A5's rules). A turn with nothing left is kept in the log, not remembered, and says why; so is a
turn that found nothing (no sources, or the no-results answer).

Sentences quoted from the cited sources are remembered too (with their source): measured on the
bundled question set asked twice in one conversation (``eval --answers … --mode conversation``,
README), the documents still lead the second pass, because a turn never outranks a document
that says the same thing: ``after_documents`` ranks it after the documents among the candidates
that hold each of its sentences (``conversations.covered_share``), and the A3 gate drops it as
their duplicate. A forgotten turn (``forget``) leaves the memory and the recent-conversation
block; its row stays, marked, so the page can say so.

A conversation's chunk ids are ``conversation:<name>#<turn>``; no knowledge-base chunk id
starts with ``conversation:`` (they are file paths), so the two never collide.
"""

from __future__ import annotations

import hashlib
import io
import json
import secrets
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from ragstream.common.config import AppConfig
from ragstream.common.errors import (
    ConversationError,
    ConversationKnowledgeBaseError,
    ConversationNotFoundError,
)
from ragstream.state.super_prompt import (
    CONVERSATION_ID_PREFIX,
    Answer,
    Chunk,
    ConversationTurn,
    SuperPrompt,
)
from ragstream.workbench.memory import (
    DEFAULT_KB,
    check_name,
    kb_suffix,
    memory_text,
    own_texts,
)
from ragstream.workbench.qa_log import QALog

SOURCE = "conversation"
DOC_TYPE = "conversation"
ID_PREFIX = CONVERSATION_ID_PREFIX
def new_name(now: datetime | None = None) -> str:
    """A name for a conversation the person did not name: ``chat-20261124-140233-3f9a`` (the
    random end keeps two started in the same second apart)."""
    return (now or datetime.now(UTC)).strftime("chat-%Y%m%d-%H%M%S-") + secrets.token_hex(2)


def chunk_id(name: str, turn: int) -> str:
    """The id of turn ``turn`` of conversation ``name`` as a chunk."""
    return f"{ID_PREFIX}{name}#{turn}"


def is_conversation_chunk(chunk: Chunk) -> bool:
    """True for a chunk of a conversation's memory (not of a knowledge base)."""
    return chunk.from_conversation


def found_something(answer: Answer) -> bool:
    """Whether a turn may be remembered: its answer cites at least one source."""
    return answer.mode != "no-results" and bool(answer.sources)


def used_turns(sp: SuperPrompt, answer: Answer) -> list[tuple[int, int]]:
    """The remembered turns of ``sp``'s conversation the ``answer`` cites: (turn, its [n])."""
    prefix = f"{ID_PREFIX}{sp.conversation_name}#"
    return [(int(c.chunk_id.removeprefix(prefix)), c.n) for c in answer.sources
            if sp.conversation_name and c.chunk_id.startswith(prefix)
            and c.chunk_id.removeprefix(prefix).isdigit()]


def uses_note(name: str, used: Sequence[tuple[int, int]]) -> str | None:
    """``The answer uses remembered turn 3 of conversation 'x' (source [2]).`` (None: no turn)."""
    if not used:
        return None
    turns = ", ".join(str(t) for t, _ in used)
    marks = ", ".join(f"[{n}]" for _, n in used)
    return (f"The answer uses remembered turn{'s' if len(used) > 1 else ''} {turns} of "
            f"conversation {name!r} (source{'s' if len(used) > 1 else ''} {marks}): what an "
            f"earlier answer said, not a document.")


@dataclass(frozen=True)
class Turn:
    """One answered turn of a conversation, as its row holds it."""

    conversation: str
    turn: int
    ts: str
    question: str
    answer: str
    sources: tuple[str, ...]  # the cited sources' labels, in citation order
    kb: str
    remembered: bool
    why: str  # why it is not remembered ("" when it is)
    removed: bool
    memory_text: str = ""  # the chunk's text (``memory_text``); "" for a turn not remembered

    @property
    def in_memory(self) -> bool:
        """Searched by Retrieval: remembered and not forgotten."""
        return self.remembered and not self.removed

    @property
    def when(self) -> str:
        """``2026-11-24 14:02`` (UTC) from the turn's time."""
        return self.ts[:16].replace("T", " ")

    def chunk(self) -> Chunk:
        """The turn as a retrievable chunk (see the module docstring)."""
        text = self.memory_text
        return Chunk(
            id=chunk_id(self.conversation, self.turn), doc_id=f"{ID_PREFIX}{self.conversation}",
            text=text, source=SOURCE, source_name=self.conversation,
            title=f"Conversation {self.conversation}",
            heading_path=(f"Turn {self.turn} · {self.when} UTC",), section=f"Turn {self.turn}",
            doc_type=DOC_TYPE, last_update_date=self.ts[:10], chunk_index=self.turn,
            word_count=len(text.split()),
            content_hash=hashlib.sha256(text.encode("utf-8")).hexdigest()[:16])

    def as_pair(self) -> ConversationTurn:
        """The turn as the recent-conversation block carries it."""
        return ConversationTurn(user=self.question, assistant=self.answer, turn=self.turn)


def _turn(name: str, row: sqlite3.Row) -> Turn:
    """Conversation ``name``'s turn in ``row`` of the ``turns`` table."""
    return Turn(conversation=name, turn=row["turn"], ts=row["ts"], question=row["question"],
                answer=row["answer"], sources=tuple(json.loads(row["sources"] or "[]")),
                kb=row["kb"], remembered=bool(row["remembered"]), why=row["why"],
                removed=row["removed_at"] is not None, memory_text=row["memory_text"])


@dataclass(frozen=True)
class ConversationInfo:
    """One conversation in the list: name, when made, turns answered and in memory, last turn's time."""

    name: str
    created_at: str
    turns: int
    in_memory: int
    last_ts: str
    kb: str = "default"  # the knowledge base it belongs to


@dataclass(frozen=True)
class Memory:
    """The chunks of a conversation's remembered turns, with their stored vectors, ready to
    be searched beside a knowledge base (``backends.search.memory.MemoryEngine``)."""

    name: str
    chunks: tuple[Chunk, ...]
    windows: Mapping[str, list[np.ndarray]]  # chunk id -> its window vectors
    sentences: Mapping[str, list[tuple[tuple[int, int], np.ndarray]]]  # -> (span, vector)
    fingerprint: str


# --------------------------------------------------------------------------- encodings


def _pack(records) -> bytes:
    """A turn's ``WindowRecord``s as one npz blob: window vectors, sentence spans and vectors."""
    windows = np.vstack([r.vector for r in records]).astype(np.float32)
    spans = [s for r in records for s in r.sentence_spans]
    vecs = [r.sentence_vectors for r in records if r.sentence_vectors is not None]
    buf = io.BytesIO()
    np.savez(buf, windows=windows,
             spans=np.asarray(spans, dtype=np.int32).reshape(-1, 2),
             sentences=(np.vstack(vecs).astype(np.float16) if vecs
                        else np.zeros((0, windows.shape[1]), dtype=np.float16)))
    return buf.getvalue()


def _unpack(blob: bytes) -> tuple[list[np.ndarray], list[tuple[tuple[int, int], np.ndarray]]]:
    with np.load(io.BytesIO(blob)) as data:
        windows = [np.asarray(w, dtype=np.float32) for w in data["windows"]]
        sentences = [((int(a), int(b)), v) for (a, b), v in zip(data["spans"], data["sentences"])]
    return windows, sentences


def embedder_id(embedder) -> str:
    """What a stored encoding was made with: the model's name and vector length."""
    return f"{getattr(embedder, 'name', type(embedder).__name__)}:{embedder.dimension}"


# --------------------------------------------------------------------------- the store

#: conversations' memories kept in this process, keyed by file, name, model and turn ids
MEMORIES_KEPT = 16
_MEMORIES: OrderedDict[tuple, Memory] = OrderedDict()
_MEMORIES_LOCK = threading.Lock()


class Conversations:
    """The named conversations of one Q&A log file (see the module docstring)."""

    def __init__(self, path: str | Path, environ: Mapping[str, str] | None = None,
                 secret_env: Iterable[str] = ()):
        self.path = Path(path)
        self._log = QALog(self.path, environ, secret_env)  # its secret scrubbing

    @classmethod
    def for_config(cls, cfg: AppConfig) -> Conversations:
        """The conversations in ``cfg``'s Q&A log (``answer.log_file`` in the index folder)."""
        return cls(cfg.qa_log_path, secret_env=[cfg.settings.llm.api_key_env])

    def _connect(self) -> sqlite3.Connection:
        conn = self._log.connect()
        conn.execute("PRAGMA foreign_keys = ON")
        return conn

    def _id(self, conn: sqlite3.Connection, name: str) -> int:
        row = conn.execute("SELECT id FROM conversations WHERE name = ?", (name,)).fetchone()
        if row is None:
            have = [r[0] for r in conn.execute("SELECT name FROM conversations ORDER BY name")]
            raise ConversationNotFoundError(
                f"There is no conversation {name!r}" + (f"; there are: {', '.join(have)}." if have
                                                         else "; none has been started yet.")
                + " A new one starts with `python -m ragstream run PROMPT --answer "
                  "--conversation NAME`, or on the page.")
        return int(row[0])

    # -- conversations ----------------------------------------------------------------------

    def all(self, kb: str | None = None) -> list[ConversationInfo]:
        """Every conversation (of knowledge base ``kb`` only, when given), the one answered
        last first."""
        sql = ("SELECT c.name, c.created_at, COUNT(t.id), "
               "COALESCE(SUM(t.remembered AND t.removed_at IS NULL), 0), "
               "COALESCE(MAX(t.ts), c.created_at) AS last, c.kb FROM conversations c "
               "LEFT JOIN turns t ON t.conversation_id = c.id WHERE (? IS NULL OR c.kb = ?) "
               "GROUP BY c.id ORDER BY last DESC, c.name")
        with closing(self._connect()) as conn:
            return [ConversationInfo(r[0], r[1], int(r[2]), int(r[3]), r[4], r[5])
                    for r in conn.execute(sql, (kb, kb))]

    def names(self, kb: str | None = None) -> list[str]:
        """The conversations' names (of knowledge base ``kb`` only, when given), the one
        answered last first."""
        return [c.name for c in self.all(kb)]

    def exists(self, name: str) -> bool:
        """Whether conversation ``name`` has been started."""
        return self.kb_of(name) is not None

    def kb_of(self, name: str) -> str | None:
        """The knowledge base conversation ``name`` belongs to (None: there is no such one)."""
        with closing(self._connect()) as conn:
            row = conn.execute("SELECT kb FROM conversations WHERE name = ?", (name,)).fetchone()
        return None if row is None else str(row[0])

    def check_kb(self, name: str, kb: str) -> None:
        """``ConversationKnowledgeBaseError`` when conversation ``name`` exists and belongs to
        another knowledge base than ``kb``: its turns are remembered and searched only there,
        so it is never continued with another one."""
        owner = self.kb_of(name)
        if owner is not None and owner != kb:
            raise ConversationKnowledgeBaseError(
                f"Conversation {name!r} belongs to knowledge base {owner!r}, not {kb!r}: its "
                f"turns are remembered and searched only there. Continue it with knowledge base "
                f"{owner!r} (--kb {owner!r}), or start a conversation of {kb!r} under another "
                f"name (e.g. {name.split('@')[0] + kb_suffix(kb)!r}).")

    def create(self, name: str, exist_ok: bool = True, kb: str = DEFAULT_KB) -> str:
        """Start conversation ``name`` of knowledge base ``kb`` (nothing happens when it
        exists and ``exist_ok``; ``ConversationKnowledgeBaseError`` when it exists in another
        knowledge base)."""
        name = check_name(name)
        now = datetime.now(UTC).isoformat(timespec="seconds")
        with closing(self._connect()) as conn, conn:
            cur = conn.execute("INSERT OR IGNORE INTO conversations (name, created_at, kb) "
                               "VALUES (?, ?, ?)", (name, now, kb))
            if cur.rowcount == 0 and not exist_ok:
                raise ConversationError(f"A conversation called {name!r} exists already: pick "
                                        f"another name, or continue that one.")
        self.check_kb(name, kb)
        return name

    def rename_kb(self, old: str, new: str) -> int:
        """Knowledge base ``old`` is now called ``new``: its conversations and turns follow it.
        Returns how many conversations it has."""
        with closing(self._connect()) as conn, conn:
            n = conn.execute("UPDATE conversations SET kb = ? WHERE kb = ?", (new, old)).rowcount
            conn.execute("UPDATE turns SET kb = ? WHERE kb = ?", (new, old))
        return int(n)

    def delete(self, name: str) -> int:
        """Delete conversation ``name`` and all its turns; returns how many turns it had."""
        with closing(self._connect()) as conn, conn:
            cid = self._id(conn, name)
            n = conn.execute("SELECT COUNT(*) FROM turns WHERE conversation_id = ?", (cid,)).fetchone()[0]
            conn.execute("DELETE FROM turns WHERE conversation_id = ?", (cid,))
            conn.execute("DELETE FROM conversations WHERE id = ?", (cid,))
        return int(n)

    # -- turns --------------------------------------------------------------------------

    def turns(self, name: str) -> list[Turn]:
        """Every turn of conversation ``name``, in order (forgotten ones too, marked)."""
        with closing(self._connect()) as conn:
            cid = self._id(conn, name)
            rows = conn.execute("SELECT * FROM turns WHERE conversation_id = ? ORDER BY turn",
                                (cid,)).fetchall()
        return [_turn(name, r) for r in rows]

    def recent(self, name: str, max_pairs: int) -> list[ConversationTurn]:
        """The last ``max_pairs`` turns not forgotten: the next prompt's recent conversation."""
        kept = [t.as_pair() for t in self.turns(name) if not t.removed]
        return kept[-max_pairs:] if max_pairs > 0 else []

    def add_turn(self, name: str, sp: SuperPrompt, answer: Answer, embedder, kb: str = DEFAULT_KB,
                 interaction_id: int | None = None, cfg: AppConfig | None = None) -> Turn:
        """Record ``sp``'s question and ``answer`` as the next turn of conversation ``name`` of
        knowledge base ``kb`` (started if new; ``ConversationKnowledgeBaseError`` when it is
        another one's); remembered, and encoded now, when the answer asserted something with
        its source that is neither the question nor the person's own words (``memory_text``;
        ``cfg``'s ``conversations.own_share``)."""
        name = check_name(name)
        scrub = self._log.scrub
        question, text = scrub(sp.user_text), scrub(answer.text)
        remembered, why, kept = False, "", ""
        if not found_something(answer):
            why = ("the answer found nothing in the knowledge base" if answer.mode == "no-results"
                   else "the answer cites no source")
        else:
            documents = {c.n: c.label or c.source for c in answer.sources
                         if not c.chunk_id.startswith(ID_PREFIX)}
            kept, why = memory_text(text, documents, question, [scrub(t) for t in own_texts(sp)],
                                    cfg, turns=[c.n for c in answer.sources if c.n not in documents])
            remembered = bool(kept)
        sources = [c.label or c.source for c in answer.sources]
        now = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        self.create(name, kb=kb)
        with closing(self._connect()) as conn, conn:
            conn.execute("BEGIN IMMEDIATE")
            cid = self._id(conn, name)
            number = int(conn.execute("SELECT COALESCE(MAX(turn), 0) + 1 FROM turns WHERE "
                                      "conversation_id = ?", (cid,)).fetchone()[0])
            turn = Turn(conversation=name, turn=number, ts=now, question=question, answer=text,
                        sources=tuple(sources), kb=kb, remembered=remembered, why=why,
                        removed=False, memory_text=kept)
            blob, made_with = None, ""
            if remembered:
                from ragstream.backends.doc_index import encode_chunks

                blob, made_with = _pack(encode_chunks([turn.chunk()], embedder)), embedder_id(embedder)
            conn.execute(
                "INSERT INTO turns (conversation_id, turn, ts, question, answer, sources, kb, "
                "interaction_id, remembered, why, memory_text, encoding, encoded_with) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (cid, number, now, turn.question, turn.answer,
                 json.dumps(sources, ensure_ascii=False), kb, interaction_id, int(remembered), why,
                 turn.memory_text, blob, made_with))
        return turn

    def forget(self, name: str, turn: int) -> Turn:
        """Take turn ``turn`` of conversation ``name`` out of its memory and its recent block."""
        now = datetime.now(UTC).isoformat(timespec="seconds")
        with closing(self._connect()) as conn, conn:
            cid = self._id(conn, name)
            cur = conn.execute("UPDATE turns SET removed_at = COALESCE(removed_at, ?) WHERE "
                               "conversation_id = ? AND turn = ?", (now, cid, int(turn)))
            if cur.rowcount == 0:
                raise ConversationNotFoundError(f"Conversation {name!r} has no turn {turn}: list its "
                                        f"turns with `python -m ragstream conversation show {name}`.")
        return next(t for t in self.turns(name) if t.turn == int(turn))

    # -- memory -------------------------------------------------------------------------

    def memory(self, name: str, embedder, before: int = 0,
               kb: str | None = None) -> Memory | None:
        """The remembered, unforgotten turns of ``name`` (those numbered below ``before``, when
        it is not 0) as chunks with their vectors (None when there are none, or when the
        conversation is not of knowledge base ``kb``, when given: a turn is searched only with
        the knowledge base it was asked in). A turn encoded by another embedding model is
        encoded again now (and stored so). The memory is kept (``MEMORIES_KEPT``) while its
        turns stay the same: a stage run reads only their ids."""
        made_with = embedder_id(embedder)
        with closing(self._connect()) as conn:
            row = conn.execute("SELECT id, kb FROM conversations WHERE name = ?", (name,)).fetchone()
            if row is None or (kb is not None and row[1] != kb):
                return None
            where = ("FROM turns WHERE conversation_id = ? AND remembered = 1 AND removed_at IS "
                     "NULL AND (? = 0 OR turn < ?) ORDER BY turn")
            args = (row[0], int(before), int(before))
            ids = tuple((r[0], r[1]) for r in conn.execute(f"SELECT id, encoded_with {where}", args))
            key = (str(self.path), name, made_with, ids)
            with _MEMORIES_LOCK:
                if key in _MEMORIES:
                    return _MEMORIES[key]
            rows = conn.execute(f"SELECT * {where}", args).fetchall()
        if not rows:
            return None
        chunks: list[Chunk] = []
        windows: dict[str, list[np.ndarray]] = {}
        sentences: dict[str, list[tuple[tuple[int, int], np.ndarray]]] = {}
        stale: list[tuple[int, bytes]] = []
        for r in rows:
            chunk = _turn(name, r).chunk()
            blob = r["encoding"]
            if not blob or r["encoded_with"] != made_with:
                from ragstream.backends.doc_index import encode_chunks

                blob = _pack(encode_chunks([chunk], embedder))
                stale.append((int(r["id"]), blob))
            windows[chunk.id], sentences[chunk.id] = _unpack(blob)
            chunks.append(chunk)
        if stale:
            with closing(self._connect()) as conn, conn:
                conn.executemany("UPDATE turns SET encoding = ?, encoded_with = ? WHERE id = ?",
                                 [(b, made_with, i) for i, b in stale])
        turns = ",".join(str(r["turn"]) for r in rows)
        digest = hashlib.sha1(f"{name}\0{turns}\0{made_with}".encode()).hexdigest()[:10]
        memory = Memory(name=name, chunks=tuple(chunks), windows=windows, sentences=sentences,
                        fingerprint=f"conversation {name}: {len(rows)} turn(s) {digest}")
        if not stale:  # re-encoded turns have new ids' encodings: the next read keys them
            with _MEMORIES_LOCK:
                _MEMORIES[key] = memory
                while len(_MEMORIES) > MEMORIES_KEPT:
                    _MEMORIES.popitem(last=False)
        return memory
