"""The real-model figures: every agent and the answer against a real OpenAI-compatible server.

    .venv/bin/python -m benchmarks.real_llm --base-url http://127.0.0.1:8765/v1 --model local \\
        [--json out.json] [--only answerable]

Runs ``PROMPTS`` (answerable, unanswerable, German headers, format requests, a conversation
follow-up) on the bundled knowledge base in auto mode with the ``LOCAL_PROFILE`` settings,
then answers each, and prints per agent the share of calls whose first reply was valid JSON,
the share of runs that fell back to the rules, the median seconds per call, the decisions it
judged beside the rules and how many its word changed (``extras.judgments``), and overall the
median time of a whole run plus answer, the median time to the first answer token, and the
share of answerable prompts answered with at least one valid citation. ``pytest -m
real_llm`` (``tests/test_real_llm.py``) runs the same prompts with assertions and prints the
same table. How to get a small local model on this machine: ``README.md`` (Real-model tests).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

import pytest

from ragstream.common.config import LOCAL_MODEL_PROFILE
from ragstream.state.super_prompt import Answer, SuperPrompt
from ragstream.workbench.engine import Engine

#: where ``tests/test_real_llm.py`` leaves its figures table for the end-of-run summary
FIGURES = pytest.StashKey[str]()

Kind = Literal["answerable", "unanswerable", "german", "format", "follow-up"]
AGENTS = ("A0_PreProcessing", "A2_PromptShaper", "A3_NLI_Gate", "A4_Condenser",
          "A5_Format_Enforcer")

#: settings for a small model on a laptop (``ragstream.common.config.LOCAL_MODEL_PROFILE``)
LOCAL_PROFILE = LOCAL_MODEL_PROFILE


@dataclass(frozen=True)
class RealPrompt:
    """One prompt of the tier: its text, its kind and, for a follow-up, the turn before it."""

    id: str
    kind: Kind
    text: str
    after: str = ""  # the id of the prompt whose answer this one follows up


PROMPTS: tuple[RealPrompt, ...] = (
    RealPrompt("fusion", "answerable", "How does RAGstream fuse dense and keyword search results?"),
    RealPrompt("chunking", "answerable", "How are documents chunked?"),
    RealPrompt("chroma", "answerable", "How do I start a Chroma server?"),
    RealPrompt("reranker", "answerable",
               "How does the ReRanker choose its backend when no cross-encoder is available?"),
    RealPrompt("a3", "answerable", "What does the A3 gate drop, and why?"),
    RealPrompt("capital", "unanswerable", "What is the capital of Australia?"),
    RealPrompt("sourdough", "unanswerable", "How long should sourdough bread proof before baking?"),
    RealPrompt("german", "german",
               "Aufgabe: Erkläre, wie RAGstream Dokumente in Abschnitte und Chunks teilt.\n"
               "Kontext: Ich baue gerade eine neue Wissensbasis auf.\n"
               "Format: Stichpunkte"),
    RealPrompt("list", "format",
               "Task: Explain what A3 drops and why.\nFormat: a short numbered list"),
    RealPrompt("table", "format",
               "Task: Compare the cross-encoder and the offline reranker backends.\n"
               "Format: a Markdown table\nConstraints: at most 120 words"),
    RealPrompt("follow-up", "follow-up",
               "And how do I point RAGstream at that server?", after="chroma"),
)


@dataclass
class AgentCall:
    """One agent in one run: its mode, whether it fell back, and its model call if any."""

    mode: str
    fallback: bool
    reason: str
    seconds: float | None = None
    #: the model replied (a call the run budget or an error cut off did not)
    replied: bool = False
    first_try_valid: bool | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    #: decisions the model judged beside the rules, and those its word changed
    judged: int = 0
    changed: int = 0


@dataclass
class RunRecord:
    """One prompt's run and answer, as the figures need them."""

    id: str
    kind: str
    run_s: float
    answer_s: float
    first_token_s: float | None
    answer_mode: str
    #: the LLM answer's form (answer.form): "text" or "sentences"
    answer_form: str
    valid_citations: int
    #: an LLM answer with at least one sentence citing a valid source
    cited: bool
    unsupported: bool
    answer: str
    agents: dict[str, AgentCall] = field(default_factory=dict)
    #: the model's answer failed the citation checks and the extractive one was given
    set_aside: bool = False
    #: A3 kept nothing although its rules alone would have kept something
    emptied: bool = False


