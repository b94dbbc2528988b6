"""A model's choice from a closed list, read as probabilities, and weighed against a rule's.

An agent that chooses values from enums (A2's system, audience, tone, depth and confidence;
A5's kind, answer language and code language) asks the model with ``logprobs=True``
(``Agent.ask``). Where the endpoint gives token log-probabilities (llama.cpp's
``llama-server``, Ollama, OpenAI), :func:`value_probabilities` reads from them how sure the
model was of each value, and :func:`weigh` decides between the model's value and the rule's.

Reading a value's probability (:func:`value_probabilities`):

1. The tokens' texts, concatenated, are the reply (``CallLog.raw``). The string value of the
   top-level key ``field`` is located in that text (a small JSON scan: a key inside a nested
   object or inside another string does not count; code fences around the object do not
   matter).
2. The token that covers the value's first character is where the model chose among the
   values. What that token holds before the value (the opening quote, often fused into it:
   ``'"soft'``; or a space and the quote) must begin each alternative too: an alternative
   that does not is a path that never reaches this value (other spacing, say) and counts for
   no value.
3. Each alternative, its leading part stripped, is the start of the value the model would
   have written. It counts, with its probability, for the allowed values it could begin
   (case-insensitively): a part that closes the string (``'soft"'``) counts for the value
   equal to it, any other part for the values it is a prefix of. An alternative that begins
   none counts for none.
4. An alternative that begins several values (``'"te'`` for "teacher" and "technical
   writer", or a lone quote that says nothing yet) is resolved at the next token, but
   only on the path the model took: the chosen token's next token lists the alternatives
   among those values, and its distribution (normalised over them) splits the mass. Any other
   ambiguous alternative is split evenly among the values it begins — the path it would have
   taken was never generated.
5. The masses are normalised over the allowed values: each value's probability. The chosen
   value's probability minus the runner-up's is the **margin**.

It returns None when there are no tokens, the value cannot be located (not a string, not in
the tokens), the located value is none of the allowed ones, or no alternative begins an
allowed value.

Weighing (:func:`weigh`): the rule's choice stands unless the model is sure enough:

* the model answered a value outside the list → the rule's choice stands;
* the model agrees with the rule → the rule's choice (decided by the rule, the model agrees);
* no probability (the endpoint gives none, or it could not be read) → the model's value is
  taken, as before this weighing existed, and the reason says so;
* margin ≥ ``choice_margin`` (the agent's config) → the model's value;
* margin < ``choice_margin`` → the rule's choice stands.

Each outcome is a :class:`Weighed`, which becomes a :class:`~ragstream.state.records.Judgment` (the
rule's value, the model's, its probability, what stood, who decided, and why with the
threshold) in ``sp.extras.judgments[agent]``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from ragstream.backends.llm import TokenChoice
from ragstream.state.records import Judgment

DecidedBy = Literal["rule", "llm", "you"]

#: the reason given when the reply came without token log-probabilities
NO_PROBABILITY = "no probability from the endpoint"


@dataclass(frozen=True)
class Odds:
    """How sure the model was of the value it chose: each allowed value's probability, the
    chosen one's, the runner-up's and the margin between them."""

    chosen: str
    probability: float
    runner_up: str | None
    runner_up_probability: float
    probabilities: dict[str, float] = field(default_factory=dict)

    @property
    def margin(self) -> float:
        """The chosen value's probability minus the runner-up's (0 … 1)."""
        return round(self.probability - self.runner_up_probability, 4)


# --------------------------------------------------------------------------- reading


def _skip_space(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    return i


def _string(text: str, quote: int) -> tuple[str, int]:
    """The JSON string whose opening quote is at ``quote``, decoded, and the offset after its
    closing quote; ValueError when it does not close."""
    i = quote + 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
        elif text[i] == '"':
            return json.loads(text[quote:i + 1]), i + 1
        else:
            i += 1
    raise ValueError("unterminated string")


def locate_value(text: str, key: str) -> tuple[int, str] | None:
    """``(offset of the value's first character, the value)`` of the string value of the
    top-level key ``key`` in the JSON object in ``text``; None when the key is absent or its
    value is not a string (or the JSON breaks off before it)."""
    stack: list[str] = []
    expect_key = False
    i = 0
    try:
        while i < len(text):
            c = text[i]
            if c == '"':
                name, end = _string(text, i)
                if stack == ["{"] and expect_key:
                    expect_key = False
                    colon = _skip_space(text, end)
                    if name == key and colon < len(text) and text[colon] == ":":
                        start = _skip_space(text, colon + 1)
                        if start >= len(text) or text[start] != '"':
                            return None
                        value, _ = _string(text, start)
                        return start + 1, value
                i = end
                continue
            if c in "{[":
                stack.append(c)
                expect_key = c == "{"
            elif c in "}]":
                if stack:
                    stack.pop()
                expect_key = False
            elif c == ",":
                expect_key = stack[-1:] == ["{"]
            i += 1
    except ValueError:  # json.JSONDecodeError is one
        return None
    return None


def _alternatives(token: TokenChoice) -> list[tuple[str, float]]:
    """The token's listed alternatives (each text once) with the chosen token among them."""
    seen: dict[str, float] = {}
    for text, logprob in [*token.top, (token.token, token.logprob)]:
        seen.setdefault(text, logprob)
    return list(seen.items())


def _spread(tokens: Sequence[TokenChoice], i: int, skip: int, written: str,
            candidates: list[str]) -> dict[str, float] | None:
    """The distribution over ``candidates`` read at token ``i`` (its first ``skip``
    characters come before the value; ``written`` is the value's part already generated),
    normalised; None when no alternative begins a candidate."""
    token = tokens[i]
    before = token.token[:skip]
    mass = dict.fromkeys(candidates, 0.0)
    for text, logprob in _alternatives(token):
        if not text.startswith(before):
            continue  # a path that never reaches the value
        rest = text[skip:]
        closed = '"' in rest
        part = (written + rest.split('"', 1)[0]).lower()
        hits = [c for c in candidates
                if (c.lower() == part if closed else c.lower().startswith(part))]
        p = math.exp(logprob)
        if len(hits) == 1:
            mass[hits[0]] += p
        elif hits:
            nxt = None
            if text == token.token and i + 1 < len(tokens):  # the path the model took
                nxt = _spread(tokens, i + 1, 0, written + rest, hits)
            for hit in hits:
                mass[hit] += p * (nxt[hit] if nxt else 1 / len(hits))
    total = sum(mass.values())
    if total <= 0:
        return None
    return {c: m / total for c, m in mass.items()}


def _token_at(tokens: Sequence[TokenChoice], offset: int) -> tuple[int, int] | None:
    """The index of the token that covers character ``offset`` of the tokens' text, and how
    many of its characters come before it; None past the end."""
    start = 0
    for i, token in enumerate(tokens):
        if start + len(token.token) > offset:
            return i, offset - start
        start += len(token.token)
    return None


def value_probabilities(tokens: Sequence[TokenChoice], field: str,
                        allowed: Sequence[str]) -> Odds | None:
    """How sure the model was of the value of ``field`` in its reply, read from the reply's
    tokens and their alternatives (see the module docstring). The value is located in the
    tokens' own text (the reply's text, token by token: what the offsets map to). None when
    there is nothing to read."""
    if not tokens:
        return None
    found = locate_value("".join(t.token for t in tokens), field)
    if found is None:
        return None
    start, value = found
    chosen = next((a for a in allowed if a.lower() == value.lower()), None)
    if chosen is None:
        return None
    at = _token_at(tokens, start)
    if at is None:
        return None
    i, skip = at
    dist = _spread(tokens, i, skip, "", list(dict.fromkeys(allowed)))
    if dist is None:
        return None
    others = [(p, a) for a, p in dist.items() if a != chosen]
    p_second, second = max(others, key=lambda x: x[0]) if others else (0.0, None)
    return Odds(chosen=chosen, probability=round(dist[chosen], 4), runner_up=second,
                runner_up_probability=round(p_second, 4),
                probabilities={a: round(p, 4) for a, p in dist.items()})


# --------------------------------------------------------------------------- weighing


@dataclass(frozen=True)
class Weighed:
    """One field decided: the rule's value, the model's (as it answered, and as an allowed
    value; None when it is none), how sure the model was, what stood, who decided and why."""

    field: str
    rule: str
    said: str | None
    model: str | None
    odds: Odds | None
    final: str
    decided_by: DecidedBy
    why: str

    @property
    def probability(self) -> float | None:
        """The model's probability of the value it chose, where it could be read."""
        return self.odds.probability if self.odds is not None else None

    def judgment(self) -> Judgment:
        """This decision as the state records it, side by side."""
        model = self.model if self.model is not None else self.said
        return Judgment(item=self.field, rule=self.rule, model=model,
                        probability=self.probability, final=self.final,
                        decided_by=self.decided_by, why=self.why)


def _odds_note(odds: Odds) -> str:
    second = (f", {odds.runner_up or 'none'} {odds.runner_up_probability:.2f}"
              if odds.runner_up is not None else "")
    return f"P {odds.probability:.2f}{second}"


def weigh(field: str, rule: str, said: str | None, model: str | None, odds: Odds | None,
          choice_margin: float, no_odds: str = NO_PROBABILITY) -> Weighed:
    """The rule's value or the model's for ``field`` (see the module docstring). ``said`` is
    what the model answered, ``model`` that answer as an allowed value (None when it is none),
    ``odds`` how sure it was (None: no probability, for the reason ``no_odds``)."""
    def done(final: str, by: DecidedBy, why: str) -> Weighed:
        return Weighed(field=field, rule=rule, said=said, model=model, odds=odds,
                       final=final, decided_by=by, why=why)

    if model is None:
        return done(rule, "rule", f"the model's {said!r} is not one of the values: the rule's "
                                  f"choice stands")
    if model == rule:
        return done(rule, "rule", "the model agrees" + (f" ({_odds_note(odds)})" if odds else ""))
    if odds is None:
        return done(model, "llm", f"{no_odds}: the model's choice is taken")
    if odds.margin >= choice_margin:
        return done(model, "llm", f"{_odds_note(odds)}, margin {odds.margin:.2f} ≥ "
                                  f"choice_margin {choice_margin:g}: the model's choice is taken")
    return done(rule, "rule", f"{_odds_note(odds)}, margin {odds.margin:.2f} < choice_margin "
                              f"{choice_margin:g}: the rule's choice stands")


def given(field: str, rule: str, said: str | None, model: str | None, odds: Odds | None,
          value: str) -> Weighed:
    """A field a person set (in the prompt or by an edit): never changed, whatever the rule
    or the model would choose."""
    return Weighed(field=field, rule=rule, said=said, model=model, odds=odds, final=value,
                   decided_by="you", why="set by you: neither the rule nor the model changes it")


def no_odds_reason(offered: bool | None, tokens: bool, repaired: bool) -> str:
    """Why a value of a reply has no probability: the reply had tokens but the value could not
    be read from them; it came from the repair round (which is not asked for them) of an
    endpoint that gives them (``offered``: the client's ``offers_logprobs()``); or the
    endpoint gave none."""
    if tokens:
        return "its probability could not be read from the reply's tokens"
    if offered and repaired:
        return "no probability for a repaired reply"
    return NO_PROBABILITY
