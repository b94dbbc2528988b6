#!/usr/bin/env bash
# Set up (if needed) and run the default test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --browser
exec .venv/bin/python -m pytest "$@"
