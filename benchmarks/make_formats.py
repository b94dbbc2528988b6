"""Make the bundled knowledge base (data/kb, Markdown) in the formats ingestion converts, with
real tools, and a question set for each: the answer benchmark per format.

    sudo apt-get install pandoc chromium        # pandoc 2.17 (Debian 12), Chromium for PDF
    .venv/bin/python benchmarks/make_formats.py [--formats html,docx,pdf,pptx,epub]
    .venv/bin/python -m ragstream eval --answers benchmarks/answers/kb.json \\
        --answers benchmarks/answers/kb-html.json --answers benchmarks/answers/kb-pdf.json …

- HTML: ``pandoc -s --toc`` (a standalone page: a title header and a table of contents in a
  ``<nav>`` the converter has to leave out);
- DOCX, PPTX, EPUB: pandoc's writers (heading styles, a slide per second-level section, a chapter per
  document);
- PDF: the HTML page printed by headless Chromium (``--print-to-pdf``, with the document outline
  from its headings), as a person saving a web page as PDF does.

The files are written to ``benchmarks/formats/kb-<format>/`` and the question sets to
``benchmarks/answers/kb-<format>.json``: kb.json's questions, each section's file renamed to the
format's (``faq.md § …`` → ``faq.pdf § …``). Both are committed; run this again after the
Markdown changes.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import tempfile
from pathlib import Path

from benchmarks.pdf_print.make_pdfs import print_chromium

ROOT = Path(__file__).resolve().parents[1]
KB = ROOT / "data" / "kb"
OUT = ROOT / "benchmarks" / "formats"
ANSWERS = ROOT / "benchmarks" / "answers"
FORMATS = ("html", "docx", "pdf", "pptx", "epub")


def pandoc(source: Path, target: Path, *args: str) -> None:
    """``pandoc source -o target``, reading Markdown as written (straight quotes stay straight,
    so the question sets' section names match the headings)."""
    subprocess.run(["pandoc", str(source), "-f", "markdown-smart", "-o", str(target), *args],
                   check=True, cwd=source.parent)


def make(fmt: str) -> Path:
    """Every Markdown file of the knowledge base as ``fmt``, in ``kb-<fmt>/``."""
    folder = OUT / f"kb-{fmt}"
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    for md in sorted(KB.glob("*.md")):
        target = folder / f"{md.stem}.{fmt}"
        if fmt == "html":
            pandoc(md, target, "-s", "--toc", "--metadata", f"pagetitle={md.stem}")
        elif fmt == "pdf":
            with tempfile.TemporaryDirectory() as tmp:
                page = Path(tmp) / f"{md.stem}.html"
                pandoc(md, page, "-s", "--metadata", f"pagetitle={md.stem}")
                print_chromium(page, target)
        else:
            extra = {"epub": ["--metadata", f"title={md.stem}"], "pptx": ["--slide-level=2"]}
            pandoc(md, target, *extra.get(fmt, []))
    return folder


def section(text: str, fmt: str) -> str:
    """``faq.md § Heading`` as the section that holds it in ``fmt``: the same heading, in a deck
    (one slide per second-level section) the second-level heading above it."""
    file, _, heading = (part.strip() for part in text.partition("§"))
    if fmt == "pptx":
        above: dict[int, str] = {}
        for line in (KB / file).read_text(encoding="utf-8").splitlines():
            level = len(line) - len(line.lstrip("#"))
            if 1 <= level <= 6 and line[level:level + 1] == " ":
                above = {k: v for k, v in above.items() if k < level} | {level: line[level:].strip()}
                if above[level] == heading:
                    heading = above.get(2, heading) if level > 2 else heading
                    break
    return f"{Path(file).stem}.{fmt} § {heading}"


def question_set(fmt: str) -> Path:
    """kb.json's questions with each section's file in ``fmt``."""
    data = json.loads((ANSWERS / "kb.json").read_text(encoding="utf-8"))
    data["name"] = f"kb-{fmt}"
    data["description"] = (f"The bundled knowledge base converted to {fmt.upper()} by "
                           f"benchmarks/make_formats.py; kb.json's questions.")
    data["docs"] = f"../formats/kb-{fmt}"
    for q in [*data["questions"], *(t for f in data.get("followups", []) for t in f["turns"])]:
        q["sections"] = [section(s, fmt) for s in q["sections"]]
    path = ANSWERS / f"kb-{fmt}.json"
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def main() -> None:
    """Make the formats asked for (all by default) and their question sets."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--formats", default=",".join(FORMATS))
    for fmt in parser.parse_args().formats.split(","):
        folder = make(fmt)
        print(f"{fmt}: {len(list(folder.iterdir()))} files in {folder.relative_to(ROOT)}, "
              f"questions in {question_set(fmt).relative_to(ROOT)}")


if __name__ == "__main__":
    main()
