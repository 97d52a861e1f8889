"""What the client raises: every failure is a `DisttrainError` whose str() is the one
line kubectl would print; `api_error` turns the API server's answer into one, and
`retry_after` reads how long a busy server (429) asks to be left alone."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from disttrain.api import types as t
from disttrain.api.api_timing import retry_after_seconds

if TYPE_CHECKING:
    from disttrain.client.jobview import JobView

RESOURCE = f"{t.PLURAL}.{t.GROUP}"  # how kubectl names the resource in errors
OBJECT = f"{t.SINGULAR}.{t.GROUP}"  # ... and in what it did: distributedtraining.disttrain.dev/NAME
# The API server's 404 for a path it does not serve: here, a CRD not installed. A group it
# serves nothing of gets its HTTP mux's plain-text page instead of a Status.
NOT_SERVED = "the server could not find the requested resource"
NO_SUCH_GROUP = "404 page not found"
REFUSED = "connection refused - did you specify the right host or port?"  # kubectl's words


class DisttrainError(Exception):
    """A failed operation; str() is one line, exit_code what the CLI exits with.
    `causes`: the API server's details.causes ({reason, message, field}), if it gave any;
    `status`: its HTTP status code, when the error is its answer."""

    exit_code = 1
    causes: tuple[dict[str, Any], ...] = ()
    status: int | None = None


class NotFound(DisttrainError):
    pass


class Forbidden(DisttrainError):
    pass


class Unreachable(DisttrainError):
    pass


class InvalidArgument(DisttrainError, ValueError):
    """A method was given a value it does not take (also a ValueError)."""


class KubeconfigError(DisttrainError):
    """No kubeconfig, a context it does not have, or a file that is not a kubeconfig (or not UTF-8)."""


class InvalidJob(DisttrainError):
    """The offline validator refused the job; `errors` holds one line per problem."""

    def __init__(self, message: str, errors: list[str]):
        super().__init__(message)
        self.errors = errors


class JobFailed(DisttrainError):
    """The job ended without reaching what was waited for."""

    def __init__(self, message: str, view: JobView):
        super().__init__(message)
        self.view = view


class ApplyConflict(DisttrainError):
    """Server-side apply would change fields another manager (kubectl, a controller) set."""


class WaitTimeout(DisttrainError):
    # `timeout`'s code (GNU coreutils): scripts can tell "not yet" from "failed".
    exit_code = 124


class Expired(Exception):
    """A watch's resourceVersion is too old (410): list again. The client's own signal,
    never raised to its caller."""


def api_error(status: int | None, reason: str | None, body: Any, resource: str = RESOURCE) -> DisttrainError:
    """An API error as kubectl prints it: `Error from server (Reason): message`. A 404 says
    what the API server found missing in its own words (the object, its namespace, or
    the kind: `resource` not served, a CRD not installed); one without them, kubectl's."""
    why, causes = reason or "", []
    try:  # message: the Status body's, or the body itself when it is not one
        parsed = json.loads(body) if body else {}
        message, why = parsed.get("message", ""), parsed.get("reason", why)
        causes = [c for c in (parsed.get("details") or {}).get("causes") or () if isinstance(c, dict)]
    except (TypeError, ValueError, AttributeError):
        message = str(body)  # only a body that is there fails to parse
    if not body and ": " in why:  # a watch's ERROR event: the client makes it "Reason: message"
        why, message = why.split(": ", 1)
    if status == 404:  # the server's words: what is missing may be the namespace, or the kind itself
        said = " ".join(message.split()) or NOT_SERVED
        if said == NO_SUCH_GROUP:  # no Status at all: nothing of the group is served
            said = NOT_SERVED
        if said == NOT_SERVED and resource == RESOURCE:
            said = (f'the server doesn\'t have a resource type "{resource}": install disttrain\'s CRDs '
                    "(`disttrain crd | kubectl apply -f -`, or the Helm chart)")
        error: DisttrainError = NotFound(f"Error from server (NotFound): {said}")
    else:
        text = f"Error from server ({why or status}): {' '.join(message.split()) or reason or 'no message'}"
        error = Forbidden(text) if status == 403 else DisttrainError(text)
    error.causes, error.status = tuple(causes), status
    return error


def connection_failure(exc: Exception) -> str:
    """The innermost cause of a connection failure, one line ('connection refused')."""
    inner: BaseException = exc
    while getattr(inner, "reason", None) is not None and isinstance(inner.reason, BaseException):
        inner = inner.reason
    text = str(inner).removeprefix(f"{getattr(inner, 'conn', None)}: ")  # urllib3 names its connection object
    if "Connection refused" in text:
        return REFUSED
    if "Read timed out" in text:  # urllib3's says the pool, and the time left of the total, not the limit
        return "read timed out - the server sent no answer in time"
    if "RemoteDisconnected" in text:
        return "the server closed the connection without an answer"
    if "Connection broken" in text or "Response ended prematurely" in text:
        return "the connection broke off in the middle of the answer"
    return " ".join(text.split()) or type(inner).__name__


def retry_after(headers: Any) -> float:
    """The seconds a 429's Retry-After asks for (the one rule, api.server), 1 if it says
    none, as kubectl waits."""
    return retry_after_seconds((headers or {}).get("Retry-After"), 1.0)


def failure_reason(view: JobView) -> str:
    """What JobFailed adds to its message: the Failed condition's reason and message."""
    failed = next((c for c in view.conditions if c.get("type") == "Failed" and c.get("status") == "True"), None)
    return f": {failed.get('reason')}: {failed.get('message')}" if failed else ""
