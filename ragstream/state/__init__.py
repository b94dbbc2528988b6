"""A pass's state: the ``SuperPrompt`` and its chunks (``super_prompt``), what every stage
records in it (``records``), a person's edits as typed inputs (``edits``) and the texts the
stages and the answer read from it (``render``). It imports only ``common``."""
