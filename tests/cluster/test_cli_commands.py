"""`disttrain` / `kubectl disttrain` in a cluster, and `from disttrain import Client`, on the
real control plane + KWOK with the operator running (tests/cluster/reconcile/conftest.py:
its own ServiceAccount, the manifests' RBAC). A job's progress comes from the trainer's
real /status server on loopback, which the test moves.

A command that returns runs through the CLI's main() in this process (`cli`, as
tests/unit/helpers.disttrain does: stdout, stderr, exit code as a process has them), so
`hack/mutation.py --cluster` sees the code it runs; a command that follows or watches until
stopped runs as `python -m disttrain.cli` from this checkout (`Streaming`), which
is also how kubectl's plugin mechanism and Ctrl-C are tried. All as admin unless a test
says otherwise; errors are checked as one line on stderr with kubectl's exit code. Logs need
pods that really log: tests/e2e/test_cli_logs.py. The tests that take no `operator` fixture
need none: the mutation run takes exactly those.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from unittest import mock

import pytest
import yaml
from reconcile.conftest import (annotate_exit, checkpoint_claim, job_manifest,  # noqa: F401 (fixtures)
                                operator_kubeconfig, running_operator)
from unit.helpers import disttrain, package_paths

pytestmark = pytest.mark.cluster

REF = "distributedtraining.disttrain.dev"


def cli_env(kubeconfig: str) -> dict[str, str]:
    return {**os.environ, "KUBECONFIG": kubeconfig,
            "PYTHONPATH": package_paths()}


def cli(cluster, *args: str, kubeconfig: str | None = None, stdin: str | None = None,
        tty: bool = False) -> subprocess.CompletedProcess:
    """`disttrain ARGS` as admin (or with `kubeconfig`), through main() in this process
    (tty: its stdout is a terminal)."""
    with mock.patch.dict(os.environ, {"KUBECONFIG": kubeconfig or cluster.kubeconfig}):
        done = disttrain(*args, stdin=stdin, tty=tty)
    return subprocess.CompletedProcess(list(args), done.returncode, done.stdout, done.stderr)


def cli_at_once(cluster, *calls: list[str], kubeconfig: str | None = None) -> list[subprocess.CompletedProcess]:
    """Several independent `disttrain` calls, one after the other."""
    return [cli(cluster, *args, kubeconfig=kubeconfig) for args in calls]


@contextlib.contextmanager
def ctrl_c_after(changes: int, on_synced: Callable[[], None]) -> Iterator[None]:
    """Ctrl-C for a watching command run by `cli` in this process: its watch of the real API
    server (Client.watch_all) is wrapped; once the command has shown what it listed,
    `on_synced` makes changes while it watches, and the read after the `changes`-th change
    it has shown raises KeyboardInterrupt, where Ctrl-C would have landed. A relist after
    the watch expired, up to its end (SYNCED), counts as one change."""
    from disttrain.client.client import Client

    real = Client.watch_all

    def watch_all(self, *args, **kwargs):
        shown, relisting = None, False
        for kind, obj in real(self, *args, **kwargs):
            yield kind, obj
            if shown is None:
                if kind == "SYNCED":
                    shown = 0
                    on_synced()
                continue
            if kind == "RELIST":
                relisting = True
                continue
            # A change: a watch event, or a relist's end; not an object a relist lists.
            if relisting != (kind == "SYNCED"):
                continue
            relisting = False
            shown += 1
            if shown >= changes:
                raise KeyboardInterrupt

    with mock.patch.object(Client, "watch_all", watch_all):
        yield


CRD = "distributedtrainings.disttrain.dev"
DESCRIPTION = "/spec/versions/0/schema/openAPIV3Schema/description"


def _expired_since(cluster, namespace: str, version: str) -> bool:
    """Does the API server refuse a watch of the jobs from `version` as expired (410)? It
    says so in the watch's first event (an ERROR), which the client raises."""
    from kubernetes import client as k8s
    from kubernetes import config, watch
    from kubernetes.client.exceptions import ApiException

    api = k8s.CustomObjectsApi(config.new_client_from_config(cluster.kubeconfig))
    try:
        for _ in watch.Watch().stream(api.list_namespaced_custom_object, "disttrain.dev", "v1alpha1", namespace,
                                      "distributedtrainings", resource_version=version, timeout_seconds=1):
            pass
    except ApiException as exc:
        if exc.status == 410:
            return True
        if exc.status == 429:  # its storage of the jobs is being built: not yet
            return False
        raise
    finally:
        api.api_client.close()
    return False


@contextlib.contextmanager
def crd_changed(cluster, namespace: str) -> Iterator[Callable[[], None]]:
    """Yields `change()`: the CRD's spec changes (its schema's description), as an upgrade
    of the chart that changes the CRD does; the API server then rebuilds its storage of the
    jobs, ends every watch of them, and refuses to resume one from a version before the
    change (410 Gone, "too old resource version"). change() returns once it refuses, so
    the next watch is sure to expire. The CRD is put back after, and the API server
    watches again from the newest version before the next test."""
    original = cluster.get("crd", CRD)["spec"]["versions"][0]["schema"]["openAPIV3Schema"].get("description")

    def listed() -> str:
        """The version of a list of the jobs (kubectl's `get -o json` makes its own List)."""
        path = f"/apis/disttrain.dev/v1alpha1/namespaces/{namespace}/distributedtrainings"
        return json.loads(cluster.kubectl("get", "--raw", path).stdout)["metadata"]["resourceVersion"]

    def set_description(text: str) -> str:
        before = listed()
        cluster.kubectl("patch", "crd", CRD, "--type=json", "-p",
                        json.dumps([{"op": "add", "path": DESCRIPTION, "value": text}]))
        return before

    def change() -> None:
        version = set_description(f"{original} (changed by {uuid.uuid4().hex[:8]})")
        cluster.wait_for(lambda: _expired_since(cluster, namespace, version), timeout=60,
                         what="the API server refusing a watch from before the CRD changed")

    try:
        yield change
    finally:
        version = set_description(original)
        cluster.wait_for(lambda: _expired_since(cluster, namespace, version), timeout=60,
                         what="the API server rebuilding its storage of the jobs")
        latest = listed()
        cluster.wait_for(lambda: not _expired_since(cluster, namespace, latest), timeout=60,
                         what="a watch of the jobs from the newest version")


def _as_from_a_terminal() -> None:
    """Ctrl-C's default disposition, as a command typed at a terminal has it: a test run
    started in the background (nohup, `&`) hands its children SIGINT ignored, and Python
    keeps an inherited SIG_IGN (as every POSIX program should)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Streaming:
    """A CLI command left running (submit following, top); its stdout lines as they come."""

    def __init__(self, cluster, *args: str):
        self.proc = subprocess.Popen([sys.executable, "-m", "disttrain.cli", *args], text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli_env(cluster.kubeconfig),
                                     start_new_session=True, preexec_fn=_as_from_a_terminal)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=lambda: self.lines.extend(iter(self.proc.stdout.readline, "")),
                                        daemon=True)
        self._reader.start()

    def wait_line(self, predicate, timeout: float = 60, start: int = 0) -> str:
        """The first line from `start` on that satisfies `predicate`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = next((line for line in list(self.lines)[start:] if predicate(line)), None)
            if found:
                return found
            if self.proc.poll() is not None and not self._reader.is_alive():
                break
            time.sleep(0.1)
        pytest.fail(f"no such line in {timeout}s; output so far:\n{''.join(self.lines)[-3000:]}"
                    f"\nstderr: {self.stderr() if self.proc.poll() is not None else '(running)'}", pytrace=False)

    def stderr(self) -> str:
        return self.proc.stderr.read() if self.proc.stderr else ""

    def finish(self, timeout: float = 30) -> int:
        code = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=5)
        return code

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)
        self._reader.join(timeout=5)


@pytest.fixture
def operator(cluster, namespace, operator_kubeconfig):  # noqa: F811
    """The operator, cluster-wide install mode only: the CLI reads what it writes."""
    with running_operator(cluster, namespace, operator_kubeconfig) as handle:
        yield handle


def watched_job(cluster, name: str, port: int, **spec) -> dict:
    """One worker whose /status is the test's trainer status server on loopback."""
    return job_manifest(name, nodes=1, metrics={"port": port}, trainer={"builtin": {"steps": 100, "batchSize": 8}},
                        podTemplate={"metadata": {"annotations": {cluster.POD_IP_ANNOTATION: "127.0.0.1"}}}, **spec)


