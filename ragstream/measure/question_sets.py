"""Answer question sets: what one holds, how it is read, and how its labels are checked
against the pages as ingestion chunks them (``ragstream.measure.answer_eval`` asks and grades).

A set is a JSON file (``benchmarks/answers/*.json``, ``benchmarks/*/questions.json``; its
format in ``answer_eval``'s docstring): answerable questions with the sections that answer them
(``"<file> § <heading>"``) and the key strings a correct answer holds, follow-up dialogues, and
questions about the same product that its pages leave out, with strings no page may hold.
``check_sections`` holds a set to its pages: every section holds a chunk, every question has a
key its sections hold (a key a newer page no longer holds is noted, not fatal: the pages come
from Debian packages that change), no page names an unanswerable question's ``absent`` string.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError

from ragstream.common.config import AppConfig
from ragstream.common.errors import EvalDataError
from ragstream.state.super_prompt import Chunk

SECTION_MARK = " § "


class AnswerQuestion(BaseModel):
    """One question, the sections that answer it, what length of answer it asks for, and the
    key strings a correct answer holds (any one of them)."""

    id: str = Field(min_length=1)
    question: str = Field(min_length=1)
    sections: list[str] = Field(min_length=1)
    kind: Literal["short", "list", "detail"] = "short"
    keys: list[str] = Field(default_factory=list)


class Turn(BaseModel):
    """One turn of a follow-up dialogue: the question, its answering sections and key strings."""

    question: str = Field(min_length=1)
    sections: list[str] = Field(min_length=1)
    keys: list[str] = Field(default_factory=list)


class FollowUp(BaseModel):
    """A dialogue whose last question only makes sense after the turns before it ("and how do
    I do that in .htaccess instead?"); the last turn is graded, the earlier ones are asked
    first and their answers become the conversation."""

    id: str = Field(min_length=1)
    turns: list[Turn] = Field(min_length=2)


class Unanswerable(BaseModel):
    """A question about the documents' own subject that they do not answer: ``absent`` names
    strings a correct answer would need that stand in no document (checked over the index)."""

    id: str = Field(min_length=1)
    question: str = Field(min_length=1)
    absent: list[str] = Field(min_length=1)


class QuestionFile(BaseModel):
    """A question set as written in its JSON file."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    description: str = ""
    docs: str
    questions: list[AnswerQuestion] = Field(min_length=1)
    followups: list[FollowUp] = Field(default_factory=list)
    unanswerable: list[Unanswerable] = Field(default_factory=list)


@dataclass(frozen=True)
class Section:
    """``file § heading``: a file inside the docs folder and one heading of it."""

    file: str
    heading: str

    def holds(self, chunk: Chunk, folder: str) -> bool:
        """True when ``chunk`` comes from this file and the heading is on its heading path."""
        return (chunk.source in (self.file, f"{folder}/{self.file}")
                and any(heading_matches(self.heading, h) for h in chunk.heading_path))


@dataclass(frozen=True)
class QuestionSet:
    """A loaded question set: its name, documents folder and questions with parsed sections;
    its follow-up dialogues and its same-subject unanswerable questions."""

    name: str
    description: str
    path: Path
    docs: Path
    questions: list[AnswerQuestion]
    sections: dict[str, list[Section]]  # question id (a dialogue's turn: "<id>/<n>") -> its sections
    followups: list[FollowUp] = field(default_factory=list)
    unanswerable: list[Unanswerable] = field(default_factory=list)

    def keys(self, qid: str) -> list[str]:
        """The key strings of question (or dialogue turn) ``qid``."""
        for q in self.questions:
            if q.id == qid:
                return q.keys
        for f in self.followups:
            for n, t in enumerate(f.turns, start=1):
                if f"{f.id}/{n}" == qid:
                    return t.keys
        return []


def _section(text: str, where: str) -> Section:
    file, mark, heading = text.partition(SECTION_MARK)
    if not mark or not file.strip() or not heading.strip():
        raise EvalDataError(f"{where}: section {text!r} is not '<file> § <heading>'; write it "
                            "as e.g. 'guide.md § Installing'.")
    return Section(file.strip(), heading.strip())


def load_questions(path: str | Path) -> QuestionSet:
    """Read and check a question set: its JSON, its fields, its docs folder and every section's file."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise EvalDataError(f"No question set at {path}: give a JSON file such as "
                            "benchmarks/answers/kb.json.")
    try:
        data = QuestionFile.model_validate_json(path.read_text(encoding="utf-8"))
    except ValidationError as err:
        first = err.errors()[0]
        at = ".".join(str(p) for p in first["loc"]) or "the file"
        raise EvalDataError(f"{path}: {at}: {first['msg']} (see benchmarks/answers/kb.json for "
                            "the format).") from None
    docs = (path.parent / data.docs).resolve()
    if not docs.is_dir():
        raise EvalDataError(f"{path}: its docs folder {docs} does not exist; 'docs' is relative "
                            "to the question file.")
    ids = [q.id for q in data.questions] + [f.id for f in data.followups] \
        + [u.id for u in data.unanswerable]
    if len(set(ids)) != len(ids):
        dup = sorted({i for i in ids if ids.count(i) > 1})
        raise EvalDataError(f"{path}: question ids must be unique; repeated: {', '.join(dup)}.")
    asked: list[tuple[str, list[str], list[str]]] = [(q.id, q.sections, q.keys)
                                                     for q in data.questions]
    asked += [(f"{f.id}/{n}", t.sections, t.keys) for f in data.followups
              for n, t in enumerate(f.turns, start=1)]
    sections: dict[str, list[Section]] = {}
    for qid, texts, keys in asked:
        secs = [_section(s, f"{path.name}, question {qid}") for s in texts]
        for s in secs:
            if not (docs / s.file).is_file():
                raise EvalDataError(f"{path.name}, question {qid}: no file {s.file!r} in {docs}.")
        if any(not k.strip() for k in keys):
            raise EvalDataError(f"{path.name}, question {qid}: an empty key string; write the "
                                "words a correct answer must hold, e.g. \"ProxyPass\".")
        sections[qid] = secs
    return QuestionSet(data.name, data.description, path, docs, data.questions, sections,
                       data.followups, data.unanswerable)


# --------------------------------------------------------------------------- index


def answers_config(cfg: AppConfig, qs: QuestionSet) -> AppConfig:
    """The app's config with the question set's documents as the knowledge base, in an index
    and collection of their own."""
    return cfg.with_overrides({
        "settings.paths.kb_dir": str(qs.docs),
        "settings.paths.index_dir": str(cfg.index_dir / "eval" / f"answers_{qs.name}"),
        "settings.vector_store.collection": f"eval_answers_{qs.name}"[:60],
    })


def heading_matches(wanted: str, heading: str) -> bool:
    """Whether a chunk's ``heading`` is the section heading a question names: the same text,
    or, for an API signature (``url.fileURLToPath(url)``), the same name with any arguments
    (a newer page may title it ``url.fileURLToPath(url[, options])``)."""
    if heading == wanted:
        return True
    name, paren, _ = wanted.partition("(")
    return bool(paren) and bool(name.strip()) and heading.startswith(name + "(")


def _plain(text: str) -> str:
    """``text`` without Markdown's code and emphasis marks and backslash escapes, its spacing
    folded to single spaces."""
    return " ".join(re.sub(r"[`*]|\\(?=[^\w\s])", "", text).split())


def fold_key(text: str) -> str:
    """Text as key strings are looked for in it: ``_plain``, case folded (```ProxyPass``` and
    "proxypass" are one)."""
    return _plain(text).casefold()


def holds_key(text: str, keys: Sequence[str]) -> bool:
    """Whether ``text`` holds one of ``keys`` (``fold_key`` on both)."""
    folded = fold_key(text)
    return any(fold_key(k) in folded for k in keys)


def names_in(text: str, term: str) -> bool:
    """Whether ``text`` names ``term`` (an unanswerable question's ``absent`` string) as a
    term: as a whole word (a plural too), in its case when it is in capitals ("QUIC" is not in
    "quickly", "%D" is not strftime's "%d"), any case otherwise ("websocket", "WebSockets")."""
    folded = _plain(text)
    want = " ".join(term.split())
    head = r"(?<!\w)" if want[:1].isalnum() or want[:1] == "_" else ""
    tail = r"s?(?!\w)" if want[-1:].isalnum() or want[-1:] == "_" else ""
    letters = [ch for ch in want if ch.isalpha()]
    flags = 0 if letters and all(ch.isupper() for ch in letters) else re.IGNORECASE
    return re.search(head + re.escape(want) + tail, folded, flags) is not None


def check_sections(qs: QuestionSet, chunks: Sequence[Chunk]) -> list[str]:
    """Every section must hold at least one indexed chunk, or its question cannot be graded;
    each question needs a key string that stands in one of its sections (a correct answer can
    hold it); every ``absent`` string of an unanswerable question must stand in no chunk.
    Returns the key strings that stand in none of their question's sections while another of
    its keys does: the pages (a package's newer version) no longer say it that way; the
    question is still graded on the others."""
    folder = qs.docs.name
    problems = [f"{qid}: {s.file} § {s.heading}" for qid, secs in qs.sections.items()
                for s in secs if not any(s.holds(c, folder) for c in chunks)]
    if problems:
        raise EvalDataError(f"{qs.path.name}: no indexed chunk lies in these sections (check the "
                            f"heading text against the file): {'; '.join(problems[:8])}"
                            + (f" and {len(problems) - 8} more" if len(problems) > 8 else "") + ".")
    notes: list[str] = []
    for qid, secs in qs.sections.items():
        text = "\n".join(f"{' '.join(c.heading_path)}\n{c.text}" for c in chunks
                         if any(s.holds(c, folder) for s in secs))
        keys = qs.keys(qid)
        gone = [f"{qid}: {k!r}" for k in keys if not holds_key(text, [k])]
        if len(gone) == len(keys):
            problems += gone
        else:
            notes += gone
    if problems:
        raise EvalDataError(f"{qs.path.name}: these key strings stand in none of their question's "
                            f"sections, nor does any other key of their question (a correct answer "
                            f"quoting them could not hold them): "
                            f"{'; '.join(problems[:8])}"
                            + (f" and {len(problems) - 8} more" if len(problems) > 8 else "") + ".")
    everything = "\n".join(f"{c.title}\n{c.text}" for c in chunks)
    problems = [f"{u.id}: {a!r}" for u in qs.unanswerable for a in u.absent
                if names_in(everything, a)]
    if problems:
        raise EvalDataError(f"{qs.path.name}: these strings of unanswerable questions stand in the "
                            f"documents, so the documents may answer them: {'; '.join(problems[:8])}"
                            + (f" and {len(problems) - 8} more" if len(problems) > 8 else "") + ".")
    return notes
