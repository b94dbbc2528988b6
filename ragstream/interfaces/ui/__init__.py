"""The Streamlit page's helpers: what it draws, and what it draws from.

``ui_streamlit.py`` is the page's layout only; it calls the drawing modules, each named for
the part of the page it draws: ``page`` (the engines, the session, what the main area works
out as it draws), ``sidebar``, ``prompt_area`` (the prompt, the run and stage buttons, the
edits), ``answer_area`` (the answer, its sources, the conversation, prompt_ready), the result
tabs (``chunk_tabs``, ``edit_tabs``, ``trace_tabs``, ``comparison_tabs``), ``llm_status``'s
sidebar block, and ``widgets`` (the tables, pickers and buttons several of them use).

They draw what the pure modules work out: ``state`` (session keys, created in one place),
``views`` (a SuperPrompt turned into the page's labels, buttons and table rows), ``grids``
(a table's cells fitted to its columns), ``chunk_moves`` (a chunk's journey, two stages
compared), ``charts``, ``editing``, ``evidence``, ``citations``, ``answer_view``,
``inspector``, ``runs_tab``, ``eval_tab``, ``knowledge``, ``conversation``; and they do what
the actions do: ``actions`` (running stages, answering, settings), ``ingesting`` (uploads and
folders), ``edit_actions`` (the edit controls, the replay) — each catching RagstreamError so
the page shows a message and keeps its state. ``compare`` compares two runs; ``page_bench``
times the page's clicks.
"""
