"""Reserved env names come from what render really emits, not from a copied list.

A name disttrain sets in the worker container that a user may also set would appear twice
in the pod (the last one wins in the kubelet, silently breaking torchrun's wiring).
"""

from __future__ import annotations

import pytest

from disttrain.api import load_job
from disttrain.api.validate import is_reserved_env
from disttrain.render import render_pod
from disttrain.render.context import RenderContext
from disttrain.render.env import user_env

from .helpers import errors_of, job

# Jobs that between them reach every env pass: builtin and command trainers, a mesh,
# an elastic range, GPUs, async checkpoints.
JOBS = [
    job(),
    job(nodes=2, minNodes=1, maxNodes=4, gpusPerNode=8, strategy="fsdp", checkpoint={"claimName": "c", "async": True}),
    job(nodes=2, gpusPerNode=4, mesh={"fsdp": 4, "tp": 2}),
    job(trainer={"command": ["/workspace/train.py"], "args": ["--x"]}, nodes=3),
]


def emitted_names() -> set[str]:
    """Every env name render_pod sets that does not come from the user's spec.env."""
    names = set()
    for doc in JOBS:
        j, r, _ = load_job(doc)
        for index in range(r.nodes):
            container = render_pod(j, r, index)["spec"]["containers"][0]
            user = {v["name"] for v in user_env(RenderContext(job=j, resolved=r, index=index))}
            names |= {v["name"] for v in container["env"]} - user
    return names


EMITTED = sorted(emitted_names())


def test_render_emits_the_pod_contract_names():
    assert {"PET_NNODES", "PET_RDZV_ENDPOINT", "DISTTRAIN_STRATEGY", "DISTTRAIN_POD_NAME",
            "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"} <= set(EMITTED)


@pytest.mark.parametrize("name", EMITTED)
def test_every_name_render_emits_is_reserved(name):
    assert is_reserved_env(name), f"render sets {name} but a user may set it too"
    (message,) = errors_of(job(env=[{"name": name, "value": "1"}]))
    assert message.startswith("spec.env[0].name: is reserved"), message
    template = job(podTemplate={"spec": {"containers": [{"name": "trainer", "env": [{"name": name, "value": "1"}]}]}})
    (message,) = errors_of(template)
    assert message.startswith("spec.podTemplate.spec.containers[0].env[0].name: is reserved"), message


def test_a_user_env_name_is_rendered_once_after_ours():
    j, r, _ = load_job(job(env=[{"name": "NCCL_DEBUG", "value": "INFO"}, {"name": "HOME", "value": "/work"}]))
    env = render_pod(j, r, 0)["spec"]["containers"][0]["env"]
    names = [v["name"] for v in env]
    assert len(names) == len(set(names))
    assert {"name": "NCCL_DEBUG", "value": "INFO"} in env and {"name": "HOME", "value": "/work"} in env
