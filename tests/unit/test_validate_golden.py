"""What validation says about whole documents, pinned in
tests/unit/golden/validate_messages.json: the errors (field, value, what is allowed, the
fix), the guardrail warnings and the resolved topology. These are the lines
`disttrain validate`, the InvalidSpec condition and the Events show, so a changed word is
a diff of the golden file. After an intended change: DISTTRAIN_UPDATE_GOLDEN=1 pytest this
file, then read the diff. (Mutation testing found these messages unpinned: issue 14.)
"""

from __future__ import annotations

import functools
from dataclasses import asdict
from datetime import date
from typing import Any

import pytest

from disttrain_operator.api import bounds, validate_document

from .golden import Golden
from .helpers import errors_of, job
from .pod_escapes import ESCAPES

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