def run_prompt(engine: Engine, prompt: RealPrompt,
               before: dict[str, tuple[SuperPrompt, Answer]] | None = None
               ) -> tuple[SuperPrompt, Answer, RunRecord]:
    """Run every stage of ``prompt`` and answer it; a follow-up carries the earlier turn."""
    conversation: list = []
    if prompt.after and before and prompt.after in before:
        sp0, ans0 = before[prompt.after]
        conversation = engine.conversation_after(sp0, ans0)
    started = time.perf_counter()
    sp = engine.run(engine.new(prompt.text, conversation))
    run_s = time.perf_counter() - started
    sp, ans = engine.answer(sp)
    record = RunRecord(
        id=prompt.id, kind=prompt.kind, run_s=round(run_s, 2),
        answer_s=round(ans.latency_ms / 1000, 2),
        first_token_s=round(ans.first_token_ms / 1000, 2) if ans.first_token_ms else None,
        answer_mode=ans.mode, answer_form=ans.form, valid_citations=len(ans.sources),
        cited=ans.mode == "llm" and not ans.unsupported,
        unsupported=bool(ans.unsupported), answer=ans.text, set_aside=bool(ans.set_aside),
        emptied=emptied_by_gate(sp))
    for name in AGENTS:
        mode = sp.extras.agent_modes.get(name)
        if mode is None:
            continue
        usage = sp.extras.llm_usage.get(name)
        record.agents[name] = AgentCall(
            mode=mode.mode, fallback=bool(mode.fallback), reason=mode.reason,
            seconds=usage.seconds if usage else None,
            replied=bool(usage and usage.finish_reason),
            first_try_valid=usage.first_try_valid if usage else None,
            prompt_tokens=usage.prompt_tokens if usage else 0,
            completion_tokens=usage.completion_tokens if usage else 0,
            judged=len(sp.extras.judgments.get(name, [])),
            changed=sum(j.changed for j in sp.extras.judgments.get(name, [])))
    return sp, ans, record


def emptied_by_gate(sp: SuperPrompt) -> bool:
    """Whether A3 kept no chunk although its rules alone would have kept one."""
    rows = sp.view("a3")
    return bool(rows) and not sp.kept_ids("a3") and any(r.rule_status == "kept" for r in rows)


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 2) if values else None


def figures(records: list[RunRecord]) -> dict:
    """Per agent and overall, as the module docstring says."""
    per_agent = {}
    all_calls = []
    for name in AGENTS:
        runs = [r.agents[name] for r in records if name in r.agents]
        calls = [a for a in runs if a.seconds is not None]
        replies = [a for a in calls if a.replied]
        all_calls += replies
        if not runs:
            continue
        per_agent[name] = {
            "runs": len(runs),
            "model_calls": len(calls),
            "replies": len(replies),
            "first_try_valid": (round(sum(bool(a.first_try_valid) for a in replies)
                                      / len(replies), 3) if replies else None),
            "fallback": round(sum(a.fallback for a in runs) / len(runs), 3),
            "median_s_per_call": _median([a.seconds for a in calls if a.seconds is not None]),
            "median_prompt_tokens": _median([float(a.prompt_tokens) for a in replies]),
            "judged": sum(a.judged for a in runs),
            "changed": sum(a.changed for a in runs),
        }
    answerable = [r for r in records if r.kind != "unanswerable"]
    unanswerable = [r for r in records if r.kind == "unanswerable"]
    return {
        "prompts": len(records),
        "agents": per_agent,
        "first_try_valid_all_replies": (round(sum(bool(a.first_try_valid) for a in all_calls)
                                            / len(all_calls), 3) if all_calls else None),
        "median_run_plus_answer_s": _median([r.run_s + r.answer_s for r in records]),
        "median_run_s": _median([r.run_s for r in records]),
        "median_first_answer_token_s": _median(
            [r.first_token_s for r in records if r.first_token_s is not None
             and r.answer_mode == "llm"]),
        "answerable_with_valid_citation": (round(sum(r.cited for r in answerable)
                                                 / len(answerable), 3) if answerable else None),
        "answers_set_aside": sum(r.set_aside for r in records),
        "selections_emptied_by_gate": sum(r.emptied for r in records),
        "unanswerable_refused": (round(
            sum(r.answer_mode == "no-results" for r in unanswerable) / len(unanswerable), 3)
            if unanswerable else None),
    }


