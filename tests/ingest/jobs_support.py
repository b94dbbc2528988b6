"""For page tests that ingest: ingestion runs as background jobs (``ragstream.knowledge.ingest.jobs``),
so a test that checks what an ingest did waits for the jobs to end and draws the page again
(as the page's own fragment does when it sees a job end)."""

from streamlit.testing.v1 import AppTest

from ragstream.knowledge.ingest.jobs import REGISTRY


def settled(at: AppTest, timeout_s: float = 600) -> AppTest:
    """Wait for every running ingestion job, then draw the page again (the reports and counts
    of the ended jobs are shown); fails when a job has not ended within ``timeout_s``."""
    for job in REGISTRY.running():
        assert job.wait(timeout_s), f"the ingest into {job.kb!r} did not end"
    at.run()
    assert not at.exception, at.exception
    return at