def test_submit_status_top_wait_suspend_resume_delete(cluster, namespace, operator, trainer_status_server,  # noqa: F811
                                                      tmp_path: Path):
    port, sink = trainer_status_server
    sink.doc.update(step=40, totalSteps=100, loss=2.5, samplesPerSecond=64.0, worldSize=1,
                    checkpoint={"step": 40, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                "path": "/checkpoints/step-00000040"})
    path = tmp_path / "job.yaml"
    # ddp on one device: the operator falls back to auto and says so in a Warning Event.
    path.write_text(yaml.safe_dump(watched_job(cluster, "cli", port, strategy="ddp")))
    ns = ["-n", namespace]

    top = Streaming(cluster, "top", *ns)
    submit = Streaming(cluster, "submit", str(path), *ns)
    try:
        assert submit.wait_line(lambda line: line.startswith(REF)) == f"{REF}/cli created\n"
        # top learns of the job from its watch and redraws when the operator writes progress.
        top.wait_line(lambda line: line.startswith("cli ") and "40/100" in line)
        line = submit.wait_line(lambda line: "step 40/100" in line)
        assert line.startswith("cli: Running  step 40/100 [########------------]  40%  loss 2.5  64.0 samples/s  "
                               "ETA 7s  checkpoint step 40 (")  # (100-40) steps x 8 samples / 64 samples/s

        waited = cli(cluster, "wait", "cli", "--for", "Running", "--timeout", "30s", *ns)
        assert (waited.returncode, waited.stdout) == (0, f"{REF}/cli is Running\n"), waited.stderr

        status, as_yaml, listing, table, status_json, status_yaml = cli_at_once(
            cluster, ["status", "cli", *ns], ["get", "cli", *ns, "-o", "yaml"], ["get", "-A", "-o", "json"],
            ["get", *ns], ["status", "cli", *ns, "-o", "json"], ["status", "cli", *ns, "--output", "yaml"])
        assert status.returncode == 0, status.stderr
        text = status.stdout
        for expected in ("Phase:       Running", "Workers:     1 of 1 running; world size 1, restarts 0",
                         "Progress:    [########------------]  40%  step 40/100", "Loss:        2.5",
                         "Throughput:  64.0 samples/s", "ETA:         7s", "Checkpoint:  step 40 (",
                         "  Running=True ", "  Validated=True "):
            assert expected in text, text
        assert "Warning DDPSingleDevice: " in text.split("Events:\n")[1], text
        assert yaml.safe_load(as_yaml.stdout)["status"]["progress"]["step"] == 40
        for raw in (json.loads(status_json.stdout), yaml.safe_load(status_yaml.stdout)):  # the object, as get -o
            assert (raw["kind"], raw["metadata"]["name"], raw["metadata"]["namespace"]) == (
                "DistributedTraining", "cli", namespace)
            assert (raw["status"]["phase"], raw["status"]["progress"]["step"]) == ("Running", 40)
        assert any(o["metadata"]["name"] == "cli" for o in yaml.safe_load(listing.stdout)["items"])
        table = table.stdout.splitlines()
        assert table[0].split()[:4] == ["NAME", "PHASE", "NODES", "WORLD"]  # kubectl get dt's columns
        assert table[1].split()[:2] == ["cli", "Running"] and table[1].split()[3] == "1"

        late = cli(cluster, "wait", "cli", "--for", "Succeeded", "--timeout", "2s", *ns)
        assert (late.returncode, late.stdout, late.stderr) == (
            124, "", "error: timed out waiting for distributedtraining.disttrain.dev/cli\n")

        drawn = len(top.lines)
        before = cluster.get("pod", "cli-worker-0", namespace)["metadata"]["uid"]
        suspended = cli(cluster, "suspend", "cli", *ns)
        assert suspended.returncode == 0 and suspended.stdout.startswith(f"{REF}/cli suspended"), suspended.stderr
        assert cli(cluster, "wait", "cli", "--for", "Suspended", "--timeout", "30s", *ns).returncode == 0
        submit.wait_line(lambda line: line.startswith("cli: Suspended"))
        top.wait_line(lambda line: line.split()[:2] == ["cli", "Suspended"], start=drawn)  # redrawn on the event
        assert cli(cluster, "resume", "cli", *ns).stdout == f"{REF}/cli resumed\n"
        assert cli(cluster, "wait", "cli", "--for", "Running", "--timeout", "30s", *ns).returncode == 0

        back = cluster.wait_for(lambda: cluster.try_get("pod", "cli-worker-0", namespace), timeout=30, what="pod back")
        assert back["metadata"]["uid"] != before  # suspend deleted the pod; resume made a new one
        annotate_exit(cluster, namespace, "cli-worker-0", 0)
        assert submit.finish(timeout=60) == 0, submit.stderr()  # submit follows to the end: Succeeded is 0
        assert submit.lines[-1].startswith("cli: Succeeded")
        done = cli(cluster, "wait", "cli", *ns)  # --for Succeeded, already there
        assert done.stdout == f"{REF}/cli is Succeeded\n"
        never = cli(cluster, "wait", "cli", "--for", "Running", *ns)
        assert (never.returncode, never.stderr) == (
            1, f"error: {REF}/cli is Succeeded; it will never be Running\n")

        drawn = len(top.lines)
        deleted = cli(cluster, "delete", "cli", "--wait", *ns)
        assert (deleted.returncode, deleted.stdout) == (0, f'{REF} "cli" deleted\n'), deleted.stderr
        assert cluster.try_get("dt", "cli", namespace) is None
        top.wait_line(lambda line: line.startswith("(no jobs yet)"), start=drawn)
    finally:
        top.stop()
        submit.stop()


def test_unknown_job_unreachable_cluster_forbidden_and_invalid_file_are_one_line_errors(
        cluster, namespace, operator_kubeconfig, tmp_path: Path):  # noqa: F811
    ns = ["-n", namespace]
    missing = 'Error from server (NotFound): distributedtrainings.disttrain.dev "ghost" not found\n'
    commands = ("get", "status", "logs", "wait", "suspend", "resume", "delete")
    for out in cli_at_once(cluster, *([command, "ghost", *ns] for command in commands)):
        assert (out.returncode, out.stdout, out.stderr) == (1, "", missing), out.args

    # Through kubectl's plugin mechanism: `kubectl disttrain` runs kubectl-disttrain from PATH
    # (a wrapper for this checkout's CLI, as the kubectl-disttrain console script is).
    plugins = tmp_path / "bin"
    plugins.mkdir()
    wrapper = plugins / "kubectl-disttrain"
    wrapper.write_text(f"#!{sys.executable}\nimport sys\nsys.path[:0] = {package_paths().split(os.pathsep)!r}\n"
                       "from disttrain.cli.main import main\nsys.exit(main())\n")
    wrapper.chmod(0o755)
    env = {**cli_env(cluster.kubeconfig), "PATH": f"{plugins}{os.pathsep}{cluster.env['PATH']}"}
    helped = subprocess.run(["kubectl", "disttrain", "--help"], capture_output=True, text=True, env=env, timeout=60)
    assert helped.stdout.startswith("usage: kubectl disttrain "), helped.stderr
    assert re.search(r"^  submit +kubectl disttrain submit job\.yaml$", helped.stdout, re.M), helped.stdout
    out = subprocess.run(["kubectl", "disttrain", "get", "ghost", *ns], capture_output=True, text=True, env=env,
                         timeout=60)
    assert (out.returncode, out.stderr) == (1, missing)

    # Nothing listens on that port: kubectl's "connection refused" (that it is tried once, not
    # retried, is counted in tests/unit/test_cli.py).
    admin = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    admin["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:9"
    away = tmp_path / "away.kubeconfig"
    away.write_text(yaml.safe_dump(admin))
    out = cli(cluster, "get", "x", *ns, kubeconfig=str(away))
    assert (out.returncode, out.stderr) == (
        1, "Unable to connect to the server https://127.0.0.1:9: connection refused - did you specify the right "
           f"host or port? Start the cluster (make cluster-up for a local one), or fix its server in "
           f"KUBECONFIG={away}\n")
    no_config, no_context = cli_at_once(cluster, ["top", "--kubeconfig", str(tmp_path / "none")],
                                        ["get", "--context", "elsewhere"])
    assert (no_config.returncode, no_config.stderr) == (
        1, f"error: --kubeconfig={tmp_path / 'none'}: no such file: point --kubeconfig at an existing "
           "kubeconfig (make cluster-up prints the path of a local cluster's)\n")
    assert no_context.returncode == 1 and no_context.stderr.startswith('error: context "elsewhere" does not exist')

    # A service account with no rights at all: the API server's Forbidden, verbatim.
    cluster.kubectl("create", "serviceaccount", "nobody", *ns)
    nobody = cluster.kubeconfig_for_service_account(namespace, "nobody", duration="10m")
    # (the context's namespace is the test's)
    def forbidden(verb: str, name: str) -> str:
        return (f'Error from server (Forbidden): distributedtrainings.disttrain.dev "{name}" is forbidden: User '
                f'"system:serviceaccount:{namespace}:nobody" cannot {verb} resource "distributedtrainings" in API '
                f'group "disttrain.dev" in the namespace "{namespace}"\n')

    for out in cli_at_once(cluster, ["get", "ghost"], ["delete", "ghost"], kubeconfig=nobody):
        assert (out.returncode, out.stderr) == (1, forbidden(out.args[0], "ghost")), out.args
    both = cli(cluster, "delete", "ghost", "other", kubeconfig=nobody)  # each name is tried
    assert (both.returncode, both.stderr) == (1, forbidden("delete", "ghost") + forbidden("delete", "other"))

    # An invalid file is refused offline: exit 1, the validator's words, nothing created.
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(job_manifest("bad", strategy="ddpp")))
    out = cli(cluster, "submit", str(bad), *ns)
    assert out.returncode == 1 and "spec.strategy: is not allowed (got 'ddpp')" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr and cluster.try_get("dt", "bad", namespace) is None

    usage = cli(cluster, "wait")  # argparse: NAME is missing
    assert usage.returncode == 2 and "Traceback" not in usage.stderr


