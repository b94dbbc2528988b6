"""What each stage's result was computed from, and whether it still holds.

When a stage runs, the controller records its inputs (``SuperPrompt.computed_from[stage]``):
the prompt text (A0), the configuration it reads (each ``Stage.reads`` path, hashed), the
filters and the knowledge base's fingerprint (Retrieval), the recent conversation
(Prompt_Builder) and the person's edits it applies. A result is *out of date* when any of these
differs from what the stage would read now; every later stage builds on it, so it is out of
date too. The controller refuses to run a stage on top of an out-of-date one
(``StaleResultError``) and auto mode re-runs from the first one; the page marks them and
refuses to answer an out-of-date pass.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from ragstream.agents.base import resolve_mode
from ragstream.common.config import AppConfig
from ragstream.common.errors import ConfigError
from ragstream.state.edits import fingerprint, of_stage
from ragstream.state.records import StageInputs
from ragstream.state.super_prompt import SuperPrompt

#: what a stage may name in ``Stage.reads`` besides configuration paths; ``AGENT``: the
#: stage's agent configuration (``agents.<stage>``, less its ``mode``) and the mode it resolves
#: to now (deterministic, or LLM with which endpoint and model)
PROMPT, FILTERS, KB, CONVERSATION, AGENT = "prompt", "filters", "kb", "conversation", "agent"
#: the earlier questions a follow-up is read with (A0): they matter only to a prompt that is one
FOLLOW_UP = "follow_up"
#: the key under which ``AGENT`` records the resolved mode
LLM_MODE = "llm mode"


def _hash(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:12]


#: the hashes of the configurations seen last (a configuration is never changed in place:
#: ``with_overrides`` makes a new one), each kept with its object so that its id stays its own
_HASHES: OrderedDict[int, tuple[Any, dict[str, Any]]] = OrderedDict()
_HASHES_KEPT = 16
_HASHES_LOCK = threading.Lock()


def _cached(cfg: AppConfig, key: str, make: Any) -> Any:
    """``make()`` for ``cfg`` and ``key``, computed once per configuration object."""
    with _HASHES_LOCK:
        entry = _HASHES.get(id(cfg))
        if entry is None or entry[0] is not cfg:
            entry = (cfg, {})
            _HASHES[id(cfg)] = entry
            while len(_HASHES) > _HASHES_KEPT:
                _HASHES.popitem(last=False)
        hashes = entry[1]
    if key not in hashes:
        hashes[key] = make()
    return hashes[key]


def _setting(cfg: AppConfig, path: str) -> str:
    def make() -> str:
        value = cfg.get(path)
        return _hash(value.model_dump(mode="json") if isinstance(value, BaseModel) else value)

    return _cached(cfg, path, make)


def kb_fingerprint(services) -> str | None:
    """What Retrieval searches, as one string: the knowledge base's name and fingerprint
    (renewed by every write to its store), then `` + `` and the conversation memory's
    fingerprint when one is searched with it (``Services.memory``); None when the store
    cannot be read (no store, or the store is unreachable: nothing can be said)."""
    store = getattr(services, "store", None)
    if store is None:
        return None
    try:
        kb = f"{getattr(services, 'kb_name', 'default')}@{store.fingerprint()}"
    except Exception:  # an unreadable store says nothing; the stage that reads it will fail
        return None
    memory = getattr(services, "memory", None)
    return f"{kb}{MEMORY_JOIN}{memory.fingerprint}" if memory is not None else kb


#: between the knowledge base's part and the conversation memory's in ``kb_fingerprint``
MEMORY_JOIN = " + "


def _conversation(memory: str) -> str:
    """The conversation's name in a memory fingerprint (``conversation NAME: …``), or ""."""
    return memory.removeprefix("conversation ").partition(":")[0] if memory else ""


def _kb_changes(was: str | None, now: str) -> list[str]:
    """In words, how what Retrieval searched changed (``kb_fingerprint``'s two strings)."""
    was_kb, _, was_memory = (was or "").partition(MEMORY_JOIN)
    now_kb, _, now_memory = now.partition(MEMORY_JOIN)
    out = []
    now_name = now_kb.partition("@")[0]
    if "@" not in was_kb:  # recorded before knowledge bases had names: the default's stamp
        was_kb = f"default@{was_kb}"
    was_name = was_kb.partition("@")[0]
    if was_name != now_name:
        out.append(f"another knowledge base is chosen: {was_name} → {now_name}")
    elif was_kb != now_kb:
        out.append("the knowledge base changed (documents were ingested or removed)")
    if was_memory != now_memory:
        was_conv, now_conv = _conversation(was_memory), _conversation(now_memory)
        out.append(f"another conversation is searched: {was_conv} → {now_conv}"
                   if was_conv and now_conv and was_conv != now_conv else
                   "the conversation's memory changed (a turn was added or forgotten)")
    return out


