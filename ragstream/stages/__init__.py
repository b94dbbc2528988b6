"""The stages and what drives them: the eight stages in pipeline order (``STAGES``; each
module declares its ``STAGE``), the ``Stage`` protocol (``stage``), what each result was
computed from (``staleness``), what ranks a conversation's turns after the documents
(``sources``) and the controller that runs them in order (``controller``). A stage imports
``agents``, ``backends``, ``state`` and ``common``, never the workbench around a pass."""

from ragstream.stages import (
    a0_preprocessing,
    a2_prompt_shaper,
    a3_nli_gate,
    a4_condenser,
    a5_format_enforcer,
    prompt_builder,
    reranker,
    retrieval,
)
from ragstream.stages.stage import Stage

STAGES: tuple[Stage, ...] = (
    a0_preprocessing.STAGE,
    a2_prompt_shaper.STAGE,
    retrieval.STAGE,
    reranker.STAGE,
    a3_nli_gate.STAGE,
    a4_condenser.STAGE,
    a5_format_enforcer.STAGE,
    prompt_builder.STAGE,
)

__all__ = ["STAGES", "Stage"]
