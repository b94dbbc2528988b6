"""The ways in: the command line (``cli``, with ``doctor``), the HTTP, OpenAI-compatible and
MCP service (``service``) and the page's helpers (``ui``; the page itself is
``ui_streamlit.py`` at the repository's top). The CLI may use the service's and the page's
helpers; the service and the page never import each other or the CLI. Nothing below imports
an interface."""
