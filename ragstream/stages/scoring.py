"""Score aggregation and fusion used by Retrieval."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence


def logavgexp(scores: Sequence[float], tau: float) -> float:
    """(1/τ)·ln((1/N)·Σ exp(τ·sᵢ)): a soft maximum over query pieces that still rewards a
    chunk matching several pieces. Computed stably (shifted by the maximum)."""
    if not scores:
        raise ValueError("logavgexp needs at least one score")
    if tau <= 0:
        raise ValueError(f"tau must be positive, got {tau}")
    m = max(scores)
    total = sum(math.exp(tau * (s - m)) for s in scores)
    return m + math.log(total / len(scores)) / tau


def reciprocal_rank_fusion(rankings: Mapping[str, Sequence[str]], k: int,
                           weights: Mapping[str, float] | None = None) -> dict[str, float]:
    """Σ_lists weight / (k + rank), ranks starting at 1. Ids missing from a list get nothing
    from it."""
    fused: dict[str, float] = {}
    for name, ranking in rankings.items():
        w = 1.0 if weights is None else weights.get(name, 1.0)
        for rank, item in enumerate(ranking, start=1):
            fused[item] = fused.get(item, 0.0) + w / (k + rank)
    return fused


def rank_positions(ranking: Iterable[str]) -> dict[str, int]:
    """Each item's 1-based position in ``ranking``."""
    return {item: i for i, item in enumerate(ranking, start=1)}
