"""Sources beyond the documents, ranked after them: a remembered turn of a conversation is one
more chunk (``Chunk.from_conversation``) that Retrieval, the ReRanker and A3 read through the same
interface as a document's. A turn never outranks the documents that say what it says
(``after_documents``), and A3 drops one whose every sentence a kept document holds
(``covering``). What a turn remembers and how it is stored is the workbench's
(``ragstream.workbench.conversations``); this module reads only chunks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache

from ragstream.state.super_prompt import Chunk

#: document chunks whose shingles are kept between runs
SHINGLES_KEPT = 8192
#: how a remembered sentence names its source: ``… (from kb/chunking.md § Sections)``
FROM = " (from "


def asserted(text: str) -> str:
    """A turn's memory text without the sources its sentences name."""
    return "\n".join(line.rsplit(FROM, 1)[0] for line in text.splitlines())


def covering(chunks: Sequence[Chunk], share: float) -> dict[str, list[str]]:
    """For each remembered turn among ``chunks``, the document chunks among them that say what
    it says: at least ``share`` of each of its sentences' word 3-shingles are in them (for each
    sentence, the document holding most of it, then the one holding most of the rest, …; ties
    by order). A turn with a sentence the documents do not hold is not listed."""
    from ragstream.common.text import shingles

    turns = [c for c in chunks if c.from_conversation]
    if not turns:
        return {}
    held_by: dict[tuple[str, ...], list[int]] = {}  # shingle -> the documents holding it
    for i, c in enumerate(chunks):
        if not c.from_conversation:
            for sh in _shingles(c.text):
                held_by.setdefault(sh, []).append(i)
    rank = {c.id: i for i, c in enumerate(chunks)}
    out: dict[str, list[str]] = {}
    for turn in turns:
        found: list[str] = []
        for sentence in asserted(turn.text).splitlines():
            mine = shingles(sentence)
            left = {sh for sh in mine if sh in held_by}
            if len(left) < share * len(mine):
                break
            covered = 0
            while covered < share * len(mine):
                counts: dict[int, int] = {}
                for sh in left:
                    for i in held_by[sh]:
                        counts[i] = counts.get(i, 0) + 1
                best = min(counts, key=lambda i: (-counts[i], i))
                left = {sh for sh in left if best not in held_by[sh]}
                covered += counts[best]
                if chunks[best].id not in found:
                    found.append(chunks[best].id)
        else:
            if found:
                out[turn.id] = sorted(found, key=rank.__getitem__)
    return out


@lru_cache(maxsize=SHINGLES_KEPT)
def _shingles(text: str) -> frozenset[tuple[str, ...]]:
    """A document chunk's word 3-shingles, kept: every Retrieval, ReRanker and A3 run of a
    conversation reads the same chunks' again."""
    from ragstream.common.text import shingles

    return frozenset(shingles(text))


def after_documents(order: Sequence[str], chunks: Mapping[str, Chunk],
                    share: float) -> tuple[list[str], dict[str, list[str]]]:
    """``order`` (chunk ids, best first) with each remembered turn that a document among them
    covers (``covering``) moved right after the last of those documents, and the moved turns
    with their documents. A turn never outranks the documents that say the same thing."""
    cover = covering([chunks[c] for c in order], share)
    place = {c: float(i) for i, c in enumerate(order)}
    moved: dict[str, list[str]] = {}
    for turn, docs in cover.items():
        last = max(place[d] for d in docs)
        if last > place[turn]:
            place[turn] = last + 0.5 + place[turn] / (2 * len(order))  # keeps the turns' order
            moved[turn] = docs
    return sorted(order, key=lambda c: place[c]), moved
