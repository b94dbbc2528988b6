#!/usr/bin/env bash
# Set up (if needed) and start the RAGstream page on the bundled knowledge base.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
PORT=${PORT:-8501}
exec .venv/bin/python -m streamlit run ui_streamlit.py --server.port "$PORT" "$@"
