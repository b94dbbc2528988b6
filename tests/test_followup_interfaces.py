"""A follow-up is read with its conversation on every interface (issue 45): ``run
--conversation`` (click's runner, in this process), ``POST /answer`` and ``/v1/chat/completions``
(a real uvicorn on loopback; the latter through the real ``openai`` client) and MCP ``answer``
(the SDK's own client, in memory). On each, a two-turn dialogue whose second question is a
follow-up ("and how do I do that in .htaccess instead?", "and on Windows?") is read as one
question holding the first one's subject and the follow-up's new words, that reading is shown
("read as", ``read_as``), and it is what is searched: the answer leads with the section about
the combined question, which the follow-up asked on its own does not. A self-contained second
question is not read at all.

The knowledge base is a small web-server handbook written here: the section that answers the
combined question shares few words with the follow-up alone, and the follow-up alone finds
another section (or nothing)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass

import openai
import pytest
from click.testing import CliRunner

from ragstream.interfaces.service.http import create_app
from ragstream.workbench.api import RAGPipeline
from ragstream.workbench.engine import Engine
from tests.conftest import docs_engine
from tests.test_service import answer_events, serving

DOCS = {
    "redirects.md": """# Redirects

## Redirecting all HTTP traffic to HTTPS

To send every visitor who arrives over plain HTTP to the encrypted site, give the server a
virtual host on port 80 whose only directive is `Redirect permanent / https://www.example.com/`.
Every request for any page on port 80 is answered with a 301 that points at the same page over
HTTPS. Reload the server with `apachectl graceful` afterwards.

## Redirecting HTTP to HTTPS in .htaccess

When you cannot edit the server configuration (shared hosting), put the redirect in the
`.htaccess` file of the document root instead: `RewriteEngine On`, then
`RewriteCond %{HTTPS} off`, then `RewriteRule ^ https://%{HTTP_HOST}%{REQUEST_URI} [L,R=301]`.
The rewrite module (mod_rewrite) must be loaded for these lines to redirect the traffic.

## Redirecting a page that moved

A single page that moved gets `Redirect 301 /old.html /new.html` in the configuration.
""",
    "htaccess.md": """# .htaccess files

## What a .htaccess file is

A `.htaccess` file is a small configuration file in a directory. Its directives apply to that
directory and every directory below it. The server reads `.htaccess` files only where the main
configuration allows it with `AllowOverride All`; set `AllowOverride None` to turn `.htaccess`
files off, which is faster. Prefer the main configuration when you can edit it.

## Password-protecting a directory

To ask for a password before anyone sees a directory, create a password file with
`htpasswd -c /etc/web/.htpasswd alice`, then put `AuthType Basic`, `AuthName "Private"`,
`AuthUserFile /etc/web/.htpasswd` and `Require valid-user` in the directory's configuration.
""",
    "logs.md": """# Log files

## Where the log files are on Linux

On Linux the server writes its access log to `/var/log/webserver/access.log` and its error
log to `/var/log/webserver/error.log`.

## Where the log files are on Windows

On Windows the logs end up in `C:\\ProgramData\\Webserver\\logs`: `access.log` and `error.log`.

## Rotating the log files

Rotate the log files every week with logrotate: `weekly`, `rotate 8` and `compress` in
`/etc/logrotate.d/webserver`.
""",
    "install.md": """# Installing the server

## Installing on Windows

On Windows, download the Windows installer, run it as an administrator and choose the Windows
service option, so the server starts with Windows. Windows Defender may ask to allow the
server through the Windows firewall: allow it on private networks.

## Installing on Linux

On Debian or Ubuntu, install the server with `apt-get install webserver`; it starts at boot.
""",
}


@dataclass(frozen=True)
class Dialogue:
    """A first question, a follow-up that means nothing without it, the section that answers
    the two read together, and what the reading must hold: the first question's subject and
    the follow-up's new words (and never what the follow-up replaced)."""

    name: str
    first: str
    follow_up: str
    section: str
    subject: str
    new: str
    replaced: str = ""

    def check_reading(self, read_as: str) -> None:
        """``read_as`` is this dialogue's follow-up read with its first question."""
        assert read_as, f"{self.follow_up!r} was not read with {self.first!r}"
        assert read_as != self.follow_up
        assert self.subject in read_as.casefold(), read_as
        assert self.new in read_as, read_as
        assert not self.replaced or self.replaced not in read_as, read_as

    def led_by_the_combined_section(self, sections: list[str]) -> bool:
        """Whether the answer's first source is the section about the combined question."""
        return bool(sections) and sections[0].endswith(self.section)


