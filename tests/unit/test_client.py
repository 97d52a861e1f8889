"""The Python client where no API server is needed: how `logs` orders the lines of several
workers, merges followed ones and tells a worker by its pod (tests/e2e/test_cli_logs.py reads
real pods), and what `request_timeout` does to a
slow server (a local HTTP server that answers late). Calls against the real API server are
in tests/cluster/test_cli_commands.py."""

from __future__ import annotations

import json
import os
import random
import re
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from disttrain.client import client as client_module
from disttrain.client import errors, logs
from disttrain.api.names import INDEX_LABEL
from disttrain.client.client import Client
from disttrain.client.errors import DisttrainError
from disttrain.client.logs import log_time_order

from .helpers import StandInHandler, late_server, stand_in

# Go writes RFC 3339 with a fraction's trailing zeros trimmed: compared as text, stamps misorder.

IN_ORDER = [
    "2026-11-26T14:40:19.999999999Z",
    "2026-11-26T14:40:20Z",
    "2026-11-26T14:40:20.000000001Z",
    "2026-11-26T14:40:20.1Z",
    "2026-11-26T14:40:20.12Z",
    "2026-11-26T14:40:20.123Z",
    "2026-11-26T14:40:20.1234567Z",
    "2026-11-26T14:40:20.5Z",
    "2026-11-26T15:40:21+01:00",  # 14:40:21 UTC
    "2026-11-26T14:40:21.5Z",
]


def test_stamps_with_trimmed_fractions_sort_as_times():
    shuffled = IN_ORDER[:]
    random.Random(7).shuffle(shuffled)
    assert sorted(shuffled, key=log_time_order) == IN_ORDER
    assert sorted(IN_ORDER) != IN_ORDER  # as text they would not


def test_nanoseconds_decide_within_one_microsecond():
    assert log_time_order("2026-11-26T14:40:20.000000998Z") < log_time_order("2026-11-26T14:40:20.000000999Z")


def test_a_stamp_that_does_not_parse_sorts_last_and_keeps_its_place():
    lines = ["garbage-1", "2026-11-26T14:40:21Z", "", "2026-11-26T14:40:20Z"]
    assert sorted(lines, key=log_time_order) == ["2026-11-26T14:40:20Z", "2026-11-26T14:40:21Z", "garbage-1", ""]


def _pod(labels: dict[str, str] | None) -> SimpleNamespace:
    return SimpleNamespace(metadata=SimpleNamespace(labels=labels))


def test_a_pods_worker_index_is_its_index_label_when_that_is_a_number():
    from disttrain.api.names import INDEX_LABEL

    assert [logs.worker_of(_pod(labels)) for labels in (
        {INDEX_LABEL: "0"}, {INDEX_LABEL: "12"}, {INDEX_LABEL: "-1"}, {INDEX_LABEL: "x"}, {INDEX_LABEL: ""},
        {"other": "3"}, {}, None)] == [0, 12, None, None, None, None, None, None]


def test_a_log_line_unpacks_as_worker_and_text():
    worker, text = logs.LogLine(3, "step 7", "2026-11-26T14:40:20Z")
    assert (worker, text) == (3, "step 7")
    assert list(logs.LogLine(None, "")) == [None, ""]


# merged blocks on a queue until every worker's log ends: a merge that loses the end of
# one would block these tests for ever (and a mutation run for minutes per mutant). The
# bound is a hang guard, far above the milliseconds they take, not a duration checked.
HANG_GUARD = pytest.mark.timeout(60)


@HANG_GUARD
def test_followed_logs_pass_on_every_workers_lines_in_their_order_and_end_when_every_log_ends():
    from disttrain.client.logs import LogLine

    def worker(index: int, count: int):
        def lines():
            for n in range(count):
                time.sleep(random.random() / 1000)
                yield LogLine(index, f"line {n}")
        return lines

    merged = list(logs.merged([worker(0, 50), worker(1, 0), worker(2, 1200)]))
    assert len(merged) == 1250  # more than the queue holds: the pumps wait, nothing is lost
    for index, count in ((0, 50), (2, 1200)):
        assert [line.text for line in merged if line.worker == index] == [f"line {n}" for n in range(count)]
    assert list(logs.merged([])) == []


