"""Every error and warning validation can say, word for word, and about whole documents.

Errors name the field, the value, what is allowed and the fix; warnings say what the
guardrail did instead. The table pins single lines; tests/unit/golden/validate_messages.json
pins whole documents with their resolved topology (after an intended change:
DISTTRAIN_UPDATE_GOLDEN=1 pytest this file, then read the diff). Users read these lines in
`disttrain validate`, on the Validated condition and in Events, so a change to one is a
change to the product.
"""

from __future__ import annotations

import functools
from dataclasses import asdict
from datetime import date
from typing import Any

import pytest
from disttrain.api import bounds, validate_document
from disttrain.api import types as t
from disttrain.api.validate import check_pod_template

from .golden import Golden
from .helpers import errors_of, job
from .pod_escapes import ESCAPES

EPHEMERAL_1 = ("spec.checkpoint.claimName: not set: checkpoints live in the pod's emptyDir and are lost when "
               "the pod is recreated; set checkpoint.uri (object storage) or claimName (a volume), or storage: "
               "none if the job keeps none")


DEFAULT_TRAINER = ('spec.trainer: not set: running the built-in trainer (python -m disttrain_trainer): model gpt-nano on'
                   ' dataset text, 100 steps, batchSize 8; set spec.trainer.builtin or spec.trainer.command to choose')


ONE_DEVICE = ("requires multiple devices, falling back to single-device training: the job runs strategy auto. Fix: "
              "set strategy: auto, or give the job more devices (nodes, gpusPerNode) to")
DDP_ONE_DEVICE = f"spec.strategy: DDP {ONE_DEVICE} replicate over"
FSDP_ONE_DEVICE = f"spec.strategy: FSDP {ONE_DEVICE} shard across"