HTACCESS = Dialogue("htaccess", "How do I redirect all http traffic to https?",
                    "and how do I do that in .htaccess instead?",
                    "Redirecting HTTP to HTTPS in .htaccess",
                    subject="redirect all http traffic to https", new=".htaccess")
WINDOWS = Dialogue("windows", "Where do the log files end up on Linux?", "and on Windows?",
                   "Where the log files are on Windows",
                   subject="log files", new="Windows", replaced="Linux")
DIALOGUES = [pytest.param(d, id=d.name) for d in (HTACCESS, WINDOWS)]
#: a second question that stands on its own (after HTACCESS.first): no reading
SELF_CONTAINED = "How do I password-protect a directory?"
SELF_SECTION = "Password-protecting a directory"


@pytest.fixture(scope="module")
def web(tmp_path_factory, embedder) -> Engine:
    """The web-server handbook ingested as the default knowledge base (shared embedder)."""
    return docs_engine(tmp_path_factory.mktemp("followup"), DOCS, embedder)


# --------------------------------------------------------------------------- the CLI


@pytest.fixture
def cli(web, monkeypatch):
    """``ragstream ARGS`` in this process on the handbook's engine: (exit code, stdout, stderr,
    both as a terminal shows them)."""
    from ragstream.interfaces import cli as cli_module

    monkeypatch.setattr(cli_module, "_engine", lambda kb=None: web)
    runner = CliRunner()

    def invoke(*args: str) -> tuple[str, str, str]:
        result = runner.invoke(cli_module.main, list(args), catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.stdout, result.stderr, result.output
    return invoke


def cli_sections(stdout: str) -> list[str]:
    """The sections of the answer's sources, as the footer lists them ("  [n] file § section")."""
    return [line.split(" § ", 1)[1] for line in stdout.splitlines()
            if line.startswith("  [") and " § " in line]


@pytest.mark.parametrize("dialogue", DIALOGUES)
def test_cli_run_conversation_reads_a_follow_up_and_says_so(cli, dialogue):
    name = f"cli-{dialogue.name}"
    _out, err, _ = cli("run", dialogue.first, "--answer", "--conversation", name, "--no-save")
    assert "read as:" not in err  # nothing came before it

    out, err, both = cli("run", dialogue.follow_up, "--answer", "--conversation", name, "--no-save")
    said = [line for line in err.splitlines() if line.startswith("read as: ")]
    assert len(said) == 1
    dialogue.check_reading(said[0].removeprefix("read as: "))
    assert both.index(said[0]) < both.index("Sources:")  # said before the answer streams
    assert dialogue.led_by_the_combined_section(cli_sections(out)), out
    # the confidence in words (the level said once), its figures on a line of their own
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("Confidence: "))
    level, _, why = lines[at].removeprefix("Confidence: ").partition(" — ")
    assert level in ("High", "Medium", "Low") and why and not why.startswith(level)
    assert lines[at + 1].startswith("  figures: ") and "P(answerable)" in lines[at + 1]

    alone, err, _ = cli("run", dialogue.follow_up, "--answer", "--no-save")
    assert "read as:" not in err
    assert not dialogue.led_by_the_combined_section(cli_sections(alone)), alone


def test_cli_json_holds_the_reading_and_the_confidence_in_words_and_figures(cli):
    cli("run", HTACCESS.first, "--answer", "--conversation", "cli-json", "--no-save")
    out, err, _ = cli("run", HTACCESS.follow_up, "--answer", "--json", "--conversation",
                      "cli-json", "--no-save")
    sp = json.loads(out)
    reading = sp["extras"]["reading"]
    HTACCESS.check_reading(reading["text"])
    assert reading["typed"] == HTACCESS.follow_up and reading["after"] == HTACCESS.first
    assert f"read as: {reading['text']}" in err
    ans = sp["answer"]
    assert ans["confidence_reason"].startswith(ans["confidence"]) and ans["confidence_detail"]
    assert [c["section"] for c in ans["citations"] if c["valid"]][0].endswith(HTACCESS.section)


