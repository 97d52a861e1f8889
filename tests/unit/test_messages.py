"""Every error and warning the validator can say, word for word.

Errors name the field, the value, what is allowed and the fix; warnings say what the guardrail
did instead. Users read these lines in `disttrain validate`, on the Validated condition and in
Events, so a change to one is a change to the product: update this table with it.
"""

from __future__ import annotations

import pytest

from disttrain_operator.api import types as t
from disttrain_operator.api import validate_document
from disttrain_operator.api.validate import check_pod_template

from .helpers import job

EPHEMERAL_1 = ("spec.checkpoint.claimName: not set: checkpoints live in the pod's emptyDir and are lost when "
               "the pod is recreated; set checkpoint.claimName to a PersistentVolumeClaim")

DEFAULT_TRAINER = ('spec.trainer: not set: running the built-in trainer (python -m disttrain_trainer): model gpt-nano on'
                   ' dataset text, 100 steps, batchSize 8; set spec.trainer.builtin or spec.trainer.command to choose')

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
     [DEFAULT_TRAINER, EPHEMERAL_1, 'spec.strategy: DDP requires multiple devices, falling back to single-device training']),
    ("fsdp one device", job(strategy="fsdp"),
     [],
     [DEFAULT_TRAINER, EPHEMERAL_1, 'spec.strategy: FSDP requires multiple devices, falling back to single-device training']),
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
     ["spec.checkpoint.claimName: is required when the job can have more than one pod (maxNodes 3): without a shared volume no checkpoint can be resumed (not set); allowed: a ReadWriteMany PersistentVolumeClaim in the job's namespace. Fix: create one (see docs/guide.md, Checkpoints) and set spec.checkpoint.claimName: <its name>; `disttrain run --local` keeps checkpoints in --workdir whatever the claim"],
     [DEFAULT_TRAINER]),
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
     ["spec.podTemplate.spec.containers: must be a list (got {'name': 'trainer'})"],
     []),
    ("container without name", job(podTemplate={"spec": {"containers": [{"image": "x"}]}}),
     ['spec.podTemplate.spec.containers[0].name: is required (not set). Fix: set spec.podTemplate.spec.containers[0].name'],
     []),
    ("trainer image", job(podTemplate={"spec": {"containers": [{"name": "trainer", "image": "x", "args": ["a"]}]}}),
     ["spec.podTemplate.spec.containers[0].args: is set by disttrain (got ['a']). Fix: use spec.trainer.args", "spec.podTemplate.spec.containers[0].image: is set by disttrain (got 'x'). Fix: use spec.image"],
     [DEFAULT_TRAINER, EPHEMERAL_1]),
    ("nproc zero is treated as one", job(nprocPerNode=0, strategy="ddp", checkpoint={"claimName": "c"}),
     ['spec.nprocPerNode: is out of range (got 0); allowed: an integer from 1 to 128 (one process per GPU or per group of CPU cores; no node has more), or auto. Fix: use auto'],
     [DEFAULT_TRAINER, 'spec.strategy: DDP requires multiple devices, falling back to single-device training']),
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
     ["spec.podTemplate.spec.containers[0].env: must be a list (got 'PET_X')"],
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
