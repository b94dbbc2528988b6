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


# --------------------------------------------------------------------------- what a command imports

#: modules a command that does not search, embed, serve or draw must not import
HEAVY = {"numpy", "chromadb", "torch", "streamlit", "fastapi", "uvicorn", "onnxruntime",
         "sentence_transformers", "tokenizers", "pydantic", "tqdm", "mcp", "markdown_it"}


def imported(*args: str) -> set[str]:
    """The modules a fresh ``ragstream ARGS`` process holds when it exits (``sys.modules``; not
    ``-X importtime``, which does not see modules imported with ``importlib.import_module``)."""
    said = subprocess.run([sys.executable, "-c", "import atexit, json, sys\n"
                           "atexit.register(lambda: print(json.dumps(sorted(sys.modules)), "
                           "file=sys.stderr))\n"
                           "from ragstream.interfaces.cli import main\n"
                           "main(sys.argv[1:], prog_name='ragstream')", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert said.returncode == 0, said.stderr[-2000:]
    assert said.stdout.startswith("Usage: ragstream")
    return set(json.loads(said.stderr.splitlines()[-1]))


def test_listing_the_commands_imports_the_command_modules_and_nothing_heavy():
    modules = imported("--help")
    assert "ragstream.interfaces.cli.common" in modules  # the measure sees the package's modules
    assert "click" in modules and "ragstream.interfaces.cli.passes" in modules  # the short help
    assert not {m for m in modules if m.split(".")[0] in HEAVY}
    ours = {m for m in modules if m.split(".")[0] == "ragstream"}
    light = {"ragstream", "ragstream.interfaces", "ragstream.common", "ragstream.common.errors"}
    assert {m for m in ours - light if not m.startswith("ragstream.interfaces.cli")} == set()


def test_a_command_imports_its_own_module_not_the_other_commands():
    modules = imported("runs", "--help")
    assert "ragstream.interfaces.cli.runs" in modules
    assert not {"ragstream.interfaces.cli.passes", "ragstream.interfaces.cli.serving",
                "ragstream.interfaces.cli.measuring"} & modules
    assert not {m for m in modules if m.split(".")[0] in HEAVY}


def test_every_command_is_found_under_its_name():
    import click

    from ragstream.interfaces.cli import COMMANDS, main

    ctx = click.Context(main)
    assert main.list_commands(ctx) == sorted(COMMANDS)
    for name in COMMANDS:
        command = main.get_command(ctx, name)
        assert command is not None and command.name == name


def test_import_ragstream_is_light_and_its_public_names_still_import():
    said = subprocess.run([sys.executable, "-c", "import sys, ragstream\n"
                           "print(sorted(m for m in sys.modules if m.split('.')[0] in "
                           f"{sorted(HEAVY)!r} or m.startswith('ragstream.')))\n"
                           "from ragstream import *\n"
                           "from ragstream import Engine, RAGPipeline\n"
                           "print(all(name in dir(ragstream) for name in ragstream.__all__))"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert said.returncode == 0, said.stderr
    assert said.stdout.split("\n")[:2] == ["[]", "True"]
    import ragstream

    assert ragstream.Engine.__name__ == "Engine" and ragstream.RAGPipeline.__name__ == "RAGPipeline"
    assert [getattr(ragstream, name).__name__ for name in ragstream.__all__] == ragstream.__all__
    with pytest.raises(AttributeError):
        ragstream.Nothing  # noqa: B018
