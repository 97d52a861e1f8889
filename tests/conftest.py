"""Shared pytest fixtures: a real Kubernetes control plane with fake GPU nodes.

``cluster`` (session scope) starts etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and a KWOK controller through ``hack/cluster.sh up`` the first
time a test asks for it, and tears it down at the end of the session (a reaper
also tears it down if the pytest process dies). Tests that never request it
never start it, so ``pytest -m "not cluster"`` stays offline and fast.

``namespace`` (function scope) is a fresh namespace per test, deleted after.

The fake nodes (see docs/local-cluster.md):

* ``kwok-gpu-0..3``: 96 CPU, 2Ti memory, ``nvidia.com/gpu: 8``, labels
  ``disttrain.dev/fake-node=gpu``, ``nvidia.com/gpu.present=true``.
* ``kwok-cpu-0..1``: 32 CPU, 128Gi memory, no GPU, label
  ``disttrain.dev/fake-node=cpu``.

All carry label ``type=kwok`` and no taints. Pods bound to them behave as
KWOK's stages say (hack/cluster/kwok-stages.yaml):

* a pod becomes ``Running`` (all containers running, Ready) right after it is
  scheduled;
* annotation ``disttrain.dev/test-exit-code: "N"`` on a Running pod (at
  creation or patched on later) terminates every container with
  ``state.terminated.exitCode == N``; the pod phase becomes ``Succeeded``
  for N == 0 and ``Failed`` otherwise. restartPolicy is not simulated;
* annotation ``disttrain.dev/test-pod-ip: "<ip>"`` (set at creation) makes
  that the pod's ``status.podIP``, so the operator can be pointed at a real
  HTTP server a test runs on loopback. The EndpointSlice controller rejects
  loopback pod IPs for Services ("may not be in the loopback range"), which
  only costs a Warning event: nothing here resolves Service DNS;
* pods without that annotation get IPs from 127.244.0.0/16 (KWOK's --cidr)
  and the fake nodes 127.240.0.1: anything that tries to reach a fake pod or
  node stays on this machine's loopback, never a private-range address;
* a deleted pod disappears at once (no grace period) once it has no
  finalizers.

Set ``DISTTRAIN_TEST_KUBECONFIG=/path`` to run the cluster tests against an
existing cluster (kind, a real one) instead; nothing is started or stopped
then, and tests relying on KWOK behaviour need KWOK with these stages there.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

import progress_wait  # tests/progress_wait.py (tests/ is on sys.path: this file's folder)

REPO = Path(__file__).resolve().parent.parent
HACK = REPO / "hack"

T = TypeVar("T")

EXIT_CODE_ANNOTATION = "disttrain.dev/test-exit-code"
POD_IP_ANNOTATION = "disttrain.dev/test-pod-ip"


def tools_bin() -> Path:
    """The directory holding kubectl, kube-apiserver, etcd, kwok, helm, ..."""
    out = subprocess.run(
        ["bash", str(HACK / "build-tools.sh"), "--print-bin"],
        check=True, capture_output=True, text=True,
    )
    return Path(out.stdout.strip())


class Cluster:
    """A handle on a running cluster; all calls go through ``kubectl``.

    Attributes:
        name: cluster name (``hack/cluster.sh up NAME``), "" for an external one.
        kubeconfig: path of the admin (system:masters) kubeconfig.
        state_dir: the cluster's state directory (logs in ``logs/``), or None.
        bin_dir: directory of the pinned tools (kubectl, helm, ...).

    The KWOK test annotations are also here, so tests need not import
    conftest: ``cluster.EXIT_CODE_ANNOTATION``, ``cluster.POD_IP_ANNOTATION``.
    """

    EXIT_CODE_ANNOTATION = EXIT_CODE_ANNOTATION
    POD_IP_ANNOTATION = POD_IP_ANNOTATION

    def __init__(self, *, name: str, kubeconfig: str, state_dir: Path | None, bin_dir: Path):
        self.name = name
        self.kubeconfig = kubeconfig
        self.state_dir = state_dir
        self.bin_dir = bin_dir
        self._scratch = Path(state_dir or Path(kubeconfig).parent) / "sa-kubeconfigs"

    @property
    def env(self) -> dict[str, str]:
        """Environment for subprocesses: KUBECONFIG set, tools first on PATH."""
        return {
            **os.environ,
            "KUBECONFIG": self.kubeconfig,
            "PATH": f"{self.bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        }

    def kubectl(
        self,
        *args: str,
        check: bool = True,
        input: str | None = None,
        kubeconfig: str | None = None,
        timeout: float = 120,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``kubectl ARGS`` as admin (or with ``kubeconfig``); text output.

        With ``check=True`` a non-zero exit fails the test, showing stderr.
        """
        cmd = [str(self.bin_dir / "kubectl"), "--kubeconfig", kubeconfig or self.kubeconfig, *args]
        proc = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            pytest.fail(
                f"kubectl {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}{proc.stdout}",
                pytrace=False,
            )
        return proc

    def wait_established(self, *crds: str, timeout: float = 60) -> None:
        """Wait for CRDs just applied to be served: polls each CRD's Established condition.
        No `kubectl wait`: on a CRD created a moment ago (`status.conditions: null`) its
        condition wait fails with "accessor error" and its JSONPath filter wait with "<nil> is
        not array or slice", instead of waiting (docs/local-cluster.md waits in two steps)."""
        for crd in crds or ["distributedtrainings.disttrain.dev"]:
            def established(crd: str = crd) -> bool:
                conditions = ((self.try_get("crd", crd) or {}).get("status") or {}).get("conditions") or []
                return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)

            self.wait_for(established, timeout=timeout, what=f"CRD {crd} established")

    def apply(
        self,
        manifest: str | dict[str, Any] | list[dict[str, Any]],
        *args: str,
        namespace: str | None = None,
        check: bool = True,
    ) -> subprocess.CompletedProcess[str]:
        """``kubectl apply -f -`` of YAML text, one object or a list of objects.

        Extra ``args`` go to kubectl (e.g. ``"--dry-run=server"``,
        ``"--server-side"``).
        """
        if isinstance(manifest, dict):
            text = yaml.safe_dump(manifest, sort_keys=False)
        elif isinstance(manifest, list):
            text = yaml.safe_dump_all(manifest, sort_keys=False)
        else:
            text = manifest
        ns = ["-n", namespace] if namespace else []
        return self.kubectl("apply", *ns, *args, "-f", "-", input=text, check=check)

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        """``kubectl get KIND NAME -o json`` parsed."""
        ns = ["-n", namespace] if namespace else []
        return json.loads(self.kubectl("get", kind, name, *ns, "-o", "json").stdout)

    def patch_status(self, kind: str, name: str, status: dict[str, Any], namespace: str | None = None) -> None:
        """Merge ``status`` into the object's status subresource, as its controller would
        (as admin): a test that plays the operator for a job, say."""
        ns = ["-n", namespace] if namespace else []
        self.kubectl("patch", kind, name, *ns, "--subresource=status", "--type=merge", "-p",
                     json.dumps({"status": status}))

    def try_get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        """Like ``get`` but None when the object does not exist."""
        ns = ["-n", namespace] if namespace else []
        proc = self.kubectl("get", kind, name, *ns, "-o", "json", check=False)
        if proc.returncode != 0:
            if "NotFound" in proc.stderr or "not found" in proc.stderr:
                return None
            pytest.fail(f"kubectl get {kind} {name}: {proc.stderr}", pytrace=False)
        return json.loads(proc.stdout)

    @staticmethod
    def wait_for(
        condition: Callable[[], T],
        *,
        timeout: float = 30,
        interval: float = 0.2,
        what: str = "condition",
        describe: Callable[[], str] | None = None,
    ) -> T:
        """Poll ``condition()`` until it returns something truthy; return it.

        Fails the test after ``timeout`` seconds, showing the last value and, where given,
        ``describe()``: what the objects looked like when the wait gave up.
        """
        deadline = time.monotonic() + timeout
        while True:
            value = condition()
            if value:
                return value
            if time.monotonic() > deadline:
                seen = f"\n{describe()}" if describe is not None else ""
                pytest.fail(f"timed out after {timeout}s waiting for {what}; last value: {value!r}{seen}",
                            pytrace=False)
            time.sleep(interval)

    wait_moving = staticmethod(progress_wait.wait_moving)

    def wait_job(self, namespace: str, name: str, done: Callable[[dict[str, Any]], Any], *, what: str,
                 stall: float, interval: float = 1, describe: Callable[[], str] | None = None) -> dict[str, Any]:
        """The DistributedTraining once `done(job)` holds (an absent job reads as {}); fails
        when the job stops moving (`job_progress`) for `stall` seconds. Every cluster and
        e2e wait on a job goes through here."""
        return self.wait_moving(lambda: self.try_get("dt", name, namespace) or {}, done, progress=job_progress,
                                stall=stall, what=f"{name}: {what}", interval=interval, describe=describe)

    def kubeconfig_for_service_account(self, namespace: str, name: str, *, duration: str = "2h") -> str:
        """Mint a kubeconfig for ServiceAccount ``namespace/name`` (TokenRequest).

        The account must exist. The token is bound to the account and expires
        after ``duration``. Returns the path of the new kubeconfig, so
        ``cluster.kubectl(..., kubeconfig=path)`` or ``KUBECONFIG=path`` act
        with exactly that account's RBAC.
        """
        token = self.kubectl("create", "token", name, "-n", namespace, f"--duration={duration}").stdout.strip()
        admin = yaml.safe_load(Path(self.kubeconfig).read_text())
        ctx_name = admin["current-context"]
        ctx = next(c["context"] for c in admin["contexts"] if c["name"] == ctx_name)
        cluster = next(c for c in admin["clusters"] if c["name"] == ctx["cluster"])
        user = f"system:serviceaccount:{namespace}:{name}"
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [cluster],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": user, "context": {"cluster": cluster["name"], "user": user,
                                                     "namespace": namespace}}],
            "current-context": user,
        }
        self._scratch.mkdir(parents=True, exist_ok=True)
        path = self._scratch / f"{namespace}.{name}.{uuid.uuid4().hex[:6]}.kubeconfig"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        path.chmod(0o600)
        return str(path)

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of every component log (for failure messages)."""
        if not self.state_dir:
            return ""
        return _log_tail(self.state_dir, lines)


def _log_tail(state_dir: Path, lines: int) -> str:
    parts = []
    for log in sorted((state_dir / "logs").glob("*.log")):
        text = log.read_text(errors="replace").splitlines()[-lines:]
        parts.append(f"--- {log.name} ---\n" + "\n".join(text))
    return "\n".join(parts)


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """A real control plane + KWOK fake GPU nodes, started once per session.

    Started lazily by the first test that requests it, via
    ``hack/cluster.sh up pytest-<pid>`` (its own ports and state dir, so
    parallel sessions don't collide); stopped with ``hack/cluster.sh down``
    in a finalizer. If it cannot start, every test using it FAILS with the
    log tail; it never skips. While it is up, ``os.environ["KUBECONFIG"]``
    points at it (so in-process clients such as kopf's KopfRunner use it,
    never ~/.kube/config) and the tools directory is first on ``PATH``.
    """
    yield from start_cluster(request, f"pytest-{os.getpid()}", {},
                             external=os.environ.get("DISTTRAIN_TEST_KUBECONFIG"))


@pytest.fixture(autouse=True)
def _crd_turns(request: pytest.FixtureRequest) -> Iterator[None]:
    """With DISTTRAIN_CRD_LOCK set (hack/mutation.py --cluster runs tests in parallel
    processes against one control plane), a test marked `changes_crd` runs alone: a CRD
    that changes ends every watch of the jobs, which would fail the tests beside it for no
    fault of the code they test. The others share the lock. A test waiting to run alone
    goes first: it holds a turnstile that later tests pass through, so it waits only for
    those already running (flock alone would let a stream of sharers starve it until
    mutmut's time limit read its mutant as a timeout). Without it: nothing."""
    path = os.environ.get("DISTTRAIN_CRD_LOCK")
    if not path or "cluster" not in request.fixturenames:
        yield
        return
    alone = request.node.get_closest_marker("changes_crd") is not None
    with open(path, "a") as handle, open(f"{path}.turnstile", "a") as turnstile:
        mode = fcntl.LOCK_EX if alone else fcntl.LOCK_SH
        fcntl.flock(turnstile, mode)  # held exclusive, it stops later tests here
        fcntl.flock(handle, mode)
        fcntl.flock(turnstile, fcntl.LOCK_UN)
        yield


def start_cluster(request: pytest.FixtureRequest, name: str, extra_env: dict[str, str], *,
                  external: str | None = None, timeout: float = 1800) -> Iterator[Cluster]:
    """``hack/cluster.sh up NAME`` with ``extra_env`` (or an ``external`` kubeconfig); yields
    its handle with KUBECONFIG and PATH set, and takes it down at the end of the session.
    """
    try:
        bin_dir = tools_bin()
    except subprocess.CalledProcessError as e:
        pytest.fail(f"hack/build-tools.sh --print-bin failed: {e.stderr}", pytrace=False)

    saved = {k: os.environ.get(k) for k in ("KUBECONFIG", "PATH")}

    def restore() -> None:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value

    if external:
        handle = Cluster(name="", kubeconfig=external, state_dir=None, bin_dir=bin_dir)
    else:
        cache = Path(os.environ.get("DISTTRAIN_CACHE", Path.home() / ".cache" / "disttrain"))
        state_dir = cache / "clusters" / name
        env = {
            **os.environ,
            **extra_env,
            "DISTTRAIN_CLUSTER_OWNER_PID": str(os.getpid()),
            "DISTTRAIN_CLUSTER_DIR": str(state_dir),
        }

        def down() -> None:
            subprocess.run(["bash", str(HACK / "cluster.sh"), "down", name], env=env,
                           capture_output=True, text=True, timeout=300)

        request.addfinalizer(down)
        try:
            proc = subprocess.run(["bash", str(HACK / "cluster.sh"), "up", name], env=env,
                                  capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            pytest.fail(f"hack/cluster.sh up timed out:\n{e.stderr}", pytrace=False)
        if proc.returncode != 0:
            tail = _log_tail(state_dir, 30) if state_dir.exists() else ""
            pytest.fail(
                f"local cluster failed to start (hack/cluster.sh up {name} exited "
                f"{proc.returncode}):\n{proc.stderr[-6000:]}\n{tail}",
                pytrace=False,
            )
        handle = Cluster(name=name, kubeconfig=str(state_dir / "kubeconfig"), state_dir=state_dir,
                         bin_dir=bin_dir)

    request.addfinalizer(restore)
    os.environ["KUBECONFIG"] = handle.kubeconfig
    os.environ["PATH"] = f"{bin_dir}{os.pathsep}{saved['PATH'] or ''}"
    proc = handle.kubectl("get", "--raw", "/readyz", check=False)
    if proc.returncode != 0:
        pytest.fail(f"cluster is not ready: {proc.stderr}\n{handle.log_tail()}", pytrace=False)
    yield handle


class S3Server:
    """versitygw (hack/tools/versitygw) serving a temporary directory over S3 on `host`: a
    real S3 server, no mock. It dies with the test process (PR_SET_PDEATHSIG), so a killed
    run leaves no server behind; its data lives under pytest's temporary directories."""

    ACCESS_KEY = "disttrain-test"
    SECRET_KEY = "disttrain-test-secret"

    def __init__(self, bin_dir: Path, root: Path, host: str = "127.0.0.1") -> None:
        import ctypes
        import signal
        import socket

        with socket.socket() as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
        self.endpoint = f"http://{host}:{port}"
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        libc = ctypes.CDLL(None, use_errno=True)
        self.log = root.parent / f"versitygw-{port}.log"
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [str(bin_dir / "versitygw"), "--access", self.ACCESS_KEY, "--secret", self.SECRET_KEY,
                 "--port", f"{host}:{port}", "--quiet", "posix", str(root)],
                stdout=log, stderr=subprocess.STDOUT,
                preexec_fn=lambda: libc.prctl(1, signal.SIGKILL))  # PR_SET_PDEATHSIG
        deadline = time.monotonic() + 60
        while True:
            try:
                with socket.create_connection((host, port), timeout=1):
                    break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    pytest.fail(f"versitygw did not start on {self.endpoint}:\n{self.log.read_text()[-3000:]}",
                                pytrace=False)
                time.sleep(0.1)

    def env(self) -> dict[str, str]:
        """What an AWS SDK (and the trainer) reads to reach this server."""
        return {"AWS_ACCESS_KEY_ID": self.ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": self.SECRET_KEY,
                "AWS_ENDPOINT_URL_S3": self.endpoint, "AWS_DEFAULT_REGION": "us-east-1"}

    def filesystem(self):  # noqa: ANN201  (an s3fs.S3FileSystem)
        import s3fs

        return s3fs.S3FileSystem(key=self.ACCESS_KEY, secret=self.SECRET_KEY, endpoint_url=self.endpoint,
                                 use_listings_cache=False, skip_instance_cache=True,
                                 config_kwargs={"s3": {"addressing_style": "path"}})

    def new_bucket(self, prefix: str = "ckpt") -> str:
        """A fresh bucket, made through the S3 API (CreateBucket)."""
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        self.filesystem().mkdir(name)
        return name

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """One S3 server on loopback for the session (tests take a fresh bucket each)."""
    server = S3Server(tools_bin(), tmp_path_factory.mktemp("s3") / "data")
    yield server
    server.stop()


@pytest.fixture
def s3_bucket(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> str:
    """`s3://<fresh bucket>`, with this process's environment pointed at the server (as a
    pod's would be by the operator), for in-process trainers and torchrun children alike."""
    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)
    return f"s3://{s3_server.new_bucket()}"


def _namespace_name(nodeid: str) -> str:
    base = re.sub(r"[^a-z0-9-]+", "-", nodeid.split("::")[-1].lower()).strip("-")[:40].strip("-")
    return f"t-{base}-{uuid.uuid4().hex[:5]}"


@pytest.fixture
def namespace(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace (``t-<test name>-<random>``) for one test; deleted after.

    Its ``default`` ServiceAccount exists before the test starts (pods can be
    created at once). Labelled ``disttrain.dev/test=true``. Deletion does not
    wait (the namespace controller finishes it in the background).
    """
    name = _namespace_name(request.node.nodeid)
    cluster.apply({"apiVersion": "v1", "kind": "Namespace",
                   "metadata": {"name": name, "labels": {"disttrain.dev/test": "true"}}})
    cluster.wait_for(
        lambda: cluster.kubectl("get", "serviceaccount", "default", "-n", name, check=False).returncode == 0,
        timeout=30, what=f"ServiceAccount {name}/default",
    )
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found", check=False)


# ---- stage times -------------------------------------------------------------------------
# Where `make test` spends its time, per test directory (setup, call and teardown of every
# test, so the control plane's start counts towards the first directory that needs it).
# hack/test.sh prints these beside the tools and images stages; a plain pytest run prints
# them at its end.

_STAGE_SECONDS: dict[str, float] = {}
_STAGE_SPAN: dict[str, tuple[float, float]] = {}  # first start, last end (wall clock) per directory
# Taken out of the environment at once: pytest runs started by tests (planted bugs,
# mutation) must not add their own lines to make test's summary.
_STAGE_TIMES_FILE = os.environ.pop("DISTTRAIN_STAGE_TIMES", None)


def _stage(nodeid: str) -> str:
    parts = nodeid.split("::", 1)[0].split("/")
    return "/".join(parts[:3] if len(parts) > 3 else parts[:2])  # tests/cluster/reconcile apart


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    stage = _stage(report.nodeid)
    _STAGE_SECONDS[stage] = _STAGE_SECONDS.get(stage, 0.0) + report.duration
    first, last = _STAGE_SPAN.get(stage, (report.start, report.stop))
    _STAGE_SPAN[stage] = (min(first, report.start), max(last, report.stop))


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # noqa: ANN001  (pytest's hook)
    if not _STAGE_SECONDS:
        return
    lines = [f"{stage} {seconds:.0f}s" for stage, seconds in sorted(_STAGE_SECONDS.items())]
    terminalreporter.write_line("time per test directory: " + ", ".join(lines))
    if _STAGE_TIMES_FILE:  # with when each ran (UTC), to line up with what else the machine did
        spans = {stage: " ".join(time.strftime("%H:%M:%S", time.gmtime(t)) for t in _STAGE_SPAN[stage])
                 for stage in _STAGE_SECONDS}
        with open(_STAGE_TIMES_FILE, "a", encoding="utf-8") as out:
            out.writelines(f"{line} ({spans[line.split()[0]].replace(' ', ' to ')})\n" for line in lines)


def job_progress(job: dict[str, Any]) -> tuple[Any, ...]:
    """What changes while a DistributedTraining moves on: its phase, workers, restarts,
    step, evaluation, checkpoint, failures, conditions and eviction. Not its times or
    rates, which change while a hung job stands still."""
    s = job.get("status") or {}
    progress, checkpoint = s.get("progress") or {}, s.get("checkpoint") or {}
    return (s.get("phase"), json.dumps(s.get("workers"), sort_keys=True), s.get("restarts"),
            progress.get("step"), progress.get("evalStep"), checkpoint.get("step"), len(s.get("failures") or []),
            tuple((c.get("type"), c.get("status"), c.get("reason")) for c in s.get("conditions") or []),
            json.dumps(s.get("eviction"), sort_keys=True), s.get("observedGeneration"))