@HANG_GUARD
def test_a_reader_that_stops_following_leaves_no_thread_that_keeps_the_program_alive():
    """A followed log is read by one thread per worker, blocked until the kubelet sends a
    line; a script that stops reading (or is done) must still exit: they are daemons."""
    gate = threading.Event()

    def quiet():
        gate.wait()
        return iter(())

    def one():
        yield logs.LogLine(0, "only")

    before = set(threading.enumerate())
    reader = logs.merged([one, quiet])
    assert next(reader).text == "only"
    pumps = [t for t in set(threading.enumerate()) - before if t.is_alive()]
    assert pumps and all(t.daemon for t in pumps), pumps
    gate.set()
    assert list(reader) == []


def test_a_busy_servers_retry_after_is_obeyed_between_0_and_10_seconds():
    """A 429's Retry-After (seconds, as the API server writes it) decides the wait before the
    request is asked again: within 0..10 s; absent or not a number, 1 s, as kubectl waits.
    (The headers are urllib3's, whose names match in any case.)"""
    from urllib3 import HTTPHeaderDict

    from disttrain.client.errors import retry_after

    said = ["3", "0.5", "0", "-5", "10", "99", "soon", ""]
    assert [retry_after(HTTPHeaderDict({"Retry-After": v})) for v in said] == [3, 0.5, 0, 0, 10, 10, 1, 1]
    assert [retry_after(h) for h in (HTTPHeaderDict(), HTTPHeaderDict({"Other": "5"}), None, {})] == [1, 1, 1, 1]


def test_a_logs_since_asks_for_whole_seconds_rounded_up_and_only_a_positive_one():
    """The API server takes whole seconds: `since` is rounded up (kubectl's rule), so no line
    of the asked span is left out; under a second asks one. 0 or less is refused by name
    (tests/cluster/test_client_api.py reads real logs with these)."""
    from disttrain.client.errors import InvalidArgument
    from disttrain.client.logs import since_seconds

    assert [since_seconds(s) for s in (0.001, 0.5, 1, 1.2, 119.2, 120, 3600)] == [1, 1, 1, 2, 120, 120, 3600]
    for bad in (0, -0.5, -5):
        with pytest.raises(InvalidArgument, match=f"since {bad}: give seconds > 0"):
            since_seconds(bad)


@HANG_GUARD
def test_an_error_reading_one_workers_log_reaches_the_reader():
    def broken():
        yield logs.LogLine(0, "first")
        raise DisttrainError("Error from server (NotFound): pods \"j-worker-0\" not found")

    def quiet():
        return iter(())

    reader = logs.merged([broken, quiet])
    assert next(reader).text == "first"
    with pytest.raises(DisttrainError, match="j-worker-0"):
        next(reader)


JOB = {"apiVersion": "disttrain.dev/v1alpha1", "kind": "DistributedTraining", "metadata": {"name": "slow"},
       "spec": {"nodes": 1}}


@pytest.mark.parametrize("late,call", [
    ({"GET"}, lambda c: c.get("slow")), ({"GET"}, lambda c: c.status("slow")), ({"GET"}, lambda c: c.list()),
    ({"GET"}, lambda c: c.jobs()), ({"GET"}, lambda c: c.events("slow")), ({"POST"}, lambda c: c.create(JOB)),
    ({"PATCH"}, lambda c: c.apply(JOB)), ({"PATCH"}, lambda c: c.suspend("slow")),
    ({"PATCH"}, lambda c: c.resume("slow")), ({"DELETE"}, lambda c: c.delete("slow")),
], ids=["get", "status", "list", "jobs", "events", "create", "apply", "suspend", "resume", "delete"])
def test_every_request_of_every_method_is_bounded_by_request_timeout(tmp_path, late, call):
    """docs/cli.md: request_timeout bounds one request, whichever method sends it (only
    watches and followed logs are not bounded). The server answers 2 s late; the limit is 1 s."""
    with late_server(tmp_path, late) as kubeconfig:
        with pytest.raises(DisttrainError, match="timed out"):
            call(Client(kubeconfig=kubeconfig, request_timeout=1))