def test_python_client_creates_watches_waits_and_deletes(cluster, namespace, operator,
                                                         trainer_status_server):  # noqa: F811
    from disttrain import Client, DistributedTrainingSpec, InvalidJob, JobFailed, NotFound
    from disttrain.api import types as t

    port, sink = trainer_status_server
    sink.doc.update(step=10, totalSteps=100, loss=3.0, samplesPerSecond=32.0)
    client = Client(namespace, kubeconfig=cluster.kubeconfig)
    assert client.namespace == namespace

    spec = DistributedTrainingSpec(nodes=1, metrics=t.Metrics(port=port),
                                   trainer=t.TrainerSpec(builtin=t.BuiltinTrainer(steps=100, batch_size=8)),
                                   pod_template=t.PodTemplate(metadata=t.PodMetadata(
                                       annotations={cluster.POD_IP_ANNOTATION: "127.0.0.1"})))
    created = client.create(spec, name="typed")
    assert created["metadata"]["namespace"] == namespace and created["spec"]["nodes"] == 1

    seen = []
    for view in client.watch("typed", timeout=90):  # a view per change, from the watch
        seen.append(view)
        if view.step == 10 and not view.suspended:
            running = view
            client.suspend("typed")
        if view.phase == "Suspended":
            break
    assert running.phase == "Running" and running.loss == 3.0 and running.eta_seconds == 90 * 8 / 32
    assert [v.phase for v in seen].index("Running") < [v.phase for v in seen].index("Suspended")
    client.resume("typed")
    assert client.wait("typed", "Running", timeout=60).phase == "Running"
    assert [o["metadata"]["name"] for o in client.list()] == ["typed"]
    assert client.status("typed").phase == "Running"
    assert [(v.name, v.phase) for v in client.jobs()] == [("typed", "Running")]
    # The operator's Events about the job, and only about it: the suspend and the resume among them.
    from disttrain.api.conditions import JOB_RESUMED, JOB_SUSPENDED
    events = cluster.wait_for(lambda: (found := client.events("typed"))
                              and {JOB_SUSPENDED, JOB_RESUMED} <= {e["reason"] for e in found} and found,
                              timeout=120, what="the Suspended and Resumed Events")
    assert {(e["involvedObject"]["kind"], e["involvedObject"]["name"]) for e in events} == {("DistributedTraining", "typed")}
    # watch_all: the current jobs, SYNCED, then changes; here the label we add.
    stream = client.watch_all()
    first = [next(stream) for _ in range(2)]
    assert [(kind, obj.get("metadata", {}).get("name")) for kind, obj in first] == [("ADDED", "typed"), ("SYNCED", None)]
    cluster.kubectl("label", "dt", "typed", "-n", namespace, "team=a")
    change = next((kind, obj) for kind, obj in stream if obj["metadata"].get("labels", {}).get("team") == "a")
    assert change[0] == "MODIFIED"
    stream.close()

    with pytest.raises(InvalidJob) as refused:
        client.create({"metadata": {"name": "bad"}, "spec": {"nodes": 0}})
    assert any("spec.nodes" in e for e in refused.value.errors)
    assert cluster.try_get("dt", "bad", namespace) is None

    client.create(job_manifest("doomed", nodes=1, backoffLimit=0))
    client.wait("doomed", "Running", timeout=30)
    annotate_exit(cluster, namespace, "doomed-worker-0", 1)
    with pytest.raises(JobFailed) as failed:
        client.wait("doomed", timeout=60)
    assert failed.value.view.phase == "Failed"
    assert str(failed.value).startswith(f"error: {REF}/doomed is Failed; it will never be Succeeded: ")
    out = cli(cluster, "wait", "doomed", "-n", namespace)
    assert out.returncode == 1 and out.stderr.startswith(f"error: {REF}/doomed is Failed")

    client.delete("typed", wait=True, timeout=30)
    with pytest.raises(NotFound, match='Error from server \\(NotFound\\): distributedtrainings.disttrain.dev '
                                       '"typed" not found'):
        client.get("typed")


def test_a_job_lands_in_the_namespace_given_else_its_own_else_the_clients(cluster, namespace,
                                                                         operator_kubeconfig):  # noqa: F811
    """Where create() puts a job: the namespace argument, else the object's own
    metadata.namespace, else the client's (its argument, else the kubeconfig context's)."""
    from disttrain import Client

    other = f"{namespace}-b"
    cluster.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": other}})
    try:
        client = Client(namespace, kubeconfig=cluster.kubeconfig)
        doc = job_manifest("where", nodes=1)
        assert client.create(doc)["metadata"]["namespace"] == namespace
        own = {**doc, "metadata": {"name": "where", "namespace": other}}
        assert client.create(own)["metadata"]["namespace"] == other
        assert client.create(job_manifest("given", nodes=1), namespace=other)["metadata"]["namespace"] == other
        assert client.create({**own, "metadata": {"name": "given2", "namespace": other}},
                             namespace=namespace)["metadata"]["namespace"] == namespace
        # No namespace for the client: the kubeconfig context's.
        config = yaml.safe_load(Path(cluster.kubeconfig).read_text())
        config["contexts"][0]["context"]["namespace"] = other
        contextual = Path(cluster.kubeconfig).with_name(f"kubeconfig-{other}")
        contextual.write_text(yaml.safe_dump(config))
        assert Client(kubeconfig=str(contextual)).namespace == other
        assert sorted((o["metadata"]["namespace"], o["metadata"]["name"]) for o in client.list(all_namespaces=True)
                      if o["metadata"]["namespace"] in (namespace, other)) == [
            (namespace, "given2"), (namespace, "where"), (other, "given"), (other, "where")]
    finally:
        cluster.kubectl("delete", "namespace", other, "--wait=false")


def test_submit_following_a_job_that_fails_exits_1_with_the_reason(cluster, namespace, operator,
                                                                   tmp_path: Path):  # noqa: F811
    path = tmp_path / "doomed.yaml"
    path.write_text(yaml.safe_dump(job_manifest("doomed", nodes=1, backoffLimit=0)))
    submit = Streaming(cluster, "submit", str(path), "-n", namespace)
    try:
        submit.wait_line(lambda line: line.startswith("doomed: Running"))
        annotate_exit(cluster, namespace, "doomed-worker-0", 1)
        assert submit.finish(timeout=90) == 1  # a script must not take a failed training for a success
        assert submit.lines[-1].startswith("doomed: Failed")
        assert "doomed failed: BackoffLimitExceeded: " in submit.stderr()
    finally:
        submit.stop()


def test_get_lists_like_kubectl_names_selectors_no_headers_wide(cluster, namespace, operator_kubeconfig):  # noqa: F811
    """kubectl's list conventions on `get`: -o name, -l, --no-headers, -o wide (no operator
    needed: the jobs are listed as they are stored)."""
    for name, team in (("alpha", "a"), ("beta", "b")):
        doc = job_manifest(name, nodes=1)
        doc["metadata"]["labels"] = {"team": team}
        cluster.apply(doc, namespace=namespace)
    names = cli(cluster, "get", "-n", namespace, "-o", "name")
    assert names.returncode == 0, names.stderr
    assert names.stdout.splitlines() == [f"{REF}/alpha", f"{REF}/beta"]
    selected = cli(cluster, "get", "-n", namespace, "-l", "team=b", "--no-headers")
    assert [line.split()[0] for line in selected.stdout.splitlines()] == ["beta"]
    wide = cli(cluster, "get", "-n", namespace, "-o", "wide").stdout.splitlines()
    assert wide[0].split()[-3:] == ["AGE", "STRATEGY", "LOSS"] and len(wide) == 3  # as kubectl get dt -o wide
    one = cli(cluster, "get", "alpha", "-n", namespace, "-o", "name")
    assert one.stdout.strip() == f"{REF}/alpha"
    # -o json / yaml: a List of them, or the one job named, as stored.
    listed = json.loads(cli(cluster, "get", "-n", namespace, "-o", "json").stdout)
    assert (listed["apiVersion"], listed["kind"]) == ("v1", "List")
    assert [(o["kind"], o["metadata"]["name"]) for o in listed["items"]] == [
        ("DistributedTraining", "alpha"), ("DistributedTraining", "beta")]
    assert yaml.safe_load(cli(cluster, "get", "-n", namespace, "-o", "yaml").stdout) == listed
    named = cli(cluster, "get", "alpha", "-n", namespace, "-o", "yaml").stdout
    assert not named.startswith("---") and yaml.safe_load(named) == listed["items"][0]
    assert json.loads(cli(cluster, "get", "alpha", "-n", namespace, "-o", "json").stdout) == listed["items"][0]

    # Nothing selected: kubectl's words on stderr for a table, an empty List for -o json.
    nothing = cli(cluster, "get", "-n", namespace, "-l", "team=none")
    assert (nothing.returncode, nothing.stdout, nothing.stderr) == (
        0, "", f"No resources found in {namespace} namespace.\n")
    empty = json.loads(cli(cluster, "get", "-n", namespace, "-l", "team=none", "-o", "json").stdout)
    assert (empty["kind"], empty["items"]) == ("List", [])
    assert yaml.safe_load(cli(cluster, "get", "-n", namespace, "-l", "team=none", "-o", "yaml").stdout) == empty
    nowhere = cli(cluster, "get", "-A", "-l", f"team={uuid.uuid4().hex}")  # -A: kubectl names no namespace
    assert (nowhere.returncode, nowhere.stdout, nowhere.stderr) == (0, "", "No resources found\n")
    everywhere = cli(cluster, "get", "-A", "-l", "team=b").stdout.splitlines()
    assert everywhere[0].split()[:2] == ["NAMESPACE", "NAME"] and [namespace, "beta"] in [
        row.split()[:2] for row in everywhere[1:]]
    named_everywhere = cli(cluster, "get", "alpha", "-A")
    assert (named_everywhere.returncode, named_everywhere.stderr) == (
        2, "error: a NAME takes one namespace: drop -A and pass -n NAMESPACE\n")

    # One job's text: what `status` says, with the job's own Events (one written here as the operator would).
    uid = cluster.get("dt", "alpha", namespace)["metadata"]["uid"]
    cluster.apply({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "alpha.warned", "namespace": namespace},
                   "involvedObject": {"apiVersion": "disttrain.dev/v1alpha1", "kind": "DistributedTraining",
                                      "name": "alpha", "namespace": namespace, "uid": uid},
                   "type": "Warning", "reason": "FailedScheduling", "message": "no node fits the workers",
                   "firstTimestamp": "2026-11-27T10:00:00Z", "lastTimestamp": "2026-11-27T10:00:00Z", "count": 1,
                   "source": {"component": "disttrain-operator"}}, namespace=namespace)
    text = cli(cluster, "get", "alpha", "-n", namespace).stdout.splitlines()
    assert text[:2] == ["Name:        alpha", f"Namespace:   {namespace}"], text
    events = text[text.index("Events:") + 1:]
    assert len(events) == 1 and "FailedScheduling" in events[0] and "no node fits the workers" in events[0], text


