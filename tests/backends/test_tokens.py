"""Token counting: the encoding built from the copy of tiktoken's arguments kept beside the
BPE file is tiktoken's own (real tiktoken, its offline BPE file)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragstream.backends import tokens

KB = Path(__file__).resolve().parents[2] / "data" / "kb"


@pytest.mark.parametrize("encoding", ["cl100k_base", "o200k_base"])
def test_the_kept_copy_builds_tiktokens_own_encoding(tmp_path, monkeypatch, encoding):
    import tiktoken

    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    folder = tokens.prepare_tiktoken_cache(encoding)
    expected = tiktoken.get_encoding(encoding)  # from the BPE file, its hash checked
    made = tokens._encoding_args(encoding, folder)  # made, and kept
    kept = list(folder.glob("*.marshal"))
    assert len(kept) == 1 and tiktoken.__version__ in kept[0].name
    again = tokens._encoding_args(encoding, folder)  # read back from the copy
    assert again == made
    assert again["mergeable_ranks"] == expected._mergeable_ranks
    assert (again["pat_str"], again["special_tokens"]) == (expected._pat_str,
                                                          expected._special_tokens)
    enc = tiktoken.Encoding(**again)
    texts = [p.read_text(encoding="utf-8") for p in sorted(KB.glob("*.md"))[:4]]
    texts.append("<|endoftext|> naïve café 東京 ```code``` \n\n\t x")
    for text in texts:
        assert enc.encode(text, disallowed_special=()) == expected.encode(text, disallowed_special=())

    kept[0].write_bytes(b"not marshal data")  # a damaged copy is made again
    assert tokens._encoding_args(encoding, folder) == made
    assert kept[0].read_bytes() != b"not marshal data"