def test_cli_a_self_contained_question_is_not_read(cli):
    cli("run", HTACCESS.first, "--answer", "--conversation", "cli-self", "--no-save")
    out, err, _ = cli("run", SELF_CONTAINED, "--answer", "--conversation", "cli-self", "--no-save")
    assert "read as:" not in err
    assert cli_sections(out)[0].endswith(SELF_SECTION)


# --------------------------------------------------------------------------- POST /answer


@pytest.fixture(scope="module")
def service(web) -> Iterator[str]:
    """The HTTP service over the handbook, without a token or an LLM (extractive answers)."""
    with serving(create_app(RAGPipeline(web), token=None)) as url:
        yield url


def ask_http(url: str, query: str, **body) -> tuple[str, list[str], dict]:
    """``POST /answer``: the streamed text, the citations' sections, the done event."""
    events = answer_events(url, {"query": query, "context_key": "web:test", **body})
    text = "".join(data["token"] for event, data in events if event == "token")
    sections = [data["section"] for event, data in events if event == "citation"]
    done = [data for event, data in events if event == "done"]
    assert len(done) == 1, events
    return text, sections, done[0]


@pytest.mark.parametrize("dialogue", DIALOGUES)
def test_http_answer_reads_a_follow_up_with_the_conversation_history(service, dialogue):
    first, _sections, done = ask_http(service, dialogue.first)
    assert done["read_as"] == ""
    for history in ([{"user": dialogue.first, "assistant": first}],  # turns, or messages
                    [{"role": "user", "content": dialogue.first},
                     {"role": "assistant", "content": first}]):
        _text, sections, done = ask_http(service, dialogue.follow_up,
                                         conversation_history=history)
        dialogue.check_reading(done["read_as"])
        assert dialogue.led_by_the_combined_section(sections), sections
        assert done["confidence_reason"] and done["confidence_detail"]

    _text, sections, done = ask_http(service, dialogue.follow_up)
    assert done["read_as"] == ""
    assert not dialogue.led_by_the_combined_section(sections), sections


def test_http_answer_reads_a_follow_up_with_a_named_conversation(service):
    _text, _sections, done = ask_http(service, HTACCESS.first, conversation="http-web")
    assert done["turn"] == 1 and done["read_as"] == ""
    _text, sections, done = ask_http(service, HTACCESS.follow_up, conversation="http-web")
    assert done["turn"] == 2
    HTACCESS.check_reading(done["read_as"])
    assert HTACCESS.led_by_the_combined_section(sections), sections


def test_http_answer_does_not_read_a_self_contained_question(service):
    first, _sections, _done = ask_http(service, HTACCESS.first)
    _text, sections, done = ask_http(service, SELF_CONTAINED, conversation_history=[
        {"user": HTACCESS.first, "assistant": first}])
    assert done["read_as"] == "" and sections[0].endswith(SELF_SECTION)


# --------------------------------------------------------------------------- /v1/chat/completions


@pytest.fixture(scope="module")
def chat(service) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{service}/v1", api_key="none", max_retries=0, timeout=60)


def complete(client: openai.OpenAI, *messages: tuple[str, str], stream: bool = False
             ) -> tuple[str, list[str], dict]:
    """A chat completion of ``messages`` ((role, text), oldest first), streamed or not: the
    message, its citations' sections and the ``ragstream`` field."""
    sent = [{"role": role, "content": text} for role, text in messages]
    if not stream:
        reply = client.chat.completions.create(model="ragstream/default", messages=sent)
        extra = reply.model_extra or {}
        content = reply.choices[0].message.content or ""
    else:
        chunks = list(client.chat.completions.create(model="ragstream/default", messages=sent,
                                                     stream=True))
        content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        extra = next(c.model_extra for c in chunks if c.choices and c.choices[0].finish_reason)
    return content, [c["section"] for c in extra["citations"]], extra["ragstream"]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("dialogue", DIALOGUES)
