"""After setup, ``ragstream …`` is a command (a console script of pyproject.toml, installed by
scripts/setup.sh into the venv), as the Python tools people know are: it runs from any folder
and is the same program as ``python -m ragstream``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
COMMAND = Path(sys.executable).parent / "ragstream"


def test_pyproject_names_the_command():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["scripts"]["ragstream"] == "ragstream.interfaces.cli:main"


@pytest.mark.skipif(not COMMAND.exists(), reason=f"{COMMAND} is not installed: run "
                    "`bash scripts/setup.sh` (the README's commands do)")
def test_the_command_runs_from_any_folder_as_python_m_does(tmp_path):
    said = subprocess.run([str(COMMAND), "--help"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert said.returncode == 0, said.stderr
    assert said.stdout.startswith("Usage: ragstream ")
    module = subprocess.run([sys.executable, "-m", "ragstream", "--help"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    commands = [line.split()[0] for line in said.stdout.split("Commands:")[1].splitlines()
                if line.strip()]
    assert {"run", "ingest", "serve", "eval"} <= set(commands)
    assert commands == [line.split()[0] for line in
                        module.stdout.split("Commands:")[1].splitlines() if line.strip()]
    # it reads the checkout's configuration wherever it is started: the bundled folder
    status = subprocess.run([str(COMMAND), "status"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=120,
                            env={**os.environ, "RAGSTREAM_INDEX_DIR": str(tmp_path / "index")})
    assert status.returncode == 0, status.stderr
    shown = json.loads(status.stdout)
    assert shown["kb"] == "default" and Path(shown["folder"]) == ROOT / "data" / "kb"


def test_ingest_without_kb_says_the_documents_join_the_bundled_examples(tmp_path):
    docs = tmp_path / "my-docs"
    docs.mkdir()
    (docs / "otters.md").write_text("# Otters\n\nOtters hold hands while they sleep.\n")
    env = {**os.environ, "RAGSTREAM_INDEX_DIR": str(tmp_path / "index")}
    env.pop("RAGSTREAM_KB", None)
    said = subprocess.run([sys.executable, "-m", "ragstream", "ingest", str(docs)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
    assert said.returncode == 0, said.stderr
    assert "went into knowledge base 'default'" in said.stderr
    assert "bundled example documents" in said.stderr
    assert f"ragstream kb create my-docs --folder {docs}" in said.stderr
    # naming the knowledge base is a choice made: nothing to warn about
    again = subprocess.run([sys.executable, "-m", "ragstream", "ingest", str(docs), "--kb",
                            "default"], cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=300)
    assert again.returncode == 0 and "went into knowledge base" not in again.stderr
