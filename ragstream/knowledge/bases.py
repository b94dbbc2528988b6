"""Named knowledge bases: each with its own documents folder, Chroma collection and index.

    kbs = KnowledgeBases(cfg)
    kbs.create("support", folder="~/support-docs")   # or no folder: one is made for it
    kbs.names()            # ['default', 'support']
    cfg_support = kbs.get("support").config(cfg)     # the config an Engine for it runs with
    kbs.rename("support", "helpdesk")
    kbs.delete("helpdesk")  # its collection, keyword index and (own) folder; nothing else

The bundled documents are the ``default`` knowledge base: the configured ``paths.kb_dir`` and
``vector_store.collection``. It is never written to the registry and cannot be renamed or
deleted. Every other one is a line of ``<index_dir>/knowledge_bases.json`` (written whole:
a temporary file, then a rename): its name, the collection it was given when it was made
(``kb-<slug>-<6 hex>``: a rename changes the name only, so its index stays where it is), its
folder, whether RAGstream made that folder (then it is the knowledge base's own and goes with
it; a folder the person named is never deleted) and when it was made.

A knowledge base's keyword index is ``<index_dir>/keyword-<collection>/``, as the default's;
the Q&A log, the run history and the conversations are shared (each run records the knowledge
base it ran against).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import threading
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from ragstream.common.config import AppConfig
from ragstream.common.errors import KnowledgeBaseError, KnowledgeBaseNotFoundError

DEFAULT = "default"
REGISTRY_FILE = "knowledge_bases.json"
#: a name: a letter or digit, then letters, digits, spaces, dots, dashes or underscores
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._-]{0,39}$")
NAME_RULE = ("1 to 40 characters: letters, digits, spaces, '.', '-' or '_', starting with a "
             "letter or digit")
_LOCK = threading.Lock()


class KnowledgeBase(BaseModel):
    """One knowledge base: its name, collection, documents folder and whether the folder is its own."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    collection: str
    folder: str
    own_folder: bool = False
    created_at: str = ""

    @property
    def is_default(self) -> bool:
        """True for the bundled one (the configured folder and collection)."""
        return self.name == DEFAULT

    def config(self, cfg: AppConfig) -> AppConfig:
        """``cfg`` (the configuration of the default knowledge base) for this one: its folder
        as ``paths.kb_dir`` (and, unless it is the default, as the folder uploads are kept in)
        and its collection."""
        if self.is_default:
            return cfg
        return cfg.with_overrides({"settings.paths.kb_dir": self.folder,
                                   "settings.paths.uploads_dir": self.folder,
                                   "settings.vector_store.collection": self.collection})


def check_name(name: str) -> str:
    """``name`` without surrounding spaces, or ``KnowledgeBaseError`` saying what a name may be."""
    clean = " ".join(str(name).split())
    if not NAME_PATTERN.match(clean):
        raise KnowledgeBaseError(f"{name!r} cannot be a knowledge base's name: use {NAME_RULE}.")
    return clean


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:30] or "kb"


