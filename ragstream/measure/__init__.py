"""The measuring commands: ``bench`` (how fast and how big, on this machine), ``load`` (many
clients calling ``RAGPipeline.retrieve`` at once), ``evaluation`` (``eval``: retrieval quality
and latency on a BEIR-format data set) and ``answer_eval`` (``eval --answers``: does the answer
lead with what answers the question?). Each is imported by the command that runs it."""
