"""Gather real documents nobody here wrote, from Debian's documentation packages, for the
``debian-docs`` answer set (``benchmarks/debian_docs/questions.json``; not among the bundled
sets in ``benchmarks/answers/``, whose documents are committed):

    sudo apt-get install nodejs-doc libtasn1-doc shared-mime-info
    .venv/bin/python benchmarks/debian_docs/make_docs.py
    .venv/bin/python -m ragstream eval --answers benchmarks/debian_docs/questions.json --mode offline

- ``path.html``, ``events.html``: Node.js's HTML API pages (``nodejs-doc``): a signature
  heading, a parameter list (``<string>`` types, "Returns: …"), then the description;
- ``libtasn1.pdf``: the TeX-made libtasn1 manual (``libtasn1-doc``): a function reference
  with ``[Function]`` signatures and ``name: …`` parameter lines, several functions a page;
- ``shared-mime-info-spec.pdf``: the freedesktop Shared MIME-info spec (``shared-mime-info``),
  DocBook-made, with a title page.

The files are copied to ``benchmarks/debian_docs/docs/`` (not committed: their licences
are their packages'; a ``.gitignore`` there keeps them out). The questions ask what a named
function or element does — the extractive answer must lead with the sentence that says it.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent / "docs"
SOURCES = {
    "path.html": ("nodejs-doc", "/usr/share/doc/nodejs/api/path.html"),
    "events.html": ("nodejs-doc", "/usr/share/doc/nodejs/api/events.html"),
    "libtasn1.pdf": ("libtasn1-doc", "/usr/share/doc/libtasn1-doc/libtasn1.pdf"),
    "shared-mime-info-spec.pdf": ("shared-mime-info",
                                  "/usr/share/doc/shared-mime-info/shared-mime-info-spec.pdf"),
}


def main() -> int:
    missing = sorted({pkg for pkg, path in SOURCES.values() if not Path(path).is_file()})
    if missing:
        print(f"missing Debian packages: sudo apt-get install {' '.join(missing)}", file=sys.stderr)
        return 1
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / ".gitignore").write_text("*\n")
    for name, (_pkg, path) in SOURCES.items():
        shutil.copyfile(path, OUT / name)
        print(f"{OUT / name}  ← {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
