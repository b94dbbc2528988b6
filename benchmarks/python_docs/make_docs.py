"""Gather ten pages of the Python 3.11 manual, as Debian installs it, for the ``python`` answer
set (``benchmarks/python_docs/questions.json``: a Python developer's own knowledge base of the
manual's pages, a held-out set in the style of ``benchmarks/apache_docs``):

    sudo apt-get install python3.11-doc        # or: scripts/setup.sh --browser
    .venv/bin/python benchmarks/python_docs/make_docs.py
    .venv/bin/python -m ragstream eval --answers benchmarks/answers/kb.json \\
        --answers benchmarks/python_docs/questions.json --against others

- ten HTML pages of ``python3.11-doc``'s manual (``/usr/share/doc/python3.11/html/``), the
  Sphinx-made pages copied as they are (navigation bars, sidebar with the page's table of
  contents and "This Page" box, "¶" header links, copyright footer included), named by their
  file name, with the folder's name before it where the name alone says little or two pages
  share it (``howto/logging.html`` → ``howto_logging.html``, ``tutorial/venv.html`` →
  ``tutorial_venv.html``);
- library reference pages with how-to content (``logging.config``, ``venv``, ``json``,
  ``argparse``, ``sqlite3``, ``pathlib``, ``subprocess``, ``csv``), one HOWTO (logging) and one
  tutorial chapter (virtual environments and packages).

The files are written to ``benchmarks/python_docs/docs/`` (not committed: their licence is
the package's, the PSF License; the ``.gitignore`` there keeps them out and itself in, so the
folder the question set names exists in a checkout). ``make(folder)`` does the same for tests
and makes a file again only when it is missing or the package changed its source.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
if __name__ == "__main__" and str(ROOT) not in sys.path:  # run as a script
    sys.path.insert(0, str(ROOT))

from benchmarks.manual_pages import MissingPackages, main_for, make_pages  # noqa: E402,F401

OUT = HERE / "docs"
MANUAL = Path("/usr/share/doc/python3.11/html")
PACKAGE = "python3.11-doc"

#: file in the docs folder -> page of the manual (relative to MANUAL), copied as it is
HTML = {
    "logging.config.html": "library/logging.config.html",
    "howto_logging.html": "howto/logging.html",
    "venv.html": "library/venv.html",
    "tutorial_venv.html": "tutorial/venv.html",
    "json.html": "library/json.html",
    "argparse.html": "library/argparse.html",
    "sqlite3.html": "library/sqlite3.html",
    "pathlib.html": "library/pathlib.html",
    "subprocess.html": "library/subprocess.html",
    "csv.html": "library/csv.html",
}
FILES = dict(HTML)
#: the docs folder's ``.gitignore``: every copied page left out, itself kept
GITIGNORE = "*\n!.gitignore\n"


def missing() -> list[str]:
    """The Debian packages (``apt-get install`` names) that are needed and not installed."""
    if not all((MANUAL / page).is_file() for page in FILES.values()):
        return [PACKAGE]
    return []


def _copy(name: str, source: Path, target: Path) -> str:
    shutil.copyfile(source, target)
    return ""


def make(out_dir: Path = OUT, verbose: bool = False) -> Path:
    """The ten documents in ``out_dir`` (copied when any is missing); returns ``out_dir``.
    Raises ``MissingPackages`` naming the Debian package to install."""
    return make_pages(out_dir, {name: MANUAL / page for name, page in FILES.items()}, missing,
                      _copy, GITIGNORE, verbose, hint="or scripts/setup.sh --browser")


if __name__ == "__main__":
    raise SystemExit(main_for(make, OUT, len(FILES)))