def test_get_prints_jsonpath_and_custom_columns_and_watches_changes(cluster, namespace,
                                                                     operator_kubeconfig):  # noqa: F811
    """kubectl's -o jsonpath=, -o custom-columns= and -w on `get` (no operator: the jobs as stored)."""
    ns = ["-n", namespace]
    for name, nodes in (("alpha", 1), ("beta", 2)):
        cluster.apply(job_manifest(name, nodes=nodes), namespace=namespace)
    path, columns, one, bad = cli_at_once(
        cluster, ["get", *ns, "-o", "jsonpath={range .items[*]}{.metadata.name}={.spec.nodes}{'\\n'}{end}"],
        ["get", *ns, "-o", "custom-columns=NAME:.metadata.name,NODES:.spec.nodes,PHASE:.status.phase"],
        ["get", "beta", *ns, "-o", "jsonpath={.spec.nodes}"], ["get", *ns, "-o", "jsonpath={.items[0"])
    assert (path.returncode, path.stdout) == (0, "alpha=1\nbeta=2\n"), path.stderr
    assert columns.stdout.splitlines() == ["NAME    NODES   PHASE", "alpha   1       <none>", "beta    2       <none>"]
    assert one.stdout == "2"  # kubectl adds no newline either
    assert bad.returncode == 2 and "jsonpath:" in bad.stderr and "is not closed" in bad.stderr, bad.stderr
    # A list is kubectl's v1 List; --no-headers drops the columns' header.
    kind, bare = cli_at_once(cluster, ["get", *ns, "-o", "jsonpath={.apiVersion}/{.kind}"],
                             ["get", *ns, "--no-headers", "-o", "custom-columns=NAME:.metadata.name"])
    assert (kind.stdout, bare.stdout) == ("v1/List", "alpha\nbeta\n")

    names = Streaming(cluster, "get", *ns, "-w", "-o", "name")
    rows = Streaming(cluster, "get", "alpha", *ns, "-w")
    try:
        names.wait_line(lambda line: line == f"{REF}/beta\n")
        assert names.lines[:2] == [f"{REF}/alpha\n", f"{REF}/beta\n"]  # the list first
        header = rows.wait_line(lambda line: line.startswith("NAME"))
        assert header.split()[:2] == ["NAME", "PHASE"] and rows.wait_line(lambda line: line.startswith("alpha "))
        seen = len(rows.lines)
        cluster.apply(job_manifest("gamma", nodes=1), namespace=namespace)
        names.wait_line(lambda line: line == f"{REF}/gamma\n", start=2)
        cluster.kubectl("label", "dt", "alpha", "team=a", *ns)
        names.wait_line(lambda line: line == f"{REF}/alpha\n", start=3)  # a change is a line
        rows.wait_line(lambda line: line.startswith("alpha "), start=seen)
        assert not any(line.startswith("gamma") for line in rows.lines)  # only the named job
        assert names.proc.poll() is None and rows.proc.poll() is None  # watching until stopped
    finally:
        names.stop()
        rows.stop()


def test_submit_reads_stdin_and_dry_runs_and_apply_updates_in_place(cluster, namespace,
                                                                   operator_kubeconfig, tmp_path: Path):  # noqa: F811
    """submit -f FILE / -f -, --dry-run=client|server (nothing stored), and `apply`: server-side
    apply that creates, reports unchanged, updates what the file changes, and names the
    fields another manager owns."""
    ns = ["-n", namespace]
    doc = job_manifest("applied", nodes=1)
    text = yaml.safe_dump(doc)

    def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        return cli(cluster, *args, stdin=stdin)

    client_dry = run("submit", "-f", "-", "--dry-run=client", *ns, stdin=text)
    server_dry = run("submit", "-f", "-", "--dry-run=server", *ns, stdin=text)
    assert (client_dry.returncode, client_dry.stdout) == (0, f"{REF}/applied created (dry run)\n"), client_dry.stderr
    assert (server_dry.returncode, server_dry.stdout) == (0, f"{REF}/applied created (server dry run)\n"), \
        server_dry.stderr
    assert cluster.try_get("dt", "applied", namespace) is None  # neither stored anything
    # The API server's own checks run in a server dry run: a name it refuses is its error.
    refused = run("submit", "-f", "-", "--dry-run=server", *ns,
                  stdin=yaml.safe_dump({**doc, "metadata": {"name": "applied", "labels": {"bad key!": "x"}}}))
    assert refused.returncode == 1, refused.stderr
    assert refused.stderr.splitlines()[-1].startswith("Error from server (Invalid)"), refused.stderr  # after warnings

    path = tmp_path / "applied.yaml"
    path.write_text(text)
    created = run("submit", "-d", "-f", str(path), *ns)
    assert created.stdout == f"{REF}/applied created\n", created.stderr
    again = run("submit", "-d", str(path), *ns)
    assert again.returncode == 1 and again.stderr.splitlines()[-1].startswith("Error from server (AlreadyExists)")
    assert again.stderr.rstrip().endswith("`disttrain apply -f FILE` updates it"), again.stderr

    assert run("apply", "-f", str(path), *ns).stdout == f"{REF}/applied unchanged\n"
    doc["metadata"]["labels"] = {"team": "a"}
    doc["spec"]["suspend"] = True
    doc["spec"]["trainer"]["builtin"]["steps"] = 20  # a field submit set: owned by the same manager
    path.write_text(yaml.safe_dump(doc))
    dry = run("apply", "-f", str(path), "--dry-run=server", *ns)
    assert dry.stdout == f"{REF}/applied configured (server dry run)\n", dry.stderr
    assert cluster.get("dt", "applied", namespace)["spec"].get("suspend") is not True
    configured = run("apply", "-f", str(path), *ns)
    assert (configured.returncode, configured.stdout) == (0, f"{REF}/applied configured\n"), configured.stderr
    stored = cluster.get("dt", "applied", namespace)
    assert stored["spec"]["suspend"] is True and stored["metadata"]["labels"] == {"team": "a"}
    assert stored["spec"]["trainer"]["builtin"]["steps"] == 20
    fresh = run("apply", "-f", "-", *ns, stdin=yaml.safe_dump(job_manifest("fresh", nodes=1)))
    assert fresh.stdout == f"{REF}/fresh created\n", fresh.stderr

    # kubectl apply --server-side now owns spec.nodes: changing it is a conflict, named.
    owned = job_manifest("fresh", nodes=1)
    cluster.apply(owned, "--server-side", namespace=namespace)
    changed = yaml.safe_dump(job_manifest("fresh", nodes=2))
    conflict = run("apply", "-f", "-", *ns, stdin=changed)
    assert conflict.returncode == 1, conflict.stderr
    assert conflict.stderr.splitlines()[-1].startswith("Error from server (Conflict)"), conflict.stderr
    assert ".spec.nodes" in conflict.stderr and "--force-conflicts" in conflict.stderr
    forced = run("apply", "-f", "-", "--force-conflicts", *ns, stdin=changed)
    assert forced.stdout == f"{REF}/fresh configured\n", forced.stderr
    assert cluster.get("dt", "fresh", namespace)["spec"]["nodes"] == 2

    neither = run("submit", *ns)
    assert neither.returncode == 2 and "FILE or -f FILE" in neither.stderr


