"""The measuring commands: ``bench`` (how fast and how big, on this machine), ``scale`` (``bench
--scale``: the engines at 10k to 1M chunks), ``load`` (many clients calling the service at
once), ``evaluation`` (``eval``: retrieval quality and latency on a BEIR-format data set, with
``metrics``), ``answer_eval`` (``eval --answers``: does the answer lead with what answers the
question? Its question sets, and their labels checked against the pages, in
``question_sets``) and ``format_bench``; what they share in ``harness``. Each is imported by the
command that runs it. The page's click bench drives the page: ``interfaces/ui/page_bench.py``."""
