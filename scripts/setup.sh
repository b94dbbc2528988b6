#!/usr/bin/env bash
# Set up RAGstream on a fresh machine: a .venv in the repo, torch (CPU build) first, the pinned
# requirements, the offline tokenizer files; with --browser also Debian's chromium for the
# browser tests. Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

want_browser=0
for arg in "$@"; do
  case "$arg" in
    --browser) want_browser=1 ;;
    *) echo "usage: scripts/setup.sh [--browser]" >&2; exit 2 ;;
  esac
done

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "==> creating .venv"
  "$PY" -m venv .venv
fi
VPY=.venv/bin/python

# torch first: the CPU build lies on this machine's disk; asked for by sentence-transformers
# without it, pip would fetch a multi-GB CUDA build.
if ! "$VPY" -c "import torch" 2>/dev/null; then
  echo "==> installing torch (CPU)"
  "$VPY" -m pip install --quiet torch==2.13.0
fi
echo "==> installing requirements.txt (pinned; quick when already satisfied)"
"$VPY" -m pip install --quiet -r requirements.txt

echo "==> preparing offline model and tokenizer files"
"$VPY" -m ragstream.doctor

if [ "$want_browser" = 1 ] && ! command -v chromium >/dev/null 2>&1; then
  echo "==> installing Debian chromium for the browser tests"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi
echo "==> setup done"
