"""The answer to a pass: the passage that answers, quoted first (``passage``), the answer
with its citations and checks, offline or by an LLM (``answer``), how sure it may be
(``answerability``) and whether a question is on the knowledge base's subject at all
(``relevance``). It imports ``stages`` (to answer only current results), ``knowledge``,
``agents``, ``backends``, ``state`` and ``common``."""
