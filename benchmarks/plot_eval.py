"""Draw quality against latency per system from a ``ragstream eval --json`` result.

    .venv/bin/python -m ragstream eval --data ../shared/data/scifact --split train --out eval.json
    .venv/bin/python -m benchmarks.plot_eval eval.json docs/eval-scifact.png

One point per system: nDCG@10 (y) against p95 latency per query (x, log scale), labelled,
the app's default system marked. Drawn with altair (Vega-Lite) and rendered offline by
vl-convert.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def chart(result: dict):
    import altair as alt
    import pandas as pd

    rows = [{"system": s["name"], "nDCG@10": s["ndcg@10"], "p95 ms": max(s["p95_ms"], 0.1),
             "p50 ms": max(s["p50_ms"], 0.1),
             "kind": "default" if s["name"] == result["default"] else "other"}
            for s in result["systems"]]
    data = pd.DataFrame(rows)
    title = (f"{Path(result['data']).name} ({result['split']}, {result['queries']} queries, "
             f"{result['documents']} documents): quality against latency")
    base = alt.Chart(data).encode(
        x=alt.X("p95 ms:Q", scale=alt.Scale(type="log"), title="p95 latency per query (ms, log)"),
        y=alt.Y("nDCG@10:Q", scale=alt.Scale(zero=False), title="nDCG@10"),
    )
    points = base.mark_point(filled=True, size=140).encode(
        shape=alt.Shape("kind:N", title=None, legend=alt.Legend(orient="bottom")),
        color=alt.Color("kind:N", title=None, legend=alt.Legend(orient="bottom")),
        tooltip=["system", "nDCG@10", "p50 ms", "p95 ms"])
    labels = base.mark_text(align="right", dx=-10, dy=-10, fontSize=12).encode(text="system:N")
    return (points + labels).properties(width=560, height=340, title=title)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("result", type=Path, help="the JSON written by ragstream eval --out")
    ap.add_argument("image", type=Path, help="where to write the chart (.png or .svg)")
    args = ap.parse_args()
    result = json.loads(args.result.read_text(encoding="utf-8"))
    args.image.parent.mkdir(parents=True, exist_ok=True)
    chart(result).save(str(args.image), scale_factor=2 if args.image.suffix == ".png" else 1)
    print(f"wrote {args.image}")


if __name__ == "__main__":
    main()
