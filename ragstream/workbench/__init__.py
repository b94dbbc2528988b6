"""The workbench around a pass: the ``Engine`` that a page, the CLI and the service drive
(``engine``), a model's call replayed and its reply applied as edits (``replay``), every run
kept (``runs``), named conversations and what their turns remember (``conversations``,
``memory``) and the QA log (``qa_log``). It imports ``answering`` and everything below it,
never an interface."""
