"""Gather fourteen pages of the Apache HTTP Server manual, as Debian installs it, for the
``apache`` answer set (``benchmarks/apache_docs/questions.json``, issue 45: an ops engineer's
own knowledge base of the manual's pages, one of them printed to PDF, one converted to Word):

    sudo apt-get install apache2-doc chromium pandoc
    .venv/bin/python benchmarks/apache_docs/make_docs.py
    .venv/bin/python -m ragstream eval --answers benchmarks/apache_docs/questions.json

- twelve HTML pages of ``apache2-doc``'s English manual
  (``/usr/share/doc/apache2-doc/manual/en/``), copied as they are (navigation bar, "Available
  Languages", table of contents, comments box and copyright footer included), named by their
  file name, with the folder's name before it where the name alone says little
  (``vhosts/examples.html`` → ``vhosts_examples.html``, ``rewrite/remapping.html`` →
  ``rewrite_remapping.html``);
- ``rewrite_avoid.pdf``: ``rewrite/avoid.html`` ("When not to use mod_rewrite") printed by
  headless Chromium from where the package installed it (its style sheets apply), with the
  document outline from its headings, as "Save as PDF" does;
- ``configuring.docx``: ``configuring.html`` ("Configuration Files") converted by pandoc
  (``pandoc configuring.html -o configuring.docx``), as a person turning a web page into a
  Word document does.

Not ``bind.html``: Debian's ``en/bind.html`` (2.4.68-1~deb12u1) is the Portuguese page.

The files are written to ``benchmarks/apache_docs/docs/`` (not committed: their licence is
the package's; a ``.gitignore`` there keeps them out). ``make(folder)`` does the same for
tests, and makes a file again only when it is missing or the package changed its source.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
if __name__ == "__main__" and str(ROOT) not in sys.path:  # run as a script
    sys.path.insert(0, str(ROOT))

from benchmarks.manual_pages import MissingPackages, main_for, make_pages  # noqa: E402,F401

OUT = HERE / "docs"
MANUAL = Path("/usr/share/doc/apache2-doc/manual/en")
CHROMIUM = "/usr/bin/chromium"

#: file in the docs folder -> page of the manual (relative to MANUAL), copied as it is
HTML = {
    "reverse_proxy.html": "howto/reverse_proxy.html",
    "rewrite_remapping.html": "rewrite/remapping.html",
    "name-based.html": "vhosts/name-based.html",
    "vhosts_examples.html": "vhosts/examples.html",
    "htaccess.html": "howto/htaccess.html",
    "logs.html": "logs.html",
    "ssl_howto.html": "ssl/ssl_howto.html",
    "auth.html": "howto/auth.html",
    "urlmapping.html": "urlmapping.html",
    "custom-error.html": "custom-error.html",
    "access.html": "howto/access.html",
    "stopping.html": "stopping.html",
}
#: printed to PDF by Chromium
PDF = {"rewrite_avoid.pdf": "rewrite/avoid.html"}
#: converted to DOCX by pandoc
DOCX = {"configuring.docx": "configuring.html"}
FILES = {**HTML, **PDF, **DOCX}


def missing() -> list[str]:
    """The Debian packages (``apt-get install`` names) that are needed and not installed."""
    out = []
    if not all((MANUAL / page).is_file() for page in FILES.values()):
        out.append("apache2-doc")
    if not Path(CHROMIUM).is_file():
        out.append("chromium")
    if not shutil.which("pandoc"):
        out.append("pandoc")
    return out


def print_pdf(page: Path, target: Path) -> None:
    """``page`` printed to ``target`` by headless Chromium (the project's one way of doing it)."""
    from benchmarks.pdf_print.make_pdfs import print_chromium

    print_chromium(page, target)


def to_docx(page: Path, target: Path) -> None:
    """``page`` converted to ``target`` by pandoc, run beside the page (its images found)."""
    subprocess.run(["pandoc", page.name, "-o", str(target)], check=True, cwd=page.parent,
                   capture_output=True, timeout=180)


def _write(name: str, source: Path, target: Path) -> str:
    """One document: printed by Chromium, converted by pandoc, or copied; says how."""
    if name in PDF:
        print_pdf(source, target)
        return " (Chromium)"
    if name in DOCX:
        to_docx(source, target)
        return " (pandoc)"
    shutil.copyfile(source, target)
    return ""


def make(out_dir: Path = OUT, verbose: bool = False) -> Path:
    """The fourteen documents in ``out_dir`` (made when any is missing); returns ``out_dir``.
    Raises ``MissingPackages`` naming the Debian packages to install."""
    return make_pages(out_dir, {name: MANUAL / page for name, page in FILES.items()}, missing,
                      _write, "*\n", verbose)


if __name__ == "__main__":
    raise SystemExit(main_for(make, OUT, len(FILES)))
