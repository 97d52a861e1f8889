"""The operator's one back-off schedule (pure).

Every wait that grows with failures uses it, each with its own base and cap: a failed
reconcile pass (the work queue's per-key limiter), a worker's recreation after a crash
(spec.backoffLimit's rounds), a pod creation the API refused, a trainer that does not
answer /status, the API client's own retries and kopf's watch retries.
"""

from __future__ import annotations


def exponential(base: float, cap: float, attempt: int) -> float:
    """The wait before retry number `attempt` (1 = the first retry): base, 2*base, 4*base
    ..., capped; 0 before any failure."""
    if attempt <= 0:
        return 0.0
    return min(cap, base * 2.0 ** min(attempt - 1, 62))
