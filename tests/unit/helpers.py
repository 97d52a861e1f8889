"""Small builders shared by the unit tests."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from unittest import mock

import yaml

from disttrain.api import validate_document


SHARED_CLAIM = "shared-checkpoints"


def job(*, shared_claim: bool = True, **spec: Any) -> dict:
    """A minimal valid DistributedTraining document with `spec` overrides. A spec that can
    have more than one pod gets checkpoint.claimName (the built-in trainer needs it or a uri
    then) unless it names one, a uri or storage none, or `shared_claim=False` asks for none."""
    spec = copy.deepcopy(spec)
    pods = [spec.get(k) for k in ("nodes", "maxNodes")]
    ckpt = spec.get("checkpoint", {})
    stated = isinstance(ckpt, dict) and ("uri" in ckpt or ckpt.get("storage") == "none")
    if shared_claim and any(isinstance(n, int) and n > 1 for n in pods) and isinstance(ckpt, dict) and not stated:
        spec["checkpoint"] = {"claimName": SHARED_CLAIM, **ckpt}
    return {"apiVersion": "disttrain.dev/v1alpha1", "kind": "DistributedTraining",
            "metadata": {"name": "demo", "namespace": "team-a"}, "spec": spec}


# The metadata of every child of job() with uid "u-1": named and placed like the job, its
# labels, and owned by it (garbage-collected with it).
CHILD_METADATA = {
    "name": "demo", "namespace": "team-a",
    "labels": {"app.kubernetes.io/name": "disttrain", "app.kubernetes.io/instance": "demo",
               "app.kubernetes.io/managed-by": "disttrain-operator", "app.kubernetes.io/part-of": "disttrain",
               "disttrain.dev/job": "demo"},
    "ownerReferences": [{"apiVersion": "disttrain.dev/v1alpha1", "kind": "DistributedTraining", "name": "demo",
                         "uid": "u-1", "controller": True, "blockOwnerDeletion": True}]}


def errors_of(doc: dict) -> list[str]:
    return [str(e) for e in validate_document(doc).errors]


def warnings_of(doc: dict) -> dict[str, str]:
    return {w.reason: w.message for w in validate_document(doc).warnings}


def typed(status: Any = None) -> Any:
    """A status as the API server would hand it over (JSON) -> the typed status decide()
    works on; a typed one passes through. The fixture must fit the schema."""
    from disttrain.api.status_types import DistributedTrainingStatus
    from disttrain.operator.core.status import read_status

    if isinstance(status, DistributedTrainingStatus):
        return status
    parsed, errors = read_status(status or {})
    assert not errors, errors
    return parsed


def written(plan_or_status: Any) -> dict:
    """The status of a plan (or a typed status) as the operator writes it: its JSON form."""
    from disttrain.operator.core.state import Plan
    from disttrain.operator.core.status import status_json

    return status_json(plan_or_status.status if isinstance(plan_or_status, Plan) else plan_or_status)


# ---- the CLI as users run it -------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]


def package_paths() -> str:
    """PYTHONPATH for a child process that imports the packages this test process imports
    (the checkout's, or make mutation's mutated copies, wherever they are laid out)."""
    import importlib.util

    folders = {str(Path(importlib.util.find_spec(name).origin).parents[1])
               for name in ("disttrain_trainer", "disttrain")}
    return os.pathsep.join(sorted(folders))


CLI_ENV = {**os.environ, "PYTHONPATH": package_paths()}


class Terminal(io.StringIO):
    """A stdout that is a terminal (what `top` redraws in place)."""

    def isatty(self) -> bool:
        return True


def disttrain(*args: str, stdin: str | None = None, tty: bool = False) -> subprocess.CompletedProcess:
    """`disttrain ARGS` through the CLI's main() in this process, with stdin, stdout, stderr
    and the exit status as a process of its own would have them (argparse's exits included),
    so that mutation testing sees the code a command runs. tty: stdout is a terminal."""
    from disttrain.cli.main import main

    out, err = Terminal() if tty else io.StringIO(), io.StringIO()
    given = io.TextIOWrapper(io.BytesIO((stdin or "").encode()), encoding="utf-8")  # with .buffer, as sys.stdin
    with mock.patch.object(sys, "stdin", given), \
            contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse's usage errors (2) and --help (0)
            if isinstance(exc.code, str):
                print(exc.code, file=sys.stderr)
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return subprocess.CompletedProcess(["disttrain", *args], code, out.getvalue(), err.getvalue())


def disttrain_process(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    """`disttrain ARGS` in a process of its own, from this checkout (60 s at most): for what
    only a process shows (hostile input must not crash it, its recursion limit)."""
    return subprocess.run([sys.executable, "-m", "disttrain.cli", *args], capture_output=True,
                          text=True, env=CLI_ENV, input=stdin, timeout=60)


def write(tmp_path: Any, text: str) -> str:
    """TEXT as tmp_path/job.yaml; its path."""
    path = tmp_path / "job.yaml"
    path.write_text(text)
    return str(path)


class StandInHandler(BaseHTTPRequestHandler):
    """A stand-in API server's handler: reply() sends one whole answer; nothing is logged
    (pytest shows what failed)."""

    def reply(self, status: int, body: Any, content_type: str = "application/json",
              headers: dict[str, str] | None = None) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        for key, value in {"Content-Type": content_type, "Content-Length": str(len(data)), **(headers or {})}.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


class _Late(StandInHandler):
    """Answers a job (or an empty list), `delay` seconds late for the methods in `late`."""
    delay = 2.0
    late = frozenset({"GET", "POST", "PATCH", "DELETE"})

    def _answer(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.command in self.late:
            time.sleep(self.delay)
        job = {"apiVersion": "disttrain.dev/v1alpha1", "kind": "DistributedTraining",
               "metadata": {"name": "slow", "namespace": "n", "resourceVersion": "1"}, "spec": {"nodes": 1}}
        listing = self.path.split("?", 1)[0].endswith(("/distributedtrainings", "/events"))
        try:
            self.reply(200, {"kind": "List", "metadata": {"resourceVersion": "1"}, "items": []} if listing else job)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up waiting: what these tests make it do

    do_GET = do_POST = do_PATCH = do_DELETE = _answer


def kubeconfig_for(tmp_path, server: ThreadingHTTPServer) -> str:
    """A kubeconfig (namespace n) for a stand-in server on loopback."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{server.server_port}"}}],
        "users": [{"name": "u", "user": {}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u", "namespace": "n"}}]}))
    return str(kubeconfig)


@contextlib.contextmanager
def stand_in(tmp_path, handler: type[BaseHTTPRequestHandler]):
    """A kubeconfig for a stand-in API server on loopback that `handler` answers, for the
    states a real one cannot be put in on purpose; it is gone when the block ends."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = False  # server_close() waits for a late answer: nothing runs after the test
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield kubeconfig_for(tmp_path, server)
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def late_server(tmp_path, late: set[str]):
    """A kubeconfig for a server that answers `late` methods 2 s late (a real API server
    cannot be made slow on purpose; this stands in for one that is)."""
    with stand_in(tmp_path, type("Handler", (_Late,), {"late": frozenset(late)})) as kubeconfig:
        yield kubeconfig