def test_suspend_resume_delete_take_several_all_selectors_and_ignore_not_found(cluster, namespace,
                                                                              operator_kubeconfig):  # noqa: F811
    ns = ["-n", namespace]
    for name, team in (("a1", "a"), ("a2", "a"), ("b1", "b")):
        doc = job_manifest(name, nodes=1, **({"checkpoint": {}} if name == "a2" else {}))  # a2: the pod's emptyDir
        doc["metadata"]["labels"] = {"team": team}
        cluster.apply(doc, namespace=namespace)

    def suspended() -> dict[str, bool]:
        return {o["metadata"]["name"]: bool(o["spec"].get("suspend"))
                for o in yaml.safe_load(cluster.kubectl("get", "dt", *ns, "-o", "yaml").stdout)["items"]}

    by_label = cli(cluster, "suspend", "-l", "team=a", *ns)
    says = ("suspended (a running trainer checkpoints its current step, then the pods are deleted; resume "
            "continues from that checkpoint)")
    # a2's checkpoints are in its pods' emptyDir: no promise of a resume from them
    lost = ("suspended (the pods are deleted, and the checkpoints in their emptyDir with them: resume starts from "
            "step 0; set spec.checkpoint.claimName or uri to resume where it stopped)")
    assert (by_label.returncode, by_label.stdout) == (0, f"{REF}/a1 {says}\n{REF}/a2 {lost}\n"), by_label.stderr
    assert suspended() == {"a1": True, "a2": True, "b1": False}
    assert cli(cluster, "resume", "a1", "a2", *ns).stdout == f"{REF}/a1 resumed\n{REF}/a2 resumed\n"
    assert suspended() == {"a1": False, "a2": False, "b1": False}

    ignored, missing, some, usage, both = cli_at_once(
        cluster, ["delete", "ghost", "--ignore-not-found", *ns], ["suspend", "ghost", *ns],
        ["delete", "ghost", "b1", *ns], ["delete", *ns], ["delete", "a1", "--all", *ns])
    assert (ignored.returncode, ignored.stdout, ignored.stderr) == (0, "", "")
    assert (missing.returncode, missing.stderr) == (
        1, 'Error from server (NotFound): distributedtrainings.disttrain.dev "ghost" not found\n')
    # Each name is tried: b1 is deleted although ghost was not there; the exit code says one failed.
    assert (some.returncode, some.stdout) == (1, f'{REF} "b1" deleted\n') and "ghost" in some.stderr
    assert (usage.returncode, usage.stderr) == (2, "error: name a job, or pass --all or -l SELECTOR (see disttrain "
                                                   "delete -h)\n")
    assert (both.returncode, both.stderr) == (2, "error: give NAMEs or --all/-l, not both\n")
    # --wait returns once each job is gone: a2 is held by a finalizer until a while after.
    cluster.kubectl("patch", "dt", "a2", *ns, "--type=merge", "-p", '{"metadata":{"finalizers":["test/hold"]}}')

    def release() -> None:
        cluster.wait_for(lambda: (cluster.try_get("dt", "a2", namespace) or {}).get("metadata", {}).get(
            "deletionTimestamp"), timeout=60, what="a2 being deleted")
        time.sleep(1)
        cluster.kubectl("patch", "dt", "a2", *ns, "--type=merge", "-p", '{"metadata":{"finalizers":null}}')

    releaser = threading.Thread(target=release)
    releaser.start()
    everything = cli(cluster, "delete", "--all", "--wait", *ns)
    gone = suspended()
    releaser.join()
    assert everything.stdout == f'{REF} "a1" deleted\n{REF} "a2" deleted\n', everything.stderr
    assert gone == {}
    nothing = cli(cluster, "delete", "--all", *ns)
    assert (nothing.returncode, nothing.stderr) == (0, f"No resources found in {namespace} namespace.\n")


def _connected_to(pid: int, port: int) -> bool:
    """Whether the process holds an established TCP connection to `port` (the API server's:
    a command that prints nothing while it waits is then inside its wait)."""
    sockets = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            sockets.add(target[len("socket:["):-1])
    for table in ("tcp", "tcp6"):
        for row in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = row.split()
            if fields[3] == "01" and fields[9] in sockets and int(fields[2].rsplit(":", 1)[1], 16) == port:
                return True
    return False


def test_ctrl_c_ends_what_follows_a_job_with_130_and_the_job_goes_on(cluster, namespace, operator_kubeconfig,  # noqa: F811
                                                                     tmp_path: Path):
    """submit (following), get -w, wait and top block until Ctrl-C: each then exits 130 and
    says "interrupted", and the job they followed is as it was. Also: status of a job the
    operator has not seen yet exits 0, and top exits 0 when the reader of its output goes
    away (`disttrain top | head`)."""
    ns = ["-n", namespace]
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job_manifest("follow", nodes=1)))
    port = int(yaml.safe_load(Path(cluster.kubeconfig).read_text())["clusters"][0]["cluster"]["server"]
               .rsplit(":", 1)[1])
    streams = {"submit": Streaming(cluster, "submit", str(path), *ns)}
    try:
        streams["submit"].wait_line(lambda line: line.startswith(REF))  # created; now following
        streams["get"] = Streaming(cluster, "get", "-w", *ns)
        streams["wait"] = Streaming(cluster, "wait", "follow", "--for", "Succeeded", *ns)
        streams["top"] = Streaming(cluster, "top", *ns)
        streams["get"].wait_line(lambda line: line.startswith("follow "))
        streams["top"].wait_line(lambda line: "job(s)" in line)
        cluster.wait_for(lambda: _connected_to(streams["wait"].proc.pid, port), timeout=60, what="wait watching")

        status = cli(cluster, "status", "follow", *ns)
        assert status.returncode == 0 and "follow" in status.stdout, status.stderr

        commands = ("submit", "get", "wait", "top")
        for command in commands:
            streams[command].proc.send_signal(signal.SIGINT)
        for command in commands:
            ended = streams[command]
            assert (ended.finish(timeout=60), ended.stderr().splitlines()[-1:]) == (130, ["interrupted"]), command
        job = cluster.try_get("dt", "follow", namespace)
        assert job is not None and not job["spec"].get("suspend") and "deletionTimestamp" not in job["metadata"]
    finally:
        for stream in streams.values():
            stream.stop()

    top = subprocess.Popen([sys.executable, "-m", "disttrain.cli", "top", *ns], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, env=cli_env(cluster.kubeconfig))
    try:
        shown = b""
        deadline = time.monotonic() + 60
        while b"job(s)" not in shown and time.monotonic() < deadline:
            if select.select([top.stdout], [], [], 1)[0]:
                shown += os.read(top.stdout.fileno(), 1 << 16)
        assert b"follow" in shown, shown
        top.stdout.close()  # like `| head` ending: top's next redraw finds no reader
        cluster.kubectl("label", "dt", "follow", "redraw=1", *ns)
        assert top.wait(timeout=60) == 0
        assert top.stderr.read() == b""
    finally:
        if top.poll() is None:
            top.kill()
            top.wait()


def test_wait_for_condition_jsonpath_and_delete(cluster, namespace, operator_kubeconfig):  # noqa: F811
    """kubectl's `wait --for` forms on a job whose status the test writes (as the operator would)."""
    ns = ["-n", namespace]
    cluster.apply(job_manifest("waited", nodes=1), namespace=namespace)

    condition = Streaming(cluster, "wait", "waited", "--for=condition=checkpointstale", "--timeout", "60s", *ns)
    step = Streaming(cluster, "wait", "waited", "--for=jsonpath={.status.progress.step}=40", "--timeout", "60s", *ns)
    gone = Streaming(cluster, "wait", "waited", "--for", "delete", "--timeout", "60s", *ns)
    try:
        cluster.patch_status("dt", "waited", {"progress": {"step": 10}}, namespace)
        cluster.patch_status("dt", "waited", {"conditions": [
            {"type": "CheckpointStale", "status": "True", "reason": "NoRecentCheckpoint", "message": "m",
             "lastTransitionTime": "2026-11-25T00:00:00Z"}]}, namespace)
        assert condition.finish(timeout=60) == 0, condition.stderr()
        assert condition.lines == [f"{REF}/waited condition met\n"]
        assert step.proc.poll() is None  # step 10 is not 40
        cluster.patch_status("dt", "waited", {"progress": {"step": 40}}, namespace)
        assert step.finish(timeout=60) == 0 and step.lines == [f"{REF}/waited condition met\n"], step.stderr()
        assert gone.proc.poll() is None
        cluster.kubectl("delete", "dt", "waited", *ns)
        assert gone.finish(timeout=60) == 0 and gone.lines == [f"{REF}/waited deleted\n"], gone.stderr()
    finally:
        for streaming in (condition, step, gone):
            streaming.stop()
    late = cli(cluster, "wait", "ghost", "--for=delete", *ns)  # already gone: nothing to wait for
    assert (late.returncode, late.stdout) == (0, f"{REF}/ghost deleted\n"), late.stderr
    bad = cli(cluster, "wait", "ghost", "--for=ready", *ns)
    assert bad.returncode == 2 and "condition=TYPE[=STATUS]" in bad.stderr