def follow_up_key(sp: SuperPrompt, cfg: AppConfig) -> str | None:
    """What A0 reads to read a follow-up: the earlier questions, and the model that reads it
    when A0 runs in LLM mode, when the prompt is a follow-up (``stages.a0.reading.
    is_follow_up``) and there are earlier questions; None otherwise, so a new turn in the
    conversation, or another endpoint, leaves a self-contained prompt's pass current."""
    from ragstream.stages.a0.reading import is_follow_up

    earlier = [t.user for t in sp.recent_conversation if t.user.strip()]
    if not earlier or not is_follow_up(sp.user_text):
        return None
    reader = "rule"
    if cfg.settings.llm.base_url:
        try:
            if resolve_mode(cfg.agents.A0_PreProcessing, cfg, llm_available=True).mode == "llm":
                reader = "llm " + _hash(cfg.settings.llm.model_dump(mode="json"))
        except ConfigError:
            reader = "unavailable"
    return _hash([earlier, reader])


def inputs_of(stage: str, reads: Sequence[str], sp: SuperPrompt, cfg: AppConfig,
              kb: str | None, uses_llm: Callable[[AppConfig], bool] | None = None) -> StageInputs:
    """What ``stage`` reads now (its ``Stage.reads``): from ``sp`` (prompt, filters,
    conversation, edits), ``cfg`` and the knowledge base's fingerprint ``kb``; ``uses_llm``:
    the stage's own say on whether it calls the model at all (``Stage.uses_llm``)."""
    fields: dict[str, Any] = {"edits": fingerprint(of_stage(sp.edits, stage))}
    settings: dict[str, str] = {}
    for path in reads:
        if path == PROMPT:
            fields["prompt"] = _hash(sp.user_text)
        elif path == FILTERS:
            fields["filters"] = sp.filters.describe()
        elif path == KB:
            fields["kb"] = kb
        elif path == CONVERSATION:
            fields["conversation"] = _hash([t.model_dump() for t in sp.recent_conversation])
        elif path == FOLLOW_UP:
            fields["conversation"] = follow_up_key(sp, cfg)
        elif path == AGENT:
            settings.update(_cached(cfg, f"{AGENT}:{stage}", lambda: _agent(stage, cfg, uses_llm)))
        else:
            settings[path] = _setting(cfg, path)
    return StageInputs(settings=settings, **fields)


def _agent(name: str, cfg: AppConfig, uses_llm: Callable[[AppConfig], bool] | None) -> dict[str, str]:
    """An agent stage's configuration (less ``mode``: a mode that resolves the same way gives
    the same result) and the mode it resolves to: ``deterministic`` (also when the stage calls
    no model under ``cfg``), or ``llm`` with a hash of the endpoint's settings."""
    acfg = getattr(cfg.agents, name)
    out = {f"agents.{name}": _hash(acfg.model_dump(mode="json", exclude={"mode"}))}
    if uses_llm is not None and not uses_llm(cfg):
        out[LLM_MODE] = "deterministic"
        return out
    try:
        mode = resolve_mode(acfg, cfg, llm_available=bool(cfg.settings.llm.base_url)).mode
    except ConfigError:
        mode = "unavailable"
    out[LLM_MODE] = mode if mode != "llm" else "llm " + _hash(cfg.settings.llm.model_dump(mode="json"))
    return out


def differences(was: StageInputs, now: StageInputs) -> list[str]:
    """What changed between the inputs a result was computed from and today's, in words."""
    out: list[str] = []
    if was.prompt != now.prompt:
        out.append("the prompt text changed")
    changed = sorted(k for k in set(was.settings) | set(now.settings)
                     if was.settings.get(k) != now.settings.get(k) and k != LLM_MODE)
    if changed:
        out.append(f"settings changed: {', '.join(changed)}")
    if was.settings.get(LLM_MODE) != now.settings.get(LLM_MODE):
        out.append(f"the agent's mode changed: {_mode(was)} → {_mode(now)}")
    if was.filters != now.filters:
        out.append(f"the filters changed: {was.filters} → {now.filters}")
    if was.kb != now.kb and now.kb is not None:
        out.extend(_kb_changes(was.kb, now.kb))
    if was.conversation != now.conversation:
        out.append("the conversation changed")
    if was.edits != now.edits:
        out.append("your edits changed")
    return out


def _mode(inputs: StageInputs) -> str:
    mode = inputs.settings.get(LLM_MODE, "")
    return "LLM (another endpoint or model)" if mode.startswith("llm ") else mode or "none"


@dataclass(frozen=True)
class Stale:
    """The first stage whose result is out of date, its place in the pipeline and why."""

    index: int
    stage: str
    reasons: list[str]

    def describe(self) -> str:
        """``Retrieval is out of date: the filters changed: none → doc_type=faq``."""
        return f"{self.stage} is out of date: {'; '.join(self.reasons)}"
