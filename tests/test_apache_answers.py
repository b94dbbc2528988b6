"""Issue 45's scenarios, end to end, on documents nobody here wrote: fourteen pages of the
Apache HTTP Server manual as Debian's ``apache2-doc`` installs them (twelve HTML pages, one
printed to PDF by Chromium, one converted to Word by pandoc; ``benchmarks/apache_docs``), made
into a knowledge base of its own, asked as an ops engineer asks, through the engine and the
CLI. What a user sees is asserted: what the answer leads with, the configuration block whole,
the follow-up's reading, "not found" for what the pages leave out. Nothing depends on the
package version's exact wording: directive names, not sentences."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.apache_docs.make_docs import make, missing
from ragstream.answering.answer import answer, dangling_colons, said_back
from ragstream.backends.services import build_services
from ragstream.state.super_prompt import ConversationTurn
from ragstream.workbench.engine import Engine

ROOT = Path(__file__).resolve().parent.parent
LEAD = 400  # characters: what the answer leads with


@pytest.fixture(scope="module")
def apache(tmp_path_factory, cfg, embedder) -> Engine:
    if missing():
        pytest.skip(f"Debian packages missing: {' '.join(missing())} (scripts/setup.sh --browser "
                    f"installs them)")
    docs = make(tmp_path_factory.mktemp("apache") / "docs")
    acfg = cfg.with_overrides({"settings.paths.kb_dir": str(docs),
                               "settings.paths.index_dir": str(tmp_path_factory.mktemp("idx")),
                               "settings.vector_store.collection": "apache_manual"})
    services = build_services(acfg)
    services.embedder = embedder
    engine = Engine(acfg, services)
    report = engine.ingest(docs, prune=True)
    assert report.failed == 0 and report.processed == 14, report.errors
    return engine


def _ask(engine: Engine, question: str, before: list[ConversationTurn] | None = None):
    sp = engine.run(engine.new(question, conversation=before) if before else question)
    return sp, answer(sp, engine.cfg, engine.services)


def _fences_whole(text: str) -> bool:
    return text.count("```") % 2 == 0


def test_no_chunk_of_the_manuals_web_pages_holds_their_page_furniture(apache):
    """The HTML pages' navigation bar, language list and copyright footer never become chunk
    text (the page printed to PDF and the one converted to Word carry theirs as their text:
    what a printout holds is the document's)."""
    chunks = apache.services.index().all_chunks()
    assert len({c.doc_id for c in chunks}) == 14
    furniture = ("Available Languages:", "Modules | Directives", "Report a bug", "Licensed under")
    html = [c for c in chunks if c.source.endswith(".html")]
    assert len({c.doc_id for c in html}) == 12
    assert not [c.id for c in html if any(f in c.text for f in furniture)]


def test_the_https_question_leads_with_the_redirect_block_whole(apache):
    sp, ans = _ask(apache, "How do I redirect all http traffic to https?")
    assert ans.mode == "extractive" and ans.confidence != "Low"
    head = ans.text[:LEAD]
    assert head.startswith("#### ") and "Redirect permanent" in head
    block = re.search(r"```[^\n]*\n(.*?)\n```", ans.text, re.DOTALL)
    assert block and "<VirtualHost" in block.group(1) and "</VirtualHost>" in block.group(1)
    assert _fences_whole(ans.text) and not dangling_colons(ans.text)
    assert not said_back(ans.text, sp.question)  # never the question said back


def test_a_follow_up_is_read_with_the_turn_before_it(apache):
    first, ans = _ask(apache, "How do I redirect all http traffic to https?")
    sp, follow = _ask(apache, "and how do I do that in .htaccess instead?",
                      [ConversationTurn(user=first.user_text, assistant=ans.text)])
    reading = sp.extras.reading
    assert reading is not None and ".htaccess" in reading.text and "https" in reading.text
    assert "RewriteCond" in follow.text and follow.confidence != "Low"
    alone_sp, alone = _ask(apache, "and how do I do that in .htaccess instead?")
    assert alone_sp.extras.reading is None and "RewriteCond" not in alone.text[:LEAD]


def test_two_name_based_hosts_are_answered_with_their_configuration(apache):
    _, ans = _ask(apache, "How do I set up two name-based virtual hosts on one IP?")
    assert ans.confidence != "Low" and "<VirtualHost" in ans.text[:LEAD + 200]
    assert "ServerName" in ans.text and _fences_whole(ans.text)


def test_a_password_and_a_moved_folder_are_answered_with_their_commands(apache):
    """The manual's commands (``<div class="example"><p><code>``) are code blocks, and a
    how-to answer opens on the sentence that introduces its block, not on prose before it."""
    _, ans = _ask(apache, "We moved the content of /foo/ to /bar/. How do I send visitors "
                          "with old links to the new place?")
    assert "Redirect permanent" in ans.text[:LEAD] and _fences_whole(ans.text)
    _, ans = _ask(apache, "How do I password-protect a directory?")
    assert ans.confidence != "Low" and re.search(r"```\nhtpasswd -c ", ans.text), ans.text


@pytest.mark.parametrize("question", [
    "How do I get a free Let's Encrypt certificate with certbot?",
    "How do I enable HTTP/2 on my HTTPS site?",
    "How do I install Apache on Windows with XAMPP?",
])
def test_what_the_pages_leave_out_is_not_found_and_says_what_they_cover(apache, question):
    _, ans = _ask(apache, question)
    assert ans.confidence == "Low" and ans.mode == "no-results"
    assert ans.confidence_reason.startswith("Low: ")
    assert "It covers:" in ans.text and "Reverse Proxy Guide" in ans.text
    assert "Apache HTTP Server Version" not in ans.text  # the site's name left off each title


def test_the_cli_answers_and_reads_a_follow_up_from_its_conversation(apache, tmp_path):
    """``ragstream run --answer --conversation``: the second question is read with the first."""
    env = {**os.environ, "RAGSTREAM_INDEX_DIR": str(apache.cfg.index_dir),
           "RAGSTREAM_KB_DIR": str(apache.cfg.kb_dir),
           "RAGSTREAM_COLLECTION": apache.cfg.settings.vector_store.collection}

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "ragstream", "run", *args], cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=600)

    out = run("--no-sync", "--answer", "--conversation", "ops",
              "How do I redirect all http traffic to https?")
    assert out.returncode == 0, out.stderr
    assert "Redirect permanent" in out.stdout
    out = run("--no-sync", "--answer", "--conversation", "ops",
              "and how do I do that in .htaccess instead?")
    assert out.returncode == 0, out.stderr
    assert "read as: How do I redirect all http traffic to https in .htaccess" in out.stderr
    assert "RewriteCond" in out.stdout


def test_the_openai_route_answers_and_reads_a_follow_up_from_the_earlier_messages(apache):
    """``/v1/chat/completions`` with the ``openai`` client: the https question, then the
    follow-up with the earlier messages, read with them and answered with the rewrite rule."""
    import openai

    from ragstream.interfaces.service.http import create_app
    from ragstream.workbench.api import RAGPipeline
    from tests.test_service import serving

    with serving(create_app(RAGPipeline(apache), token=None)) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=120)

        def ask(*messages: tuple[str, str]):
            reply = client.chat.completions.create(
                model="ragstream/default",
                messages=[{"role": r, "content": t} for r, t in messages])  # type: ignore[misc]
            return reply.choices[0].message.content or "", (reply.model_extra or {})["ragstream"]

        first, info = ask(("user", "How do I redirect all http traffic to https?"))
        assert "Redirect permanent" in first[:LEAD] and info["read_as"] == ""
        follow, info = ask(("user", "How do I redirect all http traffic to https?"),
                           ("assistant", first),
                           ("user", "and how do I do that in .htaccess instead?"))
    assert ".htaccess" in info["read_as"] and "https" in info["read_as"]
    assert "RewriteCond" in follow and info["confidence"] != "Low"