def test_kubectl_completes_the_plugin_through_kubectl_complete_disttrain(cluster, namespace, operator_kubeconfig,
                                                                        tmp_path: Path):  # noqa: F811
    """kubectl (1.26+) asks `kubectl_complete-disttrain` on PATH for `kubectl disttrain ...<TAB>`:
    the real kubectl's `__complete` (what its shell scripts call) offers our commands, flags,
    and the job names the cluster has."""
    cluster.apply(job_manifest("completed-one", nodes=1), namespace=namespace)
    plugins = tmp_path / "bin"
    plugins.mkdir()
    for name, entry in (("kubectl-disttrain", "main"), ("kubectl_complete-disttrain", "kubectl_complete")):
        script = plugins / name  # what the console scripts of pyproject.toml are, for this checkout
        script.write_text(f"#!{sys.executable}\nimport sys\nsys.path[:0] = {package_paths().split(os.pathsep)!r}\n"
                          f"from disttrain.cli.main import {entry}\nsys.exit({entry}())\n")
        script.chmod(0o755)
    env = {**cli_env(cluster.kubeconfig), "PATH": f"{plugins}{os.pathsep}{cluster.env['PATH']}"}

    def complete(*words: str) -> list[str]:
        out = subprocess.run(["kubectl", "__complete", "disttrain", *words], capture_output=True, text=True, env=env,
                             timeout=60)
        assert out.returncode == 0, out.stderr
        return out.stdout.splitlines()

    def complete_here(*words: str) -> list[str]:
        """The same completer through kubectl_complete() in this process (mutation testing sees it)."""
        from disttrain.cli.completion import kubectl_complete

        out = io.StringIO()
        with mock.patch.dict(os.environ, {"KUBECONFIG": cluster.kubeconfig}), contextlib.redirect_stdout(out):
            assert kubectl_complete(list(words)) == 0
        return out.getvalue().splitlines()

    asked = {("su",): ["submit", "suspend", ":4"], ("get", "--w"): ["--watch", ":4"],
             ("wait", "x", "--for", "con"): ["condition=", ":6"],
             ("status", "-n", namespace, "completed-"): ["completed-one", ":4"],  # from the cluster
             ("get", "-o", "json"): ["json", "jsonpath=", ":6"]}
    for words, offered in asked.items():
        assert complete(*words) == complete_here(*words) == offered, words


def test_top_redraws_on_every_change_and_ctrl_c_ends_it_with_130(cluster, namespace, operator_kubeconfig):  # noqa: F811
    """`top` shows every job of the namespace as listed, then the whole table again on each
    change (a status written, a job deleted), one table per change, until Ctrl-C: 130,
    "interrupted", and the jobs untouched."""
    ns = ["-n", namespace]
    with ctrl_c_after(1, lambda: cluster.apply(job_manifest("alpha", nodes=1), namespace=namespace)):
        empty = cli(cluster, "top", *ns)
    assert empty.returncode == 130, empty.stderr
    assert empty.stdout.splitlines()[0] == "(no jobs yet)" and "0 job(s)" in empty.stdout.splitlines()[1]
    assert empty.stdout.split("\n\n")[1].splitlines()[1].split()[:2] == ["alpha", "Pending"], empty.stdout

    cluster.apply(job_manifest("beta", nodes=1), namespace=namespace)
    cluster.patch_status("dt", "alpha", dict(phase="Running", progress={"step": 40, "totalSteps": 100},
                                             resolved={"worldSize": 1}), namespace)

    def changes() -> None:
        cluster.patch_status("dt", "beta", dict(phase="Running", progress={"step": 7, "totalSteps": 70}), namespace)
        cluster.kubectl("delete", "dt", "alpha", *ns)

    with ctrl_c_after(2, changes):
        out = cli(cluster, "top", *ns)
    assert (out.returncode, out.stderr) == (130, "interrupted\n")
    tables = [t.splitlines() for t in out.stdout.split("\n\n") if t]
    assert len(tables) == 3, out.stdout  # as listed, then one per change
    first, second, third = tables
    assert first[0].split()[:4] == ["NAME", "PHASE", "NODES", "WORLD"] and "\x1b" not in out.stdout  # not a terminal
    assert [row.split()[:2] for row in first[1:-1]] == [["alpha", "Running"], ["beta", "Pending"]]
    assert first[1].split()[3] == "1" and "40/100" in first[1]
    assert re.fullmatch(r"-- \d\d:\d\d:\d\d, 2 job\(s\); updates on every change, Ctrl-C quits", first[-1])
    assert [row.split()[:2] for row in second[1:-1]] == [["alpha", "Running"], ["beta", "Running"]]
    assert "7/70" in second[2]
    assert [row.split()[:2] for row in third[1:-1]] == [["beta", "Running"]] and "1 job(s)" in third[-1]
    assert cluster.try_get("dt", "beta", namespace) is not None

    # On a terminal each table replaces the last (cursor home, clear), with no blank line.
    with ctrl_c_after(1, lambda: cluster.patch_status("dt", "beta", dict(phase="Succeeded"), namespace)):
        drawn = cli(cluster, "top", *ns, tty=True)
    screens = drawn.stdout.split("\x1b[H\x1b[2J")
    assert screens[0] == "" and len(screens) == 3 and "\n\n" not in drawn.stdout, drawn.stdout
    assert all(screen.endswith("; updates on every change, Ctrl-C quits\n") for screen in screens[1:]), [s[-60:] for s in screens]
    assert screens[2].splitlines()[1].split()[:2] == ["beta", "Succeeded"]

    # -A: every namespace, the first column saying which.
    with ctrl_c_after(1, lambda: cluster.patch_status("dt", "beta", dict(phase="Failed"), namespace)):
        everywhere = cli(cluster, "top", "-A")
    first = everywhere.stdout.split("\n\n")[0].splitlines()
    assert first[0].split()[:2] == ["NAMESPACE", "NAME"] and [namespace, "beta", "Succeeded"] in [
        row.split()[:3] for row in first], everywhere.stdout


def test_get_watch_prints_the_list_then_one_row_per_change_until_ctrl_c(cluster, namespace,
                                                                        operator_kubeconfig):  # noqa: F811
    """`get -w`: the list with its header, then a row (no header) for each job that changes or
    appears, in kubectl's columns; `get NAME -w` only that job's changes; Ctrl-C: 130."""
    ns = ["-n", namespace]
    cluster.apply(job_manifest("alpha", nodes=1), namespace=namespace)

    def changes() -> None:
        cluster.apply(job_manifest("beta", nodes=1), namespace=namespace)
        cluster.patch_status("dt", "alpha", dict(phase="Running"), namespace)

    with ctrl_c_after(2, changes):
        rows = cli(cluster, "get", *ns, "-w")
    assert (rows.returncode, rows.stderr) == (130, "interrupted\n")
    lines = rows.stdout.splitlines()
    assert lines[0].split()[:2] == ["NAME", "PHASE"] and len(lines) == 4, rows.stdout
    assert [line.split()[:2] for line in lines[1:]] == [["alpha", "Pending"], ["beta", "Pending"],
                                                          ["alpha", "Running"]]

    with ctrl_c_after(1, lambda: cluster.patch_status("dt", "beta", dict(phase="Running"), namespace)):
        one = cli(cluster, "get", "beta", *ns, "-w", "-o", "name")
    assert (one.returncode, one.stdout) == (130, f"{REF}/beta\n{REF}/beta\n")

    with ctrl_c_after(1, lambda: cluster.apply(job_manifest("gamma", nodes=1), namespace=namespace)):
        names = cli(cluster, "get", *ns, "-w", "-o", "name")
    assert names.stdout.splitlines() == [f"{REF}/alpha", f"{REF}/beta", f"{REF}/gamma"]

    late = job_manifest("late", nodes=1)
    late["metadata"]["labels"] = {"team": "late"}
    with ctrl_c_after(1, lambda: cluster.apply(late, namespace=namespace)):
        selected = cli(cluster, "get", *ns, "-w", "-l", "team=late", "--no-headers")
    assert selected.stderr == f"No resources found in {namespace} namespace.\ninterrupted\n", selected.stderr
    assert [line.split()[:2] for line in selected.stdout.splitlines()] == [["late", "Pending"]]
    # Every namespace: kubectl's words for nothing anywhere, then the row with its namespace.
    mark = f"later-{namespace[-5:]}"  # the namespace's random part: no other test's job has it
    later = job_manifest("later", nodes=1)
    later["metadata"]["labels"] = {"team": mark}
    with ctrl_c_after(1, lambda: cluster.apply(later, namespace=namespace)):
        anywhere = cli(cluster, "get", "-A", "-w", "-l", f"team={mark}", "--no-headers")
    assert anywhere.stderr == "No resources found\ninterrupted\n", anywhere.stderr
    assert [line.split()[:3] for line in anywhere.stdout.splitlines()] == [[namespace, "later", "Pending"]]
    # One job's watch prints wide rows (its text form is several lines); a deletion is a row too.
    with ctrl_c_after(1, lambda: cluster.patch_status("dt", "alpha", dict(phase="Succeeded"), namespace)):
        named = cli(cluster, "get", "alpha", *ns, "-w")
    assert named.stdout.splitlines()[0].split()[-3:] == ["AGE", "STRATEGY", "LOSS"], named.stdout
    assert [line.split()[:2] for line in named.stdout.splitlines()[1:]] == [["alpha", "Running"],
                                                                          ["alpha", "Succeeded"]]
    token = uuid.uuid4().hex[:12]  # -A sees every namespace: only this test's jobs
    for name in ("beta", "gamma"):
        cluster.kubectl("label", "dt", name, f"watch={token}", *ns)
    with ctrl_c_after(1, lambda: cluster.kubectl("delete", "dt", "gamma", *ns)):
        everywhere = cli(cluster, "get", "-A", "-w", "-l", f"watch={token}")
    lines = everywhere.stdout.splitlines()
    assert lines[0].split()[:2] == ["NAMESPACE", "NAME"], everywhere.stdout
    assert [line.split()[:2] for line in lines[1:]] == [[namespace, "beta"], [namespace, "gamma"],
                                                        [namespace, "gamma"]]  # the last: its deletion
    # -o yaml / json while watching: one document per object and change, a stream that parses.
    def stored() -> list[tuple[str, str | None]]:
        items = json.loads(cluster.kubectl("get", "dt", *ns, "-o", "json").stdout)["items"]
        return [(o["metadata"]["name"], (o.get("status") or {}).get("phase")) for o in items]

    before = stored()
    with ctrl_c_after(1, lambda: cluster.patch_status("dt", "beta", dict(phase="Restarting"), namespace)):
        documents = cli(cluster, "get", *ns, "-w", "-o", "yaml")
    assert [(d["metadata"]["name"], (d.get("status") or {}).get("phase")) for d in
            yaml.safe_load_all(documents.stdout)] == before + [("beta", "Restarting")]
    before = stored()
    with ctrl_c_after(1, lambda: cluster.patch_status("dt", "beta", dict(phase="Succeeded"), namespace)):
        objects = cli(cluster, "get", *ns, "-w", "-o", "json")
    decoder, text, seen = json.JSONDecoder(), objects.stdout.strip(), []
    while text:
        obj, end = decoder.raw_decode(text)
        seen.append((obj["metadata"]["name"], (obj.get("status") or {}).get("phase")))
        text = text[end:].strip()
    assert seen == before + [("beta", "Succeeded")]
    missing = cli(cluster, "get", "ghost", *ns, "-w")
    assert (missing.returncode, missing.stderr) == (
        1, 'Error from server (NotFound): distributedtrainings.disttrain.dev "ghost" not found\n')