def test_request_timeout_zero_means_no_limit_and_absent_means_the_default(tmp_path, monkeypatch):
    """docs/cli.md, the Python client: request_timeout in seconds, 0 for no limit, absent for
    the default. The default is shortened here to 1 s and the server answers after 2 s."""
    monkeypatch.setattr(client_module, "REQUEST_TIMEOUT", (1, 1))
    with late_server(tmp_path, {"GET"}) as kubeconfig:
        with pytest.raises(DisttrainError, match="timed out"):
            Client(kubeconfig=kubeconfig).get("slow")
        assert Client(kubeconfig=kubeconfig, request_timeout=0).get("slow")["metadata"]["name"] == "slow"
        assert Client(kubeconfig=kubeconfig, request_timeout=5).get("slow")["metadata"]["name"] == "slow"


def test_every_error_the_client_raises_imports_from_disttrain():
    """docs/cli.md: every error is a DisttrainError a user can catch by name from the
    package they imported the client from."""
    import inspect

    import disttrain
    from disttrain.client import errors as client

    raised = {name for name, cls in inspect.getmembers(client, inspect.isclass)
              if issubclass(cls, client.DisttrainError) and not name.startswith("_")}
    assert raised >= {"ApplyConflict", "NotFound", "Forbidden", "Unreachable", "KubeconfigError", "InvalidArgument",
                      "InvalidJob", "JobFailed", "WaitTimeout", "DisttrainError"}
    assert raised <= set(disttrain.__all__)
    assert all(getattr(disttrain, name) is getattr(client, name) for name in raised)
    documented = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    assert all(f"`{name}`" in documented for name in raised)


def test_an_api_error_reads_as_kubectl_prints_it_and_keeps_its_status():
    """An HTTP error's Status body, and a watch's ERROR event (the Kubernetes client raises it
    with no body and "Reason: message" as its reason), both read `Error from server (Reason):
    message`; the status code stays on the error (410 is what a watch resumes after). A 404
    says what the server found missing, in its words: the job, its namespace, or the kind."""
    body = json.dumps({"kind": "Status", "reason": "Conflict", "message": "the object  was modified"})
    conflict = errors.api_error(409, "Conflict", body)
    assert (type(conflict), str(conflict), conflict.status) == (
        DisttrainError, "Error from server (Conflict): the object was modified", 409)  # only a 403 is Forbidden
    expired = errors.api_error(410, "Expired: too old resource version: 12 (15)", None)
    assert (str(expired), expired.status) == ("Error from server (Expired): too old resource version: 12 (15)", 410)
    job = json.dumps({"kind": "Status", "reason": "NotFound",
                      "message": 'distributedtrainings.disttrain.dev "demo" not found'})
    missing = errors.api_error(404, "Not Found", job)
    assert (type(missing), missing.status) == (errors.NotFound, 404)
    assert str(missing) == 'Error from server (NotFound): distributedtrainings.disttrain.dev "demo" not found'
    gone = json.dumps({"kind": "Status", "reason": "NotFound", "message": 'namespaces "elsewhere" not found'})
    assert str(errors.api_error(404, "Not Found", gone)) == (
        'Error from server (NotFound): namespaces "elsewhere" not found')  # the server's words: not the job
    unserved = json.dumps({"kind": "Status", "reason": "NotFound", "details": {},
                           "message": "the server could not find the requested resource"})  # no CRD installed
    not_installed = ('Error from server (NotFound): the server doesn\'t have a resource type '
                     '"distributedtrainings.disttrain.dev": install disttrain\'s CRDs '
                     "(`disttrain crd | kubectl apply -f -`, or the Helm chart)")
    assert str(errors.api_error(404, "Not Found", unserved)) == not_installed
    assert str(errors.api_error(404, "Not Found", "")) == not_installed  # a 404 without words: kubectl's
    assert str(errors.api_error(404, "Not Found", unserved, "pods")) == (
        "Error from server (NotFound): the server could not find the requested resource")
    # an answer that is not the API server's Status (a proxy's own text) reads as that text
    proxied = errors.api_error(503, "Service Unavailable", "upstream connect  error\n")
    assert (type(proxied), str(proxied)) == (DisttrainError, "Error from server (Service Unavailable): upstream connect error")
    denied = errors.api_error(403, "Forbidden", json.dumps({"reason": "Forbidden", "message": "no"}))
    assert (type(denied), denied.status) == (errors.Forbidden, 403)
    assert str(denied) == "Error from server (Forbidden): no"
    # an answer without a reason phrase or a body (HTTP allows both): its status, and says so
    for bare in ((500, None, None), (500, "", "")):
        assert str(errors.api_error(*bare)) == "Error from server (500): no message"