CASES = [
    ("mesh elastic", job(nodes=2, minNodes=1, gpusPerNode=2, mesh={'fsdp': 4, 'tp': 1}),
     ["spec.mesh: needs a fixed world size (got {'fsdp': 4, 'tp': 1}); allowed: minNodes = nodes = maxNodes. Fix: remove spec.minNodes/spec.maxNodes or set both to spec.nodes"],
     [DEFAULT_TRAINER]),
    ("mesh size, tp divides", job(nodes=2, gpusPerNode=4, mesh={'fsdp': 2, 'tp': 2}),
     ["spec.mesh: fsdp x tp = 4 is not the world size 8 (nodes 2 x nprocPerNode 4) (got {'fsdp': 2, 'tp': 2}); allowed: fsdp x tp = nodes x nprocPerNode. Fix: set mesh.fsdp: 4"],
     [DEFAULT_TRAINER]),
    ("mesh size, tp does not divide", job(nodes=1, gpusPerNode=6, mesh={'fsdp': 1, 'tp': 4}),
     ["spec.mesh: fsdp x tp = 4 is not the world size 6 (nodes 1 x nprocPerNode 6) (got {'fsdp': 1, 'tp': 4}); allowed: fsdp x tp = nodes x nprocPerNode. Fix: choose tp dividing the world size 6"],
     [DEFAULT_TRAINER, EPHEMERAL_1]),
    ("mesh with ddp", job(strategy="ddp", gpusPerNode=4, mesh={"fsdp": 2, "tp": 2}),
     ["spec.strategy: cannot be combined with spec.mesh (got 'ddp'); allowed: fsdp or auto with a mesh. Fix: set strategy: fsdp, or remove spec.mesh"],
     [DEFAULT_TRAINER, EPHEMERAL_1]),
    ("tp across nodes", job(nodes=2, gpusPerNode=2, mesh={"fsdp": 1, "tp": 4}),
     [],
     [DEFAULT_TRAINER, 'spec.mesh.tp: tp 4 does not divide nprocPerNode 2: tensor-parallel groups span nodes and every layer waits on the network; prefer tp dividing nprocPerNode']),
    ("nproc clamp with mesh", job(nodes=1, gpusPerNode=2, nprocPerNode=4, mesh={"fsdp": 2, "tp": 2}),
     ['spec.nprocPerNode: asks for more processes than the 2 GPUs per node (got 4); allowed: at most gpusPerNode (2); clamping would change the world size the mesh was sized for. Fix: set nprocPerNode: 2 (or auto) and resize spec.mesh'],
     [DEFAULT_TRAINER, EPHEMERAL_1]),
    ("nproc clamp", job(gpusPerNode=2, nprocPerNode=3),
     [],
     [DEFAULT_TRAINER, EPHEMERAL_1, 'spec.nprocPerNode: nprocPerNode 3 is more than gpusPerNode 2; one process per GPU: clamping nprocPerNode to 2']),
    ("idle gpus", job(gpusPerNode=4, nprocPerNode=1),
     [],
     [DEFAULT_TRAINER, EPHEMERAL_1, 'spec.nprocPerNode: nprocPerNode 1 leaves 3 of 4 GPUs per node idle; use nprocPerNode: auto to use them all']),
    ("nproc word", job(nprocPerNode="all"),
     ["spec.nprocPerNode: is not allowed (got 'all'); allowed: an integer >= 1 or auto. Fix: write auto or a number"],
     [DEFAULT_TRAINER, EPHEMERAL_1]),
    ("nproc zero", job(nprocPerNode=0),
     ['spec.nprocPerNode: is out of range (got 0); allowed: an integer from 1 to 128 (one process per GPU or per group of CPU cores; no node has more), or auto. Fix: use auto'],
     [DEFAULT_TRAINER, EPHEMERAL_1]),
    ("ddp one device", job(strategy="ddp"),
     [],
     [DEFAULT_TRAINER, EPHEMERAL_1, DDP_ONE_DEVICE]),
    ("fsdp one device", job(strategy="fsdp"),
     [],
     [DEFAULT_TRAINER, EPHEMERAL_1, FSDP_ONE_DEVICE]),
    ("fp16 on cpu", job(precision="16-mixed"),
     [],
     [DEFAULT_TRAINER, EPHEMERAL_1, 'spec.precision: 16-mixed needs CUDA GPUs (gpusPerNode is 0): falling back to 32; use bf16-mixed or 32 on CPU']),
    ("fsdp without bf16", job(strategy="fsdp", gpusPerNode=2, precision="32", checkpoint={"claimName": "c"}),
     [],
     [DEFAULT_TRAINER, 'spec.precision: FSDP on GPUs with precision 32: parameters are all-gathered and computed in fp32; bf16-mixed all-gathers them in bf16, halving that traffic and the gathered parameters\' memory (gradients are reduced in fp32 either way)']),
    ("ephemeral one node", job(),
     [],
     [DEFAULT_TRAINER, EPHEMERAL_1]),
    ("ephemeral many nodes", job(nodes=3, shared_claim=False),
     ["spec.checkpoint: has no storage every pod reaches, and the job can have more than one pod (nodes 3): the built-in trainer could never resume (not set); allowed: uri (object storage) or claimName (a ReadWriteMany volume), or storage: none. Fix: set spec.checkpoint.uri: s3://<bucket>/<prefix> with secretRef, or claimName: <a ReadWriteMany claim> (docs/guide.md, Checkpoints), or storage: none to run without checkpoints; `disttrain run --local` keeps checkpoints in --workdir whatever the spec says"],
     [DEFAULT_TRAINER]),
    ("your own command on several pods without storage", job(nodes=2, shared_claim=False, trainer={"command": ["python", "-m", "team.train"]}),
     [],
     ["spec.trainer.command: starts with 'python -m', but the pod already runs torchrun: running `torchrun --module team.train`; write command: ['--module', 'team.train'] to silence this",
      "spec.checkpoint: no uri or claimName on a job of up to 2 pods: DISTTRAIN_CHECKPOINT_DIR is each pod's own emptyDir, so whatever your script saves there lives nowhere durable and no other pod sees it; set checkpoint.uri or claimName, or storage: none to say the job keeps no checkpoints"]),
    ("storage none on several pods", job(nodes=2, trainer={"command": ["--module", "team.train"]}, checkpoint={"storage": "none"}),
     [],
     []),
    ("an object store and a claim", job(checkpoint={"uri": "s3://team-ckpt/run", "claimName": "c"}),
     ["spec.checkpoint.uri: is set together with claimName: checkpoints go to one place (got 's3://team-ckpt/run'); allowed: one of uri (object storage) or claimName (a volume). Fix: remove spec.checkpoint.claimName to use the object store, or uri to use the volume"],
     [DEFAULT_TRAINER]),
    ("a secret without an object store", job(checkpoint={"secretRef": {"name": "s3-creds"}}),
     ["spec.checkpoint.secretRef: only applies to an object store, and uri is not set (got 's3-creds'); allowed: with spec.checkpoint.uri: s3://<bucket>/<prefix>. Fix: set spec.checkpoint.uri, or remove spec.checkpoint.secretRef"],
     [DEFAULT_TRAINER, EPHEMERAL_1]),
    ("storage none and an object store", job(checkpoint={"storage": "none", "uri": "s3://team-ckpt/run"}),
     ["spec.checkpoint.storage: says the job keeps no checkpoints, but uri names where to keep them (got 'none'); allowed: none without uri and claimName, or auto. Fix: remove storage: none to checkpoint there, or remove spec.checkpoint.uri"],
     [DEFAULT_TRAINER]),
    ("credentials in env and in the secret", job(checkpoint={"uri": "s3://team-ckpt/run", "secretRef": {"name": "s3"}}, env=[{"name": "AWS_SECRET_ACCESS_KEY", "value": "x"}]),
     ["spec.env[0].name: is set from spec.checkpoint.secretRef (got 'AWS_SECRET_ACCESS_KEY'); allowed: a name the checkpoint settings do not set. Fix: remove it from spec.env, or remove spec.checkpoint.secretRef"],
     [DEFAULT_TRAINER]),
    ("a gs:// uri", job(checkpoint={"uri": "gs://team-ckpt/run"}),
     ["spec.checkpoint.uri: has an invalid format (got 'gs://team-ckpt/run'); allowed: s3://<bucket>/<prefix>, the bucket 3-63 lowercase letters, digits, '.' or '-' (the trainer image speaks S3 only: for Google Cloud Storage use its S3 API, endpoint https://storage.googleapis.com). Fix: rewrite it in that form"],
     []),
    ("interval beyond steps", job(trainer={"builtin": {"steps": 10}}, checkpoint={"intervalSteps": 20, "claimName": "c"}),
     [],
     ['spec.checkpoint.intervalSteps: intervalSteps 20 is more than steps 10: no checkpoint before the end, a failure restarts from step 0']),
    ("latest tag", job(image="repo/t:latest", checkpoint={"claimName": "c"}),
     [],
     [DEFAULT_TRAINER, "spec.image: image 'repo/t:latest' uses the latest tag with imagePullPolicy IfNotPresent: nodes may run different cached builds; pin a tag or digest"]),
    ("node range", job(nodes=3, minNodes=4, maxNodes=2),
     ['spec.minNodes: is more than nodes (3) (got 4); allowed: minNodes <= nodes <= maxNodes. Fix: lower spec.minNodes or raise spec.nodes', 'spec.nodes: is more than maxNodes (2) (got 3); allowed: minNodes <= nodes <= maxNodes. Fix: raise spec.maxNodes or lower spec.nodes'],
     [DEFAULT_TRAINER]),
    ("trainer both", job(trainer={"builtin": {}, "command": ["t.py"]}),
     ["spec.trainer: needs exactly one of builtin or command (got {'builtin': '...', 'command': '...'}); allowed: builtin: {...} or command: [...]. Fix: keep builtin for the shipped trainer or command for your script"],
     [EPHEMERAL_1]),
    ("args only", job(trainer={"builtin": {}, "args": ["x"]}),
     ["spec.trainer.args: is only used with command (got ['x']). Fix: set trainer.command or remove args"],
     [EPHEMERAL_1]),
    ("empty command", job(trainer={"command": []}),
     ['spec.trainer.command: is empty (got []); allowed: a script path or --module NAME. Fix: e.g. command: ["/workspace/train.py"]'],
     [EPHEMERAL_1]),
    ("launcher alone", job(trainer={"command": ["python"]}),
     ["spec.trainer.command[0]: starts python without a script (got 'python'); allowed: your script, or --module NAME. Fix: name your script: command: [train.py]"],
     [EPHEMERAL_1]),
    ("launcher", job(trainer={"command": ["/usr/bin/python3", "-m", "x"]}),
     [],
     [EPHEMERAL_1, "spec.trainer.command: starts with '/usr/bin/python3 -m', but the pod already runs torchrun: running `torchrun --module x`; write command: ['--module', 'x'] to silence this"]),
    ("dataset misfit gpt", job(trainer={"builtin": {"model": "gpt-nano", "dataset": "synthetic-regression"}}),
     ["spec.trainer.builtin.dataset: does not fit model gpt-nano (got 'synthetic-regression'); allowed: text. Fix: set dataset to text or remove it"],
     [EPHEMERAL_1]),
    ("dataset misfit mlp", job(trainer={"builtin": {"model": "mlp", "dataset": "text"}}),
     ["spec.trainer.builtin.dataset: does not fit model mlp (got 'text'); allowed: synthetic-regression or synthetic-classification. Fix: set dataset to synthetic-regression or remove it"],
     [EPHEMERAL_1]),
    ("reserved env", job(env=[{"name": "WORLD_SIZE", "value": "1"}]),
     ["spec.env[0].name: is reserved: disttrain sets it for torchrun and the trainer (got 'WORLD_SIZE'); allowed: any name except PET_*, DISTTRAIN_*, TORCHELASTIC_*, GROUP_RANK, GROUP_WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, RANK, ROLE_NAME, ROLE_RANK, ROLE_WORLD_SIZE, TORCH_DISABLE_SHARE_RDZV_TCP_STORE, WORLD_SIZE. Fix: use the matching spec field (nodes, nprocPerNode, rendezvous, ...) instead"],
     [DEFAULT_TRAINER, EPHEMERAL_1]),
    ("value and valueFrom", job(env=[{"name": "A", "value": "1", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}]),
     ["spec.env[0]: sets both value and valueFrom (got 'A'); allowed: one of them. Fix: remove one"],
     [DEFAULT_TRAINER, EPHEMERAL_1]),
    ("gpu in requests", job(resources={"requests": {"amd.com/gpu": 1}}),
     ['spec.resources.requests.amd.com/gpu: sets GPUs in resources (got 1); allowed: cpu, memory, ephemeral-storage, .... Fix: remove it and set spec.gpusPerNode: 1'],
     [DEFAULT_TRAINER, EPHEMERAL_1]),
    ("bad quantity", job(resources={"limits": {"memory": "-1Gi"}}),
     ["spec.resources.limits.memory: is not a Kubernetes quantity (got '-1Gi'); allowed: e.g. 8, 500m, 64Gi. Fix: write a number with an optional unit"],
     [DEFAULT_TRAINER, EPHEMERAL_1]),
    ("request above limit", job(resources={"requests": {"cpu": "2"}, "limits": {"cpu": "1500m"}}),
     ["spec.resources.requests.cpu: is more than the limit '1500m' (got '2'); allowed: requests <= limits. Fix: raise the limit or lower the request"],
     [DEFAULT_TRAINER, EPHEMERAL_1]),
    ("same ports", job(rendezvous={"port": 9400}),
     ['spec.metrics.port: is also the rendezvous port (got 9400); allowed: a port other than spec.rendezvous.port. Fix: choose another port'],
     [DEFAULT_TRAINER, EPHEMERAL_1]),
    ("reserved label", job(podTemplate={"metadata": {"labels": {"app.kubernetes.io/name": "x"}}}),
     ["spec.podTemplate.metadata.labels.app.kubernetes.io/name: uses a reserved prefix (got 'x'); allowed: labels outside disttrain.dev/ and app.kubernetes.io/. Fix: rename the label"],
     [DEFAULT_TRAINER, EPHEMERAL_1]),
    ("owned pod field", job(podTemplate={"spec": {"hostname": "h"}}),
     ["spec.podTemplate.spec.hostname: is set by disttrain (got 'h'); allowed: fields disttrain does not own. Fix: remove it (see docs/api.md, podTemplate)"],
     [DEFAULT_TRAINER, EPHEMERAL_1]),
    ("containers not a list", job(podTemplate={"spec": {"containers": {"name": "trainer"}}}),
     ["spec.podTemplate.spec.containers: must be a list (got {'name': 'trainer'}). Fix: write "
      "spec.podTemplate.spec.containers as a list"],
     []),
    ("container without name", job(podTemplate={"spec": {"containers": [{"image": "x"}]}}),
     ['spec.podTemplate.spec.containers[0].name: is required (not set). Fix: set spec.podTemplate.spec.containers[0].name'],
     []),
    ("trainer image", job(podTemplate={"spec": {"containers": [{"name": "trainer", "image": "x", "args": ["a"]}]}}),
     ["spec.podTemplate.spec.containers[0].args: is set by disttrain (got ['a']). Fix: use spec.trainer.args", "spec.podTemplate.spec.containers[0].image: is set by disttrain (got 'x'). Fix: use spec.image"],
     [DEFAULT_TRAINER, EPHEMERAL_1]),
    ("nproc zero is treated as one", job(nprocPerNode=0, strategy="ddp", checkpoint={"claimName": "c"}),
     ['spec.nprocPerNode: is out of range (got 0); allowed: an integer from 1 to 128 (one process per GPU or per group of CPU cores; no node has more), or auto. Fix: use auto'],
     [DEFAULT_TRAINER, DDP_ONE_DEVICE]),
    ("nproc equal to gpus", job(gpusPerNode=2, nprocPerNode=2, checkpoint={"claimName": "c"}),
     [],
     [DEFAULT_TRAINER]),
    ("ddp over two nodes of two", job(strategy="ddp", nodes=2, gpusPerNode=2, checkpoint={"claimName": "c"}),
     [],
     [DEFAULT_TRAINER]),
    ("fsdp on cpu in 32", job(strategy="fsdp", nodes=2, precision="32", checkpoint={"claimName": "c"}),
     [],
     [DEFAULT_TRAINER]),
    ("fsdp on cpu in bf16", job(strategy="fsdp", nodes=2, precision="bf16-mixed", checkpoint={"claimName": "c"}),
     [],
     [DEFAULT_TRAINER]),
    ("fsdp on gpus in bf16", job(strategy="fsdp", gpusPerNode=2, precision="bf16-mixed", checkpoint={"claimName": "c"}),
     [],
     [DEFAULT_TRAINER]),
    ("ddp on gpus in 32", job(strategy="ddp", gpusPerNode=2, precision="32", checkpoint={"claimName": "c"}),
     [],
     [DEFAULT_TRAINER]),
    ("registry port, no tag", job(image="registry:5000/trainer", checkpoint={"claimName": "c"}),
     [],
     [DEFAULT_TRAINER, "spec.image: image 'registry:5000/trainer' uses the latest tag with imagePullPolicy IfNotPresent: nodes may run different cached builds; pin a tag or digest"]),
    ("digest", job(image="repo/t@sha256:0123abcd", checkpoint={"claimName": "c"}),
     [],
     [DEFAULT_TRAINER]),
    ("template env with value and valueFrom", job(checkpoint={"claimName": "c"}, podTemplate={"spec": {"containers": [
        {"name": "trainer", "env": [{"name": "A", "value": "1", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}]}]}}),
     ["spec.podTemplate.spec.containers[0].env[0]: sets both value and valueFrom (got 'A'); allowed: one of them. Fix: remove one"],
     [DEFAULT_TRAINER]),
    ("every bad resource is named", job(checkpoint={"claimName": "c"}, resources={"requests": {"nvidia.com/gpu": 1, "cpu": "two", "memory": "lots"}}),
     ['spec.resources.requests.nvidia.com/gpu: sets GPUs in resources (got 1); allowed: cpu, memory, ephemeral-storage, .... Fix: remove it and set spec.gpusPerNode: 1', "spec.resources.requests.cpu: is not a Kubernetes quantity (got 'two'); allowed: e.g. 8, 500m, 64Gi. Fix: write a number with an optional unit", "spec.resources.requests.memory: is not a Kubernetes quantity (got 'lots'); allowed: e.g. 8, 500m, 64Gi. Fix: write a number with an optional unit"],
     [DEFAULT_TRAINER]),
    ("zero and fractional quantities", job(checkpoint={"claimName": "c"}, resources={"requests": {"cpu": "500m", "memory": 0}}),
     [],
     [DEFAULT_TRAINER]),
    ("template env that is not a list", job(checkpoint={"claimName": "c"}, podTemplate={"spec": {"containers": [
        {"name": "trainer", "env": "PET_X"}]}}),
     ["spec.podTemplate.spec.containers[0].env: must be a list (got 'PET_X'). Fix: write "
      "spec.podTemplate.spec.containers[0].env as a list"],
     []),
    ("containers after a nameless one are checked", job(checkpoint={"claimName": "c"}, podTemplate={"spec": {
        "containers": [{"image": "x"}, {"name": "trainer", "image": "y"}]}}),
     ['spec.podTemplate.spec.containers[0].name: is required (not set). Fix: set spec.podTemplate.spec.containers[0].name'],
     []),
]