def test_chat_completions_read_the_last_message_with_the_earlier_ones(chat, dialogue, stream):
    first, _sections, info = complete(chat, ("user", dialogue.first), stream=stream)
    assert info["read_as"] == ""
    _text, sections, info = complete(chat, ("system", "Answer briefly."),
                                     ("user", dialogue.first), ("assistant", first),
                                     ("user", dialogue.follow_up), stream=stream)
    dialogue.check_reading(info["read_as"])
    assert dialogue.led_by_the_combined_section(sections), sections
    assert info["confidence_reason"] and info["confidence_detail"]

    _text, sections, info = complete(chat, ("user", dialogue.follow_up), stream=stream)
    assert info["read_as"] == ""
    assert not dialogue.led_by_the_combined_section(sections), sections


def test_chat_completions_do_not_read_a_self_contained_question(chat):
    first, _sections, _info = complete(chat, ("user", HTACCESS.first))
    _text, sections, info = complete(chat, ("user", HTACCESS.first), ("assistant", first),
                                     ("user", SELF_CONTAINED))
    assert info["read_as"] == "" and sections[0].endswith(SELF_SECTION)


# --------------------------------------------------------------------------- MCP answer


def mcp_answers(engine: Engine, calls: list[dict]) -> list[dict]:
    """Each call's arguments to the ``answer`` tool, through the SDK's client (in memory)."""
    pytest.importorskip("mcp", reason="the mcp SDK is not installed (requirements.txt pins it)")
    from mcp import Client

    from ragstream.interfaces.service.mcp_server import build_server

    async def session() -> list[dict]:
        async with Client(build_server(RAGPipeline(engine))) as client:
            out = []
            for args in calls:
                result = await client.call_tool("answer", args)
                assert not result.is_error, result.content
                out.append(result.structured_content)
            return out
    return asyncio.run(session())


def mcp_sections(result: dict) -> list[str]:
    return [c["section"] for c in result["citations"]]


@pytest.mark.parametrize("dialogue", DIALOGUES)
def test_mcp_answer_reads_a_follow_up_with_its_history(web, dialogue):
    (first,) = mcp_answers(web, [{"question": dialogue.first}])
    assert first["read_as"] == ""
    history = [{"question": dialogue.first, "answer": first["text"]}]
    read, alone, self_contained = mcp_answers(web, [
        {"question": dialogue.follow_up, "history": history},
        {"question": dialogue.follow_up},
        {"question": SELF_CONTAINED, "history": history}])
    dialogue.check_reading(read["read_as"])
    assert dialogue.led_by_the_combined_section(mcp_sections(read)), read["citations"]
    assert read["confidence_reason"] and read["confidence_detail"]
    assert alone["read_as"] == ""
    assert not dialogue.led_by_the_combined_section(mcp_sections(alone)), alone["citations"]
    assert self_contained["read_as"] == ""
    assert mcp_sections(self_contained)[0].endswith(SELF_SECTION)


def test_mcp_answer_reads_a_follow_up_with_a_named_conversation(web):
    first, read = mcp_answers(web, [
        {"question": HTACCESS.first, "conversation": "mcp-web"},
        {"question": HTACCESS.follow_up, "conversation": "mcp-web"}])
    assert first["read_as"] == "" and (first["conversation"], first["turn"]) == ("mcp-web", 1)
    assert (read["conversation"], read["turn"]) == ("mcp-web", 2)
    HTACCESS.check_reading(read["read_as"])
    assert HTACCESS.led_by_the_combined_section(mcp_sections(read)), read["citations"]


def test_mcp_answer_describes_how_to_give_the_conversation(web):
    pytest.importorskip("mcp", reason="the mcp SDK is not installed (requirements.txt pins it)")
    from mcp import Client

    from ragstream.interfaces.service.mcp_server import build_server

    async def tools():
        async with Client(build_server(RAGPipeline(web))) as client:
            return {t.name: t for t in (await client.list_tools()).tools}

    answer = asyncio.run(tools())["answer"]
    props = answer.input_schema["properties"]
    assert {"question", "kb", "history", "conversation"} <= set(props)
    assert props["history"].get("description") and props["conversation"].get("description")
    assert "read_as" in (answer.description or "") and "history" in (answer.description or "")

