"""How every client of ours (the operator, the Python client and the CLI) treats the
Kubernetes API server: how long one watch runs, and how long a busy server (429, 503)
may ask us to wait before the same request is sent again."""

from __future__ import annotations

# The longest a single server-side watch runs (its timeoutSeconds) before the client
# opens it again, from where it stopped.
WATCH_SECONDS = 300
# A Retry-After longer than this is cut to it: the request is asked again sooner, and
# each caller's retry count still bounds how long it keeps asking.
RETRY_AFTER_MAX_SECONDS = 10.0


def retry_after_seconds(value: object, default: float) -> float:
    """The wait a Retry-After header asks for: its seconds, within 0..RETRY_AFTER_MAX_SECONDS;
    `default` when it says none or nothing that is a number of seconds."""
    try:
        return min(RETRY_AFTER_MAX_SECONDS, max(0.0, float(value))) if value not in (None, "") else default
    except (TypeError, ValueError):
        return default
