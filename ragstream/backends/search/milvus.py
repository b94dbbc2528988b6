"""The scale-out engine: a knowledge base in Milvus (a server, a cluster, or Milvus Lite).

``MilvusEngine`` is what ``LocalEngine`` is (the store the ingestion writes and the
``SearchEngine`` retrieval reads), on one Milvus collection per knowledge base, through the
client API a Milvus server or cluster answers (``pymilvus.MilvusClient(uri)``): a local path
ending in ``.db`` is Milvus Lite, embedded in this process (the tests); ``http://host:19530``
is a server shared by every process.

**One row per chunk** (``id``: the chunk id), holding

* ``terms``: the chunk's terms as the app's tokenizer makes them (``KeywordIndex.tokens`` of
  ``index_text``: Snowball-stemmed, stop-word-free), joined by spaces, analysed by Milvus's
  ``whitespace`` tokenizer, and a ``sparse`` field Milvus's BM25 function fills from it: the
  index holds exactly the terms a query's ``query_terms`` gives. Milvus Lite 3.2 knows only
  the ``standard`` and ``jieba`` tokenizers; ``standard`` splits on ``\\w+`` runs and
  lowercases, and the app's terms are already lowercase ``\\w+`` runs (bm25s's token pattern,
  stemmed), so it yields the same terms there (``ANALYZERS``: the first the engine accepts);
* ``vector``: one dense vector per chunk, the normalised mean of its window vectors (for
  most chunks, their one window). A chunk is one row, written and deleted with its
  document; the ANN only picks candidates: the ``Corpus`` re-scores every candidate exactly
  from its stored windows (its best window), so a multi-window chunk whose mean is farther
  than its best window can only be missed as a candidate, never mis-scored;
* the filter fields: ``doc_type``, ``source``, ``source_name``, ``day`` (days since
  1970-01-01 of ``last_update_date``, ``NO_DAY`` without one), ``written_ns``;
* what the later stages read for a candidate (``fetch``): the chunk as JSON, its window
  vectors (float32) and evidence sentence vectors (float16, as the default engine's chunk store keeps them) as
  base64 text (Milvus has no bytes scalar), the sentences' spans as JSON; and ``words``, the
  folded words between spaces, for phrase search.

**Filters run in Milvus**, as boolean expressions: ``doc_type in [...]``, a ``day`` range,
and ``source like "..."`` (a shell ``*`` is ``%``, ``?`` is ``_``) or ``source_name in
[...]``. A ``like`` cannot say a literal ``_``/``%`` (Milvus Lite has no escape there) nor a
``[...]`` class, so those become ``_`` (any one character: a superset) and the few rows that
pass are checked exactly with ``fnmatchcase`` here, asking Milvus for more until enough pass.

**Scores.** Milvus's BM25 picks the keyword candidates; the scores returned are BM25
computed here (``bm25_score``: Lucene's IDF, k1 = 1.2, b = 0.75, tantivy's and the app's)
from each candidate's stored terms and the *collection's* statistics. Milvus Lite scores
each segment with that segment's own IDF, so its raw scores are not comparable across
segments; these are, on Lite and a server alike, and ``keyword_scores`` needs no search at
all (the candidates' terms, read by primary key).

**Statistics, documents and version: a companion collection** (``<collection>__stats``),
small and read by primary key: one row per term (its document frequency), one per document
(hash, ingest time, root, chunk and window counts, its filter values), and one ``META`` row
(chunk count, total terms, total windows, and the *generation*). ``doc_freqs`` and ``stats``
are key lookups, never a scan (Milvus's ``TEXT_MATCH`` counts scan every row in Milvus Lite,
in Python); ``documents``, ``values`` read the document rows. ``version`` is the
generation, renewed by every write before and after it and re-read from Milvus at every
call, so a write by any process is a new version at the next query of every other.

**Writes** cost the documents written: the old rows are read by ``doc_id`` (their terms, for
the frequencies), deleted by a ``doc_id`` filter, and the new rows inserted; then the
statistics rows of the terms that changed are upserted. Milvus has no transactions: a write
cut short leaves the document listed with an empty hash (the next ingest rewrites it), and
the term statistics possibly off by that document until ``recount`` (also run by a write
that finds the generation still marked as being written). One writer at a time per
knowledge base, as the ingestion's lock ensures on one machine.

**Processes.** A server is shared by any number of processes. Milvus Lite holds its ``.db``
folder with an exclusive lock: a second process cannot open it (``VectorStoreError``), so
several processes need a server.

It stays whole: it is one engine (``MilvusEngine``, the ``SearchEngine`` interface on Milvus)
and its filter language; split, the translation of a filter would live apart from the only
collection it is written for.
"""

from __future__ import annotations

import base64
import datetime as dt
import fnmatch
import functools
import json
import logging
import re
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

import numpy as np

from ragstream.backends.keyword_index import BM25_B, BM25_K1, KeywordIndex, bm25_idf, bm25_score, index_text
from ragstream.backends.search.keyword import StoredChunk, day_number, glob_parts, stored_chunks
from ragstream.backends.vector_store import StoredDocument
from ragstream.common.errors import VectorDBUnavailableError, VectorStoreError
from ragstream.common.text import fold
from ragstream.state.super_prompt import Chunk, Filters

log = logging.getLogger(__name__)

