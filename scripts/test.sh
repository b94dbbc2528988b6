#!/usr/bin/env bash
# Set up (if needed), check style and types, and run the default test suite.
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --browser
echo "==> ruff check"
.venv/bin/ruff check .
echo "==> mypy"
.venv/bin/mypy
exec .venv/bin/python -m pytest "$@"
