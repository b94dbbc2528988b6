"""The model-backed agents the stages call (A0, A2, A3, A4, A5 and the answer): the agent
stack from a JSON config to the LLM client (``factory``), choosing and saying the mode that
ran (``base``), the replies' schemas (``replies``, ``choices``) and each call's trace
(``trace``). It imports ``backends``, ``state`` and ``common``."""