#: the BM25 text field's analyzers, tried in order when the collection is made: a server
#: has ``whitespace``; Milvus Lite 3.2 only ``standard`` (the same terms, see above)
ANALYZERS: tuple[dict[str, Any], ...] = ({"tokenizer": "whitespace"}, {"tokenizer": "standard"})
#: Milvus Lite's analyzer (it would refuse ``whitespace``, loudly)
LITE_ANALYZER: dict[str, Any] = {"tokenizer": "standard"}
#: BM25's parameters (tantivy's, Lucene's and ``bm25_score``'s)
BM25_PARAMS = {"bm25_k1": BM25_K1, "bm25_b": BM25_B}
#: the ``day`` of a chunk without an update date (below any real day)
NO_DAY = -(10 ** 9)
#: the longest VARCHAR Milvus stores (bytes)
VARCHAR_MAX = 65_535
#: rows per insert / upsert call, and per page when everything is read
BATCH = 500
#: Milvus Lite: a write of at least this many rows is flushed to a segment at once (its
#: unflushed rows are re-indexed for BM25 at every search, in Python: 1.7 s per query with
#: 4,000 of them, 20 ms once flushed)
FLUSH_ROWS = 1000
#: the deadline of a write or a collection call (a read's is ``request_timeout_s``)
WRITE_TIMEOUT_S = 120.0
#: ids per ``in`` filter or primary-key read
IDS_PER_CALL = 1000
#: keyword candidates Milvus is asked for at least (re-scored here; k may be 1)
KEYWORD_MIN = 10
#: the most rows one Milvus search returns (its topk limit)
TOPK_MAX = 16_384
#: the companion collection's key of its one summary row (terms never hold a space)
META = " meta"
#: the companion collection's row kinds
TERM, DOC, SUMMARY = 0, 1, 2
#: a generation while a write is under way starts with this
WRITING = "writing-"
_EPOCH = dt.date(1970, 1, 1)
#: the chunk collection's stored fields ``fetch`` reads
PAYLOAD = ["id", "doc_id", "doc_hash", "chunk", "n_windows", "windows", "sentences", "spans",
           "written_ns"]



class _NoSessionTs(logging.Filter):
    """Milvus Lite has no session timestamps (``AllocTimestamp``): at every paging query its
    in-process gRPC server logs the call it does not implement, and pymilvus warns that it
    falls back to the client's clock, which is right for an engine in this process. Both
    records say nothing to act on and are dropped; any other record passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        if "mvccTs" in record.getMessage():
            return False
        if record.exc_info and "Method not implemented" in record.getMessage():
            import traceback

            return "AllocTimestamp" not in "".join(traceback.format_exception(*record.exc_info))
        return True


class _Reported(logging.Filter):
    """pymilvus logs every failed call at ERROR with its traceback, and every failed
    reconnection at WARNING, before raising. The engine turns those failures into its typed
    error (``MilvusUnavailableError``, naming what to start), and tries the ``whitespace``
    tokenizer before Milvus Lite's ``standard`` on purpose: those records are dropped, so a
    person sees the typed error once, not a traceback before it."""

    SAID = ("fail connecting", "unavailable", "deadline exceeded", "retry timeout",
            "connection recovery failed", "unknown tokenizer type")

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage().lower()
        return not any(s in text for s in self.SAID)


def _quiet() -> None:
    """Drop pymilvus's and Milvus Lite's records that say nothing the engine does not (above)."""
    for names, kind in ((("pymilvus.client.iterator.query_iterator", "grpc._server"), _NoSessionTs),
                        (("pymilvus.decorators", "pymilvus.client.connection_manager"), _Reported)):
        for name in names:
            logger = logging.getLogger(name)
            if not any(isinstance(f, kind) for f in logger.filters):
                logger.addFilter(kind())

_P = ParamSpec("_P")
_R = TypeVar("_R")


class MilvusUnavailableError(VectorDBUnavailableError):
    """The Milvus server (or the Milvus Lite database) cannot be reached."""

    def __init__(self, url: str, detail: str = "", during: str = ""):
        self.url, self.detail, self.during = url, detail, during
        VectorStoreError.__init__(
            self,
            f"The Milvus server at {url} cannot be reached"
            + (f" while {during}" if during else "") + (f" ({detail})" if detail else "")
            + ". Start it (Milvus standalone: `docker compose up -d` with Milvus's compose file; "
            "on one machine, Milvus Lite's server: `python -m milvus_lite server --data-dir DIR "
            f"--host HOST --port PORT` with the host and port of {url}) and try again: no restart "
            "of RAGstream is needed. Or use Milvus Lite in this process (vector_store.url empty "
            "or a path ending in .db) or the default engine (vector_store.mode \"persistent\").")


def _chain(err: BaseException) -> Iterator[BaseException]:
    """``err`` and every exception it was raised from or during (pymilvus raises ``e from e``,
    so a plain walk of ``__cause__`` goes round in a circle)."""
    todo, seen = [err], set()
    while todo:
        e = todo.pop(0)
        if id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        todo += [x for x in (e.__cause__, e.__context__) if x is not None]


def _unreachable(err: BaseException) -> bool:
    """True when ``err`` (or what caused it) says the server is not there or not answering."""
    import grpc

    for e in _chain(err):
        if isinstance(e, grpc.RpcError) and getattr(e, "code", lambda: None)() in (
                grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            return True
        if isinstance(e, ConnectionError | TimeoutError):
            return True
        name, text = type(e).__name__, str(e).lower()
        if name in ("MilvusUnavailableException",) or any(
                s in text for s in ("unavailable", "fail connecting", "connection refused",
                                    "deadline exceeded", "server is not ready")):
            return True
    return False


def _describe(err: BaseException) -> str:
    """One line for a failure to reach Milvus: the gRPC status and its details when the
    failure holds one (pymilvus's own text repeats a multi-line gRPC dump)."""
    import grpc

    for e in _chain(err):
        if isinstance(e, grpc.RpcError) and hasattr(e, "code") and hasattr(e, "details"):
            return f"gRPC {e.code().name}: {e.details()}"
    return f"{type(err).__name__}: {' '.join(str(err).split())}"


def _timed_out(err: BaseException) -> bool:
    """True when ``err`` (or what caused it) is a call that ran out of its deadline."""
    import grpc

    return any(
        (isinstance(e, grpc.RpcError)
         and getattr(e, "code", lambda: None)() == grpc.StatusCode.DEADLINE_EXCEEDED)
        or "deadline exceeded" in str(e).lower() or "retry timeout" in str(e).lower()
        for e in _chain(err))


def _guarded(during: str) -> Callable[[Callable[Concatenate[MilvusEngine, _P], _R]],
                                      Callable[Concatenate[MilvusEngine, _P], _R]]:
    """Turn a Milvus failure into ``MilvusUnavailableError`` (not reachable) or
    ``VectorStoreError`` (anything else), each saying what to do."""
    def decorate(method: Callable[Concatenate[MilvusEngine, _P], _R]
                 ) -> Callable[Concatenate[MilvusEngine, _P], _R]:
        @functools.wraps(method)
        def guarded(self: MilvusEngine, *args: _P.args, **kwargs: _P.kwargs) -> _R:
            self._check_quiet(during)
            try:
                return method(self, *args, **kwargs)
            except VectorStoreError as err:
                if isinstance(err, MilvusUnavailableError):
                    self._went_quiet(err)
                raise
            except Exception as err:
                if _unreachable(err):
                    self.close()  # the next call connects anew (see ``client``)
                    unavailable = self._unavailable(err, during)
                    self._went_quiet(unavailable)
                    raise unavailable from err
                raise VectorStoreError(
                    f"Milvus ({self.location}, collection {self.collection!r}) failed while "
                    f"{during}: {type(err).__name__}: {err}. If the collection was made by "
                    "another version of RAGstream, drop it (`MilvusEngine.drop`) and ingest "
                    "again; if a write was cut short, ingest again.") from err
        return guarded
    return decorate


# -- expressions --------------------------------------------------------------------------


def literal(text: str) -> str:
    """``text`` as a Milvus string literal (double quotes, backslash escapes)."""
    escaped = (text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
               .replace("\r", "\\r").replace("\t", "\\t"))
    return f'"{escaped}"'


def literals(values: Iterable[str]) -> str:
    """A Milvus list of string literals: ``["a", "b"]``."""
    return "[" + ", ".join(literal(v) for v in values) + "]"


def like_text(text: str) -> str:
    """``text`` in a Milvus ``like`` pattern: ``like``'s own characters (``%``, ``_`` and the
    backslash) become ``_``, any one character, so the pattern matches a superset, to be
    checked exactly."""
    return "".join("_" if c in "%_\\" else c for c in text)


def glob_like(pattern: str) -> tuple[str, bool]:
    """A shell pattern (``fnmatchcase``'s) as a Milvus ``like`` pattern, and whether the two
    match the same strings. ``*`` is ``%`` and ``?`` is ``_``; a literal ``%``, ``_`` or
    backslash, and a ``[...]`` class, become ``_`` (any one character: the ``like`` then
    matches a superset, to be checked exactly)."""
    out, exact = [], True
    for kind, text in glob_parts(pattern):
        if kind in ("class", "one") or (kind == "char" and text in "%_\\"):
            out.append("_")
            exact = exact and kind == "one"
        else:
            out.append("%" if kind == "any" else text)
    return "".join(out), exact


def day_of(date: str) -> int:
    """Days since 1970-01-01 of an ISO date (its first ten characters), or ``NO_DAY``."""
    day = day_number(date)
    return NO_DAY if day is None else day


def filter_expr(filters: Filters | None) -> tuple[str, tuple[str, ...] | None]:
    """The Milvus boolean expression of ``filters`` ("" for none), and the source patterns
    still to check exactly on what it returns (None when the expression is exact)."""
    if filters is None or filters.empty:
        return "", None
    parts, recheck = [], False
    if filters.doc_type:
        parts.append(f"doc_type in {literals(filters.doc_type)}")
    if filters.source:
        alts = []
        for s in filters.source:
            like, exact = glob_like(s)
            recheck |= not exact
            alts.append(f"source like {literal(like)}")
        alts.append(f"source_name in {literals(filters.source)}")
        parts.append("(" + " or ".join(alts) + ")")
    if filters.updated_from or filters.updated_to:
        lo = (filters.updated_from - _EPOCH).days if filters.updated_from else NO_DAY + 1
        parts.append(f"day >= {lo}")
        if filters.updated_to:
            parts.append(f"day <= {(filters.updated_to - _EPOCH).days}")
    return " and ".join(parts), (filters.source if recheck else None)


def source_passes(patterns: Sequence[str], source: str, source_name: str) -> bool:
    """``Filters.matches``'s source condition."""
    return any(fnmatch.fnmatchcase(source, s) or s == source_name for s in patterns)


def _and(*exprs: str) -> str:
    return " and ".join(f"({e})" for e in exprs if e)


def _b64(array: np.ndarray, dtype: type) -> str:
    return base64.b64encode(np.ascontiguousarray(array, dtype=dtype).tobytes()).decode("ascii")


def _unb64(text: str, dtype: type) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype=dtype).astype(np.float32)


