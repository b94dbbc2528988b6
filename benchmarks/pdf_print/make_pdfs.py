"""Print real web pages to PDF the way people save them, beside their sources, for
``heading_share.py`` (issue 32: a printed page's headings came after the sections they title):

    sudo apt-get install chromium nodejs-doc libtasn1-doc
    sudo apt-get install libreoffice-writer-nogui          # optional: the second producer
    .venv/bin/python -m benchmarks.pdf_print.make_pdfs
    .venv/bin/python -m benchmarks.pdf_print.heading_share

- ``pdf/<page>.pdf``: twelve Node.js API pages of moderate size (``nodejs-doc``'s
  ``/usr/share/doc/nodejs/api/<page>.html``) printed by headless Chromium with the document
  outline from their headings, no header or footer (``chromium --headless --no-sandbox
  --disable-gpu --no-pdf-header-footer --generate-pdf-document-outline --print-to-pdf=…``);
- ``pdf/<page>.libreoffice.pdf``: the first four of them converted by LibreOffice Writer/Web
  (``soffice --headless --convert-to pdf``, bookmarks from the headings), when ``soffice`` is
  installed;
- ``pdf/libtasn1.pdf``: the TeX-made libtasn1 manual (``libtasn1-doc``), a function reference;
- ``html/<page>.html``: the printed pages; ``html/libtasn1-libtasn1.html``: libtasn1's gtk-doc
  API reference (one section per function), the reference for the manual's function entries;
- ``md/<page>.md``: each Node.js page's Markdown source (its ``.md.gz``, unpacked, or its ``.md``);
- ``node/{pdf,html,md}/``: the twelve Node.js pages alone in each form (hard links), the
  documents of the answer sets ``benchmarks/answers/node-{pdf,html,md}.json``.

Everything goes to ``benchmarks/pdf_print/docs/`` (not committed: the pages' licences are
their packages'; a ``.gitignore`` there keeps them out). Node.js pages are printed from where
the package installed them, so that their style sheet applies.
"""

from __future__ import annotations

import gzip
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

OUT = Path(__file__).resolve().parent / "docs"
CHROMIUM = "/usr/bin/chromium"
NODE_API = Path("/usr/share/doc/nodejs/api")
TASN1_PDF = Path("/usr/share/doc/libtasn1-doc/libtasn1.pdf")
TASN1_HTML = Path("/usr/share/gtk-doc/html/libtasn1/libtasn1-libtasn1.html")
#: Node.js API pages of moderate size (20–150 KB of HTML; fs, buffer and util are larger)
PAGES = ("path", "events", "url", "querystring", "os", "timers", "readline", "string_decoder",
         "dns", "assert", "console", "punycode")
#: the pages LibreOffice converts too
LIBREOFFICE_PAGES = PAGES[:4]


def node_markdown(name: str) -> str:
    """A Node.js page's Markdown source as ``nodejs-doc`` installs it (most as ``.md.gz``, a
    few not compressed: ``string_decoder.md``)."""
    source = NODE_API / f"{name}.md"
    if source.is_file():
        return source.read_text(encoding="utf-8")
    return gzip.decompress((NODE_API / f"{name}.md.gz").read_bytes()).decode("utf-8")


def print_chromium(page: Path, target: Path) -> None:
    """``page`` printed to ``target`` by headless Chromium, as "Save as PDF" does."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                        "--disable-background-networking", f"--user-data-dir={tmp}/profile",
                        "--no-pdf-header-footer", "--generate-pdf-document-outline",
                        f"--print-to-pdf={target}", page.as_uri()],
                       check=True, capture_output=True, timeout=180)


def print_libreoffice(page: Path, folder: Path) -> Path:
    """``page`` converted to PDF by LibreOffice (bookmarks from its headings): a web page by
    Writer/Web, a word processor's document (``.docx``, ``.odt``) by Writer, as "Export as
    PDF" does."""
    export = "writer_web_pdf_Export" if page.suffix.lower() in (".html", ".htm") else "writer_pdf_Export"
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["soffice", f"-env:UserInstallation=file://{tmp}/profile", "--headless",
                        "--convert-to",
                        f'pdf:{export}:{{"ExportBookmarks":{{"type":"boolean","value":"true"}}}}',
                        "--outdir", tmp, str(page)], check=True, capture_output=True, timeout=300)
        target = folder / f"{page.stem}.libreoffice.pdf"
        shutil.move(Path(tmp) / f"{page.stem}.pdf", target)
    return target


def main() -> int:
    missing = [pkg for pkg, path in (("chromium", Path(CHROMIUM)), ("nodejs-doc", NODE_API / "path.html"),
                                     ("libtasn1-doc", TASN1_PDF)) if not path.exists()]
    if missing:
        print(f"missing Debian packages: sudo apt-get install {' '.join(missing)}", file=sys.stderr)
        return 1
    folders = {kind: OUT / kind for kind in ("pdf", "md", "html")}
    for folder in folders.values():
        folder.mkdir(parents=True, exist_ok=True)
    (OUT / ".gitignore").write_text("*\n")
    for name in PAGES:
        html = NODE_API / f"{name}.html"
        target = folders["pdf"] / f"{name}.pdf"
        print_chromium(html, target)
        shutil.copyfile(html, folders["html"] / html.name)
        (folders["md"] / f"{name}.md").write_text(node_markdown(name), encoding="utf-8")
        print(f"{target}  ← {html} (Chromium)")
    if shutil.which("soffice"):
        for name in LIBREOFFICE_PAGES:
            target = print_libreoffice(NODE_API / f"{name}.html", folders["pdf"])
            print(f"{target}  ← {NODE_API / name}.html (LibreOffice)")
    else:
        print("LibreOffice is not installed: no second producer "
              "(sudo apt-get install libreoffice-writer-nogui)", file=sys.stderr)
    shutil.copyfile(TASN1_PDF, folders["pdf"] / TASN1_PDF.name)
    print(f"{folders['pdf'] / TASN1_PDF.name}  ← {TASN1_PDF} (TeX)")
    if TASN1_HTML.is_file():
        shutil.copyfile(TASN1_HTML, folders["html"] / TASN1_HTML.name)
    answer_folders(folders)
    return 0


def answer_folders(folders: dict[str, Path]) -> None:
    """``node/<kind>/``: the twelve Node.js pages alone, for the answer sets (no LibreOffice
    copies, no libtasn1)."""
    for kind, folder in folders.items():
        target = OUT / "node" / kind
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        for name in PAGES:
            source = folder / f"{name}.{kind}"
            try:
                (target / source.name).hardlink_to(source)
            except OSError:  # another file system
                shutil.copyfile(source, target / source.name)
        print(f"{target}/  ← the {len(PAGES)} Node.js pages ({kind})")


if __name__ == "__main__":
    raise SystemExit(main())
