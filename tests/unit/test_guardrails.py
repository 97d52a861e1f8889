"""The guardrails from the seed documents, each pinned by a test."""

from __future__ import annotations

import pytest

from disttrain.api import validate_document
from disttrain.api.defaults import DDP_SINGLE_DEVICE, FSDP_SINGLE_DEVICE
from disttrain.integrations.registry import render_children

from .helpers import errors_of, job, warnings_of


def resolved(doc):
    result = validate_document(doc)
    assert result.ok, [str(e) for e in result.errors]
    return result.resolved


def test_ddp_on_one_device_warns_and_falls_back_to_auto():
    doc = job(strategy="ddp", nodes=1, gpusPerNode=1)
    assert warnings_of(doc)["DDPSingleDevice"] == (
        f"{DDP_SINGLE_DEVICE}: the job runs strategy auto. Fix: set strategy: auto, or give the job more devices "
        "(nodes, gpusPerNode) to replicate over")
    assert DDP_SINGLE_DEVICE == "DDP requires multiple devices, falling back to single-device training"
    assert resolved(doc).strategy == "auto"


@pytest.mark.parametrize("strategy", ["fsdp", "fsdp_native"])
def test_fsdp_on_one_device_warns_and_falls_back_to_auto(strategy):
    doc = job(strategy=strategy, nodes=1, gpusPerNode=1)
    assert warnings_of(doc)["FSDPSingleDevice"].startswith(f"{FSDP_SINGLE_DEVICE}: the job runs strategy auto. Fix: ")
    assert resolved(doc).strategy == "auto"
    assert resolved(job(strategy=strategy, nodes=1, maxNodes=2, gpusPerNode=1)).strategy == "fsdp"


def test_ddp_with_two_devices_stays_ddp_without_warning():
    doc = job(strategy="ddp", nodes=1, gpusPerNode=2)
    assert "DDPSingleDevice" not in warnings_of(doc)
    assert resolved(doc).strategy == "ddp"


def test_ddp_on_one_node_that_may_grow_is_not_single_device():
    doc = job(strategy="ddp", nodes=1, minNodes=1, maxNodes=2, gpusPerNode=1)
    assert resolved(doc).strategy == "ddp"


def test_unset_strategy_resolves_to_auto():
    assert resolved(job()).strategy == "auto"
    assert resolved(job(nodes=2)).strategy == "auto"


def test_fsdp_native_is_an_alias_of_fsdp():
    assert resolved(job(strategy="fsdp_native", gpusPerNode=4)).strategy == "fsdp"


@pytest.mark.parametrize("gpus,asked,expected", [(2, 4, 2), (8, 16, 8), (1, 3, 1)])
def test_more_processes_than_gpus_warns_and_clamps(gpus, asked, expected):
    doc = job(gpusPerNode=gpus, nprocPerNode=asked)
    assert f"clamping nprocPerNode to {gpus}" in warnings_of(doc)["NprocClamped"]
    assert resolved(doc).nproc_per_node == expected


def test_clamping_is_an_error_when_a_mesh_depends_on_the_world_size():
    doc = job(nodes=1, gpusPerNode=2, nprocPerNode=4, mesh={"fsdp": 2, "tp": 2}, strategy="fsdp")
    (message,) = errors_of(doc)
    assert message.startswith("spec.nprocPerNode: asks for more processes than the 2 GPUs per node")
    assert "Fix: set nprocPerNode: 2" in message


def test_fewer_processes_than_gpus_warns_about_idle_gpus():
    assert "2 of 4 GPUs per node idle" in warnings_of(job(gpusPerNode=4, nprocPerNode=2))["IdleGPUs"]


@pytest.mark.parametrize("gpus,expected", [(0, 1), (1, 1), (8, 8)])
def test_nproc_auto_follows_gpus_or_one_on_cpu(gpus, expected):
    assert resolved(job(gpusPerNode=gpus)).nproc_per_node == expected


def test_world_size_is_nodes_times_nproc():
    r = resolved(job(nodes=3, gpusPerNode=4))
    assert (r.nodes, r.nproc_per_node, r.world_size) == (3, 4, 12)


def test_16_mixed_on_cpu_warns_and_falls_back_to_32():
    doc = job(precision="16-mixed")
    assert "falling back to 32" in warnings_of(doc)["PrecisionFallback"]
    assert resolved(doc).precision == "32"