def _safe_name(name: str) -> str:
    """A Milvus collection name (letters, digits, underscores; not starting with a digit)."""
    safe = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return safe if safe[:1].isalpha() or safe[:1] == "_" else f"_{safe}"


# -- the engine ---------------------------------------------------------------------------


class _Timed:
    """A ``MilvusClient`` whose every call has a deadline (``timeout=``) unless it names one.
    pymilvus applies the client's own ``timeout`` only to connecting: a call without one is
    retried by count, and a server that accepts connections but never answers (stopped,
    overloaded) held a call for 66 s here. Reads get the request timeout (a query waits on
    them); writes and collection calls get ``WRITE_TIMEOUT_S`` (Milvus Lite's server takes
    seconds for a batch of rows)."""

    #: the calls that reach the server (the others, such as ``prepare_index_params``, do not
    #: take a deadline), by kind
    READS = frozenset({"search", "query", "query_iterator", "has_collection"})
    WRITES = frozenset({"insert", "upsert", "delete", "flush", "load_collection",
                        "create_collection", "drop_collection"})

    def __init__(self, client: Any, read_s: float, write_s: float):
        self._client, self._read_s, self._write_s = client, read_s, write_s

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if name not in self.READS and name not in self.WRITES:
            return attr
        deadline = self._read_s if name in self.READS else self._write_s

        @functools.wraps(attr)
        def timed(*args: Any, **kwargs: Any) -> Any:
            kwargs.setdefault("timeout", deadline)
            return attr(*args, **kwargs)
        return timed


