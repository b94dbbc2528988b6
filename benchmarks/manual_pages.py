"""An answer set's documents copied (or printed, or converted) from a Debian documentation
package into its ``docs`` folder: what ``benchmarks/apache_docs/make_docs.py`` and
``benchmarks/python_docs/make_docs.py`` share. A file is made again when it is missing or its
source changed since it was made (a package update: ``.made-from.json`` keeps each source's
SHA-256), so an answer set is never graded on a package version the machine no longer has."""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable, Mapping
from pathlib import Path


class MissingPackages(RuntimeError):
    """A Debian package the documents are made with is not installed."""


def make_pages(out_dir: Path, files: Mapping[str, Path], missing: Callable[[], list[str]],
               write: Callable[[str, Path, Path], str], gitignore: str, verbose: bool = False,
               hint: str = "") -> Path:
    """Every file of ``files`` (name in the folder → its source) in ``out_dir``, made by
    ``write(name, source, target)`` (which says how, for the log) when it is missing or its
    source changed since (``STAMP``), with the folder's ``.gitignore``; returns ``out_dir``.
    Raises ``MissingPackages`` naming the Debian packages ``missing()`` finds not installed."""
    out_dir = Path(out_dir)
    lacking = missing()
    if lacking:
        if all((out_dir / name).is_file() for name in files):
            return out_dir  # made before; the package went since: what was made is kept
        raise MissingPackages(f"missing Debian packages: sudo apt-get install {' '.join(lacking)}"
                              + (f" ({hint})" if hint else ""))
    stamp_path = out_dir / STAMP
    try:
        made = json.loads(stamp_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        made = {}
    now = {name: _sha256(source) for name, source in files.items()}
    stale = [name for name in files
             if not (out_dir / name).is_file() or made.get(name) != now[name]]
    if not stale:
        return out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / ".gitignore").write_text(gitignore)
    for name in stale:
        source, target = files[name], out_dir / name
        how = write(name, source, target)
        made[name] = now[name]
        stamp_path.write_text(json.dumps(made, indent=1, sort_keys=True), encoding="utf-8")
        if verbose:
            print(f"{target}  ← {source}{how}")
    return out_dir


#: what each file of a docs folder was made from: its source's SHA-256, by name
STAMP = ".made-from.json"


def _sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


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
