"""/metrics behind the API server's verdicts (metrics_serving.py). The reviews here come
from a stand-in that answers as the API server does (TokenReview and SubjectAccessReview
status); tests/cluster/reconcile/test_metrics_auth.py asks the real one."""

from __future__ import annotations

import asyncio
import ssl
import urllib.error
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, Gauge

from disttrain.local.ports import free_port
from disttrain.operator.kube import ApiError
from disttrain.operator.metrics_serving import (ACCESS_REVIEWS, TOKEN_REVIEWS, MetricsServer, Reviewer, bearer,
                                                judged)
from disttrain.operator.settings import Settings

READER = {"username": "system:serviceaccount:monitoring:prometheus", "uid": "u-1",
          "groups": ["system:serviceaccounts", "system:authenticated"]}


class ApiServer:
    """Knows one token per user; `allowed` says who may get /metrics; `down` fails every call."""

    def __init__(self, tokens: dict[str, dict], allowed: set[str], down: bool = False):
        self.tokens, self.allowed, self.down = tokens, allowed, down
        self.calls: list[tuple[str, dict]] = []

    async def request(self, method: str, path: str, body=None, **_):
        self.calls.append((path, body))
        if self.down:
            raise ApiError(0, "", "connection refused", "reviewing")
        if path == TOKEN_REVIEWS:
            user = self.tokens.get(body["spec"]["token"])
            return 201, {"status": {"authenticated": True, "user": user} if user else
                         {"authenticated": False, "error": "invalid bearer token"}}
        assert path == ACCESS_REVIEWS
        allowed = body["spec"]["user"] in self.allowed
        return 201, {"status": {"allowed": allowed} if allowed else {"allowed": False, "reason": "no RBAC policy matched"}}


def test_bearer_reads_only_a_bearer_token():
    assert bearer("Bearer abc") == "abc"
    assert bearer("bearer  abc ") == "abc"
    assert bearer("Basic abc") is None and bearer(None) is None and bearer("Bearer ") is None


def test_the_verdict_names_the_caller_and_how_to_let_them_in():
    assert judged({"authenticated": False, "error": "expired"}, None).status == 401
    refused = judged({"authenticated": True, "user": READER}, {"allowed": False, "reason": "no RBAC policy matched"})
    assert refused.status == 403
    assert READER["username"] in refused.why and "metrics-reader" in refused.why and "no RBAC" in refused.why
    assert judged({"authenticated": True, "user": READER}, {"allowed": True, "denied": True}).status == 403
    assert judged({"authenticated": True, "user": READER}, {"allowed": True}).status == 200


def test_a_verdict_is_kept_a_minute_per_token_and_an_outage_is_never_kept():
    now = [0.0]
    api = ApiServer({"good": READER, "other": {"username": "mallory"}}, {READER["username"]})
    reviewer = Reviewer(api, clock=lambda: now[0], seconds=60)

    async def main():
        assert (await reviewer.verdict("good")).status == 200
        access = api.calls[1][1]["spec"]
        assert access["user"] == READER["username"] and access["groups"] == READER["groups"]
        assert access["nonResourceAttributes"] == {"path": "/metrics", "verb": "get"}
        assert (await reviewer.verdict("other")).status == 403
        assert (await reviewer.verdict("forged")).status == 401
        asked = len(api.calls)
        now[0] = 59
        assert [(await reviewer.verdict(t)).status for t in ("good", "other", "forged")] == [200, 403, 401]
        assert len(api.calls) == asked  # answered from memory
        now[0] = 61
        api.allowed.clear()  # the binding went away: seen once the verdict is a minute old
        assert (await reviewer.verdict("good")).status == 403
        api.down = True
        now[0] = 200
        assert (await reviewer.verdict("good")).status == 503
        api.down = False
        api.allowed.add(READER["username"])
        assert (await reviewer.verdict("good")).status == 200  # the 503 was not kept
    asyncio.run(main())


def test_the_tokens_remembered_are_bounded():
    api = ApiServer({f"t{i}": {"username": f"u{i}"} for i in range(10)}, set())
    reviewer = Reviewer(api, kept=4)

    async def main():
        for i in range(10):
            await reviewer.verdict(f"t{i}")
    asyncio.run(main())
    assert len(reviewer._verdicts) == 4


def get(url: str, token: str | None = None) -> tuple[int, str, dict]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=10, context=ssl._create_unverified_context()) as resp:
            return resp.status, resp.read().decode(), dict(resp.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(), dict(exc.headers)


@pytest.mark.parametrize("auth", ["kubernetes", "none"])
def test_the_server_answers_over_tls_only_to_allowed_callers(auth):
    registry = CollectorRegistry()
    Gauge("disttrain_job_goodput_ratio", "", ["namespace", "job"], registry=registry).labels("team-a", "secret").set(1)
    api = ApiServer({"good": READER, "other": {"username": "mallory"}}, {READER["username"]})
    server = MetricsServer(registry, Reviewer(api) if auth == "kubernetes" else None)
    port = free_port()
    results: dict[str, tuple[int, str, dict]] = {}

    async def main():
        await server.start(port, "127.0.0.1")
        loop = asyncio.get_running_loop()
        scheme = "https" if auth == "kubernetes" else "http"
        for name, token in (("none", None), ("other", "other"), ("forged", "forged"), ("good", "good")):
            results[name] = await loop.run_in_executor(None, get, f"{scheme}://127.0.0.1:{port}/metrics", token)
        await server.close()
    asyncio.run(main())
    if auth == "none":
        assert all(status == 200 and 'job="secret"' in body for status, body, _ in results.values())
        return
    status, body, headers = results["none"]
    assert status == 401 and headers["WWW-Authenticate"].startswith("Bearer") and "secret" not in body
    assert results["forged"][0] == 401 and results["other"][0] == 403 and "mallory" in results["other"][1]
    status, body, headers = results["good"]
    assert status == 200 and 'disttrain_job_goodput_ratio{job="secret",namespace="team-a"} 1.0' in body
    assert headers["Content-Type"].startswith("text/plain")


def test_an_unknown_auth_mode_stops_the_operator_naming_the_variable():
    with pytest.raises(SystemExit, match=r"DISTTRAIN_METRICS_AUTH='token' is not one of kubernetes, none"):
        Settings.from_env({"DISTTRAIN_METRICS_AUTH": "token"})
    assert Settings.from_env({}).metrics_auth == "kubernetes"


def test_the_certificate_needs_no_writable_directory(monkeypatch):
    """The operator's pod has a read-only root and no /tmp: nothing may go through a file."""
    import tempfile

    from disttrain.operator.metrics_serving import self_signed, server_context
    monkeypatch.setattr(tempfile, "tempdir", "/nonexistent/readonly")
    monkeypatch.setenv("TMPDIR", "/nonexistent/readonly")
    context = server_context(*self_signed())
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
