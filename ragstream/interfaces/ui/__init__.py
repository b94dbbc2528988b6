"""Everything the Streamlit page needs that is not drawing: session state, tables, actions.

``ui_streamlit.py`` draws and dispatches; it calls into ``state`` (session keys, created in one
place), ``views`` (pure functions turning a SuperPrompt into table rows) and ``actions``
(running stages, ingesting uploads, applying settings — each catching RagstreamError so the
page shows a message and keeps its state).
"""