def test_16_mixed_on_gpu_is_kept():
    assert resolved(job(precision="16-mixed", gpusPerNode=1)).precision == "16-mixed"


@pytest.mark.parametrize("gpus,expected", [(0, "32"), (2, "bf16-mixed")])
def test_precision_default_depends_on_device(gpus, expected):
    assert resolved(job(gpusPerNode=gpus)).precision == expected


def test_fsdp_on_gpus_without_bf16_warns():
    assert "FSDPWithoutBF16" in warnings_of(job(strategy="fsdp", gpusPerNode=4, precision="32"))
    assert "FSDPWithoutBF16" not in warnings_of(job(strategy="fsdp", gpusPerNode=4))


@pytest.mark.parametrize("name", ["PET_NNODES", "DISTTRAIN_STRATEGY", "TORCHELASTIC_RUN_ID",
                                  "MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE"])
def test_reserved_env_names_are_errors(name):
    (message,) = errors_of(job(env=[{"name": "OK_VAR", "value": "1"}, {"name": name, "value": "x"}]))
    assert message.startswith(f"spec.env[1].name: is reserved")
    assert repr(name) in message and "Fix:" in message


def test_reserved_env_in_pod_template_container_is_an_error():
    doc = job(podTemplate={"spec": {"containers": [{"name": "trainer", "env": [{"name": "RANK", "value": "0"}]}]}})
    (message,) = errors_of(doc)
    assert message.startswith("spec.podTemplate.spec.containers[0].env[0].name: is reserved")


@pytest.mark.parametrize("name,problem", [
    ("a" * 52, "is 52 characters long"),
    ("1job", "is not a valid DNS-1035 label"),
    ("My_Job", "is not a valid DNS-1035 label"),
    ("job-", "is not a valid DNS-1035 label"),
])
def test_job_names_that_break_dns_are_errors(name, problem):
    doc = job()
    doc["metadata"]["name"] = name
    (message,) = errors_of(doc)
    assert message.startswith(f"metadata.name: {problem}")
    assert "Fix:" in message


def test_longest_allowed_name_gives_valid_pod_hostnames():
    doc = job(nodes=2, maxNodes=1024, minNodes=1)
    doc["metadata"]["name"] = "a" * 51
    assert errors_of(doc) == []


def test_mesh_must_multiply_to_the_world_size():
    (message,) = errors_of(job(nodes=2, gpusPerNode=4, mesh={"fsdp": 2, "tp": 2}))
    assert "fsdp x tp = 4 is not the world size 8" in message
    assert "Fix: set mesh.fsdp: 4" in message


def test_mesh_needs_a_fixed_world_size():
    messages = errors_of(job(nodes=2, minNodes=1, maxNodes=2, gpusPerNode=2, mesh={"fsdp": 2, "tp": 2}))
    assert any("needs a fixed world size" in m for m in messages)


def test_mesh_with_ddp_is_an_error_and_auto_becomes_fsdp():
    assert any("cannot be combined with spec.mesh" in m
               for m in errors_of(job(strategy="ddp", gpusPerNode=4, mesh={"fsdp": 2, "tp": 2})))
    assert resolved(job(gpusPerNode=4, mesh={"fsdp": 2, "tp": 2})).strategy == "fsdp"


def test_tp_spanning_nodes_warns():
    assert "TensorParallelAcrossNodes" in warnings_of(job(nodes=2, gpusPerNode=2, mesh={"fsdp": 1, "tp": 4}))


def test_gpus_in_resources_are_an_error_pointing_to_gpus_per_node():
    (message,) = errors_of(job(resources={"limits": {"nvidia.com/gpu": 8}}))
    assert message.startswith("spec.resources.limits.nvidia.com/gpu: sets GPUs in resources")
    assert "Fix: remove it and set spec.gpusPerNode: 8" in message


def test_requests_above_limits_are_an_error():
    (message,) = errors_of(job(resources={"requests": {"memory": "8Gi"}, "limits": {"memory": "4Gi"}}))
    assert "spec.resources.requests.memory: is more than the limit '4Gi'" in message


def test_bad_quantity_is_an_error():
    (message,) = errors_of(job(resources={"requests": {"cpu": "two"}}))
    assert message.startswith("spec.resources.requests.cpu: is not a Kubernetes quantity (got 'two')")