def render(figs: dict, model: str = "") -> str:
    """The figures as a small text table."""
    lines = [f"Real-model figures{f' ({model})' if model else ''}, {figs['prompts']} prompts",
             f"{'agent':<20} {'calls':>5} {'replies':>7} {'1st-try valid':>13} {'fallback':>8} "
             f"{'median s/call':>13} {'median prompt tok':>17} {'judged':>6} {'changed':>7}"]
    for name, a in figs["agents"].items():
        valid = "-" if a["first_try_valid"] is None else f"{a['first_try_valid']:.0%}"
        med = "-" if a["median_s_per_call"] is None else f"{a['median_s_per_call']:.1f}"
        tok = "-" if a["median_prompt_tokens"] is None else f"{a['median_prompt_tokens']:.0f}"
        lines.append(f"{name:<20} {a['model_calls']:>5} {a['replies']:>7} {valid:>13} "
                     f"{a['fallback']:>8.0%} "
                     f"{med:>13} {tok:>17} {a.get('judged', 0):>6} {a.get('changed', 0):>7}")
    share = figs["first_try_valid_all_replies"]
    cited, refused = figs["answerable_with_valid_citation"], figs["unanswerable_refused"]
    lines += [
        f"first-try valid JSON, all agent replies: {'-' if share is None else f'{share:.0%}'}",
        f"median run + answer: {figs['median_run_plus_answer_s']} s "
        f"(run {figs['median_run_s']} s); median time to first answer token: "
        f"{figs['median_first_answer_token_s']} s",
        f"answerable prompts answered with a valid citation: "
        f"{'-' if cited is None else f'{cited:.0%}'}; unanswerable refused without an answer "
        f"call: {'-' if refused is None else f'{refused:.0%}'}",
        f"model answers set aside by the citation checks: {figs.get('answers_set_aside', 0)}; "
        f"selections the gate emptied while the rules would fill them: "
        f"{figs.get('selections_emptied_by_gate', 0)}",
    ]
    return "\n".join(lines)


def main() -> None:
    """Run the prompts against ``--base-url`` and print (and optionally save) the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--json", type=Path, help="write the records and figures here")
    parser.add_argument("--only", choices=sorted({p.kind for p in PROMPTS}), action="append",
                        help="run only prompts of these kinds")
    args = parser.parse_args()
    from ragstream.common.config import load_config

    cfg = load_config(env={"RAGSTREAM_LLM_BASE_URL": args.base_url,
                           "RAGSTREAM_LLM_MODEL": args.model}).with_overrides(LOCAL_PROFILE)
    engine = Engine(cfg)
    engine.ensure_knowledge_base()
    engine.warm_up()
    done: dict[str, tuple[SuperPrompt, Answer]] = {}
    records = []
    for prompt in PROMPTS:
        if args.only and prompt.kind not in args.only:
            continue
        sp, ans, record = run_prompt(engine, prompt, done)
        done[prompt.id] = (sp, ans)
        records.append(record)
        print(f"{prompt.id:<10} run {record.run_s:6.1f} s  answer {record.answer_s:5.1f} s  "
              f"{record.answer_mode:<10} citations {record.valid_citations}"
              + "".join(f"\n    {name} fell back: {a.reason}"
                        for name, a in record.agents.items() if a.fallback), flush=True)
    figs = figures(records)
    print(render(figs, args.model))
    if args.json:
        args.json.write_text(json.dumps({"figures": figs, "records": [asdict(r) for r in records]},
                                        indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