def test_submit_follows_the_job_to_its_end_exit_0_if_it_succeeded_1_with_the_reason_if_not(
        cluster, namespace, operator_kubeconfig, tmp_path: Path):  # noqa: F811
    """`submit FILE` (not -d): created, then one line per change of the job until it ends;
    the status here is written by the test, as the operator would."""
    ns = ["-n", namespace]

    def finish(name: str, phase: str, **extra) -> threading.Thread:
        def run() -> None:
            cluster.wait_for(lambda: cluster.try_get("dt", name, namespace) is not None, timeout=60,
                             what=f"job {name}")
            cluster.patch_status("dt", name, dict(phase="Running", progress={"step": 5, "totalSteps": 10}), namespace)
            cluster.patch_status("dt", name, dict(phase=phase, progress={"step": 10, "totalSteps": 10}, **extra),
                                 namespace)
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread

    path = tmp_path / "ok.yaml"
    path.write_text(yaml.safe_dump(job_manifest("ok", nodes=1)))
    done = {"type": "Succeeded", "status": "True", "reason": "TrainingComplete", "message": "m",
            "lastTransitionTime": "2026-11-27T00:00:00Z"}
    saved = {"step": 10, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    writer = finish("ok", "Succeeded", conditions=[done], checkpoint=saved)
    ok = cli(cluster, "submit", str(path), *ns)
    writer.join(timeout=60)
    assert ok.returncode == 0, ok.stderr
    lines = ok.stdout.splitlines()
    assert lines[0] == f"{REF}/ok created" and lines[-1].startswith("ok: Succeeded  step 10/10"), ok.stdout
    assert re.search(r"  checkpoint step 10 \(\d+s ago\)", lines[-1]), ok.stdout  # its age, from now
    assert any(line.startswith("ok: Running  step 5/10") for line in lines), ok.stdout
    # (a condition True that is not Failed is no failure)
    assert ok.stderr.splitlines()[-1] == "following ok (Ctrl-C stops following; the job keeps running)", ok.stderr

    path.write_text(yaml.safe_dump(job_manifest("bad", nodes=1)))
    writer = finish("bad", "Failed", conditions=[{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                                                 "message": "worker 0 exited 1 four times",
                                                 "lastTransitionTime": "2026-11-27T00:00:00Z"}])
    bad = cli(cluster, "submit", str(path), *ns)
    writer.join(timeout=60)
    assert bad.returncode == 1 and bad.stdout.splitlines()[-1].startswith("bad: Failed"), bad.stdout
    assert bad.stderr.splitlines()[-1] == "bad failed: BackoffLimitExceeded: worker 0 exited 1 four times"

    placed = job_manifest("placed", nodes=1)
    placed["metadata"]["namespace"] = namespace
    path.write_text(yaml.safe_dump(placed))
    writer = finish("placed", "Succeeded", conditions=[done])
    followed = cli(cluster, "submit", str(path))  # no -n: created and followed in the job's own namespace
    writer.join(timeout=60)
    assert followed.returncode == 0, followed.stderr
    assert followed.stdout.splitlines()[-1].startswith("placed: Succeeded"), followed.stdout


def test_wait_returns_at_once_when_met_and_exits_124_when_its_timeout_runs_out(cluster, namespace,
                                                                          operator_kubeconfig):  # noqa: F811
    """`wait` in this process: a phase or condition already there is met at once (its own
    words for each form); a --timeout that runs out exits 124 (docs/cli.md); a --timeout
    that is no duration is a usage error, exit 2, before anything is asked."""
    ns = ["-n", namespace]
    cluster.apply(job_manifest("done", nodes=1), namespace=namespace)
    cluster.patch_status("dt", "done", dict(phase="Succeeded", conditions=[
        {"type": "Succeeded", "status": "True", "reason": "TrainingComplete", "message": "m",
         "lastTransitionTime": "2026-11-27T00:00:00Z"}]), namespace)
    phase = cli(cluster, "wait", "done", "--for", "Running,Succeeded", "--timeout", "30s", *ns)
    assert (phase.returncode, phase.stdout) == (0, f"{REF}/done is Succeeded\n"), phase.stderr
    condition = cli(cluster, "wait", "done", "--for=condition=Succeeded", *ns)
    assert (condition.returncode, condition.stdout) == (0, f"{REF}/done condition met\n"), condition.stderr
    late = cli(cluster, "wait", "done", "--for=condition=Failed", "--timeout", "2s", *ns)
    assert (late.returncode, late.stdout) == (124, "")  # docs/cli.md: 124, the timeout ran out
    assert late.stderr.startswith(f"error: timed out waiting for {REF}/done"), late.stderr
    bad = cli(cluster, "wait", "done", "--for=condition=Failed", "--timeout", "soon", *ns)
    assert (bad.returncode, bad.stdout) == (2, "") and bad.stderr.startswith("error: --timeout: "), bad.stderr



@pytest.mark.changes_crd
def test_get_watch_top_and_wait_go_on_across_a_crd_upgrade(cluster, namespace,
                                                                             operator_kubeconfig):  # noqa: F811
    """A CRD that changes under a running `get -w` or `top` (an upgrade of the chart) ends
    their watch, and the API server refuses to resume it from where it was (410). Both list
    again and go on: `get -w` prints a row only for what changed meanwhile, never again a
    job it has shown as it is (a job of the same name in another namespace is another job);
    `top` draws the table once, as listed again, without the jobs deleted meanwhile; `wait`
    reads the job again once and waits on."""
    ns = ["-n", namespace]
    for name in ("alpha", "beta", "gamma"):
        cluster.apply(job_manifest(name, nodes=1), namespace=namespace)
    with crd_changed(cluster, namespace) as change:
        def meanwhile() -> None:
            change()
            cluster.patch_status("dt", "alpha", dict(phase="Running"), namespace)

        with ctrl_c_after(1, meanwhile):
            rows = cli(cluster, "get", *ns, "-w")
        assert (rows.returncode, rows.stderr) == (130, "interrupted\n")
        assert [line.split()[:2] for line in rows.stdout.splitlines()[1:]] == [
            ["alpha", "Pending"], ["beta", "Pending"], ["gamma", "Pending"], ["alpha", "Running"]], rows.stdout

        # -A: a job of the same name in another namespace is another job, before and after.
        other, token = f"{namespace[:60]}-b", uuid.uuid4().hex[:12]
        cluster.apply({"apiVersion": "v1", "kind": "Namespace",
                       "metadata": {"name": other, "labels": {"disttrain.dev/test": "true"}}})
        try:
            cluster.apply(job_manifest("alpha", nodes=1), namespace=other)
            for where, name in ((namespace, "alpha"), (namespace, "beta"), (namespace, "gamma"), (other, "alpha")):
                cluster.kubectl("label", "dt", name, f"watch={token}", "-n", where)

            def other_changed() -> None:
                change()
                cluster.patch_status("dt", "alpha", dict(phase="Running"), other)

            columns = "custom-columns=NS:.metadata.namespace,NAME:.metadata.name,PHASE:.status.phase"
            with ctrl_c_after(1, other_changed):
                everywhere = cli(cluster, "get", "-A", "-w", "-l", f"watch={token}", "-o", columns)
            with ctrl_c_after(1, lambda: cluster.patch_status("dt", "gamma", dict(phase="Running"), namespace)):
                drawn = cli(cluster, "top", "-A")
        finally:
            cluster.kubectl("delete", "namespace", other, "--wait=false", check=False)
        lines = [line.split() for line in everywhere.stdout.splitlines()]
        assert lines[0] == ["NS", "NAME", "PHASE"], everywhere.stdout
        assert sorted(lines[1:5]) == sorted([[namespace, "alpha", "Running"], [namespace, "beta", "<none>"],
                                             [namespace, "gamma", "<none>"], [other, "alpha", "<none>"]])
        assert lines[5:] == [[other, "alpha", "Running"]], everywhere.stdout
        listed = [row.split()[:3] for row in drawn.stdout.split("\n\n")[0].splitlines()]
        assert [namespace, "alpha", "Running"] in listed and [other, "alpha", "Running"] in listed, drawn.stdout

        def deleted_meanwhile() -> None:
            change()
            cluster.kubectl("delete", "dt", "gamma", *ns)
            cluster.patch_status("dt", "beta", dict(phase="Running"), namespace)

        with ctrl_c_after(1, deleted_meanwhile):
            out = cli(cluster, "top", *ns)

        # `wait` on a job unchanged since before the CRD changed: a watch from the job's own
        # version expires at once, so it reads the job again once and watches from there,
        # instead of asking the API server again and again until the job changes.
        change()
        from disttrain.client.client import Client
        read, calls = threading.Event(), []
        real_get = Client.get

        def get(self, *args, **kwargs):
            calls.append(args)
            read.set()
            return real_get(self, *args, **kwargs)

        def later() -> None:
            read.wait(30)
            time.sleep(2)
            cluster.patch_status("dt", "beta", dict(phase="Succeeded"), namespace)

        writer = threading.Thread(target=later)
        writer.start()
        with mock.patch.object(Client, "get", get):
            waited = cli(cluster, "wait", "beta", "--for=jsonpath={.status.phase}=Succeeded", "--timeout=60s", *ns)
        writer.join()
        assert (waited.returncode, waited.stdout) == (0, f"{REF}/beta condition met\n"), waited.stderr
        assert len(calls) == 1, f"the job was read {len(calls)} times"

        # A job deleted while its watch could not resume: `wait --for=delete` is met, any
        # other wait says it was deleted (the job is deleted right after wait first read it).
        for name in ("delta", "epsilon"):
            cluster.apply(job_manifest(name, nodes=1), namespace=namespace)
        change()

        def get_then_delete(self, name, *args, **kwargs):
            found = real_get(self, name, *args, **kwargs)
            cluster.kubectl("delete", "dt", name, *ns)
            return found

        with mock.patch.object(Client, "get", get_then_delete):
            gone = cli(cluster, "wait", "delta", "--for=delete", "--timeout=60s", *ns)
            lost = cli(cluster, "wait", "epsilon", "--for=jsonpath={.status.phase}=Running", "--timeout=60s", *ns)
        assert (gone.returncode, gone.stdout) == (0, f"{REF}/delta deleted\n"), gone.stderr
        assert (lost.returncode, lost.stderr) == (
            1, 'Error from server (NotFound): distributedtrainings.disttrain.dev "epsilon" was deleted\n'), lost.stderr
    assert (out.returncode, out.stderr) == (130, "interrupted\n")
    tables = [t.splitlines() for t in out.stdout.split("\n\n") if t]
    assert [[row.split()[:2] for row in table[1:-1]] for table in tables] == [
        [["alpha", "Running"], ["beta", "Pending"], ["gamma", "Running"]],
        [["alpha", "Running"], ["beta", "Running"]]], out.stdout


def test_logs_prints_every_workers_lines_prefixed_and_each_flag_narrows_them(cluster, namespace, logged_job):
    """`disttrain logs` on pods whose logs KWOK serves (tests/cluster/conftest.py
    `logged_job`); tests/e2e/test_cli_logs.py reads real containers and follows one to its end."""
    ns = ("-n", namespace)

    def prefixed(lines, stamps=False):
        return "".join(f"[worker-{'?' if w is None else w}]{f' {stamp}' if stamps else ''} {text}\n"
                       for w, text, stamp in lines)

    every = cli(cluster, "logs", "logged", *ns)
    assert (every.returncode, every.stdout, every.stderr) == (0, prefixed(logged_job.lines), "")
    stamped = cli(cluster, "logs", "logged", *ns, "--timestamps", "--worker", "1")
    assert stamped.stdout == prefixed([line for line in logged_job.lines if line[0] == 1], stamps=True)
    assert cli(cluster, "logs", "logged", *ns, "--worker", "0", "--tail", "1").stdout == "[worker-0] w0 step 2\n"
    assert cli(cluster, "logs", "logged", *ns, "--since", "2m").stdout == prefixed(logged_job.ages(newer_than=120))
    assert cli(cluster, "logs", "logged", *ns, "-p", "--worker", "0").stdout == "".join(
        f"[worker-0] {text}\n" for text in logged_job.previous)

    missing = cli(cluster, "logs", "logged", *ns, "--worker", "5")
    assert (missing.returncode, missing.stdout) == (1, "")
    assert missing.stderr.startswith(f"error: {REF}/logged has no worker 5 now"), missing.stderr
    bad = cli(cluster, "logs", "logged", *ns, "--since", "soon")
    assert bad.returncode == 2 and "--since" in bad.stderr, bad.stderr


def test_the_rights_docs_cli_md_names_are_enough_for_each_command(cluster, namespace, logged_job):
    """docs/cli.md "RBAC": get, list and watch on the jobs for every command; list on events
    for status; list on pods and get on pods/log for logs. A user given only those runs each
    command, and is refused (Forbidden, exit 1) the one whose right is missing."""
    ns = namespace
    rules = [{"apiGroups": ["disttrain.dev"], "resources": ["distributedtrainings"], "verbs": ["get", "list", "watch"]}]

    def grant(*more: dict) -> None:
        cluster.apply([{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                        "metadata": {"name": "reader", "namespace": ns}, "rules": [*rules, *more]}])

    cluster.apply([{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "reader", "namespace": ns}},
                   {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                    "metadata": {"name": "reader", "namespace": ns},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
                    "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": ns}]}])
    grant()
    reader = cluster.kubeconfig_for_service_account(ns, "reader")

    def run(*args: str) -> subprocess.CompletedProcess:
        return cli(cluster, *args, "-n", ns, kubeconfig=reader)

    listed = cluster.wait_for(lambda: (done := run("get", "-o", "name")).returncode == 0 and done,
                              timeout=30, what="the Role in force")
    assert listed.stdout == f"{REF}/logged\n"
    # One job as an object needs no event: only its text form shows them.
    assert json.loads(run("get", "logged", "-o", "json").stdout)["metadata"]["name"] == "logged"
    assert yaml.safe_load(run("status", "logged", "-o", "yaml").stdout)["metadata"]["name"] == "logged"
    assert run("wait", "logged", "--for", "jsonpath={.spec.nodes}=2", "--timeout", "30s").returncode == 0

    for args, resource in ((("status", "logged"), "events"), (("logs", "logged"), "pods")):
        refused = run(*args)
        assert (refused.returncode, refused.stdout) == (1, ""), refused.stdout
        assert refused.stderr.startswith(f'Error from server (Forbidden): {resource} is forbidden: User '
                                         f'"system:serviceaccount:{ns}:reader" cannot list'), refused.stderr
    grant({"apiGroups": [""], "resources": ["events"], "verbs": ["list"]},
          {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
          {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]})
    status = cluster.wait_for(lambda: (done := run("status", "logged")).returncode == 0 and done,
                              timeout=30, what="events readable")
    assert status.stdout.splitlines()[:2] == ["Name:        logged", f"Namespace:   {ns}"], status.stdout
    logs = cluster.wait_for(lambda: (done := run("logs", "logged")).returncode == 0 and done,
                            timeout=30, what="pod logs readable")
    assert logs.stdout.splitlines()[-1] == "[worker-0] w0 step 2"
    deleted = run("delete", "logged")  # no delete right: nothing is deleted
    assert deleted.returncode == 1 and "(Forbidden)" in deleted.stderr, deleted.stderr
    assert cluster.try_get("dt", "logged", ns) is not None
