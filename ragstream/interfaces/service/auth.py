"""Who may use the service (``ragstream serve``, ``ragstream mcp --http``): bearer tokens with
scopes, limited to named knowledge bases, and failed attempts counted and slowed.

**Tokens.** Two sources, both optional, read once at start-up:

* ``$RAGSTREAM_API_TOKEN`` (``--token-env`` names another variable): one token that may do
  everything (read and write, every knowledge base), as before scopes existed;
* a tokens file, ``$RAGSTREAM_API_TOKENS_FILE`` (or ``--tokens-file``), JSON::

      {"tokens": [
        {"name": "open-webui", "token": "…", "scopes": ["read"], "kbs": ["default"]},
        {"name": "ingest-bot", "sha256": "<hex digest of the token>", "scopes": ["read", "write"]}
      ]}

  ``name`` is what the log and the error messages call the token (never its value);
  ``token`` its value, or ``sha256`` the SHA-256 hex digest of its value (the file then holds
  no secret); ``scopes`` ``read`` and/or ``write`` (default: ``["read"]``); ``kbs`` the
  knowledge bases it may use (default: all).

**Scopes.** ``read``: retrieve, answer, the chat route, the schema, listing knowledge bases, the
MCP tools that read. ``write``: ingest, create, rename and delete knowledge bases, the MCP
``ingest`` tool. A token without the scope, or for another knowledge base, is refused with 403
and a message naming the token, the scope or the knowledge base (``ForbiddenError``).

Tokens are compared in constant time (``hmac.compare_digest`` against every token, whatever
matched first). No token's value is logged, stored with a run, traced or put in a message.

**No token off loopback.** ``require_token_off_loopback``: a server on an address other than
loopback refuses to start without a token (``ExposedWithoutTokenError``).

**Failed attempts** (``Failures``): each request without a valid token is counted, per client
address and in total (``/health`` gives the total as ``failed_auth``; the log names the
address and the attempt's number, never what was sent), and its 401 is answered after a delay
that grows with that address's failures in the last ``window_s`` (the first ``free`` are not
delayed, then ``base_s`` doubling up to ``cap_s``). A valid token from the address clears its
count.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import os
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from ragstream.common.errors import (  # noqa: F401 (the service imports them from here)
    ExposedWithoutTokenError,
    ForbiddenError,
    RagstreamError,
    TokenSettingError,
    TokensFileError,
)

Scope = Literal["read", "write"]
SCOPES: tuple[Scope, ...] = ("read", "write")
#: the variable naming the tokens file
TOKENS_FILE_ENV = "RAGSTREAM_API_TOKENS_FILE"
#: the variable holding the full (read and write) token, by default
TOKEN_ENV = "RAGSTREAM_API_TOKEN"
#: how a new token can be made, for the messages
MAKE_TOKEN = "python -c 'import secrets; print(secrets.token_urlsafe(32))'"


@dataclass(frozen=True)
class Grant:
    """What one token may do: its ``name`` (for messages), its ``scopes`` and its knowledge
    bases (``kbs``; None: all)."""

    name: str
    scopes: frozenset[str] = frozenset(SCOPES)
    kbs: frozenset[str] | None = None

    def check(self, scope: Scope, kb: str | None = None, what: str = "") -> None:
        """``ForbiddenError`` unless this token has ``scope`` and may use knowledge base ``kb``."""
        doing = f" {what}" if what else ""
        if scope not in self.scopes:
            has = " and ".join(sorted(self.scopes)) or "none"
            raise ForbiddenError(
                f"The token {self.name!r} has the scope {has}; this request{doing} needs the "
                f"{scope} scope. Use a token with the {scope} scope (a tokens file entry with "
                f"\"scopes\": [\"read\", \"{scope}\"], or $RAGSTREAM_API_TOKEN).")
        if kb is not None and self.kbs is not None and kb not in self.kbs:
            allowed = ", ".join(repr(k) for k in sorted(self.kbs)) or "none"
            raise ForbiddenError(
                f"The token {self.name!r} may use the knowledge bases {allowed}, not {kb!r}. "
                f"Ask for one of those, or use a token whose \"kbs\" include {kb!r}.")

    def may_see(self, kb: str) -> bool:
        """Whether a listing shows knowledge base ``kb`` to this token."""
        return self.kbs is None or kb in self.kbs


#: the grant of a request when the service has no token at all (a loopback service)
OPEN = Grant("no token")


@dataclass(frozen=True)
class _Entry:
    digest: bytes  # SHA-256 of the token's value
    grant: Grant


class Tokens:
    """The tokens a server accepts (``load``). Empty: no token is needed (loopback only)."""

    def __init__(self, entries: Iterable[tuple[str, Grant]] = (),
                 digests: Iterable[tuple[bytes, Grant]] = ()):
        self._entries = [_Entry(_sha256(value), grant) for value, grant in entries]
        self._entries += [_Entry(digest, grant) for digest, grant in digests]

    def __bool__(self) -> bool:
        return bool(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:  # never the values
        return f"Tokens({', '.join(e.grant.name for e in self._entries)})"

    def describe(self) -> str:
        """The tokens in words, by name, scopes and knowledge bases (never their values)."""
        if not self._entries:
            return "no token required (loopback only)"
        names = [e.grant.name for e in self._entries if e.grant.name.startswith("$")]
        sources = " and ".join(names + (["the tokens file"] if len(names) < len(self._entries) else []))
        parts = [f"{e.grant.name} {' and '.join(s for s in SCOPES if s in e.grant.scopes)}"
                 + (f" on {', '.join(sorted(e.grant.kbs))}" if e.grant.kbs is not None else "")
                 for e in self._entries]
        return f"bearer token required (from {sources}): " + "; ".join(parts)

    def authenticate(self, presented: bytes | str) -> Grant | None:
        """The grant of the token ``presented`` (None when it is none of them). Its digest is
        compared with every token's in constant time, whichever matches."""
        if isinstance(presented, str):
            presented = presented.encode("utf-8")
        digest = _sha256(presented)
        found: Grant | None = None
        for entry in self._entries:
            if hmac.compare_digest(digest, entry.digest) and found is None:
                found = entry.grant
        return found

    def from_header(self, value: bytes | str | None) -> Grant | None:
        """The grant of an ``Authorization: Bearer <token>`` header's value (None: missing,
        another scheme, or a wrong token)."""
        if value is None:
            return None
        if isinstance(value, str):
            value = value.encode("latin-1", "replace")
        scheme, _, given = value.partition(b" ")
        given = given.strip()
        if scheme.lower() != b"bearer" or not given:
            return None
        return self.authenticate(given)

    @classmethod
    def load(cls, token_env: str | None = TOKEN_ENV, tokens_file: str | Path | None = None,
             env: Mapping[str, str] | None = None) -> Tokens:
        """The tokens of ``$token_env`` (one full token; set but blank: ``TokenSettingError``)
        and of the tokens file (``tokens_file``, else ``$RAGSTREAM_API_TOKENS_FILE``; a bad
        one: ``TokensFileError``)."""
        env = os.environ if env is None else env
        entries: list[tuple[str, Grant]] = []
        digests: list[tuple[bytes, Grant]] = []
        if token_env:
            value = env.get(token_env)
            if value is not None:
                if not value.strip():
                    raise TokenSettingError(f"${token_env} is set but empty: set it to the token "
                                          f"clients must send, or unset it.")
                entries.append((value.strip(), Grant(f"${token_env}")))
        path = tokens_file or env.get(TOKENS_FILE_ENV) or None
        if path:
            for value, digest, grant in _read_file(Path(path)):
                if value is not None:
                    entries.append((value, grant))
                else:
                    assert digest is not None
                    digests.append((digest, grant))
        return cls(entries, digests)


