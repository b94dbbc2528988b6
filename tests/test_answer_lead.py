"""What the extractive answer leads with, and how A5's rules shape it (issue 31).

The documents are small fixtures shaped like the real ones the failures were seen on
(Debian's ``nodejs-doc`` API pages, ``libtasn1-doc``'s TeX-made manual, the freedesktop
shared-mime-info spec): an API page with a parameter list above the description, a TeX
function reference with two functions in one chunk, a title page. The statements are A4's as
it scored them there: the sentence that answers does not score best.
"""

from __future__ import annotations

from ragstream.answering.answer import (
    answer_sentences,
    extractive_pieces,
    extractive_statements,
    not_a_lead,
)
from ragstream.common.config import AnswerSettings
from ragstream.state.records import Edit
from ragstream.state.super_prompt import Chunk, SuperPrompt

ACFG = AnswerSettings()

JOIN = ("The `path.join()` method joins all given `path` segments together using the "
        "platform-specific separator as a delimiter, then normalizes the resulting path.")
EMPTY = ("If the joined path string is a zero-length string then `'.'` will be returned, "
         "representing the current working directory.")
CODING = ("asn1Coding generates a DER encoding from a file with ASN.1 definitions and another "
          "one with assignments.")
MAGIC_SAYS = ("magic elements contain a list of match elements, any of which may match, and an "
              "optional priority attribute for all of the contained rules.")

PATH_JOIN = f"""Added in: v0.1.16

- `...paths` <string> A sequence of path segments
- Returns: <string>

{JOIN}

Zero-length `path` segments are ignored. {EMPTY}
"""

PATH_RESOLVE = """- `...paths` <string> A sequence of paths or path segments
- Returns: <string>

The `path.resolve()` method resolves a sequence of paths or path segments into an absolute path.
"""

REMOVE_LISTENER = """- `eventName` {string|symbol}
- `listener` <Function>
- Returns: <EventEmitter>

Removes the specified `listener` from the listener array for the event named `eventName`.

```js
const callback = (stream) => {
  console.log('someone connected!');
};
server.removeListener('connection', callback);
```

`removeListener()` will remove, at most, one instance of a listener from the listener array.
"""

ON_EVENT = """Adds the `listener` function to the end of the listeners array for the event named
`eventName`.
"""

TASN1 = """Returns: ASN1_SUCCESS if DER encoding was OK, ASN1_MEM_ERROR if the der vector isn't big enough.

asn1 bit der

[Function]void asn1_bit_der (const unsigned char * str, int bit_len, unsigned char * der, int * der_len)

str: BIT string.

Creates a length-value DER encoding for the input data as it would have been for a BIT STRING.

asn1 der coding

[Function]int asn1_der_coding (asn1 node const element, const char * name, void * ider, int * len)

element: pointer to an ASN1 element

name: the name of the structure you want to encode (it must be inside *POINTER).

Creates the DER encoding for the NAME structure (inside *POINTER structure).
"""

ASN1CODING = f"""{CODING}

To specify the field of a CHOICE to be used, specify its name as a value to the CHOICE.
(as in the example below.)
"""

TITLE_PAGE = """Shared MIME-info Database

X Desktop Group (http://www.freedesktop.org)

Thomas Leonard
"""

MAGIC = f"""{MAGIC_SAYS}

The magic defined in this file (if any) is used instead.
"""


def _sp(question: str, chunks: list[tuple[str, str, tuple[str, ...]]],
        statements: list[tuple[str, str, float]], **extras) -> SuperPrompt:
    """A finished pass over ``chunks`` (id, text, heading path), A4's ``statements`` (chunk
    id, text, score) with their spans found in the chunk's text."""
    texts = {cid: text for cid, text, _ in chunks}
    condensed = []
    for cid, text, score in statements:
        # a list's items are one statement: its span starts where its first item does
        start = texts[cid].index(text if text in texts[cid] else text.split(" ")[0])
        condensed.append({"text": text, "kind": "fact", "chunk_ids": [cid], "score": score,
                          "span": (start, start + len(text))})
    return SuperPrompt(
        user_text=question, body={"task": question},
        base_context_chunks=[Chunk(id=cid, doc_id=cid.split("#")[0], text=text,
                                   source=cid.split("#")[0], heading_path=heading)
                             for cid, text, heading in chunks],
        final_selection_ids=[cid for cid, _, _ in chunks],
        extras={"a4": {"budget_tokens": 900, "used_tokens": 100, "statements": len(condensed),
                       "condensed": condensed},
                "format_enforcer": {"kind": "markdown", "kind_source": "default"}, **extras})


