"""Small pure parts called directly: child names, field paths, the podTemplate merge."""

from __future__ import annotations

import copy

import pytest

from disttrain_operator.api import schema
from disttrain_operator.api.names import selector, service_name, worker_index, worker_name
from disttrain_operator.api.parse import key_path
from disttrain_operator.render.merge import merge


@pytest.mark.parametrize("pod,index", [
    ("job-worker-0", 0), ("job-worker-17", 17), ("job-worker-1023", 1023),
    ("job-worker-", None), ("job-worker-01", None), ("job-worker-1a", None), ("job-worker--1", None),
    ("other-worker-1", None), ("job-worker-x-worker-2", None), ("job", None), ("xjob-worker-1", None),
])
def test_worker_index_only_for_names_we_make(pod, index):
    assert worker_index(pod, "job") == index


def test_child_names_round_trip():
    assert worker_name("job", 3) == "job-worker-3" and worker_index(worker_name("a-b", 12), "a-b") == 12
    assert service_name("job") == "job" and selector("job") == "disttrain.dev/job=job"


def test_field_paths_list_every_documented_field():
    paths = schema.field_paths()
    assert paths[0] == "spec.image"
    assert {"spec.nodes", "spec.trainer.builtin.steps", "spec.env.name", "spec.env.valueFrom",
            "spec.checkpoint.async", "spec.rendezvous.joinTimeoutSeconds", "spec.podTemplate.metadata.labels"} <= set(paths)
    assert "spec.scheduling.tolerations.key" not in paths  # free-form items are not walked
    assert len(paths) == len(set(paths))
    assert schema.field_paths(prefix="x")[0] == "x.image"


@pytest.mark.parametrize("prefix,key,path", [
    ("spec", "nodes", "spec.nodes"), ("", "spec", "spec"), ("", 3, "(document)['3']"),
    ("spec", "a.b", "spec['a.b']"), ("spec", "", "spec['']"), ("spec", "a\nb", "spec['a\\nb']"),
    ("spec", None, "spec['None']"),
])
def test_key_paths(prefix, key, path):
    assert key_path(prefix, key) == path


# ---- podTemplate merge ----------------------------------------------------------------


def test_maps_merge_key_by_key_and_the_overlay_scalar_wins():
    assert merge({"a": 1, "b": {"c": 2, "d": 3}}, {"b": {"c": 9}, "e": 5}) == {"a": 1, "b": {"c": 9, "d": 3}, "e": 5}


@pytest.mark.parametrize("base,overlay", [({"a": 1}, 5), ([1], "x"), ("x", [1]), (5, {"a": 1}), ([1], {"a": 1})])
def test_a_value_of_another_kind_replaces_the_base(base, overlay):
    assert merge(base, overlay) == overlay


def test_named_lists_merge_by_name_and_append_new_names_once():
    base = [{"name": "trainer", "image": "a", "env": [{"name": "X", "value": "1"}]}]
    overlay = [{"name": "trainer", "env": [{"name": "Y", "value": "2"}]},
               {"name": "sidecar", "image": "s"}, {"name": "sidecar", "args": ["--v"]}]
    assert merge(base, overlay) == [
        {"name": "trainer", "image": "a", "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}]},
        {"name": "sidecar", "image": "s", "args": ["--v"]},
    ]


def test_a_null_in_the_template_removes_nothing_of_ours():
    base = {"securityContext": {"runAsNonRoot": True}, "volumes": [{"name": "dshm"}], "x": 1}
    assert merge(base, {"securityContext": None, "volumes": None, "x": None, "nodeName": None}) == base
    assert merge(base, {"securityContext": {"runAsNonRoot": None, "fsGroup": 2}}) == {
        **base, "securityContext": {"runAsNonRoot": True, "fsGroup": 2}}


def test_other_lists_are_appended():
    assert merge([1, 2], [3]) == [1, 2, 3]
    assert merge(["hostname"], ["rename"]) == ["hostname", "rename"]  # strings holding "name"
    assert merge([{"key": "a"}], [{"key": "b"}]) == [{"key": "a"}, {"key": "b"}]


@pytest.mark.parametrize("base,overlay", [
    ({}, {"a": {"b": [1]}}),
    ({"l": [{"name": "x"}]}, {"l": [{"name": "y", "v": {"k": [1]}}]}),
    ({"l": [1]}, {"l": [{"k": [1]}]}),
    ({"a": 1}, {"a": {"b": [1]}}),
])
def test_the_result_shares_nothing_with_the_template(base, overlay):
    before = copy.deepcopy(overlay)
    out = merge(base, overlay)

    def scribble(node):
        if isinstance(node, dict):
            for value in node.values():
                scribble(value)
            node["scribbled"] = True
        elif isinstance(node, list):
            for value in node:
                scribble(value)
            node.append("scribbled")

    scribble(out)
    assert overlay == before, "rendering one pod changed the job's podTemplate"


def test_a_name_of_the_prefix_length_without_the_prefix_is_not_ours():
    assert worker_index("abcdefghijk7", "job") is None  # as long as "job-worker-" + "7"


def test_the_service_is_named_and_placed_like_the_job():
    from disttrain_operator.api import load_job
    from disttrain_operator.render import render_service

    from .helpers import job

    j, _, _ = load_job(job())
    meta = render_service(j)["metadata"]
    assert (meta["name"], meta["namespace"]) == ("demo", "team-a")
    doc = job()
    del doc["metadata"]["namespace"]
    j, _, _ = load_job(doc)
    assert render_service(j)["metadata"]["namespace"] == "default"


@pytest.mark.parametrize("value,expected", [
    ("1e3", 1000), ("2E2", 200), ("1.5e-3", "0.0015"), ("2Ki", 2048), ("3Mi", 3 * 2**20), ("500m", "0.5"),
    ("1.5G", 1_500_000_000), (4, 4), (0.25, "0.25"), (" 8 ", 8),
    ("", None), ("1.5.5", None), ("1Kb", None), ("e3", None), (None, None), ([1], None), (True, None),
])
def test_quantities(value, expected):
    from decimal import Decimal

    from disttrain_operator.api.quantity import parse_quantity

    got = parse_quantity(value)
    assert got == (None if expected is None else Decimal(str(expected)))


def test_the_service_whole():
    from disttrain_operator.api import load_job
    from disttrain_operator.render import render_service

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
    from disttrain_operator.api import load_job
    from disttrain_operator.render.context import RenderContext, SHUTDOWN_TIMEOUT_SECONDS
    from disttrain_operator.render.env import torchrun_env

    from .helpers import job

    j, r, _ = load_job(job(nodes=2, minNodes=1, maxNodes=3, maxRestarts=4))
    assert {e["name"]: e["value"] for e in torchrun_env(RenderContext(job=j, resolved=r, index=1))} == {
        "PET_NNODES": "1:3", "PET_NPROC_PER_NODE": "1", "PET_RDZV_BACKEND": "c10d",
        "PET_RDZV_ENDPOINT": "demo-worker-0.demo.team-a.svc:29400", "PET_RDZV_ID": "demo", "PET_MAX_RESTARTS": "4",
        "PET_RDZV_CONF": "join_timeout=600,last_call_timeout=30,is_host=false", "PET_MONITOR_INTERVAL": "1",
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1", "PET_SHUTDOWN_TIMEOUT": str(SHUTDOWN_TIMEOUT_SECONDS),
    }
