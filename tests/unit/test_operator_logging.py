"""Issue 70: a request kopf retries (a 429 while the API server rebuilds its watch cache,
a 5xx) is logged as a WARNING saying what happens next, not as an ERROR; a request it
gives up on stays an ERROR."""

from __future__ import annotations

import logging

import kopf

from disttrain.operator.settings import Settings, configure_kopf


def record(message: str, level: int = logging.ERROR) -> logging.LogRecord:
    return logging.LogRecord("kopf._cogs.clients.watching", level, __file__, 1, message, None, None)


RETRIED = ("Request attempt #1/10 failed; will retry: GET https://10.96.0.1/apis/disttrain.dev/v1alpha1/"
           "distributedtrainings?watch=true -> APITooManyRequestsError(..., status=429, "
           "message='storage is (re)initializing')")


def test_a_retried_request_is_a_warning_that_says_it_is_asked_again():
    root = logging.getLogger()
    handler = logging.StreamHandler()
    root.addHandler(handler)
    try:
        configure_kopf(kopf.OperatorSettings(), Settings())
        retried = record(RETRIED)
        handler.filter(retried)
        assert (retried.levelno, retried.levelname) == (logging.WARNING, "WARNING")
        assert retried.getMessage() == RETRIED + " (asked again after the server's Retry-After or the back-off; " \
                                                 "nothing to do unless it keeps failing)"
        given_up = record("Request attempt #10/10 failed; escalating: GET https://x -> APIError(status=500)")
        handler.filter(given_up)
        assert given_up.levelno == logging.ERROR
    finally:
        root.removeHandler(handler)