class MilvusEngine:
    """A knowledge base in one Milvus collection (and its small statistics companion): the
    store the ingestion writes and the ``SearchEngine`` retrieval reads."""

    def __init__(self, uri: str, collection: str = "ragstream_kb", stemmer: str = "english",
                 stopwords: str = "en", token: str = "", timeout_s: float = 10.0,
                 index_dir: Path | None = None, connect_timeout_s: float | None = None):
        self.uri = str(uri)
        self.collection = _safe_name(collection)
        self.stats_collection = f"{self.collection}__stats"
        self.tokenizer = KeywordIndex(stemmer, stopwords)
        self.token = token
        self.timeout_s = timeout_s  # each call's deadline
        #: how long connecting may take: short, so that a server that hangs costs one call's
        #: deadline, then this, not two deadlines (a pass asks for the version, then searches)
        self.connect_timeout_s = connect_timeout_s if connect_timeout_s is not None else timeout_s
        self.index_dir = Path(index_dir) if index_dir else (
            Path(self.uri).parent if self.lite else Path("."))
        self.settings: Any = None  # the vector_store settings, when made by from_settings
        self._client: Any = None
        self._ready = False  # both collections exist and are loaded
        #: (until when, why): the server did not answer a call just now (``_went_quiet``)
        self._quiet: tuple[float, str] = (0.0, "")
        self._lock = threading.RLock()

    @classmethod
    def from_settings(cls, settings: Any, index_dir: Path, stemmer: str = "english",
                      stopwords: str = "en") -> MilvusEngine:
        """The engine of ``vector_store`` settings: ``url`` a server (``http://host:19530``) or
        a ``.db`` path; empty, Milvus Lite at ``<index_dir>/milvus.db``."""
        url = getattr(settings, "url", "") or str(Path(index_dir) / "milvus.db")
        engine = cls(url, settings.collection, stemmer, stopwords,
                     timeout_s=float(getattr(settings, "request_timeout_s", 10.0)),
                     index_dir=Path(index_dir),
                     connect_timeout_s=float(getattr(settings, "connect_timeout_s", 2.0)))
        engine.settings = settings
        return engine

    # -- connection ---------------------------------------------------------------------

    @property
    def lite(self) -> bool:
        """True for Milvus Lite (a local ``.db`` path), False for a server."""
        return not re.match(r"^[a-z]+://", self.uri)

    @property
    def location(self) -> str:
        """Where the data lives: the server's URI or the Milvus Lite path."""
        return self.uri

    @property
    def name(self) -> str:
        """What and where, for messages."""
        kind = "Milvus Lite" if self.lite else "Milvus"
        return f"{kind} at {self.uri} (collection {self.collection})"

    @property
    def client(self):
        """The ``MilvusClient``, connected on first use."""
        if self._client is None:
            from pymilvus import MilvusClient

            try:
                _quiet()
                if self.lite:
                    Path(self.uri).parent.mkdir(parents=True, exist_ok=True)
                # a server's connection is this engine's own (``dedicated``): pymilvus shares
                # one per address by default, and a shared one whose reconnection failed stays
                # closed for every later client (pymilvus 3.0.2), so a server that came back
                # was never reached again without a restart
                self._client = _Timed(MilvusClient(uri=self.uri, token=self.token,
                                                   timeout=self.connect_timeout_s,
                                                   dedicated=not self.lite),
                                      self.timeout_s, max(self.timeout_s, WRITE_TIMEOUT_S))
            except Exception as err:
                if self.lite:
                    raise VectorStoreError(
                        f"Cannot open the Milvus Lite database {self.uri}: {err}. Milvus Lite "
                        "lets one process hold a database: close the other process using it "
                        "(or run a Milvus server for several processes), and check that the "
                        "folder is writable.") from err
                raise self._unavailable(err, "connecting") from err
        return self._client

    def _went_quiet(self, err: MilvusUnavailableError) -> None:
        """A server that let a call run out of its deadline is not asked again for
        ``connect_timeout_s``: a pass asks for the version, then searches, and each would wait
        a deadline (6 s + 6 s, over the seed's 10 s) for the same silence."""
        if "no answer" in err.detail:
            self._quiet = (time.monotonic() + self.connect_timeout_s, err.detail)

    def _check_quiet(self, during: str) -> None:
        until, detail = self._quiet
        if time.monotonic() < until:
            raise MilvusUnavailableError(self.location, f"{detail}; not asked again for "
                                         f"{self.connect_timeout_s:g} s", during)

    def _unavailable(self, err: BaseException, during: str) -> MilvusUnavailableError:
        """The typed error for ``err``, a failure to reach the server while ``during``."""
        detail = _describe(err)
        if _timed_out(err):
            if during.startswith(("writing", "deleting", "recounting")):  # reads and writes
                detail = f"no answer in time: {detail}"
            else:
                limit = self.connect_timeout_s if during == "connecting" else self.timeout_s
                detail = f"no answer within {limit:g} s: {detail}"
        return MilvusUnavailableError(self.location, detail, during)

    def close(self) -> None:
        """Forget the client (a Milvus Lite database is released when its process exits)."""
        with self._lock:
            if self._client is not None:
                try:
                    self._client.close()
                except Exception:  # pragma: no cover - closing is best effort
                    pass
            self._client, self._ready = None, False

    def _exists(self) -> bool:
        if self._ready:
            return True
        with self._lock:
            if self.client.has_collection(self.collection) and self.client.has_collection(
                    self.stats_collection):
                for name in (self.collection, self.stats_collection):
                    self.client.load_collection(name)
                self._ready = True
        return self._ready

    def _create(self, dim: int) -> None:
        """Make both collections (the chunks' for ``dim``-dim vectors), if they are missing."""
        from pymilvus import DataType, Function, FunctionType, MilvusClient

        with self._lock:
            if self._exists():
                return
            c = self.client
            if not c.has_collection(self.collection):
                last: Exception | None = None
                for analyzer in ((LITE_ANALYZER,) if self.lite else ANALYZERS):
                    s = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
                    s.add_field("id", DataType.VARCHAR, is_primary=True, max_length=2048)
                    s.add_field("doc_id", DataType.VARCHAR, max_length=2048)
                    s.add_field("doc_hash", DataType.VARCHAR, max_length=256)
                    s.add_field("version", DataType.VARCHAR, max_length=2400)
                    s.add_field("terms", DataType.VARCHAR, max_length=VARCHAR_MAX,
                                enable_analyzer=True, analyzer_params=analyzer)
                    s.add_field("n_terms", DataType.INT64)
                    s.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
                    s.add_field("vector", DataType.FLOAT_VECTOR, dim=dim)
                    s.add_field("words", DataType.VARCHAR, max_length=VARCHAR_MAX)
                    s.add_field("doc_type", DataType.VARCHAR, max_length=256)
                    s.add_field("source", DataType.VARCHAR, max_length=2048)
                    s.add_field("source_name", DataType.VARCHAR, max_length=1024)
                    s.add_field("day", DataType.INT64)
                    s.add_field("written_ns", DataType.INT64)
                    s.add_field("chunk", DataType.VARCHAR, max_length=VARCHAR_MAX)
                    s.add_field("n_windows", DataType.INT64)
                    s.add_field("windows", DataType.VARCHAR, max_length=VARCHAR_MAX)
                    s.add_field("sentences", DataType.VARCHAR, max_length=VARCHAR_MAX)
                    s.add_field("spans", DataType.VARCHAR, max_length=VARCHAR_MAX)
                    s.add_function(Function(name="terms_bm25", function_type=FunctionType.BM25,
                                            input_field_names=["terms"],
                                            output_field_names=["sparse"]))
                    ip = c.prepare_index_params()
                    ip.add_index("vector", index_type="HNSW", metric_type="COSINE",
                                 params={"M": 16, "efConstruction": 200})
                    ip.add_index("sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25",
                                 params=dict(BM25_PARAMS))
                    try:
                        c.create_collection(self.collection, schema=s, index_params=ip,
                                            consistency_level="Strong")
                        last = None
                        break
                    except Exception as err:
                        if "tokenizer" not in str(err).lower():
                            raise
                        last = err
                if last is not None:
                    raise last
            if not c.has_collection(self.stats_collection):
                s = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
                s.add_field("key", DataType.VARCHAR, is_primary=True, max_length=2048)
                s.add_field("kind", DataType.INT64)
                s.add_field("n", DataType.INT64)
                s.add_field("total", DataType.INT64)
                s.add_field("info", DataType.VARCHAR, max_length=VARCHAR_MAX)
                s.add_field("vec", DataType.FLOAT_VECTOR, dim=2)  # Milvus requires a vector
                ip = c.prepare_index_params()
                ip.add_index("vec", index_type="FLAT", metric_type="L2")
                c.create_collection(self.stats_collection, schema=s, index_params=ip,
                                    consistency_level="Strong")
                self._upsert_stats([self._summary_row(0, 0, 0, uuid.uuid4().hex)])
            self._ready = False
            self._exists()

    @_guarded("deleting the collection")
    def drop(self) -> None:
        """Delete both collections (nothing else on the server is touched)."""
        with self._lock:
            for name in (self.collection, self.stats_collection):
                if self.client.has_collection(name):
                    self.client.drop_collection(name)
            self._ready = False

    # -- the companion collection -------------------------------------------------------

    @staticmethod
    def _summary_row(chunks: int, terms: int, windows: int, generation: str) -> dict[str, Any]:
        return {"key": META, "kind": SUMMARY, "n": chunks, "total": terms,
                "info": json.dumps({"generation": generation, "windows": windows}),
                "vec": [0.0, 0.0]}

    def _upsert_stats(self, rows: list[dict[str, Any]]) -> None:
        for i in range(0, len(rows), BATCH):
            self.client.upsert(self.stats_collection, rows[i:i + BATCH])

    def _stat_rows(self, keys: Sequence[str]) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        keys = list(dict.fromkeys(keys))
        for i in range(0, len(keys), IDS_PER_CALL):
            for r in self.client.query(self.stats_collection, ids=keys[i:i + IDS_PER_CALL],
                                       output_fields=["key", "n", "total", "info"]):
                out[r["key"]] = r
        return out

    def _summary(self) -> tuple[int, int, int, str]:
        """(chunks, total terms, total windows, generation); zeros and "" when empty."""
        if not self._exists():
            return 0, 0, 0, ""
        row = self._stat_rows([META]).get(META)
        if row is None:
            return 0, 0, 0, ""
        info = json.loads(row["info"])
        return int(row["n"]), int(row["total"]), int(info.get("windows", 0)), info["generation"]

    def _set_generation(self, generation: str) -> None:
        chunks, terms, windows, _ = self._summary()
        self._upsert_stats([self._summary_row(chunks, terms, windows, generation)])

    # -- writing ------------------------------------------------------------------------

    def _rows(self, chunks: list[StoredChunk], ingested_at: str) -> list[dict[str, Any]]:
        terms = self.tokenizer.tokens([index_text(s.chunk) for s in chunks])
        rows = []
        for s, t in zip(chunks, terms):
            c = s.chunk
            mean = s.window_vectors.mean(axis=0)
            mean = mean / (np.linalg.norm(mean) or 1.0)
            row = {
                "id": c.id, "doc_id": s.doc_id, "doc_hash": s.doc_hash,
                "version": f"{s.doc_id}@{s.doc_hash}",
                "terms": " ".join(t), "n_terms": len(t), "vector": mean.astype(np.float32).tolist(),
                "words": f" {' '.join(fold(index_text(c)).split())} ",
                "doc_type": c.doc_type, "source": c.source, "source_name": c.source_name,
                "day": day_of(c.last_update_date), "written_ns": s.written_ns,
                "chunk": json.dumps(c.model_dump(mode="json"), ensure_ascii=False),
                "n_windows": len(s.window_vectors),
                "windows": _b64(s.window_vectors, np.float32),
                "sentences": _b64(s.sentence_vectors, np.float16),
                "spans": json.dumps([list(x) for x in s.spans]),
            }
            for field in ("terms", "words", "chunk", "windows", "sentences", "spans"):
                if len(row[field].encode("utf-8")) > VARCHAR_MAX:
                    raise VectorStoreError(
                        f"Chunk {c.id} is too long for Milvus (its {field} take more than "
                        f"{VARCHAR_MAX} bytes): lower chunking.max_tokens in "
                        "config/settings.json and ingest again.")
            rows.append(row)
        return rows

    def _old_rows(self, doc_ids: Sequence[str]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for i in range(0, len(doc_ids), IDS_PER_CALL):
            out += self._query_all(f"doc_id in {literals(doc_ids[i:i + IDS_PER_CALL])}",
                                   ["id", "doc_id", "terms", "n_windows"])
        return out

    @_guarded("writing documents (ingest them again to complete them)")
    def replace_documents(self, documents: list[tuple[str, list, str]], ingested_at: str,
                          root: str = "") -> None:
        """Swap each ``(doc_id, records, doc_hash)``'s chunks for ``records`` (encoded windows,
        ``doc_index.encode_chunks``): the old rows out by ``doc_id``, the new ones in, then the
        term and document statistics and a new generation. Costs these documents."""
        if not documents:
            return
        now = time.time_ns()
        new = [(doc_id, stored_chunks(records, doc_id, digest, now), digest)
               for doc_id, records, digest in documents]
        dims = {s.window_vectors.shape[1] for _, chunks, _ in new for s in chunks}
        if dims:
            self._create(dims.pop())
        elif not self._exists():
            return  # nothing to remove, nothing to write
        self._write(new, ingested_at, root)

    def replace_document(self, doc_id: str, records: list, doc_hash: str, ingested_at: str,
                         root: str = "") -> None:
        """``replace_documents`` for one document."""
        self.replace_documents([(doc_id, records, doc_hash)], ingested_at, root)

    @_guarded("deleting a document")
    def delete_document(self, doc_id: str) -> int:
        """Remove every chunk of ``doc_id``; how many windows it had."""
        if not self._exists():
            return 0
        return self._write([(doc_id, [], "")], "", "")

    def _write(self, new: list[tuple[str, list[StoredChunk], str]], ingested_at: str,
               root: str) -> int:
        """The one write path: returns how many windows were removed."""
        with self._lock:
            chunks0, terms0, windows0, generation = self._summary()
            if generation.startswith(WRITING):
                log.warning("a write to %s was cut short: recounting its statistics", self.name)
                self.recount()
                chunks0, terms0, windows0, generation = self._summary()
            doc_ids = [d for d, _, _ in new]
            old = self._old_rows(doc_ids)
            rows = [r for _, chunks, _ in new for r in self._rows(chunks, ingested_at)]
            self._upsert_stats([self._summary_row(chunks0, terms0, windows0,
                                                  WRITING + uuid.uuid4().hex)])
            # the documents are listed as incomplete (no hash) until they are written whole
            self._upsert_stats([self._doc_row(d, "", ingested_at, root, []) for d, ch, _ in new
                                if ch])
            for i in range(0, len(doc_ids), IDS_PER_CALL):
                self.client.delete(self.collection,
                                   filter=f"doc_id in {literals(doc_ids[i:i + IDS_PER_CALL])}")
            for i in range(0, len(rows), BATCH):
                self.client.insert(self.collection, rows[i:i + BATCH])
            if self.lite and len(rows) >= FLUSH_ROWS:
                self.client.flush(self.collection)
            # statistics: per term, chunks holding it (+ new, - old)
            delta: Counter[str] = Counter()
            for r in old:
                delta.subtract(set(r["terms"].split()))
            for r in rows:
                delta.update(set(r["terms"].split()))
            changed = [t for t, d in delta.items() if d]
            held = self._stat_rows(changed)
            upserts, gone = [], []
            for t in changed:
                n = int(held[t]["n"]) if t in held else 0
                n += delta[t]
                if n > 0:
                    upserts.append({"key": t, "kind": TERM, "n": n, "total": 0, "info": "",
                                    "vec": [0.0, 0.0]})
                elif t in held:
                    gone.append(t)
            self._upsert_stats(upserts)
            for i in range(0, len(gone), IDS_PER_CALL):
                self.client.delete(self.stats_collection, ids=gone[i:i + IDS_PER_CALL])
            by_doc = {d: (ch, h) for d, ch, h in new}
            docs = [self._doc_row(d, h, ingested_at, root, ch) for d, (ch, h) in by_doc.items() if ch]
            self._upsert_stats(docs)
            empty = [f"doc {d}" for d, (ch, _) in by_doc.items() if not ch]
            if empty:
                self.client.delete(self.stats_collection, ids=empty)
            removed = sum(int(r["n_windows"]) for r in old)
            chunks = chunks0 - len(old) + len(rows)
            terms = terms0 - sum(len(r["terms"].split()) for r in old) + sum(
                int(r["n_terms"]) for r in rows)
            windows = windows0 - removed + sum(int(r["n_windows"]) for r in rows)
            self._upsert_stats([self._summary_row(chunks, terms, windows, uuid.uuid4().hex)])
            return removed

    @staticmethod
    def _doc_row(doc_id: str, doc_hash: str, ingested_at: str, root: str,
                 chunks: list[StoredChunk]) -> dict[str, Any]:
        info = {"doc_id": doc_id, "hash": doc_hash, "ingested_at": ingested_at, "root": root,
                "doc_type": sorted({s.chunk.doc_type for s in chunks}),
                "source_name": sorted({s.chunk.source_name for s in chunks})}
        return {"key": f"doc {doc_id}", "kind": DOC, "n": len(chunks),
                "total": sum(len(s.window_vectors) for s in chunks),
                "info": json.dumps(info, ensure_ascii=False), "vec": [0.0, 0.0]}

    @_guarded("recounting the statistics")
    def recount(self) -> None:
        """Rebuild the term frequencies and the summary from the chunks (reads every chunk's
        terms: a repair, after a write was cut short)."""
        with self._lock:
            if not self._exists():
                return
            df: Counter[str] = Counter()
            chunks = terms = windows = 0
            for r in self._iterate("", ["id", "terms", "n_windows"]):
                t = r["terms"].split()
                df.update(set(t))
                chunks, terms, windows = chunks + 1, terms + len(t), windows + int(r["n_windows"])
            stale = [r["key"] for r in self._iterate_stats(f"kind == {TERM}", ["key"])
                     if r["key"] not in df]
            for i in range(0, len(stale), IDS_PER_CALL):
                self.client.delete(self.stats_collection, ids=stale[i:i + IDS_PER_CALL])
            self._upsert_stats([{"key": t, "kind": TERM, "n": n, "total": 0, "info": "",
                                 "vec": [0.0, 0.0]} for t, n in df.items()])
            self._upsert_stats([self._summary_row(chunks, terms, windows, uuid.uuid4().hex)])

    # -- the store's listing ------------------------------------------------------------

    @_guarded("reading the version")
    def version(self) -> str:
        """The generation: renewed by every write (before and after it), read from Milvus at
        each call, so another process's write is a new version here too."""
        return self._summary()[3] or "empty"

    def fingerprint(self) -> str:
        """The same as ``version`` (the store's name for it)."""
        return self.version()

    @_guarded("counting the windows")
    def count_windows(self) -> int:
        """How many embedding windows the chunks hold."""
        return self._summary()[2]

    @_guarded("listing the documents")
    def documents(self, prefix: str = "", ids: Collection[str] | None = None
                  ) -> dict[str, StoredDocument]:
        """The stored documents (one row each in the statistics collection, keyed
        ``doc <id>``) whose id starts with ``prefix`` and, given ``ids``, is one of them. A
        document whose write was cut short is listed with an empty hash, so the next ingest
        rewrites it."""
        if not self._exists() or (ids is not None and not ids):
            return {}
        expr = f"kind == {DOC}"
        if prefix:
            expr += f" and key like {literal('doc ' + like_text(prefix) + '%')}"  # rechecked below
        if ids is not None:
            expr += f" and key in {literals(sorted('doc ' + d for d in set(ids)))}"
        out = {}
        for r in self._iterate_stats(expr, ["key", "n", "info"]):
            info = json.loads(r["info"])
            if not info["doc_id"].startswith(prefix):
                continue
            out[info["doc_id"]] = StoredDocument(info["doc_id"], info["hash"], int(r["n"]),
                                                 info["ingested_at"], info["root"])
        return dict(sorted(out.items()))

    # -- reading ------------------------------------------------------------------------

    def _query_all(self, expr: str, fields: list[str], limit: int | None = None
                   ) -> list[dict[str, Any]]:
        return list(self._iterate(expr, fields, limit))

    def _iterate(self, expr: str, fields: list[str], limit: int | None = None,
                 collection: str | None = None) -> Iterator[dict[str, Any]]:
        """The rows passing ``expr`` (all for ""), a page at a time."""
        it = self.client.query_iterator(collection or self.collection, batch_size=BATCH,
                                        limit=-1 if limit is None else limit, filter=expr,
                                        output_fields=fields)
        try:
            while page := it.next():
                yield from page
        finally:
            it.close()

    def _iterate_stats(self, expr: str, fields: list[str]) -> Iterator[dict[str, Any]]:
        return self._iterate(expr, fields, collection=self.stats_collection)

    @_guarded("counting chunks")
    def count(self, filters: Filters | None = None) -> int:
        """How many chunks pass ``filters`` (all when None), counted in Milvus."""
        if not self._exists():
            return 0
        expr, recheck = filter_expr(filters)
        if not expr:
            return self._summary()[0]
        if recheck is None:
            got = self.client.query(self.collection, filter=expr, output_fields=["count(*)"])
            return int(got[0]["count(*)"])
        return sum(source_passes(recheck, r["source"], r["source_name"])
                   for r in self._iterate(expr, ["id", "source", "source_name"]))

    def _search(self, data: list, field: str, k: int, filters: Filters | None,
                params: dict[str, Any], out: list[str]) -> list[list[dict[str, Any]]]:
        """Per query, up to ``k`` hits passing ``filters``: each ``{"id", "distance",
        "entity"}``; filters Milvus cannot say exactly are checked here on more hits."""
        expr, recheck = filter_expr(filters)
        fields = list(out) + (["source", "source_name"] if recheck else [])
        limit = k if recheck is None else min(TOPK_MAX, 4 * k)
        results: list[list[dict[str, Any]]] = [[] for _ in data]
        todo = list(range(len(data)))
        while todo:
            got = self.client.search(self.collection, data=[data[i] for i in todo],
                                     anns_field=field, limit=limit, filter=expr,
                                     output_fields=fields, search_params=params)
            again = []
            for i, hits in zip(todo, got):
                hits = list(hits)
                kept = [h for h in hits if recheck is None or source_passes(
                    recheck, h["entity"]["source"], h["entity"]["source_name"])]
                results[i] = kept[:k]
                if len(kept) < k and len(hits) == limit and limit < TOPK_MAX:
                    again.append(i)
            todo, limit = again, min(TOPK_MAX, limit * 4)
        return results

    @_guarded("searching the dense vectors")
    def dense(self, vectors: np.ndarray, k: int,
              filters: Filters | None = None) -> list[list[tuple[str, float]]]:
        """Per query vector, up to ``k`` chunks nearest by their (mean) vector in Milvus's
        HNSW, filters in the engine: ``(chunk id, cosine)``, nearest first."""
        vectors = np.asarray(vectors, dtype=np.float32)
        if k <= 0 or not len(vectors) or not self._exists():
            return [[] for _ in vectors]
        k = min(k, TOPK_MAX)
        hits = self._search([v.tolist() for v in vectors], "vector", k, filters,
                            {"metric_type": "COSINE", "params": {"ef": max(64, 2 * k)}}, ["doc_id"])
        return [sorted(((h["id"], float(h["distance"])) for h in per),
                       key=lambda x: (-x[1], x[0])) for per in hits]

    def _bm25(self, terms: Sequence[str], rows: Iterable[dict[str, Any]]) -> dict[str, float]:
        """Each row's BM25 for ``terms`` from its stored terms and the collection's statistics
        (0-scored rows left out)."""
        n, total, _, _ = self._summary()
        if not n:
            return {}
        distinct = list(dict.fromkeys(terms))
        df = self.doc_freqs(distinct)
        idf = {t: bm25_idf(n, df[t]) for t in distinct}
        out = {}
        for r in rows:
            score = bm25_score(r["terms"].split(), distinct, idf, total / n)
            if score > 0:
                out[r["id"]] = score
        return out

    @_guarded("searching the keywords")
    def keyword(self, terms: Sequence[str], k: int,
                filters: Filters | None = None) -> list[tuple[str, float]]:
        """The ``k`` best BM25 matches of ``terms`` passing ``filters``, best first: Milvus's
        BM25 picks at least ``KEYWORD_MIN`` candidates, scored here (see the module doc)."""
        terms = [t for t in terms if t]
        if not terms or k <= 0 or not self._exists():
            return []
        want = min(TOPK_MAX, max(k, KEYWORD_MIN))
        hits = self._search([" ".join(terms)], "sparse", want, filters,
                            {"metric_type": "BM25"}, ["terms"])[0]
        scores = self._bm25(terms, ({"id": h["id"], "terms": h["entity"]["terms"]} for h in hits))
        return sorted(scores.items(), key=lambda x: (-x[1], x[0]))[:k]

    @_guarded("scoring keywords")
    def keyword_scores(self, terms: Sequence[str], chunk_ids: Sequence[str]) -> dict[str, float]:
        """BM25 of each of ``chunk_ids`` holding one of ``terms`` (their stored terms, read by
        primary key, and the collection's statistics)."""
        terms = [t for t in terms if t]
        ids = list(dict.fromkeys(chunk_ids))
        if not terms or not ids or not self._exists():
            return {}
        rows = []
        for i in range(0, len(ids), IDS_PER_CALL):
            rows += self.client.query(self.collection, ids=ids[i:i + IDS_PER_CALL],
                                      output_fields=["id", "terms"])
        return self._bm25(terms, rows)

    @_guarded("reading the statistics")
    def stats(self) -> tuple[int, float]:
        """(chunks, mean chunk length in terms), from the summary row (kept by every write)."""
        n, total, _, _ = self._summary()
        return (n, total / n) if n else (0, 0.0)

    @_guarded("reading term frequencies")
    def doc_freqs(self, terms: Sequence[str]) -> dict[str, int]:
        """How many chunks hold each term: the term rows, read by primary key."""
        distinct = [t for t in dict.fromkeys(terms) if t and " " not in t]
        held = self._stat_rows(distinct) if distinct and self._exists() else {}
        return {t: int(held[t]["n"]) if t in held else 0 for t in dict.fromkeys(terms)}

    @_guarded("fetching chunks")
    def fetch(self, chunk_ids: Sequence[str]) -> dict[str, StoredChunk]:
        """The stored chunks of ``chunk_ids`` that Milvus holds (by primary key)."""
        ids = list(dict.fromkeys(chunk_ids))
        if not ids or not self._exists():
            return {}
        out: dict[str, StoredChunk] = {}
        for i in range(0, len(ids), IDS_PER_CALL):
            for r in self.client.query(self.collection, ids=ids[i:i + IDS_PER_CALL],
                                       output_fields=PAYLOAD):
                out[r["id"]] = self._stored(r)
        return out

    @staticmethod
    def _stored(r: dict[str, Any]) -> StoredChunk:
        chunk = Chunk.model_validate(json.loads(r["chunk"]))
        n_windows = int(r["n_windows"])
        windows = _unb64(r["windows"], np.float32)
        dim = len(windows) // n_windows if n_windows else 0
        spans = [(int(a), int(b)) for a, b in json.loads(r["spans"])]
        return StoredChunk(chunk=chunk, doc_id=r["doc_id"], doc_hash=r["doc_hash"],
                           window_vectors=windows.reshape(n_windows, dim),
                           sentence_vectors=_unb64(r["sentences"], np.float16).reshape(len(spans), dim),
                           spans=spans, written_ns=int(r["written_ns"]))

    @_guarded("searching a phrase")
    def phrase(self, text: str, limit: int) -> list[str]:
        """Chunks whose title, headings or text hold ``text``'s words in a row (folded), at
        most ``limit``, by id. Milvus Lite has no ``PHRASE_MATCH``: the folded words are
        stored between spaces and matched with ``like "% w1 w2 %"`` (whole words in a row),
        then checked exactly here."""
        words = fold(text).split()
        if not words or limit <= 0 or not self._exists():
            return []
        phrase = f" {' '.join(words)} "
        like = "%" + like_text(phrase) + "%"
        found = [r["id"] for r in self._iterate(f"words like {literal(like)}", ["id", "words"])
                 if phrase in r["words"]]
        return sorted(found)[:limit]

    @_guarded("listing a field's values")
    def values(self, field: str) -> list[str]:
        """Distinct values of ``doc_type`` or ``source_name``, from the document rows."""
        if field not in ("doc_type", "source_name"):
            raise VectorStoreError(f"values() reads doc_type or source_name, not {field!r}.")
        if not self._exists():
            return []
        got: set[str] = set()
        for r in self._iterate_stats(f"kind == {DOC}", ["key", "info"]):
            got.update(json.loads(r["info"]).get(field, []))
        return sorted(v for v in got if v)

    @_guarded("listing a document's chunks")
    def document_chunks(self, doc_id: str) -> list[str]:
        """The chunk ids of one document."""
        if not self._exists():
            return []
        return sorted(r["id"] for r in self._iterate(f"doc_id == {literal(doc_id)}", ["id"]))

    def every_chunk(self) -> Iterable[StoredChunk]:
        """Every chunk, a page at a time (reads everything: evaluation and tools only)."""
        if not self._exists():
            return
        for r in self._iterate("", PAYLOAD):
            yield self._stored(r)
