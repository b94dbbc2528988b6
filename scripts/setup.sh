#!/usr/bin/env bash
# Set up RAGstream on a fresh machine: a .venv in the repo, torch (CPU build) first, the pinned
# requirements, the offline tokenizer files; with --browser also Debian's chromium, nodejs-doc
# and libtasn1-doc for the tests. Safe to run again: it only installs what is missing.
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
# the `ragstream` command (.venv/bin/ragstream): this checkout, editable, nothing downloaded
if [ ! -x .venv/bin/ragstream ] || ! .venv/bin/ragstream --help >/dev/null 2>&1; then
  echo "==> installing the ragstream command"
  "$VPY" -m pip install --quiet --no-deps --no-build-isolation -e .
fi

echo "==> preparing offline model and tokenizer files"
"$VPY" -m ragstream.interfaces.doctor

# the tests' Debian packages: chromium (the page's browser tests, and printing web pages to
# PDF as people do), LibreOffice Writer (a word processor's "Export as PDF"), nodejs-doc and
# libtasn1-doc (documents nobody here wrote: Node.js's API pages as HTML and Markdown, a
# TeX-made manual as PDF, for the converter tests), apache2-doc and python3.11-doc (two more
# HTML manuals: the Apache HTTP Server's, for the answer tests, and Python's Sphinx-made one),
# pandoc (a page converted to Word as people do)
if [ "$want_browser" = 1 ]; then
  missing=""
  command -v chromium >/dev/null 2>&1 || missing="$missing chromium"
  [ -f /usr/share/doc/nodejs/api/path.html ] || missing="$missing nodejs-doc"
  [ -f /usr/share/doc/libtasn1-doc/libtasn1.pdf ] || missing="$missing libtasn1-doc"
  [ -f /usr/share/doc/apache2-doc/manual/en/howto/reverse_proxy.html ] || missing="$missing apache2-doc"
  [ -f /usr/share/doc/python3.11/html/library/json.html ] || missing="$missing python3.11-doc"
  command -v soffice >/dev/null 2>&1 || missing="$missing libreoffice-writer-nogui"
  command -v pandoc >/dev/null 2>&1 || missing="$missing pandoc"
  if [ -n "$missing" ]; then
    echo "==> installing Debian packages for the tests:$missing"
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
  fi
fi
echo "==> setup done"
