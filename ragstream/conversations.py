"""Named conversations, kept in the Q&A log's SQLite file, and their memory.

    convs = Conversations.for_config(cfg)
    convs.create("onboarding")
    convs.add_turn("onboarding", sp, answer, embedder)   # after an answer (Engine.answer does it)
    convs.recent("onboarding", 10)      # the last N4 turns, for the next prompt's block
    convs.forget("onboarding", 3)       # turn 3 leaves the memory (and the recent block)
    memory = convs.memory("onboarding", embedder)       # what Retrieval searches with the KB

Every answered turn of a named conversation is a row of ``turns`` (question, answer, its
citations, the knowledge base, when). A turn whose answer found something (it cites at least
one source) is *remembered*: it becomes a chunk of the conversation (``Turn.chunk``: source
"conversation", doc type "conversation", the turn and its time as the heading), encoded once
when the turn is added (its window and sentence vectors are kept in the row) and searched by
Retrieval together with the knowledge base (``DocumentIndex.with_memory``).

The chunk holds what the turn *adds* (``memory_text``): the question as asked (with whatever
the person stated in it), the answer's sentences without their ``[n]`` markers — less those
quoted from the sources it cites, which the knowledge base holds already — and the labels of
those sources (in code spans, so no answer ever quotes the list). Measured on the bundled
question set asked twice in one conversation (``eval --answers … --conversation``): with the
whole answer remembered, every second-pass answer led with the earlier turn instead of the
document (first 0.00); with only what the turn adds, the documents lead again. A turn that found nothing
(no sources, or the no-results answer) is kept in the conversation's log but not remembered.
A forgotten turn (``forget``) leaves the memory and the recent-conversation block; its row
stays, marked, so the page can say so.

A conversation's chunk ids are ``conversation:<name>#<turn>``; no knowledge-base chunk id
starts with ``conversation:`` (they are file paths), so the two never collide.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
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

from ragstream.config import AppConfig
from ragstream.errors import ConversationError, ConversationNotFoundError
from ragstream.qa_log import QALog
from ragstream.render import strip_citations
from ragstream.super_prompt import (
    CONVERSATION_ID_PREFIX,
    Answer,
    Chunk,
    ConversationTurn,
    SuperPrompt,
)

SOURCE = "conversation"
DOC_TYPE = "conversation"
ID_PREFIX = CONVERSATION_ID_PREFIX
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,59}$")
NAME_RULE = "1 to 60 characters: letters, digits, '.', '-' or '_', starting with a letter or digit"


def check_name(name: str) -> str:
    """``name`` stripped, or ``ConversationError`` saying what a name may be."""
    clean = str(name).strip()
    if not NAME_PATTERN.match(clean):
        raise ConversationError(f"{name!r} cannot be a conversation's name: use {NAME_RULE}.")
    return clean


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
    """Whether a turn is worth remembering: its answer cites at least one source."""
    return answer.mode != "no-results" and bool(answer.sources)


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
        text = self.memory_text or memory_text(self.question, self.answer, self.sources, [])
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


@dataclass(frozen=True)
class Memory:
    """The chunks of a conversation's remembered turns, with their stored vectors, ready to
    be searched beside a knowledge base (``DocumentIndex.with_memory``)."""

    name: str
    chunks: tuple[Chunk, ...]
    windows: Mapping[str, list[np.ndarray]]  # chunk id -> its window vectors
    sentences: Mapping[str, list[tuple[tuple[int, int], np.ndarray]]]  # -> (span, vector)
    fingerprint: str


def memory_text(question: str, answer: str, sources: Sequence[str], quoted: Sequence[str]) -> str:
    """What a turn adds, as its chunk's text: the question, the answer's sentences (without
    ``[n]``) that are not quoted from the ``quoted`` source texts, and the ``sources`` labels.
    A sentence counts as quoted when at least ``QUOTED_SHARE`` of its word 3-shingles are in
    the sources (an extractive answer joins a lead-in to a sentence; an LLM copies phrases)."""
    from ragstream.text import sentences, shingles

    held: set[tuple[str, ...]] = set()
    for text in quoted:
        held |= shingles(text)
    novel = []
    for sentence in sentences(strip_citations(answer)):
        bare = _LIST_MARK.sub("", sentence).strip()
        own = shingles(bare)
        if bare and own and len(own & held) < QUOTED_SHARE * len(own):
            novel.append(bare)
    parts = [question.strip()]
    if novel:
        parts.append(" ".join(novel))
    if sources:
        parts.append("Sources: " + "; ".join(f"`{label}`" for label in sources))
    return "\n\n".join(p for p in parts if p)


#: a sentence of the answer with at least this share of its word 3-shingles in the cited
#: sources is theirs, not the turn's own
QUOTED_SHARE = 0.8
_LIST_MARK = re.compile(r"^\s*(?:[-*+•]|\d+[.)])\s+")


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

    def all(self) -> list[ConversationInfo]:
        """Every conversation, the one answered last first."""
        sql = ("SELECT c.name, c.created_at, COUNT(t.id), "
               "COALESCE(SUM(t.remembered AND t.removed_at IS NULL), 0), "
               "COALESCE(MAX(t.ts), c.created_at) AS last FROM conversations c "
               "LEFT JOIN turns t ON t.conversation_id = c.id GROUP BY c.id ORDER BY last DESC, c.name")
        with closing(self._connect()) as conn:
            return [ConversationInfo(r[0], r[1], int(r[2]), int(r[3]), r[4])
                    for r in conn.execute(sql)]

    def names(self) -> list[str]:
        """The conversations' names, the one answered last first."""
        return [c.name for c in self.all()]

    def exists(self, name: str) -> bool:
        """Whether conversation ``name`` has been started."""
        with closing(self._connect()) as conn:
            return conn.execute("SELECT 1 FROM conversations WHERE name = ?",
                                (name,)).fetchone() is not None

    def create(self, name: str, exist_ok: bool = True) -> str:
        """Start conversation ``name`` (nothing happens when it exists and ``exist_ok``)."""
        name = check_name(name)
        now = datetime.now(UTC).isoformat(timespec="seconds")
        with closing(self._connect()) as conn, conn:
            cur = conn.execute("INSERT OR IGNORE INTO conversations (name, created_at) VALUES (?, ?)",
                               (name, now))
            if cur.rowcount == 0 and not exist_ok:
                raise ConversationError(f"A conversation called {name!r} exists already: pick "
                                        f"another name, or continue that one.")
        return name

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

    def add_turn(self, name: str, sp: SuperPrompt, answer: Answer, embedder, kb: str = "",
                 interaction_id: int | None = None) -> Turn:
        """Record ``sp``'s question and ``answer`` as the next turn of conversation ``name``
        (started if new); remembered, and encoded now, when the answer found something."""
        name = check_name(name)
        remembered = found_something(answer)
        why = "" if remembered else (
            "the answer found nothing in the knowledge base" if answer.mode == "no-results"
            else "the answer cites no source")
        sources = [c.label or c.source for c in answer.sources]
        chunks = sp.chunk_map()
        quoted = [chunks[c.chunk_id].text for c in answer.sources if c.chunk_id in chunks]
        now = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        scrub = self._log.scrub
        self.create(name)
        with closing(self._connect()) as conn, conn:
            conn.execute("BEGIN IMMEDIATE")
            cid = self._id(conn, name)
            number = int(conn.execute("SELECT COALESCE(MAX(turn), 0) + 1 FROM turns WHERE "
                                      "conversation_id = ?", (cid,)).fetchone()[0])
            question, text = scrub(sp.user_text), scrub(answer.text)
            turn = Turn(conversation=name, turn=number, ts=now, question=question, answer=text,
                        sources=tuple(sources), kb=kb, remembered=remembered, why=why,
                        removed=False, memory_text=memory_text(question, text, sources, quoted)
                        if remembered else "")
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

    def memory(self, name: str, embedder, before: int = 0) -> Memory | None:
        """The remembered, unforgotten turns of ``name`` (those numbered below ``before``, when
        it is not 0) as chunks with their vectors (None when there are none). A turn encoded by
        another embedding model is encoded again now (and stored so). The memory is kept
        (``MEMORIES_KEPT``) while its turns stay the same: a stage run reads only their ids."""
        made_with = embedder_id(embedder)
        with closing(self._connect()) as conn:
            row = conn.execute("SELECT id FROM conversations WHERE name = ?", (name,)).fetchone()
            if row is None:
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
