"""The search engines retrieval runs on (issue 33, in progress: see docs/engines.md):
``keyword`` is tantivy's BM25, phrase and filter search and the store of what the later stages
read for a candidate."""