@pytest.mark.parametrize("doc,errors,warnings", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_what_the_validator_says(doc, errors, warnings):
    result = validate_document(doc)
    assert [str(e) for e in result.errors] == errors
    assert sorted(str(w) for w in result.warnings) == sorted(warnings)


def test_containers_after_a_nameless_one_are_checked():
    """The schema rejects a nameless container before check_pod_template runs (the case above),
    so the template check's own loop is pinned directly: it goes on past a nameless container."""
    template = t.PodTemplate(spec={"containers": [{"image": "x"}, {"name": "trainer", "image": "y"}]})
    assert [str(e) for e in check_pod_template(template)] == [
        "spec.podTemplate.spec.containers[0]: needs a name (got {'image': 'x'}); allowed: a container with name. "
        "Fix: add name:",
        "spec.podTemplate.spec.containers[1].image: is set by disttrain (got 'y'). Fix: use spec.image"]


GOLDEN = Golden("validate_messages")


def pod(**pod_spec: Any) -> dict:
    return job(podTemplate={"spec": pod_spec})


def command(*argv: str) -> dict:
    return job(trainer={"command": list(argv)})


DOCUMENTS: dict[str, dict] = {
    # spec.trainer.command: what torchrun would run, and the launchers the pod already runs
    "a script": command("train.py", "--lr", "0.1"),
    "a shell": command("/bin/bash", "-c", "python train.py"),
    "a shell alone": command("sh"),
    "python and a script": command("python3", "train.py", "--epochs", "2"),
    "python -m a module": command("python", "-m", "my.train", "--fast"),
    "python -m alone": command("python3.11", "-m"),
    "python with its own options": command("python", "-u", "train.py"),
    "python alone": command("/usr/bin/python"),
    "torchrun and a script": command("torchrun", "train.py", "--x"),
    "torchrun -m a module": command("torchrun", "-m", "my.train"),
    "torchrun --module a module": command("torchrun", "--module", "my.train"),
    "torchrun --module alone": command("torchrun", "--module"),
    "torchrun with flags": command("torchrun", "--nnodes", "2", "--nproc-per-node", "8", "-r", "3", "--standalone",
                                   "--max-restarts", "1", "train.py"),
    "torchrun alone": command("torchrun"),
    "python -m torch.distributed.run": command("python", "-m", "torch.distributed.run", "train.py"),
    "python -m torch.distributed.launch": command("python3", "-m", "torch.distributed.launch", "-m", "my.train"),
    "python -m torch.distributed.launch with flags": command("python", "-m", "torch.distributed.launch",
                                                             "--nproc_per_node=8", "train.py"),
    # topology, strategy and precision guardrails (api/defaults.py): the warning or error, and what runs
    "nproc auto on GPUs": job(nodes=2, gpusPerNode=4, nprocPerNode="auto"),
    "nproc auto on CPU": job(nprocPerNode="auto"),
    "nproc a word": job(nprocPerNode="all"),
    "nproc zero": job(nprocPerNode=0),
    "nproc beyond any node": job(nprocPerNode=1000),
    "nproc beyond the GPUs": job(gpusPerNode=2, nprocPerNode=3),
    "nproc beyond the GPUs with a mesh": job(gpusPerNode=2, nprocPerNode=3, mesh={"fsdp": 3, "tp": 1}),
    "nproc leaving GPUs idle": job(gpusPerNode=4, nprocPerNode=1),
    "nproc equal to the GPUs": job(gpusPerNode=4, nprocPerNode=4),
    "nproc on CPU": job(nprocPerNode=4),
    "ddp on one device": job(strategy="ddp"),
    "fsdp on one device": job(strategy="fsdp"),
    "fsdp_native on two devices": job(strategy="fsdp_native", nprocPerNode=2),
    "ddp on one device that may grow": job(strategy="ddp", nodes=1, maxNodes=2),
    "ddp with a mesh": job(strategy="ddp", nodes=2, mesh={"fsdp": 2, "tp": 1}),
    "a mesh on an elastic job": job(nodes=2, minNodes=1, mesh={"fsdp": 2, "tp": 1}),
    "a mesh of the wrong size": job(nodes=2, nprocPerNode=4, mesh={"fsdp": 2, "tp": 2}),
    "a mesh whose tp divides no world": job(nodes=2, nprocPerNode=3, mesh={"fsdp": 1, "tp": 4}),
    "tp across nodes": job(nodes=2, nprocPerNode=2, mesh={"fsdp": 1, "tp": 4}),
    "tp within a node": job(nodes=2, nprocPerNode=4, mesh={"fsdp": 4, "tp": 2}),
    "precision default on GPUs": job(gpusPerNode=1),
    "16-mixed on CPU": job(precision="16-mixed"),
    "fsdp on GPUs in 32": job(strategy="fsdp", gpusPerNode=2, precision="32"),
    "fsdp on GPUs in 16-mixed": job(strategy="fsdp", gpusPerNode=2, precision="16-mixed"),
    "fsdp on GPUs in bf16-mixed": job(strategy="fsdp", gpusPerNode=2, precision="bf16-mixed"),
    "ddp on GPUs in 16-mixed": job(strategy="ddp", gpusPerNode=2, precision="16-mixed"),
    # Kubernetes-typed fields, checked offline against the pinned core/v1 schema (api/k8s.py)
    "containers at their bound": pod(containers=[{"name": f"c{i}", "image": "x"} for i in range(16)]),
    "a container string too long": pod(containers=[{"name": "trainer", "image": "x" * 4097}]),
    "an env value too long": pod(containers=[{"name": "trainer", "env": [{"name": "A", "value": "v" * 32769}]}]),
    "an env value at its bound": pod(containers=[{"name": "trainer", "env": [{"name": "A", "value": "v" * 32768}]}]),
    "too many containers": pod(containers=[{"name": f"c{i}", "image": "x"} for i in range(17)]),
    "too many tolerations": job(scheduling={"tolerations": [{"key": f"k{i}", "operator": "Exists"}
                                                           for i in range(65)]}),
    "tolerations at their bound": job(scheduling={"tolerations": [{"key": f"k{i}", "operator": "Exists"}
                                                                 for i in range(64)]}),
    "too many volume attributes": pod(volumes=[{"name": "v", "csi": {
        "driver": "d", "volumeAttributes": {f"k{i}": "v" for i in range(65)}}}]),
    "volume attributes at their bound and of the wrong type": pod(volumes=[{"name": "v", "csi": {
        "driver": "d", "volumeAttributes": {**{f"k{i}": "v" for i in range(63)}, "n": 5}}}]),
    "an int-or-string of another type": pod(containers=[{"name": "trainer", "livenessProbe": {
        "httpGet": {"port": [8080]}, "tcpSocket": {"port": True}}, "readinessProbe": {"httpGet": {"port": "http"}}}]),
    "unknown fields, misspelt and not": pod(containers=[{"name": "trainer", "imagePullPolcy": "Always",
                                                         "colour": "blue"}]),
    "a required field missing": pod(containers=[{"image": "x"}], volumes=[{"name": "v", "csi": {}}]),
    "values of the wrong type": pod(hostNetwork="yes", containers=[{"name": "trainer", "image": 5, "tty": 1,
                                                                    "args": [1, True, 2.5], "ports": "80"}]),
    "an enum value of another case": pod(containers=[{"name": "trainer", "imagePullPolicy": "always"}]),
    "a null Kubernetes field": pod(containers=[{"name": "side", "image": "x", "workingDir": None, "args": [None]}]),
    "more than twenty mistakes": pod(containers=[{"name": "trainer", **{f"field{i}": i for i in range(25)}}]),
    "affinity and env sources": job(scheduling={"affinity": {"nodeAffinity": {"preferred": []}}},
                                    env=[{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s"}}}]),
    # the trainer container in spec.podTemplate: what disttrain sets, and privileged without escalation
    "the trainer's command, args, image and env set": pod(containers=[{
        "name": "trainer", "command": ["x"], "args": ["y"], "image": "z", "env": [{"name": "PET_NNODES", "value": "9"}]}]),
    "the trainer's env null": pod(containers=[{"name": "trainer", "env": None}]),
    "a privileged trainer": pod(containers=[{"name": "trainer", "securityContext": {"privileged": True}}]),
    "a privileged trainer that may escalate": pod(containers=[{"name": "trainer", "securityContext": {
        "privileged": True, "allowPrivilegeEscalation": True}}]),
    # spec.checkpoint: its path, and a claim for more than one pod
    "two nodes without a claim": job(nodes=2, shared_claim=False),
    "one node that may grow without a claim": job(nodes=1, maxNodes=2, shared_claim=False),
    "a checkpoint path with a leading //": job(checkpoint={"path": "//ck"}),
    "a checkpoint path with a leading //X": job(checkpoint={"path": "//Xck"}),
    "a checkpoint path with .. at the top": job(checkpoint={"path": "/.."}),
    "a checkpoint path with ..": job(checkpoint={"path": "/ck/../x"}),
    "a checkpoint path with a trailing /": job(checkpoint={"path": "/ck/"}),
    "the root as the checkpoint path": job(checkpoint={"path": "/"}),
    "a checkpoint path below /dev/shm": job(checkpoint={"path": "/dev/shm/ck"}),
    "a checkpoint path above /tmp": job(checkpoint={"path": "/tmp"}),
    "a checkpoint path in /proc": job(checkpoint={"path": "/proc/ck"}),
    "a checkpoint path at /etc (only the runtime mounts are guarded)": job(checkpoint={"path": "/etc"}),
    "a checkpoint path beside a system directory": job(checkpoint={"path": "/devices"}),
    "null containers": pod(containers=None),
    "a null container": job(checkpoint={"path": "/ck"}, podTemplate={"spec": {"containers": [None]}}),
    "a null volumeMount": job(checkpoint={"path": "/ck"}, podTemplate={"spec": {"containers": [
        {"name": "trainer", "volumeMounts": [None]}]}}),
    # the built-in trainer's evaluation block
    "evalFold without evaluation": job(trainer={"builtin": {"evalFraction": 0, "evalFold": 1}}),
    "evalFold past the last block": job(trainer={"builtin": {"evalFraction": 0.25, "evalFold": 4}}),
    "evalFold on the last block": job(trainer={"builtin": {"evalFraction": 0.25, "evalFold": 3}}),
    "a sidecar mounting at the checkpoint path": job(checkpoint={"path": "/ck"}, podTemplate={"spec": {"containers": [
        {"name": "side", "image": "x", "volumeMounts": [{"name": "v", "mountPath": "/ck"}]}]}}),
    "the trainer mounting at the checkpoint path": job(checkpoint={"path": "/ck"}, podTemplate={"spec": {
        "containers": [{"name": "trainer", "volumeMounts": [{"name": "v", "mountPath": "/ck/"},
                                                            {"name": "w", "mountPath": "/data"}]}]}}),
    "the trainer named twice": job(checkpoint={"path": "/ck"}, podTemplate={"spec": {"containers": [
        {"name": "trainer", "volumeMounts": [{"name": "v", "mountPath": "/ck"}]}, {"name": "trainer"}]}}),
    "containers that are not a list": job(checkpoint={"path": "/ck"}, podTemplate={"spec": {"containers": 5}}),
    # Keys and values YAML can give that JSON cannot (api/bounds.py), named in the path and the fix
    "keys that are not strings": job(scheduling={"nodeSelector": {
        7: "a", True: "b", 2.5: "c", 10**40 - 1: "e", 10**40: "f", None: "d"}}),
    "a huge negative key": job(scheduling={"nodeSelector": {-(10**40): "g"}}),
    "keys that need quoting in the path": job(scheduling={"nodeSelector": {
        "kubernetes.io/hostname": {1}, "a[0]": {2}, "tab\there": {3}, "k" * 254: {4}, "x." + "y" * 60: {5}}}),
    "a key of 253 characters is named plainly": job(scheduling={"nodeSelector": {"k" * 253: {6}}}),
    "values that are not JSON": job(scheduling={"nodeSelector": {
        "date": date(2026, 11, 23), "bytes": b"\x00\x01", "set": {"a"}, "long": frozenset(range(30))}}),
}


def values_in(value: Any) -> int:
    """How many values a document holds (each mapping, list and scalar counts one)."""
    children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else []
    return 1 + sum(values_in(child) for child in children)


def text_in(value: Any) -> int:
    """The length of its strings and keys together."""
    if isinstance(value, dict):
        return sum(len(k) + text_in(v) for k, v in value.items())
    if isinstance(value, list):
        return sum(text_in(v) for v in value)
    return len(value) if isinstance(value, str) else 0


def nested(levels: int) -> Any:
    return 1 if levels == 0 else {"a": nested(levels - 1)}


def text_of(total: int) -> dict:
    """A key of 1,000 characters over strings of `total` characters in all, none too long alone."""
    rest = total - 1000
    sizes = [bounds.MAX_STRING_BYTES] * (rest // bounds.MAX_STRING_BYTES) + [rest % bounds.MAX_STRING_BYTES]
    return {"k" * 1000: ["v" * n for n in sizes]}


def with_extra(value: Any) -> dict:
    doc = job()
    doc["spec"]["extra"] = value  # at depth 2; bounds are checked before fields are
    return doc


BASE_VALUES = values_in(with_extra([]))


BASE_TEXT = text_in(with_extra(""))


# The document bounds (api/bounds.py), each at its limit and one past it.
BOUNDS: dict[str, dict] = {
    "nested to the deepest level": with_extra(nested(bounds.MAX_DEPTH - 2)),
    "nested one level deeper": with_extra(nested(bounds.MAX_DEPTH - 1)),
    "lists nested one level deeper": with_extra(functools.reduce(lambda v, _: [v], range(bounds.MAX_DEPTH - 1), 1)),
    "the most values": with_extra([0] * (bounds.MAX_VALUES - BASE_VALUES)),
    "one value more": with_extra([0] * (bounds.MAX_VALUES - BASE_VALUES + 1)),
    "the longest string": with_extra("s" * bounds.MAX_STRING_BYTES),
    "a string one character longer": with_extra("s" * (bounds.MAX_STRING_BYTES + 1)),
    "the most text in keys and strings": with_extra(text_of(bounds.MAX_DOCUMENT_BYTES - BASE_TEXT)),
    "one character more": with_extra(text_of(bounds.MAX_DOCUMENT_BYTES - BASE_TEXT + 1)),
    "64-bit integers at their ends": with_extra([bounds.INT64 - 1, -bounds.INT64]),
    "integers one past the ends": with_extra([bounds.INT64, -bounds.INT64 - 1]),
    "numbers that are not finite": with_extra([float("nan"), float("inf"), -float("inf"), 1e308]),
    "the first and the last item of a list": with_extra([{1}, 0, 0, {2}]),
    "more problems than are named": with_extra([{i} for i in range(bounds.MAX_ERRORS + 2)]),
    "not a mapping at all": {1},
    "a list of documents": [job(), {1}],
    "a string too long for a document": "s" * (bounds.MAX_STRING_BYTES + 1),
    "an integer too large for a document": bounds.INT64,
    "a number that is not finite for a document": float("nan"),
    "two branches nested too deeply": with_extra([nested(bounds.MAX_DEPTH - 2), nested(bounds.MAX_DEPTH - 2)]),
}


# spec.podTemplate.spec settings that leave the sandbox, refused by the default pod policy
POD_POLICY: dict[str, dict] = {
    **{expected.split(":")[0].removeprefix("spec.podTemplate.spec."): pod_spec for pod_spec, expected in ESCAPES},
    "capabilities named three ways": {"containers": [{"name": "trainer", "securityContext": {
        "capabilities": {"add": ["cap_net_bind_service", "CAP_SYS_ADMIN", "NET_RAW"]}}}]},
    "SELinux user, role and an allowed type": {"securityContext": {"seLinuxOptions": {
        "user": "system_u", "role": "system_r", "type": "container_t"}}},
    "SELinux empty type": {"securityContext": {"seLinuxOptions": {"type": ""}}},
    "procMount Default": {"containers": [{"name": "trainer", "securityContext": {"procMount": "Default"}}]},
    "AppArmor unconfined": {"containers": [{"name": "trainer", "securityContext": {
        "appArmorProfile": {"type": "Unconfined"}}}]},
    "a projected volume without a token": {"volumes": [{"name": "p", "projected": {"sources": [
        {"configMap": {"name": "c"}}]}}]},
    "wrong shapes the schema check names first": {"volumes": [{"name": "p", "projected": "x"}], "containers": [
        {"name": "trainer", "securityContext": {"capabilities": {"add": [7]}}}]},
    "everything at once": {"hostNetwork": True, "hostPID": True, "hostIPC": True, "nodeName": "n",
                           "securityContext": {"runAsUser": 0, "sysctls": [{"name": "net.ipv4.tcp_syncookies",
                                                                            "value": "1"}]}},
}


def outcome(doc: Any) -> dict:
    result = validate_document(doc)
    return {"errors": [str(e) for e in result.errors],
            "warnings": [f"{w.reason}: {w}" for w in result.warnings],
            "resolved": asdict(result.resolved) if result.resolved else None,
            "command": result.job.spec.trainer.command if result.job and not result.errors else None}


def refused(pod_spec: dict) -> list[str]:
    return [str(e) for e in validate_document(job(podTemplate={"spec": pod_spec})).errors]


def current() -> dict:
    return {"documents": {name: outcome(doc) for name, doc in DOCUMENTS.items()},
            "pod policy": {name: refused(spec) for name, spec in POD_POLICY.items()},
            "bounds": {name: errors_of(doc) for name, doc in BOUNDS.items()}}


def test_update_golden_when_asked():
    GOLDEN.update_or_check_keys(current, {"documents": DOCUMENTS, "pod policy": POD_POLICY, "bounds": BOUNDS})


@pytest.mark.parametrize("name", sorted(DOCUMENTS))
def test_document(name):
    assert outcome(DOCUMENTS[name]) == GOLDEN.want("documents", name)


@pytest.mark.parametrize("name", sorted(POD_POLICY))
def test_pod_policy(name):
    assert refused(POD_POLICY[name]) == GOLDEN.want("pod policy", name)


@pytest.mark.parametrize("name", sorted(BOUNDS))
def test_bounds(name):
    assert errors_of(BOUNDS[name]) == GOLDEN.want("bounds", name)