def _sha256(value: bytes | str) -> bytes:
    return hashlib.sha256(value.encode("utf-8") if isinstance(value, str) else value).digest()


def _read_file(path: Path) -> list[tuple[str | None, bytes | None, Grant]]:
    """The entries of a tokens file (see the module docstring); ``TokensFileError`` naming the
    entry and the field for a bad one (never a token's value)."""
    where = f"The tokens file {path}"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise TokensFileError(f"{where} cannot be read ({err.strerror or err}). Give the path "
                              f"of a JSON file (--tokens-file or ${TOKENS_FILE_ENV}).") from None
    except json.JSONDecodeError as err:
        raise TokensFileError(f"{where} is not JSON (line {err.lineno}, column {err.colno}). "
                              'It holds {"tokens": [{"name", "token", "scopes", "kbs"}, …]}.'
                              ) from None
    items = data.get("tokens") if isinstance(data, dict) else None
    if not isinstance(items, list) or not items:
        raise TokensFileError(f'{where} has no "tokens" list. It holds {{"tokens": [{{"name": '
                              f'"chat", "token": "…", "scopes": ["read"], "kbs": ["default"]}}]}}.')
    out: list[tuple[str | None, bytes | None, Grant]] = []
    names: set[str] = set()
    for i, item in enumerate(items, 1):
        if not isinstance(item, dict):
            raise TokensFileError(f"{where}: entry {i} is not an object.")
        name = item.get("name")
        label = f"entry {i}" + (f" ({name!r})" if isinstance(name, str) and name else "")
        unknown = sorted(set(item) - {"name", "token", "sha256", "scopes", "kbs"})
        if unknown:
            raise TokensFileError(f"{where}: {label} has unknown fields {unknown}; the fields are "
                                  "name, token (or sha256), scopes and kbs.")
        if not isinstance(name, str) or not name.strip():
            raise TokensFileError(f"{where}: {label} needs a \"name\" (what the log calls it).")
        if name in names:
            raise TokensFileError(f"{where}: the name {name!r} is used twice; give each token its own.")
        names.add(name)
        value, digest = item.get("token"), item.get("sha256")
        if (value is None) == (digest is None):
            raise TokensFileError(f"{where}: {label} needs either \"token\" (its value) or "
                                  "\"sha256\" (the hex SHA-256 of its value), not both or neither.")
        if value is not None and (not isinstance(value, str) or len(value.strip()) < 16):
            raise TokensFileError(f"{where}: {label}'s token is shorter than 16 characters. Make "
                                  f"one with: {MAKE_TOKEN}")
        raw: bytes | None = None
        if digest is not None:
            try:
                raw = bytes.fromhex(str(digest))
            except ValueError:
                raw = b""
            if len(raw) != 32:
                raise TokensFileError(f"{where}: {label}'s sha256 is not 64 hex digits.")
        scopes = item.get("scopes", ["read"])
        if (not isinstance(scopes, list) or not scopes
                or any(s not in SCOPES for s in scopes)):
            raise TokensFileError(f"{where}: {label}'s scopes must be a list of \"read\" and "
                                  f"\"write\", not {scopes!r}.")
        kbs = item.get("kbs")
        if kbs is not None and (not isinstance(kbs, list) or not kbs
                                or not all(isinstance(k, str) and k for k in kbs)):
            raise TokensFileError(f"{where}: {label}'s kbs must be a list of knowledge base names "
                                  "(leave it out for all).")
        grant = Grant(name, frozenset(scopes), frozenset(kbs) if kbs is not None else None)
        out.append((value.strip() if value is not None else None, raw, grant))
    return out


