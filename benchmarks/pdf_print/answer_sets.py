"""The Node.js answer sets in their other forms: ``node-html.json`` asked of the PDFs and the
Markdown sources (issue 32: is a printed page answered as well as the page itself?).

    .venv/bin/python -m benchmarks.pdf_print.make_pdfs         # docs/node/{pdf,html,md}/
    .venv/bin/python -m benchmarks.pdf_print.answer_sets       # node-pdf.json, node-md.json
    RAGSTREAM_INDEX_DIR=/tmp/nodeidx .venv/bin/python -m ragstream eval --mode offline \\
        --answers benchmarks/pdf_print/answers/node-pdf.json \\
        --answers benchmarks/pdf_print/answers/node-html.json \\
        --answers benchmarks/pdf_print/answers/node-md.json

``answers/node-html.json`` is the written set (34 questions a developer would ask of the 12
pages, each with the section(s) that answer it); its documents are not committed (their
licence is Node.js's), so the sets live here rather than among the bundled ones in
``benchmarks/answers/``. Its questions are copied; each
section ``<page>.html § <heading>`` becomes ``<page>.pdf § <heading>`` (Chromium's outline has
the HTML's heading texts) and ``<page>.md § <heading as the Markdown writes it>`` (e.g. in
backticks), found among the Markdown page's headings by its letters and digits.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from benchmarks.pdf_print.heading_share import DOCS, chunks, norm
from ragstream.common.config import load_config

ANSWERS = Path(__file__).resolve().parent / "answers"
MARK = " § "


def md_headings(page: str) -> dict[str, str]:
    """The Markdown page's headings by their letters and digits."""
    settings = load_config().settings.chunking
    return {norm(h): h for chunk in chunks(DOCS / "md" / f"{page}.md", settings)
            for h in chunk.heading_path}


def main() -> int:
    source = json.loads((ANSWERS / "node-html.json").read_text(encoding="utf-8"))
    if not (DOCS / "node" / "md").is_dir():
        print("no documents: run .venv/bin/python -m benchmarks.pdf_print.make_pdfs first", file=sys.stderr)
        return 1
    headings: dict[str, dict[str, str]] = {}
    for kind in ("pdf", "md"):
        out = dict(source, name=f"node-{kind}", docs=f"../docs/node/{kind}",
                   description=source["description"].replace("as HTML", f"as {kind.upper()}"))
        questions = []
        for q in source["questions"]:
            sections = []
            for section in q["sections"]:
                file, _, heading = section.partition(MARK)
                page = file.rsplit(".", 1)[0]
                if kind == "md":
                    found = headings.setdefault(page, md_headings(page)).get(norm(heading))
                    if found is None:
                        print(f"{q['id']}: {heading!r} is not a heading of md/{page}.md", file=sys.stderr)
                        return 1
                    heading = found
                sections.append(f"{page}.{kind}{MARK}{heading}")
            questions.append(dict(q, sections=sections))
        out["questions"] = questions
        target = ANSWERS / f"node-{kind}.json"
        target.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"{target}: {len(questions)} questions")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
