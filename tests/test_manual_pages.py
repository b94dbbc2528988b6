"""The answer sets' documents follow the Debian package they are made from
(``benchmarks.manual_pages.make_pages``): a page the package changed is made again, one it
did not is left alone, so an eval never grades answers over a version no longer installed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from benchmarks.manual_pages import MissingPackages, make_pages


def _make(out: Path, files: dict[str, Path], lacking: list[str] | None = None) -> list[str]:
    written: list[str] = []

    def write(name: str, source: Path, target: Path) -> str:
        shutil.copyfile(source, target)
        written.append(name)
        return ""

    make_pages(out, files, lambda: list(lacking or []), write, "*\n")
    return written


def test_a_page_the_package_changed_is_made_again_and_the_others_are_kept(tmp_path):
    pkg = tmp_path / "usr-share-doc"
    pkg.mkdir()
    (pkg / "a.html").write_text("<p>default behavior is to take the URL-Path</p>")
    (pkg / "b.html").write_text("<p>DirectoryIndex</p>")
    files = {"a.html": pkg / "a.html", "b.html": pkg / "b.html"}
    out = tmp_path / "docs"
    assert _make(out, files) == ["a.html", "b.html"]
    assert _make(out, files) == []  # nothing changed: nothing written
    (pkg / "a.html").write_text("<p>the URL-Path for the request and add it</p>")  # an update
    assert _make(out, files) == ["a.html"]
    assert (out / "a.html").read_text() == (pkg / "a.html").read_text()
    (out / "b.html").unlink()
    assert _make(out, files) == ["b.html"]


def test_without_the_package_made_pages_are_kept_and_none_made_is_a_clear_error(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "a.html").write_text("x")
    out = tmp_path / "docs"
    _make(out, {"a.html": pkg / "a.html"})
    assert _make(out, {"a.html": pkg / "a.html"}, lacking=["apache2-doc"]) == []
    with pytest.raises(MissingPackages, match="apt-get install apache2-doc"):
        _make(tmp_path / "other", {"a.html": pkg / "a.html"}, lacking=["apache2-doc"])
