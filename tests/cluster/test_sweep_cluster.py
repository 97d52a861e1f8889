"""`disttrain sweep` in cluster mode against the real API server (tests/conftest.py).

No operator runs here: this test plays it. It watches the namespace, and for every trial
job the sweep creates it writes status through the status subresource the way the
operator does from the trainer's report of a script of the user's (Running with an
intermediate evaluation, then Succeeded with the final one: an evalLoss and an accuracy,
known functions of the job's learning rate). So the CRD's status schema must keep
progress.evalLoss/evalMetrics/evalStep. It checks that the sweep never has more than
`parallelism` jobs at once, labels them with the sweep and trial, takes each trial's
objective (the accuracy, maximized) from the job's status, deletes every job, and picks the
best rate.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import optuna
import pytest
import yaml
from kubernetes import config
from kubernetes.client import CustomObjectsApi

REPO = Path(__file__).resolve().parents[2]
GROUP, VERSION, PLURAL = "disttrain.dev", "v1alpha1", "distributedtrainings"
TRIALS, PARALLELISM, STEPS = 5, 2, 50


def eval_loss(lr: float) -> float:
    """The fake trainer's final evalLoss: best at lr = 10^-2.5."""
    return 1.0 + (math.log10(lr) + 2.5) ** 2


def accuracy(lr: float) -> float:
    """Its final accuracy: also best at lr = 10^-2.5, and to be maximized."""
    return 1.0 - (math.log10(lr) + 2.5) ** 2 / 10


def sweep_file(tmp: Path, namespace: str) -> Path:
    doc = {
        "name": "cl",
        "namespace": namespace,
        "mode": "cluster",
        "template": {
            "apiVersion": "disttrain.dev/v1alpha1", "kind": "DistributedTraining", "metadata": {"name": "cl"},
            "spec": {"nodes": 1, "gpusPerNode": 0, "image": "registry.example.com/team/train:1",
                     "trainer": {"command": ["/workspace/train.py"]}},
        },
        "parameters": {"spec.env.LEARNING_RATE": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True}},
        "objective": {"metric": "accuracy", "direction": "maximize"},
        "sampler": {"type": "random", "seed": 3},
        "pruner": {"type": "none"},
        "trials": TRIALS,
        "parallelism": PARALLELISM,
    }
    path = tmp / "sweep.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


class FakeOperator(threading.Thread):
    """Writes each trial job's status: Running at step 10, then (after the sweep's 2 s poll
    has surely seen that) Succeeded."""

    def __init__(self, api: CustomObjectsApi, namespace: str) -> None:
        super().__init__(daemon=True)
        self.api, self.namespace = api, namespace
        self.stop = threading.Event()
        self.max_at_once = 0
        self.seen: dict[str, dict] = {}  # name -> labels
        self.errors: list[str] = []
        self.running_since: dict[str, float] = {}

    def run(self) -> None:
        try:
            self._serve()
        except Exception as exc:  # noqa: BLE001 - a test thread reports whatever stopped it
            self.errors.append(repr(exc))

    def _serve(self) -> None:
        while not self.stop.is_set():
            jobs = self.api.list_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL)["items"]
            self.max_at_once = max(self.max_at_once, len(jobs))
            for job in jobs:
                meta = job["metadata"]
                self.seen.setdefault(meta["name"], meta.get("labels") or {})
                if meta.get("deletionTimestamp"):
                    continue
                lr = float({e["name"]: e["value"] for e in job["spec"]["env"]}["LEARNING_RATE"])
                phase = (job.get("status") or {}).get("phase")
                if phase is None:
                    status = {"phase": "Running", "progress": {"step": 10, "totalSteps": STEPS, "evalStep": 10,
                                                               "evalLoss": eval_loss(lr) + 1,
                                                               "evalMetrics": {"accuracy": accuracy(lr) - 0.5}}}
                elif phase == "Running" and time.monotonic() - self.running_since[meta["name"]] > 3:
                    status = {"phase": "Succeeded", "progress": {"step": STEPS, "totalSteps": STEPS,
                                                                 "evalStep": STEPS, "evalLoss": eval_loss(lr),
                                                                 "evalMetrics": {"accuracy": accuracy(lr)}}}
                else:
                    continue
                self.api.patch_namespaced_custom_object_status(GROUP, VERSION, self.namespace, PLURAL,
                                                               meta["name"], {"status": status})
                self.running_since.setdefault(meta["name"], time.monotonic())
            time.sleep(0.5)


@pytest.mark.cluster
@pytest.mark.timeout(300)
def test_cluster_sweep_bounds_labels_reads_status_and_cleans_up(cluster, namespace, tmp_path: Path) -> None:
    cluster.kubectl("apply", "-f", str(REPO / "manifests" / "crd"))
    cluster.wait_established()
    api = CustomObjectsApi(config.new_client_from_config(cluster.kubeconfig))
    fake = FakeOperator(api, namespace)
    env = cluster.env | {"PYTHONPATH": os.pathsep.join([str(REPO / "operator"), str(REPO / "trainer")])}
    fake.start()
    try:
        # -n over the file's namespace, and --storage over the default study database.
        proc = subprocess.run([sys.executable, "-m", "disttrain.cli", "sweep",
                               str(sweep_file(tmp_path, "not-this-namespace")), "-n", namespace,
                               "--storage", f"sqlite:///{tmp_path / 'team-studies.db'}", "--workdir", str(tmp_path)],
                              env=env, capture_output=True, text=True, timeout=240)
    finally:
        fake.stop.set()
        fake.join(timeout=10)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert not fake.errors, fake.errors

    # at most K at once (and K reached), every job labelled with its sweep and trial
    assert fake.max_at_once == PARALLELISM, out
    assert sorted(fake.seen) == [f"cl-t{n:03d}" for n in range(TRIALS)]
    for name, labels in fake.seen.items():
        assert labels["disttrain.dev/sweep"] == "cl" and labels["disttrain.dev/trial"] == str(int(name[-3:]))

    # each objective is the accuracy the job reported in its status; every job deleted
    assert not (tmp_path / "cl" / "study.db").exists()
    study = optuna.load_study(study_name="cl", storage=f"sqlite:///{tmp_path / 'team-studies.db'}")
    assert len(study.trials) == TRIALS
    for t in study.trials:
        lr = t.params["spec.env.LEARNING_RATE"]
        assert t.state == optuna.trial.TrialState.COMPLETE and t.value == pytest.approx(accuracy(lr), rel=1e-5)
        assert t.intermediate_values.get(10) == pytest.approx(accuracy(lr) - 0.5, rel=1e-5)
    best = max(study.trials, key=lambda t: t.value)
    assert f"best trial {best.number}: accuracy {best.value:.4f}" in out
    assert api.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"] == []

    doc = yaml.safe_load((tmp_path / "cl" / "best.yaml").read_text())
    env = {e["name"]: e["value"] for e in doc["spec"]["env"]}
    assert float(env["LEARNING_RATE"]) == pytest.approx(best.params["spec.env.LEARNING_RATE"])
    assert doc["metadata"]["name"] == "cl-best" and "labels" not in doc["metadata"]