@pytest.mark.parametrize("command,runs,dropped", [
    (["python", "train.py", "--lr", "1"], ["train.py", "--lr", "1"], "python"),
    (["python3", "-m", "pkg.train", "--x"], ["--module", "pkg.train", "--x"], "python3 -m"),
    (["/usr/bin/python3.11", "t.py"], ["t.py"], "/usr/bin/python3.11"),
    (["torchrun", "t.py", "-v"], ["t.py", "-v"], "torchrun"),
    (["torchrun", "-m", "pkg.train"], ["--module", "pkg.train"], "torchrun"),
    (["python", "-m", "torch.distributed.run", "t.py"], ["t.py"], "python -m torch.distributed.run"),
])
def test_command_starting_with_a_launcher_is_translated_with_a_warning(command, runs, dropped):
    result = validate_document(job(trainer={"command": command, "args": ["--epochs", "2"]}))
    assert result.ok, result.errors
    assert result.job.spec.trainer.command == runs
    message = {w.reason: w.message for w in result.warnings}["LauncherTranslated"]
    assert message == (f"starts with {dropped!r}, but the pod already runs torchrun: running "
                       f"`torchrun {' '.join(runs)}`; write command: {runs!r} to silence this")
    pod = next(c for c in render_children(result.job, result.resolved) if c["kind"] == "Pod")
    assert pod["spec"]["containers"][0]["command"] == ["torchrun", *runs, "--epochs", "2"]


@pytest.mark.parametrize("command,start,fix", [
    (["torchrun", "--nproc_per_node=4", "t.py"], "spec.trainer.command[1]: passes torchrun flags",
     "Fix: drop 'torchrun' and its flags ['--nproc_per_node=4']: command: [<your script>, ...]; set spec.nodes"),
    (["python", "-m", "torch.distributed.run", "--nnodes", "2", "t.py"], "spec.trainer.command[3]: passes torchrun flags",
     "Fix: drop 'python -m torch.distributed.run' and its flags ['--nnodes']"),
    (["python", "-u", "t.py"], "spec.trainer.command[1]: starts python with its own options",
     "Fix: drop the python options (for -u set env PYTHONUNBUFFERED=1)"),
    (["python"], "spec.trainer.command[0]: starts python without a script", "Fix: name your script"),
    (["bash", "-c", "python t.py"], "spec.trainer.command[0]: is a shell, but torchrun runs command[0] with python",
     "Fix: move the shell steps"),
])
def test_launcher_flags_stay_an_error_with_the_fix(command, start, fix):
    (message,) = errors_of(job(trainer={"command": command}))
    assert message.startswith(start) and fix in message, message


def test_a_job_without_trainer_says_which_builtin_trainer_runs():
    doc = job()
    doc["spec"].pop("trainer", None)
    result = validate_document(doc)
    assert result.ok and result.job.spec.trainer.builtin.model == "gpt-nano"
    assert {w.reason: w.message for w in result.warnings}["DefaultTrainer"] == (
        "not set: running the built-in trainer (python -m disttrain_trainer): model gpt-nano on dataset text, "
        "100 steps, batchSize 8; set spec.trainer.builtin or spec.trainer.command to choose")
    assert "DefaultTrainer" not in {w.reason for w in validate_document(job(trainer={"builtin": {}})).warnings}


def test_exactly_one_of_builtin_or_command():
    (message,) = errors_of(job(trainer={"builtin": {}, "command": ["t.py"]}))
    assert message.startswith("spec.trainer: needs exactly one of builtin or command")
    (message,) = errors_of(job(trainer={"args": ["--x"], "builtin": {}}))
    assert message.startswith("spec.trainer.args: is only used with command")


def test_model_and_dataset_must_fit():
    (message,) = errors_of(job(trainer={"builtin": {"model": "mlp", "dataset": "text"}}))
    assert "does not fit model mlp" in message
    assert validate_document(job(trainer={"builtin": {"model": "mlp"}})).job.spec.trainer.builtin.dataset \
        == "synthetic-regression"


def test_same_port_for_rendezvous_and_metrics_is_an_error():
    (message,) = errors_of(job(rendezvous={"port": 9400}))
    assert message.startswith("spec.metrics.port: is also the rendezvous port")


