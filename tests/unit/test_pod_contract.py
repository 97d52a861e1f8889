"""The children compared whole against the pod contract (docs/pod-contract.md): the worker
pod, the headless Service, torchrun's environment.

The field-by-field tests in test_render.py say why each setting is there; this one says
nothing else is there, and nothing is misspelt (the Kubernetes client's from_dict ignores
unknown keys, so a misspelt key would pass every other check and be dropped by the API
server). When the contract changes, change this expectation with it.
"""

from __future__ import annotations

from disttrain.api import load_job
from disttrain.render import render_pod, template_hash

from .helpers import job

DOC = job(nodes=2, gpusPerNode=2, image="repo/t:1", resources={"requests": {"cpu": 4}, "limits": {"memory": "8Gi"}},
          checkpoint={"claimName": "ck", "path": "/ck"},
          env=[{"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
          scheduling={"schedulerName": "volcano", "priorityClassName": "high", "nodeSelector": {"pool": "gpu"}},
          podTemplate={"metadata": {"labels": {"team": "a"}, "annotations": {"note": "x"}}})
DOC["metadata"]["uid"] = "u-1"

ENV_NAMES = [
    "PET_NNODES", "PET_NPROC_PER_NODE", "PET_RDZV_BACKEND", "PET_RDZV_ENDPOINT", "PET_RDZV_ID", "PET_MAX_RESTARTS",
    "PET_RDZV_CONF", "PET_MONITOR_INTERVAL", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "PET_SHUTDOWN_TIMEOUT",
    "DISTTRAIN_JOB_NAME", "DISTTRAIN_NAMESPACE", "DISTTRAIN_STRATEGY", "DISTTRAIN_MESH_FSDP", "DISTTRAIN_MESH_TP",
    "DISTTRAIN_PRECISION", "DISTTRAIN_ACCUMULATE_GRAD_BATCHES", "DISTTRAIN_GPUS_PER_NODE", "DISTTRAIN_MODEL",
    "DISTTRAIN_DATASET", "DISTTRAIN_STEPS", "DISTTRAIN_BATCH_SIZE", "DISTTRAIN_LEARNING_RATE", "DISTTRAIN_SEED",
    "DISTTRAIN_CHECKPOINT_DIR", "DISTTRAIN_CHECKPOINT_INTERVAL_STEPS", "DISTTRAIN_CHECKPOINT_KEEP",
    "DISTTRAIN_CHECKPOINT_ASYNC", "DISTTRAIN_METRICS_PORT", "DISTTRAIN_TERMINATION_LOG", "DISTTRAIN_POD_NAME",
    "DISTTRAIN_CONTROL_TOKEN", "S", "HOME",
]


def test_the_worker_pod_whole():
    j, r, _ = load_job(DOC)
    pod = render_pod(j, r, 1)
    container = pod["spec"]["containers"][0]
    env = container.pop("env")
    assert [e["name"] for e in env] == ENV_NAMES
    assert env[-4:] == [
        {"name": "DISTTRAIN_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "DISTTRAIN_CONTROL_TOKEN", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
        {"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
        {"name": "HOME", "value": "/tmp"},
    ]
    assert {e["name"]: e.get("value") for e in env}["DISTTRAIN_CHECKPOINT_ASYNC"] == "false"
    assert pod == {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": "demo-worker-1", "namespace": "team-a",
            "labels": {"team": "a", "app.kubernetes.io/name": "disttrain", "app.kubernetes.io/instance": "demo",
                       "app.kubernetes.io/managed-by": "disttrain-operator", "app.kubernetes.io/part-of": "disttrain",
                       "disttrain.dev/job": "demo", "app.kubernetes.io/component": "worker",
                       "disttrain.dev/role": "worker", "disttrain.dev/worker-index": "1"},
            "annotations": {"note": "x", "disttrain.dev/template-hash": template_hash(j, r)},
            "ownerReferences": [{"apiVersion": "disttrain.dev/v1alpha1", "kind": "DistributedTraining", "name": "demo",
                                 "uid": "u-1", "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": {
            "hostname": "demo-worker-1", "subdomain": "demo", "restartPolicy": "Never",
            "containers": [{
                "name": "trainer", "image": "repo/t:1", "imagePullPolicy": "IfNotPresent",
                "command": ["torchrun", "--module", "disttrain_trainer"],
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "FallbackToLogsOnError",
                "resources": {"requests": {"cpu": "4", "nvidia.com/gpu": "2"},
                              "limits": {"memory": "8Gi", "nvidia.com/gpu": "2"}},
                "volumeMounts": [{"name": "checkpoints", "mountPath": "/ck"}, {"name": "dshm", "mountPath": "/dev/shm"},
                                 {"name": "tmp", "mountPath": "/tmp"}],
                "ports": [{"name": "rendezvous", "containerPort": 29400, "protocol": "TCP"},
                          {"name": "metrics", "containerPort": 9400, "protocol": "TCP"}],
                "readinessProbe": {"httpGet": {"path": "/healthz", "port": "metrics"}, "periodSeconds": 10, "timeoutSeconds": 5,
                                   "failureThreshold": 3},
                "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                    "capabilities": {"drop": ["ALL"]}},
            }],
            "volumes": [{"name": "checkpoints", "persistentVolumeClaim": {"claimName": "ck"}},
                        {"name": "dshm", "emptyDir": {"medium": "Memory"}}, {"name": "tmp", "emptyDir": {}}],
            "schedulerName": "volcano", "priorityClassName": "high", "nodeSelector": {"pool": "gpu"},
            "automountServiceAccountToken": False, "enableServiceLinks": False, "terminationGracePeriodSeconds": 180,
            "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000,
                                "seccompProfile": {"type": "RuntimeDefault"}},
        },
    }


def test_a_user_home_replaces_the_default_and_async_says_true():
    j, r, _ = load_job(job(env=[{"name": "HOME", "value": "/work"}], checkpoint={"async": True}))
    env = render_pod(j, r, 0)["spec"]["containers"][0]["env"]
    assert [e for e in env if e["name"] == "HOME"] == [{"name": "HOME", "value": "/work"}]
    assert {"name": "DISTTRAIN_CHECKPOINT_ASYNC", "value": "true"} in env


def test_scheduling_keys_land_where_kubernetes_reads_them():
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["gpu"]}]}]}}}
    tolerations = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    j, r, _ = load_job(job(scheduling={"affinity": affinity, "tolerations": tolerations}))
    spec = render_pod(j, r, 0)["spec"]
    assert (spec["affinity"], spec["tolerations"]) == (affinity, tolerations)
    assert not {"schedulerName", "priorityClassName", "nodeSelector"} & set(spec)


