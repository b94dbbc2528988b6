"""A5_Format_Enforcer: turn the requested output format into hard rules for the answer.

A5 makes sure the final answer will follow the requested structure. It reads
``body["format"]``, ``body["constraints"]`` and ``body["task"]`` and writes one
:class:`FormatSpec` to ``sp.extras.format_enforcer``; Prompt_Builder later renders its
``hard_rules`` into the System block. A5 changes nothing else: not the body, not
``prompt_ready``, not ``final_selection_ids`` or ``S_CTX_MD``.

Deterministic mode ("normalising the requested format into hard rules"), every table in
``config/agents/A5_Format_Enforcer.json``:

Fields A0 only filled with a default (``body_sources[key] == "default"``, e.g. format
"Markdown") were not asked for and are not read.

* **kind** — the format, from keyword counts per kind. The format field is read first, then
  the constraints, then the task (which only counts stricter ``task_cues`` such as "as a
  table"); the first text with any match decides, a tie goes to the kind listed first, and no
  match at all gives ``default_format``. A keyword shortly after a negation ("no tables",
  "nicht als Tabelle") does not count.
* **code_language** — for code, the first language named (it tags the code fences).
* **language** — the answer language, from cues such as "in German" / "auf Deutsch".
* **length** — limits like "under 200 words", "max 5 bullets", "in 3 sentences",
  "höchstens 100 Wörter", "3 to 5 paragraphs"; repeated limits keep the tightest.
* **names** — table columns or JSON/YAML keys ("with columns Name, Role and Since").
* **hard_rules** — imperative sentences: the kind's rule, names, language, lengths, the
  format text itself when it says more than the kind, each constraint sentence, and the
  ``always_rules`` (cite sources as [n]; use only the context).
* **example_shape** — a short skeleton for json, yaml, table and checklist answers.
* **normalized_format_spec** — one line, e.g. "Markdown table, in German, at most 200 words".

The parts live in ``ragstream/stages/a5/``: ``reading`` (the body fields, kind, languages and
names), ``lengths`` (the length grammar), ``rules`` (rule sentences, shape and spec line) and
``llm`` (LLM mode). This module assembles them.

LLM mode (an endpoint is configured; a Writer/Extractor, one call through ``run_agent``): the
model gets the prompt's format fields and the config's closed lists, and its reply is checked
against the config into the same ``FormatSpec`` (see :mod:`ragstream.stages.a5.llm`), which
then also says ``"mode": "llm"``. The rules run too, and the model's kind, answer language and
code language are weighed against theirs: where they differ, the model's value is taken only
when its probability (read from the token log-probabilities, where the endpoint gives them)
exceeds the runner-up's by ``choice_margin``; else the rules' choice stands. Each weighed field
is a ``Judgment`` in ``sp.extras.judgments["A5_Format_Enforcer"]``. If the endpoint fails or
the reply stays invalid after one repair, the deterministic mode runs and ``agent_modes``
records why.

Then the person's rule edits (``edits.apply_list``): a rule rewritten, removed, moved or added;
``FormatSpec.edited`` says what changed. Once A5 has run, ``prompt_ready`` shows the rules in
the System block.
"""

from __future__ import annotations

from ragstream.agents.factory import Agent, run_agent
from ragstream.backends.services import Services
from ragstream.common.config import A5Config, AppConfig
from ragstream.stages import staleness
from ragstream.stages.a5 import llm
from ragstream.stages.a5.lengths import length_grammar, merge_lengths, unit_label
from ragstream.stages.a5.reading import detect_kind, first_named, name_list, read_sources
from ragstream.stages.a5.rules import as_rule, constraint_rules, dedupe, says_more, shape, spec_line
from ragstream.stages.stage import Stage
from ragstream.state import edits
from ragstream.state.records import FormatSpec
from ragstream.state.render import preview, stated
from ragstream.state.super_prompt import SuperPrompt

AGENT_NAME = "A5_Format_Enforcer"


