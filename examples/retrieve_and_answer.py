"""Call a running RAGstream service: retrieve the chunks for a question, then stream its answer.

    python -m ragstream serve &                      # http://127.0.0.1:8700
    python examples/retrieve_and_answer.py "What can I do during movement?"

Standard library only. With $RAGSTREAM_API_TOKEN set, it is sent as the bearer token.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator


def post(url: str, body: dict, token: str | None, accept: str = "application/json"):
    """POST ``body`` as JSON; the open response (a file of bytes)."""
    headers = {"Content-Type": "application/json", "Accept": accept}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=json.dumps(body).encode("utf-8"), headers=headers,
                                     method="POST")
    return urllib.request.urlopen(request, timeout=120)


def events(response) -> Iterator[tuple[str, dict]]:
    """The Server-Sent Events of ``response`` as (event, data), as they arrive."""
    event, data = "message", []
    for raw in response:
        line = raw.decode("utf-8").rstrip("\r\n")
        if not line:  # a blank line ends an event
            if data:
                yield event, json.loads("\n".join(data))
            event, data = "message", []
        elif line.startswith("event:"):
            event = line[len("event:"):].strip()
        elif line.startswith("data:"):
            data.append(line[len("data:"):].removeprefix(" "))


def main() -> int:
    """Retrieve, print the chunks, then print the answer as it streams and its sources."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("question")
    parser.add_argument("--url", default="http://127.0.0.1:8700", help="the service's address")
    parser.add_argument("--context-key", default="example:user")
    parser.add_argument("--doc-type", action="append", default=[], help="only this doc_type (repeatable)")
    args = parser.parse_args()
    token = os.environ.get("RAGSTREAM_API_TOKEN")
    filters = {"doc_type": args.doc_type} if args.doc_type else {}
    base = args.url.rstrip("/")

    try:
        with post(f"{base}/retrieve", {"query": args.question, "context_key": args.context_key,
                                       "filters": filters}, token) as response:
            context = json.load(response)
        print(f"Retrieved {context['total_chunks']} chunks "
              f"(average relevance {context['avg_relevance']:.2f}):")
        for chunk in context["document_chunks"]:
            meta = chunk["metadata"]
            print(f"  {chunk['relevance_score']:.2f}  {meta['source']} § {meta['section']}")
        if not context["document_chunks"]:
            print(f"  none: {context['no_documents_reason']}")

        print("\nAnswer:")
        citations = []
        with post(f"{base}/answer", {"query": args.question, "context_key": args.context_key,
                                     "filters": filters}, token, accept="text/event-stream") as response:
            for event, data in events(response):
                if event == "token":
                    sys.stdout.write(data["token"])
                    sys.stdout.flush()
                elif event == "citation":
                    citations.append(data)
                elif event == "error":
                    print(f"\nError ({data['error']}): {data['message']}", file=sys.stderr)
                    return 1
                elif event == "done":
                    print("\n\nSources:" if citations else "\n\nSources: none cited")
                    for c in citations:
                        print(f"  [{c['n']}] {c['source']} § {c['section']}")
                    print(f"({data['mode']}, confidence {data['confidence']}, "
                          f"{data['latency_ms']} ms)")
    except urllib.error.HTTPError as err:
        body = json.loads(err.read() or b"{}")
        print(f"HTTP {err.code} ({body.get('error', '')}): {body.get('message', '')}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
