"""Knowledge: the knowledge bases (``bases``: a registry, each with its folder and index),
reading documents into Markdown (``formats``: PDF, Word, PowerPoint, HTML, EPUB) and ingesting
them into chunks and the engines (``ingest``). It imports ``backends``, ``state`` and
``common``; the stages never import it."""
