"""What every stage declares, once, in its own module (``STAGE = Stage(...)``).

The controller knows stages only through these objects: it runs ``run`` on a copy of the
state, asks each later stage to ``discard`` what it owns before a stage runs again, records
``value`` as ``sp.stage`` and ``recorded`` in ``history_of_stages``, and asks ``mode_of`` what
mode the run used. The page and the CLI's listings call the stage by ``label`` (its one name);
the page takes ``view`` for its table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ragstream.common.config import AppConfig
from ragstream.state.super_prompt import StageValue, SuperPrompt

RunFn = Callable[[SuperPrompt, AppConfig, Any], SuperPrompt]


@dataclass(frozen=True)
class Stage:
    """One pipeline stage: its identity, what it owns, and how it runs."""

    name: str  # "A3_NLI_Gate": what users, the CLI and the history call it
    value: StageValue  # what ``sp.stage`` is after it ran
    label: str  # its one name for people: the page (buttons, tables, messages) and the CLI's listings
    run: RunFn
    discard: Callable[[SuperPrompt], None]  # forget everything this stage wrote, in place
    view: str | None = None  # its key in ``sp.views_by_stage``, if it ranks chunks
    history_value: str | None = None  # what ``history_of_stages`` records, if not ``value``
    mode: Callable[[SuperPrompt], str] | None = None  # the mode it ran in, if not an agent's
    #: what its result depends on besides the stages before it: configuration paths
    #: (``"agents.A3_NLI_Gate"``) and ``staleness.PROMPT`` / ``FILTERS`` / ``KB`` / ``CONVERSATION``
    reads: tuple[str, ...] = ()
    #: whether, under a configuration, the stage calls the model at all when its agent resolves
    #: to LLM mode (A0 only with its semantic fallback on); None: always
    uses_llm: Callable[[AppConfig], bool] | None = None

    @property
    def recorded(self) -> str:
        """The entry this stage adds to ``history_of_stages``."""
        return self.history_value or self.value

    def mode_of(self, sp: SuperPrompt) -> str:
        """The mode of this stage's last run (an agent's ``llm``/``deterministic``, or the
        stage's own, e.g. the ReRanker's backend); empty when it records none."""
        if self.mode is not None:
            return self.mode(sp)
        return sp.extras.mode_of(self.name)