class _Busy(StandInHandler):
    """Answers 429 (Retry-After: 0.25) to the first `refusals` requests, then a job."""
    refusals = 0
    seen: list[str]

    def do_GET(self) -> None:
        self.seen.append(self.path)
        busy = len(self.seen) <= self.refusals
        if busy:
            self.reply(429, {"kind": "Status", "reason": "TooManyRequests", "message": "storage is (re)initializing"},
                       headers={"Retry-After": "0.25"})
        else:
            self.reply(200, {**JOB, "metadata": {"name": "slow", "namespace": "n"}})


@pytest.mark.parametrize("refusals,answered", [(3, True), (client_module.BUSY_RETRIES + 1, False)])
def test_a_request_answered_too_many_requests_is_asked_again_as_kubectl_does(tmp_path, monkeypatch, refusals,
                                                                          answered):
    """A 429 means the API server did not serve the request (busy, or still building its
    cache of the jobs right after the CRD was created, where a real one answers it): it is
    asked again after Retry-After, BUSY_RETRIES times, then the 429 is the error. A stand-in
    server answers 429 here, because a real one cannot be made to on demand."""
    handler = type("Handler", (_Busy,), {"refusals": refusals, "seen": []})
    waits: list[float] = []
    monkeypatch.setattr(client_module.time, "sleep", waits.append)  # the waits asked, not taken
    with stand_in(tmp_path, handler) as kubeconfig:
        client = Client(kubeconfig=kubeconfig)
        if answered:
            assert client.get("slow")["metadata"]["name"] == "slow"
            assert len(handler.seen) == refusals + 1
        else:
            with pytest.raises(DisttrainError, match=r"^Error from server \(TooManyRequests\): storage is"):
                client.get("slow")
            assert len(handler.seen) == client_module.BUSY_RETRIES + 1
        assert waits == [0.25] * (len(handler.seen) - 1)  # each the answer's own Retry-After


class _Proxy(StandInHandler):
    """A proxy in front of the API server whose upstream is down: 503, its own text."""

    def do_GET(self) -> None:  # with the reason phrase "Service Unavailable"
        self.reply(503, b"upstream connect error or disconnect/reset before headers\n", "text/plain")


def test_an_answer_that_is_not_the_api_servers_reads_as_its_status_phrase_and_text(tmp_path):
    """A proxy's own answer has no Status body: the error names the HTTP reason phrase, as
    kubectl does, and the text as it came, on one line. (A stand-in: a real API server
    always answers with a Status.)"""
    with stand_in(tmp_path, _Proxy) as kubeconfig:
        with pytest.raises(DisttrainError) as raised:
            Client(kubeconfig=kubeconfig).get("demo")
    assert str(raised.value) == ("Error from server (Service Unavailable): upstream connect error or "
                                 "disconnect/reset before headers")
    assert raised.value.status == 503