def test_the_template_hash_is_stable_across_operator_versions():
    """Running pods carry this hash; a new value for the same spec makes an upgraded
    operator replace every running worker of every job. Change it only on purpose."""
    j, r, _ = load_job(DOC)
    assert template_hash(j, r) == "962a99ffbfc40e7b"


def test_the_service_whole():
    from disttrain.api import load_job
    from disttrain.render import render_service

    from .helpers import CHILD_METADATA, job

    doc = job(rendezvous={"port": 29500}, metrics={"port": 9500})
    doc["metadata"]["uid"] = "u-1"
    j, _, _ = load_job(doc)
    assert render_service(j) == {
        "apiVersion": "v1", "kind": "Service",
        "metadata": CHILD_METADATA,
        "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                 "selector": {"disttrain.dev/job": "demo", "disttrain.dev/role": "worker"},
                 "ports": [{"name": "rendezvous", "port": 29500, "targetPort": 29500},
                           {"name": "metrics", "port": 9500, "targetPort": 9500}]},
    }


def test_the_torchrun_env_whole():
    from disttrain.api import load_job
    from disttrain.render.context import RenderContext, SHUTDOWN_TIMEOUT_SECONDS
    from disttrain.render.env import torchrun_env

    from .helpers import job

    j, r, _ = load_job(job(nodes=2, minNodes=1, maxNodes=3, maxRestarts=4))
    assert {e["name"]: e["value"] for e in torchrun_env(RenderContext(job=j, resolved=r, index=1))} == {
        "PET_NNODES": "1:3", "PET_NPROC_PER_NODE": "1", "PET_RDZV_BACKEND": "c10d",
        "PET_RDZV_ENDPOINT": "demo-worker-0.demo.team-a.svc:29400", "PET_RDZV_ID": "demo", "PET_MAX_RESTARTS": "4",
        "PET_RDZV_CONF": "join_timeout=600,last_call_timeout=30,is_host=false", "PET_MONITOR_INTERVAL": "1",
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1", "PET_SHUTDOWN_TIMEOUT": str(SHUTDOWN_TIMEOUT_SECONDS),
    }


def test_the_trainer_assumes_the_apis_defaults_for_every_builtin_setting():
    """A job that sets none of them, and a trainer started without the variables, train
    the same run (the trainer once took 200 steps where the API said 100)."""
    from disttrain.api.pod_contract import BUILTIN
    from disttrain_trainer.config import Config

    j, r, _ = load_job(job(trainer={"builtin": {}}))
    rendered = {e["name"]: e["value"] for e in render_pod(j, r, 0)["spec"]["containers"][0]["env"] if "value" in e}
    bare, from_pod = Config.from_env({}), Config.from_env(rendered)
    for config in (bare, from_pod):
        read = {"model": config.model.name, "steps": config.train.steps, "batch_size": config.data.batch_size,
                "learning_rate": config.train.learning_rate, "seed": config.train.seed,
                "eval_fraction": config.eval.fraction, "eval_fold": config.eval.fold,
                "eval_interval_steps": config.eval.interval_steps}
        assert read == {field: getattr(j.spec.trainer.builtin, field) for field in BUILTIN}
        assert read == {field: setting.default for field, setting in BUILTIN.items()}
    assert {s.env for s in BUILTIN.values() if s.always} <= set(rendered)
    assert not {s.env for s in BUILTIN.values() if not s.always} & set(rendered)  # at their defaults: unset


def test_both_ends_of_the_status_report_use_the_contracts_keys():
    from disttrain.api.pod_contract import STATUS_KEYS
    from disttrain.api.report import parse_report
    from disttrain_trainer.metrics import StatusSink

    sink = StatusSink()
    sink.eval(1, 1.0, {"accuracy": 0.5})  # evalHistory and evalMetrics appear with the first evaluation
    sink.worker_times(10, [[0, 0.1, 0.2], [1, 0.1, 0.2]])  # workerTimes with the first window of two workers
    written = set(sink.doc) | {"framework"}  # a framework's callback adds its name (metrics.py, session.py)
    assert written == set(STATUS_KEYS)

    class Recording(dict):
        def get(self, key, default=None):
            read.add(key)
            return super().get(key, default)
    read: set[str] = set()
    assert parse_report(Recording(sink.doc)) is not None
    assert read <= set(STATUS_KEYS), read - set(STATUS_KEYS)
