"""The operator's /metrics asks the real API server who is scraping, with the RBAC each
install mode ships (the `operator` fixture runs once per mode, failing on any forbidden):
a reader bound to manifests/rbac/metrics-reader.yaml gets the series, anyone else a 401 or
a 403 that names no job."""

from __future__ import annotations

import http.client
import urllib.error

import pytest

from .conftest import OPERATOR_NS, scrape

pytestmark = [pytest.mark.cluster]


def status_of(port: int, token: str | None, scheme: str = "https") -> tuple[int, str]:
    try:
        return 200, scrape(port, token, scheme=scheme)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_only_callers_the_api_server_allows_read_the_metrics(cluster, namespace, operator):
    assert "disttrain_operator_jobs" in operator.metrics()  # a reader (metrics_token) is served
    cluster.apply({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "curious", "namespace": OPERATOR_NS}})
    curious = cluster.kubectl("create", "token", "curious", "-n", OPERATOR_NS, "--duration=10m").stdout.strip()
    answers = {who: status_of(operator.metrics_port, token)
               for who, token in (("no token", None), ("a forged token", curious[:-4] + "AAAA"),
                                  ("an account without the role", curious))}
    assert {who: code for who, (code, _) in answers.items()} == {
        "no token": 401, "a forged token": 401, "an account without the role": 403}
    assert all("disttrain_" not in body for _, body in answers.values())
    assert f"system:serviceaccount:{OPERATOR_NS}:curious may not get /metrics" in answers["an account without the role"][1]
    # Not plain HTTP at all.
    with pytest.raises((OSError, http.client.HTTPException)):
        scrape(operator.metrics_port, operator.token, scheme="http")