class _NoCrd(StandInHandler):
    """An API server without disttrain's CRD: every request for the jobs is its 404, as
    kube-apiserver answers a group it serves nothing of: its HTTP mux's plain-text page."""

    def do_GET(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.reply(404, b"404 page not found\n", "text/plain; charset=utf-8",
                   {"X-Content-Type-Options": "nosniff"})

    do_POST = do_PATCH = do_DELETE = do_GET


class _OtherVersion(_NoCrd):
    """The group served at another version only (an older CRD): a Status that says the
    resource is not there."""

    def do_GET(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.reply(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound",
                         "details": {}, "code": 404, "message": errors.NOT_SERVED})

    do_POST = do_PATCH = do_DELETE = do_GET


@pytest.mark.parametrize("server", [_NoCrd, _OtherVersion], ids=["no-crd", "other-version"])
def test_a_cluster_without_the_crd_is_told_so_with_how_to_install_it(tmp_path, server):
    """The API server's 404 for the jobs' path (plain text where no CRD of the group is
    installed, a Status where the group is served at another version) means the CRD is not
    installed: every request for them says so and how to install it. (A stand-in answers
    as such a server does: the shared control plane here must keep its CRD.)"""
    from disttrain.client.errors import NotFound

    with stand_in(tmp_path, server) as kubeconfig:
        client = Client(kubeconfig=kubeconfig)
        for call in (lambda: client.get("demo"), client.list, lambda: client.delete("demo"),
                     lambda: client.create({**JOB, "metadata": {"name": "demo"}})):
            with pytest.raises(NotFound) as raised:
                call()
            assert str(raised.value) == (
                'Error from server (NotFound): the server doesn\'t have a resource type '
                '"distributedtrainings.disttrain.dev": install disttrain\'s CRDs '
                "(`disttrain crd | kubectl apply -f -`, or the Helm chart)")


def test_a_job_with_several_errors_is_refused_before_any_request_naming_each(tmp_path):
    """create and apply validate offline: InvalidJob names the job (or says "(unnamed)")
    and every error, "; " between them, and no request reaches the server."""
    from disttrain.client.errors import InvalidJob

    with late_server(tmp_path, set()) as kubeconfig:
        client = Client(kubeconfig=kubeconfig)
        bad = {**JOB, "metadata": {"name": "twice-wrong"}, "spec": {**JOB["spec"], "nodes": 0, "gpusPerNode": -1}}
        for call in (client.create, client.apply):
            with pytest.raises(InvalidJob) as raised:
                call(bad)
            errors = raised.value.errors
            assert len(errors) == 2 and str(raised.value) == f"error: twice-wrong is invalid: {errors[0]}; {errors[1]}"
            assert any(e.startswith("spec.nodes") for e in errors) and any(e.startswith("spec.gpusPerNode") for e in errors)
        with pytest.raises(InvalidJob) as unnamed:  # a job with no name yet says so in its place
            client.create({**bad, "metadata": {}})
        assert str(unnamed.value).startswith("error: (unnamed) is invalid: metadata.name: "), unnamed.value


def test_without_a_kubeconfig_the_client_reads_the_home_one_else_the_pods_service_account(tmp_path, monkeypatch):
    """As kubectl: --kubeconfig, else $KUBECONFIG, else ~/.kube/config; with none of them in
    a pod (KUBERNETES_SERVICE_HOST set), the pod's service account, and a pod without its
    token (the trainer's has none) is a KubeconfigError that says so."""
    from disttrain.client.errors import KubeconfigError
    from disttrain.client.kubeconfig import connect

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    home = tmp_path / ".kube" / "config"
    with pytest.raises(KubeconfigError, match=f"^error: no kubeconfig at {home}: set KUBECONFIG"):
        connect(None, None)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    with pytest.raises(KubeconfigError) as tokenless:
        connect(None, None)
    assert str(tokenless.value) == (f"error: no kubeconfig at {home}, and this pod's service account cannot be "
                                    "used: Service token file does not exist.; set KUBECONFIG or mount the "
                                    "account's token")
    # A pod with its token: the service's address and the token, in the client's own
    # configuration. (The library reads the token's and CA's paths from its module
    # constants at each call; this host has no pod's files.)
    from kubernetes.config import incluster_config

    (tmp_path / "token").write_text("the-token")
    (tmp_path / "ca.crt").write_text("a CA")
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(tmp_path / "token"))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(tmp_path / "ca.crt"))
    configuration = connect(None, None)[0].configuration
    assert (configuration.host, configuration.get_api_key_with_prefix("BearerToken")) == (
        "https://10.96.0.1:443", "bearer the-token")
    home.parent.mkdir()
    home.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": "http://127.0.0.1:1"}}], "users": [{"name": "u", "user": {}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u", "namespace": "from-home"}}]}))
    assert connect(None, None)[1] == "from-home"  # the home file wins over the pod's account