def _first(sp: SuperPrompt) -> str:
    """The answer's first sentence, as the reader sees it."""
    return answer_sentences("".join(extractive_pieces(sp, ACFG)), 1)[0]


def _path_join(question: str = "What does path.join do?", **extras) -> SuperPrompt:
    return _sp(question, [("path.html#11", PATH_JOIN, ("Path", "path.join([...paths])")),
                          ("path.html#17", PATH_RESOLVE, ("Path", "path.resolve([...paths])"))],
               [("path.html#11", "`...paths` <string> A sequence of path segments", 1.01),
                ("path.html#11", "The `path.join()` method joins all given `path` segments "
                 "together using the platform-specific separator as a delimiter, then "
                 "normalizes the resulting path.", 1.09),
                ("path.html#11", "If the joined path string is a zero-length string then "
                 "`'.'` will be returned, representing the current working directory.", 1.03),
                ("path.html#17", "The `path.resolve()` method resolves a sequence of paths or "
                 "path segments into an absolute path.", 0.67),
                ("path.html#17", "`...paths` <string> A sequence of paths or path segments", 0.6)],
               **extras)


def test_an_api_page_answer_leads_with_the_description_not_the_parameter_list():
    sp = _path_join()
    text = "".join(extractive_pieces(sp, ACFG))
    assert _first(sp).startswith("The `path.join()` method joins all given `path` segments")
    assert "<string>" not in text.split("[1]")[0]
    # the sentences of one chunk keep their order: the description, then what it returns
    assert text.index("The `path.join()` method") < text.index("If the joined path string")


def test_what_a_function_does_leads_with_the_sentence_under_its_signature():
    sp = _sp("What does emitter.removeListener do?",
             [("events.html#40", REMOVE_LISTENER,
               ("Events", "Class: EventEmitter", "emitter.removeListener(eventName, listener)")),
              ("events.html#30", ON_EVENT, ("Events", "Class: EventEmitter",
                                            "emitter.on(eventName, listener)"))],
             [("events.html#40", "`eventName` {string|symbol} `listener` <Function> "
               "Returns: <EventEmitter>", 1.12),
              ("events.html#40", "`removeListener()` will remove, at most, one instance of a "
               "listener from the listener array.", 0.92),
              ("events.html#40", "Removes the specified `listener` from the listener array "
               "for the event named `eventName`.", 0.85)])
    assert _first(sp).startswith("Removes the specified `listener` from the listener array")


def test_a_tex_reference_leads_with_the_named_function_not_its_neighbour_or_a_pointer():
    sp = _sp("What does asn1_der_coding do?",
             [("libtasn1.pdf#28", TASN1, ("4 Function reference", "DER functions")),
              ("libtasn1.pdf#8", ASN1CODING, ("3 Utilities", "Invoking asn1Coding"))],
             [("libtasn1.pdf#8", "asn1Coding generates a DER encoding from a file with ASN.1 "
               "definitions and another one with assignments.", 0.88),
              ("libtasn1.pdf#28", "Returns: ASN1_SUCCESS if DER encoding was OK, "
               "ASN1_MEM_ERROR if the der vector isn't big enough.", 0.86),
              ("libtasn1.pdf#28", "Creates a length-value DER encoding for the input data as "
               "it would have been for a BIT STRING.", 0.83),
              ("libtasn1.pdf#8", "(as in the example below.)", 0.79),
              ("libtasn1.pdf#28", "Creates the DER encoding for the NAME structure (inside "
               "*POINTER structure).", 0.72)])
    text = "".join(extractive_pieces(sp, ACFG))
    assert _first(sp).startswith("Creates the DER encoding for the NAME structure")
    assert "(as in the example below.)" not in answer_sentences(text, 1)[:3]
    # another function's description (asn1_bit_der's, above asn1_der_coding's signature) is
    # not taken for this one's
    assert not _first(sp).startswith("Creates a length-value")