class KnowledgeBases:
    """The registry of named knowledge bases beside the default one (see the module docstring)."""

    def __init__(self, cfg: AppConfig):
        self.cfg = cfg
        self.path = cfg.index_dir / REGISTRY_FILE

    # -- reading ------------------------------------------------------------------------

    def default(self) -> KnowledgeBase:
        """The bundled knowledge base: the configured folder and collection."""
        return KnowledgeBase(name=DEFAULT, collection=self.cfg.settings.vector_store.collection,
                             folder=str(self.cfg.kb_dir))

    def _read(self) -> list[KnowledgeBase]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as err:
            raise KnowledgeBaseError(
                f"The knowledge base registry {self.path} cannot be read ({err}). Fix or move the "
                f"file away (the knowledge bases' collections and folders are not touched; "
                f"create them again under their names to use them).") from err
        try:
            return [KnowledgeBase.model_validate(k) for k in data.get("knowledge_bases", [])]
        except Exception as err:
            raise KnowledgeBaseError(
                f"The knowledge base registry {self.path} holds a malformed entry ({err}). Fix or "
                f"move the file away.") from err

    def _write(self, kbs: list[KnowledgeBase]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"knowledge_bases": [k.model_dump() for k in kbs]}, indent=2,
                                  ensure_ascii=False), encoding="utf-8")
        os.replace(tmp, self.path)

    def all(self) -> list[KnowledgeBase]:
        """The default knowledge base, then the others by name."""
        return [self.default(), *sorted(self._read(), key=lambda k: k.name.lower())]

    def names(self) -> list[str]:
        """Every knowledge base's name, the default first."""
        return [k.name for k in self.all()]

    def find(self, name: str) -> KnowledgeBase | None:
        """The knowledge base called ``name`` (any case), or None."""
        wanted = " ".join(str(name).split()).lower()
        return next((k for k in self.all() if k.name.lower() == wanted), None)

    def get(self, name: str | None) -> KnowledgeBase:
        """The knowledge base called ``name`` (None or "": the default); ``KnowledgeBaseError``
        naming the ones there are when there is none."""
        kb = self.find(name or DEFAULT)
        if kb is None:
            raise KnowledgeBaseNotFoundError(
                f"There is no knowledge base {name!r}. There are: {', '.join(self.names())}. "
                f"Make one with `python -m ragstream kb create {name!r}`.")
        return kb

    # -- changing -------------------------------------------------------------------------

    def create(self, name: str, folder: str | Path | None = None) -> KnowledgeBase:
        """Register a new knowledge base ``name`` with ``folder`` as its documents folder (made
        when missing; None: a folder of its own under ``paths.kbs_dir``) and a new collection."""
        name = check_name(name)
        with _LOCK:
            if self.find(name) is not None:
                raise KnowledgeBaseError(f"A knowledge base called {name!r} exists already: pick "
                                         f"another name, or delete that one first.")
            own = folder is None or str(folder).strip() == ""
            if own:
                path = self.cfg.kbs_dir / _slug(name)
                n = 2
                while path.exists():  # a folder left by a deleted one with the same name
                    path = self.cfg.kbs_dir / f"{_slug(name)}-{n}"
                    n += 1
            else:
                path = Path(str(folder)).expanduser().resolve()
                if path.exists() and not path.is_dir():
                    raise KnowledgeBaseError(f"{path} is a file, not a folder: give the folder "
                                             f"that holds (or will hold) the documents.")
                taken = next((k.name for k in self.all() if Path(k.folder).resolve() == path), None)
                if taken is not None:
                    raise KnowledgeBaseError(
                        f"{path} is already the folder of knowledge base {taken!r}: give another "
                        f"folder (two knowledge bases never share documents).")
            try:
                path.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise KnowledgeBaseError(f"Cannot make the folder {path} ({err}): give a folder "
                                         f"you can write to.") from err
            kb = KnowledgeBase(
                name=name, collection=f"kb-{_slug(name)}-{secrets.token_hex(3)}", folder=str(path),
                own_folder=own, created_at=datetime.now(UTC).isoformat(timespec="seconds"))
            self._write([*self._read(), kb])
            return kb

    def rename(self, name: str, new_name: str) -> KnowledgeBase:
        """Give knowledge base ``name`` the name ``new_name`` (its documents, collection and
        index stay where they are)."""
        new_name = check_name(new_name)
        with _LOCK:
            kb = self.get(name)
            if kb.is_default:
                raise KnowledgeBaseError("The default knowledge base (the bundled documents) "
                                         "keeps its name: create another one instead.")
            other = self.find(new_name)
            if other is not None and other.name != kb.name:
                raise KnowledgeBaseError(f"A knowledge base called {other.name!r} exists already: "
                                         f"pick another name.")
            renamed = kb.model_copy(update={"name": new_name})
            self._write([renamed if k.name == kb.name else k for k in self._read()])
            return renamed

    def removes_folder(self, kb: KnowledgeBase) -> bool:
        """Whether deleting ``kb`` removes its documents folder: only one RAGstream made for it
        (under ``kbs_dir``); a folder the person named is never touched."""
        return kb.own_folder and Path(kb.folder).resolve().is_relative_to(self.cfg.kbs_dir.resolve())

    def delete(self, name: str, services=None) -> KnowledgeBase:
        """Delete knowledge base ``name``: its collection (through ``services.store`` when given,
        else a store opened for it), its keyword index, its folder when it is its own, and its
        line in the registry. No other knowledge base's files are touched."""
        from ragstream.backends.services import open_store

        with _LOCK:
            kb = self.get(name)
            if kb.is_default:
                raise KnowledgeBaseError("The default knowledge base (the bundled documents) cannot "
                                         "be deleted.")
            cfg = kb.config(self.cfg)
            store = services.store if services is not None else open_store(cfg)
            store.drop()  # the collection and its keyword index
            if self.removes_folder(kb):
                shutil.rmtree(Path(kb.folder), ignore_errors=True)
            self._write([k for k in self._read() if k.name != kb.name])
            return kb