def test_the_clients_namespace_is_the_one_given_else_the_contexts_else_default(tmp_path, monkeypatch):
    """As kubectl: -n, else the context's namespace, else `default`. $KUBECONFIG may be a
    list of files, as kubectl's, some of them absent; a file of it that is not a kubeconfig
    is named."""
    bare = {"apiVersion": "v1", "kind": "Config", "current-context": "c", "users": [{"name": "u", "user": {}}],
            "clusters": [{"name": "k", "cluster": {"server": "http://127.0.0.1:1"}}],
            "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(bare))
    assert (Client(kubeconfig=str(path)).namespace, Client("given", kubeconfig=str(path)).namespace) == (
        "default", "given")
    bare["contexts"][0]["context"]["namespace"] = "team"
    path.write_text(yaml.safe_dump(bare))
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(tmp_path / "absent"), str(path)]))
    assert Client().namespace == "team"
    broken = tmp_path / "broken"  # each file of the list is checked, not only the first
    broken.write_text("just a string\n")
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(path), str(broken)]))
    with pytest.raises(errors.KubeconfigError) as refused:
        Client()
    assert str(refused.value).startswith(f"error: {broken}: not a kubeconfig: the file must be a map"), refused.value


def test_a_context_chosen_by_name_gives_its_own_server_and_namespace_and_an_unknown_one_lists_the_known(tmp_path):
    """--context: the server, the user and the namespace all come from that context, not
    from the current one; a name the file lacks is a KubeconfigError listing those it has."""
    from disttrain.client.errors import KubeconfigError
    from disttrain.client.kubeconfig import connect

    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "a", "users": [{"name": "u", "user": {}}],
        "clusters": [{"name": n, "cluster": {"server": f"http://127.0.0.1:{port}"}} for n, port in (("a", 1), ("b", 2))],
        "contexts": [{"name": n, "context": {"cluster": n, "user": "u", "namespace": f"ns-{n}"}} for n in "ab"]}))
    for context, host, namespace in ((None, 1, "ns-a"), ("b", 2, "ns-b")):
        api, ns = connect(str(path), context)
        assert (api.configuration.host, ns) == (f"http://127.0.0.1:{host}", namespace)
    with pytest.raises(KubeconfigError) as unknown:
        connect(str(path), "c")
    assert str(unknown.value) == f'error: context "c" does not exist in {path}; known: a, b'
    broken = tmp_path / "broken"  # said in our words (issue 70), not the client library's
    broken.write_text(yaml.safe_dump({"apiVersion": "v1", "current-context": "a", "users": [],
                                      "contexts": [{"name": "a", "context": {"cluster": "gone", "user": "u"}}]}))
    with pytest.raises(KubeconfigError) as refused:
        connect(str(broken), None)
    assert str(refused.value) == (f'error: {broken}: context "a" names the cluster "gone", which the file does not '
                                  "have (it has: none): fix the context, or run `kubectl config set-context a "
                                  "--cluster NAME`")


def test_a_kubeconfig_of_the_wrong_shape_is_named_by_key_entry_and_what_it_must_be():
    """What the client library would fail on deep inside (a TypeError), said first, for each
    of the three lists (tests/unit/test_cli.py reads the same through the CLI's process)."""
    from disttrain.client.kubeconfig import kubeconfig_problem

    cases = {
        "": None, "{}": None,
        "clusters: [{name: c, cluster: {server: x}}]\ncontexts: []\nusers: [{name: u}]\ncurrent-context: c": None,
        "[1]": "the file must be a map with clusters, contexts and users (got list)",
        "current-context: [c]": "current-context must be a string",
    }
    for key, inner in (("clusters", "cluster"), ("contexts", "context"), ("users", "user")):
        cases.update({
            f"{key}: 5": f"{key} must be a list of {{name, {inner}}} (got int)",
            f"{key}: [{{{inner}: {{}}}}]": f"{key}[0] must be a map with a name and a {inner}",
            f"{key}: [{{name: a, {inner}: {{}}}}, x]": f"{key}[1] must be a map with a name and a {inner}",
            f"{key}: [{{name: a, {inner}: [1]}}]": f"{key}[0].{inner} must be a map",
            f"{key}: [{{name: a, {inner}: null}}]": None,
        })
    assert {text: kubeconfig_problem(yaml.safe_load(text)) for text in cases} == cases