def _deterministic(agent: A5Config, body: dict[str, str],
                   body_sources: dict[str, str]) -> FormatSpec:
    grammar = length_grammar(agent)
    sources, found = read_sources(agent, grammar, body, body_sources)
    length = merge_lengths(agent, found)

    kind, kind_source, matched = detect_kind(agent, sources)
    spec = agent.kinds.get(kind)
    code_language = first_named(agent, sources, agent.code_languages) if kind == "code" else ""
    language = first_named(agent, sources,
                           {code: lang.cues for code, lang in agent.answer_languages.items()})
    language_name = agent.answer_languages[language].name if language else ""
    stop_words = [c for lang in agent.answer_languages.values() for c in lang.cues]
    names = name_list(agent, kind, sources, stop_words, grammar)

    rules: list[str] = []
    if spec and spec.rule:
        rules.append(spec.rule)
    if code_language:
        rules.append(agent.code_language_rule.format(language=code_language))
    if names and kind in agent.name_list_rules:
        rules.append(agent.name_list_rules[kind].format(names=", ".join(names)))
    if language_name:
        rules.append(agent.language_rule.format(name=language_name))
    rules.extend(agent.length_rules[lim.bound].format(n=lim.value, unit=unit_label(agent, lim))
                 for lim in length)
    fmt = sources[0].raw
    if says_more(agent, grammar, fmt):
        rules.append(as_rule(agent.format_rule.format(format=" ".join(fmt.split()))))
    rules.extend(constraint_rules(agent, grammar, sources[1].raw))
    rules.extend(agent.always_rules)

    return FormatSpec(
        kind=kind, kind_source=kind_source, matched=matched, code_language=code_language,
        language=language, length=length, names=names, hard_rules=dedupe(rules),
        example_shape=shape(agent, kind, names),
        normalized_format_spec=spec_line(agent, kind, code_language, names, language_name,
                                         length),
    )


def _rule_choice(agent: A5Config, body: dict[str, str],
                 body_sources: dict[str, str]) -> llm.RuleChoice:
    """What the rules choose, for LLM mode to weigh the model's choice against: the
    deterministic spec, and the code language the prompt names first (whatever the kind)."""
    sources, _ = read_sources(agent, length_grammar(agent), body, body_sources)
    return llm.RuleChoice(_deterministic(agent, body, body_sources),
                          first_named(agent, sources, agent.code_languages))


def run(sp: SuperPrompt, cfg: AppConfig, services: Services | None) -> SuperPrompt:
    """Write the answer's format rules to ``sp.extras.format_enforcer``."""
    agent = cfg.agents.A5_Format_Enforcer
    body_sources = sp.extras.body_sources or {}

    def by_llm(llm_agent: Agent) -> FormatSpec:
        spec, judgments = llm.ask(llm_agent, agent, sp.body, body_sources,
                                  rule=_rule_choice(agent, sp.body, body_sources))
        sp.extras.judgments[AGENT_NAME] = judgments
        return spec

    spec = run_agent(
        sp, AGENT_NAME, cfg, services,
        llm_path=by_llm,
        deterministic_path=lambda: _deterministic(agent, sp.body, body_sources),
        output=llm.A5LLMOutput,
        nothing_to_ask="" if any(stated(sp.body, body_sources, k).strip()
                                 for k in ("format", "constraints"))
        else "the prompt states no format or constraints; the rules read the task",
    )
    rules, done = edits.apply_list(sp, AGENT_NAME, list(spec.hard_rules), key=lambda r: r,
                                   rewrite=lambda _r, text: " ".join(text.split()),
                                   make=lambda text: " ".join(text.split()), noun="rule")
    if changed := done.summary("rule"):
        spec = spec.model_copy(update={"hard_rules": rules, "edited": changed})
    sp.extras.format_enforcer = spec
    sp.prompt_ready = preview(sp)
    return sp


def discard(sp: SuperPrompt) -> None:
    """Forget the format spec and hard rules."""
    sp.extras.format_enforcer = None
    sp.prompt_ready = preview(sp)


STAGE = Stage(name=AGENT_NAME, value="a5", label="A5 Format enforcer", run=run, discard=discard,
              reads=(staleness.AGENT,))
