"""The ground floor every room stands on: configuration (``config``), typed errors
(``errors``), text and Markdown helpers (``text``, ``markdown``) and the prompt's schema
(``prompt_schema``). It imports nothing else of RAGstream."""