def test_a_title_page_never_leads():
    sp = _sp("What is the <magic> element?",
             [("mime-spec.pdf#0", TITLE_PAGE, ()),
              ("mime-spec.pdf#9", MAGIC, ("2. Unified system", "2.2. The source XML files"))],
             [("mime-spec.pdf#0", "X Desktop Group (http://www.freedesktop.org)", 0.9),
              ("mime-spec.pdf#9", "The magic defined in this file (if any) is used instead.", 0.7),
              ("mime-spec.pdf#9", "magic elements contain a list of match elements, any of "
               "which may match, and an optional priority attribute for all of the contained "
               "rules.", 0.69)])
    assert _first(sp).startswith("magic elements contain a list of match elements")
    assert "X Desktop Group" not in _first(sp)
    # without a name in the question, a title line still never leads: a sentence does
    plain = _sp("Who wrote the MIME database spec?", [("mime-spec.pdf#0", TITLE_PAGE, ()),
                                                        ("mime-spec.pdf#9", MAGIC, ())],
                [("mime-spec.pdf#0", "X Desktop Group (http://www.freedesktop.org)", 0.9),
                 ("mime-spec.pdf#9", "The magic defined in this file (if any) is used "
                  "instead.", 0.5)])
    assert _first(plain).startswith("The magic defined in this file")


def test_what_cannot_lead_says_why():
    assert not_a_lead("`...paths` <string> A sequence of path segments Returns: <string>", ACFG)
    assert not_a_lead("Returns: ASN1_SUCCESS if the value was set.", ACFG)
    assert not_a_lead("[Function]int asn1_der_coding (asn1 node const element, int * len)", ACFG)
    assert not_a_lead("der len: Length of DER data to decode.", ACFG)
    assert not_a_lead("(as in the example below.)", ACFG) == "it points elsewhere"
    assert not_a_lead("X Desktop Group (http://www.freedesktop.org)", ACFG)
    assert not_a_lead("Chapter 3: Utilities 7", ACFG)
    assert not_a_lead("Each node may contain any of the following elements:", ACFG)
    # a sentence that introduces a command shown in the answer may lead
    assert not_a_lead("Start the server with:", ACFG, shows_code=True) == ""
    for fine in ("`removeListener()` will remove, at most, one instance of a listener.",
                 "The `path.join()` method joins all given `path` segments together.",
                 "Note: the index is rebuilt when the model changes."):
        assert not_a_lead(fine, ACFG) == "", fine


def _many(question: str, **extras) -> SuperPrompt:
    chunks: list[tuple[str, str, tuple[str, ...]]] = [
        (f"doc.md#{i}", f"Fact number {i} about path joining is here.", ()) for i in range(10)]
    return _sp(question, chunks, [(cid, text, 1.0 - i / 100)
                                  for i, (cid, text, _) in enumerate(chunks)], **extras)


def _rule(after: str) -> Edit:
    return Edit(id=1, kind="rule_add", stage="A5_Format_Enforcer", target="", after=after)


def test_a_rule_added_in_a5_shapes_the_extractive_answer():
    plain = "".join(extractive_pieces(_many("What does path.join do?"), ACFG))
    assert not plain.startswith("- ") and len(answer_sentences(plain, 1)) == ACFG.max_sentences
    sp = _many("What does path.join do?")
    sp.edits = [_rule("Answer in at most five bullet points.")]
    pieces = extractive_pieces(sp, ACFG)
    assert 1 <= len(pieces) <= 5 and all(p.startswith("- ") for p in pieces)
    sp.edits = [_rule("Give the answer as numbered steps, at most 3 steps.")]
    pieces = extractive_pieces(sp, ACFG)
    assert [p.split(" ", 1)[0] for p in pieces] == ["1.", "2.", "3."]
    sp.edits = [_rule("Answer in two sentences.")]
    assert len(answer_sentences("".join(extractive_pieces(sp, ACFG)), 1)) == 2
    sp.edits = [_rule("Keep it under 20 words.")]  # whole sentences, as many as fit
    assert len(answer_sentences("".join(extractive_pieces(sp, ACFG)), 1)) == 2


def test_a5s_own_kind_and_length_shape_it_too():
    sp = _many("What does path.join do?", format_enforcer={
        "kind": "numbered_list", "kind_source": "task",
        "length": [{"unit": "items", "bound": "max", "value": 4}]})
    pieces = extractive_pieces(sp, ACFG)
    assert [p.split(" ", 1)[0] for p in pieces] == ["1.", "2.", "3.", "4."]
    # with a name in the question the lead is still the sentence about it
    joined = _path_join(format_enforcer={"kind": "bullet_list", "kind_source": "format",
                                         "length": [{"unit": "items", "bound": "max",
                                                     "value": 5}]})
    pieces = extractive_pieces(joined, ACFG)
    assert len(pieces) <= 5 and pieces[0].startswith("- The `path.join()` method")
    assert extractive_statements(joined, ACFG)[0].text.startswith("The `path.join()` method")