# --------------------------------------------------------------------------- exposure


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (``127.0.0.0/8``, ``::1``) or ``localhost``."""
    host = host.strip().strip("[]")
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def require_token_off_loopback(host: str, tokens: Tokens, command: str = "serve",
                               token_env: str = TOKEN_ENV) -> None:
    """``ExposedWithoutTokenError`` when ``host`` is not loopback and there is no token."""
    if tokens or is_loopback(host):
        return
    raise ExposedWithoutTokenError(
        f"Not starting on {host} without a token: anyone who can reach this machine could read, "
        f"ingest and delete the knowledge bases. Set one first, e.g. `export {token_env}=$({MAKE_TOKEN})` "
        f"(clients send it as 'Authorization: Bearer <token>'), or give a tokens file with read-only "
        f"and per-knowledge-base tokens (--tokens-file or ${TOKENS_FILE_ENV}), or serve on "
        f"127.0.0.1 (`ragstream {command} --host 127.0.0.1`).")


# --------------------------------------------------------------------------- failed attempts


@dataclass
class Failures:
    """Failed attempts (no token or a wrong one): counted per client address and in total,
    each answered after ``delay_for`` its address's count."""

    free: int = 3
    base_s: float = 0.25
    cap_s: float = 8.0
    window_s: float = 900.0
    total: int = 0
    last_at: float | None = None
    _by_address: dict[str, tuple[int, float]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def delay_for(self, count: int) -> float:
        """The delay before answering an address's ``count``-th failure in the window."""
        if count <= self.free:
            return 0.0
        return min(self.cap_s, self.base_s * 2 ** (count - self.free - 1))

    def record(self, address: str) -> tuple[int, float]:
        """Count a failure from ``address``: (its failures in the window, the delay to wait)."""
        now = time.monotonic()
        with self._lock:
            count, last = self._by_address.get(address, (0, now))
            count = 1 if now - last > self.window_s else count + 1
            self._by_address[address] = (count, now)
            self.total += 1
            self.last_at = time.time()
            if len(self._by_address) > 10_000:  # forget the oldest addresses
                for key in sorted(self._by_address, key=lambda k: self._by_address[k][1])[:1000]:
                    del self._by_address[key]
        return count, self.delay_for(count)

    def count(self, address: str) -> int:
        """``address``'s failures in the window."""
        with self._lock:
            count, last = self._by_address.get(address, (0, 0.0))
        return count if time.monotonic() - last <= self.window_s else 0

    def clear(self, address: str) -> None:
        """A valid token from ``address``: its count starts again."""
        with self._lock:
            self._by_address.pop(address, None)


def client_address(scope: Mapping) -> str:
    """The client's address of an ASGI HTTP scope ('unknown' when the server gives none)."""
    client = scope.get("client")
    return str(client[0]) if client else "unknown"