def test_pod_template_cannot_override_owned_fields():
    messages = errors_of(job(podTemplate={
        "metadata": {"labels": {"disttrain.dev/job": "x"}},
        "spec": {"restartPolicy": "Always", "containers": [{"name": "trainer", "command": ["sh"]}]}}))
    assert any(m.startswith("spec.podTemplate.metadata.labels.disttrain.dev/job: uses a reserved prefix") for m in messages)
    assert any(m.startswith("spec.podTemplate.spec.restartPolicy: is set by disttrain") for m in messages)
    assert any("Fix: use spec.trainer.command" in m for m in messages)


def test_the_built_in_trainer_on_several_pods_needs_storage_every_pod_reaches():
    (message,) = errors_of(job(nodes=2, shared_claim=False))
    assert message.startswith("spec.checkpoint: has no storage every pod reaches, and the job can have more than "
                              "one pod (nodes 2): the built-in trainer could never resume (not set)")
    assert "Fix: set spec.checkpoint.uri: s3://<bucket>/<prefix> with secretRef, or claimName" in message
    assert errors_of(job(nodes=1, maxNodes=3, shared_claim=False))[0].startswith("spec.checkpoint: has no storage")
    for enough in ({"claimName": "ckpt"}, {"uri": "s3://team-ckpt/run"}, {"storage": "none"}):
        doc = job(nodes=2, checkpoint=enough)
        assert errors_of(doc) == [], enough
        assert not {"EphemeralCheckpoints", "CheckpointsNotShared"} & set(warnings_of(doc)), enough


def test_your_own_command_on_several_pods_runs_without_storage_with_a_warning():
    doc = job(nodes=2, shared_claim=False, trainer={"command": ["python", "-m", "team.train"]})
    assert errors_of(doc) == []
    assert "lives nowhere durable" in warnings_of(doc)["CheckpointsNotShared"]
    stated = job(nodes=2, trainer={"command": ["--module", "team.train"]}, checkpoint={"storage": "none"})
    assert errors_of(stated) == [] and "CheckpointsNotShared" not in warnings_of(stated)


def test_checkpoint_storage_is_said_once_and_consistently():
    uri = "s3://team-ckpt/run"
    assert errors_of(job(checkpoint={"uri": uri, "claimName": "c"}))[0].startswith(
        "spec.checkpoint.uri: is set together with claimName")
    assert errors_of(job(checkpoint={"endpoint": "http://minio:9000"}))[0].startswith(
        "spec.checkpoint.endpoint: only applies to an object store")
    assert errors_of(job(checkpoint={"storage": "none", "claimName": "c"}))[0].startswith(
        "spec.checkpoint.storage: says the job keeps no checkpoints, but claimName names where")
    (bad,) = errors_of(job(checkpoint={"uri": "s3://Team_Ckpt/run"}))
    assert bad.startswith("spec.checkpoint.uri: has an invalid format (got 's3://Team_Ckpt/run')")
    assert errors_of(job(checkpoint={"uri": uri, "endpoint": "http://minio:9000", "secretRef": {"name": "s3"}},
                         env=[{"name": "AWS_ENDPOINT_URL_S3", "value": "http://other"}]))[0].startswith(
        "spec.env[0].name: is set from spec.checkpoint.endpoint")
    # Without the settings that set them, the AWS names are the user's own.
    assert errors_of(job(checkpoint={"uri": uri}, env=[{"name": "AWS_ACCESS_KEY_ID", "value": "k"}])) == []


def test_a_single_pod_keeps_its_emptydir_with_a_warning():
    assert errors_of(job(nodes=1)) == []
    assert "lost when the pod is recreated" in warnings_of(job(nodes=1))["EphemeralCheckpoints"]


def test_checkpoint_interval_beyond_steps_warns():
    doc = job(trainer={"builtin": {"steps": 50}}, checkpoint={"intervalSteps": 100, "claimName": "c"})
    assert "no checkpoint before the end" in warnings_of(doc)["CheckpointIntervalBeyondSteps"]


def test_latest_image_with_if_not_present_warns():
    assert "MutableImageTag" in warnings_of(job(image="repo/trainer:latest"))
    assert "MutableImageTag" in warnings_of(job(image="repo/trainer"))
    assert "MutableImageTag" not in warnings_of(job(image="repo/trainer:latest", imagePullPolicy="Always"))
    assert "MutableImageTag" not in warnings_of(job(image="registry:5000/trainer:1.2"))