class _NoLogRoute(StandInHandler):
    """An API server behind a proxy that has no route for pod logs: the job and its one
    placed worker are served, the log is a 404 without a body."""

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path.endswith("/log"):
            self.reply(404, b"", "text/plain")
            return
        pod = {"metadata": {"name": "slow-worker-0", "labels": {INDEX_LABEL: "0"}},
               "spec": {"nodeName": "node-1", "containers": [{"name": "trainer"}]}}
        job = {"apiVersion": "disttrain.dev/v1alpha1", "kind": "DistributedTraining",
               "metadata": {"name": "slow", "namespace": "n", "resourceVersion": "1"}, "spec": {"nodes": 1}}
        self.reply(200, {"kind": "PodList", "metadata": {}, "items": [pod]} if path.endswith("/pods") else job)


def test_a_pod_log_the_server_answers_not_found_without_words_is_not_told_as_a_missing_crd(tmp_path):
    """Only a 404 for the jobs themselves means disttrain's CRD is not installed: reading a
    worker's log answered 404 without a Status (a proxy without the route; a real API server
    always says which pod) is kubectl's "could not find the requested resource"."""
    from disttrain.client.errors import NotFound

    with stand_in(tmp_path, _NoLogRoute) as kubeconfig:
        client = Client(kubeconfig=kubeconfig)
        for follow in (False, True):
            with pytest.raises(NotFound) as raised:
                list(client.logs("slow", follow=follow))
            assert str(raised.value) == "Error from server (NotFound): the server could not find the requested resource"


def test_a_connection_failure_is_told_in_a_few_plain_words():
    """The reason after `Unable to connect to the server URL: ` is the innermost cause in
    words, not urllib3's repr of its pool (a read timeout there gives the time left of the
    total, not the limit a user set)."""
    from http.client import RemoteDisconnected

    from urllib3.exceptions import MaxRetryError, NewConnectionError, ProtocolError, ReadTimeoutError

    from urllib3.connection import HTTPConnection

    pool, conn = SimpleNamespace(), HTTPConnection("nowhere.invalid")
    refused = NewConnectionError(conn, "Failed to establish a new connection: [Errno 111] Connection refused")
    cases = [
        (MaxRetryError(pool, "/x", refused), "connection refused - did you specify the right host or port?"),
        (ReadTimeoutError(pool, "/x", "Read timed out. (read timeout=1.9996)"),
         "read timed out - the server sent no answer in time"),
        (ProtocolError("Connection aborted.", RemoteDisconnected("Remote end closed connection without response")),
         "the server closed the connection without an answer"),
        (ProtocolError("Response ended prematurely"), "the connection broke off in the middle of the answer"),
        (ProtocolError("Connection broken: IncompleteRead(0 bytes read, 2 more expected)"),
         "the connection broke off in the middle of the answer"),
        (MaxRetryError(pool, "/x", ProtocolError()), "ProtocolError"),  # no words: its kind, not "NoneType"
        (MaxRetryError(pool, "/x", NewConnectionError(conn, "Failed to resolve 'nowhere.invalid'\n  (x)")),
         "Failed to resolve 'nowhere.invalid' (x)"),
    ]
    assert [errors.connection_failure(exc) for exc, _ in cases] == [want for _, want in cases]


class _KwokRoute(_NoLogRoute):
    """A worker placed on a KWOK node (hack/cluster.sh's fake nodes): its kubelet is KWOK's,
    which has no log to serve."""

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path.endswith("/log"):
            self.reply(500, {"kind": "Status", "status": "Failure", "reason": "InternalError", "code": 500,
                             "message": 'no logs found for container "trainer"'})
        elif path == "/api/v1/nodes/node-1":
            self.reply(200, {"kind": "Node", "metadata": {"name": "node-1", "labels": {"type": "kwok"},
                                                          "annotations": {"kwok.x-k8s.io/node": "fake"}}})
        else:
            super().do_GET()


def test_the_log_of_a_worker_on_a_kwok_node_says_the_pods_are_simulated(tmp_path):
    """Issue 70: KWOK's "no logs found" is said as what it is: the worker's node is a KWOK
    node, its pods are simulated and write no logs."""
    from disttrain.client.errors import NotFound

    with stand_in(tmp_path, _KwokRoute) as kubeconfig:
        client = Client(kubeconfig=kubeconfig)
        with pytest.raises(NotFound) as raised:
            list(client.logs("slow"))
    assert str(raised.value) == ("error: slow-worker-0 runs on node-1, a KWOK node: its pods are simulated and "
                                 "write no logs; read them on a cluster with real nodes (docs/local-cluster.md)")
