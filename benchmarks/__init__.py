"""Benchmarks of RAGstream on public data sets (run from the project root:
``.venv/bin/python -m benchmarks.scifact``)."""
