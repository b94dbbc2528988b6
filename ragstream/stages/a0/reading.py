"""A follow-up read with its conversation: the standalone question Retrieval and the answer use.

"and how do I do that in .htaccess instead?" means nothing on its own: after "How do I
redirect all http traffic to https?" it asks "how do I redirect all http traffic to https in
.htaccess instead?". ``read`` gives that reading from the prompt and the conversation's earlier
questions (``SuperPrompt.recent_conversation``, oldest first), deterministically; each earlier
question is itself read with the ones before it, so a third turn leans on the second's reading.

A question is a *follow-up* when it opens with a connector ("and", "but", "also", "so", "what
about"), refers back ("do that", "is this", "when that happens", "it", "them", "those", "the
other one", "another", "instead", "too", "as well"), leaves out its verb ("Which versions
didn't?"), or has little of its own (at most ``WEAK_OWN_WORDS`` content words) and a word that
may refer back ("its", "their", "there", "again", "also", "then") or a verb without its object
("What did npm 6 use?"), or none at all ("Why?"); "How does the ReRanker choose its backend?"
names what its "its" refers to. A question that does none of these is self-contained and left
as it is. A follow-up is read by the first rule that applies (its name is recorded with the
reading):

* ``action``: "do that" / "do it" / "do the same" stands for the earlier question's action
  ("redirect all http traffic to https", what follows "how do I", "can I", "what's the best way
  to" …): it takes its place.
* ``condition``: a bare condition ("and if my rows are dicts rather than lists?") closes the
  earlier question: "How do I write rows to a CSV file if my rows are dicts rather than
  lists?".
* ``continuation``: when the earlier question asks how to do something, a bare verb phrase
  opened by "only", "also", "just" or "then" ("and only allow the values 1 to 3?") goes on
  with it: "How do I make an argparse argument that must be an integer and only allow the
  values 1 to 3?".
* ``phrase``: a bare phrase ("and on Windows?", "what about for the ReRanker?") takes the
  place of the earlier question's phrase with the same preposition ("… end up on Linux?" →
  "… end up on Windows?"), else it is added to the earlier question.
* ``pronoun``: when the earlier question asks how to do something, a "that" / "it" that is the
  subject of a verb ("does that also work in a .htaccess file?") becomes the action as a
  gerund ("password-protecting a directory"), and one that is the object of a verb ("how do I
  switch them off?") becomes what the action acts on (".htaccess files for a directory").
* ``topic``: a short follow-up (at most ``MAX_OWN_WORDS`` words of its own) with "it", "that"
  or "this" takes the earlier question's topic in its place: "Which other modes could I set
  it to?" → "Which other modes could I set an agent file says mode llm … to?".
* ``context``: otherwise the follow-up keeps its words and the earlier question follows as its
  context: "Where do I change those weights? (after: Explain in detail how ….)" — two
  sentences, so Retrieval searches for each as a piece of its own.

The reading is what a person would have asked on their own; the prompt as typed stays the
prompt (``SuperPrompt.user_text``). With an LLM endpoint the model may write the reading
instead (``stages.a0_preprocessing``); this one is the fallback.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

#: words that open a follow-up ("and how …", "but what if …", "so …")
_CONNECTOR = re.compile(r"^\s*(?:(?:and|but|or|so|also|then|ok(?:ay)?|now|well|right)\b[\s,]*)+",
                        re.IGNORECASE)
_WHAT_ABOUT = re.compile(r"^\s*(?:what|how)\s+about\s+", re.IGNORECASE)
#: words that refer back to what was said before
_BACK = re.compile(
    r"\b(?:it|they|them|those|these|instead|too|as well|either|otherwise|another|"
    r"the other(?:s| ones?)?|the same|the rest|(?:which|the \w+est|that|this|the other) ones?|"
    r"there (?:also )?(?:one|any))\b", re.IGNORECASE)
#: a question that ends on an auxiliary leaves out its verb ("Which npm versions didn't?")
_BARE_AUX = re.compile(r"\b(?:didn't|doesn't|don't|can't|cannot|won't|wouldn't|shouldn't|"
                       r"couldn't|isn't|aren't|wasn't|weren't|hasn't|haven't|did|can|will|"
                       r"would|should|could|has|have|was|were)\s*[?.!]*\s*$", re.IGNORECASE)
#: words that may refer back, or to something the question itself names ("How does the
#: ReRanker choose its backend?"): a follow-up only in a question with little of its own
_WEAK = re.compile(r"\b(?:its|their|there|again|also|other|then|still)\b", re.IGNORECASE)
#: a verb that needs an object, ending a short question: what it acts on was said before
#: ("What did npm 6 use?" after "Which lockfileVersion does npm 9 write?")
_NO_OBJECT = re.compile(r"\b(?:use|uses|write|writes|need|needs|set|choose|pick|take|read|"
                        r"support|supports|require|requires|prefer|expect|accept|accepts)\s*"
                        r"[?.!]*\s*$", re.IGNORECASE)
#: a question with at most this many words of its own, and a word that may refer back, leans
#: on the conversation
WEAK_OWN_WORDS = 2
#: "that" / "this" as a pronoun or demonstrative (not a relative "that": "files that change")
_DEMONSTRATIVE = re.compile(
    r"(?:^|\b(?:do|does|did|is|was|be|for|with|about|of|on|in|to|make|makes|use|set|change|"
    r"switch|turn|disable|enable|configure|undo|keep|get|check|need|want|log|like|at|from|"
    r"without|by|when|whenever|if|once|after|before|until|unless|because|while)\s+)"
    r"(?P<word>that|this)\b(?!\s+(?:is|are|was|were)\s+\w+ed\b)", re.IGNORECASE)
_DO_THAT = re.compile(r"\bdo\s+(?:that|this|it|so|the\s+same(?:\s+thing)?)\b", re.IGNORECASE)
#: the frame of a question asking how to do something: what follows it is the action
_ACTION_FRAME = re.compile(
    r"^\s*(?:how\s+(?:do|can|could|should|would|will|might)\s+(?:i|we|you|one)\s+(?:also\s+)?|"
    r"how\s+to\s+|(?:what(?:'s|\s+is)|which\s+is)\s+the\s+(?:best|easiest|simplest|quickest|"
    r"right|recommended)\s+way\s+to\s+|(?:can|could|should|may|would|do)\s+(?:i|we|you)\s+"
    r"(?:also\s+|still\s+)?|is\s+it\s+possible\s+to\s+|i\s+(?:want|need|would\s+like)\s+to\s+)"
    r"(?P<action>.+)$", re.IGNORECASE)
#: the frame of another question: what follows it is its topic
_TOPIC_FRAME = re.compile(
    r"^\s*(?:what|which|where|when|why|who|whose|how(?:\s+(?:many|much|long|big|often|large|"
    r"small))?)\s+(?:\w+\s+)?(?:is|are|was|were|do|does|did|can|could|should|will|would|has|"
    r"have|happens\s+(?:to|if|when|with))\s+(?P<topic>.+)$", re.IGNORECASE)
_IT_WORTH = re.compile(r"^(?:it|there)\s+(?:(?:is|'s)\s+)?(?:worth\s+)?", re.IGNORECASE)
_PREPOSITIONS = ("on", "in", "for", "with", "to", "from", "under", "inside", "at", "by",
                 "without", "within", "over", "via", "through", "into", "behind", "after",
                 "before", "during")
_PHRASE = re.compile(r"^\s*(?P<prep>" + "|".join(_PREPOSITIONS) + r")\s+(?P<rest>.+)$",
                     re.IGNORECASE)
#: a verb in a short phrase: a bare phrase has none ("on Windows", "a whole domain")
_VERBISH = re.compile(r"\b(?:is|are|was|were|be|do|does|did|can|could|should|would|will|"
                      r"has|have|had|get|make|use|work|works|need|happen|happens|set|run)\b",
                      re.IGNORECASE)
_PRONOUN = re.compile(r"\b(?P<word>it|that|this|them|they)\b", re.IGNORECASE)
_CONTENT = re.compile(r"[^\W\d_][\w.'’/-]*|\d[\w.]*", re.UNICODE)
_STOP = frozenset("""a an the and or but so also then ok okay now well right what which where
when why who whose how do does did is are was were be been being can could should would will
might may must shall i we you he she it its they them their this that these those there here
of to in on for with at by from about as into over under after before again too either
instead other others same one ones rest just only still very much many more most some any
all no not yes if else than then too get got""".split())
_CONSONANT_END = re.compile(r"[^aeiou][aeiou][bdgklmnprtv]$")
#: words of a follow-up that say nothing of its topic ("Which other modes could I set it to?"
#: has one of its own: modes)
_GENERIC = frozenset("""happen happens happened work works worked mean means need set use used
make change changed switch turn find found put go goes going come comes keep kept get""".split())
#: a follow-up with at most this many words of its own takes the earlier topic in its pronoun's place
MAX_OWN_WORDS = 2


@dataclass(frozen=True)
class Reading:
    """A follow-up's standalone reading: its text, the rule that read it, and the earlier
    question it was read with (its own reading)."""

    text: str
    rule: str
    after: str


def content_words(text: str) -> list[str]:
    """The words of ``text`` that carry its content (no function words)."""
    return [w for w in _CONTENT.findall(text) if w.casefold() not in _STOP]


def is_follow_up(question: str) -> bool:
    """Whether ``question`` leans on what was asked before (see the module docstring)."""
    q = question.strip()
    if _CONNECTOR.match(q) or _WHAT_ABOUT.match(q) or _DO_THAT.search(q):
        return True
    if _BACK.search(q) or _DEMONSTRATIVE.search(q) or _BARE_AUX.search(q):
        return True
    own = [w for w in content_words(q) if w.casefold() not in _GENERIC]
    return not own or ((bool(_WEAK.search(q)) or bool(_NO_OBJECT.search(q)))
                       and len(own) <= WEAK_OWN_WORDS)


def _bare(question: str) -> str:
    """The question without its connector and closing punctuation."""
    q = _CONNECTOR.sub("", question.strip())
    return q.strip().rstrip("?!. ").strip()


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:] if text else text


def gerund(action: str) -> str:
    """The action with its verb as a gerund: "password-protect a directory" →
    "password-protecting a directory"."""
    verb, _, rest = action.partition(" ")
    low = verb.casefold()
    if low.endswith("ie"):
        ing = verb[:-2] + "ying"
    elif low.endswith("e") and not low.endswith(("ee", "ye", "oe")) and len(low) > 2:
        ing = verb[:-1] + "ing"
    elif _CONSONANT_END.search(low) and len(re.findall(r"[aeiou]+", low)) == 1:
        ing = verb + verb[-1] + "ing"
    else:
        ing = verb + "ing"
    return f"{ing} {rest}".strip()


def _frame(question: str) -> tuple[str, str]:
    """The earlier question's action (what it asks how to do: "" when it asks no such thing)
    and topic (its action as a gerund, else what follows its question words, up to a ", and"
    that starts a second question)."""
    bare = _bare(question)
    m = _ACTION_FRAME.match(bare)
    if m:
        action = m.group("action").strip()
        return action, gerund(action)
    m = _TOPIC_FRAME.match(bare)
    topic = m.group("topic") if m else bare
    topic = re.split(r",?\s+and\s+(?:how|what|why|where|when|which)\b|[,;:]\s", topic,
                     maxsplit=1, flags=re.IGNORECASE)[0]
    return "", _IT_WORTH.sub("", topic.strip()).strip() or bare


def _swap_phrase(earlier: str, prep: str, phrase: str) -> str | None:
    """``earlier`` with its last phrase opened by ``prep`` replaced by ``phrase`` (up to the
    next preposition, comma or the end); None when it has no such phrase."""
    bare = _bare(earlier)
    found = list(re.finditer(rf"\b{re.escape(prep)}\s+", bare, re.IGNORECASE))
    if not found:
        return None
    m = found[-1]
    tail = bare[m.end():]
    stop = re.search(r",|\b(?:" + "|".join(_PREPOSITIONS) + r"|and|or|when|if|so|because)\b",
                     tail, re.IGNORECASE)
    end = m.end() + (stop.start() if stop else len(tail))
    return f"{bare[:m.start()]}{phrase.strip()}{(' ' + bare[end:].strip()) if stop else ''}".strip()


#: "that" / "it" / "this" as the subject of a verb: "does that also work", "is it safe"
_SUBJECT = re.compile(r"^(?P<lead>(?:(?:does|did|do|is|was|will|would|can|could|should|"
                      r"might|may|has|have)\s+)?)(?P<word>that|this|it)\b(?=\s+(?:also\s+|"
                      r"still\s+|even\s+|really\s+)?(?:\w+))", re.IGNORECASE)
#: "that" / "it" / "this" as the object of a verb: "switch that off", "do it again"
_OBJECT = re.compile(r"\b(?:switch|turn|set|change|undo|disable|enable|keep|log|use|"
                     r"configure|check|test|get|put|move|rotate|stop|start|run|apply)\s+"
                     r"(?P<word>that|this|it|them)\b", re.IGNORECASE)
#: "make that permanent": the pronoun stands for the whole action
_MAKE = re.compile(r"\bmake\s+(?P<word>that|this|it)\b", re.IGNORECASE)
#: a verb's particle: "set up", "turn off"
_PARTICLES = frozenset({"up", "down", "off", "on", "out", "in", "over", "back", "away"})
#: a follow-up that is only a condition: "and if my rows are dicts rather than lists?"
_CONDITION = re.compile(r"^(?:if|unless|even if|in case)\s+\S", re.IGNORECASE)
#: a follow-up that goes on with the earlier action: "and only allow the values 1 to 3?"
_MORE = re.compile(r"^(?:only|also|just|then)\s+(?=[a-z])", re.IGNORECASE)
#: what opens a noun phrase, not a verb phrase: "only the .txt files"
_DETERMINER = re.compile(r"^(?:the|a|an|my|our|your|its|their|this|that|these|those|some|any|"
                         r"all|each|every|one|two|files?)\b|^[\d.]", re.IGNORECASE)
#: an earlier reading's own context, "… (after: …)"
_AFTER = re.compile(r"^(?P<core>.*?)\s*\(after: (?P<ctx>.*?)[.?!]?\)\s*[?.!]?$", re.DOTALL)


def _context(bare: str, earlier: str, end: str) -> Reading:
    """The follow-up as asked, then the earlier question in brackets as its context (an
    earlier reading's own context joins it): two sentences, so Retrieval searches for each as
    a piece of its own and the follow-up's words are not drowned by the earlier question's."""
    m = _AFTER.match(earlier.strip())
    ctx = f"{_bare(m.group('core'))}; {_bare(m.group('ctx'))}" if m else _bare(earlier)
    return Reading(f"{_cap(bare)}{end} (after: {ctx}.)", "context", earlier)


def _object_of(action: str) -> str:
    """What an action acts on: the action without its verb (and the verb's particle)."""
    words = action.split()
    skip = 2 if len(words) > 2 and words[1].casefold() in _PARTICLES else 1
    return " ".join(words[skip:])


def read_one(question: str, earlier: str) -> Reading | None:
    """``question`` read with the ``earlier`` question (already standalone), or None when it
    is self-contained (see the module docstring). When the earlier reading has a context of
    its own ("… (after: …)"), the rules read its question and the context follows theirs."""
    if not earlier.strip() or not is_follow_up(question):
        return None
    m = _AFTER.match(earlier.strip())
    core, ctx = (m.group("core"), _bare(m.group("ctx"))) if m else (earlier, "")
    tail = f" (after: {ctx}.)" if ctx else ""

    def done(text: str, rule: str) -> Reading:
        return Reading(text + tail, rule, earlier)

    action, topic = _frame(core)
    bare = _bare(question)
    ask = question.strip()
    end = "?" if ask.endswith("?") or not ask.endswith((".", "!")) else ask[-1]
    do = _DO_THAT.search(bare) if action else None
    if do is not None:
        rest = bare[do.end():].strip()
        if rest and rest.casefold() in action.casefold():  # asked again: the earlier reading
            return done(_cap(_bare(core)) + end, "action")
        return done(_cap(f"{bare[:do.start()]}{action}{bare[do.end():]}") + end, "action")
    if _CONDITION.match(bare) and "," not in bare:  # "and if my rows are dicts?"
        return done(f"{_cap(_bare(core))} {bare}{end}", "condition")
    more = _MORE.match(bare)
    if action and more and not _DETERMINER.match(bare[more.end():]):
        return done(f"{_cap(_bare(core))} and {bare}{end}", "continuation")
    about = _WHAT_ABOUT.match(bare)
    phrase = bare[about.end():] if about else bare
    if about or (len(content_words(phrase)) <= 4 and not _VERBISH.search(phrase)
                 and not _PRONOUN.search(phrase)):
        p = _PHRASE.match(phrase)
        swapped = _swap_phrase(core, p.group("prep"), phrase) if p else None
        if swapped:
            return done(_cap(swapped) + "?", "phrase")
        return _context(bare, earlier, end)
    if action:  # a pronoun that stands for the earlier action (as a subject) or its object
        subject = _SUBJECT.match(bare) or _MAKE.search(bare)
        if subject:
            at = subject.start("word")
            return done(_cap(f"{bare[:at]}{gerund(action)}{bare[subject.end('word'):]}") + end,
                        "pronoun")
        obj = _OBJECT.search(bare)
        what = _object_of(action)
        if obj and what:
            at = obj.start("word")
            return done(_cap(f"{bare[:at]}{what}{bare[obj.end('word'):]}") + end, "pronoun")
    pronoun = _DEMONSTRATIVE.search(bare) or _PRONOUN.search(bare)
    own = [w for w in content_words(bare) if w.casefold() not in _GENERIC]
    if pronoun is not None and pronoun.group("word").casefold() in ("it", "that", "this") \
            and topic and len(own) <= MAX_OWN_WORDS:
        # a short follow-up says little of its own: its pronoun takes the earlier topic's place
        at = pronoun.start("word")
        text = f"{bare[:at]}{topic}{bare[at + len(pronoun.group('word')):]}"
        return done(_cap(text) + end, "topic")
    return _context(bare, earlier, end)


def read(question: str, earlier: Sequence[str]) -> Reading | None:
    """``question`` read with the conversation's earlier questions (oldest first), each of
    them read with the ones before it; None when it is self-contained or nothing came before."""
    standalone = ""
    for q in earlier:
        if not q.strip():
            continue
        r = read_one(q, standalone) if standalone else None
        standalone = r.text if r else q.strip()
    return read_one(question, standalone) if standalone else None
