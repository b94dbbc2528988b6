"""An answer set's documents copied (or printed, or converted) from a Debian documentation
package into its ``docs`` folder: what ``benchmarks/apache_docs/make_docs.py`` and
``benchmarks/python_docs/make_docs.py`` share. Nothing is copied when every file is there."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from pathlib import Path


class MissingPackages(RuntimeError):
    """A Debian package the documents are made with is not installed."""


def make_pages(out_dir: Path, files: Mapping[str, Path], missing: Callable[[], list[str]],
               write: Callable[[str, Path, Path], str], gitignore: str, verbose: bool = False,
               hint: str = "") -> Path:
    """Every file of ``files`` (name in the folder → its source) in ``out_dir``, made by
    ``write(name, source, target)`` (which says how, for the log) when any is missing, with the
    folder's ``.gitignore``; returns ``out_dir``. Raises ``MissingPackages`` naming the Debian
    packages ``missing()`` finds not installed."""
    out_dir = Path(out_dir)
    if all((out_dir / name).is_file() for name in files):
        return out_dir
    lacking = missing()
    if lacking:
        raise MissingPackages(f"missing Debian packages: sudo apt-get install {' '.join(lacking)}"
                              + (f" ({hint})" if hint else ""))
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / ".gitignore").write_text(gitignore)
    for name, source in files.items():
        target = out_dir / name
        how = write(name, source, target)
        if verbose:
            print(f"{target}  ← {source}{how}")
    return out_dir


def main_for(make: Callable[..., Path], out: Path, count: int) -> int:
    """A make_docs script's command: make the documents in ``out``, say where; 1 with the
    packages to install when some are missing."""
    try:
        folder = make(out, verbose=True)
    except MissingPackages as err:
        print(err, file=sys.stderr)
        return 1
    print(f"{count} documents in {folder}")
    return 0
